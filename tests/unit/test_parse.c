/* SPDX-License-Identifier: MIT */
/* tests/unit/test_parse.c: src/common/parse: every accepted and refused form, at every bound. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "src/common/parse.h"
#include "tests/lib/cmocka_skip.h"

/* Not integers, for any parser: -EINVAL and the output untouched. */
static const char *const malformed[] = {
	"",	"+",	"-",	" 1",	"1 ",	"\t1",	"1\n",	"1x",	 "x1",	   "0x10",
	"1.0",	"1e3",	"--1",	"+-1",	"-+1",	"++1",	"1-",	"1,000", "1_000",  "\xd9\xa1",
	"one",	"- 1",	"+ 1",	"0b1",	"inf",	"nan",	"1\v",	 "\x01" "1",
};

static void parse_int_accepts_signs_and_leading_zeros(void **state)
{
	static const struct {
		const char *s;
		int v;
	} ok[] = {
		{"0", 0},  {"-0", 0},	{"+0", 0},   {"7", 7},	   {"+7", 7},
		{"-7", -7}, {"007", 7}, {"-007", -7}, {"+000", 0}, {"1234567", 1234567},
	};
	size_t i;
	int v;

	(void)state;
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 12345;
		assert_int_equal(parse_int(ok[i].s, INT_MIN, INT_MAX, &v), 0);
		assert_int_equal(v, ok[i].v);
	}
}

static void parse_int_refuses_malformed_text_and_leaves_out_alone(void **state)
{
	size_t i;
	int v = 12345;

	(void)state;
	for (i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
		if (parse_int(malformed[i], INT_MIN, INT_MAX, &v) != -EINVAL) {
			print_error("accepted \"%s\"\n", malformed[i]);
			fail();
		}
		assert_int_equal(v, 12345);
	}
	assert_int_equal(parse_int(NULL, INT_MIN, INT_MAX, &v), -EINVAL);
	assert_int_equal(v, 12345);
}

