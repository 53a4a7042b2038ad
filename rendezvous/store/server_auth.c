/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_auth.c: the handshake (HELLO, AUTH), failure rate limits, scopes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "rendezvous/store/server_internal.h"
#include "src/common/log.h"
#include "src/common/net.h"
#include "src/common/token.h"
#include "src/common/util.h"

/*
 * Failed handshakes are counted per source (all of loopback is one, an IPv6 source its /64) in
 * a bounded table, with a token bucket: a source may fail GUARD_FREE_FAILURES times at once (a
 * mistyped token file, a restarted job), and earns one more failure per GUARD_REFILL_MS.
 * While its bucket is empty, every AUTH from it, right or wrong, is answered GUARD_DELAY_MS
 * after it came (the connection is held, its input discarded): the time of an answer tells
 * nothing about the proof, so silence no longer means "wrong", and a guesser learns at most
 * one verdict per held connection per GUARD_DELAY_MS (its connections are capped by the
 * pre-authentication quota, server_preauth.c). A right proof is never refused for its source's
 * failures: a client with the right token gets in GUARD_DELAY_MS late while someone guesses
 * from its host. The table holds GUARD_SLOTS sources; when full, the one quiet longest is
 * forgotten.
 */
#define GUARD_SLOTS 1024
#define GUARD_FREE_FAILURES 3
#define GUARD_REFILL_MS 20000
#define GUARD_DELAY_MS 1000
#define GUARD_LOG_MS 10000 /* one log line per source per 10 s at most */

struct guard_slot {
	uint8_t addr[16];
	bool used;
	uint32_t failures;   /* counted since the source was last forgotten */
	uint32_t unlogged;   /* failures and refusals not yet in a log line */
	int64_t last_fail;
	int64_t credit_ms;   /* the bucket: GUARD_REFILL_MS per failure it may still make */
	int64_t logged_at;
};

struct srv_guard {
	struct guard_slot slot[GUARD_SLOTS];
};

/* Per connection, from HELLO to the end of the connection (freed by srv_auth_conn_free). */
struct srv_auth_conn {
	uint8_t sn[TOKEN_NONCE_LEN];
	uint8_t cn[TOKEN_NONCE_LEN];
	uint8_t key[TOKEN_KEY_LEN];
	bool has_cn;
	bool key_ok;
	uint32_t scope_len;
	char scope[WIRE_MAX_SCOPE + 1];
};

void srv_auth_conn_free(struct conn *c)
{
	if (c->auth != NULL) {
		memset(c->auth, 0, sizeof(*c->auth));
		free(c->auth);
		c->auth = NULL;
	}
}

void srv_auth_guard_free(struct store_server *s)
{
	free(s->guard);
	s->guard = NULL;
}

/*
 * The bucket a source's failures are counted in. A user on the store's host can connect from
 * any of the 16 million addresses of 127/8 (and ::1), and a host with IPv6 owns a whole /64:
 * counted per address, each would start with fresh free guesses. So every loopback source
 * shares one bucket, and an IPv6 source is counted by its /64.
 */
static void guard_bucket(uint8_t addr[16])
{
	static const uint8_t v6_loopback[16] = {[15] = 1};
	static const uint8_t v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
	bool v4 = memcmp(addr, v4_mapped, 12) == 0;

	if ((v4 && addr[12] == 127) || memcmp(addr, v6_loopback, 16) == 0) {
		memset(addr, 0, 16);
		addr[10] = addr[11] = 0xff;
		addr[12] = 127;
	} else if (!v4) {
		memset(addr + 8, 0, 8);
	}
}

/* The peer's failure bucket as 16 bytes (IPv4 mapped into IPv6), and its address as text
 * when @text is not NULL (only a failure logs it: no formatting per handshake). */
