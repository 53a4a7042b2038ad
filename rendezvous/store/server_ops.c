/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_ops.c: one handler per request op, and the dispatcher. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/store.h>

#include "rendezvous/store/server_internal.h"
#include "src/common/diag.h"
#include "src/common/parse.h"

static void op_set(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = srv_entry_get(s, r->key);

	if (e == NULL || srv_key_store(s, e, r->val.p, r->val.len) < 0) {
		if (e != NULL) {
			entry_maybe_free(s, e);
		}
		reply_error(c, r, WIRE_E_NO_MEMORY, "SET: out of memory");
		return;
	}
	if (r->num > 0) {
		e->ttl.at = deadline_after(s, r->num);
		if (srv_heap_push(&s->ttl, &e->ttl) == 0) {
			srv_ttl_arm(s);
		}
	}
	srv_key_written(s, e);
	reply_empty(c, r);
}

/* u8 found, then the value when found: GET and each MULTI_GET item. */
static void put_found(struct conn *c, const struct entry *e)
{
	if (e != NULL && e->present) {
		wire_put_u8(&c->out, 1);
		wire_put_bytes(&c->out, e->val, e->vlen);
	} else {
		wire_put_u8(&c->out, 0);
	}
}

static void op_get(struct conn *c, const struct wire_req *r)
{
	size_t off = reply_begin(c, r);

	put_found(c, entry_lookup(c->s, r->key));
	wire_frame_end(&c->out, off);
}

static void op_add(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = srv_entry_get(s, r->key);
	int64_t v = 0;
	char buf[32], msg[CRUN_STORE_MAX_KEY_LEN + 64];
	size_t off;
	int n;

	if (e == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "ADD: out of memory");
		return;
	}
	if (e->present && parse_i64_bytes(e->val, e->vlen, &v) < 0) {
		snprintf(msg, sizeof(msg), "ADD: value of %.*s is not an integer",
			 (int)(r->key.len > 200 ? 200 : r->key.len), (const char *)r->key.p);
		reply_error(c, r, WIRE_E_NOT_NUMBER, msg);
		return;
	}
	if (__builtin_add_overflow(v, r->num, &v)) {
		entry_maybe_free(s, e);
		reply_error(c, r, WIRE_E_OVERFLOW, "ADD: overflow");
		return;
	}
	n = snprintf(buf, sizeof(buf), "%" PRId64, v);
	if (srv_key_store(s, e, (const uint8_t *)buf, (uint32_t)n) < 0) {
		entry_maybe_free(s, e);
		reply_error(c, r, WIRE_E_NO_MEMORY, "ADD: out of memory");
		return;
	}
	srv_key_written(s, e);
	off = reply_begin(c, r);
	wire_put_i64(&c->out, v);
	wire_frame_end(&c->out, off);
}

static void op_cas(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = srv_entry_get(s, r->key);
	bool match;
	size_t off;

	if (e == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "COMPARE_SET: out of memory");
		return;
	}
	if (e->present) {
		match = e->vlen == r->expected.len &&
			(e->vlen == 0 || memcmp(e->val, r->expected.p, e->vlen) == 0);
	} else {
		match = r->expected.len == 0;
	}
	if (match) {
		if (srv_key_store(s, e, r->val.p, r->val.len) < 0) {
			entry_maybe_free(s, e);
			reply_error(c, r, WIRE_E_NO_MEMORY, "COMPARE_SET: out of memory");
			return;
		}
		srv_key_written(s, e);
	}
	off = reply_begin(c, r);
	wire_put_u8(&c->out, match);
	wire_put_bytes(&c->out, e->present ? e->val : NULL, e->present ? e->vlen : 0);
	wire_frame_end(&c->out, off);
	entry_maybe_free(s, e);
}

static void op_delete(struct conn *c, const struct wire_req *r)
{
	struct entry *e = entry_lookup(c->s, r->key);
	bool existed = e != NULL && e->present;
	size_t off;

	if (existed) {
		srv_key_delete(c->s, e);
	}
	off = reply_begin(c, r);
	wire_put_u8(&c->out, existed);
	wire_frame_end(&c->out, off);
}

static void op_check(struct conn *c, const struct wire_req *r)
{
	const uint8_t *cur = r->list;
	struct entry *e;
	bool all = true;
	uint32_t i;
	size_t off;

	for (i = 0; i < r->n && all; i++) {
		e = entry_lookup(c->s, wire_list_next(&cur));
		all = e != NULL && e->present;
	}
	off = reply_begin(c, r);
	wire_put_u8(&c->out, all);
	wire_frame_end(&c->out, off);
}

static void op_num_keys(struct conn *c, const struct wire_req *r)
{
	size_t off = reply_begin(c, r);

	wire_put_i64(&c->out, c->s->nkeys);
	wire_frame_end(&c->out, off);
}

