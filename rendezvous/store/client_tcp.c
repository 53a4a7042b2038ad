/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_tcp.c: the blocking TCP store client (docs/protocol.md). */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/store/backend.h"
#include "rendezvous/store/client_tcp_internal.h"
#include "rendezvous/store/store_runs.h"
#include "rendezvous/store/tls.h"
#include "rendezvous/store/unix_path.h"
#include "src/common/util.h"
#include "src/common/backoff.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/net.h"
#include "src/common/token.h"
#include "rendezvous/store/wire.h"

#define WAIT_MARGIN_MS 5000   /* socket deadline beyond a wait's own timeout */
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 1000
/*
 * Losing the store (docs/reliability.md, "Losing the store"). A connection that was up and is
 * lost is re-established for at most RECONNECT_MS in all (or the connect timeout, if shorter),
 * counted from the loss and shared by every call made meanwhile; RECONNECT_REFUSED_MS when
 * every try is refused (nothing listens there any more: the store process is gone). Once that
 * is spent, each call tries to connect once (LAST_TRY_MS at most) and fails with the cause.
 * The first connection waits the whole connect timeout for a store that is not up yet.
 * Each TCP connect is bounded by CONNECT_TRY_MS, so a port whose packets are dropped (a
 * firewall) costs a few seconds per try, not the kernel's two minutes of SYN retries. Either
 * way the wait says so after PROGRESS_FIRST_MS and then every PROGRESS_EVERY_MS, naming the
 * endpoint and why each try failed.
 */
#define RECONNECT_MS 10000
#define RECONNECT_REFUSED_MS 3000
#define LAST_TRY_MS 1000
#define CONNECT_TRY_MS 3000
#define PROGRESS_FIRST_MS 2000
#define PROGRESS_EVERY_MS 5000
/* A handshake try's bound: something that accepts connections and stays silent (a port taken by
 * another program) is named every few seconds; a slow store gets the longer second bound. */
#define HANDSHAKE_TRY_MS 5000
#define HANDSHAKE_TRY_MAX_MS 10000

/* The transport (client_tcp_io.c) under the names this file has always used. */
static void disconnect(struct store_backend *b)
{
	tcp_disconnect(b);
}

int tcp_fail(struct store_backend *b, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	diag_setv(&b->diag, code, fmt, ap);
	va_end(ap);
	return diag_prefix(&b->diag, "%s", b->where);
}

/*
 * Send the frame in b->out and read its reply into b->rh / b->in. Returns 0 (the reply
 * status is OK), the mapped code of an error reply (message kept in b->diag), or a transport
 * error, after which the connection is dropped and the next call reconnects. Replies owed to
 * sets sent without waiting come first: one of them refused, or lost, is what this returns
 * (the request just sent may have run; the connection is dropped instead of waiting for it).
 */
static int roundtrip(struct store_backend *b, int64_t deadline)
{
	uint32_t id = b->rh.id;
	size_t plen = 0;
	int rc;

	rc = tcp_send_out(b, deadline);
	if (rc == 0 && b->pipe.n > 0) {
		rc = tcp_pipe_drain(b, deadline);
		if (rc < 0 && b->fd >= 0) {
			tcp_io_disconnect(b);
		}
	}
	if (rc == 0) {
		rc = tcp_recv_frame(b, deadline, &plen);
	}
	if (rc < 0) {
		return rc;
	}
	/* Id 0 is only ever a connection-level error: an OK one answers nothing we sent. */
	if (!(b->rh.flags & WIRE_FLAG_REPLY) ||
	    (b->rh.id != id && (b->rh.id != 0 || b->rh.status == WIRE_OK))) {
		disconnect(b);
		return tcp_fail(b, -EPROTO, "reply: unexpected frame (id %u, expected %u)",
				b->rh.id, id);
	}
	if (b->rh.status != WIRE_OK) {
		rc = wire_status_to_code(b->rh.status);
		/* Op 0: a connection-level error (too many connections, a bad frame): no op. */
		tcp_fail(b, rc, "%s%s%.*s", b->rh.op != 0 ? wire_op_name(b->rh.op) : "",
			 b->rh.op != 0 ? ": " : "", (int)(plen > 400 ? 400 : plen),
			 (const char *)b->in);
		/* The server closes the connection after these (docs/protocol.md). */
		if (b->rh.id != id || rc == -EPROTO || rc == -EOPNOTSUPP || rc == CRUN_EMAGIC ||
		    rc == CRUN_EVERSION || rc == CRUN_EAUTH || rc == -ESHUTDOWN) {
			disconnect(b);
		}
		return rc;
	}
	return 0;
}

