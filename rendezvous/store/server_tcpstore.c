/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_tcpstore.c: serve PyTorch TCPStore clients in one run's namespace. */
/*
 * A connection whose first bytes are a TCPStore client's (server_tcpstore_wire.c) is served
 * here instead of by the frame path of server_conn.c: each request's keys get the server's
 * TCPStore prefix ("<run>/tcpstore/"), so such a connection, which cannot authenticate, reads
 * and writes nothing else. The key table, its waits and the memory budget are the ones crun's
 * own clients use; WAIT parks through server_wait.c, which answers a TCPStore connection with
 * srv_ts_wait_done(). TCPStore has no error replies: a request the server cannot answer ends
 * the connection, with a log line that says why (the client then raises a connection error).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/server_tcpstore.h"
#include "src/common/log.h"
#include "src/common/parse.h"

#define TS_OUT_LIMIT (64u << 20) /* replies a client left unread: it never reads, drop it */
#define TS_KEY_BUF (CRUN_STORE_MAX_KEY_LEN + STORE_TCPSTORE_MAX_PREFIX)

/* A prefixed key, in a caller's buffer of TS_KEY_BUF bytes. */
static struct wire_str pkey(const struct store_server *s, struct wire_str k, uint8_t *buf)
{
	struct wire_str r = {buf, (uint32_t)s->ts_prefix_len + k.len};

	memcpy(buf, s->ts_prefix, s->ts_prefix_len);
	if (k.len > 0) {
		memcpy(buf + s->ts_prefix_len, k.p, k.len);
	}
	return r;
}

/* End @c with a log line: TCPStore has no way to tell the client. */
static void ts_drop(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ts_drop(struct conn *c, const char *fmt, ...)
{
	char peer[96], msg[256];
	va_list ap;

	if (c->closing) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	srv_conn_peer(c, peer, sizeof(peer));
	log_info("store: dropping %s (TCPStore %s client): %s", peer, ts_proto_name(c->proto), msg);
	srv_conn_close(c);
}

static void put_le64(struct wire_buf *b, uint64_t v)
{
	uint8_t x[8];
	int i;

	for (i = 0; i < 8; i++) {
		x[i] = (uint8_t)(v >> (8 * i));
	}
	wire_put_raw(b, x, 8);
}

static void put_le32(struct wire_buf *b, uint32_t v)
{
	uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};

	wire_put_raw(b, x, 4);
}

static void put_vec(struct wire_buf *b, const uint8_t *p, uint32_t n)
{
	put_le64(b, n);
	if (n > 0) {
		wire_put_raw(b, p, n);
	}
}

static struct entry *present(struct store_server *s, struct wire_str k)
{
	uint8_t buf[TS_KEY_BUF];
	struct entry *e = entry_lookup(s, pkey(s, k, buf));

	return e != NULL && e->present ? e : NULL;
}

/* Give the prefixed @k the value @v; false after dropping @c. */
static bool store_key(struct conn *c, struct wire_str k, struct wire_str v)
{
	struct store_server *s = c->s;
	uint8_t buf[TS_KEY_BUF];
	struct entry *e = srv_entry_get(s, pkey(s, k, buf));

	if (e == NULL || srv_key_store(s, e, v.p, v.len) < 0) {
		if (e != NULL) {
			entry_maybe_free(s, e);
		}
		ts_drop(c, "out of memory");
		return false;
	}
	srv_key_written(s, e);
	return true;
}

static void op_get(struct conn *c, const struct ts_req *r)
{
	struct entry *e = present(c->s, r->key);

	if (e == NULL) {
		/* The client waits for the key first: only a delete in between gets here. */
		ts_drop(c, "GET: key %.*s is not set", (int)(r->key.len > 200 ? 200 : r->key.len),
			(const char *)r->key.p);
		return;
	}
	put_vec(&c->out, e->val, e->vlen);
}

