/* SPDX-License-Identifier: MIT */
/* tests/gpu/gpu_probe.c: is a GPU visible here? The GPU tests' skip-or-fail decision. */

/*
 * usage: gpu_probe
 * Exit 0 and print the device count when a GPU is visible and its driver initialises;
 * 77 (skip) when no GPU is visible; 1 when a GPU is there but broken (src/gpu_count.h
 * defines the three), the reason on stderr either way. tests/gpu/run.sh, bench/nccl/run.
 */
#include <stdio.h>

#include "src/gpu_count.h"

int main(int argc, char **argv)
{
	struct crun_diag d = {0};
	struct gpu_probe r;

	(void)argv;
	if (argc != 1) {
		fprintf(stderr, "usage: gpu_probe\n");
		return 2;
	}
	if (gpu_probe(&r, &d) < 0) {
		fprintf(stderr, "gpu_probe: broken: %s\n", d.msg);
		return 1;
	}
	switch (r.state) {
	case GPU_VISIBLE:
		fprintf(stderr, "gpu_probe: visible: %s\n", r.msg);
		printf("%d\n", r.count);
		return 0;
	case GPU_BROKEN:
		fprintf(stderr, "gpu_probe: broken: %s\n", r.msg);
		return 1;
	default:
		fprintf(stderr, "gpu_probe: no GPU visible: %s\n", r.msg);
		return 77;
	}
}
