/* SPDX-License-Identifier: MIT */
/* tests/unit/test_signames.c: src/common/signames: names to numbers and back. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "src/common/signames.h"
#include "tests/lib/cmocka_skip.h"

static void signal_abbrev_names_the_common_signals(void **state)
{
	(void)state;
	assert_string_equal(signal_abbrev(SIGHUP), "SIGHUP");
	assert_string_equal(signal_abbrev(SIGINT), "SIGINT");
	assert_string_equal(signal_abbrev(SIGKILL), "SIGKILL");
	assert_string_equal(signal_abbrev(SIGSEGV), "SIGSEGV");
	assert_string_equal(signal_abbrev(SIGTERM), "SIGTERM");
	assert_string_equal(signal_abbrev(SIGUSR1), "SIGUSR1");
	assert_string_equal(signal_abbrev(SIGABRT), "SIGABRT");
	assert_string_equal(signal_abbrev(SIGCHLD), "SIGCHLD");
}

static void signal_abbrev_is_null_without_a_name(void **state)
{
	(void)state;
	assert_null(signal_abbrev(0));
	assert_null(signal_abbrev(-1));
	assert_null(signal_abbrev(SIGRTMIN));
	assert_null(signal_abbrev(SIGRTMAX));
	assert_null(signal_abbrev(99));
}

/* Every classic signal (1..31 on Linux) has a name, and the name parses back to it. */
static void signal_names_round_trip_for_every_classic_signal(void **state)
{
	char lower[32], buf[32];
	const char *n;
	size_t i;
	int sig;

	(void)state;
	for (sig = 1; sig < SIGRTMIN && sig < 32; sig++) {
		n = signal_abbrev(sig);
		if (n == NULL) {
			print_error("signal %d has no name\n", sig);
			fail();
		}
		assert_int_equal(strncmp(n, "SIG", 3), 0);
		assert_string_equal(signal_name(sig, buf, sizeof(buf)), n);
		assert_int_equal(signal_parse(n), sig);
		assert_int_equal(signal_parse(n + 3), sig);
		for (i = 0; n[i] != '\0' && i < sizeof(lower) - 1; i++) {
			lower[i] = (char)(n[i] | 0x20);
		}
		lower[i] = '\0';
		assert_int_equal(signal_parse(lower), sig);
		assert_int_equal(signal_parse(lower + 3), sig);
		snprintf(buf, sizeof(buf), "%d", sig);
		assert_int_equal(signal_parse(buf), sig);
	}
}

static void signal_parse_takes_any_case_with_or_without_sig(void **state)
{
	(void)state;
	assert_int_equal(signal_parse("TERM"), SIGTERM);
	assert_int_equal(signal_parse("SIGTERM"), SIGTERM);
	assert_int_equal(signal_parse("sigterm"), SIGTERM);
	assert_int_equal(signal_parse("Sigterm"), SIGTERM);
	assert_int_equal(signal_parse("term"), SIGTERM);
	assert_int_equal(signal_parse("SigUsr1"), SIGUSR1);
	assert_int_equal(signal_parse("15"), SIGTERM);
	assert_int_equal(signal_parse("9"), SIGKILL);
}

static void signal_parse_takes_numbers_up_to_sigrtmax(void **state)
{
	char buf[16];

	(void)state;
	assert_int_equal(signal_parse("1"), 1);
	snprintf(buf, sizeof(buf), "%d", SIGRTMIN);
	assert_int_equal(signal_parse(buf), SIGRTMIN);
	snprintf(buf, sizeof(buf), "%d", SIGRTMAX);
	assert_int_equal(signal_parse(buf), SIGRTMAX);
	snprintf(buf, sizeof(buf), "%d", SIGRTMAX + 1);
	assert_int_equal(signal_parse(buf), -EINVAL);
	assert_int_equal(signal_parse("0"), -EINVAL);
	assert_int_equal(signal_parse("-15"), -EINVAL);
	assert_int_equal(signal_parse("99999999999"), -EINVAL);
}

static void signal_parse_refuses_unknown_names(void **state)
{
	static const char *const bad[] = {
		"", "SIG", "sig", "SIGFOO", "FOO", "TERMX", "SIGTERMX", "SIGSIGTERM", " TERM",
		"TERM ", "15x", "x15", "SIG-TERM", "SIG_TERM", "1.5",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (signal_parse(bad[i]) != -EINVAL) {
			print_error("accepted \"%s\"\n", bad[i]);
			fail();
		}
	}
}

static void signal_name_prints_something_for_any_number(void **state)
{
	char buf[32], tiny[5];

	(void)state;
	assert_string_equal(signal_name(SIGSEGV, buf, sizeof(buf)), "SIGSEGV");
	assert_string_equal(signal_name(SIGRTMIN + 3, buf, sizeof(buf)), "SIGRTMIN+3");
	assert_string_equal(signal_name(SIGRTMIN, buf, sizeof(buf)), "SIGRTMIN");
	/* 29 has two names: glibc prints SIGPOLL, and both parse. */
	assert_string_equal(signal_name(SIGPOLL, buf, sizeof(buf)), "SIGPOLL");
	assert_int_equal(signal_parse("IO"), SIGPOLL);
	assert_int_equal(signal_parse("SIGPOLL"), SIGIO);
	assert_string_equal(signal_name(99, buf, sizeof(buf)), "signal 99");
	assert_string_equal(signal_name(0, buf, sizeof(buf)), "signal 0");
	assert_string_equal(signal_name(-4, buf, sizeof(buf)), "signal -4");
	/* The result is @buf, cut to fit and terminated. */
	assert_ptr_equal(signal_name(SIGTERM, tiny, sizeof(tiny)), tiny);
	assert_string_equal(tiny, "SIGT");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(signal_abbrev_names_the_common_signals),
		cmocka_unit_test(signal_abbrev_is_null_without_a_name),
		cmocka_unit_test(signal_names_round_trip_for_every_classic_signal),
		cmocka_unit_test(signal_parse_takes_any_case_with_or_without_sig),
		cmocka_unit_test(signal_parse_takes_numbers_up_to_sigrtmax),
		cmocka_unit_test(signal_parse_refuses_unknown_names),
		cmocka_unit_test(signal_name_prints_something_for_any_number),
	};

	return test_run_group("unit-signames", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
