/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server.c: the store server, one libuv loop, protocol in docs/protocol.md. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/store/server.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/clock.h"
#include "src/common/htab.h"
#include "src/common/net.h"
#include "src/common/parse.h"
#include "rendezvous/store/wire.h"

#define DEFAULT_MAX_CONNECTIONS 65536
#define DEFAULT_MAX_PENDING 1024
#define HANDSHAKE_TIMEOUT_MS 10000
#define DRAIN_TIMEOUT_MS 2000
#define SWEEP_MS 500
#define KEEPALIVE_S 60
#define READ_BUF_LEN (64 * 1024)
#define OUT_HIGH_WATER (8u << 20) /* stop reading a peer that does not read its replies */
#define OUT_LOW_WATER (1u << 20)
#define KEEP_OUT_CAP 4096         /* a reply buffer larger than this is freed once written */

/* ---- a binary min-heap of deadlines (TTL keys, wait deadlines) ---- */

struct hnode {
	int64_t at;
	size_t idx; /* SIZE_MAX when not in a heap */
};

struct heap {
	struct hnode **a;
	size_t n;
	size_t cap;
};

static void heap_swap(struct heap *h, size_t i, size_t j)
{
	struct hnode *t = h->a[i];

	h->a[i] = h->a[j];
	h->a[j] = t;
	h->a[i]->idx = i;
	h->a[j]->idx = j;
}

