/* SPDX-License-Identifier: MIT */
/* tests/gpu/gpu_worker.c: a crun worker that checks the device DDP on real device memory. */

/*
 *   gpu_worker probe    print the number of CUDA devices, or exit 77 with the reason
 *   gpu_worker api      argument checks of crun_ddp_cuda_* and of crun_ddp's memory option
 *                       and stream setter, no GPU needed (a cpu communicator)
 *   gpu_worker ddp      device DDP over an nccl communicator of WORLD_SIZE ranks through the
 *                       crun_ddp_cuda_* names: ten tensors in four buckets (in place, through
 *                       the flat buffer with several small tensors, a tensor above the cap,
 *                       contiguous gradients with scattered parameters), parameters broadcast
 *                       from rank 0, exact averages with ranks marking in different orders,
 *                       no_sync, the error codes (-EBUSY for a broadcast in a partly marked
 *                       step), a slow gradient producer, a sync that must not wait on the
 *                       host (the compute stream gated shut until it returns), then STEPS steps of training whose parameters must match one
 *                       process trained on the whole batch, and (several ranks) a bucket plan
 *                       that differs between ranks. Exit 77 without a GPU, or when a node has
 *                       more ranks than GPUs (NCCL refuses two ranks on one GPU; it says so).
 *                       On one rank the DDP has nothing to reduce: the flat buffers and
 *                       NCCL are exercised from two ranks (two GPUs) on.
 *   gpu_worker ddp-one  the same through crun_ddp_* with CRUN_DDP_MEMORY_CUDA and
 *                       crun_ddp_set_stream()
 * Run under crun, tests/worker/worker_launch, or alone with CRUN_SINGLE=1.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#include <crun/crun.h>
#include <crun/ddp_cuda.h>

#include "tests/lib/hashf.h"

#define EXIT_NO_GPU 77

static int g_rank;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "gpu_worker: rank %d: FAIL: %s\n", g_rank, msg);
	exit(1);
}

#define CUDA_OK(call)                                                                              \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			fail("%s: %s", #call, cudaGetErrorString(e_));                            \
		}                                                                                  \
	} while (0)

#define EXPECT(expr, want)                                                                         \
	do {                                                                                       \
		int got_ = (expr);                                                                 \
		if (got_ != (want)) {                                                              \
			fail("%s: got %d (%s), expected %d (%s)", #expr, got_,                    \
			     crun_strerror(got_), (want), crun_strerror(want));                    \
		}                                                                                  \
	} while (0)

static int probe(void)
{
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		fprintf(stderr, "gpu_worker: no GPU available: %s\n",
			e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
		return EXIT_NO_GPU;
	}
	printf("%d\n", n);
	return 0;
}

static void setup(struct crun_store **st)
{
	char err[512];
	int rc;

	rc = crun_init(NULL, err, sizeof(err));
	if (rc < 0) {
		fail("crun_init: %s", err);
	}
	g_rank = crun_rank();
	rc = crun_worker_store_open(st, err, sizeof(err));
	if (rc < 0) {
		fail("store: %s", err);
	}
}

/* What a device DDP refuses, without touching a GPU. */
static int api(void)
{
	struct crun_comm_opts copts = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 60000,
				       .name = "gpu_api"};
	struct crun_ddp_cuda *d = (struct crun_ddp_cuda *)&copts;
	struct crun_ddp_opts dopts = CRUN_DDP_OPTS_INIT;
	struct crun_ddp *hd = (struct crun_ddp *)&copts;
	struct crun_store *st;
	struct crun_comm *comm;

	setup(&st);
	EXPECT(crun_comm_create(st, crun_rank(), crun_world_size(), &copts, &comm), 0);
	EXPECT(crun_ddp_cuda_create(NULL, NULL, NULL, &d), -EINVAL);
	EXPECT(crun_ddp_cuda_create(comm, NULL, NULL, NULL), -EINVAL);
	EXPECT(crun_ddp_cuda_create(comm, NULL, NULL, &d), CRUN_EBACKEND);
	if (d != NULL) {
		fail("crun_ddp_cuda_create left *out set after a failure");
	}
	crun_ddp_cuda_destroy(NULL);
	crun_ddp_cuda_set_no_sync(NULL, true);
	EXPECT(crun_ddp_cuda_bucket_count(NULL), 0);
	if (crun_ddp_cuda_last_error(NULL) == NULL) {
		fail("crun_ddp_cuda_last_error(NULL) is NULL");
	}
	/* The one API: device memory needs an nccl communicator; host memory has no stream. */
	dopts.memory = CRUN_DDP_MEMORY_CUDA;
	EXPECT(crun_ddp_create(comm, &dopts, &hd), CRUN_EBACKEND);
	if (hd != NULL) {
		fail("crun_ddp_create left *out set after a failure");
	}
	dopts.memory = (enum crun_ddp_memory)7;
	EXPECT(crun_ddp_create(comm, &dopts, &hd), -EINVAL);
	dopts.memory = CRUN_DDP_MEMORY_HOST;
	dopts.struct_size = 1;
	EXPECT(crun_ddp_create(comm, &dopts, &hd), -EINVAL);
	dopts.struct_size = sizeof(dopts);
	EXPECT(crun_ddp_create(comm, &dopts, &hd), 0);
	EXPECT(crun_ddp_set_stream(hd, NULL), CRUN_EBACKEND);
	EXPECT(crun_ddp_set_stream(NULL, NULL), -EINVAL);
	if (strcmp(crun_ddp_last_error(hd), "") != 0 || strcmp(crun_ddp_last_error(NULL), "") != 0) {
		fail("crun_ddp_last_error: \"%s\" before any failure", crun_ddp_last_error(hd));
	}
	crun_ddp_destroy(hd);
	crun_comm_destroy(comm);
	crun_store_close(st);
	crun_finish();
	printf("gpu_worker: rank %d: api ok\n", g_rank);
	return 0;
}

