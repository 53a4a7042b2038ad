#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/hygiene.sh: what workers inherit, where stores listen, and waits that must not be
# silent or endless (torchrun's rough edges that crun must not have; issue 3).
. "$(dirname "$0")/lib.sh"

# A descriptor this script leaves open without O_CLOEXEC: crun inherits it, workers must not.
exec 7</dev/null

value() { # FILE RANK KEY
	sed -n "s/^\[rank$2\]:$3=//p" "$1" | head -n1
}

note "workers hold stdin, stdout and stderr only: no store socket, pipe or inherited fd"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 "$W" fds
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
expect_eq "$(value "$T/out" 0 FDS)" "0 1 2" "descriptors of a standalone worker"
expect_eq "$(value "$T/out" 1 FDS)" "0 1 2" "descriptors of a standalone worker"

note "two nodes, the first hosting the c10d store in-process: workers hold 0 1 2 on both"
hold_port port 127.0.0.2
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.2:$port \
		--rdzv-id hyg --local-addr 127.0.0.$((i + 2)) --rdzv-conf is_host=$((1 - i)) \
		"$W" fds >"$T/n.$i.out" 2>"$T/n.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 60 ${pids[$i]} "node $i" "$T"/n.*.err
done
expect_grep "hosting the rendezvous store at 127.0.0.2:$port" "$T/n.0.err" "the host node"
expect_eq "$(sed -n 's/^\[rank[0-9]\]:FDS=//p' "$T/n.0.out")" "0 1 2" "worker fds on the host node"
expect_eq "$(sed -n 's/^\[rank[0-9]\]:FDS=//p' "$T/n.1.out")" "0 1 2" "worker fds on the client node"

note "the standalone store listens on loopback only, never on every interface"
"$CRUN" --standalone --nproc-per-node 1 "$W" env touch:"$T/up" wait-file:"$T/go" \
	>"$T/s.out" 2>"$T/s.err" &
ps=$!
track $ps
wait_for 30 test -e "$T/up"
ep=$(value "$T/s.out" 0 CRUN_STORE_ENDPOINT)
case "$ep" in
127.0.0.1:[0-9]*) ;;
*) fail "standalone store endpoint is not a loopback address: $ep" ;;
esac
expect_grep "hosting the rendezvous store at $ep\$" "$T/s.err" "the logged store address is the real one"
ss -ltnH "sport = :${ep##*:}" >"$T/ss" || fail "ss failed"
expect_eq "$(awk '{print $4}' "$T/ss")" "$ep" "the store's only listening socket"
touch "$T/go"
wait_pid 60 $ps
expect_eq $RC 0 "standalone job"

note "a static master whose peer never comes ends at its join timeout, naming who is missing"
# The master port and the next one, held (--no-agent-store would use both).
hold_port_pair port
start=$(now_ms)
run_crun 60 "$T/out" "$T/err" --nnodes 2 --nproc-per-node 1 --node-rank 0 \
	--master-addr 127.0.0.1 --master-port "$port" --rdzv-conf join_timeout=2 "$W" env
ms=$(($(now_ms) - start))
[ $RC -ne 0 ] || fail "the static master succeeded alone"
note "the static master gave up after $ms ms"
# The 2 s timeout and a few ms.
[ $ms -lt 6000 ] || fail "the static master waited far past its timeout"
expect_grep "join timeout after 2 s" "$T/err" "timeout message"
expect_grep "never came: node ranks 1" "$T/err" "the missing node is named"
[ ! -s "$T/out" ] || fail "workers started without their peer"

note "no silent wait: an open round reports progress, then says who never came"
start_rdzvd
start=$(now_ms)
run_crun 60 "$T/out" "$T/err" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
	--rdzv-endpoint "$ENDPOINT" --rdzv-id lonely --rdzv-conf join_timeout=7 "$W" env
ms=$(($(now_ms) - start))
note "the lone node gave up after $ms ms"
[ $ms -lt 12000 ] || fail "the lone node waited far past its 7 s join timeout ($ms ms)"
[ $RC -ne 0 ] || fail "a lone node of two succeeded"
expect_grep "1 of 2 nodes joined; joined: [^;]*; waiting for 1 more; timeout in" "$T/err" "progress line"
expect_grep "join timeout after 7 s" "$T/err" "timeout message"
expect_grep "1 more never came" "$T/err" "who never came"

note "SIGTERM while waiting in rendezvous: exit 143, and the temp dir goes too"
"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
	--rdzv-id sigterm-wait "$W" env >"$T/w.out" 2>"$T/w.err" &
pw=$!
track $pw
wait_for 30 eval 'ls "$T" | grep -q "^crun-"'
wait_for 30 grep -q "joining it as a client\|round 0" "$T/w.err"
kill -TERM $pw
wait_pid 30 $pw
expect_eq $RC 143 "exit status of an agent stopped in rendezvous"
wait_for 10 eval '! ls "$T" | grep -q "^crun-"'

note "the agent that hosts the store raises its own open-file limit, never its workers' (issue 20)"
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -gt 1024 ]; then
	hold_port nport
	(
		ulimit -Sn 1024
		exec "$CRUN" --nnodes 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$nport" \
			--rdzv-id nofile --no-python /bin/sh -c 'echo "NOFILE=$(ulimit -Sn)"' \
			>"$T/nf.out" 2>"$T/nf.err"
	)
	expect_eq $? 0 "the job with a soft limit of 1024"
	expect_grep "hosting the rendezvous store" "$T/nf.err" "this agent hosts the store"
	expect_grep '^\[rank0\]:NOFILE=1024$' "$T/nf.out" "the worker's soft open-file limit"
else
	echo "hard open-file limit $hard: nothing to raise, case skipped"
fi

note "no temp dir is left behind by any of these (success, timeout)"
expect_eq "$(ls "$T" | grep -c '^crun-')" 0 "crun temp dirs left in \$TMPDIR"
echo "hygiene: ok"
