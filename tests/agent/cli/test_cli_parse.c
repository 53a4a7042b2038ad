/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/test_cli_parse.c: good command lines and the job spec each one yields. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>

#include "tests/agent/cli/cli_fixture.h"

/* ---- good command lines ---- */

static void defaults_follow_torchrun(void **state)
{
	struct job_spec s;
	struct crun_diag d;
	int i;

	(void)state;
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_OK);
	assert_int_equal(s.min_nodes, 1);
	assert_int_equal(s.max_nodes, 1);
	assert_int_equal(s.nproc_per_node, 1);
	assert_false(s.nproc_is_gpu);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_STATIC);
	assert_int_equal(s.node_rank, 0);
	assert_string_equal(s.master_addr, "127.0.0.1");
	assert_int_equal(s.master_port, 29500);
	assert_string_equal(s.rdzv_endpoint, "127.0.0.1:29500");
	assert_string_equal(s.rdzv_id, "none");
	assert_string_equal(s.role, "default");
	assert_string_equal(s.log_prefix, "[rank{rank}]:");
	assert_string_equal(s.python_exec, "python3");
	assert_int_equal(s.is_host, -1);
	assert_int_equal(s.max_restarts, 0);
	assert_int_equal(s.shutdown_timeout_ms, 30000);
	assert_int_equal(s.restart_backoff_ms, 1000);
	assert_int_equal(s.restart_backoff_max_ms, 30000);
	assert_int_equal(s.worker_timeout_ms, 0);
	assert_int_equal(s.nsignals, 4);
	assert_int_equal(s.signals[0], SIGTERM);
	assert_int_equal(s.signals[3], SIGQUIT);
	assert_int_equal(s.rdzv.join_timeout_ms, 600000);
	assert_int_equal(s.rdzv.last_call_timeout_ms, 30000);
	assert_int_equal(s.rdzv.keep_alive_max_attempt, 3);
	assert_int_equal(s.rdzv.node_rank, 0);
	assert_int_equal(s.rdzv.local_world_size, 1);
	assert_ptr_equal(s.rdzv.run_id, s.rdzv_id);
	assert_int_equal(s.program_kind, PROGRAM_EXEC);
	assert_non_null(strstr(s.program, "/true"));
	assert_int_equal(access(s.program, X_OK), 0);
	assert_int_equal(s.nargs, 0);
	assert_non_null(s.args);
	assert_null(s.args[0]);
	assert_null(s.log_dir);
	assert_null(s.ranks_filter);
	assert_null(s.local_addr);
	assert_null(s.socket_ifname);
	for (i = 0; i <= 1024; i++) {
		assert_int_equal(s.redirects[i], STD_NONE);
		assert_int_equal(s.tee[i], STD_NONE);
	}
	jobspec_finish(&s);
	jobspec_finish(&s); /* finish(zeroed) is a no-op */
}

static void elastic_c10d_job_with_underscores(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS("--nnodes=1:4", "--nproc_per_node", "3", "--rdzv_backend=c10d",
				    "--rdzv_endpoint", "10.0.0.1", "--rdzv-id", "job7",
				    "--max_restarts=2", "--rdzv-conf",
				    "join_timeout=5,last_call_timeout=0.5,is_host=1,"
				    "keep_alive_max_attempt=7,read_timeout=2,close_timeout=0",
				    "--role", "trainer", "--monitor_interval", "0.1", "--shutdown-timeout",
				    "2.5", "--start_method", "fork", "true", "--lr", "0.1", "--nnodes",
				    "$$", "${local_rank}", ""),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.min_nodes, 1);
	assert_int_equal(s.max_nodes, 4);
	assert_int_equal(s.nproc_per_node, 3);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_C10D);
	assert_string_equal(s.rdzv_endpoint, "10.0.0.1:29400");
	assert_string_equal(s.rdzv_host, "10.0.0.1");
	assert_int_equal(s.rdzv_port, 29400);
	assert_string_equal(s.rdzv_id, "job7");
	assert_int_equal(s.node_rank, -1);
	assert_int_equal(s.max_restarts, 2);
	assert_int_equal(s.is_host, 1);
	assert_int_equal(s.rdzv.join_timeout_ms, 5000);
	assert_int_equal(s.rdzv.last_call_timeout_ms, 500);
	assert_int_equal(s.rdzv.close_timeout_ms, 0);
	assert_int_equal(s.rdzv.read_timeout_ms, 2000);
	assert_int_equal(s.rdzv.heartbeat_timeout_ms, 30000);
	assert_int_equal(s.rdzv.keep_alive_max_attempt, 7);
	assert_int_equal(s.rdzv.min_nodes, 1);
	assert_int_equal(s.rdzv.max_nodes, 4);
	assert_int_equal(s.rdzv.node_rank, -1);
	assert_int_equal(s.rdzv.local_world_size, 3);
	assert_int_equal(s.rdzv.max_restarts, 2);
	assert_string_equal(s.rdzv.run_id, "job7");
	assert_string_equal(s.role, "trainer");
	assert_true(s.monitor_interval_s > 0.09 && s.monitor_interval_s < 0.11);
	assert_int_equal(s.shutdown_timeout_ms, 2500);
	/* Everything after the program passes through byte for byte. */
	assert_int_equal(s.nargs, 6);
	assert_string_equal(s.args[0], "--lr");
	assert_string_equal(s.args[1], "0.1");
	assert_string_equal(s.args[2], "--nnodes");
	assert_string_equal(s.args[3], "$$");
	assert_string_equal(s.args[4], "${local_rank}");
	assert_string_equal(s.args[5], "");
	assert_null(s.args[6]);
	jobspec_finish(&s);
}

