/* SPDX-License-Identifier: MIT */
/* worker_api/comm_nccl.c: the nccl backend: NCCL communicators set up and polled with deadlines. */

/*
 * NCCL and the CUDA runtime are not linked: every call goes through the function tables of
 * worker_api/gpu_loader.h (g->cu, g->nc), loaded when the first nccl communicator is made.
 *
 * Two NCCL communicators per crun one. The first is made non-blocking
 * (ncclCommInitRankConfig, blocking = 0), so that a rank that never comes cannot hold
 * crun_comm_create() past its deadline: its state is polled (ncclCommGetAsyncError). But a
 * non-blocking communicator starts a thread of NCCL's for every collective (NCCL 2.28:
 * ncclGroupEndInternal, ~30 us each), so the collectives run on a second one, split off the
 * first (ncclCommSplit, every rank the same colour) with blocking = 1 in its own config.
 * The split is itself non-blocking: NCCL runs it on a thread and reports on the parent
 * (ncclAsyncLaunch(..., parent): the group's blocking mode is the parent's), so it is polled
 * to the same deadline; NCCL writes the child to its pointer when the split is done (always,
 * failed or not). On a timeout the parent is aborted first, which raises the child's abort
 * flag too and joins the split's thread, then the child, if any, is aborted. Once the split
 * is done the parent is finalised and freed. See docs/gpu.md for what a blocking collective
 * can and cannot time out on.
 *
 * A blocking communicator's collective can itself block (NCCL connects to peers lazily
 * inside it, before it returns), so each call on @comm is armed on the communicator's
 * watchdog (nccl_watchdog.h), which aborts it at the deadline: call_begin(), call_end().
 *
 * Every collective waits for its stream before it returns, except the queue-only allreduce
 * of the device DDP (nccl_allreduce_enqueue(), behind comm_allreduce_enqueue()), whose
 * completion nccl_wait() waits for with the same deadline, polling and abort.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <crun/comm.h>
#include <crun/error.h>
#include <crun/store.h>
#include <crun/worker.h>

#include "src/common/log.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/clock.h"
#include "worker_api/comm_internal.h"
#include "worker_api/gpu_device.h"
#include "worker_api/gpu_loader.h"
#include "worker_api/nccl_watchdog.h"

/* Allocations found usable by check_buf() and remembered (device or managed memory only). */
#define NCCL_USABLE 8

/*
 * One remembered allocation: its range, device and the driver's buffer id, which is unique
 * in the process and never given again after cudaFree (CU_POINTER_ATTRIBUTE_BUFFER_ID), so
 * an address in the range approves a buffer only while the same id answers for it.
 */
struct nccl_usable {
	uintptr_t base;
	size_t size;	       /* 0: empty slot */
	unsigned long long id;
	int device;
};

struct nccl {
	const struct gpu_cuda *cu; /* the loaded runtime (gpu_loader.h) */
	const struct gpu_nccl *nc;
	ncclComm_t comm;     /* blocking, split off @parent: every collective runs on it */
	ncclComm_t parent;   /* non-blocking, from ncclCommInitRankConfig; freed after the split */
	cudaStream_t own;    /* created here, destroyed on destroy */
	cudaStream_t stream; /* where collectives are enqueued: own or the program's */
	float *token;	     /* one device float for barrier */
	int device;	     /* the creator's current device (crun_cuda_device() under crun) */
	struct nccl_usable usable[NCCL_USABLE];
	unsigned int usable_next;
	struct nccl_watchdog wd; /* the deadline of every blocking call on @comm */
};

/* One bridge per foreign error system: NCCL and CUDA results become CRUN_ENCCL / CRUN_ECUDA
 * with the library's own words in the comm's diag. c->impl is set before any call. */
static int nccl_fail(struct crun_comm *c, ncclComm_t comm, ncclResult_t r, const char *call)
{
	const struct gpu_nccl *nc = ((struct nccl *)c->impl)->nc;
	const char *last = comm != NULL ? nc->ncclGetLastError(comm) : NULL;

	return diag_set(&c->diag, CRUN_ENCCL, "comm %s: rank %d: %s: %s%s%s", c->name, c->rank,
			call, nc->ncclGetErrorString(r), last != NULL && *last != '\0' ? ": " : "",
			last != NULL ? last : "");
}

