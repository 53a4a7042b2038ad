/* SPDX-License-Identifier: MIT */
/* src/common/clock.h: the monotonic and wall clocks in the units crun uses. */
#ifndef CRUN_SRC_COMMON_CLOCK_H
#define CRUN_SRC_COMMON_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/** Monotonic clock in milliseconds / nanoseconds (deadlines, durations). */
int64_t crun_now_ms(void);
int64_t crun_now_ns(void);
/** Wall clock in milliseconds since the epoch (timestamps shown to people or stored). */
int64_t crun_wall_ms(void);
/**
 * Milliseconds from now until the monotonic @deadline_ms, clamped to [0, INT32_MAX]: a
 * poll()/SO_RCVTIMEO value that never goes negative or overflows an int.
 */
int crun_ms_until(int64_t deadline_ms);
/**
 * A condition variable whose timed waits are on the monotonic clock (a wall-clock jump
 * neither ends nor stretches them), and crun_now_ms() time @ms as the absolute timespec
 * pthread_cond_timedwait() takes for it.
 */
void crun_cond_init_monotonic(pthread_cond_t *cond);
struct timespec crun_mono_timespec(int64_t ms);
/**
 * Wait on @cond (@mu held) until the monotonic time @at: pthread_cond_clockwait, which names
 * its clock. libfaketime (tests/faults' clock jumps) wraps pthread_cond_timedwait and, with
 * the wall clock an hour back, hands it a deadline already past: a waiter then spins.
 * Returns what pthread_cond_clockwait returns (0, ETIMEDOUT).
 */
int crun_cond_wait_mono(pthread_cond_t *cond, pthread_mutex_t *mu, const struct timespec *at);

#endif