static void double_dash_ends_options(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS("--nproc-per-node", "2", "--", "true", "-x", "--help"), &s, &d),
			 CLI_OK);
	assert_int_equal(s.nproc_per_node, 2);
	assert_int_equal(s.nargs, 2);
	assert_string_equal(s.args[0], "-x");
	assert_string_equal(s.args[1], "--help");
	jobspec_finish(&s);
}

static void short_options_and_std_maps(void **state)
{
	struct job_spec s;
	struct crun_diag d;
	int i;

	(void)state;
	assert_int_equal(parse(ARGS("-r", "3", "-t0:1,2:2", "--nproc-per-node=4",
				    "--local-ranks-filter", "1,3", "--log-dir", tmpdir, "--log-prefix",
				    "{host}/{role}:{local_rank}|{rank}>", exec_file),
			       &s, &d),
			 CLI_OK);
	for (i = 0; i <= 1024; i++) {
		assert_int_equal(s.redirects[i], STD_ALL);
	}
	assert_int_equal(s.tee[0], STD_OUT);
	assert_int_equal(s.tee[1], STD_NONE);
	assert_int_equal(s.tee[2], STD_ERR);
	assert_int_equal(s.tee[1024], STD_NONE);
	assert_non_null(s.ranks_filter);
	assert_false(s.ranks_filter[0]);
	assert_true(s.ranks_filter[1]);
	assert_false(s.ranks_filter[2]);
	assert_true(s.ranks_filter[3]);
	assert_string_equal(s.log_dir, tmpdir);
	assert_string_equal(s.log_prefix, "{host}/{role}:{local_rank}|{rank}>");
	assert_string_equal(s.program, exec_file);
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--tee=", "-r", "", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.tee[0], STD_NONE);
	assert_int_equal(s.redirects[1024], STD_NONE);
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--tee=2", "--redirects", "1:3", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.tee[0], STD_ERR);
	assert_int_equal(s.tee[1023], STD_ERR);
	assert_int_equal(s.redirects[0], STD_NONE);
	assert_int_equal(s.redirects[1], STD_ALL);
	jobspec_finish(&s);
}

static void python_programs(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS(py_file, "--epochs", "3"), &s, &d), CLI_OK);
	assert_int_equal(s.program_kind, PROGRAM_PYTHON);
	assert_string_equal(s.program, py_file);
	assert_string_equal(s.python_exec, "python3");
	assert_int_equal(s.nargs, 2);
	jobspec_finish(&s);

	/* -m is torchrun's flag: the program is then a module name. */
	assert_int_equal(parse(ARGS("-m", "--nproc-per-node", "2", "json.tool", "--help"), &s, &d),
			 CLI_OK);
	assert_int_equal(s.program_kind, PROGRAM_MODULE);
	assert_string_equal(s.program, "json.tool");
	assert_int_equal(s.nargs, 1);
	assert_string_equal(s.args[0], "--help");
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--module", "pkg.train"), &s, &d), CLI_OK);
	assert_int_equal(s.program_kind, PROGRAM_MODULE);
	jobspec_finish(&s);

	/* --run-path runs any file under python; --no-python runs even a .py directly. */
	assert_int_equal(parse(ARGS("--run_path", plain_script), &s, &d), CLI_OK);
	assert_int_equal(s.program_kind, PROGRAM_PYTHON);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--no_python", exec_py), &s, &d), CLI_OK);
	assert_int_equal(s.program_kind, PROGRAM_EXEC);
	assert_string_equal(s.program, exec_py);
	jobspec_finish(&s);

	setenv("PYTHON_EXEC", "sh", 1);
	assert_int_equal(parse(ARGS(py_file), &s, &d), CLI_OK);
	assert_string_equal(s.python_exec, "sh");
	jobspec_finish(&s);
	unsetenv("PYTHON_EXEC");
}