static void op_append(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	struct entry *e = srv_entry_get(s, r->key);
	uint64_t n;
	char msg[96];
	int rc;

	if (e == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "APPEND: out of memory");
		return;
	}
	rc = srv_key_append(s, e, NULL, 0, r->val.p, r->val.len, &n);
	if (rc < 0) {
		entry_maybe_free(s, e);
		if (rc == -EMSGSIZE) {
			snprintf(msg, sizeof(msg), "APPEND: value length %" PRIu64 " exceeds limit %u",
				 n, s->lim.max_value_len);
			reply_error(c, r, WIRE_E_TOO_BIG, msg);
		} else {
			reply_error(c, r, WIRE_E_NO_MEMORY, "APPEND: out of memory");
		}
		return;
	}
	srv_key_written(s, e);
	reply_empty(c, r);
}

static void op_multi_get(struct conn *c, const struct wire_req *r)
{
	const uint8_t *cur = r->list;
	struct entry *e;
	uint64_t total = 4;
	uint32_t i;
	size_t off;
	char msg[96];

	/* Size the reply first: no partial reply, no unbounded frame. */
	for (i = 0; i < r->n; i++) {
		e = entry_lookup(c->s, wire_list_next(&cur));
		total += 1 + (e != NULL && e->present ? 4 + (uint64_t)e->vlen : 0);
	}
	if (total + 8 > WIRE_MAX_FRAME) {
		snprintf(msg, sizeof(msg), "MULTI_GET: reply of %" PRIu64
			 " bytes exceeds the frame limit", total + 8);
		reply_error(c, r, WIRE_E_TOO_BIG, msg);
		return;
	}
	off = reply_begin(c, r);
	wire_put_u32(&c->out, r->n);
	cur = r->list;
	for (i = 0; i < r->n; i++) {
		put_found(c, entry_lookup(c->s, wire_list_next(&cur)));
	}
	wire_frame_end(&c->out, off);
}

static void op_multi_set(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	const uint8_t *cur = r->list;
	struct wire_str k, v;
	struct entry *e;
	uint32_t i;

	/* All writes land in this one callback, so no client sees a partial multi_set. */
	for (i = 0; i < r->n; i++) {
		k = wire_list_next(&cur);
		v = wire_list_next(&cur);
		e = srv_entry_get(s, k);
		if (e == NULL || srv_key_store(s, e, v.p, v.len) < 0) {
			if (e != NULL) {
				entry_maybe_free(s, e);
			}
			reply_error(c, r, WIRE_E_NO_MEMORY, "MULTI_SET: out of memory");
			return;
		}
		srv_key_written(s, e);
	}
	reply_empty(c, r);
}

void srv_dispatch(struct conn *c, const struct wire_hdr *h, const uint8_t *payload,
		  size_t plen)
{
	struct wire_req r;
	struct crun_diag d;
	int st;

	st = wire_req_decode(h, payload, plen, &c->s->lim, &r, &d);
	if (st != WIRE_OK) {
		if (st == WIRE_E_BAD_FRAME || st == WIRE_E_UNKNOWN_OP || !c->hello) {
			srv_conn_fail(c, h->op, h->id, (uint16_t)st, d.msg);
		} else {
			reply_error(c, &r, (uint16_t)st, d.msg);
		}
		return;
	}
	if (!srv_auth_gate(c, r.op, r.id) || !srv_auth_in_scope(c, &r)) {
		return;
	}
	switch (r.op) {
	case WIRE_OP_HELLO:
		srv_auth_hello(c, &r);
		break;
	case WIRE_OP_AUTH:
		srv_auth_proof(c, &r);
		break;
	case WIRE_OP_PING:
		reply_empty(c, &r);
		break;
	case WIRE_OP_SET:
		op_set(c, &r);
		break;
	case WIRE_OP_GET:
		op_get(c, &r);
		break;
	case WIRE_OP_WAIT:
		srv_op_wait(c, &r);
		break;
	case WIRE_OP_ADD:
		op_add(c, &r);
		break;
	case WIRE_OP_CAS:
		op_cas(c, &r);
		break;
	case WIRE_OP_DELETE:
		op_delete(c, &r);
		break;
	case WIRE_OP_CHECK:
		op_check(c, &r);
		break;
	case WIRE_OP_NUM_KEYS:
		op_num_keys(c, &r);
		break;
	case WIRE_OP_APPEND:
		op_append(c, &r);
		break;
	case WIRE_OP_MULTI_GET:
		op_multi_get(c, &r);
		break;
	case WIRE_OP_MULTI_SET:
		op_multi_set(c, &r);
		break;
	}
}
