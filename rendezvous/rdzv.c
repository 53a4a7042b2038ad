/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv.c: rendezvous rounds, heartbeats, fail-fast (docs/rendezvous.md). */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/rdzv.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/clock.h"

/*
 * Every key below is relative to the handle prefix "<opts prefix>rdzv/<run_id>/":
 *   cur                  last round that closed (a hint for agents that arrive later)
 *   end                  the job is over: "done ..." or "budget ..." (late joiners read it)
 *   r/<R>/joined         one add per joiner: (position << 32) | cumulative worker count
 *   r/<R>/min            written by the joiner that brought the round to min_nodes
 *   r/<R>/closed         "<count> <world_size> <restart_count>", first compare_set wins;
 *                        count 0 marks a round that timed out before it formed
 *   r/<R>/node/<g>       node record: "<nproc> <cum> <port> <addr> <host>"
 *   r/<R>/hb/<g>         heartbeat (TTL heartbeat_timeout), refreshed every keep_alive_interval
 *   r/<R>/failed         "<kind> <group_rank> <host> <text>", first compare_set wins
 *   r/<R>/fin/<g>        node g's workers all exited 0
 *   r/<R>/done           add per finished node; r/<R>/alldone when it reaches the count
 *   r/<R>/wake/<g>/<n>   written by rdzv_watch_stop() to wake the watch thread at once
 *   gone, gone/<n>       nodes that saw the job end; the n-th writes gone/<n> (rdzv_wait_left)
 */

#define KEY_MAX 160
#define REC_MAX 600
#define PACK_POS(v) ((int64_t)(v) >> 32)
#define PACK_CUM(v) ((int64_t)((int64_t)(v) & (int64_t)0xffffffff))

/* What a round's "failed" value starts with. Only FAIL spends the restart budget. */
#define KIND_FAIL 'F'	 /* a node's workers failed */
#define KIND_LOST 'L'	 /* a node's heartbeat lapsed */
#define KIND_SCALE 'S'	 /* a node waits for the next round and the job is below max */
#define KIND_REFORM 'E'	 /* rdzv_request_reform() */
#define KIND_TIMEOUT 'T' /* the round never formed */

/* join_round() result: this node did not make it into round R; try R + 1. */
#define JOIN_LATE 1

struct rdzv {
	struct crun_store *st; /* the caller's thread only */
	struct rdzv_conf conf; /* strings point at the copies below */
	char *run_id, *addr, *host;
	char *worker_base; /* opts prefix, "" for none */

	/* The round this node is in (valid while in_round). */
	bool in_round;
	bool finished; /* rdzv_finish() already recorded this node's success */
	bool gone;     /* this node saw the job end and counted itself in "gone" */
	int round, group_rank, count, restart_count;
	int64_t closed_at_ms;

	/* Watch thread. */
	pthread_t thr;
	bool thr_running;
	struct crun_store *wst; /* the watch thread's own handle, kept from round to round */
	atomic_bool wst_bad;    /* a store error on wst: open a fresh one next time */
	rdzv_event_cb cb;
	void *cb_arg;
	unsigned wake_gen;
	atomic_bool stop;
	atomic_bool self_failed; /* this node marked the round failed itself */
	atomic_bool thr_exited;	 /* the watch thread returned (no wakeup needed) */
};

