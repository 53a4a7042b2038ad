#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/gpu/run.sh MODE: the 'gpu' suite. Every mode but cli exits 77 (skip) where no GPU is
# visible (GPU_PROBE, tests/gpu/gpu_probe.c) and fails where one is visible but broken.
#   cli        the GPU programs reject bad input (exit 2) and, without a GPU, say so and exit 77;
#              the device DDP's argument checks (cpu communicator). Runs everywhere.
#   curve      examples/train_gpu matches examples/train's loss curve (generated data), one rank
#   curve2     the same on two ranks (skip, saying so, when fewer than two GPUs are visible)
#   ddp        the DDP engine on device memory, through crun_ddp_cuda_* and through crun_ddp_*
#              with CRUN_DDP_MEMORY_CUDA, one rank
#   ddp-multi  the same on one rank per GPU (2..4): flat buffers, NCCL averages, a slow
#              gradient producer, training against one process, the plan check; with one
#              GPU, two ranks share it as two NCCL hosts (NCCL_HOSTID)
#   allreduce  crun_comm_allreduce (nccl) gives the serial reference's sums (non-zero,
#              rank-dependent data) and is within 5% of ncclAllReduce from 256 MiB
#              (bench/nccl/nccl_bench); with one GPU, also the sums of two ranks sharing it
# Programs come from the environment (tests/gpu/meson.build); "none" means not built.
# Knobs: GPU_EPOCHS (curve, default 8), GPU_CURVE_RTOL (relative, default 0.01),
# GPU_CURVE_ATOL (default 0.005), GPU_CHECK_PCT (default 5).
set -u

mode=${1:-}
# The CUDA driver cannot initialise under ASan's default shadow-gap protection.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}protect_shadow_gap=0
export ASAN_OPTIONS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-gpu-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

fail() {
	echo "tests/gpu ($mode): FAIL: $*" >&2
	exit 1
}

skip() {
	echo "tests/gpu ($mode): SKIP: $*" >&2
	exit 77
}

# Run with a deadline: nothing here may hang.
bounded() {
	timeout -k 5 "$@"
}

# Two ranks on one GPU, each its own NCCL "host" (NCCL_HOSTID: NCCL then connects them over
# sockets on lo instead of refusing two ranks of one host on one GPU), each local rank 0 of 1
# for crun: how the multi-rank cases run on the one-GPU machines. Prints the wrapper's path.
emu_wrapper() {
	cat >"$tmp/emu.sh" <<'EOF'
#!/bin/sh
export LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NCCL_HOSTID="crun-emu-host-$RANK"
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NET=Socket
exec "$@"
EOF
	chmod +x "$tmp/emu.sh"
	echo "$tmp/emu.sh"
}

need_built() {
	for p in "$@"; do
		if [ "$p" = none ]; then
			skip "built without CUDA/NCCL/nvcc (configure found none; see docs/gpu.md)"
		fi
	done
}

# The number of usable GPUs. Skip (77) only where no GPU is visible (gpu_probe: no driver
# library and no /dev/nvidia* device, or CUDA_VISIBLE_DEVICES hiding them all). Where one is
# visible, anything that keeps CUDA from using it is a failure naming the cause: the driver
# failing (gpu_probe exits 1: fabric manager, module mismatch, library missing), or the CUDA
# runtime refusing the driver (too old for it). A crash or a hang is a failure too.
gpus() {
	n=$(bounded 90 "$GPU_PROBE" 2>"$tmp/probe.err")
	rc=$?
	[ "$rc" -ne 77 ] || skip "$(cat "$tmp/probe.err")"
	[ "$rc" -eq 0 ] || fail "a GPU is visible but broken (gpu_probe exit $rc): $(cat "$tmp/probe.err")"
	if ! CRUN_SINGLE=1 bounded 90 "$GPU_WORKER" probe >/dev/null 2>"$tmp/rt.err"; then
		fail "a GPU is visible ($(cat "$tmp/probe.err")) but the CUDA runtime cannot use it: $(cat "$tmp/rt.err")"
	fi
	echo "$n"
}

