#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/loopback.sh: a two-node c10d job whose endpoint is a loopback address that no
# interface lists (127.0.0.7), the nodes on 127.0.0.8 and 127.0.0.9: one agent hosts the store
# and says so, the other says which store it joined (before: nobody hosted it, a silent hang).
. "$(dirname "$0")/lib.sh"

hold_port PORT 127.0.0.7
pids=()
for i in 8 9; do
	"$CRUN" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.7:$PORT" \
		--rdzv-id loop --local-addr 127.0.0.$i --rdzv-conf join_timeout=20 "$W" env \
		>"$T/n$i.out" 2>"$T/n$i.err" &
	pids+=($!)
	track $!
done
RCS=""
for p in "${pids[@]}"; do
	wait_pid 60 "$p"
	RCS="$RCS $RC"
done
[ "$RCS" = " 0 0" ] || { cat "$T"/n*.err >&2; fail "exit codes$RCS, expected 0 0"; }
cat "$T"/n*.out >"$T/all.out"
expect_eq "$(sed -n 's/^\[rank[0-9]*\]:RANK=//p' "$T/all.out" | sort -n | tr '\n' ' ')" "0 1 2 3 " \
	"ranks of the two nodes"
cat "$T"/n*.err >"$T/all.err"
expect_eq "$(grep -c "hosting the rendezvous store at 127.0.0.7:$PORT" "$T/all.err")" 1 \
	"agents hosting the store"
expect_grep "store 127.0.0.7:$PORT is already served here; joining it as a client" "$T/all.err" \
	"the other agent names the store it joined"
echo "loopback: ok"
