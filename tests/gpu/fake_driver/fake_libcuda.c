/* SPDX-License-Identifier: MIT */
/* tests/gpu/fake_driver/fake_libcuda.c: an NVIDIA driver library without a GPU, for gpu_probe. */

/*
 * Built as libcuda.so.1 and reached only through tests/gpu/test_gpu_probe.c's
 * LD_LIBRARY_PATH for the gpu_probe it starts. The four driver calls src/gpu_count.c makes,
 * answering as the knobs say: FAKE_CU_INIT (cuInit's CUresult, default 0), FAKE_CU_COUNT
 * (devices, default 1), FAKE_CU_DRIVER (cuDriverGetVersion, default 13000).
 */
#include <stdio.h>
#include <stdlib.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

FAKE_EXPORT int cuInit(unsigned int flags);
FAKE_EXPORT int cuDeviceGetCount(int *n);
FAKE_EXPORT int cuDriverGetVersion(int *v);
FAKE_EXPORT int cuGetErrorString(int rc, const char **s);

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);

	return s != NULL && *s != '\0' ? atoi(s) : def;
}

FAKE_EXPORT int cuInit(unsigned int flags)
{
	(void)flags;
	return env_int("FAKE_CU_INIT", 0);
}

FAKE_EXPORT int cuDeviceGetCount(int *n)
{
	*n = env_int("FAKE_CU_COUNT", 1);
	return 0;
}

FAKE_EXPORT int cuDriverGetVersion(int *v)
{
	*v = env_int("FAKE_CU_DRIVER", 13000);
	return 0;
}

FAKE_EXPORT int cuGetErrorString(int rc, const char **s)
{
	static char buf[48];

	snprintf(buf, sizeof(buf), "fake driver error %d", rc);
	*s = buf;
	return 0;
}
