#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/fanout/cli.sh: crun-pdsh and crun-ssh without any host (--dry-run): host lists,
# hostfiles, --include/--exclude, the environment forwarded, the errors of a bad command line
# (exit 2, naming file:line), and every flag of --help in the man page. Runs as any user.
. "$(dirname "$0")/lib.sh"

# dry TOOL ARGS...: a dry run; output in $T/dry.out, errors in $T/dry.err; RC.
dry() {
	local tool=$1
	shift
	bash "$tool" --dry-run "$@" >"$T/dry.out" 2>"$T/dry.err"
	RC=$?
}

# refused MESSAGE TOOL ARGS...: a bad command line: exit 2 and MESSAGE on stderr.
refused() {
	local msg=$1
	shift
	dry "$@"
	[ $RC -eq 2 ] || { cat "$T/dry.err" >&2; fail "expected exit 2 for: $*; got $RC"; }
	expect_grep "$msg" "$T/dry.err" "the message for: $*"
}

line() { # KEY: the value of "KEY: ..." in the dry run's plan
	sed -n "s/^$1: //p" "$T/dry.out"
}

note "help and man pages name every flag"
for tool in crun-pdsh crun-ssh; do
	bash "$BUILD/tools/$tool" --help >"$T/help" || fail "$tool --help"
	# The option lines: "  -w, --hosts LIST", "      --dry-run", "  -F FILE".
	grep -oE -- '^ +(-[a-zA-Z](, | ))?(--[a-z][a-z-]*)?' "$T/help" | grep -oE -- '-[-a-zA-Z][a-z-]*' |
		sort -u >"$T/flags"
	[ "$(wc -l <"$T/flags")" -gt 15 ] || fail "$tool --help: only $(wc -l <"$T/flags") flags found"
	while read -r flag; do
		grep -q -- "\*$flag\*" "$SRC/man/$tool.1.scd" || fail "$tool: $flag is not in man/$tool.1.scd"
	done <"$T/flags"
	bash "$BUILD/tools/$tool" --version | grep -q "^$tool (crun fan-out) " || fail "$tool --version"
done

note "pdsh host lists, --exclude, the endpoint and the run id"
dry "$PDSH_TOOL" -w 'node[01-03],gpu[7,9-10]' --exclude gpu9@node02 -- --nproc-per-node 2 train
[ $RC -eq 0 ] || { cat "$T/dry.err" >&2; fail "dry run exited $RC"; }
expect_eq "$(line "hosts (4)")" "node01 node03 gpu7 gpu10" "expanded hosts"
expect_eq "$(line endpoint)" "node01:auto" "the endpoint defaults to the first host"
[[ $(line "run id") =~ ^crun-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$ ]] || fail "generated run id: $(line "run id")"
expect_grep "^start: $T/token .* -- --nnodes 4 --rdzv-backend c10d --rdzv-endpoint node01:auto" \
	"$T/dry.out" "crun's arguments"
dry "$PDSH_TOOL" -w 'a,b[1-2]' --include b2@a --rdzv-endpoint store:1234 --rdzv-id r.1 -- x
expect_eq "$(line "hosts (2)")" "a b2" "--include keeps the list's order"
expect_eq "$(line endpoint)" "store:1234" "--rdzv-endpoint"
expect_eq "$(line "run id")" "r.1" "--rdzv-id"

note "hostfiles: comments, blank lines, slots"
printf '# hosts\n\nn1 slots=4   # first\n  n2 slots=4\n' >"$T/hf"
dry "$SSH_TOOL" --hostfile "$T/hf" -- train
expect_eq "$(line "hosts (2)")" "n1 n2" "hostfile hosts"
expect_eq "$(line "nproc per node")" 4 "slots set --nproc-per-node"
dry "$SSH_TOOL" --hostfile "$T/hf" -- --nproc_per_node=2 train
expect_eq "$(line "nproc per node")" "as crun's arguments say" "crun's --nproc-per-node wins"
expect_grep "^n1: ssh .* --rdzv-conf is_host=1 " "$T/dry.out" "the first host hosts the store"
expect_grep "^n2: ssh .* --rdzv-conf is_host=0 " "$T/dry.out" "the others do not"
printf 'n1 slots=4\nn2 slots=2\n' >"$T/hf2"
refused "hosts have different slots (n1 slots=4, n2 slots=2)" "$SSH_TOOL" --hostfile "$T/hf2" -- x
printf 'n1 slots=4\nn2 slot=2\n' >"$T/hf3"
refused "$T/hf3:2: 'slot=2': expected slots=N" "$SSH_TOOL" --hostfile "$T/hf3" -- x
printf 'n1\nn1\n' >"$T/hf4"
refused "$T/hf4:2: host n1 is listed twice" "$PDSH_TOOL" --hostfile "$T/hf4" -- x

