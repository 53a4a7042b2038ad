/* SPDX-License-Identifier: MIT */
/* tests/conformance/ops.c: each store operation's semantics, TTLs, prefixes and limits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "tests/conformance/conformance.h"

void set_get_roundtrip(void **state)
{
	struct crun_store *st = open_fresh();
	const char bin[] = {'a', 0, 'b', 0, (char)0xff};
	void *v;
	size_t len;

	(void)state;
	assert_int_equal(sets(st, "k", "hello"), 0);
	want_value(st, "k", "hello");
	assert_int_equal(sets(st, "k", "world!"), 0);
	want_value(st, "k", "world!");
	assert_int_equal(crun_store_set(st, "empty", NULL, 0), 0);
	want_value(st, "empty", "");
	assert_int_equal(crun_store_set(st, "bin", bin, sizeof(bin)), 0);
	assert_int_equal(crun_store_get(st, "bin", &v, &len), 0);
	assert_int_equal(len, sizeof(bin));
	assert_memory_equal(v, bin, sizeof(bin));
	free(v);
	assert_int_equal(crun_store_ping(st), 0);
	crun_store_close(st);
}

void get_missing_is_enoent(void **state)
{
	struct crun_store *st = open_fresh();
	void *v = (void *)1;
	size_t len = 7;

	(void)state;
	assert_int_equal(crun_store_get(st, "nope", &v, &len), -ENOENT);
	assert_null(v);
	crun_store_close(st);
}

void add_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	int64_t r = 0;

	(void)state;
	assert_int_equal(crun_store_add(st, "n", 5, &r), 0);
	assert_int_equal(r, 5);
	assert_int_equal(crun_store_add(st, "n", -7, &r), 0);
	assert_int_equal(r, -2);
	want_value(st, "n", "-2");
	assert_int_equal(sets(st, "s", "12"), 0);
	assert_int_equal(crun_store_add(st, "s", 30, &r), 0);
	assert_int_equal(r, 42);
	assert_int_equal(sets(st, "word", "abc"), 0);
	assert_int_equal(crun_store_add(st, "word", 1, &r), -EINVAL);
	want_value(st, "word", "abc");
	assert_int_equal(sets(st, "big", "9223372036854775807"), 0);
	assert_int_equal(crun_store_add(st, "big", 1, &r), -ERANGE);
	crun_store_close(st);
}

void compare_set_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	void *cur;
	size_t len;

	(void)state;
	/* missing key + non-empty expected: no swap, reply empty, key still missing */
	assert_int_equal(crun_store_compare_set(st, "k", "x", 1, "y", 1, &cur, &len), 0);
	assert_int_equal(len, 0);
	free(cur);
	assert_int_equal(crun_store_get(st, "k", &cur, &len), -ENOENT);
	/* missing key + empty expected: creates */
	assert_int_equal(crun_store_compare_set(st, "k", "", 0, "v1", 2, &cur, &len), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(cur, "v1", 2);
	free(cur);
	/* mismatch: returns the current value, no change */
	assert_int_equal(crun_store_compare_set(st, "k", "zz", 2, "v2", 2, &cur, &len), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(cur, "v1", 2);
	free(cur);
	want_value(st, "k", "v1");
	/* match: swaps; cur may be skipped */
	assert_int_equal(crun_store_compare_set(st, "k", "v1", 2, "v2", 2, NULL, NULL), 0);
	want_value(st, "k", "v2");
	crun_store_close(st);
}

void delete_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	void *v;
	size_t len;

	(void)state;
	assert_int_equal(sets(st, "d", "1"), 0);
	assert_int_equal(crun_store_delete(st, "d"), 0);
	assert_int_equal(crun_store_get(st, "d", &v, &len), -ENOENT);
	assert_int_equal(crun_store_delete(st, "d"), -ENOENT);
	assert_int_equal(crun_store_delete(st, "never"), -ENOENT);
	assert_int_equal(sets(st, "d", "2"), 0);
	want_value(st, "d", "2");
	crun_store_close(st);
}

void check_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"c1", "c2"};
	bool all = true;

	(void)state;
	assert_int_equal(crun_store_check(st, keys, 2, &all), 0);
	assert_false(all);
	assert_int_equal(sets(st, "c1", "1"), 0);
	assert_int_equal(crun_store_check(st, keys, 2, &all), 0);
	assert_false(all);
	assert_int_equal(sets(st, "c2", "1"), 0);
	assert_int_equal(crun_store_check(st, keys, 2, &all), 0);
	assert_true(all);
	crun_store_close(st);
}

