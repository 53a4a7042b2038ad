/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_ops.c: crun's frames as a codec over the keyspace: one handler per
 * op, and the dispatcher. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/store.h>

#include "rendezvous/store/server_internal.h"
#include "src/common/clock.h"
#include "src/common/diag.h"

/* The crun codec over the keyspace: decode (wire.c), one keyspace call, encode the answer. */

static struct ks_str ks(struct wire_str k)
{
	return (struct ks_str){k.p, k.len};
}

static struct ks_str crun_key(const uint8_t **cur)
{
	return ks(wire_list_next(cur));
}

/* The keys (or key, value pairs) of @r as the keyspace walks them. */
static struct ks_list key_list(const struct wire_req *r)
{
	return (struct ks_list){r->n, r->list, crun_key, NULL, 0};
}

/*
 * A write the keyspace refused (@rc: -EDQUOT or -ENOMEM): the error reply names the quota, its
 * limit and its run, or says the server is out of memory. Nothing stored was changed.
 */
static void reply_write_error(struct conn *c, const struct wire_req *r, int rc)
{
	char why[SRV_KS_ERROR_LEN], msg[SRV_KS_ERROR_LEN + 32];

	snprintf(msg, sizeof(msg), "%s: %s", wire_op_name(r->op),
		 srv_ks_error(c->s, rc, why, sizeof(why)));
	reply_error(c, r, WIRE_E_NO_MEMORY, msg);
}

static void op_set(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	int64_t at = r->num > 0 ? deadline_after(s, r->num) : KS_NO_DEADLINE;
	int rc = ks_set(&s->ks, ks(r->key), ks(r->val), at);

	if (rc < 0) {
		reply_write_error(c, r, rc);
		return;
	}
	reply_empty(c, r);
}

/* u8 found, then the value when found: GET and each MULTI_GET item. */
static void put_found(struct conn *c, const struct ks_entry *e)
{
	if (e != NULL) {
		wire_put_u8(&c->out, 1);
		wire_put_bytes(&c->out, e->val, e->vlen);
	} else {
		wire_put_u8(&c->out, 0);
	}
}

static void op_get(struct conn *c, const struct wire_req *r)
{
	size_t off = reply_begin(c, r);

	put_found(c, ks_get(&c->s->ks, ks(r->key)));
	wire_frame_end(&c->out, off);
}

static void op_add(struct conn *c, const struct wire_req *r)
{
	char msg[CRUN_STORE_MAX_KEY_LEN + 64];
	int64_t v;
	size_t off;
	int rc;

	rc = ks_add(&c->s->ks, ks(r->key), r->num, &v);
	if (rc == -EINVAL) {
		snprintf(msg, sizeof(msg), "ADD: value of %.*s is not an integer",
			 (int)(r->key.len > 200 ? 200 : r->key.len), (const char *)r->key.p);
		reply_error(c, r, WIRE_E_NOT_NUMBER, msg);
	} else if (rc == -EOVERFLOW) {
		reply_error(c, r, WIRE_E_OVERFLOW, "ADD: overflow");
	} else if (rc < 0) {
		reply_write_error(c, r, rc);
	} else {
		off = reply_begin(c, r);
		wire_put_i64(&c->out, v);
		wire_frame_end(&c->out, off);
	}
}

static void op_cas(struct conn *c, const struct wire_req *r)
{
	const struct ks_entry *e;
	bool match;
	size_t off;
	int rc;

	rc = ks_cas(&c->s->ks, ks(r->key), ks(r->expected), ks(r->val), &match);
	if (rc < 0) {
		reply_write_error(c, r, rc);
		return;
	}
	e = ks_get(&c->s->ks, ks(r->key));
	off = reply_begin(c, r);
	wire_put_u8(&c->out, match);
	wire_put_bytes(&c->out, e != NULL ? e->val : NULL, e != NULL ? e->vlen : 0);
	wire_frame_end(&c->out, off);
}

static void op_delete(struct conn *c, const struct wire_req *r)
{
	bool existed = ks_delete(&c->s->ks, ks(r->key));
	size_t off;

	off = reply_begin(c, r);
	wire_put_u8(&c->out, existed);
	wire_frame_end(&c->out, off);
}

static void op_check(struct conn *c, const struct wire_req *r)
{
	const struct ks_list l = key_list(r);
	bool all = ks_check(&c->s->ks, &l);
	size_t off;

	off = reply_begin(c, r);
	wire_put_u8(&c->out, all);
	wire_frame_end(&c->out, off);
}

static void op_num_keys(struct conn *c, const struct wire_req *r)
{
	size_t off = reply_begin(c, r);

	wire_put_i64(&c->out, ks_num_keys(&c->s->ks, NULL, 0));
	wire_frame_end(&c->out, off);
}

static void op_append(struct conn *c, const struct wire_req *r)
{
	uint64_t n;
	char msg[96];
	int rc;

	rc = ks_append(&c->s->ks, ks(r->key), NULL, 0, ks(r->val), &n);
	if (rc == -EMSGSIZE) {
		snprintf(msg, sizeof(msg), "APPEND: value length %" PRIu64 " exceeds limit %u", n,
			 c->s->lim.max_value_len);
		reply_error(c, r, WIRE_E_TOO_BIG, msg);
	} else if (rc < 0) {
		reply_write_error(c, r, rc);
	} else {
		reply_empty(c, r);
	}
}