static void heap_up(struct heap *h, size_t i)
{
	while (i > 0 && h->a[(i - 1) / 2]->at > h->a[i]->at) {
		heap_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(struct heap *h, size_t i)
{
	size_t l, r, m;

	for (;;) {
		l = 2 * i + 1;
		r = l + 1;
		m = i;
		if (l < h->n && h->a[l]->at < h->a[m]->at) {
			m = l;
		}
		if (r < h->n && h->a[r]->at < h->a[m]->at) {
			m = r;
		}
		if (m == i) {
			return;
		}
		heap_swap(h, i, m);
		i = m;
	}
}

static int heap_push(struct heap *h, struct hnode *x)
{
	struct hnode **a;
	size_t cap;

	if (h->n == h->cap) {
		cap = h->cap ? h->cap * 2 : 64;
		a = realloc(h->a, cap * sizeof(*a));
		if (a == NULL) {
			return -ENOMEM;
		}
		h->a = a;
		h->cap = cap;
	}
	x->idx = h->n;
	h->a[h->n++] = x;
	heap_up(h, x->idx);
	return 0;
}

static void heap_remove(struct heap *h, struct hnode *x)
{
	size_t i = x->idx;

	if (i == SIZE_MAX) {
		return;
	}
	h->n--;
	if (i != h->n) {
		h->a[i] = h->a[h->n];
		h->a[i]->idx = i;
		heap_down(h, i);
		heap_up(h, i);
	}
	x->idx = SIZE_MAX;
}

static struct hnode *heap_min(const struct heap *h)
{
	return h->n ? h->a[0] : NULL;
}

/* ---- data ---- */

struct wait;

/* One key of one wait, linked into the key's entry while the key is still awaited. */
struct link {
	struct link *prev;
	struct link *next;
	struct entry *e; /* NULL when not linked */
	struct wait *w;
	uint32_t index;
};

struct entry {
	struct htab_node node; /* in server->keys, by htab_hash(key, seed) */
	uint8_t *val;       /* malloc'd when present (NULL for an empty value) */
	uint32_t vlen;
	uint32_t vcap;
	bool present;       /* false: only waiters keep this entry alive */
	struct hnode ttl;   /* in server->ttl while the key has a TTL */
	struct link *watchers;
	uint32_t klen;
	uint8_t key[];
};

struct conn;

struct wait {
	struct wait *prev;
	struct wait *next; /* in conn->waits */
	struct conn *c;
	struct hnode dl;   /* in server->waits when it has a deadline */
	int64_t timeout_ms;
	uint32_t id;
	uint8_t mode;
	uint32_t n;
	uint32_t missing;
	struct link links[];
};

struct conn {
	uv_tcp_t tcp;             /* tcp.data == this */
	struct store_server *s;
	struct conn *prev;
	struct conn *next;        /* in server->conns */
	struct conn *flush_next;  /* in server->flush while it has replies to send */
	uint8_t *in;              /* a partial frame: grown only as its bytes arrive */
	uint32_t in_len;
	uint32_t in_cap;
	uint32_t need;            /* total bytes of the partial frame; 0: header incomplete */
	struct wire_buf out;      /* replies not yet handed to the socket */
	uint8_t *backlog;         /* input read but not processed while the peer was not reading */
	uint32_t backlog_len;
	struct wait *waits;
	uint32_t nwaits;
	int64_t since;            /* accepted at (handshake deadline) */
	int64_t last_active;
	int64_t drain_until;
	unsigned refs;            /* 1 for the tcp handle + in-flight writes and shutdown */
	bool hello;
	bool in_flush;
	bool failing;             /* error reply sent: discard input until EOF, then close */
	bool closing;
	bool paused;
	bool eof;                 /* the peer closed while an error reply was going out */
	bool shut;                /* the error reply is out and our side is shut down */
};

struct wreq {
	uv_write_t req;
	struct conn *c;
	uint8_t *buf; /* owned; freed with the request */
};

struct store_server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	uv_timer_t ttl_timer;
	uv_timer_t wait_timer;
	uv_timer_t sweep_timer;
	unsigned refs; /* open server handles + live connections + 1 until close */
	struct conn *conns;
	size_t nconns;
	struct conn *flush;
	struct htab keys;         /* struct entry: present keys and keys only waited on */
	int64_t nkeys;
	uint64_t seed;
	struct heap ttl;
	struct heap waits;
	uint8_t *rbuf;
	char *token;
	size_t token_len;
	int max_connections;
	int idle_timeout_ms;
	uint32_t max_pending;
	struct wire_limits lim;
	bool closing;
	int port;
	char addr[80];
};

static void conn_fail(struct conn *c, uint8_t op, uint32_t id, uint16_t status,
		      const char *msg);
static void flush_all(struct store_server *s);
static void conn_resume(struct conn *c);

/* ---- the hash table ---- */

static uint64_t hash_key(const struct store_server *s, const uint8_t *k, size_t n)
{
	return htab_hash(k, n, s->seed);
}

static struct entry *entry_find(struct store_server *s, const uint8_t *k, uint32_t n,
				uint64_t h)
{
	struct htab_node *node;
	struct entry *e;

	for (node = htab_chain(&s->keys, h); node != NULL; node = node->next) {
		e = container_of(node, struct entry, node);
		if (node->hash == h && e->klen == n && memcmp(e->key, k, n) == 0) {
			return e;
		}
	}
	return NULL;
}

static struct entry *entry_lookup(struct store_server *s, struct wire_str k)
{
	return entry_find(s, k.p, k.len, hash_key(s, k.p, k.len));
}

/* Find or create the entry for @k (created absent). NULL only when out of memory. */
static struct entry *entry_get(struct store_server *s, struct wire_str k)
{
	uint64_t h = hash_key(s, k.p, k.len);
	struct entry *e = entry_find(s, k.p, k.len, h);

	if (e != NULL) {
		return e;
	}
	e = malloc(sizeof(*e) + k.len);
	if (e == NULL) {
		return NULL;
	}
	memset(e, 0, sizeof(*e));
	e->ttl.idx = SIZE_MAX;
	e->klen = k.len;
	if (k.len > 0) {
		memcpy(e->key, k.p, k.len);
	}
	htab_insert(&s->keys, &e->node, h);
	return e;
}

static void entry_unhash(struct store_server *s, struct entry *e)
{
	htab_remove(&s->keys, &e->node);
	free(e->val);
	free(e);
}

/* An absent entry with nobody waiting on it has no reason to exist. */
static void entry_maybe_free(struct store_server *s, struct entry *e)
{
	if (!e->present && e->watchers == NULL) {
		entry_unhash(s, e);
	}
}

static void ttl_arm(struct store_server *s);

/* ---- waits ---- */

static void link_unlink(struct link *l)
{
	struct entry *e = l->e;

	if (e == NULL) {
		return;
	}
	if (l->prev != NULL) {
		l->prev->next = l->next;
	} else {
		e->watchers = l->next;
	}
	if (l->next != NULL) {
		l->next->prev = l->prev;
	}
	l->prev = l->next = NULL;
	l->e = NULL;
}

/* Unlink and free @w without replying. */
static void wait_destroy(struct store_server *s, struct wait *w)
{
	struct entry *e;
	uint32_t i;

	for (i = 0; i < w->n; i++) {
		e = w->links[i].e;
		if (e != NULL) {
			link_unlink(&w->links[i]);
			entry_maybe_free(s, e);
		}
	}
	heap_remove(&s->waits, &w->dl);
	if (w->prev != NULL) {
		w->prev->next = w->next;
	} else {
		w->c->waits = w->next;
	}
	if (w->next != NULL) {
		w->next->prev = w->prev;
	}
	w->c->nwaits--;
	free(w);
}

static void flush_later(struct conn *c)
{
	if (!c->in_flush && !c->closing) {
		c->in_flush = true;
		c->flush_next = c->s->flush;
		c->s->flush = c;
	}
}

static void wait_reply(struct store_server *s, struct wait *w, uint32_t index)
{
	struct conn *c = w->c;
	size_t off;

	off = wire_frame_begin(&c->out, WIRE_OP_WAIT, WIRE_FLAG_REPLY, WIRE_OK, w->id);
	wire_put_u32(&c->out, index);
	wire_frame_end(&c->out, off);
	flush_later(c);
	wait_destroy(s, w);
}

static void wait_fail(struct store_server *s, struct wait *w, uint16_t status, const char *msg)
{
	struct conn *c = w->c;

	wire_put_error(&c->out, WIRE_OP_WAIT, w->id, status, msg);
	flush_later(c);
	wait_destroy(s, w);
}

/* @e was just written: wake every wait on it. */
static void key_written(struct store_server *s, struct entry *e)
{
	struct link *l;
	struct wait *w;

	while ((l = e->watchers) != NULL) {
		w = l->w;
		link_unlink(l);
		if (w->mode == WIRE_WAIT_ANY) {
			wait_reply(s, w, l->index);
		} else if (--w->missing == 0) {
			wait_reply(s, w, 0);
		}
	}
}

static void wait_arm(struct store_server *s);

/* ---- key operations ---- */

static void key_clear_ttl(struct store_server *s, struct entry *e)
{
	heap_remove(&s->ttl, &e->ttl);
}

static int key_store(struct store_server *s, struct entry *e, const uint8_t *v, uint32_t n)
{
	uint8_t *p;

	if (n > e->vcap || (e->vcap > 4096 && n < e->vcap / 4)) {
		p = malloc(n ? n : 1);
		if (p == NULL) {
			return -ENOMEM;
		}
		free(e->val);
		e->val = p;
		e->vcap = n ? n : 1;
	}
	if (n > 0) {
		memcpy(e->val, v, n);
	}
	e->vlen = n;
	if (!e->present) {
		e->present = true;
		s->nkeys++;
	}
	key_clear_ttl(s, e);
	return 0;
}

static void key_delete(struct store_server *s, struct entry *e)
{
	if (!e->present) {
		return;
	}
	e->present = false;
	s->nkeys--;
	free(e->val);
	e->val = NULL;
	e->vlen = e->vcap = 0;
	key_clear_ttl(s, e);
	entry_maybe_free(s, e);
}

static void on_ttl(uv_timer_t *t)
{
	struct store_server *s = t->data;
	int64_t now = (int64_t)uv_now(s->loop);
	struct hnode *m;
	struct entry *e;

	while ((m = heap_min(&s->ttl)) != NULL && m->at <= now) {
		e = container_of(m, struct entry, ttl);
		key_delete(s, e);
	}
	ttl_arm(s);
}

static void on_wait_deadline(uv_timer_t *t)
{
	struct store_server *s = t->data;
	int64_t now = (int64_t)uv_now(s->loop);
	struct hnode *m;
	struct wait *w;
	char msg[64];

	while ((m = heap_min(&s->waits)) != NULL && m->at <= now) {
		w = container_of(m, struct wait, dl);
		snprintf(msg, sizeof(msg), "wait timed out after %" PRId64 " ms", w->timeout_ms);
		wait_fail(s, w, WIRE_E_TIMEOUT, msg);
	}
	wait_arm(s);
	flush_all(s);
}

static void timer_arm(struct store_server *s, uv_timer_t *t, struct heap *h, uv_timer_cb cb)
{
	struct hnode *m = heap_min(h);
	int64_t now = (int64_t)uv_now(s->loop);

	if (m == NULL || s->closing) {
		uv_timer_stop(t);
		return;
	}
	uv_timer_start(t, cb, m->at > now ? (uint64_t)(m->at - now) : 0, 0);
}

static void wait_arm(struct store_server *s)
{
	timer_arm(s, &s->wait_timer, &s->waits, on_wait_deadline);
}

static void ttl_arm(struct store_server *s)
{
	timer_arm(s, &s->ttl_timer, &s->ttl, on_ttl);
}

/* ---- replies ---- */

static size_t reply_begin(struct conn *c, const struct wire_req *r)
{
	return wire_frame_begin(&c->out, r->op, WIRE_FLAG_REPLY, WIRE_OK, r->id);
}

static void reply_empty(struct conn *c, const struct wire_req *r)
{
	wire_frame_end(&c->out, reply_begin(c, r));
}

static void reply_error(struct conn *c, const struct wire_req *r, uint16_t status,
			const char *msg)
{
	wire_put_error(&c->out, r->op, r->id, status, msg);
}

/* Loop time @ms from now, saturated: a peer may send any int64. */
static int64_t deadline_after(struct store_server *s, int64_t ms)
{
	int64_t now = (int64_t)uv_now(s->loop);

	return ms > INT64_MAX / 2 - now ? INT64_MAX / 2 : now + ms;
}

/* ---- operations ---- */

static void op_hello(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	char msg[96];
	size_t off;
	uint8_t diff = 0;
	size_t i;

	if (c->hello) {
		conn_fail(c, r->op, r->id, WIRE_E_BAD_FRAME, "HELLO: handshake already done");
		return;
	}
	if (r->magic != WIRE_MAGIC) {
		snprintf(msg, sizeof(msg), "bad magic 0x%08x (expected 0x%08x)", r->magic,
			 WIRE_MAGIC);
		conn_fail(c, r->op, r->id, WIRE_E_BAD_MAGIC, msg);
		return;
	}
	if (r->version != WIRE_VERSION) {
		snprintf(msg, sizeof(msg), "unsupported protocol version %u (server speaks %u)",
			 r->version, WIRE_VERSION);
		conn_fail(c, r->op, r->id, WIRE_E_BAD_VERSION, msg);
		return;
	}
	if (s->token != NULL) {
		/* Compare without an early exit, so timing does not leak the prefix. */
		diff = r->token.len != s->token_len;
		for (i = 0; i < r->token.len && i < s->token_len; i++) {
			diff |= (uint8_t)(r->token.p[i] ^ (uint8_t)s->token[i]);
		}
		if (diff != 0) {
			conn_fail(c, r->op, r->id, WIRE_E_AUTH, "bad token");
			return;
		}
	}
	c->hello = true;
	off = reply_begin(c, r);
	wire_put_u16(&c->out, WIRE_VERSION);
	wire_put_u16(&c->out, 0);
	wire_put_u32(&c->out, WIRE_MAX_FRAME);
	wire_put_u32(&c->out, s->lim.max_key_len);
	wire_put_u32(&c->out, s->lim.max_value_len);
	wire_put_u32(&c->out, s->lim.max_keys);
	wire_put_u32(&c->out, s->max_pending);
	wire_frame_end(&c->out, off);
}

static void op_set(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = entry_get(s, r->key);

	if (e == NULL || key_store(s, e, r->val.p, r->val.len) < 0) {
		if (e != NULL) {
			entry_maybe_free(s, e);
		}
		reply_error(c, r, WIRE_E_NO_MEMORY, "SET: out of memory");
		return;
	}
	if (r->num > 0) {
		e->ttl.at = deadline_after(s, r->num);
		if (heap_push(&s->ttl, &e->ttl) == 0) {
			ttl_arm(s);
		}
	}
	key_written(s, e);
	reply_empty(c, r);
}

/* u8 found, then the value when found: GET and each MULTI_GET item. */
static void put_found(struct conn *c, const struct entry *e)
{
	if (e != NULL && e->present) {
		wire_put_u8(&c->out, 1);
		wire_put_bytes(&c->out, e->val, e->vlen);
	} else {
		wire_put_u8(&c->out, 0);
	}
}

static void op_get(struct conn *c, const struct wire_req *r)
{
	size_t off = reply_begin(c, r);

	put_found(c, entry_lookup(c->s, r->key));
	wire_frame_end(&c->out, off);
}

/*
 * Answer a WAIT whose keys already exist (ALL: every key; ANY: the first one present, by
 * index) at once, without allocating a wait: the common case of a barrier's late arrivals
 * and of a blocking get. Returns false when the request has to wait.
 */
static bool wait_now(struct conn *c, const struct wire_req *r)
{
	const uint8_t *cur = r->list;
	struct entry *e;
	size_t off;
	uint32_t i, index = 0;

	if (r->n == 0) {
		return false; /* the general path answers it */
	}
	for (i = 0; i < r->n; i++) {
		e = entry_lookup(c->s, wire_list_next(&cur));
		if (e != NULL && e->present) {
			if (r->mode == WIRE_WAIT_ANY) {
				index = i;
				break;
			}
		} else if (r->mode != WIRE_WAIT_ANY) {
			return false;
		}
	}
	if (i == r->n && r->mode == WIRE_WAIT_ANY) {
		return false;
	}
	off = reply_begin(c, r);
	wire_put_u32(&c->out, index);
	wire_frame_end(&c->out, off);
	return true;
}

static void op_wait(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	const uint8_t *cur = r->list;
	struct wire_str k;
	struct entry *e;
	struct wait *w;
	char msg[96];
	uint32_t i;

	if (c->nwaits >= s->max_pending) {
		snprintf(msg, sizeof(msg),
			 "too many pending requests on this connection (limit %u)", s->max_pending);
		reply_error(c, r, WIRE_E_BUSY, msg);
		return;
	}
	if (wait_now(c, r)) {
		return;
	}
	w = calloc(1, sizeof(*w) + (size_t)r->n * sizeof(w->links[0]));
	if (w == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "WAIT: out of memory");
		return;
	}
	w->c = c;
	w->id = r->id;
	w->mode = r->mode;
	w->n = r->n;
	w->timeout_ms = r->num;
	w->dl.idx = SIZE_MAX;
	w->next = c->waits;
	if (c->waits != NULL) {
		c->waits->prev = w;
	}
	c->waits = w;
	c->nwaits++;
	for (i = 0; i < r->n; i++) {
		k = wire_list_next(&cur);
		w->links[i].w = w;
		w->links[i].index = i;
		e = entry_lookup(s, k);
		if (e != NULL && e->present) {
			if (w->mode == WIRE_WAIT_ANY) {
				wait_reply(s, w, i);
				return;
			}
			continue;
		}
		w->missing++;
		e = entry_get(s, k);
		if (e == NULL) {
			wait_fail(s, w, WIRE_E_NO_MEMORY, "WAIT: out of memory");
			return;
		}
		w->links[i].e = e;
		w->links[i].next = e->watchers;
		if (e->watchers != NULL) {
			e->watchers->prev = &w->links[i];
		}
		e->watchers = &w->links[i];
	}
	if (w->missing == 0) {
		wait_reply(s, w, 0);
		return;
	}
	if (r->num == 0) {
		wait_fail(s, w, WIRE_E_TIMEOUT, "wait timed out after 0 ms");
		return;
	}
	if (r->num > 0) {
		w->dl.at = deadline_after(s, r->num);
		if (heap_push(&s->waits, &w->dl) < 0) {
			wait_fail(s, w, WIRE_E_NO_MEMORY, "WAIT: out of memory");
			return;
		}
		if (w->dl.idx == 0) {
			wait_arm(s);
		}
	}
}

