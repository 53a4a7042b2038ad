/* SPDX-License-Identifier: MIT */
/* src/common/log.h: one-line log messages to stderr (terminal, journal or file: log.c). */
#ifndef CRUN_SRC_COMMON_LOG_H
#define CRUN_SRC_COMMON_LOG_H

#include <stdbool.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/** Messages above @lvl are dropped. Default LOG_INFO; CRUN_LOG_LEVEL=debug|info|warn|error. */
void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
/** Program name shown in each line ("crun", "crun-rdzvd"). Borrowed; keep it alive. */
void log_set_ident(const char *ident);

/**
 * Whether stderr is systemd's journal ($JOURNAL_STREAM names it): lines then start with a
 * syslog priority ("<3>" error ... "<7>" debug) instead of a time stamp. Decided once.
 */
bool log_to_journal(void);

void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
