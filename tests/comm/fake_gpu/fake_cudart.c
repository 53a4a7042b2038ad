/* SPDX-License-Identifier: MIT */
/* tests/comm/fake_gpu/fake_cudart.c: a CUDA runtime without a GPU, for libcrun-worker's loader. */

/*
 * Built as libcudart.so.<major> and found first through LD_LIBRARY_PATH by
 * tests/comm/test_comm_fake_gpu.c, so the nccl backend (worker_api/comm_nccl.c) runs on a
 * machine without a GPU. Exactly the functions worker_api/gpu_loader.h resolves, typed by
 * the real header. "Device memory" is host memory kept in a list, so cudaPointerGetAttributes
 * can tell it from malloc'd memory; the current device is per thread, as in CUDA, and a
 * device set or allocated on has its primary context active (fake_libcuda.c). Knobs
 * (read at each call): FAKE_CUDA_DEVICES (count, default 1), FAKE_CUDA_ERROR (the error
 * cudaGetDeviceCount returns instead), FAKE_CUDA_DRIVER (cudaDriverGetVersion, default 13000),
 * FAKE_CUDA_HANG=streamwait (cudaStreamWaitEvent never returns).
 * Streams run their work in order and later, as a GPU does: fake_cuda_stream_hold(1) stops
 * the "device" (cudaStreamQuery and cudaEventQuery answer "not ready", cudaStreamSynchronize
 * waits), and work queued then (copies, the fake NCCL's collectives, event records and waits,
 * a test's kernels through fake_cuda_launch()) runs only when fake_cuda_stream_hold(0)
 * releases it: in submission order per stream, a cudaStreamWaitEvent holding its stream until
 * the event's record (as of the wait) has run. Not held, work runs at once when its stream
 * has nothing pending. The legacy stream (NULL) is one more stream. Streams keep a count of
 * the collectives queued on them by the fake NCCL (fake_cuda_stream_queue()); the queries and
 * synchronisations that find that work complete (of the stream, or of an event recorded on
 * it) mark it done. Both are written, in order, to one log (fake_cuda_log(): a letter per
 * collective queued, 'W' when a stream's queued work was found complete), so a test can tell
 * "queue, queue, queue, wait" from "queue, wait, queue, wait".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#define FAKE_EXPORT __attribute__((visibility("default")))

/* fake_libcuda.c: the device's primary context is active once used; the allocations. */
void fake_cu_mark_active(int dev);
void fake_cu_track(void *p, size_t n, int dev);
void fake_cu_untrack(void *p);

struct CUstream_st {
	int id;
	int queued;  /* collectives queued by the fake NCCL and not yet found complete */
	int pending; /* operations queued on it and not yet run (under @lock) */
};
struct CUevent_st {
	unsigned long gen, done; /* records made, records run (under @lock) */
	cudaStream_t stream;     /* of the last record */
};

/* Work queued on a stream: a function (copy, collective, kernel), an event record or wait. */
enum op_kind { OP_FN, OP_RECORD, OP_WAIT };
struct fake_op {
	struct fake_op *next;
	cudaStream_t s;
	enum op_kind kind;
	void (*fn)(void *);
	void *arg; /* OP_FN: freed after the run */
	cudaEvent_t ev;
	unsigned long gen;
};

struct fake_alloc {
	struct fake_alloc *next;
	char *p;
	size_t n;
	int device;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_alloc *allocs;
static __thread int current;
static struct CUstream_st legacy; /* the NULL stream */
static struct fake_op *ops, **ops_tail = &ops; /* queued work, in submission order */
static int hold;	/* cudaStreamQuery: not ready while set */
static int queries;	/* cudaStreamQuery calls while held */
static char qlog[4096]; /* under @lock */
static size_t qlog_len;

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);

	return s != NULL && *s != '\0' ? atoi(s) : def;
}

FAKE_EXPORT void fake_cuda_stream_hold(int on);
FAKE_EXPORT int fake_cuda_held_queries(void);

