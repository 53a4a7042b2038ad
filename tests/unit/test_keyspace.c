/* SPDX-License-Identifier: MIT */
/* tests/unit/test_keyspace.c: the store server's keyspace alone: no daemon, no sockets, a
 * clock the test moves by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/keyspace.h"
#include "src/common/byteorder.h"
#include "tests/lib/cmocka_skip.h"

/* What the wait callback saw. */
struct done {
	int calls;
	int rc;
	uint32_t index;
	struct ks_wait *w;
};

static void on_done(struct keyspace *ks, struct ks_wait *w, int rc, uint32_t index)
{
	struct done *d = ks->data;

	d->calls++;
	d->rc = rc;
	d->index = index;
	d->w = w;
}

static struct ks_str S(const char *s) {
	return (struct ks_str){(const uint8_t *)s, (uint32_t)strlen(s)};
}

/* A list in a codec's encoding of the test's own: u32 big-endian length, bytes. */
struct list {
	uint8_t b[1024];
	size_t n;
	uint32_t count;
};

static void add(struct list *l, const char *s)
{
	put_be32(l->b + l->n, (uint32_t)strlen(s));
	memcpy(l->b + l->n + 4, s, strlen(s));
	l->n += 4 + strlen(s);
	l->count++;
}

static struct ks_str next(const uint8_t **cur)
{
	struct ks_str s = {*cur + 4, get_be32(*cur)};

	*cur += 4 + s.len;
	return s;
}

static struct ks_list as_list(const struct list *l, uint32_t n, const char *prefix)
{
	return (struct ks_list){n, l->b, next, (const uint8_t *)prefix,
				prefix != NULL ? (uint32_t)strlen(prefix) : 0};
}

static int setup(void **state)
{
	struct keyspace *ks = calloc(1, sizeof(*ks));
	struct done *d = calloc(1, sizeof(*d));

	assert_non_null(ks);
	assert_non_null(d);
	assert_int_equal(ks_init(ks, 64, on_done, d), 0);
	*state = ks;
	return 0;
}

static int teardown(void **state)
{
	struct keyspace *ks = *state;

	free(ks->data);
	ks_finish(ks);
	free(ks);
	return 0;
}

static void assert_value(struct keyspace *ks, const char *key, const void *want, uint32_t len)
{
	const struct ks_entry *e = ks_get(ks, S(key));

	assert_non_null(e);
	assert_int_equal(e->vlen, len);
	if (len > 0) {
		assert_memory_equal(e->val, want, len);
	}
}

static void keyspace_set_get_delete_keep_bytes_exact(void **state)
{
	struct keyspace *ks = *state;
	const uint8_t bin[] = {0, 1, 2, 0xff, 0};

	assert_int_equal(ks_set(ks, S("a"), (struct ks_str){bin, sizeof(bin)}, KS_NO_DEADLINE), 0);
	assert_int_equal(ks_set(ks, S("empty"), S(""), KS_NO_DEADLINE), 0);
	assert_value(ks, "a", bin, sizeof(bin));
	assert_value(ks, "empty", "", 0);
	assert_null(ks_get(ks, S("b")));
	assert_int_equal(ks_num_keys(ks, NULL, 0), 2);
	assert_true(ks_delete(ks, S("a")));
	assert_false(ks_delete(ks, S("a")));
	assert_null(ks_get(ks, S("a")));
	assert_int_equal(ks_num_keys(ks, NULL, 0), 1);
	/* A shorter value after a longer one: the length is the new one. */
	assert_int_equal(ks_set(ks, S("empty"), S("longer value"), KS_NO_DEADLINE), 0);
	assert_int_equal(ks_set(ks, S("empty"), S("x"), KS_NO_DEADLINE), 0);
	assert_value(ks, "empty", "x", 1);
}

