/* SPDX-License-Identifier: MIT */
/* tests/store/helpers.c: start a real crun-rdzvd, speak raw frames to it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "src/common/clock.h"
#include "src/common/util.h"
#include "src/common/net.h"
#include "src/common/token.h"
#include "tests/store/helpers.h"

static const char *rdzvd_path(void)
{
	const char *p = getenv("CRUN_RDZVD");

	return p != NULL ? p : "crun-rdzvd";
}

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static pid_t spawn(const char *const *args, const char *listen, int out_fd, int err_fd)
{
	const char *argv[32];
	size_t n = 0, i;
	bool chosen = false; /* the args say how to authenticate */
	pid_t pid;

	argv[n++] = rdzvd_path();
	if (listen != NULL) {
		argv[n++] = "--listen";
		argv[n++] = listen;
	}
	for (i = 0; args != NULL && args[i] != NULL && n < 30; i++) {
		argv[n++] = args[i];
		if (strncmp(args[i], "--token", 7) == 0 || strcmp(args[i], "--insecure") == 0) {
			chosen = true;
		}
	}
	/* Authentication is on by default; the clients here carry no token unless told. */
	if (!chosen && getenv("CRUN_STORE_TOKEN") == NULL && n < 31) {
		argv[n++] = "--insecure";
	}
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) {
		if (out_fd >= 0) {
			dup2(out_fd, 1);
		}
		if (err_fd >= 0) {
			dup2(err_fd, 2);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

int daemon_start(struct daemon *d, const char *const *args)
{
	return daemon_start_at(d, args, 0);
}

int port_hold(int *fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int one = 1;

	*fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(*fd >= 0);
	assert_int_equal(setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &al), 0);
	return ntohs(a.sin_port);
}

int daemon_start_at(struct daemon *d, const char *const *args, int port)
{
	struct pollfd p;
	int pfd[2], rc;
	size_t len = 0;
	ssize_t k;
	char host[64], listen[32];

	memset(d, 0, sizeof(*d));
	d->pidfd = -1;
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		return -errno;
	}
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	d->pid = spawn(args, listen, pfd[1], -1);
	close(pfd[1]);
	if (d->pid < 0) {
		close(pfd[0]);
		return -errno;
	}
	d->pidfd = pidfd_open_(d->pid);
	/* The first stdout line is the bound address. */
	while (len < sizeof(d->addr) - 1 && memchr(d->addr, '\n', len) == NULL) {
		p.fd = pfd[0];
		p.events = POLLIN;
		rc = poll(&p, 1, IO_TIMEOUT_MS);
		if (rc <= 0) {
			break;
		}
		k = read(pfd[0], d->addr + len, sizeof(d->addr) - 1 - len);
		if (k <= 0) {
			break;
		}
		len += (size_t)k;
	}
	close(pfd[0]);
	d->addr[len] = '\0';
	d->addr[strcspn(d->addr, "\n")] = '\0';
	if (net_parse_hostport(d->addr, -1, host, sizeof(host), &d->port) < 0 || d->port == 0) {
		daemon_stop(d, SIGKILL);
		return -EPROTO;
	}
	return 0;
}

static int reap(pid_t pid, int pidfd, int timeout_ms)
{
	struct pollfd p;
	int status;

	if (pidfd >= 0) {
		p.fd = pidfd;
		p.events = POLLIN;
		if (poll(&p, 1, timeout_ms) <= 0) {
			return -1;
		}
	}
	if (waitpid(pid, &status, 0) != pid) {
		return -1;
	}
	return status;
}

int daemon_stop(struct daemon *d, int sig)
{
	int status;

	if (d->pid <= 0) {
		return -1;
	}
	kill(d->pid, sig);
	status = reap(d->pid, d->pidfd, IO_TIMEOUT_MS);
	if (status == -1) {
		kill(d->pid, SIGKILL);
		reap(d->pid, d->pidfd, IO_TIMEOUT_MS);
	}
	if (d->pidfd >= 0) {
		close(d->pidfd);
	}
	d->pid = 0;
	d->pidfd = -1;
	return status;
}

