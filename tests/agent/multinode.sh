#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/multinode.sh: two and three "nodes" (agents on 127.0.0.2, .3, .4) against one
# store endpoint: ranks, restarts on every node, and the budget spent on every node.
. "$(dirname "$0")/lib.sh"

start_rdzvd

# agents ID NNODES NPROC ARGS...: start NNODES agents (127.0.0.2...), wait for all; sets RCS.
agents() {
	local id=$1 nn=$2 np=$3 i pids=()
	shift 3
	for ((i = 0; i < nn; i++)); do
		"$CRUN" --nnodes $nn --nproc-per-node $np --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
			--rdzv-id "$id" --local-addr 127.0.0.$((i + 2)) --rdzv-conf last_call_timeout=1 \
			"$@" >"$T/$id.$i.out" 2>"$T/$id.$i.err" &
		pids+=($!)
		track $!
	done
	RCS=""
	for ((i = 0; i < nn; i++)); do
		wait_pid 90 ${pids[$i]}
		RCS="$RCS $RC"
	done
	RCS=${RCS# }
}

value_of() { # FILE KEY: every value printed for KEY, sorted
	sed -n "s/^\[rank[0-9]*\]:$2=//p" "$1" | sort -n | tr '\n' ' ' | sed 's/ $//'
}

for nn in 2 3; do
	note "$nn nodes x 2 workers"
	agents "j$nn" $nn 2 "$W" env
	expect_eq "$RCS" "$(printf '0 %.0s' $(seq $nn) | sed 's/ $//')" "exit codes of $nn agents"
	cat "$T"/j$nn.*.out >"$T/all.out"
	expect_eq "$(value_of "$T/all.out" RANK)" "$(seq -s ' ' 0 $((nn * 2 - 1)))" "ranks"
	expect_eq "$(value_of "$T/all.out" WORLD_SIZE | tr ' ' '\n' | sort -u)" $((nn * 2)) "WORLD_SIZE"
	expect_eq "$(value_of "$T/all.out" GROUP_WORLD_SIZE | tr ' ' '\n' | sort -u)" $nn "GROUP_WORLD_SIZE"
	expect_eq "$(value_of "$T/all.out" GROUP_RANK | tr ' ' '\n' | sort -u | tr '\n' ' ' | sed 's/ $//')" \
		"$(seq -s ' ' 0 $((nn - 1)))" "GROUP_RANK"
	expect_eq "$(value_of "$T/all.out" MASTER_ADDR | tr ' ' '\n' | sort -u | wc -l)" 1 "one MASTER_ADDR"
	expect_eq "$(value_of "$T/all.out" MASTER_PORT | tr ' ' '\n' | sort -u | wc -l)" 1 "one MASTER_PORT"
	case "$(value_of "$T/all.out" MASTER_ADDR | cut -d' ' -f1)" in
	127.0.0.[2-4]) ;;
	*) fail "MASTER_ADDR is not an advertised literal: $(value_of "$T/all.out" MASTER_ADDR)" ;;
	esac
	# The node with GROUP_RANK 0 holds ranks 0 and 1 and advertises MASTER_ADDR.
	for ((i = 0; i < nn; i++)); do
		if grep -aq '^\[rank0\]:RANK=0$' "$T/j$nn.$i.out"; then
			expect_eq "$(value_of "$T/j$nn.$i.out" MASTER_ADDR | cut -d' ' -f1)" 127.0.0.$((i + 2)) \
				"MASTER_ADDR is rank 0's node"
		fi
	done
done

note "a crash on one node restarts the workers on every node"
agents jf 2 2 --max-restarts 1 "$W" env \
	exit-if-rank:3:0 exit-if-restart:0:7 print:finished
expect_eq "$RCS" "0 0" "both nodes succeed after one restart"
cat "$T"/jf.*.out >"$T/jf.out"
expect_eq "$(grep -ac 'TORCHELASTIC_RESTART_COUNT=1$' "$T/jf.out")" 4 "restarted workers on both nodes"
expect_eq "$(grep -ac ':finished$' "$T/jf.out")" 3 "finished workers"