static void op_add(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = entry_get(s, r->key);
	int64_t v = 0;
	char buf[32], msg[CRUN_STORE_MAX_KEY_LEN + 64];
	size_t off;
	int n;

	if (e == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "ADD: out of memory");
		return;
	}
	if (e->present && parse_i64_bytes(e->val, e->vlen, &v) < 0) {
		snprintf(msg, sizeof(msg), "ADD: value of %.*s is not an integer",
			 (int)(r->key.len > 200 ? 200 : r->key.len), (const char *)r->key.p);
		reply_error(c, r, WIRE_E_NOT_NUMBER, msg);
		return;
	}
	if (__builtin_add_overflow(v, r->num, &v)) {
		entry_maybe_free(s, e);
		reply_error(c, r, WIRE_E_OVERFLOW, "ADD: overflow");
		return;
	}
	n = snprintf(buf, sizeof(buf), "%" PRId64, v);
	if (key_store(s, e, (const uint8_t *)buf, (uint32_t)n) < 0) {
		entry_maybe_free(s, e);
		reply_error(c, r, WIRE_E_NO_MEMORY, "ADD: out of memory");
		return;
	}
	key_written(s, e);
	off = reply_begin(c, r);
	wire_put_i64(&c->out, v);
	wire_frame_end(&c->out, off);
}

