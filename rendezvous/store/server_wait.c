/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_wait.c: WAIT: parked requests, their keys and deadlines. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/server_tcpstore.h"
#include "src/common/log.h"

static void link_unlink(struct link *l)
{
	struct entry *e = l->e;

	if (e == NULL) {
		return;
	}
	if (l->prev != NULL) {
		l->prev->next = l->next;
	} else {
		e->watchers = l->next;
	}
	if (l->next != NULL) {
		l->next->prev = l->prev;
	}
	l->prev = l->next = NULL;
	l->e = NULL;
}

/* Unlink and free @w without replying. */
void srv_wait_destroy(struct store_server *s, struct wait *w)
{
	struct entry *e;
	uint32_t i;

	for (i = 0; i < w->n; i++) {
		e = w->links[i].e;
		if (e != NULL) {
			link_unlink(&w->links[i]);
			entry_maybe_free(s, e);
		}
	}
	srv_heap_remove(&s->waits, &w->dl);
	if (w->prev != NULL) {
		w->prev->next = w->next;
	} else {
		w->c->waits = w->next;
	}
	if (w->next != NULL) {
		w->next->prev = w->prev;
	}
	w->c->nwaits--;
	if (w->untimed) {
		w->c->nuntimed--;
		s->nuntimed--;
	}
	srv_mem_release(w->c, w->cost);
	free(w);
}

static void flush_later(struct conn *c)
{
	if (!c->in_flush && !c->closing) {
		c->in_flush = true;
		c->flush_next = c->s->flush;
		c->s->flush = c;
	}
}

static void wait_reply(struct store_server *s, struct wait *w, uint32_t index)
{
	struct conn *c = w->c;
	size_t off;

	if (c->proto == TS_PROTO_CRUN) {
		off = wire_frame_begin(&c->out, WIRE_OP_WAIT, WIRE_FLAG_REPLY, WIRE_OK, w->id);
		wire_put_u32(&c->out, index);
		wire_frame_end(&c->out, off);
	} else {
		srv_ts_wait_done(c, true, NULL); /* a PyTorch TCPStore client */
	}
	flush_later(c);
	srv_wait_destroy(s, w);
}

void srv_wait_fail(struct store_server *s, struct wait *w, uint16_t status, const char *msg)
{
	struct conn *c = w->c;

	if (c->proto != TS_PROTO_CRUN) {
		srv_wait_destroy(s, w);
		srv_ts_wait_done(c, false, msg); /* no error replies in TCPStore: dropped */
		return;
	}
	wire_put_error(&c->out, WIRE_OP_WAIT, w->id, status, msg);
	flush_later(c);
	srv_wait_destroy(s, w);
}

/* @e was just written: wake every wait on it. */
void srv_key_written(struct store_server *s, struct entry *e)
{
	struct link *l;
	struct wait *w;

	while ((l = e->watchers) != NULL) {
		w = l->w;
		link_unlink(l);
		if (w->mode == WIRE_WAIT_ANY) {
			wait_reply(s, w, l->index);
		} else if (--w->missing == 0) {
			wait_reply(s, w, 0);
		}
	}
}

static void on_wait_deadline(uv_timer_t *t)
{
	struct store_server *s = t->data;
	int64_t now = (int64_t)uv_now(s->loop);
	struct hnode *m;
	struct wait *w;
	char msg[64];

	while ((m = heap_min(&s->waits)) != NULL && m->at <= now) {
		w = container_of(m, struct wait, dl);
		snprintf(msg, sizeof(msg), "wait timed out after %" PRId64 " ms", w->timeout_ms);
		srv_wait_fail(s, w, WIRE_E_TIMEOUT, msg);
	}
	srv_wait_arm(s);
	srv_flush_all(s);
}

void srv_wait_arm(struct store_server *s)
{
	srv_timer_arm(s, &s->wait_timer, &s->waits, on_wait_deadline);
}

/*
 * Answer a WAIT whose keys already exist (ALL: every key; ANY: the first one present, by
 * index) at once, without allocating a wait: the common case of a barrier's late arrivals
 * and of a blocking get. Returns false when the request has to wait.
 */