note "budget spent: the job fails on every node and the failure is reported on each"
agents jb 2 2 --max-restarts 1 "$W" exit-if-rank:2:9 sleep:60000
for i in 0 1; do
	grep -aq "worker failure on\|job failed" "$T/jb.$i.err" || { cat "$T/jb.$i.err" >&2; fail "node $i: no failure report"; }
done
# Every node exits with the first failure's code, not only the node where it happened.
expect_eq "$RCS" "9 9" "exit codes of both nodes when the budget is spent"
for i in 0 1; do
	# Both nodes show the table row of the failed rank (rank 2 ran on one of them).
	grep -aq "first .* 2 .* 0 exit 9 " "$T/jb.$i.err" || { cat "$T/jb.$i.err" >&2; fail "node $i: no table row for rank 2"; }
done
note "fail fast: the other node stops its workers at once, not after this node's grace period"
start=$(date +%s)
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id jff --local-addr 127.0.0.$((i + 2)) --rdzv-conf last_call_timeout=1 \
		--shutdown-timeout 12 "$W" term-exit:0 ignore-term-if-rank:1 touch:"$T/up.%r" \
		wait-file:"$T/up.0" wait-file:"$T/up.1" wait-file:"$T/up.2" wait-file:"$T/up.3" \
		exit-if-rank:0:5 print:up sleep:60000 >"$T/jff.$i.out" 2>"$T/jff.$i.err" &
	pids+=($!)
	track $!
done
wait_for 30 test -e "$T/up.3"
up=$(now_ms)
# Ranks 2 and 3 run on the node where nothing failed; rank 1 ignores SIGTERM on the failing one.
wait_for 6 eval '[ "$(cat "$T"/jff.*.out | grep -c "got SIGTERM")" -ge 2 ]'
note "the other node's workers got SIGTERM $(($(now_ms) - up)) ms after the last one came up"
[ $(($(date +%s) - start)) -lt 12 ] || fail "the other node's workers were stopped only after the grace period"
RCS=""
for i in 0 1; do
	wait_pid 60 ${pids[$i]}
	RCS="$RCS $RC"
done
expect_eq "$RCS" " 5 5" "exit codes after the fail-fast stop"
grep -q '^\[rank1\]:up$' "$T"/jff.*.out || fail "rank 1 did not outlive SIGTERM (grace not tested)"

note "static backend: --node-rank/--master-addr/--master-port; workers get the master as given"
hold_port_pair port
pids=()
for i in 1 0; do
	"$CRUN" --nnodes 2 --nproc-per-node 2 --node-rank $i --master-addr 127.0.0.1 \
		--master-port "$port" "$W" env >"$T/st.$i.out" 2>"$T/st.$i.err" &
	pids+=($!)
	track $!
done
for p in "${pids[@]}"; do
	wait_ok 60 $p "static node" "$T"/st.*.err
done
expect_eq "$(value_of "$T/st.1.out" RANK)" "2 3" "ranks of static node 1"
expect_eq "$(value_of "$T/st.1.out" MASTER_PORT | cut -d' ' -f1)" "$port" "static MASTER_PORT"
expect_eq "$(value_of "$T/st.1.out" MASTER_ADDR | cut -d' ' -f1)" 127.0.0.1 "static MASTER_ADDR"

note "file backend: two nodes through a shared file"
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend file --rdzv-endpoint "file://$T/store" \
		--rdzv-id jfile --local-addr 127.0.0.$((i + 2)) "$W" env >"$T/fi.$i.out" 2>"$T/fi.$i.err" &
	pids+=($!)
	track $!
done
for p in "${pids[@]}"; do
	wait_ok 90 $p "file-backend node" "$T"/fi.*.err
done
cat "$T"/fi.*.out >"$T/fi.out"
expect_eq "$(value_of "$T/fi.out" RANK)" "0 1" "ranks over the file backend"
expect_eq "$(value_of "$T/fi.out" CRUN_STORE_ENDPOINT | cut -d' ' -f1)" "file://$T/store" "file endpoint for workers"
echo "multinode: ok"
