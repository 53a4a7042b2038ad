/* SPDX-License-Identifier: MIT */
/* src/common/htab.h: a small intrusive chained hash table keyed by a 64-bit hash. */
#ifndef CRUN_SRC_COMMON_HTAB_H
#define CRUN_SRC_COMMON_HTAB_H

#include <stddef.h>
#include <stdint.h>

/*
 * The table stores nodes embedded in the caller's own entries (container_of() gets the entry
 * back) and never allocates or frees them; it owns only its bucket array. It knows nothing of
 * keys: a lookup walks the chain of a hash with htab_chain() and compares keys itself, so the
 * comparison is inlined in the caller's hot path and keys can be stored however suits the
 * entry (inline after the struct, as the store does). Not thread-safe.
 */
struct htab_node {
	struct htab_node *next;
	uint64_t hash;
};

struct htab {
	struct htab_node **buckets;
	size_t nbuckets; /* a power of two */
	size_t count;
};

/* A hash key: tables whose keys a peer chooses (the store server's) use a secret random one,
 * so that nobody can compute colliding keys and turn lookups into chain walks. */
struct htab_seed {
	uint64_t k0;
	uint64_t k1;
};

/**
 * SipHash-2-4 (Aumasson and Bernstein) of @len bytes at @key under @seed (borrowed; NULL: the
 * all-zero key, for tables whose keys no peer chooses). Deterministic for a given seed.
 */
uint64_t htab_hash(const void *key, size_t len, const struct htab_seed *seed);
/** Fill @seed with secret random bits from getrandom(2). 0 or a negative errno. */
int htab_seed_random(struct htab_seed *seed);

/** Start with @nbuckets (rounded up to a power of two, at least 16). 0 or -ENOMEM. */
int htab_init(struct htab *t, size_t nbuckets);
/** Free the bucket array (not the nodes); a zeroed table is fine. */
void htab_finish(struct htab *t);

/** First node of the chain @hash falls in (then follow ->next, comparing n->hash first). */
static inline struct htab_node *htab_chain(const struct htab *t, uint64_t hash)
{
	return t->buckets[hash & (t->nbuckets - 1)];
}

/**
 * Insert @n (not already in the table) with @hash. Doubles the bucket array when nodes
 * outnumber buckets; if that allocation fails the chains just grow longer (still correct).
 */
void htab_insert(struct htab *t, struct htab_node *n, uint64_t hash);
/** Remove @n, which must be in the table. */
void htab_remove(struct htab *t, struct htab_node *n);

/*
 * Visit every node; @node may be removed (and freed) by the loop body, nothing else may.
 * @node and @next are struct htab_node * variables, @b a size_t.
 */
#define htab_for_each_safe(t, b, node, next)                                                   \
	for ((b) = 0; (b) < (t)->nbuckets; (b)++)                                              \
		for ((node) = (t)->buckets[b]; (node) != NULL && ((next) = (node)->next, 1);    \
		     (node) = (next))

#endif