static void rkey(char *buf, int round, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void rkey(char *buf, int round, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(buf, KEY_MAX, "r/%d/", round);
	va_start(ap, fmt);
	vsnprintf(buf + n, (size_t)(KEY_MAX - n), fmt, ap);
	va_end(ap);
}

void rdzv_conf_defaults(struct rdzv_conf *c)
{
	c->min_nodes = 1;
	c->max_nodes = 1;
	c->node_rank = -1;
	c->local_world_size = 1;
	c->max_restarts = 0;
	c->join_timeout_ms = 600000;
	c->last_call_timeout_ms = 30000;
	c->close_timeout_ms = 30000;
	c->heartbeat_timeout_ms = 30000;
	c->keep_alive_interval_ms = 5000;
	c->keep_alive_max_attempt = 3;
	c->read_timeout_ms = 60000;
	c->progress_interval_ms = 5000;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static int clamp_ms(int64_t ms)
{
	if (ms < 1) {
		return 1;
	}
	return ms > 86400000 ? 86400000 : (int)ms;
}

static bool is_static(const struct rdzv *r)
{
	return r->conf.node_rank >= 0;
}

/* ---- small store helpers -------------------------------------------------------------- */

/* Get @key as a NUL-terminated string into @buf. Returns 0, -ENOENT or a store error. */
static int get_str(struct crun_store *st, const char *key, char *buf, size_t cap)
{
	void *v = NULL;
	size_t len = 0;
	int rc;

	rc = crun_store_get(st, key, &v, &len);
	if (rc < 0) {
		return rc;
	}
	if (len >= cap) {
		len = cap - 1;
	}
	memcpy(buf, v, len);
	buf[len] = '\0';
	free(v);
	return 0;
}

static int set_str(struct crun_store *st, const char *key, const char *val)
{
	return crun_store_set(st, key, val, strlen(val));
}

/* compare_set(key, "", val). *won = whether @val is now stored; @cur gets the stored value. */
static int cas_str(struct crun_store *st, const char *key, const char *val, char *cur, size_t cap,
		   bool *won)
{
	void *v = NULL;
	size_t len = 0;
	int rc;

	rc = crun_store_compare_set(st, key, "", 0, val, strlen(val), &v, &len);
	if (rc < 0) {
		return rc;
	}
	*won = len == strlen(val) && memcmp(v, val, len) == 0;
	if (cur != NULL) {
		if (len >= cap) {
			len = cap - 1;
		}
		memcpy(cur, v, len);
		cur[len] = '\0';
	}
	free(v);
	return 0;
}

static int exists(struct crun_store *st, const char *key, bool *yes)
{
	const char *keys[1] = {key};

	return crun_store_check(st, keys, 1, yes);
}

/* "<count> <world> <rc>" */
static int parse_closed(const char *s, int *count, int *world, int *rc)
{
	if (sscanf(s, "%d %d %d", count, world, rc) != 3 || *count < 0 || *world < 0 || *rc < 0) {
		return -EPROTO;
	}
	return 0;
}

/* The text part of a "failed" value: "<kind> <g> <host> <text>" -> "<text> (node g, host)". */
static void describe_failed(const char *v, char *out, size_t cap)
{
	char host[256];
	int g, off = 0;
	char kind;

	if (sscanf(v, "%c %d %255s %n", &kind, &g, host, &off) < 3 || off == 0) {
		snprintf(out, cap, "%s", v);
		return;
	}
	snprintf(out, cap, "%s (reported by node rank %d, host %s)", v + off, g, host);
}

static const char *store_err(int rc)
{
	return crun_strerror(rc);
}

/* ---- create / destroy ------------------------------------------------------------------ */

static int check_conf(const struct rdzv_conf *c, struct crun_diag *d)
{
	if (c->run_id == NULL || c->run_id[0] == '\0') {
		return diag_set(d, CRUN_ECONFIG, "rendezvous: run id: must not be empty");
	}
	if (strlen(c->run_id) > 128) {
		return diag_set(d, CRUN_ECONFIG, "rendezvous: run id: longer than 128 bytes");
	}
	if (c->min_nodes < 1 || c->max_nodes < c->min_nodes || c->max_nodes > 1000000) {
		return diag_set(d, CRUN_ECONFIG,
				"rendezvous: nodes: expected 1 <= MIN <= MAX <= 1000000, got %d:%d",
				c->min_nodes, c->max_nodes);
	}
	if (c->node_rank >= c->max_nodes) {
		return diag_set(d, CRUN_ECONFIG,
				"rendezvous: node rank: %d is not below the node count %d",
				c->node_rank, c->max_nodes);
	}
	if (c->node_rank >= 0 && c->min_nodes != c->max_nodes) {
		return diag_set(
			d, CRUN_ECONFIG,
			"rendezvous: node rank: a fixed node rank needs a fixed node count, "
			"got %d:%d",
			c->min_nodes, c->max_nodes);
	}
	if (c->local_world_size < 1 || c->local_world_size > 65535) {
		return diag_set(d, CRUN_ECONFIG,
				"rendezvous: local world size: expected 1..65535, got %d",
				c->local_world_size);
	}
	if (c->max_restarts < 0) {
		return diag_set(d, CRUN_ECONFIG, "rendezvous: max restarts: %d is negative",
				c->max_restarts);
	}
	if (c->join_timeout_ms <= 0 || c->last_call_timeout_ms < 0 || c->close_timeout_ms <= 0 ||
	    c->heartbeat_timeout_ms <= 0 || c->keep_alive_interval_ms <= 0 ||
	    c->read_timeout_ms <= 0 || c->progress_interval_ms <= 0) {
		return diag_set(d, CRUN_ECONFIG, "rendezvous: timeouts: every timeout must be > 0");
	}
	if (c->keep_alive_interval_ms >= c->heartbeat_timeout_ms) {
		return diag_set(d, CRUN_ECONFIG,
				"rendezvous: keep_alive_interval: %" PRId64
				" ms must be below heartbeat_timeout %" PRId64 " ms",
				c->keep_alive_interval_ms, c->heartbeat_timeout_ms);
	}
	return 0;
}

int rdzv_create(const struct crun_store_opts *store, const struct rdzv_conf *conf,
		struct rdzv **out, struct crun_diag *d)
{
	struct crun_store_opts o;
	char err[256] = "";
	char hostbuf[256];
	char *prefix = NULL;
	struct rdzv *r;
	size_t plen;
	int rc;

	*out = NULL;
	if (store == NULL || conf == NULL) {
		return diag_set(d, -EINVAL, "rendezvous: no store or configuration given");
	}
	rc = check_conf(conf, d);
	if (rc < 0) {
		return rc;
	}
	r = calloc(1, sizeof(*r));
	if (r == NULL) {
		return diag_set(d, -ENOMEM, "rendezvous: out of memory");
	}
	r->conf = *conf;
	if (conf->hostname != NULL && conf->hostname[0] != '\0') {
		r->host = strdup(conf->hostname);
	} else {
		if (gethostname(hostbuf, sizeof(hostbuf)) != 0) {
			snprintf(hostbuf, sizeof(hostbuf), "localhost");
		}
		hostbuf[sizeof(hostbuf) - 1] = '\0';
		r->host = strdup(hostbuf);
	}
	/* Spaces separate fields in the records: keep the host name one word. */
	for (char *p = r->host; p != NULL && *p != '\0'; p++) {
		if (*p == ' ' || *p == '\t' || *p == '\n') {
			*p = '_';
		}
	}
	r->run_id = strdup(conf->run_id);
	r->addr = crun_strdup(conf->advertise_addr != NULL && conf->advertise_addr[0] != '\0'
				      ? conf->advertise_addr
				      : r->host);
	r->worker_base = strdup(store->prefix != NULL ? store->prefix : "");
	plen = strlen(r->worker_base) + strlen(conf->run_id) + 8;
	prefix = malloc(plen);
	if (r->host == NULL || r->run_id == NULL || r->addr == NULL || r->worker_base == NULL ||
	    prefix == NULL) {
		rc = diag_set(d, -ENOMEM, "rendezvous: out of memory");
		goto err;
	}
	if (strchr(r->addr, ' ') != NULL) {
		rc = diag_set(d, CRUN_ECONFIG, "rendezvous: advertise address: \"%s\" has a space",
			      r->addr);
		goto err;
	}
	snprintf(prefix, plen, "%srdzv/%s/", r->worker_base, conf->run_id);
	r->conf.run_id = r->run_id;
	r->conf.advertise_addr = r->addr;
	r->conf.hostname = r->host;
	o = *store;
	o.prefix = prefix;
	if (o.timeout_ms <= 0) {
		o.timeout_ms = clamp_ms(conf->read_timeout_ms);
	}
	rc = crun_store_open(&o, &r->st, err, sizeof(err));
	if (rc < 0) {
		diag_set(d, rc, "rendezvous %s: %s", conf->run_id,
			 err[0] != '\0' ? err : store_err(rc));
		goto err;
	}
	atomic_init(&r->stop, false);
	atomic_init(&r->self_failed, false);
	atomic_init(&r->thr_exited, false);
	atomic_init(&r->wst_bad, false);
	free(prefix);
	*out = r;
	return 0;
err:
	free(prefix);
	rdzv_destroy(r);
	return rc;
}

void rdzv_destroy(struct rdzv *r)
{
	if (r == NULL) {
		return;
	}
	rdzv_watch_stop(r);
	crun_store_close(r->wst);
	crun_store_close(r->st);
	free(r->run_id);
	free(r->addr);
	free(r->host);
	free(r->worker_base);
	free(r);
}

/* ---- joining a round ------------------------------------------------------------------ */

/* Bind port 0 on @addr, read the port back and close: a port free on this node right now. */
static int find_free_port(const char *addr, int *port, struct crun_diag *d)
{
	struct addrinfo hints, *ai = NULL;
	struct sockaddr_storage ss, any;
	socklen_t sl = sizeof(ss);
	int fd = -1, rc, gai;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	gai = getaddrinfo(addr, "0", &hints, &ai);
	if (gai != 0) {
		return diag_set(d, -EADDRNOTAVAIL, "rendezvous: master port: resolve %s: %s", addr,
				gai_strerror(gai));
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = diag_set(d, -errno, "rendezvous: master port: socket: %s", strerror(errno));
		goto out;
	}
	rc = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -errno;
	if (rc == -EADDRNOTAVAIL) {
		/* Not an address of this host (NAT, a name for a VIP): any local port will do. */
		log_warn("rendezvous: master port: %s is not an address of this node; checking the "
			 "port on all interfaces",
			 addr);
		memset(&any, 0, sizeof(any));
		any.ss_family = (sa_family_t)ai->ai_family;
		rc = bind(fd, (struct sockaddr *)&any, ai->ai_addrlen) == 0 ? 0 : -errno;
	}
	if (rc < 0) {
		diag_set(d, rc, "rendezvous: master port: bind %s: %s", addr, strerror(-rc));
		goto out;
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
		rc = diag_set(d, -errno, "rendezvous: master port: getsockname: %s",
			      strerror(errno));
		goto out;
	}
	*port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	rc = 0;
out:
	if (fd >= 0) {
		close(fd);
	}
	freeaddrinfo(ai);
	return rc;
}

/*
 * Restart count of round @R: that of R-1 plus one when R-1 ended in a worker failure. Both keys
 * of R-1 come in one round trip. *@prev_over (may be NULL) tells whether R-1 is over for good
 * (it failed, or closed without forming): then both keys are final and so is *@out.
 */
static int round_restart_count(struct rdzv *r, int R, int *out, bool *prev_over)
{
	char kc[KEY_MAX], kf[KEY_MAX], v[REC_MAX];
	const char *keys[2] = {kc, kf};
	void *vals[2] = {NULL, NULL};
	size_t lens[2] = {0, 0};
	int count = 0, world, rc0 = 0, rc, i;
	bool closed, failed;

	*out = 0;
	if (prev_over != NULL) {
		*prev_over = R == 0;
	}
	if (R == 0) {
		return 0;
	}
	rkey(kc, R - 1, "closed");
	rkey(kf, R - 1, "failed");
	rc = crun_store_multi_get(r->st, keys, 2, vals, lens);
	if (rc < 0) {
		return rc;
	}
	closed = vals[0] != NULL;
	failed = vals[1] != NULL && lens[1] > 0 && ((const char *)vals[1])[0] == KIND_FAIL;
	if (closed) {
		size_t n = lens[0] < sizeof(v) ? lens[0] : sizeof(v) - 1;

		memcpy(v, vals[0], n);
		v[n] = '\0';
		rc = parse_closed(v, &count, &world, &rc0);
	}
	if (prev_over != NULL) {
		*prev_over = vals[1] != NULL || (closed && rc == 0 && count == 0);
	}
	for (i = 0; i < 2; i++) {
		free(vals[i]);
	}
	if (!closed) {
		return 0;
	}
	if (rc < 0) {
		return -EPROTO;
	}
	*out = rc0 + (failed ? 1 : 0);
	return 0;
}

/*
 * A closed round whose rank 0 node neither heartbeats nor finished is dead (rank 0 writes its
 * heartbeat when it joins, before the round can close). Returns 1 dead, 0 alive, or an error.
 */
static int round_is_dead(struct rdzv *r, int R)
{
	char key[KEY_MAX];
	bool yes;
	int rc;

	rkey(key, R, "hb/0");
	rc = exists(r->st, key, &yes);
	if (rc < 0 || yes) {
		return rc < 0 ? rc : 0;
	}
	rkey(key, R, "fin/0");
	rc = exists(r->st, key, &yes);
	if (rc < 0) {
		return rc;
	}
	return yes ? 0 : 1;
}

/*
 * This node saw the job end (success, or the budget spent): count it once in "gone". The n-th
 * node to do so writes "gone/<n>", which rdzv_wait_left() waits on.
 */
static void note_gone(struct rdzv *r)
{
	char key[KEY_MAX];
	int64_t n = 0;
	int rc;

	/* Only members count: rdzv_wait_left() waits for the nodes of the last round, and a
	 * stranger turned away at the end must not stand in for one that has not looked yet. */
	if (r->gone || r->count <= 0) {
		return;
	}
	r->gone = true;
	rc = crun_store_add(r->st, "gone", 1, &n);
	if (rc == 0) {
		snprintf(key, sizeof(key), "gone/%" PRId64, n);
		rc = set_str(r->st, key, "1");
	}
	if (rc < 0) {
		log_warn("rendezvous %s: count this node out: %s", r->run_id, store_err(rc));
	}
}

/* The job-wide "end" key: the job finished, or its restart budget ran out. */
static int end_verdict(struct rdzv *r, const char *v, struct crun_diag *d)
{
	note_gone(r);
	if (strncmp(v, "budget", 6) == 0) {
		return diag_set(d, CRUN_ERESTARTS, "rendezvous %s: restart budget exhausted: %s",
				r->run_id, v + (v[6] == ' ' ? 7 : 6));
	}
	return diag_set(d, CRUN_ECLOSED, "rendezvous %s: job is closed to new nodes: %s", r->run_id,
			v[4] == ' ' ? v + 5 : v);
}

static int check_end(struct rdzv *r, struct crun_diag *d)
{
	char v[REC_MAX];
	int rc;

	rc = get_str(r->st, "end", v, sizeof(v));
	if (rc == -ENOENT) {
		return 0;
	}
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s: read job state: %s", r->run_id,
				store_err(rc));
	}
	return end_verdict(r, v, d);
}

