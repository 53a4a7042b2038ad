#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/gpu/build_paths.sh: the GPU programs find the CUDA runtime -Dcuda-root found, and the
# installed crun-worker.pc names no CUDA path of the build machine. Built GPU programs carry a
# run path to the runtime's directory (CUDA_LIBDIR), so they start where CUDA is outside the
# loader's cache (exit 127 before); libcrun-worker loads CUDA at run time, so its .pc file
# links nothing of CUDA. Environment: CUDA_LIBDIR (meson's cuda_libdir; empty: CUDA found
# through CUDA_PATH), PC_FILE, and the programs: GPU_WORKER, GPU_TRAIN_GPU (none: not built).
set -u

if [ "$GPU_WORKER" = none ] || [ -z "$CUDA_LIBDIR" ]; then
	echo "tests/gpu (build paths): no CUDA found under -Dcuda-root: SKIP" >&2
	exit 77
fi
command -v readelf >/dev/null 2>&1 || { echo "readelf (binutils) missing: SKIP" >&2; exit 77; }
rc=0
for prog in "$GPU_WORKER" "$GPU_TRAIN_GPU"; do
	[ "$prog" = none ] && continue
	rp=$(readelf -d "$prog" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p')
	case ":$rp:" in
	*":$CUDA_LIBDIR:"*) echo "ok: $prog: run path $rp" ;;
	*) echo "FAIL: $prog: run path '$rp' lacks $CUDA_LIBDIR (libcudart's directory)" >&2; rc=1 ;;
	esac
done
if grep -n -e "$CUDA_LIBDIR" -e cudart "$PC_FILE" >&2; then
	echo "FAIL: $PC_FILE names the build machine's CUDA (lines above)" >&2
	rc=1
else
	echo "ok: $PC_FILE names no CUDA path"
fi
exit $rc
