/* SPDX-License-Identifier: MIT */
/* tests/gpu/test_gpu_probe.c: the GPU tests skip only where no GPU is visible, else they fail. */

/*
 * The classification (src/gpu_count.c's gpu_classify) on every combination that matters,
 * then the probe program (tests/gpu/gpu_probe) end to end: on this machine as it is, and
 * with a fake driver library (tests/gpu/fake_driver) that reports devices or fails to
 * initialise. usage: test_gpu_probe GPU_PROBE FAKE_DRIVER_DIR
 */
#include <stdarg.h> /* cmocka 1.x wants these before cmocka.h */
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/gpu_count.h"

static const char *probe_exe, *fake_dir;

static void classify(const struct gpu_facts *f, enum gpu_state want, const char *words,
		     struct gpu_probe *r)
{
	gpu_classify(f, r);
	if (r->state != want || (words != NULL && strstr(r->msg, words) == NULL)) {
		fail_msg("state %d, expected %d; message \"%s\", expected to contain \"%s\"",
			 (int)r->state, (int)want, r->msg, words != NULL ? words : "");
	}
}

static void classification(void **state)
{
	struct gpu_facts f;
	struct gpu_probe r;

	(void)state;
	/* The CI machine: a CUDA toolkit, no driver library, no device node. */
	f = (struct gpu_facts){.lib_error = "libcuda.so.1: cannot open shared object file",
			       .lib_path = "libcuda.so.1"};
	classify(&f, GPU_NONE, "no NVIDIA driver (libcuda.so.1: cannot open", &r);
	/* A device node but no driver library: the library is missing. */
	f.dev_node = "/dev/nvidia0";
	classify(&f, GPU_BROKEN,
		 "/dev/nvidia0 exists but the NVIDIA driver library cannot be "
		 "loaded: libcuda.so.1: cannot open",
		 &r);
	/* A working driver. */
	f = (struct gpu_facts){.lib_path = "/usr/lib/libcuda.so.1",
			       .count = 8,
			       .driver_version = 12020,
			       .dev_node = "/dev/nvidia0"};
	classify(&f, GPU_VISIBLE, "8 CUDA devices (driver CUDA 12.2", &r);
	assert_int_equal(r.count, 8);
	assert_int_equal(r.driver_version, 12020);
	/* cuInit fails where a GPU is: the fabric manager, a module mismatch, anything. */
	f.count = 0;
	f.init_rc = 802;
	f.init_str = "system not yet initialized";
	classify(&f, GPU_BROKEN, "nvidia-fabricmanager", &r);
	assert_non_null(strstr(r.msg, "cuInit: system not yet initialized (CUresult 802)"));
	f.init_rc = 803;
	classify(&f, GPU_BROKEN, "kernel module", &r);
	f.init_rc = 999;
	classify(&f, GPU_BROKEN, "CUresult 999", &r);
	/* The same with no device node: a driver installed on a machine without a GPU. */
	f.dev_node = NULL;
	classify(&f, GPU_NONE, "no GPU device is (no /dev/nvidia*)", &r);
	/* No device reported: hidden by CUDA_VISIBLE_DEVICES (no GPU), or else broken. */
	f.init_rc = 100;
	f.dev_node = "/dev/nvidia3";
	f.cvd = "";
	classify(&f, GPU_NONE, "CUDA_VISIBLE_DEVICES=\"\"", &r);
	f.cvd = NULL;
	classify(&f, GPU_BROKEN,
		 "/dev/nvidia3 exists but the NVIDIA driver reports no CUDA "
		 "device",
		 &r);
	f.init_rc = 0;
	classify(&f, GPU_BROKEN, "reports no CUDA device", &r);
	f.dev_node = NULL;
	classify(&f, GPU_NONE, "no CUDA device visible (CUDA_VISIBLE_DEVICES unset)", &r);
	/* A container whose cgroup denies the device nodes (open: EPERM): no GPU, not broken,
	 * whatever the driver then says; a node that opens is a GPU again. */
	f.init_rc = 100;
	f.dev_node = "/dev/nvidia0";
	f.dev_node_errno = EPERM;
	classify(&f, GPU_NONE, "/dev/nvidia0 exists but this process may not open it (EPERM", &r);
	f.lib_error = "libcuda.so.1: cannot open shared object file";
	classify(&f, GPU_NONE, "a cgroup's device rules hide the GPUs", &r);
	f.lib_error = NULL;
	f.dev_node_errno = EACCES; /* file permissions: the user's setup is broken */
	classify(&f, GPU_BROKEN, "reports no CUDA device", &r);
	f.dev_node_errno = 0;
	f.dev_node = NULL;
	/* The toolkit's stub found instead of a driver. */
	f.init_rc = 34;
	f.lib_path = "/usr/local/cuda/lib64/stubs/libcuda.so.1";
	classify(&f, GPU_NONE, "is the CUDA toolkit's stub library", &r);
	f.dev_node = "/dev/nvidia0";
	classify(&f, GPU_BROKEN, "/dev/nvidia0 exists but there is no NVIDIA driver", &r);
}

