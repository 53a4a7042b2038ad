/* SPDX-License-Identifier: MIT */
/* rendezvous/store/wire.c: encode and decode store frames (docs/protocol.md). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>

#include "rendezvous/store/wire.h"
#include "src/common/byteorder.h"
#include "src/common/diag.h"

static const char *const op_names[] = {
	[WIRE_OP_HELLO] = "HELLO",	   [WIRE_OP_PING] = "PING",
	[WIRE_OP_SET] = "SET",		   [WIRE_OP_GET] = "GET",
	[WIRE_OP_WAIT] = "WAIT",	   [WIRE_OP_ADD] = "ADD",
	[WIRE_OP_CAS] = "COMPARE_SET",	   [WIRE_OP_DELETE] = "DELETE",
	[WIRE_OP_CHECK] = "CHECK",	   [WIRE_OP_NUM_KEYS] = "NUM_KEYS",
	[WIRE_OP_APPEND] = "APPEND",	   [WIRE_OP_MULTI_GET] = "MULTI_GET",
	[WIRE_OP_MULTI_SET] = "MULTI_SET", [WIRE_OP_AUTH] = "AUTH",
	[WIRE_OP_LIST_RUNS] = "LIST_RUNS",
};

static const char *const status_names[] = {
	[WIRE_OK] = "OK",
	[WIRE_E_BAD_FRAME] = "BAD_FRAME",
	[WIRE_E_TOO_BIG] = "TOO_BIG",
	[WIRE_E_BAD_MAGIC] = "BAD_MAGIC",
	[WIRE_E_BAD_VERSION] = "BAD_VERSION",
	[WIRE_E_AUTH] = "AUTH",
	[WIRE_E_UNKNOWN_OP] = "UNKNOWN_OP",
	[WIRE_E_TIMEOUT] = "TIMEOUT",
	[WIRE_E_NOT_NUMBER] = "NOT_NUMBER",
	[WIRE_E_OVERFLOW] = "OVERFLOW",
	[WIRE_E_BUSY] = "BUSY",
	[WIRE_E_SHUTDOWN] = "SHUTDOWN",
	[WIRE_E_NO_MEMORY] = "NO_MEMORY",
	[WIRE_E_INVALID] = "INVALID",
	[WIRE_E_SCOPE] = "SCOPE",
};

const char *wire_op_name(unsigned op)
{
	if (op >= 1 && op <= WIRE_OP_MAX) {
		return op_names[op];
	}
	return "op?";
}

const char *wire_status_name(unsigned status)
{
	if (status <= WIRE_E_MAX) {
		return status_names[status];
	}
	return "status?";
}

int wire_status_to_code(unsigned status)
{
	switch (status) {
	case WIRE_OK:
		return 0;
	case WIRE_E_BAD_FRAME:
		return -EPROTO;
	case WIRE_E_TOO_BIG:
		return -EMSGSIZE;
	case WIRE_E_BAD_MAGIC:
		return CRUN_EMAGIC;
	case WIRE_E_BAD_VERSION:
		return CRUN_EVERSION;
	case WIRE_E_AUTH:
		return CRUN_EAUTH;
	case WIRE_E_UNKNOWN_OP:
		return -EOPNOTSUPP;
	case WIRE_E_TIMEOUT:
		return -ETIMEDOUT;
	case WIRE_E_NOT_NUMBER:
		return -EINVAL;
	case WIRE_E_OVERFLOW:
		return -ERANGE;
	case WIRE_E_SCOPE:
		return -EACCES;
	case WIRE_E_BUSY:
		return -EBUSY;
	case WIRE_E_SHUTDOWN:
		return -ESHUTDOWN;
	case WIRE_E_NO_MEMORY:
		return -ENOMEM;
	case WIRE_E_INVALID:
		return -EINVAL;
	default:
		return CRUN_ESERVER;
	}
}

int wire_hdr_decode(const uint8_t *p, uint32_t max_len, struct wire_hdr *h)
{
	h->len = get_be32(p);
	h->op = p[4];
	h->flags = p[5];
	h->status = get_be16(p + 6);
	h->id = get_be32(p + 8);
	if (h->len < WIRE_MIN_LEN) {
		return -EPROTO;
	}
	if (h->len > max_len) {
		return -EMSGSIZE;
	}
	return 0;
}

void wire_hdr_encode(uint8_t *p, const struct wire_hdr *h)
{
	put_be32(p, h->len);
	p[4] = h->op;
	p[5] = h->flags;
	put_be16(p + 6, h->status);
	put_be32(p + 8, h->id);
}

/* ---- reading ---- */

