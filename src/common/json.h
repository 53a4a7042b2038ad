/* SPDX-License-Identifier: MIT */
/* src/common/json.h: JSON string escaping that always yields valid JSON (RFC 8259). */
#ifndef CRUN_SRC_COMMON_JSON_H
#define CRUN_SRC_COMMON_JSON_H

#include <stddef.h>
#include <stdio.h>

/*
 * The one JSON string escaper (the error files workers write, `crun status --json`). Input is
 * any NUL-terminated bytes, such as a worker's message: '"' and '\\' are escaped, control
 * characters (and DEL) become \n, \t, ... or \u00XX, well-formed UTF-8 passes through, and each
 * byte that is not part of a well-formed UTF-8 sequence (Unicode's table 3-7: no overlong
 * forms, no surrogates, nothing above U+10FFFF) becomes \ufffd, so a Latin-1 file name in a
 * message cannot make the whole document unparsable.
 */

/**
 * Escape @s as the body of a JSON string (without the quotes) into @dst of @cap bytes,
 * NUL-terminated when @cap > 0; what does not fit is cut at a whole escape or UTF-8 sequence.
 * Returns the length the whole body needs, without the NUL (as snprintf() does): a result
 * >= @cap means it was cut. @dst may be NULL when @cap is 0.
 */
size_t json_escape(char *dst, size_t cap, const char *s);

/** Write @s to @f as a JSON string, quotes included. Returns 0, or -EIO when @f failed. */
int json_fput_str(FILE *f, const char *s);

#endif