static void op_cas(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = entry_get(s, r->key);
	bool match;
	size_t off;

	if (e == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "COMPARE_SET: out of memory");
		return;
	}
	if (e->present) {
		match = e->vlen == r->expected.len &&
			(e->vlen == 0 || memcmp(e->val, r->expected.p, e->vlen) == 0);
	} else {
		match = r->expected.len == 0;
	}
	if (match) {
		if (key_store(s, e, r->val.p, r->val.len) < 0) {
			entry_maybe_free(s, e);
			reply_error(c, r, WIRE_E_NO_MEMORY, "COMPARE_SET: out of memory");
			return;
		}
		key_written(s, e);
	}
	off = reply_begin(c, r);
	wire_put_u8(&c->out, match);
	wire_put_bytes(&c->out, e->present ? e->val : NULL, e->present ? e->vlen : 0);
	wire_frame_end(&c->out, off);
	entry_maybe_free(s, e);
}

static void op_delete(struct conn *c, const struct wire_req *r)
{
	struct entry *e = entry_lookup(c->s, r->key);
	bool existed = e != NULL && e->present;
	size_t off;

	if (existed) {
		key_delete(c->s, e);
	}
	off = reply_begin(c, r);
	wire_put_u8(&c->out, existed);
	wire_frame_end(&c->out, off);
}