void num_keys_counts_every_prefix(void **state)
{
	struct crun_store *st = open_fresh();
	struct crun_store *other;
	int64_t before, after;

	(void)state;
	assert_int_equal(crun_store_clone(st, "other/", &other), 0);
	assert_int_equal(crun_store_num_keys(st, &before), 0);
	assert_int_equal(sets(st, "n1", "1"), 0);
	assert_int_equal(sets(st, "n2", "1"), 0);
	assert_int_equal(sets(other, "n1", "1"), 0);
	assert_int_equal(sets(st, "n1", "again"), 0);
	assert_int_equal(crun_store_num_keys(st, &after), 0);
	assert_int_equal(after - before, 3);
	assert_int_equal(crun_store_delete(st, "n2"), 0);
	assert_int_equal(crun_store_num_keys(other, &after), 0);
	assert_int_equal(after - before, 2);
	crun_store_close(other);
	crun_store_close(st);
}

void append_semantics(void **state)
{
	struct crun_store *st = open_fresh();

	(void)state;
	assert_int_equal(crun_store_append(st, "log", "ab", 2), 0);
	want_value(st, "log", "ab");
	assert_int_equal(crun_store_append(st, "log", "cde", 3), 0);
	assert_int_equal(crun_store_append(st, "log", NULL, 0), 0);
	want_value(st, "log", "abcde");
	crun_store_close(st);
}

void multi_get_with_absent_keys(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"m0", "missing", "m2"};
	void *vals[3];
	size_t lens[3];

	(void)state;
	assert_int_equal(sets(st, "m0", "zero"), 0);
	assert_int_equal(sets(st, "m2", ""), 0);
	assert_int_equal(crun_store_multi_get(st, keys, 3, vals, lens), 0);
	assert_non_null(vals[0]);
	assert_int_equal(lens[0], 4);
	assert_memory_equal(vals[0], "zero", 4);
	assert_null(vals[1]);
	assert_int_equal(lens[1], 0);
	assert_non_null(vals[2]); /* present and empty is not absent */
	assert_int_equal(lens[2], 0);
	free(vals[0]);
	free(vals[2]);
	crun_store_close(st);
}

void multi_set_then_get(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"s0", "s1", "s2"};
	const void *vals[] = {"a", "bb", ""};
	const size_t lens[] = {1, 2, 0};
	bool all;

	(void)state;
	assert_int_equal(sets(st, "s1", "old"), 0);
	assert_int_equal(crun_store_multi_set(st, keys, 3, vals, lens), 0);
	assert_int_equal(crun_store_check(st, keys, 3, &all), 0);
	assert_true(all);
	want_value(st, "s0", "a");
	want_value(st, "s1", "bb");
	want_value(st, "s2", "");
	crun_store_close(st);
}

/* A TTL far in the future (up to INT64_MAX ms) means "never expires", not an overflow. */
void huge_ttl_does_not_overflow(void **state)
{
	struct crun_store *st = open_fresh();

	(void)state;
	assert_int_equal(crun_store_set_ttl(st, "max", "m", 1, INT64_MAX), 0);
	assert_int_equal(crun_store_set_ttl(st, "big", "b", 1, INT64_MAX / 2 + 1), 0);
	want_value(st, "max", "m");
	want_value(st, "big", "b");
	crun_store_close(st);
}

/* Appends cannot grow a value past the value limit (a later compaction could not hold it). */
void append_past_value_limit_is_emsgsize(void **state)
{
	struct crun_store *st = open_fresh();
	size_t n = CRUN_STORE_MAX_VALUE_LEN;
	char *big = malloc(n);
	void *v = NULL;
	size_t len = 0;

	(void)state;
	assert_non_null(big);
	memset(big, 'a', n);
	assert_int_equal(crun_store_append(st, "log", big, n - 1), 0);
	assert_int_equal(crun_store_append(st, "log", "b", 1), 0);
	assert_int_equal(crun_store_append(st, "log", "c", 1), -EMSGSIZE);
	assert_int_equal(crun_store_get(st, "log", &v, &len), 0);
	assert_int_equal(len, n);
	assert_int_equal(((char *)v)[n - 1], 'b');
	free(v);
	free(big);
	crun_store_close(st);
}

void ttl_key_expires(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"t"};
	int64_t end;
	void *v;
	size_t len;
	int rc;

	(void)state;
	assert_int_equal(crun_store_set_ttl(st, "t", "x", 1, 300), 0);
	assert_int_equal(crun_store_set_ttl(st, "keep", "y", 1, 300), 0);
	assert_int_equal(sets(st, "keep", "z"), 0); /* a plain write clears the TTL */
	assert_int_equal(crun_store_set_ttl(st, "neg", "y", 1, -1), -EINVAL);
	want_value(st, "t", "x");
	end = crun_now_ms() + 10000;
	do {
		rc = crun_store_get(st, "t", &v, &len);
		if (rc == 0) {
			free(v);
			usleep(20000); /* polling a condition, bounded by @end */
		}
	} while (rc == 0 && crun_now_ms() < end);
	assert_int_equal(rc, -ENOENT);
	assert_int_equal(crun_store_wait(st, keys, 1, 100), -ETIMEDOUT);
	want_value(st, "keep", "z");
	crun_store_close(st);
}

