/* SPDX-License-Identifier: MIT */
/* tests/unit/test_base64.c: src/common/base64 (OpenSSL underneath): RFC 4648's vectors, binary
 * and large inputs, and strict decoding where EVP_DecodeBlock alone is lenient. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/base64.h"

static void roundtrip(const void *p, size_t n, const char *want)
{
	char enc[64], dec[64];
	size_t got = 0;

	assert_int_equal(base64_encoded_size(n), strlen(want) + 1);
	base64_encode(p, n, enc);
	assert_string_equal(enc, want);
	assert_true(base64_decoded_cap(strlen(enc)) <= sizeof(dec));
	assert_int_equal(base64_decode(enc, strlen(enc), dec, &got), 0);
	assert_int_equal(got, n);
	assert_memory_equal(dec, p, n);
}

static void base64_roundtrips(void **state)
{
	const unsigned char bin[] = {0, 0xff, 0x10, 0x80, 0x7f};

	(void)state;
	roundtrip("", 0, "");
	roundtrip("f", 1, "Zg==");
	roundtrip("fo", 2, "Zm8=");
	roundtrip("foo", 3, "Zm9v");
	roundtrip("foob", 4, "Zm9vYg==");
	roundtrip("fooba", 5, "Zm9vYmE=");
	roundtrip("foobar", 6, "Zm9vYmFy");
	roundtrip("/crun/a", 7, "L2NydW4vYQ==");
	roundtrip(bin, sizeof(bin), "AP8QgH8=");
}

/* Larger than the chunks OpenSSL is given (3 MiB in, 4 MiB of text out), and not a multiple. */
static void base64_large_input_roundtrips(void **state)
{
	size_t n = (3u << 20) * 2 + 1234, got = 0, i;
	unsigned char *in = malloc(n), *out = malloc(base64_decoded_cap(base64_encoded_size(n)));
	char *enc = malloc(base64_encoded_size(n));

	(void)state;
	assert_non_null(in);
	assert_non_null(out);
	assert_non_null(enc);
	for (i = 0; i < n; i++) {
		in[i] = (unsigned char)(i * 2654435761u >> 13);
	}
	base64_encode(in, n, enc);
	assert_int_equal(strlen(enc), base64_encoded_size(n) - 1);
	assert_int_equal(base64_decode(enc, strlen(enc), out, &got), 0);
	assert_int_equal(got, n);
	assert_memory_equal(out, in, n);
	/* A bad char deep in the second chunk is found too. */
	enc[(4u << 20) + 17] = '*';
	assert_int_equal(base64_decode(enc, strlen(enc), out, &got), -EINVAL);
	free(in);
	free(out);
	free(enc);
}

static void base64_rejects_garbage(void **state)
{
	/* Padding inside or too much, bits left over, a lone char, bad chars, white space at
	 * either end or inside (which EVP_DecodeBlock would skip), '-' (OpenSSL's end mark). */
	const char *bad[] = {"Zg=a",  "Z===",  "Zh==",	   "Zm9=",   "Z",
			     "Zm9v!", "Zg=",   "Zm 9v",	   "====",   "Zg==Zg==",
			     " Zm9v", "Zm9v ", "    Zm9v", "Zm9v\n", "Zm9v\r\n\r\n",
			     "Zm9-",  "-Zm9v", "Zm9vYg=",  "Zm9vY",  "Z=9v"};
	char out[16];
	size_t n, i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(base64_decode(bad[i], strlen(bad[i]), out, &n), -EINVAL);
	}
	/* Padding may be left out. */
	assert_int_equal(base64_decode("Zm8", 3, out, &n), 0);
	assert_int_equal(n, 2);
	assert_memory_equal(out, "fo", 2);
	assert_int_equal(base64_decode("Zg", 2, out, &n), 0);
	assert_int_equal(n, 1);
	assert_memory_equal(out, "f", 1);
	/* Only @n chars are read. */
	assert_int_equal(base64_decode("Zm9v!!!!", 4, out, &n), 0);
	assert_int_equal(n, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(base64_roundtrips),
		cmocka_unit_test(base64_large_input_roundtrips),
		cmocka_unit_test(base64_rejects_garbage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
