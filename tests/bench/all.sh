#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/bench/all.sh: bench/all for real on its quickest benchmark: examples/train's DDP bench
# (1 and 2 ranks through a real crun-rdzvd) and the GPU bench (skipped without a GPU, saying
# so) into a page of the test's own; the page holds the table, the picture it names exists as
# an SVG, --reuse writes the same page again from the kept results, and a bad --only is refused
# by name; bench/store/scale's table and pictures from a recorded real output (scale.out).
# Skipped (77) without gnuplot.
set -u
BUILD=${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}
SRC=${CRUN_SOURCE_DIR:?}
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-bench-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
. "$SRC/tests/lib/expect.sh"
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
command -v gnuplot >/dev/null 2>&1 || "$SRC/tests/lib/skip.sh" "gnuplot not installed (gnuplot-nox)"

# bench/all bounds each benchmark itself (ddp: 180 s); the outer limit only catches a hang.
timeout -s KILL 400 "$SRC/bench/all" "$BUILD" --only ddp,nccl --page "$T/bench.md" \
	--img "$T/img" --keep "$T/keep" >"$T/all.out" 2>"$T/all.err" ||
	{ cat "$T/all.err" >&2; fail "bench/all failed"; }
expect_grep '^## DDP weak scaling of examples/train' "$T/bench.md" "the ddp section"
expect_grep '^`STEPS=40 REPEAT=1 RANKS=.1 2. bench/ddp/run ' "$T/bench.md" "the exact command"
expect_grep '^| 2 | [0-9.]* | ' "$T/bench.md" "the 2-rank row"
expect_grep '!\[ddp\](img/ddp.svg)' "$T/bench.md" "the picture's link"
expect_grep '<svg' "$T/img/ddp.svg" "the picture"
expect_grep "cores (\`nproc\`)" "$T/bench.md" "the machine line"
if command -v nvidia-smi >/dev/null 2>&1; then
	expect_grep '^## NCCL allreduce' "$T/bench.md" "the nccl section"
else
	expect_grep '^Skipped on this machine: needs' "$T/bench.md" "the nccl section's reason"
fi

"$SRC/bench/all" "$BUILD" --reuse "$T/keep" --only ddp,nccl --page "$T/again.md" \
	--img "$T/img2" 2>"$T/again.err" || { cat "$T/again.err" >&2; fail "--reuse failed"; }
sed 's|img2/|img/|g' "$T/again.md" | cmp -s - "$T/bench.md" || {
	diff "$T/bench.md" "$T/again.md" >&2
	fail "--reuse wrote a different page"
}

# bench/store/scale's parser on a recorded real output (tests/bench/scale.out: `bench/store/scale
# build --quick`, 2026-11-27, load average 11.5): the table, both pictures, the lost row's reason.
python3 - "$SRC/tests/bench/scale.out" "$T/scale" <<'PY' || fail "could not write the scale results"
import json, os, sys
os.makedirs(sys.argv[2])
m = {"date": "2026-11-27 18:53 UTC", "nproc": 2, "cpu": "recorded", "kernel": "recorded",
     "load": 11.5, "load_end": 13.8, "minutes": 0.6}
r = {"scale": {"command": "bench/store/scale build --quick", "out": open(sys.argv[1]).read(),
               "error": None, "seconds": 38}}
json.dump({"machine": m, "results": r}, open(os.path.join(sys.argv[2], "results.json"), "w"))
PY
"$SRC/bench/all" "$BUILD" --reuse "$T/scale" --only scale --page "$T/scale.md" \
	--img "$T/simg" 2>"$T/scale.err" || { cat "$T/scale.err" >&2; fail "bench/all --only scale failed"; }
expect_grep '^## The store toward the connection limit' "$T/scale.md" "the scale section"
expect_grep '^| barrier 2,000 connections | [0-9,.]* ms .* | [0-9,.]* ms .* | [0-9,.]* ms .* | time: ' \
	"$T/scale.md" "the 2,000-connection barrier row, three servers"
expect_grep '^| RSS slope | 1,077 bytes/connection' "$T/scale.md" "the bytes per connection"
expect_grep 'fd limit 20000' "$T/scale.md" "the limit the run met"
expect_grep '^- RSS slope, bytes/conn (TCPStore): a slope on a large base' "$T/scale.md" \
	"the lost row's reason"
! grep -q 'no stated reason' "$T/scale.md" || fail "a lost scale row without a reason"
for p in scale_barrier scale_rss; do
	expect_grep "!\[$p\](simg/$p.svg)" "$T/scale.md" "the $p picture's link"
	# One line per server: crun-rdzvd with each protocol, PyTorch's server.
	expect_grep 'gnuplot_plot_3' "$T/simg/$p.svg" "$p.svg's third line"
done

RC=0
"$SRC/bench/all" "$BUILD" --only ddp,nope --page "$T/x.md" 2>"$T/bad.err" || RC=$?
expect_eq "$RC" 1 "exit status for --only nope"
expect_grep 'unknown benchmark nope' "$T/bad.err" "bench/all's error"
[ ! -e "$T/x.md" ] || fail "a page was written for a bad --only"
echo "bench-all: ok"
