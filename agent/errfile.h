/* SPDX-License-Identifier: MIT */
/* agent/errfile.h: workers' error files (torchrun's @record JSON) and the failure report. */
#ifndef CRUN_AGENT_ERRFILE_H
#define CRUN_AGENT_ERRFILE_H

#include <stddef.h>
#include <stdint.h>

/* Only this much of an error file is read; the message is cut to fit the report. */
#define ERRFILE_MAX_READ (256u * 1024u)
#define ERRFILE_MAX_MESSAGE 1024u

/**
 * Read the "message" of a torchrun error file at @path:
 * {"message": {"message": "...", "extraInfo": {...}}} or {"message": "..."}.
 * On success @msg (size @len) holds the text, one line (newlines become " | "), cut to fit.
 * Returns 0, -ENOENT (no file), -EPROTO (not that shape) or another -errno. Never crashes.
 */
int errfile_read_message(const char *path, char *msg, size_t len);
/** The same over an in-memory document (@n bytes, borrowed). */
int errfile_parse_message(const char *doc, size_t n, char *msg, size_t len);

/**
 * Like errfile_read_message(), and also the "py_callstack" string of the document (torch's
 * @record writes it under message.extraInfo) into @stack (size @stacklen, may be NULL), newlines
 * kept; when it does not fit, its end is kept. "" when there is none.
 */
int errfile_read(const char *path, char *msg, size_t len, char *stack, size_t stacklen);
/** The same over an in-memory document (@n bytes, borrowed). */
int errfile_parse(const char *doc, size_t n, char *msg, size_t len, char *stack, size_t stacklen);

/* The report's details: at most this many last lines, each cut to this many bytes. */
#define ERRFILE_DETAIL_LINES 6
#define ERRFILE_DETAIL_LINES_MAX 16
#define ERRFILE_DETAIL_LINE_MAX 200u
#define ERRFILE_MAX_DETAIL (ERRFILE_DETAIL_LINES * (ERRFILE_DETAIL_LINE_MAX + 1) + 1)
/* Table rows at most; every failure is still counted in its group below the table. */
#define ERRFILE_REPORT_ROWS 16

/*
 * The last @nlines (at most ERRFILE_DETAIL_LINES_MAX) non-empty lines of @text (@n bytes),
 * joined by '\n', each cut to ERRFILE_DETAIL_LINE_MAX bytes, control bytes as '?', only the last
 * redraw of a line with '\r', into @out (size @len). Returns how many lines.
 */
int errfile_last_lines(const char *text, size_t n, int nlines, char *out, size_t len);

/* The last bytes a worker wrote on stderr: a ring, for a failure without an error file. */
#define ERRFILE_TAIL_BYTES 4096u
struct errfile_tail {
	char buf[ERRFILE_TAIL_BYTES];
	uint64_t total; /* bytes fed so far */
};
/** Keep the last ERRFILE_TAIL_BYTES of @data (@n bytes) in @t (zeroed to start). */
void errfile_tail_feed(struct errfile_tail *t, const char *data, size_t n);
/** errfile_last_lines() over what @t holds (a first line cut by the ring is dropped). */
int errfile_tail_lines(const struct errfile_tail *t, int nlines, char *out, size_t len);

/** "0-3, 5, 7-8" from sorted @ranks; 0, or -ENOSPC with the list cut and ending "...". */
int errfile_format_ranks(const int *ranks, int n, char *buf, size_t len);

/* One failed worker, for the report. */
struct errfile_failure {
	int64_t wall_ms;  /* when the agent saw it exit */
	const char *host; /* borrowed */
	int rank, local_rank;
	int exit_code;    /* valid when signal == 0 */
	int signal;       /* > 0: killed by this signal */
	int pid;
	const char *message; /* from the error file, or NULL; borrowed */
	const char *detail;  /* the last lines of its traceback or stderr ('\n' between), or NULL */
	const char *detail_what; /* what @detail is: "traceback", "stderr"; borrowed */
};

/**
 * Write the failure report to @fd: a heading line, then a table with one row per failure (the
 * first is the root cause, marked; at most ERRFILE_REPORT_ROWS rows). When there is more than
 * one failure or any has details, the failures follow grouped by how they failed (same exit
 * and message): "ranks 0-3, 5: exit 1: ValueError: x", each group once, with the last lines of
 * its first rank's traceback or stderr. Each line is one write().
 */
void errfile_report(int fd, const char *heading, const struct errfile_failure *f, int n);

/** One-line summary of @f for the store ("rank 3 (host h, local rank 1, pid 9): exit 1: msg"). */
void errfile_summary(const struct errfile_failure *f, char *buf, size_t len);
/**
 * The summary of the first of @n failures (the root cause), followed by the others as
 * " (also failed: rank 1: exit 4, rank 2: SIGSEGV (11))", as torchrun's ChildFailedError lists
 * its "Other Failures". The first one's message is cut so the list always fits in @len.
 */
void errfile_summary_all(const struct errfile_failure *f, int n, char *buf, size_t len);

/**
 * Parse a summary written by errfile_summary() on another node, found anywhere in @s (borrowed;
 * e.g. inside the rendezvous' failure description). Fills @f with @host/@msg (caller buffers)
 * as its strings; wall_ms is left to the caller. Returns 0 or -EINVAL when there is none.
 */
int errfile_parse_summary(const char *s, struct errfile_failure *f, char *host, size_t hostlen,
			  char *msg, size_t msglen);

#endif
