/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_limits.c: connection caps, the memory budget, rate-limited logs. */
/*
 * What keeps one client from hurting the others (docs/reliability.md, "Store limits"): a
 * total and a per-address connection cap, a memory budget shared by every connection's
 * partial frames, held-back input and held waits, and one log line per limit and source
 * address per interval however often a limit triggers. The frame deadline is checked by the
 * sweep (server_conn.c), the bound on waits without a deadline in server_wait.c.
 */
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "rendezvous/store/server_internal.h"
#include "src/common/log.h"
#include "src/common/net.h"

#define TRIM_AFTER_BYTES (4u << 20) /* srv_mem_trim(): a burst worth giving back */

static const char *const limit_names[LIMIT_KINDS] = {
	[LIMIT_CONNECTIONS] = "connection cap",
	[LIMIT_PER_ADDR] = "per-address connection cap",
	[LIMIT_MEMORY] = "memory budget",
	[LIMIT_FRAME_TIME] = "frame deadline",
	[LIMIT_UNTIMED_WAITS] = "waits without a deadline",
};

long store_server_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		return -errno;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			return -errno;
		}
	}
	return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)INT32_MAX
		       ? (long)INT32_MAX
		       : (long)rl.rlim_cur;
}

/* The soft fd limit, for the log (-1: unlimited or unknown). */
static int nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > (rlim_t)INT32_MAX) {
		return -1;
	}
	return (int)rl.rlim_cur;
}

/* The default connection cap: a share of the fd limit, so accept never meets EMFILE. */
static int nofile_cap(void)
{
	struct rlimit rl;
	long n;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > (rlim_t)INT32_MAX) {
		return STORE_DEFAULT_MAX_CONNECTIONS;
	}
	n = (long)rl.rlim_cur * STORE_NOFILE_PERCENT / 100 - STORE_NOFILE_RESERVE;
	return n < 1 ? 1 : (int)n;
}

void srv_limits_init(struct store_server *s, const struct store_server_opts *o)
{
	int cap = nofile_cap();

	if (o->max_connections > 0) {
		s->max_connections = o->max_connections;
		if (o->max_connections > cap) {
			log_warn("store: max connections %d is above %d%% of the open file limit "
				 "less %d (%d): raise the limit (ulimit -n, LimitNOFILE=)",
				 o->max_connections, STORE_NOFILE_PERCENT, STORE_NOFILE_RESERVE,
				 cap);
		}
	} else {
		s->max_connections =
			cap < STORE_DEFAULT_MAX_CONNECTIONS ? cap : STORE_DEFAULT_MAX_CONNECTIONS;
	}
	s->max_per_addr = o->max_conns_per_addr > 0 ? (uint32_t)o->max_conns_per_addr
						    : STORE_DEFAULT_MAX_CONNS_PER_ADDR;
	s->max_memory = o->max_memory > 0 ? o->max_memory : STORE_DEFAULT_MAX_MEMORY;
	s->frame_timeout_ms =
		o->frame_timeout_ms > 0 ? o->frame_timeout_ms : STORE_DEFAULT_FRAME_TIMEOUT_MS;
	s->max_untimed_per_conn = o->max_untimed_waits_per_conn > 0
					  ? (uint32_t)o->max_untimed_waits_per_conn
					  : STORE_DEFAULT_UNTIMED_WAITS_PER_CONN;
	s->max_untimed = o->max_untimed_waits > 0 ? (uint32_t)o->max_untimed_waits
						  : STORE_DEFAULT_UNTIMED_WAITS;
	s->max_wait_ms = o->max_wait_ms > 0 ? o->max_wait_ms : 0;
	s->max_preauth = (uint32_t)s->max_connections / STORE_PREAUTH_SHARE;
	if (s->max_preauth < STORE_PREAUTH_MIN) {
		s->max_preauth = STORE_PREAUTH_MIN;
	}
	s->max_preauth_per_source = s->max_preauth < STORE_PREAUTH_PER_SOURCE
					    ? s->max_preauth
					    : STORE_PREAUTH_PER_SOURCE;
	s->max_pre_memory = s->max_memory / STORE_PREAUTH_MEMORY_SHARE;
	log_debug("store: limits: %d connections (open file limit %d), %u per address, %u of "
		  "them before authentication (%u per source), %zu bytes buffered (%zu before "
		  "authentication), frames within %d ms, %u/%u waits without a deadline "
		  "(connection/server)",
		  s->max_connections, nofile_limit(), s->max_per_addr, s->max_preauth,
		  s->max_preauth_per_source, s->max_memory, s->max_pre_memory, s->frame_timeout_ms,
		  s->max_untimed_per_conn, s->max_untimed);
}

