/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_mem_host.c: the DDP engine's memory operations on host memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <crun/comm.h>
#include <crun/error.h>

#include "src/common/diag.h"
#include "worker_api/ddp_mem.h"

/* Buckets are copied with memcpy and reduced by the communicator on host buffers: an nccl
 * communicator (device memory) cannot serve them. */
static int host_init(struct crun_ddp *d)
{
	if (crun_comm_backend(d->comm) == CRUN_BACKEND_NCCL) {
		return diag_set(ddp_diag(d), CRUN_EBACKEND,
				"ddp: host memory needs a host communicator, not nccl");
	}
	return 0;
}

static int host_buf_alloc(struct crun_ddp *d, float **buf, size_t n)
{
	*buf = malloc(n * sizeof(float));
	return *buf != NULL ? 0 : -ENOMEM;
}

static void host_buf_free(struct crun_ddp *d, float *buf)
{
	free(buf);
}

static int host_copy(struct crun_ddp *d, float *dst, const float *src, size_t n)
{
	memcpy(dst, src, n * sizeof(float));
	return 0;
}

static int host_gather(struct crun_ddp *d, const double *send, double *recv, size_t n)
{
	int rc;

	rc = crun_comm_allgather(d->comm, send, recv, n, CRUN_DTYPE_FLOAT64);
	if (rc < 0) {
		return diag_set(ddp_diag(d), rc, "ddp: bucket plan: allgather: %s",
				crun_comm_last_error(d->comm));
	}
	return 0;
}

/* Sum, then scale by 1/world here: the same arithmetic on every communicator. */
static int host_allreduce_avg(struct crun_ddp *d, float *buf, size_t n)
{
	float scale = 1.0f / (float)d->world;
	size_t i;
	int rc;

	rc = crun_comm_allreduce(d->comm, buf, buf, n, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	if (rc < 0) {
		return diag_set(ddp_diag(d), rc, "ddp: allreduce: %s",
				crun_comm_last_error(d->comm));
	}
	for (i = 0; i < n; i++) {
		buf[i] *= scale;
	}
	return 0;
}

const struct ddp_memops ddp_host_memops = {
	.init = host_init,
	.buf_alloc = host_buf_alloc,
	.buf_free = host_buf_free,
	.gather = host_gather,
	.copy = host_copy,
	.allreduce_avg = host_allreduce_avg,
};