/* Node ranks (static) or joined hosts (dynamic) for a progress or timeout message. */
static void describe_members(struct rdzv *r, int R, int joined, const char *label, char *out,
			     size_t cap)
{
	enum { LIST_MAX = 64 };
	char keybuf[LIST_MAX][KEY_MAX];
	const char *keys[LIST_MAX];
	void *vals[LIST_MAX];
	size_t lens[LIST_MAX];
	size_t used = 0;
	int n, i, listed = 0;

	out[0] = '\0';
	n = is_static(r) ? r->conf.max_nodes : joined;
	if (n > LIST_MAX) {
		n = LIST_MAX;
	}
	if (n <= 0) {
		return;
	}
	for (i = 0; i < n; i++) {
		rkey(keybuf[i], R, "node/%d", i);
		keys[i] = keybuf[i];
		vals[i] = NULL;
	}
	if (crun_store_multi_get(r->st, keys, (size_t)n, vals, lens) < 0) {
		return;
	}
	used = (size_t)snprintf(out, cap, "%s", label);
	for (i = 0; i < n; i++) {
		char nhost[256] = "?";
		unsigned np, cum, port;
		char naddr[256];

		if (is_static(r) && vals[i] == NULL && used < cap) {
			used += (size_t)snprintf(out + used, cap - used, "%s %d",
						 listed++ ? "," : "", i);
		} else if (!is_static(r) && vals[i] != NULL && used < cap) {
			if (sscanf(vals[i], "%u %u %u %255s %255s", &np, &cum, &port, naddr,
				   nhost) < 5) {
				snprintf(nhost, sizeof(nhost), "?");
			}
			used += (size_t)snprintf(out + used, cap - used, "%s %s",
						 listed++ ? "," : "", nhost);
		}
		free(vals[i]);
	}
	if (listed == 0) {
		out[0] = '\0';
	} else if (is_static(r) && r->conf.max_nodes > LIST_MAX && used < cap) {
		snprintf(out + used, cap - used, ", ... (first %d ranks shown)", LIST_MAX);
	}
}

static int joined_count(struct rdzv *r, int R)
{
	char key[KEY_MAX];
	int64_t v = 0;

	rkey(key, R, "joined");
	if (crun_store_add(r->st, key, 0, &v) < 0) {
		return -1;
	}
	return (int)PACK_POS(v);
}

static void refresh_heartbeat(struct crun_store *st, const struct rdzv *r, int R, int g)
{
	char key[KEY_MAX];
	int rc;

	rkey(key, R, "hb/%d", g);
	rc = crun_store_set_ttl(st, key, "1", 1, r->conf.heartbeat_timeout_ms);
	if (rc < 0) {
		log_warn("rendezvous %s round %d: heartbeat: %s", r->run_id, R, store_err(rc));
	}
}

/*
 * Static ranks join in any order: sum the worker counts in the records of ranks 0..g-1, in
 * batches of at most CRUN_STORE_MAX_KEYS keys (one store request names no more).
 */
static int static_rank_offset(struct rdzv *r, int R, int g, int64_t deadline, int *offset,
			      struct crun_diag *d)
{
	int m = g < CRUN_STORE_MAX_KEYS ? g : CRUN_STORE_MAX_KEYS;
	const char **keys = calloc((size_t)m, sizeof(*keys));
	char *kb = malloc((size_t)m * KEY_MAX);
	void **vals = calloc((size_t)m, sizeof(*vals));
	size_t *lens = calloc((size_t)m, sizeof(*lens));
	int64_t off = 0, wait_ms;
	unsigned np;
	int base, k = 0, i, rc = 0;

