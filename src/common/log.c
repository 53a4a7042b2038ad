/* SPDX-License-Identifier: MIT */
/* src/common/log.c: one-line log messages to stderr, written with a single write(2). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "src/common/log.h"

static enum log_level level = LOG_INFO;
static int level_from_env = 0;
static const char *ident = "crun";

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

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	char line[2048];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n, m;

	init_from_env();
	if (lvl > level) {
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%s %02d:%02d:%02d.%03ld %s: ", ident, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, names[lvl]);
	if (n < 0) {
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
	line[n++] = '\n';
	/* One write so lines from several processes sharing stderr never interleave. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		return;
	}
}
