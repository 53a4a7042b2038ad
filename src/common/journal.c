/* SPDX-License-Identifier: MIT */
/*
 * src/common/journal.c: journald's native protocol, written here rather than through
 * libsystemd's sd_journal_send(3): what we need is one datagram of "NAME=value\n" lines
 * (MESSAGE in the length-prefixed form, so any byte is kept), about 100 lines, while
 * libsystemd-dev is not installed on the build hosts (Debian 12 carries it, but it would be one
 * more optional dependency, one more build variant to test, and a library that pulls in
 * liblzma, libzstd, liblz4, libgcrypt and libcap into crun-rdzvd and every agent).
 * The protocol: https://systemd.io/JOURNAL_NATIVE_PROTOCOL/
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/common/journal.h"

struct field {
	char name[32];
	char value[256];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct field fields[JOURNAL_MAX_FIELDS];
static int nfields;
static int sock = -1;
static int sock_err;
static pthread_once_t sock_once = PTHREAD_ONCE_INIT;

static void sock_open(void)
{
	sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	sock_err = sock < 0 ? -errno : 0;
}

bool journal_stream_is(int fd)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	int end = 0;

	if (e == NULL || sscanf(e, "%llu:%llu%n", &dev, &ino, &end) != 2 || e[end] != '\0') {
		return false;
	}
	if (fstat(fd, &st) != 0) {
		return false;
	}
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* journald keeps a field whose name is [A-Z0-9_], not starting with '_' (trusted) or a digit. */
static bool name_ok(const char *name)
{
	size_t i, n = strlen(name);

	if (n == 0 || n >= sizeof(fields[0].name) || name[0] == '_' ||
	    (name[0] >= '0' && name[0] <= '9')) {
		return false;
	}
	for (i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) {
			return false;
		}
	}
	return true;
}

int journal_set_field(const char *name, const char *value)
{
	int i, rc = 0;

	if (!name_ok(name) || (value != NULL && (strchr(value, '\n') != NULL ||
						 strlen(value) >= sizeof(fields[0].value)))) {
		return -EINVAL;
	}
	pthread_mutex_lock(&mu);
	for (i = 0; i < nfields && strcmp(fields[i].name, name) != 0; i++) {
	}
	if (value == NULL) {
		if (i < nfields) {
			fields[i] = fields[--nfields];
		}
	} else if (i == nfields && nfields == JOURNAL_MAX_FIELDS) {
		rc = -ENOSPC;
	} else {
		if (i == nfields) {
			nfields++;
		}
		snprintf(fields[i].name, sizeof(fields[i].name), "%s", name);
		snprintf(fields[i].value, sizeof(fields[i].value), "%s", value);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

/* Appends @n bytes at *@off; false when @cap would be passed. */
static bool put(char *buf, size_t cap, size_t *off, const void *p, size_t n)
{
	if (n > cap - *off) {
		return false;
	}
	memcpy(buf + *off, p, n);
	*off += n;
	return true;
}

int journal_send(int prio, const char *ident, const char *msg, size_t len, const char *extra)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char buf[8192], head[320];
	uint64_t le = 0;
	size_t off = 0;
	bool ok;
	int i, k;

	pthread_once(&sock_once, sock_open);
	if (sock < 0) {
		return sock_err;
	}
	/* MESSAGE in the binary form: "MESSAGE\n", its length (64-bit little-endian), the bytes. */
	for (i = 0; i < 8; i++) {
		((unsigned char *)&le)[i] = (unsigned char)((uint64_t)len >> (8 * i));
	}
	k = snprintf(head, sizeof(head), "PRIORITY=%d\nSYSLOG_IDENTIFIER=%s\n", prio, ident);
	ok = k > 0 && (size_t)k < sizeof(head) && put(buf, sizeof(buf), &off, head, (size_t)k) &&
	     put(buf, sizeof(buf), &off, "MESSAGE\n", 8) && put(buf, sizeof(buf), &off, &le, 8) &&
	     put(buf, sizeof(buf), &off, msg, len) && put(buf, sizeof(buf), &off, "\n", 1);
	pthread_mutex_lock(&mu);
	for (i = 0; ok && i < nfields; i++) {
		k = snprintf(head, sizeof(head), "%s=%s\n", fields[i].name, fields[i].value);
		ok = k > 0 && (size_t)k < sizeof(head) && put(buf, sizeof(buf), &off, head, (size_t)k);
	}
	pthread_mutex_unlock(&mu);
	if (ok && extra != NULL) {
		ok = put(buf, sizeof(buf), &off, extra, strlen(extra));
	}
	if (!ok) {
		return -EMSGSIZE;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", JOURNAL_SOCKET);
	if (sendto(sock, buf, off, MSG_NOSIGNAL, (const struct sockaddr *)&sa, sizeof(sa)) < 0) {
		return -errno;
	}
	return 0;
}
