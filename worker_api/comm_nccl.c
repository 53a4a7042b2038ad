/* SPDX-License-Identifier: MIT */
/* worker_api/comm_nccl.c: the nccl backend: a non-blocking NCCL comm polled with deadlines. */

/*
 * NCCL and the CUDA runtime are not linked: every call goes through the function tables of
 * worker_api/gpu_loader.h (g->cu, g->nc), loaded when the first nccl communicator is made.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <crun/comm.h>
#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/clock.h"
#include "worker_api/comm_internal.h"
#include "worker_api/gpu_loader.h"

struct nccl {
	const struct gpu_cuda *cu; /* the loaded runtime (gpu_loader.h) */
	const struct gpu_nccl *nc;
	ncclComm_t comm;
	cudaStream_t own;    /* created here, destroyed on destroy */
	cudaStream_t stream; /* where collectives are enqueued: own or the program's */
	float *token;	     /* one device float for barrier */
	int device;
};

/* One bridge per foreign error system: NCCL and CUDA results become CRUN_ENCCL / CRUN_ECUDA
 * with the library's own words in the comm's diag. c->impl is set before any call. */
static int nccl_fail(struct crun_comm *c, ncclComm_t comm, ncclResult_t r, const char *call)
{
	const struct gpu_nccl *nc = ((struct nccl *)c->impl)->nc;
	const char *last = comm != NULL ? nc->ncclGetLastError(comm) : NULL;

	return diag_set(&c->diag, CRUN_ENCCL, "comm %s: rank %d: %s: %s%s%s", c->name, c->rank,
			call, nc->ncclGetErrorString(r),
			last != NULL && *last != '\0' ? ": " : "", last != NULL ? last : "");
}

static int cuda_fail(struct crun_comm *c, cudaError_t e, const char *call)
{
	const struct gpu_cuda *cu = ((struct nccl *)c->impl)->cu;

	return diag_set(&c->diag, CRUN_ECUDA, "comm %s: rank %d: %s: %s", c->name, c->rank, call,
			cu->cudaGetErrorString(e));
}

