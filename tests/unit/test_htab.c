/* SPDX-License-Identifier: MIT */
/* tests/unit/test_htab.c: src/common/htab: insert, find, remove, growth, safe iteration,
 * colliding hashes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/htab.h"
#include "src/common/util.h"
#include "tests/lib/cmocka_skip.h"

struct item {
	struct htab_node node;
	int key;
	int visits;
};

static const struct htab_seed seed1 = {1, 0}, seed2 = {2, 0};

static uint64_t key_hash(int key)
{
	return htab_hash(&key, sizeof(key), &seed1);
}

/* The lookup every user writes: walk the chain, compare the hash, then the key. */
static struct item *find(const struct htab *t, int key, uint64_t hash)
{
	struct htab_node *n;

	for (n = htab_chain(t, hash); n != NULL; n = n->next) {
		struct item *it = container_of(n, struct item, node);

		if (n->hash == hash && it->key == key) {
			return it;
		}
	}
	return NULL;
}

static void htab_init_rounds_buckets_up_to_a_power_of_two(void **state)
{
	struct htab t;

	(void)state;
	assert_int_equal(htab_init(&t, 0), 0);
	assert_int_equal(t.nbuckets, 16);
	assert_int_equal(t.count, 0);
	htab_finish(&t);
	assert_int_equal(htab_init(&t, 17), 0);
	assert_int_equal(t.nbuckets, 32);
	htab_finish(&t);
	assert_int_equal(htab_init(&t, 64), 0);
	assert_int_equal(t.nbuckets, 64);
	htab_finish(&t);
	assert_null(t.buckets);
	assert_int_equal(t.nbuckets, 0);
	/* A zeroed table may be finished too. */
	memset(&t, 0, sizeof(t));
	htab_finish(&t);
}

static void htab_inserted_node_is_found_and_removed(void **state)
{
	struct item a = {.key = 1}, b = {.key = 2};
	struct htab t;

	(void)state;
	assert_int_equal(htab_init(&t, 16), 0);
	assert_null(find(&t, 1, key_hash(1)));
	htab_insert(&t, &a.node, key_hash(1));
	htab_insert(&t, &b.node, key_hash(2));
	assert_int_equal(t.count, 2);
	assert_ptr_equal(find(&t, 1, key_hash(1)), &a);
	assert_ptr_equal(find(&t, 2, key_hash(2)), &b);
	assert_null(find(&t, 3, key_hash(3)));
	htab_remove(&t, &a.node);
	assert_int_equal(t.count, 1);
	assert_null(find(&t, 1, key_hash(1)));
	assert_ptr_equal(find(&t, 2, key_hash(2)), &b);
	/* A removed node can go back in. */
	htab_insert(&t, &a.node, key_hash(1));
	assert_ptr_equal(find(&t, 1, key_hash(1)), &a);
	htab_remove(&t, &a.node);
	htab_remove(&t, &b.node);
	assert_int_equal(t.count, 0);
	htab_finish(&t);
}

static void htab_grows_past_many_nodes_and_finds_them_all(void **state)
{
	enum { N = 20000 };
	struct item *items = calloc(N, sizeof(*items));
	struct htab t;
	size_t before;
	int i;

	(void)state;
	assert_non_null(items);
	assert_int_equal(htab_init(&t, 16), 0);
	before = t.nbuckets;
	for (i = 0; i < N; i++) {
		items[i].key = i;
		htab_insert(&t, &items[i].node, key_hash(i));
		/* Every node inserted so far survives each doubling. */
		if ((i & (i + 1)) == 0) {
			for (int k = 0; k <= i; k++) {
				assert_ptr_equal(find(&t, k, key_hash(k)), &items[k]);
			}
		}
	}
	assert_int_equal(t.count, N);
	assert_true(t.nbuckets > before);
	assert_true(t.nbuckets >= N);
	assert_int_equal(t.nbuckets & (t.nbuckets - 1), 0);
	for (i = 0; i < N; i++) {
		assert_ptr_equal(find(&t, i, key_hash(i)), &items[i]);
	}
	assert_null(find(&t, N, key_hash(N)));
	/* Remove every other one: the rest stay findable. */
	for (i = 0; i < N; i += 2) {
		htab_remove(&t, &items[i].node);
	}
	assert_int_equal(t.count, N / 2);
	for (i = 0; i < N; i++) {
		assert_true(find(&t, i, key_hash(i)) == (i % 2 ? &items[i] : NULL));
	}
	htab_finish(&t);
	free(items);
}

static void htab_for_each_safe_visits_each_node_once_and_allows_removal(void **state)
{
	enum { N = 1000 };
	struct htab_node *n, *next;
	struct item *it;
	struct htab t;
	size_t b;
	int i, visited = 0;

	(void)state;
	assert_int_equal(htab_init(&t, 16), 0);
	for (i = 0; i < N; i++) {
		it = calloc(1, sizeof(*it));
		assert_non_null(it);
		it->key = i;
		htab_insert(&t, &it->node, key_hash(i));
	}
	/* Remove and free every odd key while walking: the walk neither skips nor repeats. */
	htab_for_each_safe(&t, b, n, next) {
		it = container_of(n, struct item, node);
		it->visits++;
		visited++;
		if (it->key % 2 == 1) {
			htab_remove(&t, n);
			free(it);
		}
	}
	assert_int_equal(visited, N);
	assert_int_equal(t.count, N / 2);
	for (i = 0; i < N; i++) {
		it = find(&t, i, key_hash(i));
		if (i % 2 == 1) {
			assert_null(it);
		} else {
			assert_non_null(it);
			assert_int_equal(it->visits, 1);
		}
	}
	/* Empty the table the same way. */
	visited = 0;
	htab_for_each_safe(&t, b, n, next) {
		htab_remove(&t, n);
		free(container_of(n, struct item, node));
		visited++;
	}
	assert_int_equal(visited, N / 2);
	assert_int_equal(t.count, 0);
	for (b = 0; b < t.nbuckets; b++) {
		assert_null(t.buckets[b]);
	}
	htab_finish(&t);
}