static void run_queued(void);

FAKE_EXPORT void fake_cuda_stream_hold(int on)
{
	__atomic_store_n(&hold, on, __ATOMIC_SEQ_CST);
	if (!on) {
		run_queued();
	}
}

FAKE_EXPORT int fake_cuda_held_queries(void)
{
	return __atomic_load_n(&queries, __ATOMIC_SEQ_CST);
}

FAKE_EXPORT void fake_cuda_stream_queue(cudaStream_t s, char what);
FAKE_EXPORT void fake_cuda_log(char *buf, size_t len, int reset);

static void log_add(char c)
{
	if (qlog_len + 1 < sizeof(qlog)) {
		qlog[qlog_len++] = c;
		qlog[qlog_len] = '\0';
	}
}

/* The fake NCCL queued a collective (@what: its letter) on @s. */
FAKE_EXPORT void fake_cuda_stream_queue(cudaStream_t s, char what)
{
	pthread_mutex_lock(&lock);
	(s != NULL ? s : &legacy)->queued++;
	log_add(what);
	pthread_mutex_unlock(&lock);
}

/* The log so far into @buf; @reset: then start a new one. */
FAKE_EXPORT void fake_cuda_log(char *buf, size_t len, int reset)
{
	pthread_mutex_lock(&lock);
	snprintf(buf, len, "%s", qlog);
	if (reset) {
		qlog_len = 0;
		qlog[0] = '\0';
	}
	pthread_mutex_unlock(&lock);
}

/* @s is idle: what was queued on it is complete. */
static void stream_done(cudaStream_t s)
{
	s = s != NULL ? s : &legacy;
	pthread_mutex_lock(&lock);
	if (s->queued > 0) {
		s->queued = 0;
		log_add('W');
	}
	pthread_mutex_unlock(&lock);
}

static cudaStream_t real_stream(cudaStream_t s)
{
	return s != NULL ? s : &legacy;
}

/* Can @o run now (under @lock)? The first pending op of its stream, its event recorded. */
static int runnable(const struct fake_op *o)
{
	const struct fake_op *p;

	for (p = ops; p != o; p = p->next) {
		if (p->s == o->s) {
			return 0;
		}
	}
	return o->kind != OP_WAIT || o->ev->done >= o->gen;
}

/* Run @o (under @lock; a function runs unlocked: it may be a test's kernel). */
static void run_op(struct fake_op *o)
{
	switch (o->kind) {
	case OP_FN:
		pthread_mutex_unlock(&lock);
		o->fn(o->arg);
		free(o->arg);
		pthread_mutex_lock(&lock);
		break;
	case OP_RECORD:
		if (o->ev->done < o->gen) {
			o->ev->done = o->gen;
		}
		break;
	case OP_WAIT:
		break;
	}
	o->s->pending--;
}

/* The "device" runs what it can, in order, until nothing queued can run (or it is held). */
static void run_queued(void)
{
	struct fake_op **pp, *o;
	int progress = 1;

	pthread_mutex_lock(&lock);
	while (progress && !__atomic_load_n(&hold, __ATOMIC_SEQ_CST)) {
		progress = 0;
		for (pp = &ops; (o = *pp) != NULL; pp = &o->next) {
			if (runnable(o)) {
				*pp = o->next;
				if (ops_tail == &o->next) {
					ops_tail = pp;
				}
				run_op(o);
				free(o);
				progress = 1;
				break;
			}
		}
	}
	pthread_mutex_unlock(&lock);
}

static cudaError_t enqueue(cudaStream_t s, enum op_kind kind, void (*fn)(void *), void *arg,
			   cudaEvent_t ev, unsigned long gen)
{
	struct fake_op *o = calloc(1, sizeof(*o));

	if (o == NULL) {
		free(arg);
		return cudaErrorMemoryAllocation;
	}
	o->s = real_stream(s);
	o->kind = kind;
	o->fn = fn;
	o->arg = arg;
	o->ev = ev;
	o->gen = gen;
	pthread_mutex_lock(&lock);
	o->s->pending++;
	*ops_tail = o;
	ops_tail = &o->next;
	pthread_mutex_unlock(&lock);
	run_queued();
	return cudaSuccess;
}