static void op_check(struct conn *c, const struct wire_req *r)
{
	const uint8_t *cur = r->list;
	struct entry *e;
	bool all = true;
	uint32_t i;
	size_t off;

	for (i = 0; i < r->n && all; i++) {
		e = entry_lookup(c->s, wire_list_next(&cur));
		all = e != NULL && e->present;
	}
	off = reply_begin(c, r);
	wire_put_u8(&c->out, all);
	wire_frame_end(&c->out, off);
}

static void op_num_keys(struct conn *c, const struct wire_req *r)
{
	size_t off = reply_begin(c, r);

	wire_put_i64(&c->out, c->s->nkeys);
	wire_frame_end(&c->out, off);
}

static void op_append(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = entry_get(s, r->key);
	uint32_t old = 0;
	uint64_t n;
	uint8_t *p;
	char msg[96];

	if (e == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "APPEND: out of memory");
		return;
	}
	old = e->present ? e->vlen : 0;
	n = (uint64_t)old + r->val.len;
	if (n > s->lim.max_value_len) {
		snprintf(msg, sizeof(msg), "APPEND: value length %" PRIu64 " exceeds limit %u", n,
			 s->lim.max_value_len);
		entry_maybe_free(s, e);
		reply_error(c, r, WIRE_E_TOO_BIG, msg);
		return;
	}
	if (n > e->vcap) {
		p = realloc(e->val, n ? n : 1);
		if (p == NULL) {
			entry_maybe_free(s, e);
			reply_error(c, r, WIRE_E_NO_MEMORY, "APPEND: out of memory");
			return;
		}
		e->val = p;
		e->vcap = (uint32_t)(n ? n : 1);
	}
	if (r->val.len > 0) {
		memcpy(e->val + old, r->val.p, r->val.len);
	}
	e->vlen = (uint32_t)n;
	if (!e->present) {
		e->present = true;
		s->nkeys++;
	}
	key_clear_ttl(s, e);
	key_written(s, e);
	reply_empty(c, r);
}

static void op_multi_get(struct conn *c, const struct wire_req *r)
{
	const uint8_t *cur = r->list;
	struct entry *e;
	uint64_t total = 4;
	uint32_t i;
	size_t off;
	char msg[96];

	/* Size the reply first: no partial reply, no unbounded frame. */
	for (i = 0; i < r->n; i++) {
		e = entry_lookup(c->s, wire_list_next(&cur));
		total += 1 + (e != NULL && e->present ? 4 + (uint64_t)e->vlen : 0);
	}
	if (total + 8 > WIRE_MAX_FRAME) {
		snprintf(msg, sizeof(msg), "MULTI_GET: reply of %" PRIu64
			 " bytes exceeds the frame limit", total + 8);
		reply_error(c, r, WIRE_E_TOO_BIG, msg);
		return;
	}
	off = reply_begin(c, r);
	wire_put_u32(&c->out, r->n);
	cur = r->list;
	for (i = 0; i < r->n; i++) {
		put_found(c, entry_lookup(c->s, wire_list_next(&cur)));
	}
	wire_frame_end(&c->out, off);
}

static void op_multi_set(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	const uint8_t *cur = r->list;
	struct wire_str k, v;
	struct entry *e;
	uint32_t i;

	/* All writes land in this one callback, so no client sees a partial multi_set. */
	for (i = 0; i < r->n; i++) {
		k = wire_list_next(&cur);
		v = wire_list_next(&cur);
		e = entry_get(s, k);
		if (e == NULL || key_store(s, e, v.p, v.len) < 0) {
			if (e != NULL) {
				entry_maybe_free(s, e);
			}
			reply_error(c, r, WIRE_E_NO_MEMORY, "MULTI_SET: out of memory");
			return;
		}
		key_written(s, e);
	}
	reply_empty(c, r);
}

