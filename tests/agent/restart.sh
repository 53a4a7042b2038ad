#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/restart.sh: restart after a crash, the budget, the first-failure report, exit codes.
. "$(dirname "$0")/lib.sh"

note "a crash in attempt 0 restarts the group; the new workers see restart count 1"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 4 --max-restarts 2 \
	"$W" env exit-if-restart:0:3 print:finished
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC, expected 0 after one restart"; }
# Attempt 0 workers may be stopped before they print: at least the failing one did.
grep -aq 'TORCHELASTIC_RESTART_COUNT=0$' "$T/out" || fail "attempt 0 output missing"
expect_eq "$(grep -ac 'TORCHELASTIC_RESTART_COUNT=1$' "$T/out")" 4 "attempt 1 workers"
expect_eq "$(grep -ac ':finished$' "$T/out")" 4 "finished lines"
expect_grep "worker failure on" "$T/err" "failure table of attempt 0"
expect_grep "exit 3" "$T/err" "exit code in the table"

note "budget exhausted: the first failure's exit code, the table with the error-file message"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 3 --max-restarts 1 \
	"$W" exit-if-rank:0:0 exit-if-rank:2:0 errfile:disk-on-fire exit:42
expect_eq $RC 42 "exit status after the budget is spent"
expect_eq "$(grep -ac 'worker failure on' "$T/err")" 2 "one table per failed attempt"
expect_grep "first .* 1 .* 1 exit 42 .*disk-on-fire" "$T/err" "table row with message"
expect_grep "restart budget (1) spent" "$T/err" "budget message"
expect_grep "marked failed: workers failed: rank .* (restart budget exhausted)" "$T/err" \
	"the rendezvous logs the failure it published, not the budget line"
if grep -aq "marked failed: budget" "$T/err"; then
	fail "the rendezvous logged its budget line in place of the failure"
fi
ls "$T"/crun-*/attempt_1/error_1.json >/dev/null 2>&1 || fail "the failed attempt's error file is not kept"

note "a worker killed by a signal: exit status 128+signal, the signal named"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 "$W" raise-if-rank:1:6 sleep:30000
expect_eq $RC 134 "exit status for SIGABRT"
expect_grep "SIGABRT (6)" "$T/err" "signal name in the table"

note "a failure without error files leaves no temp dir behind"
expect_eq "$(ls -d "$T"/crun-* | wc -l)" 1 "temp dirs kept (only the one with an error file)"

note "a program that exists but cannot be executed by the worker: exit 127 from the shim"
printf '#!/nonexistent/interpreter\n' >"$T/bad-interp"
chmod +x "$T/bad-interp"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --no-python "$T/bad-interp"
expect_eq $RC 127 "exit status when exec fails with ENOENT (missing interpreter)"
expect_grep "cannot run .*bad-interp: No such file or directory" "$T/err" \
	"the exec error is shown with its errno"

note "every worker of a wide group fails to exec at once (they exec in parallel): each reported"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 12 --no-python "$T/bad-interp"
expect_eq $RC 127 "exit status when every exec fails"
# The first failure stops the rest, so some may die before their exec: count whole lines.
n=$(grep -ac 'cannot run' "$T/err")
[ "$n" -ge 1 ] || fail "no exec error reported"
expect_eq "$(grep -ac 'cannot run .*bad-interp: No such file or directory$' "$T/err")" "$n" \
	"every exec error line whole, with its errno"

note "a worker that fails at once stops workers that may not have reached setsid() yet"
t0=$(now_ms)
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 16 --shutdown-timeout 30 \
	"$W" exit-if-rank:0:5 sleep:50000
ms=$(($(now_ms) - t0))
expect_eq $RC 5 "exit status of the failed worker"
note "16 workers started and stopped in $ms ms"
# Some 20 ms when it works; a worker missed before its setsid() would hold the stop for the
# 30 s grace period.
[ $ms -lt 3000 ] || fail "the group took $ms ms to stop"
echo "restart: ok"
