/* SPDX-License-Identifier: MIT */
/* tests/slurm/test_slurm.c: hostlists, scontrol's node records, a step's SLURM_* to a job spec. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/cli.h"
#include "src/slurm.h"

static char fakebin[64];       /* a folder with a fake scontrol, first on PATH */
static char scontrol_log[128]; /* what the fake was asked */
static char *saved_path;

/* Every name of @list joined by spaces. */
static const char *expand_all(const char *list)
{
	static char all[4096];
	char name[SLURM_NAME_MAX];
	size_t i, n = 0;

	all[0] = '\0';
	for (i = 0; slurm_hostlist_nth(list, i, name, sizeof(name)) == 0; i++) {
		n += (size_t)snprintf(all + n, sizeof(all) - n, "%s%s", i ? " " : "", name);
	}
	return all;
}

static void hostlist_expands_ranges_padding_and_groups(void **state)
{
	(void)state;
	assert_string_equal(expand_all("n[1-3,5]"), "n1 n2 n3 n5");
	assert_int_equal(slurm_hostlist_count("n[1-3,5]"), 4);
	assert_string_equal(expand_all("n[08-10]"), "n08 n09 n10");
	assert_string_equal(expand_all("login,b[2-3]-ib"), "login b2-ib b3-ib");
	assert_string_equal(expand_all("rack[1-2]-gpu[1-2]"),
			    "rack1-gpu1 rack1-gpu2 rack2-gpu1 rack2-gpu2");
	assert_string_equal(expand_all("n1"), "n1");
	assert_int_equal(slurm_hostlist_count("a[0-999],b[0-9]"), 1010);
}

static void hostlist_nth_picks_one_name(void **state)
{
	char name[SLURM_NAME_MAX];

	(void)state;
	assert_int_equal(slurm_hostlist_nth("gpu[001-128]", 0, name, sizeof(name)), 0);
	assert_string_equal(name, "gpu001");
	assert_int_equal(slurm_hostlist_nth("gpu[001-128]", 127, name, sizeof(name)), 0);
	assert_string_equal(name, "gpu128");
	assert_int_equal(slurm_hostlist_nth("gpu[001-128]", 128, name, sizeof(name)), -ENOENT);
	assert_int_equal(slurm_hostlist_nth("abcdef", 0, name, 4), -ENAMETOOLONG);
}

static void hostlist_rejects_what_slurm_never_writes(void **state)
{
	static const char *const bad[] = {
		"",	"n[1-",	  "n]",	   "n[1]]", "n[[1]]", "n[3-1]", "n[]",
		"a,,b", "n[a-b]", "n[1-]", "n[-2]", ",n1",    "n1,",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (slurm_hostlist_count(bad[i]) != -EINVAL) {
			fail_msg("\"%s\" was accepted (%ld)", bad[i], slurm_hostlist_count(bad[i]));
		}
	}
	assert_int_equal(slurm_hostlist_count("n[0-99999999]"), -E2BIG);
}

static void node_addr_comes_from_the_named_record(void **state)
{
	static const char text[] =
		"NodeName=n10 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.10 NodeHostName=h10\n"
		"NodeName=n1 Arch=x86_64 CPUAlloc=0 NodeAddr=10.0.0.1 NodeHostName=h1 Port=6818\n"
		"NodeName=n2 Arch=x86_64 NodeHostName=h2\n";
	char addr[SLURM_NAME_MAX];

	(void)state;
	assert_int_equal(slurm_parse_node_addr(text, "n1", addr, sizeof(addr)), 0);
	assert_string_equal(addr, "10.0.0.1");
	assert_int_equal(slurm_parse_node_addr(text, "n10", addr, sizeof(addr)), 0);
	assert_string_equal(addr, "10.0.0.10");
	assert_int_equal(slurm_parse_node_addr(text, "n2", addr, sizeof(addr)), -ENOENT);
	assert_int_equal(slurm_parse_node_addr(text, "n3", addr, sizeof(addr)), -ENOENT);
	assert_int_equal(slurm_parse_node_addr(text, "n", addr, sizeof(addr)), -ENOENT);
}

static void default_port_is_even_and_spread(void **state)
{
	(void)state;
	assert_int_equal(slurm_default_port("3", "0"), 29548);
	assert_int_equal(slurm_default_port("3", "1"), 29550);
	assert_int_equal(slurm_default_port("125", "0"), 29500);
	assert_true(slurm_default_port("4294967295", "7") % 2 == 0);
	assert_true(slurm_default_port("4294967295", "7") <= 31498);
}

/* ---- the environment of a step ---- */

