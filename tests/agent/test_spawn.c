/* SPDX-License-Identifier: MIT */
/*
 * tests/agent/test_spawn.c: spawn_process() starting real processes: execvp()'s search, a
 * script without "#!", the failure line and exit status, what a worker inherits (signals,
 * descriptors), 64 children at once each with its own argv and environment, and the blocks
 * that hold them unmapped once the children are gone.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/spawn.h"
#include "tests/lib/cmocka_files.h"

static char dir[PATH_MAX];
static char *saved_path;

static void read_file(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* Wait for the child behind @pidfd (5 s at most) and return its exit status. */
static int wait_exit(int pidfd)
{
	struct pollfd p = {.fd = pidfd, .events = POLLIN};
	int status = -1, sig = 0;
	bool exited = false;

	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(spawn_reap(pidfd, &exited, &status, &sig), 0);
	assert_true(exited);
	assert_int_equal(sig, 0);
	close(pidfd);
	return status;
}

/* Run @argv with stdout and stderr to @out (a file in the test's dir); its exit status. */
static int run(char *const *argv, char *const *envp, const char *out)
{
	struct spawn_proc p = {.argv = argv, .envp = envp, .stdin_fd = -1};
	char path[PATH_MAX + 16];
	int fd, null, pidfd = -1, rc;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/%s", dir, out);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0 && null >= 0);
	p.stdin_fd = null;
	p.stdout_fd = fd;
	p.stderr_fd = fd;
	rc = spawn_process(&p, &pid, &pidfd);
	close(fd);
	close(null);
	assert_int_equal(rc, 0);
	assert_true(pid > 0 && pidfd >= 0);
	return wait_exit(pidfd);
}

static char *const no_env[] = {(char *)"LC_ALL=C", NULL};

static void set_path(const char *a, const char *b)
{
	char v[2 * PATH_MAX + 8];

	snprintf(v, sizeof(v), "%s/%s:%s/%s", dir, a, dir, b);
	assert_int_equal(setenv("PATH", v, 1), 0);
}

