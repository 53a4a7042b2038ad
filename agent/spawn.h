/* SPDX-License-Identifier: MIT */
/* agent/spawn.h: worker environment and argv, the pre-exec shim, the process-group guard. */
#ifndef CRUN_AGENT_SPAWN_H
#define CRUN_AGENT_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

#include "agent/jobspec.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/diag.h"

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
/** Remove @key from @e (nothing when it is not there). */
void spawn_env_unset(struct spawn_env *e, const char *key);
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
	bool agent_store; /* TORCHELASTIC_USE_AGENT_STORE=True: MASTER_* is crun's store */
	/* The store (CRUN_STORE_ENDPOINT, TLS files, etcd settings: store_conf_worker_env()),
	 * the attempt's prefix and the workers' credential file; each may be NULL. */
	const struct store_conf *store;
	const char *store_prefix, *store_token_file;
	const char *error_file;
	const char *heartbeat_file; /* CRUN_HEARTBEAT_FILE (--worker-timeout), or NULL */
};

/**
 * Build the full environment of one worker: the agent's own environment (@base, borrowed)
 * plus torchrun's variables and crun's (docs/agent.md). *out: spawn_env_finish().
 */
int spawn_worker_env(const struct spawn_worker_info *wi, char *const *base, struct spawn_env *out);

/**
 * Build a worker's argv: the program as the spec says (python -u FILE / python -u -m MOD / the
 * executable), its arguments with ${local_rank} expanded, and --local_rank=N when asked.
 * *argv is NULL-terminated; free with spawn_argv_free().
 */
int spawn_worker_argv(const struct job_spec *spec, int local_rank, char ***argv);
void spawn_argv_free(char **argv);

/* What one worker process is started with (everything borrowed for the call). */
struct spawn_proc {
	char *const *argv;  /* argv[0] is looked up in PATH like execvp() */
	char *const *envp;
	int stdin_fd, stdout_fd, stderr_fd; /* become the worker's 0, 1, 2 (stdin may be 0) */
};

/**
 * Start a worker without a second exec: a clone() that shares the agent's memory until it execs
 * (agent/spawn_proc.c) runs a few system calls in the child (default signal dispositions,
 * setsid(), PR_SET_PDEATHSIG(SIGKILL) and a check that the agent is still its parent, stdio,
 * close-on-exec for every other descriptor, the open-file limit) and execs the program. @p is
 * copied for the child: the caller may free it on return. The caller does not wait for the
 * exec, so the workers of a group exec in parallel. A program that cannot be exec'd prints
 * "crun: worker: cannot run ..." on its stderr and exits 127 (ENOENT) or 126, as a shell
 * would. Call from the agent's main thread only (spawn_reap() too): the death signal follows
 * the thread that forked. Returns 0 with *pid and *pidfd (owned: close it after spawn_reap()
 * said the worker exited), or -errno (nothing started).
 */
int spawn_process(const struct spawn_proc *p, pid_t *pid, int *pidfd);

/**
 * Remember this process's open-file limit as the one every worker gets: the agent raises its
 * own soft limit for the store it hosts (agent_setup.c), but a worker keeps the limit it would
 * have had under torchrun (a program using select() must not see descriptors past 1,023). Call
 * once, before anything raises the limit. Returns 0 or -errno.
 */
int spawn_keep_nofile(void);

/**
 * Reap the worker behind @pidfd if it has exited (it is readable then): *exited tells whether
 * it had, with *exit_status or *term_signal (> 0 when a signal killed it). Returns 0 or -errno.
 */
int spawn_reap(int pidfd, bool *exited, int *exit_status, int *term_signal);

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
/** A pidfd readable once the guard has exited (for the agent's loop), or -1. */
int spawn_guard_pidfd(void);
/**
 * Whether the guard still runs; when it has exited, reap it and log an error naming it (pid,
 * how it ended) and what its loss means. Call when spawn_guard_pidfd() is readable.
 */
bool spawn_guard_check(void);

/** Reap exited children libuv does not know about (orphans adopted as child subreaper). */
void spawn_reap_orphans(void);

#endif
