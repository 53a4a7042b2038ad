/* SPDX-License-Identifier: MIT */
/* worker_api/gpu_loader.h: the CUDA runtime and NCCL, loaded at run time (dlopen), once. */
#ifndef CRUN_WORKER_API_GPU_LOADER_H
#define CRUN_WORKER_API_GPU_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "src/common/diag.h"

/*
 * libcrun-worker never links the CUDA runtime or NCCL: one build runs on a machine without
 * CUDA (the cpu backend and host DDP never touch this module) and on a GPU node alike. Their
 * headers are needed at build time for the nccl backend and the CUDA DDP memory operations;
 * without them (or with -Dnccl=disabled) neither is built and this module is left out.
 *
 * The first call of gpu_cuda_load() (gpu_nccl_load()) opens libcudart.so.<major of the
 * headers> (libnccl.so.<major>), then the unversioned name, then the same names in the
 * configured cuda-root's lib64/ and lib/, and resolves every function below; the outcome is
 * kept for the life of the process (the library is never closed). A program that links the
 * shared CUDA runtime itself gets that same runtime (one soname, one instance), so its
 * streams and device pointers are the ones this library uses.
 */
struct gpu_cuda;
struct gpu_nccl;

#if CRUN_HAVE_NCCL

/* Third-party headers: not held to our warning flags. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <nccl.h>
#pragma GCC diagnostic pop

/* Exactly the CUDA runtime functions libcrun-worker calls (comm_nccl.c, ddp_mem_cuda.c, env.c). */
#define GPU_CUDA_FUNCS(X)                                                                          \
	X(cudaGetErrorString)                                                                      \
	X(cudaDriverGetVersion)                                                                    \
	X(cudaGetDeviceCount)                                                                      \
	X(cudaGetDevice)                                                                           \
	X(cudaSetDevice)                                                                           \
	X(cudaMalloc)                                                                              \
	X(cudaFree)                                                                                \
	X(cudaMemset)                                                                              \
	X(cudaMemcpyAsync)                                                                         \
	X(cudaStreamCreateWithFlags)                                                               \
	X(cudaStreamDestroy)                                                                       \
	X(cudaStreamQuery)                                                                         \
	X(cudaStreamSynchronize)                                                                   \
	X(cudaStreamWaitEvent)                                                                     \
	X(cudaEventCreateWithFlags)                                                                \
	X(cudaEventDestroy)                                                                        \
	X(cudaEventRecord)                                                                         \
	X(cudaEventQuery)                                                                          \
	X(cudaPointerGetAttributes)

/* Exactly the NCCL functions libcrun-worker calls (comm_nccl.c). */
#define GPU_NCCL_FUNCS(X)                                                                          \
	X(ncclGetErrorString)                                                                      \
	X(ncclGetLastError)                                                                        \
	X(ncclGetUniqueId)                                                                         \
	X(ncclCommInitRankConfig)                                                                  \
	X(ncclCommSplit)                                                                           \
	X(ncclCommGetAsyncError)                                                                   \
	X(ncclCommFinalize)                                                                        \
	X(ncclCommDestroy)                                                                         \
	X(ncclCommAbort)                                                                           \
	X(ncclAllReduce)                                                                           \
	X(ncclBroadcast)                                                                           \
	X(ncclAllGather)                                                                           \
	X(ncclReduceScatter)

/* One member per function, named and typed as the header declares it: cu->cudaSetDevice(0). */
#define GPU_FN_MEMBER(f) __typeof__(f) *f;

struct gpu_cuda {
	int version;    /* cudaRuntimeGetVersion(): 1000 * major + 10 * minor */
	char path[512]; /* the file that was loaded */
	GPU_CUDA_FUNCS(GPU_FN_MEMBER)
};

struct gpu_nccl {
	int version;    /* ncclGetVersion(): 10000 * major + 100 * minor + patch */
	char path[512];
	GPU_NCCL_FUNCS(GPU_FN_MEMBER)
};

/*
 * Load the CUDA runtime (once per process; thread-safe). On success *@out is the function
 * table, valid for the life of the process. Returns 0, or CRUN_EBACKEND with the reason in
 * @d (may be NULL): which library could not be opened (and why, as the dynamic loader put
 * it), or which symbol is missing from which file, with the version found.
 */
int gpu_cuda_load(const struct gpu_cuda **out, struct crun_diag *d);
/** As gpu_cuda_load(), for NCCL (2.18 or newer: non-blocking init, finalize, split). */
int gpu_nccl_load(const struct gpu_nccl **out, struct crun_diag *d);

/**
 * The number of CUDA devices the runtime @cu sees (>= 1), or CRUN_ENODEV with the cause in
 * @d (may be NULL), named as a person would fix it: no NVIDIA driver; a driver older than
 * the runtime (both versions); the system not ready (NVSwitch machines: the fabric manager);
 * no device visible (with CUDA_VISIBLE_DEVICES); else the runtime's own words.
 */
int gpu_cuda_device_count(const struct gpu_cuda *cu, struct crun_diag *d);

/**
 * 1 when device @dev's primary context is active in this process (someone has used the
 * device), 0 when it is not, 1 when that cannot be told (the driver's
 * cuDevicePrimaryCtxGetState not found). cudaSetDevice() initialises the primary context
 * (CUDA 12 and later), so switching a thread "back" to a device nobody used would cost a
 * context on it: comm_nccl.c asks first. Call after the runtime is initialised (any device
 * call), which loads the driver library this looks into.
 */
int gpu_cuda_device_active(int dev);

/**
 * The allocation that holds @p, from the driver (one cuPointerGetAttributes() of
 * CU_POINTER_ATTRIBUTE_BUFFER_ID, RANGE_START_ADDR and RANGE_SIZE): 0 with *@id (unique in
 * the process for each allocation, never reused after cudaFree), *@base and *@size; -1 when
 * @p is in no allocation CUDA knows (host memory, a freed buffer) or the driver's functions
 * were not found. Like gpu_cuda_device_active(), after the runtime is initialised.
 */
int gpu_cuda_alloc_of(const void *p, unsigned long long *id, uintptr_t *base, size_t *size);
/** Only the buffer id of @p's allocation (cuPointerGetAttribute()): 0, or -1 as above. */
int gpu_cuda_buffer_id(const void *p, unsigned long long *id);

#endif

#endif
