/* SPDX-License-Identifier: MIT */
/* tests/worker/test_worker_multi.c: libcrun-worker with real processes: the test launcher
 * (tests/worker/launch.c) starts a real crun-rdzvd on 127.0.0.1 port 0 (or the same server
 * embedded, or a file store) and N workers with the agent's environment; barrier, error files, DDP equivalence, examples/train with
 * identical digests, and resume from a checkpoint after a worker is killed. */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/cmocka_skip.h"

static char tmpdir[PATH_MAX / 2]; /* half: room for the names appended to it */

static const char *need(const char *var)
{
	const char *v = getenv(var);

	if (v == NULL) {
		fprintf(stderr, "test_worker_multi: %s is not set (run through meson test)\n", var);
		exit(1);
	}
	return v;
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "%s/crun-wmulti-XXXXXX",
		 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/*
 * Run @argv (NULL-terminated) in its own process group with stdout+stderr captured into
 * *out (malloc'd, caller frees). Kills the whole group after @timeout_s. Returns the exit
 * code, 128 + signal, or -1 on timeout.
 */
static int run(const char *const *argv, int timeout_s, char **out)
{
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap);
	struct timespec now;
	int p[2], status, rc;
	long deadline, left;
	struct pollfd pfd;
	pid_t pid;
	ssize_t n;

	assert_non_null(buf);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setpgid(0, 0);
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		close(p[0]);
		close(p[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	setpgid(pid, pid);
	close(p[1]);
	clock_gettime(CLOCK_MONOTONIC, &now);
	deadline = now.tv_sec * 1000L + now.tv_nsec / 1000000L + timeout_s * 1000L;
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		left = deadline - (now.tv_sec * 1000L + now.tv_nsec / 1000000L);
		if (left <= 0) {
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
			close(p[0]);
			buf[len] = '\0';
			fprintf(stderr, "timed out after %d s; output so far:\n%s\n", timeout_s, buf);
			*out = buf;
			return -1;
		}
		pfd.fd = p[0];
		pfd.events = POLLIN;
		if (poll(&pfd, 1, (int)left) <= 0) {
			continue;
		}
		if (len + 4096 + 1 > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		n = read(p[0], buf + len, cap - len - 1);
		if (n <= 0) {
			break;
		}
		len += (size_t)n;
	}
	close(p[0]);
	buf[len] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	/* Whatever a failing run printed is what a reader needs. */
	if (getenv("WORKER_TEST_VERBOSE") != NULL) {
		fprintf(stderr, "%s", buf);
	}
	*out = buf;
	return rc;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) {
		n++;
	}
	return n;
}

static void expect_rc(int rc, int want, const char *out)
{
	if (rc != want) {
		fprintf(stderr, "exit %d, expected %d; output:\n%s\n", rc, want, out);
	}
	assert_int_equal(rc, want);
}

/* Every "params sha256 <hex>" (or @tag) line after @from has the same hex; returns how many. */
static int digests_agree(const char *from, const char *tag)
{
	char first[80] = "", cur[80];
	const char *p;
	int n = 0;

	for (p = strstr(from, tag); p != NULL; p = strstr(p + 1, tag)) {
		assert_int_equal(sscanf(p + strlen(tag), "%79s", cur), 1);
		if (n == 0) {
			snprintf(first, sizeof(first), "%s", cur);
		} else if (strcmp(first, cur) != 0) {
			fprintf(stderr, "digests differ: %s vs %s\n%s\n", first, cur, from);
			fail();
		}
		n++;
	}
	return n;
}

/* The lowest "test_acc X" over the "final" lines after @from. */
static double min_final_acc(const char *from)
{
	double acc, lo = 2.0;
	const char *p;

	for (p = strstr(from, "final test_loss"); p != NULL; p = strstr(p + 1, "final test_loss")) {
		const char *a = strstr(p, "test_acc ");

		assert_non_null(a);
		acc = atof(a + 9);
		lo = acc < lo ? acc : lo;
	}
	return lo;
}

static void hello_four_ranks_pass_a_barrier(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "4", "--timeout", "60", "--store", "rdzvd", "--rdzvd", need("WORKER_RDZVD"), "--",
			need("WORKER_HELLO"), "--barrier", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 90, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "passed the barrier"), 4);
	assert_non_null(strstr(out, "hello from rank 3 of 4 (local rank 3 of 4, node 0 of 1"));
	free(out);
}