static int cuda_fail(struct crun_comm *c, cudaError_t e, const char *call)
{
	const struct gpu_cuda *cu = ((struct nccl *)c->impl)->cu;

	return diag_set(&c->diag, CRUN_ECUDA, "comm %s: rank %d: %s: %s", c->name, c->rank, call,
			cu->cudaGetErrorString(e));
}

/* @r, the result of NCCL's @call on @comm: 0 when it succeeded or is in progress. */
static int nccl_check(struct crun_comm *c, ncclComm_t comm, ncclResult_t r, const char *call)
{
	return r == ncclSuccess || r == ncclInProgress ? 0 : nccl_fail(c, comm, r, call);
}

/* @e, the result of the runtime's @call: 0 or CRUN_ECUDA. */
static int cuda_check(struct crun_comm *c, cudaError_t e, const char *call)
{
	return e == cudaSuccess ? 0 : cuda_fail(c, e, call);
}

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

/* Wait until @comm has no operation in progress, or @deadline. */
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

/* Wait until @s drained, watching for asynchronous NCCL errors, or @deadline. */
static int wait_stream(struct crun_comm *c, struct nccl *g, cudaStream_t s, int64_t deadline,
		       const char *what)
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
		e = g->cu->cudaStreamQuery(s);
		if (e == cudaSuccess) {
			return 0;
		}
		if (e != cudaErrorNotReady) {
			return cuda_fail(c, e, "cudaStreamQuery");
		}
		if (g->nc->ncclCommGetAsyncError(g->comm, &st) == ncclSuccess &&
		    st != ncclSuccess && st != ncclInProgress) {
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

/*
 * Make the communicator's device current for one collective; *@prev receives the caller's,
 * which device_leave() puts back, so the program's thread keeps the device it had. Unless
 * nobody in the process has used that device: a thread that never chose one reads device 0,
 * and cudaSetDevice(0) would create a context on GPU 0 in every rank; such a thread is left
 * on the communicator's device, as before.
 */
static int device_enter(struct crun_comm *c, struct nccl *g, int *prev)
{
	int rc;

	*prev = g->device;
	rc = cuda_check(c, g->cu->cudaGetDevice(prev), "cudaGetDevice");
	if (rc < 0) {
		*prev = g->device;
		return rc;
	}
	if (*prev != g->device) {
		rc = cuda_check(c, g->cu->cudaSetDevice(g->device), "cudaSetDevice");
	}
	return rc;
}

static int device_leave(struct crun_comm *c, struct nccl *g, int prev, int rc)
{
	cudaError_t e;

	if (prev != g->device && gpu_cuda_device_active(prev)) {
		e = g->cu->cudaSetDevice(prev);
		if (e != cudaSuccess && rc == 0) {
			rc = cuda_fail(c, e, "cudaSetDevice (back to the caller's device)");
		}
	}
	return rc;
}

/* Before a blocking call on the collectives' communicator: its deadline is the watchdog's. */
static void call_begin(struct nccl *g, int64_t deadline)
{
	nccl_watchdog_arm(&g->wd, g->comm, deadline);
}

/*
 * After it: 0, or -ETIMEDOUT when the watchdog aborted the communicator because the call was
 * still inside NCCL at its deadline (the communicator is gone: g->comm is cleared).
 */
static int call_end(struct crun_comm *c, struct nccl *g, const char *call)
{
	if (!nccl_watchdog_disarm(&g->wd)) {
		return 0;
	}
	g->comm = NULL;
	return diag_set(&c->diag, -ETIMEDOUT,
			"comm %s: rank %d: %s: still inside NCCL after %d ms (a peer that never "
			"joined it: NCCL connects to peers inside a collective): the "
			"communicator was aborted",
			c->name, c->rank, call, c->timeout_ms);
}

/* After a failure the communicator is aborted, so no kernel waits forever on a dead peer. */
static int abort_on_failure(struct nccl *g, int rc)
{
	if (rc < 0 && g->comm != NULL) {
		g->nc->ncclCommAbort(g->comm);
		g->comm = NULL;
	}
	return rc;
}

/* After an enqueue (@r from NCCL's @call), wait for completion on the collectives' stream. */
static int finish_op(struct crun_comm *c, struct nccl *g, int rc, ncclResult_t r, const char *call,
		     int64_t deadline)
{
	if (rc == 0) {
		rc = nccl_check(c, g->comm, r, call);
	}
	if (rc == 0) {
		rc = wait_stream(c, g, g->stream, deadline, call);
	}
	return abort_on_failure(g, rc);
}

static int nccl_allreduce(struct crun_comm *c, const void *send, void *recv, size_t count,
			  enum crun_dtype dt, enum crun_redop op)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	ncclResult_t r = ncclSuccess;
	int prev, rc;

	rc = device_enter(c, g, &prev);
	if (rc == 0) {
		call_begin(g, deadline);
		r = g->nc->ncclAllReduce(send, recv, count, nccl_dt(dt), nccl_op(op), g->comm,
					 g->stream);
		rc = call_end(c, g, "ncclAllReduce");
	}
	rc = finish_op(c, g, rc, r, "ncclAllReduce", deadline);
	return device_leave(c, g, prev, rc);
}