static bool peer_addr(struct conn *c, uint8_t out[16], char *text, size_t len)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);

	memset(out, 0, 16);
	if (text != NULL) {
		snprintf(text, len, "?");
	}
	if (srv_conn_peername(c, &ss, &n) != 0) {
		return false;
	}
	if (ss.ss_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
		if (text != NULL) {
			uv_ip4_name((struct sockaddr_in *)&ss, text, len);
		}
	} else if (ss.ss_family == AF_INET6) {
		memcpy(out, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
		if (text != NULL) {
			uv_ip6_name((struct sockaddr_in6 *)&ss, text, len);
		}
	} else {
		return false;
	}
	guard_bucket(out);
	return true;
}

static struct guard_slot *guard_find(struct store_server *s, const uint8_t addr[16], bool make,
				     int64_t now)
{
	struct guard_slot *g, *oldest = NULL; /* last_fail: also when the bucket was refilled */
	size_t i;

	if (s->guard == NULL) {
		if (!make) {
			return NULL;
		}
		s->guard = calloc(1, sizeof(*s->guard));
		if (s->guard == NULL) {
			return NULL;
		}
	}
	for (i = 0; i < GUARD_SLOTS; i++) {
		g = &s->guard->slot[i];
		if (g->used && memcmp(g->addr, addr, 16) == 0) {
			g->credit_ms += now - g->last_fail;
			if (g->credit_ms >= GUARD_FREE_FAILURES * GUARD_REFILL_MS) {
				g->credit_ms = GUARD_FREE_FAILURES * GUARD_REFILL_MS;
				g->failures = 0;
			}
			g->last_fail = now;
			return g;
		}
		if (oldest == NULL || !g->used || (oldest->used && g->last_fail < oldest->last_fail)) {
			oldest = g;
		}
	}
	if (!make) {
		return NULL;
	}
	memset(oldest, 0, sizeof(*oldest));
	memcpy(oldest->addr, addr, 16);
	oldest->used = true;
	oldest->credit_ms = GUARD_FREE_FAILURES * GUARD_REFILL_MS;
	oldest->last_fail = now;
	return oldest;
}

/* The store's own log may name its token's fingerprint; the wire never does. */
static void guard_log(struct store_server *s, struct guard_slot *g, const char *addr,
		      const char *why, int64_t now)
{
	char fpr[TOKEN_FPR_HEX + 1];

	if (g->logged_at != 0 && now - g->logged_at < GUARD_LOG_MS) {
		return;
	}
	token_fingerprint(s->token, s->token_len, fpr);
	log_warn("store: %u failed or refused handshake(s) from %s (total failures %u, last: %s; "
		 "the store's token has fingerprint %s)%s",
		 g->unlogged, addr, g->failures, why, fpr,
		 g->credit_ms < GUARD_REFILL_MS ? "; its answers now come late" : "");
	g->unlogged = 0;
	g->logged_at = now;
}

/* A failed proof from @addr: count it and close the door for a while. */
static void guard_fail(struct store_server *s, const uint8_t addr[16], const char *text,
		       const char *why)
{
	int64_t now = (int64_t)uv_now(s->loop);
	struct guard_slot *g = guard_find(s, addr, true, now);

	if (g == NULL) {
		log_warn("store: failed handshake from %s: %s", text, why);
		return;
	}
	g->failures++;
	g->unlogged++;
	g->credit_ms = g->credit_ms > GUARD_REFILL_MS ? g->credit_ms - GUARD_REFILL_MS : 0;
	guard_log(s, g, text, why, now);
}

/* Whether every AUTH from @addr is answered late: its bucket of failures is empty. */
static bool guard_delayed(struct store_server *s, const uint8_t addr[16])
{
	int64_t now = (int64_t)uv_now(s->loop);
	struct guard_slot *g = guard_find(s, addr, false, now);

	return g != NULL && g->credit_ms < GUARD_REFILL_MS;
}

