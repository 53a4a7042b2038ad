#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/logdir.sh: --log-dir reruns with the same run id: each run gets its own folder,
# DIR/<run_id>, then DIR/<run_id>.1 (agent/logroute.h), so attempts of different runs never mix; the error files of failed attempts are kept next to their logs
# and no temporary folder is left behind.
. "$(dirname "$0")/lib.sh"

ONE=(--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 --rdzv-id rerun --nproc-per-node 2)

note "run 1: a failure, one restart, success"
run_crun 60 "$T/out1" "$T/err1" "${ONE[@]}" --max-restarts 1 --log-dir "$T/logs" \
	"$W" print:run1 exit-if-restart:0:4
[ "$RC" -eq 0 ] || { cat "$T/err1" >&2; fail "run 1: exit $RC"; }
note "run 2, same run id and --log-dir: fails at once, its error file written"
run_crun 60 "$T/out2" "$T/err2" "${ONE[@]}" --log-dir "$T/logs" \
	"$W" print:run2 exit-if-rank:0:0 errfile:run-two-broke exit:5
expect_eq "$RC" 5 "run 2: exit status"

expect_eq "$(ls "$T/logs" | tr '\n' ' ')" "rerun rerun.1 " "run folders under --log-dir"
# run_of TEXT: the run folder whose logs hold the line TEXT (.../RUN/attempt_N/RANK/stdout.log).
run_of() {
	local f
	f=$(grep -lx "$1" "$T"/logs/rerun*/attempt_*/*/stdout.log | head -n1)
	[ -n "$f" ] && dirname "$(dirname "$(dirname "$f")")"
}
R1=$(run_of run1)
R2=$(run_of run2)
[ -n "$R1" ] && [ -n "$R2" ] && [ "$R1" != "$R2" ] || fail "runs 1 and 2 share a folder: $R1 $R2"
expect_eq "$R1 $R2" "$T/logs/rerun $T/logs/rerun.1" "the first run's folder, then the rerun's"
expect_eq "$(ls -d "$R1"/attempt_* | wc -l)" 2 "attempts of run 1"
expect_eq "$(ls -d "$R2"/attempt_* | wc -l)" 1 "attempts of run 2"
expect_grep "worker logs go to $R1" "$T/err1" "run 1 says where its logs go"
expect_grep "worker logs go to $R2" "$T/err2" "run 2 says where its logs go"

note "private, as torchrun's: run folders 0700, logs and kept error files 0600"
expect_eq "$(stat -c %a "$R1")" 700 "mode of run folder $R1"
expect_eq "$(stat -c %a "$R1/attempt_0/0")" 700 "mode of rank folder $R1/attempt_0/0"
expect_eq "$(stat -c %a "$R1/attempt_0/0/stdout.log")" 600 "mode of $R1/attempt_0/0/stdout.log"
expect_eq "$(stat -c %a "$R2/attempt_0/error_1.json")" 600 "mode of the kept error file"

note "error files are kept next to the logs; no temporary folder is left behind"
expect_grep "run-two-broke" "$R2/attempt_0/error_1.json" "run 2's error file"
expect_grep "error files of attempt 0 are kept in $R2/attempt_0" "$T/err2" "where they are"
left=$(ls -d "$T"/crun-* 2>/dev/null | wc -l)
expect_eq "$left" 0 "temporary folders left in \$TMPDIR"
echo "logdir: ok"
