/* SPDX-License-Identifier: MIT */
/* src/common/parse.h: strict decimal integers from flags, environment variables and values. */
#ifndef CRUN_SRC_COMMON_PARSE_H
#define CRUN_SRC_COMMON_PARSE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Strict: an optional '+' or '-', then decimal digits, nothing else (no spaces, no hex, no
 * trailing text). Returns 0 and sets *out, -EINVAL (not an integer) or -ERANGE (an integer
 * outside [min, max]); *out is untouched on error.
 */
int parse_long(const char *s, long min, long max, long *out);
int parse_int(const char *s, int min, int max, int *out);
int parse_i64(const char *s, int64_t *out);
/**
 * A store counter's value: @n bytes that need not be NUL-terminated, leading white space
 * skipped (the TCP store's grammar since 0.1, and TCPStore's), then as parse_i64().
 */
int parse_i64_bytes(const void *p, size_t n, int64_t *out);
/**
 * The inverse: @v in decimal ('-' and up to 19 digits) and a NUL in @buf, which holds
 * PARSE_I64_LEN bytes; returns the length. No printf: the store writes one per ADD.
 */
#define PARSE_I64_LEN 21
size_t parse_i64_format(char *buf, int64_t v);
/**
 * Seconds, fractions allowed ("2", "0.25", "1e3"; no spaces, no trailing text), to whole
 * milliseconds rounded to nearest: 0, -EINVAL (not a finite number) or -ERANGE (outside
 * [0, @max_s]).
 */
int parse_seconds_ms(const char *s, double max_s, int64_t *ms);

#endif
