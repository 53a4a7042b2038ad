/* SPDX-License-Identifier: MIT */
/* agent/notify_status.h: each node's state, told to systemd (STATUS=) and to the job's store. */
#ifndef CRUN_AGENT_NOTIFY_STATUS_H
#define CRUN_AGENT_NOTIFY_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include <crun/store.h>

#include "rendezvous/rdzv.h"

/*
 * Every agent publishes one record under its run's rendezvous keys, which `crun status` reads
 * (src/status.c, docs/operations.md); rendezvous/rdzv_keys.h names them:
 *   rdzv/<run>/status/nodes          appended "<host>:<pid>\n" once per agent
 *   rdzv/<run>/status/node/<host>:<pid>   the record below, one line (notify_status_format())
 * rewritten on every change and every NOTIFY_STATUS_HB_MS as a heartbeat.
 */
#define NOTIFY_STATUS_HB_MS 5000

enum node_state {
	NODE_JOINING = 0, /* waiting for a rendezvous round */
	NODE_RUNNING,     /* workers running */
	NODE_RESTARTING,  /* workers failed or stopped; the next round comes */
	NODE_WAITING,     /* this node's workers succeeded; waiting for the other nodes */
	NODE_STOPPING,    /* a signal stops this node */
	NODE_FINISHED,    /* the job succeeded (for this node) */
	NODE_FAILED,      /* the job failed for this node and it exits */
	NODE_STATE_COUNT,
};

struct node_record {
	char host[256];
	long pid;
	enum node_state state;
	int node_rank, nodes, world_size, round; /* -1 before the first round */
	int restarts, max_restarts;              /* failure restarts spent job-wide, the budget */
	int64_t hb_wall_ms;                      /* when the record was written (this node's clock) */
	int64_t since_wall_ms;                   /* when the state began */
	int fail_rank;                           /* this node's last worker failure: global rank, */
	int fail_exit;                           /* its exit code (128+signal), -1 if none */
	int64_t fail_wall_ms;                    /* when */
	char fail_msg[512];
};

/*
 * A node's history: one event per state change (and per new round), kept for `crun status`
 * while the job runs (appended to rdzv/<run>/status/hist/<host>:<pid>, one line each) and in
 * the run record it leaves when it ends (agent/run_record.h). The newest NOTIFY_STATUS_EVENTS
 * are kept; the record says how many older ones were dropped.
 */
#define NOTIFY_STATUS_EVENTS 256

struct node_event {
	int64_t wall_ms;
	enum node_state state;
	int round, restarts;
	int fail_rank, fail_exit; /* the failure this event is about, or -1 */
	char msg[256];
};

/** One line, no newline: "e1 t=MS state=... round=R restarts=N frank=R fexit=E msg=TEXT". */
int notify_event_format(const struct node_event *e, char *buf, size_t cap);
/** Parse what notify_event_format() wrote. Returns 0 or -EBADMSG. */
int notify_event_parse(const char *line, struct node_event *e);

/** "joining", "running", ...; "unknown" for a value out of range. */
const char *node_state_name(enum node_state s);

/** One line, no newline: "v1 state=... host=... ... msg=TEXT". Returns its length or -1. */
int notify_status_format(const struct node_record *r, char *buf, size_t cap);
/** Parse what notify_status_format() wrote. Returns 0 or -EBADMSG. */
int notify_status_parse(const char *line, struct node_record *r);

struct notify_status;

/**
 * Start publishing this node's state for run @run_id, through a store connection of its own
 * made from the agent's store configuration @sc (borrowed; copied, with short timeouts: TLS
 * files, credential and scope as the agent's own connection) on a thread of its own, so a
 * slow or lost store never delays the agent. Store errors are logged at debug level and
 * retried at the next heartbeat: the job never depends on them. Returns 0 or -ENOMEM; *out:
 * notify_status_destroy().
 */
struct store_conf;
int notify_status_create(const struct store_conf *sc, const char *run_id, const char *host,
			 int max_restarts, struct notify_status **out);

/**
 * The node entered @st. @as (borrowed, may be NULL) is the round it is in. Sends systemd a
 * STATUS= line (READY=1 the first time workers run, STOPPING=1 when stopping or ending), and
 * wakes the publisher. Cheap; call from the agent's thread.
 */
void notify_status_set(struct notify_status *s, enum node_state st,
		       const struct rdzv_assignment *as);

/** This node's workers failed: global @rank, exit code (128+signal), and the summary. */
void notify_status_fail(struct notify_status *s, int rank, int exit_code, const char *msg);

/**
 * A copy of this node's record and history, oldest event first: *@ev (free()) holds *@n
 * events, *@dropped older ones were not kept. Returns 0 or -ENOMEM.
 */
int notify_status_snapshot(struct notify_status *s, struct node_record *rec,
			   struct node_event **ev, int *n, int *dropped);

/** Publish the last state (within a few seconds at most), stop the thread, free. NULL: no-op. */
void notify_status_destroy(struct notify_status *s);

#endif
