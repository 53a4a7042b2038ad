/* SPDX-License-Identifier: MIT */
/* src/status.c: `crun status`: read a job's node records from its store; table, JSON, watch. */
#include <errno.h>
#include <getopt.h>
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
#include "src/common/parse.h"
#include "src/common/token.h"
#include "src/jobfile.h"
#include "src/status.h"

/* At most this many agents are listed (a record is one store key). */
#define STATUS_MAX_NODES 4096
/* A record whose heartbeat is older than this belongs to an agent that is gone. */
#define STATUS_LOST_MS (6 * NOTIFY_STATUS_HB_MS)

struct status_opts {
	const char *endpoint, *run_id, *backend, *token_file;
	const char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
	const char *config;   /* --config FILE.yaml: what the options above leave unset */
	struct jobfile jf;    /* its values, which the pointers above may borrow */
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

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: crun status --rdzv-endpoint HOST:PORT --rdzv-id ID [OPTIONS]\n"
		"Show a running or finished job's nodes, rounds, restarts and last failure, read\n"
		"from its rendezvous store.\n"
		"\n"
		"  --rdzv-endpoint EP   the job's store (HOST[:PORT], file:///PATH, etcd://HOST:PORT)\n"
		"  --rdzv-id ID         the job's run id\n"
		"  --rdzv-backend B     c10d (default), tcp, file or etcd\n"
		"  --token-file FILE    the store's token (default: $CRUN_TOKEN_FILE, then\n"
		"                       ~/.config/crun/token; $CRUN_STORE_TOKEN also works)\n"
		"  --insecure           connect without a token\n"
		"  --tls-ca FILE, --tls-cert FILE, --tls-key FILE, --tls-server-name NAME\n"
		"                       TLS to the store, as crun's own flags\n"
		"  --config FILE.yaml   take the options above from the job's file (crun.yaml(5));\n"
		"                       options given here win\n"
		"  --json               one JSON object instead of the table\n"
		"  --watch [SEC]        redraw every SEC seconds (default 2) until the job ends\n"
		"  --timeout SEC        how long to try to reach the store (default 10)\n"
		"  -h, --help           this help\n"
		"\n"
		"Exit status: 0 running, 1 failed, 2 usage error, 3 finished, 4 unknown run id (or\n"
		"every agent lost), 5 the store could not be reached or read.\n");
}

/* What the command line left unset, from the job file (the same keys crun reads). */
static int from_jobfile(struct status_opts *o)
{
	static const struct {
		enum cli_opt_id id;
		size_t off;
	} keys[] = {
		{O_RDZV_ENDPOINT, offsetof(struct status_opts, endpoint)},
		{O_RDZV_ID, offsetof(struct status_opts, run_id)},
		{O_RDZV_BACKEND, offsetof(struct status_opts, backend)},
		{O_TOKEN_FILE, offsetof(struct status_opts, token_file)},
		{O_TLS_CA, offsetof(struct status_opts, tls_ca)},
		{O_TLS_CERT, offsetof(struct status_opts, tls_cert)},
		{O_TLS_KEY, offsetof(struct status_opts, tls_key)},
		{O_TLS_SERVER_NAME, offsetof(struct status_opts, tls_server_name)},
	};
	struct crun_diag d = {0};
	const char **dst;
	size_t i;

	if (jobfile_load(&o->jf, o->config, &d) < 0) {
		fprintf(stderr, "crun status: %s\n", d.msg);
		return -EINVAL;
	}
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		dst = (const char **)((char *)o + keys[i].off);
		if (*dst == NULL && o->jf.vals[keys[i].id] != NULL) {
			*dst = o->jf.vals[keys[i].id];
		}
	}
	if (!o->insecure && o->jf.vals[O_INSECURE] != NULL) {
		o->insecure = strcmp(o->jf.vals[O_INSECURE], "1") == 0;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct status_opts *o)
{
	enum { S_EP = 256, S_ID, S_BACKEND, S_TOKEN, S_INSECURE, S_JSON, S_WATCH, S_TIMEOUT,
	       S_TLS_CA, S_TLS_CERT, S_TLS_KEY, S_TLS_NAME, S_CONFIG };
	static const struct option longopts[] = {
		{"rdzv-endpoint", required_argument, NULL, S_EP},
		{"rdzv-id", required_argument, NULL, S_ID},
		{"rdzv-backend", required_argument, NULL, S_BACKEND},
		{"token-file", required_argument, NULL, S_TOKEN},
		{"insecure", no_argument, NULL, S_INSECURE},
		{"json", no_argument, NULL, S_JSON},
		{"watch", optional_argument, NULL, S_WATCH},
		{"timeout", required_argument, NULL, S_TIMEOUT},
		{"tls-ca", required_argument, NULL, S_TLS_CA},
		{"tls-cert", required_argument, NULL, S_TLS_CERT},
		{"tls-key", required_argument, NULL, S_TLS_KEY},
		{"tls-server-name", required_argument, NULL, S_TLS_NAME},
		{"config", required_argument, NULL, S_CONFIG},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int64_t ms;
	int opt;

	o->watch_s = 2.0;
	o->timeout_ms = 10000;
	opterr = 0;
	optind = 1;
	/* "+": no permutation, so "--watch 5" can take the operand after it. */
	while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (opt) {
		case S_EP:
			o->endpoint = optarg;
			break;
		case S_ID:
			o->run_id = optarg;
			break;
		case S_BACKEND:
			o->backend = optarg;
			break;
		case S_TOKEN:
			o->token_file = optarg;
			break;
		case S_INSECURE:
			o->insecure = true;
			break;
		case S_TLS_CA:
			o->tls_ca = optarg;
			break;
		case S_TLS_CERT:
			o->tls_cert = optarg;
			break;
		case S_TLS_KEY:
			o->tls_key = optarg;
			break;
		case S_TLS_NAME:
			o->tls_server_name = optarg;
			break;
		case S_CONFIG:
			o->config = optarg;
			break;
		case S_JSON:
			o->json = true;
			break;
		case S_WATCH:
			o->watch = true;
			/* "--watch 5" as well as "--watch=5": status takes no operands. */
			if (optarg == NULL && optind < argc && argv[optind][0] != '-') {
				optarg = argv[optind++];
			}
			if (optarg != NULL) {
				if (parse_seconds_ms(optarg, 86400, &ms) < 0 || ms < 100) {
					fprintf(stderr, "crun status: --watch: expected seconds (at "
							"least 0.1), got \"%s\"\n", optarg);
					return -EINVAL;
				}
				o->watch_s = (double)ms / 1000.0;
			}
			break;
		case S_TIMEOUT:
			if (parse_seconds_ms(optarg, 3600, &ms) < 0 || ms < 1) {
				fprintf(stderr, "crun status: --timeout: expected seconds, got \"%s\"\n",
					optarg);
				return -EINVAL;
			}
			o->timeout_ms = (int)ms;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case ':':
			fprintf(stderr, "crun status: %s needs a value (see crun status --help)\n",
				argv[optind - 1]);
			return -EINVAL;
		default:
			fprintf(stderr, "crun status: unknown option %s (see crun status --help)\n",
				argv[optind - 1]);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "crun status: unexpected argument \"%s\"\n", argv[optind]);
		return -EINVAL;
	}
	if (o->config != NULL && from_jobfile(o) < 0) {
		return -EINVAL;
	}
	if (o->backend == NULL) {
		o->backend = "c10d";
	}
	if (o->endpoint == NULL || o->run_id == NULL || o->run_id[0] == '\0') {
		fprintf(stderr, "crun status: --rdzv-endpoint and --rdzv-id are required (see crun "
				"status --help)\n");
		return -EINVAL;
	}
	if (strcmp(o->backend, "c10d") != 0 && strcmp(o->backend, "tcp") != 0 &&
	    strcmp(o->backend, "file") != 0 && strcmp(o->backend, "etcd") != 0 &&
	    strcmp(o->backend, "etcd-v2") != 0) {
		fprintf(stderr, "crun status: --rdzv-backend: unknown backend \"%s\" (use c10d, tcp, "
				"file or etcd)\n", o->backend);
		return -EINVAL;
	}
	return 0;
}

