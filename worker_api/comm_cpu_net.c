/* SPDX-License-Identifier: MIT */
/* worker_api/comm_cpu_net.c: the cpu backend's transport: listen, connect, hello, addresses. */
#include <errno.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/byteorder.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/fnv.h"
#include "src/common/log.h"
#include "src/common/net.h"
#include "src/common/parse.h"
#include "worker_api/comm_cpu_internal.h"

/*
 * The address to listen on: CRUN_COMM_ADDR if set; else the local address the kernel would use
 * to reach MASTER_ADDR (a UDP connect sends nothing); else 127.0.0.1.
 */
static int local_addr(struct crun_comm *c, struct sockaddr_storage *ss, socklen_t *sl)
{
	const char *env = getenv("CRUN_COMM_ADDR"), *master = getenv("MASTER_ADDR");
	char src[NET_ADDRSTRLEN];
	int rc;

	if (env != NULL && *env != '\0') {
		rc = net_resolve(env, 0, false, ss, sl);
		if (rc < 0) {
			return diag_set(
				&c->diag, CRUN_ECONFIG,
				"comm %s: CRUN_COMM_ADDR \"%s\": does not resolve to an address",
				c->name, env);
		}
		return 0;
	}
	if (master != NULL && *master != '\0') {
		if (net_route_source(master, src, sizeof(src)) == 0 &&
		    net_resolve(src, 0, true, ss, sl) == 0) {
			return 0;
		}
		log_warn("comm %s: no route to MASTER_ADDR %s; listening on 127.0.0.1", c->name,
			 master);
	}
	return net_resolve("127.0.0.1", 0, true, ss, sl);
}

