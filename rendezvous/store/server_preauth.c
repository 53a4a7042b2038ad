/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_preauth.c: connections that have not authenticated yet. */
/*
 * Every connection starts pre-auth and stays so until its handshake succeeds (crun's
 * HELLO/AUTH, server_auth.c) or, for a PyTorch TCPStore client, which cannot authenticate,
 * until it sends its first request in the job's namespace (server_tcpstore.c). Pre-auth
 * connections (docs/security.md, "Before authentication"):
 *
 * - are counted per source: all of loopback is one source (any local user can use any of
 *   127/8), a user on the unix socket is one (its uid), an IPv4 source is its /24, an IPv6
 *   source its /64. A source holds at most
 *   STORE_PREAUTH_PER_SOURCE at once; past that its oldest is shed, so a flood that holds
 *   connections open cannot keep a new one (a legitimate client's) from its handshake;
 * - are counted for the store: at most 1/STORE_PREAUTH_SHARE of the connection cap; past
 *   that the oldest is shed, so they never take the slots authenticated clients need; and
 *   when the connection cap (the fd limit) is reached, a pre-auth connection is shed before
 *   a new one is refused: authenticated connections are never shed for a new one;
 * - live STORE_PREAUTH_TIMEOUT_MS, or STORE_PREAUTH_OVER_RATE_MS when their source is past its
 *   budget of new connections (a token bucket: STORE_PREAUTH_RATE a second after a burst of
 *   STORE_PREAUTH_BURST), so a source reopening connections for ever holds each one briefly;
 * - share a memory budget of their own (server_limits.c), and a crun frame before
 *   authentication is at most STORE_PREAUTH_MAX_FRAME bytes (server_conn.c);
 * - are refused or shed quietly: one summary line per STORE_PREAUTH_LOG_MS with the counts by
 *   reason, not a line each.
 *
 * PyTorch 1.x opens a second connection per client for callbacks and never writes to it. Such
 * a silent connection is kept past its deadline when the same address has a TCPStore
 * connection that was served (one silent per served), so a job's clients keep theirs and a
 * flood of silent connections does not stay.
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rendezvous/store/server_internal.h"
#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/fnv.h"
#include "src/common/log.h"

#define CREDIT_FULL_MS ((uint32_t)STORE_PREAUTH_BURST * 1000u / STORE_PREAUTH_RATE)
#define CREDIT_ONE_MS (1000u / STORE_PREAUTH_RATE)

static const char *const refusal_names[REFUSE_KINDS] = {
	[REFUSE_DEADLINE] = "no handshake within the deadline",
	[REFUSE_SOURCE_QUOTA] = "shed: source quota full",
	[REFUSE_TOTAL_QUOTA] = "shed: store quota full",
	[REFUSE_FD_CAP] = "connection cap (fd limit)",
	[REFUSE_OVER_RATE] = "over the source's rate (short deadline)",
	[REFUSE_MEMORY] = "pre-authentication memory budget",
	[REFUSE_HANDSHAKE] = "refused handshake",
	[REFUSE_TCPSTORE_TLS] = "TCPStore client on a TLS store",
	[REFUSE_TCPSTORE_OFF] = "TCPStore client on a store that serves none",
};

/* @c's source key (16 bytes, IPv4 mapped) and its name; false when the address is unknown. */
static bool pair_silent(struct conn *c);

