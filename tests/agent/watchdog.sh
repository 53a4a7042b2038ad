#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/watchdog.sh: --worker-timeout with plain programs (no libcrun-worker): the file
# named in CRUN_HEARTBEAT_FILE is the heartbeat; a silent worker fails the group, is named,
# and a worker that ignores SIGTERM still goes (SIGKILL after the grace).
. "$(dirname "$0")/lib.sh"

cat >"$T/beat.sh" <<'SH'
#!/bin/bash
echo "HB=${CRUN_HEARTBEAT_FILE-unset} MODE=$(stat -c %a "${CRUN_HEARTBEAT_FILE:-/}")"
for i in $(seq 1 "$1"); do
	[ -z "${CRUN_HEARTBEAT_FILE-}" ] || touch "$CRUN_HEARTBEAT_FILE"
	sleep 0.3
done
echo "beat done"
SH
chmod +x "$T/beat.sh"

note "without --worker-timeout no heartbeat file is set"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 1 --no-python "$T/beat.sh" 1
expect_eq $RC 0 "exit status"
expect_grep "HB=unset" "$T/out" "CRUN_HEARTBEAT_FILE without the flag"

note "a program that touches its file through a step longer than the timeout is left alone"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --worker-timeout 3 \
	--no-python "$T/beat.sh" 20
expect_eq $RC 0 "exit status"
expect_eq "$(grep -ac 'beat done' "$T/out")" 2 "both workers finished"
expect_grep "HB=$T/crun-.*/heartbeat_1 MODE=600" "$T/out" "a private 0600 file per rank"
if grep -aq "no heartbeat" "$T/err"; then
	fail "a worker that heartbeats was reported hung"
fi

note "a silent program is reported (rank, pid, seconds) and fails the job"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --worker-timeout 1 \
	"$W" exit-if-rank:0:0 sleep:60000
expect_eq $RC 143 "exit status: the hung worker got SIGTERM"
expect_grep "worker rank 1 (pid [0-9]*): no heartbeat for [0-9.]* s (--worker-timeout 1.0 s)" \
	"$T/err" "the log line"
expect_grep "first .* 1 .* 1 SIGTERM (15) .*hung: no heartbeat for" "$T/err" \
	"the failure table names it"

note "a hung worker that ignores SIGTERM is killed after --shutdown-timeout"
# Not run_crun: 137 is the right answer here, and run_crun takes it for its own SIGKILL.
timeout 60 "$CRUN" --standalone --nproc-per-node 1 --worker-timeout 1 --shutdown-timeout 1 \
	"$W" ignore-term sleep:60000 >"$T/out" 2>"$T/err"
RC=$?
expect_eq $RC 137 "exit status: SIGKILL"
expect_grep "sending SIGKILL" "$T/err" "the escalation"
expect_grep "hung: no heartbeat" "$T/err" "the reason stays in the table"