static int have_dev_node(void)
{
	DIR *d = opendir("/dev");
	const struct dirent *e;
	int found = 0;

	while (d != NULL && (e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' &&
		    e->d_name[6] <= '9') {
			found = 1;
		}
	}
	if (d != NULL) {
		closedir(d);
	}
	return found;
}

/* Run gpu_probe with @env (NAME=VALUE..., NULL-terminated) added: its exit status. */
static int run_probe(const char *const *env, char *out, size_t len)
{
	int fds[2], st;
	ssize_t n;
	size_t got = 0;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		for (; *env != NULL; env++) {
			putenv((char *)*env);
		}
		execl(probe_exe, probe_exe, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	while (got + 1 < len && (n = read(fds[0], out + got, len - 1 - got)) > 0) {
		got += (size_t)n;
	}
	out[got] = '\0';
	close(fds[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	print_message("gpu_probe: exit %d: %s", WEXITSTATUS(st), out);
	return WEXITSTATUS(st);
}

static void this_machine(void **state)
{
	static const char *const none[] = {NULL};
	char out[1024];
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int rc;

	(void)state;
	rc = run_probe(none, out, sizeof(out));
	if (h == NULL && !have_dev_node()) {
		/* No driver, no device node (this CI machine): a skip, never a failure. */
		assert_int_equal(rc, 77);
		assert_non_null(strstr(out, "no GPU visible: no NVIDIA driver"));
	} else {
		/* A GPU machine: 0 (working) or 1 (broken), never a skip. */
		assert_true(rc == 0 || rc == 1);
	}
	if (h != NULL) {
		dlclose(h);
	}
}

static void fake_driver(void **state)
{
	char ldp[1100], out[1024];
	const char *two[] = {ldp, "FAKE_CU_COUNT=2", "FAKE_CU_DRIVER=12080", NULL};
	const char *fabric[] = {ldp, "FAKE_CU_INIT=802", NULL};
	const char *hidden[] = {ldp, "FAKE_CU_INIT=100", "CUDA_VISIBLE_DEVICES=-1", NULL};

	(void)state;
	snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=%s", fake_dir);
	assert_int_equal(run_probe(two, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "\n2\n")); /* the count, on stdout */
	assert_non_null(strstr(out, "2 CUDA devices (driver CUDA 12.8"));
	assert_non_null(strstr(out, fake_dir));
	/* Without a device node cuInit's failure means no GPU; with one, a broken GPU. */
	if (have_dev_node()) {
		assert_int_equal(run_probe(fabric, out, sizeof(out)), 1);
		assert_non_null(strstr(out, "broken: the NVIDIA driver cannot use the GPU"));
		assert_non_null(strstr(out, "nvidia-fabricmanager"));
	} else {
		assert_int_equal(run_probe(fabric, out, sizeof(out)), 77);
		assert_non_null(strstr(out, "CUresult 802"));
	}
	assert_int_equal(run_probe(hidden, out, sizeof(out)), 77);
	assert_non_null(strstr(out, "CUDA_VISIBLE_DEVICES=\"-1\""));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(classification),
		cmocka_unit_test(this_machine),
		cmocka_unit_test(fake_driver),
	};

	if (argc != 3) {
		fprintf(stderr, "usage: %s GPU_PROBE FAKE_DRIVER_DIR\n", argv[0]);
		return 2;
	}
	probe_exe = argv[1];
	fake_dir = argv[2];
	return cmocka_run_group_tests_name("gpu-probe", tests, NULL, NULL);
}
