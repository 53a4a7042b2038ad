/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_join.c: joining rounds, static and dynamic, and closing them. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_internal.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/diag.h"
#include "src/common/clock.h"

/* join_round() result: this node did not make it into round R; try R + 1. */
#define JOIN_LATE 1

/* "<count> <world> <rc>" */
static int parse_closed(const char *s, int *count, int *world, int *rc)
{
	if (sscanf(s, "%d %d %d", count, world, rc) != 3 || *count < 0 || *world < 0 || *rc < 0) {
		return -EPROTO;
	}
	return 0;
}

/* ---- joining a round ------------------------------------------------------------------ */

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
	rdzv_rkey(kc, R - 1, "closed");
	rdzv_rkey(kf, R - 1, "failed");
	rc = crun_store_multi_get(r->st, keys, 2, vals, lens);
	if (rc < 0) {
		return rc;
	}
	closed = vals[0] != NULL;
	failed = vals[1] != NULL && lens[1] > 0 && ((const char *)vals[1])[0] == KIND_FAIL;
	if (closed) {
		rdzv_value_str(v, sizeof(v), vals[0], lens[0]);
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

	rdzv_rkey(key, R, "hb/0");
	rc = rdzv_exists(r->st, key, &yes);
	if (rc < 0 || yes) {
		return rc < 0 ? rc : 0;
	}
	rdzv_rkey(key, R, "fin/0");
	rc = rdzv_exists(r->st, key, &yes);
	if (rc < 0) {
		return rc;
	}
	return yes ? 0 : 1;
}

/* The job-wide "end" key: the job finished, or its restart budget ran out. */
static int end_verdict(struct rdzv *r, const char *v, struct crun_diag *d)
{
	rdzv_note_gone(r);
	if (strncmp(v, "budget", 6) == 0) {
		return diag_set(d, CRUN_ERESTARTS, "rendezvous %s: restart budget exhausted: %s",
				r->run_id, v + (v[6] == ' ' ? 7 : 6));
	}
	if (strncmp(v, "stop ", 5) == 0) {
		/* rdzv_leave(): a node the job cannot do without was stopped by its operator */
		return diag_set(d, CRUN_ECLOSED, "rendezvous %s: %s", r->run_id, v + 5);
	}
	return diag_set(d, CRUN_ECLOSED, "rendezvous %s: job is closed to new nodes: %s", r->run_id,
			v[4] == ' ' ? v + 5 : v);
}

static int check_end(struct rdzv *r, struct crun_diag *d)
{
	char v[REC_MAX];
	int rc;

	rc = rdzv_get_str(r->st, "end", v, sizeof(v));
	if (rc == -ENOENT) {
		return 0;
	}
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s: read job state: %s", r->run_id,
				rdzv_why(r->st, rc));
	}
	return end_verdict(r, v, d);
}

static int joined_count(struct rdzv *r, int R)
{
	char key[KEY_MAX];
	int64_t v = 0;

	rdzv_rkey(key, R, "joined");
	if (rdzv_count_read(r, key, &v) < 0) {
		return -1;
	}
	return (int)PACK_POS(v);
}

/*
 * Refresh this node's heartbeat in round @R. @piped: do not wait for the reply (the next
 * request on the handle, which waits anyway, brings it; a failure is that request's).
 */
static void refresh_heartbeat(struct crun_store *st, const struct rdzv *r, int R, int g,
			      bool piped)
{
	char key[KEY_MAX];
	int rc;

	rdzv_rkey(key, R, "hb/%d", g);
	rc = piped ? store_set_async_ttl(st, key, "1", 1, r->conf.heartbeat_timeout_ms)
		   : crun_store_set_ttl(st, key, "1", 1, r->conf.heartbeat_timeout_ms);
	if (rc < 0) {
		log_warn("rendezvous %s round %d: heartbeat: %s", r->run_id, R, rdzv_why(st, rc));
	}
}

/*
 * The restart count a closer writes into round @R's close value, read again at close time: a
 * node may have joined R while R - 1 still ran, and R - 1 may have failed since (R closes only
 * once R - 1 is over, so the value read now is final). Returns 0, CRUN_ERESTARTS or an error.
 */