static bool source_key(struct conn *c, uint8_t key[16], char *name, size_t len)
{
	static const uint8_t v6_loopback[16] = {[15] = 1};
	struct sockaddr_storage ss;
	int n = sizeof(ss);
	char text[48];
	uint8_t *a;

	memset(key, 0, 16);
	if (srv_conn_is_unix(c)) {
		uid_t uid;

		/* The socket tells who is calling: each local user is a source of its own, so a
		 * user's flood sheds its own connections, not root's agent's in their handshake. */
		if (srv_unix_uid(c, &uid) != 0) {
			return false;
		}
		key[0] = 0xfe; /* fe75::/16 is reserved: no IPv6 peer's /64 */
		key[1] = 'u';
		memcpy(key + 4, &uid, sizeof(uid));
		snprintf(name, len, "unix uid %u", (unsigned)uid);
		return true;
	}
	if (srv_conn_peername(c, &ss, &n) != 0) {
		return false;
	}
	if (ss.ss_family == AF_INET6 &&
	    !IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr)) {
		memcpy(key, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
		if (memcmp(key, v6_loopback, 16) != 0) {
			memset(key + 8, 0, 8);
			uv_inet_ntop(AF_INET6, key, text, sizeof(text));
			snprintf(name, len, "%s/64", text);
			return true;
		}
		memset(key, 0, 16); /* ::1 is loopback, as 127/8 */
		key[10] = key[11] = 0xff;
		key[12] = 127;
		snprintf(name, len, "loopback");
		return true;
	}
	key[10] = key[11] = 0xff;
	if (ss.ss_family == AF_INET) {
		memcpy(key + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	} else if (ss.ss_family == AF_INET6) {
		memcpy(key + 12, ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr + 12, 4);
	} else {
		return false;
	}
	a = key + 12;
	if (a[0] == 127) {
		a[1] = a[2] = a[3] = 0;
		snprintf(name, len, "loopback");
	} else {
		a[3] = 0;
		snprintf(name, len, "%u.%u.%u.0/24", a[0], a[1], a[2]);
	}
	return true;
}

static struct source *source_get(struct store_server *s, struct conn *c, int64_t now)
{
	struct htab_node *node;
	struct source *src;
	uint8_t key[16];
	char name[sizeof(src->name)];
	uint64_t h;

	if (s->sources.buckets == NULL || !source_key(c, key, name, sizeof(name))) {
		return NULL;
	}
	h = htab_hash(key, sizeof(key), &s->ks.seed);
	for (node = htab_chain(&s->sources, h); node != NULL; node = node->next) {
		src = container_of(node, struct source, node);
		if (node->hash == h && memcmp(src->key, key, sizeof(key)) == 0) {
			return src;
		}
	}
	src = calloc(1, sizeof(*src));
	if (src == NULL) {
		return NULL; /* counted in the store's quota only */
	}
	memcpy(src->key, key, sizeof(key));
	snprintf(src->name, sizeof(src->name), "%s", name);
	src->credit_ms = CREDIT_FULL_MS;
	src->refilled_at = now;
	htab_insert(&s->sources, &src->node, h);
	return src;
}

/* Take one new connection's worth of the source's budget; false when it has none left. */
static bool source_take(struct source *src, int64_t now)
{
	int64_t credit = (int64_t)src->credit_ms + (now - src->refilled_at);

	src->credit_ms = credit > CREDIT_FULL_MS ? CREDIT_FULL_MS : (uint32_t)credit;
	src->refilled_at = now;
	if (src->credit_ms < CREDIT_ONE_MS) {
		return false;
	}
	src->credit_ms -= CREDIT_ONE_MS;
	return true;
}

void srv_preauth_refused(struct store_server *s, struct conn *c, enum srv_refusal why)
{
	s->refused[why]++;
	if (c != NULL && c->src != NULL) {
		snprintf(s->refused_source, sizeof(s->refused_source), "%s", c->src->name);
	} else if (c != NULL && c->peer != NULL) {
		snprintf(s->refused_source, sizeof(s->refused_source), "%s", c->peer->name);
	}
}

void srv_preauth_log(struct conn *c, enum srv_refusal why, const char *what)
{
	struct source *src = c->src;
	int64_t now = (int64_t)uv_now(c->s->loop);
	uint64_t h = fnv1a64_str(FNV1A64_INIT, what);
	bool full = true;
	char peer[96];
	uint32_t i;

	srv_preauth_refused(c->s, c, why);
	if (src != NULL) {
		if (now - src->detail_at >= STORE_PREAUTH_LOG_MS) {
			src->detail_at = now;
			src->ndetail = 0;
		}
		for (i = 0; i < src->ndetail && full; i++) {
			full = src->detail[i] != h;
		}
		full = full && src->ndetail < ARRAY_SIZE(src->detail);
		if (full) {
			src->detail[src->ndetail++] = h;
		}
	}
	if (full || log_get_level() >= LOG_DEBUG) {
		srv_conn_peer(c, peer, sizeof(peer));
		if (strcmp(peer, "?") == 0 && c->peer != NULL) {
			snprintf(peer, sizeof(peer), "%s", c->peer->name); /* closed: no port now */
		}
		log_msg(full ? LOG_INFO : LOG_DEBUG, "store: dropping %s: %s", peer, what);
	}
}

/* Close pre-auth @v to make room, quietly (counted for the summary line). */
static void shed(struct conn *v, enum srv_refusal why)
{
	srv_preauth_refused(v->s, v, why);
	srv_conn_close(v);
}

/* Whether @v is in its handshake: its HELLO was answered (a legitimate client sends HELLO at
 * once and AUTH one round trip later), or its AUTH is held. */
static bool in_handshake(const struct conn *v)
{
	return v->auth != NULL || v->tarpit_until != 0;
}

static struct conn *next_of(const struct conn *v, bool by_source)
{
	return by_source ? v->src_next : v->pre_next;
}

/*
 * The pre-auth connection of @src (of the store when NULL) to shed for @c: the oldest that has
 * not begun its handshake, else the oldest. A silent one beside a served TCPStore connection
 * from its address is paired (kept) instead. Connections accepted in this turn of the loop
 * are spared (libuv accepts a whole backlog in one turn, before any of them is read: a client
 * whose HELLO is waiting would be shed by the flood behind it). NULL: none but @c.
 */
static struct conn *victim(struct store_server *s, struct source *src, struct conn *c)
{
	int64_t now = (int64_t)uv_now(s->loop);
	struct conn *v, *first = NULL, *n;

	for (v = src != NULL ? src->pre_head : s->pre_head; v != NULL; v = n) {
		n = next_of(v, src != NULL);
		/* A held AUTH answer (failing is set only to hold it) may be shed like any other: a
		 * guesser holding its whole quota must not lock the source's new clients out. */
		if (v == c || v->closing || (v->failing && v->tarpit_until == 0) || v->since >= now ||
		    pair_silent(v)) {
			continue;
		}
		if (!in_handshake(v)) {
			return v;
		}
		if (first == NULL) {
			first = v;
		}
	}
	return first;
}

static void link_pre(struct store_server *s, struct conn *c)
{
	c->pre_prev = s->pre_tail;
	if (s->pre_tail != NULL) {
		s->pre_tail->pre_next = c;
	} else {
		s->pre_head = c;
	}
	s->pre_tail = c;
	s->npre++;
	if (c->src != NULL) {
		c->src_prev = c->src->pre_tail;
		if (c->src->pre_tail != NULL) {
			c->src->pre_tail->src_next = c;
		} else {
			c->src->pre_head = c;
		}
		c->src->pre_tail = c;
		c->src->npre++;
	}
}

static void unlink_pre(struct store_server *s, struct conn *c)
{
	struct source *src = c->src;

	*(c->pre_prev != NULL ? &c->pre_prev->pre_next : &s->pre_head) = c->pre_next;
	*(c->pre_next != NULL ? &c->pre_next->pre_prev : &s->pre_tail) = c->pre_prev;
	c->pre_prev = c->pre_next = NULL;
	s->npre--;
	if (src != NULL) {
		*(c->src_prev != NULL ? &c->src_prev->src_next : &src->pre_head) = c->src_next;
		*(c->src_next != NULL ? &c->src_next->src_prev : &src->pre_tail) = c->src_prev;
		c->src_prev = c->src_next = NULL;
		src->npre--;
		src->last_seen = (int64_t)uv_now(s->loop);
		c->src = NULL;
	}
}

bool srv_preauth_begin(struct conn *c)
{
	struct store_server *s = c->s;
	int64_t now = (int64_t)uv_now(s->loop);
	struct conn *v;
	bool in_budget = true;
	char msg[64];

	c->pre = true;
	c->src = source_get(s, c, now);
	if (c->src != NULL) {
		in_budget = source_take(c->src, now);
	}
	c->pre_deadline =
		now + (in_budget ? STORE_PREAUTH_TIMEOUT_MS : STORE_PREAUTH_OVER_RATE_MS);
	if (!in_budget) {
		srv_preauth_refused(s, c, REFUSE_OVER_RATE);
	}
	link_pre(s, c);
	if (c->src != NULL && c->src->npre > s->max_preauth_per_source) {
		v = victim(s, c->src, c);
		shed(v != NULL ? v : c, REFUSE_SOURCE_QUOTA);
		if (v == NULL) {
			return false;
		}
	}
	if (s->npre > s->max_preauth) {
		v = victim(s, NULL, c);
		shed(v != NULL ? v : c, REFUSE_TOTAL_QUOTA);
		if (v == NULL) {
			return false;
		}
	}
	if (s->nconns > (size_t)s->max_connections) {
		v = victim(s, NULL, c);
		if (v == NULL) {
			/* Every other connection is authenticated: this one goes, told why. */
			snprintf(msg, sizeof(msg), "too many connections (limit %d)",
				 s->max_connections);
			srv_conn_drop(c, LIMIT_CONNECTIONS, WIRE_E_BUSY, msg);
			return false;
		}
		shed(v, REFUSE_FD_CAP);
	}
	return true;
}

void srv_preauth_end(struct conn *c)
{
	if (!c->pre) {
		return;
	}
	unlink_pre(c->s, c);
	c->pre = false;
	c->s->pre_mem_used -= c->mem; /* from now on charged to the shared budget alone */
}

void srv_preauth_close(struct conn *c)
{
	srv_preauth_end(c);
	if (c->peer != NULL) {
		c->peer->ts_data -= c->ts_data;
		c->peer->ts_silent -= c->ts_silent;
	}
	c->ts_data = c->ts_silent = false;
}

/* A silent connection beside a served TCPStore one from its address: keep it. */
static bool pair_silent(struct conn *c)
{
	if (c->peer == NULL || c->proto != TS_PROTO_UNKNOWN || c->npeek != 0 ||
	    c->s->ts_prefix == NULL || c->s->tls_ctx != NULL ||
	    c->peer->ts_silent >= c->peer->ts_data) {
		return false;
	}
	c->ts_silent = true;
	c->peer->ts_silent++;
	srv_preauth_end(c);
	return true;
}

void srv_preauth_ts_served(struct conn *c)
{
	struct conn *v;

	if (c->ts_silent) {
		/*
		 * Paired as a silent one while its first request was still unread (two clients'
		 * sockets accepted in one turn): it is a served one, and the silent socket it
		 * stood in for is paired below.
		 */
		c->ts_silent = false;
		c->peer->ts_silent--;
	} else if (!c->pre) {
		return;
	}
	srv_preauth_end(c);
	if (c->peer == NULL) {
		return;
	}
	c->ts_data = true;
	c->peer->ts_data++;
	/* Its silent sibling, if it connected first, is paired now rather than at its deadline. */
	for (v = c->s->pre_head; v != NULL; v = v->pre_next) {
		if (v->peer == c->peer && v->proto == TS_PROTO_UNKNOWN && v->npeek == 0 &&
		    !v->closing) {
			pair_silent(v);
			break;
		}
	}
}

static void summary(struct store_server *s, int64_t now)
{
	char line[600];
	size_t off = 0;
	uint32_t total = 0;
	int i;

	if (now - s->refused_logged_at < STORE_PREAUTH_LOG_MS) {
		return;
	}
	for (i = 0; i < REFUSE_KINDS; i++) {
		if (s->refused[i] > 0 && off < sizeof(line)) {
			off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%u %s",
						total > 0 ? ", " : "", s->refused[i],
						refusal_names[i]);
		}
		total += s->refused[i];
	}
	if (total == 0) {
		return;
	}
	log_info("store %s: %u unauthenticated connection(s) refused or closed in the last %d s "
		 "(last from %s): %s; pre-auth now %u of %u",
		 s->addr, total, STORE_PREAUTH_LOG_MS / 1000, s->refused_source, line, s->npre,
		 s->max_preauth);
	memset(s->refused, 0, sizeof(s->refused));
	s->refused_logged_at = now;
}