static size_t begin(struct store_backend *b, uint8_t op)
{
	b->out.len = 0;
	b->rh.id = ++b->next_id;
	if (b->rh.id == 0) {
		b->rh.id = b->next_id = 1;
	}
	return wire_frame_begin(&b->out, op, 0, 0, b->rh.id);
}

static void cur_init(struct store_backend *b, struct wire_cur *c)
{
	c->p = b->in;
	c->end = b->in + (b->rh.len - 8);
	c->bad = false;
}

/* Run the request in b->out; on success @c reads the reply payload. */
static int call(struct store_backend *b, int timeout_ms);

static int call_reply(struct store_backend *b, int timeout_ms, struct wire_cur *c)
{
	int rc = call(b, timeout_ms);

	if (rc == 0) {
		cur_init(b, c);
	}
	return rc;
}

/* The reply was read exactly: nothing missing, nothing left over. */
static bool cur_done(const struct wire_cur *c)
{
	return !c->bad && c->p == c->end;
}

static void put_key(struct store_backend *b, const char *key)
{
	wire_put_bytes(&b->out, key, strlen(key));
}

static int bad_reply(struct store_backend *b)
{
	disconnect(b);
	return tcp_fail(b, -EPROTO, "%s: malformed reply", wire_op_name(b->rh.op));
}

/* The step's message without our "store H:P: " prefix, for a fail() that names the step. */
static const char *own_msg(const struct store_backend *b)
{
	size_t n = strlen(b->where);

	return strncmp(b->diag.msg, b->where, n) == 0 && b->diag.msg[n] == ':' ? b->diag.msg + n + 2
										: b->diag.msg;
}

/* AUTH refused: name our token's fingerprint and where it came from. The store does not send
 * its own to a peer that has not authenticated (docs/security.md); its log names it. */
static int auth_refused(struct store_backend *b, int rc)
{
	char m[sizeof(b->diag.msg)];

	snprintf(m, sizeof(m), "%s", own_msg(b));
	if (rc == CRUN_EAUTH && strstr(m, "token mismatch") != NULL) {
		return tcp_fail(
			b, rc,
			"handshake: token mismatch: the store refused our token (fingerprint "
			"%s from %s); its log names the fingerprint of its own",
			b->cred.fpr, b->cred.source);
	}
	return tcp_fail(b, rc, "handshake: %s", m);
}

/*
 * HELLO (our nonce, our scope) -> the store's nonce; then, when it asks, AUTH (our proof) ->
 * its proof. The token never crosses the wire (docs/protocol.md, "Handshake").
 */
/*
 * Something that is no crun store answered HELLO (sshd's banner, an HTTP error: no frame), or
 * accepted the connection and said nothing (a PyTorch TCPStore, a silent listener): say so, with
 * what it sent, instead of "bad frame length 1397966893". True when @b->diag now says it.
 */
static bool not_a_store(struct store_backend *b, int rc, int64_t t0)
{
	char esc[4 * sizeof(b->junk) + 1];
	size_t i, n = 0;

	if (rc == -EPROTO && b->junk_len > 0) {
		for (i = 0; i < b->junk_len; i++) {
			uint8_t ch = b->junk[i];

			if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
				esc[n++] = (char)ch;
			} else if (ch == '\r' || ch == '\n') {
				esc[n++] = '\\';
				esc[n++] = ch == '\r' ? 'r' : 'n';
			} else {
				n += (size_t)snprintf(esc + n, sizeof(esc) - n, "\\x%02x", ch);
			}
		}
		esc[n] = '\0';
		diag_set(&b->diag, rc, "not a crun store at %s (it sent \"%s\"%s)", b->where + 6,
			 esc, b->junk_len == sizeof(b->junk) ? "..." : "");
		return true;
	}
	if (rc == -ETIMEDOUT && !b->was_up) {
		diag_set(&b->diag, rc,
			 "not a crun store at %s? (it accepted the connection but sent nothing in "
			 "%.1f s: no reply in time to the handshake)",
			 b->where + 6,
			 (double)(crun_now_ms() - (b->down_since > 0 && b->down_since < t0
							   ? b->down_since : t0)) / 1000.0);
		return true;
	}
	return false;
}

