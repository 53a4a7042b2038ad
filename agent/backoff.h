/* SPDX-License-Identifier: MIT */
/* agent/backoff.h: the wait before a restart: exponential, capped, reset by a healthy run. */
#ifndef CRUN_AGENT_BACKOFF_H
#define CRUN_AGENT_BACKOFF_H

#include <stdint.h>
#include <uv.h>

#include "src/common/backoff.h"

/* An attempt that ran this long without failing was healthy: the next wait starts over. */
#define BACKOFF_HEALTHY_MS (10LL * 60 * 1000)

/*
 * The restart wait is src/common/backoff.h's struct backoff in milliseconds, exact (one node's
 * restarts contend with nobody): backoff_init(b, first_ms, max_ms), first_ms 0 for none.
 */

/**
 * The wait before the restart that follows an attempt which ran @ran_ms: first_ms, then twice
 * the previous wait, never above max_ms; back to first_ms after an attempt of at least
 * BACKOFF_HEALTHY_MS (as a unit that stays up long enough is no longer "flapping").
 */
int64_t backoff_next(struct backoff *b, int64_t ran_ms);
/**
 * Wait @ms on @loop (which must have no other active handle), returning early when one of
 * @signals (@n of them) arrives. Returns 0 after the full wait, the signal number, or a
 * negative libuv code (then it did not wait).
 */
int backoff_sleep(uv_loop_t *loop, int64_t ms, const int *signals, int n);

#endif
