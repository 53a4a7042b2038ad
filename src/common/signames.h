/* SPDX-License-Identifier: MIT */
/* src/common/signames.h: signal names both ways ("SIGTERM" <-> 15). */
#ifndef CRUN_SRC_COMMON_SIGNAMES_H
#define CRUN_SRC_COMMON_SIGNAMES_H

#include <stddef.h>

/**
 * "SIGSEGV" for SIGSEGV, or NULL for a number without a name (real-time signals). A static
 * string; async-signal-safe (a table lookup), so fatal-signal handlers may call it.
 */
const char *signal_abbrev(int sig);
/** "SIGSEGV", "SIGRTMIN+3", or "signal 99": always something printable, in @buf. */
const char *signal_name(int sig, char *buf, size_t len);
/**
 * "TERM", "SIGTERM", "sigterm" or "15" (1..SIGRTMAX) -> the signal number, or -EINVAL.
 */
int signal_parse(const char *name);

#endif
