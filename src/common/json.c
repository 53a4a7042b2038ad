/* SPDX-License-Identifier: MIT */
/* src/common/json.c: JSON string escaping; invalid UTF-8 becomes U+FFFD. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "src/common/json.h"

/*
 * Length of the well-formed UTF-8 sequence at @s (Unicode's table 3-7), or 0 when the bytes
 * there are not one. Reads no further than the first byte that is not a continuation byte, so
 * never past the terminating NUL.
 */
static size_t utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n, i;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		lo = s[0] == 0xe0 ? 0xa0 : 0x80;
		hi = s[0] == 0xed ? 0x9f : 0xbf;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		lo = s[0] == 0xf0 ? 0x90 : 0x80;
		hi = s[0] == 0xf4 ? 0x8f : 0xbf;
	} else {
		return 0;
	}
	if (s[1] < lo || s[1] > hi) {
		return 0;
	}
	for (i = 2; i < n; i++) {
		if (s[i] < 0x80 || s[i] > 0xbf) {
			return 0;
		}
	}
	return n;
}

/*
 * The escaped form of what starts at @s (not at its NUL): *@out points at @n bytes (@esc or
 * @s itself). Returns how many input bytes that covers.
 */
static size_t piece(const char *s, char esc[8], const char **out, size_t *n)
{
	unsigned char c = (unsigned char)*s;
	size_t k;

	*out = esc;
	*n = 2;
	esc[0] = '\\';
	switch (c) {
	case '"':
	case '\\':
		esc[1] = (char)c;
		return 1;
	case '\n':
		esc[1] = 'n';
		return 1;
	case '\r':
		esc[1] = 'r';
		return 1;
	case '\t':
		esc[1] = 't';
		return 1;
	case '\b':
		esc[1] = 'b';
		return 1;
	case '\f':
		esc[1] = 'f';
		return 1;
	default:
		break;
	}
	if (c < 0x20 || c == 0x7f) {
		*n = (size_t)snprintf(esc, 8, "\\u%04x", c);
		return 1;
	}
	if (c < 0x80) {
		*out = s;
		*n = 1;
		return 1;
	}
	k = utf8_len((const unsigned char *)s);
	if (k == 0) {
		memcpy(esc, "\\ufffd", 6);
		*n = 6;
		return 1;
	}
	*out = s;
	*n = k;
	return k;
}

size_t json_escape(char *dst, size_t cap, const char *s)
{
	const char *p;
	size_t len = 0, n;
	char esc[8];
	bool full = cap == 0;

	while (*s != '\0') {
		s += piece(s, esc, &p, &n);
		if (!full && len + n < cap) {
			memcpy(dst + len, p, n);
		} else if (!full) {
			dst[len] = '\0';
			full = true;
		}
		len += n;
	}
	if (!full) {
		dst[len] = '\0';
	}
	return len;
}

int json_fput_str(FILE *f, const char *s)
{
	const char *p;
	size_t n;
	char esc[8];

	if (putc('"', f) == EOF) {
		return -EIO;
	}
	while (*s != '\0') {
		s += piece(s, esc, &p, &n);
		if (fwrite(p, 1, n, f) != n) {
			return -EIO;
		}
	}
	return putc('"', f) == EOF ? -EIO : 0;
}