	if (keys == NULL || kb == NULL || vals == NULL || lens == NULL) {
		rc = diag_set(d, -ENOMEM, "rendezvous: out of memory");
		goto out;
	}
	for (base = 0; base < g; base += k) {
		k = g - base < m ? g - base : m;
		for (i = 0; i < k; i++) {
			keys[i] = kb + (size_t)i * KEY_MAX;
			rkey(kb + (size_t)i * KEY_MAX, R, "node/%d", base + i);
		}
		wait_ms = max64(deadline - crun_now_ms(), r->conf.close_timeout_ms);
		rc = crun_store_wait(r->st, keys, (size_t)k, clamp_ms(wait_ms));
		if (rc == 0) {
			rc = crun_store_multi_get(r->st, keys, (size_t)k, vals, lens);
		}
		if (rc < 0) {
			diag_set(d, rc, "rendezvous %s round %d: read node records: %s", r->run_id,
				 R, store_err(rc));
			goto out;
		}
		for (i = 0; i < k; i++) {
			if (rc == 0 && (vals[i] == NULL || sscanf(vals[i], "%u", &np) != 1)) {
				rc = diag_set(d, -EPROTO,
					      "rendezvous %s round %d: node record %d is malformed",
					      r->run_id, R, base + i);
			} else if (rc == 0) {
				off += np;
			}
			free(vals[i]);
			vals[i] = NULL;
		}
		if (rc < 0) {
			goto out;
		}
	}
	*offset = (int)off;
	rc = 0;
out:
	free(keys);
	free(kb);
	free(vals);
	free(lens);
	return rc;
}

/* Fill @a once round @R closed with this node at group rank @g. */
static int fill_assignment(struct rdzv *r, int R, int g, int64_t my_packed, int count, int world,
			   int rc_count, int my_port, int64_t deadline, struct rdzv_assignment *a,
			   struct crun_diag *d)
{
	char key[KEY_MAX], rec[REC_MAX], maddr[256], mhost[256];
	const char *keys[1] = {key};
	unsigned np, cum, mport;
	int rc;

	memset(a, 0, sizeof(*a));
	a->round = R;
	a->group_rank = g;
	a->group_world_size = count;
	a->world_size = world;
	a->restart_count = rc_count;
	if (!is_static(r)) {
		a->rank_offset = (int)(PACK_CUM(my_packed) - r->conf.local_world_size);
	} else if (g > 0) {
		rc = static_rank_offset(r, R, g, deadline, &a->rank_offset, d);
		if (rc < 0) {
			return rc;
		}
	}
	snprintf(a->worker_prefix, sizeof(a->worker_prefix), "%s%s/attempt/%d/", r->worker_base,
		 r->run_id, R);
	if (g == 0) {
		/* This node is the master: its own record says what the others read. */
		snprintf(a->master_addr, sizeof(a->master_addr), "%s", r->addr);
		a->master_port = my_port;
		return 0;
	}
	/* Rank 0's record names the master; it wrote it right after joining, so it is almost
	 * always there already: get first, wait only when it is not. */
	rkey(key, R, "node/0");
	rc = get_str(r->st, key, rec, sizeof(rec));
	if (rc == -ENOENT) {
		rc = crun_store_wait(
			r->st, keys, 1,
			clamp_ms(max64(deadline - crun_now_ms(), r->conf.close_timeout_ms)));
		if (rc == 0) {
			rc = get_str(r->st, key, rec, sizeof(rec));
		}
	}
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read rank 0's record: %s",
				r->run_id, R, store_err(rc));
	}
	if (sscanf(rec, "%u %u %u %255s %255s", &np, &cum, &mport, maddr, mhost) != 5) {
		return diag_set(d, -EPROTO, "rendezvous %s round %d: rank 0's record is malformed",
				r->run_id, R);
	}
	snprintf(a->master_addr, sizeof(a->master_addr), "%s", maddr);
	a->master_port = (int)mport;
	return 0;
}

/*
 * The restart count a closer writes into round @R's close value, read again at close time: a
 * node may have joined R while R - 1 still ran, and R - 1 may have failed since (R closes only
 * once R - 1 is over, so the value read now is final). Returns 0, CRUN_ERESTARTS or an error.
 */
static int close_restart_count(struct rdzv *r, int R, int *rcount, bool final,
			       struct crun_diag *d)
{
	/* Read when joining from a round R - 1 that was already over: it cannot have changed. */
	int rc = final ? 0 : round_restart_count(r, R, rcount, NULL);

	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read previous round: %s", r->run_id,
				R, store_err(rc));
	}
	if (*rcount > r->conf.max_restarts) {
		note_gone(r);
		return diag_set(d, CRUN_ERESTARTS,
				"rendezvous %s: restart budget exhausted: all %d failure restarts "
				"used",
				r->run_id, r->conf.max_restarts);
	}
	return 0;
}

/*
 * Join round @R and wait until it closes. Returns 0 (in the round, @a filled), JOIN_LATE (the
 * round formed without this node and the job may grow: try R + 1), or a negative code.
 */
static int join_round(struct rdzv *r, int R, int64_t deadline, struct rdzv_assignment *a,
		      struct crun_diag *d)
{
	const struct rdzv_conf *c = &r->conf;
	char k_joined[KEY_MAX], k_min[KEY_MAX], k_closed[KEY_MAX], k_prev[KEY_MAX];
	char key[KEY_MAX], rec[REC_MAX], cur[REC_MAX], members[512];
	const char *wkeys[4];
	int64_t packed, start = crun_now_ms(), lc_start = 0, next_hb, next_progress;
	int p, g, port = 0, rc, count, world, rcount, nk, i;
	bool min_seen, prev_ended, won, closed_by_me = false, over_max = false, rcount_final;

