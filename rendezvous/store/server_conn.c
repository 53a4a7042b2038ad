/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_conn.c: connections: read, frame, reply, backpressure, limits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/clock.h"
#include "src/common/log.h"
#include "src/common/net.h"

#define DRAIN_TIMEOUT_MS 2000
#define OUT_HIGH_WATER (8u << 20) /* stop reading a peer that does not read its replies */
#define OUT_LOW_WATER (1u << 20)
#define KEEP_OUT_CAP 4096         /* a reply buffer larger than this is freed once written */

static void conn_resume(struct conn *c);

static void conn_unref(struct conn *c)
{
	struct store_server *s = c->s;

	if (--c->refs > 0) {
		return;
	}
	/* Every wait is gone by now: what is left charged is the input buffers freed here. */
	s->mem_used -= c->mem;
	free(c->in);
	free(c->backlog);
	wire_buf_finish(&c->out);
	srv_auth_conn_free(c);
	srv_tls_conn_free(c);
	free(c);
	srv_server_unref(s);
}

static void on_conn_closed(uv_handle_t *h)
{
	conn_unref(h->data);
}

void srv_conn_peer(struct conn *c, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);

	snprintf(buf, len, "?");
	if (srv_conn_is_unix(c)) {
		srv_unix_peer(c, buf, len);
		return;
	}
	if (srv_conn_peername(c, &ss, &n) != 0) {
		return;
	}
	net_format_sockaddr((struct sockaddr *)&ss, buf, len);
}

/* Idempotent: drop every wait, close the socket, free in the close callback. */
void srv_conn_close(struct conn *c)
{
	struct store_server *s = c->s;

	if (c->closing) {
		return;
	}
	c->closing = true;
	while (c->waits != NULL) {
		srv_wait_destroy(s, c->waits);
	}
	if (c->prev != NULL) {
		c->prev->next = c->next;
	} else {
		s->conns = c->next;
	}
	if (c->next != NULL) {
		c->next->prev = c->prev;
	}
	s->nconns--;
	srv_preauth_close(c);
	srv_peer_detach(c);
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_written(uv_write_t *req, int status)
{
	struct wreq *w = (struct wreq *)req;
	struct conn *c = w->c;

	free(w->buf);
	free(w);
	if (status < 0) {
		srv_conn_close(c);
	} else if (c->paused && !c->closing &&
		   uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < OUT_LOW_WATER) {
		c->paused = false;
		c->last_active = (int64_t)uv_now(c->s->loop);
		conn_resume(c);
	}
	conn_unref(c);
}

/* Hand the pending replies to the socket: try a direct write, queue what is left. */
void srv_flush(struct conn *c)
{
	struct wreq *w;
	uv_buf_t b;
	int n;

	if (c->ssl != NULL && !c->closing) {
		srv_tls_seal(c);
	}
	if (c->closing || c->out.len == 0) {
		return;
	}
	if (c->out.oom) {
		wire_buf_finish(&c->out);
		srv_conn_close(c);
		return;
	}
	b = uv_buf_init((char *)c->out.p, (unsigned int)c->out.len);
	n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
	if (n == (int)c->out.len) {
		c->out.len = 0;
		if (c->out.cap > KEEP_OUT_CAP) {
			wire_buf_finish(&c->out);
		}
		return;
	}
	if (n < 0 && n != UV_EAGAIN) {
		srv_conn_close(c);
		return;
	}
	if (n < 0) {
		n = 0;
	}
	w = malloc(sizeof(*w));
	if (w == NULL) {
		srv_conn_close(c);
		return;
	}
	w->c = c;
	w->buf = c->out.p; /* the request takes the buffer */
	b = uv_buf_init((char *)c->out.p + n, (unsigned int)(c->out.len - (size_t)n));
	memset(&c->out, 0, sizeof(c->out));
	if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
		free(w->buf);
		free(w);
		srv_conn_close(c);
		return;
	}
	c->refs++;
	if (!c->paused && !c->failing &&
	    uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > OUT_HIGH_WATER) {
		c->paused = true;
		uv_read_stop((uv_stream_t *)&c->tcp);
	}
}