static void op_add(struct conn *c, const struct ts_req *r)
{
	struct store_server *s = c->s;
	uint8_t buf[TS_KEY_BUF];
	struct entry *e = srv_entry_get(s, pkey(s, r->key, buf));
	char num[32];
	int64_t v = 0;
	int n;

	if (e == NULL) {
		ts_drop(c, "ADD: out of memory");
		return;
	}
	if (e->present && parse_i64_bytes(e->val, e->vlen, &v) < 0) {
		ts_drop(c, "ADD: value of %.*s is not an integer",
			(int)(r->key.len > 200 ? 200 : r->key.len), (const char *)r->key.p);
		return;
	}
	if (__builtin_add_overflow(v, r->num, &v)) {
		entry_maybe_free(s, e);
		ts_drop(c, "ADD: overflow");
		return;
	}
	n = snprintf(num, sizeof(num), "%" PRId64, v);
	if (srv_key_store(s, e, (const uint8_t *)num, (uint32_t)n) < 0) {
		entry_maybe_free(s, e);
		ts_drop(c, "ADD: out of memory");
		return;
	}
	srv_key_written(s, e);
	put_le64(&c->out, (uint64_t)v);
}

/*
 * PyTorch's COMPARE_SET: a missing key is created when the expected value is empty; the
 * answer is the value now stored, or, for a missing key left alone, the expected value.
 */
static void op_compare_set(struct conn *c, const struct ts_req *r)
{
	struct entry *e = present(c->s, r->key);

	if (e == NULL) {
		if (r->a.len != 0) {
			put_vec(&c->out, r->a.p, r->a.len);
			return;
		}
	} else if (e->vlen != r->a.len || (e->vlen > 0 && memcmp(e->val, r->a.p, e->vlen))) {
		put_vec(&c->out, e->val, e->vlen);
		return;
	}
	if (store_key(c, r->key, r->b)) {
		put_vec(&c->out, r->b.p, r->b.len);
	}
}

static void op_delete(struct conn *c, const struct ts_req *r)
{
	struct entry *e = present(c->s, r->key);

	if (e != NULL) {
		srv_key_delete(c->s, e);
	}
	put_le64(&c->out, e != NULL ? 1 : 0);
}

static bool all_present(struct conn *c, const struct ts_req *r)
{
	const uint8_t *cur = r->list;
	uint32_t i;

	for (i = 0; i < r->n; i++) {
		if (present(c->s, ts_list_next(&cur)) == NULL) {
			return false;
		}
	}
	return true;
}

/* Keys of the namespace: a scan, as GETNUMKEYS is rare. */
static void op_num_keys(struct conn *c)
{
	struct store_server *s = c->s;
	struct htab_node *node, *next;
	struct entry *e;
	int64_t n = 0;
	size_t b;

	htab_for_each_safe(&s->keys, b, node, next) {
		e = container_of(node, struct entry, node);
		n += e->present && e->klen >= s->ts_prefix_len &&
		     memcmp(e->key, s->ts_prefix, s->ts_prefix_len) == 0;
	}
	put_le64(&c->out, (uint64_t)n);
}

/*
 * WAIT: answered now when every key is there, else parked through srv_op_wait() with the
 * prefixed keys and no deadline (the client keeps its own; 2.x sends CANCEL_WAIT at it).
 */