static void env_reaches_every_worker(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "60", "--",
			need("WORKER_HELPER"), "env", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 90, &out);
	expect_rc(rc, 0, out);
	assert_non_null(strstr(out, "rank=1 local_rank=1 world_size=2 local_world_size=2 "
				    "node_rank=0 node_count=1 restart_count=0 max_restarts=0 "
				    "master_port=29500"));
	assert_non_null(strstr(out, "prefix=launch/attempt-0/"));
	free(out);
}

static void barrier_holds_every_rank_rdzvd(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "3", "--timeout", "60", "--store", "rdzvd", "--rdzvd", need("WORKER_RDZVD"), "--",
			need("WORKER_HELPER"), "barrier", "6", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 90, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "passed 6 barriers"), 3);
	free(out);
}

static void barrier_holds_every_rank_file_store(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--store", "file", "--timeout",
			"60", "--", need("WORKER_HELPER"), "barrier", "3", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 90, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "passed 3 barriers"), 2);
	free(out);
}

static void store_token_is_passed_and_checked(void **state)
{
	const char *good[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "60", "--store",
			      "rdzvd", "--rdzvd", need("WORKER_RDZVD"), "--token",
			      "s3cret-0123456789abcdef", "--", need("WORKER_HELLO"), "--barrier",
			      NULL};
	const char *bad[] = {need("WORKER_LAUNCH"), "-n", "1", "--timeout", "60", "--store",
			     "rdzvd", "--rdzvd", need("WORKER_RDZVD"), "--token",
			     "s3cret-0123456789abcdef", "--worker-token", "guess-0123456789abcdef",
			     "--", need("WORKER_HELLO"), "--barrier", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(good, 90, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "passed the barrier"), 2);
	free(out);
	rc = run(bad, 90, &out);
	expect_rc(rc, 1, out);
	assert_non_null(strstr(out, "hello: rank 0: barrier: authentication failed"));
	assert_null(strstr(out, "passed the barrier"));
	free(out);
}

static void failure_writes_error_file(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "60",
			"--error-dir", tmpdir, "--", need("WORKER_HELPER"), "fail",
			"loss diverged at step 12", NULL};
	char path[PATH_MAX + 32], buf[4096], *out;
	ssize_t n;
	int rc, fd;

	(void)state;
	rc = run(argv, 90, &out);
	expect_rc(rc, 1, out);
	assert_non_null(strstr(out, "exited with code 3"));
	snprintf(path, sizeof(path), "%s/error-0-0.json", tmpdir);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "{\"message\": {\"message\": \"loss diverged at step 12\", "
				    "\"extraInfo\": {\"py_callstack\": \""));
	free(out);
}

static void ddp_equiv(int ranks)
{
	char n[8];
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", n, "--timeout", "90", "--store", "rdzvd", "--rdzvd", need("WORKER_RDZVD"), "--",
			need("WORKER_HELPER"), "ddp-equiv", "6", NULL};
	char *out;
	int rc;

	snprintf(n, sizeof(n), "%d", ranks);
	rc = run(argv, 120, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "ddp-equiv buckets"), ranks);
	assert_int_equal(digests_agree(out, " digest "), ranks);
	free(out);
}

static void ddp_two_ranks_match_one_process(void **state)
{
	(void)state;
	ddp_equiv(2);
}

static void ddp_three_ranks_match_one_process(void **state)
{
	(void)state;
	ddp_equiv(3);
}

static void ddp_reduces_complete_buckets_before_sync(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "90", "--",
			      need("WORKER_HELPER"), "ddp-overlap", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 120, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "overlap ok (2 buckets)"), 2);
	free(out);
}

