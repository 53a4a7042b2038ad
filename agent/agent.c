/* SPDX-License-Identifier: MIT */
/* agent/agent.c: the agent loop: store, rendezvous rounds, worker group, restarts, report. */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <crun/error.h>
#include <crun/store.h>

#include "agent/agent.h"
#include "agent/agent_store.h"
#include "agent/backoff.h"
#include "agent/errfile.h"
#include "agent/group.h"
#include "agent/logroute.h"
#include "src/common/notify.h"
#include "agent/notify_status.h"
#include "agent/run_record.h"
#include "agent/spawn.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/store/server.h"
#include "src/common/clock.h"
#include "src/common/fs.h"
#include "src/common/journal.h"
#include "src/common/log.h"
#include "src/common/net.h"
#include "src/common/signames.h"
#include "src/common/token.h"

extern char **environ;

/* How long a node whose workers succeeded waits for the other nodes to finish. */
#define AGENT_FINISH_TIMEOUT_MS (24LL * 3600 * 1000)
/* How long the agent hosting the store keeps it up for nodes that have not seen the end. */
#define AGENT_LEFT_TIMEOUT_MS (60LL * 1000)
/* How long deleting an etcd job's keys may take (each of two requests). */
#define AGENT_FORGET_TIMEOUT_MS (10LL * 1000)

#include "agent/agent_internal.h"


/* ---- the node's state ---- */

/*
 * Publish a transition (systemd STATUS=, `crun status`): once per transition, from the job's
 * loop in agent_run(), and from on_signal() for a stop that starts while workers run.
 */
static void enter_state(struct agent *a, enum node_state st)
{
	bool in_round = st == NODE_RUNNING || st == NODE_WAITING || st == NODE_RESTARTING;

	if (st == a->state) {
		return;
	}
	a->state = st;
	notify_status_set(a->ns, st, in_round ? &a->at.as : NULL);
}

/* ---- one attempt on the loop ---- */

static void close_loop_handles(struct agent *a)
{
	int i;

	for (i = 0; i < a->nsigs; i++) {
		uv_signal_stop(&a->sigs[i]);
		uv_close((uv_handle_t *)&a->sigs[i], NULL);
	}
	a->nsigs = 0;
	uv_close((uv_handle_t *)&a->async, NULL);
	if (a->guard_polled) {
		uv_close((uv_handle_t *)&a->guard, NULL);
		a->guard_polled = false;
	}
}

/* The process-group guard exited while this attempt runs: name it (spawn_guard_check). */
static void on_guard_exit(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	uv_poll_stop(h); /* before spawn_guard_check() closes the pidfd */
	if (spawn_guard_check()) {
		uv_poll_start(h, UV_READABLE, on_guard_exit); /* not gone after all */
	}
}

static void watch_guard(struct agent *a)
{
	int fd = spawn_guard_pidfd();

	if (fd >= 0 && uv_poll_init(&a->loop, &a->guard, fd) == 0) {
		a->guard_polled = true;
		uv_poll_start(&a->guard, UV_READABLE, on_guard_exit);
	}
}

static void report_join(struct agent *a)
{
	if (a->rep.thr_running) {
		pthread_join(a->rep.thr, NULL);
		a->rep.thr_running = false;
		log_debug("failure report published");
	}
}

static void on_group_done(struct group *g, void *arg)
{
	struct agent *a = arg;

	(void)g;
	a->at.group_done = true;
	log_debug("workers and their pipes are closed");
	/*
	 * The workers are gone, so nothing is left for the loop to do while the failure report
	 * finishes (each store operation is bounded by the read timeout).
	 */
	report_join(a);
	/* After this no event callback runs, so the async handle can go. */
	rdzv_watch_stop(a->r);
	log_debug("rendezvous watch stopped");
	close_loop_handles(a);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct agent *a = h->data;
	char name[32];

	if (a->at.group_done) {
		return;
	}
	if (a->at.got_signal != 0) {
		log_warn("received %s again: killing the workers now",
			 signal_name(signum, name, sizeof(name)));
		group_stop(a->at.g, SIGKILL);
		return;
	}
	a->at.got_signal = signum;
	/* The one transition that happens while the workers run: published now, not after. */
	enter_state(a, NODE_STOPPING);
	agent_leave_round(a, signum);
	log_warn("received %s: forwarding it to the workers (SIGKILL after %lld ms)",
		 signal_name(signum, name, sizeof(name)),
		 (long long)a->spec->shutdown_timeout_ms);
	group_stop(a->at.g, signum);
}