static int handshake(struct store_backend *b, int64_t deadline)
{
	uint8_t cn[WIRE_NONCE_LEN], sn[WIRE_NONCE_LEN], proof[WIRE_PROOF_LEN];
	struct wire_cur c;
	struct wire_str nonce, theirs;
	uint16_t auth;
	int64_t t0;
	size_t off;
	int rc;

	if (b->cred.set && util_random(cn, sizeof(cn)) < 0) {
		return tcp_fail(b, -EIO, "handshake: no random bytes for a nonce");
	}
	b->junk_len = 0;
	t0 = crun_now_ms();
	off = begin(b, WIRE_OP_HELLO);
	wire_put_u32(&b->out, WIRE_MAGIC);
	wire_put_u16(&b->out, WIRE_VERSION);
	wire_put_u16(&b->out, 0);
	wire_put_bytes(&b->out, cn, b->cred.set ? sizeof(cn) : 0);
	wire_put_bytes(&b->out, b->cred.scope, strlen(b->cred.scope));
	wire_frame_end(&b->out, off);
	rc = roundtrip(b, deadline);
	if (rc < 0 && not_a_store(b, rc, t0)) {
		return rc;
	}
	if (rc < 0) {
		/* Keep the message, and name the step. */
		char m[sizeof(b->diag.msg)];

		snprintf(m, sizeof(m), "%s", own_msg(b));
		tcp_fail(b, rc, "handshake: %s", m);
		disconnect(b);
		return rc;
	}
	cur_init(b, &c);
	(void)wire_get_u16(&c);
	auth = wire_get_u16(&c);
	nonce = wire_get_bytes(&c);
	(void)wire_get_u32(&c);
	(void)wire_get_u32(&c);
	b->max_value_len = wire_get_u32(&c);
	if (c.bad || (auth == WIRE_AUTH_TOKEN && nonce.len != WIRE_NONCE_LEN)) {
		return bad_reply(b);
	}
	if (auth == WIRE_AUTH_NONE && !b->cred.set) {
		return 0;
	}
	if (auth == WIRE_AUTH_NONE) {
		disconnect(b);
		return tcp_fail(
			b, CRUN_EAUTH,
			"handshake: the store runs without authentication (--insecure) but we "
			"have a token (fingerprint %s from %s): refusing to use it",
			b->cred.fpr, b->cred.source);
	}
	if (auth != WIRE_AUTH_TOKEN) {
		return bad_reply(b);
	}
	if (!b->cred.set) {
		disconnect(b);
		return tcp_fail(
			b, CRUN_EAUTH,
			"handshake: the store requires a token and we have none (give a token "
			"file: --token-file, CRUN_STORE_TOKEN_FILE)");
	}
	memcpy(sn, nonce.p, sizeof(sn));
	if (token_proof(b->cred.key, sn, cn, TOKEN_ROLE_CLIENT, proof) < 0) {
		disconnect(b);
		return tcp_fail(b, -EIO, "handshake: HMAC failed");
	}
	off = begin(b, WIRE_OP_AUTH);
	wire_put_bytes(&b->out, proof, sizeof(proof));
	wire_frame_end(&b->out, off);
	rc = roundtrip(b, deadline);
	if (rc < 0) {
		rc = auth_refused(b, rc);
		disconnect(b);
		return rc;
	}
	cur_init(b, &c);
	theirs = wire_get_bytes(&c);
	if (!cur_done(&c) || theirs.len != WIRE_PROOF_LEN) {
		return bad_reply(b);
	}
	if (token_proof(b->cred.key, sn, cn, TOKEN_ROLE_SERVER, proof) < 0 ||
	    !token_equal(proof, theirs.p, sizeof(proof))) {
		disconnect(b);
		return tcp_fail(b, CRUN_EAUTH,
				"handshake: the store's proof is wrong: it does not hold our token "
				"(fingerprint %s from %s)",
				b->cred.fpr, b->cred.source);
	}
	return 0;
}

/*
 * Why a try failed, as a person reads it: "connection refused by H:P" (@addr) or "refused",
 * "no answer from H:P (packets dropped?)", "cannot resolve HOST: ...".
 */
static void describe_cause(const struct store_backend *b, int rc, bool addr, char *buf,
			   size_t cap)
{
	const char *hp = addr ? b->where + 5 : ""; /* " H:P", past "store" */

	switch (rc) {
	case -ECONNREFUSED:
		snprintf(buf, cap, "connection refused%s%s", addr ? " by" : "", hp);
		break;
	case -EHOSTUNREACH:
	case -ENETUNREACH:
		snprintf(buf, cap, "no route%s%s", addr ? " to" : "", hp);
		break;
	default:
		if (rc == -ETIMEDOUT && strstr(b->diag.msg, ": connect: ") != NULL) {
			/* The TCP connect itself got no answer: its SYNs dropped on the way. */
			snprintf(buf, cap, "no answer%s%s (packets dropped?)", addr ? " from" : "",
				 hp);
		} else if (addr && strlen(b->diag.msg) > strlen(b->where) + 2) {
			/* The last try's message names the address already: "store H:P: ..." */
			snprintf(buf, cap, "%s", b->diag.msg + 6);
		} else if (strlen(b->diag.msg) > strlen(b->where) + 2) {
			/* The message of the last try, without the "store H:P: " in front. */
			snprintf(buf, cap, "%s", b->diag.msg + strlen(b->where) + 2);
		} else {
			snprintf(buf, cap, "%s", crun_strerror(rc));
		}
		break;
	}
}

