/* SPDX-License-Identifier: MIT */
/* agent/group.c: spawn the workers, watch them event-driven, stop them (output: group_output.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>

#include "agent/group.h"
#include "agent/group_internal.h"
#include "agent/logroute.h"
#include "agent/numa.h"
#include "agent/spawn.h"
#include "agent/watchdog.h"
#include "src/common/io.h"
#include "src/common/log.h"
#include "src/common/clock.h"


static void on_closed(uv_handle_t *h);

static void kill_groups(struct group *g, int sig)
{
	int i;

	for (i = 0; i < g->n; i++) {
		struct worker *w = &g->w[i];

		if (w->pid <= 0) {
			continue;
		}
		/*
		 * A worker spawned a moment ago may not have called setsid() yet, so its group
		 * does not exist: signal the process itself. Its signals are blocked until it has
		 * reset their dispositions, so the signal waits and then acts as the default does.
		 * Not yet reaped, so the pid cannot have been reused.
		 */
		if (kill(-w->pid, sig) != 0 && errno == ESRCH && !w->exited) {
			kill(w->pid, sig);
		}
	}
}

/*
 * Every pipe is drained: a failure without an error file (or without a traceback in it) gets
 * the last lines of its stderr, and the last of them as its message when it has none.
 */
static void fill_failures(struct group *g)
{
	char last[ERRFILE_MAX_MESSAGE];
	int i, n;

	for (i = 0; i < g->nfail; i++) {
		struct worker *w = g->fail[i];

		if (w->detail[0] != '\0') {
			continue;
		}
		n = errfile_tail_lines(&w->tail, ERRFILE_DETAIL_LINES, w->detail,
				       sizeof(w->detail));
		if (n == 0) {
			continue;
		}
		w->detail_what = "stderr";
		if (w->message[0] == '\0' &&
		    errfile_tail_lines(&w->tail, 1, last, sizeof(last)) == 1) {
			memcpy(w->message, last, sizeof(w->message));
		}
	}
}

static void maybe_finish(struct group *g)
{
	if (g->finishing || g->running > 0 || g->pipes > 0) {
		return;
	}
	g->finishing = true;
	fill_failures(g);
	uv_close((uv_handle_t *)&g->grace, on_closed);
	uv_close((uv_handle_t *)&g->drain, on_closed);
	uv_close((uv_handle_t *)&g->watch, on_closed);
	uv_close((uv_handle_t *)&g->partial, on_closed);
	uv_close((uv_handle_t *)&g->window, on_closed);
	uv_close((uv_handle_t *)&g->winch, on_closed);
}

/*
 * Close callback of every handle: timers and the signal watcher carry the group, pipes, ptys
 * and exit watchers the worker.
 */
static void on_closed(uv_handle_t *h)
{
	struct group *g;

	if (h->type == UV_TIMER || h->type == UV_SIGNAL) {
		g = h->data;
	} else {
		struct worker *w = h->data;

		g = w->g;
		if (h == (uv_handle_t *)&w->exitw && w->pidfd >= 0) {
			close(w->pidfd);
			w->pidfd = -1;
		}
		if (h->type == UV_POLL && h != (uv_handle_t *)&w->exitw) {
			int k = h == (uv_handle_t *)&w->pty[0] ? 0 : 1;

			close(w->pty_fd[k]);
			w->pty_fd[k] = -1;
		}
	}
	if (h->type == UV_NAMED_PIPE) {
		g->pipes--;
		maybe_finish(g);
	}
	if (--g->handles == 0 && g->finishing) {
		g->done(g, g->arg);
	}
}

/* Close stream @which of @w (its pipe, and its pty poll when it has one), once. */
void group_close_stream(struct worker *w, int which)
{
	uv_pipe_t *p = which == 0 ? &w->out : &w->err;

	if (!w->pipes_open[which]) {
		return;
	}
	w->pipes_open[which] = false;
	logroute_flush(which == 0 ? &w->lout : &w->lerr);
	if (w->pty_polling[which]) {
		w->pty_polling[which] = false;
		uv_close((uv_handle_t *)&w->pty[which], on_closed);
	}
	uv_close((uv_handle_t *)p, on_closed);
}

static void on_drain(uv_timer_t *t)
{
	struct group *g = t->data;
	int i;

	log_warn("workers: output pipes still open %d ms after the last worker exited; closing them",
		 GROUP_DRAIN_MS);
	for (i = 0; i < g->n; i++) {
		group_close_stream(&g->w[i], 0);
		group_close_stream(&g->w[i], 1);
	}
}

