/* SPDX-License-Identifier: MIT */
/* rendezvous/store/tcpstore_codec.h: PyTorch's TCPStore wire protocol: tell, decode, encode. */
/*
 * PyTorch's TCPStore client (torch.distributed.TCPStore) speaks a protocol of its own: no
 * frames, a query type byte and then its arguments, little-endian, strings and byte vectors as
 * a u64 length and the bytes. Two versions exist: the one of PyTorch 1.x (the first byte is
 * the query, SET = 0) and the one of PyTorch 2.x, which opens with VALIDATE (0) and a u32
 * magic and numbers its queries differently. docs/protocol.md ("TCPStore") describes both.
 *
 * tcpstore_codec.c tells a connection's protocol from its first bytes and decodes one
 * request at a time: pure, bounded (every length checked against the limits below before a
 * byte of it is waited for), no allocation. It also encodes: the server's replies and the
 * requests of clients that speak TCPStore themselves (the agent's probe, the tests), so both
 * sides use one definition of the format. server_tcpstore.c runs requests on the keyspace.
 */
#ifndef CRUN_RENDEZVOUS_STORE_TCPSTORE_CODEC_H
#define CRUN_RENDEZVOUS_STORE_TCPSTORE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/store/wire.h"

#define TS_MAGIC 0x3c85f7ceu       /* 2.x VALIDATE's u32 */
#define TS_SNIFF_LEN 5u            /* bytes that decide any connection's protocol */
#define TS_MAX_REQUEST WIRE_MAX_FRAME /* one request's bytes, all arguments together */
#define TS_WAIT_STOP 0u            /* WAIT's answer: every key is there */
#define TS_WAIT_CANCELED 1u        /* 2.x CANCEL_WAIT's answer */
#define TS_CHECK_READY 0u
#define TS_CHECK_NOT_READY 1u

/* What a connection speaks. */
enum ts_proto {
	TS_PROTO_UNKNOWN = 0, /* not enough bytes yet */
	TS_PROTO_CRUN,        /* crun's own frames (docs/protocol.md) */
	TS_PROTO_V1,          /* PyTorch 1.x TCPStore */
	TS_PROTO_V2,          /* PyTorch 2.x TCPStore (VALIDATE first) */
};

/* A request, whatever the version numbers it. */
enum ts_op {
	TS_OP_SET,
	TS_OP_COMPARE_SET,
	TS_OP_GET,
	TS_OP_ADD,
	TS_OP_CHECK,
	TS_OP_WAIT,
	TS_OP_GETNUMKEYS,
	TS_OP_WATCH_KEY,   /* 1.x only: callbacks; refused */
	TS_OP_DELETE_KEY,
	TS_OP_VALIDATE,    /* 2.x only, from here on */
	TS_OP_APPEND,
	TS_OP_MULTI_GET,
	TS_OP_MULTI_SET,
	TS_OP_CANCEL_WAIT,
	TS_OP_PING,
	TS_OP_QUEUE_PUSH,
	TS_OP_QUEUE_POP,
	TS_OP_QUEUE_LEN,
	TS_OP_COUNT,
};

struct ts_limits {
	uint32_t max_key_len;
	uint32_t max_value_len;
	uint32_t max_keys;
};

/* A decoded request: every pointer borrows from the bytes given to ts_decode(). */
struct ts_req {
	enum ts_op op;
	struct wire_str key; /* SET COMPARE_SET GET ADD WATCH_KEY DELETE_KEY APPEND QUEUE_* */
	struct wire_str a;   /* SET APPEND QUEUE_PUSH: value; COMPARE_SET: expected */
	struct wire_str b;   /* COMPARE_SET: desired */
	int64_t num;         /* ADD: delta; VALIDATE: magic; PING: nonce */
	uint32_t n;          /* CHECK WAIT MULTI_GET: keys; MULTI_SET: pairs */
	const uint8_t *list; /* n x (u64 len, bytes) [, value for MULTI_SET], already checked */
};

enum ts_result {
	TS_NEED_MORE = 0,  /* incomplete: call again with at least *need bytes */
	TS_DONE = 1,       /* one request decoded, *need bytes long */
	TS_E_UNKNOWN = -1, /* unknown query type */
	TS_E_TOO_BIG = -2, /* a length or count over its limit */
	TS_E_MAGIC = -3,   /* VALIDATE with the wrong magic */
};

/** "SET", "GET", ... (PyTorch's names). Static string. */
const char *ts_op_name(enum ts_op op);
/** "1.x" or "2.x". Static string. */
const char *ts_proto_name(enum ts_proto p);

/**
 * Which protocol a connection whose first @n bytes are @p speaks: TS_PROTO_UNKNOWN while
 * @n is too short to tell (never past TS_SNIFF_LEN bytes). Pure.
 */
enum ts_proto ts_sniff(const uint8_t *p, size_t n);

/**
 * Decode the request at the start of @p (@n bytes, borrowed) in protocol @proto. TS_DONE:
 * @r is filled and *@need is its length; TS_NEED_MORE: *@need is a length the request
 * cannot be shorter than (> @n); an error: @msg says what (the first byte is the query).
 */
int ts_decode(enum ts_proto proto, const uint8_t *p, size_t n, const struct ts_limits *lim,
	      struct ts_req *r, size_t *need, char *msg, size_t msglen);

/** Walk a checked list: *@cur starts at r->list; returns the next string. */
struct wire_str ts_list_next(const uint8_t **cur);

/**
 * Decode every request of one connection's byte stream @data, sniffing its protocol first,
 * as the server would. Returns the number of requests decoded (a truncated last request is
 * not counted), or the complement of the count before the first bad request. Pure; for tests
 * and the fuzzer.
 */
int ts_decode_stream(const uint8_t *data, size_t len, enum ts_proto *proto);

/* ---- encoding, into a wire_buf (wire.h); little-endian as PyTorch's SendBuffer ---- */

#define TS_NO_QUERY 0xffu

/** The query byte of @op in @proto, or TS_NO_QUERY when that version has no such query. */
uint8_t ts_query_code(enum ts_proto proto, enum ts_op op);
/** A request's first byte: @op's query in @proto (which must have it). */
void ts_put_query(struct wire_buf *b, enum ts_proto proto, enum ts_op op);
void ts_put_u32(struct wire_buf *b, uint32_t v);
void ts_put_u64(struct wire_buf *b, uint64_t v);
/** A u64 length, then @n bytes of @p (borrowed): keys, values, GET's answer. */
void ts_put_vec(struct wire_buf *b, const void *p, uint64_t n);

/*
 * crun's agent asks a store whether it serves PyTorch 2.x TCPStore clients (agent_store.c) by
 * sending what such a client sends first, VALIDATE, then a PING whose nonce spells "crun".
 * A store that refuses TCPStore clients refuses it like any other; it tells the two apart
 * only to log the agent's question below warning level (a clean run leaves a clean log).
 */
#define TS_AGENT_PROBE_NONCE 0x6372756eu /* "crun" */
#define TS_AGENT_PROBE_LEN 10u           /* VALIDATE (1 + 4) and PING (1 + 4) */
/** The agent's probe, whole, into @b. */
void ts_put_agent_probe(struct wire_buf *b);
/** True when @p (@n bytes, borrowed) is exactly the agent's probe. Pure. */
bool ts_is_agent_probe(const uint8_t *p, size_t n);

#endif
