#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/tutorials_train.sh one|two: training programs written from PyTorch's DDP tutorial
# and torchelastic's examples (tests/agent/tutorial_cases.py: ddp, elastic, doomed, launch), each
# run under crun and under torchrun (PyTorch 1.13, through ../shared/peers/torchrun) with the
# same command line (torchrun's spelling, which crun accepts): the same exit codes, the same
# output lines (sorted, crun's "[rankN]:" taken off) and one digest of the final parameters for
# every rank of every job that finishes (sha256 of the float32 bytes: bit for bit).
#
#   one  1 node x 2 workers (--standalone, loopback): ddp; elastic (--max_restarts 1, rank 1
#        SIGKILLs itself in epoch 2 of the first attempt, the job resumes from its checkpoint);
#        doomed (rank 1 dies on every attempt: torchrun exits 1, crun --exit-code torchrun too,
#        crun by default 137, the worker's 128+SIGKILL); launch (the local rank from LOCAL_RANK
#        under both, and from --local_rank under torch.distributed.launch and crun
#        --local-rank-arg; and torchrun's worker variables, compared).
#   two  2 nodes x 1 worker in two network namespaces on a bridge, each with a host name of its
#        own (torchrun's MASTER_ADDR is rank 0's host name: the namespaces' /etc/hosts,
#        through /etc/netns/NS/, name both), c10d hosted in node A's namespace; ddp and elastic,
#        the hosting node first (it listens) and last (the other is already trying), under
#        both launchers. Root only (77).
# Every job is bounded by $TUTORIAL_TIMEOUT (240) seconds: a hang fails naming its case. Every
# job runs before the test fails; the summary names each case that differed. Skipped (77)
# without torch or without the torchrun peer.
. "$(dirname "$0")/../lib/own_net.sh" "$@" # a network namespace of its own (root)
. "$(dirname "$0")/lib.sh"

need_torch
TORCHRUN=${CRUN_TORCHRUN:-$SRC/../shared/peers/torchrun}
[ -x "$TORCHRUN" ] || { echo "no torchrun peer at $TORCHRUN: skipping"; exit 77; }
CASES=$SRC/tests/agent/tutorial_cases.py
LIMIT=${TUTORIAL_TIMEOUT:-240}
MODE=${1:-one}
unset TORCHELASTIC_USE_AGENT_STORE MASTER_ADDR MASTER_PORT LOGLEVEL
# torch.distributed.launch (1.13) run with the peer's fix applied (runpy runs the peer file
# without its main), as the reference for --local-rank-arg.
LAUNCH_PY='import runpy, sys
runpy.run_path(sys.argv[1])
sys.argv = ["torch.distributed.launch"] + sys.argv[2:]
from torch.distributed.launch import main
main()'

# launcher WHO: the command (an array, LAUNCHER) that starts one node under WHO: crun, torchrun,
# or launch (torch.distributed.launch).
launcher() {
	case $1 in
	crun) LAUNCHER=("$CRUN") ;;
	torchrun) LAUNCHER=("$PYTHON_EXEC" "$TORCHRUN") ;;
	launch) LAUNCHER=("$PYTHON_EXEC" -c "$LAUNCH_PY" "$TORCHRUN") ;;
	*) fail "no launcher $1" ;;
	esac
}

