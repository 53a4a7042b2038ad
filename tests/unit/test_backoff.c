/* SPDX-License-Identifier: MIT */
/* tests/unit/test_backoff.c: src/common/backoff: doubling to the cap, reset, the three jitter
 * rules, per-seed streams, and a pause that never passes its deadline. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "src/common/backoff.h"
#include "src/common/clock.h"

static void backoff_doubles_to_the_cap_and_resets(void **state)
{
	const int64_t want[] = {10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000};
	struct backoff b;
	size_t i;

	(void)state;
	backoff_init(&b, 10, 1000);
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(backoff_step(&b), want[i]);
	}
	backoff_reset(&b);
	assert_int_equal(backoff_step(&b), 10);
	assert_int_equal(backoff_step(&b), 20);
}

static void backoff_edges(void **state)
{
	struct backoff b;

	(void)state;
	/* 0: no delays at all (the agent's --restart-backoff 0). */
	backoff_init(&b, 0, 30000);
	assert_int_equal(backoff_step(&b), 0);
	assert_int_equal(backoff_step(&b), 0);
	/* A negative first is 0; a cap below the first is raised to it. */
	backoff_init(&b, -5, 10);
	assert_int_equal(b.first, 0);
	backoff_init(&b, 45000, 30000);
	assert_int_equal(backoff_step(&b), 45000);
	assert_int_equal(backoff_step(&b), 45000);
	/* Near the top of int64_t: capped, never overflowing. */
	backoff_init(&b, INT64_MAX / 2 + 1, INT64_MAX);
	assert_true(backoff_step(&b) == INT64_MAX / 2 + 1);
	assert_true(backoff_step(&b) == INT64_MAX);
	assert_true(backoff_step(&b) == INT64_MAX);
	/* Full jitter on a zero delay draws nothing. */
	backoff_init(&b, 0, 0);
	backoff_set_jitter(&b, BACKOFF_FULL, 1);
	assert_int_equal(backoff_step(&b), 0);
}

static void backoff_jitter_stays_in_range(void **state)
{
	struct backoff h, f, h2;
	int64_t d = 20, x, y, lo_h = INT64_MAX, lo_f = INT64_MAX;
	int i, differ = 0;

	(void)state;
	backoff_init(&h, 20, 20000);
	backoff_set_jitter(&h, BACKOFF_HALF, 1);
	backoff_init(&h2, 20, 20000);
	backoff_set_jitter(&h2, BACKOFF_HALF, 2);
	backoff_init(&f, 20, 20000);
	backoff_set_jitter(&f, BACKOFF_FULL, 3);
	for (i = 0; i < 200; i++) {
		x = backoff_step(&h);
		y = backoff_step(&f);
		differ += backoff_step(&h2) != x;
		assert_true(x >= d / 2 && x <= d);
		assert_true(y >= 0 && y < d);
		if (d == 20000) {
			lo_h = x < lo_h ? x : lo_h;
			lo_f = y < lo_f ? y : lo_f;
		}
		d = d > 10000 ? 20000 : d * 2;
	}
	/* Jittered for real: draws at the cap spread out, and two seeds differ. */
	assert_true(lo_h < 19000);
	assert_true(lo_f < 10000);
	assert_true(differ > 100);
	/* The same seed gives the same stream (reproducible tests). */
	backoff_init(&h, 20, 20000);
	backoff_set_jitter(&h, BACKOFF_HALF, 7);
	backoff_init(&h2, 20, 20000);
	backoff_set_jitter(&h2, BACKOFF_HALF, 7);
	for (i = 0; i < 20; i++) {
		assert_int_equal(backoff_step(&h), backoff_step(&h2));
	}
}

static void backoff_pause_never_passes_its_deadline(void **state)
{
	struct backoff b;
	int64_t t0;

	(void)state;
	/* A 100 s delay with a deadline already reached returns at once; one 50 ms away
	 * sleeps no longer than that (the bound allows for a loaded machine). */
	backoff_init(&b, 100000, 100000);
	t0 = crun_now_ms();
	backoff_pause(&b, t0);
	backoff_pause(&b, t0 - 1000);
	backoff_pause(&b, t0 + 50);
	assert_true(crun_now_ms() >= t0 + 50);
	assert_true(crun_now_ms() - t0 < 30000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(backoff_doubles_to_the_cap_and_resets),
		cmocka_unit_test(backoff_edges),
		cmocka_unit_test(backoff_jitter_stays_in_range),
		cmocka_unit_test(backoff_pause_never_passes_its_deadline),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
