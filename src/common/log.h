/* SPDX-License-Identifier: MIT */
/* src/common/log.h: one-line log messages to stderr (terminal, journal or file: log.c). */
#ifndef CRUN_SRC_COMMON_LOG_H
#define CRUN_SRC_COMMON_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/** Messages above @lvl are dropped. Default LOG_INFO; CRUN_LOG_LEVEL=debug|info|warn|error. */
void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
/** Program name shown in each line ("crun", "crun-rdzvd"). Borrowed; keep it alive. */
void log_set_ident(const char *ident);

/**
 * One line to stderr, shaped by where stderr goes (decided at the first line): a terminal
 * "crun 08:04:41.123 info: text"; the journal ($JOURNAL_STREAM names stderr) one native entry
 * with fields (src/common/journal.h), or where journald's socket is absent or refuses
 * "<6>text", the syslog priority (3 error, 4 warning, 6 info, 7 debug) and no time; anything else
 * "crun 2026-11-24T08:04:41.123+01:00 HOST info: text". Never colour codes.
 */
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/**
 * Write @line (@len bytes, ending in '\n'), formatted by the caller (a table, a report), to
 * stderr as a line of priority @lvl, whatever the log level: a journal entry with this process's
 * fields when stderr is the journal and journald takes it; else, there, "<N>" and the line (the
 * stream's priority, sd-daemon(3)); else the line as it is. One write either way. Returns 0 or
 * -errno (stderr closed).
 */
int log_raw_line(enum log_level lvl, const char *line, size_t len);

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