uint8_t wire_get_u8(struct wire_cur *c)
{
	if (c->bad || c->end - c->p < 1) {
		c->bad = true;
		return 0;
	}
	return *c->p++;
}

uint16_t wire_get_u16(struct wire_cur *c)
{
	uint16_t v;

	if (c->bad || c->end - c->p < 2) {
		c->bad = true;
		return 0;
	}
	v = get_be16(c->p);
	c->p += 2;
	return v;
}

uint32_t wire_get_u32(struct wire_cur *c)
{
	uint32_t v;

	if (c->bad || c->end - c->p < 4) {
		c->bad = true;
		return 0;
	}
	v = get_be32(c->p);
	c->p += 4;
	return v;
}

int64_t wire_get_i64(struct wire_cur *c)
{
	uint64_t hi, lo;

	hi = wire_get_u32(c);
	lo = wire_get_u32(c);
	return (int64_t)(hi << 32 | lo);
}

struct wire_str wire_get_bytes(struct wire_cur *c)
{
	struct wire_str s = {NULL, 0};
	uint32_t n;

	n = wire_get_u32(c);
	if (c->bad || (size_t)(c->end - c->p) < n) {
		c->bad = true;
		return s;
	}
	s.p = c->p;
	s.len = n;
	c->p += n;
	return s;
}

struct wire_str wire_list_next(const uint8_t **cur)
{
	struct wire_str s;

	s.len = get_be32(*cur);
	s.p = *cur + 4;
	*cur += 4 + (size_t)s.len;
	return s;
}

/* ---- request decoding ---- */

struct dec {
	struct wire_cur c;
	const struct wire_limits *lim;
	const char *name;
	struct crun_diag *diag; /* the first problem: wire_status_to_code(status) and its text */
	int status;
};

