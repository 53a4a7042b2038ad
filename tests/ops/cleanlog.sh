#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/ops/cleanlog.sh: no false alarms (issue 21). A clean 3-node job against crun-rdzvd
# leaves nothing at warning level in the daemon's log: each agent asks the daemon whether it
# serves PyTorch TCPStore clients, and that question is logged below warning level; a real
# TCPStore client is still refused with a warning.
. "$(dirname "$0")/../agent/lib.sh"

note "3 nodes x 1 worker through crun-rdzvd (-q: warnings and errors only), --agent-store: each agent asks"
start_rdzvd
pids=()
for i in 0 1 2; do
	"$CRUN" --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
		--rdzv-id "clean$$" --agent-store --no-python "$W" print:ok >"$T/n$i.out" 2>"$T/n$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1 2; do
	wait_pid 120 "${pids[$i]}"
	[ "$RC" -eq 0 ] || { cat "$T"/n*.err >&2; fail "node $i exited $RC"; }
done
if [ -s "$T/rdzvd.err" ]; then
	cat "$T/rdzvd.err" >&2
	fail "crun-rdzvd logged at warning level during a clean run"
fi

note "a real TCPStore 2.x client (VALIDATE alone) is still refused with a warning"
host=${ENDPOINT%:*}
port=${ENDPOINT##*:}
python3 - "$host" "$port" <<'PY'
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(bytes([0]) + struct.pack("<I", 0x3c85f7ce))  # VALIDATE and its magic
s.settimeout(10)
try:
    s.recv(1)
except OSError:
    pass
PY
wait_for 20 grep -q "refusing .*a PyTorch TCPStore 2.x client" "$T/rdzvd.err"
grep "warning" "$T/rdzvd.err" | grep -q "refusing" || { cat "$T/rdzvd.err" >&2; fail "not at warning level"; }
echo PASS