/*
 * One try: resolve, connect (each address for CONNECT_TRY_MS at most), TLS, handshake, all
 * before @deadline. 0; a retryable failure (its words in b->diag); or, with *@final set, one
 * that no retry mends (a refused handshake or certificate).
 */
static int try_once(struct store_backend *b, int64_t deadline, bool *final)
{
	struct addrinfo hints, *res = NULL, *ai;
	int64_t hs_deadline, t0;
	char port_s[16];
	int rc = -ETIMEDOUT, gai;

	*final = false;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(port_s, sizeof(port_s), "%d", b->port);
	gai = getaddrinfo(b->host, port_s, &hints, &res);
	if (gai != 0) {
		/* A name that does not resolve yet (DNS catching up with a new host) is retried
		 * like a store that is not up yet. */
		return tcp_fail(b, gai == EAI_AGAIN ? -EAGAIN : -EINVAL, "cannot resolve %s: %s",
				b->host, gai_strerror(gai));
	}
	/* A local endpoint: the store's AF_UNIX socket when it has one (client_tcp_unix.c). */
	rc = tcp_unix_connect(b, res, deadline) == 0 ? 0 : -ETIMEDOUT;
	for (ai = rc == 0 ? NULL : res; ai != NULL; ai = ai->ai_next) {
		int64_t t = crun_now_ms() + CONNECT_TRY_MS;

		rc = tcp_io_connect(b, ai, t < deadline ? t : deadline);
		if (rc == 0) {
			break;
		}
	}
	freeaddrinfo(res);
	if (rc < 0) {
		return tcp_fail(b, rc, "connect: %s", crun_strerror(rc));
	}
	rc = tcp_io_tls_start(b, deadline);
	if (rc < 0) {
		/* "TLS handshake: the store's certificate has expired (...)" */
		tcp_fail(b, rc, "TLS handshake: %s", tcp_io_strerror(b, rc));
		disconnect(b);
		*final = rc != -ECONNRESET && rc != -EPIPE;
		return rc;
	}
	if (b->hs_try_ms <= 0) {
		b->hs_try_ms = HANDSHAKE_TRY_MS;
	}
	hs_deadline = crun_now_ms() + b->hs_try_ms;
	if (hs_deadline >= deadline) {
		hs_deadline = deadline;
	}
	t0 = crun_now_ms();
	rc = handshake(b, hs_deadline);
	if (rc == -ETIMEDOUT && hs_deadline < deadline) {
		/* Silent within this try's bound, with time left: said, and tried again longer. */
		b->hs_try_ms = HANDSHAKE_TRY_MAX_MS;
		disconnect(b);
		*final = false;
		return tcp_fail(b, rc,
				"it accepted the connection but did not answer the handshake in "
				"%.1f s (not a crun store?)",
				(double)(crun_now_ms() - t0) / 1000.0);
	}
	/* A refused handshake is final; a dropped one is worth a retry. */
	*final = rc < 0 && rc != -ECONNRESET && rc != -EPIPE;
	return rc;
}

/*
 * Connect and handshake, retrying with backoff + jitter within the limits at the top of this
 * file, and never past @op_deadline (0: none; an operation's own deadline). Fails with the
 * cause of the last try (-ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT, ...).
 */
