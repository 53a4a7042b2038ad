/* SPDX-License-Identifier: MIT */
/* src/common/clock.h: the monotonic and wall clocks in the units crun uses. */
#ifndef CRUN_SRC_COMMON_CLOCK_H
#define CRUN_SRC_COMMON_CLOCK_H

#include <stdint.h>

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

#endif
