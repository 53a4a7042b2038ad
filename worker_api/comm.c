/* SPDX-License-Identifier: MIT */
/* worker_api/comm.c: collectives API: argument checks, backend choice, dispatch, poisoning. */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/comm.h>
#include <crun/error.h>
#include <crun/store.h>

#include "config.h"
#include "src/common/clock.h"
#include "src/common/log.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/opts.h"
#include "worker_api/comm_internal.h"
#include "worker_api/worker_internal.h"

int comm_key(const struct crun_comm *c, char *buf, size_t len, const char *suffix)
{
	int n;

	n = snprintf(buf, len, "%s/%llu/%s", c->name, (unsigned long long)c->generation, suffix);
	if (n < 0 || (size_t)n >= len) {
		return -ENAMETOOLONG;
	}
	return 0;
}

static const char *backend_name(enum crun_backend b)
{
	switch (b) {
	case CRUN_BACKEND_CPU:
		return "cpu";
	case CRUN_BACKEND_NCCL:
		return "nccl";
	default:
		return "auto";
	}
}

/*
 * Resolve AUTO: the CRUN_BACKEND environment variable, then nccl if a GPU is visible, else cpu.
 * *@by_auto tells whether the GPU's presence made the choice.
 */
static int choose_backend(enum crun_backend want, enum crun_backend *out, bool *by_auto,
			  struct crun_diag *d)
{
	const char *env;

	if (want != CRUN_BACKEND_AUTO && want != CRUN_BACKEND_CPU && want != CRUN_BACKEND_NCCL) {
		return diag_set(d, -EINVAL, "comm: backend: unknown value %d", (int)want);
	}
	if (want == CRUN_BACKEND_AUTO) {
		env = getenv("CRUN_BACKEND");
		if (env != NULL && *env != '\0') {
			if (strcmp(env, "cpu") == 0) {
				want = CRUN_BACKEND_CPU;
			} else if (strcmp(env, "nccl") == 0) {
				want = CRUN_BACKEND_NCCL;
			} else if (strcmp(env, "auto") != 0) {
				return diag_set(d, CRUN_ECONFIG,
						"comm: CRUN_BACKEND: expected cpu, nccl or auto, "
						"got \"%s\"",
						env);
			}
		}
	}
	*by_auto = want == CRUN_BACKEND_AUTO;
	if (want == CRUN_BACKEND_AUTO) {
#if CRUN_HAVE_NCCL
		want = comm_nccl_gpu_visible() ? CRUN_BACKEND_NCCL : CRUN_BACKEND_CPU;
#else
		want = CRUN_BACKEND_CPU;
#endif
	}
#if !CRUN_HAVE_NCCL
	if (want == CRUN_BACKEND_NCCL) {
		return diag_set(d, CRUN_EBACKEND,
				"comm: backend nccl: this libcrun-worker was built without NCCL");
	}
#endif
	*out = want;
	return 0;
}

/*
 * Every rank adds 1 to "<name>/join"; the n-th creation of a communicator of this name in
 * this store prefix is generation (n - 1) / size. Backends end their setup with a round trip
 * through every rank, so no rank starts generation g + 1 before all of g have joined.
 */
static int join_generation(struct crun_comm *c, struct crun_store *st)
{
	char key[COMM_MAX_NAME + 16];
	int64_t n;
	int rc;

	snprintf(key, sizeof(key), "%s/join", c->name);
	rc = crun_store_add(st, key, 1, &n);
	if (rc < 0) {
		return diag_set(&c->diag, rc, "comm %s: store add %s: %s", c->name, key,
				crun_strerror(rc));
	}
	if (n < 1) {
		return diag_set(&c->diag, -EPROTO, "comm %s: store add %s: got %lld", c->name, key,
				(long long)n);
	}
	c->generation = (uint64_t)(n - 1) / (uint64_t)c->size;
	return 0;
}

/* struct crun_comm_opts as crun 0.2.0 laid it out (struct_size 0): it ended with name. */
#define COMM_OPTS_SIZE_0_2 (offsetof(struct crun_comm_opts, name) + sizeof(const char *))

