/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_watch.c: heartbeats, the liveness ring, failure, scale-up, the watch thread. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_internal.h"
#include "src/common/diag.h"
#include "src/common/clock.h"

/* ---- failure, re-formation ------------------------------------------------------------ */

int rdzv_mark_failed(struct rdzv *r, struct crun_store *st, char kind, const char *what, char *cur,
		     size_t cap, bool *won)
{
	char key[KEY_MAX], val[REC_MAX];

	rdzv_rkey(key, r->round, "failed");
	snprintf(val, sizeof(val), "%c %d %s %s", kind, r->group_rank, r->host,
		 what != NULL && what[0] != '\0' ? what : "(no reason given)");
	return rdzv_cas_str(st, key, val, cur, cap, won);
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
	rc = rdzv_mark_failed(r, r->st, KIND_FAIL, msg, cur, sizeof(cur), &won);
	if (rc < 0) {
		return diag_set(d, rc, "rendezvous %s round %d: report failure: %s", r->run_id,
				r->round, rdzv_why(r->st, rc));
	}
	if (cur[0] != KIND_FAIL) {
		/* A re-formation got there first: this failure spends nothing. */
		*restart = true;
		return 0;
	}
	*restart = r->restart_count + 1 <= r->conf.max_restarts;
	if (won && !*restart) {
		rdzv_describe_failed(cur, desc, sizeof(desc));
		/* Its own buffer: @msg is what this node reported, logged below. */
		snprintf(endmsg, sizeof(endmsg),
			 "budget %d of %d failure restarts used; last failure: %.480s",
			 r->restart_count, r->conf.max_restarts, desc);
		(void)rdzv_set_str(r->st, "end", endmsg);
	}
	if (!*restart) {
		rdzv_note_gone(r);
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
	return rdzv_mark_failed(r, r->st, KIND_REFORM, why, NULL, 0, &won);
}

int64_t rdzv_lost_deadline(struct rdzv *r, const void *failed, size_t len, int64_t deadline)
{
	int64_t back_by = crun_now_ms() + r->conf.heartbeat_timeout_ms;
	char v[REC_MAX];

	r->lost[0] = '\0';
	if (failed == NULL || len == 0 || *(const char *)failed != KIND_LOST ||
	    r->count - 1 >= r->conf.min_nodes) {
		return deadline;
	}
	rdzv_value_str(v, sizeof(v), failed, len);
	rdzv_describe_failed(v, r->lost, sizeof(r->lost));
	r->lost_round = r->round;
	log_warn("rendezvous %s round %d: %s; the job needs %d nodes: waiting %.1f s "
		 "(heartbeat_timeout) for it to come back",
		 r->run_id, r->round, r->lost, r->conf.min_nodes,
		 (double)r->conf.heartbeat_timeout_ms / 1000.0);
	return back_by < deadline ? back_by : deadline;
}

int rdzv_lost_timeout(struct rdzv *r, int R, int joined, struct crun_diag *d)
{
	return diag_set(d, -ETIMEDOUT,
			"rendezvous %s round %d: a node left the job and did not come back within "
			"heartbeat_timeout (%.1f s): %s; %d of the %d nodes the job needs joined, "
			"so it cannot go on (not waiting out join_timeout)",
			r->run_id, R, (double)r->conf.heartbeat_timeout_ms / 1000.0, r->lost,
			joined, r->conf.min_nodes);
}

int rdzv_leave(struct rdzv *r, const char *why)
{
	char msg[REC_MAX - 300], end[REC_MAX];
	bool won;
	int rc;

	if (!r->in_round) {
		return -EINVAL;
	}
	atomic_store(&r->self_failed, true); /* no event for this node's own leaving */
	snprintf(msg, sizeof(msg), "node %s (node rank %d) left: %.200s", r->host, r->group_rank,
		 why);
	if (r->count - 1 < r->conf.min_nodes) {
		/* The job cannot go on without this node: end it, saying why. */
		snprintf(end, sizeof(end), "stop %s", msg);
		(void)rdzv_cas_str(r->st, "end", end, NULL, 0, &won);
		rdzv_note_gone(r);
	}
	rc = rdzv_mark_failed(r, r->st, KIND_LEFT, msg, NULL, 0, &won);
	if (rc == 0 && won) {
		log_info("rendezvous %s round %d: marked for re-formation: %s", r->run_id, r->round,
			 msg);
	}
	return rc;
}

/* ---- the liveness ring ----------------------------------------------------------------- */

/* "host H, address A" of node @g of the current round, from its record; "?" when unknown. */
static void node_name(struct rdzv *r, struct crun_store *st, int g, char *out, size_t cap)
{
	char key[KEY_MAX], rec[REC_MAX], addr[128] = "?", host[128] = "?";

	rdzv_node_key(key, r->round, g);
	if (rdzv_get_str(st, key, rec, sizeof(rec)) == 0) {
		(void)sscanf(rec, "%*u %*u %*u %127s %127s", addr, host);
	}
	snprintf(out, cap, "host %s, address %s", host, addr);
}

/*
 * One liveness check of the ring: node g watches the next node that has not finished. A
 * successor whose heartbeat key is gone (after it was seen, or after heartbeat_timeout since
 * the round closed) is lost. Returns 1 when lost (detail in @lost), 0, or a store error.
 */
int rdzv_ring_check(struct rdzv *r, struct crun_store *st, struct rdzv_ring *ring, char *lost,
		    size_t cap)
{
	char key[KEY_MAX], who[300];
	bool yes;
	int rc, steps;

	for (steps = 0; steps < r->count && ring->succ != r->group_rank; steps++) {
		rdzv_rkey(key, r->round, "hb/%d", ring->succ);
		rc = rdzv_exists(st, key, &yes);
		if (rc < 0) {
			return rc;
		}
		if (yes) {
			ring->seen = true;
			return 0;
		}
		rdzv_rkey(key, r->round, "fin/%d", ring->succ);
		rc = rdzv_exists(st, key, &yes);
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

void rdzv_ring_init(const struct rdzv *r, struct rdzv_ring *ring)
{
	ring->succ = (r->group_rank + 1) % r->count;
	ring->seen = false;
}

/* ---- the watch thread ------------------------------------------------------------------ */

static enum rdzv_event kind_event(char kind)
{
	switch (kind) {
	case KIND_LOST:
		return RDZV_EV_NODE_LOST;
	case KIND_SCALE:
		return RDZV_EV_SCALE_UP;
	case KIND_LEFT:
		return RDZV_EV_NODE_LEFT;
	default:
		return RDZV_EV_PEER_FAILED;
	}
}

/* What the watch thread keeps from one pass of its loop to the next. */
struct watch {
	char k_failed[KEY_MAX], k_next[KEY_MAX], k_wake[KEY_MAX], k_done[KEY_MAX];
	char cur[REC_MAX]; /* the round's "failed" value, once there is an event */
	struct rdzv_ring ring;
	int64_t next_hb, next_ring;
	bool scale_watch; /* the job is below max_nodes: a joiner of the next round scales up */
};

/* What one pass of the watch loop found, besides a negative store error. */
enum { WATCH_AGAIN, WATCH_EVENT, WATCH_WOKEN };

/* Refresh this node's heartbeat and check the ring when due; a lost node marks the round. */
static int watch_timers(struct rdzv *r, struct watch *w, int64_t now)
{
	const struct rdzv_conf *c = &r->conf;
	char lost[512];
	bool won;
	int rc;

	if (now >= w->next_hb) {
		char key[KEY_MAX];

		rdzv_rkey(key, r->round, "hb/%d", r->group_rank);
		rc = crun_store_set_ttl(r->wst, key, "1", 1, c->heartbeat_timeout_ms);
		if (rc < 0) {
			return rc;
		}
		w->next_hb = now + c->keep_alive_interval_ms;
	}
	if (now >= w->next_ring) {
		rc = rdzv_ring_check(r, r->wst, &w->ring, lost, sizeof(lost));
		if (rc < 0) {
			return rc;
		}
		w->next_ring = now + c->keep_alive_interval_ms;
		if (rc == 1) {
			rc = rdzv_mark_failed(r, r->wst, KIND_LOST, lost, w->cur, sizeof(w->cur),
					      &won);
			if (rc < 0) {
				return rc;
			}
			if (won) {
				log_warn("rendezvous %s round %d: %s; re-forming", r->run_id,
					 r->round, lost);
			}
			return WATCH_EVENT;
		}
	}
	return WATCH_AGAIN;
}

/* A node waits in the next round: mark the round for re-formation with it. */
static int watch_scale_up(struct rdzv *r, struct watch *w)
{
	bool won, yes;
	int rc;

	/* Nodes that already finished keep the job. */
	rc = rdzv_exists(r->wst, w->k_done, &yes);
	if (rc < 0) {
		return rc;
	}
	if (yes) {
		w->scale_watch = false;
		return WATCH_AGAIN;
	}
	rc = rdzv_mark_failed(r, r->wst, KIND_SCALE,
			      "scale-up: a new node waits for the next round", w->cur,
			      sizeof(w->cur), &won);
	if (rc < 0) {
		return rc;
	}
	if (won) {
		log_info("rendezvous %s round %d: a new node waits; re-forming with it", r->run_id,
			 r->round);
	}
	return WATCH_EVENT;
}

/*
 * One pass of the watch loop: the timers, then a wait for the round's "failed", a wakeup from
 * rdzv_watch_stop() or a joiner of the next round, until the next timer is due. *@errors goes
 * back to 0 once the store answered the wait.
 */
static int watch_once(struct rdzv *r, struct watch *w, int *errors)
{
	int64_t now = crun_now_ms();
	const char *wkeys[4];
	int rc, nk = 0;

	rc = watch_timers(r, w, now);
	if (rc != WATCH_AGAIN) {
		return rc;
	}
	wkeys[nk++] = w->k_failed;
	wkeys[nk++] = w->k_wake;
	if (w->scale_watch) {
		wkeys[nk++] = w->k_next;
	}
	rc = crun_store_wait_any(r->wst, wkeys, (size_t)nk,
				 clamp_ms(min64(w->next_hb, w->next_ring) - now));
	if (rc == -ETIMEDOUT) {
		*errors = 0;
		return WATCH_AGAIN;
	}
	if (rc < 0) {
		return rc;
	}
	*errors = 0;
	if (rc >= nk || wkeys[rc] == w->k_wake) {
		return WATCH_WOKEN;
	}
	if (wkeys[rc] == w->k_next) {
		return watch_scale_up(r, w);
	}
	rc = rdzv_get_str(r->wst, w->k_failed, w->cur, sizeof(w->cur));
	return rc < 0 ? rc : WATCH_EVENT;
}

/*
 * Errors that another keep-alive attempt cannot mend: the TCP client has already retried a
 * refused connection within its own bound (client_tcp.c: nothing listens there any more, and
 * a TCP store keeps its data in memory, so a restarted one could not carry the job on), and a
 * damaged or foreign store file stays what it is. A timeout, an unroutable store (a network
 * that may come back), a cut connection or a store shutting down gets heartbeat_timeout.
 */
static bool store_error_is_final(int rc)
{
	return rc == -ECONNREFUSED || rc == -EBADMSG || rc == CRUN_EMAGIC || rc == CRUN_EVERSION;
}

/*
 * Store error @rc, the @errors-th in a row, the store silent since @last_ok: back off one
 * keep-alive slice and go on (true), or report the store lost (false) once it has been silent
 * for heartbeat_timeout and keep_alive_max_attempt attempts failed (at once for a final
 * error). heartbeat_timeout is the outage the user allows (docs/reliability.md, "Losing the
 * store"): the heartbeats set before it are still alive when a shorter outage ends, so the
 * job rides through it; after it, the other nodes count this one lost anyway.
 */
static bool watch_store_error(struct rdzv *r, int rc, int errors, int64_t last_ok)
{
	const struct rdzv_conf *c = &r->conf;
	bool at_once = rc == -ESHUTDOWN || rc == -ECONNRESET || rc == -EPIPE;
	int64_t silent = crun_now_ms() - last_ok;
	char desc[REC_MAX + 64];

	atomic_store(&r->wst_bad, true);
	if ((errors < c->keep_alive_max_attempt || silent < c->heartbeat_timeout_ms) &&
	    !store_error_is_final(rc)) {
		/* One short line per failed keep-alive: the store's words name it (etcd's each
		 * member once), then how long of the allowed outage has passed. */
		log_warn("rendezvous %s round %d: %s (attempt %d, %" PRId64 " of %" PRId64
			 " s heartbeat_timeout)",
			 r->run_id, r->round, rdzv_why(r->wst, rc), errors, silent / 1000,
			 c->heartbeat_timeout_ms / 1000);
		/*
		 * Back off one keep-alive slice; stop still wakes us through the flag. A store
		 * that said it is shutting down, or whose connection was cut, is asked again at
		 * once: the reconnect finds out within its own bound whether it is still there.
		 */
		for (int64_t t = crun_now_ms() + (at_once ? 0 : c->keep_alive_interval_ms);
		     crun_now_ms() < t && !atomic_load(&r->stop);) {
			usleep(20000);
		}
		return true;
	}
	snprintf(desc, sizeof(desc), "store lost: %s%s", rdzv_why(r->wst, rc),
		 store_error_is_final(rc) ? "" : " (no answer for longer than heartbeat_timeout)");
	log_error("rendezvous %s round %d: %s", r->run_id, r->round, desc);
	if (!atomic_load(&r->stop)) {
		r->cb(r->cb_arg, RDZV_EV_STORE_LOST, desc);
	}
	return false;
}

/* Hand the round's "failed" value @cur to the agent, unless this node failed it or stops. */
static void watch_report(struct rdzv *r, const char *cur)
{
	char desc[REC_MAX + 64];
	enum rdzv_event ev;

	if (atomic_load(&r->self_failed) || atomic_load(&r->stop)) {
		return;
	}
	ev = kind_event(cur[0]);
	rdzv_describe_failed(cur, desc, sizeof(desc));
	r->cb(r->cb_arg, ev, desc);
}

/* The watch thread: heartbeat and watch until one event, a lost store or rdzv_watch_stop(). */
static void watch_loop(struct rdzv *r)
{
	const struct rdzv_conf *c = &r->conf;
	struct watch w;
	int errors = 0, rc;
	int64_t last_ok = crun_now_ms();

	rdzv_rkey(w.k_failed, r->round, "failed");
	rdzv_rkey(w.k_next, r->round + 1, "joined");
	rdzv_rkey(w.k_wake, r->round, "wake/%d/%u", r->group_rank, r->wake_gen);
	rdzv_rkey(w.k_done, r->round, "done");
	rdzv_ring_init(r, &w.ring);
	w.next_hb = 0;
	w.next_ring = crun_now_ms() + c->keep_alive_interval_ms;
	w.scale_watch = r->count < c->max_nodes;
	while (!atomic_load(&r->stop)) {
		int had = errors;

		rc = watch_once(r, &w, &errors);
		if (rc >= 0) {
			if (had > 0) {
				log_info("rendezvous %s round %d: the store answers again, after "
					 "%" PRId64 " s without an answer",
					 r->run_id, r->round, (crun_now_ms() - last_ok) / 1000);
			}
			last_ok = crun_now_ms(); /* the store answered this pass */
			errors = 0;
		}
		if (rc == WATCH_WOKEN) {
			return;
		}
		if (rc == WATCH_EVENT) {
			watch_report(r, w.cur);
			return;
		}
		if (rc < 0 && !watch_store_error(r, rc, ++errors, last_ok)) {
			return;
		}
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
	rdzv_rkey(key, r->round, "wake/%d/%u", r->group_rank, r->wake_gen);
	/* After an event (or a lost store) the thread is gone: no store round trip needed. */
	woke = !atomic_load(&r->thr_exited) && rdzv_set_str(r->st, key, "1") == 0;
	pthread_join(r->thr, NULL);
	if (woke) {
		(void)crun_store_delete(r->st, key);
	}
	/* Every request on wst has been answered (or failed, marking it bad): reusable. */
	r->thr_running = false;
}