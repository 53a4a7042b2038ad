/* SPDX-License-Identifier: MIT */
/* tests/unit/test_diag.c: src/common/diag: set, first error wins, prefix, truncation, copy out. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "src/common/diag.h"
#include "tests/lib/cmocka_skip.h"

static int set_via_va_list(struct crun_diag *d, int code, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = diag_setv(d, code, fmt, ap);
	va_end(ap);
	return rc;
}

static void diag_set_records_code_and_formatted_message(void **state)
{
	struct crun_diag d = {0};

	(void)state;
	assert_int_equal(diag_set(&d, -EINVAL, "%s:%d: expected %s", "job.yaml", 12, "an integer"),
			 -EINVAL);
	assert_int_equal(d.code, -EINVAL);
	assert_string_equal(d.msg, "job.yaml:12: expected an integer");
	/* A later diag_set() replaces both. */
	assert_int_equal(diag_set(&d, -ENOENT, "gone"), -ENOENT);
	assert_int_equal(d.code, -ENOENT);
	assert_string_equal(d.msg, "gone");
	assert_int_equal(set_via_va_list(&d, -EPROTO, "v%d", 2), -EPROTO);
	assert_int_equal(d.code, -EPROTO);
	assert_string_equal(d.msg, "v2");
}

static void diag_functions_accept_a_null_diag(void **state)
{
	(void)state;
	assert_int_equal(diag_set(NULL, -EIO, "x"), -EIO);
	assert_int_equal(set_via_va_list(NULL, -EIO, "x"), -EIO);
	assert_int_equal(diag_set_first(NULL, -EIO, "x"), -EIO);
	assert_int_equal(diag_prefix(NULL, "ctx"), 0);
	diag_clear(NULL);
}

static void diag_set_first_keeps_the_first_error(void **state)
{
	struct crun_diag d = {0};

	(void)state;
	assert_int_equal(diag_set_first(&d, -ETIMEDOUT, "rank %d timed out", 3), -ETIMEDOUT);
	assert_int_equal(diag_set_first(&d, -ECONNRESET, "rank %d reset", 4), -ETIMEDOUT);
	assert_int_equal(d.code, -ETIMEDOUT);
	assert_string_equal(d.msg, "rank 3 timed out");
	/* Once cleared, the next one is first again. */
	diag_clear(&d);
	assert_int_equal(d.code, 0);
	assert_string_equal(d.msg, "");
	assert_int_equal(diag_set_first(&d, -ECONNRESET, "rank %d reset", 4), -ECONNRESET);
	assert_string_equal(d.msg, "rank 4 reset");
}

static void diag_prefix_prepends_context(void **state)
{
	struct crun_diag d = {0};

	(void)state;
	diag_set(&d, -EACCES, "bad token");
	assert_int_equal(diag_prefix(&d, "handshake"), -EACCES);
	assert_int_equal(diag_prefix(&d, "store %s:%d", "10.0.0.5", 29400), -EACCES);
	assert_string_equal(d.msg, "store 10.0.0.5:29400: handshake: bad token");
	assert_int_equal(d.code, -EACCES);
}

static void diag_set_truncates_a_long_message(void **state)
{
	struct crun_diag d = {0};
	char big[2 * CRUN_DIAG_MSG_MAX];

	(void)state;
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	diag_set(&d, -E2BIG, "%s", big);
	assert_int_equal(strlen(d.msg), CRUN_DIAG_MSG_MAX - 1);
	assert_int_equal(d.code, -E2BIG);
}

/* The prefix stays whole; the old message loses its end. */
static void diag_prefix_truncates_at_the_end(void **state)
{
	struct crun_diag d = {0};
	char big[CRUN_DIAG_MSG_MAX];

	(void)state;
	memset(big, 'm', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	diag_set(&d, -EIO, "%s", big);
	diag_prefix(&d, "where");
	assert_int_equal(strlen(d.msg), CRUN_DIAG_MSG_MAX - 1);
	assert_int_equal(strncmp(d.msg, "where: mmm", 10), 0);
	assert_int_equal(d.msg[CRUN_DIAG_MSG_MAX - 2], 'm');
	/* A prefix that fills the buffer by itself: cut, terminated, code unchanged. */
	memset(big, 'p', sizeof(big) - 1);
	assert_int_equal(diag_prefix(&d, "%s", big), -EIO);
	assert_int_equal(strlen(d.msg), CRUN_DIAG_MSG_MAX - 1);
	assert_int_equal(d.msg[0], 'p');
	assert_int_equal(d.msg[CRUN_DIAG_MSG_MAX - 2], 'p');
}

static void diag_copy_out_copies_cuts_and_returns_the_code(void **state)
{
	struct crun_diag d = {0};
	char buf[64], tiny[6];

	(void)state;
	diag_set(&d, -ENOSPC, "disk full on %s", "/scratch");
	assert_int_equal(diag_copy_out(&d, buf, sizeof(buf)), -ENOSPC);
	assert_string_equal(buf, "disk full on /scratch");
	assert_int_equal(diag_copy_out(&d, tiny, sizeof(tiny)), -ENOSPC);
	assert_string_equal(tiny, "disk ");
	/* No buffer, or no room: only the code. */
	assert_int_equal(diag_copy_out(&d, NULL, 10), -ENOSPC);
	tiny[0] = 'z';
	assert_int_equal(diag_copy_out(&d, tiny, 0), -ENOSPC);
	assert_int_equal(tiny[0], 'z');
	/* A clear diag copies out as an empty string and 0. */
	diag_clear(&d);
	assert_int_equal(diag_copy_out(&d, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(diag_set_records_code_and_formatted_message),
		cmocka_unit_test(diag_functions_accept_a_null_diag),
		cmocka_unit_test(diag_set_first_keeps_the_first_error),
		cmocka_unit_test(diag_prefix_prepends_context),
		cmocka_unit_test(diag_set_truncates_a_long_message),
		cmocka_unit_test(diag_prefix_truncates_at_the_end),
		cmocka_unit_test(diag_copy_out_copies_cuts_and_returns_the_code),
	};

	return test_run_group("unit-diag", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
