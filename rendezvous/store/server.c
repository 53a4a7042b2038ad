/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server.c: the store server's lifecycle: listen, accept, shut down. */
/*
 * One libuv loop, protocol in docs/protocol.md. The rest of the server: server_conn.c
 * (connections), server_ops.c (requests), server_data.c (keys, TTLs), server_wait.c (WAIT);
 * what they share is in server_internal.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/server_internal.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/log.h"
#include "src/common/net.h"

#define SWEEP_MS 500

void srv_server_unref(struct store_server *s)
{
	if (--s->refs > 0) {
		return;
	}
	ks_finish(&s->ks);
	srv_limits_finish(s);
	srv_preauth_finish(s);
	free(s->rbuf);
	free(s->token);
	free(s->ts_prefix);
	free(s->ts_gen_key);
	free(s->ts_refusal);
	srv_auth_guard_free(s);
	srv_tls_finish(s);
	explicit_bzero(s->nonce_pool, sizeof(s->nonce_pool)); /* nonces not handed out yet */
	free(s);
}

/*
 * Accepted TCP sockets: no Nagle delay, and keepalive (a peer host that vanishes holding a wait
 * is found by it, not by idleness: probes after 60 s idle, 1 s apart, 10 of them, as libuv's
 * uv_tcp_keepalive set them). Set once on the listener: Linux copies a listener's options into
 * every socket accept4 returns, which saves 5 system calls a connection. The first accepted
 * socket is checked; where it did not inherit them, each one gets them set.
 */
static const struct {
	int level, name, val;
} tcp_opts[] = {
	{IPPROTO_TCP, TCP_NODELAY, 1},	  {SOL_SOCKET, SO_KEEPALIVE, 1},
	{IPPROTO_TCP, TCP_KEEPIDLE, 60}, {IPPROTO_TCP, TCP_KEEPINTVL, 1},
	{IPPROTO_TCP, TCP_KEEPCNT, 10},
};

static bool sockopts_set(int fd)
{
	size_t i;

	for (i = 0; i < sizeof(tcp_opts) / sizeof(tcp_opts[0]); i++) {
		if (setsockopt(fd, tcp_opts[i].level, tcp_opts[i].name, &tcp_opts[i].val,
			       sizeof(int)) < 0) {
			return false;
		}
	}
	return true;
}

static bool sockopts_match(int fd)
{
	socklen_t n;
	size_t i;
	int v;

	for (i = 0; i < sizeof(tcp_opts) / sizeof(tcp_opts[0]); i++) {
		n = sizeof(v);
		if (getsockopt(fd, tcp_opts[i].level, tcp_opts[i].name, &v, &n) < 0 ||
		    v != tcp_opts[i].val) {
			return false;
		}
	}
	return true;
}

void srv_accepted_sockopts(struct conn *c)
{
	struct store_server *s = c->s;
	uv_os_fd_t fd;

	if (s->sockopts > 0 || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0) {
		return;
	}
	if (s->sockopts == 0) {
		s->sockopts = sockopts_match(fd) ? 1 : -1;
		log_debug("store %s: accepted sockets %s the listener's TCP options", s->addr,
			  s->sockopts > 0 ? "inherit" : "do not inherit");
		if (s->sockopts > 0) {
			return;
		}
	}
	sockopts_set(fd);
}

int srv_bind_socket(const char *addr, const char *what, int *fd_out, struct crun_diag *d)
{
	struct addrinfo hints, *res = NULL;
	char host[256], port_s[16];
	int port, fd, one = 1, rc;

	if (addr == NULL || net_parse_hostport(addr, -1, host, sizeof(host), &port) < 0) {
		return diag_set(d, -EINVAL, "%s: listen address %s: expected ADDR:PORT", what,
				addr ? addr : "(null)");
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(port_s, sizeof(port_s), "%d", port);
	rc = getaddrinfo(host, port_s, &hints, &res);
	if (rc != 0 || res == NULL) {
		return diag_set(d, -EINVAL, "%s: listen address %s: %s", what, addr,
				gai_strerror(rc));
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		rc = -errno;
		freeaddrinfo(res);
		return diag_set(d, rc, "%s: listen %s: socket: %s", what, addr, strerror(-rc));
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (res->ai_family == AF_INET6) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	}
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0) {
		rc = -errno;
		goto err;
	}
	if (listen(fd, 4096) < 0) {
		rc = -errno;
		goto err;
	}
	freeaddrinfo(res);
	*fd_out = fd;
	return 0;
err:
	freeaddrinfo(res);
	close(fd);
	return diag_set(d, rc, "%s: listen %s: %s", what, addr, strerror(-rc));
}

