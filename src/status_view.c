/* SPDX-License-Identifier: MIT */
/* src/status_view.c: judging a job from its nodes' records; the table, JSON, history, run list. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/common/json.h"
#include "src/status.h"
#include "src/status_view.h"

static bool node_final(const struct node_record *r)
{
	return r->state == NODE_FINISHED || r->state == NODE_FAILED || r->state == NODE_STOPPING;
}

static bool node_lost(const struct job_view *v, const struct node_record *r)
{
	return !node_final(r) && v->now - r->hb_wall_ms > STATUS_LOST_MS;
}

static int cmp_nodes(const void *a, const void *b)
{
	const struct node_record *x = &((const struct run_record *)a)->last;
	const struct node_record *y = &((const struct run_record *)b)->last;

	/* The newest round first, then by node rank, then by host. */
	if (x->round != y->round) {
		return y->round - x->round;
	}
	if (x->node_rank != y->node_rank) {
		return x->node_rank - y->node_rank;
	}
	return strcmp(x->host, y->host);
}

/* From run records only (the store is gone): any node failed, the job failed; else any
 * finished, it finished (the others left it); else its operator cancelled it. */
static void judge_records(struct job_view *v)
{
	bool failed = false, finished = false;
	int i;

	for (i = 0; i < v->n; i++) {
		failed |= v->nodes[i].end == RUN_END_FAILED;
		finished |= v->nodes[i].end == RUN_END_FINISHED;
	}
	if (failed) {
		v->state = "failed";
		v->exit = STATUS_EXIT_FAILED;
	} else if (finished) {
		v->state = "finished";
		v->exit = STATUS_EXIT_FINISHED;
	} else {
		v->state = "cancelled";
		v->exit = STATUS_EXIT_CANCELLED;
	}
}

void job_view_judge(struct job_view *v)
{
	bool live = false, failed = false, stopped = false;
	int i;

	if (v->n > 0) {
		qsort(v->nodes, (size_t)v->n, sizeof(*v->nodes), cmp_nodes);
		v->cur = &v->nodes[0].last;
	}
	for (i = 0; i < v->n; i++) {
		const struct node_record *r = &v->nodes[i].last;

		if (r->fail_exit >= 0 && (v->fail == NULL || r->fail_wall_ms > v->fail->fail_wall_ms)) {
			v->fail = r;
		}
		live |= !node_final(r) && !node_lost(v, r);
		failed |= r->state == NODE_FAILED;
		stopped |= r->state == NODE_STOPPING;
	}
	if (v->from_records && v->n > 0) {
		judge_records(v);
	} else if (strncmp(v->end, "done", 4) == 0) {
		v->state = "finished";
		v->exit = STATUS_EXIT_FINISHED;
	} else if (strncmp(v->end, "budget", 6) == 0) {
		v->state = "failed";
		v->exit = STATUS_EXIT_FAILED;
	} else if (live) {
		v->state = "running";
		v->exit = STATUS_EXIT_RUNNING;
	} else if (v->n > 0 && failed) {
		/* Every agent ended without the rendezvous recording an end: one failed. */
		v->state = "failed";
		v->exit = STATUS_EXIT_FAILED;
	} else if (v->n > 0 && stopped) {
		/* ... or each was stopped by a signal: its operator's (systemctl stop, scancel). */
		v->state = "cancelled";
		v->exit = STATUS_EXIT_CANCELLED;
	} else {
		v->state = "unknown";
		v->exit = STATUS_EXIT_UNKNOWN;
	}
}

static void fmt_time(int64_t wall_ms, char *buf, size_t cap)
{
	time_t t = (time_t)(wall_ms / 1000);
	struct tm tm;
	long off;

	localtime_r(&t, &tm);
	off = tm.tm_gmtoff / 60;
	snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d%c%02ld:%02ld", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, off < 0 ? '-' : '+',
		 (off < 0 ? -off : off) / 60, (off < 0 ? -off : off) % 60);
}

static void fmt_age(int64_t ms, char *buf, size_t cap)
{
	if (ms < 0) {
		ms = 0; /* another host's clock runs ahead */
	}
	if (ms < 100000) {
		snprintf(buf, cap, "%.1fs ago", (double)ms / 1000.0);
	} else if (ms < 2 * 3600 * 1000) {
		snprintf(buf, cap, "%" PRId64 "m ago", ms / 60000);
	} else {
		snprintf(buf, cap, "%" PRId64 "h ago", ms / 3600000);
	}
}

/* A node its operator stopped (a signal: systemctl stop, scancel, Ctrl-C) left the job: the
 * others go on without it or stop, so it is no failure ("left", not "stopping"). */
