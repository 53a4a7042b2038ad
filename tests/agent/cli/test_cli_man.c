/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/test_cli_man.c: crun(1) documents what --help prints; the real crun binary. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/error.h>

#include "tests/agent/cli/cli_fixture.h"

/* ---- crun(1) ---- */

static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	if (n > 0) {
		assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	}
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void man_page_documents_every_flag(void **state)
{
	static const char *const vars[] = {
		"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
		"GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
		"MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
		"TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE",
		"TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS", "CRUN_STORE_ENDPOINT",
		"CRUN_STORE_PREFIX", "CRUN_STORE_TOKEN", "CRUN_STORE_TOKEN_FILE", "CRUN_TOKEN_FILE",
		"CRUN_BACKEND", "NCCL_SOCKET_IFNAME",
		"GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "PYTHON_EXEC", "PET_NPROC_PER_NODE",
		"CRUN_LOG_LEVEL",
	};
	static const char *const sections[] = {"# NAME", "# SYNOPSIS", "# DESCRIPTION", "# OPTIONS",
					       "# ENVIRONMENT", "# EXIT STATUS", "# EXAMPLES",
					       "# SEE ALSO"};
	const char *src = getenv("CRUN_SOURCE_DIR");
	char path[512], flag[80], *help = NULL, *page, *q;
	size_t hlen = 0, n, flags = 0;
	FILE *mem;

	(void)state;
	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/man/crun.1.scd", src);
	page = read_all(path);
	mem = open_memstream(&help, &hlen);
	assert_non_null(mem);
	cli_usage(mem);
	fclose(mem);
	for (q = strstr(help, "--"); q != NULL; q = strstr(q + n, "--")) {
		n = 2 + strspn(q + 2, "abcdefghijklmnopqrstuvwxyz-");
		if (n == 2 || n >= sizeof(flag)) {
			continue;
		}
		memcpy(flag, q, n);
		flag[n] = '\0';
		if (strstr(page, flag) == NULL) {
			fail_msg("crun --help prints %s but man/crun.1.scd does not document it", flag);
		}
		flags++;
	}
	assert_true(flags >= 28);
	for (n = 0; n < ARRAY_SIZE(vars); n++) {
		if (strstr(page, vars[n]) == NULL) {
			fail_msg("man/crun.1.scd does not mention %s", vars[n]);
		}
	}
	for (n = 0; n < ARRAY_SIZE(sections); n++) {
		if (strstr(page, sections[n]) == NULL) {
			fail_msg("man/crun.1.scd lacks the section %s", sections[n]);
		}
	}
	free(help);
	free(page);
}

/*
 * Run @argv (argv[0] a path) with stdin from @in (or /dev/null), an extra environment
 * variable @env ("NAME=VALUE" or NULL), and stdout/stderr captured into malloc'd strings.
 * Waits at most 30 s (a pidfd, no polling), then kills the child. Returns the exit status.
 */
