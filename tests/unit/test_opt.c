/* SPDX-License-Identifier: MIT */
/* tests/unit/test_opt.c: src/opt (the option engine of every program) and src/opt_store (the
 * store's option group and its one handler), on a table of their own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/opt.h"
#include "src/opt_store.h"
#include "tests/lib/cmocka_skip.h"

enum {
	T_COUNT_,
	T_NAME,
	T_FLAG,
	T_STYLE,
	T_WATCH,
	T_ENDPOINT,
	T_TOKEN_FILE,
	T_INSECURE,
	T_TLS_CA,
	T_TLS_CERT,
	T_TLS_KEY,
	T_HELP,
	T_VERSION,
	T_N
};

static int usage_calls;

static void usage(FILE *out)
{
	(void)out;
	usage_calls++;
}

static const struct opt opts[T_N] = {
	[T_COUNT_] = {"count", 'c', true, true, "N", "a count", "Section"},
	[T_NAME] = {"long-name", 0, true, false, "NAME", "a name", NULL, false, false, NULL,
		    "TEST_OPT_EXPLICIT", OPT_VALUE},
	[T_FLAG] = {"flag", 'f', false, true, NULL, "a flag", NULL},
	[T_STYLE] = {"style", 0, false, false, "S", "optional after =", NULL, true},
	[T_WATCH] = {"watch", 0, false, false, "SEC", "optional, also next", NULL, false, true},
	[T_ENDPOINT] = OPT_STORE_ENDPOINT(NULL, false, NULL, "EP", "the store"),
	[T_TOKEN_FILE] = OPT_STORE_TOKEN_FILE(NULL, "token"),
	[T_INSECURE] = OPT_STORE_INSECURE(NULL, "insecure"),
	[T_TLS_CA] = OPT_STORE_TLS_CA(NULL, NULL, "ca"),
	[T_TLS_CERT] = OPT_STORE_TLS_CERT(NULL, NULL, "cert"),
	[T_TLS_KEY] = OPT_STORE_TLS_KEY(NULL, NULL, "key"),
	[T_HELP] = OPT_HELP_ENTRY(NULL),
	[T_VERSION] = OPT_VERSION_ENTRY,
};

static const int ids[OS_COUNT] = {
	[OS_ENDPOINT] = T_ENDPOINT, [OS_TOKEN_FILE] = T_TOKEN_FILE,
	[OS_INSECURE] = T_INSECURE, [OS_TLS_CA] = T_TLS_CA,
	[OS_TLS_CERT] = T_TLS_CERT, [OS_TLS_KEY] = T_TLS_KEY,
	[OS_TLS_SERVER_NAME] = -1,  [OS_CONFIG] = -1,
};

static struct opt_table table = {
	.prog = "prog",
	.opts = opts,
	.n = T_N,
	.env_prefix = "TEST_OPT_",
	.operands = true,
	.usage = usage,
	.version = "prog 1",
};

static struct opt_val v[T_N];
static struct crun_diag d;
static int first;

/* Parse {"prog", @words..., NULL} into v; returns OPT_OK, OPT_EXIT or OPT_USAGE. */
static int parse_words(const char *const *words)
{
	char *argv[16] = {(char *)"prog"};
	int argc = 1;

	while (words[argc - 1] != NULL && argc < 15) {
		argv[argc] = (char *)words[argc - 1]; /* the engine does not write to argv */
		argc++;
	}
	memset(v, 0, sizeof(v));
	memset(&d, 0, sizeof(d));
	return opt_read_argv(&table, v, argc, argv, &first, &d);
}

#define PARSE(...) parse_words((const char *const[]){__VA_ARGS__, NULL})

