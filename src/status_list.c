/* SPDX-License-Identifier: MIT */
/* src/status_list.c: `crun status --rdzv-endpoint H:P` with no run named: the runs a shared
 * crun-rdzvd serves (LIST_RUNS), one line each, judged from each run's status keys. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/store_conf.h"
#include "rendezvous/store/store_runs.h"
#include "src/common/clock.h"
#include "src/status.h"
#include "src/status_view.h"

/* One run's line from its view: state, nodes, first and last state change. */
static void take_row(struct run_row *row, const struct store_run *r, const struct job_view *v)
{
	int i, j;

	snprintf(row->id, sizeof(row->id), "%s", r->id);
	row->state = v->state;
	row->nodes = v->n;
	row->keys = r->keys;
	row->bytes = r->bytes;
	row->start_ms = 0;
	row->change_ms = 0;
	for (i = 0; i < v->n; i++) {
		const struct run_record *n = &v->nodes[i];
		int64_t first = n->n > 0 ? n->ev[0].wall_ms : n->last.since_wall_ms;

		if (first > 0 && (row->start_ms == 0 || first < row->start_ms)) {
			row->start_ms = first;
		}
		for (j = 0; j < n->n; j++) {
			row->change_ms = n->ev[j].wall_ms > row->change_ms ? n->ev[j].wall_ms
									   : row->change_ms;
		}
		if (n->last.since_wall_ms > row->change_ms) {
			row->change_ms = n->last.since_wall_ms;
		}
	}
	if (row->change_ms == 0) {
		row->change_ms = r->wrote_ms; /* no status keys: the store's last write */
	}
}

int status_list_store(struct crun_store *st, const char *endpoint, bool json)
{
	struct store_run *runs = NULL;
	struct run_row *rows = NULL;
	struct job_view v;
	uint32_t n = 0, total = 0, i;
	char source[1100];
	int rc;

	rc = store_list_runs(st, 0, &runs, &n, &total);
	if (rc == -EOPNOTSUPP) {
		fprintf(stderr, "crun status: store %s cannot list runs (its crun-rdzvd "
			"predates the LIST_RUNS request); name the run with --rdzv-id\n", endpoint);
		return STATUS_EXIT_STORE;
	}
	if (rc < 0) {
		fprintf(stderr, "crun status: listing the runs of store %s: %s\n", endpoint,
			store_last_error(st)[0] != '\0' ? store_last_error(st) : crun_strerror(rc));
		return STATUS_EXIT_STORE;
	}
	rows = calloc(n + 1u, sizeof(*rows));
	if (rows == NULL) {
		free(runs);
		fprintf(stderr, "crun status: out of memory\n");
		return STATUS_EXIT_STORE;
	}
	for (i = 0; i < n; i++) {
		memset(&v, 0, sizeof(v));
		v.run_id = runs[i].id;
		rc = status_read_job(st, runs[i].id, &v);
		if (rc < 0) {
			fprintf(stderr, "crun status: reading run %s from %s: %s\n", runs[i].id,
				endpoint, crun_strerror(rc));
			status_free_view(&v);
			break;
		}
		v.now = crun_wall_ms();
		job_view_judge(&v);
		take_row(&rows[i], &runs[i], &v);
		status_free_view(&v);
	}
	if (rc == 0) {
		snprintf(source, sizeof(source), "store %s", endpoint);
		store_runs_print(source, rows, n, total, json);
	}
	free(rows);
	free(runs);
	return rc == 0 ? 0 : STATUS_EXIT_STORE;
}
