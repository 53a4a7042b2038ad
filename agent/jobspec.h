/* SPDX-License-Identifier: MIT */
/* agent/jobspec.h: everything the agent needs to run a job, parsed from flags/PET_ env/YAML. */
#ifndef CRUN_AGENT_JOBSPEC_H
#define CRUN_AGENT_JOBSPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "rendezvous/rdzv.h"

enum rdzv_kind {
	RDZV_KIND_C10D = 0, /* "c10d" or "tcp": crun store at --rdzv-endpoint */
	RDZV_KIND_STATIC,   /* --node-rank/--master-addr/--master-port */
	RDZV_KIND_FILE,     /* file:///shared/path */
	RDZV_KIND_ETCD,     /* an etcd v3 cluster: etcd://HOST:PORT[,HOST:PORT...] */
};

/* torchrun's Std: which streams of a local rank go to files (--redirects) / are tee'd. */
enum std_mask { STD_NONE = 0, STD_OUT = 1, STD_ERR = 2, STD_ALL = 3 };

/* --stdin: which workers read the agent's stdin (the others get /dev/null). */
#define JOBSPEC_STDIN_NONE (-1) /* none: every worker gets /dev/null */
#define JOBSPEC_STDIN_ALL (-2)  /* all: every worker shares the agent's stdin */

/* --tty: whether a worker stream shown on the console gets a pseudo-terminal. */
enum tty_mode {
	TTY_AUTO = 0, /* when the agent's stream is a terminal and no file takes the stream */
	TTY_ALWAYS,   /* every stream shown on the console, terminal or not */
	TTY_NEVER,    /* pipes, as before */
};

enum program_kind {
	PROGRAM_EXEC = 0, /* an executable, run directly (also --no-python) */
	PROGRAM_PYTHON,   /* a .py file (or --run-path): $PYTHON_EXEC/python3 -u FILE */
	PROGRAM_MODULE,   /* -m: python3 -u -m MODULE */
};

/* --local-rank-arg: the argument torch.distributed.launch gave each worker, if any. */
enum local_rank_arg {
	LOCAL_RANK_ARG_NONE = 0,   /* torchrun's way: LOCAL_RANK in the environment only */
	LOCAL_RANK_ARG_UNDERSCORE, /* --local_rank=N (launch in torch 1.x) */
	LOCAL_RANK_ARG_DASH,       /* --local-rank=N (launch in torch 2.x) */
};

#define JOBSPEC_MAX_SIGNALS 16

struct job_spec {
	/* Shape. */
	int min_nodes, max_nodes;   /* --nnodes N or MIN:MAX */
	int nproc_per_node;         /* resolved count (gpu/cpu/auto already counted) */
	bool nproc_is_gpu;          /* nproc came from counting GPUs: narrow CUDA_VISIBLE_DEVICES */

	/* Rendezvous. */
	enum rdzv_kind rdzv_kind;
	char *rdzv_endpoint;        /* "10.0.0.1:29400", "file:///nfs/x", "etcd://h1:2379,h2:2379" */
	char *rdzv_host;            /* parsed host (c10d; etcd: the first member) */
	int rdzv_port;              /* parsed port, default 29400 (c10d) */
	char *rdzv_path;            /* file backend path */
	char *rdzv_id;              /* --rdzv-id (run id); default "none" as torchrun */
	int is_host;                /* rdzv-conf is_host: -1 unset, 0, 1 */
	struct rdzv_conf rdzv;      /* timeouts from --rdzv-conf (identity fields filled later) */
	bool standalone;
	bool no_agent_store;        /* workers' PyTorch bootstrap on rank 0's TCPStore (also TLS) */
	bool agent_store;           /* --agent-store: on the job's store in c10d mode too; neither:
				     * by the rule (rendezvous/rdzv_plan.h, docs/agent.md) */
	int node_rank;              /* -1 unless given (static) */
	/* etcd's TLS files and user (--rdzv-conf), absolute paths; NULL: from CRUN_ETCD_* or none.
	 * The agent exports them as CRUN_ETCD_* for its own store and its workers'. */
	char *etcd_cacert, *etcd_cert, *etcd_key, *etcd_user, *etcd_password_file;
	bool etcd_v2_name;          /* asked for as torchrun's "etcd-v2": the agent says it is v3 */
	char *master_addr;          /* static mode; default 127.0.0.1 */
	int master_port;            /* static mode; default 29500 */