static int reconnect(struct store_backend *b, int64_t op_deadline)
{
	int64_t now = crun_now_ms(), budget, give_up, deadline, next_progress;
	struct backoff bo;
	char cause[200];
	bool last_try, final;
	int rc, tries = 0;

	if (b->down_since == 0) {
		b->down_since = now;
	}
	budget = b->connect_timeout_ms;
	if (b->was_up && budget > RECONNECT_MS) {
		budget = RECONNECT_MS;
	}
	give_up = b->down_since + budget;
	last_try = now >= give_up;
	deadline = last_try ? now + LAST_TRY_MS : give_up;
	if (op_deadline > 0 && op_deadline < deadline) {
		deadline = op_deadline;
	}
	next_progress = b->down_since + PROGRESS_FIRST_MS;
	backoff_init(&bo, BACKOFF_FIRST_MS, BACKOFF_MAX_MS);
	backoff_set_jitter(&bo, BACKOFF_HALF, backoff_seed());
	for (;;) {
		rc = try_once(b, deadline, &final);
		tries++;
		if (rc == 0) {
			b->was_up = true;
			b->hs_try_ms = HANDSHAKE_TRY_MS;
			b->down_since = 0;
			return 0;
		}
		if (final) {
			return rc;
		}
		now = crun_now_ms();
		if (now >= deadline || last_try ||
		    (b->was_up && rc == -ECONNREFUSED &&
		     now >= b->down_since + RECONNECT_REFUSED_MS)) {
			/* "store: connection refused by H:P": the cause names the address. */
			describe_cause(b, rc, true, cause, sizeof(cause));
			return diag_set(&b->diag, rc, "store: %s (%s %lld.%lld s, %d tries)", cause,
					b->was_up ? "connection lost, retried for" : "waited",
					(long long)((now - b->down_since) / 1000),
					(long long)((now - b->down_since) % 1000 / 100), tries);
		}
		if (now >= next_progress) {
			/* Never silent: what is tried and why it fails, every few seconds. */
			describe_cause(b, rc, false, cause, sizeof(cause));
			log_warn("%s the store at %s: %s (%lld s of %lld s)",
				 b->was_up ? "reconnecting to" : "waiting for", b->where + 6, cause,
				 (long long)((now - b->down_since) / 1000),
				 (long long)(budget / 1000));
			next_progress = now + PROGRESS_EVERY_MS;
		}
		/* Exponential backoff with jitter in [d/2, d]. */
		backoff_pause(&bo, deadline);
	}
}

int tcp_ensure_conn(struct store_backend *b, int64_t deadline)
{
	/* A request built before the reconnect is kept aside: the handshake reuses out. */
	struct wire_buf saved = b->out;
	uint32_t id = b->rh.id;
	int rc;

	if (b->fd >= 0) {
		return 0;
	}
	memset(&b->out, 0, sizeof(b->out));
	/* The operation's deadline covers reconnecting: a call never outlasts it. */
	rc = reconnect(b, deadline);
	wire_buf_finish(&b->out);
	b->out = saved;
	b->rh.id = id;
	return rc;
}

/* Make sure there is a connection, then run the request in b->out. A set sent without waiting
 * that failed and was not yet reported is reported instead, before anything is sent. */
static int call(struct store_backend *b, int timeout_ms)
{
	int64_t deadline = crun_now_ms() + (timeout_ms < 0 ? 300000 : timeout_ms);
	int rc = tcp_pipe_take_error(b);

	if (rc == 0) {
		rc = tcp_ensure_conn(b, deadline);
	}
	return rc < 0 ? rc : roundtrip(b, deadline);
}

/* ---- operations ---- */

void tcp_set_frame(struct store_backend *b, const char *key, const void *val, size_t len,
		   int64_t ttl_ms)
{
	size_t off = begin(b, WIRE_OP_SET);

	put_key(b, key);
	wire_put_bytes(&b->out, val, len);
	wire_put_i64(&b->out, ttl_ms);
	wire_frame_end(&b->out, off);
}

static int tcp_set(struct store_backend *b, const char *key, const void *val, size_t len,
		   int64_t ttl_ms, int timeout_ms)
{
	tcp_set_frame(b, key, val, len, ttl_ms);
	return call(b, timeout_ms);
}

static int copy_out(struct store_backend *b, struct wire_str s, void **val, size_t *len)
{
	char *p = malloc((size_t)s.len + 1);

	if (p == NULL) {
		return tcp_fail(b, -ENOMEM, "out of memory");
	}
	if (s.len > 0) {
		memcpy(p, s.p, s.len);
	}
	p[s.len] = '\0';
	*val = p;
	if (len != NULL) {
		*len = s.len;
	}
	return 0;
}

static int tcp_get(struct store_backend *b, const char *key, void **val, size_t *len,
		   int timeout_ms)
{
	struct wire_cur c;
	struct wire_str s;
	size_t off = begin(b, WIRE_OP_GET);
	uint8_t found;
	int rc;

	put_key(b, key);
	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	found = wire_get_u8(&c);
	s = found ? wire_get_bytes(&c) : (struct wire_str){NULL, 0};
	if (!cur_done(&c)) {
		return bad_reply(b);
	}
	if (!found) {
		return -ENOENT;
	}
	return copy_out(b, s, val, len);
}

static void put_keys(struct store_backend *b, const char *const *keys, size_t n)
{
	size_t i;

	wire_put_u32(&b->out, (uint32_t)n);
	for (i = 0; i < n; i++) {
		put_key(b, keys[i]);
	}
}

