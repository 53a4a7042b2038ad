/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv.c: the rendezvous handle, store helpers, finishing and leaving the job. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_internal.h"
#include "rendezvous/rdzv_keys.h"
#include "src/common/util.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/diag.h"
#include "src/common/clock.h"
#include "src/common/token.h"

/* Joining lives in rdzv_join.c and rdzv_assign.c, heartbeats and the watch in rdzv_watch.c. */

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
	c->master_fn = NULL; /* rank 0's TCPStore at its address, a free port */
	c->master_arg = NULL;
}

/* ---- small store helpers -------------------------------------------------------------- */

void rdzv_rkey(char *buf, int round, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(buf, KEY_MAX, "r/%d/", round);
	va_start(ap, fmt);
	vsnprintf(buf + n, (size_t)(KEY_MAX - n), fmt, ap);
	va_end(ap);
}

void rdzv_node_key(char *buf, int round, int node)
{
	rdzv_rkey(buf, round, "node/%d", node);
}

void rdzv_value_str(char *buf, size_t cap, const void *v, size_t len)
{
	size_t n = v == NULL ? 0 : len < cap ? len : cap - 1;

	if (n > 0) {
		memcpy(buf, v, n);
	}
	buf[n] = '\0';
}

int rdzv_get_str(struct crun_store *st, const char *key, char *buf, size_t cap)
{
	void *v = NULL;
	size_t len = 0;
	int rc;

	rc = crun_store_get(st, key, &v, &len);
	if (rc < 0) {
		return rc;
	}
	rdzv_value_str(buf, cap, v, len);
	free(v);
	return 0;
}

bool rdzv_store_gone(int rc)
{
	switch (rc) {
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -ECONNRESET:
	case -EPIPE:
	case -ESHUTDOWN:
	case -EHOSTDOWN: /* etcd: no member has a leader (quorum lost) */
		return true;
	default:
		return false;
	}
}

const char *rdzv_why(const struct crun_store *st, int rc)
{
	const char *m;

	/* Only for failures the backends always describe: the message is this failure's. A
	 * store's NO_MEMORY reply names what ran out: a data quota (its limit, its run) or memory. */
	if (rdzv_store_gone(rc) || rc == -ETIMEDOUT || rc == -EBADMSG || rc == CRUN_EMAGIC ||
	    rc == CRUN_EVERSION || rc == -ENOSPC || rc == -EDQUOT || rc == -ENOMEM) {
		m = store_last_error(st);
		if (m != NULL && m[0] != '\0') {
			return m;
		}
	}
	return crun_strerror(rc);
}

int rdzv_set_str(struct crun_store *st, const char *key, const char *val)
{
	return crun_store_set(st, key, val, strlen(val));
}

int rdzv_cas_str(struct crun_store *st, const char *key, const char *val, char *cur, size_t cap,
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
		rdzv_value_str(cur, cap, v, len);
	}
	free(v);
	return 0;
}

int rdzv_exists(struct crun_store *st, const char *key, bool *yes)
{
	const char *keys[1] = {key};

	return crun_store_check(st, keys, 1, yes);
}

void rdzv_describe_failed(const char *v, char *out, size_t cap)
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

