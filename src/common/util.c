/* SPDX-License-Identifier: MIT */
/* src/common/util.c: crun_strdup and util_random. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "src/common/util.h"

char *crun_strdup(const char *s)
{
	return s == NULL ? NULL : strdup(s);
}

int util_random(void *buf, size_t n)
{
	unsigned char *p = buf;
	ssize_t got;

	while (n > 0) {
		got = getrandom(p, n, 0);
		if (got < 0 && errno == EINTR) {
			continue;
		}
		if (got <= 0) {
			return -EIO;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}
