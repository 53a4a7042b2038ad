/* SPDX-License-Identifier: MIT */
/* src/status.c: `crun status`: read a job's node records from its store; table, JSON, watch. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "agent/notify_status.h"
#include "rendezvous/rdzv_keys.h"
#include "src/common/clock.h"
#include "src/common/json.h"
#include "src/common/parse.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/token.h"
#include "config.h"
#include "src/cli_parser.h"
#include "src/jobfile.h"
#include "src/opt.h"
#include "src/opt_store.h"
#include "src/status.h"

/* At most this many agents are listed (a record is one store key). */
#define STATUS_MAX_NODES 4096
/* A record whose heartbeat is older than this belongs to an agent that is gone. */
#define STATUS_LOST_MS (6 * NOTIFY_STATUS_HB_MS)

struct status_opts {
	const char *endpoint, *run_id, *backend, *token_file;
	const char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
	struct jobfile jf;    /* --config FILE.yaml's values, which the pointers above may borrow */
	bool insecure, json, watch;
	double watch_s;
	int timeout_ms;
};

struct job_view {
	const char *state;      /* running, finished, failed, unknown */
	int exit;               /* enum status_exit */
	char end[1024];         /* the rendezvous' "end" record, "" when the job is not over */
	struct node_record *nodes;
	int n;
	const struct node_record *cur;  /* the record of the newest round, or NULL */
	const struct node_record *fail; /* the newest failure, or NULL */
	int64_t now;
};

enum status_opt {
	ST_ENDPOINT,
	ST_RDZV_ID,
	ST_BACKEND,
	ST_TOKEN_FILE,
	ST_INSECURE,
	ST_TLS_CA,
	ST_TLS_CERT,
	ST_TLS_KEY,
	ST_TLS_SERVER_NAME,
	ST_CONFIG,
	ST_JSON,
	ST_WATCH,
	ST_TIMEOUT,
	ST_VERBOSE,
	ST_QUIET,
	ST_HELP,
	ST_VERSION,
	ST_COUNT
};

static const struct opt status_opts_table[ST_COUNT] = {
	[ST_ENDPOINT] = OPT_STORE_ENDPOINT("The job", false, NULL, "EP",
					   "the job's store (HOST[:PORT], file:///PATH, "
					   "etcd://HOST:PORT)"),
	[ST_RDZV_ID] = {"rdzv-id", 0, true, false, "ID", "the job's run id", NULL},
	[ST_BACKEND] = {"rdzv-backend", 0, true, false, "B", "c10d (default), tcp, file or etcd",
			NULL},
	[ST_TOKEN_FILE] = OPT_STORE_TOKEN_FILE(
		"Credentials", "the store's token (default: $CRUN_TOKEN_FILE, then "
			       "~/.config/crun/token; $CRUN_STORE_TOKEN also works)"),
	[ST_INSECURE] = OPT_STORE_INSECURE(NULL, "connect without a token"),
	[ST_TLS_CA] = OPT_STORE_TLS_CA(NULL, NULL, "TLS to the store: the CA its certificate is "
						   "verified against, as crun's own option"),
	[ST_TLS_CERT] = OPT_STORE_TLS_CERT(NULL, NULL, "mutual TLS: our PEM certificate ..."),
	[ST_TLS_KEY] = OPT_STORE_TLS_KEY(NULL, NULL, "... and its key, a file only you can read"),
	[ST_TLS_SERVER_NAME] = OPT_STORE_TLS_SERVER_NAME(
		NULL, NULL, "the name the store's certificate carries (default: the endpoint's "
			    "host)"),
	[ST_CONFIG] = OPT_STORE_CONFIG(NULL, "take the options above from the job's file "
					     "(crun.yaml(5)); options given here win"),
	[ST_JSON] = {"json", 0, false, false, NULL, "one JSON object instead of the table",
		     "Output"},
	[ST_WATCH] = {"watch", 0, false, false, "SEC",
		      "redraw every SEC seconds (default 2) until the job ends", NULL, false, true},
	[ST_TIMEOUT] = {"timeout", 0, true, false, "SEC",
			"how long to try to reach the store (default 10)", NULL},
	[ST_VERBOSE] = OPT_VERBOSE_ENTRY("Other", "log the store client's retries at debug level"),
	[ST_QUIET] = OPT_QUIET_ENTRY,
	[ST_HELP] = OPT_HELP_ENTRY(NULL),
	[ST_VERSION] = OPT_VERSION_ENTRY,
};

static void usage(FILE *f);

