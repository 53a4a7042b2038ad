#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/plottrain.sh: examples/plot_train draws the curves of a short real run: crun
# --standalone runs examples/train (2 workers, 3 epochs on the bundled digits), its output as crun
# printed it goes to plot_train, and an SVG with three curves must come out;
# output with no epoch line and a bad -o name are refused with a message. Skipped (77) without
# gnuplot.
. "$(dirname "$0")/lib.sh"

PLOT=$SRC/examples/plot_train
command -v gnuplot >/dev/null 2>&1 || "$SRC/tests/lib/skip.sh" "gnuplot not installed (gnuplot-nox)"

run_crun 240 "$T/run.out" "$T/run.err" --standalone --nproc-per-node 2 --no-python \
	"$BUILD/examples/train" --epochs 3
[ "$RC" -eq 0 ] || { cat "$T/run.err" >&2; fail "the training run exited $RC"; }
expect_eq "$(grep -c 'epoch [0-9]* step' "$T/run.out")" 3 "epoch lines in the run's output"

"$PLOT" -o "$T/curve.svg" "$T/run.out" >"$T/plot.out" 2>&1 || { cat "$T/plot.out" >&2; fail "plot_train failed"; }
[ -s "$T/curve.svg" ] || fail "plot_train made no image"
expect_grep '<svg' "$T/curve.svg" "the image"
expect_grep 'test accuracy' "$T/curve.svg" "the image's accuracy curve"
expect_eq "$(cat "$T/plot.out")" "plot_train: $T/curve.svg: 3 epochs" "plot_train's report"
# From standard input, as PNG.
"$PLOT" -o "$T/curve.png" <"$T/run.out" >/dev/null 2>&1 || fail "plot_train from stdin failed"
expect_eq "$(head -c 4 "$T/curve.png" | tail -c 3)" "PNG" "the PNG signature"

# Bad input: a log without epoch lines, a name that is neither .svg nor .png.
echo "no training here" >"$T/empty.log"
if "$PLOT" -o "$T/x.svg" "$T/empty.log" 2>"$T/bad.err"; then fail "a log without epochs was plotted"; fi
expect_grep 'no "epoch E step S' "$T/bad.err" "plot_train's error"
[ ! -e "$T/x.svg" ] || fail "an image was made from a log without epochs"
RC=0
"$PLOT" -o "$T/x.gif" "$T/run.out" 2>"$T/bad.err" || RC=$?
expect_eq "$RC" 2 "exit status for -o x.gif"
expect_grep 'must end in .svg or .png' "$T/bad.err" "plot_train's error"
echo "plottrain: ok"
