/* SPDX-License-Identifier: MIT */
/* tests/comm/fake_gpu/fake_nccl.c: a one-rank NCCL without a GPU, for libcrun-worker's loader. */

/*
 * Built as libnccl.so.<major> beside fake_cudart.c's runtime. One process, but the states
 * NCCL 2.28 has: a non-blocking communicator answers ncclInProgress and completes after a few
 * ncclCommGetAsyncError polls; ncclCommSplit of a non-blocking parent reports on the parent
 * and writes the child to its pointer when done (or when the parent is aborted, as NCCL's
 * split thread does). A host pointer handed to a collective aborts the process, as a real
 * NCCL kernel would kill the CUDA context. A collective is queued on its stream as the fake
 * runtime's work (fake_cuda_launch(): it computes its result when the stream reaches it, at
 * once unless the runtime is held) and tells the runtime it was queued
 * (fake_cuda_stream_queue()). Knobs:
 * FAKE_NCCL_HANG=init|split (that step never completes), or =coll: a collective on a blocking
 * communicator never returns (a peer that never arrives while NCCL connects inside the call)
 * until ncclCommAbort() from another thread makes it return ncclInternalError; FAKE_NCCL_RANKS=N (default 1):
 * accept communicators of N ranks, whose other ranks are taken to hold the same data as this
 * one (a sum is N times it, an average and a gather are copies of it), or, for an allreduce
 * with FAKE_NCCL_PEER_ADD=V, this one's plus V (so an average differs from the input: x +
 * (N-1)V/N).
 * fake_nccl_stat(NAME) counts: "coll_nonblocking", "coll_blocking", "split", "abort",
 * "finalize", "destroy", "live". fake_nccl_async_error(R) makes ncclCommGetAsyncError
 * report R on every communicator from now on (a peer's failure; 0 ends it).
 */
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

#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_POLLS 3

enum pending { NONE, INIT, SPLIT, COLL };

struct ncclComm {
	int blocking;
	int device;
	int nranks, rank;
	ncclResult_t state;
	enum pending pending;
	int polls;
	ncclComm_t *split_out; /* SPLIT: where the child goes */
	ncclComm_t split_child;
	int aborted; /* ncclCommAbort() was called (atomic) */
	int in_call; /* a blocking collective is inside: the abort leaves the free to it */
};

static struct {
	int coll_nonblocking, coll_blocking, split, abort, finalize, destroy, live;
} st;
static ncclResult_t async_error; /* fake_nccl_async_error() */

FAKE_EXPORT int fake_nccl_stat(const char *name);
FAKE_EXPORT void fake_nccl_async_error(ncclResult_t r);

/* fake_cudart.c: @what was queued on @s; @fn(@arg) queued on @s as a kernel. */
void fake_cuda_stream_queue(cudaStream_t s, char what);
cudaError_t fake_cuda_launch(cudaStream_t s, void (*fn)(void *), void *arg);

FAKE_EXPORT void fake_nccl_async_error(ncclResult_t r)
{
	__atomic_store_n(&async_error, r, __ATOMIC_SEQ_CST);
}

static int env_ranks(void)
{
	const char *s = getenv("FAKE_NCCL_RANKS");

	return s != NULL && *s != '\0' ? atoi(s) : 1;
}

FAKE_EXPORT int fake_nccl_stat(const char *name)
{
	if (strcmp(name, "coll_nonblocking") == 0) {
		return __atomic_load_n(&st.coll_nonblocking, __ATOMIC_SEQ_CST);
	}
	if (strcmp(name, "coll_blocking") == 0) {
		return __atomic_load_n(&st.coll_blocking, __ATOMIC_SEQ_CST);
	}
	if (strcmp(name, "split") == 0) {
		return st.split;
	}
	if (strcmp(name, "abort") == 0) {
		return st.abort;
	}
	if (strcmp(name, "finalize") == 0) {
		return st.finalize;
	}
	if (strcmp(name, "destroy") == 0) {
		return st.destroy;
	}
	if (strcmp(name, "live") == 0) {
		return st.live;
	}
	return -1;
}

static int hangs(enum pending p)
{
	const char *h = getenv("FAKE_NCCL_HANG");

	return h != NULL &&
	       ((p == INIT && strcmp(h, "init") == 0) || (p == SPLIT && strcmp(h, "split") == 0));
}

static ncclComm_t comm_new(int blocking)
{
	ncclComm_t c = calloc(1, sizeof(*c));

	if (c == NULL) {
		abort();
	}
	c->blocking = blocking == NCCL_CONFIG_UNDEF_INT ? 1 : blocking;
	cudaGetDevice(&c->device);
	st.live++;
	return c;
}

