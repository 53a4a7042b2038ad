/* SPDX-License-Identifier: MIT */
/* include/crun/comm.h: collectives over a job's ranks (CPU over TCP, or NCCL). */
#ifndef CRUN_COMM_H
#define CRUN_COMM_H

#include <stddef.h>

#include <crun/export.h>
#include <crun/store.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Enumerators carry their category: CRUN_DTYPE_*, CRUN_REDOP_*, CRUN_BACKEND_*. The names of
 * crun 0.1 (CRUN_FLOAT32, CRUN_FLOAT64, CRUN_SUM, CRUN_AVG) are deprecated aliases with the
 * same values; define CRUN_NO_DEPRECATED before including to hide them.
 */
enum crun_dtype {
	CRUN_DTYPE_FLOAT32 = 0,
	CRUN_DTYPE_FLOAT64 = 1,
#ifndef CRUN_NO_DEPRECATED
	CRUN_FLOAT32 = CRUN_DTYPE_FLOAT32, /* deprecated alias */
	CRUN_FLOAT64 = CRUN_DTYPE_FLOAT64, /* deprecated alias */
#endif
};
enum crun_redop {
	CRUN_REDOP_SUM = 0,
	CRUN_REDOP_AVG = 1,
#ifndef CRUN_NO_DEPRECATED
	CRUN_SUM = CRUN_REDOP_SUM, /* deprecated alias */
	CRUN_AVG = CRUN_REDOP_AVG, /* deprecated alias */
#endif
};
enum crun_backend { CRUN_BACKEND_AUTO = 0, CRUN_BACKEND_CPU = 1, CRUN_BACKEND_NCCL = 2 };

struct crun_comm;

/* Start from CRUN_COMM_OPTS_INIT (sets struct_size); struct_size 0 means the 0.2.0 layout. */
struct crun_comm_opts {
	size_t struct_size;        /* set by CRUN_COMM_OPTS_INIT; 0: the 0.2.0 layout */
	enum crun_backend backend; /* AUTO: CRUN_BACKEND env, then nccl if a GPU is usable, else cpu */
	int timeout_ms;            /* bound on setup and on each collective; <=0: 300000 */
	const char *name;          /* namespace of this communicator's store keys; NULL: "default" */
};

#ifdef __cplusplus
/* Every field, in order: see CRUN_STORE_OPTS_INIT. */
#define CRUN_COMM_OPTS_INIT { sizeof(struct crun_comm_opts), CRUN_BACKEND_AUTO, 0, NULL }
#else
#define CRUN_COMM_OPTS_INIT { .struct_size = sizeof(struct crun_comm_opts) }
#endif

/**
 * Create a communicator of @size ranks; this process is @rank. Peers meet through @st
 * (borrowed; must outlive the call only). Blocks until every rank has joined or timeout_ms.
 * On success *out is owned by the caller (crun_comm_destroy()).
 * Returns 0, -EINVAL (bad rank/size/name/backend/struct_size), CRUN_ECONFIG (bad
 * CRUN_BACKEND or CRUN_COMM_ADDR; nccl: the current device is not crun_cuda_device()'s, or
 * more local ranks than visible GPUs), CRUN_EBACKEND (nccl asked for but not built, or its
 * libraries not loadable), CRUN_ENODEV (nccl without a usable GPU; the message names the
 * cause), -ETIMEDOUT (a rank did not arrive), -ECONNRESET, or another negative code.
 * Every rank of one communicator must pass the same @size, name and backend.
 *
 * Store keys (under the handle's prefix): "<name>/join" (a counter: the n-th creation of a
 * name is generation (n-1)/size), "<name>/<generation>/addr/<rank>" (cpu: "host:port" this
 * rank listens on), "<name>/<generation>/nccl_id" (nccl: rank 0's ncclUniqueId).
 *
 * Environment: CRUN_BACKEND=cpu|nccl|auto (only when opts->backend is AUTO); CRUN_COMM_ADDR
 * (cpu: address to listen on; default: the local address that routes to MASTER_ADDR, else
 * 127.0.0.1); CRUN_COMM_SHM=0 (cpu: no shared memory even when every rank is on one host);
 * CRUN_COMM_CMA=1 (cpu, one host: read peers' buffers with process_vm_readv from 256 KiB up
 * instead of copying through the shared rings; default 0, the faster where measured);
 * CRUN_COMM_SHM_RING (bytes per shared-memory link, default
 * 1 MiB); CRUN_COMM_SOCKBUF (SO_SNDBUF/SO_RCVBUF bytes; default 0: kernel autotuning);
 * CRUN_COMM_SIMD=base (cpu: reduce with the baseline x86-64 loops even where AVX2 is available);
 * CRUN_GPU_SHARING=1 (nccl: allow more local ranks than visible GPUs; libcrun-worker(3)).
 *
 * nccl: the communicator's GPU is the calling thread's current device. Under crun it must be
 * crun_cuda_device()'s (<crun/worker.h>: the local rank among the visible GPUs), so call
 * cudaSetDevice(crun_cuda_device(NULL, 0)) before creating it; outside crun (ranks passed by
 * the caller, no RANK/WORLD_SIZE) the current device is taken as it is. Setup is bounded by
 * timeout_ms: a non-blocking NCCL communicator is initialised, then a blocking one for the
 * collectives is split off it (ncclCommSplit, polled to the same deadline).
 * The cpu backend uses shared memory when every rank is on one host (same hostname and boot
 * id) and /dev/shm works for all, else TCP; its segments are unlinked once mapped.
 */
