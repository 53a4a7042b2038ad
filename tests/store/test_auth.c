/* SPDX-License-Identifier: MIT */
/* tests/store/test_auth.c: the challenge-response handshake, its rate limit and scopes, as raw
 * bytes and through the client, against a real crun-rdzvd (docs/protocol.md, "Handshake"). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/wire.h"
#include "src/common/clock.h"
#include "src/common/token.h"
#include "tests/store/helpers.h"

#define TOKEN "auth-test-token-0123456789"

static struct daemon dmn;
static char dir[] = "/tmp/crun-auth-test-XXXXXX";
static char tokfile[256];

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static int group_setup(void **state)
{
	const char *args[] = {"--token-file", tokfile, NULL};

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	unsetenv("CRUN_STORE_TOKEN");
	if (mkdtemp(dir) == NULL) {
		return -1;
	}
	snprintf(tokfile, sizeof(tokfile), "%s/token", dir);
	write_file(tokfile, TOKEN "\n", 0600);
	return daemon_start(&dmn, args) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	char cmd[300];
	int st;

	(void)state;
	st = daemon_stop(&dmn, SIGTERM);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0) {
		return -1;
	}
	return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void clear_token_hello_is_refused_by_version(void **state)
{
	struct wire_buf b = {0};
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	/* Version 1: magic, version, flags, the token itself. */
	wire_put_u32(&b, WIRE_MAGIC);
	wire_put_u16(&b, 1);
	wire_put_u16(&b, 0);
	wire_put_bytes(&b, TOKEN, strlen(TOKEN));
	assert_int_equal(raw_frame(fd, WIRE_OP_HELLO, 3, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_HELLO, 3, WIRE_E_BAD_VERSION,
			 "unsupported protocol version 1 (server speaks 2; version 1 sent the "
			 "token in clear and is no longer accepted: upgrade the client)");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served_with(dmn.port, TOKEN);
}

static void right_token_is_proven_both_ways(void **state)
{
	(void)state;
	/* raw_hello() checks the store's proof too. */
	raw_expect_served_with(dmn.port, TOKEN);
}

/* A wrong proof is refused without the store's fingerprint: a fast hash of the token would
 * let a peer without it test guesses offline (issue 20). */
static void wrong_token_is_refused_without_a_fingerprint(void **state)
{
	char fpr[TOKEN_FPR_HEX + 1], msg[512];
	uint16_t st = 0;
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	token_fingerprint(TOKEN, strlen(TOKEN), fpr);
	assert_int_equal(raw_handshake(fd, "guess-0123456789abcdef", NULL, &st, msg, sizeof(msg)), -EACCES);
	assert_int_equal(st, WIRE_E_AUTH);
	assert_string_equal(msg, "token mismatch: the proof does not match the store's token");
	assert_null(strstr(msg, fpr));
	raw_expect_closed(fd);
	close(fd);
	raw_expect_served_with(dmn.port, TOKEN);
}

static void requests_before_auth_are_refused(void **state)
{
	struct wire_buf b = {0};
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	raw_hello_unproved(fd);
	assert_int_equal(raw_frame(fd, WIRE_OP_PING, 2, NULL, 0), 0);
	raw_expect_error(fd, WIRE_OP_PING, 2, WIRE_E_AUTH, "expected AUTH after HELLO, got op 2");
	raw_expect_closed(fd);
	close(fd);
	/* A proof of the wrong size. */
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	raw_hello_unproved(fd);
	wire_put_bytes(&b, "short", 5);
	assert_int_equal(raw_frame(fd, WIRE_OP_AUTH, 2, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_AUTH, 2, WIRE_E_INVALID, "AUTH: proof of 5 bytes (expected 32)");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served_with(dmn.port, TOKEN);
}

static int client_open(int port, const char *token, const char *file, const char *scope,
		       struct crun_store **st, char *err, size_t errlen)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	char ep[64];

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
	o.endpoint = ep;
	o.token = token;
	o.token_file = file;
	o.scope = scope;
	o.connect_timeout_ms = 5000;
	o.timeout_ms = 5000;
	return crun_store_open(&o, st, err, errlen);
}