static void ddp_peer_leaves(const char *how, const char *want)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "90", "--",
			      need("WORKER_HELPER"), "ddp-peer-dies", how, NULL};
	char *out;
	int rc;

	rc = run(argv, 120, &out);
	expect_rc(rc, 0, out);
	assert_non_null(strstr(out, "rank 0 sync returned -"));
	if (want != NULL && strstr(out, want) == NULL) {
		fprintf(stderr, "expected \"%s\" in:\n%s\n", want, out);
		fail();
	}
	free(out);
}

static void ddp_sync_fails_when_a_peer_exits(void **state)
{
	(void)state;
	ddp_peer_leaves("exit", NULL); /* -ECONNRESET or -ETIMEDOUT */
}

static void ddp_sync_times_out_when_a_peer_hangs(void **state)
{
	(void)state;
	ddp_peer_leaves("hang", "(Connection timed out)");
}

/* Ranks that register different tensor sizes are told so, by name, on every rank. */
static void ddp_ranks_with_different_plans_fail_clearly(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "90", "--",
			      need("WORKER_HELPER"), "ddp-plan-mismatch", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 120, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "plan mismatch reported"), 2);
	if (strstr(out, "ddp: rank 0: bucket plan differs from rank 1's: rank 0: 2 tensors, "
			"150 floats, 1 buckets") == NULL ||
	    strstr(out, "ddp: rank 1: bucket plan differs from rank 0's: rank 1: 2 tensors, "
			"151 floats, 1 buckets") == NULL) {
		fprintf(stderr, "no message naming both plans in:\n%s\n", out);
		fail();
	}
	free(out);
}

static void train_reaches_accuracy_with_equal_digests(void **state)
{
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "150", "--store", "rdzvd", "--rdzvd", need("WORKER_RDZVD"), "--",
			need("WORKER_TRAIN"), "--epochs", "20", "--lr", "0.1", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 180, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(digests_agree(out, "params sha256 "), 2);
	if (min_final_acc(out) < 0.95) {
		fprintf(stderr, "accuracy below 0.95:\n%s\n", out);
		fail();
	}
	free(out);
}

static void train_resumes_from_checkpoint_after_kill(void **state)
{
	char ck[PATH_MAX + 8];
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "150", "--store", "rdzvd", "--rdzvd", need("WORKER_RDZVD"), 
			"--restarts", "1", "--kill-rank", "1", "--kill-on", "epoch 4 step", "--",
			need("WORKER_TRAIN"), "--epochs", "20", "--lr", "0.1", "--checkpoint-dir", ck,
			NULL};
	const char *second;
	char *out;
	int rc;

	(void)state;
	snprintf(ck, sizeof(ck), "%s/ckpt", tmpdir);
	rc = run(argv, 180, &out);
	expect_rc(rc, 0, out);
	assert_non_null(strstr(out, "fault injection: SIGKILL rank 1"));
	assert_non_null(strstr(out, "rank 1 killed by signal 9"));
	second = strstr(out, "restarting the group (restart 1 of 1)");
	assert_non_null(second);
	/* The second attempt resumed from epoch 3 or later (the kill came after epoch 4's line),
	 * and did not start over. */
	assert_int_equal(count(second, "resumed from"), 2);
	{
		const char *r = strstr(second, " at epoch ");

		assert_non_null(r);
		assert_true(atoi(r + 10) >= 3);
	}
	assert_null(strstr(second, "epoch 1 step"));
	assert_int_equal(digests_agree(second, "params sha256 "), 2);
	if (min_final_acc(second) < 0.95) {
		fprintf(stderr, "accuracy below 0.95 after resume:\n%s\n", out);
		fail();
	}
	/* Resuming is exact: the same parameters, bit for bit, as a run never interrupted
	 * (the checkpoint holds the momentum, and the sampler's order depends only on the
	 * seed and the epoch). */
	{
		const char *plain[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "150", "--",
				       need("WORKER_TRAIN"), "--epochs", "20", "--lr", "0.1", NULL};
		char want[80], got[80], *out2 = NULL;
		int rc2;

		rc2 = run(plain, 180, &out2);
		expect_rc(rc2, 0, out2);
		assert_int_equal(sscanf(strstr(out2, "params sha256 ") + 14, "%79s", want), 1);
		assert_int_equal(sscanf(strstr(second, "params sha256 ") + 14, "%79s", got), 1);
		assert_string_equal(got, want);
		free(out2);
	}
	free(out);
}