static const struct opt_table status_table = {
	.prog = "crun status",
	.opts = status_opts_table,
	.n = ST_COUNT,
	.usage = usage,
	.version = "crun status " CRUN_VERSION,
};

static void usage(FILE *f)
{
	fprintf(f, "Usage: crun status --rdzv-endpoint HOST:PORT --rdzv-id ID [OPTIONS]\n"
		   "Show a running or finished job's nodes, rounds, restarts and last failure, read\n"
		   "from its rendezvous store.\n");
	opt_print_options(f, &status_table);
	fprintf(f, "\nExit status: 0 running, 1 failed, 2 usage error (a credential file others\n"
		   "can read included), 3 finished, 4 unknown run id (or every agent lost), 5 the\n"
		   "store could not be reached or read.\n");
}

/* What the command line left unset, from the job file: the same keys crun reads, each
 * error then naming FILE:LINE:COLUMN and the key. */
static int from_jobfile(struct status_opts *o, struct opt_val *v, struct crun_diag *d)
{
	int k, id;

	if (jobfile_load(&o->jf, v[ST_CONFIG].val, d) < 0) {
		return OPT_USAGE;
	}
	for (k = 0; k < ST_COUNT; k++) {
		const char *name = status_opts_table[k].name;

		id = opt_find_long(&cli_table, name, strlen(name));
		if (k == ST_CONFIG || v[k].set || id < 0 || o->jf.vals[id] == NULL) {
			continue;
		}
		opt_set(&v[k], o->jf.origins[id], strlen(o->jf.origins[id]), o->jf.vals[id]);
	}
	return OPT_OK;
}

/* --watch [SEC] and --timeout SEC. */
static int take_times(struct status_opts *o, const struct opt_val *v, struct crun_diag *d)
{
	char b[64];
	int64_t ms;

	o->watch = v[ST_WATCH].set;
	if (v[ST_WATCH].set && v[ST_WATCH].val != NULL) {
		if (parse_seconds_ms(v[ST_WATCH].val, 86400, &ms) < 0 || ms < 100) {
			return opt_fail(&v[ST_WATCH], d, "expected seconds (at least 0.1), got \"%s\"",
					opt_show(b, sizeof(b), v[ST_WATCH].val));
		}
		o->watch_s = (double)ms / 1000.0;
	}
	if (v[ST_TIMEOUT].set) {
		if (parse_seconds_ms(v[ST_TIMEOUT].val, 3600, &ms) < 0 || ms < 1) {
			return opt_fail(&v[ST_TIMEOUT], d, "expected seconds, got \"%s\"",
					opt_show(b, sizeof(b), v[ST_TIMEOUT].val));
		}
		o->timeout_ms = (int)ms;
	}
	return OPT_OK;
}

/* The command line (and --config's file) into @o. OPT_OK, or OPT_EXIT / OPT_USAGE printed. */
static int parse_args(int argc, char **argv, struct status_opts *o)
{
	static const int ids[OS_COUNT] = {
		[OS_ENDPOINT] = ST_ENDPOINT,	[OS_TOKEN_FILE] = ST_TOKEN_FILE,
		[OS_INSECURE] = ST_INSECURE,	[OS_TLS_CA] = ST_TLS_CA,
		[OS_TLS_CERT] = ST_TLS_CERT,	[OS_TLS_KEY] = ST_TLS_KEY,
		[OS_TLS_SERVER_NAME] = ST_TLS_SERVER_NAME, [OS_CONFIG] = ST_CONFIG,
	};
	struct opt_val v[ST_COUNT];
	struct opt_store_flags f;
	struct crun_diag d = {0};
	char b[64];
	int first, rc;

	memset(v, 0, sizeof(v));
	o->watch_s = 2.0;
	o->timeout_ms = 10000;
	rc = opt_read_argv(&status_table, v, argc, argv, &first, &d);
	if (rc == OPT_OK && v[ST_CONFIG].set) {
		rc = from_jobfile(o, v, &d);
	}
	if (rc == OPT_OK && (rc = take_times(o, v, &d)) == OPT_OK) {
		rc = opt_store_take(v, ids, &f, &d);
	}
	if (rc == OPT_OK) {
		opt_log_level(&v[ST_VERBOSE], &v[ST_QUIET]);
		o->endpoint = f.endpoint;
		o->token_file = f.token_file;
		o->insecure = f.insecure;
		o->tls_ca = f.tls_ca;
		o->tls_cert = f.tls_cert;
		o->tls_key = f.tls_key;
		o->tls_server_name = f.tls_server_name;
		o->run_id = v[ST_RDZV_ID].set ? v[ST_RDZV_ID].val : NULL;
		o->backend = v[ST_BACKEND].set ? v[ST_BACKEND].val : "c10d";
		o->json = v[ST_JSON].set;
		if (o->endpoint == NULL || o->run_id == NULL || o->run_id[0] == '\0') {
			rc = opt_fail(NULL, &d, "--rdzv-endpoint and --rdzv-id are required (see crun "
						"status --help)");
		} else if (strcmp(o->backend, "c10d") != 0 && strcmp(o->backend, "tcp") != 0 &&
			   strcmp(o->backend, "file") != 0 && strcmp(o->backend, "etcd") != 0 &&
			   strcmp(o->backend, "etcd-v2") != 0) {
			rc = opt_fail(&v[ST_BACKEND], &d, "unknown backend \"%s\" (use c10d, tcp, "
							   "file or etcd)",
				      opt_show(b, sizeof(b), o->backend));
		}
	}
	if (rc != OPT_OK) {
		opt_exit_status(&status_table, rc, &d);
	}
	return rc;
}

