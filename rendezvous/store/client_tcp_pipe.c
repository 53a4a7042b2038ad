/* SPDX-License-Identifier: MIT */
/*
 * rendezvous/store/client_tcp_pipe.c: the sets a TCP store handle sent without waiting for
 * their replies (crun_store_set_async), and what became of those that failed. client_tcp.c
 * sends them and reads the replies; this file keeps the books.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>

#include "rendezvous/store/client_tcp_internal.h"
#include "rendezvous/store/wire.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/log.h"

/* Closing a handle waits this long at most for the replies its sets are owed. */
#define CLOSE_DRAIN_MS 10000

int tcp_pipe_push(struct store_backend *b, uint32_t id, const char *key, size_t frame_len)
{
	struct tcp_pipe *p = &b->pipe;
	struct tcp_pend *e;
	char *k;

	if (p->q == NULL) {
		p->q = calloc(TCP_PIPE_MAX_SETS, sizeof(*p->q));
		if (p->q == NULL) {
			return -ENOMEM;
		}
		p->cap = TCP_PIPE_MAX_SETS;
	}
	if (p->n == p->cap) {
		return -ENOBUFS; /* tcp_pipe_full() was not asked: a bug of the caller */
	}
	k = strdup(key);
	if (k == NULL) {
		return -ENOMEM;
	}
	e = &p->q[(p->head + p->n) % p->cap];
	e->id = id;
	e->bytes = (uint32_t)frame_len;
	e->key = k;
	p->n++;
	p->bytes += frame_len;
	return 0;
}

bool tcp_pipe_full(const struct store_backend *b, size_t frame_len)
{
	const struct tcp_pipe *p = &b->pipe;

	return p->n > 0 && (p->n >= TCP_PIPE_MAX_SETS || p->bytes + frame_len > TCP_PIPE_MAX_BYTES);
}

static void pop(struct tcp_pipe *p)
{
	struct tcp_pend *e = &p->q[p->head];

	p->bytes -= e->bytes;
	free(e->key);
	e->key = NULL;
	p->head = (p->head + 1) % p->cap;
	p->n--;
}

