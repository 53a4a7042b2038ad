/* SPDX-License-Identifier: MIT */
/* rendezvous/store/tcpstore_codec.c: tell, decode and encode PyTorch's TCPStore requests. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/byteorder.h"

/*
 * The query numbers of each version, from PyTorch's TCPStore sources (1.13:
 * TCPStore.cpp; 2.x: TCPStoreBackend.hpp). NO_OP: the version has no such query.
 */
#define NO_OP TS_NO_QUERY
static const uint8_t v1_code[TS_OP_COUNT] = {
	[TS_OP_SET] = 0,	   [TS_OP_COMPARE_SET] = 1,
	[TS_OP_GET] = 2,	   [TS_OP_ADD] = 3,
	[TS_OP_CHECK] = 4,	   [TS_OP_WAIT] = 5,
	[TS_OP_GETNUMKEYS] = 6,	   [TS_OP_WATCH_KEY] = 7,
	[TS_OP_DELETE_KEY] = 8,	   [TS_OP_VALIDATE] = NO_OP,
	[TS_OP_APPEND] = NO_OP,	   [TS_OP_MULTI_GET] = NO_OP,
	[TS_OP_MULTI_SET] = NO_OP, [TS_OP_CANCEL_WAIT] = NO_OP,
	[TS_OP_PING] = NO_OP,	   [TS_OP_QUEUE_PUSH] = NO_OP,
	[TS_OP_QUEUE_POP] = NO_OP, [TS_OP_QUEUE_LEN] = NO_OP,
};
static const uint8_t v2_code[TS_OP_COUNT] = {
	[TS_OP_VALIDATE] = 0,	  [TS_OP_SET] = 1,	  [TS_OP_COMPARE_SET] = 2,
	[TS_OP_GET] = 3,	  [TS_OP_ADD] = 4,	  [TS_OP_CHECK] = 5,
	[TS_OP_WAIT] = 6,	  [TS_OP_GETNUMKEYS] = 7, [TS_OP_DELETE_KEY] = 8,
	[TS_OP_APPEND] = 9,	  [TS_OP_MULTI_GET] = 10, [TS_OP_MULTI_SET] = 11,
	[TS_OP_CANCEL_WAIT] = 12, [TS_OP_PING] = 13,	  [TS_OP_QUEUE_PUSH] = 14,
	[TS_OP_QUEUE_POP] = 15,	  [TS_OP_QUEUE_LEN] = 16, [TS_OP_WATCH_KEY] = NO_OP,
};

static const char *const op_names[TS_OP_COUNT] = {
	[TS_OP_SET] = "SET",
	[TS_OP_COMPARE_SET] = "COMPARE_SET",
	[TS_OP_GET] = "GET",
	[TS_OP_ADD] = "ADD",
	[TS_OP_CHECK] = "CHECK",
	[TS_OP_WAIT] = "WAIT",
	[TS_OP_GETNUMKEYS] = "GETNUMKEYS",
	[TS_OP_WATCH_KEY] = "WATCH_KEY",
	[TS_OP_DELETE_KEY] = "DELETE_KEY",
	[TS_OP_VALIDATE] = "VALIDATE",
	[TS_OP_APPEND] = "APPEND",
	[TS_OP_MULTI_GET] = "MULTI_GET",
	[TS_OP_MULTI_SET] = "MULTI_SET",
	[TS_OP_CANCEL_WAIT] = "CANCEL_WAIT",
	[TS_OP_PING] = "PING",
	[TS_OP_QUEUE_PUSH] = "QUEUE_PUSH",
	[TS_OP_QUEUE_POP] = "QUEUE_POP",
	[TS_OP_QUEUE_LEN] = "QUEUE_LEN",
};

const char *ts_op_name(enum ts_op op)
{
	return (unsigned)op < TS_OP_COUNT ? op_names[op] : "?";
}

const char *ts_proto_name(enum ts_proto p)
{
	return p == TS_PROTO_V1 ? "1.x" : p == TS_PROTO_V2 ? "2.x" : "crun";
}

/*
 * A crun connection opens with HELLO: a big-endian u32 length under 16 MiB (first byte 0)
 * and op 1 in its fifth byte. A 1.x client's first byte is its query (0 to 8); SET (0) is
 * followed by a little-endian u64 key length, whose fourth byte (the connection's fifth) is 0
 * for any key under 16 MiB. A 2.x client opens with VALIDATE (0) and the magic.
 */
