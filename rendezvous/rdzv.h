/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv.h: dynamic rendezvous rounds, liveness and fail-fast over the store. */
#ifndef CRUN_RENDEZVOUS_RDZV_H
#define CRUN_RENDEZVOUS_RDZV_H

#include <stdbool.h>
#include <stdint.h>

#include <crun/store.h>

#include "src/common/util.h"
#include "src/common/diag.h"

/*
 * Nothing here knows about workers: the agent asks for the next round, gets its node rank and
 * the job's shape, runs its workers, and tells this module when they failed or finished. All
 * state lives in the store under "rdzv/<run_id>/" (docs/rendezvous.md).
 */
struct rdzv;

/*
 * How every node's workers meet (PyTorch's bootstrap): decided by group rank 0 once it has
 * joined a round through the store, and carried in its node record, so that all nodes hand
 * their workers the same MASTER_ADDR, MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE.
 */
enum rdzv_boot {
	RDZV_BOOT_AGENT_STORE,    /* through the job's store (TORCHELASTIC_USE_AGENT_STORE=True) */
	RDZV_BOOT_RANK0,          /* worker rank 0 hosts their TCPStore */
	RDZV_BOOT_RANK0_UNSERVED, /* the same: the store, asked, does not serve TCPStore clients */
};

struct rdzv_master {
	enum rdzv_boot how;
	char addr[256]; /* MASTER_ADDR */
	int port;       /* MASTER_PORT */
};

/**
 * Called on group rank 0 only, after it joined the round through the store and before it
 * publishes its node record: fill @m from its advertised @addr and a @free_port on it.
 */
typedef void (*rdzv_master_fn)(void *arg, const char *addr, int free_port, struct rdzv_master *m);

struct rdzv_conf {
	const char *run_id;
	int min_nodes, max_nodes;
	int node_rank;              /* >= 0: fixed rank (static mode); -1: assigned by join order */
	int local_world_size;       /* this node's worker count */
	const char *advertise_addr; /* literal IP other nodes use to reach this node */
	const char *hostname;       /* for messages */
	int max_restarts;           /* job-wide budget of failure restarts */
	int64_t join_timeout_ms;    /* torchrun default 600 s */
	int64_t last_call_timeout_ms;  /* default 30 s */
	int64_t close_timeout_ms;      /* default 30 s */
	int64_t heartbeat_timeout_ms;  /* default 30 s */
	int64_t keep_alive_interval_ms; /* default 5 s */
	int keep_alive_max_attempt;     /* default 3 */
	int64_t read_timeout_ms;        /* one store operation; default 60 s */
	int64_t progress_interval_ms;   /* how often an open round is reported; default 5 s */
	rdzv_master_fn master_fn;       /* NULL: rank 0's TCPStore at its address, a free port */
	void *master_arg;
};

/** torchrun's defaults for every field but the identity ones. */
void rdzv_conf_defaults(struct rdzv_conf *c);

struct rdzv_assignment {
	int round;               /* rendezvous round number (0, 1, ...) */
	int group_rank;          /* node rank: GROUP_RANK */
	int group_world_size;    /* node count: GROUP_WORLD_SIZE */
	int rank_offset;         /* global RANK of this node's LOCAL_RANK 0 */
	int world_size;          /* WORLD_SIZE: workers on all nodes */
	int restart_count;       /* failure restarts spent job-wide: TORCHELASTIC_RESTART_COUNT */
	/* What this round's workers get, on every node: group rank 0's rdzv_master. */
	enum rdzv_boot boot;
	char master_addr[256];   /* MASTER_ADDR */
	int master_port;         /* MASTER_PORT */
	bool master_agreed;      /* false: rank 0's record (an older crun's) did not say; then
				  * master_* are its address and a port free there, and the
				  * node decides alone, as before */
	char worker_prefix[512]; /* store prefix for this attempt's workers (CRUN_STORE_PREFIX) */
};

/**
 * Connect to the store @store (borrowed: the one configuration value, rendezvous/store/
 * store_conf.h) and remember @conf (strings copied). *out: rdzv_destroy().
 */
struct store_conf;
int rdzv_create(const struct store_conf *store, const struct rdzv_conf *conf,
		struct rdzv **out, struct crun_diag *d);