CRUN_EXPORT int crun_comm_create(struct crun_store *st, int rank, int size,
				 const struct crun_comm_opts *opts, struct crun_comm **out);
/** Destroy; NULL is a no-op. */
CRUN_EXPORT void crun_comm_destroy(struct crun_comm *c);

/*
 * Collectives. Buffers are host memory for the cpu backend; for nccl, memory the
 * communicator's GPU can address (device memory of that GPU, managed memory, or mapped
 * registered host memory). The automatic backend picks nccl whenever a GPU is usable, so a
 * program written for host buffers asks for CRUN_BACKEND_CPU (or runs with CRUN_BACKEND=cpu):
 * nccl checks each new buffer (cudaPointerGetAttributes, remembered once found usable) and
 * refuses any other with -EFAULT and a message naming the buffer and the remedy, before
 * NCCL sees it; that does not poison the communicator. Each call blocks until done (nccl:
 * until enqueued and complete on the comm's stream, with the comm's device current for the
 * call and the caller's restored after, if the process has used it) and returns 0, -ETIMEDOUT (a peer did not answer in
 * time), -ECONNRESET (a peer died), -EFAULT, or another code. @send == @recv means in place.
 * One communicator is used by one thread at a time: a call while another thread is inside
 * one returns -EBUSY. So a program must not use the communicator of a crun_ddp while its
 * buckets are in flight (from a step's first crun_ddp_grad_ready() to the end of its
 * crun_ddp_sync()); between steps it may.
 */
CRUN_EXPORT int crun_comm_allreduce(struct crun_comm *c, const void *send, void *recv,
				    size_t count, enum crun_dtype dt, enum crun_redop op);
CRUN_EXPORT int crun_comm_broadcast(struct crun_comm *c, void *buf, size_t count,
				    enum crun_dtype dt, int root);
/** @recv holds size * @count elements, rank r's contribution at offset r * @count. */
CRUN_EXPORT int crun_comm_allgather(struct crun_comm *c, const void *send, void *recv,
				    size_t count, enum crun_dtype dt);
/** @send holds size * @recvcount elements; rank r receives the reduced block r. */
CRUN_EXPORT int crun_comm_reduce_scatter(struct crun_comm *c, const void *send, void *recv,
					 size_t recvcount, enum crun_dtype dt, enum crun_redop op);
CRUN_EXPORT int crun_comm_barrier(struct crun_comm *c);

CRUN_EXPORT int crun_comm_rank(const struct crun_comm *c);
CRUN_EXPORT int crun_comm_size(const struct crun_comm *c);
CRUN_EXPORT enum crun_backend crun_comm_backend(const struct crun_comm *c);

/**
 * The message of the last failed call on @c, "<where>: <what>: <why>", or "" when none.
 * Borrowed; valid until the next call on @c. Once a collective has failed (peer dead, timeout,
 * protocol error) the communicator is poisoned: every later collective returns that first error
 * at once; destroy it and create a new one.
 */
CRUN_EXPORT const char *crun_comm_last_error(const struct crun_comm *c);
/**
 * nccl only: enqueue later collectives on @stream (a cudaStream_t of the communicator's
 * device, borrowed; NULL: the comm's own stream). Returns 0, -EBUSY (another thread is
 * inside a call on @c), or CRUN_EBACKEND for the cpu backend.
 */
CRUN_EXPORT int crun_comm_set_stream(struct crun_comm *c, void *stream);

#ifdef __cplusplus
}
#endif

#endif