/* Send WAIT in @mode and read its reply's index; @c is left at what follows it. */
static int wait_call(struct store_backend *b, const char *const *keys, size_t n, uint8_t mode,
		     int timeout_ms, struct wire_cur *c, uint32_t *idx)
{
	size_t off = begin(b, WIRE_OP_WAIT);
	int rc;

	wire_put_u8(&b->out, mode);
	wire_put_i64(&b->out, timeout_ms);
	put_keys(b, keys, n);
	wire_frame_end(&b->out, off);
	/* The server times the wait; the socket only guards against a dead server. */
	if (timeout_ms >= 0) {
		timeout_ms = timeout_ms > INT32_MAX - WAIT_MARGIN_MS ? INT32_MAX
								      : timeout_ms + WAIT_MARGIN_MS;
	}
	rc = call_reply(b, timeout_ms, c);
	if (rc < 0) {
		return rc;
	}
	*idx = wire_get_u32(c);
	if (c->bad || (mode != WIRE_WAIT_ALL && *idx >= n)) {
		return bad_reply(b);
	}
	return 0;
}

static int tcp_wait(struct store_backend *b, const char *const *keys, size_t n, bool any,
		    int timeout_ms)
{
	struct wire_cur c;
	uint32_t idx;
	int rc = wait_call(b, keys, n, any ? WIRE_WAIT_ANY : WIRE_WAIT_ALL, timeout_ms, &c, &idx);

	if (rc < 0) {
		return rc;
	}
	if (!cur_done(&c)) {
		return bad_reply(b);
	}
	return any ? (int)idx : 0;
}

/*
 * backend.h's wait_get: one WAIT in ANY_GET mode, whose reply carries the value of the key it
 * names (one round trip instead of a wait and a get). A store older than ANY_GET refuses the
 * mode ("WAIT: bad mode 2"): this handle then waits and gets, as before, from then on.
 */
static int tcp_wait_get(struct store_backend *b, const char *const *keys, size_t n, void **val,
			size_t *len, int timeout_ms, int64_t *mark)
{
	struct wire_cur c;
	struct wire_str s;
	uint32_t idx;
	uint8_t found;
	int rc = -EINVAL;

	*val = NULL;
	*len = 0;
	if (mark != NULL) {
		*mark = 0; /* the server waits on its own state: nothing to resume */
	}
	if (!b->no_wait_get) {
		rc = wait_call(b, keys, n, WIRE_WAIT_ANY_GET, timeout_ms, &c, &idx);
		if (rc == 0) {
			found = wire_get_u8(&c);
			s = found ? wire_get_bytes(&c) : (struct wire_str){NULL, 0};
			if (!cur_done(&c)) {
				return bad_reply(b);
			}
			/* Not found: deleted (a TTL) in the turn its write ended the wait;
			 * *val stays NULL and store_wait_any_get() says -ENOENT. */
			if (found) {
				rc = copy_out(b, s, val, len);
			}
			return rc < 0 ? rc : (int)idx;
		}
		if (b->rh.op != WIRE_OP_WAIT || b->rh.status != WIRE_E_INVALID ||
		    strstr(b->diag.msg, "bad mode") == NULL) {
			return rc;
		}
		b->no_wait_get = true;
		log_debug("%s: the store has no WAIT ANY_GET (an older crun-rdzvd): waiting, then "
			  "getting",
			  b->where);
	}
	rc = tcp_wait(b, keys, n, true, timeout_ms);
	if (rc >= 0) {
		int g = tcp_get(b, keys[rc], val, len, timeout_ms);

		rc = g < 0 ? g : rc;
	}
	return rc;
}

static int tcp_add(struct store_backend *b, const char *key, int64_t delta, int64_t *result,
		   int timeout_ms)
{
	struct wire_cur c;
	size_t off = begin(b, WIRE_OP_ADD);
	int64_t v;
	int rc;

	put_key(b, key);
	wire_put_i64(&b->out, delta);
	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	v = wire_get_i64(&c);
	if (!cur_done(&c)) {
		return bad_reply(b);
	}
	if (result != NULL) {
		*result = v;
	}
	return 0;
}

static int tcp_compare_set(struct store_backend *b, const char *key, const void *expected,
			   size_t elen, const void *desired, size_t dlen, void **cur,
			   size_t *curlen, int timeout_ms)
{
	struct wire_cur c;
	struct wire_str s;
	size_t off = begin(b, WIRE_OP_CAS);
	int rc;

	put_key(b, key);
	wire_put_bytes(&b->out, expected, elen);
	wire_put_bytes(&b->out, desired, dlen);
	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	(void)wire_get_u8(&c);
	s = wire_get_bytes(&c);
	if (!cur_done(&c)) {
		return bad_reply(b);
	}
	if (cur == NULL) {
		return 0;
	}
	return copy_out(b, s, cur, curlen);
}

