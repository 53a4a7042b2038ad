/* SPDX-License-Identifier: MIT */
/* agent/agent_store.c: does a store serve PyTorch TCPStore clients? (the agent store) */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/agent_store.h"
#include "src/common/clock.h"

#define PROBE_MAGIC 0x3c85f7ceu /* PyTorch 2.x TCPStore's VALIDATE */
#define PROBE_VALIDATE 0u
#define PROBE_PING 13u
#define PROBE_NONCE 0x6372756eu /* "crun" */

static void le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* One connection to @ai, probed; 1: served, 0: not, <0: could not tell. */
static int probe_one(const struct addrinfo *ai, int timeout_ms)
{
	uint8_t req[10], ans[4];
	int64_t until = crun_now_ms() + timeout_ms;
	struct pollfd pfd;
	size_t got = 0;
	ssize_t n;
	int fd, rc = -ETIMEDOUT;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0) {
		return -errno;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	req[0] = PROBE_VALIDATE;
	le32(req + 1, PROBE_MAGIC);
	req[5] = PROBE_PING;
	le32(req + 6, PROBE_NONCE);
	if (send(fd, req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req)) {
		close(fd);
		return -EIO;
	}
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (got < sizeof(ans)) {
		int left = (int)(until - crun_now_ms());

		if (left <= 0 || poll(&pfd, 1, left) <= 0) {
			break;
		}
		n = recv(fd, ans + got, sizeof(ans) - got, 0);
		if (n <= 0) {
			rc = 0; /* closed on us: a store that refuses TCPStore clients */
			break;
		}
		got += (size_t)n;
	}
	if (got == sizeof(ans)) {
		le32(req, PROBE_NONCE);
		rc = memcmp(ans, req, 4) == 0 ? 1 : 0;
	}
	close(fd);
	return rc;
}

int agent_store_probe(const char *host, int port, int timeout_ms)
{
	struct addrinfo hints = {0}, *res = NULL, *ai;
	char ps[16];
	int rc = -EHOSTUNREACH;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(host, ps, &hints, &res) != 0) {
		return -EHOSTUNREACH;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		rc = probe_one(ai, timeout_ms);
		if (rc >= 0) {
			break;
		}
	}
	freeaddrinfo(res);
	return rc;
}