static void client_names_file_and_its_fingerprint(void **state)
{
	char other[300], want[1024], ours[TOKEN_FPR_HEX + 1], theirs[TOKEN_FPR_HEX + 1];
	char err[512] = "";
	struct crun_store *st = NULL;

	(void)state;
	snprintf(other, sizeof(other), "%s/other", dir);
	write_file(other, "another-token-0123456789\n", 0600);
	token_fingerprint(TOKEN, strlen(TOKEN), theirs);
	token_fingerprint("another-token-0123456789", 24, ours);
	assert_int_equal(client_open(dmn.port, NULL, other, NULL, &st, err, sizeof(err)),
			 CRUN_EAUTH);
	snprintf(want, sizeof(want),
		 "store 127.0.0.1:%d: handshake: token mismatch: the store refused our token "
		 "(fingerprint %s from token file %s); its log names the fingerprint of its own",
		 dmn.port, ours, other);
	assert_string_equal(err, want);
	assert_null(strstr(err, theirs)); /* never sent to an unauthenticated peer */
	assert_null(strstr(err, "another-token"));
	/* No token at all. */
	assert_int_equal(client_open(dmn.port, NULL, NULL, NULL, &st, err, sizeof(err)),
			 CRUN_EAUTH);
	assert_non_null(strstr(err, "the store requires a token and we have none"));
	/* The right file. */
	assert_int_equal(client_open(dmn.port, NULL, tokfile, NULL, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "k", "v", 1), 0);
	crun_store_close(st);
	unlink(other);
}

static void world_readable_token_file_is_refused(void **state)
{
	char loose[300], want[1024], err[512] = "";
	const char *args[] = {"--listen", "127.0.0.1:0", "--token-file", loose, NULL};
	struct crun_store *st = NULL;

	(void)state;
	snprintf(loose, sizeof(loose), "%s/loose", dir);
	write_file(loose, TOKEN "\n", 0644);
	assert_int_equal(client_open(dmn.port, NULL, loose, NULL, &st, err, sizeof(err)),
			 -EACCES);
	snprintf(want, sizeof(want),
		 "token file %s: refused: mode 0644, owner uid %u; it must be owned by uid %u "
		 "and not readable or writable by group or others (chmod 600 %s)",
		 loose, (unsigned)geteuid(), (unsigned)geteuid(), loose);
	assert_string_equal(err, want);
	/* The daemon refuses it too, naming it. */
	assert_int_equal(daemon_run(args, err, sizeof(err)), 2);
	assert_non_null(strstr(err, loose));
	assert_non_null(strstr(err, "mode 0644"));
	/* Group-writable is refused as well. */
	assert_int_equal(chmod(loose, 0620), 0);
	assert_int_equal(client_open(dmn.port, NULL, loose, NULL, &st, err, sizeof(err)),
			 -EACCES);
	assert_non_null(strstr(err, "mode 0620"));
	unlink(loose);
}

static void open_store_and_token_client_refuse_each_other(void **state)
{
	const char *args[] = {"--insecure", NULL};
	struct daemon open;
	struct crun_store *st = NULL;
	char err[512] = "";

	(void)state;
	assert_int_equal(daemon_start(&open, args), 0);
	assert_int_equal(client_open(open.port, TOKEN, NULL, NULL, &st, err, sizeof(err)),
			 CRUN_EAUTH);
	assert_non_null(strstr(err, "the store runs without authentication (--insecure) but we "
				    "have a token"));
	assert_int_equal(client_open(open.port, NULL, NULL, NULL, &st, err, sizeof(err)), 0);
	crun_store_close(st);
	assert_int_equal(WEXITSTATUS(daemon_stop(&open, SIGTERM)), 0);
}

static void send_set(int fd, uint32_t id, const char *key)
{
	struct wire_buf b = {0};

	wire_put_bytes(&b, key, strlen(key));
	wire_put_bytes(&b, "v", 1);
	wire_put_i64(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_SET, id, b.p, b.len), 0);
	wire_buf_finish(&b);
}

static void expect_ok(int fd, uint32_t id)
{
	struct wire_hdr h;
	uint8_t buf[512];

	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, id);
	if (h.status != WIRE_OK) {
		fail_msg("id %u: status %u: %s", id, h.status, (const char *)buf);
	}
}

static void expect_out_of_scope(int fd, uint8_t op, uint32_t id, const char *key)
{
	char want[300];

	snprintf(want, sizeof(want), "%s: key \"%s\" is not in this connection's scope (run runA)",
		 wire_op_name(op), key);
	raw_expect_error(fd, op, id, WIRE_E_SCOPE, want);
}