int daemon_run(const char *const *args, char *err, size_t errlen)
{
	int efd[2], pidfd, status;
	size_t len = 0;
	ssize_t k;
	pid_t pid;

	if (pipe2(efd, O_CLOEXEC) < 0) {
		return -1;
	}
	pid = spawn(args, NULL, -1, efd[1]);
	close(efd[1]);
	pidfd = pidfd_open_(pid);
	while (err != NULL && len + 1 < errlen) {
		struct pollfd p = {efd[0], POLLIN, 0};

		if (poll(&p, 1, IO_TIMEOUT_MS) <= 0) {
			break;
		}
		k = read(efd[0], err + len, errlen - 1 - len);
		if (k <= 0) {
			break;
		}
		len += (size_t)k;
	}
	if (err != NULL && errlen > 0) {
		err[len] = '\0';
	}
	close(efd[0]);
	status = reap(pid, pidfd, IO_TIMEOUT_MS);
	if (status == -1) {
		kill(pid, SIGKILL);
		reap(pid, pidfd, IO_TIMEOUT_MS);
	}
	if (pidfd >= 0) {
		close(pidfd);
	}
	return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

long rss_kib(pid_t pid)
{
	return util_rss_kib((int)pid);
}

char task_state(pid_t pid, pid_t tid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	f = fopen(path, "r");
	if (f == NULL) {
		return '?';
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' ? p[2] : '?';
}

int raw_connect(int port)
{
	struct sockaddr_in a;
	struct timeval tv = {IO_TIMEOUT_MS / 1000, 0};
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -errno;
	}
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

int raw_send(int fd, const void *p, size_t n)
{
	const uint8_t *q = p;
	ssize_t k;

	while (n > 0) {
		k = send(fd, q, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			return -errno;
		}
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

int raw_frame(int fd, uint8_t op, uint32_t id, const void *payload, size_t plen)
{
	struct wire_buf b = {0};
	size_t off;
	int rc;

	off = wire_frame_begin(&b, op, 0, 0, id);
	wire_put_raw(&b, payload, plen);
	wire_frame_end(&b, off);
	rc = raw_send(fd, b.p, b.len);
	wire_buf_finish(&b);
	return rc;
}

static int recv_all(int fd, uint8_t *p, size_t n)
{
	ssize_t k;

	while (n > 0) {
		k = recv(fd, p, n, 0);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k == 0) {
			return -ECONNRESET;
		}
		if (k < 0) {
			return -errno;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int raw_read(int fd, struct wire_hdr *h, uint8_t *buf, size_t cap)
{
	uint8_t hdr[WIRE_HDR_LEN];
	int rc;

	rc = recv_all(fd, hdr, sizeof(hdr));
	if (rc < 0) {
		return rc;
	}
	if (wire_hdr_decode(hdr, WIRE_MAX_FRAME, h) < 0 || h->len - 8 + 1 > cap) {
		return -EMSGSIZE;
	}
	rc = recv_all(fd, buf, h->len - 8);
	if (rc < 0) {
		return rc;
	}
	buf[h->len - 8] = '\0';
	return 0;
}

int raw_handshake(int fd, const char *token, const char *scope, uint16_t *status, char *msg,
		  size_t len)
{
	uint8_t cn[TOKEN_NONCE_LEN], proof[TOKEN_KEY_LEN], buf[1024];
	struct token_cred cred = {0};
	struct wire_buf b = {0};
	struct wire_cur c;
	struct wire_str sn, theirs;
	struct wire_hdr h;
	uint16_t auth;
	int rc;

	if (token != NULL &&
	    (token_cred_from_token(&cred, token, scope, "test", NULL) < 0 ||
	     util_random(cn, sizeof(cn)) < 0)) {
		return -EINVAL;
	}
	wire_put_u32(&b, WIRE_MAGIC);
	wire_put_u16(&b, WIRE_VERSION);
	wire_put_u16(&b, 0);
	wire_put_bytes(&b, cn, token != NULL ? sizeof(cn) : 0);
	wire_put_bytes(&b, scope, scope != NULL ? strlen(scope) : 0);
	rc = raw_frame(fd, WIRE_OP_HELLO, 1, b.p, b.len);
	wire_buf_finish(&b);
	if (rc == 0) {
		rc = raw_read(fd, &h, buf, sizeof(buf));
	}
	if (rc < 0) {
		return rc;
	}
	if (h.op != WIRE_OP_HELLO || h.id != 1) {
		return -EPROTO;
	}
	if (h.status != WIRE_OK) {
		goto refused;
	}
	c = (struct wire_cur){buf, buf + h.len - 8, false};
	(void)wire_get_u16(&c);
	auth = wire_get_u16(&c);
	sn = wire_get_bytes(&c);
	if (c.bad) {
		return -EPROTO;
	}
	if (auth == WIRE_AUTH_NONE) {
		return token == NULL ? 0 : -EPROTO;
	}
	if (token == NULL || sn.len != TOKEN_NONCE_LEN) {
		return -EPROTO;
	}
	token_proof(cred.key, sn.p, cn, TOKEN_ROLE_CLIENT, proof);
	wire_put_bytes(&b, proof, sizeof(proof));
	rc = raw_frame(fd, WIRE_OP_AUTH, 2, b.p, b.len);
	wire_buf_finish(&b);
	if (rc == 0) {
		rc = raw_read(fd, &h, buf + 512, 512);
	}
	if (rc < 0) {
		return rc;
	}
	if (h.op != WIRE_OP_AUTH || h.id != 2) {
		return -EPROTO;
	}
	if (h.status != WIRE_OK) {
		memmove(buf, buf + 512, 512);
		goto refused;
	}
	c = (struct wire_cur){buf + 512, buf + 512 + h.len - 8, false};
	theirs = wire_get_bytes(&c);
	token_proof(cred.key, sn.p, cn, TOKEN_ROLE_SERVER, proof);
	if (c.bad || theirs.len != TOKEN_KEY_LEN || !token_equal(proof, theirs.p, sizeof(proof))) {
		return -EPROTO;
	}
	return 0;
refused:
	if (status != NULL) {
		*status = h.status;
	}
	if (msg != NULL) {
		snprintf(msg, len, "%s", (const char *)buf);
	}
	return -EACCES;
}

int raw_hello(int fd, const char *token)
{
	return raw_handshake(fd, token, NULL, NULL, NULL, 0);
}

void raw_hello_unproved(int fd)
{
	struct wire_buf b = {0};
	struct wire_hdr h;
	uint8_t buf[256];

	wire_put_u32(&b, WIRE_MAGIC);
	wire_put_u16(&b, WIRE_VERSION);
	wire_put_u16(&b, 0);
	wire_put_u32(&b, 0);
	wire_put_u32(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_HELLO, 1, b.p, b.len), 0);
	wire_buf_finish(&b);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.status, WIRE_OK);
}

void raw_expect_error(int fd, uint8_t op, uint32_t id, uint16_t status, const char *msg)
{
	struct wire_hdr h;
	uint8_t buf[1024];

	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.flags, WIRE_FLAG_REPLY);
	assert_int_equal(h.status, status);
	assert_int_equal(h.op, op);
	assert_int_equal(h.id, id);
	assert_string_equal((const char *)buf, msg);
}

void raw_expect_closed(int fd)
{
	uint8_t b[4096];
	ssize_t k;

	do {
		k = recv(fd, b, sizeof(b), 0);
	} while (k > 0 || (k < 0 && errno == EINTR));
	/* EOF, or a reset; a timeout (EAGAIN) means the server kept the connection open. */
	assert_true(k == 0 || errno == ECONNRESET);
}

void raw_close_seen(int fd)
{
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	raw_expect_closed(fd);
	close(fd);
}

/* A line of /proc/net/tcp: "sl: LOCAL REMOTE ST ...", addresses as hex IPv4:port. */
static bool close_wait_to(int port)
{
	char line[512];
	unsigned rem_ip, rem_port, st;
	bool found = false;
	FILE *f = fopen("/proc/net/tcp", "re");

	assert_non_null(f);
	while (!found && fgets(line, sizeof(line), f) != NULL) {
		found = sscanf(line, " %*u: %*x:%*x %x:%x %x", &rem_ip, &rem_port, &st) == 3 &&
			rem_ip == htonl(INADDR_LOOPBACK) && rem_port == (unsigned)port &&
			st == 0x08; /* TCP_CLOSE_WAIT */
	}
	fclose(f);
	return found;
}

bool server_closed_a_conn(int port, int timeout_ms)
{
	int64_t end = crun_now_ms() + timeout_ms;

	while (!close_wait_to(port)) {
		if (crun_now_ms() >= end) {
			return false;
		}
		usleep(20 * 1000); /* polling a condition, bounded by @end */
	}
	return true;
}

void raw_expect_served(int port)
{
	raw_expect_served_with(port, NULL);
}

void raw_expect_served_with(int port, const char *token)
{
	struct wire_hdr h;
	uint8_t buf[64];
	int fd = raw_connect(port);

	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, token), 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_PING, 77, NULL, 0), 0);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.op, WIRE_OP_PING);
	assert_int_equal(h.id, 77);
	assert_int_equal(h.status, WIRE_OK);
	close(fd);
}