static void on_grace(uv_timer_t *t)
{
	struct group *g = t->data;

	log_warn("workers: still running %lld ms after SIGTERM; sending SIGKILL",
		 (long long)g->spec->shutdown_timeout_ms);
	kill_groups(g, SIGKILL);
}

/* Every worker has exited: kill what is left of their process groups, then drain the pipes. */
static void all_exited(struct group *g)
{
	int i;

	log_debug("workers: all %d exited", g->n);
	uv_timer_stop(&g->grace);
	kill_groups(g, SIGKILL);
	for (i = 0; i < g->n; i++) {
		if (g->w[i].pid > 0) {
			spawn_guard_remove(g->w[i].pid);
		}
	}
	if (g->pipes > 0) {
		uv_timer_start(&g->drain, on_drain, GROUP_DRAIN_MS, 0);
	}
	maybe_finish(g);
}

static void stop(struct group *g, int sig)
{
	if (g->stopping) {
		if (sig == SIGKILL) {
			kill_groups(g, SIGKILL);
		}
		return;
	}
	g->stopping = true;
	g->stop_signal = sig;
	uv_timer_stop(&g->watch);
	kill_groups(g, sig);
	if (sig != SIGKILL) {
		/* A stopped worker (SIGSTOP, a debugger's ^Z: often the one the watchdog found
		 * hung) cannot act on the signal until continued; SIGKILL would come only after
		 * the whole --shutdown-timeout. */
		kill_groups(g, SIGCONT);
	}
	if (g->running > 0 && sig != SIGKILL) {
		uv_update_time(g->loop); /* called from outside the loop too: the whole grace */
		uv_timer_start(&g->grace, on_grace, (uint64_t)g->spec->shutdown_timeout_ms, 0);
	}
}

/*
 * The hang watchdog: once a running worker has not touched its heartbeat file for
 * --worker-timeout, the group fails as if it had exited: ranks blocked in a collective behind a
 * hung rank fall silent at the same step, so every rank silent since the oldest step is named
 * (watchdog_hung), each a failure (the first, lowest step and longest silence, the root cause),
 * and the group stops and restarts as for any failure.
 */
static void on_watch(uv_timer_t *t)
{
	struct group *g = t->data;
	int64_t now = crun_now_ms(), tmo = g->spec->worker_timeout_ms;
	struct watchdog_beat **beats;
	char names[ERRFILE_MAX_MESSAGE] = "";
	int i, k, *order;

	if (g->stopping || g->failed) {
		return;
	}
	beats = calloc((size_t)g->n, sizeof(*beats));
	order = calloc((size_t)g->n, sizeof(*order));
	if (beats == NULL || order == NULL) {
		free(beats);
		free(order);
		return; /* the next tick tries again */
	}
	for (i = 0; i < g->n; i++) {
		if (g->w[i].started && !g->w[i].exited) {
			beats[i] = &g->w[i].beat;
			(void)watchdog_beat_silence(beats[i], now);
		}
	}
	k = watchdog_hung(beats, g->n, now, tmo, order);
	for (i = 0; i < k; i++) {
		struct worker *w = &g->w[order[i]];
		int64_t silent = now - w->beat.last_ms;
		char step[40] = "";

		size_t used = strlen(names);

		log_error("worker rank %d (pid %d): no heartbeat for %.1f s (--worker-timeout "
			  "%.1f s)", w->rank, w->pid, (double)silent / 1000.0, (double)tmo / 1000.0);
		if (w->beat.step != 0) {
			snprintf(step, sizeof(step), ", last step %llu",
				 (unsigned long long)w->beat.step);
		}
		/* the summary: "1 (no heartbeat for 3.2 s, last step 17), 0 (...)" */
		if (used < sizeof(names)) {
			snprintf(names + used, sizeof(names) - used, "%s%d (no heartbeat for %.1f s%s)",
				 used > 0 ? ", " : "", w->rank, (double)silent / 1000.0, step);
		}
		snprintf(w->message, sizeof(w->message),
			 "hung: no heartbeat for %.1f s%s (--worker-timeout %.1f s)",
			 (double)silent / 1000.0, step, (double)tmo / 1000.0);
		w->failed = true;
		w->term_signal = SIGTERM; /* what it gets now; its real end replaces this */
		w->exit_wall_ms = crun_wall_ms();
		g->fail[g->nfail++] = w;
	}
	free(beats);
	free(order);
	if (k == 0) {
		return;
	}
	log_error("worker%s silent since the oldest step: rank%s %s: treating %s as hung, "
		  "stopping the workers", k > 1 ? "s" : "", k > 1 ? "s" : "", names,
		  k > 1 ? "them" : "it");
	g->failed = true;
	stop(g, SIGTERM);
	if (g->first_failure != NULL) {
		g->first_failure(g, g->arg);
	}
}

