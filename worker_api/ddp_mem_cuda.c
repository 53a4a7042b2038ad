/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_mem_cuda.c: the DDP engine's memory operations on CUDA device memory. */

/*
 * Parameters and gradients are float32 device arrays and the communicator is nccl. Marking a
 * gradient ready records a CUDA event on the program's compute stream (d->stream: the kernels
 * that produce the gradient may still be running). The communication thread makes the
 * communicator's own stream wait for a bucket's events, copies through the flat buffer on
 * that stream when the bucket's tensors are not back to back, queues the average there
 * (ncclAllReduce, CRUN_REDOP_AVG, through the backend's queue-only call), queues the copies
 * back, and goes on to the next ready bucket without waiting for any of it. Once the step's
 * last bucket is queued, end_step()
 * records an event on the comm stream and makes the compute stream wait for it
 * (cudaStreamWaitEvent), as PyTorch's DDP does, so crun_ddp_sync() returns without the host
 * waiting for the data: the program's next kernels on the compute stream run after the
 * averaged gradients are in place. The communication thread then watches that event
 * (query(): cudaEventQuery beside NCCL's asynchronous error state, to the communicator's
 * deadline, which aborts it) and reports a failure at the next sync, crun_ddp_wait(),
 * broadcast or destroy. drain() waits for the stream only after a failed step, at the
 * broadcast's end and at destroy.
 * Every CUDA call goes through the run-time loaded runtime (gpu_loader.h).
 *
 * Devices: the DDP works on the communicator's device (d->device), which must be current on
 * the thread that creates it (else crun_ddp_create() refuses, naming both).
 * Calls made on the program's threads (register, the first broadcast/grad_ready/sync, which
 * allocate; grad_ready, which records an event, on the legacy stream of the current device
 * when no stream was set; broadcast, which waits for that stream) make that device current
 * and give the caller's back (device_enter(), device_leave()), so the program's current
 * device is never changed behind its back; a thread that never chose a device is left on the
 * DDP's rather than given a context on device 0. The communication thread is the DDP's own: it
 * sets the device once per bucket and keeps it.
 */
#include <stdlib.h>

#include <crun/comm.h>
#include <crun/error.h>

#include "src/common/diag.h"
#include "worker_api/comm_internal.h"
#include "worker_api/ddp_mem.h"
#include "worker_api/gpu_loader.h"

/* The bridge for CUDA results: CRUN_ECUDA with the runtime's words in ddp_diag(d). */
static int cuda_fail(struct crun_ddp *d, cudaError_t e, const char *what)
{
	return diag_set(ddp_diag(d), CRUN_ECUDA, "ddp_cuda: rank %d: %s: %s",
			crun_comm_rank(d->comm), what, d->cu->cudaGetErrorString(e));
}

static cudaStream_t comm_stream(const struct crun_ddp *d)
{
	return (cudaStream_t)comm_nccl_get_stream(d->comm);
}

/* Make the DDP's device current on a program's thread; *@prev receives the caller's. */
static int device_enter(struct crun_ddp *d, int *prev)
{
	cudaError_t e;

	e = d->cu->cudaGetDevice(prev);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaGetDevice");
	}
	if (*prev != d->device && (e = d->cu->cudaSetDevice(d->device)) != cudaSuccess) {
		return cuda_fail(d, e, "cudaSetDevice");
	}
	return 0;
}

/*
 * Give the caller its device back; returns @rc, or the failure to restore it. Unless nobody
 * in the process has used that device (a thread that never chose one reads device 0, and
 * cudaSetDevice(0) would create a context on GPU 0 in every rank): such a thread stays on
 * the DDP's device, as the nccl backend's own calls leave it (comm_nccl.c, device_leave()).
 */
static int device_leave(struct crun_ddp *d, int prev, int rc)
{
	cudaError_t e;

	if (prev == d->device || !gpu_cuda_device_active(prev)) {
		return rc;
	}
	e = d->cu->cudaSetDevice(prev);
	if (e != cudaSuccess && rc == 0) {
		return cuda_fail(d, e, "cudaSetDevice (back to the caller's device)");
	}
	return rc;
}