static const char *const slurm_vars[] = {
	"SLURM_JOB_ID",		"SLURM_JOBID",	      "SLURM_STEP_ID",	    "SLURM_STEPID",
	"SLURM_STEP_NUM_NODES", "SLURM_NNODES",	      "SLURM_NODEID",	    "SLURM_STEP_NUM_TASKS",
	"SLURM_NTASKS",		"SLURM_LOCALID",      "SLURM_GPUS_ON_NODE", "SLURM_CPUS_ON_NODE",
	"SLURM_STEP_NODELIST",	"SLURM_JOB_NODELIST", "SLURM_NODELIST",	    "SLURMD_NODENAME",
};

static void clear_slurm_env(void)
{
	size_t i;

	for (i = 0; i < sizeof(slurm_vars) / sizeof(slurm_vars[0]); i++) {
		unsetenv(slurm_vars[i]);
	}
	for (i = 0; environ[i] != NULL;) {
		if (strncmp(environ[i], "PET_", 4) == 0) {
			char name[128];
			size_t n = strcspn(environ[i], "=");

			snprintf(name, sizeof(name), "%.*s", (int)n, environ[i]);
			unsetenv(name);
			continue;
		}
		i++;
	}
}

/* Node 1 of job 77 step 3 on n[1-2], as srun sets it. */
static void set_step_env(void)
{
	clear_slurm_env();
	setenv("SLURM_JOB_ID", "77", 1);
	setenv("SLURM_STEP_ID", "3", 1);
	setenv("SLURM_STEP_NUM_NODES", "2", 1);
	setenv("SLURM_NNODES", "2", 1);
	setenv("SLURM_NODEID", "1", 1);
	setenv("SLURM_STEP_NUM_TASKS", "2", 1);
	setenv("SLURM_LOCALID", "0", 1);
	setenv("SLURM_CPUS_ON_NODE", "3", 1);
	setenv("SLURM_STEP_NODELIST", "n[1-2]", 1);
	setenv("SLURMD_NODENAME", "n2", 1);
}

static void step_is_read_from_slurm_variables(void **state)
{
	struct slurm_step st;
	struct crun_diag d = {0};

	(void)state;
	set_step_env();
	assert_true(slurm_in_step());
	assert_int_equal(slurm_step_read(&st, &d), 0);
	assert_string_equal(st.job_id, "77");
	assert_string_equal(st.step_id, "3");
	assert_int_equal(st.nnodes, 2);
	assert_string_equal(st.nnodes_var, "SLURM_STEP_NUM_NODES");
	assert_int_equal(st.node_id, 1);
	assert_int_equal(st.cpus_on_node, 3);
	assert_int_equal(st.gpus_on_node, 0);
	assert_string_equal(st.first_node, "n1");
	assert_string_equal(st.this_node, "n2");

	/* Without SLURMD_NODENAME, this node is entry SLURM_NODEID of the list. */
	unsetenv("SLURMD_NODENAME");
	setenv("SLURM_STEP_NODELIST", "a7,b[3-4]", 1);
	setenv("SLURM_STEP_NUM_NODES", "3", 1);
	setenv("SLURM_NODEID", "2", 1);
	assert_int_equal(slurm_step_read(&st, &d), 0);
	assert_string_equal(st.first_node, "a7");
	assert_string_equal(st.this_node, "b4");
}

static void step_read_says_what_is_wrong(void **state)
{
	struct slurm_step st;
	struct crun_diag d = {0};

	(void)state;
	set_step_env();
	unsetenv("SLURM_STEP_ID"); /* a batch script: the job, but no step */
	assert_false(slurm_in_step());
	assert_int_equal(slurm_step_read(&st, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "job 77: not inside a job step"));
	assert_non_null(strstr(d.msg, "srun --ntasks-per-node=1"));

	set_step_env();
	setenv("SLURM_NODEID", "2", 1);
	assert_int_equal(slurm_step_read(&st, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "SLURM_NODEID: expected a node index 0..1, got \"2\""));

	set_step_env();
	setenv("SLURM_STEP_NODELIST", "n[1-3]", 1);
	assert_int_equal(slurm_step_read(&st, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "SLURM_STEP_NODELIST names 3 nodes, but "
				      "SLURM_STEP_NUM_NODES is 2"));

	set_step_env();
	setenv("SLURM_STEP_NODELIST", "n[1-", 1);
	assert_int_equal(slurm_step_read(&st, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "SLURM_STEP_NODELIST: not a hostlist"));
	clear_slurm_env();
}

/* ---- the command line inside a step (a fake scontrol answers for Slurm) ---- */

