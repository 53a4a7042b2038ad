/* SPDX-License-Identifier: MIT */
/* worker_api/heartbeat.c: touch the agent's per-rank heartbeat file (crun --worker-timeout). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
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
/* The step counter: the file's first 8 bytes, shared with the agent (agent/watchdog.h), which
 * names the ranks silent since the oldest step. NULL when the file has no room for it. */
static _Atomic uint64_t *hb_step;

static void hb_open(void)
{
	const char *path = getenv("CRUN_HEARTBEAT_FILE");
	struct stat sb;

	if (path == NULL || path[0] == '\0') {
		return;
	}
	/* Kept open for the process's life: the agent created it; a touch is one futimens(). */
	hb_fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (hb_fd < 0 && errno == EACCES) {
		hb_fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW); /* touch only */
	}
	if (hb_fd < 0) {
		hb_err = -errno;
		return;
	}
	if (fstat(hb_fd, &sb) == 0 && sb.st_size >= (off_t)sizeof(uint64_t)) {
		void *m = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, hb_fd, 0);

		hb_step = m != MAP_FAILED ? m : NULL;
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
	if (hb_step != NULL) { /* every call is a step, touched or not */
		atomic_fetch_add_explicit(hb_step, 1, memory_order_relaxed);
	}
	now = coarse_ms();
	last = atomic_load_explicit(&hb_last_ms, memory_order_relaxed);
	if (now - last < HEARTBEAT_MIN_GAP_MS ||
	    !atomic_compare_exchange_strong(&hb_last_ms, &last, now)) {
		return 0; /* touched a moment ago, or another thread is touching it now */
	}
	return futimens(hb_fd, NULL) == 0 ? 0 : -errno;
}
