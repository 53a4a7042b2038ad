/* SPDX-License-Identifier: MIT */
/* src/common/backoff.h: exponential backoff with a cap and jitter, the one copy of the rule. */
#ifndef CRUN_SRC_COMMON_BACKOFF_H
#define CRUN_SRC_COMMON_BACKOFF_H

#include <stdint.h>

/*
 * Delays start at @first and double up to @max, in whatever unit the caller counts
 * (milliseconds, microseconds). Each delay drawn may be jittered, so that many clients that
 * failed together (a store restart, a lock released to many waiters) do not retry together:
 * the store clients' reconnects, the file store's lock and poll loops, the etcd backend's
 * retries and its compare-and-set conflicts, and the agent's restart wait all step one of
 * these. Not thread-safe: one per handle or per loop.
 */
enum backoff_jitter {
	BACKOFF_EXACT, /* the delay itself */
	BACKOFF_HALF,  /* uniform in [d/2, d]: out of step, and never much less than asked */
	BACKOFF_FULL,  /* uniform in [0, d): contention, where any order will do */
};

struct backoff {
	int64_t first; /* the first delay; 0: no delays at all */
	int64_t max;   /* the cap (never below first) */
	int64_t cur;   /* the delay the next step draws from */
	enum backoff_jitter jitter;
	unsigned seed; /* rand_r() state: each backoff its own */
};

/** Start at @first (negative: 0), capped at @max (raised to @first when below), exact delays. */
void backoff_init(struct backoff *b, int64_t first, int64_t max);
/** Jitter the delays as @j says, drawing from @seed (backoff_seed() gives a fresh one). */
void backoff_set_jitter(struct backoff *b, enum backoff_jitter j, unsigned seed);
/** A seed that differs between processes and between calls (clock and pid). */
unsigned backoff_seed(void);

/** The next delay (jittered from the current one), then the current one doubles up to max. */
int64_t backoff_step(struct backoff *b);
/** Back to the first delay. */
void backoff_reset(struct backoff *b);
/**
 * For delays in milliseconds: sleep backoff_step() ms, but never past @deadline_ms
 * (crun_now_ms()'s clock); EINTR does not cut the sleep short.
 */
void backoff_pause(struct backoff *b, int64_t deadline_ms);

#endif