int rdzv_create(const struct store_conf *store, const struct rdzv_conf *conf,
		struct rdzv **out, struct crun_diag *d)
{
	struct store_conf_variant v = {0};
	struct store_conf o;
	struct crun_diag od = {0};
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
	{
		char hex[TOKEN_GEN_HEX + 1];

		if (token_generate(hex) < 0) {
			rc = diag_set(d, -EIO, "rendezvous: no random bytes for the instance tag");
			goto err;
		}
		snprintf(r->instance, sizeof(r->instance), "%.*s", RDZV_INSTANCE_HEX, hex);
	}
	r->run_id = strdup(conf->run_id);
	r->addr = crun_strdup(conf->advertise_addr != NULL && conf->advertise_addr[0] != '\0'
				      ? conf->advertise_addr
				      : r->host);
	r->worker_base = strdup(store->prefix != NULL ? store->prefix : "");
	plen = strlen(r->worker_base) + strlen(conf->run_id) + 8;
	/* The handle's prefix: the store prefix, then the run's rendezvous keys. */
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
	snprintf(prefix, plen, "%s", r->worker_base);
	(void)rdzv_key_run(prefix + strlen(prefix), plen - strlen(prefix), conf->run_id);
	r->conf.run_id = r->run_id;
	r->conf.advertise_addr = r->addr;
	r->conf.hostname = r->host;
	v.prefix = prefix;
	if (store->timeout_ms <= 0) {
		v.timeout_ms = clamp_ms(conf->read_timeout_ms);
	}
	rc = store_conf_derive(&o, store, &v);
	if (rc < 0) {
		diag_set(d, rc, "rendezvous: out of memory");
		goto err;
	}
	rc = store_open_conf(&o, &r->st, &od);
	store_conf_finish(&o);
	if (rc < 0) {
		diag_set(d, rc, "rendezvous %s: %s", conf->run_id,
			 od.msg[0] != '\0' ? od.msg : crun_strerror(rc));
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

/* ---- finishing and leaving ------------------------------------------------------------- */

/*
 * This node saw the job end (success, or the budget spent): count it once in "gone". The n-th
 * node to do so writes "gone/<n>", which rdzv_wait_left() waits on.
 */
void rdzv_note_gone(struct rdzv *r)
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
	rc = store_ticket(r->st, "gone", &n); /* every member at once: a ticket */
	if (rc == 0) {
		snprintf(key, sizeof(key), "gone/%" PRId64, n);
		rc = rdzv_set_str(r->st, key, "1");
	}
	if (rc < 0) {
		log_warn("rendezvous %s: count this node out: %s", r->run_id, rdzv_why(r->st, rc));
	}
}

/*
 * rdzv_finish(), record: this node's "fin/<rank>" and its one count in "done" (a call after a
 * timeout counts nothing more); the node that completes the count writes "alldone" and "end".
 */
static int finish_record(struct rdzv *r, struct crun_diag *d)
{
	char key[KEY_MAX], cur[REC_MAX];
	int64_t done;
	int rc;

	rdzv_rkey(key, r->round, "fin/%d", r->group_rank);
	/* Piped with the ticket below, which waits for its reply anyway: one round trip. */
	rc = r->finished ? 0 : store_set_async_ttl(r->st, key, "1", 1, 0);
	rdzv_rkey(key, r->round, "done");
	if (rc == 0) {
		/* Called again after a timeout: count this node once. */
		rc = r->finished ? store_ticket_count(r->st, key, &done)
				 : store_ticket(r->st, key, &done);
	}
	if (rc == 0 && !r->finished) {
		r->finished = true;
	} else if (rc == 0) {
		done = -1; /* the last finisher, not us, writes alldone */
	}
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id, r->round,
				rdzv_why(r->st, rc));
	}
	if (done == r->count) {
		snprintf(cur, sizeof(cur), "done round %d finished on all %d nodes", r->round,
			 r->count);
		rdzv_rkey(key, r->round, "alldone");
		rc = rdzv_set_str(r->st, key, "1");
		if (rc == 0) {
			rc = rdzv_set_str(r->st, "end", cur);
		}
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id,
					r->round, rdzv_why(r->st, rc));
		}
	}
	return 0;
}

/*
 * rdzv_finish(), while waiting: the keep-alive ring. 0 while the watched node is alive; a lost
 * one marks the round failed and ends the wait with CRUN_EPEERFAIL (or the store's error).
 */
static int finish_check_ring(struct rdzv *r, struct rdzv_ring *ring, struct crun_diag *d)
{
	char lost[512], cur[REC_MAX], desc[REC_MAX + 64];
	bool won;
	int rc;

	rc = rdzv_ring_check(r, r->st, ring, lost, sizeof(lost));
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id, r->round,
				rdzv_why(r->st, rc));
	}
	if (rc == 1) {
		rc = rdzv_mark_failed(r, r->st, KIND_LOST, lost, cur, sizeof(cur), &won);
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id,
					r->round, rdzv_why(r->st, rc));
		}
		rdzv_describe_failed(cur, desc, sizeof(desc));
		return diag_set(d, CRUN_EPEERFAIL, "rendezvous %s round %d: %s", r->run_id,
				r->round, desc);
	}
	return 0;
}