void srv_preauth_sweep(struct store_server *s, int64_t now)
{
	struct htab_node *node, *next;
	struct conn *c, *n;
	struct source *src;
	size_t b;

	for (c = s->pre_head; c != NULL; c = n) {
		n = c->pre_next;
		/* Held AUTH answers (server_auth.c) and error replies going out end on their own. */
		if (now < c->pre_deadline || c->closing || c->failing || c->tarpit_until != 0) {
			continue;
		}
		if (!pair_silent(c)) {
			shed(c, REFUSE_DEADLINE);
		}
	}
	summary(s, now);
	if (s->sources.buckets == NULL) {
		return;
	}
	htab_for_each_safe(&s->sources, b, node, next)
	{
		src = container_of(node, struct source, node);
		if (src->npre == 0 && now - src->last_seen >= STORE_PREAUTH_LOG_MS &&
		    now - src->refilled_at >= (int64_t)CREDIT_FULL_MS) {
			htab_remove(&s->sources, node);
			free(src);
		}
	}
}

void srv_preauth_finish(struct store_server *s)
{
	struct htab_node *node, *next;
	size_t b;

	if (s->sources.buckets == NULL) {
		return;
	}
	htab_for_each_safe(&s->sources, b, node, next)
	{
		free(container_of(node, struct source, node));
	}
	htab_finish(&s->sources);
}