static void on_async(uv_async_t *h)
{
	struct agent *a = h->data;
	static const char *const names[] = {"a peer failed", "a new node is waiting (scale-up)",
					    "a node was lost", "the store stopped answering",
					    "a node left"};

	pthread_mutex_lock(&a->at.ev_lock);
	if (!a->at.ev_pending || a->at.ev_seen) {
		pthread_mutex_unlock(&a->at.ev_lock);
		return;
	}
	a->at.ev_seen = true;
	a->at.stop_ev = a->at.ev;
	a->at.stop_wall_ms = crun_wall_ms();
	snprintf(a->at.stop_detail, sizeof(a->at.stop_detail), "%s", a->at.ev_detail);
	pthread_mutex_unlock(&a->at.ev_lock);
	if (a->at.group_done) {
		return;
	}
	log_warn("stopping the workers: %s%s%s", names[a->at.stop_ev],
		 a->at.stop_detail[0] != '\0' ? ": " : "", a->at.stop_detail);
	group_stop(a->at.g, SIGTERM);
}

/* Runs on the rendezvous watch thread. */
static void on_rdzv_event(void *arg, enum rdzv_event ev, const char *detail)
{
	struct agent *a = arg;

	pthread_mutex_lock(&a->at.ev_lock);
	if (!a->at.ev_pending) {
		a->at.ev_pending = true;
		a->at.ev = ev;
		snprintf(a->at.ev_detail, sizeof(a->at.ev_detail), "%s",
			 detail != NULL ? detail : "");
	}
	pthread_mutex_unlock(&a->at.ev_lock);
	uv_async_send(&a->async);
}

/* Publish this attempt's failure: on the report thread, or on the loop when none could start. */
static void report_failure(struct agent *a)
{
	a->rep.rc = rdzv_report_failure(a->r, a->rep.summary, &a->rep.restart,
					   &a->rep.diag);
	/*
	 * This round is over for this node: no peer event can change what happens next, so stop the
	 * watch thread now, while the workers die, rather than after. The async handle stays open
	 * until on_group_done(), so an event already on its way is harmless. Not when the store just
	 * failed us: stopping the thread costs a store round trip, which can wait after the stop.
	 */
	if (a->rep.rc == 0) {
		rdzv_watch_stop(a->r);
	}
}

static void *report_main(void *arg)
{
	report_failure(arg);
	return NULL;
}

/*
 * The first worker failed; SIGTERM is on its way to the others. Publish the failure now so the
 * other nodes stop their workers at once (fail fast) instead of after this node's grace period,
 * and so the next round's bookkeeping overlaps with the stop. The store round trips run on a
 * thread, so a slow or hung store never delays signal forwarding or the SIGKILL escalation.
 */
static void on_first_failure(struct group *g, void *arg)
{
	struct agent *a = arg;
	struct errfile_failure f[8];
	sigset_t all, old;
	int rc, n;

	if (a->at.got_signal != 0 || a->rep.reported || (n = group_failures(g, f, 8)) < 1) {
		return;
	}
	errfile_summary_all(f, n, a->rep.summary, sizeof(a->rep.summary));
	memset(&a->rep.diag, 0, sizeof(a->rep.diag));
	a->rep.restart = false;
	a->rep.reported = true;
	/* Signals belong to the loop's thread: the report thread starts with all of them blocked. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&a->rep.thr, NULL, report_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0) {
		a->rep.thr_running = true;
		return;
	}
	log_warn("failure report: no thread (%s); publishing it from the loop", strerror(rc));
	report_failure(a);
}

enum outcome {
	OUT_SUCCESS,
	OUT_FAILED,   /* local workers failed */
	OUT_EVENT,    /* stopped by a rendezvous event */
	OUT_SIGNAL,   /* the agent was signalled */
};

/*
 * The first line of a failure report. A Python program's names the interpreter that ran it, so
 * a ModuleNotFoundError says which python lacked the module.
 */
static void failure_heading(const struct agent *a, const struct rdzv_assignment *as, char *buf,
			    size_t len)
{
	const struct job_spec *spec = a->spec;
	const char *py = spec->python_path != NULL ? spec->python_path : spec->python_exec;

	if (spec->program_kind != PROGRAM_EXEC && py != NULL) {
		snprintf(buf, len,
			 "crun: worker failure on %s (node rank %d, attempt %d, restart %d of %d; "
			 "python %s):",
			 a->hostname, as->group_rank, a->attempt, as->restart_count,
			 spec->max_restarts, py);
		return;
	}
	snprintf(buf, len,
		 "crun: worker failure on %s (node rank %d, attempt %d, restart %d of %d):",
		 a->hostname, as->group_rank, a->attempt, as->restart_count, spec->max_restarts);
}