	rc = round_restart_count(r, R, &rcount, &rcount_final);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read previous round: %s", r->run_id,
				R, store_err(rc));
	}
	if (rcount > c->max_restarts) {
		note_gone(r);
		return diag_set(d, CRUN_ERESTARTS,
				"rendezvous %s: restart budget exhausted: all %d failure restarts "
				"used",
				r->run_id, c->max_restarts);
	}
	rkey(k_joined, R, "joined");
	rkey(k_min, R, "min");
	rkey(k_closed, R, "closed");
	if (is_static(r)) {
		/* Claim the rank before counting in: a node refused for a duplicate --node-rank
		 * must not take a place of the round, or the real owner would be turned away. */
		g = c->node_rank;
		if (g == 0) {
			rc = find_free_port(r->addr, &port, d);
			if (rc < 0) {
				return rc;
			}
		}
		snprintf(rec, sizeof(rec), "%d 0 %d %s %s", c->local_world_size, port, r->addr,
			 r->host);
		rkey(key, R, "node/%d", g);
		rc = cas_str(r->st, key, rec, cur, sizeof(cur), &won);
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: publish node record: %s",
					r->run_id, R, store_err(rc));
		}
		if (!won) {
			char oh[256] = "?", oa[256] = "?";

			/* Taken in a round that closed without this node: its state decides. */
			rc = exists(r->st, k_closed, &won);
			if (rc < 0) {
				return diag_set(d, rc, "rendezvous %s round %d: read round state: %s",
						r->run_id, R, store_err(rc));
			}
			if (won) {
				goto late_full;
			}
			sscanf(cur, "%*u %*u %*u %255s %255s", oa, oh);
			return diag_set(
				d, CRUN_ECONFIG,
				"rendezvous %s round %d: node rank %d: already taken by host "
				"%s (%s); every node needs its own --node-rank",
				r->run_id, R, g, oh, oa);
		}
		rc = crun_store_add(r->st, k_joined, ((int64_t)1 << 32) | c->local_world_size,
				    &packed);
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: join: %s", r->run_id, R,
					store_err(rc));
		}
		p = (int)PACK_POS(packed);
		if (p > c->max_nodes) {
			goto late_full;
		}
	} else {
		rc = crun_store_add(r->st, k_joined, ((int64_t)1 << 32) | c->local_world_size,
				    &packed);
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: join: %s", r->run_id, R,
					store_err(rc));
		}
		p = (int)PACK_POS(packed);
		if (p > c->max_nodes) {
			/* Full: the max_nodes-th joiner closes it (or already did). */
			goto late_full;
		}
		g = p - 1;
		if (g == 0) {
			rc = find_free_port(r->addr, &port, d);
			if (rc < 0) {
				return rc;
			}
		}
		snprintf(rec, sizeof(rec), "%d %" PRId64 " %d %s %s", c->local_world_size,
			 PACK_CUM(packed), port, r->addr, r->host);
		rkey(key, R, "node/%d", g);
		rc = set_str(r->st, key, rec);
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: publish node record: %s",
					r->run_id, R, store_err(rc));
		}
	}
	refresh_heartbeat(r->st, r, R, g);
	next_hb = crun_now_ms() + c->keep_alive_interval_ms;
	/* A one-node job has nobody who could wait for "min". */
	if (p == c->min_nodes && c->max_nodes > 1) {
		rc = set_str(r->st, k_min, "1");
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: mark min reached: %s",
					r->run_id, R, store_err(rc));
		}
	}
	min_seen = p >= c->min_nodes;
	/*
	 * Round R-1 must be over before R may close: failed, or never formed. What
	 * round_restart_count() read says so already in the common case (a restart after a
	 * failure); otherwise the wait below hears R-1's "failed" (a round that never formed gets
	 * one too, right after its close value).
	 */
	prev_ended = rcount_final;
	rkey(k_prev, R - 1, "failed");
	next_progress = start + c->progress_interval_ms;
	log_debug("rendezvous %s round %d: joined at position %d", r->run_id, R, p);

	for (;;) {
		int64_t now = crun_now_ms(), until;

		if (min_seen && prev_ended && lc_start == 0) {
			lc_start = now;
		}
		/* Close the round: at max_nodes at once, at min after the last call. A join
		 * timeout that runs out during the last call closes it too: min_nodes are
		 * there, so the round forms with them rather than failing. */
		if (prev_ended && !is_static(r) && !over_max &&
		    (p == c->max_nodes ||
		     (lc_start != 0 &&
		      (now >= lc_start + c->last_call_timeout_ms || now >= deadline)))) {
			int64_t v = packed;

			if (p != c->max_nodes) {
				rc = crun_store_add(r->st, k_joined, 0, &v);
				if (rc < 0) {
					return diag_set(d, rc, "rendezvous %s round %d: count: %s",
							r->run_id, R, store_err(rc));
				}
			}
			rc = close_restart_count(r, R, &rcount, rcount_final, d);
			if (rc < 0) {
				return rc;
			}
			if (PACK_POS(v) <= c->max_nodes) {
				snprintf(rec, sizeof(rec), "%d %d %d", (int)PACK_POS(v),
					 (int)PACK_CUM(v), rcount);
				rc = cas_str(r->st, k_closed, rec, cur, sizeof(cur), &won);
				if (rc < 0) {
					return diag_set(d, rc, "rendezvous %s round %d: close: %s",
							r->run_id, R, store_err(rc));
				}
				closed_by_me = won;
				goto closed;
			}
			/* Over max_nodes: the max_nodes-th joiner holds the count; it closes. */
			over_max = true;
		}
		if (prev_ended && is_static(r) && p == c->max_nodes) {
			rc = close_restart_count(r, R, &rcount, rcount_final, d);
			if (rc < 0) {
				return rc;
			}
			snprintf(rec, sizeof(rec), "%d %d %d", (int)PACK_POS(packed),
				 (int)PACK_CUM(packed), rcount);
			rc = cas_str(r->st, k_closed, rec, cur, sizeof(cur), &won);
			if (rc < 0) {
				return diag_set(d, rc, "rendezvous %s round %d: close: %s",
						r->run_id, R, store_err(rc));
			}
			closed_by_me = won;
			goto closed;
		}
		if (now >= deadline) {
			int joined = joined_count(r, R);

			rc = close_restart_count(r, R, &rcount, rcount_final, d);
			if (rc < 0) {
				return rc;
			}
			snprintf(rec, sizeof(rec), "0 0 %d", rcount);
			rc = cas_str(r->st, k_closed, rec, cur, sizeof(cur), &won);
			if (rc < 0) {
				return diag_set(d, rc, "rendezvous %s round %d: close: %s",
						r->run_id, R, store_err(rc));
			}
			if (!won) {
				goto closed; /* it closed properly just now */
			}
			snprintf(cur, sizeof(cur), "%c %d %s join timeout", KIND_TIMEOUT, g,
				 r->host);
			rkey(key, R, "failed");
			(void)cas_str(r->st, key, cur, NULL, 0, &won);
			describe_members(r, R, joined,
					 is_static(r) ? "; never came: node ranks" : "; joined:",
					 members, sizeof(members));
			if (!prev_ended) {
				/* Enough nodes may be here: what held the round is the one before. */
				return diag_set(d, -ETIMEDOUT,
						"rendezvous %s round %d: join timeout after %" PRId64
						" s: %d node(s) joined, but round %d is still running "
						"(neither failed nor re-formed)",
						r->run_id, R, (now - start + 500) / 1000, joined, R - 1);
			}
			if (is_static(r)) {
				return diag_set(
					d, -ETIMEDOUT,
					"rendezvous %s round %d: join timeout after %" PRId64
					" s: %d of %d nodes joined%s",
					r->run_id, R, (now - start + 500) / 1000, joined, c->max_nodes,
					members);
			}
			return diag_set(d, -ETIMEDOUT,
					"rendezvous %s round %d: join timeout after %" PRId64
					" s: %d of %d required nodes joined%s; %d more never came",
					r->run_id, R, (now - start + 500) / 1000, joined, c->min_nodes,
					members, c->min_nodes - joined);
		}
		if (now >= next_hb) {
			refresh_heartbeat(r->st, r, R, g);
			next_hb = now + c->keep_alive_interval_ms;
		}
		if (now >= next_progress) {
			int joined = joined_count(r, R);
			char when[128];

			if (joined > c->max_nodes) {
				joined = c->max_nodes;
			}
			members[0] = '\0';
			if (is_static(r)) {
				describe_members(r, R, joined, "; missing node ranks:", members,
						 sizeof(members));
			}
			if (lc_start != 0) {
				/* The join timeout closes it too, if it comes first. */
				snprintf(when, sizeof(when),
					 "last call closes the round in %" PRId64 " s",
					 (min64(lc_start + c->last_call_timeout_ms, deadline) - now +
					  999) / 1000);
			} else if (!prev_ended) {
				snprintf(when, sizeof(when), "waiting for round %d to end", R - 1);
			} else {
				snprintf(when, sizeof(when), "waiting for %d more",
					 c->min_nodes - joined);
			}
			log_info("rendezvous %s round %d: %d of %d..%d nodes joined%s; %s; timeout "
				 "in %" PRId64 " s",
				 r->run_id, R, joined, c->min_nodes, c->max_nodes, members, when,
				 (deadline - now + 999) / 1000);
			next_progress = now + c->progress_interval_ms;
		}
		nk = 0;
		wkeys[nk++] = k_closed;
		wkeys[nk++] = "end";
		if (!min_seen) {
			wkeys[nk++] = k_min;
		}
		if (!prev_ended) {
			wkeys[nk++] = k_prev;
		}
		until = min64(deadline, min64(next_hb, next_progress));
		if (lc_start != 0) {
			until = min64(until, lc_start + c->last_call_timeout_ms);
		}
		rc = crun_store_wait_any(r->st, wkeys, (size_t)nk, clamp_ms(until - now));
		if (rc == -ETIMEDOUT) {
			continue;
		}
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: wait: %s", r->run_id, R,
					store_err(rc));
		}
		if (rc >= nk) {
			return diag_set(d, -EPROTO,
					"rendezvous %s round %d: wait: bad key index %d", r->run_id,
					R, rc);
		}
		if (wkeys[rc] == k_closed) {
			rc = get_str(r->st, k_closed, cur, sizeof(cur));
			if (rc < 0) {
				return diag_set(d, rc, "rendezvous %s round %d: read close: %s",
						r->run_id, R, store_err(rc));
			}
			goto closed;
		} else if (wkeys[rc] == k_min) {
			min_seen = true;
		} else if (wkeys[rc] == k_prev) {
			prev_ended = true;
		} else {
			rc = check_end(r, d);
			if (rc < 0) {
				return rc;
			}
		}
	}

