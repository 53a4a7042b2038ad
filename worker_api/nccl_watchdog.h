/* SPDX-License-Identifier: MIT */
/* worker_api/nccl_watchdog.h: a deadline on a blocking NCCL call that the call cannot bypass. */
#ifndef CRUN_WORKER_API_NCCL_WATCHDOG_H
#define CRUN_WORKER_API_NCCL_WATCHDOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "worker_api/gpu_loader.h"

/*
 * The nccl backend's collectives run on a blocking communicator, and NCCL connects to peers
 * lazily inside the first collective that needs a new connection (NCCL_RUNTIME_CONNECT, on
 * by default since 2.22): a peer that is alive but never arrives holds that call, in the
 * caller's thread, before any polling of crun's can look at a clock. So every such call is
 * armed here first: one thread per communicator (as PyTorch's ProcessGroupNCCL watchdog)
 * aborts the communicator (ncclCommAbort, from this thread, which makes the blocked call
 * return) once the call's deadline passes. Disarming after the call says whether that
 * happened; the communicator is then gone and must not be used or aborted again.
 */
struct nccl_watchdog {
	const struct gpu_nccl *nc;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;  /* armed, disarmed or stop (CLOCK_MONOTONIC) */
	ncclComm_t comm;    /* armed: the communicator of the call in flight; NULL: idle */
	int64_t deadline;   /* armed: crun_now_ms() by which the call must have returned */
	bool fired;         /* the armed call passed its deadline and @comm was aborted */
	bool started, stop;
};

/** Start @w's thread (named crun-nccl-wd). Returns 0 or -errno. */
int nccl_watchdog_start(struct nccl_watchdog *w, const struct gpu_nccl *nc);

/** Before a blocking call on @comm: abort @comm if the call is still in it at @deadline. */
void nccl_watchdog_arm(struct nccl_watchdog *w, ncclComm_t comm, int64_t deadline);

/**
 * After the call: true when the watchdog fired (the communicator was aborted; the abort
 * has completed when this returns), false when the call returned in time.
 */
bool nccl_watchdog_disarm(struct nccl_watchdog *w);

/** Stop and join the thread (no call may be armed). Safe on a watchdog never started. */
void nccl_watchdog_stop(struct nccl_watchdog *w);

#endif
