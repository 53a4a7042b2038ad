/* SPDX-License-Identifier: MIT */
/* tests/unit/test_token.c: token files, keys, proofs and fingerprints (src/common/token.c). */
/* RAND_set_rand_method is deprecated in OpenSSL 3; the test uses it only to count calls. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>
#include <openssl/rand.h>

#include "src/common/fs.h"
#include "src/common/token.h"
#include "src/common/util.h"

static char dir[] = "/tmp/crun-unit-token-XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return fs_rm_rf(dir) == 0 ? 0 : -1;
}

static void fingerprint_is_sha256_prefix(void **state)
{
	char fpr[TOKEN_FPR_HEX + 1];

	(void)state;
	/* SHA-256("abc") = ba7816bf8f01cfea 414140de5dae2223... */
	token_fingerprint("abc", 3, fpr);
	assert_string_equal(fpr, "ba7816bf8f01cfea");
}

static void keys_differ_by_scope_and_proofs_by_role(void **state)
{
	uint8_t k0[TOKEN_KEY_LEN], ka[TOKEN_KEY_LEN], kb[TOKEN_KEY_LEN];
	uint8_t sn[TOKEN_NONCE_LEN] = {1}, cn[TOKEN_NONCE_LEN] = {2};
	uint8_t pc[TOKEN_KEY_LEN], ps[TOKEN_KEY_LEN], pc2[TOKEN_KEY_LEN];

	(void)state;
	assert_int_equal(token_derive_key("t", 1, NULL, k0), 0);
	assert_int_equal(token_derive_key("t", 1, "a", ka), 0);
	assert_int_equal(token_derive_key("t", 1, "b", kb), 0);
	assert_false(token_equal(k0, ka, sizeof(k0)));
	assert_false(token_equal(ka, kb, sizeof(ka)));
	assert_int_equal(token_proof(ka, sn, cn, TOKEN_ROLE_CLIENT, pc), 0);
	assert_int_equal(token_proof(ka, sn, cn, TOKEN_ROLE_SERVER, ps), 0);
	assert_int_equal(token_proof(ka, sn, cn, TOKEN_ROLE_CLIENT, pc2), 0);
	assert_true(token_equal(pc, pc2, sizeof(pc)));
	assert_false(token_equal(pc, ps, sizeof(pc)));
	assert_true(token_scope_valid("run-1"));
	assert_false(token_scope_valid("rdzv"));
	assert_false(token_scope_valid("a/b"));
	assert_false(token_scope_valid("a b"));
	assert_false(token_scope_valid(""));
}

static void loose_or_foreign_files_are_refused(void **state)
{
	struct crun_diag d = {0};
	char path[128];
	char *tok = NULL;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "%s/t", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "secret\nsecond line\n", 19), 19);
	close(fd);
	assert_int_equal(token_file_read(path, &tok, &d), 0);
	assert_string_equal(tok, "secret");
	token_wipe(tok);
	assert_int_equal(chmod(path, 0640), 0);
	assert_int_equal(token_file_read(path, &tok, &d), -EACCES);
	assert_non_null(strstr(d.msg, path));
	assert_non_null(strstr(d.msg, "mode 0640"));
	assert_null(tok);
	assert_int_equal(chmod(path, 0602), 0);
	assert_int_equal(token_file_read(path, &tok, &d), -EACCES);
	unlink(path);
}

/*
 * A token file that is a symbolic link is followed and its target checked (mode, owner); a
 * directory anyone may write without a sticky bit, holding the link or its target, is refused
 * naming it and its mode.
 */
static void links_are_followed_and_their_target_checked(void **state)
{
	struct crun_diag d = {0};
	char real[PATH_MAX], link[PATH_MAX], sub[128], path2[PATH_MAX];
	char *tok = NULL;
	int fd;

	(void)state;
	snprintf(sub, sizeof(sub), "%s/secrets", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(real, sizeof(real), "%s/real", sub);
	fd = open(real, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "linked\n", 7), 7);
	close(fd);
	snprintf(link, sizeof(link), "%s/link", dir);
	assert_int_equal(symlink(real, link), 0);
	assert_int_equal(token_file_read(link, &tok, &d), 0);
	assert_string_equal(tok, "linked");
	token_wipe(tok);
	tok = NULL;
	assert_int_equal(chmod(real, 0644), 0);
	assert_int_equal(token_file_read(link, &tok, &d), -EACCES);
	assert_non_null(strstr(d.msg, "mode 0644"));
	assert_int_equal(chmod(real, 0600), 0);
	assert_int_equal(chmod(sub, 0777), 0);
	assert_int_equal(token_file_read(link, &tok, &d), -EPERM);
	assert_non_null(strstr(d.msg, sub));
	assert_non_null(strstr(d.msg, "mode 0777"));
	assert_null(tok);
	assert_int_equal(chmod(sub, 0700), 0);
	snprintf(path2, sizeof(path2), "%s/real", sub);
	assert_int_equal(token_file_read(path2, &tok, &d), 0);
	token_wipe(tok);
	unlink(link);
	unlink(real);
	rmdir(sub);
}

