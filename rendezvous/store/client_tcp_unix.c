/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_tcp_unix.c: a local endpoint's AF_UNIX socket (docs/security.md). */
/*
 * Before any byte is sent, the socket's server must be the user that owns its directory, and
 * that user this client's or root: a directory no one else can write (unix_path.h) holds only
 * sockets its owner made, and SO_PEERCRED says who listens. Nothing else changes: the
 * handshake, the token and TLS (when asked for) run over the socket as over TCP. Anything
 * missing or wrong is a debug line and TCP.
 */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rendezvous/store/client_tcp_internal.h"
#include "rendezvous/store/unix_path.h"
#include "src/common/log.h"

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family) {
		return false;
	}
	if (a->sa_family == AF_INET) {
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	}
	return a->sa_family == AF_INET6 &&
	       memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Loopback, or an address of this host's interfaces in this network namespace. */
static bool is_local(const struct sockaddr *sa)
{
	struct ifaddrs *ifs, *i;
	bool local = false;

	if (sa->sa_family == AF_INET &&
	    (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127) {
		return true;
	}
	if (sa->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr)) {
		return true;
	}
	if (getifaddrs(&ifs) < 0) {
		return false;
	}
	for (i = ifs; i != NULL && !local; i = i->ifa_next) {
		local = i->ifa_addr != NULL && same_addr(i->ifa_addr, sa);
	}
	freeifaddrs(ifs);
	return local;
}

/* The first reason a socket was not used: the one the fallback's debug line names. */
__attribute__((format(printf, 3, 4))) static void note_why(char *why, size_t len,
							   const char *fmt, ...)
{
	va_list ap;

	if (why[0] != '\0') {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

/* Connect to @path, whose directory @owner owns, and check who listens. 0, or -errno with the
 * reason in @why. */
static int try_path(struct store_backend *b, const char *path, uid_t owner, char *why,
		    size_t len)
{
	struct sockaddr_un sa;
	struct ucred cr;
	socklen_t n = sizeof(cr);
	int fd, rc;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	/* A local connect completes at once, or fails with EAGAIN when the listener's backlog
	 * is full (a flood): then TCP, never a wait. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		note_why(why, len, "%s: %s", path,
			 rc == -EAGAIN ? "its backlog is full" : strerror(-rc));
		goto err;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &n) < 0) {
		rc = -errno;
		note_why(why, len, "%s: SO_PEERCRED: %s", path, strerror(-rc));
		goto err;
	}
	if (cr.uid != owner) {
		rc = -EPERM;
		note_why(why, len, "%s: served by uid %u, not by its directory's owner %u", path,
			 (unsigned)cr.uid, (unsigned)owner);
		goto err;
	}
	/* Blocking from here on, as tcp_io_connect() leaves its socket. */
	rc = fcntl(fd, F_GETFL);
	if (rc < 0 || fcntl(fd, F_SETFL, rc & ~O_NONBLOCK) < 0) {
		rc = -errno;
		note_why(why, len, "%s: fcntl: %s", path, strerror(-rc));
		goto err;
	}
	b->fd = fd;
	b->rcvtimeo_ms = 0;
	snprintf(b->unix_path, sizeof(b->unix_path), "%s", path);
	return 0;
err:
	if (fd >= 0) {
		close(fd);
	}
	return rc;
}

/* @dir's owner, when it is this user or root and no one else can write it. */
static int trusted_dir(const char *dir, uid_t *owner, char *why, size_t len)
{
	int rc = store_unix_dir_check(dir, owner);

	if (rc == 0 && *owner != geteuid() && *owner != 0) {
		rc = -EPERM;
	}
	if (rc < 0) {
		note_why(why, len, "%s: %s", dir,
			 rc == -EPERM ? "not a directory only this user or root can write"
				      : strerror(-rc));
	}
	return rc;
}

/* The default sockets for @sa: this user's directory, then root's; the bound address's name,
 * then the wildcard's. */
static int try_defaults(struct store_backend *b, const struct sockaddr *sa, char *why,
			size_t len)
{
	struct sockaddr_storage any;
	char dirs[2][STORE_UNIX_PATH_MAX], path[STORE_UNIX_PATH_MAX + 16];
	const struct sockaddr *names[2] = {sa, (struct sockaddr *)&any};
	int ndirs, i, j, rc = -ENOENT;
	uid_t owner;

	memset(&any, 0, sizeof(any));
	any.ss_family = sa->sa_family;
	if (sa->sa_family == AF_INET) {
		((struct sockaddr_in *)&any)->sin_port = ((const struct sockaddr_in *)sa)->sin_port;
	} else {
		((struct sockaddr_in6 *)&any)->sin6_port =
			((const struct sockaddr_in6 *)sa)->sin6_port;
	}
	ndirs = store_unix_dir(dirs[0], sizeof(dirs[0])) == 0 ? 1 : 0;
	if (ndirs == 0 || strcmp(dirs[0], STORE_UNIX_ROOT_DIR) != 0) {
		snprintf(dirs[ndirs++], sizeof(dirs[0]), "%s", STORE_UNIX_ROOT_DIR);
	}
	for (i = 0; i < ndirs; i++) {
		if (trusted_dir(dirs[i], &owner, why, len) < 0) {
			continue;
		}
		for (j = 0; j < 2; j++) {
			if (store_unix_path(dirs[i], names[j], path, sizeof(path)) == 0 &&
			    (rc = try_path(b, path, owner, why, len)) == 0) {
				return 0;
			}
		}
	}
	return rc;
}

int tcp_unix_connect(struct store_backend *b, const struct addrinfo *res, int64_t deadline)
{
	const struct addrinfo *ai;
	char why[400], dir[STORE_UNIX_PATH_MAX], *slash;
	uid_t owner;
	int rc = -ENOENT;

	(void)deadline; /* a local connect answers at once (try_path()) */
	b->unix_path[0] = '\0';
	snprintf(why, sizeof(why), "the endpoint is not an address of this host");
	for (ai = res; ai != NULL && !b->unix_off && rc < 0; ai = ai->ai_next) {
		if (!is_local(ai->ai_addr)) {
			continue;
		}
		if (strncmp(why, "the endpoint", 12) == 0) {
			why[0] = '\0';
		}
		if (b->unix_given[0] == '\0') {
			rc = try_defaults(b, ai->ai_addr, why, sizeof(why));
			continue;
		}
		snprintf(dir, sizeof(dir), "%s", b->unix_given);
		slash = strrchr(dir, '/');
		*(slash == dir ? slash + 1 : slash) = '\0';
		rc = trusted_dir(dir, &owner, why, sizeof(why));
		if (rc == 0) {
			rc = try_path(b, b->unix_given, owner, why, sizeof(why));
		}
	}
	if (rc == 0) {
		log_debug("%s: connected over its unix socket %s", b->where, b->unix_path);
	} else if (!b->unix_off) {
		log_debug("%s: over TCP (no unix socket: %s)", b->where, why);
	}
	return rc == 0 ? 0 : -ENOENT;
}