/* Equal hashes share one chain: keys tell them apart, and any of them can be removed. */
static void htab_colliding_hashes_stay_distinct(void **state)
{
	enum { N = 100 };
	struct item items[N];
	struct htab t;
	int i;

	(void)state;
	assert_int_equal(htab_init(&t, 16), 0);
	for (i = 0; i < N; i++) {
		memset(&items[i], 0, sizeof(items[i]));
		items[i].key = i;
		htab_insert(&t, &items[i].node, 42);
	}
	assert_int_equal(t.count, N);
	for (i = 0; i < N; i++) {
		assert_ptr_equal(find(&t, i, 42), &items[i]);
	}
	/* Head, tail and middle of the chain. */
	htab_remove(&t, &items[N - 1].node);
	htab_remove(&t, &items[0].node);
	htab_remove(&t, &items[N / 2].node);
	assert_int_equal(t.count, N - 3);
	for (i = 0; i < N; i++) {
		if (i == 0 || i == N / 2 || i == N - 1) {
			assert_null(find(&t, i, 42));
		} else {
			assert_ptr_equal(find(&t, i, 42), &items[i]);
		}
	}
	/* Same bucket, different hash: the hash comparison keeps them apart. */
	{
		struct item other = {.key = 1};

		htab_insert(&t, &other.node, 42 + t.nbuckets);
		assert_ptr_equal(find(&t, 1, 42), &items[1]);
		assert_ptr_equal(find(&t, 1, 42 + t.nbuckets), &other);
		htab_remove(&t, &other.node);
	}
	htab_finish(&t);
}

static void htab_hash_depends_on_every_byte_and_the_seed(void **state)
{
	const char key[] = "rendezvous/round/7";
	char copy[sizeof(key)];
	uint64_t h = htab_hash(key, sizeof(key) - 1, &seed1);
	size_t i;

	(void)state;
	assert_true(htab_hash(key, sizeof(key) - 1, &seed1) == h);
	assert_true(htab_hash(key, sizeof(key) - 1, &seed2) != h);
	assert_true(htab_hash(key, sizeof(key) - 2, &seed1) != h);
	assert_true(htab_hash("", 0, &seed1) == htab_hash(NULL, 0, &seed1));
	for (i = 0; i < sizeof(key) - 1; i++) {
		memcpy(copy, key, sizeof(key));
		copy[i] ^= 1;
		assert_true(htab_hash(copy, sizeof(key) - 1, &seed1) != h);
	}
}

/* The reference vectors of SipHash-2-4 (key 00..0f, messages 00..(n-1)), from the paper's
 * appendix and the reference implementation's vectors.h. */
static void htab_hash_is_siphash_2_4(void **state)
{
	const struct htab_seed k = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
	uint8_t msg[64];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(msg); i++) {
		msg[i] = (uint8_t)i;
	}
	assert_true(htab_hash(msg, 0, &k) == 0x726fdb47dd0e0e31ull);
	assert_true(htab_hash(msg, 1, &k) == 0x74f839c593dc67fdull);
	assert_true(htab_hash(msg, 8, &k) == 0x93f5f5799a932462ull);
	assert_true(htab_hash(msg, 15, &k) == 0xa129ca6149be45e5ull);
	assert_true(htab_hash(msg, 63, &k) == 0x958a324ceb064572ull);
	/* NULL is the all-zero key */
	assert_true(htab_hash(msg, 15, NULL) == htab_hash(msg, 15, &(struct htab_seed){0, 0}));
}

/* Two random seeds differ, and so do the hashes of one key under them. */
static void htab_seed_random_gives_secret_distinct_seeds(void **state)
{
	struct htab_seed a, b;

	(void)state;
	assert_int_equal(htab_seed_random(&a), 0);
	assert_int_equal(htab_seed_random(&b), 0);
	assert_false(a.k0 == b.k0 && a.k1 == b.k1);
	assert_true(htab_hash("key", 3, &a) != htab_hash("key", 3, &b));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(htab_init_rounds_buckets_up_to_a_power_of_two),
		cmocka_unit_test(htab_inserted_node_is_found_and_removed),
		cmocka_unit_test(htab_grows_past_many_nodes_and_finds_them_all),
		cmocka_unit_test(htab_for_each_safe_visits_each_node_once_and_allows_removal),
		cmocka_unit_test(htab_colliding_hashes_stay_distinct),
		cmocka_unit_test(htab_hash_depends_on_every_byte_and_the_seed),
		cmocka_unit_test(htab_hash_is_siphash_2_4),
		cmocka_unit_test(htab_seed_random_gives_secret_distinct_seeds),
	};

	return test_run_group("unit-htab", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