void srv_limits_finish(struct store_server *s)
{
	struct htab_node *node, *next;
	size_t b;

	if (s->peers.buckets == NULL) {
		return;
	}
	htab_for_each_safe(&s->peers, b, node, next)
	{
		free(container_of(node, struct peer, node));
	}
	htab_finish(&s->peers);
}

/* The peer's address bytes (4 or 16) and, when @name is not NULL, its printable form; false
 * when unknown. */
static bool peer_key(struct conn *c, uint8_t *key, uint8_t *klen, char *name, size_t namelen)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);
	char *colon;

	if (srv_conn_peername(c, &ss, &n) != 0) {
		return false;
	}
	if (ss.ss_family == AF_INET) {
		memcpy(key, &((struct sockaddr_in *)&ss)->sin_addr, 4);
		*klen = 4;
	} else if (ss.ss_family == AF_INET6) {
		memcpy(key, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
		*klen = 16;
	} else {
		return false;
	}
	if (name == NULL) {
		return true;
	}
	net_format_sockaddr((struct sockaddr *)&ss, name, namelen);
	colon = strrchr(name, ':'); /* "ADDR:PORT" or "[V6]:PORT": keep the address */
	if (colon != NULL) {
		*colon = '\0';
	}
	return true;
}

bool srv_peer_attach(struct conn *c)
{
	struct store_server *s = c->s;
	struct htab_node *node;
	struct peer *p = NULL;
	char name[sizeof(p->name)], msg[160];
	uint8_t key[16], klen = 0;
	uint64_t h;

	if (!peer_key(c, key, &klen, NULL, 0)) {
		return true;
	}
	h = htab_hash(key, klen, &s->ks.seed);
	for (node = htab_chain(&s->peers, h); node != NULL; node = node->next) {
		struct peer *q = container_of(node, struct peer, node);

		if (node->hash == h && q->alen == klen && memcmp(q->addr, key, klen) == 0) {
			p = q;
			break;
		}
	}
	if (p == NULL) {
		p = calloc(1, sizeof(*p));
		if (p == NULL) {
			return true; /* unknown peers are only counted in the total */
		}
		p->alen = klen;
		memcpy(p->addr, key, klen);
		/* A new peer's name, formatted once (the peer address is cached: it cannot fail). */
		if (!peer_key(c, key, &klen, name, sizeof(name))) {
			snprintf(name, sizeof(name), "?");
		}
		snprintf(p->name, sizeof(p->name), "%s", name);
		htab_insert(&s->peers, &p->node, h);
	}
	c->peer = p;
	p->nconns++;
	/* The total cap is server_preauth.c's: a pre-auth connection is shed before a new one is
	 * refused. */
	if (p->nconns > s->max_per_addr) {
		snprintf(msg, sizeof(msg), "too many connections from %s (limit %u)", p->name,
			 s->max_per_addr);
		srv_conn_drop(c, LIMIT_PER_ADDR, WIRE_E_BUSY, msg);
		return false;
	}
	return true;
}

void srv_peer_detach(struct conn *c)
{
	if (c->peer != NULL) {
		c->peer->nconns--;
		c->peer->last_seen = (int64_t)uv_now(c->s->loop);
		c->peer = NULL;
	}
}

void srv_peers_sweep(struct store_server *s, int64_t now)
{
	struct htab_node *node, *next;
	struct peer *p;
	size_t b;

	htab_for_each_safe(&s->peers, b, node, next)
	{
		p = container_of(node, struct peer, node);
		/* Kept a log interval after its last connection, so that a client refused over
		 * and over still gets one line per interval, not one per attempt. */
		if (p->nconns == 0 && now - p->last_seen >= STORE_LIMIT_LOG_INTERVAL_MS) {
			htab_remove(&s->peers, node);
			free(p);
		}
	}
}