void prefix_isolation_and_clone(void **state)
{
	char pa[64], pb[64], want[128];
	struct crun_store *a, *b, *sub, *root;
	void *v;
	size_t len;

	(void)state;
	snprintf(pa, sizeof(pa), "iso/%u/%u/a/", (unsigned)getpid(), ++g_seq);
	snprintf(pb, sizeof(pb), "iso/%u/%u/b/", (unsigned)getpid(), g_seq);
	a = open_with(g_endpoint, pa, 30000);
	b = open_with(g_endpoint, pb, 30000);
	root = open_with(g_endpoint, NULL, 30000);
	assert_string_equal(crun_store_prefix(a), pa);
	assert_string_equal(crun_store_prefix(root), "");
	assert_int_equal(sets(a, "k", "from-a"), 0);
	assert_int_equal(sets(b, "k", "from-b"), 0);
	want_value(a, "k", "from-a");
	want_value(b, "k", "from-b");
	assert_int_equal(crun_store_delete(b, "k"), 0);
	want_value(a, "k", "from-a");
	assert_int_equal(crun_store_get(b, "k", &v, &len), -ENOENT);

	assert_int_equal(crun_store_clone(a, "sub/", &sub), 0);
	snprintf(want, sizeof(want), "%ssub/", pa);
	assert_string_equal(crun_store_prefix(sub), want);
	assert_int_equal(sets(sub, "deep", "1"), 0);
	want_value(a, "sub/deep", "1");
	snprintf(want, sizeof(want), "%ssub/deep", pa);
	want_value(root, want, "1");
	crun_store_close(sub);
	crun_store_close(root);
	crun_store_close(b);
	crun_store_close(a);
}

void limits_are_emsgsize(void **state)
{
	struct crun_store *st = open_fresh();
	struct crun_store *root = open_with(g_endpoint, NULL, 30000);
	size_t plen = strlen(crun_store_prefix(st));
	char *key = malloc(CRUN_STORE_MAX_KEY_LEN + 2);
	const char **keys = calloc(CRUN_STORE_MAX_KEYS + 1, sizeof(*keys));
	void **vals = calloc(CRUN_STORE_MAX_KEYS + 1, sizeof(*vals));
	size_t *lens = calloc(CRUN_STORE_MAX_KEYS + 1, sizeof(*lens));
	bool all;
	size_t i;

	(void)state;
	assert_non_null(key);
	assert_non_null(keys);
	/* A key of exactly the limit works; prefix + key one over it does not. */
	memset(key, 'k', CRUN_STORE_MAX_KEY_LEN);
	key[CRUN_STORE_MAX_KEY_LEN] = '\0';
	assert_int_equal(sets(root, key, "ok"), 0);
	want_value(root, key, "ok");
	assert_int_equal(crun_store_delete(root, key), 0);
	key[CRUN_STORE_MAX_KEY_LEN - plen + 1] = '\0';
	assert_int_equal(sets(st, key, "x"), -EMSGSIZE);
	assert_int_equal(crun_store_add(st, key, 1, NULL), -EMSGSIZE);
	assert_int_equal(crun_store_get(st, key, &vals[0], &lens[0]), -EMSGSIZE);
	/* A value over the limit: refused before anything is sent (no buffer needed). */
	assert_int_equal(crun_store_set(st, "v", key, (size_t)CRUN_STORE_MAX_VALUE_LEN + 1),
			 -EMSGSIZE);
	assert_int_equal(crun_store_append(st, "v", key, (size_t)CRUN_STORE_MAX_VALUE_LEN + 1),
			 -EMSGSIZE);
	/* Too many keys in one request. */
	for (i = 0; i <= CRUN_STORE_MAX_KEYS; i++) {
		keys[i] = "same";
	}
	assert_int_equal(crun_store_wait(st, keys, CRUN_STORE_MAX_KEYS + 1, 10), -EMSGSIZE);
	assert_int_equal(crun_store_check(st, keys, CRUN_STORE_MAX_KEYS + 1, &all), -EMSGSIZE);
	assert_int_equal(crun_store_multi_get(st, keys, CRUN_STORE_MAX_KEYS + 1, vals, lens),
			 -EMSGSIZE);
	assert_int_equal(crun_store_multi_set(st, keys, CRUN_STORE_MAX_KEYS + 1,
					      (const void *const *)vals, lens),
			 -EMSGSIZE);
	/* The handle still works after refusals. */
	assert_int_equal(crun_store_check(st, keys, CRUN_STORE_MAX_KEYS, &all), 0);
	assert_false(all);
	assert_int_equal(crun_store_ping(st), 0);
	free(lens);
	free(vals);
	free(keys);
	free(key);
	crun_store_close(root);
	crun_store_close(st);
}
