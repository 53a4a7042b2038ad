/* SPDX-License-Identifier: MIT */
/* worker_api/ddp.c: the one DDP engine: gradient buckets reduced on a communication thread. */

/*
 * Host and device DDP are this one engine: buckets (ddp_plan.c), the communication thread,
 * ready marking, sync, no_sync and the parameter broadcast live here; how parameters,
 * gradients and bucket buffers are touched is a memory-operations table chosen at creation
 * (ddp_mem.h: ddp_mem_host.c, ddp_mem_cuda.c). crun_ddp_cuda_* (ddp_cuda.c) are thin
 * wrappers over this API with the memory option set to CUDA.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <crun/comm.h>
#include <crun/ddp.h>
#include <crun/error.h>

#include "config.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/log.h"
#include "src/common/opts.h"
#include "worker_api/comm_internal.h"
#include "worker_api/ddp_mem.h"
#include "worker_api/ddp_plan.h"

#define DDP_DEFAULT_CAP (25u << 20)
#define DDP_DEFAULT_FIRST (1u << 20)

/* Set on each DDP's communication thread: where ddp_diag() sends its failures. */
static _Thread_local bool on_comm_thread;

struct crun_diag *ddp_diag(struct crun_ddp *d)
{
	return on_comm_thread ? &d->tdiag : &d->diag;
}

/* The communication thread's failure becomes the DDP's last error. Called with d->mu held. */
static void take_thread_error(struct crun_ddp *d)
{
	if (d->tdiag.code != 0) {
		d->diag = d->tdiag;
		diag_clear(&d->tdiag);
	}
}