void group_stop(struct group *g, int sig)
{
	if (g->running == 0) {
		return; /* every worker already exited: nothing to stop, the result stands */
	}
	if (!g->stopping && !g->failed) {
		g->stopped_outside = true;
	}
	stop(g, sig);
}

/*
 * While the group stops for a failure, another worker that ends with an exit code of its own
 * (not killed by the stop signal, nor exiting 128 + it) failed too: ranks failing the same way
 * at once, or a peer's collective breaking. They are listed after the first (the root cause),
 * as torchrun lists every failure it sees. A stop from outside lists none.
 */
static bool failed_too(const struct group *g, int exit_status, int term_signal)
{
	if (!g->failed) {
		return false;
	}
	if (term_signal != 0) {
		/* SIGSEGV, SIGABRT while stopping: its own death, not the stop's */
		return term_signal != g->stop_signal && term_signal != SIGKILL;
	}
	return exit_status != 0 && exit_status != 128 + g->stop_signal;
}

/* The failure window is over (or every worker has ended): stop the others, publish. */
static void end_window(struct group *g)
{
	if (!g->in_window) {
		return;
	}
	g->in_window = false;
	uv_timer_stop(&g->window);
	stop(g, SIGTERM);
	if (g->first_failure != NULL) {
		g->first_failure(g, g->arg);
	}
}

static void on_window(uv_timer_t *t)
{
	end_window(t->data);
}

/* The error file's message and the last lines of its traceback, when it left one. */
static void read_errfile(struct worker *w)
{
	char *stack = malloc(GROUP_STACK_MAX);
	int rc;

	rc = errfile_read(w->errfile, w->message, sizeof(w->message), stack,
			  stack != NULL ? GROUP_STACK_MAX : 0);
	if (rc < 0 && rc != -ENOENT) {
		log_warn("worker rank %d: error file %s: %s", w->rank, w->errfile,
			 crun_strerror(rc));
	}
	if (rc == 0 && stack != NULL &&
	    errfile_last_lines(stack, strlen(stack), ERRFILE_DETAIL_LINES, w->detail,
			       sizeof(w->detail)) > 0) {
		w->detail_what = "traceback";
	}
	free(stack);
}

static void on_exit_cb(uv_poll_t *h, int status, int events)
{
	struct worker *w = h->data;
	struct group *g = w->g;
	int exit_status = 0, term_signal = 0, rc;
	bool exited = false;

	(void)events;
	rc = status < 0 ? status : spawn_reap(w->pidfd, &exited, &exit_status, &term_signal);
	if (rc < 0) {
		/* Cannot happen short of a bug elsewhere (someone else reaped it): count it failed. */
		log_warn("worker rank %d (pid %d): waiting for it: %s", w->rank, w->pid,
			 crun_strerror(rc));
		exited = true;
		exit_status = 1;
	}
	if (!exited) {
		return;
	}
	uv_poll_stop(h);
	w->exited = true;
	w->exit_status = exit_status;
	w->term_signal = term_signal;
	w->exit_wall_ms = crun_wall_ms();
	g->running--;
	if ((exit_status != 0 || term_signal != 0) && !w->failed &&
	    (!g->stopping || failed_too(g, exit_status, term_signal))) {
		read_errfile(w);
		w->failed = true;
		g->fail[g->nfail++] = w;
		if (!g->stopping && !g->failed) {
			/* The first failure: the others end on their own for a moment, then stop. */
			g->failed = true;
			g->in_window = true;
			uv_timer_stop(&g->watch);
			uv_timer_start(&g->window, on_window, (uint64_t)g->spec->failure_window_ms, 0);
		}
	}
	uv_close((uv_handle_t *)h, on_closed);
	if (g->running == 0) {
		end_window(g);
		all_exited(g);
	}
}

/*
 * The worker's stdin: the agent's own for the rank --stdin names (rank 0 by default, so after
 * a restart the new rank 0 has it again), /dev/null for the others and when the agent has none.
 */