/*
 * End to end under the real agent: crun --standalone starts two workers of examples/train;
 * rank 1 aborts after epoch 4 (its fatal-signal handler writes the error file), crun restarts
 * the group once, and the job resumes from the checkpoint to the same parameters as a run
 * that never failed.
 */
static void train_under_crun_restarts_and_resumes(void **state)
{
	char ck[PATH_MAX + 8];
	const char *argv[] = {need("WORKER_CRUN"), "--standalone", "--nproc-per-node", "2",
			      "--max-restarts", "1", need("WORKER_TRAIN"), "--epochs", "20", "--lr",
			      "0.1", "--checkpoint-dir", ck, "--fault-epoch", "4", NULL};
	const char *plain[] = {need("WORKER_LAUNCH"), "-n", "2", "--timeout", "150", "--",
			       need("WORKER_TRAIN"), "--epochs", "20", "--lr", "0.1", NULL};
	char want[80], got[80], *out, *out2 = NULL;
	const char *p;
	int rc;

	(void)state;
	snprintf(ck, sizeof(ck), "%s/ckpt", tmpdir);
	rc = run(argv, 180, &out);
	expect_rc(rc, 0, out);
	assert_non_null(strstr(out, "--fault-epoch 4: aborting"));
	/* The agent's failure report carries the worker's own error record. */
	assert_non_null(strstr(out, "fatal signal 6 (SIGABRT) in rank 1"));
	assert_int_equal(count(out, "resumed from"), 2);
	assert_true(min_final_acc(out) >= 0.95);
	assert_non_null(strstr(out, "at epoch 4 (restart 1)"));
	assert_int_equal(digests_agree(out, "params sha256 "), 2);
	rc = run(plain, 180, &out2);
	expect_rc(rc, 0, out2);
	assert_int_equal(sscanf(strstr(out2, "params sha256 ") + 14, "%79s", want), 1);
	p = strstr(out, "params sha256 ");
	assert_int_equal(sscanf(p + 14, "%79s", got), 1);
	assert_string_equal(got, want);
	free(out2);
	free(out);
}

/* Run @argv with a clean environment (no RANK, no CRUN_*): what a user gets outside crun. */
static int run_outside(const char *const *argv, char **out)
{
	static const char *const vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "CRUN_SINGLE",
		"CRUN_STORE_ENDPOINT", "TORCHELASTIC_ERROR_FILE"};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		unsetenv(vars[i]);
	}
	return run(argv, 60, out);
}

static void examples_outside_crun_say_so(void **state)
{
	const char *hello[] = {need("WORKER_HELLO"), NULL};
	const char *train[] = {need("WORKER_TRAIN"), "--epochs", "1", NULL};
	char *out;
	int rc;

	(void)state;
	rc = run_outside(hello, &out);
	expect_rc(rc, 2, out);
	assert_non_null(strstr(out, "hello: libcrun-worker: environment: RANK and WORLD_SIZE are "
				    "not set: start this program under crun, or set CRUN_SINGLE=1"));
	free(out);
	rc = run_outside(train, &out);
	expect_rc(rc, 2, out);
	assert_non_null(strstr(out, "RANK and WORLD_SIZE are not set"));
	free(out);
	/* The documented single-process mode runs it. */
	setenv("CRUN_SINGLE", "1", 1);
	rc = run(train, 60, &out);
	unsetenv("CRUN_SINGLE");
	expect_rc(rc, 0, out);
	assert_non_null(strstr(out, "rank 0 params sha256 "));
	free(out);
}