/* Queue @fn(@arg) on @s (a "kernel"; @arg, malloc'd, is freed after it runs). */
FAKE_EXPORT cudaError_t fake_cuda_launch(cudaStream_t s, void (*fn)(void *), void *arg);

FAKE_EXPORT cudaError_t fake_cuda_launch(cudaStream_t s, void (*fn)(void *), void *arg)
{
	return enqueue(s, OP_FN, fn, arg, NULL, 0);
}

/* Nothing of @s is queued and the device runs (under no lock). */
static int stream_idle(cudaStream_t s)
{
	int idle;

	pthread_mutex_lock(&lock);
	idle = real_stream(s)->pending == 0;
	pthread_mutex_unlock(&lock);
	return idle && !__atomic_load_n(&hold, __ATOMIC_SEQ_CST);
}

FAKE_EXPORT cudaError_t cudaRuntimeGetVersion(int *v)
{
	*v = CUDART_VERSION;
	return cudaSuccess;
}

FAKE_EXPORT const char *cudaGetErrorString(cudaError_t e)
{
	static __thread char buf[64];

	snprintf(buf, sizeof(buf), "fake CUDA error %d", (int)e);
	return buf;
}

FAKE_EXPORT cudaError_t cudaDriverGetVersion(int *v)
{
	*v = env_int("FAKE_CUDA_DRIVER", 13000);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
	int e = env_int("FAKE_CUDA_ERROR", 0);

	*n = 0;
	if (e != 0) {
		return (cudaError_t)e;
	}
	*n = env_int("FAKE_CUDA_DEVICES", 1);
	return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}

FAKE_EXPORT cudaError_t cudaGetDevice(int *d)
{
	*d = current;
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaSetDevice(int d)
{
	if (d < 0 || d >= env_int("FAKE_CUDA_DEVICES", 1)) {
		return cudaErrorInvalidDevice;
	}
	current = d;
	fake_cu_mark_active(d); /* CUDA 12: cudaSetDevice initialises the primary context */
	return cudaSuccess;
}

/*
 * Device memory is pages of its own (mmap), so that once freed a test can map host memory,
 * or allocate another device's buffer (fake_cuda_malloc_at()), at the very same address.
 */
static cudaError_t alloc_at(void **p, size_t n, void *at)
{
	struct fake_alloc *a = calloc(1, sizeof(*a));
	void *m;

	m = mmap(at, n > 0 ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
		 (at != NULL ? MAP_FIXED_NOREPLACE : 0), -1, 0);
	if (a == NULL || m == MAP_FAILED || (at != NULL && m != at)) {
		free(a);
		return cudaErrorMemoryAllocation;
	}
	a->p = m;
	a->n = n;
	a->device = current;
	fake_cu_mark_active(current);
	pthread_mutex_lock(&lock);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&lock);
	fake_cu_track(a->p, n > 0 ? n : 1, current);
	*p = a->p;
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
	return alloc_at(p, n, NULL);
}

/* cudaMalloc() on the current device at @at (free address space: a freed buffer's). */
FAKE_EXPORT cudaError_t fake_cuda_malloc_at(void *at, size_t n);

FAKE_EXPORT cudaError_t fake_cuda_malloc_at(void *at, size_t n)
{
	void *p;

	return alloc_at(&p, n, at);
}

