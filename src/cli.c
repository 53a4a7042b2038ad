/* SPDX-License-Identifier: MIT */
/* src/cli.c: the crun command line: read argv and the PET_* variables, then check every flag. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>

#include "config.h"
#include "src/cli.h"
#include "src/cli_parser.h"
#include "src/common/net.h"
#include "src/jobfile.h"

#define RESTARTS_MAX 1000000

int cli_fail(struct cli_parser *p, enum cli_opt_id id, const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	/* The engine's one error form: "ORIGIN: what". */
	opt_fail(id == O_COUNT ? NULL : &p->v[id], p->d, "%s", what);
	return CLI_USAGE;
}

int cli_oom(struct cli_parser *p)
{
	diag_set(p->d, -ENOMEM, "out of memory");
	return CLI_USAGE;
}

int cli_set_str(char **dst, const char *src)
{
	char *c = strdup(src);

	if (c == NULL) {
		return -ENOMEM;
	}
	free(*dst);
	*dst = c;
	return 0;
}

/* ---- command line and environment ---- */

/* torchrun reads every flag from PET_<NAME> too (PET_NPROC_PER_NODE); the command line wins. */
static int read_argv(struct cli_parser *p, int argc, char **argv)
{
	int first, rc;

	opt_read_env(&cli_table, p->v);
	rc = opt_read_argv(&cli_table, p->v, argc, argv, &first, p->d);
	if (rc != OPT_OK) {
		return rc;
	}
	opt_log_level(&p->v[O_VERBOSE], &p->v[O_QUIET]);
	if (first >= argc && p->v[O_CONFIG].set) {
		return CLI_OK; /* the job file may name the program */
	}
	if (first >= argc) {
		return cli_fail(p, O_COUNT,
				"missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM "
				"[ARGS...]; see crun --help)");
	}
	p->program = argv[first];
	p->args = argv + first + 1;
	p->nargs = argc - first - 1;
	return CLI_OK;
}

/* ---- the job file ---- */

/*
 * --config FILE.yaml: the file's values fill in what neither the command line nor a PET_
 * variable set, its program and args when the command line names no program, and its env is
 * exported here, before anything reads the environment, so that the agent and every worker see
 * it (the file wins over the inherited environment: it is the job's own setting).
 */
static int apply_jobfile(struct cli_parser *p, struct jobfile *jf)
{
	char b[64];
	size_t i;
	int k;

	if (!p->v[O_CONFIG].set) {
		return 0;
	}
	if (*p->v[O_CONFIG].val == '\0') {
		return cli_fail(p, O_CONFIG, "empty file name");
	}
	if (jobfile_load(jf, p->v[O_CONFIG].val, p->d) < 0) {
		return CLI_USAGE; /* @d says what and where */
	}
	p->jf = jf;
	for (k = 0; k < O_COUNT; k++) {
		if (jf->vals[k] != NULL && !p->v[k].set) {
			opt_set(&p->v[k], jf->origins[k], strlen(jf->origins[k]), jf->vals[k]);
		}
	}
	if (p->program == NULL && jf->program != NULL) {
		p->program = jf->program;
		p->args = jf->args;
		p->nargs = jf->nargs;
	}
	if (p->program == NULL) {
		return cli_fail(p, O_COUNT,
				"missing PROGRAM: neither the command line nor %s names one "
				"(program: in the job file)",
				opt_show(b, sizeof(b), p->v[O_CONFIG].val));
	}
	for (i = 0; i < jf->nenv; i++) {
		if (setenv(jf->env[i].key, jf->env[i].val, 1) < 0) {
			return cli_oom(p);
		}
	}
	return 0;
}

/* ---- putting it together ---- */

static int check_static_and_standalone(struct cli_parser *p, bool standalone)
{
	struct job_spec *s = p->spec;
	bool dynamic;

	if (standalone) {
		if (s->max_nodes != 1) {
			return cli_fail(p, O_STANDALONE, "runs one node, but --nnodes is %d:%d",
					s->min_nodes, s->max_nodes);
		}
		if (p->v[O_NODE_RANK].set && strncmp(p->v[O_NODE_RANK].origin, "PET_", 4) != 0) {
			return cli_fail(p, O_NODE_RANK, "cannot be combined with --standalone");
		}
		p->v[O_NODE_RANK].set = false;
		return 0;
	}
	dynamic = s->rdzv_kind != RDZV_KIND_STATIC;
	/*
	 * Schedulers export PET_NODE_RANK for every job; like torchrun, a dynamic backend ignores
	 * it. Only a --node-rank typed on this command line is a contradiction.
	 */
	if (p->v[O_NODE_RANK].set && dynamic && strncmp(p->v[O_NODE_RANK].origin, "PET_", 4) == 0) {
		p->v[O_NODE_RANK].set = false;
	}
	if (p->v[O_NODE_RANK].set && dynamic) {
		return cli_fail(p, O_NODE_RANK,
				"only for --rdzv-backend static (%s assigns node ranks itself)",
				s->rdzv_kind == RDZV_KIND_FILE   ? "file"
				: s->rdzv_kind == RDZV_KIND_ETCD ? "etcd"
								 : "c10d");
	}
	if (!dynamic && s->min_nodes != s->max_nodes) {
		return cli_fail(p, O_NNODES,
				"static rendezvous needs a fixed node count, got %d:%d "
				"(use --rdzv-backend c10d for elastic jobs)",
				s->min_nodes, s->max_nodes);
	}
	return 0;
}

