/* SPDX-License-Identifier: MIT */
/* tests/agent/test_parity.c: issue 11's agent pieces: report grouping, tails, env and argv. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/errfile.h"
#include "agent/jobspec.h"
#include "agent/spawn.h"

/* errfile_report() into a malloc'd string. */
static char *report(const struct errfile_failure *f, int n)
{
	char path[] = "/tmp/crun-test-report.XXXXXX", *buf;
	int fd = mkstemp(path);
	off_t len;

	assert_true(fd >= 0);
	unlink(path);
	errfile_report(fd, "heading", f, n);
	len = lseek(fd, 0, SEEK_END);
	assert_true(len > 0);
	buf = calloc(1, (size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)len, 0), len);
	close(fd);
	return buf;
}

static int count(const char *hay, const char *needle)
{
	const char *p;
	int n = 0;

	for (p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) {
		n++;
	}
	return n;
}

static void report_groups_ranks_that_failed_the_same_way(void **state)
{
	const char *tb = "Traceback (most recent call last):\n  File \"t.py\", line 3\n"
			 "ValueError: x";
	struct errfile_failure f[7];
	static const int ranks[] = {3, 0, 5, 1, 2, 4, 9};
	char *out;
	int i;

	(void)state;
	memset(f, 0, sizeof(f));
	for (i = 0; i < 7; i++) {
		f[i].host = "h";
		f[i].rank = ranks[i];
		f[i].local_rank = ranks[i];
		f[i].exit_code = 1;
		f[i].pid = 100 + i;
		f[i].message = "ValueError: x";
		f[i].detail = tb;
		f[i].detail_what = "traceback";
	}
	f[5].message = "KeyError: 'k'"; /* rank 4 failed another way */
	f[5].detail = NULL;
	f[6].signal = 9; /* rank 9 was killed */
	f[6].message = "";
	out = report(f, 7);
	assert_int_equal(count(out, "  ranks 0-3, 5: exit 1: ValueError: x (last lines of rank 3's "
				    "traceback)\n"),
			 1);
	assert_int_equal(count(out, "  rank 4: exit 1: KeyError: 'k'\n"), 1);
	assert_int_equal(count(out, "  rank 9: SIGKILL (9) (last lines of its traceback)\n"), 1);
	/* Each group's lines once, indented; one table row per failure. */
	assert_int_equal(count(out, "\n    ValueError: x\n"), 2);
	assert_int_equal(count(out, "  first "), 1);
	assert_int_equal(count(out, "\n  rank"), 3);
	free(out);
}

static void report_single_failure_without_details_is_the_table(void **state)
{
	struct errfile_failure f = {.host = "h", .rank = 2, .exit_code = 3, .message = "m"};
	char *out;

	(void)state;
	out = report(&f, 1);
	assert_int_equal(count(out, "\n"), 3); /* heading, column names, one row */
	free(out);
}

static void report_caps_the_table_but_groups_all(void **state)
{
	struct errfile_failure f[40];
	char *out;
	int i;

	(void)state;
	memset(f, 0, sizeof(f));
	for (i = 0; i < 40; i++) {
		f[i] = (struct errfile_failure){.host = "h", .rank = 39 - i, .exit_code = 2};
	}
	out = report(f, 40);
	assert_int_equal(count(out, "and 24 more failed ranks (all below)"), 1);
	assert_int_equal(count(out, "  ranks 0-39: exit 2\n"), 1);
	free(out);
}

static void format_ranks_makes_ranges(void **state)
{
	static const int r[] = {0, 1, 2, 3, 5, 7, 8, 10};
	char b[64], small[12];

	(void)state;
	assert_int_equal(errfile_format_ranks(r, 8, b, sizeof(b)), 0);
	assert_string_equal(b, "0-3, 5, 7-8, 10");
	assert_int_equal(errfile_format_ranks(r, 1, b, sizeof(b)), 0);
	assert_string_equal(b, "0");
	assert_int_equal(errfile_format_ranks(r, 8, small, sizeof(small)), -ENOSPC);
	assert_non_null(strstr(small, "..."));
}

static void last_lines_skip_blank_and_keep_the_last_redraw(void **state)
{
	const char *t = "one\ntwo\n\n  \nthree 10%\rthree 100%\r\n";
	char out[128];

	(void)state;
	assert_int_equal(errfile_last_lines(t, strlen(t), 2, out, sizeof(out)), 2);
	assert_string_equal(out, "two\nthree 100%");
	assert_int_equal(errfile_last_lines(t, strlen(t), 9, out, sizeof(out)), 3);
	assert_string_equal(out, "one\ntwo\nthree 100%");
	assert_int_equal(errfile_last_lines("", 0, 3, out, sizeof(out)), 0);
	assert_string_equal(out, "");
	/* No newline at the end, a control byte shown as '?'. */
	assert_int_equal(errfile_last_lines("a\nb\x01" "c", 5, 1, out, sizeof(out)), 1);
	assert_string_equal(out, "b?c");
}

