/* SPDX-License-Identifier: MIT */
/* src/gpu_count.c: is a GPU visible, and how many (--nproc-per-node gpu|auto, the GPU tests). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>

#include "config.h"
#include "src/common/clock.h"
#include "src/common/util.h"
#include "src/gpu_count.h"

#define GPU_PROBE_TIMEOUT_MS 60000

/* CUresult values (cuda.h) the classification names. */
#define CU_SUCCESS 0
#define CU_ERROR_STUB_LIBRARY 34
#define CU_ERROR_NO_DEVICE 100
#define CU_ERROR_SYSTEM_NOT_READY 802
#define CU_ERROR_SYSTEM_DRIVER_MISMATCH 803
#define CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE 804

/* The CUDA driver API, loaded at run time: no build dependency on CUDA. */
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_version_fn)(int *);
typedef int (*cu_errstr_fn)(int, const char **);

/* What a person can do about a cuInit failure, where the code says. */
static const char *init_hint(int rc)
{
	switch (rc) {
	case CU_ERROR_SYSTEM_NOT_READY:
		return " (on NVSwitch systems: is nvidia-fabricmanager running?)";
	case CU_ERROR_SYSTEM_DRIVER_MISMATCH:
		return " (the driver library and the loaded kernel module differ in version)";
	case CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
		return " (the forward-compatibility driver does not support this GPU)";
	default:
		return "";
	}
}

void gpu_classify(const struct gpu_facts *f, struct gpu_probe *out)
{
	char cvd[96], drv[32];
	const char *es = f->init_str != NULL ? f->init_str : "unknown error";

	memset(out, 0, sizeof(*out));
	out->driver_version = f->driver_version;
	if (f->cvd != NULL) {
		snprintf(cvd, sizeof(cvd), "CUDA_VISIBLE_DEVICES=\"%.64s\"", f->cvd);
	} else {
		snprintf(cvd, sizeof(cvd), "CUDA_VISIBLE_DEVICES unset");
	}
	if (f->driver_version > 0) {
		snprintf(drv, sizeof(drv), "driver CUDA %d.%d", f->driver_version / 1000,
			 f->driver_version % 1000 / 10);
	} else {
		snprintf(drv, sizeof(drv), "driver version unknown");
	}
	if (f->dev_node != NULL && f->dev_node_errno == EPERM &&
	    (f->lib_error != NULL || f->init_rc != 0 || f->count < 1)) {
		snprintf(out->msg, sizeof(out->msg),
			 "no GPU visible: %s exists but this process may not open it (EPERM: a "
			 "cgroup's device rules hide the GPUs; %s)",
			 f->dev_node, cvd);
		return;
	}
	if (f->lib_error != NULL) {
		if (f->dev_node != NULL) {
			out->state = GPU_BROKEN;
			snprintf(out->msg, sizeof(out->msg),
				 "%s exists but the NVIDIA driver library cannot be loaded: %s",
				 f->dev_node, f->lib_error);
		} else {
			snprintf(out->msg, sizeof(out->msg),
				 "no NVIDIA driver (%s) and no /dev/nvidia* device", f->lib_error);
		}
		return;
	}
	if (f->init_rc == CU_SUCCESS && f->count >= 1) {
		out->state = GPU_VISIBLE;
		out->count = f->count;
		snprintf(out->msg, sizeof(out->msg), "%d CUDA device%s (%s, %s, %s)", f->count,
			 f->count == 1 ? "" : "s", drv, f->lib_path, cvd);
		return;
	}
	if (f->init_rc == CU_SUCCESS || f->init_rc == CU_ERROR_NO_DEVICE) {
		if (f->cvd == NULL && f->dev_node != NULL) {
			out->state = GPU_BROKEN;
			snprintf(out->msg, sizeof(out->msg),
				 "%s exists but the NVIDIA driver reports no CUDA device (%s, %s)",
				 f->dev_node, drv, f->lib_path);
		} else {
			snprintf(out->msg, sizeof(out->msg), "no CUDA device visible (%s)", cvd);
		}
		return;
	}
	if (f->init_rc == CU_ERROR_STUB_LIBRARY) {
		out->state = f->dev_node != NULL ? GPU_BROKEN : GPU_NONE;
		snprintf(out->msg, sizeof(out->msg),
			 "%s%sno NVIDIA driver: %.200s is the CUDA toolkit's stub library",
			 f->dev_node != NULL ? f->dev_node : "",
			 f->dev_node != NULL ? " exists but there is " : "", f->lib_path);
		return;
	}
	out->state = f->dev_node != NULL ? GPU_BROKEN : GPU_NONE;
	snprintf(out->msg, sizeof(out->msg), "%s: cuInit: %s (CUresult %d)%s (%s, %s)",
		 f->dev_node != NULL ? "the NVIDIA driver cannot use the GPU"
				     : "the NVIDIA driver is installed but no GPU device is "
				       "(no /dev/nvidia*)",
		 es, f->init_rc, init_hint(f->init_rc), drv, f->lib_path);
}

/*
 * The driver library: the dynamic loader's search (what the CUDA runtime's own
 * dlopen("libcuda.so.1") finds), then cuda-root's (as worker_api/gpu_loader.c preloads it).
 */
