/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_unix.c: same-host clients over an AF_UNIX socket (docs/security.md). */
/*
 * The socket is one more listener of the same server: its connections are served exactly as
 * TCP ones (handshake, token, TLS when configured, every limit), and count as loopback for
 * the per-address and pre-authentication quotas, so a local user gains nothing by using it.
 * Where it lives and why: rendezvous/store/unix_path.h. A lock file beside it, held for the
 * server's life, says which server owns the path: a socket left by a killed server (its lock
 * released by the kernel) is replaced; one a live server holds is left alone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/unix_path.h"
#include "src/common/log.h"

/* Create @dir (0755 for root's /run/crun, which other users' clients may enter; 0700 for a
 * user's) when missing, then check no one but this user can write it. */
static int make_dir(const char *dir, bool create, char *why, size_t len)
{
	uid_t owner;
	int rc;

	if (create && mkdir(dir, geteuid() == 0 ? 0755 : 0700) < 0 && errno != EEXIST) {
		snprintf(why, len, "cannot create %s: %s", dir, strerror(errno));
		return -errno;
	}
	rc = store_unix_dir_check(dir, &owner);
	if (rc == 0 && owner != geteuid()) {
		rc = -EPERM;
	}
	if (rc < 0) {
		snprintf(why, len, "%s: %s", dir,
			 rc == -EPERM ? "not a directory only this user can write"
				      : strerror(-rc));
	}
	return rc;
}

/* The lock beside @path, held exclusively: -EWOULDBLOCK when a live server holds it. The
 * file's inode is checked after locking: a lock taken on a file another server was removing
 * at its close would not exclude anyone. */
static int take_lock(const char *path, int *fd_out)
{
	char lock[sizeof(((struct store_server *)0)->unix_path) + 8];
	struct stat a, b;
	int fd, tries;

	snprintf(lock, sizeof(lock), "%s.lock", path);
	for (tries = 0; tries < 3; tries++) {
		fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0) {
			return -errno;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int rc = -errno;

			close(fd);
			return rc;
		}
		if (fstat(fd, &a) == 0 && lstat(lock, &b) == 0 && a.st_ino == b.st_ino) {
			*fd_out = fd;
			return 0;
		}
		close(fd);
	}
	return -EAGAIN;
}

/*
 * Remove what killed servers left in @dir: every "store-*.sock.lock" whose lock is free,
 * and its socket. Their files would otherwise stay until reboot, one pair per port a killed
 * agent used. A server starting on one of those paths at this very moment finds the lock
 * held and serves TCP only (said in its log).
 */
static void sweep_stale(const char *dir, const char *own)
{
	char path[STORE_UNIX_PATH_MAX + 8];
	struct dirent *e;
	size_t n;
	DIR *d = opendir(dir);
	int fd;

	if (d == NULL) {
		return;
	}
	while ((e = readdir(d)) != NULL) {
		n = strlen(e->d_name);
		if (strncmp(e->d_name, "store-", 6) != 0 || n < 11 ||
		    strcmp(e->d_name + n - 10, ".sock.lock") != 0 ||
		    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path)) {
			continue;
		}
		path[strlen(path) - 5] = '\0'; /* the socket's path */
		if (strcmp(path, own) == 0 || take_lock(path, &fd) < 0) {
			continue;
		}
		unlink(path);
		log_debug("store: removed %s, left by a server that is gone", path);
		strcat(path, ".lock");
		unlink(path);
		close(fd);
	}
	closedir(d);
}

/* Bind and listen on @path (any stale socket there removed first: we hold its lock). */
static int bind_path(const char *path, int *fd_out)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		return -EEXIST; /* not ours to remove */
	}
	unlink(path);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		return -errno;
	}
	/* Anyone who can reach the directory may connect: the handshake's token decides, as
	 * over TCP. */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0 ||
	    listen(fd, 4096) < 0) {
		rc = -errno;
		close(fd);
		unlink(path);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

/* Where the socket goes: the path given, or the default one for the bound address. */
static int choose_path(struct store_server *s, const char *given, char *why, size_t len)
{
	struct sockaddr_storage ss;
	char dir[sizeof(s->unix_path)], *slash;
	int n = sizeof(ss), rc;

	if (given[0] != '\0') {
		if (given[0] != '/' || strlen(given) >= STORE_UNIX_PATH_MAX) {
			snprintf(why, len, "%s: expected an absolute path under %d bytes", given,
				 STORE_UNIX_PATH_MAX);
			return -EINVAL;
		}
		snprintf(s->unix_path, sizeof(s->unix_path), "%s", given);
		snprintf(dir, sizeof(dir), "%s", given);
		slash = strrchr(dir, '/');
		*(slash == dir ? slash + 1 : slash) = '\0';
		return make_dir(dir, false, why, len);
	}
	rc = store_unix_dir(dir, sizeof(dir));
	if (rc == 0) {
		rc = make_dir(dir, true, why, len);
		if (rc < 0) {
			return rc;
		}
	}
	if (rc == 0 && (rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &n)) == 0) {
		rc = store_unix_path(dir, (struct sockaddr *)&ss, s->unix_path,
				     sizeof(s->unix_path));
	}
	if (rc == 0) {
		sweep_stale(dir, s->unix_path);
	}
	if (rc < 0) {
		snprintf(why, len, "no path for it in %s: %s", dir, strerror(-rc));
	}
	return rc;
}