void rdzv_destroy(struct rdzv *r);

/**
 * Join the next round and block until it closes (reporting progress every few seconds on
 * stderr) or join_timeout passes (-ETIMEDOUT, naming who never came), the job is closed to
 * late joiners (CRUN_ECLOSED), or the restart budget is spent (CRUN_ERESTARTS).
 */
int rdzv_next_round(struct rdzv *r, struct rdzv_assignment *a, struct crun_diag *d);

enum rdzv_event {
	RDZV_EV_PEER_FAILED, /* some node marked this round failed: stop workers, next round */
	RDZV_EV_SCALE_UP,    /* a new node waits for the next round (and the job is below max) */
	RDZV_EV_NODE_LOST,   /* a node's heartbeat lapsed; the round was marked failed */
	RDZV_EV_STORE_LOST,  /* the store stopped answering */
	RDZV_EV_NODE_LEFT,   /* a node was stopped by its operator (rdzv_leave()) */
};
typedef void (*rdzv_event_cb)(void *arg, enum rdzv_event ev, const char *detail);

/**
 * While workers run: keep this node's heartbeat and watch for the events above on a thread of
 * its own (own store connection). @cb runs on that thread, at most once per round; the agent
 * hands it over to its loop (uv_async_send). rdzv_watch_stop() joins the thread.
 */
int rdzv_watch_start(struct rdzv *r, rdzv_event_cb cb, void *arg);
void rdzv_watch_stop(struct rdzv *r);

/**
 * Whether @rc says the store is gone rather than answering: a refused, unroutable or cut
 * connection, or a store that shut down (not a timeout: a slow store, or the caller's own
 * deadline, times out too). An agent whose workers finished still exits with their result.
 */
bool rdzv_store_gone(int rc);

/**
 * This node's workers failed: mark the round failed (first reporter wins and spends one
 * restart of the budget). *restart is set to whether the job should run another round.
 */
int rdzv_report_failure(struct rdzv *r, const char *what, bool *restart, struct crun_diag *d);
/** Scale-up or lost node: mark the round for re-formation without spending the budget. */
int rdzv_request_reform(struct rdzv *r, const char *why);
/**
 * This node is leaving the running round because its operator stopped it (@why: "stopped by
 * its operator (SIGTERM)"): mark the round for re-formation without spending the budget, so a
 * collateral failure on another node (a peer's collective breaking) does not count. When the
 * others cannot go on without it (fewer than MIN would be left: a fixed-size job), the job
 * ends too, and the others stop saying why instead of waiting for it to come back.
 */
int rdzv_leave(struct rdzv *r, const char *why);
/**
 * This node's workers all exited 0: record it, then wait (up to @timeout_ms) until every node
 * of the round has finished or one failed. Returns 0 when the whole job succeeded.
 */
int rdzv_finish(struct rdzv *r, int64_t timeout_ms, struct crun_diag *d);
/**
 * For the agent that hosts the store in-process, once the job is over for it (rdzv_finish()
 * returned 0, rdzv_report_failure() said no restart, or rdzv_next_round() returned
 * CRUN_ERESTARTS/CRUN_ECLOSED): wait (up to @timeout_ms) until as many nodes as its last round
 * had have seen the end, so that stopping the store does not cut a slower node off before it
 * read the outcome. Returns 0, -ETIMEDOUT, -EINVAL (the job is not over for this node) or a
 * store error.
 */
int rdzv_wait_left(struct rdzv *r, int64_t timeout_ms);

/**
 * A value every node of the job must share that only the node can make (the --log-dir folder a
 * node created): @propose (called at most once, only when no node has agreed one yet) writes
 * this node's proposal into @val (@cap bytes; returns 0 or a negative errno, @d filled); the
 * first proposal stored wins ("agree/<what>", compare-and-set). The agreed value goes to @out.
 * Returns 1 when it is this node's proposal, 0 when another's (the caller undoes its own, if
 * it made one), or a negative error (@d filled).
 */
typedef int (*rdzv_propose_cb)(void *arg, char *val, size_t cap, struct crun_diag *d);
int rdzv_agree(struct rdzv *r, const char *what, rdzv_propose_cb propose, void *arg, char *out,
	       size_t cap, struct crun_diag *d);

#endif
