/* SPDX-License-Identifier: MIT */
/*
 * agent/group_internal.h: what group.c (spawning, watching, stopping the workers) and
 * group_output.c (their stdout and stderr: pipes or ptys, routes, partial lines) share.
 * Nothing outside those two files includes it; the agent uses group.h.
 */
#ifndef CRUN_AGENT_GROUP_INTERNAL_H
#define CRUN_AGENT_GROUP_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "agent/errfile.h"
#include "agent/group.h"
#include "agent/logroute.h"
#include "agent/watchdog.h"
#include "src/common/diag.h"

#define GROUP_READ_BUF (64u * 1024u)
#define GROUP_STACK_MAX (64u * 1024u) /* a traceback read from an error file, its end kept */
/*
 * After the first worker fails, the others get SIGTERM spec->failure_window_ms later (10 ms, or
 * --monitor-interval), so that ranks failing at the same moment (after one barrier, on one bad
 * batch) end with their own codes and are all listed, as torchrun lists the failures one monitor
 * pass sees. Signalled at once, a rank still unwinding its own error would be reported as killed
 * by SIGTERM; a longer default would delay every restart (bench/launch).
 */

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
	uv_timer_t window;  /* spec->failure_window_ms from the first failure to the stop */
	bool in_window;     /* the window runs: failures are collected, nothing signalled yet */
	uv_signal_t winch;  /* crun's terminal was resized: so are the workers' ptys */
	bool stopping, failed, stopped_outside, finishing, reaped;
	int stop_signal;
	int nfail;
	int devnull;        /* the stdin of workers --stdin does not name */
	int dup_fd[2];      /* filtered_std{out,err}.log (--duplicate-std*-filters), or -1 */
	struct worker **fail; /* failures in the order seen */
	char spawn_err[CRUN_DIAG_MSG_MAX];
	group_done_cb done;
	void (*first_failure)(struct group *g, void *arg);
	void *arg;
	char rbuf[GROUP_READ_BUF];
};

/* group.c */
void group_close_stream(struct worker *w, int which);

/* group_output.c */
/* Set up the output routes of one worker (console, files) as the spec asks. */
int group_output_routes(struct group *g, struct worker *w, const struct group_opts *o,
			struct crun_diag *d);
/* filtered_std{out,err}.log in o->logdir for --duplicate-std*-filters (g->dup_fd). 0 or <0. */
int group_output_filtered(struct group *g, const struct group_opts *o, struct crun_diag *d);
/* The pipe or pty carrying stream @k (0 stdout, 1 stderr) of @w: p[0] ours, p[1] the worker's. */
int group_output_stream(struct group *g, struct worker *w, int k, int p[2]);
/* Start reading our end @fd (owned) of stream @which of @w. */
void group_output_open(struct worker *w, int which, int fd);
/* SIGWINCH: resize every worker pty and tell its worker. */
void group_output_on_winch(uv_signal_t *h, int signum);

#endif
