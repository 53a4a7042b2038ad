/* SPDX-License-Identifier: MIT */
/* rendezvous/store/keyspace.c: the key table, TTLs, held waits and the operations on them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/store.h>

#include "rendezvous/store/keyspace.h"
#include "src/common/byteorder.h"
#include "src/common/parse.h"
#include "src/common/util.h"

#define KEY_BUF (KS_MAX_PREFIX + CRUN_STORE_MAX_KEY_LEN)

/* ---- a binary min-heap of deadlines ---- */

static void heap_swap(struct ks_heap *h, size_t i, size_t j)
{
	struct ks_hnode *t = h->a[i];

	h->a[i] = h->a[j];
	h->a[j] = t;
	h->a[i]->idx = i;
	h->a[j]->idx = j;
}

static void heap_up(struct ks_heap *h, size_t i)
{
	while (i > 0 && h->a[(i - 1) / 2]->at > h->a[i]->at) {
		heap_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(struct ks_heap *h, size_t i)
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

static int heap_push(struct ks_heap *h, struct ks_hnode *x)
{
	struct ks_hnode **a;
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

static void heap_remove(struct ks_heap *h, struct ks_hnode *x)
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

static struct ks_hnode *heap_min(const struct ks_heap *h)
{
	return h->n ? h->a[0] : NULL;
}

/* ---- accounts: the stored data's quotas ---- */

enum ks_acct_kind ks_key_account(struct ks_str k, struct ks_str *name)
{
	static const char ts[] = "/tcpstore/";
	const uint8_t *p = k.p, *slash;
	uint32_t n = k.len;
	bool rdzv = n > 5 && memcmp(p, "rdzv/", 5) == 0;

	if (rdzv) {
		p += 5;
		n -= 5;
	}
	slash = n > 0 ? memchr(p, '/', n) : NULL;
	if (slash == NULL || slash == p) {
		return KS_ACCT_NONE;
	}
	*name = (struct ks_str){p, (uint32_t)(slash - p)};
	n -= name->len;
	if (!rdzv && n >= sizeof(ts) - 1 && memcmp(slash, ts, sizeof(ts) - 1) == 0) {
		return KS_ACCT_TCPSTORE;
	}
	return KS_ACCT_SCOPE;
}

static uint64_t acct_hash(const struct keyspace *ks, enum ks_acct_kind kind, struct ks_str name)
{
	return htab_hash(name.p, name.len, &ks->seed) + (uint64_t)kind;
}

static struct ks_acct *acct_find(struct keyspace *ks, enum ks_acct_kind kind, struct ks_str name,
				 uint64_t h)
{
	struct htab_node *node;
	struct ks_acct *a;

	for (node = htab_chain(&ks->accts, h); node != NULL; node = node->next) {
		a = container_of(node, struct ks_acct, node);
		if (node->hash == h && a->kind == kind && a->nlen == name.len &&
		    memcmp(a->name, name.p, name.len) == 0) {
			return a;
		}
	}
	return NULL;
}

const struct ks_acct *ks_account(struct keyspace *ks, enum ks_acct_kind kind, struct ks_str name)
{
	return acct_find(ks, kind, name, acct_hash(ks, kind, name));
}

/* Point a new entry @e at its key's account (created when it is the run's first). */
static int acct_attach(struct keyspace *ks, struct ks_entry *e)
{
	struct ks_str name = {NULL, 0};
	enum ks_acct_kind kind = ks_key_account((struct ks_str){e->key, e->klen}, &name);
	struct ks_acct *a;
	uint64_t h;

	if (kind == KS_ACCT_NONE) {
		return 0;
	}
	h = acct_hash(ks, kind, name);
	a = acct_find(ks, kind, name, h);
	if (a == NULL) {
		a = calloc(1, sizeof(*a) + name.len);
		if (a == NULL) {
			return -ENOMEM;
		}
		a->kind = (uint8_t)kind;
		a->nlen = name.len;
		memcpy(a->name, name.p, name.len);
		htab_insert(&ks->accts, &a->node, h);
	}
	a->refs++;
	e->acct = a;
	return 0;
}

/* @e is being freed: its account loses an entry (and goes with its last). */
static void acct_detach(struct keyspace *ks, struct ks_entry *e)
{
	struct ks_acct *a = e->acct;

	if (a != NULL && --a->refs == 0) {
		htab_remove(&ks->accts, &a->node);
		free(a);
	}
	e->acct = NULL;
}

static uint64_t bytes_of(const struct ks_entry *e)
{
	return e->present ? (uint64_t)e->klen + e->vlen : 0;
}

/* Whether a usage of @bytes and @keys may grow by @db and @dk under @lim; else the refusal. */
static bool over(struct keyspace *ks, const struct ks_acct *a, const struct ks_limit *lim,
		 uint64_t bytes, uint64_t keys, uint64_t db, uint64_t dk)
{
	struct ks_refusal *r = &ks->refused;
	bool k = lim->keys > 0 && dk > 0 && keys + dk > lim->keys;

	if (!k && (lim->bytes == 0 || db == 0 || bytes + db <= lim->bytes)) {
		return false;
	}
	ks->nrefused++;
	memset(r, 0, sizeof(*r));
	r->kind = a != NULL ? a->kind : KS_ACCT_NONE;
	r->keys = k;
	r->limit = k ? lim->keys : lim->bytes;
	r->would = k ? keys + dk : bytes + db;
	if (a != NULL) {
		snprintf(r->scope, sizeof(r->scope), "%.*s", (int)(a->nlen > 128 ? 128 : a->nlen),
			 (const char *)a->name);
	}
	return true;
}

/*
 * Whether @e may hold @vlen value bytes: 0, or -EDQUOT (ks->refused says why). A write that
 * grows neither the bytes nor the keys always may: a refusal never stands in the way of
 * shrinking what is stored.
 */
static int quota_check(struct keyspace *ks, const struct ks_entry *e, uint64_t vlen)
{
	const struct ks_acct *a = e->acct;
	uint64_t old = bytes_of(e), now = (uint64_t)e->klen + vlen;
	uint64_t db = now > old ? now - old : 0, dk = e->present ? 0 : 1;

	if (db == 0 && dk == 0) {
		return 0;
	}
	if (over(ks, NULL, &ks->quota.total, ks->nbytes, (uint64_t)ks->nkeys, db, dk) ||
	    (a != NULL && over(ks, a, a->kind == KS_ACCT_TCPSTORE ? &ks->quota.tcpstore
								   : &ks->quota.scope,
			       a->bytes, a->keys, db, dk))) {
		return -EDQUOT;
	}
	return 0;
}

/* @e changed from @was present with @old bytes to what it holds now: move its charge. */
static void charge(struct keyspace *ks, struct ks_entry *e, bool was, uint64_t old)
{
	uint64_t now = bytes_of(e);
	int64_t dk = (int64_t)e->present - (int64_t)was;

	ks->nbytes += now - old; /* modular: a shrink subtracts */
	ks->nkeys += dk;
	if (e->acct != NULL) {
		e->acct->bytes += now - old;
		e->acct->keys += (uint64_t)dk;
		e->acct->wrote_ms = ks->wall_ms;
	}
}

void ks_set_quotas(struct keyspace *ks, const struct ks_quotas *q)
{
	ks->quota = *q;
}

const char *ks_refusal_msg(const struct keyspace *ks, char *buf, size_t len)
{
	static const char *const what[] = {
		[KS_ACCT_NONE] = "the store's data budget",
		[KS_ACCT_SCOPE] = "the scope quota of run",
		[KS_ACCT_TCPSTORE] = "the TCPStore namespace quota of run",
	};
	const struct ks_refusal *r = &ks->refused;
	const char *unit = r->keys ? "keys" : "bytes";

	if (r->kind == KS_ACCT_NONE) {
		snprintf(buf, len, "%s is full: %" PRIu64 " %s (this write would make %" PRIu64 ")",
			 what[0], r->limit, unit, r->would);
	} else {
		snprintf(buf, len, "%s \"%s\" is full: %" PRIu64 " %s (this write would make %"
			 PRIu64 ")", what[r->kind == KS_ACCT_TCPSTORE ? 2 : 1], r->scope, r->limit,
			 unit, r->would);
	}
	return buf;
}

/* ---- the table ---- */

static struct ks_entry *find(struct keyspace *ks, struct ks_str k, uint64_t h)
{
	struct htab_node *node;
	struct ks_entry *e;

	for (node = htab_chain(&ks->keys, h); node != NULL; node = node->next) {
		e = container_of(node, struct ks_entry, node);
		if (node->hash == h && e->klen == k.len &&
		    (k.len == 0 || memcmp(e->key, k.p, k.len) == 0)) {
			return e;
		}
	}
	return NULL;
}

static struct ks_entry *lookup(struct keyspace *ks, struct ks_str k)
{
	return find(ks, k, htab_hash(k.p, k.len, &ks->seed));
}

/* Find or create the entry for @k (created absent). NULL only when out of memory. */
static struct ks_entry *entry_get(struct keyspace *ks, struct ks_str k)
{
	uint64_t h = htab_hash(k.p, k.len, &ks->seed);
	struct ks_entry *e = find(ks, k, h);

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
	if (acct_attach(ks, e) < 0) {
		free(e);
		return NULL;
	}
	htab_insert(&ks->keys, &e->node, h);
	return e;
}

/* An absent entry with nobody waiting on it has no reason to exist. */
static void entry_maybe_free(struct keyspace *ks, struct ks_entry *e)
{
	if (!e->present && e->watchers == NULL) {
		htab_remove(&ks->keys, &e->node);
		acct_detach(ks, e);
		free(e->val);
		free(e);
	}
}

/* The next key of @l, its prefix in front (in @buf when there is one). */
static struct ks_str list_key(const struct ks_list *l, const uint8_t **cur, uint8_t *buf)
{
	struct ks_str k = l->next(cur);

	if (l->prefix_len == 0) {
		return k;
	}
	/* The codecs bound keys (less the prefix) before they get here. */
	crun_require(l->prefix_len <= KS_MAX_PREFIX && k.len <= CRUN_STORE_MAX_KEY_LEN);
	memcpy(buf, l->prefix, l->prefix_len);
	if (k.len > 0) {
		memcpy(buf + l->prefix_len, k.p, k.len);
	}
	return (struct ks_str){buf, l->prefix_len + k.len};
}

int ks_init(struct keyspace *ks, uint32_t max_value_len, ks_wait_cb *on_wait_done, void *data)
{
	int rc;

	memset(ks, 0, sizeof(*ks));
	rc = htab_seed_random(&ks->seed);
	if (rc < 0) {
		return rc;
	}
	if (htab_init(&ks->keys, 1024) < 0) {
		return -ENOMEM;
	}
	if (htab_init(&ks->accts, 16) < 0) {
		htab_finish(&ks->keys);
		return -ENOMEM;
	}
	ks->max_value_len = max_value_len;
	ks->on_wait_done = on_wait_done;
	ks->data = data;
	return 0;
}

void ks_finish(struct keyspace *ks)
{
	struct htab_node *n, *next;
	struct ks_entry *e;
	size_t i;

	if (ks->keys.buckets != NULL) {
		htab_for_each_safe(&ks->keys, i, n, next) {
			e = container_of(n, struct ks_entry, node);
			acct_detach(ks, e);
			free(e->val);
			free(e);
		}
	}
	htab_finish(&ks->keys);
	htab_finish(&ks->accts);
	free(ks->ttl.a);
	free(ks->waits.a);
	memset(&ks->ttl, 0, sizeof(ks->ttl));
	memset(&ks->waits, 0, sizeof(ks->waits));
	ks->nkeys = 0;
	ks->nbytes = 0;
}

/* ---- reads ---- */

const struct ks_entry *ks_get(struct keyspace *ks, struct ks_str k)
{
	struct ks_entry *e = lookup(ks, k);

	return e != NULL && e->present ? e : NULL;
}

const struct ks_entry *ks_get_next(struct keyspace *ks, const struct ks_list *l,
				   const uint8_t **cur)
{
	uint8_t buf[KEY_BUF];

	return ks_get(ks, list_key(l, cur, buf));
}

bool ks_check(struct keyspace *ks, const struct ks_list *l)
{
	const uint8_t *cur = l->list;
	uint32_t i;

	for (i = 0; i < l->n; i++) {
		if (ks_get_next(ks, l, &cur) == NULL) {
			return false;
		}
	}
	return true;
}

int64_t ks_num_keys(struct keyspace *ks, const uint8_t *prefix, uint32_t prefix_len)
{
	struct htab_node *node, *next;
	struct ks_entry *e;
	int64_t n = 0;
	size_t b;

	if (prefix_len == 0) {
		return ks->nkeys;
	}
	htab_for_each_safe(&ks->keys, b, node, next) {
		e = container_of(node, struct ks_entry, node);
		n += e->present && e->klen >= prefix_len && memcmp(e->key, prefix, prefix_len) == 0;
	}
	return n;
}

/* ---- waits: waking ---- */

static void link_unlink(struct ks_link *l)
{
	struct ks_entry *e = l->e;

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

/* Unlink @w from its keys (freeing entries only it kept) and from the deadline heap. */
static void wait_unlink(struct keyspace *ks, struct ks_wait *w)
{
	struct ks_entry *e;
	uint32_t i;

	for (i = 0; i < w->n; i++) {
		e = w->links[i].e;
		if (e != NULL) {
			link_unlink(&w->links[i]);
			entry_maybe_free(ks, e);
		}
	}
	heap_remove(&ks->waits, &w->dl);
}

void ks_wait_cancel(struct keyspace *ks, struct ks_wait *w)
{
	wait_unlink(ks, w);
	free(w);
}

static void wait_end(struct keyspace *ks, struct ks_wait *w, int rc, uint32_t index)
{
	wait_unlink(ks, w);
	ks->on_wait_done(ks, w, rc, index);
	free(w);
}

/* @e was just written: answer every wait on it. */
static void written(struct keyspace *ks, struct ks_entry *e)
{
	struct ks_link *l;
	struct ks_wait *w;

	while ((l = e->watchers) != NULL) {
		w = l->w;
		link_unlink(l);
		if (w->mode == KS_WAIT_ANY) {
			w->woke = e;
			wait_end(ks, w, 0, l->index);
		} else if (--w->missing == 0) {
			wait_end(ks, w, 0, 0);
		}
	}
}

/* ---- writes ---- */

/* Give @e the value @v and no TTL. 0, -EDQUOT or -ENOMEM (@e unchanged). */
static int store(struct keyspace *ks, struct ks_entry *e, struct ks_str v)
{
	uint64_t old = bytes_of(e);
	bool was = e->present;
	uint8_t *p;

	if (quota_check(ks, e, v.len) < 0) {
		return -EDQUOT;
	}
	if (v.len > e->vcap || (e->vcap > 4096 && v.len < e->vcap / 4)) {
		p = malloc(v.len ? v.len : 1);
		if (p == NULL) {
			return -ENOMEM;
		}
		free(e->val);
		e->val = p;
		e->vcap = v.len ? v.len : 1;
	}
	if (v.len > 0) {
		memcpy(e->val, v.p, v.len);
	}
	e->vlen = v.len;
	e->present = true;
	charge(ks, e, was, old);
	heap_remove(&ks->ttl, &e->ttl);
	return 0;
}

/* Make @e absent (freeing it when nobody waits on it). */
static void key_delete(struct keyspace *ks, struct ks_entry *e)
{
	uint64_t old = bytes_of(e);

	if (!e->present) {
		return;
	}
	e->present = false;
	charge(ks, e, true, old);
	free(e->val);
	e->val = NULL;
	e->vlen = e->vcap = 0;
	heap_remove(&ks->ttl, &e->ttl);
	entry_maybe_free(ks, e);
}

int ks_set(struct keyspace *ks, struct ks_str k, struct ks_str v, int64_t expire_at)
{
	struct ks_entry *e = entry_get(ks, k);
	int rc;

	if (e == NULL) {
		return -ENOMEM;
	}
	rc = store(ks, e, v);
	if (rc < 0) {
		entry_maybe_free(ks, e);
		return rc;
	}
	if (expire_at != KS_NO_DEADLINE) {
		e->ttl.at = expire_at;
		heap_push(&ks->ttl, &e->ttl); /* out of memory: the key just lives on */
	}
	written(ks, e);
	return 0;
}

int ks_add(struct keyspace *ks, struct ks_str k, int64_t delta, int64_t *out)
{
	struct ks_entry *e = entry_get(ks, k);
	int64_t v = 0;
	char buf[PARSE_I64_LEN];
	size_t n;
	int rc;

	if (e == NULL) {
		return -ENOMEM;
	}
	if (e->present && parse_i64_bytes(e->val, e->vlen, &v) < 0) {
		return -EINVAL;
	}
	if (__builtin_add_overflow(v, delta, &v)) {
		entry_maybe_free(ks, e);
		return -EOVERFLOW;
	}
	n = parse_i64_format(buf, v); /* snprintf was 2% of the server's CPU on adds (perf) */
	rc = store(ks, e, (struct ks_str){(const uint8_t *)buf, (uint32_t)n});
	if (rc < 0) {
		entry_maybe_free(ks, e);
		return rc;
	}
	*out = v;
	written(ks, e);
	return 0;
}

int ks_cas(struct keyspace *ks, struct ks_str k, struct ks_str expected, struct ks_str desired,
	   bool *matched)
{
	struct ks_entry *e = lookup(ks, k);
	bool present = e != NULL && e->present;

	if (present) {
		*matched = e->vlen == expected.len &&
			   (e->vlen == 0 || memcmp(e->val, expected.p, e->vlen) == 0);
	} else {
		*matched = expected.len == 0;
	}
	return *matched ? ks_set(ks, k, desired, KS_NO_DEADLINE) : 0;
}

bool ks_delete(struct keyspace *ks, struct ks_str k)
{
	struct ks_entry *e = lookup(ks, k);

	if (e == NULL || !e->present) {
		return false;
	}
	key_delete(ks, e);
	return true;
}

int ks_append(struct keyspace *ks, struct ks_str k, const uint8_t *head, uint32_t hlen,
	      struct ks_str v, uint64_t *newlen)
{
	struct ks_entry *e = entry_get(ks, k);
	uint64_t n, was_bytes;
	uint32_t old;
	uint8_t *p;
	bool was;

	if (e == NULL) {
		return -ENOMEM;
	}
	old = e->present ? e->vlen : 0;
	n = (uint64_t)old + hlen + v.len;
	*newlen = n;
	if (n > ks->max_value_len) {
		entry_maybe_free(ks, e);
		return -EMSGSIZE;
	}
	if (quota_check(ks, e, n) < 0) {
		entry_maybe_free(ks, e);
		return -EDQUOT;
	}
	was = e->present;
	was_bytes = bytes_of(e);
	if (n > e->vcap) {
		p = realloc(e->val, n ? n : 1);
		if (p == NULL) {
			entry_maybe_free(ks, e);
			return -ENOMEM;
		}
		e->val = p;
		e->vcap = (uint32_t)(n ? n : 1);
	}
	if (hlen > 0) {
		memcpy(e->val + old, head, hlen);
	}
	if (v.len > 0) {
		memcpy(e->val + old + hlen, v.p, v.len);
	}
	e->vlen = (uint32_t)n;
	e->present = true;
	charge(ks, e, was, was_bytes);
	heap_remove(&ks->ttl, &e->ttl);
	written(ks, e);
	return 0;
}

int ks_multi_set(struct keyspace *ks, const struct ks_list *pairs)
{
	const uint8_t *cur = pairs->list;
	uint8_t buf[KEY_BUF];
	struct ks_str k;
	uint32_t i;
	int rc;

	for (i = 0; i < pairs->n; i++) {
		k = list_key(pairs, &cur, buf);
		rc = ks_set(ks, k, pairs->next(&cur), KS_NO_DEADLINE);
		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

/* ---- queues ---- */

int64_t ks_queue_len(const struct ks_entry *e)
{
	uint32_t off = 0, len;
	int64_t n = 0;

	if (e == NULL) {
		return 0;
	}
	while (off < e->vlen) {
		if (e->vlen - off < 4) {
			return -1;
		}
		len = get_be32(e->val + off);
		if (len > e->vlen - off - 4) {
			return -1;
		}
		off += 4 + len;
		n++;
	}
	return n;
}

int ks_queue_push(struct keyspace *ks, struct ks_str k, struct ks_str item, uint64_t *newlen)
{
	uint8_t head[4];

	put_be32(head, item.len);
	return ks_append(ks, k, head, sizeof(head), item, newlen);
}

int ks_queue_pop(struct keyspace *ks, struct ks_str k, uint8_t **item, uint32_t *len)
{
	struct ks_entry *e = lookup(ks, k);
	int64_t n;
	uint32_t l;

	if (e == NULL || !e->present) {
		return -ENOENT;
	}
	n = ks_queue_len(e);
	if (n < 0) {
		return -EINVAL;
	}
	if (n == 0) {
		return -ENOENT;
	}
	l = get_be32(e->val);
	*item = malloc(l ? l : 1);
	if (*item == NULL) {
		return -ENOMEM;
	}
	if (l > 0) {
		memcpy(*item, e->val + 4, l);
	}
	*len = l;
	if (n == 1) {
		key_delete(ks, e); /* an empty queue is no key: WAIT waits for a push */
		return 0;
	}
	memmove(e->val, e->val + 4 + l, e->vlen - 4 - l);
	e->vlen -= 4 + l;
	ks->nbytes -= 4 + (uint64_t)l;
	if (e->acct != NULL) {
		e->acct->bytes -= 4 + (uint64_t)l;
	}
	return 0;
}

/* ---- waits: holding ---- */

bool ks_wait_ready(struct keyspace *ks, const struct ks_list *l, uint8_t mode, uint32_t *index)
{
	const uint8_t *cur = l->list;
	uint32_t i;

	*index = 0;
	if (l->n == 0) {
		return false;
	}
	for (i = 0; i < l->n; i++) {
		if (ks_get_next(ks, l, &cur) != NULL) {
			if (mode == KS_WAIT_ANY) {
				*index = i;
				return true;
			}
		} else if (mode != KS_WAIT_ANY) {
			return false;
		}
	}
	return mode != KS_WAIT_ANY;
}

size_t ks_wait_cost(const struct ks_list *l)
{
	const uint8_t *cur = l->list;
	size_t n = sizeof(struct ks_wait);
	uint32_t i;

	for (i = 0; i < l->n; i++) {
		n += sizeof(struct ks_link) + sizeof(struct ks_entry) + l->prefix_len +
		     l->next(&cur).len;
	}
	return n;
}

int ks_wait_start(struct keyspace *ks, const struct ks_list *l, uint8_t mode, int64_t deadline,
		  struct ks_wait **out)
{
	const uint8_t *cur = l->list;
	uint8_t buf[KEY_BUF];
	struct ks_entry *e;
	struct ks_wait *w;
	struct ks_str k;
	uint32_t i;

	w = calloc(1, sizeof(*w) + (size_t)l->n * sizeof(w->links[0]));
	if (w == NULL) {
		return -ENOMEM;
	}
	w->mode = mode;
	w->n = l->n;
	w->dl.idx = SIZE_MAX;
	for (i = 0; i < l->n; i++) {
		k = list_key(l, &cur, buf);
		w->links[i].w = w;
		w->links[i].index = i;
		e = lookup(ks, k);
		if (e != NULL && e->present) {
			continue; /* ALL: one fewer to wait for (ANY was ready: not called) */
		}
		e = entry_get(ks, k);
		if (e == NULL) {
			ks_wait_cancel(ks, w);
			return -ENOMEM;
		}
		w->missing++;
		w->links[i].e = e;
		w->links[i].next = e->watchers;
		if (e->watchers != NULL) {
			e->watchers->prev = &w->links[i];
		}
		e->watchers = &w->links[i];
	}
	if (deadline != KS_NO_DEADLINE) {
		w->dl.at = deadline;
		if (heap_push(&ks->waits, &w->dl) < 0) {
			ks_wait_cancel(ks, w);
			return -ENOMEM;
		}
	}
	*out = w;
	return 0;
}

/* ---- time ---- */

int64_t ks_next_deadline(const struct keyspace *ks)
{
	const struct ks_hnode *t = heap_min(&ks->ttl), *w = heap_min(&ks->waits);
	int64_t at = KS_NO_DEADLINE;

	if (t != NULL) {
		at = t->at;
	}
	if (w != NULL && w->at < at) {
		at = w->at;
	}
	return at;
}

void ks_expire(struct keyspace *ks, int64_t now)
{
	struct ks_hnode *m;

	while ((m = heap_min(&ks->ttl)) != NULL && m->at <= now) {
		key_delete(ks, container_of(m, struct ks_entry, ttl));
	}
	while ((m = heap_min(&ks->waits)) != NULL && m->at <= now) {
		wait_end(ks, container_of(m, struct ks_wait, dl), -ETIMEDOUT, 0);
	}
}
