/* SPDX-License-Identifier: MIT */
/* tests/unit/test_byteorder.c: src/common/byteorder.h: exact bytes and round trips, both orders. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "src/common/byteorder.h"
#include "tests/lib/cmocka_skip.h"

static void byteorder_le_writes_least_significant_byte_first(void **state)
{
	uint8_t b[8];

	(void)state;
	put_le16(b, 0x0102);
	assert_memory_equal(b, "\x02\x01", 2);
	put_le32(b, 0x01020304u);
	assert_memory_equal(b, "\x04\x03\x02\x01", 4);
	put_le64(b, 0x0102030405060708ull);
	assert_memory_equal(b, "\x08\x07\x06\x05\x04\x03\x02\x01", 8);
}

static void byteorder_be_writes_most_significant_byte_first(void **state)
{
	uint8_t b[8];

	(void)state;
	put_be16(b, 0x0102);
	assert_memory_equal(b, "\x01\x02", 2);
	put_be32(b, 0x01020304u);
	assert_memory_equal(b, "\x01\x02\x03\x04", 4);
	put_be64(b, 0x0102030405060708ull);
	assert_memory_equal(b, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
}

static void byteorder_reads_exact_bytes(void **state)
{
	static const uint8_t b[8] = {0x80, 0x01, 0xfe, 0x7f, 0x00, 0xff, 0x10, 0xc3};

	(void)state;
	assert_int_equal(get_le16(b), 0x0180);
	assert_int_equal(get_be16(b), 0x8001);
	assert_int_equal(get_le32(b), 0x7ffe0180u);
	assert_int_equal(get_be32(b), 0x8001fe7fu);
	assert_true(get_le64(b) == 0xc310ff007ffe0180ull);
	assert_true(get_be64(b) == 0x8001fe7f00ff10c3ull);
}

/* High bits set in every byte: no sign extension through int promotion. */
static void byteorder_keeps_high_bits(void **state)
{
	uint8_t b[8];

	(void)state;
	put_le16(b, 0xffff);
	assert_int_equal(get_le16(b), 0xffff);
	put_be32(b, 0xffffffffu);
	assert_int_equal(get_be32(b), 0xffffffffu);
	put_le64(b, UINT64_MAX);
	assert_true(get_le64(b) == UINT64_MAX);
	put_be64(b, 0x8000000000000000ull);
	assert_true(get_be64(b) == 0x8000000000000000ull);
	assert_int_equal(b[0], 0x80);
}

static void byteorder_round_trips_at_unaligned_offsets(void **state)
{
	static const uint64_t vals[] = {0, 1, 0x7f, 0x80, 0xff, 0x100, 0xdeadbeef,
					0x0123456789abcdefull, 0x8000000000000000ull, UINT64_MAX};
	uint8_t buf[16];
	size_t i, off;

	(void)state;
	for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		for (off = 0; off < 8; off++) {
			memset(buf, 0xaa, sizeof(buf));
			put_le16(buf + off, (uint16_t)vals[i]);
			assert_int_equal(get_le16(buf + off), (uint16_t)vals[i]);
			put_be16(buf + off, (uint16_t)vals[i]);
			assert_int_equal(get_be16(buf + off), (uint16_t)vals[i]);
			put_le32(buf + off, (uint32_t)vals[i]);
			assert_int_equal(get_le32(buf + off), (uint32_t)vals[i]);
			put_be32(buf + off, (uint32_t)vals[i]);
			assert_int_equal(get_be32(buf + off), (uint32_t)vals[i]);
			put_le64(buf + off, vals[i]);
			assert_true(get_le64(buf + off) == vals[i]);
			put_be64(buf + off, vals[i]);
			assert_true(get_be64(buf + off) == vals[i]);
			/* Nothing outside the 8 bytes written. */
			if (off > 0) {
				assert_int_equal(buf[off - 1], 0xaa);
			}
			assert_int_equal(buf[off + 8], 0xaa);
		}
	}
}

/* One order's bytes are the other's reversed. */
static void byteorder_le_is_be_reversed(void **state)
{
	uint8_t le[8], be[8];
	size_t i;

	(void)state;
	put_le64(le, 0x1122334455667788ull);
	put_be64(be, 0x1122334455667788ull);
	for (i = 0; i < 8; i++) {
		assert_int_equal(le[i], be[7 - i]);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(byteorder_le_writes_least_significant_byte_first),
		cmocka_unit_test(byteorder_be_writes_most_significant_byte_first),
		cmocka_unit_test(byteorder_reads_exact_bytes),
		cmocka_unit_test(byteorder_keeps_high_bits),
		cmocka_unit_test(byteorder_round_trips_at_unaligned_offsets),
		cmocka_unit_test(byteorder_le_is_be_reversed),
	};

	return test_run_group("unit-byteorder", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
