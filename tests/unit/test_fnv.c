/* SPDX-License-Identifier: MIT */
/* tests/unit/test_fnv.c: src/common/fnv.h: the published FNV-1a vectors, and the DDP plan hash
 * (worker_api/ddp_plan.c) pinned, since ranks on different hosts and versions compare it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "src/common/byteorder.h"
#include "src/common/fnv.h"
#include "worker_api/ddp_plan.h"

static void fnv1a64_matches_published_vectors(void **state)
{
	(void)state;
	assert_true(FNV1A64_INIT == 14695981039346656037ull);
	assert_true(FNV1A64_PRIME == 1099511628211ull);
	assert_true(fnv1a64(FNV1A64_INIT, "", 0) == 0xcbf29ce484222325ull);
	assert_true(fnv1a64(FNV1A64_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
	assert_true(fnv1a64(FNV1A64_INIT, "foobar", 6) == 0x85944171f73967e8ull);
	assert_true(fnv1a64_str(FNV1A64_INIT, "foobar") == 0x85944171f73967e8ull);
	assert_true(fnv1a64_str(FNV1A64_INIT, "") == FNV1A64_INIT);
}

static void fnv1a64_chains_and_u64_is_little_endian(void **state)
{
	uint8_t le[8];
	uint64_t v = 0x0102030405060708ull;

	(void)state;
	assert_true(fnv1a64(fnv1a64(FNV1A64_INIT, "foo", 3), "bar", 3) ==
		    fnv1a64(FNV1A64_INIT, "foobar", 6));
	put_le64(le, v);
	assert_true(fnv1a64_u64(FNV1A64_INIT, v) == fnv1a64(FNV1A64_INIT, le, sizeof(le)));
	assert_true(fnv1a64_u64(FNV1A64_INIT, 0) != FNV1A64_INIT);
}

/* Three tensors of 1000, 10 and 300000 floats, first bucket 4 KiB, cap 1 MiB: the value the
 * hand-written FNV in ddp_plan.c gave before it used this header. */
static void ddp_plan_hash_is_pinned(void **state)
{
	struct ddp_slot t[3] = {{.n = 1000}, {.n = 10}, {.n = 300000}};
	struct ddp_bucket *b = NULL;
	double w[DDP_PLAN_WORDS];
	uint64_t h;
	int nb = 0;

	(void)state;
	assert_int_equal(ddp_plan_buckets(t, sizeof(t[0]), 3, 4096, 1 << 20, &b, &nb), 0);
	ddp_plan_summary(t, sizeof(t[0]), 3, b, nb, 4096, 1 << 20, w);
	h = (uint64_t)w[0] << 32 | (uint64_t)w[1];
	assert_int_equal(nb, 2);
	assert_true(h == 0x9b9d46d08e9e443eull);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fnv1a64_matches_published_vectors),
		cmocka_unit_test(fnv1a64_chains_and_u64_is_little_endian),
		cmocka_unit_test(ddp_plan_hash_is_pinned),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