static void tail_ring_keeps_the_end_of_stderr(void **state)
{
	struct errfile_tail *t = calloc(1, sizeof(*t));
	char line[64], out[512];
	int i;

	(void)state;
	assert_non_null(t);
	for (i = 0; i < 1000; i++) {
		snprintf(line, sizeof(line), "line %d of the worker's stderr\n", i);
		errfile_tail_feed(t, line, strlen(line));
	}
	errfile_tail_feed(t, "ValueError: x", 13); /* split across two reads */
	errfile_tail_feed(t, "yz\n", 3);
	assert_int_equal(errfile_tail_lines(t, 2, out, sizeof(out)), 2);
	assert_string_equal(out, "line 999 of the worker's stderr\nValueError: xyz");
	/* One read larger than the ring: only its end stays. */
	memset(t, 0, sizeof(*t));
	{
		size_t big = ERRFILE_TAIL_BYTES * 3;
		char *b = malloc(big);

		assert_non_null(b);
		memset(b, 'x', big);
		memcpy(b + big - 6, "\nlast\n", 6);
		errfile_tail_feed(t, b, big);
		free(b);
	}
	assert_int_equal(errfile_tail_lines(t, 3, out, sizeof(out)), 1);
	assert_string_equal(out, "last");
	free(t);
}

static void errfile_reads_the_traceback_end(void **state)
{
	const char *doc = "{\"message\": {\"message\": \"ValueError: bad\", \"extraInfo\": "
			  "{\"py_callstack\": \"Traceback (most recent call last):\\n  File "
			  "\\\"t.py\\\", line 3, in f\\n    raise ValueError(\\\"bad\\\")\\n"
			  "ValueError: bad\\n\", \"timestamp\": \"17\"}}}";
	char msg[128], stack[64], small[24];

	(void)state;
	assert_int_equal(errfile_parse(doc, strlen(doc), msg, sizeof(msg), stack, sizeof(stack)),
			 0);
	assert_string_equal(msg, "ValueError: bad");
	/* The stack did not fit: its end was kept, newlines and all. */
	assert_non_null(strstr(stack, "\nValueError: bad\n"));
	assert_int_equal(errfile_parse(doc, strlen(doc), msg, sizeof(msg), small, sizeof(small)),
			 0);
	assert_non_null(strstr(small, "ValueError: bad"));
	/* None: empty. */
	assert_int_equal(errfile_parse("{\"message\": \"m\"}", 16, msg, sizeof(msg), stack,
				       sizeof(stack)),
			 0);
	assert_string_equal(stack, "");
}

static void worker_env_sets_both_nccl_async_names(void **state)
{
	struct job_spec spec;
	struct spawn_env e;
	struct spawn_worker_info wi = {
		.spec = &spec, .world_size = 1, .group_world_size = 1, .run_id = "j",
		.master_addr = "127.0.0.1", .master_port = 1,
	};
	char u1[] = "NCCL_ASYNC_ERROR_HANDLING=0", u2[] = "TORCH_NCCL_ASYNC_ERROR_HANDLING=2";
	char *none[] = {NULL}, *user[] = {u1, u2, NULL};

	(void)state;
	memset(&spec, 0, sizeof(spec));
	spec.nproc_per_node = 1;
	assert_int_equal(spawn_worker_env(&wi, none, &e), 0);
	assert_string_equal(spawn_env_get(&e, "NCCL_ASYNC_ERROR_HANDLING"), "1");
	assert_string_equal(spawn_env_get(&e, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
	spawn_env_finish(&e);
	assert_int_equal(spawn_worker_env(&wi, user, &e), 0);
	assert_string_equal(spawn_env_get(&e, "NCCL_ASYNC_ERROR_HANDLING"), "0");
	assert_string_equal(spawn_env_get(&e, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "2");
	spawn_env_finish(&e);
}

static void worker_argv_local_rank_styles(void **state)
{
	struct job_spec spec;
	char prog[] = "t.py", py[] = "python3", path[] = "/usr/bin/python3", a1[] = "x";
	char *args[] = {a1, NULL};
	char **argv;

	(void)state;
	memset(&spec, 0, sizeof(spec));
	spec.program_kind = PROGRAM_PYTHON;
	spec.program = prog;
	spec.python_exec = py;
	spec.python_path = path;
	spec.args = args;
	spec.nargs = 1;
	spec.local_rank_arg = LOCAL_RANK_ARG_DASH;
	assert_int_equal(spawn_worker_argv(&spec, 3, &argv), 0);
	/* The interpreter found at start, not PATH's python3 at exec time. */
	assert_string_equal(argv[0], "/usr/bin/python3");
	assert_string_equal(argv[1], "-u");
	assert_string_equal(argv[2], "t.py");
	assert_string_equal(argv[3], "--local-rank=3");
	assert_string_equal(argv[4], "x");
	assert_null(argv[5]);
	spawn_argv_free(argv);
	spec.local_rank_arg = LOCAL_RANK_ARG_NONE;
	spec.program_kind = PROGRAM_EXEC;
	assert_int_equal(spawn_worker_argv(&spec, 3, &argv), 0);
	assert_string_equal(argv[0], "t.py");
	assert_string_equal(argv[1], "x");
	assert_null(argv[2]);
	spawn_argv_free(argv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(report_groups_ranks_that_failed_the_same_way),
		cmocka_unit_test(report_single_failure_without_details_is_the_table),
		cmocka_unit_test(report_caps_the_table_but_groups_all),
		cmocka_unit_test(format_ranks_makes_ranges),
		cmocka_unit_test(last_lines_skip_blank_and_keep_the_last_redraw),
		cmocka_unit_test(tail_ring_keeps_the_end_of_stderr),
		cmocka_unit_test(errfile_reads_the_traceback_end),
		cmocka_unit_test(worker_env_sets_both_nccl_async_names),
		cmocka_unit_test(worker_argv_local_rank_styles),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
