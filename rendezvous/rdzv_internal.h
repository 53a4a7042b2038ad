/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_internal.h: what rdzv.c, rdzv_join.c and rdzv_watch.c share. */
#ifndef CRUN_RENDEZVOUS_RDZV_INTERNAL_H
#define CRUN_RENDEZVOUS_RDZV_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/store.h>

#include "rendezvous/rdzv.h"

/*
 * Every key below is relative to the handle prefix "<opts prefix>rdzv/<run_id>/":
 *   cur                  last round that closed (a hint for agents that arrive later)
 *   end                  the job is over: "done ..." or "budget ..." (late joiners read it)
 *   r/<R>/joined         one add per joiner: (position << 32) | cumulative worker count;
 *                        on etcd a ticket per joiner (rdzv_seats.c), the position alone
 *   r/<R>/nprocs/<n>     etcd: the worker counts of the n nodes a closer counted, "V*K,..."
 *   r/<R>/min            written by the joiner that brought the round to min_nodes
 *   r/<R>/closed         "<count> <world_size> <restart_count>", first compare_set wins;
 *                        count 0 marks a round that timed out before it formed
 *   r/<R>/node/<g>       node record: "<nproc> <cum> <port> <addr> <host>", and in static
 *                        mode " <instance>"; node 0's ends with " master=<how>,<port>,<addr>"
 *                        (rdzv_plan.h; readers take the first five fields, and the master
 *                        field where there is one)
 *   r/<R>/hb/<g>         heartbeat (TTL heartbeat_timeout), refreshed every keep_alive_interval
 *   r/<R>/failed         "<kind> <group_rank> <host> <text>", first compare_set wins
 *   r/<R>/fin/<g>        node g's workers all exited 0
 *   r/<R>/done           a ticket per finished node (store_ticket()); r/<R>/alldone
 *                        when it reaches the count
 *   r/<R>/wake/<g>/<n>   written by rdzv_watch_stop() to wake the watch thread at once
 *   gone, gone/<n>       nodes that saw the job end (a ticket each); the n-th writes gone/<n>
 *                        (rdzv_wait_left)
 *   agree/<what>         a value the nodes share, the first proposal wins (rdzv_agree()):
 *                        "logdir", the job's --log-dir folder (agent/logroute.h)
 *
 * rdzv.c holds the handle, finishing and leaving; rdzv_join.c joins rounds (static and
 * dynamic) and closes them; rdzv_assign.c fills in what a node takes from a closed round;
 * rdzv_watch.c keeps the heartbeat and watches for failure and scale-up.
 */

#define KEY_MAX 160
#define REC_MAX 600
#define RDZV_INSTANCE_HEX 16
#define PACK_POS(v) ((int64_t)(v) >> 32)
#define PACK_CUM(v) ((int64_t)((int64_t)(v) & (int64_t)0xffffffff))

/* What a round's "failed" value starts with. Only FAIL spends the restart budget. */
#define KIND_FAIL 'F'	 /* a node's workers failed */
#define KIND_LOST 'L'	 /* a node's heartbeat lapsed */
#define KIND_SCALE 'S'	 /* a node waits for the next round and the job is below max */
#define KIND_REFORM 'E'	 /* rdzv_request_reform() */
#define KIND_TIMEOUT 'T' /* the round never formed */
#define KIND_LEFT 'X'	 /* rdzv_leave(): a node stopped by its operator */

struct rdzv {
	struct crun_store *st; /* the caller's thread only */
	struct rdzv_conf conf; /* strings point at the copies below */
	char *run_id, *addr, *host;
	/* This agent's instance, random: a static node record carries it, so that a second
	 * agent claiming the same --node-rank from the same host and address is still told
	 * apart from the owner (their records would otherwise be byte for byte equal). */
	char instance[RDZV_INSTANCE_HEX + 1];
	char *worker_base; /* opts prefix, "" for none */

	/* What this node published as group rank 0 (rdzv_publish_master()). */
	struct rdzv_master master;

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
	atomic_bool wst_bad;	/* a store error on wst: open a fresh one next time */
	rdzv_event_cb cb;
	void *cb_arg;
	unsigned wake_gen;
	atomic_bool stop;
	atomic_bool self_failed; /* this node marked the round failed itself */
	atomic_bool thr_exited;	 /* the watch thread returned (no wakeup needed) */

	/* A node lost from round lost_round that the job cannot go on without: its
	 * description ("" when none), for the join that waits for it to come back. */
	char lost[REC_MAX + 64];
	int lost_round;
};

/* The ring of liveness checks: node g watches the next node that has not finished. */
struct rdzv_ring {
	int succ; /* the node watched now; == own rank when nobody is left to watch */
	bool seen;
};

static inline int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static inline int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* A store timeout from a number of ms: at least 1, at most a day. */
static inline int clamp_ms(int64_t ms)
{
	if (ms < 1) {
		return 1;
	}
	return ms > 86400000 ? 86400000 : (int)ms;
}

static inline bool is_static(const struct rdzv *r)
{
	return r->conf.node_rank >= 0;
}

/*
 * rdzv_members.c. Round @R's members for a progress or timeout line, after @label: the
 * missing node ranks (static) or the hosts of the @joined nodes (dynamic); "" when none.
 */
void rdzv_describe_members(struct rdzv *r, int R, int joined, const char *label, char *out,
			   size_t cap);
/* Dynamic: round R - 1's nodes not among round @R's @joined, "; not back from round R-1: h, ..."
 * ("" when none, or R is 0). */
void rdzv_describe_absent(struct rdzv *r, int R, int joined, char *out, size_t cap);