static const char *state_word(enum node_state s)
{
	return s == NODE_STOPPING ? "left" : node_state_name(s);
}

static const char *shown_state(const struct job_view *v, const struct run_record *n)
{
	if (node_lost(v, &n->last)) {
		return "lost";
	}
	if (v->from_records) {
		return n->end == RUN_END_CANCELLED ? "left" : run_end_name(n->end);
	}
	return state_word(n->last.state);
}

/* "17-20": the global ranks of a node in its last round; "-" when unknown. */
static void fmt_ranks(const struct run_record *n, char *buf, size_t cap)
{
	const struct node_record *r = &n->last;
	int per = r->nodes > 0 ? r->world_size / r->nodes : 0;

	if (n->rank_offset >= 0 && n->nproc > 0) {
		snprintf(buf, cap, "%d-%d", n->rank_offset, n->rank_offset + n->nproc - 1);
	} else if (r->node_rank >= 0 && per > 0) {
		/* Uniform nproc per node: the ranks this node ran in its round. */
		snprintf(buf, cap, "%d-%d", r->node_rank * per, r->node_rank * per + per - 1);
	} else {
		snprintf(buf, cap, "-");
	}
}

/* One history event: "running (round 2, restart 1)" or "rank 3 failed, exit 1: MSG". */
static void fmt_event(const struct node_event *e, char *buf, size_t cap)
{
	if (e->fail_exit >= 0) {
		snprintf(buf, cap, "rank %d failed, exit %d: %s", e->fail_rank, e->fail_exit,
			 e->msg);
	} else if (e->round >= 0) {
		snprintf(buf, cap, "%s (round %d, restarts %d)", state_word(e->state),
			 e->round, e->restarts);
	} else {
		snprintf(buf, cap, "%s", state_word(e->state));
	}
}

struct ev_ref {
	const struct node_event *e;
	const struct run_record *n;
};

static int cmp_ev(const void *a, const void *b)
{
	const struct ev_ref *x = a, *y = b;

	return x->e->wall_ms < y->e->wall_ms ? -1 : x->e->wall_ms > y->e->wall_ms;
}

/* Every node's history merged in time order, the last @keep events (all when @keep < 0). */
static void print_history(const struct job_view *v, int keep)
{
	struct ev_ref *all;
	char when[96], what[600], node[32];
	int i, j, n = 0, dropped = 0;

	for (i = 0; i < v->n; i++) {
		n += v->nodes[i].n;
		dropped += v->nodes[i].dropped;
	}
	if (n == 0 || (all = calloc((size_t)n, sizeof(*all))) == NULL) {
		return;
	}
	n = 0;
	for (i = 0; i < v->n; i++) {
		for (j = 0; j < v->nodes[i].n; j++) {
			all[n++] = (struct ev_ref){&v->nodes[i].ev[j], &v->nodes[i]};
		}
	}
	qsort(all, (size_t)n, sizeof(*all), cmp_ev);
	i = keep >= 0 && n > keep ? n - keep : 0;
	printf("\nhistory%s:\n", i > 0 || dropped > 0 ? " (the latest; --history for all kept)" : "");
	if (i > 0 || dropped > 0) {
		printf("  ... %d earlier event%s\n", i + dropped, i + dropped == 1 ? "" : "s");
	}
	for (; i < n; i++) {
		fmt_time(all[i].e->wall_ms, when, sizeof(when));
		fmt_event(all[i].e, what, sizeof(what));
		snprintf(node, sizeof(node), "%ld", all[i].n->last.pid);
		printf("  %s  %s:%s  %s\n", when, all[i].n->last.host, node, what);
	}
	free(all);
}

