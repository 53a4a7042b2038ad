/* SPDX-License-Identifier: MIT */
/* worker_api/gpu_loader.c: dlopen the CUDA runtime and NCCL once; clear errors when absent. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>

#include "config.h"
#include "src/common/log.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "worker_api/gpu_loader.h"

#ifndef CRUN_CUDA_ROOT
#define CRUN_CUDA_ROOT "/usr/local/cuda"
#endif

/*
 * NCCL 2.14 brought ncclCommInitRankConfig (non-blocking init) and ncclCommFinalize, 2.18
 * ncclCommSplit (comm_nccl.c splits a blocking communicator off the non-blocking one).
 */
#define GPU_NCCL_MIN_VERSION 21800

/* The symbol a name stands for after the headers' own macros (e.g. the _ptsz variants). */
#define GPU_STR_(x) #x
#define GPU_STR(x) GPU_STR_(x)

struct gpu_sym {
	const char *name;
	size_t offset; /* of its pointer in the table */
};

#define GPU_CUDA_SYM(f) {GPU_STR(f), offsetof(struct gpu_cuda, f)},
static const struct gpu_sym cuda_syms[] = {GPU_CUDA_FUNCS(GPU_CUDA_SYM)};
#define GPU_NCCL_SYM(f) {GPU_STR(f), offsetof(struct gpu_nccl, f)},
static const struct gpu_sym nccl_syms[] = {GPU_NCCL_FUNCS(GPU_NCCL_SYM)};

/* What one library's loading came to; written once under pthread_once, then only read. */
struct gpu_lib {
	pthread_once_t once;
	int rc;
	struct crun_diag diag;
};

static struct gpu_lib cuda_lib = {.once = PTHREAD_ONCE_INIT};
static struct gpu_cuda cuda_table;
static struct gpu_lib nccl_lib = {.once = PTHREAD_ONCE_INIT};
static struct gpu_nccl nccl_table;

/*
 * Open "<base>.<major>", then "<base>", through the dynamic loader's search (LD_LIBRARY_PATH,
 * the ld.so cache, the default directories), then both in cuda-root's lib64/ and lib/.
 * On success the real path goes into @path. The error names what was tried and the loader's
 * reason for the first name (the one a working installation provides).
 */
static void *lib_open(const char *what, const char *base, int major, char *path, size_t pathlen,
		      struct crun_diag *d)
{
	static const char *const dirs[] = {"", CRUN_CUDA_ROOT "/lib64/", CRUN_CUDA_ROOT "/lib/"};
	char versioned[64], name[512], first_err[256] = "";
	const struct link_map *lm = NULL;
	const char *err;
	size_t i, k;
	void *h;

	snprintf(versioned, sizeof(versioned), "%s.%d", base, major);
	for (i = 0; i < ARRAY_SIZE(dirs); i++) {
		for (k = 0; k < 2; k++) {
			snprintf(name, sizeof(name), "%s%s", dirs[i], k == 0 ? versioned : base);
			h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
			if (h != NULL) {
				if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL &&
				    lm->l_name != NULL && lm->l_name[0] != '\0') {
					snprintf(path, pathlen, "%s", lm->l_name);
				} else {
					snprintf(path, pathlen, "%s", name);
				}
				return h;
			}
			err = dlerror();
			if (first_err[0] == '\0') {
				snprintf(first_err, sizeof(first_err), "%s",
					 err != NULL ? err : "unknown error");
			}
		}
	}
	diag_set(d, CRUN_EBACKEND,
		 "cannot load %s: %s (also tried %s and both names in %s/lib64 and %s/lib)", what,
		 first_err, base, CRUN_CUDA_ROOT, CRUN_CUDA_ROOT);
	return NULL;
}

/* Fill @table's pointers from @h; the error names the first missing symbol. */
static int resolve(void *h, const struct gpu_sym *syms, size_t n, void *table, const char *path,
		   const char *version, struct crun_diag *d)
{
	size_t i;
	void *p;

	for (i = 0; i < n; i++) {
		p = dlsym(h, syms[i].name);
		if (p == NULL) {
			return diag_set(d, CRUN_EBACKEND, "%s (%s): missing symbol %s", path,
					version, syms[i].name);
		}
		memcpy((char *)table + syms[i].offset, &p, sizeof(p));
	}
	return 0;
}

/*
 * The CUDA runtime opens the driver library as "libcuda.so.1" through the dynamic loader's
 * search. Where that finds none but cuda-root holds a driver library (the forward
 * compatibility package's compat/, or a driver installed beside the toolkit; never the
 * toolkit's lib64/stubs/, which only links), open that one first: the runtime's later
 * dlopen("libcuda.so.1") then matches it by soname. src/gpu_count.c looks in the same
 * places, so crun's GPU count and the workers see the same driver.
 */