static bool wait_now(struct conn *c, const struct wire_req *r)
{
	const uint8_t *cur = r->list;
	struct entry *e;
	size_t off;
	uint32_t i, index = 0;

	if (r->n == 0) {
		return false; /* the general path answers it */
	}
	for (i = 0; i < r->n; i++) {
		e = entry_lookup(c->s, wire_list_next(&cur));
		if (e != NULL && e->present) {
			if (r->mode == WIRE_WAIT_ANY) {
				index = i;
				break;
			}
		} else if (r->mode != WIRE_WAIT_ANY) {
			return false;
		}
	}
	if (i == r->n && r->mode == WIRE_WAIT_ANY) {
		return false;
	}
	off = reply_begin(c, r);
	wire_put_u32(&c->out, index);
	wire_frame_end(&c->out, off);
	return true;
}

/*
 * What a held wait costs: itself, and at most one entry per key (the key bytes inline), which
 * it keeps alive while nobody writes the key. Charged to the memory budget.
 */
static size_t wait_cost(const struct wire_req *r)
{
	const uint8_t *cur = r->list;
	size_t n = sizeof(struct wait);
	uint32_t i;

	for (i = 0; i < r->n; i++) {
		n += sizeof(struct link) + sizeof(struct entry) + wire_list_next(&cur).len;
	}
	return n;
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

void srv_op_wait(struct conn *c, const struct wire_req *r)
{
	struct store_server *s = c->s;
	const uint8_t *cur = r->list;
	struct wire_str k;
	struct entry *e;
	struct wait *w;
	char msg[96];
	int64_t timeout;
	size_t cost;
	uint32_t i;

	if (c->nwaits >= s->max_pending) {
		snprintf(msg, sizeof(msg),
			 "too many pending requests on this connection (limit %u)", s->max_pending);
		reply_error(c, r, WIRE_E_BUSY, msg);
		return;
	}
	if (wait_now(c, r)) {
		return;
	}
	timeout = wait_timeout(c, r);
	if (timeout == INT64_MIN) {
		return;
	}
	/* Charge first: going over the budget may drop this connection or the biggest other. */
	cost = wait_cost(r);
	if (!srv_mem_charge(c, cost)) {
		return;
	}
	w = calloc(1, sizeof(*w) + (size_t)r->n * sizeof(w->links[0]));
	if (w == NULL) {
		srv_mem_release(c, cost);
		reply_error(c, r, WIRE_E_NO_MEMORY, "WAIT: out of memory");
		return;
	}
	w->cost = cost;
	w->untimed = timeout < 0;
	if (w->untimed) {
		c->nuntimed++;
		s->nuntimed++;
	}
	w->c = c;
	w->id = r->id;
	w->mode = r->mode;
	w->n = r->n;
	w->timeout_ms = timeout;
	w->dl.idx = SIZE_MAX;
	w->next = c->waits;
	if (c->waits != NULL) {
		c->waits->prev = w;
	}
	c->waits = w;
	c->nwaits++;
	for (i = 0; i < r->n; i++) {
		k = wire_list_next(&cur);
		w->links[i].w = w;
		w->links[i].index = i;
		e = entry_lookup(s, k);
		if (e != NULL && e->present) {
			if (w->mode == WIRE_WAIT_ANY) {
				wait_reply(s, w, i);
				return;
			}
			continue;
		}
		w->missing++;
		e = srv_entry_get(s, k);
		if (e == NULL) {
			srv_wait_fail(s, w, WIRE_E_NO_MEMORY, "WAIT: out of memory");
			return;
		}
		w->links[i].e = e;
		w->links[i].next = e->watchers;
		if (e->watchers != NULL) {
			e->watchers->prev = &w->links[i];
		}
		e->watchers = &w->links[i];
	}
	if (w->missing == 0) {
		wait_reply(s, w, 0);
		return;
	}
	if (timeout == 0) {
		srv_wait_fail(s, w, WIRE_E_TIMEOUT, "wait timed out after 0 ms");
		return;
	}
	if (timeout > 0) {
		w->dl.at = deadline_after(s, timeout);
		if (srv_heap_push(&s->waits, &w->dl) < 0) {
			srv_wait_fail(s, w, WIRE_E_NO_MEMORY, "WAIT: out of memory");
			return;
		}
		if (w->dl.idx == 0) {
			srv_wait_arm(s);
		}
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
			  peer, w->mode == WIRE_WAIT_ANY ? "any" : "all", w->n,
			  w->n == 1 ? "" : "s", w->missing);
	}
}
