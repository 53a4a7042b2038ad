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
	/* Release the backend state (c->impl); never fails. */
	void (*destroy)(struct crun_comm *c);
};

struct crun_comm {
	int rank;
	int size;
	enum crun_backend backend;
	int timeout_ms;
	uint64_t generation;	  /* how many comms of this name were created before in the store */
	char name[COMM_MAX_NAME]; /* store namespace: keys live under "<name>/<generation>/" */
	const struct comm_ops *ops;
	void *impl;	       /* the backend's state */
	int poisoned;	       /* 0, or the first error of a collective: later calls fail fast */
	struct crun_diag diag; /* the last error, "<where>: <what>: <why>" */
};

/* Size in bytes of one element of @dt (4 or 8). */
static inline size_t comm_dtype_size(enum crun_dtype dt)
{
	return dt == CRUN_DTYPE_FLOAT64 ? 8 : 4;
}

/* Store key of this comm: "<name>/<generation>/<suffix>" into @buf (NUL-terminated). */
int comm_key(const struct crun_comm *c, char *buf, size_t len, const char *suffix);

/** CPU backend: TCP ring between the ranks, peers found through @st (borrowed). */
int comm_cpu_init(struct crun_comm *c, struct crun_store *st);

#if CRUN_HAVE_NCCL
/** NCCL backend: unique id through @st (borrowed). CRUN_ENODEV when no GPU is usable. */
int comm_nccl_init(struct crun_comm *c, struct crun_store *st);
/** 1 when the CUDA runtime sees at least one device, else 0 (never crashes without a driver). */
int comm_nccl_gpu_visible(void);
int comm_nccl_set_stream(struct crun_comm *c, void *stream);
void *comm_nccl_get_stream(const struct crun_comm *c);
#endif

#endif