/*
 * The tensors of the ddp modes, their sizes in floats and the gaps (floats) left after each in
 * the one parameter block and the one gradient block they are carved from. With a 4 KiB first
 * bucket and a 64 KiB cap the buckets are, last registered first:
 *   0 = {9, 8}        gradients back to back (reduced in place), parameters not (the
 *                     broadcast goes through the flat buffer)
 *   1 = {7, 6, 5}     back to back in both: in place
 *   2 = {4}           larger than the cap: a bucket of its own
 *   3 = {3, 2, 1, 0}  four small tensors with gaps: the flat buffer, both ways
 */
#define NT 10
#define NBUCKETS 4
static const size_t tn[NT] = {100, 7, 300, 33, 70000, 500, 11, 900, 200, 50};
static const size_t pgap[NT] = {64, 64, 64, 64, 64, 0, 0, 64, 64, 0};
static const size_t ggap[NT] = {64, 64, 64, 64, 64, 0, 0, 64, 0, 0};
#define NMAX 70000
#define STEPS 5   /* training steps compared with the single-process reference */
#define SAMPLES 3 /* samples per rank per step */

static void fill(float *dev, size_t n, float base, cudaStream_t s, float *host)
{
	size_t i;

	for (i = 0; i < n; i++) {
		host[i] = base + (float)(i % 7);
	}
	CUDA_OK(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, s));
	/* Pageable source: the call returns once @host has been read, so it can be reused. */
}

