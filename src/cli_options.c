/* SPDX-License-Identifier: MIT */
/* src/cli_options.c: crun's options: the table (names, PET_ variables, metavars) and --help. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "src/cli.h"
#include "src/cli_parser.h"
#include "src/opt_store.h"
#include "config.h"

const struct opt cli_opts[O_COUNT] = {
	[O_NNODES] = {"nnodes", 0, true, true, "N|MIN:MAX",
		      "number of nodes, or the elastic range (default 1)", "Job shape"},
	[O_NPROC] = {"nproc-per-node", 0, true, true, "N|gpu|cpu|auto",
		     "workers on this node: a count, the visible GPUs, the online CPUs, or GPUs if "
		     "any else CPUs (default 1)", NULL},
	[O_NODE_RANK] = {"node-rank", 0, true, true, "N",
			 "this node's rank for --rdzv-backend static (default 0)",
			 "Static rendezvous (torchrun's default)"},
	[O_MASTER_ADDR] = {"master-addr", 0, true, true, "ADDR",
			   "address of node 0 for static mode (default 127.0.0.1)", NULL},
	[O_MASTER_PORT] = {"master-port", 0, true, true, "PORT",
			   "port of node 0 for static mode (default 29500)", NULL},
	[O_RDZV_BACKEND] = {"rdzv-backend", 0, true, true, "NAME",
			    "c10d (alias tcp), static, file, etcd (alias etcd-v2; an etcd v3 "
			    "cluster) or slurm (node rank, count and master from the srun step; "
			    "chosen by itself inside a step) (default static)",
			    "Dynamic rendezvous"},
	[O_RDZV_ENDPOINT] = OPT_STORE_ENDPOINT(NULL, true, NULL, "HOST[:PORT][,...]|file:///PATH",
					       "the store: c10d address (default port 29400), "
					       "shared file, or etcd members (default port 2379)"),
	[O_RDZV_ID] = {"rdzv-id", 0, true, true, "ID", "the job's run id (default none)", NULL},
	[O_RDZV_CONF] = {"rdzv-conf", 0, true, true, "KEY=VALUE,...",
			 "join_timeout (alias timeout), last_call_timeout, close_timeout, "
			 "heartbeat_timeout, keep_alive_interval, read_timeout (seconds), "
			 "keep_alive_max_attempt, is_host (0|1); torchrun's store_type=tcp, "
			 "use_libuv and others are accepted, unknown keys warned about; etcd: "
			 "protocol (http|https), cacert, cert, key, user, password_file", NULL},
	[O_STANDALONE] = {"standalone", 0, false, true, NULL,
			  "single node: c10d store on 127.0.0.1, a free port, a fresh run id",
			  NULL},
	[O_NO_AGENT_STORE] = {"no-agent-store", 0, false, true, NULL,
			      "workers' PyTorch bootstrap opens rank 0's own TCPStore on the master "
			      "port (TORCHELASTIC_USE_AGENT_STORE=False) instead of using crun's store; "
			      "static mode then puts crun's store one port up", NULL},
	[O_AGENT_STORE] = {"agent-store", 0, false, true, NULL,
			   "workers' PyTorch bootstrap uses crun's store in c10d mode too "
			   "(TORCHELASTIC_USE_AGENT_STORE=True); the default there follows the "
			   "workers' torch, as its torchrun does: 2.4 and later yes, else rank 0's "
			   "own TCPStore (static mode: always crun's store)", NULL},
	[O_MAX_RESTARTS] = {"max-restarts", 0, true, true, "N",
			    "job-wide restarts after worker failures (default 0)",
			    "Restarts and shutdown"},
	[O_RESTART_BACKOFF] = {"restart-backoff", 0, true, true, "SECONDS",
			       "wait before the first restart after a failure, doubled for each "
			       "next one; 0 restarts at once (default 1)", NULL},
	[O_RESTART_BACKOFF_MAX] = {"restart-backoff-max", 0, true, true, "SECONDS",
				   "cap of the doubling wait; it starts over after 10 minutes "
				   "without a failure (default 30)", NULL},
	[O_WORKER_TIMEOUT] = {"worker-timeout", 0, true, true, "SECONDS",
			      "a worker that sends no heartbeat (libcrun-worker, or a touch of "
			      "$CRUN_HEARTBEAT_FILE) for this long is hung: the group fails and "
			      "restarts (default 0: off)", NULL},
	[O_MONITOR_INTERVAL] = {"monitor-interval", 0, true, true, "SECONDS",
				"how long others may still fail (and be listed) after the first "
				"failure before they are stopped (default 0.01; crun does not poll)",
				NULL},
	[O_START_METHOD] = {"start-method", 0, true, true, "spawn|fork|forkserver",
			    "accepted for torchrun compatibility; workers are always exec'd",
			    NULL},
	[O_EVENT_LOG_HANDLER] = {"event-log-handler", 0, true, true, "null|console|dynamic_rendezvous",
				 "torchrun's event handlers: crun keeps no event log; console: its "
				 "events are its own log lines on stderr; null (the default) and "
				 "dynamic_rendezvous: nothing more", NULL},
	[O_SHUTDOWN_TIMEOUT] = {"shutdown-timeout", 0, true, true, "SECONDS",
				"grace between SIGTERM and SIGKILL when stopping workers "
				"(default 30)", NULL},
	[O_SIGNALS] = {"signals-to-handle", 0, true, true, "SIG,...",
		       "signals forwarded to workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)",
		       NULL},
	[O_EXIT_CODE] = {"exit-code", 0, true, true, "crun|torchrun",
			 "on failure exit with the failed worker's code or 128+signal (crun, the "
			 "default), or always 1 (torchrun)", NULL},
	[O_LOCAL_ADDR] = {"local-addr", 0, true, true, "ADDR|HOST|IFACE",
			  "address this node advertises; an interface name (eth0) also sets "
			  "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME", "Workers"},
	[O_ROLE] = {"role", 0, true, true, "NAME", "worker role, ROLE_NAME (default default)",
		    NULL},
	[O_MODULE] = {"module", 'm', false, true, NULL,
		      "PROGRAM is a Python module: python3 -u -m PROGRAM", NULL},
	[O_NO_PYTHON] = {"no-python", 0, false, true, NULL,
			 "run PROGRAM directly even if it ends in .py", NULL},
	[O_RUN_PATH] = {"run-path", 0, false, true, NULL,
			"run PROGRAM under python3 -u whatever its name", NULL},
	[O_PYTHON] = {"python", 0, true, true, "PATH",
		      "the interpreter of a Python PROGRAM, unless $PYTHON_EXEC is set "
		      "(default: the python of torchrun on PATH, else python3 from PATH)", NULL},
	[O_VIRTUAL_LOCAL_RANK] = {"virtual-local-rank", 0, false, true, NULL,
				  "LOCAL_RANK=0 in every worker, CUDA_VISIBLE_DEVICES narrowed to "
				  "its GPU", NULL},
	[O_NUMA_BINDING] = {"numa-binding", 0, true, true, "node|socket|exclusive|core-complex",
			    "bind each worker to the CPUs of its GPU's NUMA node (socket: of its "
			    "package; exclusive and core-complex as node); with one NUMA node there "
			    "is nothing to bind and crun says so", NULL},
	[O_LOCAL_RANK_ARG] = {"local-rank-arg", 0, false, true, "none|underscore|dash",
			      "pass --local_rank=N (alone or =underscore: torch 1.x's "
			      "torch.distributed.launch) or --local-rank=N (=dash: torch 2.x) "
			      "after PROGRAM, before ARGS (default none)", NULL, true},
	[O_USE_ENV] = {"use-env", 0, false, true, NULL,
		       "accepted from torch.distributed.launch: no --local-rank argument, "
		       "LOCAL_RANK only (the default)", NULL},
	[O_LOG_DIR] = {"log-dir", 0, true, true, "DIR",
		       "keep DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log, one folder per run for "
		       "every node (a rerun: RUN_ID.1, ...), error files beside them", "Output"},
	[O_REDIRECTS] = {"redirects", 'r', true, true, "STD|RANK:STD,...",
			 "send streams to the log files only: 0 none, 1 out, 2 err, 3 both",
			 NULL},
	[O_TEE] = {"tee", 't', true, true, "STD|RANK:STD,...",
		   "send streams to the log files and the console (as --redirects)", NULL},
	[O_LOCAL_RANKS_FILTER] = {"local-ranks-filter", 0, true, true, "RANK,...",
				  "show only these local ranks on the console", NULL},
	[O_DUP_STDOUT] = {"duplicate-stdout-filters", 0, true, true, "TEXT,...",
			  "also write workers' stdout lines holding any TEXT (,, is a comma) to "
			  "filtered_stdout.log in the attempt's --log-dir folder", NULL},
	[O_DUP_STDERR] = {"duplicate-stderr-filters", 0, true, true, "TEXT,...",
			  "as --duplicate-stdout-filters, for stderr: filtered_stderr.log", NULL},
	[O_LOG_PREFIX] = {"log-prefix", 0, true, true, "TEMPLATE",
			  "console line prefix with {rank} {local_rank} {role} {host} "
			  "(default \"[rank{rank}]:\", or torchrun's "
			  "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with ${rank} ${local_rank} "
			  "${role_name})", NULL},
	[O_LOGS_SPECS] = {"logs-specs", 0, true, true, "NAME",
			  "accepted for torchrun compatibility; only \"default\"", NULL},
	[O_STDIN] = {"stdin", 0, true, true, "RANK|all|none",
		     "the worker of this global rank reads crun's stdin (input(), pdb), the "
		     "others /dev/null; all: every worker shares it (default 0)", NULL},
	[O_TTY] = {"tty", 0, true, true, "auto|always|never",
		   "give each worker stream shown on the console a pseudo-terminal; auto: when "
		   "crun's own stream is a terminal and no log file takes it (default auto)",
		   NULL},
	[O_TOKEN_FILE] = OPT_STORE_TOKEN_FILE(
		"Security", "the store's shared token, a file only you can read (default: a "
			    "fresh token for a single node; else $CRUN_TOKEN_FILE, "
			    "$XDG_CONFIG_HOME/crun/token or ~/.config/crun/token, created 0600 on "
			    "first use)"),
	[O_INSECURE] = OPT_STORE_INSECURE(NULL, "no store authentication: anyone who reaches the "
						"store can change the job (a warning is printed)"),
	[O_TLS_CA] = OPT_STORE_TLS_CA(NULL, NULL,
				      "TLS to the store: the CA its certificate is verified against; "
				      "the store this node hosts then requires client certificates "
				      "from it (mutual TLS)"),
	[O_TLS_CERT] = OPT_STORE_TLS_CERT(NULL, NULL,
					  "TLS: this node's PEM certificate: served by the store it "
					  "hosts, and presented to the store as a client"),
	[O_TLS_KEY] = OPT_STORE_TLS_KEY(NULL, NULL,
					"TLS: the certificate's PEM key, a file only you can read"),
	[O_TLS_SERVER_NAME] = OPT_STORE_TLS_SERVER_NAME(
		NULL, NULL, "TLS: the name the store's certificate carries (default: the "
			    "endpoint's host)"),
	[O_CONFIG] = OPT_STORE_CONFIG("Job file",
				      "read the job from a YAML job file (see crun.yaml(5)); the "
				      "command line and PET_ variables override it"),
	[O_CHECK] = {"check", 0, false, false, NULL,
		     "check the command line, job file and PET_ variables together, print the "
		     "job as it would start with each value's source, and exit (0, or 2 on a "
		     "mistake); nothing starts", NULL},
	[O_METRICS] = {"metrics", 0, true, false, "ADDR:PORT",
		       "on the node that hosts the job's store: serve Prometheus metrics at "
		       "http://ADDR:PORT/metrics (a scrape sends the store's token as "
		       "Authorization: Bearer); other nodes serve none", NULL},
	[O_VERBOSE] = OPT_VERBOSE_ENTRY("Other", "log crun's own messages at debug level (as "
						 "CRUN_LOG_LEVEL=debug)"),
	[O_QUIET] = OPT_QUIET_ENTRY,
	[O_HELP] = OPT_HELP_ENTRY(NULL),
	[O_VERSION] = OPT_VERSION_ENTRY,
};

const struct opt_table cli_table = {
	.prog = "crun",
	.opts = cli_opts,
	.n = O_COUNT,
	.env_prefix = "PET_",
	.operands = true,
	.usage = cli_usage,
	.version = "crun " CRUN_VERSION,
	.abbrev = true, /* as torchrun's argparse: --stand is --standalone */
};

void cli_usage(FILE *out)
{
	fprintf(out, "Usage: crun [OPTIONS] PROGRAM [ARGS...]\n"
		     "       crun status --rdzv-endpoint EP --rdzv-id ID [--json] [--watch [SEC]]\n"
		     "Launch PROGRAM as --nproc-per-node workers on this node, as one job with the\n"
		     "same command on every other node (a torchrun equivalent). A .py PROGRAM runs\n"
		     "under python3 -u ($PYTHON_EXEC, --python, else the python of torchrun on PATH);\n"
		     "ARGS pass through unchanged except ${local_rank}. The options before Security\n"
		     "also read PET_<OPTION> (PET_NPROC_PER_NODE=4); the command line wins. Dashes\n"
		     "and underscores are alike (--nproc_per_node), and a unique prefix of a long\n"
		     "option is enough (--stand).\n");
	opt_print_options(out, &cli_table);
	fprintf(out, "\nExit status: 0 on success; the first failed worker's exit code (128+N for\n"
		     "signal N); 1 when rendezvous or the agent itself failed; 2 for a bad command\n"
		     "line; 128+N when crun was stopped by signal N; with --exit-code torchrun, 1\n"
		     "for any failure (2 stays for a bad command line). See crun(1).\n");
}