/*
 * --virtual-local-rank gives worker i the i-th entry of CUDA_VISIBLE_DEVICES as its only device.
 * With fewer entries than workers some worker would get a device the user hid (or none): refuse
 * before anything starts rather than pick one.
 */
static int check_virtual_devices(struct cli_parser *p)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	const char *q;
	int n = 0;

	if (!p->spec->virtual_local_rank || cvd == NULL) {
		return 0;
	}
	for (q = cvd; *q != '\0';) {
		size_t len = strcspn(q, ",");

		if (len == 0) {
			break; /* CUDA stops at the first empty entry too */
		}
		n++;
		q += len;
		if (*q == ',') {
			q++;
		}
	}
	if (n < p->spec->nproc_per_node) {
		return cli_fail(
			p, O_VIRTUAL_LOCAL_RANK,
			"%d workers per node, but CUDA_VISIBLE_DEVICES=\"%.64s\" lists %d device%s",
			p->spec->nproc_per_node, cvd, n, n == 1 ? "" : "s");
	}
	return 0;
}

/* --standalone: torchrun picks the rendezvous itself and ignores the user's. */
static int take_standalone(struct cli_parser *p)
{
	struct job_spec *spec = p->spec;

	if (p->v[O_RDZV_BACKEND].set || p->v[O_RDZV_ENDPOINT].set || p->v[O_RDZV_ID].set) {
		fprintf(stderr, "crun: warning: --standalone ignores --rdzv-backend, "
				"--rdzv-endpoint and --rdzv-id\n");
	}
	p->v[O_RDZV_ENDPOINT].set = false;
	p->v[O_RDZV_ID].set = false;
	spec->rdzv_kind = RDZV_KIND_C10D;
	free(spec->rdzv_id);
	spec->rdzv_id = NULL;
	if (cli_random_run_id(&spec->rdzv_id) < 0 ||
	    cli_set_str(&spec->rdzv_endpoint, "127.0.0.1:0") < 0 ||
	    cli_set_str(&spec->rdzv_host, "127.0.0.1") < 0) {
		return cli_oom(p);
	}
	spec->rdzv_port = 0;
	return 0;
}

/* The master, the node rank, the endpoint, the run id and --rdzv-conf, in that order. */
static int take_rendezvous(struct cli_parser *p, bool standalone)
{
	struct job_spec *spec = p->spec;
	char b[64];
	int rc;

	if (p->v[O_MASTER_ADDR].set) {
		if ((rc = cli_text_value(p, O_MASTER_ADDR, 255, &spec->master_addr)) != 0) {
			return rc;
		}
		if (!net_valid_host(spec->master_addr)) {
			return cli_fail(p, O_MASTER_ADDR,
					"expected a host name or IP address, got \"%s\"",
					opt_show(b, sizeof(b), spec->master_addr));
		}
	}
	if (p->v[O_MASTER_PORT].set) {
		if ((rc = cli_int_value(p, O_MASTER_PORT, 0, 65535, &spec->master_port)) != 0) {
			return rc;
		}
		if (spec->master_port == 0 && spec->max_nodes > 1) {
			return cli_fail(p, O_MASTER_PORT, "port 0 cannot be found by other nodes");
		}

	}
	if (spec->rdzv_kind == RDZV_KIND_STATIC) {
		spec->node_rank = 0;
		if (p->v[O_NODE_RANK].set &&
		    (rc = cli_int_value(p, O_NODE_RANK, 0, spec->max_nodes - 1,
					&spec->node_rank)) != 0) {
			return rc;
		}
	}
	if (!standalone && ((rc = cli_do_endpoint(p)) != 0 || (rc = cli_do_rdzv_id(p)) != 0)) {
		return rc;
	}
	/* Static multi-node jobs keep crun's store one port above the master's (agent/agent.c). */
	if (spec->rdzv_kind == RDZV_KIND_STATIC && spec->max_nodes > 1 &&
	    spec->master_port == 65535) {
		return cli_fail(
			p, p->v[O_RDZV_ENDPOINT].set ? O_RDZV_ENDPOINT : O_MASTER_PORT,
			"port 65535 leaves no port for the store (it uses the master port + 1)");
	}
	if ((rc = cli_do_rdzv_conf(p)) != 0 || (rc = cli_etcd_finish(p)) != 0) {
		return rc;
	}
	return 0;
}

