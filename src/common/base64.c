/* SPDX-License-Identifier: MIT */
/* src/common/base64.c: base64 with nettle's base64_encode_raw/base64_decode_update, strict. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <nettle/base64.h>

#include "src/common/base64.h"

size_t base64_encoded_size(size_t n)
{
	return (n + 2) / 3 * 4 + 1;
}

void base64_encode(const void *src, size_t n, char *dst)
{
	base64_encode_raw(dst, n, src);
	dst[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
}

size_t base64_decoded_cap(size_t n)
{
	return n / 4 * 3 + 3;
}

/* Whether @c is one of the 64 digits (nettle's decoder would also skip white space). */
static int is_digit64(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '/';
}

int base64_decode(const char *src, size_t n, void *dst, size_t *outlen)
{
	struct base64_decode_ctx ctx;
	uint8_t *o = dst;
	char again[5];
	size_t pad = 0, data, rest, i, k;

	*outlen = 0;
	while (pad < n && pad < 3 && src[n - 1 - pad] == '=') {
		pad++;
	}
	data = n - pad;
	rest = data % 4;
	/* Padding only completes the last group; one char alone cannot end a byte. */
	if (pad > 2 || (pad > 0 && n % 4 != 0) || rest == 1) {
		return -EINVAL;
	}
	for (i = 0; i < data; i++) {
		if (!is_digit64((unsigned char)src[i])) {
			return -EINVAL;
		}
	}
	/* The digits alone (padding is checked above): rest digits leave rest - 1 bytes. */
	base64_decode_init(&ctx);
	k = base64_decoded_cap(data);
	if (base64_decode_update(&ctx, &k, o, data, src) != 1) {
		return -EINVAL;
	}
	if (rest > 0) {
		/* Encoding the last, short group's bytes again must give the same digits: refuses
		 * unused bits that are not zero (a second spelling of the same bytes). */
		base64_encode_raw(again, rest - 1, o + k - (rest - 1));
		if (memcmp(again, src + data - rest, rest) != 0) {
			return -EINVAL;
		}
	}
	*outlen = k;
	return 0;
}