static void on_server_handle_closed(uv_handle_t *h)
{
	srv_server_unref(h->data);
}

/* The stored data's quotas from @o, or their defaults (server.h). */
static void set_quotas(struct store_server *s, const struct store_server_opts *o)
{
	uint64_t mem = o->max_memory > 0 ? o->max_memory : STORE_DEFAULT_MAX_MEMORY;
	struct ks_quotas q;

	q.total.bytes = o->max_data > 0 ? o->max_data : mem;
	q.total.keys = o->max_keys > 0 ? o->max_keys : q.total.bytes / STORE_DATA_KEY_BYTES;
	q.scope.bytes = o->scope_max_data > 0 ? o->scope_max_data
					      : q.total.bytes / STORE_SCOPE_SHARE;
	q.scope.keys = o->scope_max_keys > 0 ? o->scope_max_keys
					     : q.total.keys / STORE_SCOPE_SHARE;
	q.tcpstore.bytes = o->tcpstore_max_data > 0 ? o->tcpstore_max_data
						    : STORE_DEFAULT_TS_MAX_DATA;
	q.tcpstore.keys = o->tcpstore_max_keys > 0 ? o->tcpstore_max_keys
						   : STORE_DEFAULT_TS_MAX_KEYS;
	ks_set_quotas(&s->ks, &q);
	log_debug("store: stored data: %" PRIu64 " bytes, %" PRIu64 " keys; each run %" PRIu64
		  " bytes, %" PRIu64 " keys; each TCPStore namespace %" PRIu64 " bytes, %" PRIu64
		  " keys", q.total.bytes, q.total.keys, q.scope.bytes, q.scope.keys,
		  q.tcpstore.bytes, q.tcpstore.keys);
}

static void format_address(struct store_server *s)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);

	if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &n) != 0) {
		return;
	}
	s->port = net_sockaddr_port((struct sockaddr *)&ss);
	net_format_sockaddr((struct sockaddr *)&ss, s->addr, sizeof(s->addr));
}

int store_server_create(struct uv_loop_s *loop, const struct store_server_opts *opts,
			struct store_server **out, struct crun_diag *d)
{
	struct store_server *s;
	struct sigaction sa;
	int fd = -1, rc;

