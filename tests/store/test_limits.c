/* SPDX-License-Identifier: MIT */
/* tests/store/test_limits.c: each store limit triggers on a real crun-rdzvd, others served. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rendezvous/store/wire.h"
#include "src/common/clock.h"
#include "tests/store/helpers.h"

/* The daemon of the running test; killed by the teardown if an assertion left it. */
static struct daemon d;

static int teardown(void **state)
{
	(void)state;
	if (d.pid > 0) {
		daemon_stop(&d, SIGKILL);
	}
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	signal(SIGPIPE, SIG_IGN);
	unsetenv("CRUN_STORE_TOKEN");
	return 0;
}

static void stop_ok(struct daemon *dm)
{
	int st = daemon_stop(dm, SIGTERM);

	assert_true(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void put_hdr(uint8_t *p, uint32_t len, uint8_t op, uint32_t id)
{
	struct wire_hdr h = {len, op, 0, 0, id};

	wire_hdr_encode(p, &h);
}

/* Whether @fd becomes readable within @ms. */
static bool readable(int fd, int ms)
{
	struct pollfd p = {fd, POLLIN, 0};

	return poll(&p, 1, ms) > 0;
}

/* A WAIT request for one key with @timeout_ms (< 0: no deadline). */
static void send_wait(int fd, uint32_t id, const char *key, int64_t timeout_ms)
{
	struct wire_buf b = {0};

	wire_put_u8(&b, WIRE_WAIT_ALL);
	wire_put_i64(&b, timeout_ms);
	wire_put_u32(&b, 1);
	wire_put_bytes(&b, key, strlen(key));
	assert_int_equal(raw_frame(fd, WIRE_OP_WAIT, id, b.p, b.len), 0);
	wire_buf_finish(&b);
}

static void expect_ok(int fd, uint8_t op, uint32_t id)
{
	struct wire_hdr h;
	uint8_t buf[256];

	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.op, op);
	assert_int_equal(h.id, id);
	assert_int_equal(h.status, WIRE_OK);
}

static void set_key(int fd, uint32_t id, const char *key, const void *val, size_t vlen)
{
	struct wire_buf b = {0};

	wire_put_bytes(&b, key, strlen(key));
	wire_put_bytes(&b, val, vlen);
	wire_put_i64(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_SET, id, b.p, b.len), 0);
	wire_buf_finish(&b);
}

/*
 * Connections that each send most of a 4 MiB frame and stop: with an 8 MiB budget some are
 * dropped with NO_MEMORY, the daemon stays small, and a client that then sets a 1 MiB value
 * is served (the biggest holder makes room for it).
 */
