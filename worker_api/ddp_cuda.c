/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_cuda.c: device gradient buckets reduced on the nccl comm's own stream. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <crun/comm.h>
#include <crun/ddp.h>
#include <crun/ddp_cuda.h>
#include <crun/error.h>

#include "config.h"
#include "src/common/util.h"
#include "src/common/diag.h"

#if CRUN_HAVE_NCCL

/* Third-party headers: not held to our warning flags. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#include "worker_api/comm_internal.h"
#include "worker_api/ddp_plan.h"

#define DDP_DEFAULT_CAP (25u << 20)
#define DDP_DEFAULT_FIRST (1u << 20)

struct tensor {
	struct ddp_slot s; /* first member: what ddp_plan_buckets() reads and fills (device) */
	cudaEvent_t ev;    /* recorded on the compute stream when the gradient is ready */
	bool marked;
};

struct crun_ddp_cuda {
	struct crun_comm *comm;
	cudaStream_t compute; /* the program's stream (borrowed); NULL: legacy default */
	int device;
	size_t cap_bytes, first_bytes;
	int world;
	struct tensor *t;
	int nt, tcap;
	struct ddp_bucket *b;
	int nb;
	bool built;

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t mu;
	pthread_cond_t work;
	pthread_cond_t done;
	int next;
	int finished;
	int nmarked;
	int err; /* sticky */
	bool stop;
	bool no_sync;
	struct crun_diag diag;
};

static int cuda_fail(struct crun_ddp_cuda *d, cudaError_t e, const char *what)
{
	return diag_set(&d->diag, CRUN_ECUDA, "ddp_cuda: rank %d: %s: %s",
			crun_comm_rank(d->comm), what, cudaGetErrorString(e));
}

static cudaStream_t comm_stream(const struct crun_ddp_cuda *d)
{
	return (cudaStream_t)comm_nccl_get_stream(d->comm);
}

/* Copy a bucket's tensors into (@in) or out of its flat device buffer on the comm stream. */
static int flat_copy(struct crun_ddp_cuda *d, struct ddp_bucket *bk, bool in, bool params)
{
	cudaStream_t s = comm_stream(d);
	struct tensor *t;
	cudaError_t e;
	int k;

	for (k = 0; k < bk->count; k++) {
		float *x;

		t = &d->t[bk->first - k];
		x = params ? t->s.param : t->s.grad;
		e = cudaMemcpyAsync(in ? bk->buf + t->s.offset : x, in ? x : bk->buf + t->s.offset,
				    t->s.n * sizeof(float), cudaMemcpyDeviceToDevice, s);
		if (e != cudaSuccess) {
			return cuda_fail(d, e, "cudaMemcpyAsync (bucket copy)");
		}
	}
	if (!in) {
		e = cudaStreamSynchronize(s);
		if (e != cudaSuccess) {
			return cuda_fail(d, e, "cudaStreamSynchronize (bucket copy)");
		}
	}
	return 0;
}

/* Runs on the communication thread: wait for the gradients' events, then average. */
static int reduce_bucket(struct crun_ddp_cuda *d, struct ddp_bucket *bk)
{
	float *buf = bk->grad_span != NULL ? bk->grad_span : bk->buf;
	cudaError_t e;
	int k, rc;

	e = cudaSetDevice(d->device);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaSetDevice");
	}
	for (k = 0; k < bk->count; k++) {
		e = cudaStreamWaitEvent(comm_stream(d), d->t[bk->first - k].ev, 0);
		if (e != cudaSuccess) {
			return cuda_fail(d, e, "cudaStreamWaitEvent");
		}
	}
	if (bk->grad_span == NULL && (rc = flat_copy(d, bk, true, false)) < 0) {
		return rc;
	}
	rc = crun_comm_allreduce(d->comm, buf, buf, bk->numel, CRUN_FLOAT32, CRUN_AVG);
	if (rc < 0) {
		return diag_set(&d->diag, rc, "ddp_cuda: allreduce: %s",
				crun_comm_last_error(d->comm));
	}
	if (bk->grad_span == NULL) {
		return flat_copy(d, bk, false, false);
	}
	return 0;
}

