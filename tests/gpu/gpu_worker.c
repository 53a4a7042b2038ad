/* SPDX-License-Identifier: MIT */
/* tests/gpu/gpu_worker.c: a crun worker that checks the device DDP on real device memory. */

/*
 *   gpu_worker probe    print the number of CUDA devices, or exit 77 with the reason
 *   gpu_worker api      argument checks of crun_ddp_cuda_* and of crun_ddp's memory option
 *                       and stream setter, no GPU needed (a cpu communicator)
 *   gpu_worker ddp      device DDP over an nccl communicator of WORLD_SIZE ranks through the
 *                       crun_ddp_cuda_* names: parameters broadcast from rank 0, gradients
 *                       averaged over several buckets (in place and through the flat copy)
 *                       with ranks marking in different orders, no_sync, and the error codes;
 *                       exit 77 without a GPU
 *   gpu_worker ddp-one  the same through crun_ddp_* with CRUN_DDP_MEMORY_CUDA and
 *                       crun_ddp_set_stream()
 * Run under crun, tests/worker/worker_launch, or alone with CRUN_SINGLE=1.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#include <crun/crun.h>
#include <crun/ddp_cuda.h>

#define EXIT_NO_GPU 77
#define NT 5

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
static void expect_values(const float *dev, size_t n, float base, const char *what, int t,
			  cudaStream_t s, float *host)
{
	size_t i;

	CUDA_OK(cudaStreamSynchronize(s));
	CUDA_OK(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
	for (i = 0; i < n; i++) {
		float want = base + (float)(i % 7);

		if (fabsf(host[i] - want) > 1e-5f * (1.0f + fabsf(want))) {
			fail("%s of tensor %d, element %zu: %g, expected %g", what, t, i,
			     (double)host[i], (double)want);
		}
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

static void dut_destroy(struct dut *u)
{
	if (u->one) {
		crun_ddp_destroy(u->d);
	} else {
		crun_ddp_cuda_destroy(u->legacy);
	}
}

static int ddp(bool one)
{
	static const size_t n[NT] = {1000, 3, 70000, 17, 5000};
	struct crun_comm_opts copts = {.backend = CRUN_BACKEND_NCCL, .timeout_ms = 60000,
				       .name = "gpu_ddp"};
	struct crun_ddp_opts dopts = {.bucket_cap_bytes = 64 << 10, .first_bucket_bytes = 4 << 10};
	float *param[NT], *grad[NT], *pa, *ga, *pb, *gb, *host;
	struct dut u = {.one = one}, *d = &u;
	struct crun_store *st;
	struct crun_comm *comm;
	cudaStream_t s;
	int rank, world, ndev, t, k, step, order[NT];

	if (probe() != 0) {
		return EXIT_NO_GPU;
	}
	setup(&st);
	rank = crun_rank();
	world = crun_world_size();
	CUDA_OK(cudaGetDeviceCount(&ndev));
	CUDA_OK(cudaSetDevice(crun_local_rank() % ndev));
	EXPECT(crun_comm_create(st, rank, world, &copts, &comm), 0);
	CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	host = malloc(70000 * sizeof(float));
	if (host == NULL) {
		fail("out of memory");
	}
	/* Tensors 0, 1 back to back (one span); 2 alone; 3, 4 with a gap (a flat copy). */
	CUDA_OK(cudaMalloc((void **)&pa, (n[0] + n[1]) * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&ga, (n[0] + n[1]) * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&param[2], n[2] * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&grad[2], n[2] * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&pb, (n[3] + n[4] + 64) * sizeof(float)));
	CUDA_OK(cudaMalloc((void **)&gb, (n[3] + n[4] + 64) * sizeof(float)));
	param[0] = pa;
	grad[0] = ga;
	param[1] = pa + n[0];
	grad[1] = ga + n[0];
	param[3] = pb;
	grad[3] = gb;
	param[4] = pb + n[3] + 64;
	grad[4] = gb + n[3] + 64;

	EXPECT(dut_create(d, comm, &dopts, s), 0);
	for (t = 0; t < NT; t++) {
		EXPECT(dut_register(d, param[t], grad[t], n[t]), t);
		fill(param[t], n[t], 100.0f * (float)(rank + 1) + (float)t, s, host);
	}
	EXPECT(dut_register(d, NULL, grad[0], 1), -EINVAL);
	EXPECT(dut_broadcast(d), 0);
	EXPECT(dut_register(d, param[0], grad[0], 1), -EBUSY);
	if (dut_buckets(d) < 3) {
		fail("%d buckets, expected at least 3 with a 4 KiB first and 64 KiB cap",
		     dut_buckets(d));
	}
	for (t = 0; t < NT; t++) {
		expect_values(param[t], n[t], 100.0f + (float)t, "broadcast parameter", t, s, host);
	}
	for (step = 0; step < 3; step++) {
		for (t = 0; t < NT; t++) {
			/* Each rank marks in its own order (a multiplier prime to NT makes a
			 * permutation): the buckets still pair up. */
			order[t] = (t * (rank % (NT - 1) + 1) + step) % NT;
		}
		for (k = 0; k < NT; k++) {
			t = order[k];
			fill(grad[t], n[t], (float)((rank + 1) * (step + 1)), s, host);
			EXPECT(dut_ready(d, t), 0);
		}
		EXPECT(dut_ready(d, order[0]), -EALREADY);
		EXPECT(dut_ready(d, NT), -EINVAL);
		EXPECT(dut_sync(d), 0);
		for (t = 0; t < NT; t++) {
			expect_values(grad[t], n[t], (float)(step + 1) * (float)(world + 1) / 2.0f,
				      "averaged gradient", t, s, host);
		}
	}
	/* no_sync: gradients stay local; sync is immediate. */
	dut_no_sync(d, true);
	for (t = 0; t < NT; t++) {
		fill(grad[t], n[t], (float)(rank + 7), s, host);
		EXPECT(dut_ready(d, t), 0);
	}
	EXPECT(dut_sync(d), 0);
	for (t = 0; t < NT; t++) {
		expect_values(grad[t], n[t], (float)(rank + 7), "no_sync gradient", t, s, host);
	}
	dut_no_sync(d, false);
	/* A step where sync marks everything itself. */
	for (t = 0; t < NT; t++) {
		fill(grad[t], n[t], (float)(rank + 1), s, host);
	}
	EXPECT(dut_sync(d), 0);
	for (t = 0; t < NT; t++) {
		expect_values(grad[t], n[t], (float)(world + 1) / 2.0f, "gradient after sync", t,
			      s, host);
	}
	printf("gpu_worker: rank %d: %s ok (world %d, %d buckets)\n", rank,
	       one ? "ddp-one" : "ddp", world, dut_buckets(d));
	dut_destroy(d);
	cudaFree(pa);
	cudaFree(ga);
	cudaFree(param[2]);
	cudaFree(grad[2]);
	cudaFree(pb);
	cudaFree(gb);
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
