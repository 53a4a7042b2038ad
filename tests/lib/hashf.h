/* SPDX-License-Identifier: MIT */
/* tests/lib/hashf.h: a deterministic pseudo-random float per (a, b, c), for test data. */
#ifndef CRUN_TESTS_LIB_HASHF_H
#define CRUN_TESTS_LIB_HASHF_H

#include <stdint.h>

/*
 * A value in [-1, 1) for (@a, @b, @c): a splitmix64-style mix, the top 24 bits as a float.
 * The same on every machine and in every process, so ranks can make each other's data and a
 * serial reference can be computed anywhere (tests/worker/worker_helper.c,
 * tests/gpu/gpu_worker.c).
 */
static inline float hashf(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t z =
		a * 0x9e3779b97f4a7c15ULL ^ b * 0xbf58476d1ce4e5b9ULL ^ c * 0x94d049bb133111ebULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return (float)((double)(z >> 40) / 8388608.0 - 1.0);
}

#endif
