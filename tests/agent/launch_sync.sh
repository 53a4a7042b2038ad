#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/launch_sync.sh: a launch waits on no disk flush (issue 23). Under strace, a
# standalone job of 2 workers makes no fsync, fdatasync, sync or syncfs call (the run record's
# two fsyncs were 0.4 to 50 ms of every launch on a loaded ext4), and still leaves its run
# record, whole, where `crun status` reads it back (finished, exit 3). Skipped without strace.
. "$(dirname "$0")/lib.sh"

need_strace

note "a standalone job under strace: no flush on the launch path"
# LeakSanitizer cannot run under ptrace (it aborts at exit): off for this one run of an ASan
# build; the other tests check leaks.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout -s KILL 120 strace -f -qq -o "$T/trace" \
	-e trace=fsync,fdatasync,sync,syncfs,sync_file_range \
	"$CRUN" --standalone --nproc-per-node 2 --no-python /bin/true \
	>"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] || { cat "$T/err" >&2; fail "crun under strace: exit $rc, expected 0"; }
# strace itself must have traced the run: the workers' execve is not in the filter, so the
# file holds only the flushes (and exit lines, -qq drops them); a missing file is a failure.
[ -f "$T/trace" ] || fail "strace left no trace file"
if grep -E '(fsync|fdatasync|sync|syncfs|sync_file_range)\(' "$T/trace" >"$T/flushes"; then
	cat "$T/flushes" >&2
	fail "the launch flushed to disk $(wc -l <"$T/flushes") time(s) (listed above)"
fi

note "the run record is still written whole and read back"
rec=$(find "$CRUN_STATE_DIR/runs" -name '*.json' -type f | head -n 1)
[ -n "$rec" ] || fail "no run record under $CRUN_STATE_DIR/runs"
if find "$CRUN_STATE_DIR/runs" -name '*.tmp.*' | grep -q .; then
	fail "a temporary file was left beside the run record"
fi
# --standalone names its run with a fresh id: the record's folder
run=$(basename "$(dirname "$rec")")
timeout -s KILL 30 "$CRUN" status --rdzv-id "$run" >"$T/st" 2>"$T/st.err"
expect_eq $? 3 "crun status of the finished run (from its record)"
expect_grep "finished" "$T/st" "the record says the run finished"
note "ok"
