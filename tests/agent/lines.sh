#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/lines.sh: under heavy output from many workers no line is split or interleaved.
. "$(dirname "$0")/lib.sh"

n=8
lines=1500
run_crun 120 "$T/out" "$T/err" --standalone --nproc-per-node $n "$W" spam:$lines:300 spam:2:200000
[ $RC -eq 0 ] || { head -c 2000 "$T/err" >&2; fail "exit $RC"; }
for f in out err; do
	total=$(wc -l <"$T/$f")
	# Every worker line: prefix, the worker's own tag, filler, '>'. Long lines come in
	# 64 KiB pieces, each with a prefix.
	bad=$(grep -av '^\[rank[0-9]*\]:<r[0-9]* l[0-9]* [a-z]*>$' "$T/$f" | grep -av '^crun ' |
		grep -av '^\[rank[0-9]*\]:[a-z<>0-9 ]*$' | head -n3)
	[ -z "$bad" ] || fail "mangled $f lines: $(echo "$bad" | cut -c1-200)"
	for ((r = 0; r < n; r++)); do
		c=$(grep -ac "^\[rank$r\]:<r$r l[0-9]* [a-z]*>$" "$T/$f")
		# spam:LINES:300 plus the two short-enough ends of the long lines.
		[ "$c" -ge $lines ] || fail "rank $r: $c whole lines on std$f, expected >= $lines"
	done
	# A line carries its own worker's tag: nothing from another rank inside it.
	wrong=$(awk 'match($0, /^\[rank[0-9]+\]:<r[0-9]+ /) {
		split(substr($0, 1, RLENGTH), a, /[^0-9]+/); if (a[2] != a[3]) n++ } END { print n + 0 }' "$T/$f")
	[ "$wrong" -eq 0 ] || fail "$wrong std$f lines carry another rank's text"
	# The 200000-byte lines: 4 pieces each (3 x 65536 + rest), every piece prefixed.
	long=$(awk 'length($0) > 60000' "$T/$f" | wc -l)
	[ "$long" -ge $((n * 2 * 3)) ] || fail "long lines on std$f: $long pieces"
	note "std$f: $total lines, all whole"
done
echo "lines: ok"
