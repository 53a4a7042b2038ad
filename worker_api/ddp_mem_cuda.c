/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_mem_cuda.c: the DDP engine's memory operations on CUDA device memory. */

/*
 * Parameters and gradients are float32 device arrays and the communicator is nccl. Marking a
 * gradient ready records a CUDA event on the program's compute stream (d->stream: the kernels
 * that produce the gradient may still be running). The communication thread makes the
 * communicator's own stream wait for a bucket's events, copies through the flat buffer on
 * that stream when the bucket's tensors are not back to back, and averages with the
 * communicator's allreduce (ncclAllReduce, CRUN_REDOP_AVG, complete on the device when it returns).
 * Every CUDA call goes through the run-time loaded runtime (gpu_loader.h).
 */
#include <stdlib.h>

#include <crun/comm.h>
#include <crun/error.h>

#include "src/common/diag.h"
#include "worker_api/comm_internal.h"
#include "worker_api/ddp_mem.h"
#include "worker_api/gpu_loader.h"

/* The bridge for CUDA results: CRUN_ECUDA with the runtime's words in d->diag. */
static int cuda_fail(struct crun_ddp *d, cudaError_t e, const char *what)
{
	return diag_set(&d->diag, CRUN_ECUDA, "ddp_cuda: rank %d: %s: %s",
			crun_comm_rank(d->comm), what, d->cu->cudaGetErrorString(e));
}

static cudaStream_t comm_stream(const struct crun_ddp *d)
{
	return (cudaStream_t)comm_nccl_get_stream(d->comm);
}

static int cuda_init(struct crun_ddp *d)
{
	cudaError_t e;
	int rc;

	if (crun_comm_backend(d->comm) != CRUN_BACKEND_NCCL) {
		return diag_set(&d->diag, CRUN_EBACKEND,
				"ddp_cuda: device memory needs an nccl communicator");
	}
	/* An nccl communicator exists, so the runtime has been loaded already. */
	rc = gpu_cuda_load(&d->cu, &d->diag);
	if (rc < 0) {
		return rc;
	}
	/* The communication thread must use the program's device, whatever it is. */
	e = d->cu->cudaGetDevice(&d->device);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaGetDevice");
	}
	return 0;
}

static int cuda_tensor_init(struct crun_ddp *d, struct ddp_tensor *t)
{
	cudaEvent_t ev;
	cudaError_t e;

	e = d->cu->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaEventCreateWithFlags");
	}
	t->ev = ev;
	return 0;
}

static void cuda_tensor_finish(struct crun_ddp *d, struct ddp_tensor *t)
{
	d->cu->cudaEventDestroy((cudaEvent_t)t->ev);
}

static int cuda_buf_alloc(struct crun_ddp *d, float **buf, size_t n)
{
	cudaError_t e;

	e = d->cu->cudaMalloc((void **)buf, n * sizeof(float));
	if (e != cudaSuccess) {
		*buf = NULL;
		return cuda_fail(d, e, "cudaMalloc (bucket buffer)");
	}
	return 0;
}

static void cuda_buf_free(struct crun_ddp *d, float *buf)
{
	d->cu->cudaFree(buf);
}

static int cuda_mark(struct crun_ddp *d, struct ddp_tensor *t)
{
	cudaError_t e;

	e = d->cu->cudaEventRecord((cudaEvent_t)t->ev, (cudaStream_t)d->stream);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaEventRecord");
	}
	return 0;
}

/* Communication thread: its device is the program's; the comm stream waits for the bucket. */
static int cuda_wait_grads(struct crun_ddp *d, const struct ddp_bucket *bk)
{
	cudaError_t e;
	int k;

	e = d->cu->cudaSetDevice(d->device);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaSetDevice");
	}
	for (k = 0; k < bk->count; k++) {
		e = d->cu->cudaStreamWaitEvent(comm_stream(d), (cudaEvent_t)d->t[bk->first - k].ev,
					       0);
		if (e != cudaSuccess) {
			return cuda_fail(d, e, "cudaStreamWaitEvent");
		}
	}
	return 0;
}

/* Enqueued on the comm stream, after the events and before (or after) the collective. */
static int cuda_copy(struct crun_ddp *d, float *dst, const float *src, size_t n)
{
	cudaError_t e;

	e = d->cu->cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
				   comm_stream(d));
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaMemcpyAsync (bucket copy)");
	}
	return 0;
}

static int cuda_copy_done(struct crun_ddp *d)
{
	cudaError_t e;

	e = d->cu->cudaStreamSynchronize(comm_stream(d));
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaStreamSynchronize (bucket copy)");
	}
	return 0;
}

/* NCCL averages on the device; crun_comm_allreduce() returns once the result is there. */
static int cuda_allreduce_avg(struct crun_ddp *d, float *buf, size_t n)
{
	int rc;

	rc = crun_comm_allreduce(d->comm, buf, buf, n, CRUN_DTYPE_FLOAT32, CRUN_REDOP_AVG);
	if (rc < 0) {
		return diag_set(&d->diag, rc, "ddp_cuda: allreduce: %s",
				crun_comm_last_error(d->comm));
	}
	return 0;
}

/* Parameters the program wrote (a host-to-device copy, an init kernel) must have landed. */
static int cuda_params_ready(struct crun_ddp *d)
{
	cudaError_t e;

	e = d->cu->cudaStreamSynchronize((cudaStream_t)d->stream);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaStreamSynchronize (compute stream)");
	}
	return 0;
}

const struct ddp_memops ddp_cuda_memops = {
	.has_stream = true,
	.init = cuda_init,
	.tensor_init = cuda_tensor_init,
	.tensor_finish = cuda_tensor_finish,
	.buf_alloc = cuda_buf_alloc,
	.buf_free = cuda_buf_free,
	.mark = cuda_mark,
	.wait_grads = cuda_wait_grads,
	.copy = cuda_copy,
	.copy_done = cuda_copy_done,
	.allreduce_avg = cuda_allreduce_avg,
	.params_ready = cuda_params_ready,
};
