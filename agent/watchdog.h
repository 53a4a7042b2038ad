/* SPDX-License-Identifier: MIT */
/* agent/watchdog.h: the worker-hang watchdog's bookkeeping: one heartbeat file per worker. */
#ifndef CRUN_AGENT_WATCHDOG_H
#define CRUN_AGENT_WATCHDOG_H

#include <limits.h>
#include <stdint.h>
#include <time.h>

/*
 * A worker proves it is alive by touching its heartbeat file (libcrun-worker does it from its
 * collectives, barriers, DDP steps and crun_heartbeat(); any program can touch the file named
 * in CRUN_HEARTBEAT_FILE). The agent polls the file's mtime and times the silence on its own
 * monotonic clock (a change of mtime is all that counts, so wall-clock jumps do not matter).
 * The file's first WATCHDOG_STEP_BYTES bytes (zero at the spawn) are libcrun-worker's step:
 * how many heartbeats it has counted, native byte order, updated through a shared mapping on
 * every heartbeat (not rate limited as the mtime touch is), so ranks stuck behind the same
 * collective show the same step and the agent can name every rank silent since the oldest.
 */
#define WATCHDOG_STEP_BYTES 8

struct watchdog_beat {
	char path[PATH_MAX];
	struct timespec mtime; /* last mtime seen */
	int64_t last_ms;       /* crun_now_ms() when it last changed (or the spawn) */
	uint64_t step;         /* the worker's step counter; 0: it counts none (a plain touch) */
};

/**
 * Create (or truncate) @b's file "<dir>/heartbeat_<rank>" with mode 0600, before the worker is
 * spawned; the silence counts from @now_ms. Returns 0 or -errno (-ENAMETOOLONG).
 */
int watchdog_beat_init(struct watchdog_beat *b, const char *dir, int rank, int64_t now_ms);
/** Milliseconds since the worker last touched its file, as of @now_ms. */
int64_t watchdog_beat_silence(struct watchdog_beat *b, int64_t now_ms);
/**
 * Which of the @n beats (NULL: a worker not running) the watchdog names once one is silent for
 * @timeout_ms as of their last watchdog_beat_silence(): the ranks silent since the oldest step
 * (silent for at least half the timeout, at the lowest step among those: step 0, no step counted,
 * is the lowest), into @out in order (lowest step, then longest silence first). Returns how
 * many; 0 when none is silent for @timeout_ms. @now_ms as given to watchdog_beat_silence().
 */
int watchdog_hung(struct watchdog_beat *const *beats, int n, int64_t now_ms, int64_t timeout_ms,
		  int *out);
/** How often to look for a timeout of @timeout_ms: a quarter of it, within 50 ms .. 1 s. */
int64_t watchdog_period_ms(int64_t timeout_ms);

#endif
