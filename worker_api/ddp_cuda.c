/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_cuda.c: crun_ddp_cuda_*, thin wrappers over the one DDP engine (ddp.c). */

/*
 * A struct crun_ddp_cuda is a struct crun_ddp created with CRUN_DDP_MEMORY_CUDA; the type
 * stays distinct in the public header so programs written against 0.1 keep compiling and
 * linking. Built without CUDA/NCCL, every call says so (CRUN_EBACKEND) as it always did.
 */
#include <errno.h>
#include <stddef.h>

#include <crun/comm.h>
#include <crun/ddp.h>
#include <crun/ddp_cuda.h>
#include <crun/error.h>

#include "config.h"
#include "src/common/opts.h"
#include "worker_api/ddp_mem.h"

static struct crun_ddp *engine(struct crun_ddp_cuda *d)
{
	return (struct crun_ddp *)d;
}

static const struct crun_ddp *engine_const(const struct crun_ddp_cuda *d)
{
	return (const struct crun_ddp *)d;
}

CRUN_EXPORT int crun_ddp_cuda_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				     void *stream, struct crun_ddp_cuda **out)
{
	struct crun_ddp_opts o;
	struct crun_ddp *d;
	int rc;

	if (out == NULL) {
		return CRUN_HAVE_NCCL ? -EINVAL : CRUN_EBACKEND;
	}
	*out = NULL;
	if (!CRUN_HAVE_NCCL) {
		return CRUN_EBACKEND;
	}
	if (comm == NULL) {
		return -EINVAL;
	}
	/* The caller's options, whatever their memory field says, on the device. */
	if (opts_copy(&o, sizeof(o), opts, DDP_OPTS_SIZE_0_2_0) < 0) {
		return -EINVAL;
	}
	o.memory = CRUN_DDP_MEMORY_CUDA;
	rc = crun_ddp_create(comm, &o, &d);
	if (rc < 0) {
		return rc;
	}
	rc = crun_ddp_set_stream(d, stream);
	if (rc < 0) {
		crun_ddp_destroy(d);
		return rc;
	}
	*out = (struct crun_ddp_cuda *)d;
	return 0;
}

CRUN_EXPORT void crun_ddp_cuda_destroy(struct crun_ddp_cuda *d)
{
	crun_ddp_destroy(engine(d));
}

CRUN_EXPORT int crun_ddp_cuda_register(struct crun_ddp_cuda *d, float *param, float *grad,
				       size_t n)
{
	if (!CRUN_HAVE_NCCL) {
		return CRUN_EBACKEND;
	}
	return crun_ddp_register(engine(d), param, grad, n);
}

CRUN_EXPORT int crun_ddp_cuda_broadcast_params(struct crun_ddp_cuda *d)
{
	if (!CRUN_HAVE_NCCL) {
		return CRUN_EBACKEND;
	}
	return crun_ddp_broadcast_params(engine(d));
}

CRUN_EXPORT int crun_ddp_cuda_grad_ready(struct crun_ddp_cuda *d, int index)
{
	if (!CRUN_HAVE_NCCL) {
		return CRUN_EBACKEND;
	}
	return crun_ddp_grad_ready(engine(d), index);
}

CRUN_EXPORT int crun_ddp_cuda_sync(struct crun_ddp_cuda *d)
{
	if (!CRUN_HAVE_NCCL) {
		return CRUN_EBACKEND;
	}
	return crun_ddp_sync(engine(d));
}

CRUN_EXPORT void crun_ddp_cuda_set_no_sync(struct crun_ddp_cuda *d, bool on)
{
	crun_ddp_set_no_sync(engine(d), on);
}

CRUN_EXPORT int crun_ddp_cuda_bucket_count(const struct crun_ddp_cuda *d)
{
	return crun_ddp_bucket_count(engine_const(d));
}

CRUN_EXPORT const char *crun_ddp_cuda_last_error(const struct crun_ddp_cuda *d)
{
	if (!CRUN_HAVE_NCCL) {
		return "libcrun-worker was built without CUDA/NCCL";
	}
	return crun_ddp_last_error(engine_const(d));
}