/* Where the workers' output goes: --log-dir, or a temp dir when any of it is redirected. */
static int attempt_logdir(struct agent *a, char *logdir, size_t cap, char **logdirp)
{
	const struct job_spec *spec = a->spec;
	bool any_file = false;
	int i;

	*logdirp = NULL;
	for (i = 0; i <= 1024; i++) {
		if (spec->redirects[i] != STD_NONE || spec->tee[i] != STD_NONE) {
			any_file = true;
			break;
		}
	}
	if (spec->log_dir != NULL) {
		/* The round, not this node's attempt count: the same folder on every node. */
		if (snprintf(logdir, cap, "%s/attempt_%d", a->logrun, a->at.as.round) >= (int)cap) {
			log_error("--log-dir: %s: path too long", spec->log_dir);
			return -1;
		}
		*logdirp = logdir;
	} else if (any_file) {
		/* torchrun writes redirected output to a temp dir too; ours goes on success. */
		if (snprintf(logdir, cap, "%s/logs", a->at.errdir) >= (int)cap) {
			return -1;
		}
		*logdirp = logdir;
		log_info("no --log-dir: redirected output goes to %s", logdir);
	}
	return 0;
}

/* Spawn this round's workers and arm the loop's handles. Returns 0 or -1 (logged). */
static int attempt_start(struct agent *a)
{
	const struct job_spec *spec = a->spec;
	const struct rdzv_assignment *as = &a->at.as;
	struct group_opts o = {0};
	struct crun_diag d = {0};
	char logdir[PATH_MAX], *logdirp;
	int rc, i;

	if (snprintf(a->at.errdir, PATH_MAX, "%s/attempt_%d", a->tmpbase, a->attempt) >= PATH_MAX ||
	    (mkdir(a->at.errdir, 0700) != 0 && errno != EEXIST)) {
		log_error("temp dir %s: mkdir: %s", a->at.errdir, strerror(errno));
		return -1;
	}
	if (attempt_logdir(a, logdir, sizeof(logdir), &logdirp) < 0) {
		return -1;
	}
	o.spec = spec;
	o.self_exe = a->self_exe;
	o.hostname = a->hostname;
	o.run_id = spec->rdzv_id;
	o.restart_count = as->restart_count;
	o.group_rank = as->group_rank;
	o.group_world_size = as->group_world_size;
	o.rank_offset = as->rank_offset;
	o.world_size = as->world_size;
	/* PyTorch's bootstrap, the same on every node: agreed in the round (docs/agent.md). */
	o.master_addr = a->workers.addr;
	o.master_port = a->workers.port;
	o.agent_store = a->workers.how == RDZV_BOOT_AGENT_STORE;
	o.store = &a->sc;
	o.store_prefix = as->worker_prefix;
	o.store_token_file = a->worker_token[0] != '\0' ? a->worker_token : NULL;
	o.errdir = a->at.errdir;
	o.logdir = logdirp;
	o.base_env = environ;
	o.first_failure = on_first_failure;
	a->rep.reported = false;

	a->at.group_done = false;
	a->at.got_signal = 0;
	a->at.ev_pending = false;
	a->at.ev_seen = false;
	uv_async_init(&a->loop, &a->async, on_async);
	a->async.data = a;
	watch_guard(a);
	for (i = 0; i < spec->nsignals && i < JOBSPEC_MAX_SIGNALS; i++) {
		uv_signal_init(&a->loop, &a->sigs[i]);
		a->sigs[i].data = a;
		a->nsigs++;
		rc = uv_signal_start(&a->sigs[i], on_signal, spec->signals[i]);
		if (rc < 0) {
			log_warn("signal %d: cannot handle it: %s", spec->signals[i], uv_strerror(rc));
		}
	}
	rc = group_start(&a->loop, &o, on_group_done, a, &a->at.g, &d);
	if (rc < 0) {
		log_error("%s", d.msg);
		close_loop_handles(a);
		uv_run(&a->loop, UV_RUN_DEFAULT);
		return -1;
	}
	log_debug("attempt %d: workers spawned", a->attempt);
	return 0;
}

/* This node's workers failed: the report table, the summary, the status record. */
static void attempt_failed(struct agent *a)
{
	struct errfile_failure one, *f;
	char heading[PATH_MAX + 256];
	int max = group_size(a->at.g), n;

	/* Every failure goes in the report; without memory for them, the first. */
	f = calloc((size_t)max, sizeof(*f));
	if (f == NULL) {
		f = &one;
		max = 1;
	}
	n = group_failures(a->at.g, f, max);
	a->exit_code = group_exit_code(a->at.g);
	if (n == 0) {
		snprintf(a->at.summary, sizeof(a->at.summary), "node %s: %s", a->hostname,
			 group_spawn_error(a->at.g));
	} else {
		failure_heading(a, &a->at.as, heading, sizeof(heading));
		errfile_report(STDERR_FILENO, heading, f, n);
		errfile_summary_all(f, n, a->at.summary, sizeof(a->at.summary));
		notify_status_fail(a->ns, f[0].rank, a->exit_code, a->at.summary);
	}
	if (f != &one) {
		free(f);
	}
}