# node WHO ID NS HOST ARGS...: start one node of job ID under WHO in the background, bounded
# by LIMIT seconds (SIGTERM, SIGKILL 10 s later: the launcher stops its workers), inside
# namespace NS with host name HOST (both "" on loopback); sets NODE_PID. Output to $T/ID.out
# and .err.
node() {
	local who=$1 id=$2 ns=$3 host=$4 pre=()
	shift 4
	launcher "$who"
	if [ -n "$ns" ]; then
		# shellcheck disable=SC2016 # $0 and $@ belong to the inner shell
		pre=(ip netns exec "$ns" unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"' "$host")
	fi
	TUTORIAL_CKPT=$T/${id%.*}.ckpt "${pre[@]}" timeout -k 10 "$LIMIT" "${LAUNCHER[@]}" "$@" \
		>"$T/$id.out" 2>"$T/$id.err" &
	NODE_PID=$!
	track $NODE_PID
}

# finish ID PIDS...: wait for a job's nodes; their exit codes ("timeout" for a hang) go to
# $T/ID.rc, their output lines to $T/ID.lines, the time it took to $T/ID.s.
finish() {
	local id=$1 codes="" p
	shift
	for p in "$@"; do
		wait_pid $((LIMIT + 20)) "$p"
		# timeout(1)'s 124 or 137, and not a launcher's own 137 (a worker's SIGKILL).
		if { [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; } &&
			[ $(($(now_ms) - START)) -ge $((LIMIT * 1000)) ]; then
			RC=timeout
		fi
		codes="$codes $RC"
	done
	echo "${codes# }" >"$T/$id.rc"
	echo $((($(now_ms) - START) / 1000)) >"$T/$id.s"
	cat "$T/$id".*.out | sed 's/^\[rank[0-9]*\]://' | LC_ALL=C sort >"$T/$id.lines"
}

# single ID WHO ARGS...: a 1-node job (ARGS: the launcher's flags and the program).
single() {
	local id=$1 who=$2
	shift 2
	note "$id: under $who, at most ${LIMIT}s"
	START=$(now_ms)
	node "$who" "$id.0" "" "" "$@"
	finish "$id" "$NODE_PID"
}

LAUNCHERS="crun torchrun"
peer_runs || LAUNCHERS=crun
BAD=""
# same CASE A B [WANT_RC]: jobs A and B (ids) exited alike (WANT_RC, "0" by default) and wrote
# the same lines; every final digest is the test's one digest (the first one seen).
same() {
	local case=$1 a=$T/$2 b=$T/$3 want=${4:-0} why="" f
	peer_runs || b=$a # crun's half alone: its exit status, output and digests
	if [ "$(cat "$a.rc")" != "$(cat "$b.rc")" ]; then
		why="exit codes: $2 $(cat "$a.rc"), $3 $(cat "$b.rc")"
	elif [ "$(tr ' ' '\n' <"$a.rc" | sort -u)" != "$want" ]; then
		why="both exited $(cat "$a.rc"), not $want"
	elif ! diff -u "$a.lines" "$b.lines" >"$T/diff" || [ ! -s "$a.lines" ]; then
		why="output differs: $(tr '\n' ' ' <"$T/diff")"
	else
		sed -n 's/.*final parameters sha256 //p' "$a.lines" "$b.lines" >>"$T/digests"
		if [ "$(sort -u "$T/digests" | wc -l)" -gt 1 ]; then
			why="final parameters differ from the first job's: $(sort -u "$T/digests" | tr '\n' ' ')"
		fi
	fi
	if [ -n "$why" ]; then
		echo "FAILED $case: $why" >&2
		for f in "$a".*.err "$b".*.err; do
			echo "  --- $f (the last lines)" >&2
			tail -n 8 "$f" | sed 's/^/    /' >&2
		done
		BAD="$BAD $case"
	else
		echo "ok $case: exit $(cat "$a.rc"), $(wc -l <"$a.lines") lines alike ($2 $(cat "$a.s") s," \
			"$3 $(cat "$b.s") s)" >&2
	fi
}

# has CASE ID PATTERN: job ID's output lines hold PATTERN (what makes a case what it claims).
has() {
	grep -aq "$3" "$T/$2.lines" || { echo "FAILED $1: no line \"$3\" in $2's output" >&2; BAD="$BAD $1"; }
}

if [ "$MODE" = one ]; then
	export GLOO_SOCKET_IFNAME=lo
	for who in $LAUNCHERS; do
		single "ddp.$who" $who --standalone --nproc_per_node 2 "$CASES" ddp
		single "elastic.$who" $who --standalone --nproc_per_node 2 --max_restarts 1 "$CASES" elastic
		single "launch.$who" $who --standalone --nproc_per_node 2 "$CASES" launch
	done
	! peer_runs || single doomed.torchrun torchrun --standalone --nproc_per_node 2 \
		--max_restarts 1 "$CASES" doomed
	single doomed.crun crun --standalone --nproc_per_node 2 --max_restarts 1 \
		--exit-code torchrun "$CASES" doomed
	single doomed.crun137 crun --standalone --nproc_per_node 2 --max_restarts 1 "$CASES" doomed
	# torch.distributed.launch passes --local_rank=N; crun does with --local-rank-arg.
	! peer_runs || single argv.launch launch --standalone --nproc_per_node 2 "$CASES" launch
	single argv.crun crun --standalone --nproc_per_node 2 --local-rank-arg "$CASES" launch

	same ddp ddp.crun ddp.torchrun
	has ddp ddp.crun "rank 1: final parameters"
	same "elastic (kill, restart)" elastic.crun elastic.torchrun
	has "elastic (kill, restart)" elastic.crun "rank 1 attempt 1: starting at epoch 2"
	has "elastic (kill, restart)" elastic.crun "rank 0: final parameters"
	same "doomed (budget spent)" doomed.crun doomed.torchrun 1
	has "doomed (budget spent)" doomed.crun "rank 0 attempt 1: starting at epoch 2"
	# crun's own exit code names what failed (docs/agent.md, "Exit status").
	if [ "$(cat "$T/doomed.crun137.rc")" != 137 ]; then
		echo "FAILED doomed, crun's default exit: $(cat "$T/doomed.crun137.rc"), not 137" >&2
		BAD="$BAD doomed/137"
	fi
	same "launch (LOCAL_RANK)" launch.crun launch.torchrun
	has "launch (LOCAL_RANK)" launch.crun "rank 1: local rank 1 from LOCAL_RANK"
	has "launch (LOCAL_RANK)" launch.crun "rank 1: RANK=1 LOCAL_RANK=1 .*TORCHELASTIC_ERROR_FILE set"
	same "launch (--local_rank)" argv.crun argv.launch
	has "launch (--local_rank)" argv.crun "rank 1: local rank 1 from argv"
	[ -z "$BAD" ] || fail "cases that differ from torchrun:$BAD"
	exit 0
fi

[ "$MODE" = two ] || fail "usage: tutorials_train.sh one|two"
TAG=tt$$
need_netns "$TAG"
cleanup_ns() {
	local ns
	for ns in $NETNS; do
		rm -rf "/etc/netns/$ns"
	done
	rmdir /etc/netns 2>/dev/null
	cleanup
}
trap cleanup_ns EXIT

# Two hosts on one bridge: A (.1) hosts the rendezvous, B (.2) does not.
NET=$(netns_subnet)
netns_bridge "$TAG" "$NET" crun0 "${TAG}a" "${TAG}b" || { echo "no bridge support: skipping"; exit 77; }
for h in a b; do
	mkdir -p "/etc/netns/$TAG$h" || fail "mkdir /etc/netns/$TAG$h"
	printf '127.0.0.1 localhost\n%s.1 %sa\n%s.2 %sb\n' "$NET" "$TAG" "$NET" "$TAG" \
		>"/etc/netns/$TAG$h/hosts" || fail "writing /etc/netns/$TAG$h/hosts"
done
export GLOO_SOCKET_IFNAME=crun0
A=$NET.1
PORT=29400 # each namespace is fresh; every job gets the next port

# listening NS PORT: something listens on PORT in namespace NS.
listening() {
	ip netns exec "$1" ss -Hltn "( sport = :$2 )" | grep -q .
}

# trying WHO ID: node b of job ID has started its rendezvous (crun says which store it joins;
# torchrun, with LOGLEVEL=INFO, logs its launch configuration just before it connects).
trying() {
	if [ "$1" = crun ]; then
		grep -aq "joining the rendezvous store at" "$T/$2.b.err"
	else
		grep -aq "Starting elastic_operator" "$T/$2.b.err"
	fi
}

# pair ID WHO ORDER ARGS...: a 2-node job (c10d at A:PORT), the nodes started in ORDER (ab:
# A once listening, then B; ba: B once trying, then A).
pair() {
	local id=$1 who=$2 order=$3 first second pa pb
	shift 3
	PORT=$((PORT + 1))
	set -- --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "$A:$PORT" \
		--rdzv_id "$id" "$@"
	if [ "$order" = ab ]; then first=a second=b; else first=b second=a; fi
	note "$id: node $first, then node $second, under $who, at most ${LIMIT}s"
	START=$(now_ms)
	LOGLEVEL=INFO node "$who" "$id.$first" "$TAG$first" "$TAG$first" "$@"
	eval "p$first=$NODE_PID"
	if [ $first = a ]; then
		wait_for 60 listening "${TAG}a" "$PORT"
	else
		wait_for 60 trying "$who" "$id"
	fi
	LOGLEVEL=INFO node "$who" "$id.$second" "$TAG$second" "$TAG$second" "$@"
	eval "p$second=$NODE_PID"
	finish "$id" "$pa" "$pb"
}

for order in ab ba; do
	for who in $LAUNCHERS; do
		pair "ddp.$order.$who" $who $order "$CASES" ddp
		pair "elastic.$order.$who" $who $order --max_restarts 1 "$CASES" elastic
	done
done
for order in ab ba; do
	same "ddp, 2 nodes, $order" "ddp.$order.crun" "ddp.$order.torchrun"
	same "elastic, 2 nodes, $order" "elastic.$order.crun" "elastic.$order.torchrun"
	has "elastic, 2 nodes, $order" "elastic.$order.crun" "rank 1 attempt 1: starting at epoch 2"
done
[ -z "$BAD" ] || fail "cases that differ from torchrun:$BAD"
