/* SPDX-License-Identifier: MIT */
/* agent/agent_internal.h: the agent's state, shared by agent.c (the job and its attempts) and
 * agent_setup.c (where the store is and which credentials it takes). Private to agent/. */
#ifndef CRUN_AGENT_AGENT_INTERNAL_H
#define CRUN_AGENT_AGENT_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agent/backoff.h"
#include "agent/errfile.h"
#include "agent/group.h"
#include "agent/jobspec.h"
#include "agent/notify_status.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_plan.h"
#include "rendezvous/store/server.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/diag.h"

/* This round's: the assignment, the worker group and what stopped it. */
struct agent_attempt {
	struct rdzv_assignment as;
	struct group *g;
	bool group_done;
	int got_signal;
	char errdir[PATH_MAX];  /* attempt_<n> in the temp dir: the workers' error files */
	char summary[ERRFILE_MAX_MESSAGE + 256]; /* this node's first failure, one line */
	int64_t started;        /* when the workers started (for --restart-backoff) */
	int outcome;            /* enum outcome (agent.c) */

	/* A rendezvous event, from the watch thread (under ev_lock), and the one that stopped
	 * the workers (the loop's). */
	pthread_mutex_t ev_lock;
	bool ev_pending;
	enum rdzv_event ev;
	char ev_detail[ERRFILE_MAX_MESSAGE + 512];
	bool ev_seen;
	enum rdzv_event stop_ev;
	char stop_detail[ERRFILE_MAX_MESSAGE + 512];
	int64_t stop_wall_ms;
};

/*
 * This attempt's failure, published at once (on_first_failure) rather than after the stop, by a
 * thread of its own so that the loop keeps forwarding signals and escalating to SIGKILL while
 * the store answers. on_group_done() joins it before the loop touches the rendezvous again;
 * until then the thread alone uses the rendezvous handle.
 */
struct agent_report {
	pthread_t thr;
	bool thr_running;
	bool reported;
	int rc;
	bool restart;
	struct crun_diag diag;
	char summary[ERRFILE_MAX_MESSAGE + 256];
};

struct agent {
	/*
	 * The plan: decided once, before the first round (agent_init(), agent_store_conf(),
	 * agent_setup_store()), and read-only afterwards. Not a named member, so that the setup
	 * code reads a->sc, a->endpoint as it always has.
	 */
	struct {
		const struct job_spec *spec;
		struct rdzv_plan plan; /* where the store is (rendezvous/rdzv_plan.h) */
		int store_served;      /* group rank 0's answer: the store serves TCPStore (1), not
					* (0), not asked yet (-1) */
		char self_exe[PATH_MAX];
		char hostname[256];
		char advertise[256];
		char endpoint[PATH_MAX + 16];
		char prefix[256];      /* the job's store prefix: "<run_id>/" on etcd, else none */
		struct store_conf sc;  /* the store's configuration: endpoint, token (NULL:
					* --insecure or not a TCP store), TLS files, etcd settings
					* (agent_store_conf) */
		char worker_token[PATH_MAX + 16]; /* the workers' credential file (0600); "" none */
		char tmpbase[PATH_MAX];
		char logrun[PATH_MAX]; /* --log-dir: this run's own folder; "" without --log-dir */
	};

	/* The job, across rounds. */
	uv_loop_t loop;
	bool loop_ok;
	uv_async_t async;
	uv_signal_t sigs[JOBSPEC_MAX_SIGNALS];
	uv_poll_t guard;   /* spawn_guard_pidfd(): the guard's death, named at once */
	bool guard_polled;
	int nsigs;
	struct rdzv *r;
	struct notify_status *ns; /* this node's state for systemd and `crun status` */
	struct store_server_thread *srv;
	enum node_state state;      /* the state last published (NODE_STATE_COUNT: none yet) */
	struct rdzv_master workers; /* what the workers meet through, agreed in the round */
	bool workers_set;
	struct backoff bo;
	int attempt;
	int members;           /* node count of the last round this node was a member of */
	bool job_over;         /* the job ended for every node (finished or budget spent) */
	int exit_code;
	int64_t start_wall_ms; /* when the agent started: its run record's start */
	bool keep_tmp;         /* keep the temp dir: it holds a failed attempt's error files */
	char log_err[PATH_MAX + 128]; /* the first --log-dir file that lost output; "" if none */

	struct agent_attempt at; /* this round's */
	struct agent_report rep; /* the failure being published */
};
/* agent_leave.c */

/**
 * The operator stopped this node with @signum while its workers run: tell the other nodes it
 * leaves (rdzv_leave(), on the report thread, waited for at most 2 s). Uses a->rep.
 */
void agent_leave_round(struct agent *a, int signum);
/* agent_setup.c */

/** Decide where the store is; host it in-process when this node is the one (docs/agent.md). */
int agent_setup_store(struct agent *a, struct crun_diag *d);
/** rdzv_master_fn: group rank 0 decides what every node's workers meet through. */
void agent_decide_master(void *arg, const char *addr, int free_port, struct rdzv_master *m);
/** Take this round's agreed master for the workers (logged when it changes). */
void agent_workers_master(struct agent *a, const struct rdzv_assignment *as);
/** The store's configuration from the spec, its token by the one policy (store_conf.h). */
int agent_store_conf(struct agent *a, struct crun_diag *d);
/** Write the workers' run-scoped credential file (0600) in the run's private directory. */
int agent_worker_token_write(struct agent *a, struct crun_diag *d);
/** --log-dir: the run folder every node of the job shares, agreed in its first round (a->logrun). */
int agent_log_folder(struct agent *a, struct crun_diag *d);

#endif
