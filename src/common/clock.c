/* SPDX-License-Identifier: MIT */
/* src/common/clock.c: monotonic and wall clocks. */
#include <pthread.h>
#include <time.h>

#include "src/common/clock.h"

int64_t crun_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t crun_now_ms(void)
{
	return crun_now_ns() / 1000000;
}

int64_t crun_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int crun_ms_until(int64_t deadline_ms)
{
	int64_t left = deadline_ms - crun_now_ms();

	if (left <= 0) {
		return 0;
	}
	return left > INT32_MAX ? INT32_MAX : (int)left;
}

void crun_cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
}

struct timespec crun_mono_timespec(int64_t ms)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000L;
	return ts;
}

int crun_cond_wait_mono(pthread_cond_t *cond, pthread_mutex_t *mu, const struct timespec *at)
{
	return pthread_cond_clockwait(cond, mu, CLOCK_MONOTONIC, at);
}
