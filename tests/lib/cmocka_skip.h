/* SPDX-License-Identifier: MIT */
/* tests/lib/cmocka_skip.h: a cmocka program whose every case skipped exits 77 (meson's SKIP). */
#ifndef CRUN_TESTS_LIB_CMOCKA_SKIP_H
#define CRUN_TESTS_LIB_CMOCKA_SKIP_H

/*
 * cmocka 1.1.5 counts skip() as a pass in its exit status, so a program whose cases all
 * skipped (the GPU cases without a GPU) shows OK in `meson test`. Include this after
 * <cmocka.h>, skip with test_skip() instead of skip(), and end main() with
 *
 *	return test_run_group("name", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
 *
 * in place of cmocka_set_test_filter() + cmocka_run_group_tests_name(). The result is
 * cmocka's (the number of failed cases) when any case failed or passed, and 77 when no case
 * failed and every case that ran called test_skip(). The filter is cmocka's glob ('*', '?')
 * on case names, as cmocka_set_test_filter() takes it.
 */
#include <fnmatch.h>
#include <stddef.h>

/*
 * Cases that called test_skip(): one program runs one group, so one counter. Weak, so that a
 * program built from several files that include this header shares a single counter.
 */
__attribute__((weak)) unsigned int test_skipped_cases;

/* Skip the running case (cmocka's skip(): it does not return), counted for test_run_group(). */
#define test_skip()                                                                            \
	do {                                                                                   \
		test_skipped_cases++;                                                          \
		skip();                                                                        \
	} while (0)

/* @tests must be an array (not a pointer): its length is taken with sizeof. */
#define test_run_group(name, tests, filter, group_setup, group_teardown)                       \
	test_run_group_n((name), (tests), sizeof(tests) / sizeof((tests)[0]), (filter),        \
			 (group_setup), (group_teardown))

static inline int test_run_group_n(const char *name, const struct CMUnitTest *tests, size_t n,
				   const char *filter, CMFixtureFunction group_setup,
				   CMFixtureFunction group_teardown)
{
	size_t i, selected = 0;
	int rc;

	if (filter != NULL) {
		cmocka_set_test_filter(filter);
	}
	for (i = 0; i < n; i++) {
		if (filter == NULL || fnmatch(filter, tests[i].name, 0) == 0) {
			selected++;
		}
	}
	rc = _cmocka_run_group_tests(name, tests, n, group_setup, group_teardown);
	if (rc == 0 && selected > 0 && test_skipped_cases == selected) {
		return 77;
	}
	return rc;
}

#endif
