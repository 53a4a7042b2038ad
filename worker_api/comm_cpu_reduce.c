/* SPDX-License-Identifier: MIT */
/* worker_api/comm_cpu_reduce.c: the cpu backend's reduction loops, baseline and AVX2. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "worker_api/comm_cpu_internal.h"

/*
 * The reduction loops, built twice: for the baseline x86-64 ISA (SSE2) and for AVX2, picked at
 * run time (the project builds with -O2 and no -march, so gcc alone never emits AVX2). -O3 for
 * these loops only: at -O2 gcc 12 barely vectorizes. The loops are memory-bound; AVX2 halves
 * the instruction count per byte, which matters when the data is still in cache.
 */
#define HOT __attribute__((optimize("O3")))

#define REDUCE_LOOPS(sfx, attr)                                                                    \
	HOT attr static void add_f32_##sfx(float *restrict d, const float *restrict a,           \
					   const float *restrict b, size_t n)                      \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] = a[i] + b[i];                                                        \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void acc_f32_##sfx(float *restrict d, const float *restrict b, size_t n)  \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] += b[i];                                                              \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void add_f64_##sfx(double *restrict d, const double *restrict a,         \
					   const double *restrict b, size_t n)                     \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] = a[i] + b[i];                                                        \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void acc_f64_##sfx(double *restrict d, const double *restrict b,         \
					   size_t n)                                               \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] += b[i];                                                              \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void div_f32_##sfx(float *d, size_t n, float by)                          \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] /= by;                                                                \
		}                                                                                  \
	}                                                                                          \
	HOT attr static void div_f64_##sfx(double *d, size_t n, double by)                        \
	{                                                                                          \
		for (size_t i = 0; i < n; i++) {                                                   \
			d[i] /= by;                                                                \
		}                                                                                  \
	}

struct reducers {
	void (*add_f32)(float *restrict, const float *restrict, const float *restrict, size_t);
	void (*acc_f32)(float *restrict, const float *restrict, size_t);
	void (*add_f64)(double *restrict, const double *restrict, const double *restrict, size_t);
	void (*acc_f64)(double *restrict, const double *restrict, size_t);
	void (*div_f32)(float *, size_t, float);
	void (*div_f64)(double *, size_t, double);
};

#define REDUCERS(sfx)                                                                              \
	{                                                                                          \
		add_f32_##sfx, acc_f32_##sfx, add_f64_##sfx, acc_f64_##sfx, div_f32_##sfx,         \
			div_f64_##sfx                                                              \
	}

REDUCE_LOOPS(base, )
static const struct reducers reducers_base = REDUCERS(base);

#if defined(__x86_64__) && defined(__GNUC__)
REDUCE_LOOPS(avx2, __attribute__((target("avx2"))))
static const struct reducers reducers_avx2 = REDUCERS(avx2);
#endif

/* The loops for this CPU; CRUN_COMM_SIMD=base forces the baseline (for tests and comparison). */
static const struct reducers *reducers(void)
{
	static const struct reducers *_Atomic chosen;
	const struct reducers *r = atomic_load_explicit(&chosen, memory_order_relaxed);

	if (r == NULL) {
		const char *env = getenv("CRUN_COMM_SIMD");

		r = &reducers_base;
#if defined(__x86_64__) && defined(__GNUC__)
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx2") && (env == NULL || strcmp(env, "base") != 0)) {
			r = &reducers_avx2;
		}
#else
		(void)env;
#endif
		atomic_store_explicit(&chosen, r, memory_order_relaxed);
	}
	return r;
}

/* The entry point (see comm_cpu_internal.h): one call per chunk, the loops through a table. */
void cpu_reduce(char *dst, const char *a, const char *in, size_t bytes, enum crun_dtype dt,
		bool scale, int size)
{
	const struct reducers *f = reducers();

	if (dt == CRUN_DTYPE_FLOAT32) {
		size_t n = bytes / sizeof(float);

		if (dst == a) {
			f->acc_f32((float *)dst, (const float *)in, n);
		} else {
			f->add_f32((float *)dst, (const float *)a, (const float *)in, n);
		}
		if (scale) {
			f->div_f32((float *)dst, n, (float)size);
		}
	} else {
		size_t n = bytes / sizeof(double);

		if (dst == a) {
			f->acc_f64((double *)dst, (const double *)in, n);
		} else {
			f->add_f64((double *)dst, (const double *)a, (const double *)in, n);
		}
		if (scale) {
			f->div_f64((double *)dst, n, (double)size);
		}
	}
}
