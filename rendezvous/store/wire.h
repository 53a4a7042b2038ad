/* SPDX-License-Identifier: MIT */
/* rendezvous/store/wire.h: store frames, the codec shared by server and client
 * (docs/protocol.md). */
#ifndef CRUN_RENDEZVOUS_STORE_WIRE_H
#define CRUN_RENDEZVOUS_STORE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/store.h>

#include "src/common/diag.h"

#define WIRE_MAGIC 0x4352554eu /* "CRUN" */
#define WIRE_VERSION 2u         /* challenge-response handshake (HELLO, AUTH) */
#define WIRE_VERSION_CLEAR 1u   /* sent the token in clear: refused by name */
#define WIRE_HDR_LEN 12        /* u32 len, u8 op, u8 flags, u16 status, u32 id */
#define WIRE_MIN_LEN 8u        /* smallest legal value of the len field */
#define WIRE_MAX_FRAME (2 * CRUN_STORE_MAX_VALUE_LEN + (1u << 20)) /* len field limit */
#define WIRE_FLAG_REPLY 0x01u
#define WIRE_NONCE_LEN 32u      /* HELLO: each side's nonce (0 bytes from a client with no key) */
#define WIRE_PROOF_LEN 32u      /* AUTH: an HMAC-SHA256 proof, each way */
#define WIRE_MAX_SCOPE 128u     /* HELLO: the run id a client confines itself to */
#define WIRE_AUTH_NONE 0u       /* HELLO reply: the store runs without authentication */
#define WIRE_AUTH_TOKEN 1u      /* HELLO reply: send AUTH before anything else */
#define WIRE_LIST_MAX 1024u     /* LIST_RUNS: the most runs one reply names */

enum wire_op {
	WIRE_OP_HELLO = 1,
	WIRE_OP_PING = 2,
	WIRE_OP_SET = 3,
	WIRE_OP_GET = 4,
	WIRE_OP_WAIT = 5,
	WIRE_OP_ADD = 6,
	WIRE_OP_CAS = 7,
	WIRE_OP_DELETE = 8,
	WIRE_OP_CHECK = 9,
	WIRE_OP_NUM_KEYS = 10,
	WIRE_OP_APPEND = 11,
	WIRE_OP_MULTI_GET = 12,
	WIRE_OP_MULTI_SET = 13,
	WIRE_OP_AUTH = 14,
	WIRE_OP_LIST_RUNS = 15, /* the runs (scopes) the store holds; servers before 0.3 lack it */
	WIRE_OP_MAX = 15,
};

enum wire_status {
	WIRE_OK = 0,
	WIRE_E_BAD_FRAME = 1,
	WIRE_E_TOO_BIG = 2,
	WIRE_E_BAD_MAGIC = 3,
	WIRE_E_BAD_VERSION = 4,
	WIRE_E_AUTH = 5,
	WIRE_E_UNKNOWN_OP = 6,
	WIRE_E_TIMEOUT = 7,
	WIRE_E_NOT_NUMBER = 8,
	WIRE_E_OVERFLOW = 9,
	WIRE_E_BUSY = 10,
	WIRE_E_SHUTDOWN = 11,
	WIRE_E_NO_MEMORY = 12,
	WIRE_E_INVALID = 13,
	WIRE_E_SCOPE = 14,
	WIRE_E_MAX = 14,
};

/* ANY_GET: ANY, and the reply carries the value of the key whose index it returns. */
enum wire_wait_mode { WIRE_WAIT_ALL = 0, WIRE_WAIT_ANY = 1, WIRE_WAIT_ANY_GET = 2 };

/** "SET", "GET", ... for an op code; "op?" when unknown. Static string. */
const char *wire_op_name(unsigned op);
/** "BAD_FRAME", ... for a status. Static string. */
const char *wire_status_name(unsigned status);
/** The client return code for a reply status: -EPROTO, CRUN_EMAGIC, -ETIMEDOUT, ... */
int wire_status_to_code(unsigned status);

struct wire_hdr {
	uint32_t len; /* bytes after the len field: 8 + payload */
	uint8_t op;
	uint8_t flags;
	uint16_t status;
	uint32_t id;
};

/**
 * Decode the 12-byte header at @p (borrowed) into @h and check the length field against
 * [WIRE_MIN_LEN, @max_len]. Returns 0, -EPROTO (too short) or -EMSGSIZE (too long).
 * @h is filled either way, so the caller can name the bad length.
 */
