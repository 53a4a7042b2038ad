/* SPDX-License-Identifier: MIT */
/* tests/unit/test_wire.c: the frame codec and its limits (docs/protocol.md). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>

#include "rendezvous/store/wire.h"
#include "src/common/diag.h"
#include "tests/lib/cmocka_skip.h"

static const struct wire_limits lim = {CRUN_STORE_MAX_KEY_LEN, CRUN_STORE_MAX_VALUE_LEN,
				       CRUN_STORE_MAX_KEYS};

/* Decode the single frame in @b; the decoder's message goes to @msg. */
static int decode(const struct wire_buf *b, struct wire_req *r, char *msg, size_t msglen)
{
	struct crun_diag d;
	struct wire_hdr h;
	int st;

	assert_true(b->len >= WIRE_HDR_LEN);
	assert_int_equal(wire_hdr_decode(b->p, WIRE_MAX_FRAME, &h), 0);
	assert_int_equal((size_t)h.len + 4, b->len);
	st = wire_req_decode(&h, b->p + WIRE_HDR_LEN, h.len - 8, &lim, r, &d);
	diag_copy_out(&d, msg, msglen);
	return st;
}

static void wire_hdr_round_trip(void **state)
{
	struct wire_hdr in = {1234, WIRE_OP_WAIT, WIRE_FLAG_REPLY, WIRE_E_TIMEOUT, 0xdeadbeef}, out;
	uint8_t p[WIRE_HDR_LEN];

	(void)state;
	wire_hdr_encode(p, &in);
	assert_int_equal(p[0], 0); /* big-endian */
	assert_int_equal(p[3], 1234 & 0xff);
	assert_int_equal(wire_hdr_decode(p, WIRE_MAX_FRAME, &out), 0);
	assert_int_equal(out.len, 1234);
	assert_int_equal(out.op, WIRE_OP_WAIT);
	assert_int_equal(out.flags, WIRE_FLAG_REPLY);
	assert_int_equal(out.status, WIRE_E_TIMEOUT);
	assert_int_equal(out.id, 0xdeadbeef);
}

static void wire_decode_rejects_short_and_oversized_frames(void **state)
{
	struct wire_hdr h = {0, WIRE_OP_SET, 0, 0, 1}, out;
	uint8_t p[WIRE_HDR_LEN];

	(void)state;
	wire_hdr_encode(p, &h);
	assert_int_equal(wire_hdr_decode(p, WIRE_MAX_FRAME, &out), -EPROTO);
	h.len = 7;
	wire_hdr_encode(p, &h);
	assert_int_equal(wire_hdr_decode(p, WIRE_MAX_FRAME, &out), -EPROTO);
	h.len = 8;
	wire_hdr_encode(p, &h);
	assert_int_equal(wire_hdr_decode(p, WIRE_MAX_FRAME, &out), 0);
	h.len = WIRE_MAX_FRAME;
	wire_hdr_encode(p, &h);
	assert_int_equal(wire_hdr_decode(p, WIRE_MAX_FRAME, &out), 0);
	h.len = WIRE_MAX_FRAME + 1;
	wire_hdr_encode(p, &h);
	assert_int_equal(wire_hdr_decode(p, WIRE_MAX_FRAME, &out), -EMSGSIZE);
	h.len = UINT32_MAX;
	wire_hdr_encode(p, &h);
	assert_int_equal(wire_hdr_decode(p, WIRE_MAX_FRAME, &out), -EMSGSIZE);
	assert_int_equal(out.len, UINT32_MAX);
}

static void wire_set_request_round_trip(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	char msg[256];
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, WIRE_OP_SET, 0, 0, 42);
	wire_put_bytes(&b, "job/1/key", 9);
	wire_put_bytes(&b, "\0binary\xff", 8);
	wire_put_i64(&b, 1500);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_OK);
	assert_int_equal(r.op, WIRE_OP_SET);
	assert_int_equal(r.id, 42);
	assert_int_equal(r.key.len, 9);
	assert_memory_equal(r.key.p, "job/1/key", 9);
	assert_int_equal(r.val.len, 8);
	assert_memory_equal(r.val.p, "\0binary\xff", 8);
	assert_int_equal(r.num, 1500);
	wire_buf_finish(&b);
}

