/* SPDX-License-Identifier: MIT */
/* bench/nccl/nccl_bench.c: allreduce through libcrun-worker (nccl) against ncclAllReduce. */

/*
 * Run as a crun worker, one rank per GPU (or alone with CRUN_SINGLE=1). Every rank builds two
 * communicators over the same GPUs: crun's (crun_comm_create, backend nccl) and a plain NCCL
 * one (ncclCommInitRank with an id passed through the job's store). For each size, float32
 * sum, out of place, both are timed per call: crun_comm_allreduce() returns when the result
 * is on the device, so the direct side is ncclAllReduce + cudaStreamSynchronize. Rounds
 * alternate between the two and the best round of each is kept. Rank 0 prints nccl-tests'
 * figures (algbw = bytes / time, busbw = algbw * 2(n-1)/n) and the ratio crun / direct of
 * busbw (= direct time / crun time: 1.00 is parity). --check PCT exits 1 when a size of at
 * least --check-from bytes is more than PCT % slower through crun, or when either side's
 * sums differ from the serial reference: the send buffers hold non-zero, rank-dependent
 * small integers (exact in float32), and after each size's timing one allreduce of each kind
 * is copied back and compared element by element with the sums computed on the host.
 *
 * Exit status: 0, 1 (check failed), 2 (bad option), 77 (no GPU visible: src/gpu_count.h),
 * 3 (setup failed, including a GPU that is visible but that CUDA cannot use).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <nccl.h>
#pragma GCC diagnostic pop

#include <crun/crun.h>

#include "src/gpu_count.h"

#define EXIT_NO_GPU 77
/* The send data: rank r's element i. Period 29 in i; from 1 to 29, so sums are exact. */
#define VAL_PERIOD 29

static struct {
	size_t min_bytes, max_bytes;
	int iters, warmup, rounds;
	double check_pct;
	size_t check_from;
} opt = {4096, 256u << 20, 20, 5, 5, -1.0, 64u << 20};

static int g_rank;

static void fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void fatal(int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "nccl_bench: rank %d: %s\n", g_rank, msg);
	exit(code);
}

#define CUDA_OK(call)                                                                              \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			fatal(3, "%s: %s", #call, cudaGetErrorString(e_));                        \
		}                                                                                  \
	} while (0)

#define NCCL_OK(comm, call)                                                                        \
	do {                                                                                       \
		ncclResult_t r_ = (call);                                                          \
		if (r_ != ncclSuccess) {                                                           \
			fatal(3, "%s: %s: %s", #call, ncclGetErrorString(r_),                      \
			      (comm) != NULL ? ncclGetLastError(comm) : "");                       \
		}                                                                                  \
	} while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *name, const char *s, size_t lo, size_t hi)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == 0 && end != s && (*end == 'K' || *end == 'k')) {
		v <<= 10;
		end++;
	} else if (errno == 0 && end != s && (*end == 'M' || *end == 'm')) {
		v <<= 20;
		end++;
	} else if (errno == 0 && end != s && (*end == 'G' || *end == 'g')) {
		v <<= 30;
		end++;
	}
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "nccl_bench: --%s: expected a number in [%zu, %zu] (K/M/G suffix), "
				"got \"%s\"\n",
			name, lo, hi, s);
		exit(2);
	}
	return (size_t)v;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: nccl_bench [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N]\n"
		   "                  [--rounds N] [--check PCT] [--check-from BYTES]\n"
		   "Run under crun with one rank per GPU (or CRUN_SINGLE=1 for one GPU).\n");
}