void srv_flush_all(struct store_server *s)
{
	struct conn *c;

	while ((c = s->flush) != NULL) {
		s->flush = c->flush_next;
		c->in_flush = false;
		c->flush_next = NULL;
		srv_flush(c);
	}
	srv_ks_arm(s); /* after every batch of work: a SET with a TTL, a held wait */
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct conn *c = req->data;

	free(req);
	c->shut = true;
	if (status < 0 || c->eof) {
		srv_conn_close(c);
	}
	/* Otherwise keep reading (and discarding) until the peer closes or the drain ends, so
	 * unread input does not turn our close into a reset that destroys the error reply. */
	conn_unref(c);
}

/* Free the partial frame's buffer and give its bytes back to the memory budget. */
static void in_free(struct conn *c)
{
	srv_mem_release(c, c->in_cap);
	free(c->in);
	c->in = NULL;
	c->in_len = c->in_cap = c->need = 0;
}

static void backlog_free(struct conn *c)
{
	srv_mem_release(c, c->backlog_charged);
	free(c->backlog);
	c->backlog = NULL;
	c->backlog_len = c->backlog_charged = 0;
}

static void conn_fail(struct conn *c, uint8_t op, uint32_t id, uint16_t status, const char *msg,
		      bool quiet)
{
	uv_shutdown_t *req;
	char peer[96], what[512];

	if (c->failing || c->closing) {
		return;
	}
	if (!quiet && c->pre) {
		/* Unauthenticated: each refusal named once per source and interval, the rest
		 * summed up (server_preauth.c), so a flood of refusals cannot flood the log. */
		snprintf(what, sizeof(what), "%s: %s", wire_status_name(status), msg);
		srv_preauth_log(c, REFUSE_HANDSHAKE, what);
	} else if (!quiet) {
		srv_conn_peer(c, peer, sizeof(peer));
		log_info("store: dropping %s: %s: %s", peer, wire_status_name(status), msg);
	}
	if (c->proto == TS_PROTO_V1 || c->proto == TS_PROTO_V2) {
		/* TCPStore has no error replies: its client would read a crun frame as the answer
		 * to its request (a value of some length). Just close. */
		in_free(c);
		backlog_free(c);
		srv_conn_close(c);
		return;
	}
	c->failing = true;
	c->drain_until = (int64_t)uv_now(c->s->loop) + DRAIN_TIMEOUT_MS;
	while (c->waits != NULL) {
		srv_wait_destroy(c->s, c->waits);
	}
	in_free(c);
	backlog_free(c);
	wire_put_error(&c->out, op, id, status, msg);
	srv_flush(c);
	if (c->closing) {
		return;
	}
	if (c->paused) {
		c->paused = false;
		conn_resume(c);
	}
	req = malloc(sizeof(*req));
	if (req == NULL) {
		srv_conn_close(c);
		return;
	}
	req->data = c;
	if (uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
		free(req);
		srv_conn_close(c);
		return;
	}
	c->refs++;
}

/* Send an error reply, then close this connection alone (after the reply is out). */
void srv_conn_fail(struct conn *c, uint8_t op, uint32_t id, uint16_t status, const char *msg)
{
	if (status == WIRE_E_AUTH) {
		srv_metric_refuse(c->s, SRV_REFUSE_PROOF);
	} else if (status == WIRE_E_BAD_MAGIC || status == WIRE_E_BAD_VERSION ||
		   (!c->hello && op != WIRE_OP_HELLO && op != WIRE_OP_AUTH)) {
		srv_metric_refuse(c->s, SRV_REFUSE_HANDSHAKE);
	}
	conn_fail(c, op, id, status, msg, false);
}

void srv_conn_drop(struct conn *c, enum srv_limit kind, uint16_t status, const char *msg)
{
	if (c->failing || c->closing) {
		return;
	}
	srv_limit_log(c, kind, "dropped: %s", msg);
	conn_fail(c, 0, 0, status, msg, true);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct conn *c = h->data;

	/* One buffer per server: libuv calls on_read before the next on_alloc, and on_read
	 * consumes or copies everything, so idle connections hold no read buffer at all. */
	(void)hint;
	*buf = uv_buf_init((char *)c->s->rbuf, READ_BUF_LEN);
}

