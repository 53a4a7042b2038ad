/* SPDX-License-Identifier: MIT */
/* tests/store/test_tcpstore.c: PyTorch TCPStore requests: sniffed and decoded, both versions. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "rendezvous/store/tcpstore_codec.h"

/*
 * Recorded from the real client (Debian's python3-torch 1.13.1) with
 * tests/store/tcpstore_record.py: set("key0", "value0"), get("key0") (a WAIT, then GET),
 * add("cnt", 3), wait(["key0", "cnt"]), compare_set("key0", "value0", "value1"), num_keys(),
 * delete_key("key0"), set("bin", b"\x00\x01\x02\xff"). The client prefixes every key with "/".
 * Its second connection (callbacks) sent nothing.
 */
static const uint8_t v1_stream[] = {
	0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x6b, 0x65, 0x79, 0x30, 0x06,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x30, 0x05, 0x01,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x2f, 0x6b, 0x65, 0x79, 0x30, 0x02, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f,
	0x6b, 0x65, 0x79, 0x30, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x63,
	0x6e, 0x74, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x02, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x6b, 0x65,
	0x79, 0x30, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x63, 0x6e, 0x74, 0x01,
	0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x6b, 0x65, 0x79, 0x30, 0x06, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x30, 0x06, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x31, 0x06, 0x08, 0x05, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x6b, 0x65, 0x79, 0x30, 0x00, 0x04, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x2f, 0x62, 0x69, 0x6e, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x01, 0x02, 0xff,
};

static const enum ts_op v1_ops[] = {
	TS_OP_SET,	   TS_OP_WAIT,	     TS_OP_GET,	       TS_OP_ADD, TS_OP_WAIT,
	TS_OP_COMPARE_SET, TS_OP_GETNUMKEYS, TS_OP_DELETE_KEY, TS_OP_SET,
};

/* ---- a 2.x stream, built as PyTorch 2.x's client encodes (TCPStore.cpp, SendBuffer) ---- */

struct out {
	uint8_t b[4096];
	size_t n;
};