/* Restarts, timeouts, signals, the role and the torchrun-compatible flags. */
static int take_restarts(struct cli_parser *p)
{
	struct job_spec *spec = p->spec;
	char b[64];
	bool yes;
	int rc;

	if (p->v[O_MAX_RESTARTS].set &&
	    (rc = cli_int_value(p, O_MAX_RESTARTS, 0, RESTARTS_MAX, &spec->max_restarts)) != 0) {
		return rc;
	}
	if ((rc = cli_do_restart_waits(p)) != 0) {
		return rc;
	}
	if (p->v[O_MONITOR_INTERVAL].set) {
		int64_t ms;

		if ((rc = cli_seconds_value(p, O_MONITOR_INTERVAL, &ms)) != 0) {
			return rc;
		}
		spec->monitor_interval_s = (double)ms / 1000.0;
		spec->failure_window_ms = ms < 5000 ? ms : 5000;
	}
	if (p->v[O_START_METHOD].set && strcmp(p->v[O_START_METHOD].val, "spawn") != 0 &&
	    strcmp(p->v[O_START_METHOD].val, "fork") != 0 &&
	    strcmp(p->v[O_START_METHOD].val, "forkserver") != 0) {
		return cli_fail(p, O_START_METHOD,
				"expected spawn, fork or forkserver, got \"%s\"",
				opt_show(b, sizeof(b), p->v[O_START_METHOD].val));
	}
	if (p->v[O_LOGS_SPECS].set && strcmp(p->v[O_LOGS_SPECS].val, "default") != 0) {
		return cli_fail(p, O_LOGS_SPECS,
				"Python LogsSpecs plugins are not supported (only "
				"\"default\"; use --log-dir and --log-prefix)");
	}
	if (p->v[O_SHUTDOWN_TIMEOUT].set &&
	    (rc = cli_seconds_value(p, O_SHUTDOWN_TIMEOUT, &spec->shutdown_timeout_ms)) != 0) {
		return rc;
	}
	if ((rc = cli_do_signals(p)) != 0) {
		return rc;
	}
	if (p->v[O_ROLE].set && (rc = cli_text_value(p, O_ROLE, 128, &spec->role)) != 0) {
		return rc;
	}
	if ((rc = cli_flag_value(p, O_VIRTUAL_LOCAL_RANK, &yes)) != 0) {
		return rc;
	}
	spec->virtual_local_rank = yes;
	if ((rc = cli_do_local_rank_arg(p)) != 0 || (rc = cli_do_exit_code(p)) != 0) {
		return rc;
	}
	return 0;
}

/* Output, the store's option group, stdio, the program, the address and the GPU count. */
static int take_workers(struct cli_parser *p, bool count_later)
{
	struct job_spec *spec = p->spec;
	struct jobfile *jf = p->jf;
	struct crun_diag *d = p->d;
	int rc;

	if ((rc = cli_do_log_dir(p)) != 0 || (rc = cli_do_metrics(p)) != 0 ||
	    (rc = cli_do_store(p)) != 0 ||
	    (rc = cli_do_std_map(p, O_REDIRECTS, spec->redirects)) != 0 ||
	    (rc = cli_do_std_map(p, O_TEE, spec->tee)) != 0 || (rc = cli_do_log_prefix(p)) != 0 ||
	    (rc = cli_do_torch2(p)) != 0) {
		return rc;
	}
	if ((rc = cli_etcd_tls(p)) != 0) {
		return rc;
	}
	/* PyTorch's TCPStore client cannot speak TLS: with TLS the workers keep rank 0's own
	 * TCPStore, as with --no-agent-store (docs/security.md). */
	if (spec->tls_ca != NULL || spec->tls_cert != NULL) {
		if (spec->agent_store) {
			return cli_fail(p, O_AGENT_STORE,
					"PyTorch's TCPStore clients cannot speak TLS, which the "
					"store requires here (--tls-ca/--tls-cert): their store "
					"stays rank 0's own");
		}
		spec->no_agent_store = true;
	}
	if ((rc = cli_do_stdio(p)) != 0) {
		return rc;
	}
	if ((rc = cli_do_program(p)) != 0) {
		if (p->jf != NULL && p->program == jf->program && d->code != -ENOMEM) {
			char msg[sizeof(d->msg)], at[sizeof(jf->program_origin)];
			size_t n = strlen(jf->program_origin), k = strlen(": program");

			/* say where the job file named it, naming "program" once */
			memcpy(msg, d->msg, sizeof(msg));
			snprintf(at, sizeof(at), "%s", jf->program_origin);
			if (strncmp(msg, "program", 7) == 0 && n > k &&
			    strcmp(at + n - k, ": program") == 0) {
				at[n - k] = '\0';
			}
			diag_set(d, d->code, "%.190s: %.300s", at, msg);
		}
		return rc;
	}
	if ((rc = cli_do_local_addr(p)) != 0) {
		return rc;
	}
	if (count_later && (rc = cli_count_nproc(p)) != 0) {
		return rc;
	}
	/* Only now is the world's size known: a rank past it would leave stdin unread. */
	if (spec->stdin_rank >= 0 &&
	    (long long)spec->stdin_rank >= (long long)spec->max_nodes * spec->nproc_per_node) {
		return cli_fail(p, O_STDIN,
				"rank %d is not in the job: %d node%s x --nproc-per-node %d "
				"makes ranks 0..%lld",
				spec->stdin_rank, spec->max_nodes, spec->max_nodes == 1 ? "" : "s",
				spec->nproc_per_node,
				(long long)spec->max_nodes * spec->nproc_per_node - 1);
	}
	if ((rc = cli_do_ranks_filter(p)) != 0) {
		return rc;
	}
	if ((rc = check_virtual_devices(p)) != 0) {
		return rc;
	}
	return 0;
}