static void memory_budget_drops_the_biggest_holder(void **state)
{
	enum { CONNS = 6, DECLARED = 4 << 20, SENT = 3 << 20 };
	const char *args[] = {"--max-memory", "8", NULL};
	uint8_t *big = calloc(1, SENT), buf[256];
	struct wire_hdr h;
	long before, after;
	int fds[CONNS], i, dropped = 0, fd;

	(void)state;
	assert_non_null(big);
	assert_int_equal(daemon_start(&d, args), 0);
	before = rss_kib(d.pid);
	for (i = 0; i < CONNS; i++) {
		fds[i] = raw_connect(d.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(raw_hello(fds[i], NULL), 0);
		put_hdr(big, DECLARED, WIRE_OP_SET, 9);
		(void)raw_send(fds[i], big, SENT); /* may fail: the server dropped us */
	}
	raw_expect_served(d.port);
	after = rss_kib(d.pid);
	for (i = 0; i < CONNS; i++) {
		if (!readable(fds[i], 200)) {
			continue;
		}
		if (raw_read(fds[i], &h, buf, sizeof(buf)) == 0) {
			assert_int_equal(h.status, WIRE_E_NO_MEMORY);
			assert_non_null(strstr((const char *)buf,
					       "memory budget of 8388608 bytes exceeded"));
		}
		dropped++;
	}
	print_message("%d of %d connections dropped; RSS %ld KiB -> %ld KiB\n", dropped, CONNS,
		      before, after);
	assert_true(dropped >= CONNS - 2);
#ifndef __SANITIZE_ADDRESS__ /* ASan's quarantine keeps freed buffers resident */
	assert_true(after - before < 16 * 1024);
#endif
	/* A well-behaved big write still goes through, the budget being full of others. */
	fd = raw_connect(d.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	set_key(fd, 2, "big", big, 1 << 20);
	expect_ok(fd, WIRE_OP_SET, 2);
	close(fd);
	for (i = 0; i < CONNS; i++) {
		close(fds[i]);
	}
	raw_expect_served(d.port);
	free(big);
	stop_ok(&d);
}

/* One address may hold N connections; the next is refused, then served once one closes. */
static void per_address_cap_refuses_then_serves(void **state)
{
	const char *args[] = {"--max-conns-per-addr", "3", NULL};
	int fds[3], fd, i;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	for (i = 0; i < 3; i++) {
		fds[i] = raw_connect(d.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(raw_hello(fds[i], NULL), 0);
	}
	for (i = 0; i < 5; i++) { /* refused every time; the listener keeps accepting */
		fd = raw_connect(d.port);
		assert_true(fd >= 0);
		raw_expect_error(fd, 0, 0, WIRE_E_BUSY,
				 "too many connections from 127.0.0.1 (limit 3)");
		raw_expect_closed(fd);
		close(fd);
	}
	raw_close_seen(fds[0]);
	raw_expect_served(d.port);
	close(fds[1]);
	close(fds[2]);
	stop_ok(&d);
}

/* Start the daemon with its standard error (the log) going to the file @log_fd. */
static void start_logged(const char *const *args, int log_fd)
{
	int saved = dup(2);

	assert_true(saved >= 0);
	assert_int_equal(dup2(log_fd, 2), 2);
	assert_int_equal(daemon_start(&d, args), 0);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
}

/* How many lines of the file @fd contain @what. */
static int count_lines(int fd, const char *what)
{
	char line[1024];
	FILE *f;
	int n = 0;

	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	f = fdopen(dup(fd), "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		n += strstr(line, what) != NULL;
	}
	fclose(f);
	return n;
}

/* A client refused over and over costs one log line per interval, not one per attempt. */
static void limit_log_is_rate_limited(void **state)
{
	const char *args[] = {"--max-conns-per-addr", "1", NULL};
	char path[] = "/tmp/crun-test-limits-log-XXXXXX";
	int log_fd = mkstemp(path), fd, held, i;

	(void)state;
	assert_true(log_fd >= 0);
	unlink(path);
	start_logged(args, log_fd);
	held = raw_connect(d.port);
	assert_true(held >= 0);
	assert_int_equal(raw_hello(held, NULL), 0);
	for (i = 0; i < 50; i++) {
		fd = raw_connect(d.port);
		assert_true(fd >= 0);
		raw_expect_error(fd, 0, 0, WIRE_E_BUSY,
				 "too many connections from 127.0.0.1 (limit 1)");
		close(fd);
	}
	raw_close_seen(held);
	raw_expect_served(d.port);
	stop_ok(&d);
	assert_int_equal(count_lines(log_fd, "per-address connection cap: 127.0.0.1:"), 1);
	close(log_fd);
}

/* A client that sends one byte every 300 ms evades a 1 s idle timeout, not the 2 s frame
 * deadline. */
static void slow_sender_is_dropped(void **state)
{
	const char *args[] = {"--idle-timeout", "1", "--frame-timeout", "2", NULL};
	uint8_t frame[200], buf[256];
	struct wire_hdr h;
	int64_t t0;
	size_t i;
	int fd;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	fd = raw_connect(d.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	memset(frame, 'x', sizeof(frame));
	put_hdr(frame, sizeof(frame) - 4, WIRE_OP_PING, 3);
	t0 = crun_now_ms();
	for (i = 0; i < sizeof(frame) && !readable(fd, 300); i++) {
		assert_int_equal(raw_send(fd, frame + i, 1), 0);
	}
	assert_true(i < sizeof(frame));
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	print_message("dropped after %zu bytes, %lld ms: %s\n", i,
		      (long long)(crun_now_ms() - t0), (const char *)buf);
	assert_int_equal(h.status, WIRE_E_TIMEOUT);
	assert_non_null(strstr((const char *)buf,
			       "frame not completed within 2000 ms of its first byte"));
	assert_true(crun_now_ms() - t0 < 5000);
	raw_expect_closed(fd);
	close(fd);
	raw_expect_served(d.port);
	stop_ok(&d);
}

/* Waits without a deadline are bounded per connection and in all; timed waits are not. */
static void untimed_waits_are_bounded(void **state)
{
	const char *args[] = {"--max-untimed-waits", "2", "--max-untimed-waits-total", "3", NULL};
	int a, b;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	a = raw_connect(d.port);
	b = raw_connect(d.port);
	assert_true(a >= 0 && b >= 0);
	assert_int_equal(raw_hello(a, NULL), 0);
	assert_int_equal(raw_hello(b, NULL), 0);
	send_wait(a, 10, "w", -1);
	send_wait(a, 11, "w", -1);
	send_wait(a, 12, "w", -1);
	raw_expect_error(a, WIRE_OP_WAIT, 12, WIRE_E_BUSY,
			 "too many waits without a deadline on this connection (limit 2)");
	send_wait(b, 20, "w", -1);
	send_wait(b, 21, "w", -1);
	raw_expect_error(b, WIRE_OP_WAIT, 21, WIRE_E_BUSY,
			 "too many waits without a deadline on this server (limit 3)");
	send_wait(b, 22, "w", 60000); /* a deadline: not counted */
	assert_int_equal(raw_frame(a, WIRE_OP_PING, 13, NULL, 0), 0);
	expect_ok(a, WIRE_OP_PING, 13); /* the connection stays */
	set_key(a, 14, "w", "v", 1);
	expect_ok(a, WIRE_OP_WAIT, 11); /* parked waits are woken as usual, newest first */
	expect_ok(a, WIRE_OP_WAIT, 10);
	expect_ok(a, WIRE_OP_SET, 14);
	expect_ok(b, WIRE_OP_WAIT, 22);
	expect_ok(b, WIRE_OP_WAIT, 20);
	close(a);
	close(b);
	raw_expect_served(d.port);
	stop_ok(&d);
}

/* With --max-wait, a wait that gave no deadline gets that one. */
static void max_wait_bounds_untimed_waits(void **state)
{
	const char *args[] = {"--max-wait", "0.5", NULL};
	int64_t t0;
	int fd;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	fd = raw_connect(d.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	t0 = crun_now_ms();
	send_wait(fd, 5, "never", -1);
	raw_expect_error(fd, WIRE_OP_WAIT, 5, WIRE_E_TIMEOUT, "wait timed out after 500 ms");
	assert_true(crun_now_ms() - t0 < 3000);
	close(fd);
	raw_expect_served(d.port);
	stop_ok(&d);
}

/*
 * The default cap follows the open file limit: with a hard limit of 256 (the soft one at 64,
 * which the daemon raises), 256 * 90% - 64 = 166 connections are served and the next is
 * refused. Run last: it lowers this test process's own hard limit for good.
 */
static void default_cap_follows_file_limit(void **state)
{
	enum { CAP = 256 * 90 / 100 - 64 };
	struct rlimit rl = {64, 256}, now;
	int fds[CAP], fd, i;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &now), 0);
	if (now.rlim_max < rl.rlim_max) {
		test_skip(); /* cannot raise the hard limit back up to 256 */
	}
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(daemon_start(&d, NULL), 0);
	rl.rlim_cur = 256;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	for (i = 0; i < CAP; i++) {
		fds[i] = raw_connect(d.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(raw_hello(fds[i], NULL), 0);
	}
	fd = raw_connect(d.port);
	assert_true(fd >= 0);
	raw_expect_error(fd, 0, 0, WIRE_E_BUSY, "too many connections (limit 166)");
	raw_expect_closed(fd);
	close(fd);
	raw_close_seen(fds[0]);
	raw_expect_served(d.port);
	for (i = 1; i < CAP; i++) {
		close(fds[i]);
	}
	stop_ok(&d);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(memory_budget_drops_the_biggest_holder, teardown),
		cmocka_unit_test_teardown(per_address_cap_refuses_then_serves, teardown),
		cmocka_unit_test_teardown(limit_log_is_rate_limited, teardown),
		cmocka_unit_test_teardown(slow_sender_is_dropped, teardown),
		cmocka_unit_test_teardown(untimed_waits_are_bounded, teardown),
		cmocka_unit_test_teardown(max_wait_bounds_untimed_waits, teardown),
		cmocka_unit_test_teardown(default_cap_follows_file_limit, teardown),
	};

	return test_run_group("store-limits", tests, argc > 1 ? argv[1] : NULL, group_setup,
			      NULL);
}
