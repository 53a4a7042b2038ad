# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/proc.sh: shell helpers the script tests share (sourced by tests/agent/lib.sh,
# tests/faults/lib.sh, tests/fanout/lib.sh and tests/slurm/slurm.sh): progress notes, tracked
# processes, bounded waits, a crun-rdzvd of the test's own, token files. The sourcing script defines fail()
# (how a failure is recorded differs) and kills $PIDS in its EXIT trap (kill_tracked).

note() {
	echo "--- $*" >&2
}

# need_strace: skip the test (exit 77) unless strace is installed and may trace here.
need_strace() {
	command -v strace >/dev/null || { echo "strace not installed: skipping"; exit 77; }
	if ! strace -f -qq -o /dev/null true 2>/dev/null; then
		echo "strace cannot trace here (ptrace refused): skipping"
		exit 77
	fi
}

# track PID: remember a background process so cleanup kills it.
track() {
	PIDS="$PIDS $1"
}

# kill_tracked: SIGKILL every tracked process, then reap those that are this shell's children.
kill_tracked() {
	local p
	for p in $PIDS; do
		kill -9 "$p" 2>/dev/null
	done
	for p in $PIDS; do
		wait "$p" 2>/dev/null
	done
}

# alive PID: the process exists and is not a zombie (its status not yet collected). Reads
# /proc/PID/stat: the state follows the command name, which is in parentheses and may hold
# spaces and parentheses itself.
alive() {
	local st
	case $1 in '' | *[!0-9]*) return 1 ;; esac
	read -r st 2>/dev/null <"/proc/$1/stat" || return 1
	st=${st##*) }
	st=${st%% *}
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# exited PID: not alive (gone, or a zombie).
exited() {
	! alive "$1"
}

# files_at_least N PREFIX: at least N files are named PREFIX* (e.g. "$T/ready." for the files
# the workers touch once running).
files_at_least() {
	local f n=0
	for f in "$2"*; do
		[ -e "$f" ] && n=$((n + 1))
	done
	[ $n -ge "$1" ]
}

# now_ms: the wall clock in milliseconds (bash's EPOCHREALTIME: no process started).
now_ms() {
	local us=${EPOCHREALTIME//[!0-9]/}
	echo $((us / 1000))
}

# stamped OUT CMD...: run CMD, each line of its stderr written to OUT after the ms since it
# started; RC its exit status, MS how long it ran. CMD bounds itself (timeout -s KILL ...).
stamped() {
	local out=$1 t0 l
	shift
	t0=$(now_ms)
	{
		"$@" 2>&1 >/dev/null
		echo "exit $?"
	} | while IFS= read -r l; do
		echo "$(($(now_ms) - t0)) $l"
	done >"$out"
	MS=$(($(now_ms) - t0))
	RC=$(sed -n 's/^[0-9]* exit \([0-9]*\)$/\1/p' "$out" | tail -n1)
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

# wait_key SECONDS ENDPOINT KEY: wait (crun-store's WAIT: no polling) until KEY exists in the
# store at ENDPOINT, the token from the environment (CRUN_TOKEN_FILE); fail after SECONDS.
# STORE_CLI is crun-store. For "the agent got this far", e.g. rdzv/RUN/shape: its first join.
wait_key() {
	"${STORE_CLI:?STORE_CLI must name crun-store}" --endpoint "$2" wait "$3" --timeout "$1" \
		>/dev/null || fail "timed out after ${1}s waiting for key $3 in the store at $2"
}

# wait_pid SECONDS PID: wait for a tracked child to exit; sets RC to its status.
wait_pid() {
	local limit=$1 pid=$2
	wait_for "$limit" exited "$pid"
	wait "$pid"
	# shellcheck disable=SC2034 # for the caller
	RC=$?
}

# wait_ok SECONDS PID WHAT FILE...: wait_pid, then fail unless PID exited 0, naming WHAT and
# its status after showing the FILEs that say why (the last 60 lines of each).
wait_ok() {
	local limit=$1 pid=$2 what=$3
	shift 3
	wait_pid "$limit" "$pid"
	[ "$RC" -eq 0 ] && return 0
	tail -n 60 "$@" >&2
	fail "$what exited $RC"
}

# start_rdzvd [ADDR] [NETNS] [OPTION...]: a store daemon (RDZVD) listening on ADDR (127.0.0.1),
# port 0, inside network namespace NETNS when one is given (""), with the daemon's OPTIONs
# (--tls-cert FILE ...); sets ENDPOINT and RDZVD_PID.
start_rdzvd() {
	local addr=${1:-127.0.0.1} ns=${2:-}
	shift $(($# < 2 ? $# : 2))
	# The child truncates rdzvd.out itself, maybe after we would have read the last daemon's
	# endpoint from it: remove it first, and wait for a whole HOST:PORT line.
	rm -f "$T/rdzvd.out"
	if [ -n "$ns" ]; then
		ip netns exec "$ns" "$RDZVD" --listen "$addr:0" -q "$@" >"$T/rdzvd.out" \
			2>"$T/rdzvd.err" &
	else
		"$RDZVD" --listen "$addr:0" -q "$@" >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
	fi
	RDZVD_PID=$!
	track $RDZVD_PID
	wait_for 20 grep -q ':[0-9][0-9]*$' "$T/rdzvd.out"
	# shellcheck disable=SC2034 # for the caller
	ENDPOINT=$(head -n1 "$T/rdzvd.out")
}

# token_file FILE: a new store token in FILE, 32 random bytes in hex (64 characters, past
# src/common/token.h's minimum), readable by its owner alone.
token_file() {
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$1" || fail "writing the token $1"
	chmod 0600 "$1" || fail "chmod 0600 $1"
}
