/* SPDX-License-Identifier: MIT */
/* tests/store/test_list_runs.c: LIST_RUNS (docs/protocol.md) against a real crun-rdzvd with a
 * token: the runs with their keys, bytes and last write, the cap and the total, a run gone
 * with its last key, a scoped connection seeing only its run, and no listing before AUTH. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rendezvous/store/wire.h"
#include "src/common/clock.h"
#include "tests/store/helpers.h"

#define TOKEN "list-runs-test-token-0123456789"

static struct daemon dmn;
static char dir[] = "/tmp/crun-list-test-XXXXXX";
static char tokfile[256];

static int group_setup(void **state)
{
	const char *args[] = {"--token-file", tokfile, NULL};
	int fd;

	(void)state;
	signal(SIGPIPE, SIG_IGN);
	unsetenv("CRUN_STORE_TOKEN");
	if (mkdtemp(dir) == NULL) {
		return -1;
	}
	snprintf(tokfile, sizeof(tokfile), "%s/token", dir);
	fd = open(tokfile, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || write(fd, TOKEN "\n", strlen(TOKEN) + 1) != (ssize_t)strlen(TOKEN) + 1) {
		return -1;
	}
	close(fd);
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

static void set(int fd, uint32_t id, const char *key, const char *val)
{
	struct wire_buf b = {0};

	wire_put_bytes(&b, key, strlen(key));
	wire_put_bytes(&b, val, strlen(val));
	wire_put_i64(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_SET, id, b.p, b.len), 0);
	wire_buf_finish(&b);
	expect_ok(fd, id);
}

static void del(int fd, uint32_t id, const char *key)
{
	struct wire_buf b = {0};

	wire_put_bytes(&b, key, strlen(key));
	assert_int_equal(raw_frame(fd, WIRE_OP_DELETE, id, b.p, b.len), 0);
	wire_buf_finish(&b);
	expect_ok(fd, id);
}

struct listed {
	char id[129];
	int64_t keys, bytes, wrote_ms;
};

/* LIST_RUNS with @max: the runs named (at most 8) into @out; returns how many; *@total. */
static uint32_t list(int fd, uint32_t id, uint32_t max, uint32_t *total, struct listed *out)
{
	struct wire_buf b = {0};
	struct wire_hdr h;
	struct wire_cur c;
	struct wire_str s;
	uint8_t buf[4096];
	uint32_t n, i;

	wire_put_u32(&b, max);
	assert_int_equal(raw_frame(fd, WIRE_OP_LIST_RUNS, id, b.p, b.len), 0);
	wire_buf_finish(&b);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, id);
	assert_int_equal(h.op, WIRE_OP_LIST_RUNS);
	if (h.status != WIRE_OK) {
		fail_msg("LIST_RUNS: status %u: %s", h.status, (const char *)buf);
	}
	c = (struct wire_cur){buf, buf + (h.len - 8), false};
	*total = wire_get_u32(&c);
	n = wire_get_u32(&c);
	assert_true(n <= 8 && n <= *total);
	for (i = 0; i < n; i++) {
		s = wire_get_bytes(&c);
		assert_false(c.bad);
		assert_true(s.len < sizeof(out[i].id));
		memcpy(out[i].id, s.p, s.len);
		out[i].id[s.len] = '\0';
		out[i].keys = wire_get_i64(&c);
		out[i].bytes = wire_get_i64(&c);
		out[i].wrote_ms = wire_get_i64(&c);
	}
	assert_false(c.bad);
	assert_ptr_equal(c.p, c.end);
	return n;
}

static const struct listed *find(const struct listed *l, uint32_t n, const char *id)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		if (strcmp(l[i].id, id) == 0) {
			return &l[i];
		}
	}
	fail_msg("run %s not listed", id);
	return NULL;
}

