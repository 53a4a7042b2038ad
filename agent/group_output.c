/* SPDX-License-Identifier: MIT */
/*
 * agent/group_output.c: the workers' stdout and stderr: a pipe or a pseudo-terminal per
 * stream (--tty), read on the group's loop, routed to the console and log files with the
 * rank prefix (logroute.c), partial lines shown after LOGROUTE_PARTIAL_MS, and the stderr
 * tail kept for the failure report.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/group_internal.h"
#include "agent/pty.h"
#include "src/common/clock.h"
#include "src/common/fs.h"
#include "src/common/journal.h"
#include "src/common/io.h"
#include "src/common/log.h"

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
void group_output_on_winch(uv_signal_t *h, int signum)
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
		group_close_stream(w, which);
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
		group_close_stream(w, which);
	}
}

/* Start reading the agent's end @fd (owned) of stream @which of @w, a pipe or a pty master. */
void group_output_open(struct worker *w, int which, int fd)
{
	uv_pipe_t *p = which == 0 ? &w->out : &w->err;

	if (w->is_pty[which]) {
		if (uv_poll_init(w->g->loop, &w->pty[which], fd) < 0) {
			close(fd);
			group_close_stream(w, which);
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
		group_close_stream(w, which);
		return;
	}
	uv_read_start((uv_stream_t *)p, on_alloc, on_read);
}

static int open_log(const char *dir, const char *name, int *fd, struct crun_diag *d)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	*fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND | O_NOFOLLOW, 0600);
	if (*fd < 0) {
		return diag_set(d, -errno, "log file %s: open: %s", path, strerror(errno));
	}
	return 0;
}

int group_output_filtered(struct group *g, const struct group_opts *o, struct crun_diag *d)
{
	static const char *const names[] = {"filtered_stdout", "filtered_stderr"};
	char name[64];
	int i, rc;

	for (i = 0; i < 2 && o->logdir != NULL; i++) {
		if (g->spec->dup_filters[i] == NULL) {
			continue;
		}
		rc = fs_mkdir_p(o->logdir, 0755);
		if (rc < 0) {
			return diag_set(d, rc, "--log-dir: mkdir %s: %s", o->logdir, strerror(-rc));
		}
		/* One file a node: the nodes of a job share the attempt's folder (logroute.h). */
		if (o->group_world_size > 1) {
			snprintf(name, sizeof(name), "%s.node%d.log", names[i], o->group_rank);
		} else {
			snprintf(name, sizeof(name), "%s.log", names[i]);
		}
		if ((rc = open_log(o->logdir, name, &g->dup_fd[i], d)) < 0) {
			return rc;
		}
	}
	return 0;
}

/* Set up the output routes of one worker (console, files) as the spec asks. */
int group_output_routes(struct group *g, struct worker *w, const struct group_opts *o,
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
		rc = fs_mkdir_p(dir, 0700); /* private, like the run folder (logroute_claim_run_dir()) */
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
		logroute_set_duplicate(i == 0 ? &w->lout : &w->lerr, spec->dup_filters[i],
				       g->dup_fd[i]);
		if (console >= 0 && journal_stream_is(console)) {
			logroute_set_journal(i == 0 ? &w->lout : &w->lerr, w->rank);
		}
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
int group_output_stream(struct group *g, struct worker *w, int k, int p[2])
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