/*
 * Queue an in-place allreduce on @stream (NULL: the collectives' stream) and return without
 * waiting for it (the device DDP queues every ready bucket this way; nccl_wait() waits).
 * As nccl_allreduce() up to the enqueue: the communicator's device for the call and the
 * caller's back. Then NCCL's state is polled until it has left ncclInProgress (at once on
 * the blocking communicator; NCCL_COMM_BLOCKING=0 would make it non-blocking, and NCCL then
 * takes no other call before that), which also reports an asynchronous error already
 * raised. A failure aborts the communicator, as in the synchronous path.
 */
static int nccl_allreduce_enqueue(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
				  enum crun_redop op, void *stream)
{
	struct nccl *g = c->impl;
	cudaStream_t s = stream != NULL ? (cudaStream_t)stream : g->stream;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	ncclResult_t r;
	int prev, rc;

	rc = device_enter(c, g, &prev);
	if (rc == 0) {
		call_begin(g, deadline);
		r = g->nc->ncclAllReduce(buf, buf, count, nccl_dt(dt), nccl_op(op), g->comm, s);
		rc = call_end(c, g, "ncclAllReduce");
		if (rc == 0) {
			rc = nccl_check(c, g->comm, r, "ncclAllReduce");
		}
	}
	if (rc == 0) {
		rc = wait_comm(c, g->comm, deadline, "ncclAllReduce");
	}
	rc = abort_on_failure(g, rc);
	return device_leave(c, g, prev, rc);
}

/*
 * Wait for what was queued on @stream (NULL: the collectives' stream) by @deadline, exactly
 * as a synchronous collective waits for its own: cudaStreamQuery polled beside
 * ncclCommGetAsyncError, the communicator aborted on an error or at the deadline (a peer
 * that never joins a queued collective would otherwise hold its kernel, and this stream,
 * for ever). On the communicator's device, as every call here.
 */
static int nccl_wait(struct crun_comm *c, void *stream, int64_t deadline)
{
	struct nccl *g = c->impl;
	cudaStream_t s = stream != NULL ? (cudaStream_t)stream : g->stream;
	int prev, rc;

	rc = device_enter(c, g, &prev);
	if (rc == 0) {
		rc = wait_stream(c, g, s, deadline, "queued collectives");
	}
	rc = abort_on_failure(g, rc);
	return device_leave(c, g, prev, rc);
}

/*
 * Has @event (the device DDP's end of step, on the collectives' stream) completed? Never
 * waits: the DDP's communication thread asks again until @deadline, beside NCCL's
 * asynchronous error state, and an error or the deadline aborts the communicator (a peer
 * that never joins a queued collective would otherwise hold its kernel, the stream and the
 * compute stream waiting on @event, for ever). cudaEventQuery needs no current device.
 */