static void parse_int_bounds_are_inclusive_and_errors_are_erange(void **state)
{
	int v = 12345;

	(void)state;
	assert_int_equal(parse_int("2147483647", INT_MIN, INT_MAX, &v), 0);
	assert_int_equal(v, INT_MAX);
	assert_int_equal(parse_int("-2147483648", INT_MIN, INT_MAX, &v), 0);
	assert_int_equal(v, INT_MIN);
	v = 12345;
	assert_int_equal(parse_int("2147483648", INT_MIN, INT_MAX, &v), -ERANGE);
	assert_int_equal(parse_int("-2147483649", INT_MIN, INT_MAX, &v), -ERANGE);
	/* Past long long too: strtoll's own overflow is -ERANGE, not a wrapped value. */
	assert_int_equal(parse_int("99999999999999999999999", INT_MIN, INT_MAX, &v), -ERANGE);
	assert_int_equal(parse_int("-99999999999999999999999", INT_MIN, INT_MAX, &v), -ERANGE);
	assert_int_equal(v, 12345);
	/* A caller's own range, e.g. a port or a count. */
	assert_int_equal(parse_int("1", 1, 10, &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(parse_int("10", 1, 10, &v), 0);
	assert_int_equal(v, 10);
	assert_int_equal(parse_int("0", 1, 10, &v), -ERANGE);
	assert_int_equal(parse_int("11", 1, 10, &v), -ERANGE);
	assert_int_equal(parse_int("-1", 1, 10, &v), -ERANGE);
	assert_int_equal(parse_int("65536", 0, 65535, &v), -ERANGE);
	assert_int_equal(v, 10);
	/* Malformed wins over out of range. */
	assert_int_equal(parse_int("99x", 1, 10, &v), -EINVAL);
}

static void parse_long_covers_the_whole_long_range(void **state)
{
	long v = 12345;
	size_t i;

	(void)state;
	assert_int_equal(parse_long("9223372036854775807", LONG_MIN, LONG_MAX, &v), 0);
	assert_true(v == LONG_MAX);
	assert_int_equal(parse_long("-9223372036854775808", LONG_MIN, LONG_MAX, &v), 0);
	assert_true(v == LONG_MIN);
	assert_int_equal(parse_long("+42", LONG_MIN, LONG_MAX, &v), 0);
	assert_int_equal(v, 42);
	v = 12345;
	assert_int_equal(parse_long("9223372036854775808", LONG_MIN, LONG_MAX, &v), -ERANGE);
	assert_int_equal(parse_long("-9223372036854775809", LONG_MIN, LONG_MAX, &v), -ERANGE);
	assert_int_equal(parse_long("18446744073709551616", LONG_MIN, LONG_MAX, &v), -ERANGE);
	assert_int_equal(parse_long("5", 6, 9, &v), -ERANGE);
	assert_int_equal(v, 12345);
	for (i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
		assert_int_equal(parse_long(malformed[i], LONG_MIN, LONG_MAX, &v), -EINVAL);
	}
	assert_int_equal(parse_long(NULL, 0, 1, &v), -EINVAL);
	assert_int_equal(v, 12345);
}

static void parse_i64_covers_the_whole_int64_range(void **state)
{
	int64_t v = 12345;
	size_t i;

	(void)state;
	assert_int_equal(parse_i64("9223372036854775807", &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(parse_i64("-9223372036854775808", &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(parse_i64("-00000000000000000000000000000000001", &v), 0);
	assert_true(v == -1);
	v = 12345;
	assert_int_equal(parse_i64("9223372036854775808", &v), -ERANGE);
	assert_int_equal(parse_i64("-9223372036854775809", &v), -ERANGE);
	assert_int_equal(parse_i64("100000000000000000000", &v), -ERANGE);
	for (i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
		assert_int_equal(parse_i64(malformed[i], &v), -EINVAL);
	}
	assert_int_equal(parse_i64(NULL, &v), -EINVAL);
	assert_true(v == 12345);
}

static void parse_i64_bytes_reads_exactly_n_bytes(void **state)
{
	int64_t v = 12345;

	(void)state;
	/* Not NUL-terminated: only the first @n bytes count. */
	assert_int_equal(parse_i64_bytes("4299", 2, &v), 0);
	assert_true(v == 42);
	assert_int_equal(parse_i64_bytes("-7abc", 2, &v), 0);
	assert_true(v == -7);
	assert_int_equal(parse_i64_bytes("9223372036854775807", 19, &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(parse_i64_bytes("-9223372036854775808", 20, &v), 0);
	assert_true(v == INT64_MIN);
	v = 12345;
	assert_int_equal(parse_i64_bytes("42", 0, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes("-", 1, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes("4 ", 2, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes("   ", 3, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes("9223372036854775808", 19, &v), -ERANGE);
	assert_true(v == 12345);
	/* Leading white space is skipped, as the TCP store and TCPStore always did. */
	assert_int_equal(parse_i64_bytes(" 4", 2, &v), 0);
	assert_int_equal(v, 4);
	assert_int_equal(parse_i64_bytes("\t\n -4", 5, &v), 0);
	assert_int_equal(v, -4);
}

/* The inverse of parse_i64(): what snprintf's "%" PRId64 writes, the extremes included. */
static void parse_i64_format_matches_printf_and_parses_back(void **state)
{
	const int64_t vals[] = {0, 1, -1, 9, 10, -10, 42, 99999, -100000, 1234567890123LL,
				INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1};
	char got[PARSE_I64_LEN], want[32];
	int64_t back;
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		memset(got, 'x', sizeof(got));
		n = parse_i64_format(got, vals[i]);
		snprintf(want, sizeof(want), "%" PRId64, vals[i]);
		assert_string_equal(got, want);
		assert_int_equal(n, strlen(want));
		assert_int_equal(parse_i64_bytes(got, n, &back), 0);
		assert_true(back == vals[i]);
	}
	assert_int_equal(parse_i64_format(got, INT64_MIN), PARSE_I64_LEN - 1);
}

static void parse_i64_bytes_refuses_an_embedded_nul(void **state)
{
	int64_t v = 12345;

	(void)state;
	assert_int_equal(parse_i64_bytes("4\0" "2", 3, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes("42\0", 3, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes("\0" "42", 3, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes("\0", 1, &v), -EINVAL);
	assert_true(v == 12345);
}

/* 20 digits and a sign is the longest int64 without leading zeros; longer values are judged as
 * parse_i64() judges them, up to the 31-byte cap a store value has always had. */
static void parse_i64_bytes_judges_21_bytes_and_more(void **state)
{
	char buf[64];
	int64_t v = 12345;

	(void)state;
	assert_int_equal(parse_i64_bytes("-09223372036854775808", 21, &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(parse_i64_bytes("+09223372036854775807", 21, &v), 0);
	assert_true(v == INT64_MAX);
	v = 12345;
	assert_int_equal(parse_i64_bytes("100000000000000000000", 21, &v), -ERANGE);
	assert_int_equal(parse_i64_bytes("-100000000000000000000", 22, &v), -ERANGE);
	/* 31 bytes, leading zeros: still an int64. */
	memset(buf, '0', 31);
	buf[30] = '5';
	assert_int_equal(parse_i64_bytes(buf, 31, &v), 0);
	assert_true(v == 5);
	v = 12345;
	/* 32 bytes and more: out of range, whatever their value. */
	memset(buf, '0', sizeof(buf));
	buf[31] = '5';
	assert_int_equal(parse_i64_bytes(buf, 32, &v), -ERANGE);
	memset(buf, '9', sizeof(buf));
	assert_int_equal(parse_i64_bytes(buf, sizeof(buf), &v), -ERANGE);
	assert_true(v == 12345);
}

/* Text that is not a number is -EINVAL at any length, as parse_i64() says of it. */
static void parse_i64_bytes_calls_long_text_malformed_not_out_of_range(void **state)
{
	char buf[64];
	int64_t v = 12345;

	(void)state;
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(parse_i64_bytes(buf, 21, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes(buf, 32, &v), -EINVAL);
	assert_int_equal(parse_i64_bytes(buf, sizeof(buf), &v), -EINVAL);
	memset(buf, '1', sizeof(buf));
	buf[40] = ' ';
	assert_int_equal(parse_i64_bytes(buf, sizeof(buf), &v), -EINVAL);
	buf[40] = '\0';
	assert_int_equal(parse_i64_bytes(buf, sizeof(buf), &v), -EINVAL);
	assert_true(v == 12345);
}

static void parse_seconds_ms_rounds_to_milliseconds(void **state)
{
	int64_t ms = -1;

	(void)state;
	assert_int_equal(parse_seconds_ms("2", 10, &ms), 0);
	assert_int_equal(ms, 2000);
	assert_int_equal(parse_seconds_ms("0.25", 10, &ms), 0);
	assert_int_equal(ms, 250);
	assert_int_equal(parse_seconds_ms("0.0004", 10, &ms), 0);
	assert_int_equal(ms, 0);
	assert_int_equal(parse_seconds_ms("0.0006", 10, &ms), 0);
	assert_int_equal(ms, 1);
	assert_int_equal(parse_seconds_ms("1e1", 10, &ms), 0);
	assert_int_equal(ms, 10000);
	assert_int_equal(parse_seconds_ms("0", 10, &ms), 0);
	assert_int_equal(ms, 0);
}

static void parse_seconds_ms_refuses_text_spaces_and_non_finite(void **state)
{
	static const char *const bad[] = {"", " 1", "\t1", "1 ", "1s", "nan", "inf", "-inf",
					  "0x", "abc"};
	int64_t ms = 77;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse_seconds_ms(bad[i], 10, &ms), -EINVAL);
	}
	assert_int_equal(parse_seconds_ms(NULL, 10, &ms), -EINVAL);
	assert_int_equal(ms, 77);
}

static void parse_seconds_ms_bounds_are_inclusive_and_errors_are_erange(void **state)
{
	int64_t ms = 77;

	(void)state;
	assert_int_equal(parse_seconds_ms("10", 10, &ms), 0);
	assert_int_equal(ms, 10000);
	ms = 77;
	assert_int_equal(parse_seconds_ms("10.001", 10, &ms), -ERANGE);
	assert_int_equal(parse_seconds_ms("-1", 10, &ms), -ERANGE);
	assert_int_equal(parse_seconds_ms("1e400", 10, &ms), -ERANGE);
	assert_int_equal(parse_seconds_ms("1e-400", 10, &ms), -ERANGE);
	assert_int_equal(ms, 77);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_int_accepts_signs_and_leading_zeros),
		cmocka_unit_test(parse_int_refuses_malformed_text_and_leaves_out_alone),
		cmocka_unit_test(parse_int_bounds_are_inclusive_and_errors_are_erange),
		cmocka_unit_test(parse_long_covers_the_whole_long_range),
		cmocka_unit_test(parse_i64_covers_the_whole_int64_range),
		cmocka_unit_test(parse_i64_bytes_reads_exactly_n_bytes),
		cmocka_unit_test(parse_i64_bytes_refuses_an_embedded_nul),
		cmocka_unit_test(parse_i64_bytes_judges_21_bytes_and_more),
		cmocka_unit_test(parse_i64_bytes_calls_long_text_malformed_not_out_of_range),
		cmocka_unit_test(parse_i64_format_matches_printf_and_parses_back),
		cmocka_unit_test(parse_seconds_ms_rounds_to_milliseconds),
		cmocka_unit_test(parse_seconds_ms_refuses_text_spaces_and_non_finite),
		cmocka_unit_test(parse_seconds_ms_bounds_are_inclusive_and_errors_are_erange),
	};

	return test_run_group("unit-parse", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
