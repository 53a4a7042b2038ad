/* SPDX-License-Identifier: MIT */
/* agent/numa.c: --numa-binding: the CPUs near a worker's GPU, read from /sys (agent/numa.h). */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/numa.h"

#define NUMA_MAX_GPUS 64

/* The first line of the file @root@path into @buf; 0, or -1 when it cannot be read. */
static int read_line(const char *root, const char *path, char *buf, size_t len)
{
	char full[PATH_MAX];
	FILE *f;

	snprintf(full, sizeof(full), "%s%s", root, path);
	f = fopen(full, "re");
	if (f == NULL) {
		return -1;
	}
	if (fgets(buf, (int)len, f) == NULL) {
		fclose(f);
		return -1;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

int numa_node_count(const char *sysroot)
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "%s/sys/devices/system/node", sysroot);
	dir = opendir(path);
	if (dir == NULL) {
		return 0;
	}
	while ((e = readdir(dir)) != NULL) {
		if (strncmp(e->d_name, "node", 4) == 0 && isdigit((unsigned char)e->d_name[4])) {
			n++;
		}
	}
	closedir(dir);
	return n;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The NVIDIA GPUs' PCI addresses, in bus order, into @out (each malloc'd); how many. */
static int list_gpus(const char *root, char **out, int max)
{
	char path[PATH_MAX], val[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "%s/sys/bus/pci/devices", root);
	dir = opendir(path);
	if (dir == NULL) {
		return 0;
	}
	while ((e = readdir(dir)) != NULL && n < max) {
		if (e->d_name[0] == '.') {
			continue;
		}
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
		if (read_line(root, path, val, sizeof(val)) < 0 || strcmp(val, "0x10de") != 0) {
			continue;
		}
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
		if (read_line(root, path, val, sizeof(val)) < 0 ||
		    (strncmp(val, "0x0300", 6) != 0 && strncmp(val, "0x0302", 6) != 0)) {
			continue;
		}
		if ((out[n] = strdup(e->d_name)) != NULL) {
			n++;
		}
	}
	closedir(dir);
	qsort(out, (size_t)n, sizeof(*out), cmp_str);
	return n;
}

/* "0-3,8,10-11" into @cpus; 0, or -1 when it does not parse. */
static int parse_cpulist(const char *s, cpu_set_t *cpus)
{
	char *end;
	long a, b;

	CPU_ZERO(cpus);
	while (*s != '\0') {
		a = strtol(s, &end, 10);
		if (end == s || a < 0 || a >= CPU_SETSIZE) {
			return -1;
		}
		b = a;
		if (*end == '-') {
			s = end + 1;
			b = strtol(s, &end, 10);
			if (end == s || b < a || b >= CPU_SETSIZE) {
				return -1;
			}
		}
		for (; a <= b; a++) {
			CPU_SET((int)a, cpus);
		}
		s = *end == ',' ? end + 1 : end;
		if (*end != ',' && *end != '\0') {
			return -1;
		}
	}
	return CPU_COUNT(cpus) > 0 ? 0 : -1;
}

/* "socket": every CPU whose package is that of the first CPU in @cpus. */
static void widen_to_package(const char *root, cpu_set_t *cpus)
{
	char path[PATH_MAX], want[32] = "", pkg[32];
	cpu_set_t out;
	int c;

	CPU_ZERO(&out);
	for (c = 0; c < CPU_SETSIZE; c++) {
		if (CPU_ISSET(c, cpus)) {
			snprintf(path, sizeof(path),
				 "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
			if (read_line(root, path, want, sizeof(want)) < 0) {
				return;
			}
			break;
		}
	}
	for (c = 0; c < CPU_SETSIZE; c++) {
		snprintf(path, sizeof(path),
			 "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
		if (read_line(root, path, pkg, sizeof(pkg)) == 0 && strcmp(pkg, want) == 0) {
			CPU_SET(c, &out);
		}
	}
	if (CPU_COUNT(&out) > 0) {
		CPU_OR(cpus, cpus, &out);
	}
}

/* The physical GPU index of @local_rank: its entry in @visible, or itself. -1: a UUID. */
static int gpu_index(const char *visible, int local_rank)
{
	const char *q = visible;
	char *end;
	long v;
	int i;

	if (visible == NULL || *visible == '\0') {
		return local_rank;
	}
	for (i = 0; i < local_rank && q != NULL; i++) {
		q = strchr(q, ',');
		q = q != NULL ? q + 1 : NULL;
	}
	if (q == NULL) {
		return -2;
	}
	v = strtol(q, &end, 10);
	if (end == q || (*end != ',' && *end != '\0') || v < 0 || v > INT_MAX) {
		return -1;
	}
	return (int)v;
}

int numa_worker_cpus(const char *sysroot, const char *mode, const char *visible, int local_rank,
		     cpu_set_t *cpus, char *why, size_t whylen)
{
	char *gpus[NUMA_MAX_GPUS], path[PATH_MAX], val[4096];
	int nodes = numa_node_count(sysroot), ngpu, idx, node = -1, i;

	if (nodes <= 1) {
		snprintf(why, whylen, "%s", nodes == 0 ? "no NUMA nodes in /sys" : "one NUMA node");
		return -1;
	}
	idx = gpu_index(visible, local_rank);
	if (idx < 0) {
		snprintf(why, whylen, "CUDA_VISIBLE_DEVICES has %s for local rank %d",
			 idx == -1 ? "no device number" : "no entry", local_rank);
		return -1;
	}
	ngpu = list_gpus(sysroot, gpus, NUMA_MAX_GPUS);
	if (idx >= ngpu) {
		snprintf(why, whylen, "no NVIDIA GPU %d in /sys/bus/pci (%d found)", idx, ngpu);
	} else {
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", gpus[idx]);
		if (read_line(sysroot, path, val, sizeof(val)) == 0) {
			node = atoi(val);
		}
		if (node < 0) {
			snprintf(why, whylen, "GPU %d (%s) has no NUMA node", idx, gpus[idx]);
		}
	}
	for (i = 0; i < ngpu; i++) {
		free(gpus[i]);
	}
	if (node < 0) {
		return -1;
	}
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
	if (read_line(sysroot, path, val, sizeof(val)) < 0 || parse_cpulist(val, cpus) < 0) {
		snprintf(why, whylen, "NUMA node %d lists no CPUs", node);
		return -1;
	}
	if (strcmp(mode, "socket") == 0) {
		widen_to_package(sysroot, cpus);
	}
	return node;
}