static void mkdirs(void)
{
	static const char *const sub[] = {"noexec", "exec", "none"};
	char p[PATH_MAX + 16];
	size_t i;

	for (i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, sub[i]);
		assert_int_equal(mkdir(p, 0755), 0);
	}
	snprintf(p, sizeof(p), "%s/noexec/prog", dir);
	test_write_file(p, "#!/bin/sh\necho wrong one\n", 0644);
	snprintf(p, sizeof(p), "%s/exec/prog", dir);
	test_write_file(p, "#!/bin/sh\necho ran \"$0\" \"$1\"\n", 0755);
	snprintf(p, sizeof(p), "%s/exec/script", dir);
	test_write_file(p, "echo shell ran \"$0\" \"$1\"\n", 0755);
}

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/crun-spawn-XXXXXX", tmp != NULL ? tmp : "/tmp");
	assert_non_null(mkdtemp(dir));
	saved_path = getenv("PATH") != NULL ? strdup(getenv("PATH")) : NULL;
	mkdirs();
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	if (saved_path != NULL) {
		setenv("PATH", saved_path, 1);
		free(saved_path);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void expect_output(const char *out, const char *want)
{
	char path[PATH_MAX + 16], got[512];

	snprintf(path, sizeof(path), "%s/%s", dir, out);
	read_file(path, got, sizeof(got));
	assert_string_equal(got, want);
}

/*
 * Run @argv with PATH set to the test dir's @a then @b: it must exit @status and print @want,
 * with the test dir in place of "{dir}".
 */
static void expect_run(const char *a, const char *b, char *const *argv, int status,
		       const char *want)
{
	const char *at = strstr(want, "{dir}");
	char out[PATH_MAX + 256];

	set_path(a, b);
	assert_int_equal(run(argv, no_env, "out"), status);
	if (at == NULL) {
		snprintf(out, sizeof(out), "%s", want);
	} else {
		snprintf(out, sizeof(out), "%.*s%s%s", (int)(at - want), want, dir, at + 5);
	}
	expect_output("out", out);
}

static void path_search_skips_what_it_cannot_run(void **state)
{
	char *argv[] = {(char *)"prog", (char *)"arg1", NULL};

	/* $0 of a #! script is the path the search found */
	expect_run("noexec", "exec", argv, 0, "ran {dir}/exec/prog arg1\n");
}

static void path_search_names_the_failure(void **state)
{
	char *argv[] = {(char *)"prog", NULL};
	char *missing[] = {(char *)"no-such-program", NULL};

	expect_run("noexec", "none", argv, 126,
		   "crun: worker: cannot run prog: Permission denied\n");
	expect_run("none", "exec", missing, 127,
		   "crun: worker: cannot run no-such-program: No such file or directory\n");
}

static void script_without_interpreter_runs_under_sh(void **state)
{
	char *argv[] = {(char *)"script", (char *)"x", NULL};

	/* /bin/sh PATH x: $0 is the path the search found */
	expect_run("none", "exec", argv, 0, "shell ran {dir}/exec/script x\n");
}

/*
 * Ignored and blocked in the agent, default and unblocked in the worker; no stray descriptor
 * either. The programs read their own /proc/self (a shell's would show its own changes).
 */
static void worker_gets_default_signals_and_three_fds(void **state)
{
	char *sigs[] = {(char *)"/bin/grep", (char *)"-E", (char *)"^Sig(Blk|Ign)",
			(char *)"/proc/self/status", NULL};
	char *fds[] = {(char *)"/bin/ls", (char *)"/proc/self/fd", NULL};
	sigset_t set, old;
	int leak;

	assert_int_not_equal(signal(SIGPIPE, SIG_IGN), SIG_ERR);
	assert_int_not_equal(signal(SIGUSR2, SIG_IGN), SIG_ERR);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	assert_int_equal(sigprocmask(SIG_BLOCK, &set, &old), 0);
	leak = open("/dev/null", O_RDONLY); /* no O_CLOEXEC: the worker must not get it */
	assert_true(leak >= 3);
	assert_int_equal(run(sigs, no_env, "o5"), 0);
	assert_int_equal(run(fds, no_env, "o6"), 0);
	close(leak);
	sigprocmask(SIG_SETMASK, &old, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGUSR2, SIG_DFL);
	expect_output("o5", "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
	/* 0, 1, 2, and 3: the directory ls reads */
	expect_output("o6", "0\n1\n2\n3\n");
}

/* Anonymous one-page mappings with no access: the guard page of each child's block. */
static int count_guard_pages(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long lo, hi, page = (unsigned long)sysconf(_SC_PAGESIZE);
	char perm[8], line[512];
	int n = 0, fields;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long off, inode;
		char dev[16], file[2] = "";

		fields = sscanf(line, "%lx-%lx %7s %lx %15s %lu %1s", &lo, &hi, perm, &off, dev,
				&inode, file);
		if (fields == 6 && hi - lo == page && strcmp(perm, "---p") == 0 && inode == 0) {
			n++;
		}
	}
	fclose(f);
	return n;
}

#define MANY 64

/*
 * 64 children started back to back, each from an argv and environment the caller wipes and
 * frees as soon as spawn_process() returns: each must still exec its own. Once all are reaped,
 * the blocks that held their copies are unmapped.
 */
static void many_children_each_run_their_own_arguments(void **state)
{
	int pidfd[MANY], i, before, after;
	char out[MANY][32];

	before = count_guard_pages();
	for (i = 0; i < MANY; i++) {
		char **argv = calloc(6, sizeof(*argv)), **envp = calloc(3, sizeof(*envp));
		struct spawn_proc p;
		int null = open("/dev/null", O_RDWR | O_CLOEXEC), rc, k;
		pid_t pid;

		assert_true(argv != NULL && envp != NULL && null >= 0);
		snprintf(out[i], sizeof(out[i]), "m%d", i);
		assert_true(asprintf(&argv[0], "/bin/sh") > 0);
		assert_true(asprintf(&argv[1], "-c") > 0);
		assert_true(asprintf(&argv[2], "echo \"$1 $WHO\" > %s/%s", dir, out[i]) > 0);
		assert_true(asprintf(&argv[3], "sh") > 0);
		assert_true(asprintf(&argv[4], "arg%d", i) > 0);
		assert_true(asprintf(&envp[0], "WHO=env%d", i) > 0);
		assert_true(asprintf(&envp[1], "LC_ALL=C") > 0);
		p = (struct spawn_proc){.argv = argv,
					.envp = envp,
					.stdin_fd = null,
					.stdout_fd = null,
					.stderr_fd = null};
		rc = spawn_process(&p, &pid, &pidfd[i]);
		close(null);
		assert_int_equal(rc, 0);
		for (k = 0; argv[k] != NULL; k++) {
			memset(argv[k], 'X', strlen(argv[k]));
			free(argv[k]);
		}
		for (k = 0; envp[k] != NULL; k++) {
			memset(envp[k], 'Y', strlen(envp[k]));
			free(envp[k]);
		}
		free(argv);
		free(envp);
	}
	for (i = 0; i < MANY; i++) {
		char want[64];

		assert_int_equal(wait_exit(pidfd[i]), 0);
		snprintf(want, sizeof(want), "arg%d env%d\n", i, i);
		expect_output(out[i], want);
	}
	after = count_guard_pages();
	/* The blocks of the 64 children, each below a guard page, are gone. */
	assert_int_equal(after, before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(path_search_skips_what_it_cannot_run),
		cmocka_unit_test(path_search_names_the_failure),
		cmocka_unit_test(script_without_interpreter_runs_under_sh),
		cmocka_unit_test(worker_gets_default_signals_and_three_fds),
		cmocka_unit_test(many_children_each_run_their_own_arguments),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