static void op_wait(struct conn *c, const struct ts_req *r)
{
	struct store_server *s = c->s;
	const uint8_t *cur = r->list;
	struct wire_req w = {0};
	struct wire_str k;
	size_t len = 0, before;
	uint8_t *list, *p;
	uint32_t i;

	if (all_present(c, r)) {
		wire_put_u8(&c->out, TS_WAIT_STOP);
		return;
	}
	if (c->nwaits >= s->max_pending ||
	    (s->max_wait_ms == 0 &&
	     (c->nuntimed >= s->max_untimed_per_conn || s->nuntimed >= s->max_untimed))) {
		ts_drop(c, "WAIT: too many waits held (limits: %u per connection, %u in all)",
			s->max_untimed_per_conn, s->max_untimed);
		return;
	}
	for (i = 0; i < r->n; i++) {
		len += 4 + s->ts_prefix_len + ts_list_next(&cur).len;
	}
	list = malloc(len ? len : 1);
	if (list == NULL) {
		ts_drop(c, "WAIT: out of memory");
		return;
	}
	cur = r->list;
	for (p = list, i = 0; i < r->n; i++) {
		k = ts_list_next(&cur);
		p[0] = (uint8_t)((s->ts_prefix_len + k.len) >> 24);
		p[1] = (uint8_t)((s->ts_prefix_len + k.len) >> 16);
		p[2] = (uint8_t)((s->ts_prefix_len + k.len) >> 8);
		p[3] = (uint8_t)(s->ts_prefix_len + k.len);
		memcpy(p + 4, s->ts_prefix, s->ts_prefix_len);
		if (k.len > 0) {
			memcpy(p + 4 + s->ts_prefix_len, k.p, k.len);
		}
		p += 4 + s->ts_prefix_len + k.len;
	}
	w.op = WIRE_OP_WAIT;
	w.mode = WIRE_WAIT_ALL;
	w.num = -1;
	w.n = r->n;
	w.list = list;
	w.list_end = list + len;
	before = c->out.len;
	srv_op_wait(c, &w);
	free(list);
	if (!c->closing && c->out.len > before + 1) {
		/* A crun error reply (out of memory): not for this client. */
		c->out.len = before;
		ts_drop(c, "WAIT: out of memory");
	}
}

/* A TCPStore connection's wait was answered (@ok) or failed; server_wait.c frees it. */
void srv_ts_wait_done(struct conn *c, bool ok, const char *why)
{
	if (ok) {
		wire_put_u8(&c->out, TS_WAIT_STOP);
	} else {
		ts_drop(c, "WAIT: %s", why);
	}
}

static void op_cancel_wait(struct conn *c)
{
	while (c->waits != NULL) {
		srv_wait_destroy(c->s, c->waits);
	}
	wire_put_u8(&c->out, TS_WAIT_CANCELED);
}

static void op_multi_get(struct conn *c, const struct ts_req *r)
{
	const uint8_t *cur = r->list;
	struct entry *e;
	uint32_t i;

	if (!all_present(c, r)) {
		ts_drop(c, "MULTI_GET: a key is not set");
		return;
	}
	for (i = 0; i < r->n; i++) {
		e = present(c->s, ts_list_next(&cur));
		put_vec(&c->out, e->val, e->vlen);
	}
}

static void op_multi_set(struct conn *c, const struct ts_req *r)
{
	const uint8_t *cur = r->list;
	struct wire_str k, v;
	uint32_t i;

	for (i = 0; i < r->n; i++) {
		k = ts_list_next(&cur);
		v = ts_list_next(&cur);
		if (!store_key(c, k, v)) {
			return;
		}
	}
}

/* APPEND, and QUEUE_PUSH with @framed: each item as a big-endian u32 length and its bytes. */
static void op_append(struct conn *c, const struct ts_req *r, bool framed)
{
	struct store_server *s = c->s;
	const char *op = framed ? "QUEUE_PUSH" : "APPEND";
	uint8_t buf[TS_KEY_BUF], head[4];
	struct entry *e = srv_entry_get(s, pkey(s, r->key, buf));
	uint64_t n;
	int rc;

	if (e == NULL) {
		ts_drop(c, "%s: out of memory", op);
		return;
	}
	head[0] = (uint8_t)(r->a.len >> 24);
	head[1] = (uint8_t)(r->a.len >> 16);
	head[2] = (uint8_t)(r->a.len >> 8);
	head[3] = (uint8_t)r->a.len;
	rc = srv_key_append(s, e, head, framed ? 4 : 0, r->a.p, r->a.len, &n);
	if (rc < 0) {
		entry_maybe_free(s, e);
		if (rc == -EMSGSIZE) {
			ts_drop(c, "%s: value length %" PRIu64 " exceeds limit %u", op, n,
				s->lim.max_value_len);
		} else {
			ts_drop(c, "%s: out of memory", op);
		}
		return;
	}
	srv_key_written(s, e);
}

