/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_wait.c: held waits of connections, and the keyspace's clock. */
/*
 * The keyspace (keyspace.c) holds a wait on its keys and deadline; here it also belongs to a
 * connection: listed on it (so closing the connection drops its waits), counted against the
 * per-connection and store-wide bounds, and charged to the memory budget. When the keyspace
 * ends a wait, srv_on_wait_done() answers it in the connection's own protocol.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/clock.h"
#include "src/common/log.h"

_Static_assert((int)WIRE_WAIT_ALL == (int)KS_WAIT_ALL && (int)WIRE_WAIT_ANY == (int)KS_WAIT_ANY,
	       "crun's WAIT modes are the keyspace's");

void srv_flush_later(struct conn *c)
{
	if (!c->in_flush && !c->closing) {
		c->in_flush = true;
		c->flush_next = c->s->flush;
		c->s->flush = c;
	}
}

/* Take @w off its connection's list and bounds (the keyspace is done with it or will be). */
static void detach(struct store_server *s, struct ks_wait *w)
{
	struct conn *c = w->owner;

	if (w->prev != NULL) {
		w->prev->next = w->next;
	} else {
		c->waits = w->next;
	}
	if (w->next != NULL) {
		w->next->prev = w->prev;
	}
	c->nwaits--;
	if (w->untimed) {
		c->nuntimed--;
		s->nuntimed--;
	}
	srv_mem_release(c, w->cost);
}

void srv_wait_destroy(struct store_server *s, struct ks_wait *w)
{
	detach(s, w);
	ks_wait_cancel(&s->ks, w);
}

/* An ANY_GET answer's value: u8 found, then the value of @e when it is present. */
static void put_value(struct wire_buf *out, const struct ks_entry *e)
{
	bool found = e != NULL && e->present;

	wire_put_u8(out, found);
	if (found) {
		wire_put_bytes(out, e->val, e->vlen);
	}
}

/*
 * Answer @w's connection: @status WIRE_OK with @index (and, for an ANY_GET wait (@vw non-NULL),
 * the value of the key that ended it), or an error with @msg.
 */
static void answer(struct conn *c, uint32_t id, uint16_t status, uint32_t index,
		   const struct ks_wait *vw, const char *msg)
{
	size_t off;

	if (c->proto != TS_PROTO_CRUN) {
		srv_ts_wait_done(c, status == WIRE_OK, msg); /* a PyTorch TCPStore client */
		return;
	}
	if (status != WIRE_OK) {
		wire_put_error(&c->out, WIRE_OP_WAIT, id, status, msg);
	} else {
		off = wire_frame_begin(&c->out, WIRE_OP_WAIT, WIRE_FLAG_REPLY, WIRE_OK, id);
		wire_put_u32(&c->out, index);
		if (vw != NULL) {
			put_value(&c->out, vw->woke);
		}
		wire_frame_end(&c->out, off);
	}
	srv_flush_later(c);
}

void srv_wait_fail(struct store_server *s, struct ks_wait *w, uint16_t status, const char *msg)
{
	struct conn *c = w->owner;
	uint32_t id = w->id;

	srv_wait_destroy(s, w);
	answer(c, id, status, 0, NULL, msg);
}

void srv_on_wait_done(struct keyspace *ks, struct ks_wait *w, int rc, uint32_t index)
{
	struct store_server *s = ks->data;
	struct conn *c = w->owner;
	char msg[64];

	detach(s, w); /* first: answering may close the connection, dropping its other waits */
	if (rc == 0) {
		answer(c, w->id, WIRE_OK, index, w->with_value ? w : NULL, NULL);
		return;
	}
	snprintf(msg, sizeof(msg), "wait timed out after %" PRId64 " ms", w->timeout_ms);
	answer(c, w->id, WIRE_E_TIMEOUT, 0, NULL, msg);
}

static void on_ks_timer(uv_timer_t *t)
{
	struct store_server *s = t->data;

	s->ks_armed = KS_NO_DEADLINE;
	s->ks.wall_ms = crun_wall_ms();
	ks_expire(&s->ks, (int64_t)uv_now(s->loop));
	srv_flush_all(s); /* re-arms */
}

void srv_ks_arm(struct store_server *s)
{
	int64_t at = ks_next_deadline(&s->ks), now;

	if (at == s->ks_armed || s->closing) {
		return;
	}
	s->ks_armed = at;
	if (at == KS_NO_DEADLINE) {
		uv_timer_stop(&s->ks_timer);
		return;
	}
	now = (int64_t)uv_now(s->loop);
	uv_timer_start(&s->ks_timer, on_ks_timer, at > now ? (uint64_t)(at - now) : 0, 0);
}