static void wire_wait_request_walks_keys(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	struct wire_str k;
	const uint8_t *cur;
	char msg[256];
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, WIRE_OP_WAIT, 0, 0, 7);
	wire_put_u8(&b, WIRE_WAIT_ANY);
	wire_put_i64(&b, -1);
	wire_put_u32(&b, 3);
	wire_put_bytes(&b, "a", 1);
	wire_put_bytes(&b, "", 0);
	wire_put_bytes(&b, "ccc", 3);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_OK);
	assert_int_equal(r.mode, WIRE_WAIT_ANY);
	assert_int_equal(r.num, -1);
	assert_int_equal(r.n, 3);
	cur = r.list;
	k = wire_list_next(&cur);
	assert_int_equal(k.len, 1);
	k = wire_list_next(&cur);
	assert_int_equal(k.len, 0);
	k = wire_list_next(&cur);
	assert_int_equal(k.len, 3);
	assert_memory_equal(k.p, "ccc", 3);
	assert_ptr_equal(cur, r.list_end);
	wire_buf_finish(&b);
}

static void wire_decode_rejects_long_key(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	char msg[256], *key = calloc(1, CRUN_STORE_MAX_KEY_LEN + 1);
	size_t off;

	(void)state;
	assert_non_null(key);
	off = wire_frame_begin(&b, WIRE_OP_GET, 0, 0, 1);
	wire_put_bytes(&b, key, CRUN_STORE_MAX_KEY_LEN + 1);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_TOO_BIG);
	assert_string_equal(msg, "GET: key length 4097 exceeds limit 4096");
	wire_buf_finish(&b);
	free(key);
}

static void wire_decode_rejects_value_over_limit(void **state)
{
	struct wire_limits small = {16, 4, 2};
	struct wire_buf b = {0};
	struct wire_hdr h;
	struct wire_req r;
	struct crun_diag d;
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, WIRE_OP_APPEND, 0, 0, 1);
	wire_put_bytes(&b, "k", 1);
	wire_put_bytes(&b, "12345", 5);
	wire_frame_end(&b, off);
	assert_int_equal(wire_hdr_decode(b.p, WIRE_MAX_FRAME, &h), 0);
	assert_int_equal(wire_req_decode(&h, b.p + WIRE_HDR_LEN, h.len - 8, &small, &r, &d),
			 WIRE_E_TOO_BIG);
	assert_string_equal(d.msg, "APPEND: value length 5 exceeds limit 4");
	wire_buf_finish(&b);
}

static void wire_decode_rejects_too_many_and_no_keys(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	char msg[256];
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, WIRE_OP_CHECK, 0, 0, 1);
	wire_put_u32(&b, CRUN_STORE_MAX_KEYS + 1);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_TOO_BIG);
	assert_string_equal(msg, "CHECK: 4097 keys exceeds limit 4096");
	b.len = 0;
	off = wire_frame_begin(&b, WIRE_OP_MULTI_GET, 0, 0, 1);
	wire_put_u32(&b, 0);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_INVALID);
	assert_string_equal(msg, "MULTI_GET: no keys");
	wire_buf_finish(&b);
}

static void wire_decode_rejects_truncated_and_trailing(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	char msg[256];
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, WIRE_OP_ADD, 0, 0, 1);
	wire_put_bytes(&b, "ctr", 3);
	wire_put_u32(&b, 0); /* half of the i64 */
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_BAD_FRAME);
	assert_string_equal(msg, "malformed ADD request: truncated payload");
	b.len = 0;
	off = wire_frame_begin(&b, WIRE_OP_PING, 0, 0, 1);
	wire_put_u8(&b, 1);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_BAD_FRAME);
	assert_string_equal(msg, "malformed PING request: trailing bytes");
	wire_buf_finish(&b);
}

