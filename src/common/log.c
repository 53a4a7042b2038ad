/* SPDX-License-Identifier: MIT */
/* src/common/log.c: one-line log messages to stderr, written with a single write(2). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "src/common/io.h"
#include "src/common/journal.h"
#include "src/common/log.h"

/*
 * Where stderr goes decides the line's shape (log_msg()):
 *   terminal  "crun 08:04:41.123 info: text"                    (a person watches it)
 *   journal   one native entry (src/common/journal.c: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER and
 *             the agent's RUN_ID, NODE_RANK, ROUND), or where journald's socket is absent or
 *             refuses, "<6>text" on the stream (journald adds time, host and name; the prefix
 *             is the priority): never a line lost
 *   elsewhere "crun 2026-11-24T08:04:41.123+01:00 node7 info: text"  (a file or a pipe that
 *             outlives the day, gets copied to another host, or is merged with other nodes')
 * No line carries colour codes.
 */
enum log_dest { DEST_UNKNOWN = 0, DEST_TERMINAL, DEST_JOURNAL, DEST_PLAIN };

static enum log_level level = LOG_INFO;
static int level_from_env = 0;
static const char *ident = "crun";
static enum log_dest dest = DEST_UNKNOWN;
static pthread_once_t dest_once = PTHREAD_ONCE_INIT;
static char host[256];

static void init_from_env(void)
{
	const char *e;

	if (level_from_env) {
		return;
	}
	level_from_env = 1;
	e = getenv("CRUN_LOG_LEVEL");
	if (e == NULL) {
		return;
	}
	if (strcasecmp(e, "debug") == 0) {
		level = LOG_DEBUG;
	} else if (strcasecmp(e, "info") == 0) {
		level = LOG_INFO;
	} else if (strcasecmp(e, "warn") == 0 || strcasecmp(e, "warning") == 0) {
		level = LOG_WARN;
	} else if (strcasecmp(e, "error") == 0) {
		level = LOG_ERROR;
	}
}

static void dest_init(void)
{
	if (isatty(STDERR_FILENO)) {
		dest = DEST_TERMINAL;
	} else if (journal_stream_is(STDERR_FILENO)) {
		dest = DEST_JOURNAL;
	} else {
		dest = DEST_PLAIN;
		if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
			snprintf(host, sizeof(host), "localhost");
		}
	}
}

/* Decided once (the agent's threads log too): stderr does not move under a running program. */
static enum log_dest log_dest(void)
{
	pthread_once(&dest_once, dest_init);
	return dest;
}

void log_set_level(enum log_level lvl)
{
	level_from_env = 1;
	level = lvl;
}

enum log_level log_get_level(void)
{
	init_from_env();
	return level;
}

void log_set_ident(const char *id)
{
	ident = id;
}

/* The line's head, by destination; returns its length or -1. */
static const int prio[] = {3, 4, 6, 7}; /* syslog's LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */

int log_raw_line(enum log_level lvl, const char *line, size_t len)
{
	size_t body = len > 0 && line[len - 1] == '\n' ? len - 1 : len;
	char buf[8192];
	int n;

	if (log_dest() != DEST_JOURNAL) {
		return io_write_full(STDERR_FILENO, line, len);
	}
	if (journal_send(prio[lvl], ident, line, body, NULL) == 0) {
		return 0;
	}
	n = snprintf(buf, sizeof(buf), "<%d>%.*s\n", prio[lvl], (int)body, line);
	if (n < 0) {
		return -EINVAL;
	}
	if ((size_t)n >= sizeof(buf)) {
		n = (int)sizeof(buf) - 1;
		buf[n - 1] = '\n'; /* cut, but still a whole line */
	}
	return io_write_full(STDERR_FILENO, buf, (size_t)n);
}

static int head(char *line, size_t len, enum log_level lvl)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	struct timespec ts;
	struct tm tm;
	long off;

	if (log_dest() == DEST_JOURNAL) {
		return snprintf(line, len, "<%d>", prio[lvl]);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	if (dest == DEST_TERMINAL) {
		return snprintf(line, len, "%s %02d:%02d:%02d.%03ld %s: ", ident, tm.tm_hour,
				tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, names[lvl]);
	}
	/* ISO 8601 with the offset in its extended form (+01:00), as RFC 3339 writes it. */
	off = tm.tm_gmtoff / 60;
	return snprintf(line, len, "%s %04d-%02d-%02dT%02d:%02d:%02d.%03ld%c%02ld:%02ld %s %s: ",
			ident, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			tm.tm_sec, ts.tv_nsec / 1000000, off < 0 ? '-' : '+',
			(off < 0 ? -off : off) / 60, (off < 0 ? -off : off) % 60, host,
			names[lvl]);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	char line[2048];
	va_list ap;
	int n, m, h;

	init_from_env();
	if (lvl > level) {
		return;
	}
	n = h = head(line, sizeof(line), lvl);
	if (n < 0 || (size_t)n >= sizeof(line) - 2) {
		return;
	}
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0) {
		return;
	}
	n += m;
	if ((size_t)n > sizeof(line) - 2) {
		n = (int)sizeof(line) - 2;
	}
	/* The journal's own entry, with fields; the stream keeps the line when it cannot take it. */
	if (dest == DEST_JOURNAL &&
	    journal_send(prio[lvl], ident, line + h, (size_t)(n - h), NULL) == 0) {
		return;
	}
	line[n++] = '\n';
	/* One write so lines from several processes sharing stderr never interleave. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		return;
	}
}