	if (opts->max_value_len > CRUN_STORE_MAX_VALUE_LEN) {
		return diag_set(d, -EINVAL, "store: max value length %zu exceeds the limit %u",
				opts->max_value_len, CRUN_STORE_MAX_VALUE_LEN);
	}
	if (opts->token != NULL && strlen(opts->token) > CRUN_STORE_MAX_KEY_LEN) {
		return diag_set(d, -EINVAL, "store: token longer than %d bytes",
				CRUN_STORE_MAX_KEY_LEN);
	}
	/* libuv writes with write(2): a peer's reset must not kill the process that embeds us.
	 * Only the default disposition is changed; a handler someone installed stays. */
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
		signal(SIGPIPE, SIG_IGN);
	}
	/* Bind with plain system calls first, so a failure leaves no libuv handle behind. */
	rc = srv_bind_socket(opts->listen, "store", &fd, d);
	if (rc < 0) {
		return rc;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		close(fd);
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	if (!sockopts_set(fd)) {
		s->sockopts = -1; /* each accepted socket then gets them */
	}
	htab_init(&s->peers, 64);
	htab_init(&s->sources, 64);
	s->rbuf = malloc(READ_BUF_LEN);
	if (opts->token != NULL && opts->token[0] != '\0') {
		s->token = strdup(opts->token);
		s->token_len = strlen(opts->token);
		if (s->token == NULL) {
			goto oom;
		}
	}
	if (opts->tcpstore_run != NULL && (rc = srv_ts_init(s, opts->tcpstore_run, d)) < 0) {
		goto err;
	}
	if (opts->tcpstore_refusal != NULL &&
	    (s->ts_refusal = strdup(opts->tcpstore_refusal)) == NULL) {
		goto oom;
	}
	if (s->peers.buckets == NULL || s->sources.buckets == NULL || s->rbuf == NULL) {
		goto oom;
	}
	rc = ks_init(&s->ks, opts->max_value_len > 0 ? (uint32_t)opts->max_value_len
						   : CRUN_STORE_MAX_VALUE_LEN,
		     srv_on_wait_done, s);
	if (rc == -ENOMEM) {
		goto oom;
	}
	if (rc < 0) {
		diag_set(d, rc, "store: no random seed for the key table: getrandom: %s",
			 crun_strerror(rc));
		goto err;
	}
	rc = srv_tls_init(s, opts, d);
	if (rc < 0) {
		goto err;
	}
	s->loop = loop;
	srv_limits_init(s, opts);
	set_quotas(s, opts);
	s->idle_timeout_ms = opts->idle_timeout_ms > 0 ? opts->idle_timeout_ms : 0;
	s->max_pending = opts->max_pending_per_conn > 0 ? (uint32_t)opts->max_pending_per_conn
							: STORE_DEFAULT_MAX_PENDING;
	s->lim.max_key_len = CRUN_STORE_MAX_KEY_LEN;
	s->lim.max_value_len =
		opts->max_value_len > 0 ? (uint32_t)opts->max_value_len : CRUN_STORE_MAX_VALUE_LEN;
	s->lim.max_keys = CRUN_STORE_MAX_KEYS;
	s->refs = 1;
	s->unix_lock = -1;
	srv_poll_init(s, opts);

	uv_tcp_init(loop, &s->listener);
	uv_timer_init(loop, &s->ks_timer);
	uv_timer_init(loop, &s->sweep_timer);
	uv_prepare_init(loop, &s->accept_turn);
	s->listener.data = s->ks_timer.data = s->sweep_timer.data = s->accept_turn.data = s;
	s->ks_armed = KS_NO_DEADLINE;
	s->refs += 4;
	uv_prepare_start(&s->accept_turn, srv_on_accept_turn);
	rc = uv_tcp_open(&s->listener, fd);
	if (rc == 0) {
		fd = -1;
		rc = uv_listen((uv_stream_t *)&s->listener, 4096, srv_on_connection);
	}
	if (rc < 0) {
		diag_set(d, rc, "store: listen %s: %s", opts->listen, uv_strerror(rc));
		if (fd >= 0) {
			close(fd);
		}
		store_server_close(s);
		return rc;
	}
	format_address(s);
	rc = srv_unix_start(s, opts, d);
	if (rc == 0) {
		rc = srv_metrics_start(s, opts->metrics_listen, d);
	}
	if (rc < 0) {
		store_server_close(s);
		return rc;
	}
	uv_timer_start(&s->sweep_timer, srv_on_sweep, SWEEP_MS, SWEEP_MS);
	*out = s;
	return 0;
oom:
	rc = diag_set(d, -ENOMEM, "store: out of memory");
err:
	close(fd);
	ks_finish(&s->ks);
	htab_finish(&s->peers);
	htab_finish(&s->sources);
	free(s->rbuf);
	free(s->token);
	free(s->ts_prefix);
	free(s->ts_gen_key);
	free(s->ts_refusal);
	srv_tls_finish(s);
	free(s);
	return rc;
}

const char *store_server_address(const struct store_server *s)
{
	return s->addr;
}

int store_server_port(const struct store_server *s)
{
	return s->port;
}

void store_server_close(struct store_server *s)
{
	struct conn *c;
	struct ks_wait *w;

	if (s == NULL || s->closing) {
		return;
	}
	s->closing = true;
	log_debug("store %s: closing with %" PRId64 " keys, %" PRIu64 " bytes stored", s->addr,
		 s->ks.nkeys, s->ks.nbytes);
	uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
	uv_close((uv_handle_t *)&s->ks_timer, on_server_handle_closed);
	uv_close((uv_handle_t *)&s->sweep_timer, on_server_handle_closed);
	uv_close((uv_handle_t *)&s->accept_turn, on_server_handle_closed);
	srv_metrics_close(s, on_server_handle_closed);
	srv_unix_close(s, on_server_handle_closed);
	srv_poll_close(s, on_server_handle_closed);
	/* Every held wait gets an explicit answer, then every connection closes. */
	for (c = s->conns; c != NULL; c = c->next) {
		while ((w = c->waits) != NULL) {
			srv_wait_fail(s, w, WIRE_E_SHUTDOWN, "server shutting down");
		}
		srv_flush(c);
	}
	s->flush = NULL;
	while (s->conns != NULL) {
		c = s->conns;
		c->in_flush = false;
		srv_conn_close(c);
	}
	srv_server_unref(s);
}
