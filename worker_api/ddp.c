/* SPDX-License-Identifier: MIT */
/* worker_api/ddp.c: gradient buckets reduced on a communication thread during backward. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <crun/comm.h>
#include <crun/ddp.h>
#include <crun/error.h>

#include "worker_api/ddp_plan.h"

#define DDP_DEFAULT_CAP (25u << 20)
#define DDP_DEFAULT_FIRST (1u << 20)

struct tensor {
	struct ddp_slot s; /* first member: what ddp_plan_buckets() reads and fills */
	bool marked;       /* gradient ready in this step */
};

struct crun_ddp {
	struct crun_comm *comm;
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
	pthread_cond_t work; /* a bucket became ready, or stop */
	pthread_cond_t done; /* a bucket finished */
	int next;            /* next bucket the communication thread reduces */
	int finished;        /* buckets finished in this step */
	int nmarked;         /* tensors marked in this step: > 0 means a step is in flight */
	int err;             /* first communication error; sticky */
	bool stop;
	bool no_sync;
};

static int reduce_bucket(struct crun_ddp *d, struct ddp_bucket *bk)
{
	float scale = 1.0f / (float)d->world;
	float *buf = bk->grad_span;
	struct tensor *t;
	size_t i;
	int k, rc;

	if (d->world == 1) {
		return 0;
	}
	if (buf == NULL) {
		buf = bk->buf;
		for (k = 0; k < bk->count; k++) {
			t = &d->t[bk->first - k];
			memcpy(buf + t->s.offset, t->s.grad, t->s.n * sizeof(float));
		}
	}
	rc = crun_comm_allreduce(d->comm, buf, buf, bk->numel, CRUN_FLOAT32, CRUN_SUM);
	if (rc < 0) {
		return rc;
	}
	for (i = 0; i < bk->numel; i++) {
		buf[i] *= scale;
	}
	if (bk->grad_span == NULL) {
		for (k = 0; k < bk->count; k++) {
			t = &d->t[bk->first - k];
			memcpy(t->s.grad, buf + t->s.offset, t->s.n * sizeof(float));
		}
	}
	return 0;
}

static void *comm_thread(void *arg)
{
	struct crun_ddp *d = arg;
	struct ddp_bucket *bk;
	int rc;

	pthread_mutex_lock(&d->mu);
	while (!d->stop) {
		if (d->world > 1 && d->next < d->nb && d->b[d->next].ready) {
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

CRUN_EXPORT int crun_ddp_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				struct crun_ddp **out)
{
	struct crun_ddp *d;

	if (out == NULL || comm == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	/* Buckets are copied with memcpy: host memory only until a device path exists. */
	if (crun_comm_backend(comm) == CRUN_BACKEND_NCCL) {
		return CRUN_EBACKEND;
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL) {
		return -ENOMEM;
	}
	d->comm = comm;
	d->world = crun_comm_size(comm);
	d->cap_bytes = opts != NULL && opts->bucket_cap_bytes > 0 ? opts->bucket_cap_bytes
								   : DDP_DEFAULT_CAP;
	d->first_bytes = opts != NULL && opts->first_bucket_bytes > 0 ? opts->first_bucket_bytes
								       : DDP_DEFAULT_FIRST;
	if (d->world < 1) {
		free(d);
		return -EINVAL;
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->done, NULL);
	if (pthread_create(&d->thread, NULL, comm_thread, d) != 0) {
		crun_ddp_destroy(d);
		return -EAGAIN;
	}
	d->thread_started = true;
	*out = d;
	return 0;
}

CRUN_EXPORT void crun_ddp_destroy(struct crun_ddp *d)
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
		free(d->b[i].buf);
	}
	free(d->b);
	free(d->t);
	pthread_cond_destroy(&d->done);
	pthread_cond_destroy(&d->work);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

CRUN_EXPORT int crun_ddp_register(struct crun_ddp *d, float *param, float *grad, size_t n)
{
	struct tensor *nt;
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
	idx = d->nt++;
	memset(&d->t[idx], 0, sizeof(d->t[idx]));
	d->t[idx].s.param = param;
	d->t[idx].s.grad = grad;
	d->t[idx].s.n = n;
	pthread_mutex_unlock(&d->mu);
	return idx;
}

/* Group tensors into buckets, last registered first. Called with d->mu held. */
static int build(struct crun_ddp *d)
{
	struct ddp_bucket *b;
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
			b[i].buf = malloc(b[i].numel * sizeof(float));
			if (b[i].buf == NULL) {
				while (i-- > 0) {
					free(b[i].buf);
				}
				free(b);
				return -ENOMEM;
			}
		}
	}
	d->b = b;
	d->nb = nb;
	d->built = true;
	return 0;
}

