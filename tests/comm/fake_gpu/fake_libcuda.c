/* SPDX-License-Identifier: MIT */
/* tests/comm/fake_gpu/fake_libcuda.c: the driver calls libcrun-worker makes itself, faked. */

/*
 * Built as libcuda.so.1 beside fake_cudart.c, which links it (as the real runtime loads the
 * real driver) and marks a device's primary context active when a thread sets it or
 * allocates on it, as CUDA 12's cudaSetDevice() initialises it. The loader's
 * gpu_cuda_device_active() reads that through cuDevicePrimaryCtxGetState.
 */
#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_MAX_DEVICES 64

static int active[FAKE_MAX_DEVICES];

FAKE_EXPORT void fake_cu_mark_active(int dev);
FAKE_EXPORT int cuDeviceGet(int *dev, int ordinal);
FAKE_EXPORT int cuDevicePrimaryCtxGetState(int dev, unsigned int *flags, int *on);

FAKE_EXPORT void fake_cu_mark_active(int dev)
{
	if (dev >= 0 && dev < FAKE_MAX_DEVICES) {
		__atomic_store_n(&active[dev], 1, __ATOMIC_SEQ_CST);
	}
}

FAKE_EXPORT int cuDeviceGet(int *dev, int ordinal)
{
	*dev = ordinal;
	return 0;
}

FAKE_EXPORT int cuDevicePrimaryCtxGetState(int dev, unsigned int *flags, int *on)
{
	if (dev < 0 || dev >= FAKE_MAX_DEVICES) {
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	}
	*flags = 0;
	*on = __atomic_load_n(&active[dev], __ATOMIC_SEQ_CST);
	return 0;
}
