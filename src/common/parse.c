/* SPDX-License-Identifier: MIT */
/* src/common/parse.c: strict decimal integers. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/parse.h"

/* The digits after an optional sign: strtoll alone would accept spaces before them. */
static int well_formed(const char *s)
{
	if (*s == '+' || *s == '-') {
		s++;
	}
	if (*s == '\0') {
		return 0;
	}
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9') {
			return 0;
		}
	}
	return 1;
}

static int parse_ll(const char *s, long long min, long long max, long long *out)
{
	long long v;

	if (s == NULL || !well_formed(s)) {
		return -EINVAL;
	}
	errno = 0;
	v = strtoll(s, NULL, 10);
	if (errno == ERANGE || v < min || v > max) {
		return -ERANGE;
	}
	*out = v;
	return 0;
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
	char buf[32];
	size_t i;

	/*
	 * Leading white space is skipped, as the TCP store always did and as TCPStore's
	 * std::stoll does: a counter written as " 5" by some client still adds.
	 */
	while (n > 0 && (*s == ' ' || (*s >= '\t' && *s <= '\r'))) {
		s++;
		n--;
	}
	/*
	 * The grammar first, over all @n bytes (a NUL is not a digit), so that text which is
	 * not a number is -EINVAL at any length, as parse_i64() says of it.
	 */
	i = n > 0 && (s[0] == '+' || s[0] == '-') ? 1 : 0;
	if (i == n) {
		return -EINVAL;
	}
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return -EINVAL;
		}
	}
	/*
	 * 20 digits and a sign is the longest int64 without leading zeros; a number of 32 bytes
	 * or more is out of range whatever its zeros (the store's limit before this helper).
	 */
	if (n >= sizeof(buf)) {
		return -ERANGE;
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
	return parse_i64(buf, out);
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
