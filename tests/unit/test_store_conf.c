/* SPDX-License-Identifier: MIT */
/* tests/unit/test_store_conf.c: the one token policy and the store's configuration value
 * (rendezvous/store/store_conf.c): each source in its order, --insecure, what a client may
 * not do (create the default file), variants and the options and environment it yields. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rendezvous/store/store_conf.h"
#include "src/common/fs.h"
#include "src/common/token.h"

static char dir[] = "/tmp/crun-unit-store-conf-XXXXXX";
static char flag_file[256], default_file[256];

#define HOST_POLICY (STORE_TOKEN_ENV | STORE_TOKEN_DEFAULT | STORE_TOKEN_CREATE | STORE_TOKEN_READ)

static void write_token(const char *path, const char *tok, mode_t mode)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fprintf(f, "%s\n", tok);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
}

static int setup(void **state)
{
	(void)state;
	if (mkdtemp(dir) == NULL) {
		return -1;
	}
	snprintf(flag_file, sizeof(flag_file), "%s/flag-token", dir);
	snprintf(default_file, sizeof(default_file), "%s/cfg/crun/token", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return fs_rm_rf(dir) == 0 ? 0 : -1;
}

/* Every test starts from: no $CRUN_STORE_TOKEN, the default file named and absent. */
static int reset(void **state)
{
	(void)state;
	unsetenv("CRUN_STORE_TOKEN");
	setenv("CRUN_TOKEN_FILE", default_file, 1);
	unlink(default_file);
	write_token(flag_file, "from-the-flag-file", 0600);
	return 0;
}

static void resolve(const struct store_settings *s, unsigned policy, struct store_conf *c)
{
	struct crun_diag d = {0};

	assert_int_equal(store_conf_init(c, s, policy, &d), 0);
	assert_string_equal(d.msg, "");
}

static void token_file_flag_wins(void **state)
{
	struct store_settings s = {
		.endpoint = "h:1", .token_file = flag_file, .token = "given-0123456789abcdef"};
	struct store_conf c;

	(void)state;
	setenv("CRUN_STORE_TOKEN", "from-env-0123456789abcdef", 1);
	resolve(&s, HOST_POLICY | STORE_TOKEN_FRESH, &c);
	assert_string_equal(c.token, "from-the-flag-file");
	assert_string_equal(c.token_file, flag_file);
	assert_non_null(strstr(c.token_src, "token file "));
	/* Taken out of the environment even though a flag won: workers never inherit it. */
	assert_null(getenv("CRUN_STORE_TOKEN"));
	assert_true(c.env_token_dropped);
	store_conf_finish(&c);
	/* A client reads the file when it opens the store: only the path now. */
	resolve(&s, STORE_TOKEN_ENV, &c);
	assert_null(c.token);
	assert_string_equal(c.token_file, flag_file);
	store_conf_finish(&c);
}

static void token_flag_then_env(void **state)
{
	struct store_settings s = {.endpoint = "h:1", .token = "given-0123456789abcdef"};
	struct store_conf c;

	(void)state;
	setenv("CRUN_STORE_TOKEN", "from-env-0123456789abcdef", 1);
	resolve(&s, HOST_POLICY, &c);
	assert_string_equal(c.token, "given-0123456789abcdef");
	store_conf_finish(&c);

	s.token = NULL;
	setenv("CRUN_STORE_TOKEN", "from-env-0123456789abcdef", 1);
	resolve(&s, HOST_POLICY | STORE_TOKEN_FRESH, &c);
	assert_string_equal(c.token, "from-env-0123456789abcdef");
	assert_string_equal(c.token_src, "$CRUN_STORE_TOKEN");
	assert_null(getenv("CRUN_STORE_TOKEN"));
	assert_false(c.env_token_dropped);
	assert_int_equal(access(default_file, F_OK), -1); /* the default was not needed */
	store_conf_finish(&c);
}

