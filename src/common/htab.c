/* SPDX-License-Identifier: MIT */
/* src/common/htab.c: the intrusive hash table (the store server's keys, the file store's index). */
#include <errno.h>
#include <stdlib.h>

#include "src/common/htab.h"
#include "src/common/util.h"

uint64_t htab_hash(const void *key, size_t len, uint64_t seed)
{
	const uint8_t *k = key;
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= k[i];
		h *= 0x100000001b3ull;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h;
}

int htab_init(struct htab *t, size_t nbuckets)
{
	size_t n = 16;

	while (n < nbuckets) {
		n *= 2;
	}
	t->buckets = calloc(n, sizeof(*t->buckets));
	if (t->buckets == NULL) {
		return -ENOMEM;
	}
	t->nbuckets = n;
	t->count = 0;
	return 0;
}

void htab_finish(struct htab *t)
{
	free(t->buckets);
	t->buckets = NULL;
	t->nbuckets = 0;
	t->count = 0;
}

static void grow(struct htab *t)
{
	struct htab_node **nb, *e, *next;
	size_t n = t->nbuckets * 2, i;

	nb = calloc(n, sizeof(*nb));
	if (nb == NULL) {
		return;
	}
	for (i = 0; i < t->nbuckets; i++) {
		for (e = t->buckets[i]; e != NULL; e = next) {
			next = e->next;
			e->next = nb[e->hash & (n - 1)];
			nb[e->hash & (n - 1)] = e;
		}
	}
	free(t->buckets);
	t->buckets = nb;
	t->nbuckets = n;
}

void htab_insert(struct htab *t, struct htab_node *n, uint64_t hash)
{
	struct htab_node **head = &t->buckets[hash & (t->nbuckets - 1)];

	n->hash = hash;
	n->next = *head;
	*head = n;
	if (++t->count > t->nbuckets) {
		grow(t);
	}
}

void htab_remove(struct htab *t, struct htab_node *n)
{
	struct htab_node **pp = &t->buckets[n->hash & (t->nbuckets - 1)];

	while (*pp != n) {
		crun_require(*pp != NULL);
		pp = &(*pp)->next;
	}
	*pp = n->next;
	n->next = NULL;
	t->count--;
}
