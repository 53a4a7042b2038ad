#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/ddp.sh: an unchanged PyTorch DDP script (gloo) over 2 nodes x 2 workers; every
# replica ends with identical parameters. Skipped (77) when torch is not importable.
. "$(dirname "$0")/lib.sh"

need_torch
start_rdzvd
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id ddp --local-addr 127.0.0.$((i + 2)) "$SRC/tests/agent/ddp_train.py" "$T" \
		>"$T/ddp.$i.out" 2>"$T/ddp.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 240 ${pids[$i]} "node $i" "$T/ddp.$i.out" "$T/ddp.$i.err"
done
for r in 0 1 2 3; do
	[ -s "$T/params.$r" ] || fail "rank $r wrote no parameters"
done
expect_eq "$(cat "$T"/params.* | sort -u | wc -l)" 1 "distinct parameter sets across 4 replicas"
grep -aq "rank 3 of 4 done" "$T"/ddp.*.out || fail "rank 3 did not report"
echo "ddp: ok"