static void scoped_connection_stays_in_its_run(void **state)
{
	const char *outside[] = {"rdzv/runB/k", "runB/attempt/0/x", "runAB/x", "rdzv/runA",
				 "runA", "rdzv/runAB/k", "x"};
	struct wire_buf b = {0};
	uint16_t st = 0;
	char msg[512];
	uint32_t id = 10;
	size_t i;
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_handshake(fd, TOKEN, "runA", NULL, NULL, 0), 0);
	/* The run's rendezvous keys and its workers' keys. */
	send_set(fd, id, "rdzv/runA/round/0");
	expect_ok(fd, id++);
	send_set(fd, id, "runA/attempt/0/w");
	expect_ok(fd, id++);
	/* Anything else, exactly refused; the connection stays. */
	for (i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		send_set(fd, id, outside[i]);
		expect_out_of_scope(fd, WIRE_OP_SET, id++, outside[i]);
	}
	/* A key list: one key outside refuses the whole request. */
	wire_put_u8(&b, WIRE_WAIT_ALL);
	wire_put_i64(&b, 0);
	wire_put_u32(&b, 2);
	wire_put_bytes(&b, "runA/attempt/0/w", 16);
	wire_put_bytes(&b, "rdzv/runB/k", 11);
	assert_int_equal(raw_frame(fd, WIRE_OP_WAIT, id, b.p, b.len), 0);
	expect_out_of_scope(fd, WIRE_OP_WAIT, id++, "rdzv/runB/k");
	assert_int_equal(raw_frame(fd, WIRE_OP_PING, id, NULL, 0), 0);
	expect_ok(fd, id++);
	close(fd);
	/* A scoped key does not open the unscoped store, nor another run. */
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	b.len = 0;
	/* "rdzv" would reach every run's rendezvous keys: not a scope. */
	assert_int_equal(raw_handshake(fd, NULL, "rdzv", &st, msg, sizeof(msg)), -EACCES);
	assert_int_equal(st, WIRE_E_INVALID);
	assert_string_equal(msg, "HELLO: the scope is not a run id (1 to 128 printable bytes, no "
				 "'/' or space, not \"rdzv\")");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served_with(dmn.port, TOKEN);
}

static void job_credential_file_confines_the_client(void **state)
{
	char path[300], err[512] = "";
	struct token_cred c;
	struct crun_store *st = NULL, *wrong = NULL;
	struct crun_diag d = {0};

	(void)state;
	snprintf(path, sizeof(path), "%s/job", dir);
	unlink(path);
	assert_int_equal(token_cred_from_token(&c, TOKEN, "runA", "test", &d), 0);
	assert_int_equal(token_cred_write(path, &c, &d), 0);
	/* What a worker of run A holds: no token, a key for run A. */
	assert_int_equal(client_open(dmn.port, NULL, path, NULL, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "runA/attempt/0/k", "v", 1), 0);
	assert_int_equal(crun_store_set(st, "runB/attempt/0/k", "v", 1), -EACCES);
	assert_int_equal(crun_store_set(st, "rdzv/runB/closed", "1", 1), -EACCES);
	assert_int_equal(crun_store_set(st, "runA/attempt/0/k2", "v", 1), 0);
	crun_store_close(st);
	/* It cannot claim another run. */
	assert_int_equal(client_open(dmn.port, NULL, path, "runB", &wrong, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "confined to run runA, not runB"));
	unlink(path);
}

/* Connect from @src (a 127.0.0.x address) to the daemon. */
static int connect_from(const char *src, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	struct timeval tv = {IO_TIMEOUT_MS / 1000, 0};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, src, &a.sin_addr), 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	a.sin_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

/* HELLO and a wrong AUTH, pipelined without waiting for the answers. */
static void send_guess(int fd)
{
	uint8_t zeros[TOKEN_NONCE_LEN] = {0};
	struct wire_buf b = {0};

	wire_put_u32(&b, WIRE_MAGIC);
	wire_put_u16(&b, WIRE_VERSION);
	wire_put_u16(&b, 0);
	wire_put_bytes(&b, zeros, sizeof(zeros));
	wire_put_bytes(&b, NULL, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_HELLO, 1, b.p, b.len), 0);
	b.len = 0;
	wire_put_bytes(&b, zeros, TOKEN_KEY_LEN);
	assert_int_equal(raw_frame(fd, WIRE_OP_AUTH, 2, b.p, b.len), 0);
	wire_buf_finish(&b);
}

