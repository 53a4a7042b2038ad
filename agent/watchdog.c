/* SPDX-License-Identifier: MIT */
/* agent/watchdog.c: the worker-hang watchdog's heartbeat files and whom it names (the timer
 * lives in group.c). */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/watchdog.h"

int watchdog_beat_init(struct watchdog_beat *b, const char *dir, int rank, int64_t now_ms)
{
	struct stat sb;
	int fd;

	if ((size_t)snprintf(b->path, sizeof(b->path), "%s/heartbeat_%d", dir, rank) >=
	    sizeof(b->path)) {
		return -ENAMETOOLONG;
	}
	fd = open(b->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		return -errno;
	}
	/* Room for the step counter (zeros), which libcrun-worker maps. */
	if (ftruncate(fd, WATCHDOG_STEP_BYTES) != 0 || fstat(fd, &sb) != 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	close(fd);
	b->mtime = sb.st_mtim;
	b->last_ms = now_ms;
	b->step = 0;
	return 0;
}

/* The worker's step counter, or @old when it cannot be read. */
static uint64_t read_step(const char *path, uint64_t old)
{
	uint64_t v;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t r;

	if (fd < 0) {
		return old;
	}
	r = pread(fd, &v, sizeof(v), 0);
	close(fd);
	return r == (ssize_t)sizeof(v) ? v : old;
}

int64_t watchdog_beat_silence(struct watchdog_beat *b, int64_t now_ms)
{
	struct stat sb;
	uint64_t step;

	/* A file that vanished cannot be touched either: the silence just grows. */
	if (stat(b->path, &sb) == 0 &&
	    (sb.st_mtim.tv_sec != b->mtime.tv_sec || sb.st_mtim.tv_nsec != b->mtime.tv_nsec)) {
		b->mtime = sb.st_mtim;
		b->last_ms = now_ms;
	}
	/* A step counted without a touch (the touch is rate limited) is progress too. */
	step = read_step(b->path, b->step);
	if (step != b->step) {
		b->step = step;
		b->last_ms = now_ms;
	}
	return now_ms - b->last_ms;
}

/* @a goes before @b: the lower step, then the longer silence. */
static bool before(const struct watchdog_beat *a, const struct watchdog_beat *b)
{
	if (a->step != b->step) {
		return a->step < b->step;
	}
	return a->last_ms < b->last_ms;
}

int watchdog_hung(struct watchdog_beat *const *beats, int n, int64_t now_ms, int64_t timeout_ms,
		  int *out)
{
	bool tripped = false;
	uint64_t oldest = UINT64_MAX;
	int i, j, k = 0;

	for (i = 0; i < n; i++) {
		if (beats[i] == NULL || now_ms - beats[i]->last_ms < timeout_ms / 2) {
			continue;
		}
		tripped |= now_ms - beats[i]->last_ms >= timeout_ms;
		oldest = beats[i]->step < oldest ? beats[i]->step : oldest;
	}
	if (!tripped) {
		return 0;
	}
	for (i = 0; i < n; i++) {
		if (beats[i] == NULL || now_ms - beats[i]->last_ms < timeout_ms / 2 ||
		    beats[i]->step != oldest) {
			continue;
		}
		/* insertion sort: a handful of ranks per node */
		for (j = k; j > 0 && before(beats[i], beats[out[j - 1]]); j--) {
			out[j] = out[j - 1];
		}
		out[j] = i;
		k++;
	}
	return k;
}

int64_t watchdog_period_ms(int64_t timeout_ms)
{
	int64_t p = timeout_ms / 4;

	return p < 50 ? 50 : p > 1000 ? 1000 : p;
}