static void long_short_equals_and_underscores_read_alike(void **state)
{
	(void)state;
	assert_int_equal(PARSE("--count=3", "--long_name", "x", "-f", "prog-arg", "--count"),
			 OPT_OK);
	assert_string_equal(v[T_COUNT_].val, "3");
	assert_string_equal(v[T_COUNT_].origin, "--count");
	assert_string_equal(v[T_NAME].val, "x");
	assert_string_equal(v[T_NAME].origin, "--long_name");
	assert_true(v[T_FLAG].set);
	assert_int_equal(first, 5); /* the operand ends the options */
	assert_int_equal(PARSE("-c5"), OPT_OK);
	assert_string_equal(v[T_COUNT_].val, "5");
	assert_int_equal(PARSE("-c=6", "-c", "-1"), OPT_OK);
	assert_string_equal(v[T_COUNT_].val, "-1"); /* the later one; "-1" is a value */
	assert_string_equal(v[T_COUNT_].origin, "-c");
	assert_int_equal(PARSE("--endpoint", "h:1"), OPT_OK); /* the alias */
	assert_string_equal(v[T_ENDPOINT].val, "h:1");
	assert_int_equal(PARSE("-e", "h:2"), OPT_OK);
	assert_string_equal(v[T_ENDPOINT].val, "h:2");
	assert_int_equal(PARSE("--", "--count"), OPT_OK);
	assert_false(v[T_COUNT_].set);
	assert_int_equal(first, 2);
}

static void mistakes_name_the_option(void **state)
{
	(void)state;
	assert_int_equal(PARSE("--nope=1"), OPT_USAGE);
	assert_string_equal(d.msg, "--nope: unknown option (see prog --help)");
	assert_int_equal(PARSE("-z"), OPT_USAGE);
	assert_string_equal(d.msg, "-z: unknown option (see prog --help)");
	assert_int_equal(PARSE("--count"), OPT_USAGE);
	assert_string_equal(d.msg, "--count: missing value (N)");
	assert_int_equal(PARSE("--count", "--flag"), OPT_USAGE);
	assert_string_equal(d.msg, "--count: missing value (N)");
	assert_int_equal(PARSE("--flag=1"), OPT_USAGE);
	assert_string_equal(d.msg, "--flag: takes no value");
	assert_int_equal(PARSE("-fx"), OPT_USAGE);
	assert_string_equal(d.msg, "-f: takes no value (got \"-fx\")");
	table.operands = false;
	assert_int_equal(PARSE("--flag", "stray"), OPT_USAGE);
	table.operands = true;
	assert_string_equal(d.msg, "unexpected argument \"stray\" (see prog --help)");
}

static void optional_values(void **state)
{
	(void)state;
	assert_int_equal(PARSE("--style", "word"), OPT_OK);
	assert_string_equal(v[T_STYLE].val, "1"); /* only after '=': "word" is the operand */
	assert_int_equal(first, 2);
	assert_int_equal(PARSE("--style=dash"), OPT_OK);
	assert_string_equal(v[T_STYLE].val, "dash");
	assert_int_equal(PARSE("--watch", "5"), OPT_OK);
	assert_string_equal(v[T_WATCH].val, "5");
	assert_int_equal(PARSE("--watch=7"), OPT_OK);
	assert_string_equal(v[T_WATCH].val, "7");
	assert_int_equal(PARSE("--watch", "--flag"), OPT_OK);
	assert_true(v[T_WATCH].set);
	assert_null(v[T_WATCH].val);
	assert_true(v[T_FLAG].set);
}

static void help_and_version_stop_parsing(void **state)
{
	(void)state;
	usage_calls = 0;
	assert_int_equal(PARSE("--count", "1", "-h", "--nope"), OPT_EXIT);
	assert_int_equal(usage_calls, 1);
	assert_int_equal(PARSE("--help"), OPT_EXIT);
	assert_int_equal(usage_calls, 2);
	assert_int_equal(PARSE("-V"), OPT_EXIT);
	assert_int_equal(PARSE("--version"), OPT_EXIT);
	assert_int_equal(usage_calls, 2);
}