static int store_connect(const struct status_opts *o, struct crun_store **st)
{
	char ep[1024], prefix[300];
	bool etcd = strncmp(o->backend, "etcd", 4) == 0, tcp = !etcd && o->backend[0] != 'f';
	struct store_settings s = {
		.endpoint = ep,
		.insecure = o->insecure,
		.token_file = tcp ? o->token_file : NULL,
		/* Read only what this run's agents may: its scope, when the run id is one. */
		.scope = tcp && !o->insecure && token_scope_valid(o->run_id) ? o->run_id : NULL,
		.tls_ca = o->tls_ca,
		.tls_cert = o->tls_cert,
		.tls_key = o->tls_key,
		.tls_server_name = o->tls_server_name,
		.connect_timeout_ms = o->timeout_ms,
		.timeout_ms = o->timeout_ms,
	};
	struct crun_diag d = {0};
	struct store_conf c;
	int rc;

	if (etcd && strstr(o->endpoint, "://") == NULL) {
		snprintf(ep, sizeof(ep), "etcd://%s", o->endpoint);
	} else if (tcp && strchr(o->endpoint, ':') == NULL) {
		snprintf(ep, sizeof(ep), "%s:29400", o->endpoint); /* the agent's default port */
	} else {
		snprintf(ep, sizeof(ep), "%s", o->endpoint);
	}
	if (etcd) {
		snprintf(prefix, sizeof(prefix), "%s/", o->run_id); /* as the agent's */
		s.prefix = prefix;
		store_settings_etcd_env(&s);
	}
	/* The one token policy, as a client: --token-file, $CRUN_STORE_TOKEN, the default file
	 * when it exists (never created). */
	rc = store_conf_init(&c, &s,
			     tcp ? STORE_TOKEN_ENV | STORE_TOKEN_DEFAULT : STORE_TOKEN_FLAGS, &d);
	if (rc < 0) {
		/* A credential the user must fix: a usage error, as in every program of crun. */
		fprintf(stderr, "crun status: %s\n", d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
		store_conf_finish(&c);
		return STATUS_EXIT_USAGE;
	}
	rc = store_open_conf(&c, st, &d);
	store_conf_finish(&c);
	if (rc < 0) {
		fprintf(stderr, "crun status: %s\n", d.msg[0] != '\0' ? d.msg : crun_strerror(rc));
		/* -EACCES: our own credential file was refused (its mode or owner), not the store. */
		return rc == -EACCES ? STATUS_EXIT_USAGE : STATUS_EXIT_STORE;
	}
	return 0;
}

static void free_vals(void **vals, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(vals[i]);
	}
}

