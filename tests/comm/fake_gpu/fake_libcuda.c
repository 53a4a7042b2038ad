/* SPDX-License-Identifier: MIT */
/* tests/comm/fake_gpu/fake_libcuda.c: the driver calls libcrun-worker makes itself, faked. */

/*
 * Built as libcuda.so.1 beside fake_cudart.c, which links it (as the real runtime loads the
 * real driver) and marks a device's primary context active when a thread sets it or
 * allocates on it, as CUDA 12's cudaSetDevice() initialises it. The loader's
 * gpu_cuda_device_active() reads that through cuDevicePrimaryCtxGetState.
 * The runtime also tells it of each allocation (fake_cu_track(), fake_cu_untrack()), so
 * cuPointerGetAttribute(s) answer as the driver does: a process-wide unique buffer id per
 * allocation (never reused), its start and size, its device; CUDA_ERROR_INVALID_VALUE for
 * an address in no allocation.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_MAX_DEVICES 64

static int active[FAKE_MAX_DEVICES];

struct range {
	struct range *next;
	uintptr_t base;
	size_t n;
	int device;
	unsigned long long id;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *ranges;
static unsigned long long next_id = 1;

FAKE_EXPORT void fake_cu_track(void *p, size_t n, int dev);
FAKE_EXPORT void fake_cu_untrack(void *p);
FAKE_EXPORT int cuPointerGetAttribute(void *data, int attr, uintptr_t ptr);
FAKE_EXPORT int cuPointerGetAttributes(unsigned int n, int *attrs, void **data, uintptr_t ptr);

FAKE_EXPORT void fake_cu_track(void *p, size_t n, int dev)
{
	struct range *r = calloc(1, sizeof(*r));

	if (r == NULL) {
		abort();
	}
	r->base = (uintptr_t)p;
	r->n = n;
	r->device = dev;
	pthread_mutex_lock(&lock);
	r->id = next_id++;
	r->next = ranges;
	ranges = r;
	pthread_mutex_unlock(&lock);
}

FAKE_EXPORT void fake_cu_untrack(void *p)
{
	struct range **pp, *r;

	pthread_mutex_lock(&lock);
	for (pp = &ranges; (r = *pp) != NULL; pp = &r->next) {
		if (r->base == (uintptr_t)p) {
			*pp = r->next;
			free(r);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
}

/* CU_POINTER_ATTRIBUTE_* of cuda.h: BUFFER_ID 7, DEVICE_ORDINAL 9, RANGE_START_ADDR 11,
 * RANGE_SIZE 12. Others: CUDA_ERROR_INVALID_VALUE (1), as for an unknown address. */
static int attr_of(const struct range *r, int attr, void *data)
{
	switch (attr) {
	case 7:
		*(unsigned long long *)data = r->id;
		return 0;
	case 9:
		*(int *)data = r->device;
		return 0;
	case 11:
		*(uintptr_t *)data = r->base;
		return 0;
	case 12:
		*(size_t *)data = r->n;
		return 0;
	}
	return 1;
}

FAKE_EXPORT int cuPointerGetAttributes(unsigned int n, int *attrs, void **data, uintptr_t ptr)
{
	const struct range *r;
	unsigned int i;
	int rc = 1;

	pthread_mutex_lock(&lock);
	for (r = ranges; r != NULL; r = r->next) {
		if (ptr >= r->base && ptr < r->base + r->n) {
			break;
		}
	}
	for (i = 0, rc = r != NULL ? 0 : 1; rc == 0 && i < n; i++) {
		rc = attr_of(r, attrs[i], data[i]);
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

FAKE_EXPORT int cuPointerGetAttribute(void *data, int attr, uintptr_t ptr)
{
	void *d[1] = {data};

	return cuPointerGetAttributes(1, &attr, d, ptr);
}

FAKE_EXPORT void fake_cu_mark_active(int dev);
FAKE_EXPORT int cuDeviceGet(int *dev, int ordinal);
FAKE_EXPORT int cuDevicePrimaryCtxGetState(int dev, unsigned int *flags, int *on);

FAKE_EXPORT void fake_cu_mark_active(int dev)
{
	if (dev >= 0 && dev < FAKE_MAX_DEVICES) {
		__atomic_store_n(&active[dev], 1, __ATOMIC_SEQ_CST);
	}
}

FAKE_EXPORT int cuDeviceGet(int *dev, int ordinal)
{
	*dev = ordinal;
	return 0;
}

FAKE_EXPORT int cuDevicePrimaryCtxGetState(int dev, unsigned int *flags, int *on)
{
	if (dev < 0 || dev >= FAKE_MAX_DEVICES) {
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	}
	*flags = 0;
	*on = __atomic_load_n(&active[dev], __ATOMIC_SEQ_CST);
	return 0;
}