CRUN_EXPORT int crun_comm_create(struct crun_store *st, int rank, int size,
				 const struct crun_comm_opts *opts_in, struct crun_comm **out)
{
	struct crun_comm_opts copy;
	const struct crun_comm_opts *opts = &copy;
	struct crun_comm *c;
	const char *name;
	int rc;

	if (out == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	if (opts_copy(&copy, sizeof(copy), opts_in, COMM_OPTS_SIZE_0_2) < 0) {
		log_error("comm: create: options: bad struct_size %zu", opts_in->struct_size);
		return -EINVAL;
	}
	if (st == NULL) {
		log_error("comm: create: no store handle");
		return -EINVAL;
	}
	if (size < 1 || size > COMM_MAX_RANKS || rank < 0 || rank >= size) {
		log_error("comm: create: rank %d of size %d: expected 0 <= rank < size <= %d", rank,
			  size, COMM_MAX_RANKS);
		return -EINVAL;
	}
	name = opts != NULL && opts->name != NULL ? opts->name : "default";
	if (*name == '\0' || strlen(name) >= COMM_MAX_NAME - 24) {
		log_error("comm: create: name \"%s\": expected 1 to %d characters", name,
			  COMM_MAX_NAME - 25);
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		return -ENOMEM;
	}
	c->rank = rank;
	c->size = size;
	c->timeout_ms =
		opts != NULL && opts->timeout_ms > 0 ? opts->timeout_ms : COMM_DEFAULT_TIMEOUT_MS;
	snprintf(c->name, sizeof(c->name), "%s", name);
	rc = choose_backend(opts != NULL ? opts->backend : CRUN_BACKEND_AUTO, &c->backend,
			    &c->backend_auto, &c->diag);
	if (rc < 0) {
		goto err;
	}
	rc = join_generation(c, st);
	if (rc < 0) {
		goto err;
	}
	if (c->backend == CRUN_BACKEND_CPU) {
		rc = comm_cpu_init(c, st);
	} else {
#if CRUN_HAVE_NCCL
		rc = comm_nccl_init(c, st);
#else
		rc = CRUN_EBACKEND;
#endif
	}
	if (rc < 0) {
		goto err;
	}
	log_debug("comm %s: rank %d of %d up (%s, generation %llu)", c->name, rank, size,
		  backend_name(c->backend), (unsigned long long)c->generation);
	*out = c;
	return 0;
err:
	if (c->diag.msg[0] != '\0') {
		log_error("%s", c->diag.msg);
	} else {
		log_error("comm %s: rank %d: create (%s): %s", c->name, rank,
			  backend_name(c->backend), crun_strerror(rc));
	}
	free(c);
	return rc;
}

CRUN_EXPORT void crun_comm_destroy(struct crun_comm *c)
{
	if (c == NULL) {
		return;
	}
	if (c->ops != NULL) {
		c->ops->destroy(c);
	}
	free(c);
}

/*
 * A failed collective poisons the comm; the first error is the one every later call returns.
 * Only the thread inside the call (enter()) writes; any thread may read comm_poisoned() and
 * crun_comm_last_error(), so the message is copied before the code is published.
 */
static int finish(struct crun_comm *c, const char *what, int rc)
{
	int none = 0;

	if (rc < 0 && comm_poisoned(c) == 0) {
		if (c->diag.msg[0] == '\0') {
			diag_set(&c->diag, rc, "comm %s: rank %d: %s: %s", c->name, c->rank, what,
				 crun_strerror(rc));
		}
		snprintf(c->poison_msg, sizeof(c->poison_msg), "%s", c->diag.msg);
		__atomic_compare_exchange_n(&c->poisoned, &none, rc, false, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED);
		log_error("%s", c->diag.msg);
	}
	return rc;
}

/*
 * One thread at a time inside a call on @c (the collectives and crun_comm_set_stream()):
 * a second one gets -EBUSY at once instead of corrupting the first one's state or, with
 * nccl, enqueuing on a communicator NCCL does not let two threads use (a program calling
 * the communicator while a DDP's buckets are in flight on it). @c's message is the busy
 * thread's, so this one is only logged.
 */
/* The communicator whose DDP step this thread carries out (comm_hold_thread()). */
static _Thread_local const struct crun_comm *hold_thread;

static int enter(struct crun_comm *c, const char *what)
{
	if (c == NULL) {
		return -EINVAL;
	}
	if (__atomic_load_n(&c->held, __ATOMIC_ACQUIRE) != 0 && hold_thread != c) {
		log_error("comm %s: rank %d: %s: a DDP step is in flight on this communicator "
			  "(from its first crun_ddp_grad_ready() to the end of crun_ddp_sync()): "
			  "a collective now would pair with another rank's bucket",
			  c->name, c->rank, what);
		return -EBUSY;
	}
	for (int busy = 0; !__atomic_compare_exchange_n(&c->busy, &busy, 1, false,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
	     busy = 0) {
		if (busy != 2) {
			log_error("comm %s: rank %d: %s: another thread is inside a call on this "
				  "communicator (a DDP's buckets in flight?): one thread at a time",
				  c->name, c->rank, what);
			return -EBUSY;
		}
		sched_yield(); /* a DDP's step-end poll (comm_query_event()): microseconds */
	}
	return 0;
}

int comm_hold(struct crun_comm *c)
{
	return __atomic_exchange_n(&c->held, 1, __ATOMIC_ACQ_REL) != 0 ? -EBUSY : 0;
}

void comm_release(struct crun_comm *c)
{
	__atomic_store_n(&c->held, 0, __ATOMIC_RELEASE);
}

void comm_hold_thread(const struct crun_comm *c)
{
	hold_thread = c;
}

static int leave(struct crun_comm *c, int rc)
{
	__atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
	if (rc >= 0) {
		worker_heartbeat(); /* a completed collective is progress (--worker-timeout) */
	}
	return rc;
}

static int check_common(struct crun_comm *c, const char *what, enum crun_dtype dt)
{
	int rc = comm_poisoned(c);

	if (rc != 0) {
		return rc;
	}
	c->diag.msg[0] = '\0';
	c->diag.code = 0;
	if (dt != CRUN_DTYPE_FLOAT32 && dt != CRUN_DTYPE_FLOAT64) {
		return diag_set(&c->diag, -EINVAL, "comm %s: %s: unknown dtype %d", c->name, what,
				(int)dt);
	}
	return 0;
}

/* The backend's verdict on each buffer (nccl: device memory only); NULL entries are skipped. */
static int check_bufs(struct crun_comm *c, const char *what, const void *send, const void *recv)
{
	int rc;

	if (c->ops->check_buf == NULL) {
		return 0;
	}
	if (send != NULL &&
	    (rc = c->ops->check_buf(c, what, recv == NULL ? "buffer" : "send", send)) < 0) {
		return rc;
	}
	if (recv != NULL && recv != send && (rc = c->ops->check_buf(c, what, "recv", recv)) < 0) {
		return rc;
	}
	return 0;
}

static int check_op(struct crun_comm *c, const char *what, enum crun_redop op)
{
	if (op != CRUN_REDOP_SUM && op != CRUN_REDOP_AVG) {
		return diag_set(&c->diag, -EINVAL, "comm %s: %s: unknown reduction %d", c->name,
				what, (int)op);
	}
	return 0;
}

/* Bytes of @count elements times @mult, or -EOVERFLOW. */
static int span(struct crun_comm *c, const char *what, size_t count, size_t mult,
		enum crun_dtype dt, size_t *bytes)
{
	size_t es = comm_dtype_size(dt);

	if (count > SIZE_MAX / es / mult) {
		return diag_set(&c->diag, -EOVERFLOW, "comm %s: %s: %zu elements overflow", c->name,
				what, count);
	}
	*bytes = count * mult * es;
	return 0;
}

static bool overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
	uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;

	return pa < pb + blen && pb < pa + alen;
}

static int do_allreduce(struct crun_comm *c, const void *send, void *recv, size_t count,
			enum crun_dtype dt, enum crun_redop op)
{
	size_t bytes = 0;
	int rc;

	rc = check_common(c, "allreduce", dt);
	if (rc < 0 || (rc = check_op(c, "allreduce", op)) < 0 ||
	    (rc = span(c, "allreduce", count, 1, dt, &bytes)) < 0) {
		return rc;
	}
	if (count == 0) {
		return 0;
	}
	if (send == NULL || recv == NULL) {
		return diag_set(&c->diag, -EINVAL, "comm %s: allreduce: NULL buffer", c->name);
	}
	if (send != recv && c->backend == CRUN_BACKEND_CPU && overlaps(send, bytes, recv, bytes)) {
		return diag_set(&c->diag, -EINVAL,
				"comm %s: allreduce: send and recv overlap without being equal",
				c->name);
	}
	rc = check_bufs(c, "allreduce", send, recv);
	if (rc < 0) {
		return rc;
	}
	return finish(c, "allreduce", c->ops->allreduce(c, send, recv, count, dt, op));
}

static int do_broadcast(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt, int root)
{
	size_t bytes;
	int rc;

	rc = check_common(c, "broadcast", dt);
	if (rc < 0 || (rc = span(c, "broadcast", count, 1, dt, &bytes)) < 0) {
		return rc;
	}
	if (root < 0 || root >= c->size) {
		return diag_set(&c->diag, -EINVAL, "comm %s: broadcast: root %d not in [0, %d)",
				c->name, root, c->size);
	}
	if (count == 0) {
		return 0;
	}
	if (buf == NULL) {
		return diag_set(&c->diag, -EINVAL, "comm %s: broadcast: NULL buffer", c->name);
	}
	rc = check_bufs(c, "broadcast", buf, NULL);
	if (rc < 0) {
		return rc;
	}
	return finish(c, "broadcast", c->ops->broadcast(c, buf, count, dt, root));
}

static int do_allgather(struct crun_comm *c, const void *send, void *recv, size_t count,
			enum crun_dtype dt)
{
	size_t bytes = 0;
	int rc;

	rc = check_common(c, "allgather", dt);
	if (rc < 0 || (rc = span(c, "allgather", count, (size_t)c->size, dt, &bytes)) < 0) {
		return rc;
	}
	if (count == 0) {
		return 0;
	}
	if (send == NULL || recv == NULL) {
		return diag_set(&c->diag, -EINVAL, "comm %s: allgather: NULL buffer", c->name);
	}
	/* The cpu backend copies @send to block rank of @recv first: any other overlap would be
	 * overwritten by a peer's block before it is sent. */
	if (c->backend == CRUN_BACKEND_CPU &&
	    (const char *)send != (const char *)recv + (size_t)c->rank * (bytes / (size_t)c->size) &&
	    overlaps(send, bytes / (size_t)c->size, recv, bytes)) {
		return diag_set(&c->diag, -EINVAL,
				"comm %s: allgather: send overlaps recv other than at block %d",
				c->name, c->rank);
	}
	rc = check_bufs(c, "allgather", send, recv);
	if (rc < 0) {
		return rc;
	}
	return finish(c, "allgather", c->ops->allgather(c, send, recv, count, dt));
}

static int do_reduce_scatter(struct crun_comm *c, const void *send, void *recv, size_t recvcount,
			     enum crun_dtype dt, enum crun_redop op)
{
	size_t bytes = 0, es;
	int rc;

	rc = check_common(c, "reduce_scatter", dt);
	if (rc < 0 || (rc = check_op(c, "reduce_scatter", op)) < 0 ||
	    (rc = span(c, "reduce_scatter", recvcount, (size_t)c->size, dt, &bytes)) < 0) {
		return rc;
	}
	if (recvcount == 0) {
		return 0;
	}
	if (send == NULL || recv == NULL) {
		return diag_set(&c->diag, -EINVAL, "comm %s: reduce_scatter: NULL buffer", c->name);
	}
	es = comm_dtype_size(dt);
	if (c->backend == CRUN_BACKEND_CPU &&
	    (const char *)recv != (const char *)send + (size_t)c->rank * recvcount * es &&
	    overlaps(send, bytes, recv, recvcount * es)) {
		return diag_set(
			&c->diag, -EINVAL,
			"comm %s: reduce_scatter: recv overlaps send other than at block %d",
			c->name, c->rank);
	}
	rc = check_bufs(c, "reduce_scatter", send, recv);
	if (rc < 0) {
		return rc;
	}
	return finish(c, "reduce_scatter",
		      c->ops->reduce_scatter(c, send, recv, recvcount, dt, op));
}

static int do_barrier(struct crun_comm *c)
{
	int rc;

	rc = check_common(c, "barrier", CRUN_DTYPE_FLOAT32);
	if (rc < 0) {
		return rc;
	}
	return finish(c, "barrier", c->ops->barrier(c));
}

/* The queued allreduce (comm_internal.h): crun_comm_allreduce()'s checks, then the backend's
 * enqueue; in place only. */
static int do_allreduce_enqueue(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
				enum crun_redop op, void *stream)
{
	size_t bytes = 0;
	int rc;

	rc = check_common(c, "allreduce (queued)", dt);
	if (rc < 0 || (rc = check_op(c, "allreduce (queued)", op)) < 0 ||
	    (rc = span(c, "allreduce (queued)", count, 1, dt, &bytes)) < 0) {
		return rc;
	}
	if (c->ops->allreduce_enqueue == NULL) {
		return diag_set(&c->diag, CRUN_EBACKEND,
				"comm %s: allreduce (queued): the %s backend queues no collectives",
				c->name, backend_name(c->backend));
	}
	if (count == 0) {
		return 0;
	}
	if (buf == NULL) {
		return diag_set(&c->diag, -EINVAL, "comm %s: allreduce (queued): NULL buffer",
				c->name);
	}
	rc = check_bufs(c, "allreduce", buf, buf);
	if (rc < 0) {
		return rc;
	}
	return finish(c, "allreduce (queued)",
		      c->ops->allreduce_enqueue(c, buf, count, dt, op, stream));
}

int comm_allreduce_enqueue(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
			   enum crun_redop op, void *stream)
{
	int rc = enter(c, "allreduce (queued)");

	return rc < 0 ? rc : leave(c, do_allreduce_enqueue(c, buf, count, dt, op, stream));
}

static int do_wait(struct crun_comm *c, void *stream, int64_t deadline)
{
	int rc;

	rc = check_common(c, "wait", CRUN_DTYPE_FLOAT32);
	if (rc < 0 || c->ops->wait == NULL) {
		return rc;
	}
	if (deadline <= 0) {
		deadline = crun_now_ms() + c->timeout_ms;
	}
	return finish(c, "wait", c->ops->wait(c, stream, deadline));
}

int comm_wait(struct crun_comm *c, void *stream, int64_t deadline)
{
	int rc = enter(c, "wait");

	return rc < 0 ? rc : leave(c, do_wait(c, stream, deadline));
}

int comm_query_event(struct crun_comm *c, void *event, int64_t deadline, struct crun_diag *why)
{
	int rc, idle = 0;

	if (c->ops->query_event == NULL) {
		return 1; /* nothing is queued on a host backend */
	}
	if (!__atomic_compare_exchange_n(&c->busy, &idle, 2, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED)) {
		return 0; /* another thread's call: asked again later */
	}
	rc = comm_poisoned(c);
	if (rc != 0) {
		diag_set(why, rc, "%s", c->poison_msg);
	} else {
		c->diag.msg[0] = '\0';
		c->diag.code = 0;
		rc = finish(c, "step end", c->ops->query_event(c, event, deadline));
		if (rc < 0) {
			diag_set(why, rc, "%s", c->diag.msg);
		}
	}
	__atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
	return rc;
}

CRUN_EXPORT int crun_comm_allreduce(struct crun_comm *c, const void *send, void *recv, size_t count,
				    enum crun_dtype dt, enum crun_redop op)
{
	int rc = enter(c, "allreduce");

	return rc < 0 ? rc : leave(c, do_allreduce(c, send, recv, count, dt, op));
}

CRUN_EXPORT int crun_comm_broadcast(struct crun_comm *c, void *buf, size_t count,
				    enum crun_dtype dt, int root)
{
	int rc = enter(c, "broadcast");

	return rc < 0 ? rc : leave(c, do_broadcast(c, buf, count, dt, root));
}

CRUN_EXPORT int crun_comm_allgather(struct crun_comm *c, const void *send, void *recv, size_t count,
				    enum crun_dtype dt)
{
	int rc = enter(c, "allgather");

	return rc < 0 ? rc : leave(c, do_allgather(c, send, recv, count, dt));
}

CRUN_EXPORT int crun_comm_reduce_scatter(struct crun_comm *c, const void *send, void *recv,
					 size_t recvcount, enum crun_dtype dt, enum crun_redop op)
{
	int rc = enter(c, "reduce_scatter");

	return rc < 0 ? rc : leave(c, do_reduce_scatter(c, send, recv, recvcount, dt, op));
}

CRUN_EXPORT int crun_comm_barrier(struct crun_comm *c)
{
	int rc = enter(c, "barrier");

	return rc < 0 ? rc : leave(c, do_barrier(c));
}

CRUN_EXPORT int crun_comm_rank(const struct crun_comm *c)
{
	return c == NULL ? -EINVAL : c->rank;
}

CRUN_EXPORT int crun_comm_size(const struct crun_comm *c)
{
	return c == NULL ? -EINVAL : c->size;
}

CRUN_EXPORT enum crun_backend crun_comm_backend(const struct crun_comm *c)
{
	return c == NULL ? CRUN_BACKEND_AUTO : c->backend;
}

CRUN_EXPORT const char *crun_comm_last_error(const struct crun_comm *c)
{
	if (c == NULL) {
		return "comm: NULL communicator";
	}
	/* Once poisoned, the first error's message: written once, so any thread may read it. */
	return comm_poisoned(c) != 0 ? c->poison_msg : c->diag.msg;
}

CRUN_EXPORT int crun_comm_set_stream(struct crun_comm *c, void *stream)
{
	if (c == NULL) {
		return -EINVAL;
	}
#if CRUN_HAVE_NCCL
	if (c->backend == CRUN_BACKEND_NCCL) {
		int rc = enter(c, "set_stream");

		return rc < 0 ? rc : leave(c, comm_nccl_set_stream(c, stream));
	}
#endif
	return CRUN_EBACKEND;
}