/*
 * A fresh server nonce: the next TOKEN_NONCE_LEN bytes of a pool filled by getrandom(2), one
 * system call per 128 handshakes rather than one each. The bytes are the kernel's as before;
 * each is handed out once and wiped from the pool.
 */
static int server_nonce(struct store_server *s, uint8_t sn[TOKEN_NONCE_LEN])
{
	size_t at;

	if (s->nonce_left < TOKEN_NONCE_LEN) {
		if (util_random(s->nonce_pool, sizeof(s->nonce_pool)) < 0) {
			return -EIO;
		}
		s->nonce_left = sizeof(s->nonce_pool);
	}
	at = sizeof(s->nonce_pool) - s->nonce_left;
	memcpy(sn, s->nonce_pool + at, TOKEN_NONCE_LEN);
	explicit_bzero(s->nonce_pool + at, TOKEN_NONCE_LEN);
	s->nonce_left -= TOKEN_NONCE_LEN;
	return 0;
}

static void hello_reply(struct conn *c, const struct wire_req *r, uint16_t auth,
			const uint8_t *sn)
{
	struct store_server *s = c->s;
	size_t off = reply_begin(c, r);

	wire_put_u16(&c->out, WIRE_VERSION);
	wire_put_u16(&c->out, auth);
	wire_put_bytes(&c->out, sn, sn != NULL ? WIRE_NONCE_LEN : 0);
	wire_put_u32(&c->out, WIRE_MAX_FRAME);
	wire_put_u32(&c->out, s->lim.max_key_len);
	wire_put_u32(&c->out, s->lim.max_value_len);
	wire_put_u32(&c->out, s->lim.max_keys);
	wire_put_u32(&c->out, s->max_pending);
	wire_frame_end(&c->out, off);
}

void srv_auth_hello(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct srv_auth_conn *a;
	char msg[200];

	if (c->hello || c->auth != NULL) {
		srv_conn_fail(c, r->op, r->id, WIRE_E_BAD_FRAME, "HELLO: handshake already done");
		return;
	}
	if (r->magic != WIRE_MAGIC) {
		snprintf(msg, sizeof(msg), "bad magic 0x%08x (expected 0x%08x)", r->magic,
			 WIRE_MAGIC);
		srv_conn_fail(c, r->op, r->id, WIRE_E_BAD_MAGIC, msg);
		return;
	}
	if (r->version == WIRE_VERSION_CLEAR) {
		snprintf(msg, sizeof(msg),
			 "unsupported protocol version %u (server speaks %u; version %u sent the "
			 "token in clear and is no longer accepted: upgrade the client)",
			 r->version, WIRE_VERSION, WIRE_VERSION_CLEAR);
		srv_conn_fail(c, r->op, r->id, WIRE_E_BAD_VERSION, msg);
		return;
	}
	if (r->version != WIRE_VERSION) {
		snprintf(msg, sizeof(msg), "unsupported protocol version %u (server speaks %u)",
			 r->version, WIRE_VERSION);
		srv_conn_fail(c, r->op, r->id, WIRE_E_BAD_VERSION, msg);
		return;
	}
	a = calloc(1, sizeof(*a));
	if (a == NULL) {
		srv_conn_fail(c, r->op, r->id, WIRE_E_NO_MEMORY, "HELLO: out of memory");
		return;
	}
	c->auth = a;
	if (r->scope.len > 0) {
		memcpy(a->scope, r->scope.p, r->scope.len);
		a->scope[r->scope.len] = '\0';
		a->scope_len = r->scope.len;
		if (strlen(a->scope) != a->scope_len || !token_scope_valid(a->scope)) {
			srv_conn_fail(c, r->op, r->id, WIRE_E_INVALID,
				      "HELLO: the scope is not a run id (1 to 128 printable bytes, "
				      "no '/' or space, not \"rdzv\")");
			return;
		}
	}
	if (s->token == NULL) {
		/* No authentication: a scope, if any, still confines the connection. */
		c->hello = true;
		srv_preauth_end(c);
		hello_reply(c, r, WIRE_AUTH_NONE, NULL);
		return;
	}
	if (server_nonce(s, a->sn) < 0) {
		srv_conn_fail(c, r->op, r->id, WIRE_E_NO_MEMORY, "HELLO: no random bytes");
		return;
	}
	if (r->nonce.len == WIRE_NONCE_LEN) {
		memcpy(a->cn, r->nonce.p, WIRE_NONCE_LEN);
		a->has_cn = true;
	}
	a->key_ok = token_derive_key(s->token, s->token_len, a->scope, a->key) == 0;
	hello_reply(c, r, WIRE_AUTH_TOKEN, a->sn);
}

