/* SPDX-License-Identifier: MIT */
/* worker_api/heartbeat.c: touch the agent's per-rank heartbeat file (crun --worker-timeout). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <crun/worker.h>

#include "worker_api/worker_internal.h"

/* At most one touch per this many milliseconds: a heartbeat from every collective stays cheap. */
#define HEARTBEAT_MIN_GAP_MS 100

static pthread_once_t hb_once = PTHREAD_ONCE_INIT;
static int hb_fd = -1;  /* -1: no watchdog (CRUN_HEARTBEAT_FILE unset) */
static int hb_err;      /* -errno when the file named could not be opened */
static atomic_int_fast64_t hb_last_ms = INT64_MIN / 2;

static void hb_open(void)
{
	const char *path = getenv("CRUN_HEARTBEAT_FILE");

	if (path == NULL || path[0] == '\0') {
		return;
	}
	/* Kept open for the process's life: the agent created it; a touch is one futimens(). */
	hb_fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (hb_fd < 0) {
		hb_err = -errno;
	}
}

static int64_t coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void worker_heartbeat(void)
{
	(void)crun_heartbeat();
}

CRUN_EXPORT int crun_heartbeat(void)
{
	int64_t now, last;

	pthread_once(&hb_once, hb_open);
	if (hb_fd < 0) {
		return hb_err;
	}
	now = coarse_ms();
	last = atomic_load_explicit(&hb_last_ms, memory_order_relaxed);
	if (now - last < HEARTBEAT_MIN_GAP_MS ||
	    !atomic_compare_exchange_strong(&hb_last_ms, &last, now)) {
		return 0; /* touched a moment ago, or another thread is touching it now */
	}
	return futimens(hb_fd, NULL) == 0 ? 0 : -errno;
}