/* Watch the round while the workers run; how it ended (a->exit_code set). */
static enum outcome attempt_run(struct agent *a)
{
	enum outcome out;
	int rc;

	rc = rdzv_watch_start(a->r, on_rdzv_event, a);
	if (rc < 0) {
		log_error("rendezvous: watching the job: %s", crun_strerror(rc));
		pthread_mutex_lock(&a->at.ev_lock);
		a->at.ev_pending = a->at.ev_seen = true;
		a->at.stop_ev = RDZV_EV_STORE_LOST;
		snprintf(a->at.stop_detail, sizeof(a->at.stop_detail), "cannot watch the job: %s",
			 crun_strerror(rc));
		pthread_mutex_unlock(&a->at.ev_lock);
		group_stop(a->at.g, SIGTERM);
	}
	uv_run(&a->loop, UV_RUN_DEFAULT);
	report_join(a); /* on_group_done() did, unless the loop ended another way */
	log_debug("attempt %d: every worker has exited", a->attempt);
	spawn_reap_orphans();

	switch (group_result(a->at.g)) {
	case GROUP_SUCCEEDED:
		out = OUT_SUCCESS;
		a->exit_code = 0;
		break;
	case GROUP_FAILED:
		out = OUT_FAILED;
		attempt_failed(a);
		break;
	case GROUP_STOPPED:
	default:
		out = a->at.got_signal != 0 ? OUT_SIGNAL : OUT_EVENT;
		a->exit_code = a->at.got_signal != 0 ? 128 + a->at.got_signal : 1;
		break;
	}
	if (a->at.got_signal != 0 && out != OUT_SIGNAL) {
		/* A signal that arrived while workers were already failing still ends the job. */
		out = OUT_SIGNAL;
		a->exit_code = 128 + a->at.got_signal;
	}
	if (a->log_err[0] == '\0') {
		group_log_error(a->at.g, a->log_err, sizeof(a->log_err));
	}
	group_destroy(a->at.g);
	a->at.g = NULL;
	return out;
}

/* The attempt is over: its error files go to --log-dir; the next one gets a new number. */
static void attempt_end(struct agent *a)
{
	if (a->logrun[0] != '\0') {
		logroute_keep_errfiles(a->at.errdir, a->logrun, a->at.as.round);
	}
	a->attempt++;
}

/* ---- the job ---- */

/*
 * Before the restart that follows a failure (this node's, or a peer's that spent the budget),
 * wait as --restart-backoff says, so a failure that recurs at once cannot spend the whole
 * --max-restarts budget in milliseconds. Returns 0, or the signal that ended the wait.
 */
static int restart_wait(struct agent *a)
{
	const struct job_spec *spec = a->spec;
	const struct rdzv_assignment *as = &a->at.as;
	char name[32];
	int64_t ms;
	int sig;

	if (as->restart_count + 1 > spec->max_restarts) {
		return 0; /* the next round only reports that the budget is spent */
	}
	ms = backoff_next(&a->bo, crun_now_ms() - a->at.started);
	if (ms <= 0) {
		return 0;
	}
	log_warn("restarting in %.1f s (restart %d of %d)", (double)ms / 1000.0,
		 as->restart_count + 1, spec->max_restarts);
	sig = backoff_sleep(&a->loop, ms, spec->signals, spec->nsignals);
	if (sig > 0) {
		log_warn("received %s while waiting to restart: not restarting",
			 signal_name(sig, name, sizeof(name)));
	}
	return sig;
}

/*
 * Another node's failure ended the job: show the same table its agent printed and return the
 * exit status that node exits with (its first failed worker's), so every node of the job ends
 * the same way. The rendezvous' "budget exhausted" message carries the final round's failure
 * summary; the stop event this node saw carries it too when that message does not.
 * Returns 1 when neither names a worker failure.
 */
static int report_peer_failure(struct agent *a, const char *end_msg)
{
	struct errfile_failure f;
	char host[256], msg[ERRFILE_MAX_MESSAGE], heading[128];

	const char *stop = a->at.stop_detail;

	if (errfile_parse_summary(end_msg, &f, host, sizeof(host), msg, sizeof(msg)) < 0 &&
	    errfile_parse_summary(stop, &f, host, sizeof(host), msg, sizeof(msg)) < 0) {
		return 1;
	}
	f.wall_ms = a->at.stop_wall_ms != 0 ? a->at.stop_wall_ms : crun_wall_ms();
	snprintf(heading, sizeof(heading), "crun: the job failed on another node (seen here at the"
					   " time below):");
	errfile_report(STDERR_FILENO, heading, &f, 1);
	if (f.signal > 0) {
		return 128 + f.signal;
	}
	return f.exit_code > 0 && f.exit_code < 256 ? f.exit_code : 1;
}

