#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/worker/no_cuda.sh: libcrun-worker runs CPU jobs where CUDA and NCCL cannot be found.
#   1. libcrun-worker.so has no NEEDED entry for libcudart, libnccl or libcuda (readelf -d):
#      the CUDA runtime and NCCL are loaded at run time (worker_api/gpu_loader.c).
#   2. In a private mount namespace (unshare -m) the directories the loader loads them from
#      (its debug log says which), cuda-root's lib dirs and the ld.so cache's are covered with
#      an empty tmpfs (a system directory: /dev/null over each CUDA library file instead);
#      then a 2-rank CPU job (examples/hello with a barrier, and worker_helper comm-auto: an
#      auto-chosen communicator, an allreduce and a host DDP step) must succeed, and with
#      CRUN_BACKEND=nccl the error must name the missing library (built without NCCL: say so).
# Skips (77) only when mount namespaces or mounts are not permitted.
# Environment (tests/worker/meson.build): WORKER_LIB, WORKER_LAUNCH, WORKER_HELPER,
# WORKER_HELLO, WORKER_HAVE_NCCL (0/1), WORKER_CUDA_ROOT.
set -u

tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-nocuda.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

fail() {
	echo "no_cuda: FAIL: $*" >&2
	exit 1
}

skip() {
	echo "no_cuda: SKIP: $*" >&2
	exit 77
}

command -v readelf >/dev/null 2>&1 || skip "readelf not found"
readelf -d "$WORKER_LIB" >"$tmp/dyn" || fail "readelf -d $WORKER_LIB"
if grep -E 'NEEDED.*\[(libcudart|libnccl|libcuda)[.]' "$tmp/dyn"; then
	fail "$WORKER_LIB links CUDA or NCCL (see the NEEDED lines above)"
fi
echo "no_cuda: no NEEDED entry for CUDA or NCCL in $WORKER_LIB"

command -v unshare >/dev/null 2>&1 || skip "unshare not found"
mkdir "$tmp/mnt"
unshare -m sh -c "mount -t tmpfs tmpfs '$tmp/mnt'" 2>"$tmp/unshare.err" ||
	skip "cannot mount in a private mount namespace: $(cat "$tmp/unshare.err")"

# Where the CUDA libraries are: what the loader opens, cuda-root, the ld.so cache.
CRUN_LOG_LEVEL=debug CRUN_BACKEND=auto timeout 60 "$WORKER_LAUNCH" -n 1 --timeout 50 -- \
	"$WORKER_HELPER" comm-auto >"$tmp/probe" 2>&1 || fail "probe run: $(cat "$tmp/probe")"
{
	sed -n 's/.* gpu: loaded \(.*\) ([^)]*)$/\1/p' "$tmp/probe"
	ldconfig -p 2>/dev/null | sed -n 's/.*\(libcudart\|libnccl\|libcuda\)[.]so.* => //p'
	for d in "$WORKER_CUDA_ROOT/lib64" "$WORKER_CUDA_ROOT/lib"; do
		[ -d "$d" ] && echo "$d/libcudart.so"
	done
} | while read -r f; do
	dirname "$(readlink -f "$f")"
done | sort -u >"$tmp/dirs"
echo "no_cuda: hiding: $(tr '\n' ' ' <"$tmp/dirs")"

# The job, run inside the namespace: hide, then the checks (each exit code is the verdict).
cat >"$tmp/inside.sh" <<'EOF'
set -u
while read -r d; do
	[ -d "$d" ] || continue
	if [ -e "$d/libc.so.6" ]; then
		# A system directory: cover only the CUDA libraries in it.
		for f in "$d"/libcudart.so* "$d"/libnccl.so* "$d"/libcuda.so*; do
			[ -e "$f" ] && { mount --bind /dev/null "$f" || exit 90; }
		done
	else
		mount -t tmpfs tmpfs "$d" || exit 90
	fi
done <"$1/dirs"
timeout 120 "$WORKER_LAUNCH" -n 2 --timeout 100 -- "$WORKER_HELLO" --barrier \
	>"$1/hello" 2>&1 || exit 91
CRUN_BACKEND=auto timeout 120 "$WORKER_LAUNCH" -n 2 --timeout 100 -- "$WORKER_HELPER" comm-auto \
	>"$1/auto" 2>&1 || exit 92
CRUN_BACKEND=nccl timeout 120 "$WORKER_LAUNCH" -n 2 --timeout 100 -- "$WORKER_HELPER" comm-auto \
	>"$1/nccl" 2>&1 && exit 93
exit 0
EOF
unshare -m sh "$tmp/inside.sh" "$tmp"
rc=$?
case $rc in
0) ;;
90) fail "could not cover a CUDA library directory" ;;
91) fail "examples/hello on 2 ranks without CUDA: $(cat "$tmp/hello")" ;;
92) fail "worker_helper comm-auto on 2 ranks without CUDA: $(cat "$tmp/auto")" ;;
93) fail "CRUN_BACKEND=nccl succeeded without CUDA: $(cat "$tmp/nccl")" ;;
*) fail "the namespace run exited $rc" ;;
esac
[ "$(grep -c 'passed the barrier' "$tmp/hello")" -eq 2 ] || fail "hello: $(cat "$tmp/hello")"
[ "$(grep -c 'backend cpu' "$tmp/auto")" -eq 2 ] || fail "comm-auto: $(cat "$tmp/auto")"
[ "$(grep -c 'comm-auto ok' "$tmp/auto")" -eq 2 ] || fail "comm-auto: $(cat "$tmp/auto")"
if [ "$WORKER_HAVE_NCCL" = 1 ]; then
	# dlopen's reason varies with how the library was hidden: "libcudart.so.N: cannot open
	# shared object file" (a covered directory) or "/usr/lib/.../libcudart.so.N: file too
	# short" (/dev/null bound over it in a system directory). Both name libcudart.
	want='backend nccl: cannot load the CUDA runtime: .*libcudart'
else
	want='backend nccl: this libcrun-worker was built without NCCL'
fi
grep -q "$want" "$tmp/nccl" || fail "CRUN_BACKEND=nccl: no \"$want\" in: $(cat "$tmp/nccl")"
echo "no_cuda: a 2-rank CPU job ran with the CUDA libraries hidden; nccl said: $(grep -m1 "$want" "$tmp/nccl")"
echo "no_cuda: ok"