static void train_rejects_bad_options(void **state)
{
	static const char *const cases[][3] = {
		{"--epochs", "ten", "train: --epochs: expected an integer in [0, 100000], got \"ten\""},
		{"--lr", "-1", "train: --lr: expected a number in [0, 100], got \"-1\""},
		{"--batch-size", "0", "train: --batch-size: expected an integer in [1, 1048576]"},
		{"--hidden", "", "train: --hidden: expected an integer"},
		{"--bogus", "1", "usage: train"},
	};
	char *out;
	int rc;

	(void)state;
	setenv("CRUN_SINGLE", "1", 1);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *argv[] = {need("WORKER_TRAIN"), cases[i][0], cases[i][1], NULL};

		rc = run(argv, 60, &out);
		expect_rc(rc, 2, out);
		if (strstr(out, cases[i][2]) == NULL) {
			fprintf(stderr, "expected \"%s\" in:\n%s\n", cases[i][2], out);
			fail();
		}
		free(out);
	}
	unsetenv("CRUN_SINGLE");
}

static void train_falls_back_to_generated_data(void **state)
{
	const char *argv[] = {need("WORKER_TRAIN"), "--epochs", "3", "--data",
			      "/nonexistent/digits.csv.gz", NULL};
	char *out;
	int rc;

	(void)state;
	setenv("CRUN_SINGLE", "1", 1);
	rc = run(argv, 60, &out);
	unsetenv("CRUN_SINGLE");
	expect_rc(rc, 0, out);
	assert_non_null(strstr(out, "train: warning: /nonexistent/digits.csv.gz: "));
	assert_non_null(strstr(out, "using generated data instead"));
	free(out);
}

/* examples/train's gradients (one batch, plain and in micro-batches) against finite
 * differences of the loss computed in double: --gradcheck checks every parameter. */
static void train_gradients_match_finite_differences(void **state)
{
	static const char *const accum[] = {"1", "3"};
	static const char *const data[] = {"--synthetic", "--data"};
	char *out;
	int rc;

	(void)state;
	for (size_t a = 0; a < 2; a++) {
		for (size_t k = 0; k < 2; k++) {
			const char *argv[] = {need("WORKER_TRAIN"), "--gradcheck", "--hidden", "16",
					      "--batch-size", "24", "--accum", accum[a], data[k],
					      k == 1 ? getenv("WORKER_DIGITS") : NULL, NULL};

			if (k == 1 && argv[9] == NULL) {
				continue; /* the real digits were not fetched: generated data only */
			}
			rc = run_outside(argv, &out);
			expect_rc(rc, 0, out);
			assert_non_null(strstr(out, "mismatches 0: ok"));
			free(out);
		}
	}
}

/* A data file with too few samples: a warning, generated data, and no memory leaked (the
 * ASan build's leak checker fails the run otherwise). */
static void train_short_data_file_falls_back(void **state)
{
	char path[PATH_MAX];
	const char *argv[] = {need("WORKER_TRAIN"), "--epochs", "1", "--data", path, NULL};
	char *out;
	FILE *f;
	int rc;

	(void)state;
	snprintf(path, sizeof(path), "%s/short.csv", tmpdir);
	f = fopen(path, "w"); /* gzopen reads an uncompressed file as is */
	assert_non_null(f);
	for (int i = 0; i < 5; i++) {
		for (int k = 0; k < 64; k++) {
			fprintf(f, "%d,", (i + k) % 17);
		}
		fprintf(f, "%d\n", i);
	}
	fclose(f);
	setenv("CRUN_SINGLE", "1", 1);
	rc = run(argv, 60, &out);
	unsetenv("CRUN_SINGLE");
	expect_rc(rc, 0, out);
	assert_non_null(strstr(out, "short.csv: only 5 samples; using generated data instead"));
	free(out);
}

/* Write an executable stub named @name in @dir running the shell snippet @body. */
static void stub(const char *dir, const char *name, const char *body)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\n%s\n", body);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
}