static void put(struct out *o, const void *p, size_t n)
{
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void put_u8(struct out *o, uint8_t v)
{
	put(o, &v, 1);
}

static void put_le(struct out *o, uint64_t v, int bytes)
{
	int i;

	for (i = 0; i < bytes; i++) {
		put_u8(o, (uint8_t)(v >> (8 * i)));
	}
}

static void put_str(struct out *o, const char *s)
{
	put_le(o, strlen(s), 8);
	put(o, s, strlen(s));
}

/* Query numbers of 2.x (TCPStoreBackend.hpp's QueryType), in order from VALIDATE = 0. */
enum {
	Q_VALIDATE,
	Q_SET,
	Q_COMPARE_SET,
	Q_GET,
	Q_ADD,
	Q_CHECK,
	Q_WAIT,
	Q_GETNUMKEYS,
	Q_DELETE_KEY,
	Q_APPEND,
	Q_MULTI_GET,
	Q_MULTI_SET,
	Q_CANCEL_WAIT,
	Q_PING,
	Q_QUEUE_PUSH,
	Q_QUEUE_POP,
	Q_QUEUE_LEN,
};

static const enum ts_op v2_ops[] = {
	TS_OP_VALIDATE,	  TS_OP_PING,	   TS_OP_SET,	      TS_OP_WAIT,	TS_OP_GET,
	TS_OP_ADD,	  TS_OP_CHECK,	   TS_OP_COMPARE_SET, TS_OP_APPEND,	TS_OP_MULTI_SET,
	TS_OP_MULTI_GET,  TS_OP_WAIT,	   TS_OP_CANCEL_WAIT, TS_OP_GETNUMKEYS, TS_OP_DELETE_KEY,
	TS_OP_QUEUE_PUSH, TS_OP_QUEUE_LEN, TS_OP_QUEUE_POP,
};

/* The connection of: TCPStore(...); set; get; add; check; compare_set; append; multi_set;
 * multi_get; a wait that timed out (CANCEL_WAIT); num_keys; delete_key; queue_push;
 * queue_len; queue_pop. */
static void build_v2(struct out *o)
{
	o->n = 0;
	put_u8(o, Q_VALIDATE);
	put_le(o, TS_MAGIC, 4);
	put_u8(o, Q_PING);
	put_le(o, 0x12345678u, 4);
	put_u8(o, Q_SET);
	put_str(o, "/k");
	put_str(o, "v");
	put_u8(o, Q_WAIT);
	put_le(o, 1, 8);
	put_str(o, "/k");
	put_u8(o, Q_GET);
	put_str(o, "/k");
	put_u8(o, Q_ADD);
	put_str(o, "/n");
	put_le(o, (uint64_t)-2, 8);
	put_u8(o, Q_CHECK);
	put_le(o, 2, 8);
	put_str(o, "/k");
	put_str(o, "/n");
	put_u8(o, Q_COMPARE_SET);
	put_str(o, "/k");
	put_str(o, "v");
	put_str(o, "w");
	put_u8(o, Q_APPEND);
	put_str(o, "/k");
	put_str(o, "x");
	put_u8(o, Q_MULTI_SET);
	put_le(o, 2, 8);
	put_str(o, "/a");
	put_str(o, "1");
	put_str(o, "/b");
	put_str(o, "2");
	put_u8(o, Q_MULTI_GET);
	put_le(o, 2, 8);
	put_str(o, "/a");
	put_str(o, "/b");
	put_u8(o, Q_WAIT);
	put_le(o, 1, 8);
	put_str(o, "/never");
	put_u8(o, Q_CANCEL_WAIT);
	put_u8(o, Q_GETNUMKEYS);
	put_u8(o, Q_DELETE_KEY);
	put_str(o, "/k");
	put_u8(o, Q_QUEUE_PUSH);
	put_str(o, "/q");
	put_str(o, "item");
	put_u8(o, Q_QUEUE_LEN);
	put_str(o, "/q");
	put_u8(o, Q_QUEUE_POP);
	put_str(o, "/q");
}

static const struct ts_limits lim = {CRUN_STORE_MAX_KEY_LEN, CRUN_STORE_MAX_VALUE_LEN,
				     CRUN_STORE_MAX_KEYS};

/* Decode @n requests of @stream in @proto, checking their ops; returns the bytes used. */
static size_t decode_all(enum ts_proto proto, const uint8_t *p, size_t len, const enum ts_op *ops,
			 size_t nops, struct ts_req *reqs)
{
	size_t off = 0, need, i;
	char msg[160];

	for (i = 0; i < nops; i++) {
		assert_int_equal(ts_decode(proto, p + off, len - off, &lim, &reqs[i], &need, msg,
					   sizeof(msg)),
				 TS_DONE);
		assert_int_equal(reqs[i].op, ops[i]);
		off += need;
	}
	assert_int_equal(off, len);
	return off;
}

static void tcpstore_sniff_tells_protocols_apart(void **state)
{
	/* crun's HELLO: big-endian length, op 1 in the fifth byte. */
	static const uint8_t hello[] = {0, 0, 0, 0x30, 1, 0, 0, 0, 0, 0, 0, 1};
	struct out o;

	(void)state;
	build_v2(&o);
	assert_int_equal(ts_sniff(v1_stream, sizeof(v1_stream)), TS_PROTO_V1);
	assert_int_equal(ts_sniff(o.b, o.n), TS_PROTO_V2);
	assert_int_equal(ts_sniff(hello, sizeof(hello)), TS_PROTO_CRUN);
	/* Too short to tell: a 0 first byte is crun's, 1.x's SET or 2.x's VALIDATE. */
	assert_int_equal(ts_sniff(v1_stream, 4), TS_PROTO_UNKNOWN);
	assert_int_equal(ts_sniff(o.b, 4), TS_PROTO_UNKNOWN);
	assert_int_equal(ts_sniff(hello, 4), TS_PROTO_UNKNOWN);
	/* A 1.x query other than SET says so in one byte (GETNUMKEYS is one byte in all). */
	assert_int_equal(ts_sniff((const uint8_t[]){6}, 1), TS_PROTO_V1);
	assert_int_equal(ts_sniff((const uint8_t[]){8}, 1), TS_PROTO_V1);
	/* Anything else is left to crun's frame checks (a frame of 16 MiB and more). */
	assert_int_equal(ts_sniff((const uint8_t[]){9}, 1), TS_PROTO_CRUN);
	assert_int_equal(ts_sniff((const uint8_t[]){'G', 'E', 'T', ' ', '/'}, 5), TS_PROTO_CRUN);
}

static void tcpstore_decodes_recorded_v1_stream(void **state)
{
	struct ts_req r[9];
	enum ts_proto proto;

	(void)state;
	decode_all(TS_PROTO_V1, v1_stream, sizeof(v1_stream), v1_ops, 9, r);
	assert_int_equal(r[0].key.len, 5);
	assert_memory_equal(r[0].key.p, "/key0", 5);
	assert_int_equal(r[0].a.len, 6);
	assert_memory_equal(r[0].a.p, "value0", 6);
	assert_int_equal(r[1].n, 1);
	assert_int_equal(r[3].num, 3);
	assert_int_equal(r[4].n, 2);
	assert_memory_equal(r[5].a.p, "value0", 6);
	assert_memory_equal(r[5].b.p, "value1", 6);
	assert_int_equal(r[8].a.len, 4);
	assert_memory_equal(r[8].a.p, "\x00\x01\x02\xff", 4);
	assert_int_equal(ts_decode_stream(v1_stream, sizeof(v1_stream), &proto), 9);
	assert_int_equal(proto, TS_PROTO_V1);
}

static void tcpstore_decodes_v2_stream(void **state)
{
	struct ts_req r[18];
	const uint8_t *cur;
	struct wire_str k;
	enum ts_proto proto;
	struct out o;

	(void)state;
	build_v2(&o);
	decode_all(TS_PROTO_V2, o.b, o.n, v2_ops, 18, r);
	assert_int_equal((uint32_t)r[0].num, TS_MAGIC);
	assert_int_equal(r[1].num, 0x12345678);
	assert_int_equal(r[5].num, -2);
	assert_int_equal(r[9].n, 2);
	cur = r[9].list;
	k = ts_list_next(&cur);
	assert_memory_equal(k.p, "/a", 2);
	k = ts_list_next(&cur);
	assert_memory_equal(k.p, "1", 1);
	k = ts_list_next(&cur);
	assert_memory_equal(k.p, "/b", 2);
	assert_int_equal(ts_decode_stream(o.b, o.n, &proto), 18);
	assert_int_equal(proto, TS_PROTO_V2);
}

/* Every cut of a stream is a shorter stream plus an incomplete request: never an error. */
static void tcpstore_truncated_stream_waits_for_more(void **state)
{
	enum ts_proto proto;
	struct ts_req r;
	size_t cut, need;
	char msg[160];
	struct out o;
	int n, last = 0;

	(void)state;
	build_v2(&o);
	for (cut = 5; cut < o.n; cut++) {
		n = ts_decode_stream(o.b, cut, &proto);
		assert_true(n >= last && n < 18);
		last = n;
	}
	for (cut = 1; cut < sizeof(v1_stream); cut++) {
		n = ts_decode_stream(v1_stream, cut, &proto);
		assert_true(n >= 0 && n < 9);
	}
	/* The length it asks for is where the next field ends. */
	assert_int_equal(ts_decode(TS_PROTO_V1, v1_stream, 3, &lim, &r, &need, msg, sizeof(msg)),
			 TS_NEED_MORE);
	assert_int_equal(need, 9);
	assert_int_equal(ts_decode(TS_PROTO_V1, v1_stream, 9, &lim, &r, &need, msg, sizeof(msg)),
			 TS_NEED_MORE);
	assert_int_equal(need, 14);
}

static void expect_error(enum ts_proto proto, const uint8_t *p, size_t n, int rc, const char *text)
{
	struct ts_req r;
	size_t need;
	char msg[160];

	assert_int_equal(ts_decode(proto, p, n, &lim, &r, &need, msg, sizeof(msg)), rc);
	assert_string_equal(msg, text);
}

static void tcpstore_rejects_hostile_requests(void **state)
{
	struct out o = {.n = 0};

	(void)state;
	expect_error(TS_PROTO_V1, (const uint8_t[]){9}, 1, TS_E_UNKNOWN,
		     "unknown 1.x query type 9");
	expect_error(TS_PROTO_V2, (const uint8_t[]){17}, 1, TS_E_UNKNOWN,
		     "unknown 2.x query type 17");
	/* An oversized length is refused before any of its bytes is waited for. */
	put_u8(&o, 2);
	put_le(&o, 5000, 8);
	expect_error(TS_PROTO_V1, o.b, o.n, TS_E_TOO_BIG, "key length 5000 exceeds limit 4096");
	o.n = 0;
	put_u8(&o, 0);
	put_str(&o, "/k");
	put_le(&o, UINT64_MAX, 8);
	expect_error(TS_PROTO_V1, o.b, o.n, TS_E_TOO_BIG,
		     "value length 18446744073709551615 exceeds limit 16777216");
	o.n = 0;
	put_u8(&o, Q_WAIT);
	put_le(&o, 5000, 8);
	expect_error(TS_PROTO_V2, o.b, o.n, TS_E_TOO_BIG, "WAIT of 5000 keys exceeds limit 4096");
	o.n = 0;
	put_u8(&o, Q_VALIDATE);
	put_le(&o, 0xdeadbeef, 4);
	expect_error(TS_PROTO_V2, o.b, o.n, TS_E_MAGIC,
		     "VALIDATE: magic 0xdeadbeef, expected 0x3c85f7ce");
	/* 0xff marks a query a version lacks in the codec's tables: it is no query. */
	expect_error(TS_PROTO_V1, (const uint8_t[]){0xff}, 1, TS_E_UNKNOWN,
		     "unknown 1.x query type 255");
	expect_error(TS_PROTO_V2, (const uint8_t[]){0xff}, 1, TS_E_UNKNOWN,
		     "unknown 2.x query type 255");
}

/* The encoder writes what the decoder reads: the recorded 1.x stream byte for byte, and a
 * 2.x stream of every query with arguments that come back. */
static void tcpstore_encoder_writes_what_the_decoder_reads(void **state)
{
	static const uint8_t bin[] = {0x00, 0x01, 0x02, 0xff};
	struct wire_buf b = {0};
	enum ts_proto proto;
	struct ts_req r;
	size_t need;
	char msg[160];

	(void)state;
	ts_put_query(&b, TS_PROTO_V1, TS_OP_SET);
	ts_put_vec(&b, "/key0", 5);
	ts_put_vec(&b, "value0", 6);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_WAIT);
	ts_put_u64(&b, 1);
	ts_put_vec(&b, "/key0", 5);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_GET);
	ts_put_vec(&b, "/key0", 5);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_ADD);
	ts_put_vec(&b, "/cnt", 4);
	ts_put_u64(&b, 3);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_WAIT);
	ts_put_u64(&b, 2);
	ts_put_vec(&b, "/key0", 5);
	ts_put_vec(&b, "/cnt", 4);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_COMPARE_SET);
	ts_put_vec(&b, "/key0", 5);
	ts_put_vec(&b, "value0", 6);
	ts_put_vec(&b, "value1", 6);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_GETNUMKEYS);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_DELETE_KEY);
	ts_put_vec(&b, "/key0", 5);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_SET);
	ts_put_vec(&b, "/bin", 4);
	ts_put_vec(&b, bin, sizeof(bin));
	assert_false(b.oom);
	assert_int_equal(b.len, sizeof(v1_stream));
	assert_memory_equal(b.p, v1_stream, sizeof(v1_stream));

	b.len = 0;
	ts_put_query(&b, TS_PROTO_V2, TS_OP_VALIDATE);
	ts_put_u32(&b, TS_MAGIC);
	ts_put_query(&b, TS_PROTO_V2, TS_OP_PING);
	ts_put_u32(&b, 0x6372756eu);
	assert_int_equal(ts_decode_stream(b.p, b.len, &proto), 2);
	assert_int_equal(proto, TS_PROTO_V2);
	assert_int_equal(ts_decode(proto, b.p + 5, b.len - 5, &lim, &r, &need, msg, sizeof(msg)),
			 TS_DONE);
	assert_int_equal(r.op, TS_OP_PING);
	assert_int_equal(r.num, 0x6372756e);
	assert_int_equal(ts_query_code(TS_PROTO_V1, TS_OP_APPEND), TS_NO_QUERY);
	assert_int_equal(ts_query_code(TS_PROTO_V2, TS_OP_WATCH_KEY), TS_NO_QUERY);
	assert_int_equal(ts_query_code(TS_PROTO_V2, TS_OP_QUEUE_LEN), 16);
	wire_buf_finish(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tcpstore_sniff_tells_protocols_apart),
		cmocka_unit_test(tcpstore_decodes_recorded_v1_stream),
		cmocka_unit_test(tcpstore_decodes_v2_stream),
		cmocka_unit_test(tcpstore_truncated_stream_waits_for_more),
		cmocka_unit_test(tcpstore_rejects_hostile_requests),
		cmocka_unit_test(tcpstore_encoder_writes_what_the_decoder_reads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
