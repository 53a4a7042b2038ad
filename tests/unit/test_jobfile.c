/* SPDX-License-Identifier: MIT */
/* tests/unit/test_jobfile.c: crun --config FILE.yaml (src/jobfile.c): keys, types, errors. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/cli.h"
#include "src/cli_parser.h"
#include "src/jobfile.h"

static char dir[64];
static char path[128];

static int group_setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "%s/crun-jobfile.XXXXXX",
		 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(dir) == NULL) {
		return -1;
	}
	snprintf(path, sizeof(path), "%s/job.yaml", dir);
	unsetenv("PET_NNODES");
	unsetenv("PET_NPROC_PER_NODE");
	unsetenv("PET_MAX_RESTARTS");
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	unlink(path);
	rmdir(dir);
	return 0;
}

static void write_job(const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* cli_parse_diag() on "crun --config PATH @extra..." with the file holding @text. */
static int run(const char *text, const char *const *extra, struct job_spec *s, struct crun_diag *d)
{
	char *argv[16];
	int argc = 0, rc;

	write_job(text);
	argv[argc++] = (char *)"crun";
	argv[argc++] = (char *)"--config";
	argv[argc++] = path;
	while (extra != NULL && *extra != NULL && argc < 15) {
		argv[argc++] = (char *)*extra++;
	}
	argv[argc] = NULL;
	memset(d, 0, sizeof(*d));
	rc = cli_parse_diag(argc, argv, s, d);
	return rc;
}

/* The file must fail with a message that starts with "PATH:LINE:COL: " and contains @want. */
static void expect_error(const char *text, int line, int col, const char *want)
{
	struct job_spec s;
	struct crun_diag d;
	char at[200];

	assert_int_equal(run(text, NULL, &s, &d), CLI_USAGE);
	jobspec_finish(&s);
	assert_int_equal(d.code, CRUN_ECONFIG);
	snprintf(at, sizeof(at), "%s:%d:%d: ", path, line, col);
	if (strncmp(d.msg, at, strlen(at)) != 0 || strstr(d.msg, want) == NULL) {
		fail_msg("got \"%s\", want \"%s...%s\"", d.msg, at, want);
	}
}

#define OK_PROG "program: /bin/true\n"

static void whole_job_is_read(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(run(OK_PROG "args: [--lr, 0.1, \"two words\", 3]\n"
				     "nnodes: 1:2\n"
				     "nproc_per_node: 3\n"
				     "rdzv_backend: c10d\n"
				     "rdzv_endpoint: 127.0.0.1:29999\n"
				     "rdzv_id: job-7\n"
				     "rdzv_conf:\n"
				     "  join_timeout: 12\n"
				     "  read_timeout: 2.5\n"
				     "max_restarts: 4\n"
				     "restart_backoff: 0.5\n"
				     "log_dir: /tmp\n"
				     "local_rank_arg: true\n"
				     "insecure: yes\n"
				     "env:\n"
				     "  CRUN_JOBFILE_TEST: \"a b\"\n",
			     NULL, &s, &d),
			 CLI_OK);
	assert_string_equal(s.program, "/bin/true");
	assert_int_equal(s.nargs, 4);
	assert_string_equal(s.args[0], "--lr");
	assert_string_equal(s.args[2], "two words");
	assert_string_equal(s.args[3], "3");
	assert_int_equal(s.min_nodes, 1);
	assert_int_equal(s.max_nodes, 2);
	assert_int_equal(s.nproc_per_node, 3);
	assert_string_equal(s.rdzv_endpoint, "127.0.0.1:29999");
	assert_string_equal(s.rdzv_id, "job-7");
	assert_int_equal(s.rdzv.join_timeout_ms, 12000);
	assert_int_equal(s.rdzv.read_timeout_ms, 2500);
	assert_int_equal(s.max_restarts, 4);
	assert_int_equal(s.restart_backoff_ms, 500);
	assert_string_equal(s.log_dir, "/tmp");
	assert_true(s.local_rank_arg);
	assert_true(s.insecure);
	assert_string_equal(getenv("CRUN_JOBFILE_TEST"), "a b");
	unsetenv("CRUN_JOBFILE_TEST");
	jobspec_finish(&s);
}

