/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/test_cli.c: cli_parse() over good and bad command lines, PET_ env, crun(1). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/cli.h"
#include "src/common/net.h"
#include "src/gpu_count.h"

extern char **environ;

/* A scratch folder with a .py file, a plain script, a non-executable file and an executable. */
static char tmpdir[64];
static char py_file[128], noexec_file[128], exec_file[128], plain_script[128], exec_py[128];

static void write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, mode), 0);
}

/* Drop every PET_* variable so the caller's environment cannot steer the tests. */
static void clear_pet_env(void)
{
	char name[128];
	const char *eq;
	bool again = true;
	int i;

	while (again) {
		again = false;
		for (i = 0; environ[i] != NULL; i++) {
			if (strncmp(environ[i], "PET_", 4) != 0) {
				continue;
			}
			eq = strchr(environ[i], '=');
			if (eq == NULL || (size_t)(eq - environ[i]) >= sizeof(name)) {
				continue;
			}
			memcpy(name, environ[i], (size_t)(eq - environ[i]));
			name[eq - environ[i]] = '\0';
			unsetenv(name);
			again = true;
			break;
		}
	}
	unsetenv("PYTHON_EXEC");
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/crun-cli-XXXXXX");
	if (mkdtemp(tmpdir) == NULL) {
		return -1;
	}
	snprintf(py_file, sizeof(py_file), "%s/train.py", tmpdir);
	snprintf(noexec_file, sizeof(noexec_file), "%s/noexec", tmpdir);
	snprintf(exec_file, sizeof(exec_file), "%s/worker", tmpdir);
	snprintf(plain_script, sizeof(plain_script), "%s/script", tmpdir);
	snprintf(exec_py, sizeof(exec_py), "%s/tool.py", tmpdir);
	write_file(py_file, "print('hi')\n", 0644);
	write_file(noexec_file, "#!/bin/sh\nexit 0\n", 0644);
	write_file(exec_file, "#!/bin/sh\nexit 0\n", 0755);
	write_file(plain_script, "print('plain')\n", 0644);
	write_file(exec_py, "#!/bin/sh\nexit 0\n", 0755);
	clear_pet_env();
	return 0;
}