static void dispatch(struct conn *c, const struct wire_hdr *h, const uint8_t *payload,
		     size_t plen)
{
	struct wire_req r;
	struct crun_diag d;
	int st;

	st = wire_req_decode(h, payload, plen, &c->s->lim, &r, &d);
	if (st != WIRE_OK) {
		if (st == WIRE_E_BAD_FRAME || st == WIRE_E_UNKNOWN_OP || !c->hello) {
			conn_fail(c, h->op, h->id, (uint16_t)st, d.msg);
		} else {
			reply_error(c, &r, (uint16_t)st, d.msg);
		}
		return;
	}
	if (!c->hello && r.op != WIRE_OP_HELLO) {
		snprintf(d.msg, sizeof(d.msg), "expected HELLO as the first frame, got op %u", r.op);
		conn_fail(c, r.op, r.id, WIRE_E_BAD_FRAME, d.msg);
		return;
	}
	switch (r.op) {
	case WIRE_OP_HELLO:
		op_hello(c, &r);
		break;
	case WIRE_OP_PING:
		reply_empty(c, &r);
		break;
	case WIRE_OP_SET:
		op_set(c, &r);
		break;
	case WIRE_OP_GET:
		op_get(c, &r);
		break;
	case WIRE_OP_WAIT:
		op_wait(c, &r);
		break;
	case WIRE_OP_ADD:
		op_add(c, &r);
		break;
	case WIRE_OP_CAS:
		op_cas(c, &r);
		break;
	case WIRE_OP_DELETE:
		op_delete(c, &r);
		break;
	case WIRE_OP_CHECK:
		op_check(c, &r);
		break;
	case WIRE_OP_NUM_KEYS:
		op_num_keys(c, &r);
		break;
	case WIRE_OP_APPEND:
		op_append(c, &r);
		break;
	case WIRE_OP_MULTI_GET:
		op_multi_get(c, &r);
		break;
	case WIRE_OP_MULTI_SET:
		op_multi_set(c, &r);
		break;
	}
}

/* ---- connections ---- */

static void server_unref(struct store_server *s)
{
	if (--s->refs > 0) {
		return;
	}
	htab_finish(&s->keys);
	free(s->ttl.a);
	free(s->waits.a);
	free(s->rbuf);
	free(s->token);
	free(s);
}

static void free_table(struct store_server *s)
{
	struct htab_node *n, *next;
	struct entry *e;
	size_t i;

	htab_for_each_safe(&s->keys, i, n, next) {
		e = container_of(n, struct entry, node);
		free(e->val);
		free(e);
	}
	memset(s->keys.buckets, 0, s->keys.nbuckets * sizeof(*s->keys.buckets));
	s->keys.count = 0;
	s->nkeys = 0;
	s->ttl.n = 0;
}

static void conn_unref(struct conn *c)
{
	struct store_server *s = c->s;

	if (--c->refs > 0) {
		return;
	}
	free(c->in);
	free(c->backlog);
	wire_buf_finish(&c->out);
	free(c);
	server_unref(s);
}

static void on_conn_closed(uv_handle_t *h)
{
	conn_unref(h->data);
}

static void peer_name(struct conn *c, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);

	snprintf(buf, len, "?");
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &n) != 0) {
		return;
	}
	net_format_sockaddr((struct sockaddr *)&ss, buf, len);
}