CRUN_EXPORT int crun_ddp_broadcast_params(struct crun_ddp *d)
{
	struct ddp_bucket *bk;
	struct tensor *t;
	int i, k, rc;

	if (d == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	rc = build(d);
	if (rc == 0 && (d->next != 0 || d->finished != 0 || d->err != 0)) {
		rc = d->err != 0 ? d->err : -EBUSY; /* in the middle of a step */
	}
	pthread_mutex_unlock(&d->mu);
	if (rc < 0 || d->world == 1) {
		return rc;
	}
	/* The communication thread is idle: no bucket is ready between steps. */
	for (i = 0; i < d->nb; i++) {
		bk = &d->b[i];
		if (bk->param_span != NULL) {
			rc = crun_comm_broadcast(d->comm, bk->param_span, bk->numel, CRUN_FLOAT32, 0);
		} else {
			for (k = 0; k < bk->count; k++) {
				t = &d->t[bk->first - k];
				memcpy(bk->buf + t->s.offset, t->s.param, t->s.n * sizeof(float));
			}
			rc = crun_comm_broadcast(d->comm, bk->buf, bk->numel, CRUN_FLOAT32, 0);
			for (k = 0; rc == 0 && k < bk->count; k++) {
				t = &d->t[bk->first - k];
				memcpy(t->s.param, bk->buf + t->s.offset, t->s.n * sizeof(float));
			}
		}
		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

/* Mark tensor @i ready; start its bucket when complete. Called with d->mu held. */
static void mark(struct crun_ddp *d, int i)
{
	struct ddp_bucket *bk = &d->b[d->t[i].s.bucket];

	d->t[i].marked = true;
	d->nmarked++;
	if (--bk->pending == 0) {
		bk->ready = true;
		if (d->world == 1) {
			/* Nothing to reduce: skip the hand-off to the communication thread. */
			d->next++;
			d->finished++;
			return;
		}
		pthread_cond_signal(&d->work);
	}
}

CRUN_EXPORT int crun_ddp_grad_ready(struct crun_ddp *d, int index)
{
	int rc = 0;

	if (d == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	if (index < 0 || index >= d->nt) {
		rc = -EINVAL;
	} else if (!d->no_sync || d->nmarked > 0) {
		/* no_sync takes effect at a step boundary: a step already in flight goes on. */
		rc = build(d);
		if (rc == 0 && d->t[index].marked) {
			rc = -EALREADY;
		} else if (rc == 0) {
			mark(d, index);
		}
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

CRUN_EXPORT int crun_ddp_sync(struct crun_ddp *d)
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
	/* Otherwise finish the step, even if no_sync was switched on after it started: returning
	 * now would leave buckets in flight on the communication thread and marks behind. */
	rc = build(d);
	if (rc < 0) {
		pthread_mutex_unlock(&d->mu);
		return rc;
	}
	for (i = d->nt - 1; i >= 0; i--) {
		if (!d->t[i].marked) {
			mark(d, i);
		}
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

CRUN_EXPORT void crun_ddp_set_no_sync(struct crun_ddp *d, bool on)
{
	pthread_mutex_lock(&d->mu);
	d->no_sync = on;
	pthread_mutex_unlock(&d->mu);
}

CRUN_EXPORT int crun_ddp_bucket_count(const struct crun_ddp *d)
{
	return d->built ? d->nb : 0;
}

CRUN_EXPORT int crun_ddp_bucket_of(const struct crun_ddp *d, int index)
{
	if (!d->built || index < 0 || index >= d->nt) {
		return -EINVAL;
	}
	return d->t[index].s.bucket;
}

CRUN_EXPORT int crun_ddp_buckets_reduced(struct crun_ddp *d)
{
	int n;

	pthread_mutex_lock(&d->mu);
	n = d->finished;
	pthread_mutex_unlock(&d->mu);
	return n;
}