static int tcp_del(struct store_backend *b, const char *key, int timeout_ms)
{
	struct wire_cur c;
	size_t off = begin(b, WIRE_OP_DELETE);
	uint8_t existed;
	int rc;

	put_key(b, key);
	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	existed = wire_get_u8(&c);
	if (!cur_done(&c)) {
		return bad_reply(b);
	}
	return existed ? 0 : -ENOENT;
}

static int tcp_check(struct store_backend *b, const char *const *keys, size_t n, bool *all,
		     int timeout_ms)
{
	struct wire_cur c;
	size_t off = begin(b, WIRE_OP_CHECK);
	uint8_t v;
	int rc;

	put_keys(b, keys, n);
	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	v = wire_get_u8(&c);
	if (!cur_done(&c)) {
		return bad_reply(b);
	}
	*all = v != 0;
	return 0;
}

static int tcp_num_keys(struct store_backend *b, int64_t *n, int timeout_ms)
{
	struct wire_cur c;
	size_t off = begin(b, WIRE_OP_NUM_KEYS);
	int64_t v;
	int rc;

	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	v = wire_get_i64(&c);
	if (!cur_done(&c)) {
		return bad_reply(b);
	}
	*n = v;
	return 0;
}

static int tcp_append(struct store_backend *b, const char *key, const void *val, size_t len,
		      int timeout_ms)
{
	size_t off = begin(b, WIRE_OP_APPEND);

	put_key(b, key);
	wire_put_bytes(&b->out, val, len);
	wire_frame_end(&b->out, off);
	return call(b, timeout_ms);
}

static int tcp_multi_get(struct store_backend *b, const char *const *keys, size_t n,
			 void **vals, size_t *lens, int timeout_ms)
{
	struct wire_cur c;
	struct wire_str s;
	size_t off = begin(b, WIRE_OP_MULTI_GET), i, j;
	uint32_t m;
	int rc;

	put_keys(b, keys, n);
	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	m = wire_get_u32(&c);
	if (c.bad || m != n) {
		return bad_reply(b);
	}
	for (i = 0; i < n; i++) {
		vals[i] = NULL;
		lens[i] = 0;
	}
	for (i = 0; i < n; i++) {
		if (wire_get_u8(&c)) {
			s = wire_get_bytes(&c);
			if (!c.bad) {
				rc = copy_out(b, s, &vals[i], &lens[i]);
			}
		}
		if (c.bad || rc < 0) {
			for (j = 0; j <= i; j++) {
				free(vals[j]);
				vals[j] = NULL;
				lens[j] = 0;
			}
			return rc < 0 ? rc : bad_reply(b);
		}
	}
	if (c.p != c.end) {
		for (i = 0; i < n; i++) {
			free(vals[i]);
			vals[i] = NULL;
		}
		return bad_reply(b);
	}
	return 0;
}

static int tcp_multi_set(struct store_backend *b, const char *const *keys, size_t n,
			 const void *const *vals, const size_t *lens, int timeout_ms)
{
	size_t off = begin(b, WIRE_OP_MULTI_SET), i;

	wire_put_u32(&b->out, (uint32_t)n);
	for (i = 0; i < n; i++) {
		put_key(b, keys[i]);
		wire_put_bytes(&b->out, vals[i], lens[i]);
	}
	wire_frame_end(&b->out, off);
	return call(b, timeout_ms);
}

static int tcp_ping(struct store_backend *b, int timeout_ms)
{
	size_t off = begin(b, WIRE_OP_PING);

	wire_frame_end(&b->out, off);
	return call(b, timeout_ms);
}

/* LIST_RUNS: -EOPNOTSUPP (the server's UNKNOWN_OP) from a crun-rdzvd that predates it. */
static int tcp_list_runs(struct store_backend *b, uint32_t max, struct store_run **runs,
			 uint32_t *n, uint32_t *total, int timeout_ms)
{
	struct store_run *r;
	struct wire_str id;
	struct wire_cur c;
	size_t off = begin(b, WIRE_OP_LIST_RUNS);
	uint32_t i, got;
	int rc;

	wire_put_u32(&b->out, max);
	wire_frame_end(&b->out, off);
	rc = call_reply(b, timeout_ms, &c);
	if (rc < 0) {
		return rc;
	}
	*total = wire_get_u32(&c);
	got = wire_get_u32(&c);
	if (c.bad || got > WIRE_LIST_MAX || got > *total) {
		return bad_reply(b);
	}
	r = calloc(got + 1u, sizeof(*r));
	if (r == NULL) {
		return tcp_fail(b, -ENOMEM, "LIST_RUNS: out of memory");
	}
	for (i = 0; i < got && !c.bad; i++) {
		id = wire_get_bytes(&c);
		if (c.bad || id.len >= sizeof(r[i].id)) {
			c.bad = true;
			break;
		}
		memcpy(r[i].id, id.p, id.len);
		r[i].keys = wire_get_i64(&c);
		r[i].bytes = wire_get_i64(&c);
		r[i].wrote_ms = wire_get_i64(&c);
	}
	if (!cur_done(&c)) {
		free(r);
		return bad_reply(b);
	}
	*runs = r;
	*n = got;
	return 0;
}

