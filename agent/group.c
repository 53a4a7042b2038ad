/* SPDX-License-Identifier: MIT */
/* agent/group.c: spawn the workers, watch them event-driven, stop them, route their output. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>

#include "agent/group.h"
#include "agent/logroute.h"
#include "agent/pty.h"
#include "agent/spawn.h"
#include "agent/watchdog.h"
#include "src/common/io.h"
#include "src/common/fs.h"
#include "src/common/log.h"
#include "src/common/clock.h"

#define GROUP_READ_BUF (64u * 1024u)
#define GROUP_STACK_MAX (64u * 1024u) /* a traceback read from an error file, its end kept */

struct worker {
	struct group *g;
	uv_poll_t exitw;    /* readable pidfd: the worker exited; exitw.data == this */
	int pidfd;          /* -1 when none */
	uv_pipe_t out, err;
	/*
	 * A stream on a pseudo-terminal (--tty) is read through pty[k] on the master pty_fd[k]
	 * (its pipe handle stays unopened): libuv's pipe reads take a short read plus a hang-up
	 * for the end, and a pty master hands out its buffer in pieces, so the tail was lost.
	 */
	uv_poll_t pty[2];
	int pty_fd[2];
	bool is_pty[2], pty_polling[2];
	struct logroute_stream lout, lerr;
	int local_rank, rank;
	int pid;            /* 0: never started */
	bool started, exited, pipes_open[2];
	int64_t exit_status;
	int term_signal;
	int64_t exit_wall_ms;
	bool failed;        /* counted as a failure (not a casualty of the stop) */
	char errfile[PATH_MAX];
	char message[ERRFILE_MAX_MESSAGE];
	char detail[ERRFILE_MAX_DETAIL];  /* the last lines of its traceback or stderr */
	const char *detail_what;
	struct errfile_tail tail;         /* the end of its stderr, for a failure report */
	struct watchdog_beat beat; /* --worker-timeout only */
};

struct group {
	uv_loop_t *loop;
	const struct job_spec *spec;
	char *hostname;
	struct worker *w;
	int n;
	int running;        /* started workers not yet exited */
	int pipes;          /* pipes not yet closed */
	int handles;        /* every handle not yet closed */
	uv_timer_t grace;   /* SIGTERM -> SIGKILL */
	uv_timer_t drain;   /* bound on pipes held open by stray descendants */
	uv_timer_t watch;   /* the hang watchdog (--worker-timeout), stopped when off */
	uv_timer_t partial; /* live partial lines: runs while one waits (LOGROUTE_PARTIAL_MS) */
	uv_signal_t winch;  /* crun's terminal was resized: so are the workers' ptys */
	bool stopping, failed, stopped_outside, finishing, reaped;
	int stop_signal;
	int nfail;
	int devnull;        /* the stdin of workers --stdin does not name */
	struct worker **fail; /* failures in the order seen */
	char spawn_err[CRUN_DIAG_MSG_MAX];
	group_done_cb done;
	void (*first_failure)(struct group *g, void *arg);
	void *arg;
	char rbuf[GROUP_READ_BUF];
};

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

static void close_pipe(struct worker *w, int which)
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
		close_pipe(&g->w[i], 0);
		close_pipe(&g->w[i], 1);
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
	if (g->running > 0 && sig != SIGKILL) {
		uv_timer_start(&g->grace, on_grace, (uint64_t)g->spec->shutdown_timeout_ms, 0);
	}
}

/*
 * The hang watchdog: a running worker that has not touched its heartbeat file for
 * --worker-timeout fails the group, as if it had exited: the failure names it (rank, pid, how
 * long it was silent) and the group stops and restarts as for any failure.
 */