/* Read the job: its end record and every node record. Returns 0 or a store error. */
static int read_job(struct crun_store *st, const char *run_id, struct job_view *v)
{
	char k_end[300], k_nodes[300], (*keys)[600] = NULL;
	const char *ks[2] = {k_end, k_nodes};
	const char **kp = NULL;
	void *vals[2] = {NULL, NULL}, **rv = NULL;
	size_t lens[2], *rl = NULL, n = 0, i;
	char *line, *save = NULL, *index;
	int rc;

	if (rdzv_key_end(k_end, sizeof(k_end), run_id) < 0 ||
	    rdzv_key_status_index(k_nodes, sizeof(k_nodes), run_id) < 0) {
		return -ENAMETOOLONG;
	}
	rc = crun_store_multi_get(st, ks, 2, vals, lens);
	if (rc < 0) {
		return rc;
	}
	snprintf(v->end, sizeof(v->end), "%.*s", vals[0] != NULL ? (int)lens[0] : 0,
		 vals[0] != NULL ? (char *)vals[0] : "");
	index = vals[1];
	if (index != NULL) {
		index[lens[1] > 0 ? lens[1] - 1 : 0] = '\0'; /* the last '\n' */
		keys = calloc(STATUS_MAX_NODES, sizeof(*keys));
		kp = calloc(STATUS_MAX_NODES, sizeof(*kp));
		if (keys == NULL || kp == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		for (line = strtok_r(index, "\n", &save); line != NULL && n < STATUS_MAX_NODES;
		     line = strtok_r(NULL, "\n", &save)) {
			if (rdzv_key_status_node(keys[n], sizeof(keys[n]), run_id, line) < 0) {
				continue; /* a name no record can have */
			}
			kp[n] = keys[n];
			n++;
		}
	}
	if (n > 0) {
		rv = calloc(n, sizeof(*rv));
		rl = calloc(n, sizeof(*rl));
		v->nodes = calloc(n, sizeof(*v->nodes));
		if (rv == NULL || rl == NULL || v->nodes == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		rc = crun_store_multi_get(st, kp, n, rv, rl);
		if (rc < 0) {
			goto out;
		}
		for (i = 0; i < n; i++) {
			char rec[2048];

			if (rv[i] == NULL) {
				continue;
			}
			snprintf(rec, sizeof(rec), "%.*s", (int)rl[i], (char *)rv[i]);
			if (notify_status_parse(rec, &v->nodes[v->n]) == 0) {
				v->n++;
			}
		}
		free_vals(rv, n);
	}
out:
	free_vals(vals, 2);
	free(rv);
	free(rl);
	free(keys);
	free(kp);
	return rc;
}

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
	const struct node_record *x = a, *y = b;

	/* The newest round first, then by node rank, then by host. */
	if (x->round != y->round) {
		return y->round - x->round;
	}
	if (x->node_rank != y->node_rank) {
		return x->node_rank - y->node_rank;
	}
	return strcmp(x->host, y->host);
}

/* Decide the job's state from the rendezvous' end record and the node records. */
static void judge(struct job_view *v)
{
	bool live = false, failed = false;
	int i;

	if (v->n > 0) {
		qsort(v->nodes, (size_t)v->n, sizeof(*v->nodes), cmp_nodes);
		v->cur = &v->nodes[0];
	}
	for (i = 0; i < v->n; i++) {
		const struct node_record *r = &v->nodes[i];

		if (r->fail_exit >= 0 && (v->fail == NULL || r->fail_wall_ms > v->fail->fail_wall_ms)) {
			v->fail = r;
		}
		live |= !node_final(r) && !node_lost(v, r);
		failed |= r->state == NODE_FAILED || r->state == NODE_STOPPING;
	}
	if (strncmp(v->end, "done", 4) == 0) {
		v->state = "finished";
		v->exit = STATUS_EXIT_FINISHED;
	} else if (strncmp(v->end, "budget", 6) == 0) {
		v->state = "failed";
		v->exit = STATUS_EXIT_FAILED;
	} else if (live) {
		v->state = "running";
		v->exit = STATUS_EXIT_RUNNING;
	} else if (v->n > 0 && failed) {
		/* Every agent ended without the rendezvous recording an end: stopped or failed. */
		v->state = "failed";
		v->exit = STATUS_EXIT_FAILED;
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

static const char *shown_state(const struct job_view *v, const struct node_record *r)
{
	if (node_lost(v, r)) {
		return "lost";
	}
	return r->state == NODE_STOPPING ? "stopped" : node_state_name(r->state);
}

static void print_table(const struct status_opts *o, const struct job_view *v)
{
	const struct node_record *c = v->cur;
	char age[32], when[96];
	int i;

	printf("job %s: %s", o->run_id, v->state);
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
	printf("store: %s\n", o->endpoint);
	if (v->n > 0) {
		printf("\n%-5s %-24s %-8s %-10s %5s %-9s %s\n", "NODE", "HOST", "PID", "STATE",
		       "ROUND", "RANKS", "HEARTBEAT");
	}
	for (i = 0; i < v->n; i++) {
		const struct node_record *r = &v->nodes[i];
		char rank[16], ranks[32];
		int per = r->nodes > 0 ? r->world_size / r->nodes : 0;

		snprintf(rank, sizeof(rank), r->node_rank >= 0 ? "%d" : "-", r->node_rank);
		if (r->node_rank >= 0 && per > 0) {
			/* Uniform nproc per node: the ranks this node ran in its round. */
			snprintf(ranks, sizeof(ranks), "%d-%d", r->node_rank * per,
				 r->node_rank * per + per - 1);
		} else {
			snprintf(ranks, sizeof(ranks), "-");
		}
		fmt_age(v->now - r->hb_wall_ms, age, sizeof(age));
		printf("%-5s %-24s %-8ld %-10s %5d %-9s %s\n", rank, r->host, r->pid,
		       shown_state(v, r), r->round, ranks, age);
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
	if (v->n == 0 && v->exit == STATUS_EXIT_UNKNOWN) {
		printf("no agent of run \"%s\" has published its state in this store\n", o->run_id);
	}
}

/* @s as a JSON string on stdout: always valid JSON, whatever bytes a worker printed. */
static void json_str(const char *s)
{
	json_fput_str(stdout, s);
}

static void print_json(const struct status_opts *o, const struct job_view *v)
{
	const struct node_record *c = v->cur;
	char when[96];
	int i;

	printf("{\"run_id\":");
	json_str(o->run_id);
	printf(",\"state\":\"%s\",\"round\":%d,\"nodes\":%d,\"world_size\":%d,\"restarts\":%d,"
	       "\"max_restarts\":%d,\"restarts_left\":%d,\"end\":",
	       v->state, c != NULL ? c->round : -1, c != NULL ? c->nodes : 0,
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
		const struct node_record *r = &v->nodes[i];

		fmt_time(r->hb_wall_ms, when, sizeof(when));
		printf("%s{\"node_rank\":%d,\"host\":", i > 0 ? "," : "", r->node_rank);
		json_str(r->host);
		printf(",\"pid\":%ld,\"state\":\"%s\",\"round\":%d,\"restarts\":%d,"
		       "\"heartbeat\":\"%s\",\"heartbeat_age_s\":%.1f}",
		       r->pid, shown_state(v, r), r->round, r->restarts, when,
		       (double)(v->now - r->hb_wall_ms > 0 ? v->now - r->hb_wall_ms : 0) / 1000.0);
	}
	printf("]}\n");
}

static volatile sig_atomic_t interrupted;

static void on_int(int sig)
{
	interrupted = sig;
}

static int status_run(int argc, char **argv, struct status_opts *op);

int status_main(int argc, char **argv)
{
	struct status_opts o = {0};
	int code = status_run(argc, argv, &o);

	jobfile_finish(&o.jf);
	return code;
}

static int status_run(int argc, char **argv, struct status_opts *op)
{
	struct crun_store *st = NULL;
	struct job_view v;
	struct timespec ts;
	bool tty = isatty(STDOUT_FILENO);
	int rc, code;

	rc = parse_args(argc, argv, op);
	if (rc != OPT_OK) {
		return rc == OPT_EXIT ? 0 : STATUS_EXIT_USAGE;
	}
	rc = store_connect(op, &st);
	if (rc != 0) {
		return rc;
	}
	if (op->watch) {
		signal(SIGINT, on_int);
		signal(SIGTERM, on_int);
	}
	for (;;) {
		memset(&v, 0, sizeof(v));
		rc = read_job(st, op->run_id, &v);
		if (rc < 0) {
			fprintf(stderr, "crun status: reading run %s from %s: %s\n", op->run_id,
				op->endpoint, crun_strerror(rc));
			free(v.nodes);
			code = STATUS_EXIT_STORE;
			break;
		}
		v.now = crun_wall_ms();
		judge(&v);
		if (op->watch && tty && !op->json) {
			fputs("\033[H\033[2J", stdout); /* a terminal: redraw in place, as watch(1) */
		}
		if (op->json) {
			print_json(op, &v);
		} else {
			print_table(op, &v);
		}
		fflush(stdout);
		code = v.exit;
		free(v.nodes);
		/* --watch ends with the job: finished, failed, or never known. */
		if (!op->watch || code != STATUS_EXIT_RUNNING || interrupted) {
			break;
		}
		if (!op->json && !tty) {
			printf("\n");
		}
		ts.tv_sec = (time_t)op->watch_s;
		ts.tv_nsec = (long)((op->watch_s - (double)ts.tv_sec) * 1e9);
		nanosleep(&ts, NULL);
		if (interrupted) {
			break;
		}
	}
	crun_store_close(st);
	return code;
}