static int close_restart_count(struct rdzv *r, int R, int *rcount, bool final, struct crun_diag *d)
{
	/* Read when joining from a round R - 1 that was already over: it cannot have changed. */
	int rc = final ? 0 : round_restart_count(r, R, rcount, NULL);

	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read previous round: %s", r->run_id,
				R, rdzv_why(r->st, rc));
	}
	if (*rcount > r->conf.max_restarts) {
		rdzv_note_gone(r);
		return diag_set(d, CRUN_ERESTARTS,
				"rendezvous %s: restart budget exhausted: all %d failure restarts "
				"used",
				r->run_id, r->conf.max_restarts);
	}
	return 0;
}

/* ---- join_round(), step by step ------------------------------------------------------- */

/* One attempt at round R: what the steps of join_round() share. */
struct join {
	struct rdzv *r;
	int R;
	int64_t deadline, start;
	char k_joined[KEY_MAX], k_min[KEY_MAX], k_closed[KEY_MAX], k_prev[KEY_MAX];
	int64_t packed; /* this node's add on k_joined: (position << 32) | cumulative workers */
	int p, g, port; /* position (from 1), group rank, master port (rank 0 only) */
	int rcount;	/* the restart count this node would close the round with */
	bool rcount_final, min_seen, prev_ended, closed_by_me, over_max;
	/* When the last call began (0: not yet), and when to refresh and to report. */
	int64_t lc_start, next_hb, next_progress;
	/* The progress line's count: when last read from the store, and what it was. */
	int64_t counted_at;
	int counted;
	/* Where the last wait for the round's events left off: the next one, on the same keys
	 * or fewer (none is ever deleted while the round is open), resumes there (etcd: its
	 * watch, without reading the keys again). */
	struct store_wait_mark wmark;
	/* The round's close value, once closed. */
	char cur[REC_MAX];
};

/*
 * This node is not in round R, which formed with @count nodes (max_nodes when it is full):
 * JOIN_LATE when R is over or the job may grow, or a negative code (the job ended, or it is
 * closed to new nodes).
 */
static int join_late(struct join *j, int count, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	char key[KEY_MAX], cur[REC_MAX];
	bool won;
	int rc;

	rdzv_rkey(key, j->R, "failed");
	rc = rdzv_exists(r->st, key, &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read round state: %s", r->run_id,
				j->R, rdzv_why(r->st, rc));
	}
	if (won) {
		return JOIN_LATE; /* it is over; its survivors meet in R + 1 */
	}
	rc = check_end(r, d);
	if (rc < 0) {
		return rc;
	}
	rc = round_is_dead(r, j->R);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read round state: %s", r->run_id,
				j->R, rdzv_why(r->st, rc));
	}
	if (rc == 1) {
		/* Nobody is left to watch it (every agent of that round is gone): end it here. */
		snprintf(cur, sizeof(cur),
			 "%c %d %s node rank 0: heartbeat lapsed (found by a "
			 "joining node)",
			 KIND_LOST, -1, r->host);
		(void)rdzv_cas_str(r->st, key, cur, NULL, 0, &won);
		log_warn("rendezvous %s round %d: its rank 0 node has no heartbeat; ending it",
			 r->run_id, j->R);
		return JOIN_LATE;
	}
	if (count < c->max_nodes) {
		log_info("rendezvous %s: round %d runs with %d of %d nodes; waiting in round %d "
			 "(scale-up)",
			 r->run_id, j->R, count, c->max_nodes, j->R + 1);
		return JOIN_LATE;
	}
	return diag_set(d, CRUN_ECLOSED,
			"rendezvous %s: job is closed to new nodes: round %d is running with the "
			"maximum of %d nodes; host %s was not admitted",
			r->run_id, j->R, c->max_nodes, r->host);
}

/* Read the restart count round R starts with; refuse once the budget is spent. */
static int join_check_budget(struct join *j, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	int rc;

	rc = round_restart_count(r, j->R, &j->rcount, &j->rcount_final);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: read previous round: %s", r->run_id,
				j->R, rdzv_why(r->st, rc));
	}
	if (j->rcount > r->conf.max_restarts) {
		rdzv_note_gone(r);
		return diag_set(d, CRUN_ERESTARTS,
				"rendezvous %s: restart budget exhausted: all %d failure restarts "
				"used",
				r->run_id, r->conf.max_restarts);
	}
	return 0;
}

