/* SPDX-License-Identifier: MIT */
/* worker_api/ddp_mem.h: the DDP engine's state and its memory-operations tables (host, CUDA). */
#ifndef CRUN_WORKER_API_DDP_MEM_H
#define CRUN_WORKER_API_DDP_MEM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/comm.h>
#include <crun/ddp.h>

#include "config.h"
#include "src/common/diag.h"
#include "worker_api/ddp_plan.h"
#include "worker_api/gpu_loader.h"

/*
 * What struct_size 0 stands for: sizeof(struct crun_ddp_opts) in crun 0.2.0, the first
 * versioned layout. Fields added later go after @memory, so this stays put.
 */
#define DDP_OPTS_SIZE_0_2_0                                                                        \
	(offsetof(struct crun_ddp_opts, memory) + sizeof(enum crun_ddp_memory))

struct ddp_tensor {
	struct ddp_slot s; /* first member: what ddp_plan_buckets() reads and fills */
	void *ev;          /* the memory ops' own per-tensor state (CUDA: a cudaEvent_t) */
	bool marked;       /* gradient ready in this step */
};

struct ddp_memops;

/* One engine (worker_api/ddp.c) for every kind of memory; what differs is in @mem. */
struct crun_ddp {
	struct crun_comm *comm;
	const struct ddp_memops *mem;
	size_t cap_bytes, first_bytes;
	int world;
	struct ddp_tensor *t;
	int nt, tcap;
	struct ddp_bucket *b;
	int nb;
	bool built;

	/* State of the CUDA memory operations (unused on the host). */
	void *stream;                /* the program's compute stream (borrowed); NULL: legacy */
	int device;                  /* the device of the thread that created the DDP */
	const struct gpu_cuda *cu;   /* the loaded CUDA runtime (gpu_loader.h) */
	void *step_ev;               /* recorded on the comm stream at each step's end */

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t mu;
	pthread_cond_t work; /* a bucket became ready, or stop */
	pthread_cond_t done; /* a bucket finished */
	int next;            /* next bucket the communication thread starts */
	int finished;        /* buckets finished in this step */
	int nmarked;         /* tensors marked in this step: > 0 means a step is in flight */
	int err;             /* first communication error (or a bucket plan mismatch); sticky */
	bool stop;
	bool holding; /* a step is in flight: the comm is held for it (comm_hold()) */
	bool stuck; /* the thread made no progress within twice the comm's timeout (ddp.c) */
	bool no_sync;
	/*
	 * Device memory: a step's collectives are still queued on the device after its sync
	 * returned (end_step()); the communication thread watches them (query()) until they
	 * complete, the communicator reports an error, or @watch_deadline.
	 */
	bool watching;
	int64_t watch_deadline; /* crun_now_ms() time: the oldest unfinished step's end + timeout */
	long long watch_step;   /* the oldest step (1-based: its sync's number) not seen complete */
	long long steps;        /* steps ended by crun_ddp_sync() so far */
	struct crun_diag diag;  /* the last failure, for crun_ddp_last_error() */
	struct crun_diag tdiag; /* the communication thread's failure, moved to @diag under @mu */
};

/*
 * Where a memory operation records its failure: the communication thread writes its own
 * diag (the engine hands it over to the training thread's under d->mu), every other thread
 * d->diag, so the two never write the same message at once.
 */
struct crun_diag *ddp_diag(struct crun_ddp *d);

/*
 * How the engine touches parameters, gradients and bucket buffers. Every function returns 0
 * or a negative code and, on failure, records "<where>: <what>: <why>" in ddp_diag(d). A
 * NULL entry is a no-op. "Training thread" calls come with d->mu held where noted; they may
 * come from any thread the program calls crun_ddp_grad_ready() on, so an operation that
 * needs the DDP's device makes it current and gives the caller's back.
 */
struct ddp_memops {
	bool has_stream; /* crun_ddp_set_stream() applies */
	/* crun_ddp_create(): accept the communicator (else CRUN_EBACKEND), capture state. */
	int (*init)(struct crun_ddp *d);
	/* crun_ddp_destroy(), after everything queued completed: release what init made. */
	void (*fini)(struct crun_ddp *d);
	/* crun_ddp_register() (d->mu held) and crun_ddp_destroy(): per-tensor state. */
	int (*tensor_init)(struct crun_ddp *d, struct ddp_tensor *t);
	void (*tensor_finish)(struct crun_ddp *d, struct ddp_tensor *t);
	/* A bucket's flat buffer of @n floats (d->mu held), and its release. */
	int (*buf_alloc)(struct crun_ddp *d, float **buf, size_t n);
	void (*buf_free)(struct crun_ddp *d, float *buf);
	/*
	 * Building the buckets (d->mu held, world > 1): gather @n doubles from every rank's
	 * host array @send into the host array @recv (world * @n, rank r's at r * @n), over the
	 * communicator. Complete on return.
	 */
	int (*gather)(struct crun_ddp *d, const double *send, double *recv, size_t n);
	/* Training thread, d->mu held, world > 1: tensor @t's gradient is final as of now. */
	int (*mark)(struct crun_ddp *d, struct ddp_tensor *t);
	/* Communication thread: before bucket @bk's gradients are read. */
	int (*wait_grads)(struct crun_ddp *d, const struct ddp_bucket *bk);
	/* Copy @n floats from @src to @dst (a bucket's tensors to or from its flat buffer). */
	int (*copy)(struct crun_ddp *d, float *dst, const float *src, size_t n);
	/* Average @n floats at @buf over the world, in place. */
	int (*allreduce_avg)(struct crun_ddp *d, float *buf, size_t n);
	/*
	 * NULL (host memory): copy and allreduce_avg are complete when they return, so each
	 * bucket is finished as soon as it is reduced, and nothing outlives a step. Otherwise
	 * (CUDA) the communication thread queues every ready bucket at once and, once the step's
	 * last bucket is queued, calls end_step: make the program's compute stream wait on the
	 * device for everything queued (an event recorded on the comm stream,
	 * cudaStreamWaitEvent), without the host waiting; crun_ddp_sync() then returns, and the
	 * thread watches the step with query until it completes.
	 */
	int (*end_step)(struct crun_ddp *d);
	/*
	 * Communication thread, d->mu not held: has everything end_step covered completed? 1
	 * yes, 0 not yet (never blocks), or a negative code naming step @step: the
	 * communicator's asynchronous error, or @deadline passed (the communicator is aborted).
	 */
	int (*query)(struct crun_ddp *d, int64_t deadline, long long step);
	/*
	 * Wait until everything copy and allreduce_avg queued has completed (NULL with
	 * end_step). After a failed step (nothing queued may outlive it), at the broadcast's end
	 * and at destroy. Bounded by the communicator's timeout.
	 */
	int (*drain)(struct crun_ddp *d);
	/* Training thread, before the parameters are broadcast: the program's writes landed. */
	int (*params_ready)(struct crun_ddp *d);
};

/* Host memory: memcpy, and the communicator's allreduce on host buffers (ddp_mem_host.c). */
extern const struct ddp_memops ddp_host_memops;
#if CRUN_HAVE_NCCL
/* CUDA device memory over an nccl communicator: events, streams, NCCL (ddp_mem_cuda.c). */
extern const struct ddp_memops ddp_cuda_memops;
#endif

#endif