static void env_untouched_without_env_policy(void **state)
{
	struct store_settings s = {.endpoint = "h:1"};
	struct store_conf c;

	(void)state;
	/* A worker's library: only what it was given; its environment stays as it is. */
	setenv("CRUN_STORE_TOKEN", "from-env-0123456789abcdef", 1);
	resolve(&s, STORE_TOKEN_FLAGS, &c);
	assert_null(c.token);
	assert_null(c.token_file);
	assert_string_equal(getenv("CRUN_STORE_TOKEN"), "from-env-0123456789abcdef");
	store_conf_finish(&c);
	/* A store with its own access control (file, etcd): taken out, unused, and said so. */
	resolve(&s, STORE_TOKEN_DROP_ENV, &c);
	assert_null(c.token);
	assert_true(c.env_token_dropped);
	assert_null(getenv("CRUN_STORE_TOKEN"));
	store_conf_finish(&c);
}

static void fresh_for_a_private_store(void **state)
{
	struct store_settings s = {.endpoint = "127.0.0.1:0"};
	struct store_conf c, c2;

	(void)state;
	resolve(&s, HOST_POLICY | STORE_TOKEN_FRESH, &c);
	resolve(&s, HOST_POLICY | STORE_TOKEN_FRESH, &c2);
	assert_int_equal(strlen(c.token), TOKEN_GEN_HEX);
	assert_string_not_equal(c.token, c2.token);
	assert_string_equal(c.token_src, "a fresh random token");
	assert_null(c.token_file);
	assert_int_equal(access(default_file, F_OK), -1); /* nobody else needs a file */
	store_conf_finish(&c);
	store_conf_finish(&c2);
}