static int stdin_for(const struct group *g, const struct worker *w)
{
	int want = g->spec->stdin_rank;

	if (want != JOBSPEC_STDIN_ALL && want != w->rank) {
		return g->devnull;
	}
	return fcntl(STDIN_FILENO, F_GETFD) >= 0 ? STDIN_FILENO : g->devnull;
}

/*
 * --numa-binding: the CPUs of the NUMA node of @w's GPU into @cpus (true), or false with the
 * reason logged. Workers inherit the affinity of the thread that clones them.
 */
static bool numa_cpus(const struct group *g, const struct worker *w, const struct group_opts *o,
		      cpu_set_t *cpus)
{
	const char *visible = NULL;
	char why[160];
	int node, i;

	for (i = 0; o->base_env != NULL && o->base_env[i] != NULL; i++) {
		if (strncmp(o->base_env[i], "CUDA_VISIBLE_DEVICES=", 21) == 0) {
			visible = o->base_env[i] + 21;
		}
	}
	node = numa_worker_cpus("", g->spec->numa_binding, visible, w->local_rank, cpus, why,
				sizeof(why));
	if (node < 0 && numa_node_count("") <= 1) {
		/* every CPU is as near as any other: said once, not per worker */
		if (w->local_rank == 0) {
			log_info("--numa-binding %s: %s, so there is nothing to bind; workers keep "
				 "crun's CPU affinity", g->spec->numa_binding, why);
		}
		return false;
	}
	if (node < 0) {
		log_warn("worker rank %d: --numa-binding %s: not bound: %s", w->rank,
			 g->spec->numa_binding, why);
		return false;
	}
	log_info("worker rank %d: --numa-binding %s: bound to the %d CPUs of NUMA node %d%s",
		 w->rank, g->spec->numa_binding, CPU_COUNT(cpus), node,
		 strcmp(g->spec->numa_binding, "socket") == 0 ? " and its package" : "");
	return true;
}

/* spawn_process() with the worker's CPU affinity when --numa-binding gives it one. */
static int spawn_bound(const struct group *g, const struct worker *w,
		       const struct group_opts *o, const struct spawn_proc *sp, pid_t *pid,
		       int *pidfd)
{
	cpu_set_t cpus, saved;
	bool bound = false;
	int rc;

	if (g->spec->numa_binding != NULL && numa_cpus(g, w, o, &cpus) &&
	    sched_getaffinity(0, sizeof(saved), &saved) == 0) {
		bound = sched_setaffinity(0, sizeof(cpus), &cpus) == 0;
		if (!bound) {
			log_warn("worker rank %d: --numa-binding: sched_setaffinity: %s", w->rank,
				 strerror(errno));
		}
	}
	rc = spawn_process(sp, pid, pidfd);
	if (bound) {
		(void)sched_setaffinity(0, sizeof(saved), &saved);
	}
	return rc;
}

static int spawn_one(struct group *g, struct worker *w, const struct group_opts *o,
		     struct crun_diag *d)
{
	const struct job_spec *spec = g->spec;
	struct spawn_worker_info wi = {
		.spec = spec,
		.local_rank = w->local_rank,
		.rank = w->rank,
		.world_size = o->world_size,
		.group_rank = o->group_rank,
		.group_world_size = o->group_world_size,
		.restart_count = o->restart_count,
		.run_id = o->run_id,
		.master_addr = o->master_addr,
		.master_port = o->master_port,
		.agent_store = o->agent_store,
		.store = o->store,
		.store_prefix = o->store_prefix,
		.store_token_file = o->store_token_file,
		.error_file = w->errfile,
		.heartbeat_file = spec->worker_timeout_ms > 0 ? w->beat.path : NULL,
	};
	struct spawn_env env;
	char **argv = NULL;
	int rc, po[2], pe[2], pidfd = -1;
	pid_t pid = 0;

