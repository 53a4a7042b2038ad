/* SPDX-License-Identifier: MIT */
/*
 * tests/agent/cli/test_cli_torch2.c: what torchrun 2.x job scripts use beyond crun's first round:
 * option prefixes (argparse's allow_abbrev), --event-log-handler, --numa-binding,
 * --duplicate-std*-filters and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli_parser.h"
#include "tests/agent/cli/cli_fixture.h"

#define TEMPLATE_ENV "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"

static void ok(const char *const *args, struct job_spec *s)
{
	struct crun_diag d;
	int rc = parse(args, s, &d);

	if (rc != CLI_OK) {
		fail_msg("parse failed: %s", d.msg);
	}
}

static void bad(const char *const *args, const char *msg)
{
	struct job_spec s;
	struct crun_diag d;

	assert_int_equal(parse(args, &s, &d), CLI_USAGE);
	assert_string_equal(d.msg, msg);
	jobspec_finish(&s);
}

/*
 * crun(1) says crun takes every torchrun flag: each long name (and its underscore spelling)
 * of torch/distributed/run.py's parser in torch 2.6 and later, and torch.distributed.launch's
 * --use-env, is an option of crun's table, and -m, -r, -t are its short letters.
 */
static void every_torchrun_flag_is_an_option(void **state)
{
	static const char *const flags[] = {
		"nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id",
		"rdzv-conf", "standalone", "max-restarts", "monitor-interval", "start-method",
		"event-log-handler", "role", "module", "no-python", "run-path", "log-dir",
		"redirects", "tee", "local-ranks-filter", "duplicate-stdout-filters",
		"duplicate-stderr-filters", "node-rank", "master-addr", "master-port",
		"local-addr", "logs-specs", "numa-binding", "signals-to-handle",
		"shutdown-timeout", "virtual-local-rank", "use-env", "use_env", "nproc_per_node",
		"duplicate_stderr_filters", "event_log_handler", "numa_binding"};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		if (opt_find_long(&cli_table, flags[i], strlen(flags[i])) < 0) {
			fail_msg("torchrun's --%s is not an option of crun", flags[i]);
		}
	}
	assert_int_equal(opt_find_short(&cli_table, 'm'), O_MODULE);
	assert_int_equal(opt_find_short(&cli_table, 'r'), O_REDIRECTS);
	assert_int_equal(opt_find_short(&cli_table, 't'), O_TEE);
}

static void unique_prefixes_select_their_option(void **state)
{
	struct job_spec s;

	(void)state;
	ok(ARGS("--stand", "--nproc", "3", "true"), &s);
	assert_true(s.standalone);
	assert_int_equal(s.nproc_per_node, 3);
	jobspec_finish(&s);

	/* underscores as dashes, the value after '=', and in the middle of a name */
	ok(ARGS("--nproc_per=2", "--max-r", "4", "--shutdown", "5", "true"), &s);
	assert_int_equal(s.nproc_per_node, 2);
	assert_int_equal(s.max_restarts, 4);
	assert_int_equal(s.shutdown_timeout_ms, 5000);
	jobspec_finish(&s);

	/* an exact name wins over a longer one it begins */
	ok(ARGS("--restart-backoff", "2", "true"), &s);
	assert_int_equal(s.restart_backoff_ms, 2000);
	assert_int_equal(s.restart_backoff_max_ms, 30000);
	jobspec_finish(&s);
	ok(ARGS("--restart-backoff-m", "7", "true"), &s);
	assert_int_equal(s.restart_backoff_max_ms, 7000);
	jobspec_finish(&s);
}

static void ambiguous_and_unknown_prefixes_fail(void **state)
{
	(void)state;
	bad(ARGS("--no", "true"), "--no: ambiguous option: could be --node-rank, "
				  "--no-agent-store, --no-python");
	bad(ARGS("--tls=x", "true"), "--tls: ambiguous option: could be --tls-ca, --tls-cert, "
				     "--tls-key, --tls-server-name");
	bad(ARGS("--standalonex", "true"), "--standalonex: unknown option (see crun --help)");
	/* a prefix that is a flag still takes no value */
	bad(ARGS("--stand=1", "true"), "--stand: takes no value");
}

static void environment_variables_stay_exact(void **state)
{
	struct job_spec s;

	(void)state;
	setenv("PET_STAND", "1", 1);
	setenv("PET_NPROC", "5", 1);
	ok(ARGS("true"), &s);
	assert_false(s.standalone);
	assert_int_equal(s.nproc_per_node, 1);
	jobspec_finish(&s);
}