static void standalone_picks_fresh_local_store(void **state)
{
	struct job_spec s, t;
	struct crun_diag d;
	size_t i;

	(void)state;
	assert_int_equal(parse(ARGS("--standalone", "--nproc-per-node", "4", "--nnodes=1", "true"),
			       &s, &d),
			 CLI_OK);
	assert_true(s.standalone);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_C10D);
	assert_string_equal(s.rdzv_endpoint, "127.0.0.1:0");
	assert_string_equal(s.rdzv_host, "127.0.0.1");
	assert_int_equal(s.rdzv_port, 0);
	assert_int_equal(strlen(s.rdzv_id), 36);
	for (i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			assert_int_equal(s.rdzv_id[i], '-');
		} else {
			assert_non_null(strchr("0123456789abcdef", s.rdzv_id[i]));
		}
	}
	assert_string_equal(s.rdzv.run_id, s.rdzv_id);
	assert_int_equal(parse(ARGS("--standalone", "true"), &t, &d), CLI_OK);
	assert_string_not_equal(s.rdzv_id, t.rdzv_id); /* a second job never joins the first */
	jobspec_finish(&s);
	jobspec_finish(&t);
}

static void static_endpoint_names_the_master(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS("--rdzv-endpoint", "10.1.1.1:1234", "--nnodes", "2", "--node_rank",
				    "1", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_STATIC);
	assert_string_equal(s.master_addr, "10.1.1.1");
	assert_int_equal(s.master_port, 1234);
	assert_int_equal(s.node_rank, 1);
	assert_int_equal(s.rdzv.node_rank, 1);
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--master_addr", "10.2.2.2", "--master-port", "4000", "--nnodes",
				    "3", "--node-rank", "2", "true"),
			       &s, &d),
			 CLI_OK);
	assert_string_equal(s.master_addr, "10.2.2.2");
	assert_int_equal(s.master_port, 4000);
	assert_string_equal(s.rdzv_endpoint, "10.2.2.2:4000");
	assert_int_equal(s.node_rank, 2);
	jobspec_finish(&s);
}

static void file_and_ipv6_endpoints(void **state)
{
	struct job_spec s;
	struct crun_diag d;
	char ep[200], path[160];

	(void)state;
	snprintf(path, sizeof(path), "%s/store", tmpdir);
	snprintf(ep, sizeof(ep), "file://%s", path);
	assert_int_equal(parse(ARGS("--rdzv-backend", "file", "--rdzv-endpoint", ep, "--nnodes",
				    "2:3", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_FILE);
	assert_string_equal(s.rdzv_endpoint, ep);
	assert_string_equal(s.rdzv_path, path);
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--rdzv-backend", "tcp", "--rdzv-endpoint", "[::1]:5000", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_C10D);
	assert_string_equal(s.rdzv_host, "::1");
	assert_int_equal(s.rdzv_port, 5000);
	assert_string_equal(s.rdzv_endpoint, "[::1]:5000");
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "tcp://head", "true"),
			       &s, &d),
			 CLI_OK);
	assert_string_equal(s.rdzv_endpoint, "head:29400");
	jobspec_finish(&s);
}

