/* SPDX-License-Identifier: MIT */
/* src/cli_check.c: crun --check: the job as it would start, each value with its source. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "src/cli_parser.h"

/*
 * After the whole command line, job file, PET_* variables and Slurm's values were read and
 * checked (everything cli_parse() does: GPUs counted, names resolved, the program found), print
 * the resolved job, one "key  value  source" line each, where the source is the spelling the
 * value came under ("--nproc-per-node", "PET_NNODES", "job.yaml:3:9: nnodes", Slurm's) or
 * "default", then every option that was set and is not shown above. Nothing starts: no store,
 * no rendezvous, no worker.
 */

static const char *source(const struct cli_parser *p, enum cli_opt_id id)
{
	return p->v[id].set ? p->v[id].origin : "default";
}

static void row(FILE *out, const char *key, const char *val, const char *src)
{
	fprintf(out, "%-22s %-40s %s\n", key, val, src);
}

static void row_ms(FILE *out, const char *key, int64_t ms, const char *src)
{
	char b[64];

	snprintf(b, sizeof(b), "%.3g s", (double)ms / 1000.0);
	row(out, key, b, src);
}

static const char *backend_name(enum rdzv_kind k)
{
	switch (k) {
	case RDZV_KIND_C10D:
		return "c10d";
	case RDZV_KIND_STATIC:
		return "static";
	case RDZV_KIND_FILE:
		return "file";
	case RDZV_KIND_ETCD:
		return "etcd";
	}
	return "?";
}

static void rendezvous_rows(const struct cli_parser *p, FILE *out)
{
	const struct job_spec *s = p->spec;
	const struct rdzv_conf *c = &s->rdzv;
	char b[512];

	if (s->min_nodes == s->max_nodes) {
		snprintf(b, sizeof(b), "%d", s->min_nodes);
	} else {
		snprintf(b, sizeof(b), "%d:%d", s->min_nodes, s->max_nodes);
	}
	row(out, "nnodes", b, source(p, O_NNODES));
	snprintf(b, sizeof(b), "%d%s", s->nproc_per_node, s->nproc_is_gpu ? " (GPUs counted)" : "");
	row(out, "nproc_per_node", b, source(p, O_NPROC));
	row(out, "rdzv_backend", s->standalone ? "c10d (--standalone)" : backend_name(s->rdzv_kind),
	    source(p, s->standalone ? O_STANDALONE : O_RDZV_BACKEND));
	if (s->rdzv_kind == RDZV_KIND_STATIC) {
		snprintf(b, sizeof(b), "%d", s->node_rank);
		row(out, "node_rank", b, source(p, O_NODE_RANK));
		snprintf(b, sizeof(b), "%s:%d", s->master_addr, s->master_port);
		row(out, "master", b, source(p, p->v[O_MASTER_PORT].set ? O_MASTER_PORT : O_MASTER_ADDR));
	} else {
		row(out, "rdzv_endpoint", s->rdzv_endpoint != NULL ? s->rdzv_endpoint : "-",
		    source(p, s->standalone ? O_STANDALONE : O_RDZV_ENDPOINT));
	}
	row(out, "rdzv_id", s->rdzv_id != NULL ? s->rdzv_id : "-",
	    source(p, s->standalone ? O_STANDALONE : O_RDZV_ID));
	row_ms(out, "join_timeout", c->join_timeout_ms, source(p, O_RDZV_CONF));
	row_ms(out, "last_call_timeout", c->last_call_timeout_ms, source(p, O_RDZV_CONF));
	row_ms(out, "heartbeat_timeout", c->heartbeat_timeout_ms, source(p, O_RDZV_CONF));
	row_ms(out, "keep_alive_interval", c->keep_alive_interval_ms, source(p, O_RDZV_CONF));
	row(out, "agent_store",
	    s->agent_store ? "on" : s->no_agent_store ? "off" : "torchrun's rule (crun(1))",
	    source(p, s->agent_store ? O_AGENT_STORE : O_NO_AGENT_STORE));
	row(out, "local_addr", s->advertise_addr != NULL ? s->advertise_addr : "(found at start)",
	    source(p, O_LOCAL_ADDR));
}

