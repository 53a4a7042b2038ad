#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/shape.sh: nodes started with a different --nnodes or --max-restarts than the job's
# first node are refused at once, with both values, instead of waiting out the join timeout.
# Different --nproc-per-node per node stays allowed (torchrun's heterogeneous nodes).
. "$(dirname "$0")/lib.sh"

start_rdzvd
common=(--rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" --rdzv-id shape --nproc-per-node 1)

# The first node: --nnodes 2, --max-restarts 1; it waits for a second node.
"$CRUN" "${common[@]}" --nnodes 2 --max-restarts 1 --local-addr 127.0.0.2 "$W" print:first \
	>"$T/a.out" 2>"$T/a.err" &
A=$!
track $A
# It has recorded the job's shape (--nnodes, --max-restarts) that the others are checked against.
wait_key 20 "$ENDPOINT" rdzv/shape/shape

refused() { # WHAT ARGS...: crun ARGS is refused within 10 s (the join timeout is 60 s)
	local what=$1 t0
	shift
	t0=$(now_ms)
	run_crun 30 "$T/b.out" "$T/b.err" "${common[@]}" --local-addr 127.0.0.3 \
		--rdzv-conf join_timeout=60 "$@" "$W" print:second
	[ "$RC" -ne 0 ] || { cat "$T/b.err" >&2; fail "$what: the node was admitted"; }
	[ $(($(now_ms) - t0)) -lt 10000 ] || fail "$what: refused only after $(($(now_ms) - t0)) ms"
}

note "--nnodes 3 against the job's --nnodes 2"
refused "--nnodes" --nnodes 3 --max-restarts 1
expect_grep "this node has --nnodes 3, but the job's first node (host [^)]*) has --nnodes 2" \
	"$T/b.err" "the refusal names both values"

note "--max-restarts 5 against the job's 1"
refused "--max-restarts" --nnodes 2 --max-restarts 5
expect_grep "this node has --max-restarts 5, but the job's first node (host [^)]*) has --max-restarts 1" \
	"$T/b.err" "the refusal names both values"

note "a matching node with another --nproc-per-node is admitted and the job runs"
run_crun 60 "$T/c.out" "$T/c.err" "${common[@]}" --nnodes 2 --max-restarts 1 \
	--local-addr 127.0.0.3 --nproc-per-node 2 "$W" print:second
expect_eq "$RC" 0 "exit status of the matching node"
wait_pid 30 $A
expect_eq "$RC" 0 "exit status of the first node"
echo "shape: ok"