static void command_line_and_pet_override_the_file(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	setenv("PET_MAX_RESTARTS", "7", 1);
	assert_int_equal(run(OK_PROG "args: [from-file]\n"
				     "nproc_per_node: 3\n"
				     "max_restarts: 1\n"
				     "rdzv_backend: c10d\n"
				     "rdzv_conf: {join_timeout: 12, read_timeout: 3}\n",
			     (const char *const[]){"--nproc-per-node", "2", "--rdzv-conf",
						   "join_timeout=5", "/bin/echo", NULL},
			     &s, &d),
			 CLI_OK);
	unsetenv("PET_MAX_RESTARTS");
	assert_int_equal(s.nproc_per_node, 2);
	assert_int_equal(s.max_restarts, 7);
	/* a program on the command line brings its own (here no) arguments */
	assert_string_equal(s.program, "/bin/echo");
	assert_int_equal(s.nargs, 0);
	/* rdzv_conf merges: the command line wins per key */
	assert_int_equal(s.rdzv.join_timeout_ms, 5000);
	assert_int_equal(s.rdzv.read_timeout_ms, 3000);
	jobspec_finish(&s);
}

static void rdzv_conf_may_be_the_flag_string(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(run(OK_PROG "rdzv_backend: c10d\nrdzv_conf: join_timeout=9,is_host=0\n",
			     NULL, &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv.join_timeout_ms, 9000);
	assert_int_equal(s.is_host, 0);
	jobspec_finish(&s);
}

static void syntax_error_names_the_place(void **state)
{
	(void)state;
	expect_error(OK_PROG "nnodes: [1\n", 3, 1, "YAML syntax error: did not find expected");
	expect_error(OK_PROG "nnodes: 1\n  bad: indent\n", 3, 6, "YAML syntax error");
	expect_error("program: \"/bin/true\n", 2, 1, "YAML syntax error");
}

static void unknown_key_suggests_the_nearest(void **state)
{
	(void)state;
	expect_error(OK_PROG "nproc: 2\n", 2, 1,
		     "unknown key \"nproc\" (did you mean nproc_per_node?)");
	expect_error(OK_PROG "max_restart: 2\n", 2, 1, "did you mean max_restarts?");
	expect_error(OK_PROG "nproc-per-node: 2\n", 2, 1, "did you mean nproc_per_node?");
	expect_error(OK_PROG "enviroment: {}\n", 2, 1, "unknown key \"enviroment\"");
	expect_error(OK_PROG "zzzzzzzz: 1\n", 2, 1, "unknown key \"zzzzzzzz\" (crun.yaml(5)");
	expect_error(OK_PROG "config: other.yaml\n", 2, 1, "cannot include another");
	expect_error(OK_PROG "help: true\n", 2, 1, "unknown key \"help\"");
}

static void wrong_type_says_expected_and_found(void **state)
{
	(void)state;
	expect_error(OK_PROG "max_restarts: three\n", 2, 15,
		     "max_restarts: expected an integer, found \"three\"");
	expect_error(OK_PROG "max_restarts: \"3\"\n", 2, 15,
		     "max_restarts: expected an integer, found the quoted string \"3\"");
	expect_error(OK_PROG "nnodes: {min: 1}\n", 2, 9,
		     "nnodes: expected a string (N|MIN:MAX), found a mapping");
	expect_error(OK_PROG "standalone: maybe\n", 2, 13,
		     "standalone: expected true or false, found \"maybe\"");
	expect_error(OK_PROG "restart_backoff: soon\n", 2, 18,
		     "restart_backoff: expected a number of seconds, found \"soon\"");
	expect_error(OK_PROG "log_dir:\n", 2, 9, "log_dir: expected a string (DIR), found nothing");
	expect_error(OK_PROG "args: --lr\n", 2, 7, "args: expected a list of strings, found");
	expect_error(OK_PROG "args: [[1]]\n", 2, 8, "args: expected a string, found a list");
	expect_error(OK_PROG "env: [A]\n", 2, 6, "env: expected a mapping of NAME: value");
	expect_error(OK_PROG "env: {A: {b: 1}}\n", 2, 10, "env.A: expected a value");
	expect_error(OK_PROG "env: {\"A B\": 1}\n", 2, 7, "env: expected a variable name");
	expect_error("program: [a, b]\n", 1, 10, "program: expected a program");
	expect_error("- program\n", 1, 1, "expected a mapping of keys");
	expect_error("", 1, 1, "found an empty file");
	expect_error(OK_PROG "---\nnnodes: 1\n", 2, 1, "found a second one");
}

static void bad_value_is_checked_as_on_the_command_line(void **state)
{
	(void)state;
	expect_error(OK_PROG "max_restarts: -1\n", 2, 15, "max_restarts: -1 is out of range");
	expect_error(OK_PROG "nnodes: 3:2\n", 2, 9, "nnodes: MIN 3 is above MAX 2");
	expect_error(OK_PROG "rdzv_backend: zookeeper\n", 2, 15,
		     "rdzv_backend: unknown backend \"zookeeper\"");
	expect_error(OK_PROG "rdzv_backend: c10d\nrdzv_conf:\n  join_timeout: soon\n", 4, 17,
		     "rdzv_conf: join_timeout: expected seconds, got \"soon\"");
	expect_error(OK_PROG "rdzv_backend: c10d\nrdzv_conf: {join_timout: 3}\n", 3, 26,
		     "rdzv_conf: unknown key \"join_timout\" (did you mean join_timeout?)");
	/* "program" once (issue 21: it said "program: program /nonexistent/prog") */
	expect_error("program: /nonexistent/prog\n", 1, 10,
		     ":1:10: program /nonexistent/prog: no such file");
	/* A tab where libyaml says only "cannot start any token" is named (issue 21). */
	expect_error(OK_PROG "args:\n\t- x\n", 3, 1, "YAML syntax error: a tab character");
}

static void duplicate_key_names_both_places(void **state)
{
	(void)state;
	expect_error(OK_PROG "nnodes: 1\nmax_restarts: 0\nnnodes: 2\n", 4, 1,
		     "duplicate key \"nnodes\" (first at line 2, column 1)");
	expect_error(OK_PROG "env:\n  A: 1\n  A: 2\n", 4, 3,
		     "env: duplicate key \"A\" (first at line 3, column 3)");
}

static void missing_file_or_program(void **state)
{
	struct job_spec s;
	struct crun_diag d;
	char *argv[] = {(char *)"crun", (char *)"--config", (char *)"/nonexistent/job.yaml", NULL};

	(void)state;
	memset(&d, 0, sizeof(d));
	assert_int_equal(cli_parse_diag(3, argv, &s, &d), CLI_USAGE);
	jobspec_finish(&s);
	assert_non_null(strstr(d.msg, "--config: /nonexistent/job.yaml: No such file"));
	assert_int_equal(run("nnodes: 1\n", NULL, &s, &d), CLI_USAGE);
	jobspec_finish(&s);
	assert_non_null(strstr(d.msg, "missing PROGRAM: neither the command line nor"));
}

/* Every key a job file takes is documented in crun.yaml(5), as "*key*". */
static void man_page_documents_every_key(void **state)
{
	const char *src = getenv("CRUN_SOURCE_DIR");
	char p[512], key[80], want[96], *page;
	const char *k;
	FILE *f;
	long n;
	int id, i;

	(void)state;
	assert_non_null(src);
	snprintf(p, sizeof(p), "%s/man/crun.yaml.5.scd", src);
	f = fopen(p, "r");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	rewind(f);
	page = calloc((size_t)n + 1, 1);
	assert_non_null(page);
	assert_int_equal(fread(page, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	for (id = 0; id <= O_COUNT; id++) {
		if (id < O_COUNT) {
			k = jobfile_key((enum cli_opt_id)id, key, sizeof(key));
		} else {
			k = "rdzv_conf";
		}
		if (k == NULL) {
			continue;
		}
		snprintf(want, sizeof(want), "\n*%s*:", k);
		if (strstr(page, want) == NULL) {
			fail_msg("man/crun.yaml.5.scd does not document key %s (a line \"*%s*: "
				 "...\")",
				 k, k);
		}
	}
	for (i = 0; jobfile_extra_keys[i] != NULL; i++) {
		snprintf(want, sizeof(want), "\n*%s*:", jobfile_extra_keys[i]);
		if (strstr(page, want) == NULL) {
			fail_msg("man/crun.yaml.5.scd does not document key %s",
				 jobfile_extra_keys[i]);
		}
	}
	free(page);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(whole_job_is_read),
		cmocka_unit_test(command_line_and_pet_override_the_file),
		cmocka_unit_test(rdzv_conf_may_be_the_flag_string),
		cmocka_unit_test(syntax_error_names_the_place),
		cmocka_unit_test(unknown_key_suggests_the_nearest),
		cmocka_unit_test(wrong_type_says_expected_and_found),
		cmocka_unit_test(bad_value_is_checked_as_on_the_command_line),
		cmocka_unit_test(duplicate_key_names_both_places),
		cmocka_unit_test(missing_file_or_program),
		cmocka_unit_test(man_page_documents_every_key),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
