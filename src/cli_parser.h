/* SPDX-License-Identifier: MIT */
/* src/cli_parser.h: what the command-line files share: the option table and the parser state. */
#ifndef CRUN_SRC_CLI_PARSER_H
#define CRUN_SRC_CLI_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "agent/jobspec.h"
#include "src/common/diag.h"
#include "src/opt.h"

/*
 * Private to src/cli*.c and src/program.c (and src/status.c, which looks its options up in crun's
 * table to read a job file's keys). cli.c reads argv and PET_* and checks the flags in
 * order; cli_options.c holds the table and --help; cli_flags.c checks each flag's value;
 * cli_rdzv_conf.c the --rdzv-conf keys.
 */

enum cli_opt_id {
	O_NNODES,
	O_NPROC,
	O_NODE_RANK,
	O_MASTER_ADDR,
	O_MASTER_PORT,
	O_RDZV_BACKEND,
	O_RDZV_ENDPOINT,
	O_RDZV_ID,
	O_RDZV_CONF,
	O_STANDALONE,
	O_NO_AGENT_STORE,
	O_AGENT_STORE,
	O_MAX_RESTARTS,
	O_RESTART_BACKOFF,
	O_RESTART_BACKOFF_MAX,
	O_WORKER_TIMEOUT,
	O_MONITOR_INTERVAL,
	O_START_METHOD,
	O_EVENT_LOG_HANDLER,
	O_SHUTDOWN_TIMEOUT,
	O_SIGNALS,
	O_EXIT_CODE,
	O_LOCAL_ADDR,
	O_ROLE,
	O_MODULE,
	O_NO_PYTHON,
	O_RUN_PATH,
	O_PYTHON,
	O_VIRTUAL_LOCAL_RANK,
	O_NUMA_BINDING,
	O_LOCAL_RANK_ARG,
	O_USE_ENV,
	O_LOG_DIR,
	O_REDIRECTS,
	O_TEE,
	O_LOCAL_RANKS_FILTER,
	O_DUP_STDOUT,
	O_DUP_STDERR,
	O_LOG_PREFIX,
	O_LOGS_SPECS,
	O_STDIN,
	O_TTY,
	O_TOKEN_FILE,
	O_INSECURE,
	O_TLS_CA,
	O_TLS_CERT,
	O_TLS_KEY,
	O_TLS_SERVER_NAME,
	O_CONFIG,
	O_CHECK,
	O_METRICS,
	O_VERBOSE,
	O_QUIET,
	O_HELP,
	O_VERSION,
	O_COUNT
};

/* Every option, indexed by enum cli_opt_id, in --help order (cli_options.c), and the table
 * the option engine reads it through (src/opt.h: PET_ variables, the program as operand). */
extern const struct opt cli_opts[O_COUNT];
extern const struct opt_table cli_table;

/* Room for an origin: "--nproc_per_node", "PET_NNODES" or "FILE:LINE:COLUMN: key". */
#define CLI_ORIGIN_MAX OPT_ORIGIN_MAX

struct jobfile;

struct cli_parser {
	struct opt_val v[O_COUNT];
	struct job_spec *spec;
	struct crun_diag *d;
	const char *program;
	char **args;
	int nargs;
	struct jobfile *jf; /* --config FILE.yaml, or NULL (src/jobfile.h) */
	/* etcd: the protocol the member list (--rdzv-endpoint) and protocol= (--rdzv-conf) named:
	 * -1/0 none, 1 http, 2 https (cli_etcd.c). */
	int etcd_tls_endpoint, etcd_tls_conf;
};
/* ---- cli_check.c ---- */

/** crun --check: print the resolved job, each value with its source, on @out. */
void cli_check_print(const struct cli_parser *p, FILE *out);

/* ---- cli.c: messages and strings ---- */

/*
 * Record "ORIGIN: what" (or just "what" when @id is O_COUNT) in p->d with CRUN_ECONFIG, the
 * message cut to 199 bytes. Returns CLI_USAGE.
 */
