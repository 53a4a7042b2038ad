/* SPDX-License-Identifier: MIT */
/* src/common/journal.h: journald's native protocol (one datagram a line, with fields). */
#ifndef CRUN_SRC_COMMON_JOURNAL_H
#define CRUN_SRC_COMMON_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>

/* Where journald listens for native entries (systemd.journal-fields(7), sd_journal_send(3)). */
#define JOURNAL_SOCKET "/run/systemd/journal/socket"

/* The extra fields every entry carries (RUN_ID, NODE_RANK, ROUND): at most this many. */
#define JOURNAL_MAX_FIELDS 8

/**
 * Whether @fd is the journal's stream: systemd sets $JOURNAL_STREAM to "DEV:INO" of the stream
 * it connected stdout/stderr to (systemd.exec(5)).
 */
bool journal_stream_is(int fd);

/**
 * Set (or with @value NULL remove) the field @name (upper case, digits and '_', as journald
 * requires; copied) that every later entry of this process carries. Thread-safe. Returns 0,
 * -EINVAL for a name journald would drop, or -ENOSPC past JOURNAL_MAX_FIELDS.
 */
int journal_set_field(const char *name, const char *value);

/**
 * Send one entry: MESSAGE=@msg (@len bytes, any bytes), PRIORITY=@prio (syslog's 0..7),
 * SYSLOG_IDENTIFIER=@ident, the fields set above, then @extra (NULL or "NAME=value" lines, each
 * ending with '\n': a field of this entry only). One datagram to JOURNAL_SOCKET, sent
 * without blocking. Returns 0, or a negative errno (no socket there, journald refused or is
 * full): the caller writes the line to stderr instead, so that none is lost.
 */
int journal_send(int prio, const char *ident, const char *msg, size_t len, const char *extra);

#endif