/*
 * Static mode: claim the node rank, then count in. Returns 0 (in), JOIN_LATE or a negative
 * code (from join_late() when the round closed without this node).
 */
static int join_static(struct join *j, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	char key[KEY_MAX], rec[REC_MAX], cur[REC_MAX];
	bool won;
	int rc;

	/* Claim the rank before counting in: a node refused for a duplicate --node-rank
	 * must not take a place of the round, or the real owner would be turned away. */
	j->g = c->node_rank;
	if (j->g == 0) {
		rc = rdzv_find_free_port(r->addr, &j->port, d);
		if (rc < 0) {
			return rc;
		}
	}
	snprintf(rec, sizeof(rec), "%d 0 %d %s %s %s", c->local_world_size, j->port, r->addr,
		 r->host, r->instance);
	if (j->g == 0) {
		rc = rdzv_publish_master(r, j->port, rec, d);
		if (rc < 0) {
			return rc;
		}
	}
	rdzv_node_key(key, j->R, j->g);
	rc = rdzv_cas_str(r->st, key, rec, cur, sizeof(cur), &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: publish node record: %s", r->run_id,
				j->R, rdzv_why(r->st, rc));
	}
	if (!won) {
		char oh[256] = "?", oa[256] = "?";

		/* Taken in a round that closed without this node: its state decides. */
		rc = rdzv_exists(r->st, j->k_closed, &won);
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: read round state: %s",
					r->run_id, j->R, rdzv_why(r->st, rc));
		}
		if (won) {
			return join_late(j, c->max_nodes, d);
		}
		sscanf(cur, "%*u %*u %*u %255s %255s", oa, oh);
		if (strcmp(oa, r->addr) == 0 && strcmp(oh, r->host) == 0) {
			return diag_set(d, CRUN_ECONFIG,
					"rendezvous %s round %d: node rank %d is already taken by "
					"another crun on this host (%s, address %s); every node needs "
					"its own --node-rank",
					r->run_id, j->R, j->g, oh, oa);
		}
		return diag_set(d, CRUN_ECONFIG,
				"rendezvous %s round %d: node rank %d is already taken by host "
				"%s (%s); every node needs its own --node-rank",
				r->run_id, j->R, j->g, oh, oa);
	}
	rc = rdzv_count_in(r, j->k_joined, &j->packed);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: join: %s", r->run_id, j->R,
				rdzv_why(r->st, rc));
	}
	j->p = (int)PACK_POS(j->packed);
	if (j->p > c->max_nodes) {
		return join_late(j, c->max_nodes, d);
	}
	return 0;
}

/* Dynamic mode: count in (the position is the rank), then publish the node record. */
static int join_dynamic(struct join *j, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	char key[KEY_MAX], rec[REC_MAX];
	int rc;

	rc = rdzv_count_in(r, j->k_joined, &j->packed);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: join: %s", r->run_id, j->R,
				rdzv_why(r->st, rc));
	}
	j->p = (int)PACK_POS(j->packed);
	if (j->p > c->max_nodes) {
		/* Full: the max_nodes-th joiner closes it (or already did). */
		return join_late(j, c->max_nodes, d);
	}
	j->g = j->p - 1;
	if (j->g == 0) {
		rc = rdzv_find_free_port(r->addr, &j->port, d);
		if (rc < 0) {
			return rc;
		}
	}
	snprintf(rec, sizeof(rec), "%d %" PRId64 " %d %s %s", c->local_world_size,
		 PACK_CUM(j->packed), j->port, r->addr, r->host);
	if (j->g == 0) {
		rc = rdzv_publish_master(r, j->port, rec, d);
		if (rc < 0) {
			return rc;
		}
	}
	/* Piped with the first heartbeat and the round's first wait (join_announce()): one round
	 * trip for the three on crun's store. Members read the record only after the close, and
	 * a closer that finds a record missing waits for it (rdzv_seats_close()). */
	rdzv_node_key(key, j->R, j->g);
	rc = store_set_async_ttl(r->st, key, rec, strlen(rec), 0);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: publish node record: %s", r->run_id,
				j->R, rdzv_why(r->st, rc));
	}
	return 0;
}