void job_view_print_table(const struct job_view *v, bool history)
{
	const struct node_record *c = v->cur;
	char age[32], when[96], ranks[32], rank[16];
	int i;

	printf("job %s: %s", v->run_id, v->state);
	if (c != NULL && c->round >= 0) {
		printf(" (round %d, %d node%s, world size %d)", c->round, c->nodes,
		       c->nodes == 1 ? "" : "s", c->world_size);
	}
	printf("\n");
	if (c != NULL) {
		printf("restarts: %d spent, %d left (max %d)\n", c->restarts,
		       c->max_restarts > c->restarts ? c->max_restarts - c->restarts : 0,
		       c->max_restarts);
	}
	printf("from: %s\n", v->source);
	if (v->n > 0) {
		printf("\n%-5s %-24s %-8s %-10s %5s %-9s %s\n", "NODE", "HOST", "PID", "STATE",
		       "ROUND", "RANKS", v->from_records ? "ENDED" : "HEARTBEAT");
	}
	for (i = 0; i < v->n; i++) {
		const struct run_record *n = &v->nodes[i];
		const struct node_record *r = &n->last;

		snprintf(rank, sizeof(rank), r->node_rank >= 0 ? "%d" : "-", r->node_rank);
		fmt_ranks(n, ranks, sizeof(ranks));
		fmt_age(v->now - r->hb_wall_ms, age, sizeof(age));
		printf("%-5s %-24s %-8ld %-10s %5d %-9s %s", rank, r->host, r->pid,
		       shown_state(v, n), r->round, ranks, age);
		if (v->from_records) {
			printf(" (exit %d)", n->exit_code);
		}
		printf("\n");
	}
	if (v->fail != NULL) {
		fmt_time(v->fail->fail_wall_ms, when, sizeof(when));
		fmt_age(v->now - v->fail->fail_wall_ms, age, sizeof(age));
		printf("\nlast failure: rank %d on %s, exit %d, at %s (%s)\n  %s\n",
		       v->fail->fail_rank, v->fail->host, v->fail->fail_exit, when, age,
		       v->fail->fail_msg);
	} else if (strncmp(v->end, "budget", 6) == 0) {
		printf("\nlast failure: %s\n", v->end);
	}
	print_history(v, history ? -1 : 10);
	if (v->n == 0 && v->exit == STATUS_EXIT_UNKNOWN) {
		printf("no agent of run \"%s\" has published its state in this store, and this "
		       "machine has no record of it\n", v->run_id);
	}
}

/* @s as a JSON string on stdout: always valid JSON, whatever bytes a worker printed. */
static void json_str(const char *s)
{
	json_fput_str(stdout, s);
}

static void json_history(const struct run_record *n)
{
	char when[96];
	int i;

	printf(",\"history_dropped\":%d,\"history\":[", n->dropped);
	for (i = 0; i < n->n; i++) {
		const struct node_event *e = &n->ev[i];

		fmt_time(e->wall_ms, when, sizeof(when));
		printf("%s{\"time\":\"%s\",\"state\":\"%s\",\"round\":%d,\"restarts\":%d",
		       i > 0 ? "," : "", when, state_word(e->state), e->round, e->restarts);
		if (e->fail_exit >= 0) {
			printf(",\"failure\":{\"rank\":%d,\"exit_code\":%d,\"message\":",
			       e->fail_rank, e->fail_exit);
			json_str(e->msg);
			printf("}");
		}
		printf("}");
	}
	printf("]");
}

void job_view_print_json(const struct job_view *v)
{
	const struct node_record *c = v->cur;
	char when[96];
	int i;

	printf("{\"run_id\":");
	json_str(v->run_id);
	printf(",\"state\":\"%s\",\"from\":", v->state);
	json_str(v->source);
	printf(",\"round\":%d,\"nodes\":%d,\"world_size\":%d,\"restarts\":%d,"
	       "\"max_restarts\":%d,\"restarts_left\":%d,\"end\":",
	       c != NULL ? c->round : -1, c != NULL ? c->nodes : 0,
	       c != NULL ? c->world_size : 0, c != NULL ? c->restarts : 0,
	       c != NULL ? c->max_restarts : 0,
	       c != NULL && c->max_restarts > c->restarts ? c->max_restarts - c->restarts : 0);
	json_str(v->end);
	printf(",\"last_failure\":");
	if (v->fail != NULL) {
		fmt_time(v->fail->fail_wall_ms, when, sizeof(when));
		printf("{\"rank\":%d,\"host\":", v->fail->fail_rank);
		json_str(v->fail->host);
		printf(",\"exit_code\":%d,\"time\":\"%s\",\"message\":", v->fail->fail_exit, when);
		json_str(v->fail->fail_msg);
		printf("}");
	} else {
		printf("null");
	}
	printf(",\"agents\":[");
	for (i = 0; i < v->n; i++) {
		const struct run_record *n = &v->nodes[i];
		const struct node_record *r = &n->last;

		fmt_time(r->hb_wall_ms, when, sizeof(when));
		printf("%s{\"node_rank\":%d,\"host\":", i > 0 ? "," : "", r->node_rank);
		json_str(r->host);
		printf(",\"pid\":%ld,\"state\":\"%s\",\"round\":%d,\"restarts\":%d,"
		       "\"heartbeat\":\"%s\",\"heartbeat_age_s\":%.1f",
		       r->pid, shown_state(v, n), r->round, r->restarts, when,
		       (double)(v->now - r->hb_wall_ms > 0 ? v->now - r->hb_wall_ms : 0) / 1000.0);
		if (v->from_records) {
			fmt_time(n->start_ms, when, sizeof(when));
			printf(",\"start\":\"%s\"", when);
			fmt_time(n->end_ms, when, sizeof(when));
			printf(",\"end\":\"%s\",\"exit_code\":%d", when, n->exit_code);
		}
		json_history(n);
		printf("}");
	}
	printf("]}\n");
}

