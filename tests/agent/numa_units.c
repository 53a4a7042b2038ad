/* SPDX-License-Identifier: MIT */
/*
 * tests/agent/numa_units.c: --numa-binding's CPU sets (agent/numa.c) over made-up /sys trees: a
 * two-socket machine with two NUMA nodes and GPUs on each, a one-node machine, and the cases in
 * which nothing is bound. The machine's own /sys is never read here.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/numa.h"
#include "src/common/fs.h"

static char root[64];

static void put(const char *path, const char *text)
{
	char full[PATH_MAX], dir[PATH_MAX];
	FILE *f;

	snprintf(full, sizeof(full), "%s%s", root, path);
	snprintf(dir, sizeof(dir), "%s", full);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(fs_mkdir_p(dir, 0755), 0);
	f = fopen(full, "w");
	assert_non_null(f);
	fprintf(f, "%s\n", text);
	fclose(f);
}

static void gpu(const char *addr, const char *cls, int node)
{
	char path[256], val[16];

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", addr);
	put(path, "0x10de");
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", addr);
	put(path, cls);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", addr);
	snprintf(val, sizeof(val), "%d", node);
	put(path, val);
}

/* Two packages, each one NUMA node of 4 CPUs (0-3, 4-7); GPUs on node 1 and node 0, listed
 * out of bus order; a NIC and an NVIDIA audio function that are not GPUs. */
static int two_nodes(void **state)
{
	char path[128];
	int c;

	(void)state;
	snprintf(root, sizeof(root), "/tmp/crun-numa.XXXXXX");
	assert_non_null(mkdtemp(root));
	put("/sys/devices/system/node/node0/cpulist", "0-3");
	put("/sys/devices/system/node/node1/cpulist", "4-5,6-7");
	for (c = 0; c < 8; c++) {
		snprintf(path, sizeof(path),
			 "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
		put(path, c < 4 ? "0" : "1");
	}
	gpu("0000:b1:00.0", "0x030200", 1);
	gpu("0000:3b:00.0", "0x030000", 0);
	gpu("0000:3b:00.1", "0x040300", 0); /* audio */
	put("/sys/bus/pci/devices/0000:18:00.0/vendor", "0x15b3");
	put("/sys/bus/pci/devices/0000:18:00.0/class", "0x020000");
	return 0;
}

static int cleanup(void **state)
{
	(void)state;
	fs_rm_rf(root);
	return 0;
}

static void expect_cpus(const cpu_set_t *s, int lo, int hi)
{
	int c;

	for (c = 0; c < 16; c++) {
		if ((c >= lo && c <= hi) != (CPU_ISSET(c, s) != 0)) {
			fail_msg("cpu %d: expected %s", c, c >= lo && c <= hi ? "set" : "clear");
		}
	}
}

static void each_rank_gets_its_gpus_node(void **state)
{
	cpu_set_t s;
	char why[160];

	(void)state;
	assert_int_equal(numa_node_count(root), 2);
	/* bus order: GPU 0 is 3b (node 0), GPU 1 is b1 (node 1) */
	assert_int_equal(numa_worker_cpus(root, "node", NULL, 0, &s, why, sizeof(why)), 0);
	expect_cpus(&s, 0, 3);
	assert_int_equal(numa_worker_cpus(root, "node", NULL, 1, &s, why, sizeof(why)), 1);
	expect_cpus(&s, 4, 7);
	/* CUDA_VISIBLE_DEVICES reorders them */
	assert_int_equal(numa_worker_cpus(root, "exclusive", "1,0", 0, &s, why, sizeof(why)), 1);
	expect_cpus(&s, 4, 7);
	assert_int_equal(numa_worker_cpus(root, "node", "1,0", 1, &s, why, sizeof(why)), 0);
	expect_cpus(&s, 0, 3);
	/* socket: the whole package */
	assert_int_equal(numa_worker_cpus(root, "socket", NULL, 1, &s, why, sizeof(why)), 1);
	expect_cpus(&s, 4, 7);
}

static void nothing_bound_says_why(void **state)
{
	cpu_set_t s;
	char why[160];

	(void)state;
	assert_int_equal(numa_worker_cpus(root, "node", NULL, 2, &s, why, sizeof(why)), -1);
	assert_string_equal(why, "no NVIDIA GPU 2 in /sys/bus/pci (2 found)");
	assert_int_equal(numa_worker_cpus(root, "node", "GPU-1234-abcd", 0, &s, why, sizeof(why)),
			 -1);
	assert_string_equal(why, "CUDA_VISIBLE_DEVICES has no device number for local rank 0");
	assert_int_equal(numa_worker_cpus(root, "node", "0", 1, &s, why, sizeof(why)), -1);
	assert_string_equal(why, "CUDA_VISIBLE_DEVICES has no entry for local rank 1");
	gpu("0000:c1:00.0", "0x030200", -1);
	assert_int_equal(numa_worker_cpus(root, "node", NULL, 2, &s, why, sizeof(why)), -1);
	assert_string_equal(why, "GPU 2 (0000:c1:00.0) has no NUMA node");
	/* one node left: nothing to bind, whatever the GPUs */
	{
		char p[PATH_MAX];

		snprintf(p, sizeof(p), "%s/sys/devices/system/node/node1", root);
		assert_int_equal(fs_rm_rf(p), 0);
	}
	assert_int_equal(numa_worker_cpus(root, "node", NULL, 0, &s, why, sizeof(why)), -1);
	assert_string_equal(why, "one NUMA node");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(each_rank_gets_its_gpus_node),
		cmocka_unit_test(nothing_bound_says_why),
	};

	return cmocka_run_group_tests_name("agent-numa", tests, two_nodes, cleanup);
}