static void comm_free(ncclComm_t c)
{
	st.live--;
	free(c);
}

/* Start @what on @c: done at once when blocking, else after FAKE_POLLS polls. */
static ncclResult_t start(ncclComm_t c, enum pending what)
{
	if (c->blocking && !hangs(what)) {
		return ncclSuccess;
	}
	c->state = ncclInProgress;
	c->pending = what;
	c->polls = FAKE_POLLS;
	return ncclInProgress;
}

static void complete(ncclComm_t c)
{
	if (c->pending == SPLIT) {
		__atomic_store_n(c->split_out, c->split_child, __ATOMIC_RELEASE);
		c->split_child = NULL;
	}
	c->pending = NONE;
	c->state = ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGetVersion(int *v)
{
	*v = NCCL_VERSION_CODE;
	return ncclSuccess;
}

FAKE_EXPORT const char *ncclGetErrorString(ncclResult_t r)
{
	static __thread char buf[64];

	snprintf(buf, sizeof(buf), "fake NCCL result %d", (int)r);
	return buf;
}

FAKE_EXPORT const char *ncclGetLastError(ncclComm_t c)
{
	(void)c;
	return "";
}

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof(*id));
	memcpy(id->internal, "fake", 4);
	return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id,
						int rank, ncclConfig_t *config)
{
	(void)id;
	if (nranks != env_ranks() || rank < 0 || rank >= nranks) {
		return ncclInvalidArgument;
	}
	*out = comm_new(config != NULL ? config->blocking : 1);
	(*out)->nranks = nranks;
	(*out)->rank = rank;
	return start(*out, INIT);
}

FAKE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out,
				       ncclConfig_t *config)
{
	(void)color;
	(void)key;
	if (c->state != ncclSuccess) {
		return ncclInvalidUsage;
	}
	st.split++;
	*out = NULL;
	c->split_child = comm_new(config != NULL ? config->blocking : c->blocking);
	c->split_child->nranks = c->nranks;
	c->split_child->rank = key;
	c->split_out = out;
	if (start(c, SPLIT) == ncclSuccess) {
		c->pending = SPLIT;
		complete(c);
		return ncclSuccess;
	}
	return ncclInProgress;
}

FAKE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
	if (c->state == ncclInProgress && !hangs(c->pending) && --c->polls <= 0) {
		complete(c);
	}
	*r = c->state;
	if (*r == ncclSuccess) {
		*r = __atomic_load_n(&async_error, __ATOMIC_SEQ_CST);
	}
	return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t c)
{
	st.finalize++;
	return start(c, COLL);
}

FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	st.destroy++;
	comm_free(c);
	return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t c)
{
	__atomic_add_fetch(&st.abort, 1, __ATOMIC_SEQ_CST);
	if (c->pending == SPLIT) {
		/* NCCL's split thread stops and still hands over the (failed) child. */
		c->split_child->state = ncclInternalError;
		__atomic_store_n(c->split_out, c->split_child, __ATOMIC_RELEASE);
	}
	/* Whichever of this and the hung call comes second frees @c (sequentially consistent). */
	if (__atomic_exchange_n(&c->aborted, 1, __ATOMIC_SEQ_CST) == 0 &&
	    __atomic_load_n(&c->in_call, __ATOMIC_SEQ_CST) == 0) {
		comm_free(c);
	}
	return ncclSuccess;
}

/* FAKE_NCCL_HANG=coll on a blocking communicator: wait for ncclCommAbort(), then free. */
static ncclResult_t hang_until_aborted(ncclComm_t c)
{
	struct timespec ts = {0, 1000000};

	__atomic_store_n(&c->in_call, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
		nanosleep(&ts, NULL);
	}
	comm_free(c);
	return ncclInternalError;
}

enum kind { ALLREDUCE, BROADCAST, ALLGATHER, REDUCE_SCATTER };

static size_t tsize(ncclDataType_t t)
{
	return t == ncclFloat64 ? 8 : 4;
}

/* @n elements of @t at @p times @k. */
static void scale(void *p, size_t n, ncclDataType_t t, int k)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (t == ncclFloat64) {
			((double *)p)[i] *= k;
		} else {
			((float *)p)[i] *= (float)k;
		}
	}
}

struct coll_arg {
	enum kind kind;
	const void *send;
	void *recv;
	size_t count;
	ncclDataType_t t;
	ncclRedOp_t op;
	int nranks, rank;
	double peer_add; /* FAKE_NCCL_PEER_ADD */
};

