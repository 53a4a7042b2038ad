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

/* One failed worker, for the report. */
struct errfile_failure {
	int64_t wall_ms;  /* when the agent saw it exit */
	const char *host; /* borrowed */
	int rank, local_rank;
	int exit_code;    /* valid when signal == 0 */
	int signal;       /* > 0: killed by this signal */
	int pid;
	const char *message; /* from the error file, or NULL; borrowed */
};

/**
 * Write the failure table to @fd: a heading line, then one row per failure (the first is the
 * root cause, marked). Each line is one write().
 */
void errfile_report(int fd, const char *heading, const struct errfile_failure *f, int n);

/** One-line summary of @f for the store ("rank 3 (host h, local rank 1, pid 9): exit 1: msg"). */
void errfile_summary(const struct errfile_failure *f, char *buf, size_t len);

/**
 * Parse a summary written by errfile_summary() on another node, found anywhere in @s (borrowed;
 * e.g. inside the rendezvous' failure description). Fills @f with @host/@msg (caller buffers)
 * as its strings; wall_ms is left to the caller. Returns 0 or -EINVAL when there is none.
 */
int errfile_parse_summary(const char *s, struct errfile_failure *f, char *host, size_t hostlen,
			  char *msg, size_t msglen);

#endif