/* --rdzv-backend etcd: member lists in every spelling, TLS and user from --rdzv-conf. */
static void etcd_members_and_conf(void **state)
{
	struct job_spec s;
	struct crun_diag d;
	char conf[600], abs[PATH_MAX];

	(void)state;
	assert_int_equal(parse(ARGS("--rdzv-backend", "etcd", "--nnodes", "1:4", "true"), &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_ETCD);
	assert_string_equal(s.rdzv_endpoint, "etcd://127.0.0.1:2379");
	assert_string_equal(s.rdzv_host, "127.0.0.1");
	assert_int_equal(s.rdzv_port, 2379);
	assert_int_equal(s.rdzv.node_rank, -1);
	assert_false(s.etcd_v2_name);
	assert_null(s.etcd_cacert);
	assert_null(s.etcd_user);
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint",
				    "h1,h2:2380,[::1]", "true"),
			       &s, &d),
			 CLI_OK);
	assert_string_equal(s.rdzv_endpoint, "etcd://h1:2379,h2:2380,[::1]:2379");
	assert_string_equal(s.rdzv_host, "h1");
	jobspec_finish(&s);

	/* torchrun's etcd-v2 name; http:// members as etcdctl prints them, trailing slash too. */
	assert_int_equal(parse(ARGS("--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
				    "http://10.0.0.1:1,HTTP://10.0.0.2:2/", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_ETCD);
	assert_true(s.etcd_v2_name);
	assert_string_equal(s.rdzv_endpoint, "etcd://10.0.0.1:1,10.0.0.2:2");
	assert_string_equal(s.rdzv_host, "10.0.0.1");
	assert_int_equal(s.rdzv_port, 1);
	jobspec_finish(&s);

	/* The store's own spelling passes through. */
	assert_int_equal(parse(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint",
				    "etcd+https://a:3,b", "true"),
			       &s, &d),
			 CLI_OK);
	assert_string_equal(s.rdzv_endpoint, "etcd+https://a:3,b:2379");
	jobspec_finish(&s);

	/* torchrun's etcd keys; paths come out absolute, for workers in any directory. */
	assert_non_null(realpath(py_file, abs));
	snprintf(conf, sizeof(conf),
		 "protocol=https,cacert=%s,cert=%s,key=%s,user=trainer,password_file=%s,"
		 "join_timeout=7", py_file, py_file, py_file, py_file);
	assert_int_equal(parse(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint", "e1,e2",
				    "--rdzv-conf", conf, "true"),
			       &s, &d),
			 CLI_OK);
	assert_string_equal(s.rdzv_endpoint, "etcd+https://e1:2379,e2:2379");
	assert_string_equal(s.etcd_cacert, abs);
	assert_string_equal(s.etcd_cert, abs);
	assert_string_equal(s.etcd_key, abs);
	assert_string_equal(s.etcd_password_file, abs);
	assert_string_equal(s.etcd_user, "trainer");
	assert_int_equal(s.rdzv.join_timeout_ms, 7000);
	jobspec_finish(&s);

	/* torchrun's etcd-v2 spellings, and https from the members alone. */
	snprintf(conf, sizeof(conf), "ca_cert=%s,ssl_cert=%s,ssl_cert_key=%s", py_file, py_file,
		 py_file);
	assert_int_equal(parse(ARGS("--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "https://e1",
				    "--rdzv-conf", conf, "true"),
			       &s, &d),
			 CLI_OK);
	assert_string_equal(s.rdzv_endpoint, "etcd+https://e1:2379");
	assert_string_equal(s.etcd_cacert, abs);
	assert_string_equal(s.etcd_key, abs);
	assert_null(s.etcd_user);
	jobspec_finish(&s);
}