/*
 * The answer to a wrong proof. It names no fingerprint of the store's token: a fingerprint is
 * a fast hash of the token, so an unauthenticated peer could test guesses offline against it
 * (the client names its own token's fingerprint, the store's log names the store's).
 */
static void refuse_proof(struct conn *c, uint32_t id)
{
	srv_conn_fail(c, WIRE_OP_AUTH, id, WIRE_E_AUTH,
		      "token mismatch: the proof does not match the store's token");
}

/* The answer to a right proof: the server's own proof; the connection is authenticated. */
static void accept_proof(struct conn *c, uint32_t id)
{
	struct srv_auth_conn *a = c->auth;
	uint8_t want[TOKEN_KEY_LEN];
	size_t off;

	if (token_proof(a->key, a->sn, a->cn, TOKEN_ROLE_SERVER, want) < 0) {
		srv_conn_fail(c, WIRE_OP_AUTH, id, WIRE_E_NO_MEMORY, "AUTH: HMAC failed");
		return;
	}
	c->hello = true;
	srv_preauth_end(c);
	off = wire_frame_begin(&c->out, WIRE_OP_AUTH, WIRE_FLAG_REPLY, WIRE_OK, id);
	wire_put_bytes(&c->out, want, TOKEN_KEY_LEN);
	wire_frame_end(&c->out, off);
}

bool srv_auth_tarpit_due(struct conn *c, int64_t now)
{
	if (c->tarpit_until == 0) {
		return false;
	}
	if (now >= c->tarpit_until) {
		c->tarpit_until = 0;
		c->failing = false; /* set only to hold it: now answer it */
		if (c->eof) {
			srv_conn_close(c); /* the peer gave up meanwhile */
		} else if (c->tarpit_ok) {
			accept_proof(c, c->tarpit_id);
			srv_flush_later(c);
		} else {
			refuse_proof(c, c->tarpit_id);
		}
	}
	return true;
}

void srv_auth_proof(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct srv_auth_conn *a = c->auth;
	uint8_t want[TOKEN_KEY_LEN], addr[16];
	char text[64];
	bool ok;

	if (c->hello) {
		srv_conn_fail(c, r->op, r->id, WIRE_E_BAD_FRAME, "AUTH: handshake already done");
		return;
	}
	if (a == NULL || s->token == NULL) {
		srv_conn_fail(c, r->op, r->id, WIRE_E_BAD_FRAME, "AUTH: no HELLO asked for it");
		return;
	}
	peer_addr(c, addr, NULL, 0);
	ok = a->has_cn && a->key_ok &&
	     token_proof(a->key, a->sn, a->cn, TOKEN_ROLE_CLIENT, want) == 0 &&
	     token_equal(want, r->proof.p, TOKEN_KEY_LEN);
	/* Decided before this failure counts: a source's first failures are answered at once. */
	if (guard_delayed(s, addr)) {
		/* Held, right or wrong alike: srv_auth_tarpit_due() answers it when due. */
		c->tarpit_until = (int64_t)uv_now(s->loop) + GUARD_DELAY_MS;
		c->tarpit_id = r->id;
		c->tarpit_ok = ok;
		c->failing = true; /* discard whatever else it sends meanwhile */
	}
	if (!ok) {
		peer_addr(c, addr, text, sizeof(text));
		guard_fail(s, addr, text, a->has_cn ? "token mismatch" : "no credential");
	}
	if (c->tarpit_until != 0) {
		return;
	}
	if (ok) {
		accept_proof(c, r->id);
	} else {
		refuse_proof(c, r->id);
	}
}