FAKE_EXPORT cudaError_t cudaFree(void *p)
{
	struct fake_alloc **pp, *a;

	if (p == NULL) {
		return cudaSuccess;
	}
	pthread_mutex_lock(&lock);
	for (pp = &allocs; (a = *pp) != NULL; pp = &a->next) {
		if (a->p == p) {
			*pp = a->next;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	if (a == NULL) {
		return cudaErrorInvalidValue;
	}
	fake_cu_untrack(a->p);
	munmap(a->p, a->n > 0 ? a->n : 1);
	free(a);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr,
						 const void *ptr)
{
	const struct fake_alloc *a;

	memset(attr, 0, sizeof(*attr));
	attr->type = cudaMemoryTypeUnregistered;
	attr->device = -2;
	pthread_mutex_lock(&lock);
	for (a = allocs; a != NULL; a = a->next) {
		if ((const char *)ptr >= a->p && (const char *)ptr < a->p + a->n) {
			attr->type = cudaMemoryTypeDevice;
			attr->device = a->device;
			attr->devicePointer = (void *)ptr;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaMemset(void *p, int v, size_t n)
{
	memset(p, v, n);
	return cudaSuccess;
}

struct copy_arg {
	void *dst;
	const void *src;
	size_t n;
};

static void copy_run(void *arg)
{
	struct copy_arg *a = arg;

	memmove(a->dst, a->src, a->n);
}

FAKE_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
					enum cudaMemcpyKind kind, cudaStream_t s)
{
	struct copy_arg *a = malloc(sizeof(*a));

	(void)kind;
	if (a == NULL) {
		return cudaErrorMemoryAllocation;
	}
	a->dst = dst;
	a->src = src;
	a->n = n;
	return enqueue(s, OP_FN, copy_run, a, NULL, 0);
}

FAKE_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	(void)flags;
	*s = calloc(1, sizeof(**s));
	return *s != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* Queued work still refers to @s or @e: keep it (CUDA releases it once that work is done). */
static int referenced(const void *p)
{
	const struct fake_op *o;
	int found = 0;

	pthread_mutex_lock(&lock);
	for (o = ops; o != NULL && !found; o = o->next) {
		found = (const void *)o->s == p || (const void *)o->ev == p;
	}
	pthread_mutex_unlock(&lock);
	return found;
}

FAKE_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (!referenced(s)) {
		free(s);
	}
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s)
{
	if (__atomic_load_n(&hold, __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(&queries, 1, __ATOMIC_SEQ_CST);
		return cudaErrorNotReady;
	}
	if (!stream_idle(s)) {
		return cudaErrorNotReady; /* waits for an event no one has recorded yet */
	}
	stream_done(s);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	struct timespec ts = {0, 1000000};

	while (!stream_idle(s)) {
		nanosleep(&ts, NULL);
	}
	stream_done(s);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
	struct timespec ts = {0, 1000000};
	const char *h = getenv("FAKE_CUDA_HANG");

	unsigned long gen;

	(void)flags;
	/* FAKE_CUDA_HANG=streamwait: a call that ignores every deadline, for good. */
	while (h != NULL && strcmp(h, "streamwait") == 0) {
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&lock);
	gen = e->gen; /* the record as of this call, as CUDA's */
	pthread_mutex_unlock(&lock);
	return enqueue(s, OP_WAIT, NULL, NULL, e, gen);
}

FAKE_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
	(void)flags;
	*e = calloc(1, sizeof(**e));
	return *e != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

FAKE_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	if (!referenced(e)) {
		free(e);
	}
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	unsigned long gen;

	pthread_mutex_lock(&lock);
	gen = ++e->gen;
	e->stream = real_stream(s);
	pthread_mutex_unlock(&lock);
	return enqueue(s, OP_RECORD, NULL, NULL, e, gen);
}

/* Complete when its last record has run; the collectives queued before it are then done. */
FAKE_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e)
{
	cudaStream_t s;
	int done;

	if (__atomic_load_n(&hold, __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(&queries, 1, __ATOMIC_SEQ_CST);
		return cudaErrorNotReady;
	}
	pthread_mutex_lock(&lock);
	done = e->done >= e->gen;
	s = e->stream;
	pthread_mutex_unlock(&lock);
	if (!done) {
		return cudaErrorNotReady;
	}
	if (s != NULL) {
		stream_done(s);
	}
	return cudaSuccess;
}