/* In the round: first heartbeat, "min" when this node brought the round to it, the timers. */
static int join_announce(struct join *j, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	int rc;

	/* Piped: the wait or close that follows at once brings the replies (and any failure). */
	refresh_heartbeat(r->st, r, j->R, j->g, true);
	j->next_hb = crun_now_ms() + c->keep_alive_interval_ms;
	/* A one-node job has nobody who could wait for "min". */
	if (j->p == c->min_nodes && c->max_nodes > 1) {
		rc = store_set_async_ttl(r->st, j->k_min, "1", 1, 0);
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: mark min reached: %s",
					r->run_id, j->R, rdzv_why(r->st, rc));
		}
	}
	j->min_seen = j->p >= c->min_nodes;
	/*
	 * Round R-1 must be over before R may close: failed, or never formed. What
	 * round_restart_count() read says so already in the common case (a restart after a
	 * failure); otherwise the wait below hears R-1's "failed" (a round that never formed gets
	 * one too, right after its close value).
	 */
	j->prev_ended = j->rcount_final;
	rdzv_rkey(j->k_prev, j->R - 1, "failed");
	j->next_progress = j->start + c->progress_interval_ms;
	log_debug("rendezvous %s round %d: joined at position %d", r->run_id, j->R, j->p);
	return 0;
}

/* compare_set the close value "<count> <world> <restarts>" from the packed @v: 1 (closed). */
static int close_round(struct join *j, int64_t v, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	char rec[REC_MAX];
	bool won;
	int rc;

	rc = rdzv_seats_close(r, j->R, j->rcount, j->deadline, &v, d);
	if (rc < 0) {
		return rc;
	}
	snprintf(rec, sizeof(rec), "%d %d %d", (int)PACK_POS(v), (int)PACK_CUM(v), j->rcount);
	rc = rdzv_cas_str(r->st, j->k_closed, rec, j->cur, sizeof(j->cur), &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: close: %s", r->run_id, j->R,
				rdzv_why(r->st, rc));
	}
	j->closed_by_me = won;
	return 1;
}

/*
 * The close decision: a dynamic round closes at max_nodes at once, at min after the last call;
 * a static one once every rank is in. Returns 1 (closed, j->cur holds the close value), 0 (not
 * yet) or a negative code.
 */
static int try_close(struct join *j, int64_t now, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	int rc;

	/* Close the round: at max_nodes at once, at min after the last call. A join
	 * timeout that runs out during the last call closes it too: min_nodes are
	 * there, so the round forms with them rather than failing. */
	if (j->prev_ended && !is_static(r) && !j->over_max &&
	    (j->p == c->max_nodes ||
	     (j->lc_start != 0 &&
	      (now >= j->lc_start + c->last_call_timeout_ms || now >= j->deadline)))) {
		int64_t v = j->packed;

		if (j->p != c->max_nodes) {
			rc = rdzv_count_read(r, j->k_joined, &v);
			if (rc < 0) {
				return diag_set(d, rc, "rendezvous %s round %d: count: %s",
						r->run_id, j->R, rdzv_why(r->st, rc));
			}
		}
		rc = close_restart_count(r, j->R, &j->rcount, j->rcount_final, d);
		if (rc < 0) {
			return rc;
		}
		if (PACK_POS(v) <= c->max_nodes) {
			return close_round(j, v, d);
		}
		/* Over max_nodes: the max_nodes-th joiner holds the count; it closes. */
		j->over_max = true;
	}
	if (j->prev_ended && is_static(r) && j->p == c->max_nodes) {
		rc = close_restart_count(r, j->R, &j->rcount, j->rcount_final, d);
		if (rc < 0) {
			return rc;
		}
		return close_round(j, j->packed, d);
	}
	return 0;
}

/*
 * The join timeout ran out before the round formed: close it empty and mark it failed, then
 * say who never came. Returns 0 when it closed properly just now (j->cur holds the close
 * value), or a negative code.
 */