bool srv_auth_gate(struct conn *c, uint8_t op, uint32_t id)
{
	char msg[96];

	if (c->hello || op == WIRE_OP_HELLO || (op == WIRE_OP_AUTH && c->auth != NULL)) {
		return true;
	}
	if (c->auth != NULL) {
		snprintf(msg, sizeof(msg), "expected AUTH after HELLO, got op %u", op);
		srv_conn_fail(c, op, id, WIRE_E_AUTH, msg);
	} else {
		snprintf(msg, sizeof(msg), "expected HELLO as the first frame, got op %u", op);
		srv_conn_fail(c, op, id, WIRE_E_BAD_FRAME, msg);
	}
	return false;
}

/* @k is "rdzv/<scope>/..." (the run's rendezvous) or "<scope>/..." (its workers). */
static bool key_in_scope(const struct srv_auth_conn *a, struct wire_str k)
{
	const uint8_t *p = k.p;
	uint32_t n = k.len;

	if (n > 5 && memcmp(p, "rdzv/", 5) == 0) {
		p += 5;
		n -= 5;
		return n > a->scope_len && memcmp(p, a->scope, a->scope_len) == 0 &&
		       p[a->scope_len] == '/';
	}
	return n > a->scope_len && memcmp(p, a->scope, a->scope_len) == 0 &&
	       p[a->scope_len] == '/';
}

static bool refuse_key(struct conn *c, const struct wire_req *r, struct wire_str k)
{
	char shown[68], msg[300];
	uint32_t i, n = k.len < 64 ? k.len : 64;

	srv_metric_refuse(c->s, SRV_REFUSE_SCOPE);
	for (i = 0; i < n; i++) {
		shown[i] = k.p[i] >= ' ' && k.p[i] < 0x7f && k.p[i] != '"' ? (char)k.p[i] : '?';
	}
	snprintf(shown + n, sizeof(shown) - n, "%s", k.len > 64 ? "..." : "");
	snprintf(msg, sizeof(msg), "%s: key \"%s\" is not in this connection's scope (run %s)",
		 wire_op_name(r->op), shown, c->auth->scope);
	reply_error(c, r, WIRE_E_SCOPE, msg);
	return false;
}

const char *srv_auth_scope(const struct conn *c)
{
	return c->auth != NULL && c->auth->scope_len > 0 ? c->auth->scope : NULL;
}

bool srv_auth_in_scope(struct conn *c, const struct wire_req *r)
{
	const struct srv_auth_conn *a = c->auth;
	const uint8_t *cur;
	struct wire_str k;
	uint32_t i;

	if (a == NULL || a->scope_len == 0) {
		return true;
	}
	switch (r->op) {
	case WIRE_OP_SET:
	case WIRE_OP_GET:
	case WIRE_OP_ADD:
	case WIRE_OP_CAS:
	case WIRE_OP_DELETE:
	case WIRE_OP_APPEND:
		return key_in_scope(a, r->key) || refuse_key(c, r, r->key);
	case WIRE_OP_WAIT:
	case WIRE_OP_CHECK:
	case WIRE_OP_MULTI_GET:
	case WIRE_OP_MULTI_SET:
		cur = r->list;
		for (i = 0; i < r->n; i++) {
			k = wire_list_next(&cur);
			if (!key_in_scope(a, k)) {
				return refuse_key(c, r, k);
			}
			if (r->op == WIRE_OP_MULTI_SET) {
				(void)wire_list_next(&cur);
			}
		}
		return true;
	default:
		return true;
	}
}