int srv_unix_start(struct store_server *s, const struct store_server_opts *o,
		   struct crun_diag *d)
{
	char why[300];
	int fd = -1, rc;

	s->unix_lock = -1;
	if (o->unix_socket == NULL) {
		return 0;
	}
	rc = choose_path(s, o->unix_socket, why, sizeof(why));
	if (rc == 0) {
		rc = take_lock(s->unix_path, &s->unix_lock);
		snprintf(why, sizeof(why), "%s: %s", s->unix_path,
			 rc == -EWOULDBLOCK ? "served by another live store"
					    : strerror(-rc));
	}
	if (rc == 0 && (rc = bind_path(s->unix_path, &fd)) < 0) {
		snprintf(why, sizeof(why), "%s: %s", s->unix_path,
			 rc == -EEXIST ? "exists and is not a socket" : strerror(-rc));
	}
	if (rc == 0) {
		uv_pipe_init(s->loop, &s->unix_listener, 0);
		s->unix_listener.data = s;
		s->unix_on = true;
		s->refs++;
		rc = uv_pipe_open(&s->unix_listener, fd);
		if (rc == 0) {
			rc = uv_listen((uv_stream_t *)&s->unix_listener, 4096, srv_on_connection);
		} else {
			close(fd);
		}
		/* strerror, not uv_strerror: libuv's errors are -errno here, and uv_strerror
		 * allocates (and never frees) the text of a code it does not know, 0 included. */
		snprintf(why, sizeof(why), "%s: %s", s->unix_path, strerror(-rc));
	}
	if (rc == 0) {
		log_debug("store %s: same-host clients also on %s", s->addr, s->unix_path);
		return 0;
	}
	if (o->unix_socket[0] != '\0') {
		return diag_set(d, rc, "store: unix socket %s", why);
	}
	/* The default path: TCP serves everyone meanwhile. */
	log_info("store %s: no unix socket for same-host clients (%s); they use TCP", s->addr,
		 why);
	return 0;
}

void srv_unix_close(struct store_server *s, uv_close_cb on_closed)
{
	char lock[sizeof(s->unix_path) + 8];

	if (s->unix_on) {
		unlink(s->unix_path);
		uv_close((uv_handle_t *)&s->unix_listener, on_closed);
		s->unix_on = false;
	}
	if (s->unix_lock >= 0) {
		/* Removed while held: a server starting now re-checks the inode it locked. */
		snprintf(lock, sizeof(lock), "%s.lock", s->unix_path);
		unlink(lock);
		close(s->unix_lock);
		s->unix_lock = -1;
	}
}

int srv_conn_peername(struct conn *c, struct sockaddr_storage *ss, int *n)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	int len = sizeof(c->peer_sa), rc;

	if (!srv_conn_is_unix(c)) {
		/* Asked once: the limits, the pre-auth quotas and the handshake guard all key on
		 * it, and it does not change while the connection lives. */
		if (c->peer_len == 0) {
			rc = uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->peer_sa, &len);
			if (rc != 0) {
				return rc;
			}
			c->peer_len = (uint8_t)len;
		}
		if (*n < (int)c->peer_len) {
			return UV_EINVAL;
		}
		memcpy(ss, &c->peer_sa, c->peer_len);
		*n = c->peer_len;
		return 0;
	}
	memset(ss, 0, sizeof(*ss));
	in->sin_family = AF_INET;
	in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*n = sizeof(*in);
	return 0;
}

/* Who is at the other end of unix connection @c (SO_PEERCRED): 0, or -1 when unknown. */
static int unix_cred(struct conn *c, struct ucred *cr)
{
	socklen_t n = sizeof(*cr);
	uv_os_fd_t fd;

	return uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
			       getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &n) == 0
		       ? 0
		       : -1;
}

int srv_unix_uid(struct conn *c, uid_t *uid)
{
	struct ucred cr;

	if (unix_cred(c, &cr) != 0) {
		return -1;
	}
	*uid = cr.uid;
	return 0;
}

void srv_unix_peer(struct conn *c, char *buf, size_t len)
{
	struct ucred cr;

	if (unix_cred(c, &cr) == 0) {
		snprintf(buf, len, "unix:uid=%u,pid=%d", (unsigned)cr.uid, (int)cr.pid);
	} else {
		snprintf(buf, len, "unix:?");
	}
}
