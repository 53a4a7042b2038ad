/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file_index.c: the file store's in-memory index of the whole store. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/client_file_internal.h"

/* Insert or find the entry for @k; its value is left as it was (empty when new). */
int fstore_upsert(struct store_backend *b, const char *k, size_t klen, struct entry **out)
{
	uint64_t h = hash_key(k, klen);
	struct entry *e = find_hashed(b, k, klen, h);

	if (e != NULL) {
		*out = e;
		return 0;
	}
	e = calloc(1, sizeof(*e) + klen + 1);
	if (e == NULL) {
		return -ENOMEM;
	}
	e->klen = klen;
	memcpy(e->key, k, klen);
	htab_insert(&b->index, &e->node, h);
	*out = e;
	return 0;
}

void fstore_index_remove(struct store_backend *b, const char *k, size_t klen)
{
	struct entry *e = find(b, k, klen);

	if (e == NULL) {
		return;
	}
	htab_remove(&b->index, &e->node);
	free(e->val);
	free(e);
}

void fstore_index_clear(struct store_backend *b)
{
	struct htab_node *n, *next;
	struct entry *e;
	size_t i;

	htab_for_each_safe(&b->index, i, n, next) {
		e = entry_of(n);
		free(e->val);
		free(e);
	}
	memset(b->index.buckets, 0, b->index.nbuckets * sizeof(*b->index.buckets));
	b->index.count = 0;
}

int fstore_set_value(struct entry *e, const uint8_t *v, size_t vlen, bool append)
{
	size_t base = append ? e->vlen : 0;
	uint8_t *p;

	p = realloc(e->val, base + vlen + 1);
	if (p == NULL) {
		return -ENOMEM;
	}
	memcpy(p + base, v, vlen);
	p[base + vlen] = 0;
	e->val = p;
	e->vlen = base + vlen;
	return 0;
}