static void tune(int fd)
{
	const char *env = getenv("CRUN_COMM_SOCKBUF");
	int one = 1, sz = CPU_SOCKBUF;

	/* CRUN_COMM_SOCKBUF: bytes; anything that is not a size keeps the default, said once. */
	if (env != NULL && parse_int(env, 0, INT32_MAX, &sz) != 0) {
		static atomic_bool warned;

		sz = CPU_SOCKBUF;
		if (!atomic_exchange(&warned, true)) {
			log_warn("comm: CRUN_COMM_SOCKBUF=\"%.32s\" is not a byte count in [0, %d]; "
				 "using the default",
				 env, INT32_MAX);
		}
	}
	/*
	 * 0 keeps the kernel's autotuning. Measured on loopback (2 ranks, 64-256 MiB): fixed
	 * 4 MiB buffers gave 0.75 GB/s, 1 MiB 0.93, autotuning 1.3; large fixed buffers push the
	 * data out of cache between the two copies. Autotuning also grows to the kernel's
	 * maximum (tcp_rmem) on a long, fast network path.
	 */
	if (sz > 0) {
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int cpu_sock_full(int fd, void *buf, size_t len, bool out, int64_t deadline)
{
	char *b = buf;

	while (len > 0) {
		struct pollfd pf = {.fd = fd, .events = out ? POLLOUT : POLLIN};
		ssize_t n;

		n = out ? send(fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, b, len, 0);
		if (n == 0 && !out) {
			return -ECONNRESET;
		}
		if (n > 0) {
			b += n;
			len -= (size_t)n;
			continue;
		}
		if (errno != EAGAIN && errno != EINTR) {
			return errno == EPIPE ? -ECONNRESET : -errno;
		}
		if (crun_ms_until(deadline) == 0) {
			return -ETIMEDOUT;
		}
		if (poll(&pf, 1, crun_ms_until(deadline)) < 0 && errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

static void make_hello(const struct crun_comm *c, uint8_t *h, int kind)
{
	memset(h, 0, CPU_HELLO_LEN);
	put_le32(h, CPU_MAGIC);
	h[4] = CPU_VERSION;
	h[6] = (uint8_t)kind;
	put_le32(h + 8, (uint32_t)c->rank);
	put_le32(h + 12, (uint32_t)c->size);
	put_le64(h + 16, c->generation);
	h[24] = (uint8_t)strlen(c->name);
	for (int i = 0; i < 6; i++) {
		h[26 + i] = (uint8_t)(((const struct cpu *)c->impl)->host >> (8 * i));
	}
}

static uint64_t hello_host(const uint8_t *h)
{
	uint64_t v = 0;

	for (int i = 5; i >= 0; i--) {
		v = (v << 8) | h[26 + i];
	}
	return v;
}

/* Hostname + boot id: containers may share a hostname, never a boot id. */
uint64_t cpu_host_id(void)
{
	char buf[256 + 64] = "";
	FILE *f;

	gethostname(buf, 256);
	buf[255] = '\0';
	f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f != NULL) {
		size_t l = strlen(buf);

		if (fgets(buf + l, (int)(sizeof(buf) - l), f) == NULL) {
			buf[l] = '\0';
		}
		fclose(f);
	}
	return fnv1a64_str(FNV1A64_INIT, buf) & 0xffffffffffffull;
}

/* Why hello @h (+ @name) is not from our predecessor, or NULL when it is. */
static const char *hello_mismatch(const struct crun_comm *c, const uint8_t *h, const char *name,
				  int kind, int from)
{
	if (get_le32(h) != CPU_MAGIC) {
		return "bad magic";
	}
	if (h[4] != CPU_VERSION) {
		return "unsupported version";
	}
	if (h[6] != kind) {
		return "unexpected message";
	}
	if (get_le32(h + 12) != (uint32_t)c->size) {
		return "different world size";
	}
	if (get_le64(h + 16) != c->generation) {
		return "different generation";
	}
	if (h[24] != strlen(c->name) || memcmp(name, c->name, h[24]) != 0) {
		return "different comm name";
	}
	if (get_le32(h + 8) != (uint32_t)from) {
		return "not the expected rank";
	}
	return NULL;
}

/* Read a hello or ack (header + name) from @fd before @deadline. */
static int read_hello(int fd, uint8_t *h, char *name, int64_t deadline)
{
	int rc;

	rc = cpu_sock_full(fd, h, CPU_HELLO_LEN, false, deadline);
	if (rc < 0) {
		return rc;
	}
	if (get_le32(h) != CPU_MAGIC || h[4] != CPU_VERSION) {
		return 0; /* hello_mismatch() says which */
	}
	return cpu_sock_full(fd, name, h[24], false, deadline);
}

static int connect_next(struct crun_comm *c, struct cpu *p, struct crun_store *st, int64_t deadline)
{
	int succ = (c->rank + 1) % c->size, rc, fd;
	char key[COMM_MAX_NAME + 64], host[64], name[256];
	struct sockaddr_storage ss;
	uint8_t h[CPU_HELLO_LEN];
	socklen_t sl;
	size_t len;
	void *val;
	int port;

	snprintf(name, sizeof(name), "addr/%d", succ);
	rc = comm_key(c, key, sizeof(key), name);
	if (rc < 0) {
		return rc;
	}
	rc = crun_store_wait_get(st, key, &val, &len,
				 crun_ms_until(deadline) > 0 ? crun_ms_until(deadline) : 1);
	if (rc < 0) {
		/* The store's words: they name our own address's set when that failed. */
		const char *why = crun_store_last_error(st);

		return diag_set(&c->diag, rc,
				"comm %s: rank %d: waiting for rank %d's address (%s): %s", c->name,
				c->rank, succ, key, why[0] != '\0' ? why : crun_strerror(rc));
	}
	snprintf(p->next_addr, sizeof(p->next_addr), "%.*s", (int)len, (const char *)val);
	free(val);
	if (net_parse_hostport(p->next_addr, -1, host, sizeof(host), &port) < 0 ||
	    net_resolve(host, port, true, &ss, &sl) < 0) {
		return diag_set(&c->diag, -EPROTO,
				"comm %s: rank %d: rank %d's address \"%s\" (%s)", c->name, c->rank,
				succ, p->next_addr, "not HOST:PORT");
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return cpu_fail(c, -errno, "socket");
	}
	p->next = fd;
	tune(fd);
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
		return cpu_fail(c, -errno, "connect to rank %d (%s)", succ, p->next_addr);
	}
	{
		struct pollfd pf = {.fd = fd, .events = POLLOUT};

		int err = 0;
		socklen_t el = sizeof(err);

		do {
			rc = poll(&pf, 1, crun_ms_until(deadline));
		} while (rc < 0 && errno == EINTR);
		if (rc == 0) {
			return cpu_fail(c, -ETIMEDOUT, "connect to rank %d (%s)", succ,
					p->next_addr);
		}
		if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0) {
			return cpu_fail(c, -errno, "connect to rank %d (%s)", succ, p->next_addr);
		}
		if (err != 0) {
			return cpu_fail(c, -err, "connect to rank %d (%s)", succ, p->next_addr);
		}
	}
	make_hello(c, h, CPU_HELLO);
	rc = cpu_sock_full(fd, h, CPU_HELLO_LEN, true, deadline);
	if (rc == 0) {
		rc = cpu_sock_full(fd, c->name, strlen(c->name), true, deadline);
	}
	if (rc < 0) {
		return cpu_fail(c, rc, "hello to rank %d (%s)", succ, p->next_addr);
	}
	return 0;
}

static int accept_prev(struct crun_comm *c, struct cpu *p, int lfd, int64_t deadline)
{
	int pred = (c->rank + c->size - 1) % c->size, rc, fd;
	uint8_t h[CPU_HELLO_LEN];
	char name[256], from[64];
	const char *why;

	for (;;) {
		struct pollfd pf = {.fd = lfd, .events = POLLIN};
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int64_t cand;

		rc = poll(&pf, 1, crun_ms_until(deadline));
		if (rc < 0 && errno == EINTR) {
			continue;
		}
		if (rc <= 0) {
			return cpu_fail(c, rc == 0 ? -ETIMEDOUT : -errno,
					"waiting for rank %d to connect", pred);
		}
		fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)) {
			continue;
		}
		if (fd < 0) {
			return cpu_fail(c, -errno, "accept");
		}
		net_format_sockaddr((struct sockaddr *)&ss, from, sizeof(from));
		cand = crun_now_ms() + CPU_STRAY_MS;
		rc = read_hello(fd, h, name, cand < deadline ? cand : deadline);
		why = rc < 0 ? crun_strerror(rc) : hello_mismatch(c, h, name, CPU_HELLO, pred);
		if (why == NULL) {
			break;
		}
		log_warn("comm %s: rank %d: rejected connection from %s: %s", c->name, c->rank,
			 from, why);
		close(fd);
	}
	p->prev = fd;
	p->pred_host = hello_host(h);
	snprintf(p->prev_addr, sizeof(p->prev_addr), "%s", from);
	tune(fd);
	make_hello(c, h, CPU_ACK);
	rc = cpu_sock_full(fd, h, CPU_HELLO_LEN, true, deadline);
	if (rc == 0) {
		rc = cpu_sock_full(fd, c->name, strlen(c->name), true, deadline);
	}
	if (rc < 0) {
		return cpu_fail(c, rc, "ack to rank %d (%s)", pred, from);
	}
	return 0;
}