/* Idempotent: drop every wait, close the socket, free in the close callback. */
static void conn_close(struct conn *c)
{
	struct store_server *s = c->s;

	if (c->closing) {
		return;
	}
	c->closing = true;
	while (c->waits != NULL) {
		wait_destroy(s, c->waits);
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
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_written(uv_write_t *req, int status)
{
	struct wreq *w = (struct wreq *)req;
	struct conn *c = w->c;

	free(w->buf);
	free(w);
	if (status < 0) {
		conn_close(c);
	} else if (c->paused && !c->closing &&
		   uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < OUT_LOW_WATER) {
		c->paused = false;
		c->last_active = (int64_t)uv_now(c->s->loop);
		conn_resume(c);
	}
	conn_unref(c);
}

/* Hand the pending replies to the socket: try a direct write, queue what is left. */
static void flush(struct conn *c)
{
	struct wreq *w;
	uv_buf_t b;
	int n;

	if (c->closing || c->out.len == 0) {
		return;
	}
	if (c->out.oom) {
		wire_buf_finish(&c->out);
		conn_close(c);
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
		conn_close(c);
		return;
	}
	if (n < 0) {
		n = 0;
	}
	w = malloc(sizeof(*w));
	if (w == NULL) {
		conn_close(c);
		return;
	}
	w->c = c;
	w->buf = c->out.p; /* the request takes the buffer */
	b = uv_buf_init((char *)c->out.p + n, (unsigned int)(c->out.len - (size_t)n));
	memset(&c->out, 0, sizeof(c->out));
	if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
		free(w->buf);
		free(w);
		conn_close(c);
		return;
	}
	c->refs++;
	if (!c->paused && !c->failing &&
	    uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > OUT_HIGH_WATER) {
		c->paused = true;
		uv_read_stop((uv_stream_t *)&c->tcp);
	}
}

static void flush_all(struct store_server *s)
{
	struct conn *c;

	while ((c = s->flush) != NULL) {
		s->flush = c->flush_next;
		c->in_flush = false;
		c->flush_next = NULL;
		flush(c);
	}
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct conn *c = req->data;

	free(req);
	c->shut = true;
	if (status < 0 || c->eof) {
		conn_close(c);
	}
	/* Otherwise keep reading (and discarding) until the peer closes or the drain ends, so
	 * unread input does not turn our close into a reset that destroys the error reply. */
	conn_unref(c);
}

/* Send an error reply, then close this connection alone (after the reply is out). */
static void conn_fail(struct conn *c, uint8_t op, uint32_t id, uint16_t status, const char *msg)
{
	uv_shutdown_t *req;
	char peer[96];

	if (c->failing || c->closing) {
		return;
	}
	peer_name(c, peer, sizeof(peer));
	log_info("store: dropping %s: %s: %s", peer, wire_status_name(status), msg);
	c->failing = true;
	c->drain_until = (int64_t)uv_now(c->s->loop) + DRAIN_TIMEOUT_MS;
	while (c->waits != NULL) {
		wait_destroy(c->s, c->waits);
	}
	free(c->in);
	c->in = NULL;
	c->in_len = c->in_cap = c->need = 0;
	free(c->backlog);
	c->backlog = NULL;
	c->backlog_len = 0;
	wire_put_error(&c->out, op, id, status, msg);
	flush(c);
	if (c->closing) {
		return;
	}
	if (c->paused) {
		c->paused = false;
		conn_resume(c);
	}
	req = malloc(sizeof(*req));
	if (req == NULL) {
		conn_close(c);
		return;
	}
	req->data = c;
	if (uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) < 0) {
		free(req);
		conn_close(c);
		return;
	}
	c->refs++;
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
	char msg[96];
	int rc;

	rc = wire_hdr_decode(p, WIRE_MAX_FRAME, h);
	if (rc == -EPROTO) {
		snprintf(msg, sizeof(msg), "frame length %u below minimum %u", h->len,
			 WIRE_MIN_LEN);
		conn_fail(c, 0, 0, WIRE_E_BAD_FRAME, msg);
		return false;
	}
	if (rc == -EMSGSIZE) {
		snprintf(msg, sizeof(msg), "frame length %u exceeds limit %u", h->len,
			 (unsigned)WIRE_MAX_FRAME);
		conn_fail(c, 0, 0, WIRE_E_TOO_BIG, msg);
		return false;
	}
	/* Reject what the header alone condemns before waiting for (or buffering) a payload. */
	if (h->op < 1 || h->op > WIRE_OP_MAX) {
		snprintf(msg, sizeof(msg), "unknown op %u", h->op);
		conn_fail(c, h->op, h->id, WIRE_E_UNKNOWN_OP, msg);
		return false;
	}
	if (!c->hello && h->op != WIRE_OP_HELLO) {
		snprintf(msg, sizeof(msg), "expected HELLO as the first frame, got op %u", h->op);
		conn_fail(c, h->op, h->id, WIRE_E_BAD_FRAME, msg);
		return false;
	}
	return true;
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
		q = realloc(c->in, cap);
		if (q == NULL) {
			conn_fail(c, 0, 0, WIRE_E_NO_MEMORY, "out of memory");
			return false;
		}
		c->in = q;
		c->in_cap = cap;
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

	while (left > 0 && !c->failing && !c->closing) {
		if (c->out.len >= OUT_HIGH_WATER) {
			flush(c);
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
			dispatch(c, &h, c->in + WIRE_HDR_LEN, h.len - 8);
			free(c->in);
			c->in = NULL;
			c->in_len = c->in_cap = c->need = 0;
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
		dispatch(c, &h, p + WIRE_HDR_LEN, h.len - 8);
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
	size_t n;

	(void)buf; /* the server's read buffer */
	if (nread == 0 || c->closing) {
		return;
	}
	if (nread < 0) {
		if (nread == UV_EOF && c->in_len > 0 && !c->failing) {
			snprintf(msg, sizeof(msg), "truncated frame: got %u of %u bytes", c->in_len,
				 c->need ? c->need : WIRE_HDR_LEN);
			conn_fail(c, 0, 0, WIRE_E_BAD_FRAME, msg);
		}
		if (c->failing && !c->closing && !c->shut) {
			/* Let the shutdown request finish sending the error reply, then close. */
			c->eof = true;
			uv_read_stop(stream);
			flush_all(s);
			return;
		}
		conn_close(c);
		flush_all(s);
		return;
	}
	if (c->failing) {
		return; /* draining after an error reply */
	}
	c->last_active = (int64_t)uv_now(s->loop);
	n = consume(c, s->rbuf, (size_t)nread);
	if (n < (size_t)nread && !c->failing && !c->closing) {
		/* Paused with input left: at most one read buffer, kept until the peer reads. */
		c->backlog = malloc((size_t)nread - n);
		if (c->backlog == NULL) {
			conn_fail(c, 0, 0, WIRE_E_NO_MEMORY, "out of memory");
		} else {
			memcpy(c->backlog, s->rbuf + n, (size_t)nread - n);
			c->backlog_len = (uint32_t)((size_t)nread - n);
		}
	}
	flush(c);
	flush_all(s);
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
			flush_all(c->s);
			return; /* paused again; on_written resumes */
		}
		free(c->backlog);
		c->backlog = NULL;
		c->backlog_len = 0;
		flush(c);
		flush_all(c->s);
		if (c->closing || c->paused) {
			return;
		}
	}
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct store_server *s = server->data;
	struct conn *c;
	char msg[64];

	if (status < 0) {
		log_warn("store %s: accept: %s", s->addr, uv_strerror(status));
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		log_warn("store %s: accept: out of memory", s->addr);
		return;
	}
	c->s = s;
	c->refs = 1;
	c->tcp.data = c;
	uv_tcp_init(s->loop, &c->tcp);
	s->refs++;
	c->next = s->conns;
	if (s->conns != NULL) {
		s->conns->prev = c;
	}
	s->conns = c;
	s->nconns++;
	c->last_active = c->since = (int64_t)uv_now(s->loop);
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
		conn_close(c);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	/* A peer host that vanishes while holding a wait is found by keepalive, not idleness. */
	uv_tcp_keepalive(&c->tcp, 1, KEEPALIVE_S);
	if (s->closing) {
		conn_close(c);
		return;
	}
	if (s->nconns > (size_t)s->max_connections) {
		snprintf(msg, sizeof(msg), "too many connections (limit %d)", s->max_connections);
		conn_fail(c, 0, 0, WIRE_E_BUSY, msg);
	}
	if (!c->closing) {
		uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
	}
}

