/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/test_cli_env.c: what the host gives: PET_* variables, interfaces, CPUs, GPUs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>

#include "tests/agent/cli/cli_fixture.h"
#include "src/common/net.h"
#include "src/gpu_count.h"

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


int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(local_addr_resolves_interfaces_and_names, each_teardown),
		cmocka_unit_test_teardown(nproc_counts_cpus_and_gpus, each_teardown),
		cmocka_unit_test_teardown(pet_env_fills_flags_and_command_line_wins, each_teardown),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("cli-env", tests, group_setup, group_teardown);
}