int cli_fail(struct cli_parser *p, enum cli_opt_id id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Record -ENOMEM, "out of memory". Returns CLI_USAGE. */
int cli_oom(struct cli_parser *p);
/* Replace *@dst (freed) with a copy of @src. 0 or -ENOMEM (*@dst is then unchanged). */
int cli_set_str(char **dst, const char *src);

/* ---- cli_flags.c: values (0, or CLI_USAGE with p->d set) ---- */

/* The longest duration a flag or --rdzv-conf key takes: a year; any longer is a typo. */
#define CLI_SECONDS_MAX (365.0 * 24 * 3600)

int cli_int_value(struct cli_parser *p, enum cli_opt_id id, long min, long max, int *out);
/* Seconds ("30", "0.5") into milliseconds. */
int cli_seconds_value(struct cli_parser *p, enum cli_opt_id id, int64_t *ms);
/* A flag's 0/1, true/false, yes/no, on/off; false when the flag is not set. */
int cli_flag_value(struct cli_parser *p, enum cli_opt_id id, bool *out);
/* A non-empty string without control characters, at most @maxlen bytes, copied into *@out. */
int cli_text_value(struct cli_parser *p, enum cli_opt_id id, size_t maxlen, char **out);
/* The store's option group (src/opt_store.h): --token-file, --insecure and the --tls-* files
 * (made absolute: workers get them by path). */
int cli_do_store(struct cli_parser *p);
/* A fresh version 4 UUID, malloc'd in *@out (caller frees). 0, -EIO or -ENOMEM. */
int cli_random_run_id(char **out);

/* ---- cli_flags.c: each flag, stored in p->spec (0, or CLI_USAGE with p->d set) ---- */

int cli_do_nnodes(struct cli_parser *p);
/* Sets *@count_later when the value is gpu, cpu or auto: cli_count_nproc() counts then. */
int cli_do_nproc(struct cli_parser *p, bool *count_later);
int cli_count_nproc(struct cli_parser *p);
int cli_do_backend(struct cli_parser *p);
int cli_do_endpoint(struct cli_parser *p);
int cli_do_rdzv_id(struct cli_parser *p);
/* --rdzv-conf (src/cli_rdzv_conf.c). */
int cli_do_rdzv_conf(struct cli_parser *p);
/* --redirects or --tee (@id) into @masks, indexed by local rank. */
int cli_do_std_map(struct cli_parser *p, enum cli_opt_id id, enum std_mask *masks);
/* Needs spec->nproc_per_node counted first. */
int cli_do_ranks_filter(struct cli_parser *p);
int cli_do_signals(struct cli_parser *p);
/* --restart-backoff, --restart-backoff-max and --worker-timeout. */
int cli_do_restart_waits(struct cli_parser *p);
int cli_do_log_prefix(struct cli_parser *p);
/* cli_torch2.c: torchrun 2.x's later flags and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE. */
int cli_do_torch2(struct cli_parser *p);
/* $PYTHON_EXEC is set and not empty: it chose the interpreter (cli_flags.c). */
bool cli_python_exec_set(void);
/* --stdin and --tty (issue 11): which worker reads stdin, whether workers get a terminal. */
int cli_do_stdio(struct cli_parser *p);
int cli_do_log_dir(struct cli_parser *p);
int cli_do_metrics(struct cli_parser *p);
int cli_do_local_addr(struct cli_parser *p);
/* -m, --no-python, --run-path, --python and PROGRAM ARGS (program.c finds it). */
int cli_do_program(struct cli_parser *p);
/* --local-rank-arg[=none|underscore|dash] and --use-env (torch.distributed.launch's). */
int cli_do_local_rank_arg(struct cli_parser *p);
/* --exit-code crun|torchrun. */
int cli_do_exit_code(struct cli_parser *p);

/* ---- cli_etcd.c: --rdzv-backend etcd ---- */

/* The member list of --rdzv-endpoint @v (cli_do_endpoint() calls it for etcd). */
int cli_etcd_endpoint(struct cli_parser *p, const char *v);
/* An etcd --rdzv-conf key (protocol, cacert, cert, key, user, password_file, and torchrun's
 * etcd-v2 spellings): 0, CLI_USAGE, or 1 when @key is not one of them. */
int cli_etcd_conf_item(struct cli_parser *p, const char *key, const char *val);
/* After the endpoint and --rdzv-conf: check them together and build the store endpoint (its
 * protocol by etcd_protocol(): --tls-* files make members without a scheme https). */
int cli_etcd_finish(struct cli_parser *p);
/* After --tls-ca, --tls-cert and --tls-key: with --rdzv-backend etcd they verify etcd's https
 * members and present this client (as cacert=, cert= and key=). */
int cli_etcd_tls(struct cli_parser *p);

/* ---- cli_slurm.c: --rdzv-backend slurm, or a Slurm job step found in the environment ---- */

/* Before the flags are checked: fill in the node count and rank, master, run id, nproc and
 * --local-addr from the step (each named by its SLURM_* origin). 0 or CLI_USAGE. */
int cli_slurm_setup(struct cli_parser *p);

#endif
