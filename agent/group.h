/* SPDX-License-Identifier: MIT */
/* agent/group.h: one attempt's worker group: spawn, watch, stop, route output. */
#ifndef CRUN_AGENT_GROUP_H
#define CRUN_AGENT_GROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent/errfile.h"
#include "agent/jobspec.h"
#include "src/common/util.h"
#include "src/common/diag.h"

/* How long the pipes of exited workers may stay open (descendants that left the group). */
#define GROUP_DRAIN_MS 2000

struct group;

struct group_opts {
	const struct job_spec *spec; /* borrowed, for the group's life */
	const char *self_exe;        /* this crun binary: the pre-exec shim */
	const char *hostname;
	const char *run_id;
	int restart_count;
	int group_rank, group_world_size, rank_offset, world_size;
	const char *master_addr;
	int master_port;
	bool agent_store; /* master_addr:master_port is the agent store */
	const struct store_conf *store; /* what workers inherit of the store (may be NULL) */
	const char *store_prefix, *store_token_file; /* may be NULL */
	const char *errdir; /* existing dir for TORCHELASTIC_ERROR_FILE files */
	const char *logdir; /* DIR for <rank>/{stdout,stderr}.log, or NULL for none */
	char *const *base_env; /* the agent's environment (borrowed) */
	/*
	 * Optional: runs once on the loop when the first worker fails (after the failure window,
	 * the spec's failure_window_ms, in which the others may fail too), right after SIGTERM went to
	 * every worker, while they are still stopping (the agent publishes the failure then, so
	 * other nodes stop theirs without waiting for this node's grace period). Gets group_start's
	 * @arg; group_failures() already holds the first failure.
	 */
	void (*first_failure)(struct group *g, void *arg);
};

enum group_result {
	GROUP_SUCCEEDED, /* every worker exited 0 */
	GROUP_FAILED,    /* a worker failed (or could not start): see group_failures() */
	GROUP_STOPPED,   /* stopped from outside (group_stop()) before any worker failed */
};

typedef void (*group_done_cb)(struct group *g, void *arg);

/**
 * Spawn every worker of this node on @loop (borrowed) and watch them. @done runs once, on the
 * loop, after every worker has exited and every handle of the group is closed; then call
 * group_destroy(). A worker that cannot be started fails the group (the others are stopped).
 * Returns 0 (*out owned by the caller) or a negative code with @d filled (nothing started).
 */
int group_start(uv_loop_t *loop, const struct group_opts *o, group_done_cb done, void *arg,
		struct group **out, struct crun_diag *d);
/** Stop from outside: @sig to every worker's process group, grace, then SIGKILL. Idempotent. */
void group_stop(struct group *g, int sig);
enum group_result group_result(const struct group *g);
/** The failures, first (the root cause) first; returns how many (<= @max). Borrowed strings. */
int group_failures(const struct group *g, struct errfile_failure *out, int max);
/** Exit status for the job: 0, the first failure's exit code, 128+signal, or 1. */
int group_exit_code(const struct group *g);
/**
 * The first worker log file (--log-dir) a write to which failed: its message ("log file PATH:
 * No space left on device (N bytes of output not written)") in @buf and -errno; 0 if none.
 */
int group_log_error(const struct group *g, char *buf, size_t len);
/** Why spawning failed, when it did (else ""). */
const char *group_spawn_error(const struct group *g);
/** Worker pids (0 if not started), for tests and logs. */
int group_size(const struct group *g);
void group_destroy(struct group *g);

#endif
