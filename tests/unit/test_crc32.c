/* SPDX-License-Identifier: MIT */
/* tests/unit/test_crc32.c: src/common/crc32: known vectors, empty input, incremental = one-shot. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "src/common/crc32.h"
#include "tests/lib/cmocka_skip.h"

static const char fox[] = "The quick brown fox jumps over the lazy dog";

static void *crc_check_thread(void *arg)
{
	(void)arg;
	return (void *)(uintptr_t)(crc32_update(0, "123456789", 9) == 0xcbf43926u);
}

/* First in the list: the table is built once, whichever thread gets there first. */
static void crc32_first_use_from_many_threads_agrees(void **state)
{
	pthread_t t[8];
	void *ok;
	size_t i;

	(void)state;
	for (i = 0; i < 8; i++) {
		assert_int_equal(pthread_create(&t[i], NULL, crc_check_thread, NULL), 0);
	}
	for (i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(t[i], &ok), 0);
		assert_true(ok != NULL);
	}
}

static void crc32_matches_known_vectors(void **state)
{
	static const uint8_t zeros[32] = {0}, ones[4] = {0xff, 0xff, 0xff, 0xff};

	(void)state;
	assert_int_equal(crc32_update(0, "123456789", 9), 0xcbf43926u);
	assert_int_equal(crc32_update(0, "a", 1), 0xe8b7be43u);
	assert_int_equal(crc32_update(0, "abc", 3), 0x352441c2u);
	assert_int_equal(crc32_update(0, fox, strlen(fox)), 0x414fa339u);
	assert_int_equal(crc32_update(0, zeros, sizeof(zeros)), 0x190a55adu);
	assert_int_equal(crc32_update(0, ones, sizeof(ones)), 0xffffffffu);
}

static void crc32_of_nothing_is_the_start_value(void **state)
{
	(void)state;
	assert_int_equal(crc32_update(0, "", 0), 0);
	assert_int_equal(crc32_update(0, NULL, 0), 0);
	/* Nothing more leaves a running CRC as it was. */
	assert_int_equal(crc32_update(0xcbf43926u, "", 0), 0xcbf43926u);
}

static void crc32_incremental_equals_one_shot_at_every_split(void **state)
{
	size_t len = strlen(fox), cut, cut2;
	uint32_t whole = crc32_update(0, fox, len), c;

	(void)state;
	for (cut = 0; cut <= len; cut++) {
		c = crc32_update(crc32_update(0, fox, cut), fox + cut, len - cut);
		assert_int_equal(c, whole);
	}
	/* Three pieces, and byte by byte. */
	for (cut = 0; cut <= len; cut += 5) {
		for (cut2 = cut; cut2 <= len; cut2 += 7) {
			c = crc32_update(0, fox, cut);
			c = crc32_update(c, fox + cut, cut2 - cut);
			c = crc32_update(c, fox + cut2, len - cut2);
			assert_int_equal(c, whole);
		}
	}
	c = 0;
	for (cut = 0; cut < len; cut++) {
		c = crc32_update(c, fox + cut, 1);
	}
	assert_int_equal(c, whole);
}

static void crc32_detects_a_flipped_bit(void **state)
{
	char buf[sizeof(fox)];
	uint32_t whole = crc32_update(0, fox, sizeof(fox) - 1);
	size_t i;
	int b;

	(void)state;
	for (i = 0; i < sizeof(fox) - 1; i++) {
		for (b = 0; b < 8; b++) {
			memcpy(buf, fox, sizeof(fox));
			buf[i] ^= (char)(1 << b);
			assert_int_not_equal(crc32_update(0, buf, sizeof(fox) - 1), whole);
		}
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(crc32_first_use_from_many_threads_agrees),
		cmocka_unit_test(crc32_matches_known_vectors),
		cmocka_unit_test(crc32_of_nothing_is_the_start_value),
		cmocka_unit_test(crc32_incremental_equals_one_shot_at_every_split),
		cmocka_unit_test(crc32_detects_a_flipped_bit),
	};

	return test_run_group("unit-crc32", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
