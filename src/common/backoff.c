/* SPDX-License-Identifier: MIT */
/* src/common/backoff.c: exponential backoff with a cap and jitter. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "src/common/backoff.h"
#include "src/common/clock.h"

void backoff_init(struct backoff *b, int64_t first, int64_t max)
{
	b->first = first > 0 ? first : 0;
	b->max = max > b->first ? max : b->first;
	b->cur = b->first;
	b->jitter = BACKOFF_EXACT;
	b->seed = 0;
}

void backoff_set_jitter(struct backoff *b, enum backoff_jitter j, unsigned seed)
{
	b->jitter = j;
	b->seed = seed;
}

unsigned backoff_seed(void)
{
	return (unsigned)(crun_now_ns() ^ (int64_t)getpid() << 16);
}

/* Uniform in [0, @n) (@n > 0), from 62 random bits: delays in microseconds can pass 2^31. */
static int64_t below(unsigned *seed, int64_t n)
{
	uint64_t r = (uint64_t)rand_r(seed) << 31 ^ (uint64_t)rand_r(seed);

	return (int64_t)(r % (uint64_t)n);
}

int64_t backoff_step(struct backoff *b)
{
	int64_t d = b->cur;

	b->cur = d > b->max / 2 ? b->max : d * 2;
	switch (b->jitter) {
	case BACKOFF_HALF:
		return d / 2 + below(&b->seed, d / 2 + 1);
	case BACKOFF_FULL:
		return d > 0 ? below(&b->seed, d) : 0;
	case BACKOFF_EXACT:
	default:
		return d;
	}
}

void backoff_reset(struct backoff *b)
{
	b->cur = b->first;
}

void backoff_pause(struct backoff *b, int64_t deadline_ms)
{
	int64_t ms = backoff_step(b), left = crun_ms_until(deadline_ms);
	struct timespec ts;

	ms = ms < left ? ms : left;
	if (ms <= 0) {
		return;
	}
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}