int srv_wait_hold(struct conn *c, const struct ks_list *l, uint8_t mode, bool with_value,
		  int64_t timeout_ms, uint32_t id)
{
	struct store_server *s = c->s;
	size_t cost = ks_wait_cost(l);
	int64_t at = timeout_ms < 0 ? KS_NO_DEADLINE : deadline_after(s, timeout_ms);
	struct ks_wait *w;

	/* Charge first: going over the budget may drop this connection or the biggest other. */
	if (!srv_mem_charge(c, cost)) {
		return 1;
	}
	if (ks_wait_start(&s->ks, l, mode, at, &w) < 0) {
		srv_mem_release(c, cost);
		return -ENOMEM;
	}
	w->owner = c;
	w->id = id;
	w->with_value = with_value;
	w->cost = cost;
	w->timeout_ms = timeout_ms;
	w->untimed = timeout_ms < 0;
	if (w->untimed) {
		c->nuntimed++;
		s->nuntimed++;
	}
	w->next = c->waits;
	if (c->waits != NULL) {
		c->waits->prev = w;
	}
	c->waits = w;
	c->nwaits++;
	return 0;
}

/* ---- crun's WAIT ---- */

static struct ks_str crun_key(const uint8_t **cur)
{
	struct wire_str k = wire_list_next(cur);

	return (struct ks_str){k.p, k.len};
}

/*
 * A wait that gave no deadline (timeout < 0): with a store-wide maximum it gets that as its
 * deadline; otherwise it counts against the bounds on waits without one. Returns the timeout
 * to use (< 0: none), or INT64_MIN after refusing the request.
 */
static int64_t wait_timeout(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	char msg[96];

	if (s->max_wait_ms > 0) {
		return r->num < 0 || r->num > s->max_wait_ms ? s->max_wait_ms : r->num;
	}
	if (r->num >= 0) {
		return r->num;
	}
	if (c->nuntimed >= s->max_untimed_per_conn) {
		snprintf(msg, sizeof(msg),
			 "too many waits without a deadline on this connection (limit %u)",
			 s->max_untimed_per_conn);
	} else if (s->nuntimed >= s->max_untimed) {
		snprintf(msg, sizeof(msg), "too many waits without a deadline on this server "
					   "(limit %u)", s->max_untimed);
	} else {
		return -1;
	}
	srv_limit_log(c, LIMIT_UNTIMED_WAITS, "WAIT refused: %s", msg);
	reply_error(c, r, WIRE_E_BUSY, msg);
	return INT64_MIN;
}

/* The present entry of @l's key @index, or NULL. */
static const struct ks_entry *nth_entry(struct keyspace *ks, const struct ks_list *l,
					uint32_t index)
{
	const uint8_t *cur = l->list;
	const struct ks_entry *e = NULL;
	uint32_t i;

	for (i = 0; i <= index && i < l->n; i++) {
		e = ks_get_next(ks, l, &cur);
	}
	return e;
}

void srv_op_wait(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	const struct ks_list l = {r->n, r->list, crun_key, NULL, 0};
	/* ANY_GET is the keyspace's ANY; the answer adds the value. */
	bool with_value = r->mode == WIRE_WAIT_ANY_GET;
	uint8_t mode = with_value ? (uint8_t)KS_WAIT_ANY : r->mode;
	char msg[96];
	int64_t timeout;
	uint32_t index;
	size_t off;
	int rc;

	if (c->nwaits >= s->max_pending) {
		snprintf(msg, sizeof(msg),
			 "too many pending requests on this connection (limit %u)", s->max_pending);
		reply_error(c, r, WIRE_E_BUSY, msg);
		return;
	}
	/* Keys already there (a barrier's late arrivals, a blocking get): no wait allocated. */
	if (ks_wait_ready(&s->ks, &l, mode, &index)) {
		off = reply_begin(c, r);
		wire_put_u32(&c->out, index);
		if (with_value) {
			put_value(&c->out, nth_entry(&s->ks, &l, index));
		}
		wire_frame_end(&c->out, off);
		return;
	}
	timeout = wait_timeout(c, r);
	if (timeout == INT64_MIN) {
		return;
	}
	if (r->n == 0) {
		off = reply_begin(c, r); /* all of no keys are there */
		wire_put_u32(&c->out, 0);
		if (with_value) {
			put_value(&c->out, NULL);
		}
		wire_frame_end(&c->out, off);
		return;
	}
	if (timeout == 0) {
		reply_error(c, r, WIRE_E_TIMEOUT, "wait timed out after 0 ms");
		return;
	}
	rc = srv_wait_hold(c, &l, mode, with_value, timeout, r->id);
	if (rc == -ENOMEM) {
		reply_error(c, r, WIRE_E_NO_MEMORY, "WAIT: out of memory");
	}
	if (rc != 0) {
		return;
	}
	/*
	 * Held until a write or the deadline. Tests wait for this line before writing, so that
	 * they exercise the wake-up and not the answer-at-once path; the peer's name costs a
	 * system call, so only at debug level.
	 */
	if (log_get_level() >= LOG_DEBUG) {
		char peer[96];

		srv_conn_peer(c, peer, sizeof(peer));
		log_debug("store: %s: WAIT parked (%s of %" PRIu32 " key%s, %" PRIu32 " missing)",
			  peer, mode == KS_WAIT_ANY ? "any" : "all", r->n,
			  r->n == 1 ? "" : "s", c->waits->missing);
	}
}
