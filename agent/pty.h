/* SPDX-License-Identifier: MIT */
/* agent/pty.h: a pseudo-terminal for a worker stream that the agent shows on a terminal. */
#ifndef CRUN_AGENT_PTY_H
#define CRUN_AGENT_PTY_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/jobspec.h"

/* The size a worker's terminal gets when the agent's console has none (not a terminal). */
#define PTY_DEFAULT_COLS 80
#define PTY_DEFAULT_ROWS 24

/**
 * Whether a worker stream shown on @console_fd (-1: not shown) gets a pseudo-terminal under
 * @mode: TTY_AUTO when @console_fd is a terminal and no log file (@has_file) takes the stream,
 * TTY_ALWAYS whenever the stream is shown, TTY_NEVER never.
 */
bool pty_wanted(enum tty_mode mode, int console_fd, bool has_file);

/**
 * Open a pseudo-terminal pair, both ends close-on-exec and above 2: *master for the agent to
 * read, *slave to become the worker's stdout or stderr. The terminal passes output as is (no
 * \n -> \r\n: the agent's own terminal does that) and is as wide as @console_fd's terminal
 * less @prefix_len columns (the prefix the agent adds). Returns 0 or -errno (nothing open).
 */
int pty_open(int console_fd, size_t prefix_len, int *master, int *slave);

/** Give the terminal behind @master the size of @console_fd's, less @prefix_len columns. */
void pty_resize(int master, int console_fd, size_t prefix_len);

#endif
