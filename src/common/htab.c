/* SPDX-License-Identifier: MIT */
/* src/common/htab.c: the intrusive hash table (the store server's keys, the file store's index). */
#include <errno.h>
#include <stdlib.h>

#include "src/common/byteorder.h"
#include "src/common/htab.h"
#include "src/common/util.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND(v0, v1, v2, v3)                                                               \
	do {                                                                                   \
		v0 += v1;                                                                      \
		v1 = ROTL(v1, 13);                                                             \
		v1 ^= v0;                                                                      \
		v0 = ROTL(v0, 32);                                                             \
		v2 += v3;                                                                      \
		v3 = ROTL(v3, 16);                                                             \
		v3 ^= v2;                                                                      \
		v0 += v3;                                                                      \
		v3 = ROTL(v3, 21);                                                             \
		v3 ^= v0;                                                                      \
		v2 += v1;                                                                      \
		v1 = ROTL(v1, 17);                                                             \
		v1 ^= v2;                                                                      \
		v2 = ROTL(v2, 32);                                                             \
	} while (0)

/* SipHash-2-4, as in the reference implementation (github.com/veorq/SipHash), 64-bit output. */
uint64_t htab_hash(const void *key, size_t len, const struct htab_seed *seed)
{
	static const struct htab_seed zero;
	const struct htab_seed *k = seed != NULL ? seed : &zero;
	const uint8_t *p = len > 0 ? key : (const void *)"";
	const uint8_t *end = p + (len - len % 8);
	uint64_t v0 = 0x736f6d6570736575ull ^ k->k0;
	uint64_t v1 = 0x646f72616e646f6dull ^ k->k1;
	uint64_t v2 = 0x6c7967656e657261ull ^ k->k0;
	uint64_t v3 = 0x7465646279746573ull ^ k->k1;
	uint64_t m, b = (uint64_t)len << 56;
	size_t i;

	for (; p != end; p += 8) {
		m = get_le64(p);
		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	for (i = 0; i < len % 8; i++) {
		b |= (uint64_t)p[i] << (8 * i);
	}
	v3 ^= b;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

int htab_seed_random(struct htab_seed *seed)
{
	uint8_t buf[16];

	if (util_random(buf, sizeof(buf)) < 0) {
		return -EIO;
	}
	seed->k0 = get_le64(buf);
	seed->k1 = get_le64(buf + 8);
	return 0;
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