static void restart_waits_and_watchdog(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS("--restart-backoff", "0.25", "--restart_backoff_max", "4",
				    "--worker-timeout", "90", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.restart_backoff_ms, 250);
	assert_int_equal(s.restart_backoff_max_ms, 4000);
	assert_int_equal(s.worker_timeout_ms, 90000);
	jobspec_finish(&s);
	/* A first wait above the default cap raises the cap; 0 turns the waits off. */
	assert_int_equal(parse(ARGS("--restart-backoff", "45", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.restart_backoff_ms, 45000);
	assert_int_equal(s.restart_backoff_max_ms, 45000);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--restart-backoff", "0", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.restart_backoff_ms, 0);
	jobspec_finish(&s);
}

static void signals_and_flags(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS("--signals-to-handle", "SIGUSR1,15,INT,SIGTERM",
				    "--virtual-local-rank", "--local_rank_arg", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.nsignals, 3);
	assert_int_equal(s.signals[0], SIGUSR1);
	assert_int_equal(s.signals[1], SIGTERM);
	assert_int_equal(s.signals[2], SIGINT);
	assert_true(s.virtual_local_rank);
	assert_true(s.local_rank_arg);
	jobspec_finish(&s);
}


/* A table of good command lines and the shape each one yields. */
static void good_command_lines_table(void **state)
{
	static const struct {
		const char *args[12];
		int min, max, nproc;
		enum rdzv_kind kind;
		const char *endpoint;
		const char *run_id;
		int node_rank, restarts;
	} table[] = {
		{{"true"}, 1, 1, 1, RDZV_KIND_STATIC, "127.0.0.1:29500", "none", 0, 0},
		{{"--nnodes", "4", "--nproc_per_node=8", "true"}, 4, 4, 8, RDZV_KIND_STATIC,
		 "127.0.0.1:29500", "none", 0, 0},
		{{"--nnodes=2:8", "--rdzv-backend=c10d", "--rdzv-endpoint=head:1234", "--rdzv_id=j",
		  "--max-restarts=3", "true"},
		 2, 8, 1, RDZV_KIND_C10D, "head:1234", "j", -1, 3},
		{{"--rdzv_backend", "tcp", "--rdzv_endpoint", "10.0.0.9", "true"}, 1, 1, 1,
		 RDZV_KIND_C10D, "10.0.0.9:29400", "none", -1, 0},
		{{"--rdzv-backend", "c10d", "true"}, 1, 1, 1, RDZV_KIND_C10D, "127.0.0.1:29400", "none",
		 -1, 0},
		{{"--rdzv-backend", "static", "--rdzv-endpoint", "m:7", "--nnodes", "3", "--node-rank",
		  "2", "true"},
		 3, 3, 1, RDZV_KIND_STATIC, "m:7", "none", 2, 0},
		{{"--rdzv-backend", "file", "--rdzv-endpoint", "file:///tmp/crun-x", "--nnodes", "1:3",
		  "true"},
		 1, 3, 1, RDZV_KIND_FILE, "file:///tmp/crun-x", "none", -1, 0},
		{{"--nproc-per-node", "4096", "--", "true"}, 1, 1, 4096, RDZV_KIND_STATIC,
		 "127.0.0.1:29500", "none", 0, 0},
		{{"--max_restarts", "0", "--rdzv-id", "a.b-c_d:e", "true"}, 1, 1, 1, RDZV_KIND_STATIC,
		 "127.0.0.1:29500", "a.b-c_d:e", 0, 0},
		{{"--nnodes=2:3", "--rdzv-backend=etcd", "--rdzv-endpoint=e1:1,e2:2", "--rdzv-id=j",
		  "--max-restarts=1", "true"},
		 2, 3, 1, RDZV_KIND_ETCD, "etcd://e1:1,e2:2", "j", -1, 1},
	};
	struct job_spec s;
	struct crun_diag d;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(table); i++) {
		assert_int_equal(parse(table[i].args, &s, &d), CLI_OK);
		assert_int_equal(s.min_nodes, table[i].min);
		assert_int_equal(s.max_nodes, table[i].max);
		assert_int_equal(s.nproc_per_node, table[i].nproc);
		assert_int_equal(s.rdzv_kind, table[i].kind);
		assert_string_equal(s.rdzv_endpoint, table[i].endpoint);
		assert_string_equal(s.rdzv_id, table[i].run_id);
		assert_int_equal(s.node_rank, table[i].node_rank);
		assert_int_equal(s.max_restarts, table[i].restarts);
		assert_int_equal(s.rdzv.min_nodes, table[i].min);
		assert_int_equal(s.rdzv.max_nodes, table[i].max);
		assert_int_equal(s.rdzv.local_world_size, table[i].nproc);
		jobspec_finish(&s);
	}
}

static void help_and_version_exit_early(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	assert_int_equal(parse(ARGS("--help"), &s, &d), CLI_EXIT);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--nproc-per-node", "2", "-h", "prog"), &s, &d), CLI_EXIT);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--version"), &s, &d), CLI_EXIT);
	jobspec_finish(&s);
}


int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(defaults_follow_torchrun, each_teardown),
		cmocka_unit_test_teardown(elastic_c10d_job_with_underscores, each_teardown),
		cmocka_unit_test_teardown(double_dash_ends_options, each_teardown),
		cmocka_unit_test_teardown(short_options_and_std_maps, each_teardown),
		cmocka_unit_test_teardown(python_programs, each_teardown),
		cmocka_unit_test_teardown(standalone_picks_fresh_local_store, each_teardown),
		cmocka_unit_test_teardown(static_endpoint_names_the_master, each_teardown),
		cmocka_unit_test_teardown(file_and_ipv6_endpoints, each_teardown),
		cmocka_unit_test_teardown(etcd_members_and_conf, each_teardown),
		cmocka_unit_test_teardown(signals_and_flags, each_teardown),
		cmocka_unit_test_teardown(restart_waits_and_watchdog, each_teardown),
		cmocka_unit_test_teardown(good_command_lines_table, each_teardown),
		cmocka_unit_test_teardown(help_and_version_exit_early, each_teardown),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("cli-parse", tests, group_setup, group_teardown);
}