static int close_on_timeout(struct join *j, int64_t now, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	char key[KEY_MAX], rec[REC_MAX], members[512];
	int joined = joined_count(r, j->R);
	bool won;
	int rc;

	rc = close_restart_count(r, j->R, &j->rcount, j->rcount_final, d);
	if (rc < 0) {
		return rc;
	}
	snprintf(rec, sizeof(rec), "0 0 %d", j->rcount);
	rc = rdzv_cas_str(r->st, j->k_closed, rec, j->cur, sizeof(j->cur), &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: close: %s", r->run_id, j->R,
				rdzv_why(r->st, rc));
	}
	if (!won) {
		return 0; /* it closed properly just now */
	}
	snprintf(j->cur, sizeof(j->cur), "%c %d %s join timeout", KIND_TIMEOUT, j->g, r->host);
	rdzv_rkey(key, j->R, "failed");
	(void)rdzv_cas_str(r->st, key, j->cur, NULL, 0, &won);
	rdzv_describe_members(r, j->R, joined,
			 is_static(r) ? "; never came: node ranks" : "; joined:", members,
			 sizeof(members));
	if (r->lost[0] != '\0' && j->R == r->lost_round + 1) {
		return rdzv_lost_timeout(r, j->R, joined, d);
	}
	if (!j->prev_ended) {
		/* Enough nodes may be here: what held the round is the one before. */
		return diag_set(d, -ETIMEDOUT,
				"rendezvous %s round %d: join timeout after %" PRId64
				" s: %d node(s) joined, but round %d is still running "
				"(neither failed nor re-formed)",
				r->run_id, j->R, (now - j->start + 500) / 1000, joined, j->R - 1);
	}
	if (is_static(r)) {
		return diag_set(d, -ETIMEDOUT,
				"rendezvous %s round %d: join timeout after %" PRId64
				" s: %d of %d nodes joined%s",
				r->run_id, j->R, (now - j->start + 500) / 1000, joined,
				c->max_nodes, members);
	}
	return diag_set(d, -ETIMEDOUT,
			"rendezvous %s round %d: join timeout after %" PRId64
			" s: %d of %d required nodes joined%s; %d more never came",
			r->run_id, j->R, (now - j->start + 500) / 1000, joined, c->min_nodes,
			members, c->min_nodes - joined);
}

/* Say on stderr how the open round stands: who is in, what it waits for, time left. */
static void report_progress(struct join *j, int64_t now)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	char key[KEY_MAX], when[128], members[512], absent[512], count[32];
	int64_t v = (int64_t)j->counted << 32;
	int joined, rc = 0;

	/* Every member prints this; re-read the count (and the members) no more often than
	 * every max_nodes * 20 ms each, so that N waiting agents read the store at most 50 times
	 * a second together, whatever N (1,000 agents every 5 s were 600 reads a second, as
	 * much as a loaded etcd serves at all). */
	bool fresh = j->counted_at == 0 || now - j->counted_at >= (int64_t)c->max_nodes * 20;

	rdzv_rkey(key, j->R, "joined");
	if (fresh) {
		rc = rdzv_count_read(r, key, &v);
	}
	if (rc < 0) {
		/* Say what failed, not "-1 of N nodes joined". */
		log_warn("rendezvous %s round %d: cannot read how many nodes joined: %s; timeout "
			 "in %" PRId64 " s",
			 r->run_id, j->R, crun_strerror(rc), (j->deadline - now + 999) / 1000);
		return;
	}
	joined = (int)PACK_POS(v);
	if (joined > c->max_nodes) {
		joined = c->max_nodes;
	}
	if (!fresh) {
		snprintf(members, sizeof(members), " (counted %" PRId64 " s ago)",
			 (now - j->counted_at) / 1000);
		absent[0] = '\0';
	} else if (is_static(r)) {
		rdzv_describe_members(r, j->R, joined, "; missing node ranks:", members,
				      sizeof(members));
		absent[0] = '\0';
	} else {
		/* Who is here, and who of the last round is not back (left, or stale). */
		rdzv_describe_members(r, j->R, joined, "; joined:", members, sizeof(members));
		rdzv_describe_absent(r, j->R, joined, absent, sizeof(absent));
	}
	if (fresh) {
		j->counted_at = now;
		j->counted = joined;
	}
	if (c->min_nodes == c->max_nodes) {
		snprintf(count, sizeof(count), "%d", c->max_nodes); /* "1 of 3", not "1 of 3..3" */
	} else {
		snprintf(count, sizeof(count), "%d..%d", c->min_nodes, c->max_nodes);
	}
	if (j->lc_start != 0) {
		/* The join timeout closes it too, if it comes first. */
		snprintf(when, sizeof(when), "last call closes the round in %" PRId64 " s",
			 (min64(j->lc_start + c->last_call_timeout_ms, j->deadline) - now + 999) /
				 1000);
	} else if (!j->prev_ended) {
		snprintf(when, sizeof(when), "waiting for round %d to end", j->R - 1);
	} else {
		snprintf(when, sizeof(when), "waiting for %d more", c->min_nodes - joined);
	}
	log_info("rendezvous %s round %d: %d of %s nodes joined%s%s; %s; timeout in %" PRId64 " s",
		 r->run_id, j->R, joined, count, members, absent, when,
		 (j->deadline - now + 999) / 1000);
}