/* Check a complete header. Returns false (after failing the connection) when it is bad. */
static bool header_ok(struct conn *c, const uint8_t *p, struct wire_hdr *h)
{
	char msg[160];
	int rc;

	rc = wire_hdr_decode(p, WIRE_MAX_FRAME, h);
	if (rc == -EPROTO) {
		snprintf(msg, sizeof(msg), "frame length %u below minimum %u", h->len,
			 WIRE_MIN_LEN);
		srv_conn_fail(c, 0, 0, WIRE_E_BAD_FRAME, msg);
		return false;
	}
	if (rc == -EMSGSIZE) {
		snprintf(msg, sizeof(msg), "frame length %u exceeds limit %u", h->len,
			 (unsigned)WIRE_MAX_FRAME);
		srv_conn_fail(c, 0, 0, WIRE_E_TOO_BIG, msg);
		return false;
	}
	if (!c->hello && h->len + 4 > STORE_PREAUTH_MAX_FRAME) {
		/* A HELLO or AUTH frame is tens of bytes: an unauthenticated client gets no more. */
		snprintf(msg, sizeof(msg),
			 "frame of %u bytes before authentication (limit %u: only HELLO and AUTH "
			 "may come first)",
			 h->len + 4, (unsigned)STORE_PREAUTH_MAX_FRAME);
		srv_conn_fail(c, h->op, h->id, WIRE_E_TOO_BIG, msg);
		return false;
	}
	/* Reject what the header alone condemns before waiting for (or buffering) a payload. */
	if (h->op < 1 || h->op > WIRE_OP_MAX) {
		snprintf(msg, sizeof(msg), "unknown op %u", h->op);
		srv_conn_fail(c, h->op, h->id, WIRE_E_UNKNOWN_OP, msg);
		return false;
	}
	return srv_auth_gate(c, h->op, h->id);
}

/* Buffer @n more bytes of a partial frame, growing by doubling up to the declared size. */
static bool in_append(struct conn *c, const uint8_t *p, uint32_t n)
{
	uint32_t want = c->in_len + n, cap;
	uint8_t *q;

	if (want > c->in_cap) {
		cap = c->in_cap ? c->in_cap : 256;
		while (cap < want) {
			cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
		}
		if (c->need != 0 && cap > c->need) {
			cap = c->need;
		}
		if (cap < want) {
			cap = want;
		}
		if (!srv_mem_charge(c, cap - c->in_cap)) {
			return false; /* dropped: over the memory budget */
		}
		q = realloc(c->in, cap);
		if (q == NULL) {
			srv_conn_fail(c, 0, 0, WIRE_E_NO_MEMORY, "out of memory");
			return false;
		}
		c->in = q;
		c->in_cap = cap;
	}
	if (c->in_len == 0) {
		c->frame_start = (int64_t)uv_now(c->s->loop);
	}
	memcpy(c->in + c->in_len, p, n);
	c->in_len += n;
	return true;
}

/*
 * Process the frames in @p. Returns the bytes consumed: all of them, unless replies piled up
 * past OUT_HIGH_WATER because the peer does not read, in which case reading is paused and
 * the caller keeps the rest for conn_resume().
 */