static int agent_init(struct agent *a, const struct job_spec *spec, struct crun_diag *d)
{
	ssize_t n;
	const char *tmp;
	int rc;

	a->spec = spec;
	pthread_mutex_init(&a->at.ev_lock, NULL);
	/* Every journal entry of this agent names its run (journalctl RUN_ID=...). */
	if (journal_set_field("RUN_ID", spec->rdzv_id) < 0) {
		log_warn("--rdzv-id %s: not a journal field value; journal entries go without RUN_ID",
			 spec->rdzv_id);
	}
	n = readlink("/proc/self/exe", a->self_exe, sizeof(a->self_exe) - 1);
	if (n < 0) {
		return diag_set(d, -errno, "agent: /proc/self/exe: %s", strerror(errno));
	}
	a->self_exe[n] = '\0';
	if (gethostname(a->hostname, sizeof(a->hostname) - 1) != 0) {
		snprintf(a->hostname, sizeof(a->hostname), "localhost");
	}
	/* Before any thread: it takes $CRUN_STORE_TOKEN out of the environment. */
	rc = agent_store_conf(a, d);
	if (rc < 0) {
		/* A credential the user must fix (a token file others can read, a missing one):
		 * a usage error, exit 2, as in crun-rdzvd, crun-store and crun status. */
		a->exit_code = 2;
		return rc;
	}
	tmp = getenv("TMPDIR");
	if (tmp == NULL || tmp[0] == '\0') {
		tmp = "/tmp";
	}
	snprintf(a->tmpbase, sizeof(a->tmpbase), "%s/crun-XXXXXX", tmp);
	if (mkdtemp(a->tmpbase) == NULL) {
		rc = -errno;
		a->tmpbase[0] = '\0';
		return diag_set(d, rc, "agent: temp dir in %s: %s", tmp, strerror(-rc));
	}
	/* The run's folder is agreed in the first round (agent_log_folder()); this is checked now. */
	if (spec->log_dir != NULL) {
		rc = logroute_check_dir(spec->log_dir);
		if (rc < 0) {
			return diag_set(d, rc, "--log-dir: %s: %s", spec->log_dir, strerror(-rc));
		}
	}
	rc = agent_worker_token_write(a, d);
	if (rc < 0) {
		return rc;
	}
	rc = uv_loop_init(&a->loop);
	if (rc < 0) {
		return diag_set(d, rc, "agent: event loop: %s", uv_strerror(rc));
	}
	a->loop_ok = true;
	return 0;
}

static int agent_rendezvous_setup(struct agent *a, struct crun_diag *d)
{
	const struct job_spec *spec = a->spec;
	struct store_conf_variant v = {0};
	struct store_conf sc;
	struct rdzv_conf conf = spec->rdzv;
	int rc;

	a->store_served = -1;
	rc = agent_setup_store(a, d);
	if (rc < 0) {
		return rc;
	}
	if (spec->metrics_listen != NULL && a->srv == NULL) {
		log_info("--metrics %s: this node does not host the job's store; the node that "
			 "does serves the metrics", spec->metrics_listen);
	}
	if (a->plan.advertise == RDZV_ADV_GIVEN) {
		snprintf(a->advertise, sizeof(a->advertise), "%s", spec->advertise_addr);
	} else if (a->plan.advertise == RDZV_ADV_FALLBACK ||
		   net_route_source(spec->rdzv_host, a->advertise, sizeof(a->advertise)) < 0) {
		snprintf(a->advertise, sizeof(a->advertise), "%s",
			 spec->max_nodes <= 1 ? "127.0.0.1" : a->hostname);
	}
	conf.run_id = spec->rdzv_id;
	conf.min_nodes = spec->min_nodes;
	conf.max_nodes = spec->max_nodes;
	conf.node_rank = spec->rdzv_kind == RDZV_KIND_STATIC ? spec->node_rank : -1;
	conf.local_world_size = spec->nproc_per_node;
	conf.advertise_addr = a->advertise;
	conf.hostname = a->hostname;
	conf.max_restarts = spec->max_restarts;
	conf.master_fn = agent_decide_master;
	conf.master_arg = a;
	if (store_conf_set_endpoint(&a->sc, a->endpoint) < 0) {
		return diag_set(d, -ENOMEM, "agent: out of memory");
	}
	/* The agent needs only its run's keys: confine its connections to them. */
	v.scope = a->sc.token != NULL && token_scope_valid(spec->rdzv_id) ? spec->rdzv_id : NULL;
	v.timeout_ms = (int)(conf.read_timeout_ms > 0 ? conf.read_timeout_ms : 60000);
	v.connect_timeout_ms = (int)(conf.join_timeout_ms > 0 && conf.join_timeout_ms < 600000
					     ? conf.join_timeout_ms
					     : 600000);
	if (store_conf_derive(&sc, &a->sc, &v) < 0) {
		return diag_set(d, -ENOMEM, "agent: out of memory");
	}
	rc = rdzv_create(&sc, &conf, &a->r, d);
	/* The status publisher borrows the same value: TLS files, credential and scope. */
	if (rc == 0 && notify_status_create(&sc, spec->rdzv_id, a->hostname, spec->max_restarts,
					    &a->ns) < 0) {
		log_warn("status: cannot publish this node's state: out of memory");
	}
	store_conf_finish(&sc);
	return rc;
}

