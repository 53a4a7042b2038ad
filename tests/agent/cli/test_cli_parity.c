/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/test_cli_parity.c: torchrun's habits on the command line (issue 11). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>

#include "tests/agent/cli/cli_fixture.h"

static void expect_usage(const char *const *args, const char *msg)
{
	struct job_spec s;
	struct crun_diag d;

	assert_int_equal(parse(args, &s, &d), CLI_USAGE);
	if (strcmp(d.msg, msg) != 0) {
		fail_msg("expected \"%s\", got \"%s\"", msg, d.msg);
	}
	jobspec_finish(&s);
}

static void rdzv_conf_takes_torchruns_keys(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	/* torchrun always passes timeout (900 by default): the join timeout. */
	assert_int_equal(parse(ARGS("--rdzv-conf",
				    "store_type=TCP,use_libuv=0,timeout=90,read_timeout=7,rank=3",
				    "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv.join_timeout_ms, 90000);
	assert_int_equal(s.rdzv.read_timeout_ms, 7000);
	jobspec_finish(&s);
	/* join_timeout wins over timeout, in any order. */
	assert_int_equal(parse(ARGS("--rdzv-conf", "join_timeout=5,timeout=90", "true"), &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv.join_timeout_ms, 5000);
	jobspec_finish(&s);
	/* A key crun does not read: a warning, not a failure. */
	assert_int_equal(parse(ARGS("--rdzv-conf", "store_connect_wait_seconds=3,heartbeat=5",
				    "true"),
			       &s, &d),
			 CLI_OK);
	jobspec_finish(&s);
}

static void rdzv_conf_refuses_typos_and_bad_values(void **state)
{
	(void)state;
	expect_usage(ARGS("--rdzv-conf", "last_call_timeot=1", "true"),
		     "--rdzv-conf: unknown key \"last_call_timeot\" (did you mean "
		     "last_call_timeout?)");
	expect_usage(ARGS("--rdzv-conf", "is_hots=1", "true"),
		     "--rdzv-conf: unknown key \"is_hots\" (did you mean is_host?)");
	expect_usage(ARGS("--rdzv-conf", "store_type=file", "true"),
		     "--rdzv-conf: store_type=file: use --rdzv-backend file --rdzv-endpoint "
		     "file:///SHARED/PATH (crun's shared-file store)");
	expect_usage(ARGS("--rdzv-conf", "store_type=redis", "true"),
		     "--rdzv-conf: store_type: expected tcp or file, got \"redis\"");
	expect_usage(ARGS("--rdzv-conf", "use_libuv=maybe", "true"),
		     "--rdzv-conf: use_libuv: expected 0 or 1, got \"maybe\"");
	expect_usage(ARGS("--rdzv-conf", "timeout=0", "true"),
		     "--rdzv-conf: timeout: expected seconds above 0, got \"0\"");
}

static void local_rank_arg_styles(void **state)
{
	const struct {
		const char *const *args;
		const char *pet;
		enum local_rank_arg want;
	} cases[] = {
		{ARGS("true"), NULL, LOCAL_RANK_ARG_NONE},
		{ARGS("--local-rank-arg", "true"), NULL, LOCAL_RANK_ARG_UNDERSCORE},
		{ARGS("--local_rank_arg=underscore", "true"), NULL, LOCAL_RANK_ARG_UNDERSCORE},
		{ARGS("--local-rank-arg=dash", "true"), NULL, LOCAL_RANK_ARG_DASH},
		{ARGS("--local-rank-arg=none", "true"), NULL, LOCAL_RANK_ARG_NONE},
		{ARGS("--use-env", "true"), NULL, LOCAL_RANK_ARG_NONE},
		{ARGS("--use_env", "--local-rank-arg=none", "true"), NULL, LOCAL_RANK_ARG_NONE},
		{ARGS("true"), "dash", LOCAL_RANK_ARG_DASH},
		{ARGS("true"), "1", LOCAL_RANK_ARG_UNDERSCORE},
		{ARGS("true"), "0", LOCAL_RANK_ARG_NONE},
		/* The command line wins over the environment. */
		{ARGS("--local-rank-arg=underscore", "true"), "dash", LOCAL_RANK_ARG_UNDERSCORE},
	};
	struct job_spec s;
	struct crun_diag d;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		if (cases[i].pet != NULL) {
			setenv("PET_LOCAL_RANK_ARG", cases[i].pet, 1);
		}
		assert_int_equal(parse(cases[i].args, &s, &d), CLI_OK);
		if (s.local_rank_arg != cases[i].want) {
			fail_msg("case %zu: got style %d, want %d", i, (int)s.local_rank_arg,
				 (int)cases[i].want);
		}
		jobspec_finish(&s);
		unsetenv("PET_LOCAL_RANK_ARG");
	}
	/* Without '=' the next word is the program, as before (a program may be called dash). */
	assert_int_equal(parse(ARGS("--local-rank-arg", "dash"), &s, &d), CLI_OK);
	assert_int_equal(s.local_rank_arg, LOCAL_RANK_ARG_UNDERSCORE);
	assert_non_null(strstr(s.program, "dash"));
	jobspec_finish(&s);
	expect_usage(ARGS("--local-rank-arg=hyphen", "true"),
		     "--local-rank-arg: expected none, underscore (--local_rank=N) or dash "
		     "(--local-rank=N), got \"hyphen\"");
	expect_usage(ARGS("--use-env", "--local-rank-arg=dash", "true"),
		     "--local-rank-arg: cannot be combined with --use-env (which means: no "
		     "--local-rank argument, LOCAL_RANK only)");
	expect_usage(ARGS("--use-env=1", "true"), "--use-env: takes no value");
}

static void exit_code_modes(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_OK);
	assert_false(s.exit_code_torchrun);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--exit-code", "torchrun", "true"), &s, &d), CLI_OK);
	assert_true(s.exit_code_torchrun);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--exit_code=crun", "true"), &s, &d), CLI_OK);
	assert_false(s.exit_code_torchrun);
	jobspec_finish(&s);
	expect_usage(ARGS("--exit-code", "1", "true"),
		     "--exit-code: expected crun or torchrun, got \"1\"");
}

static void python_interpreter_order(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	/* Default: python3 from PATH, resolved to the path workers run. */
	assert_int_equal(parse(ARGS(py_file), &s, &d), CLI_OK);
	assert_string_equal(s.python_exec, "python3");
	assert_non_null(s.python_path);
	assert_non_null(strstr(s.python_path, "/python3"));
	jobspec_finish(&s);
	/* --python names it, found as execvp() would. */
	assert_int_equal(parse(ARGS("--python", "sh", py_file), &s, &d), CLI_OK);
	assert_string_equal(s.python_exec, "sh");
	assert_non_null(strstr(s.python_path, "/sh"));
	jobspec_finish(&s);
	/* $PYTHON_EXEC wins over --python, as it wins over sys.executable in torchrun. */
	setenv("PYTHON_EXEC", exec_file, 1);
	assert_int_equal(parse(ARGS("--python", "sh", py_file), &s, &d), CLI_OK);
	assert_string_equal(s.python_path, exec_file);
	jobspec_finish(&s);
	unsetenv("PYTHON_EXEC");
	expect_usage(ARGS("--python", "/no/such/python", py_file),
		     "python interpreter /no/such/python: no such file");
	/* Not a Python program: --python is not looked at. */
	assert_int_equal(parse(ARGS("--python", "/no/such/python", exec_file), &s, &d), CLI_OK);
	assert_null(s.python_path);
	jobspec_finish(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(rdzv_conf_takes_torchruns_keys, each_teardown),
		cmocka_unit_test_teardown(rdzv_conf_refuses_typos_and_bad_values, each_teardown),
		cmocka_unit_test_teardown(local_rank_arg_styles, each_teardown),
		cmocka_unit_test_teardown(exit_code_modes, each_teardown),
		cmocka_unit_test_teardown(python_interpreter_order, each_teardown),
	};

	clear_pet_env();
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
