# SPDX-License-Identifier: MIT
# tests/lib/proc.sh: shell helpers the script tests share (sourced by tests/agent/lib.sh and
# tests/faults/lib.sh): progress notes, tracked processes, bounded waits. The sourcing script
# defines fail() (how a failure is recorded differs) and kills $PIDS in its EXIT trap.

note() {
	echo "--- $*" >&2
}

# track PID: remember a background process so cleanup kills it.
track() {
	PIDS="$PIDS $1"
}

# now_ms: the wall clock in milliseconds (bash's EPOCHREALTIME: no process started).
now_ms() {
	local us=${EPOCHREALTIME//[!0-9]/}
	echo $((us / 1000))
}

# wait_for SECONDS CMD...: poll CMD every 20 ms until it succeeds, or fail once SECONDS of
# wall time have passed (however long CMD itself takes on a loaded machine).
wait_for() {
	local limit=$1 deadline
	deadline=$(($(now_ms) + limit * 1000))
	shift
	until "$@"; do
		[ "$(now_ms)" -lt $deadline ] || fail "timed out after ${limit}s waiting for: $*"
		sleep 0.02
	done
}

# wait_pid SECONDS PID: wait for a tracked child to exit; sets RC to its status.
wait_pid() {
	local limit=$1 pid=$2
	wait_for "$limit" eval "! kill -0 $pid 2>/dev/null || [ \"\$(ps -o stat= -p $pid)\" = Z ]"
	wait "$pid"
	RC=$?
}