static void tcp_close(struct store_backend *b)
{
	if (b == NULL) {
		return;
	}
	tcp_pipe_close(b);
	disconnect(b);
	tcp_pipe_finish(b);
	wire_buf_finish(&b->out);
	free(b->rb);
	free(b->host);
	free(b->tls_name);
	tls_ctx_free(b->tls_ctx);
	memset(&b->cred, 0, sizeof(b->cred));
	free(b);
}

static const struct store_ops tcp_ops = {
	.name = "tcp",
	.set = tcp_set,
	.set_async = tcp_set_async,
	.flush = tcp_flush,
	.get = tcp_get,
	.wait = tcp_wait,
	.wait_get = tcp_wait_get,
	.add = tcp_add,
	.compare_set = tcp_compare_set,
	.del = tcp_del,
	.check = tcp_check,
	.num_keys = tcp_num_keys,
	.append = tcp_append,
	.multi_get = tcp_multi_get,
	.multi_set = tcp_multi_set,
	.ping = tcp_ping,
	.list_runs = tcp_list_runs,
	.last_error = store_tcp_last_error,
	.close = tcp_close,
};

const char *store_tcp_last_error(const struct store_backend *b)
{
	return b->diag.msg;
}

int store_tcp_open(const char *host, int port, const struct token_cred *cred,
		   int connect_timeout_ms, struct store_backend **out, const struct store_ops **ops,
		   struct crun_diag *d)
{
	const struct store_tcp_link l = {.connect_timeout_ms = connect_timeout_ms};

	return store_tcp_open_link(host, port, cred, &l, out, ops, d);
}

int store_tcp_open_link(const char *host, int port, const struct token_cred *cred,
			const struct store_tcp_link *l, struct store_backend **out,
			const struct store_ops **ops, struct crun_diag *d)
{
	const struct tls_files *tls = l->tls;
	const char *unix_socket = l->unix_socket;
	struct store_backend *b;
	int spin_us, rc;

	if (host == NULL || *host == '\0' || port <= 0 || port > 65535) {
		return diag_set(d, -EINVAL, "store %s:%d: bad address", host ? host : "", port);
	}
	b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return -ENOMEM;
	}
	b->fd = -1;
	b->port = port;
	b->connect_timeout_ms = l->connect_timeout_ms > 0 ? l->connect_timeout_ms : 30000;
	spin_us = l->spin_us == 0 ? STORE_SPIN_US_DEFAULT : l->spin_us;
	b->spin_ns = spin_us > 0 ? (int64_t)spin_us * 1000 : 0;
	b->host = strdup(host);
	b->unix_off = store_unix_off(unix_socket);
	if (unix_socket != NULL && unix_socket[0] == '/') {
		snprintf(b->unix_given, sizeof(b->unix_given), "%s", unix_socket);
	}
	if (cred != NULL) {
		b->cred = *cred;
	}
	if (b->host == NULL) {
		tcp_close(b);
		return -ENOMEM;
	}
	snprintf(b->where, sizeof(b->where), "store ");
	net_join_hostport(b->where + 6, sizeof(b->where) - 6, host, port);
	if (tls_files_any(tls)) {
		rc = tls_client_ctx(tls, &b->tls_ctx, d);
		b->tls_name = strdup(tls->server_name != NULL && tls->server_name[0] != '\0'
					     ? tls->server_name
					     : host);
		if (rc < 0 || b->tls_name == NULL) {
			if (rc == 0) {
				rc = -ENOMEM;
			} else {
				diag_prefix(d, "%s", b->where);
			}
			tcp_close(b);
			return rc;
		}
	}
	rc = reconnect(b, 0);
	if (rc < 0) {
		diag_set(d, rc, "%s", b->diag.msg);
		tcp_close(b);
		return rc;
	}
	*out = b;
	*ops = &tcp_ops;
	return 0;
}
