/* SPDX-License-Identifier: MIT */
/* tests/comm/fake_gpu_harness.c: what the fake-GPU tests share: children, the fakes' knobs, a store. */
#include <stdarg.h> /* cmocka 1.x wants these before cmocka.h */
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/common/fs.h"
#include "tests/comm/fake_gpu_harness.h"

struct fake_fns fk;

static void fake_load(void)
{
	char name[32];
	void *cu, *nc, *drv;

	snprintf(name, sizeof(name), "libcudart.so.%d", CUDART_VERSION / 1000);
	cu = dlopen(name, RTLD_NOW);
	nc = dlopen("libnccl.so.2", RTLD_NOW);
	drv = dlopen("libcuda.so.1", RTLD_NOW);
	CHECK(cu != NULL && nc != NULL && drv != NULL, "%s", dlerror());
	*(void **)&fk.ctx_state = dlsym(drv, "cuDevicePrimaryCtxGetState");
	*(void **)&fk.malloc = dlsym(cu, "cudaMalloc");
	*(void **)&fk.free = dlsym(cu, "cudaFree");
	*(void **)&fk.malloc_at = dlsym(cu, "fake_cuda_malloc_at");
	*(void **)&fk.launch = dlsym(cu, "fake_cuda_launch");
	*(void **)&fk.event_query = dlsym(cu, "cudaEventQuery");
	*(void **)&fk.set_device = dlsym(cu, "cudaSetDevice");
	*(void **)&fk.get_device = dlsym(cu, "cudaGetDevice");
	*(void **)&fk.hold = dlsym(cu, "fake_cuda_stream_hold");
	*(void **)&fk.held_queries = dlsym(cu, "fake_cuda_held_queries");
	*(void **)&fk.log = dlsym(cu, "fake_cuda_log");
	*(void **)&fk.stat = dlsym(nc, "fake_nccl_stat");
	*(void **)&fk.async_error = dlsym(nc, "fake_nccl_async_error");
	CHECK(fk.hold != NULL && fk.log != NULL && fk.malloc_at != NULL && fk.launch != NULL &&
		      fk.stat != NULL && fk.async_error != NULL &&
		      fk.ctx_state != NULL && dlsym(drv, "fake_cu_mark_active") != NULL,
	      "%s and libnccl.so.2 are not the fakes: LD_LIBRARY_PATH must lead to "
	      "tests/comm/fake_gpu (LD_LIBRARY_PATH=%s)",
	      name, getenv("LD_LIBRARY_PATH") != NULL ? getenv("LD_LIBRARY_PATH") : "unset");
}

static char store_dir[64];

struct crun_store *store_open(void)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	struct crun_store *st = NULL;
	char ep[128], err[256];

	snprintf(store_dir, sizeof(store_dir), "/tmp/crun-fakegpu-XXXXXX");
	CHECK(mkdtemp(store_dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(ep, sizeof(ep), "file://%s/store", store_dir);
	o.endpoint = ep;
	o.prefix = "t/";
	CHECK(crun_store_open(&o, &st, err, sizeof(err)) == 0, "store: %s", err);
	return st;
}

void store_done(struct crun_store *st)
{
	crun_store_close(st);
	fs_rm_rf(store_dir);
}

int create(struct crun_store *st, enum crun_backend b, int timeout_ms, struct crun_comm **c)
{
	struct crun_comm_opts o = CRUN_COMM_OPTS_INIT;

	o.backend = b;
	o.timeout_ms = timeout_ms;
	return crun_comm_create(st, 0, 1, &o, c);
}

float *dev_floats(size_t n)
{
	void *p = NULL;

	CHECK(fk.malloc(&p, n * sizeof(float)) == cudaSuccess, "fake cudaMalloc");
	return p;
}

void in_child(void (*fn)(void), const char *const *env)
{
	static const char *const clear[] = {"RANK",
					    "WORLD_SIZE",
					    "LOCAL_RANK",
					    "LOCAL_WORLD_SIZE",
					    "CRUN_SINGLE",
					    "CRUN_BACKEND",
					    "CRUN_GPU_SHARING",
					    "CUDA_VISIBLE_DEVICES",
					    "FAKE_CUDA_DEVICES",
					    "FAKE_CUDA_ERROR",
					    "FAKE_CUDA_DRIVER",
					    "FAKE_NCCL_HANG",
					    "FAKE_NCCL_RANKS",
					    "FAKE_NCCL_PEER_ADD",
					    "FAKE_CUDA_HANG",
					    "CRUN_VIRTUAL_LOCAL_RANK",
					    "OMPI_COMM_WORLD_LOCAL_RANK",
					    "OMPI_COMM_WORLD_LOCAL_SIZE",
					    "SLURM_LOCALID",
					    "SLURM_NTASKS_PER_NODE"};
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* A crash here is the case's failure, not cmocka's to catch and carry on from. */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGABRT, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		signal(SIGFPE, SIG_DFL);
		signal(SIGILL, SIG_DFL);
		for (size_t i = 0; i < sizeof(clear) / sizeof(clear[0]); i++) {
			unsetenv(clear[i]);
		}
		for (; *env != NULL; env++) {
			char name[64];
			const char *eq = strchr(*env, '=');

			snprintf(name, sizeof(name), "%.*s", (int)(eq - *env), *env);
			if (eq[1] == '\0') {
				unsetenv(name);
			} else {
				setenv(name, eq + 1, 1);
			}
		}
		alarm(60); /* a case that hangs is killed, and fails, here */
		fake_load();
		fn();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fail_msg("case failed: %s %d", WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	}
}

int capture_begin(int *saved)
{
	int fd = memfd_create("fakegpu-log", MFD_CLOEXEC);

	fflush(stderr);
	*saved = dup(STDERR_FILENO);
	CHECK(fd >= 0 && *saved >= 0 && dup2(fd, STDERR_FILENO) >= 0, "capture");
	return fd;
}

void capture_end(int fd, int saved, char *buf, size_t len)
{
	ssize_t n;

	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fd, buf, len - 1, 0);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	fputs(buf, stderr);
}

int device_has_context(int dev)
{
	unsigned int flags = 0;
	int on = 0;

	CHECK(fk.ctx_state(dev, &flags, &on) == 0, "cuDevicePrimaryCtxGetState(%d)", dev);
	return on;
}