static int nccl_query_event(struct crun_comm *c, void *event, int64_t deadline)
{
	struct nccl *g = c->impl;
	ncclResult_t st;
	cudaError_t e;
	int rc = 0;

	e = g->cu->cudaEventQuery((cudaEvent_t)event);
	if (e == cudaSuccess) {
		return 1;
	}
	if (e != cudaErrorNotReady) {
		rc = cuda_fail(c, e, "cudaEventQuery (end of step)");
	} else if (g->nc->ncclCommGetAsyncError(g->comm, &st) == ncclSuccess &&
		   st != ncclSuccess && st != ncclInProgress) {
		rc = nccl_fail(c, g->comm, st, "the step's collectives");
	} else if (crun_now_ms() >= deadline) {
		rc = diag_set(&c->diag, -ETIMEDOUT,
			      "comm %s: rank %d: the step's collectives: not complete within %d ms",
			      c->name, c->rank, c->timeout_ms);
	}
	return abort_on_failure(g, rc);
}

static int nccl_broadcast(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
			  int root)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	ncclResult_t r = ncclSuccess;
	int prev, rc;

	rc = device_enter(c, g, &prev);
	if (rc == 0) {
		call_begin(g, deadline);
		r = g->nc->ncclBroadcast(buf, buf, count, nccl_dt(dt), root, g->comm, g->stream);
		rc = call_end(c, g, "ncclBroadcast");
	}
	rc = finish_op(c, g, rc, r, "ncclBroadcast", deadline);
	return device_leave(c, g, prev, rc);
}

static int nccl_allgather(struct crun_comm *c, const void *send, void *recv, size_t count,
			  enum crun_dtype dt)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	ncclResult_t r = ncclSuccess;
	int prev, rc;

	rc = device_enter(c, g, &prev);
	if (rc == 0) {
		call_begin(g, deadline);
		r = g->nc->ncclAllGather(send, recv, count, nccl_dt(dt), g->comm, g->stream);
		rc = call_end(c, g, "ncclAllGather");
	}
	rc = finish_op(c, g, rc, r, "ncclAllGather", deadline);
	return device_leave(c, g, prev, rc);
}

static int nccl_reduce_scatter(struct crun_comm *c, const void *send, void *recv, size_t recvcount,
			       enum crun_dtype dt, enum crun_redop op)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	ncclResult_t r = ncclSuccess;
	int prev, rc;

	rc = device_enter(c, g, &prev);
	if (rc == 0) {
		call_begin(g, deadline);
		r = g->nc->ncclReduceScatter(send, recv, recvcount, nccl_dt(dt), nccl_op(op),
					     g->comm, g->stream);
		rc = call_end(c, g, "ncclReduceScatter");
	}
	rc = finish_op(c, g, rc, r, "ncclReduceScatter", deadline);
	return device_leave(c, g, prev, rc);
}

