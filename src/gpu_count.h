/* SPDX-License-Identifier: MIT */
/* src/gpu_count.h: count the visible CUDA devices without holding a CUDA context. */
#ifndef CRUN_SRC_GPU_COUNT_H
#define CRUN_SRC_GPU_COUNT_H

#include "src/common/diag.h"

/**
 * Count the CUDA devices the driver reports (so CUDA_VISIBLE_DEVICES is honoured), by loading
 * libcuda.so.1 at run time in a short-lived child process so the agent itself never holds a
 * CUDA context. Returns the count (>= 0; 0 when there is no driver or no visible device, with
 * the reason in @d) or a negative code on an OS failure. Blocks for at most 60 s.
 */
int gpu_count(struct crun_diag *d);

#endif
