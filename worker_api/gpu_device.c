/* SPDX-License-Identifier: MIT */
/* worker_api/gpu_device.c: which CUDA device a local rank uses: the arithmetic, no CUDA. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <crun/error.h>

#include "worker_api/gpu_device.h"

/* A switch variable @name's value @s: NULL, "" or "0" off, "1" on, anything else refused. */
static int flag_parse(const char *name, const char *s, bool *on, struct crun_diag *d)
{
	if (s == NULL || *s == '\0' || strcmp(s, "0") == 0) {
		*on = false;
		return 0;
	}
	if (strcmp(s, "1") == 0) {
		*on = true;
		return 0;
	}
	return diag_set(d, CRUN_ECONFIG, "%s: expected 0 or 1, got \"%.32s\"", name, s);
}

int gpu_sharing_parse(const char *s, bool *on, struct crun_diag *d)
{
	return flag_parse("CRUN_GPU_SHARING", s, on, d);
}

int gpu_virtual_parse(const char *s, bool *on, struct crun_diag *d)
{
	return flag_parse("CRUN_VIRTUAL_LOCAL_RANK", s, on, d);
}

int gpu_device_pick(int local_rank, int local_world, int ndev, bool sharing, const char *cvd,
		    int *dev, struct crun_diag *d)
{
	char vis[96];

	if (cvd != NULL) {
		snprintf(vis, sizeof(vis), "CUDA_VISIBLE_DEVICES=\"%.64s\"", cvd);
	} else {
		snprintf(vis, sizeof(vis), "CUDA_VISIBLE_DEVICES unset");
	}
	if (ndev < 1) {
		return diag_set(d, CRUN_ENODEV, "no CUDA device visible (%s)", vis);
	}
	if (local_rank < 0 || local_world < 1 || local_rank >= local_world) {
		return diag_set(d, -EINVAL, "local rank %d of %d: not a rank of this node",
				local_rank, local_world);
	}
	if (local_world > ndev && !sharing) {
		return diag_set(
			d, CRUN_ECONFIG,
			"%d local ranks (LOCAL_WORLD_SIZE) but %d visible GPU%s (%s): NCCL "
			"needs a GPU of its own for every rank; start at most %d rank%s per "
			"node (crun --nproc-per-node gpu), make more GPUs visible, or set "
			"CRUN_GPU_SHARING=1 to give local rank r GPU r %% %d",
			local_world, ndev, ndev == 1 ? "" : "s", vis, ndev, ndev == 1 ? "" : "s",
			ndev);
	}
	*dev = local_rank % ndev;
	return 0;
}
