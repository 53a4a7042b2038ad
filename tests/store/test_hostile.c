/* SPDX-License-Identifier: MIT */
/* tests/store/test_hostile.c: raw hostile bytes against a real crun-rdzvd (docs/protocol.md). */
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
#include "tests/store/helpers.h"

static struct daemon dmn;

static int group_setup(void **state)
{
	(void)state;
	signal(SIGPIPE, SIG_IGN);
	unsetenv("CRUN_STORE_TOKEN"); /* the daemons under test require none unless told */
	return daemon_start(&dmn, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	int st;

	(void)state;
	st = daemon_stop(&dmn, SIGTERM);
	return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void put_hdr(uint8_t *p, uint32_t len, uint8_t op, uint32_t id)
{
	struct wire_hdr h = {len, op, 0, 0, id};

	wire_hdr_encode(p, &h);
}

static void hello_payload(struct wire_buf *b, uint32_t magic, uint16_t version)
{
	wire_put_u32(b, magic);
	wire_put_u16(b, version);
	wire_put_u16(b, 0);
	wire_put_u32(b, 0); /* no nonce */
	wire_put_u32(b, 0); /* no scope */
}

static void bad_magic_is_refused(void **state)
{
	struct wire_buf b = {0};
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	hello_payload(&b, 0xdeadbeef, WIRE_VERSION);
	assert_int_equal(raw_frame(fd, WIRE_OP_HELLO, 5, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_HELLO, 5, WIRE_E_BAD_MAGIC,
			 "bad magic 0xdeadbeef (expected 0x4352554e)");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

static void wrong_version_is_refused(void **state)
{
	struct wire_buf b = {0};
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	hello_payload(&b, WIRE_MAGIC, 99);
	assert_int_equal(raw_frame(fd, WIRE_OP_HELLO, 6, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_HELLO, 6, WIRE_E_BAD_VERSION,
			 "unsupported protocol version 99 (server speaks 2)");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

static void length_zero_is_refused(void **state)
{
	uint8_t hdr[WIRE_HDR_LEN];
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	put_hdr(hdr, 0, WIRE_OP_HELLO, 1);
	assert_int_equal(raw_send(fd, hdr, sizeof(hdr)), 0);
	raw_expect_error(fd, 0, 0, WIRE_E_BAD_FRAME, "frame length 0 below minimum 8");
	raw_expect_closed(fd);
	close(fd);
	raw_expect_served(dmn.port);
}

static void length_max_is_refused(void **state)
{
	uint8_t hdr[WIRE_HDR_LEN];
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	put_hdr(hdr, UINT32_MAX, WIRE_OP_SET, 2);
	assert_int_equal(raw_send(fd, hdr, sizeof(hdr)), 0);
	raw_expect_error(fd, 0, 0, WIRE_E_TOO_BIG, "frame length 4294967295 exceeds limit 34603008");
	raw_expect_closed(fd);
	close(fd);
	raw_expect_served(dmn.port);
}

static void truncated_frame_then_close(void **state)
{
	uint8_t buf[WIRE_HDR_LEN + 10];
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	memset(buf, 'x', sizeof(buf));
	put_hdr(buf, 100, WIRE_OP_SET, 3);
	assert_int_equal(raw_send(fd, buf, sizeof(buf)), 0);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	raw_expect_error(fd, 0, 0, WIRE_E_BAD_FRAME, "truncated frame: got 22 of 104 bytes");
	raw_expect_closed(fd);
	close(fd);
	raw_expect_served(dmn.port);
}

static void unknown_op_is_refused(void **state)
{
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	assert_int_equal(raw_frame(fd, 99, 7, "abc", 3), 0);
	raw_expect_error(fd, 99, 7, WIRE_E_UNKNOWN_OP, "unknown op 99");
	raw_expect_closed(fd);
	close(fd);
	raw_expect_served(dmn.port);
}

static void request_before_hello_is_refused(void **state)
{
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_PING, 8, NULL, 0), 0);
	raw_expect_error(fd, WIRE_OP_PING, 8, WIRE_E_BAD_FRAME,
			 "expected HELLO as the first frame, got op 2");
	raw_expect_closed(fd);
	close(fd);
	raw_expect_served(dmn.port);
}

static void truncated_payload_is_refused(void **state)
{
	struct wire_buf b = {0};
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	wire_put_u32(&b, 50); /* key length 50, 3 bytes present */
	wire_put_raw(&b, "abc", 3);
	assert_int_equal(raw_frame(fd, WIRE_OP_GET, 9, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_GET, 9, WIRE_E_BAD_FRAME,
			 "malformed GET request: truncated payload");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

static void trailing_bytes_are_refused(void **state)
{
	struct wire_buf b = {0};
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	wire_put_bytes(&b, "k", 1);
	wire_put_u8(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_DELETE, 10, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_DELETE, 10, WIRE_E_BAD_FRAME,
			 "malformed DELETE request: trailing bytes");
	raw_expect_closed(fd);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

/* A raw frame with chosen flags and status (requests must have both 0). */
static void send_odd_frame(int fd, uint8_t op, uint8_t flags, uint16_t status, uint32_t id)
{
	uint8_t hdr[WIRE_HDR_LEN];
	struct wire_hdr h = {8, op, flags, status, id};

	wire_hdr_encode(hdr, &h);
	assert_int_equal(raw_send(fd, hdr, sizeof(hdr)), 0);
}

/* The rest of the error messages of docs/protocol.md, each on the wire. */
static void remaining_request_errors_are_named(void **state)
{
	struct wire_buf b = {0};
	struct wire_hdr h;
	uint8_t buf[256];
	char *tok = malloc(5000);
	int fd;

	(void)state;
	assert_non_null(tok);
	/* Reserved flags, a status in a request, a second HELLO: each closes. */
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	send_odd_frame(fd, WIRE_OP_PING, 0x80, 0, 21);
	raw_expect_error(fd, WIRE_OP_PING, 21, WIRE_E_BAD_FRAME,
			 "reserved flags 0x80 set in request");
	raw_expect_closed(fd);
	close(fd);
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	send_odd_frame(fd, WIRE_OP_PING, 0, 7, 22);
	raw_expect_error(fd, WIRE_OP_PING, 22, WIRE_E_BAD_FRAME, "non-zero status in request");
	raw_expect_closed(fd);
	close(fd);
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	hello_payload(&b, WIRE_MAGIC, WIRE_VERSION);
	assert_int_equal(raw_frame(fd, WIRE_OP_HELLO, 23, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_HELLO, 23, WIRE_E_BAD_FRAME, "HELLO: handshake already done");
	raw_expect_closed(fd);
	close(fd);
	/* A scope over the limit, before the handshake: closes. */
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	b.len = 0;
	memset(tok, 't', 5000);
	wire_put_u32(&b, WIRE_MAGIC);
	wire_put_u16(&b, WIRE_VERSION);
	wire_put_u16(&b, 0);
	wire_put_u32(&b, 0);
	wire_put_bytes(&b, tok, 5000);
	assert_int_equal(raw_frame(fd, WIRE_OP_HELLO, 24, b.p, b.len), 0);
	/* Refused from its header: before authentication a frame is at most
	 * STORE_PREAUTH_MAX_FRAME bytes (a HELLO is tens). */
	raw_expect_error(fd, WIRE_OP_HELLO, 24, WIRE_E_TOO_BIG,
			 "frame of 5028 bytes before authentication (limit 1024: only HELLO and "
			 "AUTH may come first)");
	raw_expect_closed(fd);
	close(fd);
	/* ADD on a value that is not a number: an error reply, the connection stays. */
	fd = raw_connect(dmn.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	b.len = 0;
	wire_put_bytes(&b, "hostile/nan", 11);
	wire_put_bytes(&b, "abc", 3);
	wire_put_i64(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_SET, 25, b.p, b.len), 0);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.status, WIRE_OK);
	b.len = 0;
	wire_put_bytes(&b, "hostile/nan", 11);
	wire_put_i64(&b, 1);
	assert_int_equal(raw_frame(fd, WIRE_OP_ADD, 26, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_ADD, 26, WIRE_E_NOT_NUMBER,
			 "ADD: value of hostile/nan is not an integer");
	assert_int_equal(raw_frame(fd, WIRE_OP_PING, 27, NULL, 0), 0);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, 27);
	assert_int_equal(h.status, WIRE_OK);
	close(fd);
	free(tok);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

/* A key over the limit inside a well-formed frame: error reply, the connection stays. */
static void long_key_is_refused_and_connection_kept(void **state)
{
	struct wire_buf b = {0};
	struct wire_hdr h;
	uint8_t buf[64];
	char *key = malloc(5000);
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_non_null(key);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	memset(key, 'k', 5000);
	wire_put_bytes(&b, key, 5000);
	wire_put_bytes(&b, "v", 1);
	wire_put_i64(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_SET, 11, b.p, b.len), 0);
	raw_expect_error(fd, WIRE_OP_SET, 11, WIRE_E_TOO_BIG,
			 "SET: key length 5000 exceeds limit 4096");
	assert_int_equal(raw_frame(fd, WIRE_OP_PING, 12, NULL, 0), 0);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, 12);
	assert_int_equal(h.status, WIRE_OK);
	close(fd);
	free(key);
	wire_buf_finish(&b);
}

/* A million 12-byte PINGs pipelined on one connection: every one answered, in order. */
static void million_tiny_frames(void **state)
{
	enum { N = 1000000, BATCH = 4096 };
	uint8_t *out = malloc((size_t)BATCH * WIRE_HDR_LEN), in[65536];
	size_t out_len = 0, out_off = 0, in_len = 0;
	uint32_t sent = 0, got = 0, i;
	struct wire_hdr h;
	struct pollfd p;
	ssize_t k;
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_non_null(out);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	while (got < N) {
		if (out_off == out_len && sent < N) {
			out_len = 0;
			for (i = 0; i < BATCH && sent < N; i++) {
				put_hdr(out + out_len, 8, WIRE_OP_PING, ++sent);
				out_len += WIRE_HDR_LEN;
			}
			out_off = 0;
		}
		p.fd = fd;
		p.events = POLLIN | (out_off < out_len ? POLLOUT : 0);
		assert_true(poll(&p, 1, IO_TIMEOUT_MS) > 0);
		if (p.revents & POLLOUT) {
			k = send(fd, out + out_off, out_len - out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
			assert_true(k > 0 || errno == EAGAIN);
			if (k > 0) {
				out_off += (size_t)k;
			}
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			k = recv(fd, in + in_len, sizeof(in) - in_len, MSG_DONTWAIT);
			assert_true(k > 0);
			in_len += (size_t)k;
			for (i = 0; in_len - i >= WIRE_HDR_LEN; i += WIRE_HDR_LEN) {
				assert_int_equal(wire_hdr_decode(in + i, 8, &h), 0);
				assert_int_equal(h.status, WIRE_OK);
				assert_int_equal(h.id, ++got);
			}
			memmove(in, in + i, in_len - i);
			in_len -= i;
		}
	}
	print_message("%u PING frames sent, %u replies checked in order\n", sent, got);
	close(fd);
	free(out);
	raw_expect_served(dmn.port);
}

/* Declared-but-never-sent values cost the server nothing (PyTorch's TCPStore allocates). */
static void declared_huge_value_never_sent(void **state)
{
	enum { CONNS = 8 };
	uint8_t buf[WIRE_HDR_LEN + 1024];
	long before, after;
	int fds[CONNS], i;

	(void)state;
	before = rss_kib(dmn.pid);
	assert_true(before > 0);
	for (i = 0; i < CONNS; i++) {
		fds[i] = raw_connect(dmn.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(raw_hello(fds[i], NULL), 0);
		memset(buf, 0, sizeof(buf));
		put_hdr(buf, WIRE_MAX_FRAME, WIRE_OP_SET, 20);
		assert_int_equal(raw_send(fds[i], buf, sizeof(buf)), 0);
	}
	/* The daemon has read these bytes once it answers a later client (one loop). */
	raw_expect_served(dmn.port);
	after = rss_kib(dmn.pid);
	print_message("RSS before %ld KiB, after %d x %u declared bytes: %ld KiB\n", before,
		      CONNS, WIRE_MAX_FRAME, after);
	assert_true(after - before < 4096);
	for (i = 0; i < CONNS; i++) {
		close(fds[i]);
	}
	raw_expect_served(dmn.port);
}

static void two_thousand_connections(void **state)
{
	enum { N = 2000 };
	struct rlimit rl;
	struct wire_buf b = {0};
	struct wire_hdr h;
	uint8_t buf[256];
	int *fds = calloc(N, sizeof(int)), i;
	int64_t v = 0, x;

	(void)state;
	assert_non_null(fds);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < N + 100) {
		rl.rlim_cur = rl.rlim_max < N + 100 ? rl.rlim_max : N + 100;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < N + 100) {
		test_skip();
	}
	/* Each one past its handshake before the next connects: 2,000 connections that never
	 * authenticated from one source are a flood, shed past STORE_PREAUTH_PER_SOURCE
	 * (tests/faults/preauth.sh). */
	for (i = 0; i < N; i++) {
		fds[i] = raw_connect(dmn.port);
		assert_true(fds[i] >= 0);
		assert_int_equal(raw_hello(fds[i], NULL), 0);
	}
	wire_put_bytes(&b, "conn2000", 8);
	wire_put_i64(&b, 1);
	for (i = 0; i < N; i++) {
		assert_int_equal(raw_frame(fds[i], WIRE_OP_ADD, (uint32_t)i + 100, b.p, b.len), 0);
	}
	for (i = 0; i < N; i++) {
		struct wire_cur c;

		assert_int_equal(raw_read(fds[i], &h, buf, sizeof(buf)), 0);
		assert_int_equal(h.status, WIRE_OK);
		assert_int_equal(h.id, (uint32_t)i + 100);
		c = (struct wire_cur){buf, buf + 8, false};
		x = wire_get_i64(&c);
		assert_true(x >= 1 && x <= N);
		v = x > v ? x : v;
	}
	assert_int_equal(v, N);
	for (i = 0; i < N; i++) {
		close(fds[i]);
	}
	free(fds);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

/* A peer that pipelines requests for big values and never reads: the server stops reading
 * it once replies pile up, its memory stays bounded, and nothing is lost once it reads. */
static void reader_that_does_not_read_is_bounded(void **state)
{
	enum { GETS = 100, VLEN = 1 << 20 };
	struct wire_buf b = {0};
	struct wire_hdr h;
	uint8_t *buf = malloc(VLEN + 64);
	long before, after;
	size_t off;
	int fd = raw_connect(dmn.port), i;

	(void)state;
	assert_non_null(buf);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	before = rss_kib(dmn.pid);
	memset(buf, 'v', VLEN);
	off = wire_frame_begin(&b, WIRE_OP_SET, 0, 0, 2);
	wire_put_bytes(&b, "bigvalue", 8);
	wire_put_bytes(&b, buf, VLEN);
	wire_put_i64(&b, 0);
	wire_frame_end(&b, off);
	for (i = 0; i < GETS; i++) {
		off = wire_frame_begin(&b, WIRE_OP_GET, 0, 0, (uint32_t)(100 + i));
		wire_put_bytes(&b, "bigvalue", 8);
		wire_frame_end(&b, off);
	}
	assert_int_equal(raw_send(fd, b.p, b.len), 0);
	raw_expect_served(dmn.port);
	after = rss_kib(dmn.pid);
	print_message("RSS %ld KiB -> %ld KiB with %d MiB of replies unread\n", before, after,
		      GETS * (VLEN >> 20));
	assert_true(after - before < 48 * 1024);
	assert_int_equal(raw_read(fd, &h, buf, VLEN + 64), 0);
	assert_int_equal(h.id, 2);
	for (i = 0; i < GETS; i++) {
		assert_int_equal(raw_read(fd, &h, buf, VLEN + 64), 0);
		assert_int_equal(h.status, WIRE_OK);
		assert_int_equal(h.id, (uint32_t)(100 + i));
		assert_int_equal(h.len - 8, 1 + 4 + VLEN);
	}
	close(fd);
	free(buf);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

/* Extreme int64 TTLs and timeouts saturate; nothing overflows (UBSan would abort). */
static void extreme_ttl_and_timeout(void **state)
{
	struct wire_buf b = {0};
	struct wire_hdr h;
	uint8_t buf[128];
	size_t off;
	int fd = raw_connect(dmn.port);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	off = wire_frame_begin(&b, WIRE_OP_SET, 0, 0, 30);
	wire_put_bytes(&b, "forever", 7);
	wire_put_bytes(&b, "x", 1);
	wire_put_i64(&b, INT64_MAX);
	wire_frame_end(&b, off);
	off = wire_frame_begin(&b, WIRE_OP_WAIT, 0, 0, 31);
	wire_put_u8(&b, WIRE_WAIT_ANY);
	wire_put_i64(&b, INT64_MAX);
	wire_put_u32(&b, 1);
	wire_put_bytes(&b, "not-yet", 7);
	wire_frame_end(&b, off);
	off = wire_frame_begin(&b, WIRE_OP_ADD, 0, 0, 32);
	wire_put_bytes(&b, "min", 3);
	wire_put_i64(&b, INT64_MIN);
	wire_frame_end(&b, off);
	off = wire_frame_begin(&b, WIRE_OP_ADD, 0, 0, 33);
	wire_put_bytes(&b, "min", 3);
	wire_put_i64(&b, -1);
	wire_frame_end(&b, off);
	off = wire_frame_begin(&b, WIRE_OP_SET, 0, 0, 34);
	wire_put_bytes(&b, "not-yet", 7);
	wire_put_bytes(&b, "", 0);
	wire_put_i64(&b, 0);
	wire_frame_end(&b, off);
	assert_int_equal(raw_send(fd, b.p, b.len), 0);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, 30);
	assert_int_equal(h.status, WIRE_OK);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, 32);
	assert_int_equal(h.status, WIRE_OK);
	raw_expect_error(fd, WIRE_OP_ADD, 33, WIRE_E_OVERFLOW, "ADD: overflow");
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, 31); /* woken by the SET below it, answered first */
	assert_int_equal(h.status, WIRE_OK);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, 34);
	close(fd);
	wire_buf_finish(&b);
	raw_expect_served(dmn.port);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bad_magic_is_refused),
		cmocka_unit_test(wrong_version_is_refused),
		cmocka_unit_test(length_zero_is_refused),
		cmocka_unit_test(length_max_is_refused),
		cmocka_unit_test(truncated_frame_then_close),
		cmocka_unit_test(unknown_op_is_refused),
		cmocka_unit_test(request_before_hello_is_refused),
		cmocka_unit_test(truncated_payload_is_refused),
		cmocka_unit_test(trailing_bytes_are_refused),
		cmocka_unit_test(long_key_is_refused_and_connection_kept),
		cmocka_unit_test(remaining_request_errors_are_named),
		cmocka_unit_test(million_tiny_frames),
		cmocka_unit_test(declared_huge_value_never_sent),
		cmocka_unit_test(two_thousand_connections),
		cmocka_unit_test(reader_that_does_not_read_is_bounded),
		cmocka_unit_test(extreme_ttl_and_timeout),
	};

	return test_run_group("store-hostile", tests, argc > 1 ? argv[1] : NULL, group_setup,
			      group_teardown);
}