# expect_exit CODE PATTERN CMD...: CMD exits CODE and its stderr matches PATTERN.
expect_exit() {
	want=$1
	pat=$2
	shift 2
	CRUN_SINGLE=1 bounded 60 "$@" >"$tmp/out" 2>"$tmp/err"
	got=$?
	[ "$got" -eq "$want" ] || fail "$*: exit $got, expected $want: $(cat "$tmp/err")"
	grep -q -- "$pat" "$tmp/err" || fail "$*: stderr lacks \"$pat\": $(cat "$tmp/err")"
}

case $mode in
cli)
	need_built "$GPU_TRAIN_GPU" "$GPU_WORKER" "$GPU_BENCH"
	expect_exit 2 '--epochs: expected an integer' "$GPU_TRAIN_GPU" --epochs many
	expect_exit 2 'unexpected argument "extra"' "$GPU_TRAIN_GPU" extra
	expect_exit 2 '--lr: expected a number' "$GPU_TRAIN_GPU" --lr -1
	expect_exit 2 '--max-bytes: expected a number' "$GPU_BENCH" --max-bytes 3T
	expect_exit 2 '--min-bytes 2048 is above --max-bytes 1024' "$GPU_BENCH" --min-bytes 2K \
		--max-bytes 1K
	expect_exit 2 'unknown mode "fly"' "$GPU_WORKER" fly
	CRUN_SINGLE=1 bounded 60 "$GPU_WORKER" api >"$tmp/out" 2>&1 ||
		fail "gpu_worker api: $(cat "$tmp/out")"
	grep -q 'api ok' "$tmp/out" || fail "gpu_worker api: $(cat "$tmp/out")"
	bounded 90 "$GPU_PROBE" >/dev/null 2>"$tmp/probe.err"
	case $? in
	77)
		expect_exit 77 'train_gpu: no GPU available: ' "$GPU_TRAIN_GPU" --epochs 1
		expect_exit 77 'nccl_bench: no GPU available: ' "$GPU_BENCH"
		expect_exit 77 'gpu_worker: no GPU available: ' "$GPU_WORKER" ddp
		;;
	0) echo "tests/gpu (cli): a GPU is visible: the no-GPU messages are not checked" ;;
	*) echo "tests/gpu (cli): a GPU is visible but broken (the other gpu tests fail): $(cat "$tmp/probe.err")" ;;
	esac
	echo "tests/gpu (cli): ok"
	;;