static void wire_decode_rejects_bad_header_fields(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	char msg[256];
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, 0, 0, 0, 1);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_UNKNOWN_OP);
	assert_string_equal(msg, "unknown op 0");
	b.len = 0;
	off = wire_frame_begin(&b, WIRE_OP_PING, 0x80, 0, 1);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_BAD_FRAME);
	assert_string_equal(msg, "reserved flags 0x80 set in request");
	b.len = 0;
	off = wire_frame_begin(&b, WIRE_OP_SET, 0, 0, 1);
	wire_put_bytes(&b, "k", 1);
	wire_put_bytes(&b, "v", 1);
	wire_put_i64(&b, -5);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_INVALID);
	assert_string_equal(msg, "SET: negative ttl_ms");
	b.len = 0;
	off = wire_frame_begin(&b, WIRE_OP_WAIT, 0, 0, 1);
	wire_put_u8(&b, 7);
	wire_put_i64(&b, 0);
	wire_put_u32(&b, 1);
	wire_put_bytes(&b, "k", 1);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_INVALID);
	assert_string_equal(msg, "WAIT: bad mode 7");
	wire_buf_finish(&b);
}

static void wire_multi_set_validates_every_pair(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	struct wire_str k, v;
	const uint8_t *cur;
	char msg[256];
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, WIRE_OP_MULTI_SET, 0, 0, 9);
	wire_put_u32(&b, 2);
	wire_put_bytes(&b, "a", 1);
	wire_put_bytes(&b, "1", 1);
	wire_put_bytes(&b, "b", 1);
	wire_put_bytes(&b, "22", 2);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_OK);
	cur = r.list;
	k = wire_list_next(&cur);
	v = wire_list_next(&cur);
	assert_memory_equal(k.p, "a", 1);
	assert_memory_equal(v.p, "1", 1);
	k = wire_list_next(&cur);
	v = wire_list_next(&cur);
	assert_memory_equal(k.p, "b", 1);
	assert_int_equal(v.len, 2);
	assert_ptr_equal(cur, r.list_end);
	/* The same frame cut short by one byte. */
	b.len--;
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_BAD_FRAME);
	wire_buf_finish(&b);
}

static void wire_error_reply_carries_message(void **state)
{
	struct wire_buf b = {0};
	struct wire_hdr h;

	(void)state;
	wire_put_error(&b, WIRE_OP_WAIT, 5, WIRE_E_TIMEOUT, "wait timed out after 10 ms");
	assert_int_equal(wire_hdr_decode(b.p, WIRE_MAX_FRAME, &h), 0);
	assert_int_equal(h.flags, WIRE_FLAG_REPLY);
	assert_int_equal(h.status, WIRE_E_TIMEOUT);
	assert_int_equal(h.len - 8, strlen("wait timed out after 10 ms"));
	assert_memory_equal(b.p + WIRE_HDR_LEN, "wait timed out after 10 ms", h.len - 8);
	wire_buf_finish(&b);
}

static void wire_status_maps_to_codes(void **state)
{
	(void)state;
	assert_int_equal(wire_status_to_code(WIRE_OK), 0);
	assert_int_equal(wire_status_to_code(WIRE_E_BAD_FRAME), -EPROTO);
	assert_int_equal(wire_status_to_code(WIRE_E_TOO_BIG), -EMSGSIZE);
	assert_int_equal(wire_status_to_code(WIRE_E_BAD_MAGIC), CRUN_EMAGIC);
	assert_int_equal(wire_status_to_code(WIRE_E_BAD_VERSION), CRUN_EVERSION);
	assert_int_equal(wire_status_to_code(WIRE_E_AUTH), CRUN_EAUTH);
	assert_int_equal(wire_status_to_code(WIRE_E_TIMEOUT), -ETIMEDOUT);
	assert_int_equal(wire_status_to_code(WIRE_E_BUSY), -EBUSY);
	assert_int_equal(wire_status_to_code(999), CRUN_ESERVER);
	assert_string_equal(wire_op_name(WIRE_OP_CAS), "COMPARE_SET");
	assert_string_equal(wire_op_name(200), "op?");
	assert_string_equal(wire_status_name(WIRE_E_SHUTDOWN), "SHUTDOWN");
}

