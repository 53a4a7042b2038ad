/* SPDX-License-Identifier: MIT */
/* src/gpu_count.h: count the visible CUDA devices without holding a CUDA context. */
#ifndef CRUN_SRC_GPU_COUNT_H
#define CRUN_SRC_GPU_COUNT_H

#include "src/common/diag.h"

/*
 * "A GPU is visible" means: the NVIDIA driver library (libcuda.so.1) loads and reports at
 * least one device, or an NVIDIA device node (/dev/nvidia0, /dev/nvidia1, ...) exists. A
 * machine with neither (no driver installed: this includes a CUDA toolkit without a driver,
 * where the runtime answers cudaErrorInsufficientDriver) has no GPU; a machine with either
 * whose driver then fails (the library missing, cuInit failing: the fabric manager not
 * running, a driver/kernel-module mismatch, ...) has a broken one, which the GPU tests report
 * as a failure instead of skipping. A driver that reports no device while
 * CUDA_VISIBLE_DEVICES is set has no GPU visible: the user hid them. So does a container
 * whose cgroup denies the device nodes (they exist, but open() fails with EPERM).
 */
enum gpu_state {
	GPU_NONE = 0,	 /* no GPU visible: skip GPU work */
	GPU_VISIBLE = 1, /* count >= 1 devices, the driver initialised */
	GPU_BROKEN = 2,	 /* a GPU is there but the driver cannot use it: msg says why */
};

struct gpu_probe {
	enum gpu_state state;
	int count;	    /* GPU_VISIBLE: the driver's device count */
	int driver_version; /* cuDriverGetVersion(): 1000 * major + 10 * minor; 0 if unknown */
	char msg[320];	    /* what was found, or why not */
};

/* What the probe found, for gpu_classify(). */
struct gpu_facts {
	const char *lib_error; /* NULL: the driver library loaded, else the loader's words */
	const char *lib_path;  /* which file was loaded (or looked for) */
	int init_rc;	       /* cuInit(0)'s CUresult, then cuDeviceGetCount's */
	const char *init_str;  /* cuGetErrorString(init_rc), or NULL */
	int count;
	int driver_version;
	const char *dev_node; /* the first /dev/nvidiaN this process may open, else the first
			       * found, or NULL */
	int dev_node_errno;   /* 0, or why no node could be opened: EPERM is a cgroup's device
			       * rules hiding the GPUs (no GPU visible, as CUDA_VISIBLE_DEVICES) */
	const char *cvd;      /* CUDA_VISIBLE_DEVICES, or NULL when unset */
};

/** The rule above, as a pure function of @f, into @out. */
void gpu_classify(const struct gpu_facts *f, struct gpu_probe *out);

/**
 * Probe in a short-lived child process (so the caller never holds a CUDA context): load
 * libcuda.so.1 through the dynamic loader's search, else from the configured cuda-root's
 * compat/, lib64/ and lib/ (never lib64/stubs/; worker_api/gpu_loader.c preloads the same
 * file for the CUDA runtime), cuInit, cuDeviceGetCount, look for /dev/nvidia[0-9]*, and
 * classify. Returns 0 with @out filled, or a negative code on an OS failure or when the
 * driver does not answer within 60 s (@d says which; a hung driver on a machine with a GPU
 * is broken, and callers treat it so).
 */
int gpu_probe(struct gpu_probe *out, struct crun_diag *d);

/**
 * Count the CUDA devices the driver reports (so CUDA_VISIBLE_DEVICES is honoured) with
 * gpu_probe(). Returns the count (>= 0; 0 when no GPU is visible or the driver is broken,
 * with the reason in @d) or a negative code on an OS failure. Blocks for at most 60 s.
 */
int gpu_count(struct crun_diag *d);

#endif
