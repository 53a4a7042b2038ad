/* SPDX-License-Identifier: MIT */
/* src/common/diag.c: fill, prefix and copy out a struct crun_diag. */
#include <stdio.h>
#include <string.h>

#include "src/common/diag.h"

int diag_setv(struct crun_diag *d, int code, const char *fmt, va_list ap)
{
	if (d == NULL) {
		return code;
	}
	d->code = code;
	vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
	return code;
}

int diag_set(struct crun_diag *d, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	diag_setv(d, code, fmt, ap);
	va_end(ap);
	return code;
}

int diag_set_first(struct crun_diag *d, int code, const char *fmt, ...)
{
	va_list ap;

	if (d == NULL) {
		return code;
	}
	if (d->code != 0) {
		return d->code;
	}
	va_start(ap, fmt);
	diag_setv(d, code, fmt, ap);
	va_end(ap);
	return code;
}

int diag_prefix(struct crun_diag *d, const char *fmt, ...)
{
	char old[sizeof(d->msg)];
	va_list ap;
	int n;

	if (d == NULL) {
		return 0;
	}
	memcpy(old, d->msg, sizeof(old));
	va_start(ap, fmt);
	n = vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(d->msg)) {
		/* The old message loses its end when both do not fit; looking at the count tells
		 * GCC the cut is meant (-Wformat-truncation fails -O0 -Werror builds otherwise). */
		if (snprintf(d->msg + n, sizeof(d->msg) - (size_t)n, ": %s", old) < 0) {
			d->msg[n] = '\0';
		}
	}
	return d->code;
}

void diag_clear(struct crun_diag *d)
{
	if (d != NULL) {
		d->code = 0;
		d->msg[0] = '\0';
	}
}

int diag_copy_out(const struct crun_diag *d, char *buf, size_t len)
{
	if (buf != NULL && len > 0) {
		snprintf(buf, len, "%s", d->msg);
	}
	return d->code;
}
