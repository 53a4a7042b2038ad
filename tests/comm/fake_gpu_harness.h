/* SPDX-License-Identifier: MIT */
/* tests/comm/fake_gpu_harness.h: what the fake-GPU tests share: children, the fakes' knobs, a store. */
#ifndef CRUN_TESTS_COMM_FAKE_GPU_HARNESS_H
#define CRUN_TESTS_COMM_FAKE_GPU_HARNESS_H

/*
 * test_comm_fake_gpu.c (the nccl backend) and test_ddp_fake_gpu.c (the device DDP) run each
 * case in a child process of its own, since libcrun-worker's loader and environment are
 * read once per process; LD_LIBRARY_PATH (tests/comm/meson.build) leads the loader to
 * tests/comm/fake_gpu/'s libcudart, libcuda and libnccl.
 */
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <nccl.h>
#pragma GCC diagnostic pop

#include <crun/crun.h>

/* In a child: print and exit 1 (cmocka's asserts belong to the parent). */
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			_exit(1);                                                                  \
		}                                                                                  \
	} while (0)

/* The fake runtime's, driver's and NCCL's functions the cases call themselves. */
struct fake_fns {
	cudaError_t (*malloc)(void **, size_t);
	cudaError_t (*free)(void *);
	cudaError_t (*malloc_at)(void *, size_t); /* fake_cuda_malloc_at(): at a given address */
	cudaError_t (*launch)(cudaStream_t, void (*)(void *), void *); /* a "kernel" (malloc'd arg) */
	cudaError_t (*event_query)(cudaEvent_t);
	cudaError_t (*set_device)(int);
	cudaError_t (*get_device)(int *);
	void (*hold)(int);
	int (*held_queries)(void);
	void (*log)(char *, size_t, int);
	int (*stat)(const char *);
	void (*async_error)(int);
	int (*ctx_state)(int, unsigned int *, int *); /* libcuda's cuDevicePrimaryCtxGetState */
};
extern struct fake_fns fk;

/* A file store in a fresh temporary directory, prefix "t/"; store_done() removes both. */
struct crun_store *store_open(void);
void store_done(struct crun_store *st);

/* crun_comm_create() of rank 0 of 1 with @b and @timeout_ms. */
int create(struct crun_store *st, enum crun_backend b, int timeout_ms, struct crun_comm **c);

/* @n floats of fake device memory on the calling thread's current device. */
float *dev_floats(size_t n);

/* 1 when device @dev has an active primary context (someone set it or allocated on it). */
int device_has_context(int dev);

/*
 * Run @fn in a child with @env ("NAME=VALUE", NULL-terminated; "NAME=" unsets) applied over
 * a cleared crun/CUDA environment; the case fails when the child does not exit 0 within
 * 60 s (a hang is a failure, not the suite's timeout).
 */
void in_child(void (*fn)(void), const char *const *env);

/* stderr into a memfd, so a message only logged can be checked. */
int capture_begin(int *saved);
void capture_end(int fd, int saved, char *buf, size_t len);

#endif