static void on_watch(uv_timer_t *t)
{
	struct group *g = t->data;
	int64_t now = crun_now_ms(), silent = 0, s;
	struct worker *w = NULL;
	int i;

	if (g->stopping) {
		return;
	}
	/* Ranks blocked in a collective with a hung rank go silent too, but later: the one
	 * silent the longest is the root cause. */
	for (i = 0; i < g->n; i++) {
		if (!g->w[i].started || g->w[i].exited) {
			continue;
		}
		s = watchdog_beat_silence(&g->w[i].beat, now);
		if (s > silent) {
			silent = s;
			w = &g->w[i];
		}
	}
	if (w != NULL && silent >= g->spec->worker_timeout_ms) {
		log_error("worker rank %d (pid %d): no heartbeat for %.1f s (--worker-timeout "
			  "%.1f s): treating it as hung, stopping the workers",
			  w->rank, w->pid, (double)silent / 1000.0,
			  (double)g->spec->worker_timeout_ms / 1000.0);
		snprintf(w->message, sizeof(w->message),
			 "hung: no heartbeat for %.1f s (--worker-timeout %.1f s)",
			 (double)silent / 1000.0, (double)g->spec->worker_timeout_ms / 1000.0);
		w->failed = true;
		w->term_signal = SIGTERM; /* what it gets now; its real end replaces this */
		w->exit_wall_ms = crun_wall_ms();
		g->fail[g->nfail++] = w;
		g->failed = true;
		stop(g, SIGTERM);
		if (g->nfail == 1 && g->first_failure != NULL) {
			g->first_failure(g, g->arg);
		}
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
	return g->failed && term_signal == 0 && exit_status != 0 &&
	       exit_status != 128 + g->stop_signal;
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
		if (!g->stopping) {
			g->failed = true;
			stop(g, SIGTERM);
			if (g->nfail == 1 && g->first_failure != NULL) {
				g->first_failure(g, g->arg);
			}
		}
	}
	uv_close((uv_handle_t *)h, on_closed);
	if (g->running == 0) {
		all_exited(g);
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct worker *w = h->data;

	(void)suggested;
	*buf = uv_buf_init(w->g->rbuf, sizeof(w->g->rbuf));
}

/*
 * Show every partial line that has waited LOGROUTE_PARTIAL_MS, unless more of its stream is
 * waiting to be read (a loaded agent late to its pipe must not cut a line that is arriving).
 * The timer stops when no partial line waits.
 */
static void on_partial(uv_timer_t *t)
{
	struct group *g = t->data;
	int64_t now = crun_now_ms();
	bool waiting = false;
	int i, k;

	for (i = 0; i < g->n; i++) {
		struct worker *w = &g->w[i];

		for (k = 0; k < 2; k++) {
			struct logroute_stream *ls = k == 0 ? &w->lout : &w->lerr;
			uv_os_fd_t fd;
			struct pollfd pfd;
			int64_t due;

			if (!w->pipes_open[k] || (due = logroute_partial_due(ls)) < 0) {
				continue;
			}
			pfd.events = POLLIN;
			pfd.revents = 0;
			if (w->is_pty[k]) {
				fd = w->pty_fd[k];
			} else if (uv_fileno((uv_handle_t *)(k == 0 ? &w->out : &w->err),
					     &fd) != 0) {
				fd = -1;
			}
			if (due > now || (fd >= 0 && (pfd.fd = fd, poll(&pfd, 1, 0) > 0))) {
				waiting = true;
				continue;
			}
			logroute_forward_partial(ls);
		}
	}
	if (!waiting) {
		uv_timer_stop(t);
	}
}

/*
 * SIGWINCH: give every worker pty the new size and tell its worker (the pty is not its
 * controlling terminal, so the kernel does not).
 */
static void on_winch(uv_signal_t *h, int signum)
{
	struct group *g = h->data;
	int i, k;

	(void)signum;
	for (i = 0; i < g->n; i++) {
		struct worker *w = &g->w[i];
		bool any = false;

		for (k = 0; k < 2; k++) {
			const struct logroute_stream *ls = k == 0 ? &w->lout : &w->lerr;

			if (w->pty_polling[k]) {
				pty_resize(w->pty_fd[k], ls->console_fd, ls->prefix_len);
				any = true;
			}
		}
		if (any && w->pid > 0 && !w->exited) {
			kill(-w->pid, SIGWINCH);
		}
	}
}

/* Route @n bytes of stream @which of @w; a partial line left over starts the timer. */
static void got_output(struct worker *w, int which, const char *p, size_t n)
{
	struct logroute_stream *ls = which == 0 ? &w->lout : &w->lerr;

	if (which == 1) {
		errfile_tail_feed(&w->tail, p, n);
	}
	logroute_feed(ls, p, n);
	if (logroute_partial_due(ls) >= 0 && !uv_is_active((uv_handle_t *)&w->g->partial)) {
		uv_timer_start(&w->g->partial, on_partial, LOGROUTE_PARTIAL_MS / 2,
			       LOGROUTE_PARTIAL_MS / 2);
	}
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct worker *w = s->data;
	int which = s == (uv_stream_t *)&w->out ? 0 : 1;

	if (nread == 0) {
		return;
	}
	if (nread < 0) {
		close_pipe(w, which);
		return;
	}
	got_output(w, which, buf->base, (size_t)nread);
}

/*
 * A pty master is readable (or hung up): read until it would block, a few times at most per
 * call so one worker cannot starve the loop. The end is EIO, which Linux reports only once
 * everything the worker wrote has been read.
 */
static void on_pty(uv_poll_t *h, int status, int events)
{
	struct worker *w = h->data;
	int which = h == &w->pty[0] ? 0 : 1;
	int i;

	(void)events;
	for (i = 0; status == 0 && i < 16; i++) {
		ssize_t n = read(w->pty_fd[which], w->g->rbuf, sizeof(w->g->rbuf));

		if (n > 0) {
			got_output(w, which, w->g->rbuf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && errno == EAGAIN) {
			return;
		}
		break;
	}
	if (i < 16) {
		close_pipe(w, which);
	}
}

/* Start reading the agent's end @fd (owned) of stream @which of @w, a pipe or a pty master. */
static void open_stream(struct worker *w, int which, int fd)
{
	uv_pipe_t *p = which == 0 ? &w->out : &w->err;

	if (w->is_pty[which]) {
		if (uv_poll_init(w->g->loop, &w->pty[which], fd) < 0) {
			close(fd);
			close_pipe(w, which);
			return;
		}
		w->pty[which].data = w;
		w->pty_fd[which] = fd;
		w->pty_polling[which] = true;
		w->g->handles++;
		uv_poll_start(&w->pty[which], UV_READABLE | UV_DISCONNECT, on_pty);
		return;
	}
	if (uv_pipe_open(p, fd) < 0) {
		close(fd);
		close_pipe(w, which);
		return;
	}
	uv_read_start((uv_stream_t *)p, on_alloc, on_read);
}

static int open_log(const char *dir, const char *name, int *fd, struct crun_diag *d)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	*fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
	if (*fd < 0) {
		return diag_set(d, -errno, "log file %s: open: %s", path, strerror(errno));
	}
	return 0;
}

/* Set up the output routes of one worker (console, files) as the spec asks. */
static int setup_routes(struct group *g, struct worker *w, const struct group_opts *o,
			struct crun_diag *d)
{
	const struct job_spec *spec = g->spec;
	int lr = w->local_rank;
	enum std_mask redir, tee;
	int fds[2] = {-1, -1}, rc, i;
	char *prefix;
	bool shown = spec->ranks_filter == NULL || spec->ranks_filter[lr];

	redir = lr < 1024 && spec->redirects[lr] != STD_NONE ? spec->redirects[lr]
							     : spec->redirects[1024];
	tee = lr < 1024 && spec->tee[lr] != STD_NONE ? spec->tee[lr] : spec->tee[1024];
	if (o->logdir != NULL) {
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s/%d", o->logdir, w->rank);
		rc = fs_mkdir_p(dir, 0755);
		if (rc < 0) {
			return diag_set(d, rc, "--log-dir: mkdir %s: %s", dir, strerror(-rc));
		}
		rc = open_log(dir, "stdout.log", &fds[0], d);
		if (rc == 0) {
			rc = open_log(dir, "stderr.log", &fds[1], d);
		}
		if (rc < 0) {
			if (fds[0] >= 0) {
				close(fds[0]);
			}
			return rc;
		}
	}
	prefix = logroute_format_prefix(spec->log_prefix != NULL ? spec->log_prefix
								  : "[rank{rank}]:",
					w->rank, w->local_rank, g->hostname,
					spec->role != NULL ? spec->role : "default");
	if (prefix == NULL) {
		for (i = 0; i < 2; i++) {
			if (fds[i] >= 0) {
				close(fds[i]);
			}
		}
		return diag_set(d, -ENOMEM, "workers: out of memory");
	}
	for (i = 0; i < 2; i++) {
		int bit = i == 0 ? STD_OUT : STD_ERR;
		int console = i == 0 ? STDOUT_FILENO : STDERR_FILENO;

		if ((redir & bit) && !(tee & bit)) {
			console = -1;
		}
		if (!shown) {
			console = -1;
		}
		/* logroute_init owns fds[i] from here, on success and on failure alike. */
		rc = logroute_init(i == 0 ? &w->lout : &w->lerr, prefix, console, fds[i]);
		if (rc == 0 && fds[i] >= 0) {
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s/%d/%s", o->logdir, w->rank,
				 i == 0 ? "stdout.log" : "stderr.log");
			rc = logroute_set_file_path(i == 0 ? &w->lout : &w->lerr, path);
		}
		fds[i] = -1;
		if (rc < 0) {
			free(prefix);
			if (fds[1] >= 0) {
				close(fds[1]);
			}
			return diag_set(d, rc, "workers: out of memory");
		}
	}
	free(prefix);
	return 0;
}

