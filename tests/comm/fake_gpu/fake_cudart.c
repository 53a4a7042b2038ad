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
 * fake_cuda_stream_hold(1) makes cudaStreamQuery answer "not ready" (and
 * cudaStreamSynchronize wait) until released. Streams keep a count of the work queued on
 * them by the fake NCCL (fake_cuda_stream_queue()); the queries and synchronisations that
 * find that work complete mark it done. Both are written, in order, to one log
 * (fake_cuda_log(): a letter per collective queued, 'W' when a stream's queued work was
 * found complete), so a test can tell "queue, queue, queue, wait" from "queue, wait, queue,
 * wait".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#define FAKE_EXPORT __attribute__((visibility("default")))

/* fake_libcuda.c: the device's primary context is active once used. */
void fake_cu_mark_active(int dev);

struct CUstream_st {
	int id;
	int queued; /* collectives queued by the fake NCCL and not yet found complete */
};
struct CUevent_st {
	int id;
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

FAKE_EXPORT void fake_cuda_stream_hold(int on)
{
	__atomic_store_n(&hold, on, __ATOMIC_SEQ_CST);
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
	if (s != NULL) {
		s->queued++;
	}
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
	pthread_mutex_lock(&lock);
	if (s != NULL && s->queued > 0) {
		s->queued = 0;
		log_add('W');
	}
	pthread_mutex_unlock(&lock);
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

FAKE_EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
	struct fake_alloc *a = calloc(1, sizeof(*a));

	if (a == NULL || (a->p = calloc(1, n > 0 ? n : 1)) == NULL) {
		free(a);
		return cudaErrorMemoryAllocation;
	}
	a->n = n;
	a->device = current;
	fake_cu_mark_active(current);
	pthread_mutex_lock(&lock);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&lock);
	*p = a->p;
	return cudaSuccess;
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
	free(a->p);
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

FAKE_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
					enum cudaMemcpyKind kind, cudaStream_t s)
{
	(void)kind;
	(void)s;
	memmove(dst, src, n);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	(void)flags;
	*s = calloc(1, sizeof(**s));
	return *s != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

FAKE_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	free(s);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s)
{
	if (__atomic_load_n(&hold, __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(&queries, 1, __ATOMIC_SEQ_CST);
		return cudaErrorNotReady;
	}
	stream_done(s);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	struct timespec ts = {0, 1000000};

	while (__atomic_load_n(&hold, __ATOMIC_SEQ_CST)) {
		nanosleep(&ts, NULL);
	}
	stream_done(s);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
	struct timespec ts = {0, 1000000};
	const char *h = getenv("FAKE_CUDA_HANG");

	(void)s;
	(void)e;
	(void)flags;
	/* FAKE_CUDA_HANG=streamwait: a call that ignores every deadline, for good. */
	while (h != NULL && strcmp(h, "streamwait") == 0) {
		nanosleep(&ts, NULL);
	}
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
	(void)flags;
	*e = calloc(1, sizeof(**e));
	return *e != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

FAKE_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	free(e);
	return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	(void)e;
	(void)s;
	return cudaSuccess;
}