	rc = group_output_routes(g, w, o, d);
	if (rc < 0) {
		return rc;
	}
	if (spec->worker_timeout_ms > 0) {
		rc = watchdog_beat_init(&w->beat, o->errdir, w->rank, crun_now_ms());
		if (rc < 0) {
			return diag_set(d, rc, "worker rank %d: heartbeat file in %s: %s", w->rank,
					o->errdir, strerror(-rc));
		}
	}
	rc = spawn_worker_env(&wi, o->base_env, &env);
	if (rc < 0) {
		return diag_set(d, rc, "worker rank %d: environment: %s", w->rank, crun_strerror(rc));
	}
	/*
	 * A worker without stdin would die in pdb at its first prompt (end of file is BdbQuit):
	 * its breakpoint() calls are skipped instead, unless the user set PYTHONBREAKPOINT.
	 */
	if (stdin_for(g, w) != STDIN_FILENO && spawn_env_get(&env, "PYTHONBREAKPOINT") == NULL) {
		rc = spawn_env_set(&env, "PYTHONBREAKPOINT", "0");
	}
	if (rc == 0) {
		rc = spawn_worker_argv(spec, w->local_rank, &argv);
	}
	if (rc < 0) {
		spawn_env_finish(&env);
		return diag_set(d, rc, "worker rank %d: argv: %s", w->rank, crun_strerror(rc));
	}
	uv_pipe_init(g->loop, &w->out, 0);
	uv_pipe_init(g->loop, &w->err, 0);
	w->out.data = w;
	w->err.data = w;
	g->handles += 2;
	g->pipes += 2;
	w->pipes_open[0] = w->pipes_open[1] = true;

	rc = group_output_stream(g, w, 0, po);
	if (rc == 0) {
		rc = group_output_stream(g, w, 1, pe);
		if (rc < 0) {
			close(po[0]);
			close(po[1]);
		}
	}
	if (rc == 0) {
		struct spawn_proc sp = {
			.argv = argv,
			.envp = env.v,
			.stdin_fd = stdin_for(g, w),
			.stdout_fd = po[1],
			.stderr_fd = pe[1],
		};

		rc = spawn_bound(g, w, o, &sp, &pid, &pidfd);
		close(po[1]);
		close(pe[1]);
		if (rc < 0) {
			close(po[0]);
			close(pe[0]);
		}
	}
	spawn_argv_free(argv);
	spawn_env_finish(&env);
	if (rc < 0) {
		group_close_stream(w, 0);
		group_close_stream(w, 1);
		return diag_set(d, rc, "worker rank %d: spawn %s: %s", w->rank, spec->program,
				strerror(-rc));
	}
	rc = uv_poll_init(g->loop, &w->exitw, pidfd);
	if (rc < 0) {
		/* A worker nobody could see exit must not run at all. */
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
		}
		close(pidfd);
		close(po[0]);
		close(pe[0]);
		group_close_stream(w, 0);
		group_close_stream(w, 1);
		return diag_set(d, rc, "worker rank %d: watching pid %d: %s", w->rank, (int)pid,
				uv_strerror(rc));
	}
	/* From here the worker runs: it is watched whatever else fails. */
	w->pid = pid;
	w->pidfd = pidfd;
	w->started = true;
	g->running++;
	spawn_guard_add(w->pid);
	w->exitw.data = w;
	g->handles++;
	uv_poll_start(&w->exitw, UV_READABLE, on_exit_cb);
	group_output_open(w, 0, po[0]);
	group_output_open(w, 1, pe[0]);
	return 0;
}

int group_start(uv_loop_t *loop, const struct group_opts *o, group_done_cb done, void *arg,
		struct group **out, struct crun_diag *d)
{
	const struct job_spec *spec = o->spec;
	struct group *g;
	int i;

