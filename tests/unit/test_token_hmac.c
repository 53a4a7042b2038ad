/* SPDX-License-Identifier: MIT */
/* tests/unit/test_token_hmac.c: the token's HMAC-SHA256, SHA-256 and compare (nettle, since
 * issue 23) against RFC 4231's cases, against the keys and proofs the OpenSSL build put on the
 * wire (an old client and a new server must agree byte for byte), and against OpenSSL itself. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "src/common/token.h"
#include "src/common/util.h"

static void hexof(const uint8_t *p, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++) {
		snprintf(out + 2 * i, 3, "%02x", p[i]);
	}
}

static void assert_hex(const uint8_t *p, size_t n, const char *want)
{
	char got[2 * TOKEN_KEY_LEN + 1];

	hexof(p, n, got);
	assert_string_equal(got, want);
}

/* RFC 4231 section 4, HMAC-SHA-256 of cases 1-7 (case 5: the first 128 bits). */
static void rfc4231_cases(void **state)
{
	static const char long_data[] =
		"This is a test using a larger than block-size key and a larger than block-size "
		"data. The key needs to be hashed before being used by the HMAC algorithm.";
	static const char long_key_data[] =
		"Test Using Larger Than Block-Size Key - Hash Key First";
	uint8_t k[131], m[50], out[TOKEN_KEY_LEN];
	int i;

	(void)state;
	memset(k, 0x0b, 20);
	token_hmac(k, 20, "Hi There", 8, NULL, 0, out);
	assert_hex(out, 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	token_hmac("Jefe", 4, "what do ya want ", 16, "for nothing?", 12, out);
	assert_hex(out, 32, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(k, 0xaa, 20);
	memset(m, 0xdd, 50);
	token_hmac(k, 20, m, 50, NULL, 0, out);
	assert_hex(out, 32, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
	for (i = 0; i < 25; i++) {
		k[i] = (uint8_t)(i + 1);
	}
	memset(m, 0xcd, 50);
	token_hmac(k, 25, m, 50, NULL, 0, out);
	assert_hex(out, 32, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
	memset(k, 0x0c, 20);
	token_hmac(k, 20, "Test With Truncation", 20, NULL, 0, out);
	assert_hex(out, 16, "a3b6167473100ee06e0c796c2955552b");
	memset(k, 0xaa, 131);
	token_hmac(k, 131, long_key_data, strlen(long_key_data), NULL, 0, out);
	assert_hex(out, 32, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	token_hmac(k, 131, long_data, 100, long_data + 100, strlen(long_data) - 100, out);
	assert_hex(out, 32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* What the OpenSSL build derived and proved for one token: the wire must not change. */
static void wire_values_are_unchanged(void **state)
{
	static const char tok[] = "crun-kat-token-0123456789abcdef";
	uint8_t key[TOKEN_KEY_LEN], job[TOKEN_KEY_LEN], sn[TOKEN_NONCE_LEN], cn[TOKEN_NONCE_LEN];
	uint8_t pc[TOKEN_KEY_LEN], ps[TOKEN_KEY_LEN];
	char fpr[TOKEN_FPR_HEX + 1];
	int i;

	(void)state;
	for (i = 0; i < TOKEN_NONCE_LEN; i++) {
		sn[i] = (uint8_t)i;
		cn[i] = (uint8_t)(TOKEN_NONCE_LEN + i);
	}
	assert_int_equal(token_derive_key(tok, strlen(tok), NULL, key), 0);
	assert_hex(key, 32, "2d185926aee7015ede728289b722bb65a7d4af0f87419577bb5e20c65ee5f089");
	assert_int_equal(token_derive_key(tok, strlen(tok), "run-42", job), 0);
	assert_hex(job, 32, "6ef858e215a5ef7ce27ae433b800b819ea41edeac6db77b34a25e3238c77ff3b");
	assert_int_equal(token_proof(key, sn, cn, TOKEN_ROLE_CLIENT, pc), 0);
	assert_hex(pc, 32, "f03da66124a7185bb1e02df4db502f4d0da05f8af97230c1e4bb55d2b6f4dc68");
	assert_int_equal(token_proof(key, sn, cn, TOKEN_ROLE_SERVER, ps), 0);
	assert_hex(ps, 32, "9cb25cfb485b3008a35d37a13705714aa9db079cb065975ebafab0a4bd52c28c");
	token_fingerprint(tok, strlen(tok), fpr);
	assert_string_equal(fpr, "514abd2e6239b8f4");
}

/* Random keys (empty to past a block) and messages against OpenSSL's HMAC() and SHA256(). */
static void agrees_with_openssl(void **state)
{
	uint8_t key[200], msg[300], ours[TOKEN_KEY_LEN], theirs[EVP_MAX_MD_SIZE], md[32];
	char fpr[TOKEN_FPR_HEX + 1], want[2 * 32 + 1];
	unsigned int olen;
	size_t kl, ml, split;
	int i;

	(void)state;
	for (i = 0; i < 500; i++) {
		assert_int_equal(util_random(key, sizeof(key)), 0);
		assert_int_equal(util_random(msg, sizeof(msg)), 0);
		kl = (size_t)i % sizeof(key);
		ml = ((size_t)i * 7) % sizeof(msg);
		split = ml / 3;
		assert_int_equal(token_hmac(key, kl, msg, split, msg + split, ml - split, ours), 0);
		assert_non_null(HMAC(EVP_sha256(), key, (int)kl, msg, ml, theirs, &olen));
		assert_int_equal(olen, TOKEN_KEY_LEN);
		assert_memory_equal(ours, theirs, TOKEN_KEY_LEN);
		SHA256(msg, ml, md);
		hexof(md, 8, want);
		token_fingerprint(msg, ml, fpr);
		assert_string_equal(fpr, want);
	}
}

static void compare_is_exact(void **state)
{
	uint8_t a[TOKEN_KEY_LEN] = {0}, b[TOKEN_KEY_LEN] = {0};
	int i;

	(void)state;
	assert_true(token_equal(a, b, sizeof(a)));
	assert_true(token_equal(a, b, 0));
	for (i = 0; i < TOKEN_KEY_LEN; i++) {
		b[i] = 0x80;
		assert_false(token_equal(a, b, sizeof(a)));
		b[i] = 0;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rfc4231_cases),
		cmocka_unit_test(wire_values_are_unchanged),
		cmocka_unit_test(agrees_with_openssl),
		cmocka_unit_test(compare_is_exact),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