static size_t consume(struct conn *c, const uint8_t *p, size_t left)
{
	const uint8_t *start = p;
	struct wire_hdr h;
	uint32_t take;
	size_t total;

	c->s->ks.wall_ms = crun_wall_ms(); /* what LIST_RUNS says of each run's last write */
	if (c->proto != TS_PROTO_CRUN) {
		/* PyTorch's TCPStore clients share the port; the first bytes tell them apart. */
		total = srv_ts_consume(c, p, left);
		if (c->proto != TS_PROTO_CRUN) {
			return total;
		}
		take = c->npeek;
		c->npeek = 0;
		consume(c, c->peek, take);
	}
	while (left > 0 && !c->failing && !c->closing) {
		if (c->out.len >= OUT_HIGH_WATER) {
			srv_flush(c);
			if (c->paused || c->closing) {
				return (size_t)(p - start);
			}
		}
		if (c->in_len > 0 || left < WIRE_HDR_LEN) {
			if (c->need == 0) {
				take = WIRE_HDR_LEN - c->in_len;
				take = take < left ? take : (uint32_t)left;
				if (!in_append(c, p, take)) {
					return left;
				}
				p += take;
				left -= take;
				if (c->in_len < WIRE_HDR_LEN) {
					return (size_t)(p - start);
				}
				if (!header_ok(c, c->in, &h)) {
					return left;
				}
				c->need = h.len + 4;
			}
			take = c->need - c->in_len;
			take = take < left ? take : (uint32_t)left;
			if (take > 0 && !in_append(c, p, take)) {
				return left;
			}
			p += take;
			left -= take;
			if (c->in_len < c->need) {
				return (size_t)(p - start);
			}
			wire_hdr_decode(c->in, WIRE_MAX_FRAME, &h);
			srv_dispatch(c, &h, c->in + WIRE_HDR_LEN, h.len - 8);
			in_free(c);
			continue;
		}
		if (!header_ok(c, p, &h)) {
			return left;
		}
		total = (size_t)h.len + 4;
		if (total > left) {
			c->need = (uint32_t)total;
			in_append(c, p, (uint32_t)left);
			return (size_t)(p - start) + left;
		}
		srv_dispatch(c, &h, p + WIRE_HDR_LEN, h.len - 8);
		p += total;
		left -= total;
	}
	return (size_t)(p - start);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *c = stream->data;
	struct store_server *s = c->s;
	char msg[96];

	(void)buf; /* the server's read buffer */
	if (nread == 0 || c->closing) {
		return;
	}
	if (nread < 0) {
		if (nread == UV_EOF && c->in_len > 0 && !c->failing && c->proto == TS_PROTO_CRUN) {
			snprintf(msg, sizeof(msg), "truncated frame: got %u of %u bytes", c->in_len,
				 c->need ? c->need : WIRE_HDR_LEN);
			srv_conn_fail(c, 0, 0, WIRE_E_BAD_FRAME, msg);
		}
		if (c->failing && !c->closing && !c->shut) {
			/* Let the shutdown request finish sending the error reply, then close. */
			c->eof = true;
			uv_read_stop(stream);
			srv_flush_all(s);
			return;
		}
		srv_conn_close(c);
		srv_flush_all(s);
		return;
	}
	if (c->failing) {
		return; /* draining after an error reply */
	}
	c->last_active = (int64_t)uv_now(s->loop);
	if (c->ssl != NULL) {
		srv_tls_read(c, s->rbuf, (size_t)nread);
	} else {
		srv_conn_input(c, s->rbuf, (size_t)nread);
	}
	srv_flush(c);
	srv_flush_all(s);
	srv_poll_kick(s);
}

void srv_conn_input(struct conn *c, const uint8_t *p, size_t len)
{
	size_t n = consume(c, p, len);

	if (n < len && !c->failing && !c->closing) {
		/* Paused with input left: at most one read buffer, kept until the peer reads. */
		if (srv_mem_charge(c, len - n)) {
			c->backlog_charged = (uint32_t)(len - n);
			c->backlog = malloc(len - n);
			if (c->backlog == NULL) {
				srv_conn_fail(c, 0, 0, WIRE_E_NO_MEMORY, "out of memory");
			} else {
				memcpy(c->backlog, p + n, len - n);
				c->backlog_len = (uint32_t)(len - n);
			}
		}
	}
}