/* Items of a queue value; -1 when it is not one (a plain SET wrote it). */
static int64_t queue_items(const struct entry *e)
{
	uint32_t off = 0, len;
	int64_t n = 0;

	while (off < e->vlen) {
		if (e->vlen - off < 4) {
			return -1;
		}
		len = (uint32_t)e->val[off] << 24 | (uint32_t)e->val[off + 1] << 16 |
		      (uint32_t)e->val[off + 2] << 8 | e->val[off + 3];
		if (len > e->vlen - off - 4) {
			return -1;
		}
		off += 4 + len;
		n++;
	}
	return n;
}

static void op_queue(struct conn *c, const struct ts_req *r)
{
	struct entry *e = present(c->s, r->key);
	int64_t n = e != NULL ? queue_items(e) : 0;
	uint32_t len;

	if (n < 0) {
		ts_drop(c, "%s: %.*s is not a queue", ts_op_name(r->op),
			(int)(r->key.len > 200 ? 200 : r->key.len), (const char *)r->key.p);
		return;
	}
	if (r->op == TS_OP_QUEUE_LEN) {
		put_le64(&c->out, (uint64_t)n);
		return;
	}
	if (n == 0) {
		ts_drop(c, "QUEUE_POP: queue %.*s is empty",
			(int)(r->key.len > 200 ? 200 : r->key.len), (const char *)r->key.p);
		return;
	}
	len = (uint32_t)e->val[0] << 24 | (uint32_t)e->val[1] << 16 | (uint32_t)e->val[2] << 8 |
	      e->val[3];
	put_vec(&c->out, e->val + 4, len);
	if (n == 1) {
		srv_key_delete(c->s, e); /* an empty queue is no key: WAIT waits for a push */
		return;
	}
	memmove(e->val, e->val + 4 + len, e->vlen - 4 - len);
	e->vlen -= 4 + len;
}

static void ts_run(struct conn *c, const struct ts_req *r)
{
	switch (r->op) {
	case TS_OP_VALIDATE:
		break;
	case TS_OP_PING:
		put_le32(&c->out, (uint32_t)r->num);
		break;
	case TS_OP_SET:
		store_key(c, r->key, r->a);
		break;
	case TS_OP_GET:
		op_get(c, r);
		break;
	case TS_OP_ADD:
		op_add(c, r);
		break;
	case TS_OP_COMPARE_SET:
		op_compare_set(c, r);
		break;
	case TS_OP_DELETE_KEY:
		op_delete(c, r);
		break;
	case TS_OP_CHECK:
		wire_put_u8(&c->out, all_present(c, r) ? TS_CHECK_READY : TS_CHECK_NOT_READY);
		break;
	case TS_OP_WAIT:
		op_wait(c, r);
		break;
	case TS_OP_GETNUMKEYS:
		op_num_keys(c);
		break;
	case TS_OP_CANCEL_WAIT:
		op_cancel_wait(c);
		break;
	case TS_OP_APPEND:
		op_append(c, r, false);
		break;
	case TS_OP_QUEUE_PUSH:
		op_append(c, r, true);
		break;
	case TS_OP_QUEUE_POP:
	case TS_OP_QUEUE_LEN:
		op_queue(c, r);
		break;
	case TS_OP_MULTI_GET:
		op_multi_get(c, r);
		break;
	case TS_OP_MULTI_SET:
		op_multi_set(c, r);
		break;
	case TS_OP_WATCH_KEY:
	case TS_OP_COUNT:
		ts_drop(c, "%s is not supported", ts_op_name(r->op));
		break;
	}
	if (!c->closing && c->out.len > TS_OUT_LIMIT) {
		ts_drop(c, "%zu bytes of replies left unread", c->out.len);
	}
}

/* Hold @n bytes of a request not yet complete (charged to the memory budget). */
static bool hold(struct conn *c, const uint8_t *p, size_t n)
{
	size_t want = (size_t)c->in_len + n, cap;
	uint8_t *q;

	if (want > c->in_cap) {
		cap = c->in_cap ? c->in_cap : 256;
		while (cap < want) {
			cap *= 2;
		}
		if (!srv_mem_charge(c, cap - c->in_cap)) {
			return false;
		}
		q = realloc(c->in, cap);
		if (q == NULL) {
			ts_drop(c, "out of memory");
			return false;
		}
		c->in = q;
		c->in_cap = (uint32_t)cap;
	}
	if (c->in_len == 0) {
		c->frame_start = (int64_t)uv_now(c->s->loop);
	}
	memcpy(c->in + c->in_len, p, n);
	c->in_len = (uint32_t)want;
	return true;
}