/* Keep the first failure's words; count the rest. */
static void keep(struct tcp_pipe *p, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void keep(struct tcp_pipe *p, int code, const char *fmt, ...)
{
	va_list ap;

	if (p->err.code != 0) {
		p->more++;
		return;
	}
	va_start(ap, fmt);
	diag_setv(&p->err, code, fmt, ap);
	va_end(ap);
}

int tcp_pipe_answered(struct store_backend *b, size_t plen)
{
	struct tcp_pipe *p = &b->pipe;
	const struct tcp_pend *e = &p->q[p->head];
	int code;

	/* Id 0 is only ever a connection-level error: an OK one answers no set. */
	if (p->n == 0 || (b->rh.id != e->id && (b->rh.id != 0 || b->rh.status == WIRE_OK))) {
		return -EPROTO;
	}
	if (b->rh.status != WIRE_OK) {
		/* Id 0: a connection-level error (the server closes): it stopped at this set. */
		code = wire_status_to_code(b->rh.status);
		/* The server's words name the op: "SET: the scope quota of run ..." */
		keep(p, code, "%s: SET \"%s\" (sent without waiting) was refused: %.*s", b->where,
		     e->key, (int)(plen > 400 ? 400 : plen), (const char *)b->in);
	}
	pop(p);
	return 0;
}

void tcp_pipe_lost(struct store_backend *b)
{
	struct tcp_pipe *p = &b->pipe;
	size_t n = p->n, w = strlen(b->where);
	const char *cause = b->diag.msg;
	bool had = p->err.code != 0;

	if (n == 0) {
		return;
	}
	if (strncmp(cause, b->where, w) == 0 && cause[w] == ':') {
		cause += w + 2; /* our own "store H:P: " in front */
	}
	keep(p, b->diag.code < 0 ? b->diag.code : -ECONNRESET,
	     "%s: SET \"%s\"%s (sent without waiting): the connection was lost before the store "
	     "answered, so %s may or may not be stored (%s)",
	     b->where, p->q[p->head].key, n > 1 ? " and the later sets" : "", n > 1 ? "they" : "it",
	     cause[0] != '\0' ? cause : "connection closed");
	if (had) {
		p->more += n - 1; /* keep() counted one */
	}
	while (p->n > 0) {
		pop(p);
	}
}

int tcp_pipe_take_error(struct store_backend *b)
{
	struct tcp_pipe *p = &b->pipe;
	int code = p->err.code;

	if (code == 0) {
		return 0;
	}
	if (p->more > 0) {
		diag_set(&b->diag, code, "%s (and %zu more sets sent without waiting failed)",
			 p->err.msg, p->more);
	} else {
		diag_set(&b->diag, code, "%s", p->err.msg);
	}
	diag_clear(&p->err);
	p->more = 0;
	return code;
}

void tcp_pipe_finish(struct store_backend *b)
{
	struct tcp_pipe *p = &b->pipe;

	while (p->q != NULL && p->n > 0) {
		pop(p);
	}
	free(p->q);
	memset(p, 0, sizeof(*p));
}

void tcp_disconnect(struct store_backend *b)
{
	if (b->pipe.n > 0) {
		tcp_pipe_lost(b);
	}
	tcp_io_disconnect(b);
}

int tcp_pipe_drain(struct store_backend *b, int64_t deadline)
{
	size_t plen;
	uint32_t want;

	while (b->pipe.n > 0 && b->fd >= 0) {
		want = b->pipe.q[b->pipe.head].id;
		if (tcp_recv_frame(b, deadline, &plen) < 0) {
			break; /* dropped: the sets still owed are kept as lost */
		}
		if (!(b->rh.flags & WIRE_FLAG_REPLY) || tcp_pipe_answered(b, plen) < 0) {
			tcp_fail(b, -EPROTO, "reply: unexpected frame (id %u, expected %u)",
				 b->rh.id, want);
			tcp_disconnect(b);
			break;
		}
		if (b->rh.id == 0) {
			tcp_disconnect(b); /* a connection-level error: the server closes */
		}
	}
	return tcp_pipe_take_error(b);
}

static int64_t deadline_of(int timeout_ms)
{
	return crun_now_ms() + (timeout_ms < 0 ? 300000 : timeout_ms);
}

/*
 * Send a SET and do not wait for its reply: ordered on the connection like every request, its
 * reply read by a later call (any operation, tcp_flush(), or this one when the pipe is full).
 */
int tcp_set_async(struct store_backend *b, const char *key, const void *val, size_t len,
		  int64_t ttl_ms, int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	int rc = tcp_pipe_take_error(b);
	uint32_t id;

	if (rc < 0) {
		return rc;
	}
	tcp_set_frame(b, key, val, len, ttl_ms);
	id = b->rh.id; /* reading replies below overwrites b->rh */
	if (!tcp_out_ok(b)) {
		return b->diag.code;
	}
	rc = tcp_ensure_conn(b, deadline);
	if (rc == 0 && tcp_pipe_full(b, b->out.len)) {
		rc = tcp_pipe_drain(b, deadline);
		if (rc == 0 && b->fd < 0) {
			rc = tcp_ensure_conn(b, deadline); /* dropped after the last reply */
		}
	}
	if (rc < 0) {
		return rc;
	}
	/* Booked before it is sent: a send that fails half-way leaves it lost, not forgotten. */
	rc = tcp_pipe_push(b, id, key, b->out.len);
	if (rc < 0) {
		return tcp_fail(b, rc, "SET \"%s\": out of memory", key);
	}
	return tcp_send_out(b, deadline);
}

int tcp_flush(struct store_backend *b, int timeout_ms)
{
	return tcp_pipe_drain(b, deadline_of(timeout_ms));
}

void tcp_pipe_close(struct store_backend *b)
{
	int rc = tcp_pipe_drain(b, crun_now_ms() + CLOSE_DRAIN_MS);

	if (rc < 0) {
		log_error("%s (found when the store handle was closed: flush it first to know)",
			  b->diag.msg);
	}
}