/*
 * Wait for what moves the open round on (its close value, the job's end, "min", the previous
 * round's end) or the next timer. Returns 1 (closed, j->cur read), 0 (go on) or a negative
 * code.
 */
static int wait_round_event(struct join *j, int64_t now, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	const char *wkeys[4];
	int64_t until;
	void *v = NULL;
	size_t len = 0;
	int rc, nk = 0;

	wkeys[nk++] = j->k_closed;
	wkeys[nk++] = "end";
	if (!j->min_seen) {
		wkeys[nk++] = j->k_min;
	}
	if (!j->prev_ended) {
		wkeys[nk++] = j->k_prev;
	}
	until = min64(j->deadline, min64(j->next_hb, j->next_progress));
	if (j->lc_start != 0) {
		until = min64(until, j->lc_start + c->last_call_timeout_ms);
	}
	/* The close value or "end" (the first two keys) comes with the wait: no get after it. */
	rc = store_wait_any_get(r->st, wkeys, (size_t)nk, 2, &v, &len, clamp_ms(until - now),
				&j->wmark);
	if (rc == -ETIMEDOUT) {
		return 0;
	}
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: wait: %s", r->run_id, j->R,
				rdzv_why(r->st, rc));
	}
	if (rc >= nk) {
		free(v);
		return diag_set(d, -EPROTO, "rendezvous %s round %d: wait: bad key index %d",
				r->run_id, j->R, rc);
	}
	if (wkeys[rc] == j->k_closed) {
		rdzv_value_str(j->cur, sizeof(j->cur), v, len);
		rc = 1;
	} else if (wkeys[rc] == j->k_min) {
		j->min_seen = true;
		rc = 0;
	} else if (wkeys[rc] == j->k_prev) {
		j->prev_ended = true;
		rc = 0;
	} else {
		char endv[REC_MAX];

		rdzv_value_str(endv, sizeof(endv), v, len);
		rc = end_verdict(r, endv, d);
	}
	free(v);
	return rc;
}

/* Wait until round R closes, closing it when this node may. 0: j->cur holds the close value. */
static int wait_for_close(struct join *j, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	const struct rdzv_conf *c = &r->conf;
	int rc;

	for (;;) {
		int64_t now = crun_now_ms();

		if (j->min_seen && j->prev_ended && j->lc_start == 0) {
			j->lc_start = now;
		}
		rc = try_close(j, now, d);
		if (rc != 0) {
			return rc < 0 ? rc : 0;
		}
		if (now >= j->deadline) {
			return close_on_timeout(j, now, d);
		}
		if (now >= j->next_hb) {
			refresh_heartbeat(r->st, r, j->R, j->g, false);
			j->next_hb = now + c->keep_alive_interval_ms;
		}
		if (now >= j->next_progress) {
			report_progress(j, now);
			j->next_progress = now + c->progress_interval_ms;
		}
		rc = wait_round_event(j, now, d);
		if (rc != 0) {
			return rc < 0 ? rc : 0;
		}
	}
}

/*
 * Round R closed (j->cur): take this node's place in it and fill @a. Returns 0, JOIN_LATE
 * (R never formed, or formed without this node) or a negative code.
 */
