/* SPDX-License-Identifier: MIT */
/* src/status_view.h: `crun status`'s view of a job (from its store or its run records) and the
 * ways it is shown: the table, JSON, the history, the list of runs. */
#ifndef CRUN_SRC_STATUS_VIEW_H
#define CRUN_SRC_STATUS_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/run_record.h"

/* A record whose heartbeat is older than this belongs to an agent that is gone. */
#define STATUS_LOST_MS (6 * NOTIFY_STATUS_HB_MS)

struct job_view {
	const char *run_id;
	char source[1100];      /* "store HOST:PORT" or "run records in DIR" */
	bool from_records;      /* every node's record is a final run record */
	const char *state;      /* running, finished, failed, cancelled, unknown */
	int exit;               /* enum status_exit */
	char end[1024];         /* the rendezvous' "end" record, "" when the job is not over */
	struct run_record *nodes; /* each node's record (.last) and history; n of them */
	int n;
	const struct node_record *cur;  /* the record of the newest round, or NULL */
	const struct node_record *fail; /* the newest failure, or NULL */
	int64_t now;
};

/** Decide the job's state from the end record and the nodes' records; sorts the nodes. */
void job_view_judge(struct job_view *v);

/** The table; with @history every event of every node, else the last few. */
void job_view_print_table(const struct job_view *v, bool history);

/** One JSON object (each agent with its history). */
void job_view_print_json(const struct job_view *v);

/** The runs recorded in @dir (one record each), newest last: a table or a JSON array. */
/* One run a shared store serves, as `crun status --rdzv-endpoint` lists it (status_list.c). */
struct run_row {
	char id[129];
	const char *state;  /* job_view's state: running, finished, failed, cancelled, unknown */
	int nodes;          /* agents with a status record */
	int64_t keys, bytes; /* what the store holds of the run */
	int64_t start_ms;   /* its first recorded state change (0: none) */
	int64_t change_ms;  /* its last (or the store's last write of it) */
};

/** The runs of a store, oldest start first; @total > @n: "N more not shown". */
void store_runs_print(const char *source, struct run_row *rows, uint32_t n, uint32_t total,
		      bool json);

/* status.c: the job's end record and every node's record and history from @st. 0 or a store
 * error. status_free_view() frees what it read. */
struct crun_store;
int status_read_job(struct crun_store *st, const char *run_id, struct job_view *v);
void status_free_view(struct job_view *v);
/* status_list.c: list the runs @st serves (LIST_RUNS); returns the exit status (said). */
int status_list_store(struct crun_store *st, const char *endpoint, bool json);

void runs_print(const char *dir, const struct run_record *r, int n, bool json);

#endif
