/* SPDX-License-Identifier: MIT */
/* include/crun/ddp_cuda.h: crun_ddp on CUDA device memory, the 0.1 names (thin wrappers). */
#ifndef CRUN_DDP_CUDA_H
#define CRUN_DDP_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include <crun/export.h>
#include <crun/comm.h>
#include <crun/ddp.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Device DDP under its 0.1 names. Each function is a thin wrapper over the one engine of
 * include/crun/ddp.h: crun_ddp_cuda_create(comm, opts, stream, &d) is crun_ddp_create() with
 * opts->memory set to CRUN_DDP_MEMORY_CUDA (whatever the caller's opts say) followed by
 * crun_ddp_set_stream(stream), and crun_ddp_cuda_X(d, ...) is crun_ddp_X(d, ...). Buckets,
 * their order, caps, no_sync, the CUDA overlap (events on the compute stream, ncclAllReduce
 * on the communicator's stream) and the thread-safety rules are described there. New code
 * may use crun_ddp_* with the memory option directly; these names stay for programs that use
 * them.
 *
 * Available when libcrun-worker was built with CUDA and NCCL headers (the libraries are loaded
 * at run time); otherwise every call returns CRUN_EBACKEND (create) or is a no-op. Public
 * headers stay free of CUDA types: a stream is a cudaStream_t passed as void *.
 */
struct crun_ddp_cuda;

/**
 * @comm borrowed (an nccl communicator; must outlive the DDP); @opts may be NULL;
 * @stream (a cudaStream_t, borrowed; NULL: the legacy default stream) is where the program
 * computes gradients. *out owned by the caller (crun_ddp_cuda_destroy()).
 * Returns 0, -EINVAL, -ENOMEM, -EAGAIN (no thread), CRUN_EBACKEND (not an nccl communicator,
 * or built without NCCL) or CRUN_ECUDA.
 */
CRUN_EXPORT int crun_ddp_cuda_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				     void *stream, struct crun_ddp_cuda **out);
/** Stop the communication thread (waiting for a bucket in flight) and free; NULL: no-op. */
CRUN_EXPORT void crun_ddp_cuda_destroy(struct crun_ddp_cuda *d);
/**
 * Register device arrays @param, @grad (borrowed) of @n floats. Returns the index (>= 0),
 * -EINVAL, -EBUSY (after the first broadcast/grad_ready/sync), -ENOMEM or CRUN_ECUDA.
 */
CRUN_EXPORT int crun_ddp_cuda_register(struct crun_ddp_cuda *d, float *param, float *grad,
				       size_t n);
/**
 * Wait for the compute stream, then broadcast every parameter from rank 0 on the device.
 * Returns 0, -EINVAL (nothing registered), -EBUSY (a step in flight: a gradient is marked),
 * -ENOMEM, CRUN_ECONFIG (the ranks' bucket plans differ), CRUN_ECUDA or a communication code.
 */
CRUN_EXPORT int crun_ddp_cuda_broadcast_params(struct crun_ddp_cuda *d);
/**
 * Gradient @index is final once the work enqueued so far on the compute stream completes.
 * Returns 0, -EINVAL, -EALREADY, -ENOMEM or CRUN_ECUDA. A no-op (0) in no_sync mode.
 */
CRUN_EXPORT int crun_ddp_cuda_grad_ready(struct crun_ddp_cuda *d, int index);
/**
 * Mark the remaining gradients ready and wait until every bucket is averaged over the world.
 * In no_sync mode returns 0 at once. Returns 0 or the first error (then destroy the DDP).
 */
CRUN_EXPORT int crun_ddp_cuda_sync(struct crun_ddp_cuda *d);
/** As crun_ddp_set_no_sync(). */
CRUN_EXPORT void crun_ddp_cuda_set_no_sync(struct crun_ddp_cuda *d, bool on);
/** Number of buckets (0 before the first broadcast/grad_ready/sync). */
CRUN_EXPORT int crun_ddp_cuda_bucket_count(const struct crun_ddp_cuda *d);
/** The message of the last CUDA failure, "<where>: <what>: <why>", or "". Borrowed. */
CRUN_EXPORT const char *crun_ddp_cuda_last_error(const struct crun_ddp_cuda *d);

#ifdef __cplusplus
}
#endif

#endif