static void *driver_open(char *path, size_t len, char *err, size_t errlen)
{
	static const char *const dirs[] = {CRUN_CUDA_ROOT "/compat/", CRUN_CUDA_ROOT "/lib64/",
					   CRUN_CUDA_ROOT "/lib/"};
	const struct link_map *lm = NULL;
	const char *e;
	size_t i;
	void *h;

	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h != NULL) {
		if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL && lm->l_name != NULL &&
		    lm->l_name[0] != '\0') {
			snprintf(path, len, "%s", lm->l_name);
		} else {
			snprintf(path, len, "libcuda.so.1");
		}
		return h;
	}
	e = dlerror();
	snprintf(err, errlen, "%s", e != NULL ? e : "libcuda.so.1: cannot be loaded");
	for (i = 0; i < ARRAY_SIZE(dirs); i++) {
		snprintf(path, len, "%slibcuda.so.1", dirs[i]);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (h != NULL) {
			return h;
		}
	}
	(void)dlerror();
	snprintf(path, len, "libcuda.so.1");
	return NULL;
}

/*
 * The first /dev/nvidia<N> (a GPU's device node) this process may open, into @buf, *@err 0;
 * else the first found, *@err open()'s errno; NULL when there is none.
 */
static const char *find_dev_node(char *buf, size_t len, int *err)
{
	DIR *d = opendir("/dev");
	const struct dirent *e;
	const char *p;
	char path[64];
	int fd;

	*err = 0;
	if (d == NULL) {
		return NULL;
	}
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "nvidia", 6) != 0 || e->d_name[6] == '\0') {
			continue;
		}
		for (p = e->d_name + 6; *p >= '0' && *p <= '9'; p++) {
		}
		if (*p != '\0') {
			continue;
		}
		snprintf(path, sizeof(path), "/dev/%.48s", e->d_name);
		fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
		if (fd >= 0) {
			close(fd);
			snprintf(buf, len, "%s", path);
			*err = 0;
			break;
		}
		if (buf[0] == '\0') {
			snprintf(buf, len, "%s", path);
			*err = errno;
		}
	}
	closedir(d);
	return buf[0] != '\0' ? buf : NULL;
}

static void gpu_probe_child(struct gpu_probe *r)
{
	struct gpu_facts f = {0};
	char path[512], err[256], node[64];
	cu_init_fn cu_init = NULL;
	cu_count_fn cu_count = NULL;
	cu_version_fn cu_version = NULL;
	cu_errstr_fn cu_errstr = NULL;
	void *h;

	f.cvd = getenv("CUDA_VISIBLE_DEVICES");
	h = driver_open(path, sizeof(path), err, sizeof(err));
	f.lib_path = path;
	if (h == NULL) {
		f.lib_error = err;
	} else {
		cu_init = (cu_init_fn)dlsym(h, "cuInit");
		cu_count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
		cu_version = (cu_version_fn)dlsym(h, "cuDriverGetVersion");
		cu_errstr = (cu_errstr_fn)dlsym(h, "cuGetErrorString");
		if (cu_init == NULL || cu_count == NULL) {
			snprintf(err, sizeof(err), "%.200s lacks cuInit/cuDeviceGetCount", path);
			f.lib_error = err;
		}
	}
	if (f.lib_error == NULL) {
		if (cu_version != NULL && cu_version(&f.driver_version) != CU_SUCCESS) {
			f.driver_version = 0;
		}
		f.init_rc = cu_init(0);
		if (f.init_rc == CU_SUCCESS) {
			f.init_rc = cu_count(&f.count);
		}
		if (f.init_rc != CU_SUCCESS && cu_errstr != NULL) {
			cu_errstr(f.init_rc, &f.init_str);
		}
	}
	/* After cuInit: the driver may create the device nodes itself (nvidia-modprobe). */
	node[0] = '\0';
	f.dev_node = find_dev_node(node, sizeof(node), &f.dev_node_errno);
	gpu_classify(&f, r);
}

int gpu_probe(struct gpu_probe *out, struct crun_diag *d)
{
	struct gpu_probe r;
	struct pollfd pfd;
	size_t got = 0;
	ssize_t n;
	pid_t pid;
	int fds[2], rc, status;
	int64_t deadline, left;

	memset(&r, 0, sizeof(r));
	if (pipe2(fds, O_CLOEXEC) != 0) {
		return diag_set(d, -errno, "pipe: %s", strerror(errno));
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		close(fds[0]);
		close(fds[1]);
		return diag_set(d, rc, "fork: %s", strerror(-rc));
	}
	if (pid == 0) {
		close(fds[0]);
		gpu_probe_child(&r);
		if (write(fds[1], &r, sizeof(r)) != (ssize_t)sizeof(r)) {
			_exit(1);
		}
		_exit(0);
	}
	close(fds[1]);
	deadline = crun_now_ms() + GPU_PROBE_TIMEOUT_MS;
	rc = 0;
	while (got < sizeof(r)) {
		left = deadline - crun_now_ms();
		if (left <= 0) {
			rc = diag_set(d, -ETIMEDOUT, "CUDA driver did not answer in %d s",
				      GPU_PROBE_TIMEOUT_MS / 1000);
			break;
		}
		pfd.fd = fds[0];
		pfd.events = POLLIN;
		n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			continue;
		}
		n = read(fds[0], (char *)&r + got, sizeof(r) - got);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			rc = diag_set(d, -EPIPE, "GPU probe process died");
			break;
		}
		got += (size_t)n;
	}
	close(fds[0]);
	if (rc < 0) {
		kill(pid, SIGKILL);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	if (rc < 0) {
		return rc;
	}
	r.msg[sizeof(r.msg) - 1] = '\0';
	*out = r;
	return 0;
}

int gpu_count(struct crun_diag *d)
{
	struct gpu_probe r;
	int rc;

	rc = gpu_probe(&r, d);
	if (rc < 0) {
		return rc;
	}
	if (r.state != GPU_VISIBLE) {
		diag_set(d, CRUN_ENODEV, "%s", r.msg);
		return 0;
	}
	return r.count;
}