static void agent_finish(struct agent *a, bool keep_tmp)
{
	if (a->worker_token[0] != '\0') {
		unlink(a->worker_token); /* the temp dir may be kept for its error files */
	}
	rdzv_destroy(a->r);
	a->r = NULL;
	store_server_thread_stop(a->srv);
	a->srv = NULL;
	if (a->loop_ok && uv_loop_close(&a->loop) != 0) {
		log_warn("agent: event loop closed with handles still open");
	}
	/* With --log-dir the error files were moved there: nothing temporary is worth keeping. */
	if (!keep_tmp || a->logrun[0] != '\0' || fs_count_files(a->tmpbase) == 0) {
		fs_rm_rf(a->tmpbase);
	} else if (a->tmpbase[0] != '\0') {
		log_info("error files of the failed attempt are kept in %s", a->tmpbase);
	}
	pthread_mutex_destroy(&a->at.ev_lock);
	store_conf_finish(&a->sc);
}

/* ---- the job: a loop over the states it publishes (docs/agent.md, "The loop") ---- */

/* The journal fields of this node's lines from now on: its node rank and round (docs/operations.md). */
static void journal_round(const struct rdzv_assignment *as)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", as->group_rank);
	journal_set_field("NODE_RANK", v);
	snprintf(v, sizeof(v), "%d", as->round);
	journal_set_field("ROUND", v);
}

/* Joining: the next round; its workers start. */
static enum node_state on_joining(struct agent *a)
{
	const struct job_spec *spec = a->spec;
	struct rdzv_assignment *as = &a->at.as;
	struct crun_diag d = {0};
	int rc;

	memset(as, 0, sizeof(*as));
	rc = rdzv_next_round(a->r, as, &d);
	if (rc < 0) {
		a->exit_code = 1;
		if (rc == CRUN_ERESTARTS) {
			a->job_over = a->members > 0;
			a->exit_code = report_peer_failure(a, d.msg);
			log_error("job failed, restart budget (%d) spent: %s", spec->max_restarts,
				  a->at.stop_detail[0] != '\0' ? a->at.stop_detail : d.msg);
		} else {
			/* The message names the rendezvous itself when it comes from there. */
			log_error("%s%s", strncmp(d.msg, "rendezvous", 10) == 0 ? "" : "rendezvous: ",
				  d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
		}
		return NODE_FAILED;
	}
	a->members = as->group_world_size;
	journal_round(as);
	if (spec->log_dir != NULL && a->logrun[0] == '\0' && agent_log_folder(a, &d) < 0) {
		log_error("%s", d.msg);
		a->exit_code = 1;
		return NODE_FAILED;
	}
	agent_workers_master(a, as);
	log_debug("round %d: node rank %d of %d, ranks %d..%d of %d, restart %d, master %s:%d",
		  as->round, as->group_rank, as->group_world_size, as->rank_offset,
		  as->rank_offset + spec->nproc_per_node - 1, as->world_size, as->restart_count,
		  a->workers.addr, a->workers.port);
	/* Before any worker of the round can connect: its TCPStore clients' own key space. */
	if (a->workers.how == RDZV_BOOT_AGENT_STORE &&
	    agent_store_generation(&a->sc, spec->rdzv_id, as->round, 0, &d) < 0) {
		log_error("round %d: the workers' key space: %s", as->round, d.msg);
		a->exit_code = 1;
		return NODE_FAILED;
	}
	a->at.summary[0] = '\0';
	a->at.started = crun_now_ms();
	if (attempt_start(a) < 0) {
		attempt_end(a);
		a->exit_code = 1;
		a->keep_tmp = true;
		return NODE_FAILED;
	}
	return NODE_RUNNING;
}

/* This node's workers failed: publish it (unless on_first_failure did); restart or end. */
static enum node_state after_failure(struct agent *a)
{
	struct crun_diag d = {0};
	bool restart = false;
	int rc;

