/* SPDX-License-Identifier: MIT */
/* src/common/base64.c: base64 with OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock, strict decoding. */
#include <errno.h>
#include <string.h>

#include <openssl/evp.h>

#include "src/common/base64.h"

/* EVP_*Block take int lengths: work in chunks well below INT_MAX (multiples of 3 and 4). */
#define ENC_CHUNK (3u << 20) /* input bytes */
#define DEC_CHUNK (4u << 20) /* input chars */

size_t base64_encoded_size(size_t n)
{
	return (n + 2) / 3 * 4 + 1;
}

void base64_encode(const void *src, size_t n, char *dst)
{
	const unsigned char *s = src;
	size_t k;

	*dst = '\0';
	while (n > 0) {
		k = n < ENC_CHUNK ? n : ENC_CHUNK;
		dst += EVP_EncodeBlock((unsigned char *)dst, s, (int)k); /* NUL-terminates */
		s += k;
		n -= k;
	}
}

size_t base64_decoded_cap(size_t n)
{
	return n / 4 * 3 + 3;
}

int base64_decode(const char *src, size_t n, void *dst, size_t *outlen)
{
	unsigned char *o = dst, tail[4], bytes[3];
	char again[5];
	size_t pad = 0, data, rest, full, k;

	*outlen = 0;
	while (pad < n && pad < 3 && src[n - 1 - pad] == '=') {
		pad++;
	}
	data = n - pad;
	rest = data % 4;
	/* Padding only completes the last group; one char alone cannot end a byte. */
	if (pad > 2 || (pad > 0 && n % 4 != 0) || rest == 1 || memchr(src, '=', data) != NULL) {
		return -EINVAL;
	}
	/* Whole groups: -1 for a char outside the alphabet, fewer bytes where OpenSSL skipped
	 * white space at an end. */
	for (full = data - rest; full > 0; full -= k) {
		k = full < DEC_CHUNK ? full : DEC_CHUNK;
		if (EVP_DecodeBlock(o, (const unsigned char *)src, (int)k) != (int)(k / 4 * 3)) {
			return -EINVAL;
		}
		src += k;
		o += k / 4 * 3;
	}
	if (rest > 0) {
		/* The last, short group, padded here when the text left it out. Encoding its bytes
		 * again must give the same text: refuses bad chars and bits that are not zero. */
		memcpy(tail, src, rest);
		memset(tail + rest, '=', 4 - rest);
		if (EVP_DecodeBlock(bytes, tail, 4) != 3) {
			return -EINVAL;
		}
		EVP_EncodeBlock((unsigned char *)again, bytes, (int)(rest - 1));
		if (memcmp(again, tail, 4) != 0) {
			return -EINVAL;
		}
		memcpy(o, bytes, rest - 1);
		o += rest - 1;
	}
	*outlen = (size_t)(o - (unsigned char *)dst);
	return 0;
}