/*
 * scripts/fetch-digits where `apt-get download` cannot work (a stub apt-get first in PATH):
 * a message naming the step, apt's own words, a non-zero exit, no partial file, no temp dir
 * left behind; and a bounded run when apt-get hangs (no network).
 */
static void fetch_digits_fails_cleanly_without_apt(void **state)
{
	static const struct {
		const char *body;
		const char *want;
	} cases[] = {
		{"echo 'E: Unable to locate package python3-sklearn' >&2; exit 100",
		 "fetch-digits: apt-get download python3-sklearn failed:\n"
		 "  E: Unable to locate package python3-sklearn"},
		{"exit 0", "fetch-digits: apt-get download produced no .deb"},
		{"exec sleep 600", "fetch-digits: apt-get download python3-sklearn failed:"},
	};
	char script[PATH_MAX], bin[PATH_MAX / 2 + 8], dest[PATH_MAX / 2 + 8], tmp[PATH_MAX / 2 + 8];
	char path[PATH_MAX * 3];
	char cmd[PATH_MAX + 64], *out, *old_path = strdup(getenv("PATH"));
	const char *argv[] = {"/bin/sh", script, dest, NULL};
	struct stat sb;
	int rc;

	(void)state;
	assert_non_null(old_path);
	snprintf(script, sizeof(script), "%s/scripts/fetch-digits", need("CRUN_SOURCE_DIR"));
	snprintf(bin, sizeof(bin), "%s/bin", tmpdir);
	snprintf(dest, sizeof(dest), "%s/dest", tmpdir);
	snprintf(tmp, sizeof(tmp), "%s/tmp", tmpdir);
	assert_int_equal(mkdir(bin, 0755), 0);
	assert_int_equal(mkdir(tmp, 0755), 0);
	snprintf(path, sizeof(path), "%s:%s", bin, old_path);
	setenv("PATH", path, 1);
	setenv("TMPDIR", tmp, 1);
	setenv("FETCH_DIGITS_TIMEOUT", "3", 1);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		stub(bin, "apt-get", cases[i].body);
		rc = run(argv, 60, &out);
		expect_rc(rc, 1, out);
		if (strstr(out, cases[i].want) == NULL) {
			fprintf(stderr, "expected \"%s\" in:\n%s\n", cases[i].want, out);
			fail();
		}
		free(out);
		snprintf(cmd, sizeof(cmd), "%s/digits.csv.gz", dest);
		assert_int_equal(stat(cmd, &sb), -1);
		snprintf(cmd, sizeof(cmd), "rmdir '%s'", tmp); /* fails unless empty */
		assert_int_equal(system(cmd), 0);
		assert_int_equal(mkdir(tmp, 0755), 0);
	}
	setenv("PATH", old_path, 1);
	unsetenv("TMPDIR");
	unsetenv("FETCH_DIGITS_TIMEOUT");
	free(old_path);
}

/* Resuming from a checkpoint of another model shape is refused with a message that says so,
 * never loaded into the wrong layout. */
static void train_refuses_checkpoint_of_another_shape(void **state)
{
	char dir[PATH_MAX];
	const char *first[] = {need("WORKER_TRAIN"), "--epochs", "1", "--synthetic", "--hidden",
			       "8", "--checkpoint-dir", dir, NULL};
	const char *second[] = {need("WORKER_TRAIN"), "--epochs", "2", "--synthetic", "--hidden",
				"16", "--checkpoint-dir", dir, NULL};
	char *out;
	int rc;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/ck", tmpdir);
	setenv("CRUN_SINGLE", "1", 1);
	rc = run(first, 60, &out);
	expect_rc(rc, 0, out);
	free(out);
	rc = run(second, 60, &out);
	unsetenv("CRUN_SINGLE");
	expect_rc(rc, 1, out);
	assert_non_null(strstr(out, "does not match this model (hidden 16, "));
	free(out);
}

