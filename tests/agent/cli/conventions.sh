#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/cli/conventions.sh: the command-line conventions every program shares (src/opt.h),
# checked on the real crun, crun-rdzvd, crun-store and crun status: -h/--help (exit 0, "Usage:"
# first), -V/--version, -v/-q, an unknown option or a missing value (exit 2, one line naming it),
# --x=v and --x v alike, dashes and underscores alike, the store's option group (one handler:
# --insecure with --token-file, a credential file others can read is a usage error, exit 2).
. "$(dirname "$0")/../lib.sh"

STORE=$BUILD/src/crun-store
crun_status() { "$CRUN" status "$@"; }

# try WANT_RC NAME ARGS...: run program NAME with ARGS (crun gets a program after them); sets
# OUT and ERR (their contents) and fails unless the exit status is WANT_RC.
try() {
	local want=$1 name=$2
	shift 2
	case $name in
	crun) timeout -s KILL 30 "$CRUN" "$@" true ;;
	crun-rdzvd) timeout -s KILL 30 "$RDZVD" "$@" ;;
	crun-store) timeout -s KILL 30 "$STORE" "$@" ping ;;
	"crun status") timeout -s KILL 30 "$CRUN" status "$@" ;;
	esac >"$T/out" 2>"$T/err"
	RC=$?
	OUT=$(cat "$T/out")
	ERR=$(cat "$T/err")
	[ "$RC" -eq "$want" ] || fail "$name $*: exit $RC, expected $want; stderr: $ERR"
}

# one_line NAME TEXT: stderr is exactly one line, "NAME: TEXT", and stdout is empty.
one_line() {
	[ "$ERR" = "$1: $2" ] || fail "$1: stderr '$ERR', expected '$1: $2'"
	[ -z "$OUT" ] || fail "$1: printed '$OUT' on stdout with an error"
}

printf 'secret\n' >"$T/loose.tok"
printf 'secret\n' >"$T/good.tok"
printf 'not a key\n' >"$T/loose.key"
printf 'not a cert\n' >"$T/cert.pem"
chmod 644 "$T/loose.tok" "$T/loose.key"
chmod 600 "$T/good.tok"

for name in crun crun-rdzvd crun-store "crun status"; do
	note "$name"
	for h in -h --help; do
		try 0 "$name" "$h"
		case $OUT in "Usage: $name "*) ;; *) fail "$name $h: first line '${OUT%%$'\n'*}'" ;; esac
		[ -z "$ERR" ] || fail "$name $h wrote on stderr: $ERR"
	done
	for v in -V --version; do
		try 0 "$name" "$v"
		expect_eq "$(printf '%s\n' "$OUT" | grep -c "^$name [0-9]")" 1 "$name $v"
	done
	try 2 "$name" --frobnicate=1
	one_line "$name" "--frobnicate: unknown option (see $name --help)"
	try 2 "$name" -Z
	one_line "$name" "-Z: unknown option (see $name --help)"
	try 2 "$name" --tls-ca --json
	one_line "$name" "--tls-ca: missing value (FILE)"
	try 2 "$name" --token-file --insecure
	one_line "$name" "--token-file: missing value (FILE)"
	# -v/-q (log level) exist in every program, and a flag takes no value.
	try 2 "$name" --quiet=yes
	one_line "$name" "--quiet: takes no value"
	try 2 "$name" -vq
	one_line "$name" '-v: takes no value (got "-vq")'

	# The store group: one handler, the same checks and words in every program.
	try 2 "$name" --insecure --token-file "$T/good.tok"
	one_line "$name" "--token-file: cannot be combined with --insecure"
	try 2 "$name" --token-file="$T/missing.tok"
	one_line "$name" "--token-file: $T/missing.tok: No such file or directory"
	try 2 "$name" --token_file "$T/loose.tok"
	expect_grep "^$name: --token_file: token file $T/loose.tok: refused: mode 0644" "$T/err" \
		"$name: a token file others can read is a usage error"
	try 2 "$name" --tls-cert "$T/cert.pem"
	one_line "$name" "--tls-cert and --tls-key go together (give both)"
	try 2 "$name" --tls-cert="$T/cert.pem" --tls-key "$T/loose.key"
	expect_grep "^$name: --tls-key: TLS key file $T/loose.key: refused: mode 0644" "$T/err" \
		"$name: a key file others can read is a usage error"
	try 2 "$name" --tls-ca ""
	one_line "$name" "--tls-ca: empty value"
done

note "crun-store: --x=v, --x v, -x v and the alias reach the same option"
try 0 crun-store --endpoint="file://$T/s" --insecure
"$STORE" -e "file://$T/s" set k v || fail "crun-store -e: set"
expect_eq "$("$STORE" --rdzv-endpoint "file://$T/s" get k)" v "--rdzv-endpoint"
expect_eq "$("$STORE" --rdzv_endpoint="file://$T/s" -p "" get k)" v "--rdzv_endpoint="
expect_eq "$("$STORE" --endpoint "file://$T/s" -- get k)" v "-- ends the options"
expect_eq "$(CRUN_STORE_ENDPOINT="file://$T/s" "$STORE" get k)" v "the environment fallback"

note "operands where a program takes none"
try 2 crun-rdzvd --listen 127.0.0.1:0 extra
one_line crun-rdzvd 'unexpected argument "extra" (see crun-rdzvd --help)'
try 2 "crun status" --rdzv-endpoint=127.0.0.1:1 --rdzv-id x extra
one_line "crun status" 'unexpected argument "extra" (see crun status --help)'

note "crun status --watch takes its optional SEC as --watch=SEC and --watch SEC"
for w in --watch=0.01 "--watch 0.01"; do
	# shellcheck disable=SC2086 # split "--watch 0.01" on purpose
	try 2 "crun status" --rdzv-endpoint 127.0.0.1:1 --rdzv-id x $w
	one_line "crun status" '--watch: expected seconds (at least 0.1), got "0.01"'
done
note "the default token file (the one policy's, not a flag's) with a loose mode: exit 2 in all four"
printf 'abcdefabcdefabcdefabcdefabcdef12\n' >"$T/default-loose.tok"
chmod 0644 "$T/default-loose.tok"
export CRUN_TOKEN_FILE="$T/default-loose.tok"
try 2 crun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:1 --rdzv-id x
try 2 crun-rdzvd --listen 127.0.0.1:0
try 2 crun-store -e 127.0.0.1:1
try 2 "crun status" --rdzv-endpoint 127.0.0.1:1 --rdzv-id x
unset CRUN_TOKEN_FILE

echo "conventions: OK"