void srv_limit_log(struct conn *c, enum srv_limit kind, const char *fmt, ...)
{
	int64_t now = (int64_t)uv_now(c->s->loop);
	struct peer *p = c->peer;
	char peer[96], what[256], more[160] = "";
	va_list ap;

	c->s->met.limited[kind]++;
	if (p != NULL) {
		if (p->logged_at[kind] != 0 &&
		    now - p->logged_at[kind] < STORE_LIMIT_LOG_INTERVAL_MS) {
			p->suppressed[kind]++;
			return;
		}
		if (p->suppressed[kind] > 0) {
			snprintf(more, sizeof(more), " (and %u more from %s in the last %d s)",
				 p->suppressed[kind], p->name, STORE_LIMIT_LOG_INTERVAL_MS / 1000);
		}
		p->logged_at[kind] = now;
		p->suppressed[kind] = 0;
	}
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	srv_conn_peer(c, peer, sizeof(peer));
	log_warn("store: %s: %s: %s%s", limit_names[kind], peer, what, more);
}

void srv_accept_log(struct store_server *s, int status)
{
	int64_t now = (int64_t)uv_now(s->loop);

	if (s->accept_logged_at != 0 && now - s->accept_logged_at < STORE_LIMIT_LOG_INTERVAL_MS) {
		s->accept_suppressed++;
		return;
	}
	log_warn("store %s: accept: %s (%u more in the last %d s)", s->addr, uv_strerror(status),
		 s->accept_suppressed, STORE_LIMIT_LOG_INTERVAL_MS / 1000);
	s->accept_logged_at = now;
	s->accept_suppressed = 0;
}

/* The live connection, other than @c, that holds the most memory. */
static struct conn *biggest_other(struct store_server *s, struct conn *c)
{
	struct conn *x, *best = NULL;

	for (x = s->conns; x != NULL; x = x->next) {
		if (x != c && !x->failing && !x->closing && (best == NULL || x->mem > best->mem)) {
			best = x;
		}
	}
	return best;
}

bool srv_mem_charge(struct conn *c, size_t n)
{
	struct store_server *s = c->s;
	struct conn *v;
	char msg[128];

	if (c->pre && s->pre_mem_used + n > s->max_pre_memory) {
		/* Token-less clients have a budget of their own: they cannot pin the shared one. */
		snprintf(msg, sizeof(msg),
			 "pre-authentication memory budget of %zu bytes exceeded (this connection "
			 "needs %zu)",
			 s->max_pre_memory, c->mem + n);
		srv_preauth_refused(s, c, REFUSE_MEMORY);
		srv_conn_drop(c, LIMIT_MEMORY, WIRE_E_NO_MEMORY, msg);
		return false;
	}
	while (s->mem_used + n > s->max_memory) {
		v = biggest_other(s, c);
		if (v == NULL || v->mem == 0 || v->mem <= c->mem + n) {
			v = c;
		}
		snprintf(msg, sizeof(msg),
			 "memory budget of %zu bytes exceeded (this connection %s %zu)",
			 s->max_memory, v == c ? "needs" : "holds", v == c ? c->mem + n : v->mem);
		srv_conn_drop(v, LIMIT_MEMORY, WIRE_E_NO_MEMORY, msg);
		if (v == c) {
			return false;
		}
	}
	c->mem += n;
	s->mem_used += n;
	if (c->pre) {
		s->pre_mem_used += n;
	}
	if (s->mem_used > s->mem_peak) {
		s->mem_peak = s->mem_used;
	}
	return true;
}

void srv_mem_release(struct conn *c, size_t n)
{
	c->mem -= n;
	c->s->mem_used -= n;
	if (c->pre) {
		c->s->pre_mem_used -= n;
	}
}

/*
 * Give memory back to the system once a burst is over. Held waits and the key entries they
 * keep alive are small allocations; glibc keeps them in its heap when they are freed, so after
 * a flood of 60,000 waits from 200 connections crun-rdzvd's RSS stayed 14 MB above its
 * baseline for good (docs/reliability.md, "Store under attack"). malloc_trim() returns the
 * free pages, also those in the middle of the heap. Called by the sweep; it trims only after
 * the charged memory fell TRIM_AFTER_BYTES below its peak since the last trim, so a steady
 * load never pays for it.
 */
void srv_mem_trim(struct store_server *s)
{
	if (s->mem_peak - s->mem_used < TRIM_AFTER_BYTES) {
		return;
	}
#ifdef __GLIBC__
	malloc_trim(0);
#endif
	s->mem_peak = s->mem_used;
}