static int cuda_init(struct crun_ddp *d)
{
	cudaError_t e;
	int rc, cur = -1;

	if (crun_comm_backend(d->comm) != CRUN_BACKEND_NCCL) {
		return diag_set(ddp_diag(d), CRUN_EBACKEND,
				"ddp_cuda: device memory needs an nccl communicator");
	}
	/* An nccl communicator exists, so the runtime has been loaded already. */
	rc = gpu_cuda_load(&d->cu, ddp_diag(d));
	if (rc < 0) {
		return rc;
	}
	/*
	 * The DDP's device is the communicator's: its events, buffers and the copies on the
	 * communicator's stream live there. The creating thread's current device must be the
	 * same: the program's kernels (on the legacy stream of that device when no stream is
	 * set) write the gradients whose events the DDP records, and on another device the
	 * allreduce could read gradients before backward finished writing them.
	 */
	d->device = comm_nccl_device(d->comm);
	e = d->cu->cudaGetDevice(&cur);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaGetDevice");
	}
	if (cur != d->device) {
		return diag_set(ddp_diag(d), CRUN_ECONFIG,
				"ddp_cuda: rank %d: the calling thread's current CUDA device is %d, "
				"but the communicator's is %d: call cudaSetDevice(%d) on this "
				"thread before creating the DDP (the gradients, parameters and the "
				"compute stream must be on the communicator's device)",
				crun_comm_rank(d->comm), cur, d->device, d->device);
	}
	e = d->cu->cudaEventCreateWithFlags((cudaEvent_t *)&d->step_ev, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		d->step_ev = NULL;
		return cuda_fail(d, e, "cudaEventCreateWithFlags (end of step)");
	}
	return 0;
}

/* Destroy, once nothing queued refers to the event any more (or the comm was aborted). */
static void cuda_fini(struct crun_ddp *d)
{
	if (d->step_ev != NULL) {
		d->cu->cudaEventDestroy((cudaEvent_t)d->step_ev);
	}
}

/* An event belongs to the device current when it is made: the DDP's. */
static int cuda_tensor_init(struct crun_ddp *d, struct ddp_tensor *t)
{
	cudaEvent_t ev;
	cudaError_t e;
	int prev, rc;

	rc = device_enter(d, &prev);
	if (rc < 0) {
		return rc;
	}
	e = d->cu->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		rc = cuda_fail(d, e, "cudaEventCreateWithFlags");
	} else {
		t->ev = ev;
	}
	return device_leave(d, prev, rc);
}

/* Any device: an event still pending is released once it completes. */
static void cuda_tensor_finish(struct crun_ddp *d, struct ddp_tensor *t)
{
	d->cu->cudaEventDestroy((cudaEvent_t)t->ev);
}

static int cuda_buf_alloc(struct crun_ddp *d, float **buf, size_t n)
{
	cudaError_t e;
	int prev, rc;

	*buf = NULL;
	rc = device_enter(d, &prev);
	if (rc < 0) {
		return rc;
	}
	e = d->cu->cudaMalloc((void **)buf, n * sizeof(float));
	if (e != cudaSuccess) {
		*buf = NULL;
		rc = cuda_fail(d, e, "cudaMalloc (bucket buffer)");
	}
	return device_leave(d, prev, rc);
}

static void cuda_buf_free(struct crun_ddp *d, float *buf)
{
	int prev;

	if (device_enter(d, &prev) == 0) {
		d->cu->cudaFree(buf);
		device_leave(d, prev, 0);
	}
}

/*
 * The bucket plans of every rank (ddp.c, once): NCCL gathers device memory, so the few
 * doubles go through a device buffer, in order on the communicator's stream.
 */
static int cuda_gather(struct crun_ddp *d, const double *send, double *recv, size_t n)
{
	size_t bytes = n * sizeof(double), all = (size_t)d->world * bytes;
	cudaStream_t cs = comm_stream(d);
	double *dev = NULL;
	cudaError_t e;
	int prev, rc;

	rc = device_enter(d, &prev);
	if (rc < 0) {
		return rc;
	}
	e = d->cu->cudaMalloc((void **)&dev, bytes + all);
	if (e != cudaSuccess) {
		dev = NULL;
		rc = cuda_fail(d, e, "cudaMalloc (bucket plan)");
		goto out;
	}
	e = d->cu->cudaMemcpyAsync(dev, send, bytes, cudaMemcpyHostToDevice, cs);
	if (e != cudaSuccess) {
		rc = cuda_fail(d, e, "cudaMemcpyAsync (bucket plan to the device)");
		goto out;
	}
	rc = crun_comm_allgather(d->comm, dev, dev + n, n, CRUN_DTYPE_FLOAT64);
	if (rc < 0) {
		rc = diag_set(ddp_diag(d), rc, "ddp_cuda: bucket plan: allgather: %s",
			      crun_comm_last_error(d->comm));
		goto out;
	}
	e = d->cu->cudaMemcpyAsync(recv, dev + n, all, cudaMemcpyDeviceToHost, cs);
	if (e == cudaSuccess) {
		e = d->cu->cudaStreamSynchronize(cs);
	}
	if (e != cudaSuccess) {
		rc = cuda_fail(d, e, "cudaMemcpyAsync (bucket plans to the host)");
	}
out:
	if (dev != NULL) {
		d->cu->cudaFree(dev);
	}
	return device_leave(d, prev, rc);
}