static int read_assignment(struct join *j, struct rdzv_assignment *a, struct crun_diag *d)
{
	struct rdzv *r = j->r;
	int count, world, restarts, rc;
	char master[300] = "", rec0[REC_MAX];

	if (parse_closed(j->cur, &count, &world, &restarts) < 0) {
		return diag_set(d, -EPROTO, "rendezvous %s round %d: bad close record \"%s\"",
				r->run_id, j->R, j->cur);
	}
	if (count == 0) {
		/* It never formed (someone's join timeout): carry on in R + 1 while time lasts. */
		if (crun_now_ms() >= j->deadline) {
			return diag_set(
				d, -ETIMEDOUT,
				"rendezvous %s round %d: join timeout: the round never formed",
				r->run_id, j->R);
		}
		return JOIN_LATE;
	}
	if (j->p > count) {
		return join_late(j, count, d);
	}
	if (j->closed_by_me) {
		char rs[32];

		snprintf(rs, sizeof(rs), "%d", j->R);
		(void)rdzv_set_str(r->st, "cur", rs);
	}
	rc = rdzv_seats_place(r, j->R, j->p, count, &j->packed, rec0, sizeof(rec0), d);
	if (rc < 0) {
		return rc;
	}
	rc = rdzv_fill_assignment(r, j->R, j->g, j->packed, count, world, restarts, j->deadline,
				  rec0, a, d);
	if (rc < 0) {
		return rc;
	}
	r->in_round = true;
	r->round = j->R;
	r->group_rank = j->g;
	r->count = count;
	r->restart_count = restarts;
	r->closed_at_ms = crun_now_ms();
	r->finished = false;
	atomic_store(&r->self_failed, false);
	/* The workers' master, agreed in the round. Static mode: --master-addr/--master-port,
	 * which the agent prints once. */
	if (!is_static(r)) {
		snprintf(master, sizeof(master), ", master %s:%d", a->master_addr, a->master_port);
	}
	log_info("rendezvous %s round %d: complete in %" PRId64
		 " ms: node rank %d of %d, world size %d, rank offset %d, restarts %d%s",
		 r->run_id, j->R, crun_now_ms() - j->start, j->g, count, world, a->rank_offset,
		 restarts, master);
	return 0;
}

/*
 * Join round @R and wait until it closes. Returns 0 (in the round, @a filled), JOIN_LATE (the
 * round formed without this node and the job may grow: try R + 1), or a negative code.
 */
static int join_round(struct rdzv *r, int R, int64_t deadline, struct rdzv_assignment *a,
		      struct crun_diag *d)
{
	struct join j;
	int rc;

	memset(&j, 0, sizeof(j));
	j.r = r;
	j.R = R;
	j.deadline = deadline;
	j.start = crun_now_ms();
	rc = join_check_budget(&j, d);
	if (rc < 0) {
		return rc;
	}
	rdzv_rkey(j.k_joined, R, "joined");
	rdzv_rkey(j.k_min, R, "min");
	rdzv_rkey(j.k_closed, R, "closed");
	rc = is_static(r) ? join_static(&j, d) : join_dynamic(&j, d);
	if (rc != 0) {
		return rc;
	}
	rc = join_announce(&j, d);
	if (rc < 0) {
		return rc;
	}
	rc = wait_for_close(&j, d);
	if (rc < 0) {
		return rc;
	}
	return read_assignment(&j, a, d);
}

static void shape_nnodes(char *buf, size_t len, int min, int max)
{
	if (min == max) {
		snprintf(buf, len, "%d", min);
	} else {
		snprintf(buf, len, "%d:%d", min, max);
	}
}

/*
 * The job's shape: the first node to join records its --nnodes and --max-restarts under
 * "shape"; a node whose MAX nodes or restart budget differs is refused at once, naming both,
 * instead of waiting out the join timeout in a round that can never close as it expects.
 * --nproc-per-node may differ from node to node, as with torchrun (ranks are laid out by each
 * node's count), and so may MIN of an elastic --nnodes: it only says when a node's own last
 * call starts (tests/rdzv uses that to order a round's close).
 */