/* Reads after the compute stream @s has finished (it is non-blocking: no implicit order). */
static void download(float *host, const float *dev, size_t n, cudaStream_t s)
{
	CUDA_OK(cudaStreamSynchronize(s));
	CUDA_OK(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static void expect_values(const float *dev, size_t n, float base, const char *what, int t,
			  cudaStream_t s, float *host)
{
	size_t i;

	download(host, dev, n, s);
	for (i = 0; i < n; i++) {
		float want = base + (float)(i % 7);

		if (fabsf(host[i] - want) > 1e-5f * (1.0f + fabsf(want))) {
			fail("%s of tensor %d, element %zu: %g, expected %g", what, t, i,
			     (double)host[i], (double)want);
		}
	}
}

/* @g = (1/@denom) sum over samples [s0, s0 + ns) of tanh(3 p a_s) - t_s: depends on @p. */
static void host_grad(const float *p, float *g, int t, uint64_t s0, size_t ns, float denom)
{
	size_t i, s;

	for (i = 0; i < tn[t]; i++) {
		g[i] = 0.0f;
	}
	for (s = s0; s < s0 + ns; s++) {
		for (i = 0; i < tn[t]; i++) {
			float a = hashf(s, (uint64_t)t, i), tg = hashf(s, (uint64_t)t + 100, i);

			g[i] += (tanhf(p[i] * a * 3.0f) - tg) / denom;
		}
	}
}

static void host_sgd(float *p, const float *g, float *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		v[i] = 0.9f * v[i] + g[i];
		p[i] -= 0.1f * v[i];
	}
}

/* The device DDP under test: the crun_ddp_cuda_* names (@one false) or crun_ddp_* (true). */
struct dut {
	bool one;
	struct crun_ddp_cuda *legacy;
	struct crun_ddp *d;
};

static int dut_create(struct dut *u, struct crun_comm *comm, struct crun_ddp_opts *o,
		      cudaStream_t s)
{
	int rc;

	if (!u->one) {
		return crun_ddp_cuda_create(comm, o, s, &u->legacy);
	}
	o->memory = CRUN_DDP_MEMORY_CUDA;
	rc = crun_ddp_create(comm, o, &u->d);
	return rc < 0 ? rc : crun_ddp_set_stream(u->d, s);
}

static int dut_register(struct dut *u, float *p, float *g, size_t n)
{
	return u->one ? crun_ddp_register(u->d, p, g, n)
		      : crun_ddp_cuda_register(u->legacy, p, g, n);
}

static int dut_broadcast(struct dut *u)
{
	return u->one ? crun_ddp_broadcast_params(u->d)
		      : crun_ddp_cuda_broadcast_params(u->legacy);
}

static int dut_ready(struct dut *u, int t)
{
	return u->one ? crun_ddp_grad_ready(u->d, t) : crun_ddp_cuda_grad_ready(u->legacy, t);
}

static int dut_sync(struct dut *u)
{
	return u->one ? crun_ddp_sync(u->d) : crun_ddp_cuda_sync(u->legacy);
}

static void dut_no_sync(struct dut *u, bool on)
{
	if (u->one) {
		crun_ddp_set_no_sync(u->d, on);
	} else {
		crun_ddp_cuda_set_no_sync(u->legacy, on);
	}
}

static int dut_buckets(struct dut *u)
{
	return u->one ? crun_ddp_bucket_count(u->d) : crun_ddp_cuda_bucket_count(u->legacy);
}

static const char *dut_error(struct dut *u)
{
	return u->one ? crun_ddp_last_error(u->d) : crun_ddp_cuda_last_error(u->legacy);
}

static void dut_destroy(struct dut *u)
{
	if (u->one) {
		crun_ddp_destroy(u->d);
	} else {
		crun_ddp_cuda_destroy(u->legacy);
	}
}

/*
 * @steps steps of training, each rank on its own SAMPLES samples, the gradients averaged by
 * the DDP and SGD applied on the host; the parameters must match one process that trains on
 * all world * SAMPLES samples of each step (as tests/worker's ddp-equiv does on the host).
 * Returns the largest relative difference.
 */
static double train_matches_one_process(struct dut *d, float **param, float **grad,
					cudaStream_t s, int rank, int world)
{
	float *hp[NT], *hg[NT], *hv[NT], *rp[NT], *rg[NT], *rv[NT];
	double maxerr = 0.0, e;
	int t, k, step;
	size_t i;

	for (t = 0; t < NT; t++) {
		hp[t] = calloc(tn[t], sizeof(float));
		hg[t] = calloc(tn[t], sizeof(float));
		hv[t] = calloc(tn[t], sizeof(float));
		rp[t] = calloc(tn[t], sizeof(float));
		rg[t] = calloc(tn[t], sizeof(float));
		rv[t] = calloc(tn[t], sizeof(float));
		if (!hp[t] || !hg[t] || !hv[t] || !rp[t] || !rg[t] || !rv[t]) {
			fail("out of memory");
		}
		/* Ranks start apart; the broadcast must give every rank rank 0's values. */
		for (i = 0; i < tn[t]; i++) {
			hp[t][i] = hashf(1000 + (uint64_t)rank, (uint64_t)t, i);
			rp[t][i] = hashf(1000, (uint64_t)t, i);
		}
		CUDA_OK(cudaMemcpyAsync(param[t], hp[t], tn[t] * sizeof(float),
					cudaMemcpyHostToDevice, s));
	}
	EXPECT(dut_broadcast(d), 0);
	for (step = 0; step < STEPS; step++) {
		uint64_t s0 = (uint64_t)(step * world + rank) * SAMPLES;

		for (k = 0; k < NT; k++) {
			/* Backward's order (last registered first), rotated per rank. */
			t = (NT - 1 - k + rank) % NT;
			download(hp[t], param[t], tn[t], s);
			host_grad(hp[t], hg[t], t, s0, SAMPLES, (float)SAMPLES);
			CUDA_OK(cudaMemcpyAsync(grad[t], hg[t], tn[t] * sizeof(float),
						cudaMemcpyHostToDevice, s));
			EXPECT(dut_ready(d, t), 0);
		}
		EXPECT(dut_sync(d), 0);
		for (t = 0; t < NT; t++) {
			download(hg[t], grad[t], tn[t], s);
			host_sgd(hp[t], hg[t], hv[t], tn[t]);
			CUDA_OK(cudaMemcpyAsync(param[t], hp[t], tn[t] * sizeof(float),
						cudaMemcpyHostToDevice, s));
			/* The reference: one process, every rank's samples of this step. */
			host_grad(rp[t], rg[t], t, (uint64_t)step * (uint64_t)world * SAMPLES,
				  (size_t)world * SAMPLES, (float)(world * SAMPLES));
			host_sgd(rp[t], rg[t], rv[t], tn[t]);
		}
	}
	for (t = 0; t < NT; t++) {
		download(hp[t], param[t], tn[t], s);
		for (i = 0; i < tn[t]; i++) {
			e = fabs((double)hp[t][i] - (double)rp[t][i]) / (1.0 + fabs((double)rp[t][i]));
			maxerr = e > maxerr ? e : maxerr;
		}
		free(hp[t]);
		free(hg[t]);
		free(hv[t]);
		free(rp[t]);
		free(rg[t]);
		free(rv[t]);
	}
	return maxerr;
}

/* Ranks that register different sizes: CRUN_ECONFIG naming both plans, not a hang. */
static void plans_differ(bool one, struct crun_comm *comm, float *p, float *g, int rank)
{
	struct crun_ddp_opts o = CRUN_DDP_OPTS_INIT;
	struct dut u = {.one = one};

	EXPECT(dut_create(&u, comm, &o, NULL), 0);
	EXPECT(dut_register(&u, p, g, 100 + (size_t)rank), 0);
	EXPECT(dut_broadcast(&u), CRUN_ECONFIG);
	if (strstr(dut_error(&u), "bucket plan differs from rank") == NULL) {
		fail("plan mismatch: \"%s\"", dut_error(&u));
	}
	EXPECT(dut_sync(&u), CRUN_ECONFIG);
	dut_destroy(&u);
	EXPECT(crun_comm_barrier(comm), 0);
}

/* A host function on the compute stream: what follows it on the stream runs after @arg ms. */
static void CUDART_CB stream_sleep(void *arg)
{
	struct timespec ts = {0, *(const long *)arg * 1000000L};

	nanosleep(&ts, NULL);
}

/*
 * A slow gradient producer: every gradient is written by the compute stream @s only after a
 * 300 ms pause there (a host function, then the copy queued behind it), while the program
 * marks it ready at once, as backward does with kernels still running. The DDP must make its
 * communication wait for the event recorded on @s: one that read the gradients when they
 * were marked would average the stale values written before (1e6) and fail here.
 */
static void slow_producer_step(struct dut *d, float **grad, cudaStream_t s, int rank, int world,
			       float *host)
{
	static long delay_ms = 300;
	int t;

	for (t = 0; t < NT; t++) {
		fill(grad[t], tn[t], 1e6f, s, host);
	}
	CUDA_OK(cudaStreamSynchronize(s));
	CUDA_OK(cudaLaunchHostFunc(s, stream_sleep, &delay_ms));
	for (t = NT - 1; t >= 0; t--) {
		fill(grad[t], tn[t], (float)(3 * (rank + 1)), s, host);
		EXPECT(dut_ready(d, t), 0);
	}
	EXPECT(dut_sync(d), 0);
	for (t = 0; t < NT; t++) {
		expect_values(grad[t], tn[t], 3.0f * (float)(world + 1) / 2.0f,
			      "averaged gradient of a slow producer", t, s, host);
	}
}

/* A host function that holds the compute stream until the program opens the gate (120 s). */
static void CUDART_CB stream_gate(void *arg)
{
	struct timespec ts = {0, 1000000};
	int i;

	for (i = 0; i < 120000 && !__atomic_load_n((const int *)arg, __ATOMIC_ACQUIRE); i++) {
		nanosleep(&ts, NULL);
	}
}

/*
 * crun_ddp_sync() must not wait on the host for the step's collectives: the gradients are
 * written, then the compute stream @s is shut by a gate (a host function) in front of the
 * events the DDP records when they are marked ready, and the gate opens only once sync has
 * returned. A sync that waited for the data would wait for a stream that waits for it, until
 * the communicator's timeout. Afterwards @s still sees the averages (it waits for the step
 * on the device).
 */
static void gated_step(struct dut *d, float **grad, cudaStream_t s, int rank, int world,
		       float *host)
{
	static int gate;
	int t;

	for (t = 0; t < NT; t++) {
		fill(grad[t], tn[t], (float)(5 * (rank + 1)), s, host);
	}
	__atomic_store_n(&gate, 0, __ATOMIC_RELEASE);
	CUDA_OK(cudaLaunchHostFunc(s, stream_gate, &gate));
	for (t = NT - 1; t >= 0; t--) {
		EXPECT(dut_ready(d, t), 0);
	}
	EXPECT(dut_sync(d), 0);
	if (cudaStreamQuery(s) != cudaErrorNotReady) {
		fail("the compute stream ran past its closed gate");
	}
	__atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
	for (t = 0; t < NT; t++) {
		expect_values(grad[t], tn[t], 5.0f * (float)(world + 1) / 2.0f,
			      "averaged gradient of a step synced with the stream gated", t, s, host);
	}
}

static int ddp(bool one)
{
	struct crun_comm_opts copts = {.backend = CRUN_BACKEND_NCCL, .timeout_ms = 60000,
				       .name = "gpu_ddp"};
	struct crun_ddp_opts dopts = {.bucket_cap_bytes = 64 << 10, .first_bucket_bytes = 4 << 10};
	float *param[NT], *grad[NT], *pblock, *gblock, *host;
	struct dut u = {.one = one}, *d = &u;
	size_t poff = 0, goff = 0;
	struct crun_store *st;
	struct crun_comm *comm;
	cudaStream_t s;
	int rank, world, ndev, dev, t, k, step, order[NT];
	char why[512];
	double err;

	if (probe() != 0) {
		return EXIT_NO_GPU;
	}
	setup(&st);
	rank = crun_rank();
	world = crun_world_size();
	CUDA_OK(cudaGetDeviceCount(&ndev));
	if (crun_local_world_size() > ndev) {
		/* NCCL refuses two ranks of one communicator on one GPU: nothing to test here. */
		fprintf(stderr,
			"gpu_worker: rank %d: %s on %d ranks per node needs a GPU per rank "
			"(NCCL refuses two ranks on one GPU); %d visible: skipped\n",
			rank, one ? "ddp-one" : "ddp", crun_local_world_size(), ndev);
		crun_store_close(st);
		crun_finish();
		return EXIT_NO_GPU;
	}
	/* The one rule for "my device", current before anything is created. */
	dev = crun_cuda_device(why, sizeof(why));
	if (dev < 0) {
		fail("crun_cuda_device: %s", why);
	}
	CUDA_OK(cudaSetDevice(dev));
	EXPECT(crun_comm_create(st, rank, world, &copts, &comm), 0);
	CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	host = malloc(NMAX * sizeof(float));
	if (host == NULL) {
		fail("out of memory");
	}
	for (t = 0; t < NT; t++) {
		poff += tn[t] + pgap[t];
		goff += tn[t] + ggap[t];
	}
	CUDA_OK(cudaMalloc((void **)&pblock, poff * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&gblock, goff * sizeof(float)));
	for (t = 0, poff = 0, goff = 0; t < NT; t++) {
		param[t] = pblock + poff;
		grad[t] = gblock + goff;
		poff += tn[t] + pgap[t];
		goff += tn[t] + ggap[t];
	}

	EXPECT(dut_create(d, comm, &dopts, s), 0);
	for (t = 0; t < NT; t++) {
		EXPECT(dut_register(d, param[t], grad[t], tn[t]), t);
		fill(param[t], tn[t], 100.0f * (float)(rank + 1) + (float)t, s, host);
	}
	EXPECT(dut_register(d, NULL, grad[0], 1), -EINVAL);
	EXPECT(dut_broadcast(d), 0);
	EXPECT(dut_register(d, param[0], grad[0], 1), -EBUSY);
	if (dut_buckets(d) != NBUCKETS) {
		fail("%d buckets, expected %d with a 4 KiB first and 64 KiB cap", dut_buckets(d),
		     NBUCKETS);
	}
	if (one && (crun_ddp_bucket_of(d->d, 9) != 0 || crun_ddp_bucket_of(d->d, 5) != 1 ||
		    crun_ddp_bucket_of(d->d, 4) != 2 || crun_ddp_bucket_of(d->d, 0) != 3)) {
		fail("tensors 9, 5, 4, 0 in buckets %d %d %d %d, expected 0 1 2 3",
		     crun_ddp_bucket_of(d->d, 9), crun_ddp_bucket_of(d->d, 5),
		     crun_ddp_bucket_of(d->d, 4), crun_ddp_bucket_of(d->d, 0));
	}
	for (t = 0; t < NT; t++) {
		expect_values(param[t], tn[t], 100.0f + (float)t, "broadcast parameter", t, s,
			      host);
	}
	for (step = 0; step < 3; step++) {
		for (t = 0; t < NT; t++) {
			/* Each rank marks in its own order (a multiplier prime to NT makes a
			 * permutation): the buckets still pair up. */
			static const int mult[4] = {1, 3, 7, 9};

			order[t] = (t * mult[rank % 4] + step) % NT;
		}
		for (k = 0; k < NT; k++) {
			t = order[k];
			fill(grad[t], tn[t], (float)((rank + 1) * (step + 1)), s, host);
			EXPECT(dut_ready(d, t), 0);
			if (k == 0) {
				/* A partly marked step: no broadcast beside it. */
				EXPECT(dut_broadcast(d), -EBUSY);
			}
		}
		EXPECT(dut_ready(d, order[0]), -EALREADY);
		EXPECT(dut_ready(d, NT), -EINVAL);
		EXPECT(dut_sync(d), 0);
		for (t = 0; t < NT; t++) {
			expect_values(grad[t], tn[t], (float)(step + 1) * (float)(world + 1) / 2.0f,
				      "averaged gradient", t, s, host);
		}
	}
	/* no_sync: gradients stay local; sync is immediate. */
	dut_no_sync(d, true);
	for (t = 0; t < NT; t++) {
		fill(grad[t], tn[t], (float)(rank + 7), s, host);
		EXPECT(dut_ready(d, t), 0);
	}
	EXPECT(dut_sync(d), 0);
	for (t = 0; t < NT; t++) {
		expect_values(grad[t], tn[t], (float)(rank + 7), "no_sync gradient", t, s, host);
	}
	dut_no_sync(d, false);
	/* A step where sync marks everything itself. */
	for (t = 0; t < NT; t++) {
		fill(grad[t], tn[t], (float)(rank + 1), s, host);
	}
	EXPECT(dut_sync(d), 0);
	for (t = 0; t < NT; t++) {
		expect_values(grad[t], tn[t], (float)(world + 1) / 2.0f, "gradient after sync", t,
			      s, host);
	}
	slow_producer_step(d, grad, s, rank, world, host);
	gated_step(d, grad, s, rank, world, host);
	/* Training: parameters after STEPS steps against one process on the whole batch. */
	err = train_matches_one_process(d, param, grad, s, rank, world);
	if (err > 1e-5) {
		fail("parameters after %d steps differ from one process's by %.3g (relative)",
		     STEPS, err);
	}
	if (world > 1) {
		plans_differ(one, comm, pblock, gblock, rank);
	}
	printf("gpu_worker: rank %d: %s ok (world %d, %d buckets, %d steps within %.2g of one "
	       "process)\n",
	       rank, one ? "ddp-one" : "ddp", world, dut_buckets(d), STEPS, err);
	dut_destroy(d);
	cudaFree(pblock);
	cudaFree(gblock);
	cudaStreamDestroy(s);
	free(host);
	crun_comm_destroy(comm);
	crun_store_close(st);
	crun_finish();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gpu_worker probe|api|ddp|ddp-one\n");
		return 2;
	}
	if (strcmp(argv[1], "probe") == 0) {
		return probe();
	}
	if (strcmp(argv[1], "api") == 0) {
		return api();
	}
	if (strcmp(argv[1], "ddp") == 0) {
		return ddp(false);
	}
	if (strcmp(argv[1], "ddp-one") == 0) {
		return ddp(true);
	}
	fprintf(stderr, "gpu_worker: unknown mode \"%s\" (probe, api, ddp or ddp-one)\n", argv[1]);
	return 2;
}