static void runs_are_listed_with_their_usage(void **state)
{
	struct listed l[8];
	const struct listed *a, *b;
	uint32_t total, n, id = 10;
	int64_t t0 = crun_wall_ms();
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, TOKEN), 0);
	n = list(fd, id++, 0, &total, l);
	assert_int_equal(total, 0);
	assert_int_equal(n, 0);
	set(fd, id++, "rdzv/alpha/k1", "v");	/* the run's rendezvous */
	set(fd, id++, "alpha/w", "vv");		/* its workers' keys */
	set(fd, id++, "rdzv/beta/k", "v");
	set(fd, id++, "plain", "v");		/* no run's */
	n = list(fd, id++, 0, &total, l);
	assert_int_equal(total, 2);
	assert_int_equal(n, 2);
	a = find(l, n, "alpha");
	b = find(l, n, "beta");
	assert_int_equal(a->keys, 2);
	assert_int_equal(a->bytes, 13 + 1 + 7 + 2);
	assert_int_equal(b->keys, 1);
	assert_int_equal(b->bytes, 11 + 1);
	assert_true(a->wrote_ms >= t0 && a->wrote_ms <= crun_wall_ms());
	assert_true(b->wrote_ms >= a->wrote_ms);

	/* The cap: one named, the total says two; the newest write first. */
	set(fd, id++, "rdzv/alpha/k2", "v");
	n = list(fd, id++, 1, &total, l);
	assert_int_equal(total, 2);
	assert_int_equal(n, 1);
	assert_string_equal(l[0].id, "alpha");
	assert_int_equal(l[0].keys, 3);

	/* A run whose last key is gone is no longer listed. */
	del(fd, id++, "rdzv/beta/k");
	n = list(fd, id++, 0, &total, l);
	assert_int_equal(total, 1);
	assert_string_equal(l[0].id, "alpha");
	close(fd);
}

static void scoped_connection_lists_its_run_only(void **state)
{
	struct listed l[8];
	uint32_t total, n, id = 10;
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, TOKEN), 0);
	set(fd, id++, "rdzv/gamma/k", "v");
	close(fd);
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_handshake(fd, TOKEN, "gamma", NULL, NULL, 0), 0);
	n = list(fd, id++, 0, &total, l);
	assert_int_equal(total, 1);
	assert_int_equal(n, 1);
	assert_string_equal(l[0].id, "gamma");
	close(fd);
}

/*
 * Any unscoped writer makes an account of a key's first part: one too long for a run id, or
 * with a control character (a terminal escape), is neither named nor counted; before, the
 * 200-byte one broke every client's listing (its run id field holds 128 bytes).
 */
static void names_that_cannot_be_run_ids_are_not_listed(void **state)
{
	struct listed l[8];
	char key[300];
	uint32_t total, n, id = 10;
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, TOKEN), 0);
	n = list(fd, id++, 0, &total, l);
	memset(key, 'L', 200);
	snprintf(key + 200, sizeof(key) - 200, "/k");
	set(fd, id++, key, "v");
	set(fd, id++, "rdzv/esc\033]0;x\007/k", "v");
	set(fd, id++, "rdzv/tab\tx/k", "v");
	/* 128 bytes is a run id: named. */
	memset(key, 'M', 128);
	snprintf(key + 128, sizeof(key) - 128, "/k");
	set(fd, id++, key, "v");
	assert_int_equal(list(fd, id++, 0, &n, l), total + 1);
	assert_int_equal(n, total + 1);
	key[128] = '\0';
	find(l, n, key);
	close(fd);
}

static void no_listing_before_auth(void **state)
{
	struct wire_buf b = {0};
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	raw_hello_unproved(fd);
	wire_put_u32(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_LIST_RUNS, 2, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_LIST_RUNS, 2, WIRE_E_AUTH,
			 "expected AUTH after HELLO, got op 15");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		/* In this order: the first counts every run of the daemon. */
		cmocka_unit_test(runs_are_listed_with_their_usage),
		cmocka_unit_test(scoped_connection_lists_its_run_only),
		cmocka_unit_test(names_that_cannot_be_run_ids_are_not_listed),
		cmocka_unit_test(no_listing_before_auth),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("store-list-runs", tests, group_setup, group_teardown);
}