static void wire_cursor_never_reads_past_end(void **state)
{
	static const uint8_t p[] = {0, 0, 0, 9, 'a', 'b'};
	struct wire_cur c = {p, p + sizeof(p), false};
	struct wire_str s;

	(void)state;
	s = wire_get_bytes(&c);
	assert_true(c.bad);
	assert_null(s.p);
	assert_int_equal(wire_get_u32(&c), 0);
	assert_int_equal(wire_get_i64(&c), 0);
}

/* Lengths and counts near 2^32 inside a small frame: named, never an overread or a wrap. */
static void wire_decode_survives_lengths_near_2_32(void **state)
{
	struct wire_buf b = {0};
	struct wire_req r;
	char msg[256];
	size_t off;

	(void)state;
	/* A key that claims 4 GiB - 1 bytes with 3 present. */
	off = wire_frame_begin(&b, WIRE_OP_GET, 0, 0, 1);
	wire_put_u32(&b, UINT32_MAX);
	wire_put_raw(&b, "abc", 3);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_BAD_FRAME);
	assert_string_equal(msg, "malformed GET request: truncated payload");
	/* A key count of 2^32 - 1. */
	b.len = 0;
	off = wire_frame_begin(&b, WIRE_OP_CHECK, 0, 0, 2);
	wire_put_u32(&b, UINT32_MAX);
	wire_put_bytes(&b, "k", 1);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_TOO_BIG);
	assert_string_equal(msg, "CHECK: 4294967295 keys exceeds limit 4096");
	/* A MULTI_SET whose second value length would wrap a 32-bit offset. */
	b.len = 0;
	off = wire_frame_begin(&b, WIRE_OP_MULTI_SET, 0, 0, 3);
	wire_put_u32(&b, 2);
	wire_put_bytes(&b, "a", 1);
	wire_put_bytes(&b, "1", 1);
	wire_put_bytes(&b, "b", 1);
	wire_put_u32(&b, UINT32_MAX - 8);
	wire_put_raw(&b, "xy", 2);
	wire_frame_end(&b, off);
	assert_int_equal(decode(&b, &r, msg, sizeof(msg)), WIRE_E_BAD_FRAME);
	assert_string_equal(msg, "malformed MULTI_SET request: truncated payload");
	/* The same bytes as a stream: the first bad frame stops the count. */
	assert_int_equal(wire_decode_stream(b.p, b.len), ~0);
	wire_buf_finish(&b);
}

static void wire_decode_stream_counts_frames(void **state)
{
	struct wire_buf b = {0};
	size_t off;

	(void)state;
	off = wire_frame_begin(&b, WIRE_OP_PING, 0, 0, 1);
	wire_frame_end(&b, off);
	off = wire_frame_begin(&b, WIRE_OP_GET, 0, 0, 2);
	wire_put_bytes(&b, "k", 1);
	wire_frame_end(&b, off);
	assert_int_equal(wire_decode_stream(b.p, b.len), 2);
	assert_int_equal(wire_decode_stream(b.p, b.len - 1), ~1);
	wire_buf_finish(&b);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wire_hdr_round_trip),
		cmocka_unit_test(wire_decode_rejects_short_and_oversized_frames),
		cmocka_unit_test(wire_set_request_round_trip),
		cmocka_unit_test(wire_wait_request_walks_keys),
		cmocka_unit_test(wire_decode_rejects_long_key),
		cmocka_unit_test(wire_decode_rejects_value_over_limit),
		cmocka_unit_test(wire_decode_rejects_too_many_and_no_keys),
		cmocka_unit_test(wire_decode_rejects_truncated_and_trailing),
		cmocka_unit_test(wire_decode_rejects_bad_header_fields),
		cmocka_unit_test(wire_multi_set_validates_every_pair),
		cmocka_unit_test(wire_error_reply_carries_message),
		cmocka_unit_test(wire_status_maps_to_codes),
		cmocka_unit_test(wire_cursor_never_reads_past_end),
		cmocka_unit_test(wire_decode_survives_lengths_near_2_32),
		cmocka_unit_test(wire_decode_stream_counts_frames),
	};

	return test_run_group("unit-wire", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
