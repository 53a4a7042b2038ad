/* SPDX-License-Identifier: MIT */
/* tests/conformance/parked.c: see when the store holds a wait, so a test writes only after. */
/*
 * Every backend logs "WAIT parked" at debug level when a wait is held rather than answered at
 * once: crun-rdzvd (rendezvous/store/server_wait.c) once the wait is linked to its keys, the
 * file backend (rendezvous/store/client_file.c) before its first sleep, the etcd backend
 * (rendezvous/store/client_etcd_wait.c) once etcd has created its watch. A tap thread copies a
 * log stream on to stderr unchanged and counts those lines. The tcp run taps crun-rdzvd's
 * stderr for the whole run (started with --verbose); the file and etcd runs tap this
 * process's own stderr, at debug level, only between park_watch_begin() and park_watch_end(),
 * so that the rest of the run logs as before and a crash outside a watch loses nothing in the
 * pipe.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/common/io.h"
#include "src/common/log.h"
#include "tests/conformance/conformance.h"

#define PARK_MARK "WAIT parked"

static struct {
	pthread_t th;
	int in;  /* read end of the pipe that carries the log */
	int out; /* where every byte goes on to */
	bool on;
} g_tap = {.in = -1, .out = -1};

static unsigned g_parked;       /* "WAIT parked" lines seen; atomic */
static int g_saved_stderr = -1; /* file backend: the real stderr while a watch is open */
static enum log_level g_saved_level;

static void *tap_main(void *p)
{
	char buf[4096], line[512];
	size_t n = 0;
	ssize_t r, i;

	(void)p;
	for (;;) {
		r = read(g_tap.in, buf, sizeof(buf));
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			break;
		}
		(void)io_write_full(g_tap.out, buf, (size_t)r);
		for (i = 0; i < r; i++) {
			if (buf[i] != '\n') {
				if (n + 1 < sizeof(line)) {
					line[n++] = buf[i];
				}
				continue;
			}
			line[n] = '\0';
			n = 0;
			if (strstr(line, PARK_MARK) != NULL) {
				__atomic_add_fetch(&g_parked, 1, __ATOMIC_RELEASE);
			}
		}
	}
	return NULL;
}

/* Copy @in (takes ownership) on to @out (borrowed) until EOF, counting parked waits. */
static int tap_start(int in, int out)
{
	g_tap.in = in;
	g_tap.out = out;
	if (pthread_create(&g_tap.th, NULL, tap_main, NULL) != 0) {
		close(in);
		g_tap.in = -1;
		return -1;
	}
	g_tap.on = true;
	return 0;
}

int parked_tap_daemon(int fd)
{
	return tap_start(fd, STDERR_FILENO);
}

/* Returns once every writer of the tapped pipe has closed it. */
void parked_tap_stop(void)
{
	if (!g_tap.on) {
		return;
	}
	pthread_join(g_tap.th, NULL);
	close(g_tap.in);
	g_tap.in = -1;
	g_tap.on = false;
}

unsigned park_watch_begin(void)
{
	int p[2];

	if (g_tcp || g_saved_stderr >= 0) {
		return __atomic_load_n(&g_parked, __ATOMIC_ACQUIRE);
	}
	fflush(stderr);
	g_saved_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	assert_true(g_saved_stderr >= 0);
	if (pipe2(p, O_CLOEXEC) < 0) {
		close(g_saved_stderr);
		g_saved_stderr = -1;
		fail_msg("park_watch_begin: pipe: %s", strerror(errno));
	}
	dup2(p[1], STDERR_FILENO);
	close(p[1]);
	if (tap_start(p[0], g_saved_stderr) < 0) {
		dup2(g_saved_stderr, STDERR_FILENO);
		close(g_saved_stderr);
		g_saved_stderr = -1;
		fail_msg("park_watch_begin: cannot start the tap thread");
	}
	/* Before any thread of the test waits: they read the level without a lock. */
	g_saved_level = log_get_level();
	log_set_level(LOG_DEBUG);
	return __atomic_load_n(&g_parked, __ATOMIC_ACQUIRE);
}

int park_watch_until(unsigned n, int timeout_ms)
{
	int64_t end = crun_now_ms() + timeout_ms;

	while (__atomic_load_n(&g_parked, __ATOMIC_ACQUIRE) < n) {
		if (crun_now_ms() > end) {
			return -ETIMEDOUT;
		}
		usleep(1000); /* polling a condition, bounded by @end */
	}
	return 0;
}

void park_watch_end(void)
{
	if (g_tcp || g_saved_stderr < 0) {
		return;
	}
	log_set_level(g_saved_level);
	fflush(stderr);
	/* Closes the pipe's last write end: the tap drains it and stops. */
	dup2(g_saved_stderr, STDERR_FILENO);
	parked_tap_stop();
	close(g_saved_stderr);
	g_saved_stderr = -1;
}
