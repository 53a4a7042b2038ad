/* SPDX-License-Identifier: MIT */
/* src/status.c: `crun status`: read a job's node records from its store; table, JSON, watch. */
#include <errno.h>
#include <limits.h>
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
#include "rendezvous/store/etcd_endpoint.h"
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
#include "src/status_view.h"

/* At most this many agents are listed (a record is one store key). */
#define STATUS_MAX_NODES 4096

struct status_opts {
	const char *endpoint, *run_id, *backend, *token_file;
	const char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
	struct jobfile jf;    /* --config FILE.yaml's values, which the pointers above may borrow */
	bool insecure, json, watch, history;
	double watch_s;
	int timeout_ms;
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
	ST_HISTORY,
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
	[ST_RDZV_ID] = {"rdzv-id", 0, true, false, "ID", "the job's run id (none: list the runs)", NULL},
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
	[ST_HISTORY] = {"history", 0, false, false, NULL,
			"every event of every node (the table shows the last 10)", NULL},
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
		   "       crun status [--rdzv-id ID] [--json]\n"
		   "       crun status --rdzv-endpoint HOST:PORT [--json]\n"
		   "Show a running or finished job's nodes, rounds, restarts, last failure and\n"
		   "history, read from its rendezvous store, or from the run records its agents left\n"
		   "on this machine when the store is gone ($CRUN_STATE_DIR/runs, see crun(1)).\n"
		   "Without --rdzv-id: the runs recorded on this machine, or with --rdzv-endpoint\n"
		   "the runs that store serves (a shared crun-rdzvd), one line each.\n");
	opt_print_options(f, &status_table);
	fprintf(f, "\nExit status: 0 running, 1 failed, 2 usage error (a credential file others\n"
		   "can read included), 3 finished, 4 unknown run id (or every agent lost), 5 the\n"
		   "store could not be reached or read, 6 cancelled (every agent was stopped by a\n"
		   "signal).\n");
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
		o->history = v[ST_HISTORY].set;
		if (o->run_id != NULL && o->run_id[0] == '\0') {
			rc = opt_fail(&v[ST_RDZV_ID], &d, "an empty run id");
		} else if (o->endpoint != NULL && o->run_id == NULL &&
			   strcmp(o->backend, "c10d") != 0 && strcmp(o->backend, "tcp") != 0) {
			rc = opt_fail(NULL, &d, "--rdzv-endpoint without --rdzv-id lists the runs of "
						"a crun store (c10d, tcp); a %s store needs --rdzv-id",
				      opt_show(b, sizeof(b), o->backend));
		} else if (strncmp(o->backend, "etcd", 4) == 0 &&
			   etcd_protocol(etcd_named_protocol(o->endpoint),
					 o->tls_ca != NULL || o->tls_cert != NULL) ==
				   ETCD_PROTO_CONFLICT) {
			rc = opt_fail(o->tls_ca != NULL ? &v[ST_TLS_CA] : &v[ST_TLS_CERT], &d,
				      "the etcd members are reached over http (%s names it), which "
				      "has no certificate to verify: give https:// members or no "
				      "scheme",
				      opt_show(b, sizeof(b), o->endpoint));
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

/* Whether @rc from opening the store means nothing answers there (the job's store is gone),
 * rather than a store that refused us. */
static bool store_unreachable(int rc)
{
	return rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == -EHOSTUNREACH ||
	       rc == -ENETUNREACH || rc == -ECONNRESET || rc == -EAGAIN;
}

/* Connect; *@gone: it failed because nothing answers there. 0 or an exit status (said). */
static int store_connect(const struct status_opts *o, struct crun_store **st, bool *gone)
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
		/* No scheme: https with --tls-* files (the agent's rule, src/cli_etcd.c). */
		snprintf(ep, sizeof(ep), "%s%s",
			 etcd_protocol(ETCD_PROTO_NONE, o->tls_ca != NULL || o->tls_cert != NULL) ==
					 ETCD_PROTO_HTTPS
				 ? "etcd+https://"
				 : "etcd://",
			 o->endpoint);
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
	*gone = rc < 0 && store_unreachable(rc);
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

/* Each node's record and history from the values read for them (2 per node). */
static void take_nodes(struct job_view *v, void **rv, const size_t *rl, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct run_record *nr = &v->nodes[v->n];
		char rec[2048], *line, *save = NULL;
		int cap;

		if (rv[2 * i] == NULL) {
			continue;
		}
		snprintf(rec, sizeof(rec), "%.*s", (int)rl[2 * i], (char *)rv[2 * i]);
		if (notify_status_parse(rec, &nr->last) < 0) {
			continue;
		}
		nr->rank_offset = -1;
		v->n++;
		if (rv[2 * i + 1] == NULL) {
			continue;
		}
		((char *)rv[2 * i + 1])[rl[2 * i + 1] > 0 ? rl[2 * i + 1] - 1 : 0] = '\0';
		cap = 1;
		for (line = rv[2 * i + 1]; *line != '\0'; line++) {
			cap += *line == '\n';
		}
		nr->ev = calloc((size_t)cap, sizeof(*nr->ev));
		for (line = strtok_r(rv[2 * i + 1], "\n", &save); nr->ev != NULL && line != NULL &&
		     nr->n < cap; line = strtok_r(NULL, "\n", &save)) {
			nr->n += notify_event_parse(line, &nr->ev[nr->n]) == 0;
		}
	}
}

