/* SPDX-License-Identifier: MIT */
/* rendezvous/util.c: diagnostics, clocks and address parsing shared by every folder. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <crun/error.h>

#include "rendezvous/util.h"

int diag_set(struct crun_diag *d, int code, const char *fmt, ...)
{
	va_list ap;

	if (d == NULL) {
		return code;
	}
	d->code = code;
	va_start(ap, fmt);
	vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
	va_end(ap);
	return code;
}

char *crun_strdup(const char *s)
{
	return s == NULL ? NULL : strdup(s);
}

int64_t crun_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t crun_now_ms(void)
{
	return crun_now_ns() / 1000000;
}

int64_t crun_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_port(const char *s, int *port)
{
	char *end;
	long v;

	if (*s == '\0') {
		return -EINVAL;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < 0 || v > 65535) {
		return -EINVAL;
	}
	*port = (int)v;
	return 0;
}

int crun_parse_hostport(const char *s, int default_port, char *host, size_t hostlen, int *port)
{
	const char *colon, *hend;
	size_t hl;

	if (s == NULL || *s == '\0') {
		return -EINVAL;
	}
	if (*s == '[') {
		hend = strchr(s, ']');
		if (hend == NULL) {
			return -EINVAL;
		}
		hl = (size_t)(hend - s - 1);
		if (hl == 0 || hl >= hostlen) {
			return -EINVAL;
		}
		memcpy(host, s + 1, hl);
		host[hl] = '\0';
		if (hend[1] == '\0') {
			if (default_port < 0) {
				return -EINVAL;
			}
			*port = default_port;
			return 0;
		}
		if (hend[1] != ':') {
			return -EINVAL;
		}
		return parse_port(hend + 2, port);
	}
	colon = strrchr(s, ':');
	if (colon != NULL && strchr(s, ':') != colon) {
		/* Bare IPv6 without brackets: only valid without a port. */
		colon = NULL;
		if (default_port < 0) {
			return -EINVAL;
		}
	}
	hl = colon ? (size_t)(colon - s) : strlen(s);
	if (hl == 0 || hl >= hostlen) {
		return -EINVAL;
	}
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (colon == NULL) {
		if (default_port < 0) {
			return -EINVAL;
		}
		*port = default_port;
		return 0;
	}
	return parse_port(colon + 1, port);
}