static int await_ack(struct crun_comm *c, struct cpu *p, int64_t deadline)
{
	int succ = (c->rank + 1) % c->size, rc;
	uint8_t h[CPU_HELLO_LEN];
	char name[256];
	const char *why;

	rc = read_hello(p->next, h, name, deadline);
	if (rc < 0) {
		return cpu_fail(c, rc, "handshake with rank %d (%s)", succ, p->next_addr);
	}
	why = hello_mismatch(c, h, name, CPU_ACK, succ);
	if (why != NULL) {
		return diag_set(&c->diag, -EPROTO,
				"comm %s: rank %d: handshake with rank %d (%s): %s", c->name,
				c->rank, succ, p->next_addr, why);
	}
	return 0;
}

static int listen_and_publish(struct crun_comm *c, struct crun_store *st, int *lfd_out)
{
	char key[COMM_MAX_NAME + 64], suffix[32], addr[80];
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd, rc;

	rc = local_addr(c, &ss, &sl);
	if (rc < 0) {
		return rc;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return cpu_fail(c, -errno, "socket");
	}
	tune(fd);
	if (ss.ss_family == AF_INET) {
		((struct sockaddr_in *)&ss)->sin_port = 0;
	} else {
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	}
	net_format_sockaddr((struct sockaddr *)&ss, addr, sizeof(addr));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
		rc = cpu_fail(c, -errno, "bind %s", addr);
		goto err;
	}
	if (listen(fd, 64) < 0) {
		rc = cpu_fail(c, -errno, "listen %s", addr);
		goto err;
	}
	sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		rc = cpu_fail(c, -errno, "getsockname");
		goto err;
	}
	net_format_sockaddr((struct sockaddr *)&ss, addr, sizeof(addr));
	snprintf(suffix, sizeof(suffix), "addr/%d", c->rank);
	rc = comm_key(c, key, sizeof(key), suffix);
	if (rc == 0) {
		/* Not waited for: connect_next()'s wait follows it on the connection (one round
		 * trip for both) and returns its failure if the store refused it. */
		rc = crun_store_set_async(st, key, addr, strlen(addr));
	}
	if (rc < 0) {
		diag_set(&c->diag, rc, "comm %s: rank %d: publish %s: %s", c->name, c->rank, key,
			 crun_strerror(rc));
		goto err;
	}
	*lfd_out = fd;
	return 0;
err:
	close(fd);
	return rc;
}

int cpu_net_link(struct crun_comm *c, struct cpu *p, struct crun_store *st, int64_t deadline)
{
	int lfd = -1, rc;

	/* Listen before publishing, and connect before accepting: the kernel completes the
	 * connection from its backlog, so no rank waits on another's accept. */
	rc = listen_and_publish(c, st, &lfd);
	if (rc < 0) {
		return rc;
	}
	rc = connect_next(c, p, st, deadline);
	if (rc == 0) {
		rc = accept_prev(c, p, lfd, deadline);
	}
	if (rc == 0) {
		rc = await_ack(c, p, deadline);
	}
	close(lfd);
	return rc;
}