	if (a->rep.reported) {
		/* Published when the first worker failed (on_first_failure). */
		rc = a->rep.rc;
		restart = a->rep.restart;
		d = a->rep.diag;
	} else {
		rc = rdzv_report_failure(a->r, a->at.summary, &restart, &d);
	}
	if (rc < 0) {
		log_error("rendezvous: reporting the failure: %s",
			  d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
		a->keep_tmp = true;
		return NODE_FAILED;
	}
	if (!restart) {
		/* The report above named the failure: not again (issue 9). */
		log_error("job failed, restart budget (%d) spent (failure reported above)",
			  a->spec->max_restarts);
		a->job_over = true;
		a->keep_tmp = true;
		return NODE_FAILED;
	}
	log_warn("restarting the workers (failure reported above)");
	fs_rm_rf(a->at.errdir);
	return NODE_RESTARTING;
}

/* Running: until every worker has exited; then by how the attempt ended. */
static enum node_state on_running(struct agent *a)
{
	a->at.outcome = attempt_run(a);
	attempt_end(a);
	switch (a->at.outcome) {
	case OUT_SUCCESS:
		fs_rm_rf(a->at.errdir);
		return NODE_WAITING;
	case OUT_FAILED:
		return after_failure(a);
	case OUT_EVENT:
		fs_rm_rf(a->at.errdir);
		if (a->at.stop_ev == RDZV_EV_STORE_LOST) {
			log_error("rendezvous: the store stopped answering: %s", a->at.stop_detail);
			a->exit_code = 1;
			return NODE_FAILED;
		}
		return NODE_RESTARTING;
	case OUT_SIGNAL:
	default:
		fs_rm_rf(a->at.errdir);
		return NODE_STOPPING;
	}
}

/* Restarting: after a failure (this node's, or a peer's), wait as --restart-backoff says. */
static enum node_state on_restarting(struct agent *a)
{
	int sig;

	if (a->at.outcome == OUT_FAILED || a->at.stop_ev == RDZV_EV_PEER_FAILED) {
		sig = restart_wait(a);
		if (sig > 0) {
			a->exit_code = 128 + sig;
			return NODE_STOPPING;
		}
	}
	return NODE_JOINING;
}

/* Waiting: this node's workers succeeded; until every node has finished or one failed. */
static enum node_state on_waiting(struct agent *a)
{
	struct crun_diag d = {0};
	int rc;

