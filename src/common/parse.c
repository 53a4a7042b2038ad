/* SPDX-License-Identifier: MIT */
/* src/common/parse.c: strict decimal integers. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/parse.h"

/*
 * The one grammar: an optional sign, then decimal digits, all @n bytes of them. Text that is
 * not a number is -EINVAL whatever its length (every byte is looked at), a number outside
 * [@min, @max] -ERANGE. One pass, no strtoll(): the store's ADD parses a counter per request.
 */
static int parse_span(const char *s, size_t n, long long min, long long max, long long *out)
{
	unsigned long long mag = 0, limit;
	bool neg = false, over = false;
	long long v;
	size_t i = 0;
	unsigned d;

	if (n > 0 && (s[0] == '+' || s[0] == '-')) {
		neg = s[0] == '-';
		i = 1;
	}
	if (i == n) {
		return -EINVAL;
	}
	/* The magnitude a long long can hold with this sign: 2^63 for a negative number. */
	limit = neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
	for (; i < n; i++) {
		d = (unsigned)(unsigned char)s[i] - '0';
		if (d > 9) {
			return -EINVAL;
		}
		if (!over && (mag > (limit - d) / 10)) {
			over = true;
		}
		mag = mag * 10 + d;
	}
	if (over) {
		return -ERANGE;
	}
	/* -(2^63) is LLONG_MIN; every smaller magnitude negates in range. */
	if (neg) {
		v = mag == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)mag;
	} else {
		v = (long long)mag;
	}
	if (v < min || v > max) {
		return -ERANGE;
	}
	*out = v;
	return 0;
}

static int parse_ll(const char *s, long long min, long long max, long long *out)
{
	if (s == NULL) {
		return -EINVAL;
	}
	return parse_span(s, strlen(s), min, max, out);
}

int parse_long(const char *s, long min, long max, long *out)
{
	long long v;
	int rc = parse_ll(s, min, max, &v);

	if (rc == 0) {
		*out = (long)v;
	}
	return rc;
}

int parse_int(const char *s, int min, int max, int *out)
{
	long long v;
	int rc = parse_ll(s, min, max, &v);

	if (rc == 0) {
		*out = (int)v;
	}
	return rc;
}

int parse_i64(const char *s, int64_t *out)
{
	long long v;
	int rc = parse_ll(s, INT64_MIN, INT64_MAX, &v);

	if (rc == 0) {
		*out = (int64_t)v;
	}
	return rc;
}

int parse_i64_bytes(const void *p, size_t n, int64_t *out)
{
	const char *s = p;
	long long v;
	int rc;

	/*
	 * Leading white space is skipped, as the TCP store always did and as TCPStore's
	 * std::stoll does: a counter written as " 5" by some client still adds.
	 */
	while (n > 0 && (*s == ' ' || (*s >= '\t' && *s <= '\r'))) {
		s++;
		n--;
	}
	rc = parse_span(s, n, INT64_MIN, INT64_MAX, &v);
	/*
	 * 20 digits and a sign is the longest int64 without leading zeros; a number of 32 bytes
	 * or more is out of range whatever its zeros (the store's limit before this helper).
	 */
	if (rc == 0 && n >= 32) {
		return -ERANGE;
	}
	if (rc == 0) {
		*out = (int64_t)v;
	}
	return rc;
}

size_t parse_i64_format(char *buf, int64_t v)
{
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v; /* INT64_MIN too */
	char rev[PARSE_I64_LEN];
	size_t n = 0, i = 0;

	do {
		rev[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u > 0);
	if (v < 0) {
		buf[i++] = '-';
	}
	while (n > 0) {
		buf[i++] = rev[--n];
	}
	buf[i] = '\0';
	return i;
}

int parse_seconds_ms(const char *s, double max_s, int64_t *ms)
{
	char *end;
	double v;

	/* strtod() would skip leading spaces and read "nan" and "inf": refuse all three. */
	if (s == NULL || *s == '\0' || isspace((unsigned char)*s)) {
		return -EINVAL;
	}
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0') {
		return -EINVAL;
	}
	if (errno == ERANGE) {
		return -ERANGE; /* "1e400", "1e-400": a number a double cannot hold */
	}
	if (!isfinite(v)) {
		return -EINVAL; /* "inf", "nan": not a number of seconds */
	}
	if (v < 0 || v > max_s) {
		return -ERANGE;
	}
	*ms = (int64_t)(v * 1000.0 + 0.5);
	return 0;
}