int wire_hdr_decode(const uint8_t *p, uint32_t max_len, struct wire_hdr *h);
/** Encode @h at @p (WIRE_HDR_LEN bytes). */
void wire_hdr_encode(uint8_t *p, const struct wire_hdr *h);

/* A byte string inside a frame: borrowed, valid as long as the frame buffer. */
struct wire_str {
	const uint8_t *p;
	uint32_t len;
};

/* Bounds the request decoder checks (besides WIRE_MAX_FRAME). */
struct wire_limits {
	uint32_t max_key_len;
	uint32_t max_value_len;
	uint32_t max_keys;
};

/* A decoded request. Every pointer borrows from the frame passed to wire_req_decode(). */
struct wire_req {
	uint8_t op;
	uint32_t id;
	struct wire_str key;     /* SET GET ADD CAS DELETE APPEND */
	struct wire_str val;     /* SET APPEND; CAS: desired */
	struct wire_str expected; /* CAS */
	struct wire_str nonce;   /* HELLO: the client's (0 or WIRE_NONCE_LEN bytes) */
	struct wire_str scope;   /* HELLO: run id, empty for none */
	struct wire_str proof;   /* AUTH: WIRE_PROOF_LEN bytes */
	uint32_t magic;          /* HELLO */
	uint16_t version;        /* HELLO: when not WIRE_VERSION, nothing after it is decoded */
	int64_t num;             /* SET: ttl_ms; WAIT: timeout_ms; ADD: delta */
	uint8_t mode;            /* WAIT */
	uint32_t n;              /* WAIT CHECK MULTI_GET MULTI_SET; LIST_RUNS: the most to name */
	const uint8_t *list;     /* n x bytes key (or key,value pairs), already validated */
	const uint8_t *list_end;
};

/**
 * Decode and validate the payload of request @h (the @plen bytes at @payload, borrowed) into
 * @r. On failure returns the wire status to reply with (WIRE_E_*) and fills @d with the
 * message (docs/protocol.md) and wire_status_to_code() of that status; returns WIRE_OK (0)
 * on success, with @d cleared.
 */
int wire_req_decode(const struct wire_hdr *h, const uint8_t *payload, size_t plen,
		    const struct wire_limits *lim, struct wire_req *r, struct crun_diag *d);

/** Walk a validated key list: *@cur starts at r->list; returns the next key. */
struct wire_str wire_list_next(const uint8_t **cur);

/* A growable output buffer: malloc'd, owned by whoever holds the struct (wire_buf_finish). */
struct wire_buf {
	uint8_t *p;
	size_t len;
	size_t cap;
	bool oom; /* an allocation failed: the content is incomplete */
};

void wire_buf_finish(struct wire_buf *b);
/** Ensure room for @n more bytes. Returns 0 or -ENOMEM (and sets b->oom). */
int wire_buf_reserve(struct wire_buf *b, size_t n);
/** Start a frame; returns its offset for wire_frame_end(). */
size_t wire_frame_begin(struct wire_buf *b, uint8_t op, uint8_t flags, uint16_t status,
			uint32_t id);
/** Patch the length of the frame started at @off. */
void wire_frame_end(struct wire_buf *b, size_t off);
void wire_put_u8(struct wire_buf *b, uint8_t v);
void wire_put_u16(struct wire_buf *b, uint16_t v);
void wire_put_u32(struct wire_buf *b, uint32_t v);
void wire_put_i64(struct wire_buf *b, int64_t v);
void wire_put_raw(struct wire_buf *b, const void *p, size_t n);
void wire_put_bytes(struct wire_buf *b, const void *p, size_t n); /* u32 len + bytes */
/** A complete error reply frame carrying @msg. */
void wire_put_error(struct wire_buf *b, uint8_t op, uint32_t id, uint16_t status,
		    const char *msg);

/* A bounds-checked reader over a payload (replies in the client; requests in wire.c). */
struct wire_cur {
	const uint8_t *p;
	const uint8_t *end;
	bool bad; /* read past the end */
};

uint8_t wire_get_u8(struct wire_cur *c);
uint16_t wire_get_u16(struct wire_cur *c);
uint32_t wire_get_u32(struct wire_cur *c);
int64_t wire_get_i64(struct wire_cur *c);
struct wire_str wire_get_bytes(struct wire_cur *c);

/**
 * Decode every frame in @data (e.g. a fuzz input or a captured stream), as the server would:
 * header, limits, request payload. Returns the number of valid requests decoded, or a
 * negative count's complement on the first bad frame. Pure; for tests and the fuzzer.
 */
int wire_decode_stream(const uint8_t *data, size_t len);

#endif