curve | curve2)
	need_built "$GPU_TRAIN_GPU" "$GPU_WORKER" "$GPU_LAUNCH"
	n=$(gpus) || exit $?
	epochs=${GPU_EPOCHS:-8}
	# The data are generated (--synthetic: the same samples in both programs, on every
	# machine; the digits file is not in the tree), and the learning rate is small enough
	# that the loss still falls at every epoch, so every epoch tells two curves apart.
	set -- --epochs "$epochs" --batch-size 32 --hidden 64 --seed 3 --synthetic --lr 0.002
	# Tolerance per figure: GPU_CURVE_ATOL + GPU_CURVE_RTOL * |cpu| (0.005 + 1%). A gradient
	# twice too large (a sum instead of an average over 2 ranks, or a wrong 1/batch) is SGD
	# with twice the learning rate; on the CPU that moves the 2-rank curve by 0.130 at epoch 1
	# (train loss 2.4259 -> 2.2957; allowed 0.054) up to 0.615 at epoch 8 (1.0397 -> 0.4247;
	# allowed 0.015), and the 1-rank curve by 0.251 (2.2009 -> 1.9498) to 0.293 (0.4098 ->
	# 0.1170): every epoch fails. The curves move smoothly with the gradient's scale (0.1%
	# more moves them by at most 0.0008), so rounding differences (cuBLAS sums in another
	# order; no TF32, no FMA) stay far below the tolerance; test_acc moves by 1/359 per flip.
	curve_cmp() { # curve_cmp CPU GPU: every epoch's figures agree
		awk -v rtol="${GPU_CURVE_RTOL:-0.01}" -v atol="${GPU_CURVE_ATOL:-0.005}" \
			-v epochs="$epochs" '
			function bad(a, b) { d = a - b; if (d < 0) d = -d; return d > atol + rtol * (b < 0 ? -b : b) }
			FNR == NR && /^epoch / { c[$2] = $0; ctr[$2] = $6; cte[$2] = $8; cac[$2] = $10; next }
			/^epoch / {
				n++
				if (!($2 in c)) { print "epoch " $2 " missing from the cpu run"; err++; next }
				if (bad($6, ctr[$2]) || bad($8, cte[$2]) || bad($10, cac[$2])) {
					print "epoch " $2 ": cpu [" c[$2] "] gpu [" $0 "]"; err++
				}
			}
			END {
				if (n != epochs) { print "gpu printed " n " epochs of " epochs; err++ }
				exit err > 0
			}' "$1" "$2"
	}
	if [ "$mode" = curve ]; then
		CRUN_SINGLE=1 bounded 300 "$GPU_TRAIN" "$@" >"$tmp/cpu" 2>"$tmp/cpu.err" ||
			fail "train (cpu): $(cat "$tmp/cpu.err")"
		CRUN_SINGLE=1 bounded 300 "$GPU_TRAIN_GPU" "$@" >"$tmp/gpu" 2>"$tmp/gpu.err" ||
			fail "train_gpu: $(cat "$tmp/gpu.err")"
		cat "$tmp/gpu.err"
		paste -d ' ' "$tmp/cpu" "$tmp/gpu" | grep '^epoch' || true
		curve_cmp "$tmp/cpu" "$tmp/gpu" ||
			fail "train_gpu's loss curve differs from train's (1 rank)"
		grep -q '^rank 0 params sha256 [0-9a-f]\{64\}$' "$tmp/gpu" || fail "no params digest"
		echo "tests/gpu (curve): ok over $epochs epochs, 1 rank"
		exit 0
	fi
	if [ "$n" -lt 2 ]; then
		skip "the two-rank curve (the DDP's average over ranks) needs 2 GPUs (NCCL refuses" \
			"two ranks on one GPU), $n visible"
	fi
	# Two ranks: the DDP averages over ranks (a sum would double the gradient).
	bounded 300 "$GPU_LAUNCH" -n 2 --timeout 240 -- "$GPU_TRAIN" "$@" >"$tmp/cpu2" 2>&1 ||
		fail "train (cpu, 2 ranks): $(cat "$tmp/cpu2")"
	bounded 300 "$GPU_LAUNCH" -n 2 --timeout 240 -- "$GPU_TRAIN_GPU" "$@" >"$tmp/gpu2" 2>&1 ||
		fail "train_gpu (2 ranks): $(cat "$tmp/gpu2")"
	sed -n 's/^\[rank 0\] //p' "$tmp/cpu2" >"$tmp/cpu2.0"
	sed -n 's/^\[rank 0\] //p' "$tmp/gpu2" >"$tmp/gpu2.0"
	paste -d ' ' "$tmp/cpu2.0" "$tmp/gpu2.0" | grep '^epoch' || true
	curve_cmp "$tmp/cpu2.0" "$tmp/gpu2.0" ||
		fail "train_gpu's loss curve differs from train's (2 ranks)"
	[ "$(grep -c 'params sha256' "$tmp/gpu2")" -eq 2 ] &&
		[ "$(sed -n 's/.*params sha256 //p' "$tmp/gpu2" | sort -u | wc -l)" -eq 1 ] ||
		fail "the 2 ranks of train_gpu end with different parameters: $(grep sha256 "$tmp/gpu2")"
	echo "tests/gpu (curve2): ok over $epochs epochs, 2 ranks"
	;;
