#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/conformance/cli.sh: crun-store's exit codes (0 found, 1 not found, 2 trouble) and
# output, against the file backend and against a real crun-rdzvd.
# Usage: cli.sh PATH/TO/crun-store PATH/TO/crun-rdzvd [PATH/TO/crun-store.1.scd]
set -u

STORE=$1
RDZVD=$2
MAN=${3:-}
tmp=$(mktemp -d /tmp/crun-cli-XXXXXX)
# Authentication is on by default: crun-rdzvd and crun-store share this token file.
export CRUN_TOKEN_FILE=$tmp/token
pid=
pid2=
fails=0

stop() {
	local p=$1
	kill -TERM "$p" 2>/dev/null
	for _ in $(seq 100); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null
	wait "$p" 2>/dev/null
}

cleanup() {
	[ -n "$pid" ] && stop "$pid"
	[ -n "$pid2" ] && stop "$pid2"
	rm -rf "$tmp"
}
trap cleanup EXIT

# expect CODE [--out TEXT] [--err TEXT] -- ARGS...: run crun-store ARGS, check the exit status,
# that stdout equals TEXT and that stderr contains TEXT.
expect() {
	local want=$1 out= err= have_out=0 have_err=0 rc
	shift
	while [ "$1" != "--" ]; do
		case $1 in
		--out) out=$2; have_out=1; shift 2 ;;
		--err) err=$2; have_err=1; shift 2 ;;
		esac
	done
	shift
	timeout 60 "$STORE" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" != "$want" ]; then
		echo "FAIL: crun-store $*: exit $rc, expected $want; stderr: $(cat "$tmp/err")"
		fails=$((fails + 1))
		return
	fi
	if [ $have_out = 1 ] && [ "$(cat "$tmp/out")" != "$out" ]; then
		echo "FAIL: crun-store $*: stdout '$(cat "$tmp/out")', expected '$out'"
		fails=$((fails + 1))
		return
	fi
	if [ $have_err = 1 ] && ! grep -qF -- "$err" "$tmp/err"; then
		echo "FAIL: crun-store $*: stderr '$(cat "$tmp/err")' lacks '$err'"
		fails=$((fails + 1))
		return
	fi
	echo "ok: crun-store $* -> $rc"
}

# Every command against one endpoint.
suite() {
	local ep=$1 p="cli/$RANDOM/"
	local s=("--endpoint" "$ep" "--prefix" "$p" "--timeout" "20")

	expect 0 -- "${s[@]}" ping
	expect 0 -- "${s[@]}" set k hello
	expect 0 --out hello -- "${s[@]}" get k
	expect 1 --out "" -- "${s[@]}" get missing
	expect 0 --out 5 -- "${s[@]}" add n 5
	expect 0 --out 2 -- "${s[@]}" add n -3
	expect 2 --err "expected a 64-bit integer" -- "${s[@]}" add n five
	expect 2 --err "add k: the value stored is not a decimal integer" -- "${s[@]}" add k 1
	expect 0 -- "${s[@]}" wait k n
	expect 0 -- "${s[@]}" wait k --timeout 1
	expect 1 --err "timed out" -- "${s[@]}" wait k missing --timeout 0.3
	expect 0 --out hello -- "${s[@]}" wait-get k
	expect 0 --out hello -- "${s[@]}" wait-get k --timeout 1
	expect 1 --out "" --err "wait-get: timed out" -- "${s[@]}" wait-get missing --timeout 0.3
	expect 0 -- "${s[@]}" check k n
	expect 1 -- "${s[@]}" check k missing
	expect 0 --out v1 -- "${s[@]}" cas c "" v1
	expect 1 --out v1 -- "${s[@]}" cas c wrong v2
	expect 0 --out v2 -- "${s[@]}" cas c v1 v2
	# Exit 0 means "DESIRED is stored now", as documented, even when it already was.
	expect 0 --out v2 -- "${s[@]}" cas c wrong v2
	expect 0 -- "${s[@]}" append log ab
	expect 0 -- "${s[@]}" append log cd
	expect 0 --out abcd -- "${s[@]}" get log
	expect 0 -- "${s[@]}" del k
	expect 1 -- "${s[@]}" del k
	expect 1 -- "${s[@]}" get k
	# keys counts the whole store: at least n, c and log of this run.
	"$STORE" --endpoint "$ep" keys >"$tmp/keys" 2>&1
	if ! [ "$(cat "$tmp/keys")" -ge 3 ] 2>/dev/null; then
		echo "FAIL: crun-store keys printed '$(cat "$tmp/keys")'"
		fails=$((fails + 1))
	else
		echo "ok: crun-store keys -> $(cat "$tmp/keys")"
	fi
	# The endpoint and prefix from the environment.
	CRUN_STORE_ENDPOINT=$ep CRUN_STORE_PREFIX=$p expect 0 --out abcd -- get log
	# Usage errors: exit 2 with a message naming the problem.
	expect 2 --err "unknown command" -- "${s[@]}" frobnicate
	expect 2 --err "set: expected KEY VALUE" -- "${s[@]}" set onlykey
	expect 2 --err "get: expected KEY" -- "${s[@]}" get a b
	expect 2 --err "wait: expected at least one KEY" -- "${s[@]}" wait --timeout 1
	expect 2 --err "--timeout" -- "${s[@]}" wait k --timeout soon
	expect 2 --err "wait-get: expected one KEY, got 2" -- "${s[@]}" wait-get a b
	expect 2 --err "wait-get: expected at least one KEY" -- "${s[@]}" wait-get
	expect 2 --err "keys: expected no arguments" -- "${s[@]}" keys extra
	# A key over the limit is refused with a message that says which limit.
	expect 2 --err "limits" -- "${s[@]}" set "$(printf 'k%.0s' $(seq 4100))" v
}