enum ts_proto ts_sniff(const uint8_t *p, size_t n)
{
	if (n == 0) {
		return TS_PROTO_UNKNOWN;
	}
	if (p[0] != 0) {
		return p[0] <= v1_code[TS_OP_DELETE_KEY] ? TS_PROTO_V1 : TS_PROTO_CRUN;
	}
	if (n < TS_SNIFF_LEN) {
		return TS_PROTO_UNKNOWN;
	}
	if (get_le32(p + 1) == TS_MAGIC) {
		return TS_PROTO_V2;
	}
	return p[4] == 0 ? TS_PROTO_V1 : TS_PROTO_CRUN;
}

/* A cursor that stops at the first missing byte or oversized length. */
struct dec {
	const uint8_t *p;
	size_t n;
	size_t off;
	size_t need; /* > n: the bytes wanted when it stopped */
	int err;     /* TS_E_* */
	char *msg;
	size_t msglen;
};

static bool have(struct dec *d, uint64_t len)
{
	if (d->need > d->n || d->err) {
		return false;
	}
	if (len > TS_MAX_REQUEST || d->off + len > TS_MAX_REQUEST) {
		snprintf(d->msg, d->msglen, "request longer than %u bytes",
			 (unsigned)TS_MAX_REQUEST);
		d->err = TS_E_TOO_BIG;
		return false;
	}
	if (d->off + len > d->n) {
		d->need = d->off + (size_t)len;
		return false;
	}
	return true;
}

static uint64_t u64(struct dec *d)
{
	uint64_t v;

	if (!have(d, 8)) {
		return 0;
	}
	v = get_le64(d->p + d->off);
	d->off += 8;
	return v;
}

static uint32_t u32(struct dec *d)
{
	uint32_t v;

	if (!have(d, 4)) {
		return 0;
	}
	v = get_le32(d->p + d->off);
	d->off += 4;
	return v;
}

/* A u64 length and that many bytes, at most @max; @what names it in the message. */
static struct wire_str bytes(struct dec *d, uint32_t max, const char *what)
{
	struct wire_str s = {NULL, 0};
	uint64_t len = u64(d);

	if (d->err || d->need > d->n) {
		return s;
	}
	if (len > max) {
		snprintf(d->msg, d->msglen, "%s length %" PRIu64 " exceeds limit %u", what, len,
			 max);
		d->err = TS_E_TOO_BIG;
		return s;
	}
	if (!have(d, len)) {
		return s;
	}
	s.p = d->p + d->off;
	s.len = (uint32_t)len;
	d->off += (size_t)len;
	return s;
}

/* A count and that many keys (and values, for MULTI_SET). */
static void list(struct dec *d, struct ts_req *r, const struct ts_limits *lim, bool pairs)
{
	uint64_t n = u64(d), i;

	if (d->err || d->need > d->n) {
		return;
	}
	if (n > lim->max_keys) {
		snprintf(d->msg, d->msglen, "%s of %" PRIu64 " keys exceeds limit %u",
			 ts_op_name(r->op), n, lim->max_keys);
		d->err = TS_E_TOO_BIG;
		return;
	}
	r->n = (uint32_t)n;
	r->list = d->p + d->off;
	for (i = 0; i < n && !d->err && d->need <= d->n; i++) {
		bytes(d, lim->max_key_len, "key");
		if (pairs) {
			bytes(d, lim->max_value_len, "value");
		}
	}
}

static int to_op(enum ts_proto proto, uint8_t code, enum ts_op *op)
{
	const uint8_t *map = proto == TS_PROTO_V1 ? v1_code : v2_code;
	int i;

	if (code == NO_OP) {
		return -1; /* the marker of a query the version lacks, not a query */
	}
	for (i = 0; i < TS_OP_COUNT; i++) {
		if (map[i] == code) {
			*op = (enum ts_op)i;
			return 0;
		}
	}
	return -1;
}

int ts_decode(enum ts_proto proto, const uint8_t *p, size_t n, const struct ts_limits *lim,
	      struct ts_req *r, size_t *need, char *msg, size_t msglen)
{
	struct dec d = {.p = p, .n = n, .off = 1, .msg = msg, .msglen = msglen};