	rc = rdzv_finish(a->r, AGENT_FINISH_TIMEOUT_MS, &d);
	if (rc == CRUN_EPEERFAIL) {
		/*
		 * Another node failed after ours finished: the job runs again, after the same
		 * restart backoff the failed node waits, so that both rejoin about together. Joining
		 * at once let an elastic job's next round close without the failed node (min
		 * reached by this one alone): the job ended before it came back.
		 */
		log_warn("%s; joining the next round", d.msg);
		snprintf(a->at.stop_detail, sizeof(a->at.stop_detail), "%s", d.msg);
		a->at.stop_wall_ms = crun_wall_ms();
		a->at.stop_ev = RDZV_EV_PEER_FAILED;
		return NODE_RESTARTING;
	}
	if (rc < 0 && rdzv_store_gone(rc)) {
		/*
		 * The store is gone: nobody can tell this node how the others end, and waiting
		 * does not bring it back. This node's workers succeeded: exit with their result.
		 */
		log_error("rendezvous: the store is gone after this node's workers finished: %s; "
			  "exiting with the workers' result (0)",
			  d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
		a->exit_code = 0;
		return NODE_FINISHED;
	}
	if (rc < 0) {
		log_error("job did not finish on every node: %s",
			  d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
		a->exit_code = 1;
		return NODE_FAILED;
	}
	a->exit_code = 0;
	a->job_over = true;
	return NODE_FINISHED;
}

typedef enum node_state (*state_fn)(struct agent *a);

/* One handler per state that is not final; each returns the next state. */
static const state_fn state_handlers[NODE_STATE_COUNT] = {
	[NODE_JOINING] = on_joining,
	[NODE_RUNNING] = on_running,
	[NODE_RESTARTING] = on_restarting,
	[NODE_WAITING] = on_waiting,
};

/*
 * The run record this node leaves (agent/run_record.h): in the state dir, and in the run's log
 * folder with --log-dir. A record that cannot be written is a warning: the job's result stands.
 */
static void write_run_record(struct agent *a, enum node_state st)
{
	struct run_record r = {0};
	struct crun_diag d = {0};
	char dir[PATH_MAX];

	if (a->ns == NULL || notify_status_snapshot(a->ns, &r.last, &r.ev, &r.n, &r.dropped) < 0) {
		return;
	}
	snprintf(r.run_id, sizeof(r.run_id), "%s", a->spec->rdzv_id);
	r.nproc = a->spec->nproc_per_node;
	r.rank_offset = r.last.round >= 0 ? a->at.as.rank_offset : -1;
	r.start_ms = a->start_wall_ms;
	r.end_ms = crun_wall_ms();
	r.end = st == NODE_FINISHED ? RUN_END_FINISHED
		: st == NODE_STOPPING ? RUN_END_CANCELLED
				      : RUN_END_FAILED;
	r.exit_code = a->exit_code;
	if (run_record_dir(dir, sizeof(dir), true, &d) < 0 ||
	    run_record_write(&r, dir, false, &d) < 0) {
		log_warn("%s", d.msg);
	}
	if (a->logrun[0] != '\0' && run_record_write(&r, a->logrun, true, &d) < 0) {
		log_warn("%s", d.msg);
	}
	free(r.ev);
}

/* The job's end, whatever state it ended in: the last record, the store, the temp dir. */
static void agent_end(struct agent *a, enum node_state st)
{
	const struct job_spec *spec = a->spec;
	bool etcd_done;
	int rc;

	if (a->log_err[0] != '\0' && a->exit_code == 0) {
		/* The workers succeeded, but their output is not all where it was asked to go. */
		log_error("the job finished, but its logs are incomplete: %s", a->log_err);
		a->exit_code = 1;
	}
	/* The exit status says how the job ended; a stop stays a stop. */
	if (a->exit_code == 0) {
		st = NODE_FINISHED;
	} else if (st != NODE_STOPPING && a->state != NODE_STOPPING) {
		st = NODE_FAILED;
	} else {
		st = NODE_STOPPING;
	}
	enter_state(a, st);
	write_run_record(a, st);
	/* The last record goes out now: before the store stops or etcd forgets the job. */
	notify_status_destroy(a->ns);
	a->ns = NULL;
	etcd_done = a->job_over && spec->rdzv_kind == RDZV_KIND_ETCD;
	if (a->r != NULL && (a->srv != NULL || etcd_done)) {
		/*
		 * Keep serving until every node has read how the job ended; on etcd, keep the job's
		 * keys until then, and then delete them.
		 */
		rc = rdzv_wait_left(a->r, AGENT_LEFT_TIMEOUT_MS);
		if (rc < 0 && rc != -EINVAL) {
			log_warn("store: not every node saw the end of the job: %s",
				 crun_strerror(rc));
		}
		if (a->srv == NULL && rc != -EINVAL) {
			agent_store_forget(&a->sc, a->members, rc, AGENT_FORGET_TIMEOUT_MS);
		}
	}
	if (a->job_over && a->srv == NULL && a->workers.how == RDZV_BOOT_AGENT_STORE) {
		/* A store that outlives this agent (crun-rdzvd) closes the job's TCPStore clients. */
		struct crun_diag d = {0};

		if (agent_store_generation(&a->sc, spec->rdzv_id, -1,
					   (int)AGENT_FORGET_TIMEOUT_MS, &d) < 0) {
			log_warn("the workers' key space was not closed: %s", d.msg);
		}
	}
	notify_finish();
	agent_finish(a, a->keep_tmp);
	spawn_guard_stop();
}

int agent_run(const struct job_spec *spec)
{
	struct agent *a;
	struct crun_diag d = {0};
	enum node_state st = NODE_FAILED;
	int rc, exit_code;

	a = calloc(1, sizeof(*a));
	if (a == NULL) {
		fprintf(stderr, "crun: out of memory\n");
		return 1;
	}
	a->state = NODE_STATE_COUNT;
	a->exit_code = 1;
	a->start_wall_ms = crun_wall_ms();
	/* A closed console must not kill the agent; workers get default dispositions back. */
	signal(SIGPIPE, SIG_IGN);
	/* Orphaned grandchildren come to us, and the guard kills the groups if we die. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
		log_warn("prctl(PR_SET_CHILD_SUBREAPER): %s", strerror(errno));
	}
	/* Before any thread: it takes systemd's variables out of the workers' environment. */
	notify_init();
	/* Before the store's host raises it: the workers keep the limit crun was given. */
	if (spawn_keep_nofile() < 0) {
		log_warn("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
	}
	rc = agent_init(a, spec, &d);
	if (rc == 0) {
		/* Before any thread exists: the guard is a fork of this process. */
		rc = spawn_guard_start(a->tmpbase);
		if (rc < 0) {
			diag_set(&d, rc, "agent: starting the process-group guard: %s", strerror(-rc));
		}
	}
	if (rc == 0) {
		rc = agent_rendezvous_setup(a, &d);
	}
	if (rc < 0) {
		log_error("%s", d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
	} else {
		notify_watchdog_start();
		backoff_init(&a->bo, spec->restart_backoff_ms, spec->restart_backoff_max_ms);
		/* The job: FINISHED, FAILED and STOPPING are final. */
		for (st = NODE_JOINING; state_handlers[st] != NULL;) {
			enter_state(a, st);
			st = state_handlers[st](a);
		}
	}
	agent_end(a, st);
	exit_code = a->exit_code;
	free(a);
	/* --exit-code torchrun: torchrun ends with 1 for any failure, whatever the worker's. */
	if (spec->exit_code_torchrun && exit_code != 0) {
		exit_code = 1;
	}
	return exit_code;
}