/* The peer reads again: process what was held back, then read more. */
static void conn_resume(struct conn *c)
{
	size_t n;

	if (c->closing) {
		return;
	}
	if (c->backlog != NULL && !c->failing) {
		n = consume(c, c->backlog, c->backlog_len);
		if (n < c->backlog_len && !c->closing && !c->failing) {
			memmove(c->backlog, c->backlog + n, c->backlog_len - n);
			c->backlog_len -= (uint32_t)n;
			srv_flush_all(c->s);
			return; /* paused again; on_written resumes */
		}
		backlog_free(c);
		srv_flush(c);
		srv_flush_all(c->s);
		if (c->closing || c->paused) {
			return;
		}
	}
	if (c->ssl != NULL && !c->failing) {
		/* Records OpenSSL holds already decrypted or buffered: no new bytes will come
		 * for them. */
		srv_tls_read(c, NULL, 0);
		srv_flush(c);
		srv_flush_all(c->s);
		if (c->closing || c->paused) {
			return;
		}
	}
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/*
 * Accepting has a budget per loop turn. libuv's listener callback accepts until the backlog is
 * empty, so a client that connects faster than the store can accept and shed (a TLS store sets
 * up TLS for each) kept the loop there: no timer, no other connection's handshake, no answer
 * (a user with no token flooding a TLS store's unix socket stalled it, and the hosting agent
 * with it). Past STORE_ACCEPTS_PER_TURN a connection is not taken: libuv stops watching that
 * listener until uv_accept(), which srv_on_accept_turn() calls at the next turn, after the
 * loop has served everything else that was ready.
 */
static void defer_accept(struct store_server *s, uv_stream_t *server)
{
	for (int i = 0; i < 2; i++) {
		if (s->deferred[i] == server) {
			return;
		}
	}
	for (int i = 0; i < 2; i++) {
		if (s->deferred[i] == NULL) {
			s->deferred[i] = server;
			return;
		}
	}
}

void srv_on_accept_turn(uv_prepare_t *h)
{
	struct store_server *s = h->data;
	uv_stream_t *d[2] = {s->deferred[0], s->deferred[1]};

	s->accepts = 0;
	s->deferred[0] = s->deferred[1] = NULL;
	for (int i = 0; i < 2 && !s->closing; i++) {
		if (d[i] != NULL) {
			srv_on_connection(d[i], 0);
		}
	}
}

void srv_on_connection(uv_stream_t *server, int status)
{
	struct store_server *s = server->data;
	struct conn *c;

	if (status < 0) {
		/* EMFILE and the like: libuv keeps accepting (and closing) meanwhile. */
		srv_accept_log(s, status);
		return;
	}
	if (s->accepts >= STORE_ACCEPTS_PER_TURN) {
		defer_accept(s, server);
		return;
	}
	s->accepts++;
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		/* Not accepted: tried again next turn (libuv holds the connection meanwhile). */
		log_warn("store %s: accept: out of memory", s->addr);
		defer_accept(s, server);
		return;
	}
	c->s = s;
	c->refs = 1;
	if (server->type == UV_NAMED_PIPE) {
		uv_pipe_init(s->loop, &c->pipe, 0);
		s->met.accepted_unix++;
	} else {
		uv_tcp_init(s->loop, &c->tcp);
	}
	c->tcp.data = c;
	s->refs++;
	c->next = s->conns;
	if (s->conns != NULL) {
		s->conns->prev = c;
	}
	s->conns = c;
	s->nconns++;
	s->met.accepted++;
	c->last_active = c->since = (int64_t)uv_now(s->loop);
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
		srv_conn_close(c);
		return;
	}
	if (!srv_conn_is_unix(c)) {
		srv_accepted_sockopts(c);
	}
	if (s->closing) {
		srv_conn_close(c);
		return;
	}
	/* With TLS, the connection starts in the TLS handshake (server_tls.c). */
	if (!srv_tls_conn_start(c)) {
		return;
	}
	/* Over the per-address cap: an error reply, then closed (and logged once per interval);
	 * then the quotas of connections that have not authenticated, and the total cap
	 * (server_preauth.c). The listener keeps accepting. */
	if (srv_peer_attach(c)) {
		srv_preauth_begin(c);
	}
	if (!c->closing) {
		uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
	}
}

/* Held AUTH answers, end of the drain after an error reply, frame deadline, idle timeout;
 * pre-auth deadlines and the refusal summary (server_preauth.c); heap trim. */
void srv_on_sweep(uv_timer_t *t)
{
	struct store_server *s = t->data;
	int64_t now = (int64_t)uv_now(s->loop);
	struct conn *c, *next;
	char peer[96], msg[128];

	srv_ts_sweep(s); /* a TCPStore generation that ended: its connections go first */
	for (c = s->conns; c != NULL; c = next) {
		next = c->next;
		if (srv_auth_tarpit_due(c, now)) {
			continue;
		} else if (c->failing) {
			if (now >= c->drain_until) {
				srv_conn_close(c);
			}
		} else if (c->in_len > 0 && !c->paused &&
			   now - c->frame_start >= s->frame_timeout_ms) {
			/* A slow sender cannot hold a buffer (and evade the idle timeout) byte by
			 * byte: a frame has a deadline from its first byte. */
			snprintf(msg, sizeof(msg),
				 "frame not completed within %d ms of its first byte (got %u of %u "
				 "bytes)",
				 s->frame_timeout_ms, c->in_len, c->need ? c->need : WIRE_HDR_LEN);
			srv_conn_drop(c, LIMIT_FRAME_TIME, WIRE_E_TIMEOUT, msg);
		} else if (s->idle_timeout_ms > 0 && c->nwaits == 0 && !c->paused &&
			   c->proto == TS_PROTO_CRUN && now - c->last_active >= s->idle_timeout_ms) {
			/* Not a TCPStore client: PyTorch holds one connection for a whole job, and
			 * its server never drops an idle one. */
			srv_conn_peer(c, peer, sizeof(peer));
			log_info("store: dropping %s: idle for %d ms", peer, s->idle_timeout_ms);
			srv_conn_close(c);
		}
	}
	srv_preauth_sweep(s, now);
	srv_flush_all(s);
	srv_mem_trim(s);
	if (++s->sweeps % 20 == 0) {
		srv_peers_sweep(s, now);
	}
}