static int group_teardown(void **state)
{
	char path[160];

	(void)state;
	unlink(py_file);
	unlink(noexec_file);
	unlink(exec_file);
	unlink(plain_script);
	unlink(exec_py);
	/* What a failed assertion may have left behind. */
	snprintf(path, sizeof(path), "%s/store", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/out", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/err", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/stderr", tmpdir);
	unlink(path);
	if (rmdir(tmpdir) != 0) {
		fprintf(stderr, "rmdir %s: %s\n", tmpdir, strerror(errno));
		return -1;
	}
	return 0;
}

static int each_teardown(void **state)
{
	(void)state;
	clear_pet_env();
	unsetenv("CUDA_VISIBLE_DEVICES");
	return 0;
}

#define MAXARGS 40

/* Run cli_parse_diag on {"crun", @args..., NULL}. */
static int parse(const char *const *args, struct job_spec *s, struct crun_diag *d)
{
	char *argv[MAXARGS + 2];
	int argc = 0;

	argv[argc++] = (char *)"crun";
	while (*args != NULL && argc <= MAXARGS) {
		argv[argc++] = (char *)*args++;
	}
	argv[argc] = NULL;
	memset(d, 0, sizeof(*d));
	return cli_parse_diag(argc, argv, s, d);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

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

static void local_addr_resolves_interfaces_and_names(void **state)
{
	struct job_spec s;
	struct crun_diag d;
	char *addr, *ifname;

	(void)state;
	assert_int_equal(parse(ARGS("--local-addr", "lo", "true"), &s, &d), CLI_OK);
	assert_string_equal(s.local_addr, "lo");
	assert_string_equal(s.advertise_addr, "127.0.0.1");
	assert_string_equal(s.socket_ifname, "lo");
	assert_string_equal(s.rdzv.advertise_addr, "127.0.0.1");
	jobspec_finish(&s);

	assert_int_equal(parse(ARGS("--local_addr=127.0.0.2", "true"), &s, &d), CLI_OK);
	assert_string_equal(s.advertise_addr, "127.0.0.2");
	assert_null(s.socket_ifname);
	jobspec_finish(&s);

	assert_int_equal(net_resolve_local_addr("localhost", &addr, &ifname, &d), 0);
	assert_string_equal(addr, "127.0.0.1");
	assert_null(ifname);
	free(addr);
	assert_int_equal(net_resolve_local_addr("0:0::1", &addr, &ifname, &d), 0);
	assert_string_equal(addr, "::1"); /* normalised */
	free(addr);
}

static void nproc_counts_cpus_and_gpus(void **state)
{
	struct job_spec s;
	struct crun_diag d, gd = {0};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int gpus;

	(void)state;
	assert_int_equal(parse(ARGS("--nproc-per-node", "cpu", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.nproc_per_node, cpus);
	assert_false(s.nproc_is_gpu);
	jobspec_finish(&s);

	gpus = gpu_count(&gd);
	assert_true(gpus >= 0);
	print_message("gpu_count: %d (%s)\n", gpus, gd.msg);
	assert_int_equal(parse(ARGS("--nproc-per-node", "auto", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.nproc_per_node, gpus > 0 ? gpus : cpus);
	assert_int_equal(s.nproc_is_gpu, gpus > 0);
	jobspec_finish(&s);

	if (gpus > 0) {
		assert_int_equal(parse(ARGS("--nproc-per-node", "gpu", "true"), &s, &d), CLI_OK);
		assert_int_equal(s.nproc_per_node, gpus);
		assert_true(s.nproc_is_gpu);
		jobspec_finish(&s);
		/* Only the visible devices count. */
		setenv("CUDA_VISIBLE_DEVICES", "0", 1);
		assert_int_equal(parse(ARGS("--nproc-per-node", "gpu", "true"), &s, &d), CLI_OK);
		assert_int_equal(s.nproc_per_node, 1);
		jobspec_finish(&s);
	}
	/* No visible device (or no driver at all): a clear error naming the flag. */
	setenv("CUDA_VISIBLE_DEVICES", "", 1);
	assert_int_equal(parse(ARGS("--nproc-per-node", "gpu", "true"), &s, &d), CLI_USAGE);
	print_message("%s\n", d.msg);
	assert_true(strncmp(d.msg, "--nproc-per-node: gpu: no ", 26) == 0);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--nproc-per-node", "auto", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.nproc_per_node, cpus);
	jobspec_finish(&s);
	unsetenv("CUDA_VISIBLE_DEVICES");
}

static void pet_env_fills_flags_and_command_line_wins(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	setenv("PET_NPROC_PER_NODE", "3", 1);
	setenv("PET_NNODES", "2", 1);
	setenv("PET_RDZV_BACKEND", "c10d", 1);
	setenv("PET_RDZV_ENDPOINT", "h:1", 1);
	setenv("PET_RDZV_ID", "envjob", 1);
	setenv("PET_MAX_RESTARTS", "4", 1);
	setenv("PET_STANDALONE", "0", 1);
	setenv("PET_VIRTUAL_LOCAL_RANK", "1", 1);
	setenv("PET_RDZV_CONF", "join_timeout=7", 1);
	assert_int_equal(parse(ARGS("--nproc-per-node", "5", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.nproc_per_node, 5);
	assert_int_equal(s.min_nodes, 2);
	assert_int_equal(s.max_nodes, 2);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_C10D);
	assert_string_equal(s.rdzv_endpoint, "h:1");
	assert_string_equal(s.rdzv_id, "envjob");
	assert_int_equal(s.max_restarts, 4);
	assert_false(s.standalone);
	assert_true(s.virtual_local_rank);
	assert_int_equal(s.rdzv.join_timeout_ms, 7000);
	jobspec_finish(&s);
	clear_pet_env();

	/* A bad value from the environment names the variable. */
	setenv("PET_NNODES", "abc", 1);
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_USAGE);
	assert_string_equal(d.msg, "PET_NNODES: expected N or MIN:MAX with 1 <= N <= 1000000, got "
				   "\"abc\"");
	jobspec_finish(&s);
	/* ... unless the command line overrides it. */
	assert_int_equal(parse(ARGS("--nnodes", "1", "true"), &s, &d), CLI_OK);
	jobspec_finish(&s);
	clear_pet_env();

	/* A scheduler's PET_NODE_RANK does not break a dynamic or standalone job. */
	setenv("PET_NODE_RANK", "3", 1);
	assert_int_equal(parse(ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "h", "--nnodes",
				    "1:4", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.node_rank, -1);
	assert_int_equal(s.rdzv.node_rank, -1);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--standalone", "true"), &s, &d), CLI_OK);
	jobspec_finish(&s);
	/* ... but it is the node rank of a static job. */
	assert_int_equal(parse(ARGS("--nnodes", "4", "true"), &s, &d), CLI_OK);
	assert_int_equal(s.node_rank, 3);
	jobspec_finish(&s);
	clear_pet_env();

	setenv("PET_STANDALONE", "maybe", 1);
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_USAGE);
	assert_string_equal(d.msg, "PET_STANDALONE: expected 0 or 1, got \"maybe\"");
	jobspec_finish(&s);
	clear_pet_env();
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

/* ---- bad command lines: one exact line each, exit 2 ---- */

struct bad {
	const char *args[12];
	const char *msg;  /* exact, or a prefix when prefix is set */
	bool prefix;
};

static void bad_command_lines_fail_with_one_line(void **state)
{
	char nonexec[160], dirprog[160], missing_py[160], path_hint[160], fileep[200];
	char bigval[5000];
	const struct bad table[] = {
		{{"--nnodes", "3:2", "true"}, "--nnodes: MIN 3 is above MAX 2", false},
		{{"--nnodes", "0", "true"},
		 "--nnodes: expected N or MIN:MAX with 1 <= N <= 1000000, got \"0\"", false},
		{{"--nnodes", "1:", "true"},
		 "--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX <= 1000000, got \"1:\"", false},
		{{"--nnodes", "1:2", "true"},
		 "--nnodes: static rendezvous needs a fixed node count, got 1:2 (use --rdzv-backend "
		 "c10d for elastic jobs)", false},
		{{"--nproc-per-node", "0", "true"}, "--nproc-per-node: 0 is out of range 1..4096", false},
		{{"--nproc_per_node=-2", "true"}, "--nproc_per_node: -2 is out of range 1..4096", false},
		{{"--nproc-per-node", "eight", "true"},
		 "--nproc-per-node: expected a count, gpu, cpu or auto, got \"eight\"", false},
		{{"--nproc-per-node", "99999999999999999999", "true"},
		 "--nproc-per-node: 99999999999999999999 is out of range 1..4096", false},
		{{"--rdzv-backend", "c10d", "--rdzv-endpoint", "h", "--node-rank", "1", "--nnodes",
		  "2", "true"},
		 "--node-rank: only for --rdzv-backend static (c10d assigns node ranks itself)", false},
		{{"--nnodes", "2", "--node-rank", "2", "true"}, "--node-rank: 2 is out of range 0..1",
		 false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "host:99999", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"host:99999\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "[::1", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"[::1\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", ":29400", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \":29400\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "my host:29400", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"my host:29400\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "[nope]:1", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"[nope]:1\"", false},
		{{"--rdzv-endpoint", "-h:1", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"-h:1\"", false},
		{{"--master-addr", "a,b", "true"},
		 "--master-addr: expected a host name or IP address, got \"a,b\"", false},
		{{"--rdzv-backend=c10d", "--nnodes=2", "--rdzv-endpoint", "h:0", "true"},
		 "--rdzv-endpoint: port 0 cannot be found by other nodes (--nnodes 2:2)", false},
		{{"--rdzv-backend", "etcd", "true"},
		 "--rdzv-backend: etcd is not supported yet (use c10d, static or file)", false},
		{{"--rdzv-backend", "zk", "true"},
		 "--rdzv-backend: unknown backend \"zk\" (use c10d, tcp, static or file)", false},
		{{"--rdzv-backend", "file", "true"},
		 "--rdzv-endpoint: required with --rdzv-backend file (file:///shared/path)", false},
		{{"--rdzv-backend", "file", "--rdzv-endpoint", "/tmp/x", "true"},
		 "--rdzv-endpoint: expected file:///ABSOLUTE/PATH, got \"/tmp/x\"", false},
		{{"--rdzv-backend", "file", "--rdzv-endpoint", "file:///no/such/dir/x", "true"},
		 "--rdzv-endpoint: directory /no/such/dir: No such file or directory", false},
		{{"--rdzv-endpoint", "file:///tmp/x", "true"},
		 "--rdzv-endpoint: a file:// endpoint needs --rdzv-backend file", false},
		{{"--rdzv-id", "a/b", "true"},
		 "--rdzv-id: \"/\" and spaces are not allowed in a run id", false},
		{{"--rdzv-id=", "true"}, "--rdzv-id: empty value", false},
		{{"--rdzv-conf", "join_timeout=5,bogus=1", "true"},
		 "--rdzv-conf: unknown key \"bogus\" (known: join_timeout, last_call_timeout, "
		 "close_timeout, heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt, "
		 "read_timeout, is_host)", false},
		{{"--rdzv-conf", "join_timeout=abc", "true"},
		 "--rdzv-conf: join_timeout: expected seconds, got \"abc\"", false},
		{{"--rdzv-conf", "join_timeout=0", "true"},
		 "--rdzv-conf: join_timeout: must be above 0 seconds", false},
		{{"--rdzv-conf", "is_host=maybe", "true"},
		 "--rdzv-conf: is_host: expected 0 or 1, got \"maybe\"", false},
		{{"--rdzv-conf", "timeout", "true"},
		 "--rdzv-conf: expected KEY=VALUE, got \"timeout\"", false},
		{{"--rdzv-conf", "keep_alive_max_attempt=0", "true"},
		 "--rdzv-conf: keep_alive_max_attempt: expected an integer >= 1, got \"0\"", false},
		{{"--max-restarts", "1x", "true"}, "--max-restarts: expected an integer, got \"1x\"",
		 false},
		{{"--max_restarts", "-1", "true"}, "--max_restarts: -1 is out of range 0..1000000",
		 false},
		{{"--master-port", "70000", "true"}, "--master-port: 70000 is out of range 0..65535",
		 false},
		{{"--master-port", "65535", "--nnodes", "2", "true"},
		 "--master-port: port 65535 leaves no port for the store (it uses the master port + 1)",
		 false},
		{{"--nnodes=2", "--master-port=0", "true"},
		 "--master-port: port 0 cannot be found by other nodes", false},
		{{"--shutdown-timeout", "-1", "true"},
		 "--shutdown-timeout: -1 seconds is out of range 0..31536000", false},
		{{"--monitor-interval", "nan", "true"},
		 "--monitor-interval: expected seconds, got \"nan\"", false},
		{{"--start-method", "thread", "true"},
		 "--start-method: expected spawn, fork or forkserver, got \"thread\"", false},
		{{"--logs-specs", "mypkg", "true"},
		 "--logs-specs: Python LogsSpecs plugins are not supported (only \"default\"; use "
		 "--log-dir and --log-prefix)", false},
		{{"--bogus", "true"}, "--bogus: unknown option (see crun --help)", false},
		{{"--bogus=1", "true"}, "--bogus: unknown option (see crun --help)", false},
		{{"-x", "true"}, "-x: unknown option (see crun --help)", false},
		{{"--nnodes"}, "--nnodes: missing value (N|MIN:MAX)", false},
		{{"--nnodes", "--nproc-per-node", "2", "true"}, "--nnodes: missing value (N|MIN:MAX)",
		 false},
		{{"-r"}, "-r: missing value (STD|RANK:STD,...)", false},
		{{"--standalone=1", "true"}, "--standalone: takes no value", false},
		{{"-mx", "true"}, "-m: takes no value (got \"-mx\")", false},
		{{"--standalone", "--nnodes", "2", "true"},
		 "--standalone: runs one node, but --nnodes is 2:2", false},
		{{"-m", "--no-python", "mod"}, "-m: cannot be combined with --no-python", false},
		{{"--run-path", "--no_python", "x"}, "--run-path: cannot be combined with --no-python",
		 false},
		{{"--redirects", "4", "true"},
		 "--redirects: expected 0..3 or LOCAL_RANK:0..3,..., got \"4\"", false},
		{{"-t", "0:1,x", "true"}, "-t: expected LOCAL_RANK:0..3, got \"x\"", false},
		{{"-t", "5000:1", "true"},
		 "-t: expected LOCAL_RANK:0..3 with LOCAL_RANK < 1024, got \"5000:1\"", false},
		{{"--local-ranks-filter", "0,5", "--nproc-per-node", "2", "true"},
		 "--local-ranks-filter: local rank 5 is out of range 0..1 (--nproc-per-node 2)", false},
		{{"--local-ranks-filter", "a", "true"},
		 "--local-ranks-filter: expected local ranks like 0,2, got \"a\"", false},
		{{"--signals-to-handle", "SIGFOO", "true"},
		 "--signals-to-handle: unknown signal \"SIGFOO\"", false},
		{{"--signals-to-handle", "SIGKILL", "true"},
		 "--signals-to-handle: SIGKILL cannot be handled", false},
		{{"--signals-to-handle", ",", "true"}, "--signals-to-handle: no signal given", false},
		{{"--log-prefix", "[{bogus}]", "true"},
		 "--log-prefix: unknown field \"{bogus}\" (use {rank} {local_rank} {role} {host})", false},
		{{"--log-prefix", "{rank", "true"}, "--log-prefix: unclosed \"{\" in \"{rank\"", false},
		{{"--log-dir", "/etc/passwd", "true"},
		 "--log-dir: /etc/passwd exists and is not a directory", false},
		{{"--role", "", "true"}, "--role: empty value", false},
		{{"--master-addr", "a\nb", "true"}, "--master-addr: control character in value", false},
		{{"--local-addr", "no-such-host.invalid", "true"},
		 "--local-addr: \"no-such-host.invalid\" is not an address, an interface or a known "
		 "host (", true},
		{{"/nonexistent/prog"}, "program /nonexistent/prog: no such file", false},
		{{"no-such-cmd-xyz"}, "program no-such-cmd-xyz: not found in PATH", false},
		{{nonexec}, NULL, false}, /* filled below */
		{{"/tmp"}, "program /tmp: is a directory", false},
		{{"--no-python", dirprog}, NULL, false},
		{{"missing.py"}, "program missing.py: no such file", false},
		{{"-m", ""}, "program: empty name", false},
		{{}, "missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun --help)",
		 false},
		{{"--nproc-per-node", "2"},
		 "missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun --help)",
		 false},
		{{"--", NULL},
		 "missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun --help)",
		 false},
		{{"--role", bigval, "true"}, "--role: longer than 128 bytes", false},
		{{path_hint}, NULL, false},
		{{"--rdzv-backend", "file", "--rdzv-endpoint", fileep, "true"}, NULL, false},
	};
	char expect[256];
	struct job_spec s;
	struct crun_diag d;
	size_t i;
	int rc;

	(void)state;
	memset(bigval, 'x', sizeof(bigval) - 1);
	bigval[sizeof(bigval) - 1] = '\0';
	snprintf(nonexec, sizeof(nonexec), "%s", noexec_file);
	snprintf(dirprog, sizeof(dirprog), "%s", tmpdir);
	snprintf(missing_py, sizeof(missing_py), "%s/none.py", tmpdir);
	snprintf(path_hint, sizeof(path_hint), "%s", "worker");
	snprintf(fileep, sizeof(fileep), "file://%s/", tmpdir);
	assert_int_equal(chdir(tmpdir), 0);
	for (i = 0; i < ARRAY_SIZE(table); i++) {
		rc = parse(table[i].args, &s, &d);
		print_message("case %zu: rc %d: %s\n", i, rc, d.msg);
		assert_int_equal(rc, CLI_USAGE);
		assert_int_equal(d.code, CRUN_ECONFIG);
		assert_null(strchr(d.msg, '\n'));
		if (table[i].args[0] == nonexec) {
			snprintf(expect, sizeof(expect),
				 "program %s: not executable (chmod +x it, or use --run-path to run it "
				 "under python)", noexec_file);
		} else if (table[i].args[1] == dirprog) {
			snprintf(expect, sizeof(expect), "program %s: is a directory", tmpdir);
		} else if (table[i].args[0] == path_hint) {
			/* "worker" exists here, but not in PATH: suggest ./worker like a shell. */
			snprintf(expect, sizeof(expect),
				 "program worker: not found in PATH (use ./worker)");
		} else if (table[i].args[3] == fileep) {
			snprintf(expect, sizeof(expect),
				 "--rdzv-endpoint: file://%s/ names a directory, not a file", tmpdir);
		} else {
			snprintf(expect, sizeof(expect), "%s", table[i].msg);
		}
		if (table[i].prefix) {
			assert_true(strncmp(d.msg, expect, strlen(expect)) == 0);
		} else {
			assert_string_equal(d.msg, expect);
		}
		jobspec_finish(&s);
	}
	assert_int_equal(chdir("/"), 0);
}

/* Odd argument vectors never crash: each returns 0, 1 or 2, and a failure is one line. */
static void odd_argv_never_crashes(void **state)
{
	static char huge[100000];
	const char *const odd[][6] = {
		{"", NULL},          {"=", NULL},        {"--=", "true", NULL},
		{"---", "true"},     {"-", NULL},        {"--nnodes=", "true"},
		{"--nnodes=:", "true"}, {"--rdzv-conf=,,,", "true"}, {"--rdzv-conf==", "true"},
		{"-r", "", "true"},  {"-rx", "true"},    {"-t=", "true"},
		{"--tee", ",", "true"}, {"--local-ranks-filter=,", "true"},
		{"--log-prefix={}", "true"}, {"--log-prefix=}{", "true"},
		{"--nproc-per-node", " 1", "true"}, {"--nnodes", "1 ", "true"},
		{"--signals-to-handle", "0", "true"}, {"--signals-to-handle", "99999", "true"},
		{"--master-addr", huge, "true"}, {huge, NULL}, {"--local-addr", huge, "true"},
		{"--rdzv-id", huge, "true"}, {"--rdzv-conf", huge, "true"},
		{"--rdzv-backend=c10d", "--rdzv-endpoint", huge, "true"},
		{"\xff\xfe", NULL}, {"--\xff", "true"}, {"-\x01", "true"},
		{"--local-addr", "", "true"}, {"--log-dir", "", "true"},
	};
	struct job_spec s;
	struct crun_diag d;
	size_t i;
	int rc;

	(void)state;
	memset(huge, 'a', sizeof(huge) - 1);
	huge[sizeof(huge) - 1] = '\0';
	for (i = 0; i < ARRAY_SIZE(odd); i++) {
		rc = parse(odd[i], &s, &d);
		assert_true(rc == CLI_OK || rc == CLI_USAGE);
		if (rc == CLI_USAGE) {
			assert_true(d.msg[0] != '\0');
			assert_null(strchr(d.msg, '\n'));
		}
		jobspec_finish(&s);
	}
}

/* cli_parse() itself prints "crun: <msg>\n" on stderr and nothing else. */
static void cli_parse_prints_one_line(void **state)
{
	char *argv[] = {(char *)"crun", (char *)"--nnodes", (char *)"3:2", (char *)"true", NULL};
	char path[160], buf[512];
	struct job_spec s;
	ssize_t n;
	int fd, saved;

	(void)state;
	snprintf(path, sizeof(path), "%s/stderr", tmpdir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	fflush(stderr);
	saved = dup(2);
	assert_true(saved >= 0);
	dup2(fd, 2);
	assert_int_equal(cli_parse(4, argv, &s), CLI_USAGE);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_string_equal(buf, "crun: --nnodes: MIN 3 is above MAX 2\n");
	jobspec_finish(&s);
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

/* ---- crun(1) ---- */

static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	if (n > 0) {
		assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	}
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void man_page_documents_every_flag(void **state)
{
	static const char *const vars[] = {
		"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
		"GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
		"MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
		"TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE",
		"TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "CRUN_STORE_ENDPOINT",
		"CRUN_STORE_PREFIX", "CRUN_STORE_TOKEN", "CRUN_BACKEND", "NCCL_SOCKET_IFNAME",
		"GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "PYTHON_EXEC", "PET_NPROC_PER_NODE",
		"CRUN_LOG_LEVEL",
	};
	static const char *const sections[] = {"# NAME", "# SYNOPSIS", "# DESCRIPTION", "# OPTIONS",
					       "# ENVIRONMENT", "# EXIT STATUS", "# EXAMPLES",
					       "# SEE ALSO"};
	const char *src = getenv("CRUN_SOURCE_DIR");
	char path[512], flag[80], *help = NULL, *page, *q;
	size_t hlen = 0, n, flags = 0;
	FILE *mem;

	(void)state;
	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/man/crun.1.scd", src);
	page = read_all(path);
	mem = open_memstream(&help, &hlen);
	assert_non_null(mem);
	cli_usage(mem);
	fclose(mem);
	for (q = strstr(help, "--"); q != NULL; q = strstr(q + n, "--")) {
		n = 2 + strspn(q + 2, "abcdefghijklmnopqrstuvwxyz-");
		if (n == 2 || n >= sizeof(flag)) {
			continue;
		}
		memcpy(flag, q, n);
		flag[n] = '\0';
		if (strstr(page, flag) == NULL) {
			fail_msg("crun --help prints %s but man/crun.1.scd does not document it", flag);
		}
		flags++;
	}
	assert_true(flags >= 28);
	for (n = 0; n < ARRAY_SIZE(vars); n++) {
		if (strstr(page, vars[n]) == NULL) {
			fail_msg("man/crun.1.scd does not mention %s", vars[n]);
		}
	}
	for (n = 0; n < ARRAY_SIZE(sections); n++) {
		if (strstr(page, sections[n]) == NULL) {
			fail_msg("man/crun.1.scd lacks the section %s", sections[n]);
		}
	}
	free(help);
	free(page);
}

/*
 * Run @argv (argv[0] a path) with stdin from @in (or /dev/null), an extra environment
 * variable @env ("NAME=VALUE" or NULL), and stdout/stderr captured into malloc'd strings.
 * Waits at most 30 s (a pidfd, no polling), then kills the child. Returns the exit status.
 */
static int run_capture(char *const argv[], const char *in, const char *env, char **out,
		       char **err)
{
	char opath[160], epath[160];
	struct pollfd pfd;
	pid_t pid;
	int status, fd, pidfd, ready;

	snprintf(opath, sizeof(opath), "%s/out", tmpdir);
	snprintf(epath, sizeof(epath), "%s/err", tmpdir);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		fd = open(in != NULL ? in : "/dev/null", O_RDONLY);
		if (fd < 0 || dup2(fd, 0) < 0) {
			_exit(126);
		}
		fd = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 1) < 0) {
			_exit(126);
		}
		fd = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 2) < 0) {
			_exit(126);
		}
		if (env != NULL) {
			putenv((char *)env);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	assert_true(pidfd >= 0);
	pfd.fd = pidfd;
	pfd.events = POLLIN;
	do {
		ready = poll(&pfd, 1, 30000);
	} while (ready < 0 && errno == EINTR);
	close(pidfd);
	if (ready == 0) {
		kill(pid, SIGKILL);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (ready == 0) {
		fail_msg("%s did not finish in 30 s", argv[0]);
	}
	*out = read_all(opath);
	*err = read_all(epath);
	unlink(opath);
	unlink(epath);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* scdoc must accept the page: run the real tool on it. */
static void scdoc_accepts_man_page(void **state)
{
	const char *scdoc = getenv("CRUN_SCDOC");
	const char *src = getenv("CRUN_SOURCE_DIR");
	char *argv[] = {NULL, NULL};
	char path[512], *out, *err;

	(void)state;
	if (scdoc == NULL) {
		skip();
	}
	argv[0] = (char *)scdoc;
	snprintf(path, sizeof(path), "%s/man/crun.1.scd", src);
	assert_int_equal(run_capture(argv, path, NULL, &out, &err), 0);
	assert_string_equal(err, "");
	assert_non_null(strstr(out, ".SH OPTIONS"));
	free(out);
	free(err);
}

/* ---- the real crun binary (test 'cli-exe'; CRUN_EXE names it) ---- */

static const char *crun_exe(void)
{
	const char *exe = getenv("CRUN_EXE");

	if (exe == NULL) {
		skip();
	}
	return exe;
}

static void crun_binary_help_matches_man_page(void **state)
{
	const char *src = getenv("CRUN_SOURCE_DIR");
	char *argv[] = {(char *)crun_exe(), (char *)"--help", NULL};
	char *out, *err, *page, *q, path[512], flag[80];
	size_t n, flags = 0;

	(void)state;
	assert_int_equal(run_capture(argv, NULL, NULL, &out, &err), 0);
	assert_string_equal(err, "");
	assert_true(strncmp(out, "Usage: crun ", 12) == 0);
	snprintf(path, sizeof(path), "%s/man/crun.1.scd", src);
	page = read_all(path);
	for (q = strstr(out, "--"); q != NULL; q = strstr(q + n, "--")) {
		n = 2 + strspn(q + 2, "abcdefghijklmnopqrstuvwxyz-");
		if (n == 2 || n >= sizeof(flag)) {
			continue;
		}
		memcpy(flag, q, n);
		flag[n] = '\0';
		if (strstr(page, flag) == NULL) {
			fail_msg("crun --help prints %s but man/crun.1.scd does not document it", flag);
		}
		flags++;
	}
	assert_true(flags >= 28);
	free(page);
	free(out);
	free(err);
}

static void crun_binary_version(void **state)
{
	char *argv[] = {(char *)crun_exe(), (char *)"--version", NULL};
	char *out, *err;

	(void)state;
	assert_int_equal(run_capture(argv, NULL, NULL, &out, &err), 0);
	assert_true(strncmp(out, "crun ", 5) == 0);
	assert_string_equal(err, "");
	free(out);
	free(err);
}

/* Bad command lines: exit 2, exactly one line on stderr, nothing on stdout, nothing started. */
static void crun_binary_bad_flags_exit_2(void **state)
{
	static const struct {
		const char *args[8];
		const char *env;
		const char *line;
	} cases[] = {
		{{"--nnodes", "3:2", "true"}, NULL, "crun: --nnodes: MIN 3 is above MAX 2\n"},
		{{"--no_python", "/nonexistent"}, NULL, "crun: program /nonexistent: no such file\n"},
		{{"--rdzv-backend", "etcd", "true"}, NULL,
		 "crun: --rdzv-backend: etcd is not supported yet (use c10d, static or file)\n"},
		{{"--frobnicate", "true"}, NULL, "crun: --frobnicate: unknown option (see crun --help)\n"},
		{{NULL}, NULL,
		 "crun: missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun "
		 "--help)\n"},
		{{"true"}, "PET_NPROC_PER_NODE=0",
		 "crun: PET_NPROC_PER_NODE: 0 is out of range 1..4096\n"},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "h", "--node-rank", "0", "true"}, NULL,
		 "crun: --node-rank: only for --rdzv-backend static (c10d assigns node ranks "
		 "itself)\n"},
	};
	char *argv[10], *out, *err;
	size_t i, j;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		argv[0] = (char *)crun_exe();
		for (j = 0; cases[i].args[j] != NULL; j++) {
			argv[j + 1] = (char *)cases[i].args[j];
		}
		argv[j + 1] = NULL;
		assert_int_equal(run_capture(argv, NULL, cases[i].env, &out, &err), 2);
		assert_string_equal(err, cases[i].line);
		assert_string_equal(out, "");
		free(out);
		free(err);
	}
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
		cmocka_unit_test_teardown(signals_and_flags, each_teardown),
		cmocka_unit_test_teardown(local_addr_resolves_interfaces_and_names, each_teardown),
		cmocka_unit_test_teardown(nproc_counts_cpus_and_gpus, each_teardown),
		cmocka_unit_test_teardown(pet_env_fills_flags_and_command_line_wins, each_teardown),
		cmocka_unit_test_teardown(good_command_lines_table, each_teardown),
		cmocka_unit_test_teardown(bad_command_lines_fail_with_one_line, each_teardown),
		cmocka_unit_test_teardown(odd_argv_never_crashes, each_teardown),
		cmocka_unit_test_teardown(cli_parse_prints_one_line, each_teardown),
		cmocka_unit_test_teardown(help_and_version_exit_early, each_teardown),
		cmocka_unit_test(man_page_documents_every_flag),
		cmocka_unit_test(scdoc_accepts_man_page),
		cmocka_unit_test(crun_binary_help_matches_man_page),
		cmocka_unit_test(crun_binary_version),
		cmocka_unit_test(crun_binary_bad_flags_exit_2),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("cli", tests, group_setup, group_teardown);
}
