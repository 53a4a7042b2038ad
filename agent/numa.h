/* SPDX-License-Identifier: MIT */
/* agent/numa.h: --numa-binding: the CPUs near a worker's GPU, from /sys. */
#ifndef CRUN_AGENT_NUMA_H
#define CRUN_AGENT_NUMA_H

#include <sched.h>
#include <stddef.h>

/*
 * The CPUs worker @local_rank is bound to for --numa-binding @mode: its GPU is the NVIDIA PCI
 * display or 3D controller (vendor 0x10de) at the index the @local_rank-th entry of @visible
 * (CUDA_VISIBLE_DEVICES; NULL: @local_rank itself) names, counting those devices in PCI bus
 * order; its NUMA node is the device's numa_node. "node", "exclusive" and "core-complex" bind
 * to that node's CPUs, "socket" to every CPU of the same package. Every path is read under
 * @sysroot ("" for the machine's own /sys; tests pass a made-up tree).
 *
 * Returns the NUMA node (>= 0) with *@cpus set, or -1 with @why saying why nothing is bound
 * (one NUMA node, no such GPU, a GPU UUID in CUDA_VISIBLE_DEVICES, no numa_node for it).
 */
int numa_worker_cpus(const char *sysroot, const char *mode, const char *visible, int local_rank,
		     cpu_set_t *cpus, char *why, size_t whylen);

/* The NUMA nodes /sys lists under @sysroot (0 when it lists none). */
int numa_node_count(const char *sysroot);

#endif