static int parse_all(int argc, char **argv, struct job_spec *spec, struct crun_diag *d,
		     struct jobfile *jf)
{
	struct cli_parser p;
	bool standalone, count_later;
	int rc;

	memset(&p, 0, sizeof(p));
	p.spec = spec;
	p.d = d;
	if (jobspec_defaults(spec) < 0) {
		return cli_oom(&p);
	}
	rc = read_argv(&p, argc, argv);
	if (rc != CLI_OK) {
		return rc;
	}
	if ((rc = apply_jobfile(&p, jf)) != 0) {
		return rc;
	}
	/* Inside a Slurm step, Slurm's values fill in what the command line and file left out. */
	if ((rc = cli_slurm_setup(&p)) != 0) {
		return rc;
	}

	/* Cheap checks first, in a fixed order; counting GPUs and resolving names come last. */
	if ((rc = cli_do_nnodes(&p)) != 0 || (rc = cli_do_nproc(&p, &count_later)) != 0 ||
	    (rc = cli_do_backend(&p)) != 0 ||
	    (rc = cli_flag_value(&p, O_STANDALONE, &standalone)) != 0) {
		return rc;
	}
	spec->standalone = standalone;
	if ((rc = cli_flag_value(&p, O_NO_AGENT_STORE, &spec->no_agent_store)) != 0 ||
	    (rc = cli_flag_value(&p, O_AGENT_STORE, &spec->agent_store)) != 0) {
		return rc;
	}
	if (spec->agent_store && spec->no_agent_store) {
		return cli_fail(&p, O_AGENT_STORE, "cannot be combined with %s: choose one",
				p.v[O_NO_AGENT_STORE].origin);
	}
	if (standalone && (rc = take_standalone(&p)) != 0) {
		return rc;
	}
	if ((rc = check_static_and_standalone(&p, standalone)) != 0 ||
	    (rc = take_rendezvous(&p, standalone)) != 0 || (rc = take_restarts(&p)) != 0 ||
	    (rc = take_workers(&p, count_later)) != 0) {
		return rc;
	}
	/* What the rendezvous needs, pointing into the spec (valid until jobspec_finish()). */
	spec->rdzv.run_id = spec->rdzv_id;
	spec->rdzv.min_nodes = spec->min_nodes;
	spec->rdzv.max_nodes = spec->max_nodes;
	spec->rdzv.node_rank = spec->rdzv_kind == RDZV_KIND_STATIC ? spec->node_rank : -1;
	spec->rdzv.local_world_size = spec->nproc_per_node;
	spec->rdzv.advertise_addr = spec->advertise_addr;
	spec->rdzv.max_restarts = spec->max_restarts;
	if (p.v[O_CHECK].set) {
		cli_check_print(&p, stdout);
		return CLI_EXIT;
	}
	return CLI_OK;
}

int cli_parse_diag(int argc, char **argv, struct job_spec *spec, struct crun_diag *d)
{
	struct crun_diag local = {0};
	struct jobfile jf;
	int rc;

	memset(&jf, 0, sizeof(jf));
	rc = parse_all(argc, argv, spec, d != NULL ? d : &local, &jf);
	jobfile_finish(&jf); /* the spec holds copies of everything it keeps */
	return rc;
}

int cli_parse(int argc, char **argv, struct job_spec *spec)
{
	struct crun_diag d = {0};
	int rc;

	rc = cli_parse_diag(argc, argv, spec, &d);
	if (rc == CLI_USAGE) {
		fprintf(stderr, "crun: %s\n", d.msg);
	}
	return rc;
}