static int run_capture(char *const argv[], const char *in, const char *env, char **out,
		       char **err)
{
	char opath[160], epath[160];
	struct pollfd pfd;
	pid_t pid;
	int status, fd, pidfd, ready;

	snprintf(opath, sizeof(opath), "%s/out", tmpdir);
	snprintf(epath, sizeof(epath), "%s/err", tmpdir);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		fd = open(in != NULL ? in : "/dev/null", O_RDONLY);
		if (fd < 0 || dup2(fd, 0) < 0) {
			_exit(126);
		}
		fd = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 1) < 0) {
			_exit(126);
		}
		fd = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 2) < 0) {
			_exit(126);
		}
		if (env != NULL) {
			putenv((char *)env);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	assert_true(pidfd >= 0);
	pfd.fd = pidfd;
	pfd.events = POLLIN;
	do {
		ready = poll(&pfd, 1, 30000);
	} while (ready < 0 && errno == EINTR);
	close(pidfd);
	if (ready == 0) {
		kill(pid, SIGKILL);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (ready == 0) {
		fail_msg("%s did not finish in 30 s", argv[0]);
	}
	*out = read_all(opath);
	*err = read_all(epath);
	unlink(opath);
	unlink(epath);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* scdoc must accept the page: run the real tool on it. */
static void scdoc_accepts_man_page(void **state)
{
	const char *scdoc = getenv("CRUN_SCDOC");
	const char *src = getenv("CRUN_SOURCE_DIR");
	char *argv[] = {NULL, NULL};
	char path[512], *out, *err;

	(void)state;
	if (scdoc == NULL) {
		test_skip();
	}
	argv[0] = (char *)scdoc;
	snprintf(path, sizeof(path), "%s/man/crun.1.scd", src);
	assert_int_equal(run_capture(argv, path, NULL, &out, &err), 0);
	assert_string_equal(err, "");
	assert_non_null(strstr(out, ".SH OPTIONS"));
	free(out);
	free(err);
}

/* ---- the real crun binary (CRUN_EXE names it) ---- */

static const char *crun_exe(void)
{
	const char *exe = getenv("CRUN_EXE");

	if (exe == NULL) {
		test_skip();
	}
	return exe;
}

static void crun_binary_help_matches_man_page(void **state)
{
	const char *src = getenv("CRUN_SOURCE_DIR");
	char *argv[] = {(char *)crun_exe(), (char *)"--help", NULL};
	char *out, *err, *page, *q, path[512], flag[80];
	size_t n, flags = 0;

	(void)state;
	assert_int_equal(run_capture(argv, NULL, NULL, &out, &err), 0);
	assert_string_equal(err, "");
	assert_true(strncmp(out, "Usage: crun ", 12) == 0);
	snprintf(path, sizeof(path), "%s/man/crun.1.scd", src);
	page = read_all(path);
	for (q = strstr(out, "--"); q != NULL; q = strstr(q + n, "--")) {
		n = 2 + strspn(q + 2, "abcdefghijklmnopqrstuvwxyz-");
		if (n == 2 || n >= sizeof(flag)) {
			continue;
		}
		memcpy(flag, q, n);
		flag[n] = '\0';
		if (strstr(page, flag) == NULL) {
			fail_msg("crun --help prints %s but man/crun.1.scd does not document it", flag);
		}
		flags++;
	}
	assert_true(flags >= 28);
	free(page);
	free(out);
	free(err);
}

static void crun_binary_version(void **state)
{
	char *argv[] = {(char *)crun_exe(), (char *)"--version", NULL};
	char *out, *err;

	(void)state;
	assert_int_equal(run_capture(argv, NULL, NULL, &out, &err), 0);
	assert_true(strncmp(out, "crun ", 5) == 0);
	assert_string_equal(err, "");
	free(out);
	free(err);
}

/* Bad command lines: exit 2, exactly one line on stderr, nothing on stdout, nothing started. */
static void crun_binary_bad_flags_exit_2(void **state)
{
	static const struct {
		const char *args[8];
		const char *env;
		const char *line;
	} cases[] = {
		{{"--nnodes", "3:2", "true"}, NULL, "crun: --nnodes: MIN 3 is above MAX 2\n"},
		{{"--no_python", "/nonexistent"}, NULL, "crun: program /nonexistent: no such file\n"},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "ftp://h", "true"}, NULL,
		 "crun: --rdzv-endpoint: ftp://h: expected http://, https://, etcd:// or no scheme "
		 "for etcd\n"},
		{{"--frobnicate", "true"}, NULL, "crun: --frobnicate: unknown option (see crun --help)\n"},
		{{NULL}, NULL,
		 "crun: missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun "
		 "--help)\n"},
		{{"true"}, "PET_NPROC_PER_NODE=0",
		 "crun: PET_NPROC_PER_NODE: 0 is out of range 1..4096\n"},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "h", "--node-rank", "0", "true"}, NULL,
		 "crun: --node-rank: only for --rdzv-backend static (c10d assigns node ranks "
		 "itself)\n"},
	};
	char *argv[10], *out, *err;
	size_t i, j;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		argv[0] = (char *)crun_exe();
		for (j = 0; cases[i].args[j] != NULL; j++) {
			argv[j + 1] = (char *)cases[i].args[j];
		}
		argv[j + 1] = NULL;
		assert_int_equal(run_capture(argv, NULL, cases[i].env, &out, &err), 2);
		assert_string_equal(err, cases[i].line);
		assert_string_equal(out, "");
		free(out);
		free(err);
	}
}


int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(man_page_documents_every_flag),
		cmocka_unit_test(scdoc_accepts_man_page),
		cmocka_unit_test(crun_binary_help_matches_man_page),
		cmocka_unit_test(crun_binary_version),
		cmocka_unit_test(crun_binary_bad_flags_exit_2),
	};

	return test_run_group("cli-man", tests, argc > 1 ? argv[1] : NULL, group_setup,
			      group_teardown);
}