static int parse(const char *const *args, struct job_spec *s, struct crun_diag *d)
{
	char *argv[32];
	int argc = 0;

	argv[argc++] = (char *)"crun";
	while (*args != NULL && argc < 31) {
		argv[argc++] = (char *)*args++;
	}
	argv[argc] = NULL;
	memset(d, 0, sizeof(*d));
	return cli_parse_diag(argc, argv, s, d);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *scontrol_args(void)
{
	static char buf[256];
	FILE *f = fopen(scontrol_log, "r");
	size_t n = 0;

	buf[0] = '\0';
	if (f != NULL) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	while (n > 0 && buf[n - 1] == '\n') {
		buf[--n] = '\0';
	}
	unlink(scontrol_log);
	return buf;
}

static void step_fills_in_a_static_rendezvous(void **state)
{
	struct job_spec s;
	struct crun_diag d;
	char port[16];

	(void)state;
	set_step_env();
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_OK);
	assert_string_equal(scontrol_args(), "-o show node n1,n2");
	assert_int_equal(s.rdzv_kind, RDZV_KIND_STATIC);
	assert_int_equal(s.min_nodes, 2);
	assert_int_equal(s.max_nodes, 2);
	assert_int_equal(s.node_rank, 1);
	assert_int_equal(s.rdzv.node_rank, 1);
	assert_string_equal(s.master_addr, "10.1.0.1");
	assert_int_equal(s.master_port, slurm_default_port("77", "3"));
	snprintf(port, sizeof(port), "10.1.0.1:%d", s.master_port);
	assert_string_equal(s.rdzv_endpoint, port);
	assert_string_equal(s.advertise_addr, "10.1.0.2");
	assert_string_equal(s.rdzv_id, "77.3");
	assert_int_equal(s.nproc_per_node, 3); /* SLURM_CPUS_ON_NODE */
	jobspec_finish(&s);

	/* GPUs first; what the command line says wins over Slurm's defaults. */
	setenv("SLURM_GPUS_ON_NODE", "4", 1);
	assert_int_equal(parse(ARGS("--rdzv-backend", "slurm", "--rdzv-id", "mine", "--master-port",
				    "4000", "--local-addr", "127.0.0.1", "true"),
			       &s, &d),
			 CLI_OK);
	assert_string_equal(scontrol_args(), "-o show node n1"); /* only node 0 asked for */
	assert_int_equal(s.nproc_per_node, 4);
	assert_string_equal(s.rdzv_id, "mine");
	assert_int_equal(s.master_port, 4000);
	assert_string_equal(s.advertise_addr, "127.0.0.1");
	jobspec_finish(&s);

	/* One node: no address is needed, and none is asked for. */
	set_step_env();
	setenv("SLURM_STEP_NUM_NODES", "1", 1);
	setenv("SLURM_STEP_NODELIST", "n2", 1);
	setenv("SLURM_NODEID", "0", 1);
	setenv("SLURM_STEP_NUM_TASKS", "1", 1);
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_OK);
	assert_string_equal(scontrol_args(), "");
	assert_int_equal(s.max_nodes, 1);
	jobspec_finish(&s);
	clear_slurm_env();
}

static void step_is_not_used_when_told_how_to_rendezvous(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	set_step_env();
	assert_int_equal(parse(ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:5",
				    "--nnodes", "2", "true"),
			       &s, &d),
			 CLI_OK);
	assert_int_equal(s.rdzv_kind, RDZV_KIND_C10D);
	assert_string_equal(s.rdzv_id, "none");
	assert_int_equal(s.nproc_per_node, 1);
	assert_string_equal(scontrol_args(), "");
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--standalone", "true"), &s, &d), CLI_OK);
	assert_true(s.standalone);
	jobspec_finish(&s);
	clear_slurm_env();
}

static void step_contradictions_are_refused(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	set_step_env();
	assert_int_equal(parse(ARGS("--rdzv-backend", "slurm", "--node-rank", "0", "true"), &s, &d),
			 CLI_USAGE);
	assert_string_equal(d.msg, "--node-rank: Slurm sets the node rank (SLURM_NODEID=1)");
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--nnodes", "3", "true"), &s, &d), CLI_USAGE);
	assert_string_equal(d.msg, "--nnodes: the Slurm step has 2 nodes (SLURM_STEP_NUM_NODES); "
				   "leave it out");
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--nnodes", "2", "true"), &s, &d), CLI_OK);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--rdzv-backend", "slurm", "--standalone", "true"), &s, &d),
			 CLI_USAGE);
	assert_string_equal(d.msg, "--standalone: cannot be combined with --rdzv-backend slurm");
	jobspec_finish(&s);

	setenv("SLURM_STEP_NUM_TASKS", "4", 1); /* srun -N2 -n4: two agents per node */
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_USAGE);
	assert_non_null(strstr(d.msg, "4 tasks on 2 nodes, but crun is one agent per node"));
	jobspec_finish(&s);

	unsetenv("SLURM_STEP_ID");
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_OK); /* a batch script: plain crun */
	assert_int_equal(s.max_nodes, 1);
	jobspec_finish(&s);
	assert_int_equal(parse(ARGS("--rdzv-backend", "slurm", "true"), &s, &d), CLI_USAGE);
	assert_non_null(strstr(d.msg, "--rdzv-backend slurm: job 77: not inside a job step"));
	jobspec_finish(&s);
	clear_slurm_env();
	assert_int_equal(parse(ARGS("--rdzv-backend", "slurm", "true"), &s, &d), CLI_USAGE);
	assert_non_null(strstr(d.msg, "--rdzv-backend slurm: not inside a Slurm job"));
	jobspec_finish(&s);
}