static void parse_args(int argc, char **argv)
{
	static const struct option longs[] = {
		{"min-bytes", required_argument, NULL, 'm'},
		{"max-bytes", required_argument, NULL, 'M'},
		{"iters", required_argument, NULL, 'i'},
		{"warmup", required_argument, NULL, 'w'},
		{"rounds", required_argument, NULL, 'r'},
		{"check", required_argument, NULL, 'c'},
		{"check-from", required_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c, li;

	while ((c = getopt_long(argc, argv, "h", longs, &li)) != -1) {
		switch (c) {
		case 'm':
			opt.min_bytes = parse_size("min-bytes", optarg, 4, (size_t)8 << 30);
			break;
		case 'M':
			opt.max_bytes = parse_size("max-bytes", optarg, 4, (size_t)8 << 30);
			break;
		case 'i':
			opt.iters = (int)parse_size("iters", optarg, 1, 100000);
			break;
		case 'w':
			opt.warmup = (int)parse_size("warmup", optarg, 0, 100000);
			break;
		case 'r':
			opt.rounds = (int)parse_size("rounds", optarg, 1, 1000);
			break;
		case 'c':
			opt.check_pct = (double)parse_size("check", optarg, 0, 100);
			break;
		case 'f':
			opt.check_from = parse_size("check-from", optarg, 4, (size_t)8 << 30);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "nccl_bench: unexpected argument \"%s\"\n", argv[optind]);
		exit(2);
	}
	if (opt.min_bytes > opt.max_bytes) {
		fprintf(stderr, "nccl_bench: --min-bytes %zu is above --max-bytes %zu\n",
			opt.min_bytes, opt.max_bytes);
		exit(2);
	}
}

/* Rank 0's ncclUniqueId through the job's store. */
static void exchange_id(struct crun_store *st, int rank, ncclUniqueId *id)
{
	const char *keys[1] = {"nccl_bench/direct_id"};
	size_t len;
	void *val;
	int rc;

	if (rank == 0) {
		NCCL_OK(NULL, ncclGetUniqueId(id));
		rc = crun_store_set(st, keys[0], id, sizeof(*id));
		if (rc < 0) {
			fatal(3, "store set %s: %s", keys[0], crun_strerror(rc));
		}
		return;
	}
	rc = crun_store_wait(st, keys, 1, 120000);
	if (rc == 0) {
		rc = crun_store_get(st, keys[0], &val, &len);
	}
	if (rc < 0) {
		fatal(3, "waiting for rank 0's NCCL id (%s): %s", keys[0], crun_strerror(rc));
	}
	if (len != sizeof(*id)) {
		free(val);
		fatal(3, "%s: %zu bytes, expected %zu", keys[0], len, sizeof(*id));
	}
	memcpy(id, val, sizeof(*id));
	free(val);
}

static float val(int rank, size_t i)
{
	return (float)(((size_t)(rank + 1) * 7u + (i % VAL_PERIOD) * 13u) % VAL_PERIOD + 1u);
}

/*
 * No usable device: exit 77 only where no GPU is visible at all; a visible GPU that the
 * CUDA runtime cannot use (driver too old, fabric manager, ...) is a setup failure.
 */
static void no_device(cudaError_t e, int ndev)
{
	struct crun_diag d = {0};
	struct gpu_probe p;
	int drv = 0;

	if (gpu_probe(&p, &d) == 0 && p.state == GPU_NONE) {
		fprintf(stderr, "nccl_bench: no GPU available: %s (%s)\n",
			e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device", p.msg);
		exit(EXIT_NO_GPU);
	}
	cudaDriverGetVersion(&drv);
	fprintf(stderr,
		"nccl_bench: a GPU is visible (%s) but the CUDA runtime %d.%d sees %d device(s): "
		"%s (driver supports CUDA %d.%d)\n",
		d.msg[0] != '\0' ? d.msg : p.msg, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10,
		ndev, e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device", drv / 1000,
		drv % 1000 / 10);
	exit(3);
}

/* Copy @dev (@count floats) back and compare with the serial reference @ref. */
static int verify(const char *who, const float *dev, size_t count, const float *ref,
		  float *host)
{
	size_t i;

	CUDA_OK(cudaMemcpy(host, dev, count * sizeof(float), cudaMemcpyDeviceToHost));
	for (i = 0; i < count; i++) {
		if (host[i] != ref[i % VAL_PERIOD]) {
			fprintf(stderr,
				"nccl_bench: rank %d: %s allreduce of %zu bytes: element %zu is %g, "
				"the serial reference %g\n",
				g_rank, who, count * sizeof(float), i, (double)host[i],
				(double)ref[i % VAL_PERIOD]);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct crun_comm_opts copts = {.backend = CRUN_BACKEND_NCCL, .timeout_ms = 120000,
				       .name = "nccl_bench"};
	struct crun_store *st = NULL;
	struct crun_comm *comm = NULL;
	ncclComm_t direct = NULL;
	cudaStream_t stream;
	ncclUniqueId id;
	char err[512];
	float ref[VAL_PERIOD], *host = NULL;
	void *send, *recv;
	size_t bytes, count;
	double t0, t, best_crun, best_direct, factor, algbw_c, algbw_d, ratio;
	int rank, world, ndev = 0, dev, rc, i, r, failed = 0, wrong = 0;
	size_t k;
	cudaError_t e;

	parse_args(argc, argv);
	e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		no_device(e, ndev);
	}
	rc = crun_init(NULL, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "nccl_bench: %s\n", err);
		return 3;
	}
	rank = crun_rank();
	world = crun_world_size();
	g_rank = rank;
	/* The one rule for this rank's device (libcrun-worker(3)): the nccl backend checks it. */
	dev = crun_cuda_device(err, sizeof(err));
	if (dev < 0) {
		fatal(3, "%s", err);
	}
	CUDA_OK(cudaSetDevice(dev));
	rc = crun_worker_store_open(&st, err, sizeof(err));
	if (rc < 0) {
		fatal(3, "%s", err);
	}
	rc = crun_comm_create(st, rank, world, &copts, &comm);
	if (rc < 0) {
		fatal(3, "crun_comm_create: %s: %s", crun_strerror(rc),
		      comm != NULL ? crun_comm_last_error(comm) : "");
	}
	exchange_id(st, rank, &id);
	NCCL_OK(direct, ncclCommInitRank(&direct, world, id, rank));
	CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	CUDA_OK(cudaMalloc(&send, opt.max_bytes));
	CUDA_OK(cudaMalloc(&recv, opt.max_bytes));
	host = malloc(opt.max_bytes);
	if (host == NULL) {
		fatal(3, "out of memory (%zu bytes)", opt.max_bytes);
	}
	for (k = 0; k < opt.max_bytes / sizeof(float); k++) {
		host[k] = val(rank, k);
	}
	CUDA_OK(cudaMemcpy(send, host, opt.max_bytes / sizeof(float) * sizeof(float),
			   cudaMemcpyHostToDevice));
	/* The copy may still be in flight on the legacy stream, which the streams of both
	 * communicators (non-blocking) do not wait for. */
	CUDA_OK(cudaDeviceSynchronize());
	for (k = 0; k < VAL_PERIOD; k++) {
		ref[k] = 0;
		for (r = 0; r < world; r++) {
			ref[k] += val(r, k);
		}
	}
	factor = world > 1 ? 2.0 * (world - 1) / world : 1.0;
	if (rank == 0) {
		printf("# nccl_bench: %d ranks, float32 sum, out of place, %d iters x best of %d "
		       "rounds, per-call completion (busbw factor %s)\n",
		       world, opt.iters, opt.rounds, world > 1 ? "2(n-1)/n" : "1 at one rank");
		printf("%12s %10s %10s %10s %10s %10s %10s %7s\n", "bytes", "crun_us", "crun_algbw",
		       "crun_busbw", "nccl_us", "nccl_algbw", "nccl_busbw", "ratio");
		fflush(stdout);
	}
	for (bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 2) {
		count = bytes / 4;
		best_crun = best_direct = 1e30;
		for (i = 0; i < opt.warmup; i++) {
			rc = crun_comm_allreduce(comm, send, recv, count, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
			if (rc < 0) {
				fatal(3, "crun_comm_allreduce: %s", crun_comm_last_error(comm));
			}
			NCCL_OK(direct, ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, direct,
						      stream));
			CUDA_OK(cudaStreamSynchronize(stream));
		}
		for (r = 0; r < opt.rounds; r++) {
			rc = crun_comm_barrier(comm);
			t0 = now_s();
			for (i = 0; rc == 0 && i < opt.iters; i++) {
				rc = crun_comm_allreduce(comm, send, recv, count, CRUN_DTYPE_FLOAT32,
							 CRUN_REDOP_SUM);
			}
			t = (now_s() - t0) / opt.iters;
			if (rc < 0) {
				fatal(3, "crun_comm_allreduce: %s", crun_comm_last_error(comm));
			}
			best_crun = t < best_crun ? t : best_crun;
			rc = crun_comm_barrier(comm);
			if (rc < 0) {
				fatal(3, "crun_comm_barrier: %s", crun_comm_last_error(comm));
			}
			t0 = now_s();
			for (i = 0; i < opt.iters; i++) {
				NCCL_OK(direct, ncclAllReduce(send, recv, count, ncclFloat32, ncclSum,
							      direct, stream));
				CUDA_OK(cudaStreamSynchronize(stream));
			}
			t = (now_s() - t0) / opt.iters;
			best_direct = t < best_direct ? t : best_direct;
		}
		if (opt.check_pct >= 0) {
			/* The sums, each side once more, from a poisoned recv buffer (the memset
			 * runs on the legacy stream: wait for it). */
			CUDA_OK(cudaMemset(recv, 0xff, bytes));
			CUDA_OK(cudaDeviceSynchronize());
			rc = crun_comm_allreduce(comm, send, recv, count, CRUN_DTYPE_FLOAT32,
						 CRUN_REDOP_SUM);
			if (rc < 0) {
				fatal(3, "crun_comm_allreduce: %s", crun_comm_last_error(comm));
			}
			wrong += verify("crun", recv, count, ref, host);
			CUDA_OK(cudaMemset(recv, 0xff, bytes));
			CUDA_OK(cudaDeviceSynchronize());
			NCCL_OK(direct, ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, direct,
						      stream));
			CUDA_OK(cudaStreamSynchronize(stream));
			wrong += verify("direct NCCL", recv, count, ref, host);
		}
		algbw_c = (double)bytes / best_crun / 1e9;
		algbw_d = (double)bytes / best_direct / 1e9;
		ratio = best_direct / best_crun;
		if (opt.check_pct >= 0 && bytes >= opt.check_from &&
		    ratio < 1.0 - opt.check_pct / 100.0) {
			failed++;
		}
		if (rank == 0) {
			printf("%12zu %10.1f %10.2f %10.2f %10.1f %10.2f %10.2f %7.3f\n", bytes,
			       best_crun * 1e6, algbw_c, algbw_c * factor, best_direct * 1e6,
			       algbw_d, algbw_d * factor, ratio);
			fflush(stdout);
		}
		if (bytes > opt.max_bytes / 2) {
			break;
		}
	}
	if (rank == 0 && opt.check_pct >= 0) {
		printf("# check: crun within %.0f%% of direct NCCL from %zu bytes: %s\n",
		       opt.check_pct, opt.check_from, failed == 0 ? "ok" : "FAILED");
	}
	if (opt.check_pct >= 0) {
		printf("# check: rank %d: sums against the serial reference: %s\n", rank,
		       wrong == 0 ? "ok" : "WRONG");
		failed += wrong;
	}
	free(host);
	cudaFree(send);
	cudaFree(recv);
	cudaStreamDestroy(stream);
	ncclCommDestroy(direct);
	crun_comm_destroy(comm);
	crun_store_close(st);
	crun_finish();
	return failed == 0 ? 0 : 1;
}
