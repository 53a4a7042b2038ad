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

#include "agent/errfile.h"
#include "agent/group.h"
#include "agent/jobspec.h"
#include "agent/notify_status.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/store/server.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/diag.h"

struct agent {
	const struct job_spec *spec;
	uv_loop_t loop;
	uv_async_t async;
	uv_signal_t sigs[JOBSPEC_MAX_SIGNALS];
	int nsigs;
	struct group *g;
	bool group_done;
	int got_signal;

	pthread_mutex_t ev_lock;
	bool ev_pending;
	enum rdzv_event ev;
	char ev_detail[ERRFILE_MAX_MESSAGE + 512];
	bool ev_seen;
	enum rdzv_event stop_ev;
	char stop_detail[ERRFILE_MAX_MESSAGE + 512];
	int64_t stop_wall_ms;

	struct rdzv *r;
	struct notify_status *ns; /* this node's state for systemd and `crun status` */
	struct store_server_thread *srv;
	char self_exe[PATH_MAX];
	char hostname[256];
	char advertise[256];
	char endpoint[PATH_MAX + 16];
	char prefix[256];      /* the job's store prefix: "<run_id>/" on etcd, else none */
	struct store_conf sc;  /* the store's configuration: endpoint, token (NULL: --insecure
				  or not a TCP store), TLS files, etcd settings (agent_store_conf) */
	char worker_token[PATH_MAX + 16]; /* the workers' credential file (0600); "" for none */
	bool agent_store;      /* workers meet through the store (TORCHELASTIC_USE_AGENT_STORE) */
	char store_host[256];  /* ... at this address: their MASTER_ADDR and MASTER_PORT */
	int store_port;
	int members;           /* node count of the last round this node was a member of */
	bool job_over;         /* the job ended for every node (finished or budget spent) */
	char tmpbase[PATH_MAX];
	char logrun[PATH_MAX]; /* --log-dir: this run's own folder; "" without --log-dir */
	int attempt;
	bool loop_ok;
	char log_err[PATH_MAX + 128]; /* the first --log-dir file that lost output; "" if none */

	/*
	 * This attempt's failure, published at once (on_first_failure) rather than after the stop,
	 * by a thread of its own so that the loop keeps forwarding signals and escalating to
	 * SIGKILL while the store answers. on_group_done() joins it before the loop touches the
	 * rendezvous again; until then the thread alone uses a->r.
	 */
	pthread_t report_thr;
	bool report_thr_running;
	bool reported;
	int report_rc;
	bool report_restart;
	struct crun_diag report_diag;
	char report_summary[ERRFILE_MAX_MESSAGE + 256];
};
/* agent_setup.c */

/** Decide where the store is; host it in-process when this node is the one (docs/agent.md). */
int agent_setup_store(struct agent *a, struct crun_diag *d);
/** The store's configuration from the spec, its token by the one policy (store_conf.h). */
int agent_store_conf(struct agent *a, struct crun_diag *d);
/** Write the workers' run-scoped credential file (0600) in the run's private directory. */
int agent_worker_token_write(struct agent *a, struct crun_diag *d);

#endif