static void op_multi_get(struct conn *c, const struct wire_req *r)
{
	const struct ks_list l = key_list(r);
	const uint8_t *cur = r->list;
	const struct ks_entry *e;
	uint64_t total = 4;
	uint32_t i;
	size_t off;
	char msg[96];

	/* Size the reply first: no partial reply, no unbounded frame. */
	for (i = 0; i < r->n; i++) {
		e = ks_get_next(&c->s->ks, &l, &cur);
		total += 1 + (e != NULL ? 4 + (uint64_t)e->vlen : 0);
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
		put_found(c, ks_get_next(&c->s->ks, &l, &cur));
	}
	wire_frame_end(&c->out, off);
}

static void op_multi_set(struct conn *c, const struct wire_req *r)
{
	const struct ks_list l = key_list(r);
	int rc;

	/* Waiters' answers are only queued: none goes out before every pair is written. */
	rc = ks_multi_set(&c->s->ks, &l);
	if (rc < 0) {
		reply_write_error(c, r, rc);
		return;
	}
	reply_empty(c, r);
}

/* Newest write first, then by name: the runs LIST_RUNS names when there are too many. */
static int cmp_acct(const void *pa, const void *pb)
{
	const struct ks_acct *a = *(const struct ks_acct *const *)pa;
	const struct ks_acct *b = *(const struct ks_acct *const *)pb;
	uint32_t n = a->nlen < b->nlen ? a->nlen : b->nlen;
	int c;

	if (a->wrote_ms != b->wrote_ms) {
		return a->wrote_ms > b->wrote_ms ? -1 : 1;
	}
	c = memcmp(a->name, b->name, n);
	return c != 0 ? c : (int)a->nlen - (int)b->nlen;
}

/*
 * Whether an account's name can be a run id, as crun takes one (1..128 bytes, no control
 * character: src/cli_flags.c): any unscoped writer makes an account of a key's first part
 * ("<200 bytes>/x", "a\033]...;/x"), and naming it would break every client's listing (its
 * run id field holds 128 bytes) or reach an operator's terminal.
 */
static bool run_id_like(const struct ks_acct *a)
{
	uint32_t i;

	if (a->nlen == 0 || a->nlen > WIRE_MAX_SCOPE) {
		return false;
	}
	for (i = 0; i < a->nlen; i++) {
		if ((unsigned char)a->name[i] < 0x20 || (unsigned char)a->name[i] == 0x7f) {
			return false;
		}
	}
	return true;
}

/*
 * LIST_RUNS (docs/protocol.md): the runs with keys in the store, from their accounts (no key
 * is read): u32 runs in all, u32 named here, then for each the run id, its keys, its bytes
 * (its TCPStore namespace's included) and the wall-clock ms of its last write. At most
 * r->n (WIRE_LIST_MAX when 0 or more), the newest first. A scoped connection sees its run only;
 * an account whose name cannot be a run id (run_id_like()) is neither named nor counted.
 */
static void op_list_runs(struct conn *c, const struct wire_req *r)
{
	struct keyspace *ks = &c->s->ks;
	const char *scope = srv_auth_scope(c);
	uint32_t max = r->n == 0 || r->n > WIRE_LIST_MAX ? WIRE_LIST_MAX : r->n;
	const struct ks_acct **all, *a, *ts;
	struct htab_node *node, *next;
	uint32_t n = 0, i;
	size_t b, off;

	/* A scoped connection's one run is looked up: its cost is not every tenant's count. */
	all = calloc(scope != NULL ? 1 : ks->accts.count + 1, sizeof(*all));
	if (all == NULL) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "LIST_RUNS: out of memory");
		return;
	}
	if (scope != NULL) {
		a = ks_account(ks, KS_ACCT_SCOPE,
			       (struct ks_str){(const uint8_t *)scope, (uint32_t)strlen(scope)});
		if (a != NULL && a->keys > 0 && run_id_like(a)) {
			all[n++] = a;
		}
	} else {
		htab_for_each_safe(&ks->accts, b, node, next) {
			a = container_of(node, struct ks_acct, node);
			if (a->kind == KS_ACCT_SCOPE && a->keys > 0 && run_id_like(a)) {
				all[n++] = a;
			}
		}
	}
	qsort(all, n, sizeof(*all), cmp_acct);
	off = reply_begin(c, r);
	wire_put_u32(&c->out, n);
	wire_put_u32(&c->out, n < max ? n : max);
	for (i = 0; i < n && i < max; i++) {
		a = all[i];
		ts = ks_account(ks, KS_ACCT_TCPSTORE, (struct ks_str){a->name, a->nlen});
		wire_put_bytes(&c->out, a->name, a->nlen);
		wire_put_i64(&c->out, (int64_t)(a->keys + (ts != NULL ? ts->keys : 0)));
		wire_put_i64(&c->out, (int64_t)(a->bytes + (ts != NULL ? ts->bytes : 0)));
		wire_put_i64(&c->out, ts != NULL && ts->wrote_ms > a->wrote_ms ? ts->wrote_ms
									: a->wrote_ms);
	}
	wire_frame_end(&c->out, off);
	free(all);
}

void srv_dispatch(struct conn *c, const struct wire_hdr *h, const uint8_t *payload,
		  size_t plen)
{
	struct store_server *s = c->s;
	int64_t t0 = s->met.on ? crun_now_ns() : 0;
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
	case WIRE_OP_LIST_RUNS:
		op_list_runs(c, &r);
		break;
	}
	if (t0 != 0) {
		srv_metric_op(s, r.op, t0); /* @c may be gone: count on the server */
	}
}