closed:
	if (parse_closed(cur, &count, &world, &i) < 0) {
		return diag_set(d, -EPROTO, "rendezvous %s round %d: bad close record \"%s\"",
				r->run_id, R, cur);
	}
	if (count == 0) {
		/* It never formed (someone's join timeout): carry on in R + 1 while time lasts. */
		if (crun_now_ms() >= deadline) {
			return diag_set(
				d, -ETIMEDOUT,
				"rendezvous %s round %d: join timeout: the round never formed",
				r->run_id, R);
		}
		return JOIN_LATE;
	}
	if (p > count) {
		goto late;
	}
	if (closed_by_me) {
		char rs[32];

		snprintf(rs, sizeof(rs), "%d", R);
		(void)set_str(r->st, "cur", rs);
	}
	rc = fill_assignment(r, R, g, packed, count, world, i, port, deadline, a, d);
	if (rc < 0) {
		return rc;
	}
	r->in_round = true;
	r->round = R;
	r->group_rank = g;
	r->count = count;
	r->restart_count = i;
	r->closed_at_ms = crun_now_ms();
	r->finished = false;
	atomic_store(&r->self_failed, false);
	log_info(
		"rendezvous %s round %d: complete in %" PRId64
		" ms: node rank %d of %d, world size %d, rank offset %d, restarts %d, master %s:%d",
		r->run_id, R, crun_now_ms() - start, g, count, world, a->rank_offset, i,
		a->master_addr, a->master_port);
	return 0;

late_full:
	count = c->max_nodes;
late:
	rkey(key, R, "failed");
	rc = exists(r->st, key, &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read round state: %s", r->run_id, R,
				store_err(rc));
	}
	if (won) {
		return JOIN_LATE; /* it is over; its survivors meet in R + 1 */
	}
	rc = check_end(r, d);
	if (rc < 0) {
		return rc;
	}
	rc = round_is_dead(r, R);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read round state: %s", r->run_id, R,
				store_err(rc));
	}
	if (rc == 1) {
		/* Nobody is left to watch it (every agent of that round is gone): end it here. */
		snprintf(cur, sizeof(cur),
			 "%c %d %s node rank 0: heartbeat lapsed (found by a "
			 "joining node)",
			 KIND_LOST, -1, r->host);
		(void)cas_str(r->st, key, cur, NULL, 0, &won);
		log_warn("rendezvous %s round %d: its rank 0 node has no heartbeat; ending it",
			 r->run_id, R);
		return JOIN_LATE;
	}
	if (count < c->max_nodes) {
		log_info("rendezvous %s: round %d runs with %d of %d nodes; waiting in round %d "
			 "(scale-up)",
			 r->run_id, R, count, c->max_nodes, R + 1);
		return JOIN_LATE;
	}
	return diag_set(d, CRUN_ECLOSED,
			"rendezvous %s: job is closed to new nodes: round %d is running with the "
			"maximum of %d nodes; host %s was not admitted",
			r->run_id, R, c->max_nodes, r->host);
}

int rdzv_next_round(struct rdzv *r, struct rdzv_assignment *a, struct crun_diag *d)
{
	char v[64];
	int64_t deadline;
	int R, rc, guard, end_known = -1; /* "end" read when leaving a round: 1 set, 0 not */

	if (r->thr_running) {
		rdzv_watch_stop(r);
	}
	deadline = crun_now_ms() + r->conf.join_timeout_ms;
	if (r->in_round) {
		char key[KEY_MAX], endv[REC_MAX];
		const char *keys[2] = {key, "end"};
		void *vals[2] = {NULL, NULL};
		size_t lens[2] = {0, 0};
		bool failed = false;

		R = r->round + 1;
		/* Whether the round is marked over and whether the job is: one round trip. */
		rkey(key, r->round, "failed");
		rc = crun_store_multi_get(r->st, keys, 2, vals, lens);
		if (rc == 0) {
			failed = vals[0] != NULL;
			if (vals[1] != NULL) {
				size_t n = lens[1] < sizeof(endv) ? lens[1] : sizeof(endv) - 1;

				memcpy(endv, vals[1], n);
				endv[n] = '\0';
				end_known = 1;
			} else {
				end_known = 0;
			}
		}
		free(vals[0]);
		free(vals[1]);
		/* Leaving a round nobody marked over: mark it, so that R + 1 may form. */
		if (rc == 0 && !failed) {
			rc = rdzv_request_reform(r, "node left the round to re-form");
		}
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: %s", r->run_id, r->round,
					store_err(rc));
		}
		if (end_known == 1) {
			r->in_round = false;
			return end_verdict(r, endv, d);
		}
	} else {
		rc = get_str(r->st, "cur", v, sizeof(v));
		if (rc < 0 && rc != -ENOENT) {
			return diag_set(d, rc, "rendezvous %s: read current round: %s", r->run_id,
					store_err(rc));
		}
		R = rc == 0 ? atoi(v) : 0;
		if (R < 0) {
			R = 0;
		}
	}
	r->in_round = false;
	for (guard = 0; guard < 100000; guard++) {
		/* Just read above when leaving a round: not again for its successor. */
		rc = end_known == 0 && guard == 0 ? 0 : check_end(r, d);
		if (rc < 0) {
			return rc;
		}
		rc = join_round(r, R, deadline, a, d);
		if (rc != JOIN_LATE) {
			return rc;
		}
		R++;
	}
	return diag_set(d, -ELOOP, "rendezvous %s: no joinable round found", r->run_id);
}

/* ---- failure, re-formation, finishing ---------------------------------------------- */

static int mark_failed(struct rdzv *r, struct crun_store *st, char kind, const char *what,
		       char *cur, size_t cap, bool *won)
{
	char key[KEY_MAX], val[REC_MAX];

	rkey(key, r->round, "failed");
	snprintf(val, sizeof(val), "%c %d %s %s", kind, r->group_rank, r->host,
		 what != NULL && what[0] != '\0' ? what : "(no reason given)");
	return cas_str(st, key, val, cur, cap, won);
}