static int check_shape(struct rdzv *r, struct crun_diag *d)
{
	const struct rdzv_conf *c = &r->conf;
	char mine[REC_MAX], cur[REC_MAX], oh[256] = "?", a[32], b[32];
	int omin, omax, ores, rc;
	bool won;

	snprintf(mine, sizeof(mine), "%d %d %d %.200s", c->min_nodes, c->max_nodes, c->max_restarts,
		 r->host);
	rc = rdzv_cas_str(r->st, "shape", mine, cur, sizeof(cur), &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s: record the job's shape: %s", r->run_id,
				rdzv_why(r->st, rc));
	}
	if (won || sscanf(cur, "%d %d %d %255s", &omin, &omax, &ores, oh) < 3) {
		return 0;
	}
	if (omax != c->max_nodes) {
		shape_nnodes(a, sizeof(a), c->min_nodes, c->max_nodes);
		shape_nnodes(b, sizeof(b), omin, omax);
		return diag_set(
			d, CRUN_ECONFIG,
			"rendezvous %s: this node has --nnodes %s, but the job's first node "
			"(host %s) has --nnodes %s: start every node with the same --nnodes",
			r->run_id, a, oh, b);
	}
	if (ores != c->max_restarts) {
		return diag_set(
			d, CRUN_ECONFIG,
			"rendezvous %s: this node has --max-restarts %d, but the job's first "
			"node (host %s) has --max-restarts %d: start every node with the "
			"same --max-restarts",
			r->run_id, c->max_restarts, oh, ores);
	}
	return 0;
}

/*
 * A node not in a round: where to start (@R, from "cur": the last round that closed, else 0)
 * and whether the job is over (@end_known 1 and @endv its "end" value, else 0), one round trip.
 */
static int read_cur_end(struct rdzv *r, int *R, char *endv, size_t cap, int *end_known,
			struct crun_diag *d)
{
	const char *keys[2] = {"cur", "end"};
	void *vals[2] = {NULL, NULL};
	size_t lens[2] = {0, 0};
	char v[32];
	int rc;

	rc = crun_store_multi_get(r->st, keys, 2, vals, lens);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s: read current round and job state: %s",
				r->run_id, rdzv_why(r->st, rc));
	}
	*R = 0;
	if (vals[0] != NULL) {
		rdzv_value_str(v, sizeof(v), vals[0], lens[0]);
		*R = atoi(v) > 0 ? atoi(v) : 0;
	}
	*end_known = vals[1] != NULL;
	if (vals[1] != NULL) {
		rdzv_value_str(endv, cap, vals[1], lens[1]);
	}
	free(vals[0]);
	free(vals[1]);
	return 0;
}

int rdzv_next_round(struct rdzv *r, struct rdzv_assignment *a, struct crun_diag *d)
{
	char endv[REC_MAX];
	int64_t deadline;
	int R = 0, rc, guard, end_known = -1; /* "end" read when leaving a round: 1 set, 0 not */

	if (r->thr_running) {
		rdzv_watch_stop(r);
	}
	deadline = crun_now_ms() + r->conf.join_timeout_ms;
	if (r->in_round) {
		char key[KEY_MAX];
		const char *keys[2] = {key, "end"};
		void *vals[2] = {NULL, NULL};
		size_t lens[2] = {0, 0};
		bool failed = false;

		R = r->round + 1;
		/* Whether the round is marked over and whether the job is: one round trip. */
		rdzv_rkey(key, r->round, "failed");
		rc = crun_store_multi_get(r->st, keys, 2, vals, lens);
		if (rc == 0) {
			failed = vals[0] != NULL;
			if (vals[1] != NULL) {
				rdzv_value_str(endv, sizeof(endv), vals[1], lens[1]);
				end_known = 1;
			} else {
				end_known = 0;
			}
		}
		/* A node lost that the job cannot go on without: it has heartbeat_timeout to
		 * come back, not the whole join_timeout. */
		deadline = rdzv_lost_deadline(r, rc == 0 ? vals[0] : NULL, lens[0], deadline);
		free(vals[0]);
		free(vals[1]);
		/* Leaving a round nobody marked over: mark it, so that R + 1 may form. */
		if (rc == 0 && !failed) {
			rc = rdzv_request_reform(r, "node left the round to re-form");
		}
		if (rc < 0) {
			return diag_set(d, rc, "rendezvous %s round %d: %s", r->run_id, r->round,
					rdzv_why(r->st, rc));
		}
		if (end_known == 1) {
			r->in_round = false;
			return end_verdict(r, endv, d);
		}
	} else {
		rc = read_cur_end(r, &R, endv, sizeof(endv), &end_known, d);
		if (rc < 0) {
			return rc;
		}
	}
	r->in_round = false;
	rc = check_shape(r, d);
	if (rc < 0) {
		return rc;
	}
	if (end_known == 1) {
		return end_verdict(r, endv, d);
	}
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