static void concurrent_creators_end_with_one_token(void **state)
{
	enum { N = 8 };
	char path[128], *mine = NULL, *got;
	struct crun_diag d = {0};
	struct stat sb;
	bool created;
	pid_t pids[N];
	int i, st, made = 0;

	(void)state;
	snprintf(path, sizeof(path), "%s/home/.config/crun/token", dir);
	for (i = 0; i < N; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			_exit(token_file_ensure(path, &got, &created, NULL) == 0 ? (created ? 10 : 11)
										: 1);
		}
	}
	for (i = 0; i < N; i++) {
		assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
		assert_true(WIFEXITED(st));
		assert_true(WEXITSTATUS(st) == 10 || WEXITSTATUS(st) == 11);
		made += WEXITSTATUS(st) == 10;
	}
	assert_int_equal(made, 1);
	assert_int_equal(token_file_ensure(path, &mine, &created, &d), 0);
	assert_false(created);
	assert_int_equal(strlen(mine), TOKEN_GEN_HEX);
	token_wipe(mine);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	snprintf(path, sizeof(path), "%s/home/.config/crun", dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);
}

static void job_credential_round_trips(void **state)
{
	struct token_cred c, back;
	struct crun_diag d = {0};
	char path[128];

	(void)state;
	snprintf(path, sizeof(path), "%s/job", dir);
	assert_int_equal(token_cred_from_token(&c, "tok-0123456789abcdef", "run7", "test", &d), 0);
	assert_int_equal(token_cred_write(path, &c, &d), 0);
	assert_int_equal(token_cred_write(path, &c, &d), -EEXIST);
	assert_int_equal(token_cred_load(&back, path, NULL, &d), 0);
	assert_true(back.set);
	assert_string_equal(back.scope, "run7");
	assert_string_equal(back.fpr, c.fpr);
	assert_true(token_equal(back.key, c.key, TOKEN_KEY_LEN));
	assert_int_equal(token_cred_load(&back, path, "run8", &d), -EINVAL);
	unlink(path);
}

/* A token too weak to stand guessing is refused, naming where it came from (issue 20); a
 * generated one is 32 random bytes (64 hex digits) and passes. */
static void weak_tokens_are_refused_naming_their_source(void **state)
{
	struct crun_diag d = {0};
	struct token_cred c;
	char gen[TOKEN_GEN_HEX + 1];

	(void)state;
	assert_int_equal(token_check_strength("secret", "token file /x", &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "token file /x: the token is 6 bytes; at least 16"));
	assert_int_equal(token_check_strength("abababababababababab", "$CRUN_STORE_TOKEN", &d),
			 CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "$CRUN_STORE_TOKEN: the token has too little entropy (2 "
				      "distinct characters"));
	assert_int_equal(token_cred_from_token(&c, "short", NULL, "the given token", &d),
			 CRUN_ECONFIG);
	assert_false(c.set);
	assert_int_equal(token_generate(gen), 0);
	assert_int_equal(strlen(gen), TOKEN_GEN_HEX);
	assert_int_equal(token_check_strength(gen, "a fresh random token", &d), 0);
}

static int drbg_calls;

static int counting_bytes(unsigned char *buf, int num)
{
	(void)buf;
	(void)num;
	drbg_calls++;
	return 0; /* a failure, so a caller still on OpenSSL's generator fails too */
}

/* Nonces, tokens and salts come from getrandom(2): OpenSSL's generator, whose first use costs
 * each new client process about a millisecond (issue 23), is never asked. */
static void random_bytes_do_not_use_openssl_generator(void **state)
{
	static const RAND_METHOD counting = {.bytes = counting_bytes};
	uint8_t a[TOKEN_NONCE_LEN] = {0}, b[TOKEN_NONCE_LEN] = {0}, zero[TOKEN_NONCE_LEN] = {0};
	uint8_t big[4096];
	char gen[TOKEN_GEN_HEX + 1];

	(void)state;
	assert_int_equal(RAND_set_rand_method(&counting), 1);
	assert_int_equal(util_random(a, sizeof(a)), 0);
	assert_int_equal(util_random(b, sizeof(b)), 0);
	assert_int_equal(util_random(big, sizeof(big)), 0);
	assert_int_equal(token_generate(gen), 0);
	RAND_set_rand_method(NULL);
	assert_int_equal(drbg_calls, 0);
	assert_memory_not_equal(a, zero, sizeof(a));
	assert_memory_not_equal(a, b, sizeof(a));
	assert_int_equal(strlen(gen), TOKEN_GEN_HEX);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fingerprint_is_sha256_prefix),
		cmocka_unit_test(keys_differ_by_scope_and_proofs_by_role),
		cmocka_unit_test(loose_or_foreign_files_are_refused),
		cmocka_unit_test(links_are_followed_and_their_target_checked),
		cmocka_unit_test(concurrent_creators_end_with_one_token),
		cmocka_unit_test(job_credential_round_trips),
		cmocka_unit_test(weak_tokens_are_refused_naming_their_source),
		cmocka_unit_test(random_bytes_do_not_use_openssl_generator),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("token", tests, setup, teardown);
}