int rdzv_report_failure(struct rdzv *r, const char *what, bool *restart, struct crun_diag *d)
{
	char cur[REC_MAX], desc[REC_MAX + 64], msg[REC_MAX], endmsg[REC_MAX];
	bool won;
	int rc;

	*restart = false;
	if (!r->in_round) {
		return diag_set(d, -EINVAL, "rendezvous %s: report failure: not in a round",
				r->run_id);
	}
	atomic_store(&r->self_failed, true);
	snprintf(msg, sizeof(msg), "workers failed: %s", what != NULL ? what : "(unknown)");
	rc = mark_failed(r, r->st, KIND_FAIL, msg, cur, sizeof(cur), &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: report failure: %s", r->run_id,
				r->round, store_err(rc));
	}
	if (cur[0] != KIND_FAIL) {
		/* A re-formation got there first: this failure spends nothing. */
		*restart = true;
		return 0;
	}
	*restart = r->restart_count + 1 <= r->conf.max_restarts;
	if (won && !*restart) {
		describe_failed(cur, desc, sizeof(desc));
		/* Its own buffer: @msg is what this node reported, logged below. */
		snprintf(endmsg, sizeof(endmsg),
			 "budget %d of %d failure restarts used; last failure: %.480s",
			 r->restart_count, r->conf.max_restarts, desc);
		(void)set_str(r->st, "end", endmsg);
	}
	if (!*restart) {
		note_gone(r);
	}
	if (won) {
		log_info("rendezvous %s round %d: marked failed: %s (%s)", r->run_id, r->round, msg,
			 *restart ? "restarting" : "restart budget exhausted");
	}
	return 0;
}

int rdzv_request_reform(struct rdzv *r, const char *why)
{
	bool won;

	if (!r->in_round) {
		return -EINVAL;
	}
	return mark_failed(r, r->st, KIND_REFORM, why, NULL, 0, &won);
}

/*
 * One liveness check of the ring: node g watches the next node that has not finished. A
 * successor whose heartbeat key is gone (after it was seen, or after heartbeat_timeout since
 * the round closed) is lost. Returns 1 when lost (detail in @lost), 0, or a store error.
 */
struct ring {
	int succ; /* the node watched now; == own rank when nobody is left to watch */
	bool seen;
};

/* "host H, address A" of node @g of the current round, from its record; "?" when unknown. */
static void node_name(struct rdzv *r, struct crun_store *st, int g, char *out, size_t cap)
{
	char key[KEY_MAX], rec[REC_MAX], addr[128] = "?", host[128] = "?";

	rkey(key, r->round, "node/%d", g);
	if (get_str(st, key, rec, sizeof(rec)) == 0) {
		(void)sscanf(rec, "%*u %*u %*u %127s %127s", addr, host);
	}
	snprintf(out, cap, "host %s, address %s", host, addr);
}

static int ring_check(struct rdzv *r, struct crun_store *st, struct ring *ring, char *lost,
		      size_t cap)
{
	char key[KEY_MAX], who[300];
	bool yes;
	int rc, steps;

	for (steps = 0; steps < r->count && ring->succ != r->group_rank; steps++) {
		rkey(key, r->round, "hb/%d", ring->succ);
		rc = exists(st, key, &yes);
		if (rc < 0) {
			return rc;
		}
		if (yes) {
			ring->seen = true;
			return 0;
		}
		rkey(key, r->round, "fin/%d", ring->succ);
		rc = exists(st, key, &yes);
		if (rc < 0) {
			return rc;
		}
		if (!yes) {
			if (!ring->seen &&
			    crun_now_ms() - r->closed_at_ms < r->conf.heartbeat_timeout_ms) {
				return 0; /* it may not have written its first heartbeat yet */
			}
			node_name(r, st, ring->succ, who, sizeof(who));
			snprintf(
				lost, cap,
				"node rank %d (%.200s): heartbeat lapsed (no heartbeat for %" PRId64
				" ms)",
				ring->succ, who, r->conf.heartbeat_timeout_ms);
			return 1;
		}
		/* It finished: watch whoever it watched. */
		ring->succ = (ring->succ + 1) % r->count;
		ring->seen = false;
	}
	return 0;
}

static void ring_init(const struct rdzv *r, struct ring *ring)
{
	ring->succ = (r->group_rank + 1) % r->count;
	ring->seen = false;
}

static enum rdzv_event kind_event(char kind)
{
	switch (kind) {
	case KIND_LOST:
		return RDZV_EV_NODE_LOST;
	case KIND_SCALE:
		return RDZV_EV_SCALE_UP;
	default:
		return RDZV_EV_PEER_FAILED;
	}
}

static void watch_loop(struct rdzv *r)
{
	const struct rdzv_conf *c = &r->conf;
	char k_failed[KEY_MAX], k_next[KEY_MAX], k_wake[KEY_MAX], k_done[KEY_MAX];
	char cur[REC_MAX], desc[REC_MAX + 64], lost[512];
	const char *wkeys[4];
	struct ring ring;
	int64_t next_hb = 0, next_ring;
	int errors = 0, rc, nk;
	bool scale_watch = r->count < c->max_nodes, won, yes;

	rkey(k_failed, r->round, "failed");
	rkey(k_next, r->round + 1, "joined");
	rkey(k_wake, r->round, "wake/%d/%u", r->group_rank, r->wake_gen);
	rkey(k_done, r->round, "done");
	ring_init(r, &ring);
	next_ring = crun_now_ms() + c->keep_alive_interval_ms;
	while (!atomic_load(&r->stop)) {
		int64_t now = crun_now_ms();
		enum rdzv_event ev;

		if (now >= next_hb) {
			char key[KEY_MAX];

			rkey(key, r->round, "hb/%d", r->group_rank);
			rc = crun_store_set_ttl(r->wst, key, "1", 1, c->heartbeat_timeout_ms);
			if (rc < 0) {
				goto store_error;
			}
			next_hb = now + c->keep_alive_interval_ms;
		}
		if (now >= next_ring) {
			rc = ring_check(r, r->wst, &ring, lost, sizeof(lost));
			if (rc < 0) {
				goto store_error;
			}
			next_ring = now + c->keep_alive_interval_ms;
			if (rc == 1) {
				rc = mark_failed(r, r->wst, KIND_LOST, lost, cur, sizeof(cur),
						 &won);
				if (rc < 0) {
					goto store_error;
				}
				if (won) {
					log_warn("rendezvous %s round %d: %s; re-forming",
						 r->run_id, r->round, lost);
				}
				goto event;
			}
		}
		nk = 0;
		wkeys[nk++] = k_failed;
		wkeys[nk++] = k_wake;
		if (scale_watch) {
			wkeys[nk++] = k_next;
		}
		rc = crun_store_wait_any(r->wst, wkeys, (size_t)nk,
					 clamp_ms(min64(next_hb, next_ring) - now));
		if (rc == -ETIMEDOUT) {
			errors = 0;
			continue;
		}
		if (rc < 0) {
			goto store_error;
		}
		errors = 0;
		if (rc >= nk || wkeys[rc] == k_wake) {
			break;
		}
		if (wkeys[rc] == k_next) {
			/* A node waits in the next round. Nodes that already finished keep the job.
			 */
			rc = exists(r->wst, k_done, &yes);
			if (rc < 0) {
				goto store_error;
			}
			if (yes) {
				scale_watch = false;
				continue;
			}
			rc = mark_failed(r, r->wst, KIND_SCALE,
					 "scale-up: a new node waits for the next round", cur,
					 sizeof(cur), &won);
			if (rc < 0) {
				goto store_error;
			}
			if (won) {
				log_info("rendezvous %s round %d: a new node waits; re-forming "
					 "with it",
					 r->run_id, r->round);
			}
			goto event;
		}
		rc = get_str(r->wst, k_failed, cur, sizeof(cur));
		if (rc < 0) {
			goto store_error;
		}
		goto event;
	store_error:
		atomic_store(&r->wst_bad, true);
		if (++errors < c->keep_alive_max_attempt) {
			log_warn("rendezvous %s round %d: store: %s (attempt %d of %d)", r->run_id,
				 r->round, store_err(rc), errors, c->keep_alive_max_attempt);
			/* Back off one keep-alive slice; stop still wakes us through the flag. */
			for (int64_t t = crun_now_ms() + c->keep_alive_interval_ms;
			     crun_now_ms() < t && !atomic_load(&r->stop);) {
				usleep(20000);
			}
			continue;
		}
		snprintf(desc, sizeof(desc), "store unreachable: %s", store_err(rc));
		log_error("rendezvous %s round %d: %s", r->run_id, r->round, desc);
		if (!atomic_load(&r->stop)) {
			r->cb(r->cb_arg, RDZV_EV_STORE_LOST, desc);
		}
		return;
	event:
		if (atomic_load(&r->self_failed) || atomic_load(&r->stop)) {
			return;
		}
		ev = kind_event(cur[0]);
		describe_failed(cur, desc, sizeof(desc));
		r->cb(r->cb_arg, ev, desc);
		return;
	}
}