static void default_file_created_by_a_host_only(void **state)
{
	struct store_settings s = {.endpoint = "h:1"};
	struct store_conf c, c2;
	struct stat sb;

	(void)state;
	/* A client (crun status) never creates it: no token at all. */
	resolve(&s, STORE_TOKEN_ENV | STORE_TOKEN_DEFAULT, &c);
	assert_null(c.token);
	assert_null(c.token_file);
	assert_int_equal(access(default_file, F_OK), -1);
	store_conf_finish(&c);
	/* A host creates it (0600) on first use, and finds it the second time. */
	resolve(&s, HOST_POLICY, &c);
	assert_true(c.token_created);
	assert_string_equal(c.token_file, default_file);
	assert_int_equal(stat(default_file, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	resolve(&s, HOST_POLICY, &c2);
	assert_false(c2.token_created);
	assert_string_equal(c2.token, c.token);
	store_conf_finish(&c2);
	/* Now that it exists, the client uses it (open reads it). */
	resolve(&s, STORE_TOKEN_ENV | STORE_TOKEN_DEFAULT, &c2);
	assert_null(c2.token);
	assert_string_equal(c2.token_file, default_file);
	store_conf_finish(&c2);
	store_conf_finish(&c);
}

static void insecure_has_no_credential(void **state)
{
	struct store_settings s = {.endpoint = "h:1", .insecure = true};
	struct store_conf c;
	struct crun_store_opts o;

	(void)state;
	setenv("CRUN_STORE_TOKEN", "from-env-0123456789abcdef", 1);
	resolve(&s, HOST_POLICY | STORE_TOKEN_FRESH, &c);
	assert_true(c.insecure);
	assert_null(c.token);
	assert_null(c.token_file);
	assert_string_equal(c.token_src, "");
	assert_null(getenv("CRUN_STORE_TOKEN"));
	assert_int_equal(access(default_file, F_OK), -1);
	store_conf_opts(&c, &o);
	assert_null(o.token);
	assert_null(o.token_file);
	store_conf_finish(&c);
}

static void a_bad_source_is_named(void **state)
{
	struct store_settings s = {.endpoint = "h:1", .token_file = flag_file};
	struct crun_diag d = {0};
	struct store_conf c;

	(void)state;
	assert_int_equal(chmod(flag_file, 0644), 0);
	assert_int_equal(store_conf_init(&c, &s, HOST_POLICY, &d), -EACCES);
	assert_non_null(strstr(d.msg, "store token"));
	assert_non_null(strstr(d.msg, flag_file));
	store_conf_finish(&c);
}

static void derive_keeps_tls_and_credential(void **state)
{
	struct store_settings s = {
		.endpoint = "h:1",
		.prefix = "p/",
		.token = "tok-0123456789abcdef",
		.tls_ca = "/ca.pem",
		.tls_cert = "/c.pem",
		.tls_key = "/c.key",
		.tls_server_name = "store",
		.etcd_user = "u",
		.connect_timeout_ms = 1000,
		.timeout_ms = 2000,
	};
	const struct store_conf_variant v = {
		.endpoint = "other:2",
		.no_prefix = true,
		.timeout_ms = 300,
	};
	struct store_conf c, q;
	struct crun_store_opts o;

	(void)state;
	resolve(&s, STORE_TOKEN_FLAGS, &c);
	assert_int_equal(store_conf_derive(&q, &c, &v), 0);
	store_conf_finish(&c); /* the variant owns its copy */
	store_conf_opts(&q, &o);
	assert_true(o.struct_size == sizeof(o));
	assert_string_equal(o.endpoint, "other:2");
	assert_null(o.prefix);
	assert_string_equal(o.token, "tok-0123456789abcdef");
	assert_string_equal(o.tls_ca, "/ca.pem");
	assert_string_equal(o.tls_cert, "/c.pem");
	assert_string_equal(o.tls_key, "/c.key");
	assert_string_equal(o.tls_server_name, "store");
	assert_int_equal(o.connect_timeout_ms, 1000);
	assert_int_equal(o.timeout_ms, 300);
	assert_string_equal(q.etcd_user, "u");
	store_conf_finish(&q);
}

static void workers_inherit_paths_never_the_token(void **state)
{
	struct store_settings s = {.endpoint = "h:1", .token = "secret-0123456789abcdef", .tls_ca = "/ca.pem"};
	struct store_env_var v[STORE_CONF_ENV_MAX];
	struct store_conf c;
	size_t n, i;
	bool saw_file = false, saw_ca = false, saw_cert = false;

	(void)state;
	resolve(&s, STORE_TOKEN_FLAGS, &c);
	n = store_conf_worker_env(&c, "/run/cred", v);
	assert_true(n <= STORE_CONF_ENV_MAX);
	for (i = 0; i < n; i++) {
		assert_true(v[i].val == NULL || strstr(v[i].val, "secret") == NULL);
		if (strcmp(v[i].name, "CRUN_STORE_TOKEN") == 0) {
			assert_null(v[i].val);
			assert_false(v[i].keep);
		} else if (strcmp(v[i].name, "CRUN_STORE_TOKEN_FILE") == 0) {
			saw_file = strcmp(v[i].val, "/run/cred") == 0;
		} else if (strcmp(v[i].name, "CRUN_STORE_TLS_CA") == 0) {
			saw_ca = strcmp(v[i].val, "/ca.pem") == 0;
		} else if (strcmp(v[i].name, "CRUN_STORE_TLS_CERT") == 0) {
			saw_cert = v[i].val == NULL && !v[i].keep; /* a stale one is removed */
		}
	}
	assert_true(saw_file && saw_ca && saw_cert);
	store_conf_finish(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(token_file_flag_wins, reset),
		cmocka_unit_test_setup(token_flag_then_env, reset),
		cmocka_unit_test_setup(env_untouched_without_env_policy, reset),
		cmocka_unit_test_setup(fresh_for_a_private_store, reset),
		cmocka_unit_test_setup(default_file_created_by_a_host_only, reset),
		cmocka_unit_test_setup(insecure_has_no_credential, reset),
		cmocka_unit_test_setup(a_bad_source_is_named, reset),
		cmocka_unit_test_setup(derive_keeps_tls_and_credential, reset),
		cmocka_unit_test_setup(workers_inherit_paths_never_the_token, reset),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