static void held_free(struct conn *c)
{
	srv_mem_release(c, c->in_cap);
	free(c->in);
	c->in = NULL;
	c->in_len = c->in_cap = c->need = 0;
}

/* Run every complete request at @p; returns the bytes they took. */
static size_t run_all(struct conn *c, const uint8_t *p, size_t n)
{
	const struct ts_limits lim = {c->s->lim.max_key_len - (uint32_t)c->s->ts_prefix_len,
				      c->s->lim.max_value_len, c->s->lim.max_keys};
	size_t off = 0, need;
	struct ts_req r;
	char msg[160];
	int rc;

	while (off < n && !c->closing) {
		rc = ts_decode(c->proto, p + off, n - off, &lim, &r, &need, msg, sizeof(msg));
		if (rc == TS_NEED_MORE) {
			c->need = (uint32_t)need;
			break;
		}
		if (rc != TS_DONE) {
			ts_drop(c, "%s", msg);
			break;
		}
		ts_run(c, &r);
		off += need;
	}
	return off;
}

/* The sniff: true when @c is a TCPStore connection this server serves (or still unknown). */
static bool admit(struct conn *c, enum ts_proto proto)
{
	struct store_server *s = c->s;
	char peer[96];

	if (proto == TS_PROTO_CRUN) {
		c->proto = TS_PROTO_CRUN;
		return false;
	}
	c->proto = (uint8_t)proto;
	if (s->ts_prefix == NULL) {
		srv_conn_peer(c, peer, sizeof(peer));
		log_warn("store: refusing %s: a PyTorch TCPStore %s client; %s", peer,
			 ts_proto_name(proto),
			 s->ts_refusal != NULL ? s->ts_refusal
					       : "this store does not serve TCPStore clients");
		srv_conn_close(c);
		return true;
	}
	c->hello = true; /* no handshake: the namespace is its whole world */
	if (log_get_level() >= LOG_DEBUG) {
		srv_conn_peer(c, peer, sizeof(peer));
		log_debug("store: %s is a PyTorch TCPStore %s client (keys under %s)", peer,
			  ts_proto_name(proto), s->ts_prefix);
	}
	return true;
}

size_t srv_ts_consume(struct conn *c, const uint8_t *p, size_t n)
{
	uint8_t first[TS_SNIFF_LEN];
	size_t k = c->npeek, take, off;

	if (c->proto == TS_PROTO_UNKNOWN) {
		take = n < TS_SNIFF_LEN - k ? n : TS_SNIFF_LEN - k;
		memcpy(first, c->peek, k);
		memcpy(first + k, p, take);
		if (ts_sniff(first, k + take) == TS_PROTO_UNKNOWN) {
			/* take == n: fewer than TS_SNIFF_LEN bytes in all so far */
			memcpy(c->peek + k, p, take);
			c->npeek = (uint8_t)(k + take);
			return n;
		}
		if (!admit(c, ts_sniff(first, k + take))) {
			return 0; /* crun: the caller replays c->peek first */
		}
		if (c->closing) {
			return n;
		}
		c->npeek = 0;
		if (k > 0 && !hold(c, first, k)) {
			return n;
		}
	}
	if (c->in_len == 0) {
		off = run_all(c, p, n);
		if (off < n && !c->closing) {
			hold(c, p + off, n - off);
		}
		return n;
	}
	if (!hold(c, p, n)) {
		return n;
	}
	if (c->in_len < c->need) {
		return n; /* still short of the request's known length */
	}
	off = run_all(c, c->in, c->in_len);
	if (c->closing) {
		return n;
	}
	if (off == c->in_len) {
		held_free(c);
	} else if (off > 0) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= (uint32_t)off;
		c->frame_start = (int64_t)uv_now(c->s->loop);
	}
	return n;
}