	/* Restarts and shutdown. */
	int max_restarts;           /* default 0 */
	int64_t shutdown_timeout_ms;  /* grace between SIGTERM and SIGKILL; default 30 s */
	double monitor_interval_s;  /* accepted for compatibility; crun is event-driven */
	/* After a worker fails, how long the others may still fail on their own (and be listed)
	 * before they are stopped: JOBSPEC_FAILURE_WINDOW_MS, or --monitor-interval when given
	 * (torchrun lists what one monitor pass sees), at most 5 s. */
	int64_t failure_window_ms;
	int64_t restart_backoff_ms;     /* first wait before a restart; doubles; default 1 s */
	int64_t restart_backoff_max_ms; /* the doubling's cap; default 30 s */
	int64_t worker_timeout_ms;  /* hang watchdog: a silent worker fails the group; 0: off */
	int signals[JOBSPEC_MAX_SIGNALS]; /* --signals-to-handle; default INT TERM HUP QUIT */
	int nsignals;

	/* Addresses. */
	char *local_addr;           /* --local-addr as given (IP, hostname or interface) */
	char *advertise_addr;       /* the literal IP this node advertises */
	char *socket_ifname;        /* set when --local-addr named an interface */

	/* Workers. */
	char *role;                 /* default "default" */
	enum program_kind program_kind;
	char *program;              /* path or module */
	char **args;                /* NULL-terminated, passed through byte for byte */
	int nargs;
	char *python_exec;          /* $PYTHON_EXEC, else --python, else "python3" (as given) */
	char *python_path;          /* python_exec found as execvp() would: what workers run */
	bool virtual_local_rank;
	enum local_rank_arg local_rank_arg; /* --local-rank-arg: after the program, as launch */
	bool exit_code_torchrun;    /* --exit-code torchrun: 1 for any failure */

	/* Output. */
	char *log_dir;              /* --log-dir; NULL: none */
	char *token_file;           /* --token-file; NULL: the default (docs/security.md) */
	bool insecure;              /* --insecure: no store authentication */
	char *tls_ca;               /* --tls-ca etc.: absolute paths; NULL: no TLS (docs/security.md) */
	char *tls_cert;
	char *tls_key;
	char *tls_server_name;
	enum std_mask redirects[1024 + 1]; /* per local rank; index 1024 holds the default */
	enum std_mask tee[1024 + 1];
	bool *ranks_filter;         /* --local-ranks-filter: NULL = all; else nproc bools */
	char *log_prefix;           /* console prefix template; default "[rank{rank}]:" */
	char **dup_filters[2];      /* --duplicate-std{out,err}-filters: lines of stdout [0] or
				     * stderr [1] holding any of these (NULL-terminated; NULL:
				     * none) also go to filtered_std{out,err}.log in the log dir */
	char *numa_binding;         /* --numa-binding: node|socket|exclusive|core-complex; NULL */
	char *metrics_listen;       /* --metrics ADDR:PORT (the hosted store's); NULL: none */
	char *event_log_handler;    /* --event-log-handler: null (default), console, ... */
	int stdin_rank;             /* --stdin: a global rank, or JOBSPEC_STDIN_*; default 0 */
	enum tty_mode tty;          /* --tty; default TTY_AUTO */
};

/**
 * Zero @spec and set torchrun's defaults (1 node, 1 process, static rendezvous on
 * 127.0.0.1:29500, run id "none", role "default", rdzv timeouts, INT TERM HUP QUIT, 30 s
 * shutdown grace, prefix "[rank{rank}]:"). Strings are malloc'd: jobspec_finish() frees them.
 * Returns 0 or -ENOMEM (the spec is then still safe to finish).
 */
int jobspec_defaults(struct job_spec *spec);

/** Free everything a spec owns (not the struct itself); a zeroed spec is a no-op. */
void jobspec_finish(struct job_spec *spec);

/* The default failure window: ranks failing at the same instant are all listed, and a restart
 * costs no more than this. */
#define JOBSPEC_FAILURE_WINDOW_MS 10

#endif