static void driver_preload(void)
{
	static const char *const dirs[] = {CRUN_CUDA_ROOT "/compat/", CRUN_CUDA_ROOT "/lib64/",
					   CRUN_CUDA_ROOT "/lib/"};
	char name[512];
	size_t i;

	if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != NULL) {
		return;
	}
	for (i = 0; i < ARRAY_SIZE(dirs); i++) {
		snprintf(name, sizeof(name), "%slibcuda.so.1", dirs[i]);
		if (dlopen(name, RTLD_NOW | RTLD_LOCAL) != NULL) {
			log_debug("gpu: loaded the NVIDIA driver library %s (not on the loader's path)",
				  name);
			return;
		}
	}
	(void)dlerror();
}

static void cuda_load_once(void)
{
	struct gpu_cuda *t = &cuda_table;
	cudaError_t (*get_version)(int *);
	char version[64] = "version unknown";
	void *h, *p;
	int v = 0;

	driver_preload();
	h = lib_open("the CUDA runtime", "libcudart.so", CUDART_VERSION / 1000, t->path,
		     sizeof(t->path), &cuda_lib.diag);
	if (h == NULL) {
		cuda_lib.rc = CRUN_EBACKEND;
		return;
	}
	p = dlsym(h, "cudaRuntimeGetVersion");
	if (p != NULL) {
		memcpy(&get_version, &p, sizeof(p));
		if (get_version(&v) == cudaSuccess) {
			t->version = v;
			snprintf(version, sizeof(version), "CUDA runtime %d.%d", v / 1000,
				 v % 1000 / 10);
		}
	}
	/*
	 * The table's types come from the headers this library was built with, and the CUDA
	 * runtime keeps its ABI within a major version only: an unversioned libcudart.so of
	 * another major is refused rather than called with the wrong layouts.
	 */
	if (v != 0 && v / 1000 != CUDART_VERSION / 1000) {
		cuda_lib.rc = diag_set(&cuda_lib.diag, CRUN_EBACKEND,
				       "%s: %s found, libcrun-worker was built for CUDA %d.x",
				       t->path, version, CUDART_VERSION / 1000);
		return;
	}
	cuda_lib.rc = resolve(h, cuda_syms, ARRAY_SIZE(cuda_syms), t, t->path, version,
			      &cuda_lib.diag);
	if (cuda_lib.rc == 0) {
		log_debug("gpu: loaded %s (%s)", t->path, version);
	}
}