static void environment_fills_in_and_the_command_line_wins(void **state)
{
	(void)state;
	setenv("TEST_OPT_COUNT", "9", 1);
	setenv("TEST_OPT_FLAG", "1", 1);
	setenv("TEST_OPT_EXPLICIT", "named", 1);
	setenv("TEST_OPT_LONG_NAME", "not read", 1);
	memset(v, 0, sizeof(v));
	opt_read_env(&table, v);
	assert_string_equal(v[T_COUNT_].val, "9");
	assert_string_equal(v[T_COUNT_].origin, "TEST_OPT_COUNT");
	assert_string_equal(v[T_NAME].val, "named");
	assert_true(v[T_FLAG].set);
	assert_false(v[T_TOKEN_FILE].set);
	{
		char *argv[] = {(char *)"prog", (char *)"--count", (char *)"2", NULL};

		assert_int_equal(opt_read_argv(&table, v, 3, argv, &first, &d), OPT_OK);
	}
	assert_string_equal(v[T_COUNT_].val, "2");
	unsetenv("TEST_OPT_COUNT");
	unsetenv("TEST_OPT_FLAG");
	unsetenv("TEST_OPT_EXPLICIT");
	unsetenv("TEST_OPT_LONG_NAME");
}

static void store_group_checks_flags_and_credential_files(void **state)
{
	char dir[] = "/tmp/crun-test-opt-XXXXXX", tok[64], key[64], cert[64];
	struct opt_store_flags f;
	FILE *fp;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(tok, sizeof(tok), "%s/tok", dir);
	snprintf(key, sizeof(key), "%s/key", dir);
	snprintf(cert, sizeof(cert), "%s/cert", dir);
	fp = fopen(tok, "w");
	fputs("t\n", fp);
	fclose(fp);
	fp = fopen(key, "w");
	fclose(fp);
	fp = fopen(cert, "w");
	fclose(fp);
	chmod(tok, 0600);
	chmod(key, 0640);

	assert_int_equal(PARSE("-e", "h:1", "--token-file", tok, "--tls-ca", cert), OPT_OK);
	assert_int_equal(opt_store_take(v, ids, &f, &d), 0);
	assert_string_equal(f.endpoint, "h:1");
	assert_string_equal(f.token_file, tok);
	assert_string_equal(f.tls_ca, cert);
	assert_null(f.tls_key);
	assert_false(f.insecure);

	assert_int_equal(PARSE("--insecure", "--token-file", tok), OPT_OK);
	assert_int_equal(opt_store_take(v, ids, &f, &d), OPT_USAGE);
	assert_string_equal(d.msg, "--token-file: cannot be combined with --insecure");
	assert_int_equal(PARSE("--tls-key", key), OPT_OK);
	assert_int_equal(opt_store_take(v, ids, &f, &d), OPT_USAGE);
	assert_string_equal(d.msg, "--tls-cert and --tls-key go together (give both)");
	assert_int_equal(PARSE("--tls-cert", cert, "--tls_key", key), OPT_OK);
	assert_int_equal(opt_store_take(v, ids, &f, &d), OPT_USAGE);
	assert_non_null(strstr(d.msg, "--tls_key: TLS key file "));
	assert_non_null(strstr(d.msg, ": refused: mode 0640"));
	chmod(tok, 0604);
	assert_int_equal(PARSE("--token-file="
			       "/nonexistent/tok"),
			 OPT_OK);
	assert_int_equal(opt_store_take(v, ids, &f, &d), OPT_USAGE);
	assert_string_equal(d.msg, "--token-file: /nonexistent/tok: No such file or directory");
	assert_int_equal(PARSE("--token-file", tok), OPT_OK);
	assert_int_equal(opt_store_take(v, ids, &f, &d), OPT_USAGE);
	assert_non_null(strstr(d.msg, ": refused: mode 0604"));
	assert_int_equal(PARSE("--tls-ca="), OPT_OK);
	assert_int_equal(opt_store_take(v, ids, &f, &d), OPT_USAGE);
	assert_string_equal(d.msg, "--tls-ca: empty value");

	unlink(tok);
	unlink(key);
	unlink(cert);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(long_short_equals_and_underscores_read_alike),
		cmocka_unit_test(mistakes_name_the_option),
		cmocka_unit_test(optional_values),
		cmocka_unit_test(help_and_version_stop_parsing),
		cmocka_unit_test(environment_fills_in_and_the_command_line_wins),
		cmocka_unit_test(store_group_checks_flags_and_credential_files),
	};

	return test_run_group("unit-opt", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
