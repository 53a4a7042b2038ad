/* SPDX-License-Identifier: MIT */
/* src/common/util.c: crun_strdup and util_random. */
#include <errno.h>
#include <stdio.h>
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

long util_status_field(const char *path, const char *name)
{
	size_t len = strlen(name);
	char line[256];
	long v = -1;
	FILE *f;

	f = fopen(path, "r");
	if (f == NULL) {
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, name, len) == 0 && line[len] == ':') {
			if (sscanf(line + len + 1, "%ld", &v) != 1) {
				v = -1;
			}
			break;
		}
	}
	fclose(f);
	return v;
}

long util_rss_kib(int pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	return util_status_field(path, "VmRSS");
}
