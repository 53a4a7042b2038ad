/* SPDX-License-Identifier: MIT */
/* worker_api/gpu_device.h: which CUDA device a local rank uses: the arithmetic, no CUDA. */
#ifndef CRUN_WORKER_API_GPU_DEVICE_H
#define CRUN_WORKER_API_GPU_DEVICE_H

#include <stdbool.h>

#include "src/common/diag.h"

/*
 * One rule for "my device", used by crun_cuda_device(), the nccl backend's check at
 * communicator creation and (through the current device) the device DDP: local rank r of a
 * node whose @local_world ranks see @ndev devices uses device r. More local ranks than
 * devices is refused (NCCL refuses two ranks of one communicator on one GPU, and a
 * wrap-around would put them there) unless sharing is asked for, which maps r to r % ndev.
 * Pure: the caller supplies the counts, so the CPU suite tests it (tests/comm/test_gpu_pick.c).
 */

/**
 * Parse CRUN_GPU_SHARING's value @s (NULL or "" or "0": off, "1": on) into *@on.
 * Returns 0, or CRUN_ECONFIG with the message in @d.
 */
int gpu_sharing_parse(const char *s, bool *on, struct crun_diag *d);

/**
 * Parse CRUN_VIRTUAL_LOCAL_RANK's value @s (crun --virtual-local-rank sets "1": every worker
 * sees only its own GPU, as device 0, with LOCAL_RANK=0 and LOCAL_WORLD_SIZE still the
 * node's worker count, as torchrun sets them) into *@on, as gpu_sharing_parse() does.
 */
int gpu_virtual_parse(const char *s, bool *on, struct crun_diag *d);

/**
 * The device of local rank @local_rank (0 <= local_rank < local_world) among @ndev visible
 * ones, into *@dev. @cvd is CUDA_VISIBLE_DEVICES (NULL: unset), only for messages.
 * Returns 0, CRUN_ENODEV (@ndev < 1) or CRUN_ECONFIG (@local_world > @ndev without
 * @sharing: the message names both counts and CUDA_VISIBLE_DEVICES), message in @d.
 */
int gpu_device_pick(int local_rank, int local_world, int ndev, bool sharing, const char *cvd,
		    int *dev, struct crun_diag *d);

/**
 * (env.c) This process's device among @ndev visible ones by the rule above, from the job's
 * environment (crun_local_rank(), crun_local_world_size(), CRUN_GPU_SHARING,
 * CUDA_VISIBLE_DEVICES). Under CRUN_VIRTUAL_LOCAL_RANK=1 the process is the only rank of
 * its visible devices (local rank 0 of 1): device 0. Returns 0, the crun_init() code (CRUN_ENOTCRUN outside crun), or
 * gpu_device_pick()'s; the message in @d.
 */
int worker_cuda_device(int ndev, int *dev, struct crun_diag *d);

#endif
