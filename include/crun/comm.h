/* SPDX-License-Identifier: MIT */
/* include/crun/comm.h: collectives over a job's ranks (CPU over TCP, or NCCL). */
#ifndef CRUN_COMM_H
#define CRUN_COMM_H

#include <stddef.h>

#include <crun/export.h>
#include <crun/store.h>

enum crun_dtype { CRUN_FLOAT32 = 0, CRUN_FLOAT64 = 1 };
enum crun_redop { CRUN_SUM = 0, CRUN_AVG = 1 };
enum crun_backend { CRUN_BACKEND_AUTO = 0, CRUN_BACKEND_CPU = 1, CRUN_BACKEND_NCCL = 2 };

struct crun_comm;

struct crun_comm_opts {
	enum crun_backend backend; /* AUTO: CRUN_BACKEND env, then nccl if a GPU is visible, else cpu */
	int timeout_ms;            /* bound on setup and on each collective; <=0: 300000 */
	const char *name;          /* namespace of this communicator's store keys; NULL: "default" */
};

/**
 * Create a communicator of @size ranks; this process is @rank. Peers meet through @st
 * (borrowed; must outlive the call only). Blocks until every rank has joined or timeout_ms.
 * On success *out is owned by the caller (crun_comm_destroy()).
 */
CRUN_EXPORT int crun_comm_create(struct crun_store *st, int rank, int size,
				 const struct crun_comm_opts *opts, struct crun_comm **out);
/** Destroy; NULL is a no-op. */
CRUN_EXPORT void crun_comm_destroy(struct crun_comm *c);

/*
 * Collectives. Buffers are host memory for the cpu backend and device memory for nccl. Each
 * call blocks until done (nccl: until enqueued and complete on the comm's stream) and returns
 * 0, -ETIMEDOUT (a peer did not answer in time), -ECONNRESET (a peer died) or another code.
 * One communicator is used by one thread at a time. @send == @recv means in place.
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

#endif
