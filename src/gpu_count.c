/* SPDX-License-Identifier: MIT */
/* src/gpu_count.c: count the visible CUDA devices for --nproc-per-node gpu|auto. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
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

#include "src/common/clock.h"
#include "src/gpu_count.h"

#define GPU_PROBE_TIMEOUT_MS 60000

struct gpu_probe {
	int count; /* >= 0 */
	char msg[200];
};

/* The CUDA driver API, loaded at run time: no build dependency on CUDA. */
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_errstr_fn)(int, const char **);

static void gpu_probe_child(struct gpu_probe *r)
{
	cu_init_fn cu_init;
	cu_count_fn cu_count;
	cu_errstr_fn cu_errstr;
	const char *es = NULL, *cvd;
	void *h;
	int rc, n = 0;

	r->count = 0;
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(r->msg, sizeof(r->msg), "no NVIDIA driver (%s)", dlerror());
		return;
	}
	cu_init = (cu_init_fn)dlsym(h, "cuInit");
	cu_count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
	cu_errstr = (cu_errstr_fn)dlsym(h, "cuGetErrorString");
	if (cu_init == NULL || cu_count == NULL) {
		snprintf(r->msg, sizeof(r->msg), "libcuda.so.1 lacks cuInit/cuDeviceGetCount");
		return;
	}
	cvd = getenv("CUDA_VISIBLE_DEVICES");
	rc = cu_init(0);
	if (rc == 0) {
		rc = cu_count(&n);
	}
	if (rc == 100 || (rc == 0 && n == 0)) { /* CUDA_ERROR_NO_DEVICE */
		snprintf(r->msg, sizeof(r->msg), "no CUDA device visible%s%s%s",
			 cvd ? " (CUDA_VISIBLE_DEVICES=\"" : "", cvd ? cvd : "", cvd ? "\")" : "");
		return;
	}
	if (rc != 0) {
		if (cu_errstr != NULL) {
			cu_errstr(rc, &es);
		}
		snprintf(r->msg, sizeof(r->msg), "CUDA driver error %d (%s)", rc,
			 es ? es : "unknown");
		return;
	}
	r->count = n;
}

int gpu_count(struct crun_diag *d)
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
	if (r.count <= 0) {
		diag_set(d, CRUN_ENODEV, "%s", r.msg);
		return 0;
	}
	return r.count;
}