ddp)
	need_built "$GPU_WORKER" "$GPU_LAUNCH"
	n=$(gpus) || exit $?
	for api in ddp ddp-one; do
		CRUN_SINGLE=1 bounded 120 "$GPU_WORKER" $api || fail "gpu_worker $api on one rank"
	done
	echo "tests/gpu (ddp): ok on one rank"
	;;
ddp-multi)
	need_built "$GPU_WORKER" "$GPU_LAUNCH"
	n=$(gpus) || exit $?
	[ "$n" -gt 4 ] && n=4
	if [ "$n" -lt 2 ]; then
		# One GPU: two ranks on it as two NCCL hosts (flat buffers, NCCL averages, the
		# slow gradient producer, training against one process, the plan check).
		w=$(emu_wrapper)
		for api in ddp ddp-one; do
			bounded 300 "$GPU_LAUNCH" -n 2 --timeout 240 -- "$w" "$GPU_WORKER" $api ||
				fail "gpu_worker $api on 2 ranks sharing the one GPU as two NCCL hosts" \
					"(NCCL_HOSTID); if NCCL refused the shared GPU, its words are above"
		done
		echo "tests/gpu (ddp-multi): ok on 2 ranks sharing one GPU (NCCL_HOSTID)"
		exit 0
	fi
	for api in ddp ddp-one; do
		bounded 300 "$GPU_LAUNCH" -n "$n" --timeout 240 -- "$GPU_WORKER" $api ||
			fail "gpu_worker $api on $n ranks"
	done
	echo "tests/gpu (ddp-multi): ok on $n ranks"
	;;
allreduce)
	need_built "$GPU_BENCH" "$GPU_WORKER" "$GPU_LAUNCH"
	n=$(gpus) || exit $?
	# The gate from 256 MiB: one rank's reference is a memcpy (~40 us at 64 MiB on an
	# H100), where a fixed cost of crun's would pass for a defect.
	set -- --min-bytes 64M --max-bytes 512M --iters 10 --warmup 3 --rounds 5 \
		--check "${GPU_CHECK_PCT:-5}" --check-from 256M
	if [ "$n" -lt 2 ]; then
		# The sums of a real NCCL kernel: two ranks sharing the one GPU over sockets (their
		# times are the sockets', so only the sums count: --check 100).
		w=$(emu_wrapper)
		bounded 200 "$GPU_LAUNCH" -n 2 --timeout 180 -- "$w" "$GPU_BENCH" --min-bytes 4K \
			--max-bytes 16M --iters 2 --warmup 1 --rounds 1 --check 100 >"$tmp/emu-sums" 2>&1
		rc=$?
		cat "$tmp/emu-sums"
		if [ "$rc" -ne 0 ] || [ "$(grep -c 'sums against the serial reference: ok' "$tmp/emu-sums")" -ne 2 ]; then
			fail "nccl_bench on 2 ranks sharing the one GPU (NCCL_HOSTID): wrong sums or a failure (above)"
		fi
	fi
	if [ "$n" -ge 2 ]; then
		bounded 500 "$GPU_LAUNCH" -n "$n" --timeout 480 -- "$GPU_BENCH" "$@" ||
			fail "nccl_bench --check on $n ranks: wrong sums, or crun's allreduce more than ${GPU_CHECK_PCT:-5}% slower than NCCL's (see above)"
	else
		CRUN_SINGLE=1 bounded 500 "$GPU_BENCH" "$@" ||
			fail "nccl_bench --check on 1 rank: wrong sums, or crun's allreduce more than ${GPU_CHECK_PCT:-5}% slower than NCCL's (see above)"
	fi
	;;
*)
	echo "usage: tests/gpu/run.sh cli|curve|curve2|ddp|ddp-multi|allreduce" >&2
	exit 2
	;;
esac