	if (spec->nproc_per_node <= 0) {
		return diag_set(d, CRUN_ECONFIG, "workers: nproc_per_node must be positive");
	}
	g = calloc(1, sizeof(*g));
	if (g == NULL) {
		return diag_set(d, -ENOMEM, "workers: out of memory");
	}
	g->devnull = -1;
	g->dup_fd[0] = g->dup_fd[1] = -1;
	g->loop = loop;
	g->spec = spec;
	g->n = spec->nproc_per_node;
	g->done = done;
	g->first_failure = o->first_failure;
	g->arg = arg;
	g->hostname = strdup(o->hostname != NULL ? o->hostname : "localhost");
	g->w = calloc((size_t)g->n, sizeof(*g->w));
	g->fail = calloc((size_t)g->n, sizeof(*g->fail));
	if (g->w == NULL || g->fail == NULL || g->hostname == NULL) {
		group_destroy(g);
		return diag_set(d, -ENOMEM, "workers: out of memory");
	}
	i = open("/dev/null", O_RDONLY | O_CLOEXEC);
	g->devnull = i < 0 ? -errno : io_lift_fd(i);
	if (g->devnull < 0) {
		int rc = g->devnull;

		g->devnull = -1;
		group_destroy(g);
		return diag_set(d, rc, "workers: /dev/null: %s", strerror(-rc));
	}
	if ((i = group_output_filtered(g, o, d)) < 0) {
		group_destroy(g);
		return i;
	}
	uv_timer_init(loop, &g->grace);
	uv_timer_init(loop, &g->drain);
	uv_timer_init(loop, &g->watch);
	uv_timer_init(loop, &g->partial);
	uv_timer_init(loop, &g->window);
	uv_signal_init(loop, &g->winch);
	g->grace.data = g;
	g->drain.data = g;
	g->watch.data = g;
	g->partial.data = g;
	g->window.data = g;
	g->winch.data = g;
	g->handles = 6;
	for (i = 0; i < g->n; i++) {
		struct worker *w = &g->w[i];

		w->g = g;
		w->pidfd = -1;
		w->pty_fd[0] = w->pty_fd[1] = -1;
		w->local_rank = i;
		w->rank = o->rank_offset + i;
		w->lout.file_fd = w->lerr.file_fd = -1;
		snprintf(w->errfile, sizeof(w->errfile), "%s/error_%d.json", o->errdir, w->rank);
	}
	for (i = 0; i < g->n; i++) {
		struct crun_diag sd = {0};
		int rc = spawn_one(g, &g->w[i], o, &sd);

		if (rc < 0) {
			snprintf(g->spawn_err, sizeof(g->spawn_err), "%s", sd.msg);
			log_error("%s", sd.msg);
			g->failed = true;
			stop(g, SIGKILL);
			break;
		}
	}
	*out = g;
	for (i = 0; i < g->n && !g->stopping; i++) {
		if (g->w[i].pty_polling[0] || g->w[i].pty_polling[1]) {
			uv_signal_start(&g->winch, group_output_on_winch, SIGWINCH);
			break;
		}
	}
	if (spec->worker_timeout_ms > 0 && !g->stopping) {
		int64_t period = watchdog_period_ms(spec->worker_timeout_ms);

		uv_timer_start(&g->watch, on_watch, (uint64_t)period, (uint64_t)period);
	}
	if (g->running == 0) {
		all_exited(g);
	}
	return 0;
}

enum group_result group_result(const struct group *g)
{
	if (g->failed) {
		return GROUP_FAILED;
	}
	return g->stopped_outside ? GROUP_STOPPED : GROUP_SUCCEEDED;
}

int group_failures(const struct group *g, struct errfile_failure *out, int max)
{
	int i;

	for (i = 0; i < g->nfail && i < max; i++) {
		const struct worker *w = g->fail[i];

		out[i] = (struct errfile_failure){
			.wall_ms = w->exit_wall_ms,
			.host = g->hostname,
			.rank = w->rank,
			.local_rank = w->local_rank,
			.exit_code = (int)w->exit_status,
			.signal = w->term_signal,
			.pid = w->pid,
			.message = w->message,
			.detail = w->detail,
			.detail_what = w->detail_what,
		};
	}
	return i;
}

int group_exit_code(const struct group *g)
{
	const struct worker *w;

	if (!g->failed) {
		return g->stopped_outside ? 1 : 0;
	}
	if (g->nfail == 0) {
		return 1;
	}
	w = g->fail[0];
	if (w->term_signal > 0) {
		return 128 + w->term_signal;
	}
	return w->exit_status > 0 && w->exit_status < 256 ? (int)w->exit_status : 1;
}

int group_log_error(const struct group *g, char *buf, size_t len)
{
	int i, k;

	for (i = 0; g->w != NULL && i < g->n; i++) {
		for (k = 0; k < 2; k++) {
			const struct logroute_stream *s = k == 0 ? &g->w[i].lout : &g->w[i].lerr;

			if (s->file_err != 0) {
				snprintf(buf, len, "log file %s: %s (%zu bytes of output not written)",
					 s->file_path != NULL ? s->file_path : "(unnamed)",
					 strerror(s->file_err), s->file_lost);
				return -s->file_err;
			}
		}
	}
	return 0;
}

const char *group_spawn_error(const struct group *g)
{
	return g->spawn_err;
}

int group_size(const struct group *g)
{
	return g->n;
}

void group_destroy(struct group *g)
{
	int i;

	if (g == NULL) {
		return;
	}
	for (i = 0; g->w != NULL && i < g->n; i++) {
		logroute_finish(&g->w[i].lout);
		logroute_finish(&g->w[i].lerr);
	}
	if (g->devnull >= 0) {
		close(g->devnull);
	}
	for (i = 0; i < 2; i++) {
		if (g->dup_fd[i] >= 0) {
			close(g->dup_fd[i]);
		}
	}
	free(g->w);
	free(g->fail);
	free(g->hostname);
	free(g);
}
