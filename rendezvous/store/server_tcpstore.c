/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_tcpstore.c: serve PyTorch TCPStore clients in one run's namespace. */
/*
 * A connection whose first bytes are a TCPStore client's (tcpstore_codec.c) is served
 * here instead of by the frame path of server_conn.c: the TCPStore codec over the keyspace
 * (keyspace.c) that crun's frames use too. Each request's keys get the namespace of the run's
 * current generation ("<run>/tcpstore/<gen>/"), so such a connection, which cannot
 * authenticate, reads and writes nothing else.
 * The generation is the value of the run's key rdzv_key_tcpstore_gen(): each agent raises it
 * to its round before it spawns that round's workers (agent/agent_store.c), so each round,
 * and each restart, gets a fresh key space: PyTorch's keys carry no round (torch 1.x's
 * "/worker/attempt_<N>/" stays on a scale-up; 2.5+ adds none). Every live TCPStore
 * connection is of the current generation: when the key changes, the old generation's
 * connections (their workers were stopped) are closed and its keys dropped, before any
 * TCPStore request is served and at each sweep; "end" (the agents' last step) closes them all.
 * Waits are held through server_wait.c, which answers a TCPStore connection with
 * srv_ts_wait_done(), under the same memory budget as crun's clients. TCPStore has no error
 * replies: a request the server cannot answer ends the connection, with a log line that says
 * why (the client then raises a connection error).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/rdzv_keys.h"
#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/log.h"

#define TS_OUT_LIMIT (64u << 20) /* replies a client left unread: it never reads, drop it */
#define TS_KEY_BUF (CRUN_STORE_MAX_KEY_LEN + STORE_TCPSTORE_MAX_PREFIX)

#define TS_GEN_MAX 20 /* digits of a generation */
#define TS_GEN_END "end"

/* ---- generations ---- */