static void torchrun_2x_flags_are_taken(void **state)
{
	struct job_spec s;

	(void)state;
	ok(ARGS("--event-log-handler", "console", "--numa_binding=node", "--log-dir", tmpdir,
		"--duplicate-stdout-filters", "loss,acc,,uracy,,", "--duplicate_stderr_filters",
		"Warning", "true"),
	   &s);
	assert_string_equal(s.event_log_handler, "console");
	assert_string_equal(s.numa_binding, "node");
	assert_non_null(s.dup_filters[0]);
	assert_string_equal(s.dup_filters[0][0], "loss");
	assert_string_equal(s.dup_filters[0][1], "acc,uracy,");
	assert_null(s.dup_filters[0][2]);
	assert_string_equal(s.dup_filters[1][0], "Warning");
	assert_null(s.dup_filters[1][1]);
	jobspec_finish(&s);

	/* the PET_ variables the table derives */
	setenv("PET_EVENT_LOG_HANDLER", "dynamic_rendezvous", 1);
	setenv("PET_DUPLICATE_STDOUT_FILTERS", "x", 1);
	ok(ARGS("true"), &s);
	assert_string_equal(s.event_log_handler, "dynamic_rendezvous");
	assert_string_equal(s.dup_filters[0][0], "x");
	assert_null(s.dup_filters[1]);
	jobspec_finish(&s);

	/* an empty list duplicates nothing */
	ok(ARGS("--duplicate-stdout-filters", "", "true"), &s);
	assert_null(s.dup_filters[0]);
	jobspec_finish(&s);
}

static void torchrun_2x_flags_refuse_bad_names(void **state)
{
	(void)state;
	bad(ARGS("--event-log-handler", "my_plugin", "true"),
	    "--event-log-handler: unknown name \"my_plugin\" (expected one of null, console, "
	    "dynamic_rendezvous)");
	bad(ARGS("--numa-binding", "gpu", "true"),
	    "--numa-binding: unknown name \"gpu\" (expected one of node, socket, exclusive, "
	    "core-complex)");
	bad(ARGS("--duplicate-stdout-filters", "a\tb", "true"),
	    "--duplicate-stdout-filters: control character in value");
}

static void prefix_template_from_the_environment(void **state)
{
	struct job_spec s;

	(void)state;
	setenv(TEMPLATE_ENV, "[${role_name}/$rank:${local_rank}] $$ ", 1);
	ok(ARGS("--role", "trainer", "true"), &s);
	assert_string_equal(s.log_prefix, "[{role}/{rank}:{local_rank}] $ ");
	jobspec_finish(&s);

	/* --log-prefix wins */
	ok(ARGS("--log-prefix", "{host}|", "true"), &s);
	assert_string_equal(s.log_prefix, "{host}|");
	jobspec_finish(&s);

	setenv(TEMPLATE_ENV, "${rank} ${node}", 1);
	bad(ARGS("true"), TEMPLATE_ENV ": unknown variable at \"${node}\" (use ${role_name}, "
				       "${rank}, ${local_rank}, or $$ for a dollar)");
	setenv(TEMPLATE_ENV, "${rank", 1);
	bad(ARGS("true"), TEMPLATE_ENV ": unknown variable at \"${rank\" (use ${role_name}, "
				       "${rank}, ${local_rank}, or $$ for a dollar)");
	setenv(TEMPLATE_ENV, "{rank}", 1);
	bad(ARGS("true"), TEMPLATE_ENV ": \"{\" outside ${...} is not supported (crun's prefix "
				       "fields use braces; see --log-prefix)");
	unsetenv(TEMPLATE_ENV);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(every_torchrun_flag_is_an_option, each_teardown),
		cmocka_unit_test_teardown(unique_prefixes_select_their_option, each_teardown),
		cmocka_unit_test_teardown(ambiguous_and_unknown_prefixes_fail, each_teardown),
		cmocka_unit_test_teardown(environment_variables_stay_exact, each_teardown),
		cmocka_unit_test_teardown(torchrun_2x_flags_are_taken, each_teardown),
		cmocka_unit_test_teardown(torchrun_2x_flags_refuse_bad_names, each_teardown),
		cmocka_unit_test_teardown(prefix_template_from_the_environment, each_teardown),
	};

	unsetenv(TEMPLATE_ENV);
	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("cli-torch2", tests, group_setup, group_teardown);
}
