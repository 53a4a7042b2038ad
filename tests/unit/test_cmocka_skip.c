/* SPDX-License-Identifier: MIT */
/* tests/unit/test_cmocka_skip.c: tests/lib/cmocka_skip.h: all skipped is 77, else it is not. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/lib/cmocka_skip.h"

/* ---- the groups a child process runs (SKIP_HELPER_MODE names one) ---- */

static void case_skips(void **state)
{
	(void)state;
	test_skip();
}

static void case_passes(void **state)
{
	(void)state;
}

static void case_fails(void **state)
{
	(void)state;
	fail();
}

static int child(const char *mode)
{
	const struct CMUnitTest all_skip[] = {
		cmocka_unit_test(case_skips),
		cmocka_unit_test(case_skips),
	};
	const struct CMUnitTest mixed[] = {
		cmocka_unit_test(case_skips),
		cmocka_unit_test(case_passes),
	};
	const struct CMUnitTest failing[] = {
		cmocka_unit_test(case_skips),
		cmocka_unit_test(case_fails),
	};

	if (strcmp(mode, "all-skip") == 0) {
		return test_run_group("all-skip", all_skip, NULL, NULL, NULL);
	}
	if (strcmp(mode, "mixed") == 0) {
		return test_run_group("mixed", mixed, NULL, NULL, NULL);
	}
	if (strcmp(mode, "failing") == 0) {
		return test_run_group("failing", failing, NULL, NULL, NULL);
	}
	if (strcmp(mode, "filter-to-skip") == 0) {
		return test_run_group("filter-to-skip", mixed, "case_sk*", NULL, NULL);
	}
	if (strcmp(mode, "filter-to-pass") == 0) {
		return test_run_group("filter-to-pass", mixed, "case_passes", NULL, NULL);
	}
	return 99;
}

/* ---- the checks: run this program in @mode and return its exit status ---- */

static int run_mode(const char *mode)
{
	int status, fd;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		setenv("SKIP_HELPER_MODE", mode, 1);
		execl("/proc/self/exe", "test_cmocka_skip", (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void every_case_skipped_exits_77(void **state)
{
	(void)state;
	assert_int_equal(run_mode("all-skip"), 77);
}

static void one_passing_case_exits_0(void **state)
{
	(void)state;
	assert_int_equal(run_mode("mixed"), 0);
}

static void a_failure_beside_a_skip_exits_with_the_failure_count(void **state)
{
	(void)state;
	assert_int_equal(run_mode("failing"), 1);
}

static void filter_counts_only_the_cases_it_selects(void **state)
{
	(void)state;
	assert_int_equal(run_mode("filter-to-skip"), 77);
	assert_int_equal(run_mode("filter-to-pass"), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_case_skipped_exits_77),
		cmocka_unit_test(one_passing_case_exits_0),
		cmocka_unit_test(a_failure_beside_a_skip_exits_with_the_failure_count),
		cmocka_unit_test(filter_counts_only_the_cases_it_selects),
	};
	const char *mode = getenv("SKIP_HELPER_MODE");

	if (mode != NULL) {
		return child(mode);
	}
	return test_run_group("unit-cmocka-skip", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