static void *comm_thread(void *arg)
{
	struct crun_ddp_cuda *d = arg;
	struct ddp_bucket *bk;
	int rc;

	pthread_mutex_lock(&d->mu);
	while (!d->stop) {
		if (d->next < d->nb && d->b[d->next].ready) {
			bk = &d->b[d->next++];
			if (d->err == 0) {
				pthread_mutex_unlock(&d->mu);
				rc = reduce_bucket(d, bk);
				pthread_mutex_lock(&d->mu);
				if (rc < 0 && d->err == 0) {
					d->err = rc;
				}
			}
			d->finished++;
			pthread_cond_broadcast(&d->done);
			continue;
		}
		pthread_cond_wait(&d->work, &d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

CRUN_EXPORT int crun_ddp_cuda_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				     void *stream, struct crun_ddp_cuda **out)
{
	struct crun_ddp_cuda *d;
	cudaError_t e;

	if (out == NULL || comm == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	if (crun_comm_backend(comm) != CRUN_BACKEND_NCCL) {
		return CRUN_EBACKEND;
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL) {
		return -ENOMEM;
	}
	d->comm = comm;
	d->compute = (cudaStream_t)stream;
	d->world = crun_comm_size(comm);
	d->cap_bytes = opts != NULL && opts->bucket_cap_bytes > 0 ? opts->bucket_cap_bytes
								   : DDP_DEFAULT_CAP;
	d->first_bytes = opts != NULL && opts->first_bucket_bytes > 0 ? opts->first_bucket_bytes
								       : DDP_DEFAULT_FIRST;
	/* The communication thread must use the program's device, whatever it is. */
	e = cudaGetDevice(&d->device);
	if (e != cudaSuccess) {
		free(d);
		return CRUN_ECUDA;
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->done, NULL);
	if (pthread_create(&d->thread, NULL, comm_thread, d) != 0) {
		crun_ddp_cuda_destroy(d);
		return -EAGAIN;
	}
	d->thread_started = true;
	*out = d;
	return 0;
}

CRUN_EXPORT void crun_ddp_cuda_destroy(struct crun_ddp_cuda *d)
{
	int i;

	if (d == NULL) {
		return;
	}
	if (d->thread_started) {
		pthread_mutex_lock(&d->mu);
		d->stop = true;
		pthread_cond_broadcast(&d->work);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->thread, NULL);
	}
	for (i = 0; i < d->nb; i++) {
		cudaFree(d->b[i].buf);
	}
	for (i = 0; i < d->nt; i++) {
		cudaEventDestroy(d->t[i].ev);
	}
	free(d->b);
	free(d->t);
	pthread_cond_destroy(&d->done);
	pthread_cond_destroy(&d->work);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

CRUN_EXPORT int crun_ddp_cuda_register(struct crun_ddp_cuda *d, float *param, float *grad,
				       size_t n)
{
	struct tensor *nt;
	cudaEvent_t ev;
	cudaError_t e;
	int idx;

	if (d == NULL || param == NULL || grad == NULL || n == 0) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	if (d->built) {
		pthread_mutex_unlock(&d->mu);
		return -EBUSY;
	}
	if (d->nt == d->tcap) {
		int ncap = d->tcap == 0 ? 16 : d->tcap * 2;

		nt = realloc(d->t, (size_t)ncap * sizeof(*nt));
		if (nt == NULL) {
			pthread_mutex_unlock(&d->mu);
			return -ENOMEM;
		}
		d->t = nt;
		d->tcap = ncap;
	}
	e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		idx = cuda_fail(d, e, "cudaEventCreateWithFlags");
		pthread_mutex_unlock(&d->mu);
		return idx;
	}
	idx = d->nt++;
	memset(&d->t[idx], 0, sizeof(d->t[idx]));
	d->t[idx].s.param = param;
	d->t[idx].s.grad = grad;
	d->t[idx].s.n = n;
	d->t[idx].ev = ev;
	pthread_mutex_unlock(&d->mu);
	return idx;
}

/* Group tensors into buckets, last registered first. Called with d->mu held. */
static int build(struct crun_ddp_cuda *d)
{
	struct ddp_bucket *b;
	cudaError_t e;
	int i, nb, rc;

	if (d->built) {
		return 0;
	}
	rc = ddp_plan_buckets(d->t, sizeof(*d->t), d->nt, d->first_bytes, d->cap_bytes, &b, &nb);
	if (rc < 0) {
		return rc;
	}
	for (i = 0; i < nb; i++) {
		if (ddp_bucket_needs_buf(&b[i])) {
			e = cudaMalloc((void **)&b[i].buf, b[i].numel * sizeof(float));
			if (e != cudaSuccess) {
				rc = cuda_fail(d, e, "cudaMalloc (bucket buffer)");
				while (i-- > 0) {
					cudaFree(b[i].buf);
				}
				free(b);
				return rc;
			}
		}
	}
	d->b = b;
	d->nb = nb;
	d->built = true;
	return 0;
}

CRUN_EXPORT int crun_ddp_cuda_broadcast_params(struct crun_ddp_cuda *d)
{
	struct ddp_bucket *bk;
	cudaError_t e;
	int i, rc;

	if (d == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	rc = build(d);
	if (rc == 0 && (d->next != 0 || d->finished != 0 || d->err != 0)) {
		rc = d->err != 0 ? d->err : -EBUSY;
	}
	pthread_mutex_unlock(&d->mu);
	if (rc < 0 || d->world == 1) {
		return rc;
	}
	/* Parameters the program wrote (a host-to-device copy, an init kernel) must have landed. */
	e = cudaStreamSynchronize(d->compute);
	if (e != cudaSuccess) {
		return cuda_fail(d, e, "cudaStreamSynchronize (compute stream)");
	}
	for (i = 0; i < d->nb; i++) {
		bk = &d->b[i];
		if (bk->param_span != NULL) {
			rc = crun_comm_broadcast(d->comm, bk->param_span, bk->numel, CRUN_FLOAT32, 0);
		} else {
			rc = flat_copy(d, bk, true, true);
			if (rc == 0) {
				rc = crun_comm_broadcast(d->comm, bk->buf, bk->numel, CRUN_FLOAT32,
							 0);
			}
			if (rc == 0) {
				rc = flat_copy(d, bk, false, true);
			}
		}
		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

/* Mark tensor @i ready; hand its bucket over when complete. Called with d->mu held. */
static int mark(struct crun_ddp_cuda *d, int i)
{
	struct ddp_bucket *bk = &d->b[d->t[i].s.bucket];
	cudaError_t e;

	if (d->world > 1) {
		e = cudaEventRecord(d->t[i].ev, d->compute);
		if (e != cudaSuccess) {
			return cuda_fail(d, e, "cudaEventRecord");
		}
	}
	d->t[i].marked = true;
	d->nmarked++;
	if (--bk->pending == 0) {
		bk->ready = true;
		if (d->world == 1) {
			d->next++;
			d->finished++;
			return 0;
		}
		pthread_cond_signal(&d->work);
	}
	return 0;
}

CRUN_EXPORT int crun_ddp_cuda_grad_ready(struct crun_ddp_cuda *d, int index)
{
	int rc = 0;

	if (d == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	if (index < 0 || index >= d->nt) {
		rc = -EINVAL;
	} else if (!d->no_sync || d->nmarked > 0) {
		rc = build(d);
		if (rc == 0 && d->t[index].marked) {
			rc = -EALREADY;
		} else if (rc == 0) {
			rc = mark(d, index);
		}
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

CRUN_EXPORT int crun_ddp_cuda_sync(struct crun_ddp_cuda *d)
{
	int i, rc;

	if (d == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	if (d->no_sync && d->nmarked == 0) {
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	rc = build(d);
	for (i = d->nt - 1; rc == 0 && i >= 0; i--) {
		if (!d->t[i].marked) {
			rc = mark(d, i);
		}
	}
	if (rc < 0) {
		/* A bucket that cannot start would leave the others waiting: poison the DDP. */
		if (d->err == 0) {
			d->err = rc;
		}
		for (i = 0; i < d->nb; i++) {
			if (!d->b[i].ready) {
				d->b[i].ready = true;
				if (d->world == 1) {
					d->next++;
					d->finished++;
				}
			}
		}
		pthread_cond_signal(&d->work);
	}
	while (d->finished < d->nb) {
		pthread_cond_wait(&d->done, &d->mu);
	}
	rc = d->err;
	for (i = 0; i < d->nt; i++) {
		d->t[i].marked = false;
	}
	for (i = 0; i < d->nb; i++) {
		d->b[i].pending = d->b[i].count;
		d->b[i].ready = false;
	}
	d->next = 0;
	d->finished = 0;
	d->nmarked = 0;
	pthread_mutex_unlock(&d->mu);
	return rc;
}

CRUN_EXPORT void crun_ddp_cuda_set_no_sync(struct crun_ddp_cuda *d, bool on)
{
	if (d == NULL) {
		return;
	}
	pthread_mutex_lock(&d->mu);
	d->no_sync = on;
	pthread_mutex_unlock(&d->mu);
}

CRUN_EXPORT int crun_ddp_cuda_bucket_count(const struct crun_ddp_cuda *d)
{
	return d != NULL && d->built ? d->nb : 0;
}

CRUN_EXPORT const char *crun_ddp_cuda_last_error(const struct crun_ddp_cuda *d)
{
	return d != NULL ? d->diag.msg : "";
}

#else /* !CRUN_HAVE_NCCL: the API exists and says why it cannot work. */

CRUN_EXPORT int crun_ddp_cuda_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				     void *stream, struct crun_ddp_cuda **out)
{
	if (out != NULL) {
		*out = NULL;
	}
	return CRUN_EBACKEND;
}

CRUN_EXPORT void crun_ddp_cuda_destroy(struct crun_ddp_cuda *d)
{
}

CRUN_EXPORT int crun_ddp_cuda_register(struct crun_ddp_cuda *d, float *param, float *grad,
				       size_t n)
{
	return CRUN_EBACKEND;
}

CRUN_EXPORT int crun_ddp_cuda_broadcast_params(struct crun_ddp_cuda *d)
{
	return CRUN_EBACKEND;
}

CRUN_EXPORT int crun_ddp_cuda_grad_ready(struct crun_ddp_cuda *d, int index)
{
	return CRUN_EBACKEND;
}

CRUN_EXPORT int crun_ddp_cuda_sync(struct crun_ddp_cuda *d)
{
	return CRUN_EBACKEND;
}

CRUN_EXPORT void crun_ddp_cuda_set_no_sync(struct crun_ddp_cuda *d, bool on)
{
}

CRUN_EXPORT int crun_ddp_cuda_bucket_count(const struct crun_ddp_cuda *d)
{
	return 0;
}

CRUN_EXPORT const char *crun_ddp_cuda_last_error(const struct crun_ddp_cuda *d)
{
	return "libcrun-worker was built without CUDA/NCCL";
}

#endif