static void keyspace_add_counts_and_refuses_what_is_not_a_number(void **state)
{
	struct keyspace *ks = *state;
	int64_t v = 0;

	assert_int_equal(ks_add(ks, S("n"), 5, &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(ks_add(ks, S("n"), -7, &v), 0);
	assert_int_equal(v, -2);
	assert_value(ks, "n", "-2", 2);
	assert_int_equal(ks_set(ks, S("s"), S("abc"), KS_NO_DEADLINE), 0);
	assert_int_equal(ks_add(ks, S("s"), 1, &v), -EINVAL);
	assert_value(ks, "s", "abc", 3);
	assert_int_equal(ks_set(ks, S("big"), S("9223372036854775807"), KS_NO_DEADLINE), 0);
	assert_int_equal(ks_add(ks, S("big"), 1, &v), -EOVERFLOW);
	assert_int_equal(ks_add(ks, S("fresh"), INT64_MIN, &v), 0);
	assert_int_equal(ks_add(ks, S("fresh"), -1, &v), -EOVERFLOW);
	assert_int_equal(ks_num_keys(ks, NULL, 0), 4);
}

static void keyspace_cas_matches_absent_only_on_empty(void **state)
{
	struct keyspace *ks = *state;
	bool m;

	assert_int_equal(ks_cas(ks, S("k"), S("x"), S("v1"), &m), 0);
	assert_false(m);
	assert_null(ks_get(ks, S("k")));
	assert_int_equal(ks_cas(ks, S("k"), S(""), S("v1"), &m), 0);
	assert_true(m);
	assert_value(ks, "k", "v1", 2);
	assert_int_equal(ks_cas(ks, S("k"), S("v0"), S("v2"), &m), 0);
	assert_false(m);
	assert_value(ks, "k", "v1", 2);
	assert_int_equal(ks_cas(ks, S("k"), S("v1"), S("v2"), &m), 0);
	assert_true(m);
	assert_value(ks, "k", "v2", 2);
}

static void keyspace_append_grows_and_stops_at_the_value_limit(void **state)
{
	struct keyspace *ks = *state;
	char big[60];
	uint64_t n;

	assert_int_equal(ks_append(ks, S("a"), NULL, 0, S("one"), &n), 0);
	assert_int_equal(ks_append(ks, S("a"), (const uint8_t *)"+", 1, S("two"), &n), 0);
	assert_int_equal(n, 7);
	assert_value(ks, "a", "one+two", 7);
	memset(big, 'x', sizeof(big));
	assert_int_equal(ks_append(ks, S("a"), NULL, 0, (struct ks_str){(uint8_t *)big, 60}, &n),
			 -EMSGSIZE); /* the keyspace's limit is 64 */
	assert_int_equal(n, 67);
	assert_value(ks, "a", "one+two", 7);
	/* A refused append to an absent key leaves no entry behind. */
	assert_int_equal(
		ks_append(ks, S("b"), (uint8_t *)big, 10, (struct ks_str){(uint8_t *)big, 60}, &n),
		-EMSGSIZE);
	assert_null(ks_get(ks, S("b")));
	assert_int_equal(ks->keys.count, 1);
}

static void keyspace_lists_take_their_prefix(void **state)
{
	struct keyspace *ks = *state;
	const uint8_t *cur;
	struct list l = {0};
	struct ks_list kl;

	add(&l, "a");
	add(&l, "1");
	add(&l, "b");
	add(&l, "2");
	kl = as_list(&l, 2, "run/tcpstore/");
	assert_int_equal(ks_multi_set(ks, &kl), 0);
	assert_value(ks, "run/tcpstore/a", "1", 1);
	assert_value(ks, "run/tcpstore/b", "2", 1);
	assert_null(ks_get(ks, S("a")));
	assert_int_equal(ks_set(ks, S("other"), S("o"), KS_NO_DEADLINE), 0);
	assert_int_equal(ks_num_keys(ks, (const uint8_t *)"run/tcpstore/", 13), 2);
	assert_int_equal(ks_num_keys(ks, NULL, 0), 3);

	memset(&l, 0, sizeof(l));
	add(&l, "a");
	add(&l, "b");
	kl = as_list(&l, 2, "run/tcpstore/");
	assert_true(ks_check(ks, &kl));
	cur = l.b;
	assert_memory_equal(ks_get_next(ks, &kl, &cur)->val, "1", 1);
	assert_memory_equal(ks_get_next(ks, &kl, &cur)->val, "2", 1);
	kl = as_list(&l, 2, NULL);
	assert_false(ks_check(ks, &kl));
}

static void keyspace_ttl_expires_at_its_deadline(void **state)
{
	struct keyspace *ks = *state;

	assert_int_equal(ks_next_deadline(ks), KS_NO_DEADLINE);
	assert_int_equal(ks_set(ks, S("t"), S("v"), 100), 0);
	assert_int_equal(ks_set(ks, S("u"), S("v"), 50), 0);
	assert_int_equal(ks_next_deadline(ks), 50);
	/* A plain SET clears a TTL. */
	assert_int_equal(ks_set(ks, S("u"), S("w"), KS_NO_DEADLINE), 0);
	assert_int_equal(ks_next_deadline(ks), 100);
	ks_expire(ks, 99);
	assert_non_null(ks_get(ks, S("t")));
	ks_expire(ks, 100);
	assert_null(ks_get(ks, S("t")));
	assert_non_null(ks_get(ks, S("u")));
	assert_int_equal(ks_next_deadline(ks), KS_NO_DEADLINE);
	assert_int_equal(ks_num_keys(ks, NULL, 0), 1);
}

static void keyspace_wait_all_ends_when_the_last_key_is_written(void **state)
{
	struct keyspace *ks = *state;
	struct done *d = ks->data;
	struct list l = {0};
	struct ks_list kl;
	struct ks_wait *w;
	uint32_t index;

	add(&l, "x");
	add(&l, "y");
	kl = as_list(&l, 2, NULL);
	assert_false(ks_wait_ready(ks, &kl, KS_WAIT_ALL, &index));
	assert_int_equal(ks_wait_start(ks, &kl, KS_WAIT_ALL, KS_NO_DEADLINE, &w), 0);
	assert_int_equal(ks_set(ks, S("y"), S("1"), KS_NO_DEADLINE), 0);
	assert_int_equal(d->calls, 0);
	assert_int_equal(ks_add(ks, S("x"), 1, &(int64_t){0}), 0);
	assert_int_equal(d->calls, 1);
	assert_int_equal(d->rc, 0);
	assert_ptr_equal(d->w, w);
	assert_true(ks_wait_ready(ks, &kl, KS_WAIT_ALL, &index));
}

static void keyspace_wait_any_says_which_key(void **state)
{
	struct keyspace *ks = *state;
	struct done *d = ks->data;
	struct list l = {0};
	struct ks_list kl;
	struct ks_wait *w;
	uint32_t index;

	add(&l, "p");
	add(&l, "q");
	add(&l, "r");
	kl = as_list(&l, 3, "pre/");
	assert_int_equal(ks_wait_start(ks, &kl, KS_WAIT_ANY, KS_NO_DEADLINE, &w), 0);
	assert_int_equal(ks_set(ks, S("r"), S("1"), KS_NO_DEADLINE), 0); /* not its key */
	assert_int_equal(d->calls, 0);
	assert_int_equal(ks_set(ks, S("pre/r"), S("1"), KS_NO_DEADLINE), 0);
	assert_int_equal(d->calls, 1);
	assert_int_equal(d->index, 2);
	/* The other keys' placeholder entries went with the wait. */
	assert_int_equal(ks->keys.count, 2);
	assert_true(ks_wait_ready(ks, &kl, KS_WAIT_ANY, &index));
	assert_int_equal(index, 2);
}

static void keyspace_wait_times_out_and_cancel_leaves_nothing(void **state)
{
	struct keyspace *ks = *state;
	struct done *d = ks->data;
	struct list l = {0};
	struct ks_list kl;
	struct ks_wait *w1, *w2;

	add(&l, "never");
	kl = as_list(&l, 1, NULL);
	assert_int_equal(ks_wait_start(ks, &kl, KS_WAIT_ALL, 30, &w1), 0);
	assert_int_equal(ks_wait_start(ks, &kl, KS_WAIT_ALL, 20, &w2), 0);
	assert_int_equal(ks_next_deadline(ks), 20);
	ks_wait_cancel(ks, w2);
	assert_int_equal(ks_next_deadline(ks), 30);
	ks_expire(ks, 29);
	assert_int_equal(d->calls, 0);
	ks_expire(ks, 30);
	assert_int_equal(d->calls, 1);
	assert_int_equal(d->rc, -ETIMEDOUT);
	assert_ptr_equal(d->w, w1);
	assert_int_equal(ks->keys.count, 0); /* no entry kept for a key nobody waits on */
	assert_int_equal(ks_num_keys(ks, NULL, 0), 0);
}

/* A wait on a key listed twice, and many waits on one key: each answered exactly once. */
static void keyspace_many_waits_on_one_key_are_each_answered_once(void **state)
{
	struct keyspace *ks = *state;
	struct done *d = ks->data;
	struct list l = {0};
	struct ks_list kl;
	struct ks_wait *w;
	int i;

	add(&l, "k");
	add(&l, "k");
	kl = as_list(&l, 2, NULL);
	for (i = 0; i < 100; i++) {
		assert_int_equal(ks_wait_start(ks, &kl, i % 2 ? KS_WAIT_ANY : KS_WAIT_ALL,
					       KS_NO_DEADLINE, &w),
				 0);
	}
	assert_int_equal(ks_set(ks, S("k"), S("v"), KS_NO_DEADLINE), 0);
	assert_int_equal(d->calls, 100);
	assert_int_equal(ks_set(ks, S("k"), S("v"), KS_NO_DEADLINE), 0);
	assert_int_equal(d->calls, 100);
}

static void keyspace_queue_pushes_and_pops_in_order(void **state)
{
	struct keyspace *ks = *state;
	uint8_t *item;
	uint32_t len;
	uint64_t n;

	assert_int_equal(ks_queue_len(ks_get(ks, S("q"))), 0);
	assert_int_equal(ks_queue_pop(ks, S("q"), &item, &len), -ENOENT);
	assert_int_equal(ks_queue_push(ks, S("q"), S("one"), &n), 0);
	assert_int_equal(ks_queue_push(ks, S("q"), S(""), &n), 0);
	assert_int_equal(ks_queue_push(ks, S("q"), S("three"), &n), 0);
	assert_int_equal(ks_queue_len(ks_get(ks, S("q"))), 3);
	assert_int_equal(ks_queue_pop(ks, S("q"), &item, &len), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(item, "one", 3);
	free(item);
	assert_int_equal(ks_queue_pop(ks, S("q"), &item, &len), 0);
	assert_int_equal(len, 0);
	free(item);
	assert_int_equal(ks_queue_pop(ks, S("q"), &item, &len), 0);
	assert_memory_equal(item, "three", 5);
	free(item);
	assert_null(ks_get(ks, S("q"))); /* emptied: deleted */
	assert_int_equal(ks_set(ks, S("plain"), S("ab"), KS_NO_DEADLINE), 0);
	assert_int_equal(ks_queue_len(ks_get(ks, S("plain"))), -1);
	assert_int_equal(ks_queue_pop(ks, S("plain"), &item, &len), -EINVAL);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(keyspace_set_get_delete_keep_bytes_exact),
		T(keyspace_add_counts_and_refuses_what_is_not_a_number),
		T(keyspace_cas_matches_absent_only_on_empty),
		T(keyspace_append_grows_and_stops_at_the_value_limit),
		T(keyspace_lists_take_their_prefix),
		T(keyspace_ttl_expires_at_its_deadline),
		T(keyspace_wait_all_ends_when_the_last_key_is_written),
		T(keyspace_wait_any_says_which_key),
		T(keyspace_wait_times_out_and_cancel_leaves_nothing),
		T(keyspace_many_waits_on_one_key_are_each_answered_once),
		T(keyspace_queue_pushes_and_pops_in_order),
#undef T
	};

	return test_run_group("unit-keyspace", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
