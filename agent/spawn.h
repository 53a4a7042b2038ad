/* SPDX-License-Identifier: MIT */
/* agent/spawn.h: worker environment and argv, the pre-exec shim, the process-group guard. */
#ifndef CRUN_AGENT_SPAWN_H
#define CRUN_AGENT_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

#include "agent/jobspec.h"

/* argv[1] of a crun process started as the pre-exec shim of a worker (docs/agent.md). */
#define SPAWN_SHIM_FLAG "--crun-internal-exec"

/* A growable, NULL-terminated "KEY=VALUE" vector. Every string is owned. */
struct spawn_env {
	char **v;
	int n, cap;
};

/** Copy @envp (borrowed, NULL-terminated; may be NULL) into @e. Returns 0 or -ENOMEM. */
int spawn_env_init(struct spawn_env *e, char *const *envp);
/** Set @key to @val, replacing any earlier value. Returns 0 or -ENOMEM. */
int spawn_env_set(struct spawn_env *e, const char *key, const char *val);
int spawn_env_setf(struct spawn_env *e, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/** The value of @key in @e (borrowed) or NULL. */
const char *spawn_env_get(const struct spawn_env *e, const char *key);
void spawn_env_finish(struct spawn_env *e);

/* What a worker's environment is built from (everything borrowed). */
struct spawn_worker_info {
	const struct job_spec *spec;
	int local_rank, rank, world_size, group_rank, group_world_size;
	int restart_count;
	const char *run_id, *master_addr;
	int master_port;
	const char *store_endpoint, *store_prefix, *store_token; /* token may be NULL */
	const char *error_file;
};

/**
 * Build the full environment of one worker: the agent's own environment (@base, borrowed)
 * plus torchrun's variables and crun's (docs/agent.md). *out: spawn_env_finish().
 */
int spawn_worker_env(const struct spawn_worker_info *wi, char *const *base, struct spawn_env *out);

/**
 * Build a worker's argv: shim (@self, SPAWN_SHIM_FLAG, agent pid), then the program as the
 * spec says (python -u FILE / python -u -m MOD / the executable), its arguments with
 * ${local_rank} expanded, and --local_rank=N when asked. *argv is NULL-terminated;
 * free with spawn_argv_free().
 */
int spawn_worker_argv(const struct job_spec *spec, const char *self, int local_rank,
		      char ***argv);
void spawn_argv_free(char **argv);

/**
 * The shim: runs in the worker process before the real program (crun's main calls it when
 * argv[1] is SPAWN_SHIM_FLAG). It arms PR_SET_PDEATHSIG(SIGKILL), checks the agent is still
 * its parent, and execs the program; it returns only on failure with the exit status to use.
 */
int spawn_shim_main(int argc, char **argv);

/**
 * The guard: a tiny process forked at agent start that knows every worker's process group
 * and SIGKILLs them all when the agent dies, however it dies (its pipe reaches EOF). It then
 * also removes @tmpdir (borrowed; may be NULL), the agent's temp dir, unless the agent ended
 * through spawn_guard_stop(). Call before any thread exists. Returns 0 or -errno.
 */
int spawn_guard_start(const char *tmpdir);
/** Tell the guard about a new worker process group / one that is gone. */
void spawn_guard_add(pid_t pgid);
void spawn_guard_remove(pid_t pgid);
/** Tell the guard the agent ends normally, close the pipe, reap the guard. */
void spawn_guard_stop(void);

/** Reap exited children libuv does not know about (orphans adopted as child subreaper). */
void spawn_reap_orphans(void);

#endif
