#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/gpu/broken.sh: the GPU tests fail, not skip, where a GPU is visible but CUDA cannot
# use it. tests/gpu/fake_driver's libcuda.so.1 (through LD_LIBRARY_PATH) reports a device to
# gpu_probe, but it is no driver the CUDA runtime can use, so every GPU mode of run.sh must
# exit 1 naming the runtime's complaint; the same with the driver failing cuInit while a
# device node exists cannot be staged here (no /dev/nvidia* to create), so gpu-probe covers
# that rule. Environment: as run.sh, plus FAKE_DRIVER_DIR and GPU_RUN (run.sh).
set -u

if [ "$GPU_WORKER" = none ]; then
	echo "tests/gpu (broken): built without CUDA/NCCL: SKIP" >&2
	exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-gpu-broken.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
modes="ddp ddp-multi allreduce"
[ "$GPU_TRAIN_GPU" = none ] || modes="curve curve2 $modes"
for mode in $modes; do
	LD_LIBRARY_PATH=$FAKE_DRIVER_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} FAKE_CU_COUNT=1 \
		timeout -k 5 120 sh "$GPU_RUN" "$mode" >"$tmp/out" 2>&1
	rc=$?
	cat "$tmp/out"
	if [ "$rc" -ne 1 ] || ! grep -q 'FAIL: a GPU is visible' "$tmp/out"; then
		echo "tests/gpu (broken): run.sh $mode with a visible GPU CUDA cannot use: exit $rc, expected 1 (FAIL naming the cause)" >&2
		exit 1
	fi
done
echo "tests/gpu (broken): ok ($modes fail as they should)"
