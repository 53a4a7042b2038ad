/* SPDX-License-Identifier: MIT */
/* worker_api/comm_internal.h: the collective backends behind include/crun/comm.h. */
#ifndef CRUN_WORKER_API_COMM_INTERNAL_H
#define CRUN_WORKER_API_COMM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/comm.h>

#include "config.h"
#include "src/common/util.h"
#include "src/common/diag.h"

#define COMM_DEFAULT_TIMEOUT_MS 300000
#define COMM_MAX_NAME 128
#define COMM_MAX_RANKS 65536

/* The collectives, already argument-checked by comm.c. Return 0 or a negative code. */
struct comm_ops {
	int (*allreduce)(struct crun_comm *c, const void *send, void *recv, size_t count,
			 enum crun_dtype dt, enum crun_redop op);
	int (*broadcast)(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
			 int root);
	int (*allgather)(struct crun_comm *c, const void *send, void *recv, size_t count,
			 enum crun_dtype dt);
	int (*reduce_scatter)(struct crun_comm *c, const void *send, void *recv, size_t recvcount,
			      enum crun_dtype dt, enum crun_redop op);
	int (*barrier)(struct crun_comm *c);
	/*
	 * Optional: can this backend use @buf (the @which buffer of @what) at all? Called before
	 * the collective for every buffer; an error is an argument error (the comm stays usable).
	 */
	int (*check_buf)(struct crun_comm *c, const char *what, const char *which, const void *buf);
	/*
	 * Optional (nccl): queue an in-place allreduce of @buf on @stream (NULL: the
	 * communicator's) and return once it is queued, not complete; wait() waits for it.
	 * A failure aborts the backend's communicator, as a failed collective does.
	 */
	int (*allreduce_enqueue)(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
				 enum crun_redop op, void *stream);
	/*
	 * Optional (nccl): wait until everything queued on @stream (NULL: the communicator's)
	 * has completed, by @deadline (crun_now_ms() time); a failure or the deadline aborts
	 * the communicator.
	 */
	int (*wait)(struct crun_comm *c, void *stream, int64_t deadline);
	/*
	 * Optional (nccl): 1 when @event has completed, 0 when not yet; never blocks. An
	 * asynchronous error of the communicator, a failed query or @deadline passed: a
	 * negative code, and the communicator is aborted, as a failed wait() does.
	 */
	int (*query_event)(struct crun_comm *c, void *event, int64_t deadline);
	/* Release the backend state (c->impl); never fails. */
	void (*destroy)(struct crun_comm *c);
};

struct crun_comm {
	int rank;
	int size;
	enum crun_backend backend;
	bool backend_auto; /* chosen by CRUN_BACKEND_AUTO (a GPU is visible), not asked for */
	int timeout_ms;
	uint64_t generation;	  /* how many comms of this name were created before in the store */
	char name[COMM_MAX_NAME]; /* store namespace: keys live under "<name>/<generation>/" */
	const struct comm_ops *ops;
	void *impl; /* the backend's state */
	/*
	 * The error state, read by any thread (comm_poisoned()): 0, or the first error of a
	 * collective, after which every call fails fast. Set once, by comm.c's finish(), with
	 * poison_msg written before it is published (release), so a thread that sees it set
	 * (acquire) reads a complete message.
	 */
	int poisoned;
	char poison_msg[CRUN_DIAG_MSG_MAX];
	int busy;	       /* 1 while a thread is inside a call that uses @diag, 2 while
				  comm_query_event() polls (atomic) */
	int held;	       /* 1 while a DDP step is in flight on @c (comm_hold(); atomic) */
	struct crun_diag diag; /* the last error, "<where>: <what>: <why>" (the busy thread's) */
};

/* 0, or the error that poisoned @c. Any thread. */
static inline int comm_poisoned(const struct crun_comm *c)
{
	return __atomic_load_n(&c->poisoned, __ATOMIC_ACQUIRE);
}

/* Size in bytes of one element of @dt (4 or 8). */
static inline size_t comm_dtype_size(enum crun_dtype dt)
{
	return dt == CRUN_DTYPE_FLOAT64 ? 8 : 4;
}

/* Store key of this comm: "<name>/<generation>/<suffix>" into @buf (NUL-terminated). */
int comm_key(const struct crun_comm *c, char *buf, size_t len, const char *suffix);

/*
 * The queued collectives, for the device DDP (ddp_mem_cuda.c): comm_allreduce_enqueue()
 * checks its arguments and buffers as crun_comm_allreduce() does and queues the allreduce of
 * @buf in place on @stream (NULL: the communicator's), without waiting for it; comm_wait()
 * waits until @stream has drained, by @deadline (crun_now_ms() time; <= 0: the
 * communicator's timeout from now), watching for asynchronous errors. A failure of either
 * poisons the communicator (and aborts NCCL's) exactly as a failed crun_comm_allreduce()
 * does. Both are calls on @c like any other: one thread at a time (-EBUSY for a second),
 * and between them the caller must not let another thread issue collectives on @c (the
 * device DDP: only its communication thread uses the communicator while a step is in
 * flight). CRUN_EBACKEND from comm_allreduce_enqueue() when the backend queues nothing (cpu:
 * its collectives are complete on return); comm_wait() is then a no-op.
 */
int comm_allreduce_enqueue(struct crun_comm *c, void *buf, size_t count, enum crun_dtype dt,
			   enum crun_redop op, void *stream);
int comm_wait(struct crun_comm *c, void *stream, int64_t deadline);

/*
 * The device DDP's end-of-step watch (its communication thread, also between steps, while
 * the program may call @c): has @event (recorded on the communicator's stream after a
 * step's collectives) completed? 1 yes, 0 not yet, or a negative code with @c's message in
 * @why: NCCL reported an asynchronous error, the query failed or @deadline passed; @c is
 * then poisoned and NCCL's communicator aborted, as after a failed collective. It never
 * blocks and never makes another thread's call fail: while another thread is inside a call
 * on @c it answers 0 (ask again), and a thread that enters during the poll waits the few
 * microseconds it takes (enter()). A poisoned @c answers its error.
 */
int comm_query_event(struct crun_comm *c, void *event, int64_t deadline, struct crun_diag *why);

/*
 * A DDP step in flight (from its first gradient marked ready to the end of its sync): its
 * communication thread issues one bucket's collective after another, and a program's
 * collective from another thread between two of them would pair, on this rank, with a
 * bucket on the others. comm_hold() marks @c held (-EBUSY if it already is); from then every
 * call on @c fails with -EBUSY except on the thread that called comm_hold_thread(@c) (the
 * DDP's communication thread, once at its start), until comm_release().
 */
int comm_hold(struct crun_comm *c);
void comm_release(struct crun_comm *c);
void comm_hold_thread(const struct crun_comm *c);

/** CPU backend: TCP ring between the ranks, peers found through @st (borrowed). */
int comm_cpu_init(struct crun_comm *c, struct crun_store *st);

#if CRUN_HAVE_NCCL
/** NCCL backend: unique id through @st (borrowed). CRUN_ENODEV when no GPU is usable. */
int comm_nccl_init(struct crun_comm *c, struct crun_store *st);
/** 1 when the CUDA runtime sees at least one device, else 0 (never crashes without a driver). */
int comm_nccl_gpu_visible(void);
int comm_nccl_set_stream(struct crun_comm *c, void *stream);
void *comm_nccl_get_stream(const struct crun_comm *c);
/** The communicator's CUDA device (crun_cuda_device()'s under crun): the device DDP's. */
int comm_nccl_device(const struct crun_comm *c);
#endif

#endif
