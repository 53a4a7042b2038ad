#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/logs.sh: --log-dir layout, --redirects, --tee, --local-ranks-filter, prefixes.
. "$(dirname "$0")/lib.sh"

ONE=(--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 --rdzv-id job1)

note "--log-dir keeps DIR/<run_id>/attempt_<round>/<rank>/{stdout,stderr}.log per attempt"
run_crun 60 "$T/out" "$T/err" "${ONE[@]}" --nproc-per-node 2 --max-restarts 1 --log-dir "$T/logs" \
	"$W" print:hello spam:2:20 exit-if-restart:0:4
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
# run_dir DIR: the one run folder crun made in DIR (tests/agent/logdir.sh checks the naming).
run_dir() { ls -d "$1"/job1 | head -n1; }
L=$(run_dir "$T/logs")
for a in 0 1; do
	for r in 0 1; do
		d="$L/attempt_$a/$r"
		[ -f "$d/stdout.log" ] && [ -f "$d/stderr.log" ] || fail "missing logs in $d: $(ls -R "$T/logs")"
	done
done
expect_eq "$(head -n1 "$L/attempt_1/1/stdout.log")" hello "first stdout line, no prefix"
expect_eq "$(grep -c '^<r1 l[01] ' "$L/attempt_1/1/stderr.log")" 2 "stderr lines of rank 1"
expect_grep '^\[rank1\]:hello$' "$T/out" "console still shows the lines"

note "--redirects 3: output goes to the files only"
run_crun 60 "$T/out" "$T/err" "${ONE[@]}" --nproc-per-node 2 --redirects 3 --log-dir "$T/l2" \
	"$W" print:quiet spam:1:10
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
if grep -aq '^\[rank' "$T/out" "$T/err"; then
	fail "redirected output reached the console"
fi
expect_grep '^quiet$' "$(run_dir "$T/l2")/attempt_0/0/stdout.log" "redirected stdout file"

note "--redirects 3 --tee 1: stdout on console and file, stderr in the file only"
run_crun 60 "$T/out" "$T/err" "${ONE[@]}" --nproc-per-node 2 --redirects 3 --tee 1 \
	--log-dir "$T/l3" "$W" print:both spam:1:10
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
expect_grep '^\[rank1\]:both$' "$T/out" "tee'd stdout on the console"
if grep -aq '^\[rank.\]:<r' "$T/err"; then
	fail "redirected stderr reached the console"
fi
expect_grep '^<r1 l0 ' "$(run_dir "$T/l3")/attempt_0/1/stderr.log" "stderr file"

note "--local-ranks-filter 1: only rank 1 on the console"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 3 --local-ranks-filter 1 \
	"$W" print:filtered
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
expect_eq "$(grep -ac ':filtered$' "$T/out")" 1 "filtered lines"
expect_grep '^\[rank1\]:filtered$' "$T/out" "rank 1 shown"

note "--log-prefix template with {rank} {local_rank} {host} {role}"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --role tr \
	--log-prefix '<{role}@{host} {rank}/{local_rank}> ' "$W" print:x
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
expect_grep "^<tr@$(hostname) 1/1> x$" "$T/out" "templated prefix"

note "a last line without a newline still comes out whole"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 1 --no-python /usr/bin/printf 'a\nno-newline'
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
expect_grep '^\[rank0\]:no-newline$' "$T/out" "unterminated last line"

note "no temp dir is left behind after these successes"
[ -z "$(ls "$T" | grep '^crun-' || true)" ] || fail "temp dirs left: $(ls "$T")"
echo "logs: ok"