/* On the compute stream; the legacy one (NULL) is the current device's, hence the device. */
static int cuda_mark(struct crun_ddp *d, struct ddp_tensor *t)
{
	cudaError_t e;
	int prev, rc;

	rc = device_enter(d, &prev);
	if (rc < 0) {
		return rc;
	}
	e = d->cu->cudaEventRecord((cudaEvent_t)t->ev, (cudaStream_t)d->stream);
	if (e != cudaSuccess) {
		rc = cuda_fail(d, e, "cudaEventRecord");
	}
	return device_leave(d, prev, rc);
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

/* Queued on the comm stream, after the events and before (or after) the collective; a copy
 * may be issued to a stream of a device other than the current one. */
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

/*
 * Average on the device, queued on the comm stream behind the bucket's event waits and copies
 * in (comm_allreduce_enqueue(): the buffer checks of crun_comm_allreduce(), ncclAllReduce,
 * no wait), so the communication thread goes on to the next ready bucket while this one is
 * still being reduced; the copies out of a flat buffer are queued after it, and drain()
 * waits for the lot. Only the communication thread uses the communicator in a step.
 */
static int cuda_allreduce_avg(struct crun_ddp *d, float *buf, size_t n)
{
	int rc;

	rc = comm_allreduce_enqueue(d->comm, buf, n, CRUN_DTYPE_FLOAT32, CRUN_REDOP_AVG,
				    comm_stream(d));
	if (rc < 0) {
		return diag_set(ddp_diag(d), rc, "ddp_cuda: allreduce: %s",
				crun_comm_last_error(d->comm));
	}
	return 0;
}

/*
 * Everything queued on the comm stream has completed: the step's collectives and the copies
 * around them. Waited for as the backend waits for a collective of its own (comm_wait():
 * the stream polled beside NCCL's asynchronous error state, to the communicator's timeout,
 * the communicator aborted on an error or at the deadline), so a peer that never joins a
 * bucket cannot hold this thread for ever.
 */
static int cuda_drain(struct crun_ddp *d)
{
	int rc;

	rc = comm_wait(d->comm, comm_stream(d), 0);
	if (rc < 0) {
		return diag_set(ddp_diag(d), rc, "ddp_cuda: waiting for the buckets: %s",
				crun_comm_last_error(d->comm));
	}
	return 0;
}

/*
 * Communication thread, the step's last bucket queued: everything on the comm stream so far
 * (this step's buckets and copies) is what the program's next work on the compute stream
 * needs. Recorded on the DDP's device (the thread's: cuda_wait_grads() set it); the legacy
 * stream (d->stream NULL) is that device's.
 */
static int cuda_end_step(struct crun_ddp *d)
{
	cudaError_t e;

	e = d->cu->cudaEventRecord((cudaEvent_t)d->step_ev, comm_stream(d));
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaEventRecord (end of step, comm stream)");
	}
	e = d->cu->cudaStreamWaitEvent((cudaStream_t)d->stream, (cudaEvent_t)d->step_ev, 0);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaStreamWaitEvent (compute stream on the end of step)");
	}
	return 0;
}

/* Has the last end_step()'s event completed? Never blocks (comm_query_event()). */
static int cuda_query(struct crun_ddp *d, int64_t deadline, long long step)
{
	struct crun_diag why = {0, ""};
	int rc;

	rc = comm_query_event(d->comm, d->step_ev, deadline, &why);
	if (rc < 0) {
		return diag_set(ddp_diag(d), rc,
				"ddp_cuda: rank %d: step %lld (its collectives, still on the "
				"device when its crun_ddp_sync() returned): %s",
				crun_comm_rank(d->comm), step, why.msg);
	}
	return rc;
}

/* Parameters the program wrote (a host-to-device copy, an init kernel) must have landed. */
static int cuda_params_ready(struct crun_ddp *d)
{
	cudaError_t e;
	int prev, rc;

	rc = device_enter(d, &prev);
	if (rc < 0) {
		return rc;
	}
	e = d->cu->cudaStreamSynchronize((cudaStream_t)d->stream);
	if (e != cudaSuccess) {
		rc = cuda_fail(d, e, "cudaStreamSynchronize (compute stream)");
	}
	return device_leave(d, prev, rc);
}

const struct ddp_memops ddp_cuda_memops = {
	.has_stream = true,
	.init = cuda_init,
	.fini = cuda_fini,
	.tensor_init = cuda_tensor_init,
	.tensor_finish = cuda_tensor_finish,
	.buf_alloc = cuda_buf_alloc,
	.buf_free = cuda_buf_free,
	.gather = cuda_gather,
	.mark = cuda_mark,
	.wait_grads = cuda_wait_grads,
	.copy = cuda_copy,
	.allreduce_avg = cuda_allreduce_avg,
	.end_step = cuda_end_step,
	.query = cuda_query,
	.drain = cuda_drain,
	.params_ready = cuda_params_ready,
};