static void restart_rows(const struct cli_parser *p, FILE *out)
{
	const struct job_spec *s = p->spec;
	char b[64];

	snprintf(b, sizeof(b), "%d", s->max_restarts);
	row(out, "max_restarts", b, source(p, O_MAX_RESTARTS));
	row_ms(out, "restart_backoff", s->restart_backoff_ms, source(p, O_RESTART_BACKOFF));
	row_ms(out, "restart_backoff_max", s->restart_backoff_max_ms,
	       source(p, O_RESTART_BACKOFF_MAX));
	row_ms(out, "failure_window", s->failure_window_ms, source(p, O_MONITOR_INTERVAL));
	if (s->worker_timeout_ms > 0) {
		row_ms(out, "worker_timeout", s->worker_timeout_ms, source(p, O_WORKER_TIMEOUT));
	} else {
		row(out, "worker_timeout", "off", source(p, O_WORKER_TIMEOUT));
	}
	row_ms(out, "shutdown_timeout", s->shutdown_timeout_ms, source(p, O_SHUTDOWN_TIMEOUT));
	row(out, "exit_code", s->exit_code_torchrun ? "torchrun" : "crun", source(p, O_EXIT_CODE));
}

static void program_rows(const struct cli_parser *p, FILE *out)
{
	const struct job_spec *s = p->spec;
	char b[1024];
	size_t len = 0;
	int i;

	for (i = 0; i < s->nargs && len + 1 < sizeof(b); i++) {
		len += (size_t)snprintf(b + len, sizeof(b) - len, "%s%s", i > 0 ? " " : "",
					s->args[i]);
	}
	b[len < sizeof(b) ? len : sizeof(b) - 1] = '\0';
	row(out, "program",
	    s->program_kind == PROGRAM_MODULE ? "(python module)" :
	    s->program_kind == PROGRAM_PYTHON ? "(python script)" : "(executable)",
	    "command line");
	row(out, "  path", s->program, "command line");
	row(out, "  args", s->nargs > 0 ? b : "-", "command line");
	if (s->program_kind != PROGRAM_EXEC) {
		row(out, "  python", s->python_path != NULL ? s->python_path : s->python_exec,
		    source(p, O_PYTHON));
	}
}

static void security_rows(const struct cli_parser *p, FILE *out)
{
	const struct job_spec *s = p->spec;

	if (s->insecure) {
		row(out, "token", "none (--insecure)", source(p, O_INSECURE));
	} else {
		row(out, "token_file",
		    s->token_file != NULL ? s->token_file : "the default rule (crun(1), Security)",
		    source(p, O_TOKEN_FILE));
	}
	row(out, "tls", s->tls_cert != NULL ? s->tls_cert : s->tls_ca != NULL ? s->tls_ca : "off",
	    source(p, s->tls_cert != NULL ? O_TLS_CERT : O_TLS_CA));
	row(out, "log_dir", s->log_dir != NULL ? s->log_dir : "- (output to the console)",
	    source(p, O_LOG_DIR));
}

/* Whether an option's value is one of the rows above. */
static bool shown(enum cli_opt_id id)
{
	static const enum cli_opt_id ids[] = {
		O_NNODES, O_NPROC, O_RDZV_BACKEND, O_RDZV_ENDPOINT, O_RDZV_ID, O_RDZV_CONF,
		O_STANDALONE, O_NODE_RANK, O_MASTER_ADDR, O_MASTER_PORT, O_AGENT_STORE,
		O_NO_AGENT_STORE, O_LOCAL_ADDR, O_MAX_RESTARTS, O_RESTART_BACKOFF,
		O_RESTART_BACKOFF_MAX, O_MONITOR_INTERVAL, O_WORKER_TIMEOUT, O_SHUTDOWN_TIMEOUT,
		O_EXIT_CODE, O_PYTHON, O_INSECURE, O_TOKEN_FILE, O_TLS_CERT, O_TLS_CA, O_LOG_DIR,
		O_CHECK, O_CONFIG, O_VERBOSE, O_QUIET,
	};
	size_t i;

	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		if (ids[i] == id) {
			return true;
		}
	}
	return false;
}

void cli_check_print(const struct cli_parser *p, FILE *out)
{
	int id;

	fprintf(out, "# crun --check: the job as it would start on this node (nothing started)\n");
	if (p->v[O_CONFIG].set) {
		fprintf(out, "# job file: %s\n", p->v[O_CONFIG].val);
	}
	fprintf(out, "%-22s %-40s %s\n", "# key", "value", "source");
	rendezvous_rows(p, out);
	restart_rows(p, out);
	program_rows(p, out);
	security_rows(p, out);
	for (id = 0; id < O_COUNT; id++) {
		char key[64];

		if (!p->v[id].set || shown((enum cli_opt_id)id)) {
			continue;
		}
		snprintf(key, sizeof(key), "%s", cli_opts[id].name);
		row(out, key, !cli_opts[id].arg && !cli_opts[id].optval ? "true"
			      : p->v[id].val != NULL ? p->v[id].val : "(set)", p->v[id].origin);
	}
}