expect 0 -- --version
"$STORE" --version | grep -q '^crun-store [0-9]' || { echo "FAIL: --version"; fails=$((fails + 1)); }
expect 0 -- --help
"$STORE" --help | grep -q 'Exit status' || { echo "FAIL: --help lacks exit status"; fails=$((fails + 1)); }
# Every long option and every command in --help is documented in the man page.
if [ -n "$MAN" ]; then
	for word in $("$STORE" --help | grep -o -- '--[a-z-]*' | sort -u) \
		set get add wait wait-get cas del check keys append ping; do
		if ! grep -qF -- "*$word*" "$MAN"; then
			echo "FAIL: $word is in crun-store --help but not in $MAN"
			fails=$((fails + 1))
		fi
	done
fi
expect 2 --err "no command" -- --endpoint file:///tmp/x
expect 2 --err "unknown option" -- --bogus ping
expect 2 --err "--timeout" -- --timeout -1 ping
expect 2 --err "--timeout" -- --timeout abc ping
env -u CRUN_STORE_ENDPOINT "$STORE" ping >/dev/null 2>"$tmp/err"
if [ $? != 2 ] || ! grep -q "no endpoint" "$tmp/err"; then
	echo "FAIL: ping without an endpoint: $(cat "$tmp/err")"
	fails=$((fails + 1))
fi
expect 2 --err "nonsense" -- --endpoint nonsense ping
expect 2 --err "file://relative" -- --endpoint file://relative ping
expect 2 --err "$tmp/nodir/x" -- --endpoint "file://$tmp/nodir/x" ping

echo "== file backend"
suite "file://$tmp/store"

echo "== tcp backend ($RDZVD)"
mkfifo "$tmp/addr"
"$RDZVD" --listen 127.0.0.1:0 >"$tmp/addr" 2>"$tmp/rdzvd.log" &
pid=$!
exec 3<"$tmp/addr"
if ! read -r -t 15 -u 3 addr; then
	echo "FAIL: $RDZVD printed no address within 15 s: $(cat "$tmp/rdzvd.log")"
	exit 1
fi
suite "$addr"

# A daemon that requires a token: --token and $CRUN_STORE_TOKEN are sent, a wrong one is exit 2.
mkfifo "$tmp/addr2"
env -u CRUN_STORE_TOKEN "$RDZVD" --listen 127.0.0.1:0 --token s3cret-0123456789abcdef >"$tmp/addr2" 2>>"$tmp/rdzvd.log" &
pid2=$!
exec 4<"$tmp/addr2"
if read -r -t 15 -u 4 addr2; then
	expect 0 -- --endpoint "$addr2" --token s3cret-0123456789abcdef --timeout 10 ping
	CRUN_STORE_TOKEN=s3cret-0123456789abcdef expect 0 -- --endpoint "$addr2" --timeout 10 ping
	expect 2 --err "$addr2" -- --endpoint "$addr2" --token wrong-0123456789abcdef --timeout 10 ping
	env -u CRUN_STORE_TOKEN "$STORE" --endpoint "$addr2" --timeout 10 ping 2>"$tmp/err"
	if [ $? != 2 ]; then
		echo "FAIL: ping without a token to a daemon that requires one: not exit 2"
		fails=$((fails + 1))
	fi
else
	echo "FAIL: $RDZVD --token printed no address within 15 s"
	fails=$((fails + 1))
fi
stop "$pid2"
pid2=

# A dead endpoint: exit 2 within the --timeout.
kill -TERM "$pid"
wait "$pid"
pid=
start=$(date +%s%N)
expect 2 --err "$addr" -- --endpoint "$addr" --timeout 0.5 ping
elapsed=$((($(date +%s%N) - start) / 1000000))
if [ "$elapsed" -gt 5000 ]; then
	echo "FAIL: a dead endpoint took $elapsed ms with --timeout 0.5"
	fails=$((fails + 1))
fi

if [ $fails -gt 0 ]; then
	echo "$fails check(s) failed"
	exit 1
fi
echo "all checks passed"