static int store_connect(const struct status_opts *o, struct crun_store **st)
{
	struct crun_store_opts so = CRUN_STORE_OPTS_INIT;
	char ep[1024], prefix[300], path[4096], err[512];
	bool etcd = strncmp(o->backend, "etcd", 4) == 0, tcp = !etcd && o->backend[0] != 'f';
	struct crun_diag d = {0};
	int rc;

	if (etcd && strstr(o->endpoint, "://") == NULL) {
		snprintf(ep, sizeof(ep), "etcd://%s", o->endpoint);
	} else if (tcp && strchr(o->endpoint, ':') == NULL) {
		snprintf(ep, sizeof(ep), "%s:29400", o->endpoint); /* the agent's default port */
	} else {
		snprintf(ep, sizeof(ep), "%s", o->endpoint);
	}
	so.endpoint = ep;
	if (etcd) {
		snprintf(prefix, sizeof(prefix), "%s/", o->run_id); /* as agent_etcd_prefix() */
		so.prefix = prefix;
	}
	if (tcp && !o->insecure) {
		/* As the agent finds its token: --token-file, $CRUN_STORE_TOKEN, the default file. */
		so.token = getenv("CRUN_STORE_TOKEN");
		if (o->token_file != NULL) {
			so.token_file = o->token_file;
		} else if ((so.token == NULL || so.token[0] == '\0') &&
			   token_default_path(path, sizeof(path), &d) == 0 &&
			   access(path, F_OK) == 0) {
			so.token_file = path;
		}
		/* Read only what this run's agents may: its scope, when the run id is one. */
		so.scope = token_scope_valid(o->run_id) ? o->run_id : NULL;
	}
	so.connect_timeout_ms = o->timeout_ms;
	so.tls_ca = o->tls_ca;
	so.tls_cert = o->tls_cert;
	so.tls_key = o->tls_key;
	so.tls_server_name = o->tls_server_name;
	so.timeout_ms = o->timeout_ms;
	rc = crun_store_open(&so, st, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "crun status: %s\n", err[0] != '\0' ? err : crun_strerror(rc));
	}
	return rc;
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

static void json_str(const char *s)
{
	putchar('"');
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\') {
			printf("\\%c", ch);
		} else if (ch < 0x20) {
			printf("\\u%04x", ch);
		} else {
			putchar(ch);
		}
	}
	putchar('"');
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
	if (rc != 0) {
		return rc > 0 ? 0 : STATUS_EXIT_USAGE;
	}
	if (store_connect(op, &st) < 0) {
		return STATUS_EXIT_STORE;
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
