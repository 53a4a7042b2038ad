/* SPDX-License-Identifier: MIT */
/* src/common/notify.h: systemd's service notification protocol ($NOTIFY_SOCKET, sd_notify(3)). */
#ifndef CRUN_SRC_COMMON_NOTIFY_H
#define CRUN_SRC_COMMON_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/*
 * One notifier per process (the agent and crun-rdzvd each have one). Outside systemd, or under
 * a unit that is not Type=notify, $NOTIFY_SOCKET is unset and every call below does nothing.
 */

/**
 * Read $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID, then remove them from the environment
 * so that workers and other children never speak for this process. Call once, before any
 * thread starts (unsetenv() is not thread-safe). Returns 0, or a negative code when the
 * socket address cannot be used (logged once; notifications are then off).
 */
int notify_init(void);

/** Whether a notify socket was given. */
bool notify_enabled(void);

/**
 * Send one datagram of newline-separated assignments ("READY=1\nSTATUS=..."). Thread-safe.
 * Returns 0 (also when disabled) or a negative errno from sendto().
 */
int notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/**
 * The watchdog interval systemd asked for ($WATCHDOG_USEC, for this pid when $WATCHDOG_PID is
 * set), in microseconds; 0 when there is none.
 */
uint64_t notify_watchdog_usec(void);

/**
 * When systemd asked for a watchdog: send WATCHDOG=1 now and then every half interval, from a
 * thread of its own, until notify_finish(). Returns 0 (also when there is no watchdog) or a
 * negative code.
 */
int notify_watchdog_start(void);

/** Stop the watchdog thread and close the socket. Idempotent. */
void notify_finish(void);

#endif
