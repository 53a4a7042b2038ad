/* SPDX-License-Identifier: MIT */
/* agent/agent_store.c: does a store serve PyTorch TCPStore clients? (the agent store) */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "agent/agent_store.h"
#include "rendezvous/rdzv_keys.h"
#include "rendezvous/store/store_conf.h"
#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/byteorder.h"
#include "src/common/clock.h"
#include "src/common/log.h"
#include "src/common/net.h"

#define NODE0_KEY "crun/static/node0" /* "host NAME" of the static node rank 0 agent */
#define NODE0_TIMEOUT_MS 2000

/*
 * One connection to @ai, probed as a PyTorch 2.x client would (VALIDATE, then PING), encoded
 * by the TCPStore codec the server decodes with, in one send (the server tells it from a real
 * client by its whole first read, to log it below warning level); 1: served, 0: not, <0: could not tell.
 */
static int probe_one(const struct addrinfo *ai, int timeout_ms)
{
	struct wire_buf req = {0};
	uint8_t ans[4];
	int64_t until = crun_now_ms() + timeout_ms;
	struct pollfd pfd;
	size_t got = 0;
	ssize_t n;
	int fd, rc = -ETIMEDOUT;

	ts_put_agent_probe(&req);
	if (req.oom) {
		wire_buf_finish(&req);
		return -ENOMEM;
	}
	/* Non-blocking: the connect too is bounded by @timeout_ms (a port whose packets are
	 * dropped would hold a blocking connect for the kernel's two minutes of SYN retries). */
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	if (fd < 0) {
		rc = -errno;
		wire_buf_finish(&req);
		return rc;
	}
	pfd.fd = fd;
	pfd.events = POLLOUT;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		int soerr = 0, left = (int)(until - crun_now_ms());
		socklen_t sl = sizeof(soerr);

		if (errno != EINPROGRESS) {
			rc = -errno;
			goto out;
		}
		if (left <= 0 || poll(&pfd, 1, left) <= 0) {
			goto out; /* -ETIMEDOUT: no answer to the connect */
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr != 0) {
			rc = soerr != 0 ? -soerr : -errno;
			goto out;
		}
	}
	/* A few bytes into an empty socket buffer: all of them go at once. */
	if (send(fd, req.p, req.len, MSG_NOSIGNAL) != (ssize_t)req.len) {
		rc = -EIO;
		goto out;
	}
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
		rc = get_le32(ans) == TS_AGENT_PROBE_NONCE ? 1 : 0; /* PING's answer: the nonce */
	}
out:
	close(fd);
	wire_buf_finish(&req);
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

/* A client of the store at @endpoint with the agent's credential and TLS files, quick to give
 * up; NULL when none answers. */
static struct crun_store *quick_client(const struct store_conf *sc, const char *endpoint)
{
	const struct store_conf_variant v = {
		.endpoint = endpoint,
		.no_prefix = true,
		.connect_timeout_ms = NODE0_TIMEOUT_MS,
		.timeout_ms = NODE0_TIMEOUT_MS,
	};
	struct crun_diag d = {0};
	struct crun_store *st = NULL;
	struct store_conf qc;
	int rc;