/*
 * rdzv_finish(), judge: crun_store_wait_any() on {"alldone", "failed"} returned @which. 0 when
 * the round finished everywhere (this node counted in "gone"), else the failure, described.
 */
static int finish_judge(struct rdzv *r, int which, const char *k_failed, struct crun_diag *d)
{
	char cur[REC_MAX], desc[REC_MAX + 64];
	int rc;

	if (which == 0) {
		rdzv_note_gone(r);
		return 0;
	}
	rc = rdzv_get_str(r->st, k_failed, cur, sizeof(cur));
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: finish: %s", r->run_id, r->round,
				rdzv_why(r->st, rc));
	}
	rdzv_describe_failed(cur, desc, sizeof(desc));
	return diag_set(d, CRUN_EPEERFAIL, "rendezvous %s round %d: round failed: %s", r->run_id,
			r->round, desc);
}

int rdzv_finish(struct rdzv *r, int64_t timeout_ms, struct crun_diag *d)
{
	const struct rdzv_conf *c = &r->conf;
	char k_done[KEY_MAX], k_all[KEY_MAX], k_failed[KEY_MAX];
	const char *wkeys[2] = {k_all, k_failed};
	struct rdzv_ring ring;
	int64_t deadline, next_ring, next_progress, now;
	int rc;

	if (!r->in_round) {
		return diag_set(d, -EINVAL, "rendezvous %s: finish: not in a round", r->run_id);
	}
	deadline = crun_now_ms() + (timeout_ms > 0 ? timeout_ms : 86400000);
	rc = finish_record(r, d);
	if (rc != 0) {
		return rc;
	}
	rdzv_rkey(k_done, r->round, "done");
	rdzv_rkey(k_all, r->round, "alldone");
	rdzv_rkey(k_failed, r->round, "failed");
	rdzv_ring_init(r, &ring);
	now = crun_now_ms();
	next_ring = now + c->keep_alive_interval_ms;
	next_progress = now + c->progress_interval_ms;
	for (;;) {
		now = crun_now_ms();
		if (now >= deadline) {
			return diag_set(d, -ETIMEDOUT,
					"rendezvous %s round %d: finish: other nodes still running "
					"after %" PRId64 " ms",
					r->run_id, r->round, timeout_ms);
		}
		if (now >= next_ring) {
			rc = finish_check_ring(r, &ring, d);
			if (rc != 0) {
				return rc;
			}
			next_ring = now + c->keep_alive_interval_ms;
		}
		if (now >= next_progress) {
			int64_t n = 0;

			(void)store_ticket_count(r->st, k_done, &n);
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
					r->round, rdzv_why(r->st, rc));
		}
		return finish_judge(r, rc, k_failed, d);
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
int rdzv_agree(struct rdzv *r, const char *what, rdzv_propose_cb propose, void *arg, char *out,
	       size_t cap, struct crun_diag *d)
{
	char key[KEY_MAX], mine[512];
	bool won = false;
	int rc;

	if ((size_t)snprintf(key, sizeof(key), "agree/%s", what) >= sizeof(key) ||
	    cap > sizeof(mine)) {
		return diag_set(d, -ENAMETOOLONG, "rendezvous: agree on %s: too long", what);
	}
	rc = rdzv_get_str(r->st, key, out, cap);
	if (rc == 0 && out[0] != '\0') {
		return 0;
	}
	if (rc < 0 && rc != -ENOENT) {
		return diag_set(d, rc, "rendezvous: reading %s: %s", key, rdzv_why(r->st, rc));
	}
	rc = propose(arg, mine, cap, d);
	if (rc < 0) {
		return rc;
	}
	rc = rdzv_cas_str(r->st, key, mine, out, cap, &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous: writing %s: %s", key, rdzv_why(r->st, rc));
	}
	return won ? 1 : 0;
}