static int nccl_barrier(struct crun_comm *c)
{
	struct nccl *g = c->impl;

	return nccl_allreduce(c, g->token, g->token, 1, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
}

/*
 * NCCL takes memory the communicator's device can address (NCCL's "Data Pointers": device
 * memory of that device, managed memory, host memory registered and mapped for it). A plain
 * host pointer would be read by NCCL's kernels as a device address and kill the CUDA
 * context, so it is refused here, before NCCL sees it. Usable device and managed
 * allocations are remembered with their range, device and buffer id (struct nccl_usable),
 * so a program that reduces the same buffers every step asks the driver for one attribute
 * per call (cuPointerGetAttribute: a lookup in the driver's address table on the host, no
 * GPU round trip, as cudaPointerGetAttributes is) instead of the runtime's full attributes;
 * an address whose allocation was freed, and what now lives there (host memory mapped at
 * it, another allocation, on any device), has no id or another one, and is checked afresh.
 */
static bool usable_hit(struct nccl *g, const void *buf)
{
	uintptr_t p = (uintptr_t)buf;
	unsigned long long id;
	unsigned int i;

	for (i = 0; i < NCCL_USABLE; i++) {
		struct nccl_usable *u = &g->usable[i];

		if (u->size == 0 || p < u->base || p - u->base >= u->size) {
			continue;
		}
		if (gpu_cuda_buffer_id(buf, &id) == 0 && id == u->id) {
			return true;
		}
		u->size = 0; /* freed: whatever is there now is not what was approved */
	}
	return false;
}

/* Remember @buf's allocation, when the driver can name it (else it is asked every time). */
static void usable_add(struct nccl *g, const void *buf)
{
	struct nccl_usable u = {.device = g->device};

	if (gpu_cuda_alloc_of(buf, &u.id, &u.base, &u.size) == 0 && u.size > 0) {
		g->usable[g->usable_next++ % NCCL_USABLE] = u;
	}
}

/* Can NCCL use @buf (the @which buffer of @what)? -EFAULT, naming what it is, if not. */
static int nccl_check_buf(struct crun_comm *c, const char *what, const char *which, const void *buf)
{
	struct nccl *g = c->impl;
	struct cudaPointerAttributes a;
	const char *why = NULL;
	cudaError_t e;

	if (usable_hit(g, buf)) {
		return 0;
	}
	memset(&a, 0, sizeof(a));
	e = g->cu->cudaPointerGetAttributes(&a, buf);
	if (e != cudaSuccess) {
		return diag_set(&c->diag, -EFAULT,
				"comm %s: rank %d: %s: %s buffer %p: cudaPointerGetAttributes: %s",
				c->name, c->rank, what, which, buf, g->cu->cudaGetErrorString(e));
	}
	switch (a.type) {
	case cudaMemoryTypeDevice:
		if (a.device != g->device) {
			return diag_set(&c->diag, -EFAULT,
					"comm %s: rank %d: %s: %s buffer %p is on CUDA device %d, "
					"the communicator on device %d: allocate it on the "
					"communicator's device",
					c->name, c->rank, what, which, buf, a.device, g->device);
		}
		break;
	case cudaMemoryTypeManaged:
		break;
	case cudaMemoryTypeHost:
		if (a.devicePointer == buf) {
			return 0; /* registered and mapped: usable, but not remembered */
		}
		why = a.devicePointer == NULL ? "pinned host memory the device cannot address"
					      : "pinned host memory whose device address differs "
						"(pass cudaHostGetDevicePointer()'s)";
		break;
	default:
		why = "host memory (not from cudaMalloc: malloc, the stack, ...)";
		break;
	}
	if (why != NULL) {
		return diag_set(&c->diag, -EFAULT,
				"comm %s: rank %d: %s: %s buffer %p is %s; the nccl backend needs "
				"device memory%s",
				c->name, c->rank, what, which, buf, why,
				c->backend_auto ? ": this communicator is nccl because a GPU is "
						  "visible (backend auto): for host buffers set "
						  "CRUN_BACKEND=cpu or create it with "
						  "CRUN_BACKEND_CPU"
						: " (host buffers need a cpu communicator)");
	}
	usable_add(g, buf);
	return 0;
}

/*
 * Free @*comm: finalised and destroyed when @clean and it completes by @deadline, else
 * aborted. Never fails; a message is only logged at debug level.
 */
static void release(struct crun_comm *c, struct nccl *g, ncclComm_t *comm, bool clean,
		    int64_t deadline)
{
	struct crun_diag saved = c->diag;
	ncclResult_t r;

	if (*comm == NULL) {
		return;
	}
	if (clean) {
		/* Blocking on the collectives' communicator: under the watchdog. */
		nccl_watchdog_arm(&g->wd, *comm, deadline);
		r = g->nc->ncclCommFinalize(*comm);
		if (nccl_watchdog_disarm(&g->wd)) {
			*comm = NULL; /* aborted by the watchdog */
			c->diag = saved;
			return;
		}
		if ((r == ncclSuccess || r == ncclInProgress) &&
		    wait_comm(c, *comm, deadline, "ncclCommFinalize") == 0) {
			g->nc->ncclCommDestroy(*comm);
			*comm = NULL;
			return;
		}
		log_debug("%s", c->diag.msg);
		c->diag = saved; /* the error that led here, if any, is the one to report */
	}
	g->nc->ncclCommAbort(*comm);
	*comm = NULL;
}

static void nccl_destroy(struct crun_comm *c)
{
	struct nccl *g = c->impl;
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	int prev = -1;

	if (g == NULL) {
		return;
	}
	if (g->cu->cudaGetDevice(&prev) != cudaSuccess) {
		prev = -1;
	}
	if (g->device >= 0) {
		g->cu->cudaSetDevice(g->device);
	}
	/* Flush, then free; a communicator that cannot finish in time is aborted. */
	release(c, g, &g->comm, comm_poisoned(c) == 0, deadline);
	release(c, g, &g->parent, false, deadline);
	if (g->own != NULL) {
		g->cu->cudaStreamDestroy(g->own);
	}
	g->cu->cudaFree(g->token);
	nccl_watchdog_stop(&g->wd);
	if (prev >= 0 && g->device >= 0 && prev != g->device && gpu_cuda_device_active(prev)) {
		g->cu->cudaSetDevice(prev);
	}
	free(g);
	c->impl = NULL;
}

static const struct comm_ops nccl_ops = {
	.allreduce = nccl_allreduce,
	.broadcast = nccl_broadcast,
	.allgather = nccl_allgather,
	.reduce_scatter = nccl_reduce_scatter,
	.barrier = nccl_barrier,
	.check_buf = nccl_check_buf,
	.query_event = nccl_query_event,
	.allreduce_enqueue = nccl_allreduce_enqueue,
	.wait = nccl_wait,
	.destroy = nccl_destroy,
};

int comm_nccl_gpu_visible(void)
{
	const struct gpu_cuda *cu;
	const struct gpu_nccl *nc;
	struct crun_diag d = {0};

	/* Without the libraries there is no nccl backend to choose; say why at debug level. */
	if (gpu_cuda_load(&cu, &d) < 0 || gpu_nccl_load(&nc, &d) < 0) {
		log_debug("comm: backend auto: %s", d.msg);
		return 0;
	}
	/* Without a driver the runtime reports an error here; it does not crash. */
	if (gpu_cuda_device_count(cu, &d) < 0) {
		log_debug("comm: backend auto: %s", d.msg);
		return 0;
	}
	return 1;
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

int comm_nccl_device(const struct crun_comm *c)
{
	const struct nccl *g = c->impl;

	return g->device;
}

/* Rank 0 makes the unique id and publishes it; the others wait for it. */
static int exchange_id(struct crun_comm *c, struct crun_store *st, ncclUniqueId *id,
		       int64_t deadline)
{
	char key[COMM_MAX_NAME + 64];
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
	rc = crun_store_wait_get(st, key, &val, &len, ms > 0 ? ms : 1);
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

/*
 * The communicator's device: the calling thread's current one, which must be this process's
 * (crun_cuda_device(): the local rank among the visible devices, more local ranks than
 * devices refused unless CRUN_GPU_SHARING=1). Outside crun (no RANK and WORLD_SIZE: the
 * ranks came from the caller) there is nothing to compare with, and the current device is
 * taken as it is.
 */
static int pick_device(struct crun_comm *c, struct nccl *g)
{
	struct crun_diag d = {0};
	int n, want = -1, cur = -1, rc;

	n = gpu_cuda_device_count(g->cu, &d);
	if (n < 0) {
		return diag_set(&c->diag, n, "comm %s: rank %d: backend nccl: %s", c->name, c->rank,
				d.msg);
	}
	rc = cuda_check(c, g->cu->cudaGetDevice(&cur), "cudaGetDevice");
	if (rc < 0) {
		return rc;
	}
	rc = worker_cuda_device(n, &want, &d);
	if (rc == CRUN_ENOTCRUN) {
		log_debug("comm %s: rank %d: backend nccl: not under crun: the current device, %d",
			  c->name, c->rank, cur);
		g->device = cur;
		return 0;
	}
	if (rc < 0) {
		return diag_set(&c->diag, rc, "comm %s: rank %d: backend nccl: %s", c->name,
				c->rank, d.msg);
	}
	if (want != cur) {
		return diag_set(
			&c->diag, CRUN_ECONFIG,
			"comm %s: rank %d: backend nccl: the calling thread's current CUDA "
			"device is %d, but this process's device is %d (crun_cuda_device(): "
			"local rank %d, %d visible): call cudaSetDevice(crun_cuda_device(NULL, "
			"0)) before crun_comm_create() and allocating buffers",
			c->name, c->rank, cur, want, crun_local_rank(), n);
	}
	g->device = cur;
	return 0;
}

/*
 * Split the blocking communicator the collectives use off the non-blocking parent, polling
 * the parent to @deadline (the header comment says why and how). On failure the caller
 * aborts the parent before the child.
 */
static int split_blocking(struct crun_comm *c, struct nccl *g, int64_t deadline)
{
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	int rc;

	config.blocking = 1;
	rc = nccl_check(c, g->parent,
			g->nc->ncclCommSplit(g->parent, 0, c->rank, &g->comm, &config),
			"ncclCommSplit");
	if (rc == 0) {
		rc = wait_comm(c, g->parent, deadline, "ncclCommSplit");
	}
	if (rc < 0) {
		return rc;
	}
	/* The parent's success was published after NCCL stored the child (release, acquire). */
	if (g->comm == NULL) {
		return nccl_fail(c, g->parent, ncclInternalError,
				 "ncclCommSplit (no communicator)");
	}
	return wait_comm(c, g->comm, deadline, "ncclCommSplit (the new communicator)");
}

int comm_nccl_init(struct crun_comm *c, struct crun_store *st)
{
	int64_t deadline = crun_now_ms() + c->timeout_ms;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	const struct gpu_cuda *cu;
	const struct gpu_nccl *nc;
	ncclUniqueId id;
	struct nccl *g;
	int rc;

	if (gpu_cuda_load(&cu, &c->diag) < 0 || gpu_nccl_load(&nc, &c->diag) < 0) {
		diag_prefix(&c->diag, "comm %s: rank %d: backend nccl", c->name, c->rank);
		return CRUN_EBACKEND;
	}
	g = calloc(1, sizeof(*g));
	if (g == NULL) {
		return -ENOMEM;
	}
	g->cu = cu;
	g->nc = nc;
	c->impl = g;
	c->ops = &nccl_ops;
	g->device = -1;
	rc = nccl_watchdog_start(&g->wd, nc);
	if (rc < 0) {
		rc = diag_set(&c->diag, rc, "comm %s: rank %d: backend nccl: watchdog thread: %s",
			      c->name, c->rank, strerror(-rc));
		goto err;
	}
	rc = pick_device(c, g);
	if (rc < 0) {
		goto err;
	}
	/* The current device is the communicator's: everything below lands on it. */
	if ((rc = cuda_check(c, cu->cudaStreamCreateWithFlags(&g->own, cudaStreamNonBlocking),
			     "cudaStreamCreateWithFlags")) < 0 ||
	    (rc = cuda_check(c, cu->cudaMalloc((void **)&g->token, sizeof(float)), "cudaMalloc")) <
		    0 ||
	    (rc = cuda_check(c, cu->cudaMemset(g->token, 0, sizeof(float)), "cudaMemset")) < 0) {
		goto err;
	}
	g->stream = g->own;
	rc = exchange_id(c, st, &id, deadline);
	if (rc < 0) {
		goto err;
	}
	config.blocking = 0;
	rc = nccl_check(c, g->parent,
			nc->ncclCommInitRankConfig(&g->parent, c->size, id, c->rank, &config),
			"ncclCommInitRankConfig");
	if (rc == 0) {
		rc = wait_comm(c, g->parent, deadline, "ncclCommInitRankConfig");
	}
	if (rc == 0) {
		rc = split_blocking(c, g, deadline);
	}
	if (rc < 0) {
		goto err;
	}
	/* Every rank has taken part in the split: the parent is no longer needed. */
	release(c, g, &g->parent, true, deadline);
	/* As for cpu: nobody returns before every rank has joined this generation. */
	rc = nccl_barrier(c);
	if (rc < 0) {
		goto err;
	}
	return 0;
err:
	/* The parent first: that stops and joins a split still running, which sets g->comm. */
	if (g->parent != NULL) {
		g->nc->ncclCommAbort(g->parent);
		g->parent = NULL;
	}
	if (g->comm != NULL) {
		g->nc->ncclCommAbort(g->comm);
		g->comm = NULL;
	}
	__atomic_store_n(&c->poisoned, rc, __ATOMIC_RELEASE);
	nccl_destroy(c);
	c->ops = NULL;
	return rc;
}