	if (store_conf_derive(&qc, sc, &v) < 0) {
		return NULL;
	}
	rc = store_open_conf(&qc, &st, &d);
	store_conf_finish(&qc);
	if (rc < 0) {
		log_debug("node rank 0: %s", d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
		return NULL;
	}
	return st;
}

void agent_store_claim_node0(const struct store_conf *sc, const char *endpoint,
			     const char *hostname)
{
	struct crun_store *st = quick_client(sc, endpoint);
	char who[300];

	if (st != NULL) {
		snprintf(who, sizeof(who), "host %s", hostname);
		crun_store_set(st, NODE0_KEY, who, strlen(who));
		crun_store_close(st);
	}
}

int agent_store_port_taken(const struct store_conf *sc, const char *host, int port, int rc,
			   const char *msg, struct crun_diag *d)
{
	struct crun_store *st;
	char ep[300], holder[256] = "";
	void *val = NULL;
	size_t len = 0;

	if (rc != -EADDRINUSE) { /* libuv's UV_EADDRINUSE is -EADDRINUSE on Unix */
		return diag_set(d, rc, "%s", msg);
	}
	net_join_hostport(ep, sizeof(ep), host, port);
	st = quick_client(sc, ep);
	if (st == NULL) {
		return diag_set(d, rc, "--master-port %d: %s is in use by another program", port,
				ep);
	}
	if (crun_store_get(st, NODE0_KEY, &val, &len) == 0 && len > 0) {
		snprintf(holder, sizeof(holder), "%.*s", (int)(len < 255 ? len : 255),
			 (const char *)val);
	}
	free(val);
	crun_store_close(st);
	return diag_set(d, CRUN_ECONFIG,
			"node rank 0 is already taken by %s (its crun serves %s); every node needs "
			"its own --node-rank",
			holder[0] != '\0' ? holder : "another crun agent", ep);
}

bool agent_store_serves(const char *host, int port)
{
	int rc = agent_store_probe(host, port, AGENT_STORE_PROBE_MS);

	if (rc != 1) {
		log_info("the store at %s:%d does not serve PyTorch's TCPStore clients%s: rank 0 "
			 "hosts their TCPStore (TORCHELASTIC_USE_AGENT_STORE=False)",
			 host, port, rc < 0 ? " (no answer)" : "");
	}
	return rc == 1;
}

void agent_store_forget(const struct store_conf *sc, int members, int left_rc,
			int64_t timeout_ms)
{
	const struct store_conf_variant v = {
		.connect_timeout_ms = (int)timeout_ms,
		.timeout_ms = (int)timeout_ms,
	};
	struct crun_diag d = {0};
	struct crun_store *st = NULL;
	struct store_conf fc;
	int rc;

	rc = store_conf_derive(&fc, sc, &v) < 0 ? -ENOMEM : 0;
	if (rc == 0) {
		rc = store_open_conf(&fc, &st, &d);
		store_conf_finish(&fc);
	}
	if (rc == 0) {
		rc = store_forget_job(st, members, left_rc, &d);
	}
	crun_store_close(st);
	if (rc < 0) {
		log_warn("store: could not delete the job's keys: %s",
			 d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
	} else if (rc == 1) {
		log_debug("store: deleted the job's keys (%s)", sc->prefix);
	}
}

/* How often the generation may move under this agent's compare-and-set before it gives up:
 * each miss means another agent raised it, and rounds are few. */
#define GEN_TRIES 64

/* Whether generation @cur (@len bytes) already is @want or later (10 digits each). */
static bool gen_reached(const char *cur, size_t len, const char *want)
{
	size_t i;

	for (i = 0; i < len && cur[i] >= '0' && cur[i] <= '9'; i++) {
	}
	if (i != len || len == 0) {
		return false; /* "end", or not a generation: a new run of this id replaces it */
	}
	return len > strlen(want) || (len == strlen(want) && memcmp(cur, want, len) >= 0);
}

/* Raise @key to @want (or set "end") with compare-and-set. */
static int gen_raise(struct crun_store *st, const char *key, const char *want, bool end)
{
	void *cur = NULL, *now = NULL;
	size_t clen = 0, nlen = 0;
	int rc, i;

	rc = crun_store_get(st, key, &cur, &clen);
	if (rc == -ENOENT) {
		rc = 0;
	}
	for (i = 0; rc == 0 && i < GEN_TRIES; i++) {
		if (!end && cur != NULL && gen_reached(cur, clen, want)) {
			break;
		}
		rc = crun_store_compare_set(st, key, cur, clen, want, strlen(want), &now, &nlen);
		free(cur);
		cur = now;
		clen = nlen;
		now = NULL;
		if (rc == 0 && clen == strlen(want) && memcmp(cur, want, clen) == 0) {
			break;
		}
	}
	free(cur);
	return rc < 0 ? rc : i < GEN_TRIES ? 0 : -EAGAIN;
}

int agent_store_generation(const struct store_conf *sc, const char *run, int round,
			   int timeout_ms, struct crun_diag *d)
{
	const struct store_conf_variant v = {
		.no_prefix = true, /* the store's own key, as the rendezvous keys are */
		.connect_timeout_ms = timeout_ms,
		.timeout_ms = timeout_ms,
	};
	char key[CRUN_STORE_MAX_KEY_LEN + 1], want[16];
	struct crun_store *st = NULL;
	struct store_conf fc;
	int rc;

	if (rdzv_key_tcpstore_gen(key, sizeof(key), run) < 0) {
		return diag_set(d, -ENAMETOOLONG, "run id %s: too long for a store key", run);
	}
	snprintf(want, sizeof(want), round < 0 ? "end" : "%010d", round);
	rc = store_conf_derive(&fc, sc, &v) < 0 ? -ENOMEM : 0;
	if (rc == 0) {
		rc = store_open_conf(&fc, &st, d);
		store_conf_finish(&fc);
		if (rc < 0) {
			return rc;
		}
	}
	if (rc == 0) {
		rc = gen_raise(st, key, want, round < 0);
	}
	if (rc < 0) {
		diag_set(d, rc, "store %s: setting %s to %s: %s", sc->endpoint, key, want,
			 rc == -EAGAIN ? "it kept moving (another agent?)"
				       : store_last_error(st)[0] != '\0' ? store_last_error(st)
									 : crun_strerror(rc));
	}
	crun_store_close(st);
	return rc;
}