/* A close-on-exec pipe whose ends are above 2 (io_lift_fd()): the child dup2()s the write end
 * onto 1 or 2, which clears close-on-exec. */
static int make_pipe(int p[2])
{
	int rc;

	if (pipe2(p, O_CLOEXEC) != 0) {
		return -errno;
	}
	p[0] = io_lift_fd(p[0]);
	p[1] = io_lift_fd(p[1]);
	if (p[0] < 0 || p[1] < 0) {
		rc = p[0] < 0 ? p[0] : p[1];
		if (p[0] >= 0) {
			close(p[0]);
		}
		if (p[1] >= 0) {
			close(p[1]);
		}
		return rc;
	}
	return 0;
}

/*
 * The pipe or, when --tty asks for one (pty.h), the pseudo-terminal that carries stream @k
 * (0 stdout, 1 stderr) of @w to the agent: p[0] the agent's end, p[1] the worker's.
 */
static int make_stream(struct group *g, struct worker *w, int k, int p[2])
{
	const struct logroute_stream *ls = k == 0 ? &w->lout : &w->lerr;

	static bool warned;
	int rc;

	w->is_pty[k] = pty_wanted(g->spec->tty, ls->console_fd, ls->file_fd >= 0);
	if (w->is_pty[k]) {
		rc = pty_open(ls->console_fd, ls->prefix_len, &p[0], &p[1]);
		if (rc == 0) {
			return 0;
		}
		/* No /dev/ptmx in a container, or out of ptys: the worker still runs, on a pipe. */
		if (!warned) {
			log_warn("workers: no pseudo-terminal (%s): using pipes", strerror(-rc));
			warned = true;
		}
		w->is_pty[k] = false;
	}
	return make_pipe(p);
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
		.store_endpoint = o->store_endpoint,
		.store_prefix = o->store_prefix,
		.store_token_file = o->store_token_file,
		.error_file = w->errfile,
		.heartbeat_file = spec->worker_timeout_ms > 0 ? w->beat.path : NULL,
	};
	struct spawn_env env;
	char **argv = NULL;
	int rc, po[2], pe[2], pidfd = -1;
	pid_t pid = 0;

	rc = setup_routes(g, w, o, d);
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

	rc = make_stream(g, w, 0, po);
	if (rc == 0) {
		rc = make_stream(g, w, 1, pe);
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

		rc = spawn_process(&sp, &pid, &pidfd);
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
		close_pipe(w, 0);
		close_pipe(w, 1);
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
		close_pipe(w, 0);
		close_pipe(w, 1);
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
	open_stream(w, 0, po[0]);
	open_stream(w, 1, pe[0]);
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
	uv_timer_init(loop, &g->grace);
	uv_timer_init(loop, &g->drain);
	uv_timer_init(loop, &g->watch);
	uv_timer_init(loop, &g->partial);
	uv_signal_init(loop, &g->winch);
	g->grace.data = g;
	g->drain.data = g;
	g->watch.data = g;
	g->partial.data = g;
	g->winch.data = g;
	g->handles = 5;
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
			uv_signal_start(&g->winch, on_winch, SIGWINCH);
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
	free(g->w);
	free(g->fail);
	free(g->hostname);
	free(g);
}