/* Allreduce with FAKE_NCCL_PEER_ADD: the other ranks' elements are this one's plus V. */
static void add_peers(void *p, size_t n, ncclDataType_t t, ncclRedOp_t op, int nranks, double v)
{
	double add = (nranks - 1) * v / (op == ncclAvg ? nranks : 1);
	size_t i;

	for (i = 0; i < n; i++) {
		if (t == ncclFloat64) {
			((double *)p)[i] += add;
		} else {
			((float *)p)[i] += (float)add;
		}
	}
}

/* The collective's kernel, run when its stream reaches it (every rank holds this one's data). */
static void coll_run(void *arg)
{
	const struct coll_arg *a = arg;
	size_t bytes = a->count * tsize(a->t);
	int i;

	switch (a->kind) {
	case ALLREDUCE:
		memmove(a->recv, a->send, bytes);
		if (a->op == ncclSum) {
			scale(a->recv, a->count, a->t, a->nranks);
		}
		add_peers(a->recv, a->count, a->t, a->op, a->nranks, a->peer_add);
		break;
	case BROADCAST:
		memmove(a->recv, a->send, bytes);
		break;
	case ALLGATHER:
		/* This rank's block last: @send may be one of the blocks (in place). */
		for (i = 0; i < a->nranks; i++) {
			if (i != a->rank) {
				memmove((char *)a->recv + (size_t)i * bytes, a->send, bytes);
			}
		}
		memmove((char *)a->recv + (size_t)a->rank * bytes, a->send, bytes);
		break;
	case REDUCE_SCATTER:
		memmove(a->recv, (const char *)a->send + (size_t)a->rank * bytes, bytes);
		if (a->op == ncclSum) {
			scale(a->recv, a->count, a->t, a->nranks);
		}
		break;
	}
}

/*
 * A collective of @kind on @c over @send and @recv (@count elements of @t per rank), every
 * other rank holding this one's data: device memory only, as NCCL's kernels need.
 */
static ncclResult_t coll(enum kind kind, const char *what, const void *send, void *recv,
			 size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
			 cudaStream_t s)
{
	static const char letter[] = {'A', 'B', 'G', 'R'};
	struct cudaPointerAttributes a;
	const void *bufs[2] = {send, recv};
	struct coll_arg *ca;
	int i;

	for (i = 0; i < 2; i++) {
		cudaPointerGetAttributes(&a, bufs[i]);
		if (a.type != cudaMemoryTypeDevice || a.device != c->device) {
			fprintf(stderr,
				"fake NCCL: %s: %p is not memory of device %d: a real NCCL "
				"would have killed the CUDA context\n",
				what, bufs[i], c->device);
			abort();
		}
	}
	if (c->state != ncclSuccess) {
		return ncclInvalidUsage;
	}
	if (c->blocking && getenv("FAKE_NCCL_HANG") != NULL &&
	    strcmp(getenv("FAKE_NCCL_HANG"), "coll") == 0) {
		return hang_until_aborted(c);
	}
	ca = malloc(sizeof(*ca));
	if (ca == NULL) {
		return ncclSystemError;
	}
	*ca = (struct coll_arg){kind, send, recv, count, t, op, c->nranks, c->rank, 0};
	if (getenv("FAKE_NCCL_PEER_ADD") != NULL) {
		ca->peer_add = atof(getenv("FAKE_NCCL_PEER_ADD"));
	}
	if (fake_cuda_launch(s, coll_run, ca) != cudaSuccess) {
		return ncclUnhandledCudaError;
	}
	if (c->blocking) {
		__atomic_add_fetch(&st.coll_blocking, 1, __ATOMIC_SEQ_CST);
	} else {
		/* NCCL 2.28 starts a thread for this one (ncclGroupEndInternal, non-blocking). */
		__atomic_add_fetch(&st.coll_nonblocking, 1, __ATOMIC_SEQ_CST);
	}
	fake_cuda_stream_queue(s, letter[kind]);
	return start(c, COLL);
}

FAKE_EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
				       ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
	return coll(ALLREDUCE, "ncclAllReduce", send, recv, count, t, op, c, s);
}

FAKE_EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t,
				       int root, ncclComm_t c, cudaStream_t s)
{
	(void)root;
	return coll(BROADCAST, "ncclBroadcast", send, recv, count, t, ncclSum, c, s);
}

FAKE_EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
				       ncclComm_t c, cudaStream_t s)
{
	return coll(ALLGATHER, "ncclAllGather", send, recv, count, t, ncclSum, c, s);
}

FAKE_EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
					   ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
					   cudaStream_t s)
{
	return coll(REDUCE_SCATTER, "ncclReduceScatter", send, recv, count, t, op, c, s);
}