	memset(r, 0, sizeof(*r));
	msg[0] = '\0';
	if (n == 0) {
		*need = 1;
		return TS_NEED_MORE;
	}
	if (to_op(proto, p[0], &r->op) < 0) {
		snprintf(msg, msglen, "unknown %s query type %u", ts_proto_name(proto), p[0]);
		return TS_E_UNKNOWN;
	}
	switch (r->op) {
	case TS_OP_SET:
	case TS_OP_APPEND:
	case TS_OP_QUEUE_PUSH:
		r->key = bytes(&d, lim->max_key_len, "key");
		r->a = bytes(&d, lim->max_value_len, "value");
		break;
	case TS_OP_COMPARE_SET:
		r->key = bytes(&d, lim->max_key_len, "key");
		r->a = bytes(&d, lim->max_value_len, "expected value");
		r->b = bytes(&d, lim->max_value_len, "desired value");
		break;
	case TS_OP_GET:
	case TS_OP_WATCH_KEY:
	case TS_OP_DELETE_KEY:
	case TS_OP_QUEUE_POP:
	case TS_OP_QUEUE_LEN:
		r->key = bytes(&d, lim->max_key_len, "key");
		break;
	case TS_OP_ADD:
		r->key = bytes(&d, lim->max_key_len, "key");
		r->num = (int64_t)u64(&d);
		break;
	case TS_OP_CHECK:
	case TS_OP_WAIT:
	case TS_OP_MULTI_GET:
		list(&d, r, lim, false);
		break;
	case TS_OP_MULTI_SET:
		list(&d, r, lim, true);
		break;
	case TS_OP_VALIDATE:
	case TS_OP_PING:
		r->num = u32(&d);
		break;
	case TS_OP_GETNUMKEYS:
	case TS_OP_CANCEL_WAIT:
	case TS_OP_COUNT:
		break;
	}
	if (d.err) {
		return d.err;
	}
	if (d.need > n) {
		*need = d.need;
		return TS_NEED_MORE;
	}
	if (r->op == TS_OP_VALIDATE && (uint32_t)r->num != TS_MAGIC) {
		snprintf(msg, msglen, "VALIDATE: magic 0x%08x, expected 0x%08x", (unsigned)r->num,
			 TS_MAGIC);
		return TS_E_MAGIC;
	}
	*need = d.off;
	return TS_DONE;
}

struct wire_str ts_list_next(const uint8_t **cur)
{
	struct wire_str s;

	s.len = (uint32_t)get_le64(*cur);
	s.p = *cur + 8;
	*cur += 8 + (size_t)s.len;
	return s;
}

int ts_decode_stream(const uint8_t *data, size_t len, enum ts_proto *proto)
{
	const struct ts_limits lim = {CRUN_STORE_MAX_KEY_LEN, CRUN_STORE_MAX_VALUE_LEN,
				      CRUN_STORE_MAX_KEYS};
	struct ts_req r;
	size_t off = 0, need;
	char msg[160];
	int n = 0, rc;

	*proto = ts_sniff(data, len);
	if (*proto != TS_PROTO_V1 && *proto != TS_PROTO_V2) {
		return 0;
	}
	while (off < len) {
		rc = ts_decode(*proto, data + off, len - off, &lim, &r, &need, msg, sizeof(msg));
		if (rc == TS_NEED_MORE) {
			break;
		}
		if (rc != TS_DONE) {
			return ~n;
		}
		off += need;
		n++;
	}
	return n;
}

uint8_t ts_query_code(enum ts_proto proto, enum ts_op op)
{
	if ((unsigned)op >= TS_OP_COUNT || (proto != TS_PROTO_V1 && proto != TS_PROTO_V2)) {
		return TS_NO_QUERY;
	}
	return proto == TS_PROTO_V1 ? v1_code[op] : v2_code[op];
}

void ts_put_query(struct wire_buf *b, enum ts_proto proto, enum ts_op op)
{
	wire_put_u8(b, ts_query_code(proto, op));
}

void ts_put_u32(struct wire_buf *b, uint32_t v)
{
	uint8_t x[4];

	put_le32(x, v);
	wire_put_raw(b, x, sizeof(x));
}

void ts_put_agent_probe(struct wire_buf *b)
{
	ts_put_query(b, TS_PROTO_V2, TS_OP_VALIDATE);
	ts_put_u32(b, TS_MAGIC);
	ts_put_query(b, TS_PROTO_V2, TS_OP_PING);
	ts_put_u32(b, TS_AGENT_PROBE_NONCE);
}

bool ts_is_agent_probe(const uint8_t *p, size_t n)
{
	return n == TS_AGENT_PROBE_LEN && p[0] == ts_query_code(TS_PROTO_V2, TS_OP_VALIDATE) &&
	       get_le32(p + 1) == TS_MAGIC && p[5] == ts_query_code(TS_PROTO_V2, TS_OP_PING) &&
	       get_le32(p + 6) == TS_AGENT_PROBE_NONCE;
}

void ts_put_u64(struct wire_buf *b, uint64_t v)
{
	uint8_t x[8];

	put_le64(x, v);
	wire_put_raw(b, x, sizeof(x));
}

void ts_put_vec(struct wire_buf *b, const void *p, uint64_t n)
{
	ts_put_u64(b, n);
	wire_put_raw(b, p, (size_t)n);
}
