/* SPDX-License-Identifier: MIT */
/* agent/logroute.h: line-prefixed routing of worker output to the console and to files. */
#ifndef CRUN_AGENT_LOGROUTE_H
#define CRUN_AGENT_LOGROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A line longer than this is written in pieces of this size, each ending with a newline. */
#define LOGROUTE_MAX_LINE (64u * 1024u)

/*
 * A partial line (no newline yet: a prompt, a progress bar) goes to the console once its stream
 * has been quiet this long, or at once when it holds a carriage return.
 */
#define LOGROUTE_PARTIAL_MS 100

/*
 * One stream (stdout or stderr) of one worker. Bytes are cut into whole lines; each line goes
 * to the console as ONE write() of prefix + line, and to the file as is. All streams of an
 * agent are fed from one thread, so console lines never interleave mid-line.
 *
 * Live partial lines: logroute_forward_partial() shows what a stream holds of its current line
 * before the newline. That stream then "has the console": its next bytes go out without a
 * prefix. Any other stream that writes first ends that line with a newline of its own, and the
 * interrupted line goes on later as a new console line with the prefix again (the continuation
 * is marked by the prefix only). A carriage return inside a console line is followed by the
 * prefix again, so a progress bar redrawn with \r keeps its rank. Files get whole lines as is.
 */
/* How long one write may wait for a non-blocking console that is full (then it is dropped). */
#define LOGROUTE_STALL_MS 1000

struct logroute_stream {
	char *buf;        /* the partial line, owned; NULL until needed */
	size_t len, cap;
	char *prefix;     /* owned */
	size_t prefix_len;
	int console_fd;   /* -1: not shown on the console */
	int file_fd;      /* -1: no file; owned (closed by finish) */
	char *file_path;  /* owned; NULL until logroute_set_file_path() */
	int file_err;     /* the first failed write to the file (positive errno), 0: none */
	size_t file_lost; /* bytes not written to the file since then */
	size_t shown;     /* bytes of buf already on the console (a live partial line) */
	int64_t fed_ms;   /* crun_now_ms() when bytes last came in */
	char *const *dup_filters; /* borrowed, NULL-terminated: lines holding one of these ... */
	int dup_fd;       /* ... also go here, prefixed (borrowed; -1: none) */
	int journal_rank; /* >= 0: the console is the journal: lines go as entries with RANK */
};

/**
 * Set up @s; @prefix is copied, @file_fd is owned from now on (closed here when this fails).
 * Returns 0 or -ENOMEM.
 */
int logroute_init(struct logroute_stream *s, const char *prefix, int console_fd, int file_fd);
/**
 * Name the file (copied) for the error message. A write to the file that fails (ENOSPC, EIO)
 * is logged once with this path, and the file gets nothing more: what it holds is a prefix of
 * the output, never a file with a hole; file_err and file_lost say what happened.
 * Returns 0 or -ENOMEM.
 */
int logroute_set_file_path(struct logroute_stream *s, const char *path);
/**
 * --duplicate-std*-filters: every line that holds one of @filters (borrowed, NULL-terminated)
 * is also written, with its prefix, to @fd (borrowed; shared by the workers: one write a line).
 */
void logroute_set_duplicate(struct logroute_stream *s, char *const *filters, int fd);
/**
 * The console of @s is the journal's stream: each whole line goes to journald as one entry
 * (src/common/journal.h: MESSAGE = prefix + line, the agent's RUN_ID, NODE_RANK, ROUND, and
 * RANK=@rank), so `journalctl RUN_ID=... RANK=3` finds a worker's lines; to the stream as
 * before when journald does not take it. No live partial lines there (journald waits for the
 * newline anyway).
 */
void logroute_set_journal(struct logroute_stream *s, int rank);
/** Route @n bytes (borrowed): every complete line is written out at once. */
void logroute_feed(struct logroute_stream *s, const char *data, size_t n);
/**
 * When the partial line of @s is due on the console (crun_now_ms() clock; LOGROUTE_PARTIAL_MS
 * after its last bytes), or -1 when it has nothing to show.
 */
int64_t logroute_partial_due(const struct logroute_stream *s);
/** Show the partial line of @s on the console now (a trailing \r waits for the next byte). */
void logroute_forward_partial(struct logroute_stream *s);
/** End of stream: write a pending partial line (a newline is added). */
void logroute_flush(struct logroute_stream *s);
/** Flush, close the file, free. A zeroed or finished stream is a no-op. */
void logroute_finish(struct logroute_stream *s);

/**
 * Expand a prefix template: {rank} {local_rank} {host} {role}; any other text is copied.
 * Returns a malloc'd string (caller frees) or NULL on allocation failure.
 */
char *logroute_format_prefix(const char *tmpl, int rank, int local_rank, const char *host,
			     const char *role);

/* ---- the --log-dir layout ---- */

/*
 * One folder per run, shared by every node of the job where --log-dir is shared (NFS):
 * DIR/<run_id>/attempt_<round>/<rank>/{stdout,stderr}.log, the kept error files
 * attempt_<round>/error_<rank>.json and each node's run record run-<host>:<pid>.json; global
 * ranks and rounds are the job's own, so nodes never write the same file. A rerun with the same
 * run id gets DIR/<run_id>.1, .2, ... (never mixed with the first run's logs); names planted
 * in a shared DIR cannot stop a job: past LOGROUTE_RERUNS a random suffix (mkdtemp(3)).
 * The nodes agree on the name through the rendezvous (rdzv_agree(), "logdir"): the first
 * node to propose a name wins, every node (itself too) joins it.
 */
#define LOGROUTE_RERUNS 100

struct crun_diag;

/**
 * Create --log-dir @log_dir (with its parents, 0755) and check it: refused (-EPERM, logged
 * naming it and its mode) when others could replace what is in it (fs_check_dir_safe()),
 * warned about when its group can. Returns 0 or a negative errno.
 */
int logroute_check_dir(const char *log_dir);
/**
 * This node's proposal of a fresh run folder in @log_dir for run @run_id: the first name of
 * "<run_id>", "<run_id>.1", ... that nothing in @log_dir has (see above), to @name (a name,
 * not a path). Past those, a random one it makes (mkdtemp(3), 0700; *@made set: remove it
 * with logroute_drop_run_dir() when another proposal wins). Returns 0 or a negative errno
 * (@d filled).
 */
int logroute_claim_run_dir(const char *log_dir, const char *run_id, char *name, size_t cap,
			   bool *made, struct crun_diag *d);
/**
 * The path of the run folder @name (agreed) in @log_dir to @out, the folder made (0700) when
 * this node does not see it (a --log-dir that is not shared). One that is not a private
 * folder of this user (a link, another user's, open to others) is not used: a warning, and a
 * folder of this node's own, "<name>.XXXXXX". Returns 0 or a negative errno (@d filled).
 */
int logroute_join_run_dir(const char *log_dir, const char *name, char *out, size_t len,
			  struct crun_diag *d);
/** Remove the (empty) folder @name this node made when another node's proposal won. */
void logroute_drop_run_dir(const char *log_dir, const char *name);
/**
 * Move the workers' error files (error_<rank>.json) of attempt @attempt from the temporary
 * @errdir into @run_dir/attempt_<attempt> (created when there is one), so that the temporary
 * folder can go; logs where they went, or why they could not. Returns how many were moved, or
 * a negative errno.
 */
int logroute_keep_errfiles(const char *errdir, const char *run_dir, int attempt);

#endif