static int dec_fail(struct dec *d, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int dec_fail(struct dec *d, int status, const char *fmt, ...)
{
	va_list ap;

	if (d->status != WIRE_OK) {
		return d->status; /* keep the first problem */
	}
	d->status = status;
	va_start(ap, fmt);
	diag_setv(d->diag, wire_status_to_code((unsigned)status), fmt, ap);
	va_end(ap);
	return status;
}

static bool dec_key(struct dec *d, struct wire_str *out)
{
	*out = wire_get_bytes(&d->c);
	if (d->c.bad) {
		return false;
	}
	if (out->len > d->lim->max_key_len) {
		dec_fail(d, WIRE_E_TOO_BIG, "%s: key length %u exceeds limit %u", d->name,
			 out->len, d->lim->max_key_len);
		return false;
	}
	return true;
}

static bool dec_val(struct dec *d, struct wire_str *out)
{
	*out = wire_get_bytes(&d->c);
	if (d->c.bad) {
		return false;
	}
	if (out->len > d->lim->max_value_len) {
		dec_fail(d, WIRE_E_TOO_BIG, "%s: value length %u exceeds limit %u", d->name,
			 out->len, d->lim->max_value_len);
		return false;
	}
	return true;
}

/* n keys (pairs: n key/value pairs), bounds-checked now so wire_list_next() needs no checks. */
static bool dec_list(struct dec *d, struct wire_req *r, bool pairs)
{
	struct wire_str s;
	uint32_t i;

	r->n = wire_get_u32(&d->c);
	if (d->c.bad) {
		return false;
	}
	if (r->n == 0) {
		dec_fail(d, WIRE_E_INVALID, "%s: no keys", d->name);
		return false;
	}
	if (r->n > d->lim->max_keys) {
		dec_fail(d, WIRE_E_TOO_BIG, "%s: %u keys exceeds limit %u", d->name, r->n,
			 d->lim->max_keys);
		return false;
	}
	r->list = d->c.p;
	for (i = 0; i < r->n; i++) {
		if (!dec_key(d, &s)) {
			return false;
		}
		if (pairs && !dec_val(d, &s)) {
			return false;
		}
	}
	r->list_end = d->c.p;
	return true;
}

int wire_req_decode(const struct wire_hdr *h, const uint8_t *payload, size_t plen,
		    const struct wire_limits *lim, struct wire_req *r, struct crun_diag *diag)
{
	struct dec d = {
		.c = {payload, payload + plen, false},
		.lim = lim,
		.name = wire_op_name(h->op),
		.diag = diag,
		.status = WIRE_OK,
	};
	bool ok = true;

	memset(r, 0, sizeof(*r));
	r->op = h->op;
	r->id = h->id;
	diag_clear(diag);
	if (h->op < 1 || h->op > WIRE_OP_MAX) {
		return dec_fail(&d, WIRE_E_UNKNOWN_OP, "unknown op %u", h->op);
	}
	if (h->flags != 0) {
		return dec_fail(&d, WIRE_E_BAD_FRAME, "reserved flags 0x%02x set in request",
				h->flags);
	}
	if (h->status != 0) {
		return dec_fail(&d, WIRE_E_BAD_FRAME, "non-zero status in request");
	}
	switch (h->op) {
	case WIRE_OP_HELLO:
		r->magic = wire_get_u32(&d.c);
		r->version = wire_get_u16(&d.c);
		if (d.c.bad || r->magic != WIRE_MAGIC || r->version != WIRE_VERSION) {
			/* The server names the magic or the version; the rest is another protocol. */
			ok = !d.c.bad;
			d.c.p = d.c.end;
			break;
		}
		(void)wire_get_u16(&d.c);
		r->nonce = wire_get_bytes(&d.c);
		if (!d.c.bad && r->nonce.len != 0 && r->nonce.len != WIRE_NONCE_LEN) {
			return dec_fail(&d, WIRE_E_INVALID, "HELLO: nonce of %u bytes (expected 0 or %u)",
					r->nonce.len, WIRE_NONCE_LEN);
		}
		r->scope = wire_get_bytes(&d.c);
		if (!d.c.bad && r->scope.len > WIRE_MAX_SCOPE) {
			return dec_fail(&d, WIRE_E_TOO_BIG, "HELLO: scope length %u exceeds limit %u",
					r->scope.len, WIRE_MAX_SCOPE);
		}
		break;
	case WIRE_OP_AUTH:
		r->proof = wire_get_bytes(&d.c);
		if (!d.c.bad && r->proof.len != WIRE_PROOF_LEN) {
			return dec_fail(&d, WIRE_E_INVALID, "AUTH: proof of %u bytes (expected %u)",
					r->proof.len, WIRE_PROOF_LEN);
		}
		break;
	case WIRE_OP_PING:
	case WIRE_OP_NUM_KEYS:
		break;
	case WIRE_OP_LIST_RUNS:
		r->n = wire_get_u32(&d.c); /* 0 or more than WIRE_LIST_MAX: WIRE_LIST_MAX */
		break;
	case WIRE_OP_SET:
		ok = dec_key(&d, &r->key) && dec_val(&d, &r->val);
		r->num = wire_get_i64(&d.c);
		if (ok && !d.c.bad && r->num < 0) {
			return dec_fail(&d, WIRE_E_INVALID, "SET: negative ttl_ms");
		}
		break;
	case WIRE_OP_GET:
	case WIRE_OP_DELETE:
		ok = dec_key(&d, &r->key);
		break;
	case WIRE_OP_WAIT:
		r->mode = wire_get_u8(&d.c);
		r->num = wire_get_i64(&d.c);
		if (!d.c.bad && r->mode > WIRE_WAIT_ANY_GET) {
			return dec_fail(&d, WIRE_E_INVALID, "WAIT: bad mode %u", r->mode);
		}
		ok = dec_list(&d, r, false);
		break;
	case WIRE_OP_ADD:
		ok = dec_key(&d, &r->key);
		r->num = wire_get_i64(&d.c);
		break;
	case WIRE_OP_CAS:
		ok = dec_key(&d, &r->key) && dec_val(&d, &r->expected) && dec_val(&d, &r->val);
		break;
	case WIRE_OP_CHECK:
	case WIRE_OP_MULTI_GET:
		ok = dec_list(&d, r, false);
		break;
	case WIRE_OP_APPEND:
		ok = dec_key(&d, &r->key) && dec_val(&d, &r->val);
		break;
	case WIRE_OP_MULTI_SET:
		ok = dec_list(&d, r, true);
		break;
	}
	if (d.status != WIRE_OK) {
		return d.status;
	}
	if (!ok || d.c.bad) {
		return dec_fail(&d, WIRE_E_BAD_FRAME, "malformed %s request: truncated payload",
				d.name);
	}
	if (d.c.p != d.c.end) {
		return dec_fail(&d, WIRE_E_BAD_FRAME, "malformed %s request: trailing bytes",
				d.name);
	}
	return WIRE_OK;
}

/* ---- writing ---- */

void wire_buf_finish(struct wire_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

int wire_buf_reserve(struct wire_buf *b, size_t n)
{
	size_t cap;
	uint8_t *p;

	if (b->oom) {
		return -ENOMEM;
	}
	if (b->cap - b->len >= n) {
		return 0;
	}
	cap = b->cap ? b->cap : 256;
	while (cap - b->len < n) {
		if (cap > SIZE_MAX / 2) {
			b->oom = true;
			return -ENOMEM;
		}
		cap *= 2;
	}
	p = realloc(b->p, cap);
	if (p == NULL) {
		b->oom = true;
		return -ENOMEM;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

void wire_put_raw(struct wire_buf *b, const void *p, size_t n)
{
	if (n == 0 || wire_buf_reserve(b, n) < 0) {
		return;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

void wire_put_u8(struct wire_buf *b, uint8_t v)
{
	wire_put_raw(b, &v, 1);
}

void wire_put_u16(struct wire_buf *b, uint16_t v)
{
	uint8_t x[2];

	put_be16(x, v);
	wire_put_raw(b, x, 2);
}

void wire_put_u32(struct wire_buf *b, uint32_t v)
{
	uint8_t x[4];

	put_be32(x, v);
	wire_put_raw(b, x, 4);
}

void wire_put_i64(struct wire_buf *b, int64_t v)
{
	uint64_t u = (uint64_t)v;

	wire_put_u32(b, (uint32_t)(u >> 32));
	wire_put_u32(b, (uint32_t)u);
}

void wire_put_bytes(struct wire_buf *b, const void *p, size_t n)
{
	wire_put_u32(b, (uint32_t)n);
	wire_put_raw(b, p, n);
}

size_t wire_frame_begin(struct wire_buf *b, uint8_t op, uint8_t flags, uint16_t status,
			uint32_t id)
{
	struct wire_hdr h = {0, op, flags, status, id};
	size_t off = b->len;

	if (wire_buf_reserve(b, WIRE_HDR_LEN) == 0) {
		wire_hdr_encode(b->p + b->len, &h);
		b->len += WIRE_HDR_LEN;
	}
	return off;
}

void wire_frame_end(struct wire_buf *b, size_t off)
{
	if (b->oom || b->len < off + WIRE_HDR_LEN) {
		return;
	}
	put_be32(b->p + off, (uint32_t)(b->len - off - 4));
}

void wire_put_error(struct wire_buf *b, uint8_t op, uint32_t id, uint16_t status,
		    const char *msg)
{
	size_t off;

	off = wire_frame_begin(b, op, WIRE_FLAG_REPLY, status, id);
	wire_put_raw(b, msg, strlen(msg));
	wire_frame_end(b, off);
}

int wire_decode_stream(const uint8_t *data, size_t len)
{
	static const struct wire_limits lim = {CRUN_STORE_MAX_KEY_LEN, CRUN_STORE_MAX_VALUE_LEN,
					       CRUN_STORE_MAX_KEYS};
	struct wire_hdr h;
	struct wire_req r;
	struct wire_str s;
	const uint8_t *cur;
	struct crun_diag diag;
	size_t off = 0;
	uint32_t i;
	int n = 0;

	while (len - off >= WIRE_HDR_LEN) {
		if (wire_hdr_decode(data + off, WIRE_MAX_FRAME, &h) < 0) {
			return ~n;
		}
		if (len - off - 4 < h.len) {
			return ~n; /* truncated */
		}
		if (wire_req_decode(&h, data + off + WIRE_HDR_LEN, h.len - 8, &lim, &r,
				    &diag) != WIRE_OK) {
			return ~n;
		}
		/* Walk the validated lists exactly as the server does. */
		cur = r.list;
		for (i = 0; r.list != NULL && i < r.n; i++) {
			s = wire_list_next(&cur);
			if (s.len > lim.max_key_len) {
				return ~n;
			}
			if (r.op == WIRE_OP_MULTI_SET) {
				(void)wire_list_next(&cur);
			}
		}
		if (cur != r.list_end) {
			return ~n;
		}
		off += 4 + (size_t)h.len;
		n++;
	}
	return off == len ? n : ~n;
}