/* Read the job: its end record and every node's record and history. 0 or a store error. */
int status_read_job(struct crun_store *st, const char *run_id, struct job_view *v)
{
	char k_end[300], k_nodes[300], (*keys)[600] = NULL;
	const char *ks[2] = {k_end, k_nodes};
	const char **kp = NULL;
	void *vals[2] = {NULL, NULL}, **rv = NULL;
	size_t lens[2], *rl = NULL, n = 0;
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
		keys = calloc(2 * STATUS_MAX_NODES, sizeof(*keys));
		kp = calloc(2 * STATUS_MAX_NODES, sizeof(*kp));
		if (keys == NULL || kp == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		for (line = strtok_r(index, "\n", &save); line != NULL && n < STATUS_MAX_NODES;
		     line = strtok_r(NULL, "\n", &save)) {
			if (rdzv_key_status_node(keys[2 * n], sizeof(keys[0]), run_id, line) < 0 ||
			    rdzv_key_status_hist(keys[2 * n + 1], sizeof(keys[0]), run_id, line) < 0) {
				continue; /* a name no record can have */
			}
			kp[2 * n] = keys[2 * n];
			kp[2 * n + 1] = keys[2 * n + 1];
			n++;
		}
	}
	if (n > 0) {
		rv = calloc(2 * n, sizeof(*rv));
		rl = calloc(2 * n, sizeof(*rl));
		v->nodes = calloc(n, sizeof(*v->nodes));
		if (rv == NULL || rl == NULL || v->nodes == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		rc = crun_store_multi_get(st, kp, 2 * n, rv, rl);
		if (rc < 0) {
			goto out;
		}
		take_nodes(v, rv, rl, n);
		free_vals(rv, 2 * n);
	}
out:
	free_vals(vals, 2);
	free(rv);
	free(rl);
	free(keys);
	free(kp);
	return rc;
}

/* This machine's run records of @run_id (every node's that wrote here), or of every run
 * (@run_id NULL: one each). Returns 0 or STATUS_EXIT_STORE (said). */
static int load_records(const char *run_id, char *dir, size_t cap, struct run_record **r, int *n)
{
	struct crun_diag d = {0};

	*r = NULL;
	*n = 0;
	if (run_record_dir(dir, cap, false, &d) < 0 ||
	    run_record_read_all(dir, run_id, r, n, &d) < 0) {
		fprintf(stderr, "crun status: %s\n", d.msg);
		return STATUS_EXIT_STORE;
	}
	return 0;
}

/* Show the job from its run records: the store is gone, or none was named. */
static int show_records(const struct status_opts *o, const char *dir, struct run_record *r, int n)
{
	struct job_view v = {.run_id = o->run_id, .nodes = r, .n = n, .from_records = true};

	snprintf(v.source, sizeof(v.source), "run records in %s", dir);
	v.now = crun_wall_ms();
	job_view_judge(&v);
	if (o->json) {
		job_view_print_json(&v);
	} else {
		job_view_print_table(&v, o->history);
	}
	return v.exit;
}

void status_free_view(struct job_view *v)
{
	run_record_free_all(v->nodes, v->n);
	v->nodes = NULL;
	v->n = 0;
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
	struct run_record *recs = NULL;
	char recdir[PATH_MAX];
	struct job_view v;
	struct timespec ts;
	bool tty = isatty(STDOUT_FILENO), gone = false;
	int rc, code, nrec = 0;

	rc = parse_args(argc, argv, op);
	if (rc != OPT_OK) {
		return rc == OPT_EXIT ? 0 : STATUS_EXIT_USAGE;
	}
	if (op->run_id == NULL && op->endpoint != NULL) {
		/* A store named, no run: the runs it serves (a shared crun-rdzvd). */
		rc = store_connect(op, &st, &gone);
		if (rc == 0) {
			rc = status_list_store(st, op->endpoint, op->json);
			crun_store_close(st);
		}
		return rc;
	}
	rc = load_records(op->run_id, recdir, sizeof(recdir), &recs, &nrec);
	if (rc != 0 || op->run_id == NULL) {
		/* No run named: the runs this machine has records of, as sacct(1) lists jobs. */
		if (rc == 0) {
			runs_print(recdir, recs, nrec, op->json);
		}
		run_record_free_all(recs, nrec);
		return rc;
	}
	if (op->endpoint == NULL) {
		code = show_records(op, recdir, recs, nrec);
		run_record_free_all(recs, nrec);
		return code;
	}
	if (nrec > 0 && op->timeout_ms > 3000) {
		op->timeout_ms = 3000; /* records of the run are here: a gone store is likely */
	}
	rc = store_connect(op, &st, &gone);
	if (rc != 0) {
		code = gone && nrec > 0 ? show_records(op, recdir, recs, nrec) : rc;
		run_record_free_all(recs, nrec);
		return code;
	}
	if (op->watch) {
		signal(SIGINT, on_int);
		signal(SIGTERM, on_int);
	}
	for (;;) {
		memset(&v, 0, sizeof(v));
		v.run_id = op->run_id;
		snprintf(v.source, sizeof(v.source), "store %s", op->endpoint);
		rc = status_read_job(st, op->run_id, &v);
		if ((rc < 0 || (v.n == 0 && v.end[0] == '\0')) && nrec > 0) {
			/* The store lost the job (or forgot it): what its agents left here. */
			status_free_view(&v);
			code = show_records(op, recdir, recs, nrec);
			break;
		}
		if (rc < 0) {
			fprintf(stderr, "crun status: reading run %s from %s: %s\n", op->run_id,
				op->endpoint, crun_strerror(rc));
			status_free_view(&v);
			code = STATUS_EXIT_STORE;
			break;
		}
		v.now = crun_wall_ms();
		job_view_judge(&v);
		if (op->watch && tty && !op->json) {
			fputs("\033[H\033[2J", stdout); /* a terminal: redraw in place, as watch(1) */
		}
		if (op->json) {
			job_view_print_json(&v);
		} else {
			job_view_print_table(&v, op->history);
		}
		fflush(stdout);
		code = v.exit;
		status_free_view(&v);
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
	run_record_free_all(recs, nrec);
	return code;
}
