/* SPDX-License-Identifier: MIT */
/* src/common/run.h: run a helper program to its end, or a deadline, and keep what it printed. */
#ifndef CRUN_SRC_COMMON_RUN_H
#define CRUN_SRC_COMMON_RUN_H

#include <stddef.h>

/**
 * Run @argv (argv[0] searched in PATH, as execvp() would) with stdin from /dev/null, its
 * stdout and stderr together into @out (NUL-terminated, at most @cap - 1 bytes kept, the
 * rest read and dropped), for at most @timeout_ms; the child starts with no signal blocked
 * and every signal at its default, whatever the caller's mask and handlers. *@status:
 * waitpid()'s. Returns 0, -ETIMEDOUT (the child was killed, by its pid, and reaped) or
 * -errno (it could not start). For helpers such as `scontrol` and a python that is asked a
 * question; a grandchild that keeps the pipe open is not waited for past the deadline.
 */
int crun_run_capture(char *const argv[], char *out, size_t cap, int timeout_ms, int *status);

#endif
