/* SPDX-License-Identifier: MIT */
/* src/common/diag.h: the one carrier of a human-readable error, "<where>: <what>: <why>". */
#ifndef CRUN_SRC_COMMON_DIAG_H
#define CRUN_SRC_COMMON_DIAG_H

#include <stdarg.h>
#include <stddef.h>

/*
 * Filled at the point of failure and read by whoever shows it to a person (CLI, startup,
 * first-failure report, a library's last-error string). Every module carries errors this
 * way; public functions that take a plain (char *err, size_t errlen) buffer copy a diag out
 * with diag_copy_out() at the boundary.
 */
#define CRUN_DIAG_MSG_MAX 512

struct crun_diag {
	int code;
	char msg[CRUN_DIAG_MSG_MAX];
};

/** Record @code and a printf-style message in @d (may be NULL); returns @code. */
int diag_set(struct crun_diag *d, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int diag_setv(struct crun_diag *d, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
/**
 * As diag_set(), but only when @d holds no error yet (code 0): the first problem is the one
 * worth reporting. Returns the code @d holds afterwards.
 */
int diag_set_first(struct crun_diag *d, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/** Prepend "<printf-style context>: " to @d's message (truncating at the end). Returns d->code. */
int diag_prefix(struct crun_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Forget any error. */
void diag_clear(struct crun_diag *d);
/** Copy @d's message into @buf (may be NULL) of @len bytes; returns d->code. */
int diag_copy_out(const struct crun_diag *d, char *buf, size_t len);

#endif