note "MPICH hostfiles (HOST:N) and IPv6 endpoints"
printf 'n1:4\n  n2:4   # second\n' >"$T/hf5"
dry "$SSH_TOOL" --hostfile "$T/hf5" -- train
[ $RC -eq 0 ] || { cat "$T/dry.err" >&2; fail "MPICH hostfile: dry run exited $RC"; }
expect_eq "$(line "hosts (2)")" "n1 n2" "MPICH hostfile hosts"
expect_eq "$(line "nproc per node")" 4 "HOST:N sets --nproc-per-node"
expect_eq "$(line endpoint)" "n1:auto" "the endpoint of an MPICH hostfile"
printf 'n1:4 slots=2\n' >"$T/hf6"
refused "$T/hf6:1: 'slots=2': nothing may follow MPICH's HOST:N" "$SSH_TOOL" --hostfile "$T/hf6" -- x
printf 'n1:4\nn2:4:ib0\n' >"$T/hf7"
refused "$T/hf7:2: 'n2:4:ib0': expected HOST:N (MPICH) or an IPv6 address" \
	"$PDSH_TOOL" --hostfile "$T/hf7" -- x
printf 'fd00::1 slots=2\nfd00::2 slots=2\n' >"$T/hf8"
dry "$SSH_TOOL" --hostfile "$T/hf8" -- train
expect_eq "$(line "hosts (2)")" "fd00::1 fd00::2" "IPv6 hosts"
expect_eq "$(line endpoint)" "[fd00::1]:auto" "an IPv6 first host is bracketed"
dry "$SSH_TOOL" -w a,b --rdzv-endpoint '[fd00::9]:29500' -- train
expect_eq "$(line endpoint)" "[fd00::9]:29500" "--rdzv-endpoint [IPv6]:PORT"
# (%q quoting: a backslash before each bracket)
expect_grep "^start: .*--rdzv-endpoint .\[fd00::9.\]:29500 " "$T/dry.out" "crun gets [IPv6]:PORT"
dry "$SSH_TOOL" -w a,b --rdzv-endpoint fd00::9 -- train
expect_eq "$(line endpoint)" "[fd00::9]:auto" "--rdzv-endpoint with a bare IPv6 address"
refused "--rdzv-endpoint 'store:': expected a port after the colon" \
	"$SSH_TOOL" -w a,b --rdzv-endpoint store: -- x

note "bad command lines"
refused "slot lists (n1:0,1) are not supported" "$SSH_TOOL" --hostfile "$T/hf" --include n1:0,1 -- x
refused "host n9 is not in the host list" "$SSH_TOOL" --hostfile "$T/hf" --exclude n9 -- x
refused "crun's --nnodes is set by crun-pdsh" "$PDSH_TOOL" -w a -- --nnodes=2 x
refused "crun's --rdzv-id is set by crun-ssh" "$SSH_TOOL" -w a -- --max-restarts 1 --rdzv_id r x
refused "not a host list" "$SSH_TOOL" -w 'a[3-1]' -- x
refused "no hosts" "$SSH_TOOL" -- x
refused "no crun arguments" "$SSH_TOOL" -w a
refused "unknown option '--bogus'" "$SSH_TOOL" --bogus -w a -- x
refused "--rdzv-id 'a/b'" "$SSH_TOOL" -w a --rdzv-id a/b -- x
refused "--export FO_UNSET_VAR: not set here" "$SSH_TOOL" -w a --export FO_UNSET_VAR -- x
refused "CRUN_STORE_TOKEN is not forwarded" "$SSH_TOOL" -w a --export CRUN_STORE_TOKEN=x -- x
refused "--exec-prefix needs -R exec" "$PDSH_TOOL" -w a -R ssh --exec-prefix 'ip netns exec %h' -- x
printf 'OK=1\nnot a line\n' >"$T/env"
refused "$T/env:2: expected NAME=VALUE" "$SSH_TOOL" -w a --env-file "$T/env" -- x

note "the environment forwarded"
printf '# e\nexport FE_A="a b"\nFE_B=c=d\n' >"$T/env"
NCCL_FE=1 CUDA_FE=2 PYTHONFE=3 CRUN_FE=4 OTHER_FE=5 CRUN_STORE_TOKEN=secret FE_X=x \
	dry "$SSH_TOOL" -w a --env-file "$T/env" --export FE_X --export FE_Y=y -- x
for want in NCCL_FE=1 CUDA_FE=2 PYTHONFE=3 CRUN_FE=4 "FE_A=a b" FE_B=c=d FE_X=x FE_Y=y; do
	grep -qxF "env: $want" "$T/dry.out" || fail "not forwarded: $want"
done
! grep -q "OTHER_FE\|CRUN_STORE_TOKEN\|secret\|CRUN_TOKEN_FILE" "$T/dry.out" ||
	fail "forwarded what it should not: $(grep 'OTHER_FE\|TOKEN\|secret' "$T/dry.out")"
echo "fanout-cli: ok"
