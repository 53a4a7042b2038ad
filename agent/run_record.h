/* SPDX-License-Identifier: MIT */
/* agent/run_record.h: each agent's record of a run, kept after the job and its store are gone. */
#ifndef CRUN_AGENT_RUN_RECORD_H
#define CRUN_AGENT_RUN_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/notify_status.h"
#include "src/common/diag.h"

/*
 * When an agent ends, it writes what it knows of the run to a JSON file, as sacct(1) keeps a
 * job's accounting record after the job: the run id, this node, its ranks, when it started and
 * ended, the rounds and restarts with their causes, the final state and exit status, and the
 * node's history (notify_status.h). `crun status` reads these records when the job's store is
 * gone (the agent-hosted store ends with the job) and lists the runs a machine has seen.
 *
 * Where: <state dir>/runs/<run id>/<host>:<pid>.json, the state dir being the first of
 * $CRUN_STATE_DIR, systemd's $STATE_DIRECTORY, /var/lib/crun for root, $XDG_STATE_HOME/crun,
 * ~/.local/state/crun (a directory only its owner can write; created 0700). With --log-dir the
 * same file is also written into the run's log folder. Written atomically (fs_write_atomic):
 * a reader sees the whole record or none.
 */

/* The final state a record names: how the run ended for this node. */
enum run_end {
	RUN_END_FINISHED = 0, /* its workers succeeded, the job finished */
	RUN_END_FAILED,       /* the job failed for this node */
	RUN_END_CANCELLED,    /* stopped by a signal (its operator, systemctl stop, scancel) */
	RUN_END_COUNT,
};

struct run_record {
	char run_id[256];
	struct node_record last; /* the node's last record (notify_status.h) */
	int nproc;               /* workers on this node (ranks last.rank_offset..+nproc-1) */
	int rank_offset;         /* its first global rank in the last round, -1 if none */
	int64_t start_ms, end_ms;
	enum run_end end;
	int exit_code;
	struct node_event *ev; /* the history, oldest first: n events */
	int n;
	int dropped; /* older events not kept */
};

/** "finished", "failed", "cancelled". */
const char *run_end_name(enum run_end e);

/**
 * The folder the records go to ("<state dir>/runs"), into @out; with @create, made (0700) and
 * checked as a directory only its owner decides about (fs_check_dir_safe()). Returns 0 or
 * -errno with @d naming the path and the reason.
 */
int run_record_dir(char *out, size_t cap, bool create, struct crun_diag *d);

/** Write @r as "<dir>/<run id>/<host>:<pid>.json" (@flat: "<dir>/run-<host>:<pid>.json").
 * Returns 0 or -errno with @d naming the file. */
int run_record_write(const struct run_record *r, const char *dir, bool flat,
		     struct crun_diag *d);

/**
 * Read every record of run @run_id under @dir (from run_record_dir()), or, @run_id NULL, one
 * record per run there (the newest node's). *@out (run_record_free_all()) holds *@n records.
 * A file that is not a record is skipped with a warning naming it. Returns 0 (also when there
 * are none) or -errno with @d.
 */
int run_record_read_all(const char *dir, const char *run_id, struct run_record **out, int *n,
			struct crun_diag *d);

void run_record_free_all(struct run_record *r, int n);

#endif