static void nccl_version_string(int v, char *buf, size_t len)
{
	/* NCCL_VERSION(): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 on. */
	if (v >= 20900) {
		snprintf(buf, len, "NCCL %d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
	} else {
		snprintf(buf, len, "NCCL %d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
	}
}

static void nccl_load_once(void)
{
	struct gpu_nccl *t = &nccl_table;
	ncclResult_t (*get_version)(int *);
	char version[64] = "version unknown";
	void *h, *p;
	int v = 0;

	h = lib_open("NCCL", "libnccl.so", NCCL_MAJOR, t->path, sizeof(t->path), &nccl_lib.diag);
	if (h == NULL) {
		nccl_lib.rc = CRUN_EBACKEND;
		return;
	}
	p = dlsym(h, "ncclGetVersion");
	if (p != NULL) {
		memcpy(&get_version, &p, sizeof(p));
		if (get_version(&v) == ncclSuccess) {
			t->version = v;
			nccl_version_string(v, version, sizeof(version));
		}
	}
	if (t->version != 0 && t->version < GPU_NCCL_MIN_VERSION) {
		nccl_lib.rc = diag_set(&nccl_lib.diag, CRUN_EBACKEND,
				       "%s: %s found, 2.18 or newer needed", t->path, version);
		return;
	}
	if (t->version != 0 && (t->version >= 20900 ? t->version / 10000 : t->version / 1000) !=
				       NCCL_MAJOR) {
		nccl_lib.rc = diag_set(&nccl_lib.diag, CRUN_EBACKEND,
				       "%s: %s found, libcrun-worker was built for NCCL %d.x",
				       t->path, version, NCCL_MAJOR);
		return;
	}
	nccl_lib.rc = resolve(h, nccl_syms, ARRAY_SIZE(nccl_syms), t, t->path, version,
			      &nccl_lib.diag);
	if (nccl_lib.rc == 0) {
		log_debug("gpu: loaded %s (%s)", t->path, version);
	}
}

int gpu_cuda_load(const struct gpu_cuda **out, struct crun_diag *d)
{
	pthread_once(&cuda_lib.once, cuda_load_once);
	if (cuda_lib.rc < 0) {
		return diag_set(d, cuda_lib.rc, "%s", cuda_lib.diag.msg);
	}
	*out = &cuda_table;
	return 0;
}

int gpu_nccl_load(const struct gpu_nccl **out, struct crun_diag *d)
{
	pthread_once(&nccl_lib.once, nccl_load_once);
	if (nccl_lib.rc < 0) {
		return diag_set(d, nccl_lib.rc, "%s", nccl_lib.diag.msg);
	}
	*out = &nccl_table;
	return 0;
}

int gpu_cuda_device_count(const struct gpu_cuda *cu, struct crun_diag *d)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	cudaError_t e;
	int n = 0, drv = 0;

	e = cu->cudaGetDeviceCount(&n);
	if (e == cudaSuccess && n > 0) {
		return n;
	}
	if (e == cudaSuccess || e == cudaErrorNoDevice) {
		return diag_set(d, CRUN_ENODEV, "no CUDA device visible (CUDA_VISIBLE_DEVICES%s%s%s)",
				cvd != NULL ? "=\"" : " unset", cvd != NULL ? cvd : "",
				cvd != NULL ? "\"" : "");
	}
	/* 0 when no driver is installed (cudaDriverGetVersion's documented answer). */
	if (cu->cudaDriverGetVersion(&drv) != cudaSuccess) {
		drv = -1;
	}
	if (drv == 0) {
		return diag_set(d, CRUN_ENODEV, "no NVIDIA driver: the CUDA runtime finds no "
				"libcuda.so.1 (cudaGetDeviceCount: %s)", cu->cudaGetErrorString(e));
	}
	if (e == cudaErrorInsufficientDriver && drv > 0) {
		return diag_set(d, CRUN_ENODEV,
				"the NVIDIA driver supports CUDA %d.%d, older than the CUDA runtime "
				"%d.%d (%s): update the driver or use the CUDA forward-compatibility "
				"package (cudaGetDeviceCount: %s)",
				drv / 1000, drv % 1000 / 10, cu->version / 1000,
				cu->version % 1000 / 10, cu->path, cu->cudaGetErrorString(e));
	}
	if (e == cudaErrorSystemNotReady) {
		return diag_set(d, CRUN_ENODEV,
				"the system is not ready for CUDA: on NVSwitch machines is "
				"nvidia-fabricmanager running? (cudaGetDeviceCount: %s)",
				cu->cudaGetErrorString(e));
	}
	return diag_set(d, CRUN_ENODEV, "cudaGetDeviceCount: %s (error %d, driver CUDA %d.%d)",
			cu->cudaGetErrorString(e), (int)e, drv > 0 ? drv / 1000 : 0,
			drv > 0 ? drv % 1000 / 10 : 0);
}

/* Driver functions, from the libcuda.so.1 the runtime loaded (never loaded here). */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int (*drv_device_get)(int *dev, int ordinal);
static int (*drv_primary_state)(int dev, unsigned int *flags, int *active);
static int (*drv_ptr_attr)(void *data, int attr, uintptr_t ptr);
static int (*drv_ptr_attrs)(unsigned int n, int *attrs, void **data, uintptr_t ptr);

/* CUpointer_attribute values of cuda.h (stable since CUDA 4.0 / 10.0 / 11.2). */
#define GPU_CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define GPU_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define GPU_CU_POINTER_ATTRIBUTE_RANGE_SIZE 12

static void drv_load_once(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	void *a, *b;

	if (h == NULL) {
		(void)dlerror();
		return;
	}
	/* CUdevice is an int and CUresult an enum: the prototypes of cuda.h, without it. */
	a = dlsym(h, "cuDeviceGet");
	b = dlsym(h, "cuDevicePrimaryCtxGetState");
	if (a != NULL && b != NULL) {
		memcpy(&drv_device_get, &a, sizeof(a));
		memcpy(&drv_primary_state, &b, sizeof(b));
	}
	/* CUdeviceptr is an unsigned integer of pointer size; each pair optional on its own. */
	a = dlsym(h, "cuPointerGetAttribute");
	b = dlsym(h, "cuPointerGetAttributes");
	if (a != NULL && b != NULL) {
		memcpy(&drv_ptr_attr, &a, sizeof(a));
		memcpy(&drv_ptr_attrs, &b, sizeof(b));
	}
}

int gpu_cuda_alloc_of(const void *p, unsigned long long *id, uintptr_t *base, size_t *size)
{
	int attrs[3] = {GPU_CU_POINTER_ATTRIBUTE_BUFFER_ID,
			GPU_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
			GPU_CU_POINTER_ATTRIBUTE_RANGE_SIZE};
	void *data[3] = {id, base, size};

	pthread_once(&drv_once, drv_load_once);
	if (drv_ptr_attrs == NULL || drv_ptr_attrs(3, attrs, data, (uintptr_t)p) != 0) {
		return -1;
	}
	return 0;
}

int gpu_cuda_buffer_id(const void *p, unsigned long long *id)
{
	pthread_once(&drv_once, drv_load_once);
	if (drv_ptr_attr == NULL ||
	    drv_ptr_attr(id, GPU_CU_POINTER_ATTRIBUTE_BUFFER_ID, (uintptr_t)p) != 0) {
		return -1;
	}
	return 0;
}

int gpu_cuda_device_active(int dev)
{
	unsigned int flags = 0;
	int cudev = 0, active = 1;

	pthread_once(&drv_once, drv_load_once);
	if (drv_primary_state == NULL || drv_device_get(&cudev, dev) != 0 ||
	    drv_primary_state(cudev, &flags, &active) != 0) {
		return 1;
	}
	return active != 0;
}