/* Handshake deadline, idle timeout, end of the drain after an error reply. */
static void on_sweep(uv_timer_t *t)
{
	struct store_server *s = t->data;
	int64_t now = (int64_t)uv_now(s->loop);
	struct conn *c, *next;
	char peer[96];

	for (c = s->conns; c != NULL; c = next) {
		next = c->next;
		if (c->failing) {
			if (now >= c->drain_until) {
				conn_close(c);
			}
		} else if (!c->hello && now - c->since >= HANDSHAKE_TIMEOUT_MS) {
			peer_name(c, peer, sizeof(peer));
			log_info("store: dropping %s: no handshake within %d ms", peer,
				 HANDSHAKE_TIMEOUT_MS);
			conn_close(c);
		} else if (s->idle_timeout_ms > 0 && c->nwaits == 0 && !c->paused &&
			   now - c->last_active >= s->idle_timeout_ms) {
			peer_name(c, peer, sizeof(peer));
			log_info("store: dropping %s: idle for %d ms", peer, s->idle_timeout_ms);
			conn_close(c);
		}
	}
}

/* ---- lifecycle ---- */

static int bind_socket(const char *addr, int *fd_out, struct crun_diag *d)
{
	struct addrinfo hints, *res = NULL;
	char host[256], port_s[16];
	int port, fd, one = 1, rc;

	if (addr == NULL || net_parse_hostport(addr, -1, host, sizeof(host), &port) < 0) {
		return diag_set(d, -EINVAL, "store: listen address %s: expected ADDR:PORT",
				addr ? addr : "(null)");
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(port_s, sizeof(port_s), "%d", port);
	rc = getaddrinfo(host, port_s, &hints, &res);
	if (rc != 0 || res == NULL) {
		return diag_set(d, -EINVAL, "store: listen address %s: %s", addr,
				gai_strerror(rc));
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		rc = -errno;
		freeaddrinfo(res);
		return diag_set(d, rc, "store: listen %s: socket: %s", addr, strerror(-rc));
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
	return diag_set(d, rc, "store: listen %s: %s", addr, strerror(-rc));
}

static void on_server_handle_closed(uv_handle_t *h)
{
	server_unref(h->data);
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
	rc = bind_socket(opts->listen, &fd, d);
	if (rc < 0) {
		return rc;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		close(fd);
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	htab_init(&s->keys, 1024);
	s->rbuf = malloc(READ_BUF_LEN);
	if (opts->token != NULL && opts->token[0] != '\0') {
		s->token = strdup(opts->token);
		s->token_len = strlen(opts->token);
		if (s->token == NULL) {
			goto oom;
		}
	}
	if (s->keys.buckets == NULL || s->rbuf == NULL) {
		goto oom;
	}
	s->loop = loop;
	s->seed = (uint64_t)crun_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)s;
	s->max_connections =
		opts->max_connections > 0 ? opts->max_connections : DEFAULT_MAX_CONNECTIONS;
	s->idle_timeout_ms = opts->idle_timeout_ms > 0 ? opts->idle_timeout_ms : 0;
	s->max_pending = opts->max_pending_per_conn > 0 ? (uint32_t)opts->max_pending_per_conn
							: DEFAULT_MAX_PENDING;
	s->lim.max_key_len = CRUN_STORE_MAX_KEY_LEN;
	s->lim.max_value_len =
		opts->max_value_len > 0 ? (uint32_t)opts->max_value_len : CRUN_STORE_MAX_VALUE_LEN;
	s->lim.max_keys = CRUN_STORE_MAX_KEYS;
	s->refs = 1;

	uv_tcp_init(loop, &s->listener);
	uv_timer_init(loop, &s->ttl_timer);
	uv_timer_init(loop, &s->wait_timer);
	uv_timer_init(loop, &s->sweep_timer);
	s->listener.data = s->ttl_timer.data = s->wait_timer.data = s->sweep_timer.data = s;
	s->refs += 4;
	rc = uv_tcp_open(&s->listener, fd);
	if (rc == 0) {
		fd = -1;
		rc = uv_listen((uv_stream_t *)&s->listener, 4096, on_connection);
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
	uv_timer_start(&s->sweep_timer, on_sweep, SWEEP_MS, SWEEP_MS);
	*out = s;
	return 0;
oom:
	close(fd);
	htab_finish(&s->keys);
	free(s->rbuf);
	free(s->token);
	free(s);
	return diag_set(d, -ENOMEM, "store: out of memory");
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
	struct wait *w;

	if (s == NULL || s->closing) {
		return;
	}
	s->closing = true;
	uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
	uv_close((uv_handle_t *)&s->ttl_timer, on_server_handle_closed);
	uv_close((uv_handle_t *)&s->wait_timer, on_server_handle_closed);
	uv_close((uv_handle_t *)&s->sweep_timer, on_server_handle_closed);
	/* Every held wait gets an explicit answer, then every connection closes. */
	for (c = s->conns; c != NULL; c = c->next) {
		while ((w = c->waits) != NULL) {
			wait_fail(s, w, WIRE_E_SHUTDOWN, "server shutting down");
		}
		flush(c);
	}
	s->flush = NULL;
	while (s->conns != NULL) {
		c = s->conns;
		c->in_flush = false;
		conn_close(c);
	}
	s->waits.n = 0;
	free_table(s);
	server_unref(s);
}
