/* SPDX-License-Identifier: MIT */
/* rendezvous/store/unix_path.c: where a store's AF_UNIX socket lives (unix_path.h). */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "rendezvous/store/unix_path.h"

bool store_unix_off(const char *setting)
{
	return setting != NULL && strcmp(setting, "off") == 0;
}

int store_unix_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (geteuid() == 0) {
		n = snprintf(buf, len, "%s", STORE_UNIX_ROOT_DIR);
	} else if (xdg != NULL && xdg[0] == '/') {
		n = snprintf(buf, len, "%s/crun", xdg);
	} else {
		n = snprintf(buf, len, "/tmp/crun-%u", (unsigned)geteuid());
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* "any" ("any6": IPv6's, which serves IPv6 alone) for a wildcard address, else the address
 * as text. */
static void addr_name(const struct sockaddr *sa, char *buf, size_t len)
{
	static const struct in6_addr any6 = IN6ADDR_ANY_INIT;

	snprintf(buf, len, sa->sa_family == AF_INET6 ? "any6" : "any");
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)sa;

		if (a->sin_addr.s_addr != htonl(INADDR_ANY)) {
			inet_ntop(AF_INET, &a->sin_addr, buf, (socklen_t)len);
		}
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;

		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
			inet_ntop(AF_INET, a->sin6_addr.s6_addr + 12, buf, (socklen_t)len);
		} else if (memcmp(&a->sin6_addr, &any6, sizeof(any6)) != 0) {
			inet_ntop(AF_INET6, &a->sin6_addr, buf, (socklen_t)len);
		}
	}
}

int store_unix_path(const char *dir, const struct sockaddr *sa, char *buf, size_t len)
{
	struct stat st;
	char addr[64];
	int n, port;

	/* Ports are per network namespace, the file system is not. */
	if (stat("/proc/self/ns/net", &st) < 0) {
		return -errno;
	}
	if (sa->sa_family == AF_INET) {
		port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	} else {
		return -EAFNOSUPPORT;
	}
	addr_name(sa, addr, sizeof(addr));
	n = snprintf(buf, len, "%s/store-%llu-%s-%d.sock", dir, (unsigned long long)st.st_ino,
		     addr, port);
	if (n < 0 || (size_t)n >= len || (size_t)n >= STORE_UNIX_PATH_MAX) {
		return -ENAMETOOLONG;
	}
	return 0;
}

int store_unix_dir_check(const char *dir, uid_t *owner)
{
	struct stat st;

	if (lstat(dir, &st) < 0) {
		return -errno;
	}
	if (!S_ISDIR(st.st_mode) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
		return -EPERM;
	}
	*owner = st.st_uid;
	return 0;
}