static int cmp_runs(const void *a, const void *b)
{
	const struct run_record *x = a, *y = b;

	return x->start_ms < y->start_ms ? -1 : x->start_ms > y->start_ms;
}

void runs_print(const char *dir, const struct run_record *r, int n, bool json)
{
	struct run_record *s = calloc((size_t)n + 1, sizeof(*s));
	char start[96], end[96];
	int i, w = 3;

	if (s == NULL) {
		return;
	}
	for (i = 0; i < n; i++) {
		w = (int)strlen(r[i].run_id) > w ? (int)strlen(r[i].run_id) : w;
	}
	memcpy(s, r, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), cmp_runs);
	if (json) {
		printf("[");
	} else if (n == 0) {
		printf("no run records in %s\n", dir);
	} else {
		printf("%-*s %-10s %5s %5s %-25s %-25s %s\n", w, "RUN", "STATE", "NODES", "EXIT",
		       "START", "END", "LAST FAILURE");
	}
	for (i = 0; i < n; i++) {
		const struct node_record *l = &s[i].last;

		fmt_time(s[i].start_ms, start, sizeof(start));
		fmt_time(s[i].end_ms, end, sizeof(end));
		if (json) {
			printf("%s{\"run_id\":", i > 0 ? "," : "");
			json_str(s[i].run_id);
			printf(",\"state\":\"%s\",\"nodes\":%d,\"exit_code\":%d,\"restarts\":%d,"
			       "\"start\":\"%s\",\"end\":\"%s\",\"last_failure\":",
			       run_end_name(s[i].end), l->nodes, s[i].exit_code, l->restarts, start,
			       end);
			json_str(l->fail_msg);
			printf("}");
		} else {
			printf("%-*s %-10s %5d %5d %-25s %-25s %.60s\n", w, s[i].run_id,
			       run_end_name(s[i].end), l->nodes, s[i].exit_code, start, end,
			       l->fail_exit >= 0 ? l->fail_msg : "-");
		}
	}
	if (json) {
		printf("]\n");
	}
	free(s);
}

static int cmp_rows(const void *a, const void *b)
{
	const struct run_row *x = a, *y = b;

	if (x->start_ms != y->start_ms) {
		return x->start_ms < y->start_ms ? -1 : 1;
	}
	return strcmp(x->id, y->id);
}

void store_runs_print(const char *source, struct run_row *rows, uint32_t n, uint32_t total,
		      bool json)
{
	char start[96], change[96];
	uint32_t i;
	int w = 3;

	qsort(rows, n, sizeof(*rows), cmp_rows);
	for (i = 0; i < n; i++) {
		w = (int)strlen(rows[i].id) > w ? (int)strlen(rows[i].id) : w;
	}
	if (json) {
		printf("{\"source\":");
		json_str(source);
		printf(",\"total\":%" PRIu32 ",\"runs\":[", total);
	} else if (n == 0) {
		printf("no runs in %s\n", source);
	} else {
		printf("%-*s %-10s %5s %-25s %-25s %8s %10s\n", w, "RUN", "STATE", "NODES", "START",
		       "LAST CHANGE", "KEYS", "BYTES");
	}
	for (i = 0; i < n; i++) {
		const struct run_row *r = &rows[i];

		snprintf(start, sizeof(start), "-");
		snprintf(change, sizeof(change), "-");
		if (r->start_ms > 0) {
			fmt_time(r->start_ms, start, sizeof(start));
		}
		if (r->change_ms > 0) {
			fmt_time(r->change_ms, change, sizeof(change));
		}
		if (json) {
			printf("%s{\"run_id\":", i > 0 ? "," : "");
			json_str(r->id);
			printf(",\"state\":\"%s\",\"nodes\":%d,\"start\":\"%s\",\"last_change\":\"%s\","
			       "\"keys\":%" PRId64 ",\"bytes\":%" PRId64 "}",
			       r->state, r->nodes, start, change, r->keys, r->bytes);
		} else {
			printf("%-*s %-10s %5d %-25s %-25s %8" PRId64 " %10" PRId64 "\n", w, r->id,
			       r->state, r->nodes, start, change, r->keys, r->bytes);
		}
	}
	if (json) {
		printf("],\"not_shown\":%" PRIu32 "}\n", total - n);
	} else if (total > n) {
		printf("%" PRIu32 " more not shown (the store names at most %" PRIu32 ")\n",
		       total - n, n);
	}
}