/* NCCL_TRY(c, comm, ncclAllReduce, (args...), rc, label): call g->nc's @fn with @args. */
#define NCCL_TRY(c, comm, fn, args, rc, label)                                                     \
	do {                                                                                       \
		ncclResult_t r_ = ((struct nccl *)(c)->impl)->nc->fn args;                         \
		if (r_ != ncclSuccess && r_ != ncclInProgress) {                                   \
			(rc) = nccl_fail((c), (comm), r_, #fn #args);                              \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* CUDA_TRY(c, cudaSetDevice, (args...), rc, label): call g->cu's @fn with @args. */
#define CUDA_TRY(c, fn, args, rc, label)                                                           \
	do {                                                                                       \
		cudaError_t e_ = ((struct nccl *)(c)->impl)->cu->fn args;                          \
		if (e_ != cudaSuccess) {                                                           \
			(rc) = cuda_fail((c), e_, #fn #args);                                      \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

static void pause_briefly(void)
{
	/* NCCL offers no descriptor to wait on: poll its state every 100 us. */
	struct timespec ts = {0, 100000};

	nanosleep(&ts, NULL);
}

/*
 * Between polls: yield for the first 2 ms of a wait, then sleep. A collective on a GPU often
 * completes in tens of microseconds, so sleeping 100 us (plus timer slack) at once would add
 * most of that to its latency and keep crun_comm_allreduce() from matching a direct
 * ncclAllReduce (bench/nccl); a long wait still costs no CPU.
 */
static void pause_since(int64_t start_ns)
{
	if (crun_now_ns() - start_ns < 2000000) {
		sched_yield();
		return;
	}
	pause_briefly();
}

/* Wait until the communicator has no operation in progress, or @deadline. */
static int wait_comm(struct crun_comm *c, ncclComm_t comm, int64_t deadline, const char *what)
{
	const struct gpu_nccl *nc = ((struct nccl *)c->impl)->nc;
	int64_t start = crun_now_ns();
	ncclResult_t st;

	for (;;) {
		if (nc->ncclCommGetAsyncError(comm, &st) != ncclSuccess) {
			return nccl_fail(c, comm, ncclInternalError, "ncclCommGetAsyncError");
		}
		if (st == ncclSuccess) {
			return 0;
		}
		if (st != ncclInProgress) {
			return nccl_fail(c, comm, st, what);
		}
		if (crun_now_ms() >= deadline) {
			return diag_set(&c->diag, -ETIMEDOUT,
					"comm %s: rank %d: %s: no progress within %d ms", c->name,
					c->rank, what, c->timeout_ms);
		}
		pause_since(start);
	}
}

/* Wait until the stream drained, watching for asynchronous NCCL errors, or @deadline. */
static int wait_stream(struct crun_comm *c, struct nccl *g, int64_t deadline, const char *what)
{
	int64_t start = crun_now_ns();
	ncclResult_t st;
	cudaError_t e;
	int rc;

	rc = wait_comm(c, g->comm, deadline, what);
	if (rc < 0) {
		return rc;
	}
	for (;;) {
		e = g->cu->cudaStreamQuery(g->stream);
		if (e == cudaSuccess) {
			return 0;
		}
		if (e != cudaErrorNotReady) {
			return cuda_fail(c, e, "cudaStreamQuery");
		}
		if (g->nc->ncclCommGetAsyncError(g->comm, &st) == ncclSuccess && st != ncclSuccess &&
		    st != ncclInProgress) {
			return nccl_fail(c, g->comm, st, what);
		}
		if (crun_now_ms() >= deadline) {
			return diag_set(&c->diag, -ETIMEDOUT,
					"comm %s: rank %d: %s: not complete within %d ms", c->name,
					c->rank, what, c->timeout_ms);
		}
		pause_since(start);
	}
}

static ncclDataType_t nccl_dt(enum crun_dtype dt)
{
	return dt == CRUN_DTYPE_FLOAT64 ? ncclFloat64 : ncclFloat32;
}

static ncclRedOp_t nccl_op(enum crun_redop op)
{
	return op == CRUN_REDOP_AVG ? ncclAvg : ncclSum;
}

/* After a failure the communicator is aborted, so no kernel waits forever on a dead peer. */
static int done(struct crun_comm *c, struct nccl *g, int rc)
{
	if (rc < 0 && g->comm != NULL) {
		g->nc->ncclCommAbort(g->comm);
		g->comm = NULL;
	}
	return rc;
}

static int nccl_allreduce(struct crun_comm *c, const void *send, void *recv, size_t count,
			  enum crun_dtype dt, enum crun_redop op)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	int rc = 0;

	CUDA_TRY(c, cudaSetDevice, (g->device), rc, out);
	NCCL_TRY(c, g->comm, ncclAllReduce,
		 (send, recv, count, nccl_dt(dt), nccl_op(op), g->comm, g->stream), rc, out);
	rc = wait_stream(c, g, deadline, "ncclAllReduce");
out:
	return done(c, g, rc);
}

static int nccl_broadcast(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
			  int root)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	int rc = 0;

	CUDA_TRY(c, cudaSetDevice, (g->device), rc, out);
	NCCL_TRY(c, g->comm, ncclBroadcast, (buf, buf, count, nccl_dt(dt), root, g->comm, g->stream),
		 rc, out);
	rc = wait_stream(c, g, deadline, "ncclBroadcast");
out:
	return done(c, g, rc);
}

static int nccl_allgather(struct crun_comm *c, const void *send, void *recv, size_t count,
			  enum crun_dtype dt)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	int rc = 0;

	CUDA_TRY(c, cudaSetDevice, (g->device), rc, out);
	NCCL_TRY(c, g->comm, ncclAllGather, (send, recv, count, nccl_dt(dt), g->comm, g->stream), rc,
		 out);
	rc = wait_stream(c, g, deadline, "ncclAllGather");
out:
	return done(c, g, rc);
}

static int nccl_reduce_scatter(struct crun_comm *c, const void *send, void *recv, size_t recvcount,
			       enum crun_dtype dt, enum crun_redop op)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	int rc = 0;

	CUDA_TRY(c, cudaSetDevice, (g->device), rc, out);
	NCCL_TRY(c, g->comm, ncclReduceScatter,
		 (send, recv, recvcount, nccl_dt(dt), nccl_op(op), g->comm, g->stream), rc, out);
	rc = wait_stream(c, g, deadline, "ncclReduceScatter");
out:
	return done(c, g, rc);
}

static int nccl_barrier(struct crun_comm *c)
{
	struct nccl *g = c->impl;

	return nccl_allreduce(c, g->token, g->token, 1, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
}

static void nccl_destroy(struct crun_comm *c)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;

	if (g == NULL) {
		return;
	}
	g->cu->cudaSetDevice(g->device);
	if (g->comm != NULL) {
		/* Flush, then free; a communicator that cannot finish in time is aborted. */
		ncclResult_t r =
			c->poisoned == 0 ? g->nc->ncclCommFinalize(g->comm) : ncclInvalidUsage;

		if ((r == ncclSuccess || r == ncclInProgress) &&
		    wait_comm(c, g->comm, deadline, "ncclCommFinalize") == 0) {
			g->nc->ncclCommDestroy(g->comm);
		} else {
			g->nc->ncclCommAbort(g->comm);
		}
	}
	if (g->own != NULL) {
		g->cu->cudaStreamDestroy(g->own);
	}
	g->cu->cudaFree(g->token);
	free(g);
	c->impl = NULL;
}

static const struct comm_ops nccl_ops = {
	.allreduce = nccl_allreduce,
	.broadcast = nccl_broadcast,
	.allgather = nccl_allgather,
	.reduce_scatter = nccl_reduce_scatter,
	.barrier = nccl_barrier,
	.destroy = nccl_destroy,
};

int comm_nccl_gpu_visible(void)
{
	const struct gpu_cuda *cu;
	const struct gpu_nccl *nc;
	struct crun_diag d = {0};
	int n = 0;

	/* Without the libraries there is no nccl backend to choose; say why at debug level. */
	if (gpu_cuda_load(&cu, &d) < 0 || gpu_nccl_load(&nc, &d) < 0) {
		log_debug("comm: backend auto: %s", d.msg);
		return 0;
	}
	/* Without a driver the runtime reports an error here; it does not crash. */
	return cu->cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int comm_nccl_set_stream(struct crun_comm *c, void *stream)
{
	struct nccl *g = c->impl;

	g->stream = stream != NULL ? (cudaStream_t)stream : g->own;
	return 0;
}

void *comm_nccl_get_stream(const struct crun_comm *c)
{
	const struct nccl *g = c->impl;

	return g->stream;
}

/* Rank 0 makes the unique id and publishes it; the others wait for it. */
static int exchange_id(struct crun_comm *c, struct crun_store *st, ncclUniqueId *id,
		       int64_t deadline)
{
	char key[COMM_MAX_NAME + 64];
	const char *keys[1] = {key};
	ncclResult_t r;
	size_t len;
	void *val;
	int rc, ms;

	rc = comm_key(c, key, sizeof(key), "nccl_id");
	if (rc < 0) {
		return rc;
	}
	if (c->rank == 0) {
		r = ((struct nccl *)c->impl)->nc->ncclGetUniqueId(id);
		if (r != ncclSuccess) {
			return nccl_fail(c, NULL, r, "ncclGetUniqueId");
		}
		rc = crun_store_set(st, key, id, sizeof(*id));
		if (rc < 0) {
			return diag_set(&c->diag, rc, "comm %s: rank 0: publish %s: %s", c->name,
					key, crun_strerror(rc));
		}
		return 0;
	}
	ms = (int)(deadline - crun_now_ms());
	rc = crun_store_wait(st, keys, 1, ms > 0 ? ms : 1);
	if (rc == 0) {
		rc = crun_store_get(st, key, &val, &len);
	}
	if (rc < 0) {
		return diag_set(&c->diag, rc,
				"comm %s: rank %d: waiting for rank 0's NCCL id (%s): %s", c->name,
				c->rank, key, crun_strerror(rc));
	}
	if (len != sizeof(*id)) {
		free(val);
		return diag_set(&c->diag, -EPROTO, "comm %s: rank %d: %s: %zu bytes, expected %zu",
				c->name, c->rank, key, len, sizeof(*id));
	}
	memcpy(id, val, sizeof(*id));
	free(val);
	return 0;
}

int comm_nccl_init(struct crun_comm *c, struct crun_store *st)
{
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	const char *lr = getenv("LOCAL_RANK");
	const struct gpu_cuda *cu;
	const struct gpu_nccl *nc;
	ncclUniqueId id;
	struct nccl *g;
	cudaError_t e;
	int ndev = 0, rc = 0;

	if (gpu_cuda_load(&cu, &c->diag) < 0 || gpu_nccl_load(&nc, &c->diag) < 0) {
		diag_prefix(&c->diag, "comm %s: rank %d: backend nccl", c->name, c->rank);
		return CRUN_EBACKEND;
	}
	e = cu->cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		return diag_set(&c->diag, CRUN_ENODEV, "comm %s: rank %d: backend nccl: %s",
				c->name, c->rank,
				e != cudaSuccess ? cu->cudaGetErrorString(e) : "no CUDA device");
	}
	g = calloc(1, sizeof(*g));
	if (g == NULL) {
		return -ENOMEM;
	}
	g->cu = cu;
	g->nc = nc;
	c->impl = g;
	c->ops = &nccl_ops;
	g->device = (lr != NULL ? atoi(lr) : 0) % ndev;
	if (g->device < 0) {
		g->device = 0;
	}
	CUDA_TRY(c, cudaSetDevice, (g->device), rc, err);
	CUDA_TRY(c, cudaStreamCreateWithFlags, (&g->own, cudaStreamNonBlocking), rc, err);
	g->stream = g->own;
	CUDA_TRY(c, cudaMalloc, ((void **)&g->token, sizeof(float)), rc, err);
	CUDA_TRY(c, cudaMemset, (g->token, 0, sizeof(float)), rc, err);
	rc = exchange_id(c, st, &id, deadline);
	if (rc < 0) {
		goto err;
	}
	config.blocking = 0;
	NCCL_TRY(c, g->comm, ncclCommInitRankConfig, (&g->comm, c->size, id, c->rank, &config),
		 rc, err);
	rc = wait_comm(c, g->comm, deadline, "ncclCommInitRankConfig");
	if (rc < 0) {
		goto err;
	}
	/* As for cpu: nobody returns before every rank has joined this generation. */
	rc = nccl_barrier(c);
	if (rc < 0) {
		goto err;
	}
	return 0;
err:
	if (g->comm != NULL) {
		g->nc->ncclCommAbort(g->comm);
		g->comm = NULL;
	}
	c->poisoned = rc;
	nccl_destroy(c);
	c->ops = NULL;
	return rc;
}
