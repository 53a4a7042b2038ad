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
 */
struct watchdog_beat {
	char path[PATH_MAX];
	struct timespec mtime; /* last mtime seen */
	int64_t last_ms;       /* crun_now_ms() when it last changed (or the spawn) */
};

/**
 * Create (or truncate) @b's file "<dir>/heartbeat_<rank>" with mode 0600, before the worker is
 * spawned; the silence counts from @now_ms. Returns 0 or -errno (-ENAMETOOLONG).
 */
int watchdog_beat_init(struct watchdog_beat *b, const char *dir, int rank, int64_t now_ms);
/** Milliseconds since the worker last touched its file, as of @now_ms. */
int64_t watchdog_beat_silence(struct watchdog_beat *b, int64_t now_ms);
/** How often to look for a timeout of @timeout_ms: a quarter of it, within 50 ms .. 1 s. */
int64_t watchdog_period_ms(int64_t timeout_ms);

#endif