/* Save checkpoints of @steps (a NULL-terminated list) into @dir, in a single-mode process. */
static void ckpt_write(const char *dir, const char *const *steps)
{
	const char *argv[16] = {need("WORKER_HELPER"), "ckpt-write", dir};
	char *out;
	int i, rc;

	for (i = 0; steps[i] != NULL && i < 12; i++) {
		argv[3 + i] = steps[i];
	}
	argv[3 + i] = NULL;
	rc = run(argv, 30, &out);
	expect_rc(rc, 0, out);
	free(out);
}

/* Flip one payload byte of checkpoint @step in @dir: it no longer validates. */
static void ckpt_damage(const char *dir, unsigned step)
{
	char path[PATH_MAX + 64];
	unsigned char c;
	int fd;

	snprintf(path, sizeof(path), "%s/ckpt-%020u.bin", dir, step);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, 70), 1);
	c ^= 0x40;
	assert_int_equal(pwrite(fd, &c, 1, 70), 1);
	close(fd);
}

/*
 * After a partition, node-local checkpoint directories differ: rank 0's newest is damaged (it
 * has 3), rank 1 has a newer one (5) besides 3, rank 2 has only 3. Every rank resumes step 3,
 * the one rank 0 chose (each rank loading its own newest, rank 1 resumed from 5).
 */
static void ranks_resume_the_checkpoint_rank0_chose(void **state)
{
	char prefix[PATH_MAX], d0[PATH_MAX + 8], d1[PATH_MAX + 8], d2[PATH_MAX + 8];
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "3", "--timeout", "60", "--store",
			      "rdzvd", "--rdzvd", need("WORKER_RDZVD"), "--", need("WORKER_HELPER"),
			      "resume", prefix, NULL};
	char *out;
	int rc;

	(void)state;
	snprintf(prefix, sizeof(prefix), "%s/ck", tmpdir);
	snprintf(d0, sizeof(d0), "%s/rank0", prefix);
	snprintf(d1, sizeof(d1), "%s/rank1", prefix);
	snprintf(d2, sizeof(d2), "%s/rank2", prefix);
	ckpt_write(d0, (const char *[]){"2", "3", "4", NULL});
	ckpt_damage(d0, 4);
	ckpt_write(d1, (const char *[]){"3", "5", NULL});
	ckpt_write(d2, (const char *[]){"3", NULL});
	rc = run(argv, 90, &out);
	expect_rc(rc, 0, out);
	if (count(out, "resumed step 3 value 3 from ") != 3) {
		fprintf(stderr, "expected every rank at step 3:\n%s\n", out);
		fail();
	}
	assert_non_null(strstr(out, "rank1/ckpt-00000000000000000003.bin"));
	free(out);
}

/* A rank whose directory lacks rank 0's choice fails, naming the file and itself, and no rank
 * trains on: every rank's resume fails. */
static void resume_fails_clearly_when_a_rank_lacks_the_choice(void **state)
{
	char prefix[PATH_MAX], d0[PATH_MAX + 8], d1[PATH_MAX + 8], d2[PATH_MAX + 8];
	const char *argv[] = {need("WORKER_LAUNCH"), "-n", "3", "--timeout", "60", "--",
			      need("WORKER_HELPER"), "resume", prefix, NULL};
	char *out, want[PATH_MAX + 128];
	int rc;

	(void)state;
	snprintf(prefix, sizeof(prefix), "%s/ck", tmpdir);
	snprintf(d0, sizeof(d0), "%s/rank0", prefix);
	snprintf(d1, sizeof(d1), "%s/rank1", prefix);
	snprintf(d2, sizeof(d2), "%s/rank2", prefix);
	ckpt_write(d0, (const char *[]){"2", "3", NULL});
	ckpt_write(d1, (const char *[]){"4", "5", NULL});
	ckpt_write(d2, (const char *[]){"3", NULL});
	rc = run(argv, 90, &out);
	if (rc == 0 || rc == -1) {
		fprintf(stderr, "exit %d, expected a failure:\n%s\n", rc, out);
		fail();
	}
	snprintf(want, sizeof(want),
		 "checkpoint resume: rank 1 cannot load %s/ckpt-00000000000000000003.bin (chosen "
		 "by rank 0): No such file or directory", d1);
	if (strstr(out, want) == NULL) {
		fprintf(stderr, "no \"%s\" in:\n%s\n", want, out);
		fail();
	}
	assert_int_equal(count(out, "resumed step"), 0);
	free(out);
}