/* Copy a bucket's tensors (@params or gradients) into (@in) or out of its flat buffer. */
static int flat_copy(struct crun_ddp *d, struct ddp_bucket *bk, bool in, bool params)
{
	const struct ddp_memops *mem = d->mem;
	struct ddp_tensor *t;
	float *x, *flat;
	int k, rc;

	for (k = 0; k < bk->count; k++) {
		t = &d->t[bk->first - k];
		x = params ? t->s.param : t->s.grad;
		flat = bk->buf + t->s.offset;
		rc = in ? mem->copy(d, flat, x, t->s.n) : mem->copy(d, x, flat, t->s.n);
		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

/*
 * Runs on the communication thread: wait for the bucket's gradients, then average them. On
 * the host this is complete on return; on a device it is queued (drain() waits for it).
 */
static int reduce_bucket(struct crun_ddp *d, struct ddp_bucket *bk)
{
	float *buf = bk->grad_span != NULL ? bk->grad_span : bk->buf;
	int rc;

	if (d->mem->wait_grads != NULL && (rc = d->mem->wait_grads(d, bk)) < 0) {
		return rc;
	}
	if (bk->grad_span == NULL && (rc = flat_copy(d, bk, true, false)) < 0) {
		return rc;
	}
	rc = d->mem->allreduce_avg(d, buf, bk->numel);
	if (rc < 0) {
		return rc;
	}
	if (bk->grad_span == NULL) {
		return flat_copy(d, bk, false, false);
	}
	return 0;
}

/*
 * Device memory: wait for everything the step queued, also after a failure, so that no
 * bucket queued before it is still being reduced into the gradients when crun_ddp_sync()
 * returns (the wait is bounded by the communicator's timeout, and a poisoned communicator
 * answers at once). After an earlier failure (@failed: d->err was set) its message is the
 * one kept.
 */
static int drain(struct crun_ddp *d, bool failed)
{
	struct crun_diag first = *ddp_diag(d);
	int rc;

	rc = d->mem->drain(d);
	if (failed || first.code != 0) {
		*ddp_diag(d) = first;
	}
	return rc;
}

/*
 * The step's last bucket is queued on the device (d->mu held, released around the calls):
 * make the compute stream wait for it on the device and watch it from here, or, after a
 * failure, drain what was queued (nothing of a failed step may outlive it). The step stays
 * watched from its end: a later step's end is covered by the same watch (its work follows on
 * the same stream), which keeps the older step's number and deadline.
 */
static void step_end(struct crun_ddp *d)
{
	bool failed = d->err != 0;
	int rc = 0;

	pthread_mutex_unlock(&d->mu);
	if (!failed) {
		rc = d->mem->end_step(d);
	}
	if (failed || rc < 0) {
		int drc = drain(d, true);

		rc = rc < 0 ? rc : drc;
	}
	pthread_mutex_lock(&d->mu);
	if (rc < 0 && d->err == 0) {
		d->err = rc;
	}
	if (d->err != 0) {
		d->watching = false; /* the communicator is poisoned: nothing left to watch */
	} else if (!d->watching) {
		d->watching = true;
		d->watch_deadline = crun_now_ms() + d->comm->timeout_ms;
		d->watch_step = d->steps + 1;
	}
	d->finished = d->nb;
}

/*
 * One look at the watched steps (d->mu held, released around the query); between looks the
 * thread sleeps on d->work (new buckets wake it): 20 us for the first 2 ms, then 200 us, so
 * a step that completes quickly is seen quickly and a long one costs no CPU. A failure
 * becomes the DDP's sticky error, returned by the next crun_ddp_sync(), crun_ddp_wait(),
 * crun_ddp_broadcast_params(), or logged by crun_ddp_destroy().
 */
static void watch(struct crun_ddp *d, int64_t since_ns)
{
	int64_t deadline = d->watch_deadline, wake;
	long long step = d->watch_step;
	struct timespec ts;
	int rc;

	pthread_mutex_unlock(&d->mu);
	rc = d->mem->query(d, deadline, step);
	pthread_mutex_lock(&d->mu);
	if (rc != 0) {
		d->watching = false;
		if (rc < 0 && d->err == 0) {
			d->err = rc;
		}
		pthread_cond_broadcast(&d->done);
		return;
	}
	wake = crun_now_ns() + (crun_now_ns() - since_ns < 2000000 ? 20000 : 200000);
	ts.tv_sec = (time_t)(wake / 1000000000);
	ts.tv_nsec = (long)(wake % 1000000000);
	crun_cond_wait_mono(&d->work, &d->mu, &ts);
}

/*
 * Buckets are started in bucket order, each as soon as it is ready, without waiting for the
 * one before to complete: with host memory a bucket is complete when reduce_bucket() returns
 * (the allreduce is synchronous), so it is finished at once, as it always was; with device
 * memory it is only queued on the communicator's stream, so every ready bucket is queued at
 * once and their transfers follow each other on the device; after the step's last bucket
 * the compute stream is made to wait for them (step_end()), and between buckets the thread
 * watches the steps still in flight on the device (watch()).
 */
static void *comm_thread(void *arg)
{
	struct crun_ddp *d = arg;
	struct ddp_bucket *bk;
	int64_t since = 0;
	bool was_watching = false;
	int rc;

	on_comm_thread = true;
	comm_hold_thread(d->comm);
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
			if (d->mem->end_step == NULL) {
				d->finished++;
			} else if (d->next == d->nb) {
				step_end(d);
			}
			pthread_cond_broadcast(&d->done);
			continue;
		}
		if (d->watching) {
			if (!was_watching) {
				since = crun_now_ns();
			}
			was_watching = true;
			watch(d, since);
			continue;
		}
		was_watching = false;
		pthread_cond_wait(&d->work, &d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static const struct ddp_memops *memops_for(enum crun_ddp_memory m, int *rc)
{
	switch (m) {
	case CRUN_DDP_MEMORY_HOST:
		return &ddp_host_memops;
	case CRUN_DDP_MEMORY_CUDA:
#if CRUN_HAVE_NCCL
		return &ddp_cuda_memops;
#else
		*rc = CRUN_EBACKEND; /* built without CUDA/NCCL */
		return NULL;
#endif
	}
	*rc = -EINVAL;
	return NULL;
}

CRUN_EXPORT int crun_ddp_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				struct crun_ddp **out)
{
	const struct ddp_memops *mem;
	struct crun_ddp_opts o;
	struct crun_ddp *d;
	int rc = 0;

	if (out == NULL || comm == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	if (opts_copy(&o, sizeof(o), opts, DDP_OPTS_SIZE_0_2_0) < 0) {
		return -EINVAL;
	}
	mem = memops_for(o.memory, &rc);
	if (mem == NULL) {
		return rc;
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL) {
		return -ENOMEM;
	}
	d->comm = comm;
	d->mem = mem;
	d->world = crun_comm_size(comm);
	d->cap_bytes = o.bucket_cap_bytes > 0 ? o.bucket_cap_bytes : DDP_DEFAULT_CAP;
	d->first_bytes = o.first_bucket_bytes > 0 ? o.first_bucket_bytes : DDP_DEFAULT_FIRST;
	if (d->world < 1) {
		free(d);
		return -EINVAL;
	}
	rc = mem->init(d);
	if (rc < 0) {
		free(d);
		return rc;
	}
	pthread_mutex_init(&d->mu, NULL);
	crun_cond_init_monotonic(&d->work); /* watch()'s pause */
	crun_cond_init_monotonic(&d->done); /* wait_step()'s bound */
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
	if (d->thread_started && d->stuck) {
		/* Its thread is inside a call that never returned: what it may still touch stays
		 * allocated (wait_step() said so); joining it would hang the program too. */
		log_warn("ddp: destroy: the communication thread is stuck: left behind, with the "
			 "DDP's memory");
		pthread_detach(d->thread);
		return;
	}
	if (d->thread_started) {
		pthread_mutex_lock(&d->mu);
		d->stop = true;
		pthread_cond_broadcast(&d->work);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->thread, NULL);
	}
	/* Buckets queued on a device and not seen complete (destroyed mid-step, or the last
	 * step still watched): let them land, or the communicator time out, before their
	 * buffers go; a failure no crun_ddp_sync() or crun_ddp_wait() returned is logged. */
	if (d->mem->drain != NULL && (d->next > d->finished || d->watching)) {
		long long step = d->watching ? d->watch_step : d->steps + 1;

		if (drain(d, d->err != 0) < 0 && d->err == 0) {
			log_warn("ddp: destroy: step %lld's collectives: %s", step, d->diag.msg);
		}
	}
	if (d->tdiag.code != 0) {
		log_warn("ddp: destroy: an error no call returned: %s", d->tdiag.msg);
	}
	if (d->holding) {
		comm_release(d->comm); /* destroyed mid-step */
	}
	for (i = 0; i < d->nb; i++) {
		if (d->b[i].buf != NULL) {
			d->mem->buf_free(d, d->b[i].buf);
		}
	}
	for (i = 0; d->mem->tensor_finish != NULL && i < d->nt; i++) {
		d->mem->tensor_finish(d, &d->t[i]);
	}
	if (d->mem->fini != NULL) {
		d->mem->fini(d);
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
	struct ddp_tensor *nt, *t;
	int idx, rc;

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
	idx = d->nt;
	t = &d->t[idx];
	memset(t, 0, sizeof(*t));
	t->s.param = param;
	t->s.grad = grad;
	t->s.n = n;
	if (d->mem->tensor_init != NULL && (rc = d->mem->tensor_init(d, t)) < 0) {
		pthread_mutex_unlock(&d->mu);
		return rc;
	}
	d->nt++;
	pthread_mutex_unlock(&d->mu);
	return idx;
}

/*
 * Every rank must have built the same buckets: gather each rank's plan (ddp_plan.h) once, and
 * fail with both plans named when one differs. The gathered record has the same size on every
 * rank whatever it registered, so a mismatch cannot hang this collective; without it the
 * first bucket's collective would pair different sizes (a hang, a timeout or garbage).
 * Through the communicator rather than the store: the DDP is given a communicator only, the
 * communicator does not keep the store it was created from, and this is one small collective
 * that every rank makes at the same point. Called with d->mu held, world > 1.
 */
static int check_plan(struct crun_ddp *d, const struct ddp_bucket *b, int nb)
{
	double mine[DDP_PLAN_WORDS], *all, *w;
	char a[192], o[192];
	int me = crun_comm_rank(d->comm), r, k, rc;

	ddp_plan_summary(d->t, sizeof(*d->t), d->nt, b, nb, d->first_bytes, d->cap_bytes, mine);
	all = calloc((size_t)d->world * DDP_PLAN_WORDS, sizeof(*all));
	if (all == NULL) {
		return -ENOMEM;
	}
	rc = d->mem->gather(d, mine, all, DDP_PLAN_WORDS);
	for (r = 0; rc == 0 && r < d->world; r++) {
		w = all + (size_t)r * DDP_PLAN_WORDS;
		for (k = 0; k < DDP_PLAN_WORDS && w[k] == mine[k]; k++) {
		}
		if (k < DDP_PLAN_WORDS) {
			ddp_plan_describe(mine, a, sizeof(a));
			ddp_plan_describe(w, o, sizeof(o));
			rc = diag_set(ddp_diag(d), CRUN_ECONFIG,
				      "ddp: rank %d: bucket plan differs from rank %d's: rank %d: %s; "
				      "rank %d: %s (every rank must register the same tensor sizes "
				      "in the same order, with the same bucket caps)",
				      me, r, me, a, r, o);
		}
	}
	free(all);
	return rc;
}

/*
 * Group tensors into buckets, last registered first, and check that every rank did the same.
 * A plan that differs, or a failed exchange, is sticky. Called with d->mu held.
 */
static int build(struct crun_ddp *d)
{
	struct ddp_bucket *b;
	int i, nb, rc;

	if (d->built) {
		return 0;
	}
	if (d->err != 0) {
		return d->err;
	}
	rc = ddp_plan_buckets(d->t, sizeof(*d->t), d->nt, d->first_bytes, d->cap_bytes, &b, &nb);
	if (rc < 0) {
		return rc;
	}
	if (d->world > 1 && (rc = check_plan(d, b, nb)) < 0) {
		if (rc != -ENOMEM) {
			d->err = rc;
		}
		free(b);
		return rc;
	}
	for (i = 0; i < nb; i++) {
		if (ddp_bucket_needs_buf(&b[i])) {
			rc = d->mem->buf_alloc(d, &b[i].buf, b[i].numel);
			if (rc < 0) {
				while (i-- > 0) {
					if (b[i].buf != NULL) {
						d->mem->buf_free(d, b[i].buf);
					}
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

static int broadcast(struct crun_ddp *d, float *buf, size_t n)
{
	int rc;

	rc = crun_comm_broadcast(d->comm, buf, n, CRUN_DTYPE_FLOAT32, 0);
	if (rc < 0) {
		return diag_set(ddp_diag(d), rc, "ddp: broadcast: %s",
				crun_comm_last_error(d->comm));
	}
	return 0;
}

static int wait_watch(struct crun_ddp *d);

CRUN_EXPORT int crun_ddp_broadcast_params(struct crun_ddp *d)
{
	struct ddp_bucket *bk;
	int i, rc;

	if (d == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	rc = build(d);
	if (rc == 0 && d->nmarked == 0 && d->next == 0) {
		rc = wait_watch(d); /* the last step's collectives, still on the device */
	}
	if (rc == 0 && d->err != 0) {
		rc = d->err;
	} else if (rc == 0 && (d->nmarked != 0 || d->next != 0 || d->finished != 0)) {
		/* In the middle of a step: the communication thread may be reducing a bucket on
		 * this communicator, and the marked gradients wait for crun_ddp_sync(). */
		rc = diag_set(&d->diag, -EBUSY,
			      "ddp: broadcast_params: a step is in flight (%d of %d gradients "
			      "marked ready): call crun_ddp_sync() first",
			      d->nmarked, d->nt);
	}
	take_thread_error(d);
	pthread_mutex_unlock(&d->mu);
	if (rc < 0 || d->world == 1) {
		return rc;
	}
	if (d->mem->params_ready != NULL && (rc = d->mem->params_ready(d)) < 0) {
		return rc;
	}
	/* The communication thread is idle: no bucket is ready between steps. */
	for (i = 0; i < d->nb; i++) {
		bk = &d->b[i];
		if (bk->param_span != NULL) {
			rc = broadcast(d, bk->param_span, bk->numel);
		} else {
			rc = flat_copy(d, bk, true, true);
			if (rc == 0) {
				rc = broadcast(d, bk->buf, bk->numel);
			}
			if (rc == 0) {
				rc = flat_copy(d, bk, false, true);
			}
		}
		if (rc < 0) {
			return rc;
		}
	}
	/* Device memory: the copies out of the flat buffers are queued; let them land. */
	if (d->mem->drain != NULL) {
		return d->mem->drain(d);
	}
	return 0;
}

/* Mark tensor @i ready; hand its bucket over when complete. Called with d->mu held. */
static int mark(struct crun_ddp *d, int i)
{
	struct ddp_bucket *bk = &d->b[d->t[i].s.bucket];
	int rc;

	if (d->world > 1 && d->nmarked == 0 && !d->holding) {
		/* The step starts: nobody else issues collectives on the comm until it ends. */
		if (comm_hold(d->comm) < 0) {
			return diag_set(&d->diag, -EBUSY,
					"ddp: rank %d: a step cannot start: another DDP's step is in "
					"flight on this communicator",
					crun_comm_rank(d->comm));
		}
		d->holding = true;
	}
	if (d->world > 1 && d->mem->mark != NULL && (rc = d->mem->mark(d, &d->t[i])) < 0) {
		return rc;
	}
	d->t[i].marked = true;
	d->nmarked++;
	if (--bk->pending == 0) {
		bk->ready = true;
		if (d->world == 1) {
			/* Nothing to reduce: skip the hand-off to the communication thread. */
			d->next++;
			d->finished++;
			return 0;
		}
		pthread_cond_signal(&d->work);
	}
	return 0;
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
			rc = mark(d, index);
		}
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

/* A bucket that cannot start would leave the others waiting: poison the DDP and let every
 * bucket through (the communication thread skips them). Called with d->mu held. */
static void poison(struct crun_ddp *d, int rc)
{
	int i;

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

#define DDP_NOTE_MS 5000

/*
 * Wait (d->mu held) until the communication thread has finished the step's buckets. Each of
 * its operations is bounded by the communicator's timeout (the backends' polls, the nccl
 * watchdog), so a thread that makes no progress for twice that and a second is stuck in a
 * call that ignored its deadline: the DDP is then unusable (-ETIMEDOUT, for good). Says what
 * it waits for every 5 s.
 */
static int wait_step(struct crun_ddp *d)
{
	int64_t limit = 2 * (int64_t)d->comm->timeout_ms + 1000, start = crun_now_ms();
	int64_t last = start, note = start + DDP_NOTE_MS, now;
	int seen = d->finished;
	struct timespec ts;

	while (d->finished < d->nb) {
		now = crun_now_ms();
		if (d->finished != seen) {
			seen = d->finished;
			last = now;
		}
		if (now - last >= limit) {
			d->stuck = true;
			return diag_set(&d->diag, -ETIMEDOUT,
					"ddp: rank %d: sync: the communication thread finished %d of "
					"%d buckets and then nothing for %lld ms (twice the "
					"communicator's timeout, and 1 s): it is stuck in a call; this "
					"DDP cannot be used any more",
					crun_comm_rank(d->comm), d->finished, d->nb, (long long)limit);
		}
		if (now >= note) {
			log_info("ddp: rank %d: sync: waiting for the communication thread: %d of %d "
				 "buckets finished after %lld ms",
				 crun_comm_rank(d->comm), d->finished, d->nb, (long long)(now - start));
			note = now + DDP_NOTE_MS;
		}
		ts = crun_mono_timespec(last + limit < note ? last + limit : note);
		crun_cond_wait_mono(&d->done, &d->mu, &ts);
	}
	return 0;
}

/*
 * Wait (d->mu held) until the communication thread has seen the steps it watches complete
 * or fail (device memory). Its query has the communicator's deadline, so beyond that plus
 * twice the timeout and a second the thread is stuck (as in wait_step()). Says what it
 * waits for every 5 s.
 */
static int wait_watch(struct crun_ddp *d)
{
	int64_t start = crun_now_ms(), note = start + DDP_NOTE_MS, limit, now;
	struct timespec ts;

	while (d->watching) {
		now = crun_now_ms();
		limit = d->watch_deadline + 2 * (int64_t)d->comm->timeout_ms + 1000;
		if (now >= limit) {
			d->stuck = true;
			return diag_set(&d->diag, -ETIMEDOUT,
					"ddp: rank %d: wait: step %lld's collectives were neither "
					"seen complete nor failed %lld ms after their deadline: the "
					"communication thread is stuck in a call; this DDP cannot be "
					"used any more",
					crun_comm_rank(d->comm), d->watch_step,
					(long long)(now - d->watch_deadline));
		}
		if (now >= note) {
			log_info("ddp: rank %d: waiting for step %lld's collectives on the device "
				 "after %lld ms (deadline in %lld ms)",
				 crun_comm_rank(d->comm), d->watch_step, (long long)(now - start),
				 (long long)(d->watch_deadline - now));
			note = now + DDP_NOTE_MS;
		}
		ts = crun_mono_timespec(limit < note ? limit : note);
		crun_cond_wait_mono(&d->done, &d->mu, &ts);
	}
	return 0;
}

CRUN_EXPORT int crun_ddp_wait(struct crun_ddp *d)
{
	int rc;

	if (d == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&d->mu);
	if (d->stuck) {
		pthread_mutex_unlock(&d->mu);
		return -ETIMEDOUT;
	}
	if (d->nmarked != 0) {
		rc = diag_set(&d->diag, -EBUSY,
			      "ddp: wait: a step is in flight (%d of %d gradients marked ready): "
			      "call crun_ddp_sync() first",
			      d->nmarked, d->nt);
		pthread_mutex_unlock(&d->mu);
		return rc;
	}
	rc = wait_watch(d);
	if (rc == 0) {
		rc = d->err;
	}
	take_thread_error(d);
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
	if (d->stuck) {
		pthread_mutex_unlock(&d->mu);
		return -ETIMEDOUT; /* wait_step()'s message stays the last error */
	}
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
	for (i = d->nt - 1; rc == 0 && i >= 0; i--) {
		if (!d->t[i].marked) {
			rc = mark(d, i);
		}
	}
	if (rc < 0) {
		poison(d, rc);
	}
	rc = wait_step(d);
	if (rc < 0) {
		pthread_mutex_unlock(&d->mu);
		return rc;
	}
	rc = d->err;
	take_thread_error(d);
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
	d->steps++;
	if (d->holding) {
		comm_release(d->comm);
		d->holding = false;
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

CRUN_EXPORT void crun_ddp_set_no_sync(struct crun_ddp *d, bool on)
{
	if (d == NULL) {
		return;
	}
	pthread_mutex_lock(&d->mu);
	d->no_sync = on;
	pthread_mutex_unlock(&d->mu);
}

CRUN_EXPORT int crun_ddp_set_stream(struct crun_ddp *d, void *stream)
{
	if (d == NULL) {
		return -EINVAL;
	}
	if (!d->mem->has_stream) {
		return CRUN_EBACKEND;
	}
	pthread_mutex_lock(&d->mu);
	d->stream = stream;
	pthread_mutex_unlock(&d->mu);
	return 0;
}

CRUN_EXPORT int crun_ddp_bucket_count(const struct crun_ddp *d)
{
	return d != NULL && d->built ? d->nb : 0;
}

CRUN_EXPORT int crun_ddp_bucket_of(const struct crun_ddp *d, int index)
{
	if (d == NULL || !d->built || index < 0 || index >= d->nt) {
		return -EINVAL;
	}
	return d->t[index].s.bucket;
}

CRUN_EXPORT int crun_ddp_buckets_reduced(struct crun_ddp *d)
{
	int n;

	if (d == NULL) {
		return 0;
	}
	pthread_mutex_lock(&d->mu);
	n = d->finished;
	pthread_mutex_unlock(&d->mu);
	return n;
}

CRUN_EXPORT const char *crun_ddp_last_error(const struct crun_ddp *d)
{
	return d != NULL ? d->diag.msg : "";
}
