/* SPDX-License-Identifier: MIT */
/* src/common/base64.h: standard base64 (RFC 4648) through nettle, decoded strictly. */
#ifndef CRUN_SRC_COMMON_BASE64_H
#define CRUN_SRC_COMMON_BASE64_H

#include <stddef.h>

/*
 * nettle does the conversion (base64_encode_raw, base64_decode_update); what it does not check
 * is checked here, since its decoder skips white space anywhere, takes a group left short and
 * leaves unused bits unchecked unless padding follows. The etcd backend uses this for every key
 * and value on the wire.
 */

/** Bytes base64_encode() writes for @n input bytes, NUL included. */
size_t base64_encoded_size(size_t n);
/** Standard base64 of @n bytes at @src with padding, NUL-terminated, into @dst of
 * base64_encoded_size(@n) bytes. */
void base64_encode(const void *src, size_t n, char *dst);

/** Bytes base64_decode() may write for @n chars of input (a bound, not the exact count). */
size_t base64_decoded_cap(size_t n);
/**
 * Decode @n chars of standard base64 at @src into @dst (base64_decoded_cap(@n) bytes);
 * *@outlen = bytes written. Padding may be left out, but where it is there it must be right
 * (at the end, completing a group of four); anything outside the alphabet, white space
 * included, and unused bits that are not zero (a second spelling of the same bytes) are
 * refused. Returns 0 or -EINVAL.
 */
int base64_decode(const char *src, size_t n, void *dst, size_t *outlen);

#endif