/* crun --worker-timeout: a worker that stops heartbeating is named, and the group restarts. */
static void hung_worker_is_detected_and_restarted(void **state)
{
	const char *argv[] = {need("WORKER_CRUN"), "--standalone", "--nproc-per-node", "3",
			      "--max-restarts", "1", "--restart-backoff", "0", "--worker-timeout",
			      "2", "--shutdown-timeout", "5", need("WORKER_HELPER"), "hang-once",
			      NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 120, &out);
	expect_rc(rc, 0, out);
	if (strstr(out, "worker rank 1 (pid ") == NULL || strstr(out, "no heartbeat for") == NULL ||
	    strstr(out, "hung: no heartbeat") == NULL || count(out, "restart 1 passed") != 3) {
		fprintf(stderr, "expected rank 1 reported hung, then a restart:\n%s\n", out);
		fail();
	}
	free(out);
}

/* ... and one that keeps heartbeating through a step longer than the timeout is left alone. */
static void heartbeat_keeps_a_long_step_alive(void **state)
{
	const char *argv[] = {need("WORKER_CRUN"), "--standalone", "--nproc-per-node", "2",
			      "--worker-timeout", "2", need("WORKER_HELPER"), "beat-long", "6",
			      NULL};
	char *out;
	int rc;

	(void)state;
	rc = run(argv, 120, &out);
	expect_rc(rc, 0, out);
	assert_int_equal(count(out, "long step done"), 2);
	assert_null(strstr(out, "no heartbeat"));
	free(out);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(examples_outside_crun_say_so),
		cmocka_unit_test(train_rejects_bad_options),
		cmocka_unit_test(train_falls_back_to_generated_data),
		cmocka_unit_test(train_gradients_match_finite_differences),
		cmocka_unit_test_setup_teardown(train_refuses_checkpoint_of_another_shape, setup,
						teardown),
		cmocka_unit_test_setup_teardown(train_short_data_file_falls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(fetch_digits_fails_cleanly_without_apt, setup,
						teardown),
		cmocka_unit_test(hello_four_ranks_pass_a_barrier),
		cmocka_unit_test(env_reaches_every_worker),
		cmocka_unit_test(barrier_holds_every_rank_rdzvd),
		cmocka_unit_test(barrier_holds_every_rank_file_store),
		cmocka_unit_test(store_token_is_passed_and_checked),
		cmocka_unit_test_setup_teardown(failure_writes_error_file, setup, teardown),
		cmocka_unit_test(ddp_two_ranks_match_one_process),
		cmocka_unit_test(ddp_three_ranks_match_one_process),
		cmocka_unit_test(ddp_reduces_complete_buckets_before_sync),
		cmocka_unit_test(ddp_sync_fails_when_a_peer_exits),
		cmocka_unit_test(ddp_sync_times_out_when_a_peer_hangs),
		cmocka_unit_test(ddp_ranks_with_different_plans_fail_clearly),
		cmocka_unit_test(train_reaches_accuracy_with_equal_digests),
		cmocka_unit_test_setup_teardown(train_resumes_from_checkpoint_after_kill, setup,
						teardown),
		cmocka_unit_test_setup_teardown(train_under_crun_restarts_and_resumes, setup,
						teardown),
		cmocka_unit_test_setup_teardown(ranks_resume_the_checkpoint_rank0_chose, setup,
						teardown),
		cmocka_unit_test_setup_teardown(resume_fails_clearly_when_a_rank_lacks_the_choice,
						setup, teardown),
		cmocka_unit_test(hung_worker_is_detected_and_restarted),
		cmocka_unit_test(heartbeat_keeps_a_long_step_alive),
	};

	return test_run_group("worker-multi", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