int srv_ts_init(struct store_server *s, const char *run, struct crun_diag *d)
{
	char p[STORE_TCPSTORE_MAX_PREFIX + 1], k[CRUN_STORE_MAX_KEY_LEN + 1];

	if (run[0] == '\0' || rdzv_key_tcpstore(p, sizeof(p), run) < 0 ||
	    strlen(p) + TS_GEN_MAX + 1 > STORE_TCPSTORE_MAX_PREFIX ||
	    rdzv_key_tcpstore_gen(k, sizeof(k), run) < 0) {
		return diag_set(d, -EINVAL, "store: TCPStore run id empty or longer than %d bytes",
				STORE_TCPSTORE_MAX_PREFIX - TS_GEN_MAX - 12);
	}
	s->ts_prefix = strdup(p);
	s->ts_gen_key = strdup(k);
	if (s->ts_prefix == NULL || s->ts_gen_key == NULL) {
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	s->ts_prefix_len = strlen(p);
	memcpy(s->ts_ns, p, s->ts_prefix_len + 1);
	s->ts_ns_len = (uint32_t)s->ts_prefix_len;
	return 0;
}

/* Close every TCPStore connection; returns how many. */
static unsigned close_all(struct store_server *s)
{
	struct conn *c, *next;
	unsigned n = 0;

	for (c = s->conns; c != NULL; c = next) {
		next = c->next;
		if ((c->proto == TS_PROTO_V1 || c->proto == TS_PROTO_V2) && !c->closing) {
			srv_conn_close(c);
			n++;
		}
	}
	return n;
}

/* Delete every key under the run's space "<run>/tcpstore/"; returns how many. */
static unsigned drop_keys(struct store_server *s)
{
	struct htab_node *node, *next;
	struct ks_entry *e;
	unsigned n = 0;
	size_t b;

	htab_for_each_safe(&s->ks.keys, b, node, next) {
		e = container_of(node, struct ks_entry, node);
		if (e->present && e->klen >= s->ts_prefix_len &&
		    memcmp(e->key, s->ts_prefix, s->ts_prefix_len) == 0) {
			n += ks_delete(&s->ks, (struct ks_str){e->key, e->klen});
		}
	}
	return n;
}

/* A generation's value: 1..TS_GEN_MAX digits, or TS_GEN_END. */
static bool gen_valid(const struct ks_entry *e)
{
	uint32_t i;

	if (e->vlen == sizeof(TS_GEN_END) - 1 && memcmp(e->val, TS_GEN_END, e->vlen) == 0) {
		return true;
	}
	for (i = 0; i < e->vlen && e->val[i] >= '0' && e->val[i] <= '9'; i++) {
	}
	return e->vlen > 0 && e->vlen <= TS_GEN_MAX && i == e->vlen;
}

/*
 * Follow the generation key: when its value is not the one served, close the TCPStore
 * connections and drop the keys of the one served, then serve the new one. Returns whether
 * TCPStore clients are served now (false: the run ended).
 */
static bool gen_sync(struct store_server *s)
{
	char ns[sizeof(s->ts_ns)], was[sizeof(s->ts_ns)];
	const struct ks_entry *e;
	unsigned nc, nk;
	uint32_t len;
	bool valid;

	e = ks_get(&s->ks, (struct ks_str){(const uint8_t *)s->ts_gen_key,
					    (uint32_t)strlen(s->ts_gen_key)});
	valid = e == NULL || gen_valid(e);
	/* Built with memcpy, not snprintf: this runs on every read of every TCPStore connection
	 * (snprintf was 2-3% of the server's CPU in `perf record` of a 1-client add). ts_init
	 * checked that the prefix, TS_GEN_MAX digits and the slash fit. */
	len = (uint32_t)s->ts_prefix_len; /* none set yet: the run's whole space */
	memcpy(ns, s->ts_prefix, len);
	if (e != NULL) {
		memcpy(ns + len, valid ? (const char *)e->val : "bad", valid ? e->vlen : 3);
		len += valid ? e->vlen : 3;
		ns[len++] = '/';
	}
	if (len == s->ts_ns_len && memcmp(ns, s->ts_ns, len) == 0) {
		return !s->ts_ended;
	}
	nc = close_all(s);
	nk = drop_keys(s);
	memcpy(was, s->ts_ns, s->ts_ns_len);
	was[s->ts_ns_len] = '\0';
	memcpy(s->ts_ns, ns, len);
	s->ts_ns[len] = '\0';
	s->ts_ns_len = len;
	s->ts_ended = !valid || (e->vlen == sizeof(TS_GEN_END) - 1 &&
				 memcmp(e->val, TS_GEN_END, e->vlen) == 0);
	if (!valid) {
		char shown[33];
		uint32_t i;

		for (i = 0; i < e->vlen && i < sizeof(shown) - 1; i++) {
			shown[i] = e->val[i] >= 0x20 && e->val[i] < 0x7f ? (char)e->val[i] : '?';
		}
		shown[i] = '\0';
		log_warn("store: %s is \"%s%s\", not a generation (digits, or \"end\"): TCPStore "
			 "clients are refused; closed %u of their connections, dropped %u keys",
			 s->ts_gen_key, shown, e->vlen > i ? "..." : "", nc, nk);
	} else if (s->ts_ended) {
		log_info("store: the run's TCPStore key space %s has ended: closed %u TCPStore "
			 "connections, dropped %u keys", was, nc, nk);
	} else if (nc > 0) {
		log_info("store: TCPStore clients now see %s (was %s): closed %u connections of "
			 "the old generation, dropped %u keys", s->ts_ns, was, nc, nk);
	} else {
		log_debug("store: TCPStore clients now see %s (was %s): dropped %u keys", s->ts_ns,
			  was, nk);
	}
	return !s->ts_ended;
}

void srv_ts_sweep(struct store_server *s)
{
	if (s->ts_gen_key != NULL) {
		gen_sync(s);
	}
}

/* ---- requests ---- */

/* A key in the current generation, in a caller's buffer of TS_KEY_BUF bytes. */
static struct ks_str pkey(const struct store_server *s, struct wire_str k, uint8_t *buf)
{
	memcpy(buf, s->ts_ns, s->ts_ns_len);
	if (k.len > 0) {
		memcpy(buf + s->ts_ns_len, k.p, k.len);
	}
	return (struct ks_str){buf, s->ts_ns_len + k.len};
}

static struct ks_str ts_key(const uint8_t **cur)
{
	struct wire_str k = ts_list_next(cur);

	return (struct ks_str){k.p, k.len};
}

/* The keys (or pairs) of @r, each in the server's TCPStore namespace. */
static struct ks_list key_list(const struct store_server *s, const struct ts_req *r)
{
	return (struct ks_list){r->n, r->list, ts_key, (const uint8_t *)s->ts_ns, s->ts_ns_len};
}

static struct ks_str raw(struct wire_str v)
{
	return (struct ks_str){v.p, v.len};
}

/* At most 200 bytes of a key, for messages. */
#define KEYF(k) (int)((k).len > 200 ? 200 : (k).len), (const char *)(k).p

/* End @c with a log line: TCPStore has no way to tell the client. */
static void ts_drop(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ts_drop(struct conn *c, const char *fmt, ...)
{
	char peer[96], msg[SRV_KS_ERROR_LEN + 128];
	va_list ap;

	if (c->closing) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	srv_conn_peer(c, peer, sizeof(peer));
	log_info("store: dropping %s (TCPStore %s client): %s", peer, ts_proto_name(c->proto), msg);
	srv_conn_close(c);
}

static const struct ks_entry *present(struct conn *c, struct wire_str k)
{
	uint8_t buf[TS_KEY_BUF];

	return ks_get(&c->s->ks, pkey(c->s, k, buf));
}

static void op_set(struct conn *c, const struct ts_req *r)
{
	uint8_t buf[TS_KEY_BUF];
	char why[SRV_KS_ERROR_LEN];
	int rc = ks_set(&c->s->ks, pkey(c->s, r->key, buf), raw(r->a), KS_NO_DEADLINE);

	if (rc < 0) {
		ts_drop(c, "SET: %s", srv_ks_error(c->s, rc, why, sizeof(why)));
	}
}

static void op_get(struct conn *c, const struct ts_req *r)
{
	const struct ks_entry *e = present(c, r->key);

	if (e == NULL) {
		/* The client waits for the key first: only a delete in between gets here. */
		ts_drop(c, "GET: key %.*s is not set", KEYF(r->key));
		return;
	}
	ts_put_vec(&c->out, e->val, e->vlen);
}

static void op_add(struct conn *c, const struct ts_req *r)
{
	uint8_t buf[TS_KEY_BUF];
	char why[SRV_KS_ERROR_LEN];
	int64_t v;
	int rc;

	rc = ks_add(&c->s->ks, pkey(c->s, r->key, buf), r->num, &v);
	if (rc == -EINVAL) {
		ts_drop(c, "ADD: value of %.*s is not an integer", KEYF(r->key));
	} else if (rc == -EOVERFLOW) {
		ts_drop(c, "ADD: overflow");
	} else if (rc < 0) {
		ts_drop(c, "ADD: %s", srv_ks_error(c->s, rc, why, sizeof(why)));
	} else {
		ts_put_u64(&c->out, (uint64_t)v);
	}
}

/*
 * PyTorch's COMPARE_SET: a missing key is created when the expected value is empty; the
 * answer is the value now stored, or, for a missing key left alone, the expected value.
 */
static void op_compare_set(struct conn *c, const struct ts_req *r)
{
	uint8_t buf[TS_KEY_BUF];
	struct ks_str k = pkey(c->s, r->key, buf);
	char why[SRV_KS_ERROR_LEN];
	const struct ks_entry *e;
	bool match;
	int rc = ks_cas(&c->s->ks, k, raw(r->a), raw(r->b), &match);

	if (rc < 0) {
		ts_drop(c, "COMPARE_SET: %s", srv_ks_error(c->s, rc, why, sizeof(why)));
		return;
	}
	e = ks_get(&c->s->ks, k);
	if (e != NULL) {
		ts_put_vec(&c->out, e->val, e->vlen);
	} else {
		ts_put_vec(&c->out, r->a.p, r->a.len);
	}
}

static void op_delete(struct conn *c, const struct ts_req *r)
{
	uint8_t buf[TS_KEY_BUF];

	ts_put_u64(&c->out, ks_delete(&c->s->ks, pkey(c->s, r->key, buf)) ? 1 : 0);
}

/*
 * WAIT: answered now when every key is there, else held with the prefixed keys and no
 * deadline (the client keeps its own; 2.x sends CANCEL_WAIT at it).
 */
static void op_wait(struct conn *c, const struct ts_req *r)
{
	struct store_server *s = c->s;
	const struct ks_list l = key_list(s, r);
	uint32_t index;
	int rc;

	if (r->n == 0 || ks_wait_ready(&s->ks, &l, KS_WAIT_ALL, &index)) {
		wire_put_u8(&c->out, TS_WAIT_STOP);
		return;
	}
	if (c->nwaits >= s->max_pending ||
	    (s->max_wait_ms == 0 &&
	     (c->nuntimed >= s->max_untimed_per_conn || s->nuntimed >= s->max_untimed))) {
		ts_drop(c, "WAIT: too many waits held (limits: %u per connection, %u in all)",
			s->max_untimed_per_conn, s->max_untimed);
		return;
	}
	rc = srv_wait_hold(c, &l, KS_WAIT_ALL, false, s->max_wait_ms > 0 ? s->max_wait_ms : -1,
			   0);
	if (rc == -ENOMEM) {
		ts_drop(c, "WAIT: out of memory");
	}
}

/* A TCPStore connection's wait was answered (@ok) or failed; server_wait.c frees it. */
void srv_ts_wait_done(struct conn *c, bool ok, const char *why)
{
	if (ok) {
		wire_put_u8(&c->out, TS_WAIT_STOP);
		srv_flush_later(c);
	} else {
		ts_drop(c, "WAIT: %s", why);
	}
}

static void op_cancel_wait(struct conn *c)
{
	while (c->waits != NULL) {
		srv_wait_destroy(c->s, c->waits);
	}
	wire_put_u8(&c->out, TS_WAIT_CANCELED);
}

static void op_multi_get(struct conn *c, const struct ts_req *r)
{
	const struct ks_list l = key_list(c->s, r);
	const uint8_t *cur = r->list;
	const struct ks_entry *e;
	uint32_t i;

	if (!ks_check(&c->s->ks, &l)) {
		ts_drop(c, "MULTI_GET: a key is not set");
		return;
	}
	for (i = 0; i < r->n; i++) {
		e = ks_get_next(&c->s->ks, &l, &cur);
		ts_put_vec(&c->out, e->val, e->vlen);
	}
}

static void op_multi_set(struct conn *c, const struct ts_req *r)
{
	const struct ks_list l = key_list(c->s, r);
	char why[SRV_KS_ERROR_LEN];
	int rc = ks_multi_set(&c->s->ks, &l);

	if (rc < 0) {
		ts_drop(c, "MULTI_SET: %s", srv_ks_error(c->s, rc, why, sizeof(why)));
	}
}

/* APPEND, and QUEUE_PUSH with @queue: each item as a big-endian u32 length and its bytes. */
static void op_append(struct conn *c, const struct ts_req *r, bool queue)
{
	struct store_server *s = c->s;
	const char *op = queue ? "QUEUE_PUSH" : "APPEND";
	uint8_t buf[TS_KEY_BUF];
	struct ks_str k = pkey(s, r->key, buf);
	char why[SRV_KS_ERROR_LEN];
	uint64_t n;
	int rc;

	rc = queue ? ks_queue_push(&s->ks, k, raw(r->a), &n)
		   : ks_append(&s->ks, k, NULL, 0, raw(r->a), &n);
	if (rc == -EMSGSIZE) {
		ts_drop(c, "%s: value length %" PRIu64 " exceeds limit %u", op, n,
			s->lim.max_value_len);
	} else if (rc < 0) {
		ts_drop(c, "%s: %s", op, srv_ks_error(s, rc, why, sizeof(why)));
	}
}

static void op_queue(struct conn *c, const struct ts_req *r)
{
	uint8_t buf[TS_KEY_BUF], *item;
	int64_t n;
	uint32_t len;
	int rc;

	if (r->op == TS_OP_QUEUE_LEN) {
		n = ks_queue_len(present(c, r->key));
		if (n < 0) {
			ts_drop(c, "QUEUE_LEN: %.*s is not a queue", KEYF(r->key));
			return;
		}
		ts_put_u64(&c->out, (uint64_t)n);
		return;
	}
	rc = ks_queue_pop(&c->s->ks, pkey(c->s, r->key, buf), &item, &len);
	if (rc == -EINVAL) {
		ts_drop(c, "QUEUE_POP: %.*s is not a queue", KEYF(r->key));
	} else if (rc == -ENOENT) {
		ts_drop(c, "QUEUE_POP: queue %.*s is empty", KEYF(r->key));
	} else if (rc < 0) {
		ts_drop(c, "QUEUE_POP: out of memory");
	} else {
		ts_put_vec(&c->out, item, len);
		free(item);
	}
}

static void ts_run(struct conn *c, const struct ts_req *r)
{
	c->s->met.ts_ops++;
	const struct ks_list l = key_list(c->s, r);

	srv_preauth_ts_served(c); /* a request in the namespace: no longer pre-auth */
	switch (r->op) {
	case TS_OP_VALIDATE:
		break;
	case TS_OP_PING:
		ts_put_u32(&c->out, (uint32_t)r->num);
		break;
	case TS_OP_SET:
		op_set(c, r);
		break;
	case TS_OP_GET:
		op_get(c, r);
		break;
	case TS_OP_ADD:
		op_add(c, r);
		break;
	case TS_OP_COMPARE_SET:
		op_compare_set(c, r);
		break;
	case TS_OP_DELETE_KEY:
		op_delete(c, r);
		break;
	case TS_OP_CHECK:
		wire_put_u8(&c->out,
			    ks_check(&c->s->ks, &l) ? TS_CHECK_READY : TS_CHECK_NOT_READY);
		break;
	case TS_OP_WAIT:
		op_wait(c, r);
		break;
	case TS_OP_GETNUMKEYS:
		ts_put_u64(&c->out, (uint64_t)ks_num_keys(&c->s->ks, l.prefix, l.prefix_len));
		break;
	case TS_OP_CANCEL_WAIT:
		op_cancel_wait(c);
		break;
	case TS_OP_APPEND:
		op_append(c, r, false);
		break;
	case TS_OP_QUEUE_PUSH:
		op_append(c, r, true);
		break;
	case TS_OP_QUEUE_POP:
	case TS_OP_QUEUE_LEN:
		op_queue(c, r);
		break;
	case TS_OP_MULTI_GET:
		op_multi_get(c, r);
		break;
	case TS_OP_MULTI_SET:
		op_multi_set(c, r);
		break;
	case TS_OP_WATCH_KEY:
	case TS_OP_COUNT:
		ts_drop(c, "%s is not supported", ts_op_name(r->op));
		break;
	}
	if (!c->closing && c->out.len > TS_OUT_LIMIT) {
		ts_drop(c, "%zu bytes of replies left unread", c->out.len);
	}
}

/* Hold @n bytes of a request not yet complete (charged to the memory budget). */
static bool hold(struct conn *c, const uint8_t *p, size_t n)
{
	size_t want = (size_t)c->in_len + n, cap;
	uint8_t *q;

	if (want > c->in_cap) {
		cap = c->in_cap ? c->in_cap : 256;
		while (cap < want) {
			cap *= 2;
		}
		if (!srv_mem_charge(c, cap - c->in_cap)) {
			return false;
		}
		q = realloc(c->in, cap);
		if (q == NULL) {
			ts_drop(c, "out of memory");
			return false;
		}
		c->in = q;
		c->in_cap = (uint32_t)cap;
	}
	if (c->in_len == 0) {
		c->frame_start = (int64_t)uv_now(c->s->loop);
	}
	memcpy(c->in + c->in_len, p, n);
	c->in_len = (uint32_t)want;
	return true;
}

static void held_free(struct conn *c)
{
	srv_mem_release(c, c->in_cap);
	free(c->in);
	c->in = NULL;
	c->in_len = c->in_cap = c->need = 0;
}

/* Run every complete request at @p; returns the bytes they took. */
static size_t run_all(struct conn *c, const uint8_t *p, size_t n)
{
	const struct ts_limits lim = {c->s->lim.max_key_len - c->s->ts_ns_len,
				      c->s->lim.max_value_len, c->s->lim.max_keys};
	size_t off = 0, need;
	struct ts_req r;
	char msg[160];
	int rc;

	while (off < n && !c->closing) {
		rc = ts_decode(c->proto, p + off, n - off, &lim, &r, &need, msg, sizeof(msg));
		if (rc == TS_NEED_MORE) {
			c->need = (uint32_t)need;
			break;
		}
		if (rc != TS_DONE) {
			ts_drop(c, "%s", msg);
			break;
		}
		ts_run(c, &r);
		off += need;
	}
	return off;
}

/*
 * The sniff: true when @c is a TCPStore connection this server serves (or still unknown).
 * @p, @n: the connection's first read whole, or NULL (crun's agent's probe comes in one).
 */
static bool admit(struct conn *c, enum ts_proto proto, const uint8_t *p, size_t n)
{
	struct store_server *s = c->s;
	char peer[96];
	bool served, probe;

	if (proto == TS_PROTO_CRUN) {
		c->proto = TS_PROTO_CRUN;
		return false;
	}
	/* The generation first: a move closes the TCPStore connections there are, not this. */
	served = s->ts_prefix != NULL && gen_sync(s);
	c->proto = (uint8_t)proto;
	if (s->ts_prefix == NULL) {
		srv_metric_refuse(s, SRV_REFUSE_TCPSTORE);
		/* Refused alike; a crun agent asking whether this store serves TCPStore clients
		 * (its probe, whole in the first read) is no cause for alarm: logged at debug,
		 * and it leaves the one warning to a real client. The first real one is named;
		 * the rest are counted in the pre-auth summary line (server_preauth.c), so a
		 * flood cannot flood the log. */
		probe = p != NULL && ts_is_agent_probe(p, n);
		if (probe || !s->ts_refusal_logged || log_get_level() >= LOG_DEBUG) {
			srv_conn_peer(c, peer, sizeof(peer));
			log_msg(probe || s->ts_refusal_logged ? LOG_DEBUG : LOG_WARN,
				"store: refusing %s: %s %s client; %s", peer,
				probe ? "a crun agent's probe as a PyTorch TCPStore"
				      : "a PyTorch TCPStore",
				ts_proto_name(proto),
				s->ts_refusal != NULL ? s->ts_refusal
						      : "this store does not serve TCPStore clients");
			s->ts_refusal_logged = s->ts_refusal_logged || !probe;
		} else {
			srv_preauth_refused(s, c, REFUSE_TCPSTORE_OFF);
		}
		srv_conn_close(c);
		return true;
	}
	if (!served) {
		srv_conn_peer(c, peer, sizeof(peer));
		log_debug("store: refusing %s: a PyTorch TCPStore %s client of a run that ended",
			  peer, ts_proto_name(proto));
		srv_conn_close(c);
		return true;
	}
	c->hello = true; /* no handshake: the namespace is its whole world */
	if (log_get_level() >= LOG_DEBUG) {
		srv_conn_peer(c, peer, sizeof(peer));
		log_debug("store: %s is a PyTorch TCPStore %s client (keys under %s)", peer,
			  ts_proto_name(proto), s->ts_ns);
	}
	return true;
}

size_t srv_ts_consume(struct conn *c, const uint8_t *p, size_t n)
{
	uint8_t first[TS_SNIFF_LEN];
	size_t k = c->npeek, take, off;

	if (c->proto == TS_PROTO_UNKNOWN) {
		take = n < TS_SNIFF_LEN - k ? n : TS_SNIFF_LEN - k;
		memcpy(first, c->peek, k);
		memcpy(first + k, p, take);
		if (ts_sniff(first, k + take) == TS_PROTO_UNKNOWN) {
			/* take == n: fewer than TS_SNIFF_LEN bytes in all so far */
			memcpy(c->peek + k, p, take);
			c->npeek = (uint8_t)(k + take);
			return n;
		}
		if (!admit(c, ts_sniff(first, k + take), k == 0 ? p : NULL, n)) {
			return 0; /* crun: the caller replays c->peek first */
		}
		if (c->closing) {
			return n;
		}
		c->npeek = 0;
		if (k > 0 && !hold(c, first, k)) {
			return n;
		}
	}
	if (!gen_sync(c->s) || c->closing) {
		return n; /* its generation is over: gen_sync() closed it */
	}
	if (c->in_len == 0) {
		off = run_all(c, p, n);
		if (off < n && !c->closing) {
			hold(c, p + off, n - off);
		}
		return n;
	}
	if (!hold(c, p, n)) {
		return n;
	}
	if (c->in_len < c->need) {
		return n; /* still short of the request's known length */
	}
	off = run_all(c, c->in, c->in_len);
	if (c->closing) {
		return n;
	}
	if (off == c->in_len) {
		held_free(c);
	} else if (off > 0) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= (uint32_t)off;
		c->frame_start = (int64_t)uv_now(c->s->loop);
	}
	return n;
}
