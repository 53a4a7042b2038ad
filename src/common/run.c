/* SPDX-License-Identifier: MIT */
/* src/common/run.c: run a helper program to its end, or a deadline, and keep its output. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "src/common/run.h"

extern char **environ;

/* A clean start: no signal blocked, none ignored or caught (the caller may run a loop that
 * blocks them, or ignore SIGPIPE). */
static void clean_attr(posix_spawnattr_t *at)
{
	sigset_t none, all;

	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_init(at);
	posix_spawnattr_setsigmask(at, &none);
	posix_spawnattr_setsigdefault(at, &all);
	posix_spawnattr_setflags(at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

int crun_run_capture(char *const argv[], char *out, size_t cap, int timeout_ms, int *status)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int64_t deadline = crun_now_ms() + timeout_ms;
	struct pollfd pfd;
	size_t n = 0;
	char drop[4096];
	ssize_t k;
	pid_t pid;
	int p[2], rc, left;

	if (pipe2(p, O_CLOEXEC) < 0) {
		return -errno;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	clean_attr(&at);
	rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		return -rc;
	}
	rc = 0;
	pfd.fd = p[0];
	pfd.events = POLLIN;
	for (;;) {
		left = crun_ms_until(deadline);
		if (left <= 0) {
			rc = -ETIMEDOUT;
			break;
		}
		k = poll(&pfd, 1, left);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			rc = k == 0 ? -ETIMEDOUT : -errno;
			break;
		}
		k = n + 1 < cap ? read(p[0], out + n, cap - 1 - n) : read(p[0], drop, sizeof(drop));
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			break; /* end of output (or a read error: take what came) */
		}
		if (n + 1 < cap) {
			n += (size_t)k;
		}
	}
	out[n] = '\0';
	close(p[0]);
	if (rc < 0) {
		kill(pid, SIGKILL); /* our own child, by pid */
	}
	while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
	}
	return rc;
}