static void *watch_main(void *arg)
{
	struct rdzv *r = arg;

	watch_loop(r);
	atomic_store(&r->thr_exited, true);
	return NULL;
}

int rdzv_watch_start(struct rdzv *r, rdzv_event_cb cb, void *arg)
{
	int rc;

	if (!r->in_round || cb == NULL) {
		return -EINVAL;
	}
	if (r->thr_running) {
		return -EALREADY;
	}
	/*
	 * The handle of the last round's thread, unless it saw a store error: a new connection
	 * and handshake per round would compete with the workers starting right now.
	 */
	if (r->wst != NULL && atomic_load(&r->wst_bad)) {
		crun_store_close(r->wst);
		r->wst = NULL;
	}
	if (r->wst == NULL) {
		rc = crun_store_clone(r->st, "", &r->wst);
		if (rc < 0) {
			return rc;
		}
		atomic_store(&r->wst_bad, false);
	}
	r->cb = cb;
	r->cb_arg = arg;
	r->wake_gen++;
	atomic_store(&r->stop, false);
	atomic_store(&r->thr_exited, false);
	rc = pthread_create(&r->thr, NULL, watch_main, r);
	if (rc != 0) {
		crun_store_close(r->wst);
		r->wst = NULL;
		return -rc;
	}
	r->thr_running = true;
	return 0;
}

void rdzv_watch_stop(struct rdzv *r)
{
	char key[KEY_MAX];
	bool woke;

	if (r == NULL || !r->thr_running) {
		return;
	}
	atomic_store(&r->stop, true);
	rkey(key, r->round, "wake/%d/%u", r->group_rank, r->wake_gen);
	/* After an event (or a lost store) the thread is gone: no store round trip needed. */
	woke = !atomic_load(&r->thr_exited) && set_str(r->st, key, "1") == 0;
	pthread_join(r->thr, NULL);
	if (woke) {
		(void)crun_store_delete(r->st, key);
	}
	/* Every request on wst has been answered (or failed, marking it bad): reusable. */
	r->thr_running = false;
}

int rdzv_finish(struct rdzv *r, int64_t timeout_ms, struct crun_diag *d)
{
	const struct rdzv_conf *c = &r->conf;
	char key[KEY_MAX], k_all[KEY_MAX], k_failed[KEY_MAX], cur[REC_MAX], desc[REC_MAX + 64];
	char lost[512];
	const char *wkeys[2];
	struct ring ring;
	int64_t done, deadline, next_ring, next_progress, now;
	bool won;
	int rc;

	if (!r->in_round) {
		return diag_set(d, -EINVAL, "rendezvous %s: finish: not in a round", r->run_id);
	}
	deadline = crun_now_ms() + (timeout_ms > 0 ? timeout_ms : 86400000);
	rkey(key, r->round, "fin/%d", r->group_rank);
	rc = r->finished ? 0 : set_str(r->st, key, "1");
	rkey(key, r->round, "done");
	if (rc == 0) {
		/* Called again after a timeout: count this node once. */
		rc = crun_store_add(r->st, key, r->finished ? 0 : 1, &done);
	}
	if (rc == 0 && !r->finished) {
		r->finished = true;
	} else if (rc == 0) {
		done = -1; /* the last finisher, not us, writes alldone */
	}
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id, r->round,
				store_err(rc));
	}
	rkey(k_all, r->round, "alldone");
	rkey(k_failed, r->round, "failed");
	if (done == r->count) {
		snprintf(cur, sizeof(cur), "done round %d finished on all %d nodes", r->round,
			 r->count);
		rc = set_str(r->st, k_all, "1");
		if (rc == 0) {
			rc = set_str(r->st, "end", cur);
		}
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id,
					r->round, store_err(rc));
		}
	}
	ring_init(r, &ring);
	now = crun_now_ms();
	next_ring = now + c->keep_alive_interval_ms;
	next_progress = now + c->progress_interval_ms;
	wkeys[0] = k_all;
	wkeys[1] = k_failed;
	for (;;) {
		now = crun_now_ms();
		if (now >= deadline) {
			return diag_set(d, -ETIMEDOUT,
					"rendezvous %s round %d: finish: other nodes still running "
					"after %" PRId64 " ms",
					r->run_id, r->round, timeout_ms);
		}
		if (now >= next_ring) {
			rc = ring_check(r, r->st, &ring, lost, sizeof(lost));
			if (rc < 0) {
				return diag_set(d, rc, "rendezvous %s round %d: finish: %s",
						r->run_id, r->round, store_err(rc));
			}
			if (rc == 1) {
				rc = mark_failed(r, r->st, KIND_LOST, lost, cur, sizeof(cur), &won);
				if (rc < 0) {
					return diag_set(d, rc, "rendezvous %s round %d: finish: %s",
							r->run_id, r->round, store_err(rc));
				}
				describe_failed(cur, desc, sizeof(desc));
				return diag_set(d, CRUN_EPEERFAIL, "rendezvous %s round %d: %s",
						r->run_id, r->round, desc);
			}
			next_ring = now + c->keep_alive_interval_ms;
		}
		if (now >= next_progress) {
			int64_t n = 0;

			(void)crun_store_add(r->st, key, 0, &n);
			log_info("rendezvous %s round %d: this node finished; waiting for %" PRId64
				 " of %d nodes",
				 r->run_id, r->round, r->count - n, r->count);
			next_progress = now + c->progress_interval_ms;
		}
		rc = crun_store_wait_any(
			r->st, wkeys, 2,
			clamp_ms(min64(deadline, min64(next_ring, next_progress)) - now));
		if (rc == -ETIMEDOUT) {
			continue;
		}
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id,
					r->round, store_err(rc));
		}
		if (rc == 0) {
			note_gone(r);
			return 0;
		}
		rc = get_str(r->st, k_failed, cur, sizeof(cur));
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id,
					r->round, store_err(rc));
		}
		describe_failed(cur, desc, sizeof(desc));
		return diag_set(d, CRUN_EPEERFAIL, "rendezvous %s round %d: round failed: %s",
				r->run_id, r->round, desc);
	}
}

int rdzv_wait_left(struct rdzv *r, int64_t timeout_ms)
{
	char key[KEY_MAX];
	const char *keys[1] = {key};

	if (!r->gone || r->count <= 0) {
		return -EINVAL;
	}
	snprintf(key, sizeof(key), "gone/%d", r->count);
	return crun_store_wait(r->st, keys, 1, clamp_ms(timeout_ms));
}