/* The answers to send_guess(): the nonce, then the mismatch. */
static void expect_guess_refused(int fd)
{
	struct wire_hdr h;
	uint8_t buf[512];

	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.op, WIRE_OP_HELLO);
	assert_int_equal(h.status, WIRE_OK);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.op, WIRE_OP_AUTH);
	assert_int_equal(h.status, WIRE_E_AUTH);
	assert_non_null(strstr((const char *)buf, "token mismatch:"));
}

static void guessing_is_rate_limited_per_source(void **state)
{
	const char *args[] = {"--token-file", tokfile, NULL};
	struct daemon d;
	int64_t start, t0, slowest = 0;
	int tries = 0, fd, g1, g2, rc;
	uint16_t st;
	char msg[512], guess[48];

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	/* Guess as fast as the store answers, for 2 s, from 127.0.0.3. */
	start = crun_now_ms();
	while (crun_now_ms() - start < 2000) {
		fd = connect_from("127.0.0.3", d.port);
		snprintf(guess, sizeof(guess), "guess-%d-0123456789abcdef", tries++);
		msg[0] = '\0';
		t0 = crun_now_ms();
		rc = raw_handshake(fd, guess, NULL, &st, msg, sizeof(msg));
		close(fd);
		assert_int_equal(rc, -EACCES);
		/* Every wrong proof gets its verdict, but late once the free ones are spent. */
		assert_non_null(strstr(msg, "token mismatch:"));
		slowest = crun_now_ms() - t0 > slowest ? crun_now_ms() - t0 : slowest;
	}
	print_message("%d guesses in 2 s, the slowest answered after %lld ms\n", tries,
		      (long long)slowest);
	/* 3 answered at once, then each 1 s late (1 to 1.5 s): a handful, not thousands. */
	assert_true(tries <= 8);
	assert_true(slowest >= 150);
	/* Another loopback address is no way around the delay: all of 127/8 is one source
	 * (a local user can connect from any of it). A wrong guess from 127.0.0.4 waits too. */
	fd = connect_from("127.0.0.4", d.port);
	t0 = crun_now_ms();
	assert_int_equal(raw_handshake(fd, "guess-elsewhere-0123456789", NULL, &st, msg, sizeof(msg)), -EACCES);
	close(fd);
	assert_true(crun_now_ms() - t0 >= 150);
	/* The right token is accepted from any of them (as late as a wrong proof would be
	 * answered: the time of an answer does not tell right from wrong). */
	fd = connect_from("127.0.0.2", d.port);
	assert_int_equal(raw_hello(fd, TOKEN), 0);
	close(fd);
	/* Two wrong guesses from 127.0.0.3 at once, both held; the right token from it is
	 * accepted meanwhile, after the same delay: a guesser on the job's host cannot lock the
	 * job's own clients out. */
	g1 = connect_from("127.0.0.3", d.port);
	send_guess(g1);
	g2 = connect_from("127.0.0.3", d.port);
	t0 = crun_now_ms();
	send_guess(g2);
	expect_guess_refused(g1);
	fd = connect_from("127.0.0.3", d.port);
	assert_int_equal(raw_handshake(fd, TOKEN, NULL, &st, msg, sizeof(msg)), 0);
	close(fd);
	expect_guess_refused(g2);
	assert_true(crun_now_ms() - t0 >= 1000);
	close(g1);
	close(g2);
	assert_int_equal(WEXITSTATUS(daemon_stop(&d, SIGTERM)), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(clear_token_hello_is_refused_by_version),
		cmocka_unit_test(right_token_is_proven_both_ways),
		cmocka_unit_test(wrong_token_is_refused_without_a_fingerprint),
		cmocka_unit_test(requests_before_auth_are_refused),
		cmocka_unit_test(client_names_file_and_its_fingerprint),
		cmocka_unit_test(world_readable_token_file_is_refused),
		cmocka_unit_test(open_store_and_token_client_refuse_each_other),
		cmocka_unit_test(scoped_connection_stays_in_its_run),
		cmocka_unit_test(job_credential_file_confines_the_client),
		cmocka_unit_test(guessing_is_rate_limited_per_source),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("store-auth", tests, group_setup, group_teardown);
}
