/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_data.c: the key table, key writes and the TTL heap. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/server_internal.h"

/* ---- a binary min-heap of deadlines ---- */

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

int srv_heap_push(struct heap *h, struct hnode *x)
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

void srv_heap_remove(struct heap *h, struct hnode *x)
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

/* ---- the hash table ---- */

/* Find or create the entry for @k (created absent). NULL only when out of memory. */
struct entry *srv_entry_get(struct store_server *s, struct wire_str k)
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

void srv_entry_unhash(struct store_server *s, struct entry *e)
{
	htab_remove(&s->keys, &e->node);
	free(e->val);
	free(e);
}

void srv_free_table(struct store_server *s)
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

/* ---- key writes and TTLs ---- */

int srv_key_store(struct store_server *s, struct entry *e, const uint8_t *v, uint32_t n)
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

int srv_key_append(struct store_server *s, struct entry *e, const uint8_t *head, uint32_t hlen,
		   const uint8_t *v, uint32_t vlen, uint64_t *newlen)
{
	uint32_t old = e->present ? e->vlen : 0;
	uint64_t n = (uint64_t)old + hlen + vlen;
	uint8_t *p;

	*newlen = n;
	if (n > s->lim.max_value_len) {
		return -EMSGSIZE;
	}
	if (n > e->vcap) {
		p = realloc(e->val, n ? n : 1);
		if (p == NULL) {
			return -ENOMEM;
		}
		e->val = p;
		e->vcap = (uint32_t)(n ? n : 1);
	}
	if (hlen > 0) {
		memcpy(e->val + old, head, hlen);
	}
	if (vlen > 0) {
		memcpy(e->val + old + hlen, v, vlen);
	}
	e->vlen = (uint32_t)n;
	if (!e->present) {
		e->present = true;
		s->nkeys++;
	}
	key_clear_ttl(s, e);
	return 0;
}

void srv_key_delete(struct store_server *s, struct entry *e)
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
		srv_key_delete(s, e);
	}
	srv_ttl_arm(s);
}

void srv_timer_arm(struct store_server *s, uv_timer_t *t, struct heap *h, uv_timer_cb cb)
{
	struct hnode *m = heap_min(h);
	int64_t now = (int64_t)uv_now(s->loop);

	if (m == NULL || s->closing) {
		uv_timer_stop(t);
		return;
	}
	uv_timer_start(t, cb, m->at > now ? (uint64_t)(m->at - now) : 0, 0);
}

void srv_ttl_arm(struct store_server *s)
{
	srv_timer_arm(s, &s->ttl_timer, &s->ttl, on_ttl);
}