static void scontrol_failures_are_named(void **state)
{
	struct job_spec s;
	struct crun_diag d;

	(void)state;
	set_step_env();
	setenv("SLURMD_NODENAME", "n9", 1); /* the fake knows no n9 */
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_USAGE);
	assert_non_null(strstr(d.msg, "scontrol -o show node n1,n9: no NodeAddr= for node n9"));
	jobspec_finish(&s);
	setenv("SLURMD_NODENAME", "fail", 1); /* the fake exits 1 */
	assert_int_equal(parse(ARGS("true"), &s, &d), CLI_USAGE);
	assert_non_null(strstr(d.msg, "scontrol -o show node n1,fail: exit 1: slurm_load_node "
				      "error: Invalid node name specified"));
	jobspec_finish(&s);
	unlink(scontrol_log);
	clear_slurm_env();
}

static int group_setup(void **state)
{
	char path[PATH_MAX + 80], newpath[8192];
	const char *old = getenv("PATH");
	FILE *f;

	(void)state;
	snprintf(fakebin, sizeof(fakebin), "/tmp/crun-test-slurm.XXXXXX");
	if (mkdtemp(fakebin) == NULL) {
		return -1;
	}
	snprintf(scontrol_log, sizeof(scontrol_log), "%s/args", fakebin);
	snprintf(path, sizeof(path), "%s/scontrol", fakebin);
	f = fopen(path, "w");
	if (f == NULL) {
		return -1;
	}
	fprintf(f,
		"#!/bin/sh\n"
		"echo \"$@\" >>'%s'\n"
		"case \"$4\" in *fail*)\n"
		"  echo 'slurm_load_node error: Invalid node name specified' >&2; exit 1;;\n"
		"esac\n"
		"echo 'NodeName=n1 Arch=x86_64 NodeAddr=10.1.0.1 NodeHostName=h1 Port=6818'\n"
		"echo 'NodeName=n2 Arch=x86_64 NodeAddr=10.1.0.2 NodeHostName=h2 Port=6818'\n",
		scontrol_log);
	fclose(f);
	chmod(path, 0755);
	saved_path = strdup(old != NULL ? old : "/usr/bin:/bin");
	snprintf(newpath, sizeof(newpath), "%s:%s", fakebin, saved_path);
	setenv("PATH", newpath, 1);
	return 0;
}

static int group_teardown(void **state)
{
	char path[PATH_MAX + 80];

	(void)state;
	snprintf(path, sizeof(path), "%s/scontrol", fakebin);
	unlink(path);
	unlink(scontrol_log);
	rmdir(fakebin);
	setenv("PATH", saved_path, 1);
	free(saved_path);
	clear_slurm_env();
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hostlist_expands_ranges_padding_and_groups),
		cmocka_unit_test(hostlist_nth_picks_one_name),
		cmocka_unit_test(hostlist_rejects_what_slurm_never_writes),
		cmocka_unit_test(node_addr_comes_from_the_named_record),
		cmocka_unit_test(default_port_is_even_and_spread),
		cmocka_unit_test(step_is_read_from_slurm_variables),
		cmocka_unit_test(step_read_says_what_is_wrong),
		cmocka_unit_test(step_fills_in_a_static_rendezvous),
		cmocka_unit_test(step_is_not_used_when_told_how_to_rendezvous),
		cmocka_unit_test(step_contradictions_are_refused),
		cmocka_unit_test(scontrol_failures_are_named),
	};

	/* "--expand LIST": print every name, one a line (slurm.sh compares with scontrol's). */
	if (argc == 3 && strcmp(argv[1], "--expand") == 0) {
		char name[SLURM_NAME_MAX];
		size_t i;
		int rc;

		for (i = 0; (rc = slurm_hostlist_nth(argv[2], i, name, sizeof(name))) == 0; i++) {
			printf("%s\n", name);
		}
		return rc == -ENOENT ? 0 : 1;
	}
	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("slurm", tests, group_setup, group_teardown);
}
