/* SPDX-License-Identifier: MIT */
/* src/common/fnv.h: 64-bit FNV-1a, the one copy (DDP's plan hash, the CPU backend's host id). */
#ifndef CRUN_SRC_COMMON_FNV_H
#define CRUN_SRC_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>

/*
 * Fowler-Noll-Vo 1a with the published 64-bit offset basis and prime. Not keyed and not for
 * tables that hostile input fills (the store's keys use htab_hash()): for values that must be
 * the same on every host and in every version, such as the DDP plan ranks compare. Chain
 * calls by passing the last result as @h; start from FNV1A64_INIT.
 */
#define FNV1A64_INIT 0xcbf29ce484222325ull /* 14695981039346656037 */
#define FNV1A64_PRIME 0x100000001b3ull	   /* 1099511628211 */

/** @h extended with @n bytes at @p. */
static inline uint64_t fnv1a64(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++) {
		h = (h ^ b[i]) * FNV1A64_PRIME;
	}
	return h;
}

/** @h extended with the bytes of the string @s (not its NUL). */
static inline uint64_t fnv1a64_str(uint64_t h, const char *s)
{
	for (; *s != '\0'; s++) {
		h = (h ^ (uint8_t)*s) * FNV1A64_PRIME;
	}
	return h;
}

/** @h extended with @v's eight bytes, least significant first: the same on every host. */
static inline uint64_t fnv1a64_u64(uint64_t h, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++) {
		h = (h ^ ((v >> (8 * i)) & 0xff)) * FNV1A64_PRIME;
	}
	return h;
}

#endif