/** Format "r/<round>/" followed by @fmt into @buf (KEY_MAX bytes). */
void rdzv_rkey(char *buf, int round, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/** Round @round's record of node @node, "r/<round>/node/<node>", into @buf (KEY_MAX bytes). */
void rdzv_node_key(char *buf, int round, int node);

/** A value the store returned (@v, @len bytes; NULL: none, "") as a string in @buf, cut to
 * @cap - 1 bytes (@cap > 0). */
void rdzv_value_str(char *buf, size_t cap, const void *v, size_t len);
/** Get @key as a NUL-terminated string into @buf. Returns 0, -ENOENT or a store error. */
int rdzv_get_str(struct crun_store *st, const char *key, char *buf, size_t cap);
int rdzv_set_str(struct crun_store *st, const char *key, const char *val);
/**
 * compare_set(key, "", val). *won = whether @val is now stored; @cur (may be NULL) gets the
 * stored value.
 */
int rdzv_cas_str(struct crun_store *st, const char *key, const char *val, char *cur, size_t cap,
		 bool *won);
int rdzv_exists(struct crun_store *st, const char *key, bool *yes);

/**
 * Words for store error @rc from @st: the store's own message where it keeps one for that
 * kind of failure ("store H:P: connection refused by H:P (...)", "store file://P: damaged
 * record at byte offset N ..."), else crun_strerror(@rc). Valid until the next call on @st.
 */
const char *rdzv_why(const struct crun_store *st, int rc);

/** The text part of a "failed" value: "<kind> <g> <host> <text>" -> "<text> (node g, host)". */
void rdzv_describe_failed(const char *v, char *out, size_t cap);

/** This node saw the job end (success, or the budget spent): count it once in "gone". */
void rdzv_note_gone(struct rdzv *r);

/** Bind port 0 on @addr, read the port back and close: a port free on this node right now. */
int rdzv_find_free_port(const char *addr, int *port, struct crun_diag *d);
/*
 * rdzv_seats.c: counting in to "r/<R>/joined" (a packed add, or a ticket on etcd).
 * rdzv_count_in(): this node's count, *@packed = (position << 32) | cumulative workers (the
 * workers 0 on a ticket store: known only at the close). rdzv_count_read(): the count so far.
 * rdzv_seats_close(): the closer, with *@packed = count << 32 read: on a ticket store, read
 * the count's node records, write "r/<R>/nprocs/<count>" and set the world size in *@packed
 * (a seat without a record: R closed as never formed, *@packed 0). rdzv_seats_place(): a
 * member at position @p of @count, dynamic: its cumulative workers into *@packed, and on a
 * ticket store, in the same round trip, rank 0's node record into @rec0 (@cap bytes; "" when
 * not read: rank 0 itself, another store, static mode; @rec0 may be NULL).
 * rdzv_read_nprocs(): the worker counts of records 0..@n-1, waiting up to @wait_ms for them
 * (@stall_ms with none new: -ETIMEDOUT naming the first missing one, *@missing set; may be
 * NULL).
 */
int rdzv_count_in(struct rdzv *r, const char *key, int64_t *packed);
int rdzv_count_read(struct rdzv *r, const char *key, int64_t *packed);
int rdzv_seats_close(struct rdzv *r, int R, int rcount, int64_t deadline, int64_t *packed,
		     struct crun_diag *d);
int rdzv_seats_place(struct rdzv *r, int R, int p, int count, int64_t *packed, char *rec0,
		     size_t cap, struct crun_diag *d);
int rdzv_read_nprocs(struct rdzv *r, int R, int n, int64_t wait_ms, int64_t stall_ms, unsigned *np,
		     bool *missing, struct crun_diag *d);

/**
 * Fill @a once round @R closed with this node at group rank @g (@my_packed: its add on
 * "joined"; rank 0 takes the master it published, r->master; the others read it in rank 0's
 * record, @rec0 when already read, else from the store). Waits for missing node records
 * until @deadline (at least close_timeout).
 */
int rdzv_fill_assignment(struct rdzv *r, int R, int g, int64_t my_packed, int count, int world,
			 int rc_count, int64_t deadline, const char *rec0,
			 struct rdzv_assignment *a, struct crun_diag *d);

/**
 * Group rank 0, joined: decide the workers' master (conf.master_fn, at @addr and @port) into
 * r->master and append its field to the node record @rec (REC_MAX bytes).
 */
int rdzv_publish_master(struct rdzv *r, int port, char *rec, struct crun_diag *d);

/** compare_set the current round's "failed" to "<kind> <g> <host> <what>" on @st. */
int rdzv_mark_failed(struct rdzv *r, struct crun_store *st, char kind, const char *what, char *cur,
		     size_t cap, bool *won);

/** Start the ring at this node's successor. */
void rdzv_ring_init(const struct rdzv *r, struct rdzv_ring *ring);
/**
 * One liveness check of the ring on @st. Returns 1 when the watched node is lost (detail in
 * @lost), 0, or a store error.
 */
/*
 * Leaving round r->round, whose "failed" value is @failed, @len bytes (NULL: none): when it
 * names a node lost (KIND_LOST) and the job cannot form without it (below min_nodes), note it
 * in r->lost and return the earlier deadline for the next join, heartbeat_timeout from now, by
 * which the lost node must be back; else @deadline.
 */
int64_t rdzv_lost_deadline(struct rdzv *r, const void *failed, size_t len, int64_t deadline);
/** The join of round @R timed out waiting for r->lost: say so in @d. -ETIMEDOUT. */
int rdzv_lost_timeout(struct rdzv *r, int R, int joined, struct crun_diag *d);
int rdzv_ring_check(struct rdzv *r, struct crun_store *st, struct rdzv_ring *ring, char *lost,
		    size_t cap);

#endif
