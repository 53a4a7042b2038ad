/* SPDX-License-Identifier: MIT */
/* tests/worker/test_worker_unit.c: libcrun-worker in one process: environment, single mode,
 * barrier timeout, error file, fatal-signal record, sampler, checkpoints, DDP buckets. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <crun/crun.h>

#include "tests/lib/cmocka_skip.h"

static const char *const env_vars[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
	"GROUP_RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
	"MASTER_ADDR", "MASTER_PORT", "CRUN_STORE_ENDPOINT", "CRUN_STORE_PREFIX",
	"CRUN_STORE_TOKEN", "CRUN_SINGLE"};

static char tmpdir[PATH_MAX / 2]; /* half: room for the names appended to it */

static int setup(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++) {
		unsetenv(env_vars[i]);
	}
	snprintf(tmpdir, sizeof(tmpdir), "%s/crun-wtest-XXXXXX",
		 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	crun_finish();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *path)
{
	static char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	if (fd < 0) {
		return NULL;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0) {
		return NULL;
	}
	buf[n] = '\0';
	return buf;
}

static void env_reads_torchrun_variables(void **state)
{
	char err[256];

	(void)state;
	setenv("RANK", "5", 1);
	setenv("WORLD_SIZE", "8", 1);
	setenv("LOCAL_RANK", "1", 1);
	setenv("LOCAL_WORLD_SIZE", "4", 1);
	setenv("GROUP_RANK", "1", 1);
	setenv("GROUP_WORLD_SIZE", "2", 1);
	setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
	setenv("TORCHELASTIC_MAX_RESTARTS", "3", 1);
	setenv("TORCHELASTIC_RUN_ID", "job42", 1);
	setenv("MASTER_ADDR", "10.0.0.1", 1);
	setenv("MASTER_PORT", "29500", 1);
	setenv("CRUN_STORE_PREFIX", "r/1/", 1);
	assert_int_equal(crun_init(NULL, err, sizeof(err)), 0);
	assert_int_equal(crun_rank(), 5);
	assert_int_equal(crun_world_size(), 8);
	assert_int_equal(crun_local_rank(), 1);
	assert_int_equal(crun_local_world_size(), 4);
	assert_int_equal(crun_node_rank(), 1);
	assert_int_equal(crun_node_count(), 2);
	assert_int_equal(crun_restart_count(), 2);
	assert_int_equal(crun_max_restarts(), 3);
	assert_int_equal(crun_master_port(), 29500);
	assert_string_equal(crun_run_id(), "job42");
	assert_string_equal(crun_master_addr(), "10.0.0.1");
	assert_string_equal(crun_store_key_prefix(), "r/1/");
	/* Read once: later changes are not seen until crun_finish(). */
	setenv("RANK", "6", 1);
	assert_int_equal(crun_rank(), 5);
	crun_finish();
	assert_int_equal(crun_rank(), 6);
}

static void env_outside_crun_is_enotcrun(void **state)
{
	struct crun_store *st = NULL;
	char err[256];

	(void)state;
	assert_int_equal(crun_init(NULL, err, sizeof(err)), CRUN_ENOTCRUN);
	assert_non_null(strstr(err, "RANK and WORLD_SIZE are not set"));
	assert_non_null(strstr(err, "CRUN_SINGLE=1"));
	assert_string_equal(crun_init_error(), err);
	assert_int_equal(crun_rank(), CRUN_ENOTCRUN);
	assert_int_equal(crun_world_size(), CRUN_ENOTCRUN);
	assert_null(crun_run_id());
	assert_int_equal(crun_worker_store_open(&st, err, sizeof(err)), CRUN_ENOTCRUN);
	assert_null(st);
	assert_int_equal(crun_barrier(100), CRUN_ENOTCRUN);
}

static void env_rejects_bad_values(void **state)
{
	char err[256];

	(void)state;
	setenv("WORLD_SIZE", "2", 1);
	setenv("RANK", "2", 1);
	assert_int_equal(crun_init(NULL, err, sizeof(err)), CRUN_ECONFIG);
	assert_non_null(strstr(err, "RANK: expected an integer in [0, 1], got \"2\""));
	/* white space around a number, as Python's int() would take it, is refused (issue 20) */
	setenv("RANK", " 1", 1);
	assert_int_equal(crun_init(NULL, err, sizeof(err)), CRUN_ECONFIG);
	assert_non_null(strstr(err, "RANK: expected an integer in [0, 1], got \" 1\""));
	setenv("RANK", "1 ", 1);
	assert_int_equal(crun_init(NULL, err, sizeof(err)), CRUN_ECONFIG);
	assert_non_null(strstr(err, "RANK: expected an integer in [0, 1], got \"1 \""));
	setenv("RANK", "1", 1);
	setenv("LOCAL_RANK", "\t0", 1);
	assert_int_equal(crun_init(NULL, err, sizeof(err)), CRUN_ECONFIG);
	assert_non_null(strstr(err, "LOCAL_RANK: expected an integer"));
	unsetenv("LOCAL_RANK");
	setenv("MASTER_PORT", "http", 1);
	assert_int_equal(crun_init(NULL, err, sizeof(err)), CRUN_ECONFIG);
	assert_non_null(strstr(err, "MASTER_PORT"));
	unsetenv("MASTER_PORT");
	setenv("CRUN_SINGLE", "yes", 1);
	assert_int_equal(crun_init(NULL, err, sizeof(err)), CRUN_ECONFIG);
	assert_non_null(strstr(err, "CRUN_SINGLE"));
	unsetenv("CRUN_SINGLE");
	/* Without a store endpoint the queries work but the store does not. */
	assert_int_equal(crun_init(NULL, err, sizeof(err)), 0);
	assert_int_equal(crun_master_port(), -ENOENT);
	{
		struct crun_store *st;

		assert_int_equal(crun_worker_store_open(&st, err, sizeof(err)), CRUN_ECONFIG);
		assert_non_null(strstr(err, "CRUN_STORE_ENDPOINT"));
	}
}

static void single_mode_has_private_store(void **state)
{
	struct crun_init_opts o = {.single = true};
	struct crun_store *st;
	char err[256], dir[PATH_MAX];
	void *val;
	size_t len;
	struct stat sb;

	(void)state;
	assert_int_equal(crun_init(&o, err, sizeof(err)), 0);
	assert_int_equal(crun_rank(), 0);
	assert_int_equal(crun_world_size(), 1);
	assert_non_null(crun_store_endpoint());
	assert_int_equal(strncmp(crun_store_endpoint(), "file://", 7), 0);
	assert_int_equal(crun_worker_store_open(&st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "k", "v", 1), 0);
	assert_int_equal(crun_store_get(st, "k", &val, &len), 0);
	assert_int_equal(len, 1);
	free(val);
	crun_store_close(st);
	assert_int_equal(crun_barrier(5000), 0);
	assert_int_equal(crun_barrier(5000), 0);
	/* crun_finish removes the temp dir. */
	snprintf(dir, sizeof(dir), "%s", crun_store_endpoint() + 7);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(stat(dir, &sb), 0);
	crun_finish();
	assert_int_equal(stat(dir, &sb), -1);
	/* CRUN_SINGLE=1 does the same from the environment. */
	setenv("CRUN_SINGLE", "1", 1);
	assert_int_equal(crun_world_size(), 1);
}

static void barrier_times_out_without_peers(void **state)
{
	char ep[PATH_MAX + 16];
	struct timespec t0, t1;
	double dt;

	(void)state;
	snprintf(ep, sizeof(ep), "file://%s/store", tmpdir);
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "2", 1);
	setenv("CRUN_STORE_ENDPOINT", ep, 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(crun_barrier(300), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	/* The 300 ms timeout and a few ms; 10x that still holds on a loaded machine. */
	assert_true(dt >= 0.25 && dt < 3.0);
}

static void error_record_writes_torchrun_json(void **state)
{
	char path[PATH_MAX], *s;
	const char *want = "{\"message\": {\"message\": \"loss is NaN: \\\"x\\\"\\n\\tat \\\\step "
			   "7\\u0001\", \"extraInfo\": {\"py_callstack\": \"";

	(void)state;
	assert_int_equal(crun_error_record("x"), -ENOENT);
	snprintf(path, sizeof(path), "%s/error.json", tmpdir);
	setenv("TORCHELASTIC_ERROR_FILE", path, 1);
	assert_int_equal(crun_error_record("loss is NaN: \"x\"\n\tat \\step 7\x01"), 0);
	s = slurp(path);
	assert_non_null(s);
	assert_memory_equal(s, want, strlen(want));
	assert_non_null(strstr(s, "\", \"timestamp\": \""));
	assert_non_null(strstr(s, "\"}}}\n"));
	/* No raw control characters, and the timestamp is now-ish epoch seconds. */
	for (char *p = s; *p != '\0'; p++) {
		assert_true((unsigned char)*p >= 0x20 || *p == '\n');
	}
	{
		long long ts = atoll(strstr(s, "\"timestamp\": \"") + 14);

		assert_true(ts > (long long)time(NULL) - 60 && ts <= (long long)time(NULL));
	}
	/* Written atomically: no temp file left beside it. */
	{
		char tmp[PATH_MAX + 32];
		struct stat sb;

		snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
		assert_int_equal(stat(tmp, &sb), -1);
	}
}

/*
 * The agent (and torchrun's tooling) parse the error file as JSON, which is UTF-8: a message
 * with bytes that are not UTF-8 (a Latin-1 file name, a truncated sequence, an overlong form
 * or a surrogate) must still give valid JSON, with U+FFFD in their place; valid UTF-8 is kept.
 */
static void error_record_replaces_invalid_utf8(void **state)
{
	char path[PATH_MAX], *s;
	const char *want = "{\"message\": {\"message\": \"caf\xc3\xa9 \\ufffd \\ufffd\\ufffd "
			   "\\ufffd\\ufffd\\ufffd \xf0\x9f\x98\x80 \\ufffd\\ufffd end\", ";

	(void)state;
	snprintf(path, sizeof(path), "%s/error.json", tmpdir);
	setenv("TORCHELASTIC_ERROR_FILE", path, 1);
	assert_int_equal(crun_error_record("caf\xc3\xa9 \xff \xc0\xaf \xed\xa0\x80 "
					   "\xf0\x9f\x98\x80 \xe2\x82 end"),
			 0);
	s = slurp(path);
	assert_non_null(s);
	if (strncmp(s, want, strlen(want)) != 0) {
		fprintf(stderr, "got: %.120s\nwant: %s\n", s, want);
	}
	assert_memory_equal(s, want, strlen(want));
}

static void signal_handler_writes_record_and_reraises(void **state)
{
	char path[PATH_MAX], *s;
	int status;
	pid_t pid;

	(void)state;
	snprintf(path, sizeof(path), "%s/sig.json", tmpdir);
	assert_int_equal(crun_error_install_signal_handler(), -ENOENT);
	setenv("TORCHELASTIC_ERROR_FILE", path, 1);
	setenv("RANK", "3", 1);
	setenv("WORLD_SIZE", "4", 1);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (crun_error_install_signal_handler() != 0) {
			_exit(10);
		}
		raise(SIGFPE);
		_exit(11);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGFPE);
	s = slurp(path);
	assert_non_null(s);
	assert_non_null(strstr(s, "{\"message\": {\"message\": \"fatal signal 8 (SIGFPE) in rank 3"));
	assert_non_null(strstr(s, "\"timestamp\": \""));
	/* SIGABRT too (abort()). */
	unlink(path);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (crun_error_install_signal_handler() != 0) {
			_exit(10);
		}
		abort();
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	s = slurp(path);
	assert_non_null(s);
	assert_non_null(strstr(s, "(SIGABRT)"));
}

static void sampler_pads_by_wrapping(void **state)
{
	struct crun_sampler s[3];
	size_t idx[3][4], count[10] = {0};
	int r;

	(void)state;
	/* 10 samples, 3 ranks: 4 each, 2 padding samples taken from the start of the order. */
	for (r = 0; r < 3; r++) {
		assert_int_equal(crun_sampler_init(&s[r], 10, r, 3, 7, false, false), 0);
		assert_int_equal(s[r].num_samples, 4);
		assert_int_equal(s[r].total_size, 12);
		assert_int_equal(crun_sampler_indices(&s[r], 0, idx[r]), 0);
	}
	/* Without shuffling: rank r takes r, r+3, r+6, r+9 of 0..9,0,1. */
	assert_int_equal(idx[0][0], 0);
	assert_int_equal(idx[0][3], 9);
	assert_int_equal(idx[1][3], 0);
	assert_int_equal(idx[2][3], 1);
	for (r = 0; r < 3; r++) {
		for (int i = 0; i < 4; i++) {
			count[idx[r][i]]++;
		}
	}
	for (int i = 0; i < 10; i++) {
		assert_int_equal(count[i], i < 2 ? 2 : 1);
	}
	/* Padding longer than the dataset wraps repeatedly. */
	assert_int_equal(crun_sampler_init(&s[0], 2, 4, 5, 0, false, false), 0);
	assert_int_equal(s[0].num_samples, 1);
	assert_int_equal(crun_sampler_indices(&s[0], 0, idx[0]), 0);
	assert_int_equal(idx[0][0], 0);
}

static void sampler_drop_last_trims(void **state)
{
	struct crun_sampler s;
	size_t idx[4];

	(void)state;
	assert_int_equal(crun_sampler_init(&s, 10, 2, 3, 7, false, true), 0);
	assert_int_equal(s.num_samples, 3);
	assert_int_equal(s.total_size, 9);
	assert_int_equal(crun_sampler_indices(&s, 0, idx), 0);
	assert_int_equal(idx[0], 2);
	assert_int_equal(idx[1], 5);
	assert_int_equal(idx[2], 8);
	assert_int_equal(crun_sampler_init(&s, 2, 0, 3, 7, false, true), -EINVAL);
	assert_int_equal(crun_sampler_init(&s, 10, 3, 3, 7, false, true), -EINVAL);
	assert_int_equal(crun_sampler_init(&s, 10, 0, 0, 7, false, true), -EINVAL);
	assert_int_equal(crun_sampler_init(&s, 0, 0, 1, 7, false, false), -EINVAL);
}

static void sampler_is_deterministic_and_shards_disjoint(void **state)
{
	enum { N = 1000, W = 4 };
	struct crun_sampler s;
	size_t a[N / W], b[N / W];
	int seen[N] = {0}, r, i, same = 0;

	(void)state;
	for (r = 0; r < W; r++) {
		assert_int_equal(crun_sampler_init(&s, N, r, W, 42, true, false), 0);
		assert_int_equal(crun_sampler_indices(&s, 3, a), 0);
		assert_int_equal(crun_sampler_indices(&s, 3, b), 0);
		assert_memory_equal(a, b, sizeof(a));
		for (i = 0; i < N / W; i++) {
			assert_true(a[i] < N);
			seen[a[i]]++;
		}
	}
	for (i = 0; i < N; i++) {
		assert_int_equal(seen[i], 1); /* the shards partition the permutation */
	}
	/* Another epoch or another seed: another order. */
	assert_int_equal(crun_sampler_init(&s, N, 0, W, 42, true, false), 0);
	assert_int_equal(crun_sampler_indices(&s, 3, a), 0);
	assert_int_equal(crun_sampler_indices(&s, 4, b), 0);
	for (i = 0; i < N / W; i++) {
		same += a[i] == b[i];
	}
	assert_true(same < N / W / 4);
	/* Same seed and epoch in a fresh sampler: the same order (a resumed run sees it). */
	assert_int_equal(crun_sampler_init(&s, 10, 0, 1, 1, true, false), 0);
	assert_int_equal(crun_sampler_indices(&s, 0, a), 0);
	{
		size_t again[10];

		assert_int_equal(crun_sampler_indices(&s, 0, again), 0);
		assert_memory_equal(a, again, 10 * sizeof(size_t));
	}
}

/*
 * Golden indices from torch.utils.data.distributed.DistributedSampler (Debian's python3-torch
 * 1.13, torch.randperm seeded with seed + epoch): the same seed, epoch, world, rank and
 * drop_last give the same indices in crun and in torch. Regenerate with:
 *   s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=sh, seed=seed,
 *                          drop_last=dl); s.set_epoch(ep); list(s)[:16]
 */
static void sampler_matches_torch_distributed_sampler(void **state)
{
	static const struct {
		size_t n;
		int world, rank;
		uint64_t seed, epoch;
		bool drop_last, shuffle;
		size_t num_samples;
		size_t first[16];
	} cases[] = {
		{10, 3, 1, 0u, 0u, false, true, 4, {1, 3, 8, 4}},
		{10, 3, 2, 7u, 5u, true, true, 3, {8, 6, 7}},
		{5, 4, 3, 42u, 1u, false, true, 2, {2, 4}},
		{1437, 2, 0, 1u, 0u, false, true, 719,
		 {364, 531, 1181, 494, 1302, 845, 778, 103, 330, 1406, 740, 543, 1245, 1224, 1310, 905}},
		{1437, 2, 1, 1u, 3u, false, true, 719,
		 {855, 50, 1141, 523, 1374, 1057, 1114, 166, 330, 263, 833, 711, 969, 1229, 1074, 1324}},
		{10, 3, 1, 0u, 0u, false, false, 4, {1, 4, 7, 0}},
		{2, 5, 4, 3u, 0u, false, true, 1, {0}},
		{1000, 7, 6, 123456789u, 9u, true, true, 142,
		 {494, 70, 296, 725, 552, 682, 444, 774, 965, 398, 355, 499, 245, 817, 508, 802}},
		{13, 4, 0, 5u, 2u, false, true, 4, {6, 8, 11, 2}},
	};
	struct crun_sampler s;
	size_t idx[1437], i, k;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(crun_sampler_init(&s, cases[i].n, cases[i].rank, cases[i].world,
						   cases[i].seed, cases[i].shuffle, cases[i].drop_last),
				 0);
		assert_int_equal(s.num_samples, cases[i].num_samples);
		assert_int_equal(crun_sampler_indices(&s, cases[i].epoch, idx), 0);
		for (k = 0; k < 16 && k < cases[i].num_samples; k++) {
			if (idx[k] != cases[i].first[k]) {
				fprintf(stderr, "case %zu position %zu: crun %zu, torch %zu\n", i, k,
					idx[k], cases[i].first[k]);
			}
			assert_int_equal(idx[k], cases[i].first[k]);
		}
	}
}

static void ckpt_path(char *out, size_t len, uint64_t step)
{
	snprintf(out, len, "%s/ck/ckpt-%020llu.bin", tmpdir, (unsigned long long)step);
}

static void checkpoint_round_trips(void **state)
{
	struct crun_init_opts o = {.single = true};
	float a[100], a2[100];
	double b[3] = {1, 2, 3}, b2[3];
	struct crun_ckpt_seg segs[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
	struct crun_ckpt_seg segs2[2] = {{a2, sizeof(a2)}, {b2, sizeof(b2)}};
	char dir[PATH_MAX], path[PATH_MAX];
	uint64_t epoch, step;
	struct stat sb;

	(void)state;
	assert_int_equal(crun_init(&o, NULL, 0), 0);
	for (int i = 0; i < 100; i++) {
		a[i] = (float)i * 0.5f;
	}
	snprintf(dir, sizeof(dir), "%s/ck", tmpdir);
	assert_int_equal(crun_checkpoint_load_latest(dir, &epoch, &step, segs2, 2, NULL, 0),
			 -ENOENT);
	for (uint64_t s = 1; s <= 4; s++) {
		b[0] = (double)s;
		assert_int_equal(crun_checkpoint_save(dir, s * 10, s, segs, 2, 5000), 0);
	}
	assert_int_equal(crun_checkpoint_load_latest(dir, &epoch, &step, segs2, 2, path,
						     sizeof(path)),
			 0);
	assert_int_equal(epoch, 40);
	assert_int_equal(step, 4);
	assert_memory_equal(a, a2, sizeof(a));
	assert_true(b2[0] == 4.0);
	/* Only the two newest are kept. */
	ckpt_path(path, sizeof(path), 2);
	assert_int_equal(stat(path, &sb), -1);
	ckpt_path(path, sizeof(path), 3);
	assert_int_equal(stat(path, &sb), 0);
	/* Different shapes are refused, not half loaded. */
	segs2[1].len = 16;
	assert_int_equal(crun_checkpoint_load(path, &epoch, &step, segs2, 2), -EINVAL);
	assert_int_equal(crun_checkpoint_load(path, &epoch, &step, segs2, 1), -EINVAL);
	assert_int_equal(crun_checkpoint_save(NULL, 0, 0, segs, 2, 1000), -EINVAL);
	/* Missing parents are created (mkdir -p). */
	snprintf(dir, sizeof(dir), "%s/a/b/c", tmpdir);
	assert_int_equal(crun_checkpoint_save(dir, 1, 1, segs, 2, 5000), 0);
	assert_int_equal(crun_checkpoint_load_latest(dir, &epoch, &step, segs2, 2, NULL, 0), -EINVAL);
	segs2[1].len = sizeof(b2);
	assert_int_equal(crun_checkpoint_load_latest(dir, &epoch, &step, segs2, 2, NULL, 0), 0);
	assert_int_equal(step, 1);
	/* A file where a directory should be. */
	snprintf(dir, sizeof(dir), "%s/a/b/c/ckpt-00000000000000000001.bin/x", tmpdir);
	assert_int_equal(crun_checkpoint_save(dir, 1, 1, segs, 2, 5000), -ENOTDIR);
}

static void corrupt(const char *path, off_t off, int truncate_to)
{
	unsigned char c;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	if (truncate_to >= 0) {
		assert_int_equal(ftruncate(fd, truncate_to), 0);
	} else {
		assert_int_equal(pread(fd, &c, 1, off), 1);
		c ^= 0x40;
		assert_int_equal(pwrite(fd, &c, 1, off), 1);
	}
	close(fd);
}

static void checkpoint_rejects_corrupted_files(void **state)
{
	struct crun_init_opts o = {.single = true};
	float a[64] = {0}, a2[64];
	struct crun_ckpt_seg segs[1] = {{a, sizeof(a)}}, segs2[1] = {{a2, sizeof(a2)}};
	char dir[PATH_MAX], p1[PATH_MAX], p2[PATH_MAX], got[PATH_MAX];
	uint64_t epoch, step;

	(void)state;
	assert_int_equal(crun_init(&o, NULL, 0), 0);
	snprintf(dir, sizeof(dir), "%s/ck", tmpdir);
	a[0] = 1.0f;
	assert_int_equal(crun_checkpoint_save(dir, 1, 1, segs, 1, 5000), 0);
	a[0] = 2.0f;
	assert_int_equal(crun_checkpoint_save(dir, 2, 2, segs, 1, 5000), 0);
	ckpt_path(p1, sizeof(p1), 1);
	ckpt_path(p2, sizeof(p2), 2);
	/* A flipped payload bit. */
	corrupt(p2, 48 + 8 + 4 + 10, -1);
	assert_int_equal(crun_checkpoint_load(p2, &epoch, &step, segs2, 1), -EBADMSG);
	/* The latest valid one is used instead. */
	assert_int_equal(crun_checkpoint_load_latest(dir, &epoch, &step, segs2, 1, got,
						     sizeof(got)),
			 0);
	assert_int_equal(step, 1);
	assert_string_equal(got, p1);
	assert_true(a2[0] == 1.0f);
	/* A flipped header bit (the epoch), a truncated file, a bad magic, a longer file. */
	assert_int_equal(crun_checkpoint_save(dir, 3, 3, segs, 1, 5000), 0);
	ckpt_path(p2, sizeof(p2), 3);
	corrupt(p2, 16, -1);
	assert_int_equal(crun_checkpoint_load(p2, &epoch, &step, segs2, 1), -EBADMSG);
	assert_int_equal(crun_checkpoint_save(dir, 4, 4, segs, 1, 5000), 0);
	ckpt_path(p2, sizeof(p2), 4);
	corrupt(p2, 0, 100);
	assert_int_equal(crun_checkpoint_load(p2, &epoch, &step, segs2, 1), -EBADMSG);
	corrupt(p2, 0, 0);
	assert_int_equal(crun_checkpoint_load(p2, &epoch, &step, segs2, 1), -EBADMSG);
	assert_int_equal(crun_checkpoint_save(dir, 5, 5, segs, 1, 5000), 0);
	ckpt_path(p2, sizeof(p2), 5);
	corrupt(p2, 0, -1);
	assert_int_equal(crun_checkpoint_load(p2, &epoch, &step, segs2, 1), -EBADMSG);
	assert_int_equal(crun_checkpoint_save(dir, 6, 6, segs, 1, 5000), 0);
	ckpt_path(p2, sizeof(p2), 6);
	{
		int fd = open(p2, O_WRONLY | O_APPEND);

		assert_true(fd >= 0);
		assert_int_equal(write(fd, "x", 1), 1);
		close(fd);
	}
	assert_int_equal(crun_checkpoint_load(p2, &epoch, &step, segs2, 1), -EBADMSG);
	assert_int_equal(crun_checkpoint_load("/nonexistent/ckpt", &epoch, &step, segs2, 1),
			 -ENOENT);
}

static bool exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0;
}

/*
 * Rotation keeps the newest checkpoints that validate: with the two newest files damaged, the
 * next save keeps itself and the older valid one (it used to keep the two damaged files and
 * delete the valid one, and the one just written whenever its step was below theirs).
 */
static void checkpoint_rotation_keeps_newest_valid(void **state)
{
	struct crun_init_opts o = {.single = true};
	uint64_t a[32], a2[32], epoch, step;
	struct crun_ckpt_seg segs[1] = {{a, sizeof(a)}}, segs2[1] = {{a2, sizeof(a2)}};
	char dir[PATH_MAX], p[8][PATH_MAX], got[PATH_MAX];
	uint64_t s;

	(void)state;
	assert_int_equal(crun_init(&o, NULL, 0), 0);
	snprintf(dir, sizeof(dir), "%s/ck", tmpdir);
	for (s = 1; s < 8; s++) {
		ckpt_path(p[s], sizeof(p[s]), s);
	}
	/* 1, 3 and 4 on disk; then 3 and 4 (the two newest) are damaged. */
	for (s = 1; s <= 4; s++) {
		if (s == 2) {
			continue;
		}
		a[0] = s;
		assert_int_equal(crun_checkpoint_save(dir, s, s, segs, 1, 5000), 0);
		if (s == 3) {
			/* Save 3 removed nothing valid yet: 1 and 3 are the two kept. */
			assert_true(exists(p[1]));
		}
	}
	assert_false(exists(p[1])); /* a valid third file went when 4 was saved */
	a[0] = 1;
	assert_int_equal(crun_checkpoint_save(dir, 1, 1, segs, 1, 5000), 0);
	assert_true(exists(p[3]) && exists(p[4]));
	corrupt(p[3], 48 + 8 + 4 + 10, -1);
	corrupt(p[4], 0, 100);
	/* A restart resumed from 1 and saves 2: below both damaged files, and kept. */
	a[0] = 2;
	assert_int_equal(crun_checkpoint_save(dir, 2, 2, segs, 1, 5000), 0);
	assert_true(exists(p[2]));
	assert_true(exists(p[1]));
	assert_false(exists(p[3]));
	assert_false(exists(p[4]));
	assert_int_equal(crun_checkpoint_load_latest(dir, &epoch, &step, segs2, 1, got,
						     sizeof(got)),
			 0);
	assert_int_equal(step, 2);
	assert_int_equal(a2[0], 2);
	/* Each new file damaged after its save: the valid 2 survives every later save. */
	a[0] = 5;
	assert_int_equal(crun_checkpoint_save(dir, 5, 5, segs, 1, 5000), 0);
	assert_false(exists(p[1])); /* a third valid one goes */
	corrupt(p[5], 16, -1);
	a[0] = 6;
	assert_int_equal(crun_checkpoint_save(dir, 6, 6, segs, 1, 5000), 0);
	corrupt(p[6], 0, 0);
	a[0] = 7;
	assert_int_equal(crun_checkpoint_save(dir, 7, 7, segs, 1, 5000), 0);
	assert_true(exists(p[7]));
	assert_false(exists(p[5]) || exists(p[6]));
	assert_true(exists(p[2])); /* the newest valid one below 7 */
	assert_int_equal(crun_checkpoint_load(p[2], &epoch, &step, segs2, 1), 0);
	assert_int_equal(a2[0], 2);
	/* The shape of a file does not matter to rotation: only whether it validates. */
	{
		uint64_t big[64] = {0};
		struct crun_ckpt_seg bs[1] = {{big, sizeof(big)}};

		assert_int_equal(crun_checkpoint_save(dir, 8, 8, bs, 1, 5000), 0);
		assert_true(exists(p[7]));
		assert_false(exists(p[2]));
	}
}

/*
 * Kill a process while it writes checkpoints as fast as it can: whatever moment the kill lands
 * on, the newest checkpoint on disk is complete (a torn write never has the final name).
 */
static void checkpoint_survives_kill_mid_write(void **state)
{
	enum { LEN = 4 << 20 };
	struct crun_init_opts o = {.single = true};
	char dir[PATH_MAX], c;
	float *a = malloc(LEN), *a2 = malloc(LEN);
	uint64_t epoch, step;
	int p[2], status, got = 0;
	pid_t pid;

	(void)state;
	assert_non_null(a);
	assert_non_null(a2);
	snprintf(dir, sizeof(dir), "%s/ck", tmpdir);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct crun_ckpt_seg segs[1] = {{a, LEN}};

		close(p[0]);
		/* Its single-mode directory goes under tmpdir: SIGKILL leaves no crun_finish(). */
		setenv("TMPDIR", tmpdir, 1);
		if (crun_init(&o, NULL, 0) < 0) {
			_exit(2);
		}
		for (uint64_t s = 1;; s++) {
			for (size_t i = 0; i < LEN / sizeof(float); i++) {
				a[i] = (float)s;
			}
			if (crun_checkpoint_save(dir, s, s, segs, 1, 5000) < 0 ||
			    write(p[1], "x", 1) != 1) {
				_exit(3);
			}
		}
	}
	close(p[1]);
	/* After three complete saves, kill it during (most likely) the fourth. */
	while (got < 3 && read(p[0], &c, 1) == 1) {
		got++;
	}
	kill(pid, SIGKILL);
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(got, 3);
	{
		struct crun_ckpt_seg segs2[1] = {{a2, LEN}};

		assert_int_equal(crun_checkpoint_load_latest(dir, &epoch, &step, segs2, 1, NULL, 0),
				 0);
		assert_true(step >= 3);
		assert_true(a2[0] == (float)step && a2[LEN / sizeof(float) - 1] == (float)step);
	}
	/* The killed writer's temp file (and any older one) is removed by the next save, so
	 * repeated crashes mid-write do not fill the disk. */
	{
		struct crun_ckpt_seg segs[1] = {{a, 64}};
		char stale[PATH_MAX + 64];
		struct dirent *de;
		DIR *dd;
		int fd;

		snprintf(stale, sizeof(stale), "%s/.ckpt-00000000000000000001.bin.tmp.1", dir);
		fd = open(stale, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		assert_true(fd >= 0);
		close(fd);
		assert_int_equal(crun_init(&o, NULL, 0), 0);
		assert_int_equal(crun_checkpoint_save(dir, 9, 99, segs, 1, 5000), 0);
		dd = opendir(dir);
		assert_non_null(dd);
		while ((de = readdir(dd)) != NULL) {
			if (strstr(de->d_name, ".tmp.") != NULL) {
				fprintf(stderr, "left behind: %s\n", de->d_name);
				fail();
			}
		}
		closedir(dd);
	}
	free(a);
	free(a2);
}

static void ddp_buckets_follow_reverse_registration(void **state)
{
	struct crun_init_opts o = {.single = true};
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 10000};
	struct crun_ddp_opts dopt = {.bucket_cap_bytes = 4000, .first_bucket_bytes = 399};
	static float p[5][1000], g[5][1000];
	static const size_t n[5] = {500, 50, 900, 60, 40};
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	char err[256];
	int i;

	(void)state;
	assert_int_equal(crun_init(&o, NULL, 0), 0);
	assert_int_equal(crun_worker_store_open(&st, err, sizeof(err)), 0);
	assert_int_equal(crun_comm_create(st, 0, 1, &co, &comm), 0);
	assert_int_equal(crun_ddp_create(comm, &dopt, &ddp), 0);
	for (i = 0; i < 5; i++) {
		assert_int_equal(crun_ddp_register(ddp, p[i], g[i], n[i]), i);
	}
	assert_int_equal(crun_ddp_register(ddp, p[0], g[0], 0), -EINVAL);
	assert_int_equal(crun_ddp_bucket_count(ddp), 0);
	assert_int_equal(crun_ddp_broadcast_params(ddp), 0);
	/* Reverse order: 160 B + 240 B would pass the 399 B first bucket -> bucket 0 = {4}, then
	 * bucket 1 = {3, 2} (240 + 3600 <= 4000), bucket 2 = {1, 0} (200 + 2000). */
	assert_int_equal(crun_ddp_bucket_of(ddp, 4), 0);
	assert_int_equal(crun_ddp_bucket_of(ddp, 3), 1);
	assert_int_equal(crun_ddp_bucket_of(ddp, 2), 1);
	assert_int_equal(crun_ddp_bucket_of(ddp, 1), 2);
	assert_int_equal(crun_ddp_bucket_of(ddp, 0), 2);
	assert_int_equal(crun_ddp_bucket_count(ddp), 3);
	assert_int_equal(crun_ddp_register(ddp, p[0], g[0], 10), -EBUSY);
	/* A world of one: sync leaves gradients as they are. */
	g[2][7] = 3.5f;
	assert_int_equal(crun_ddp_grad_ready(ddp, 2), 0);
	assert_int_equal(crun_ddp_grad_ready(ddp, 2), -EALREADY);
	assert_int_equal(crun_ddp_grad_ready(ddp, 9), -EINVAL);
	assert_int_equal(crun_ddp_sync(ddp), 0);
	assert_true(g[2][7] == 3.5f);
	crun_ddp_set_no_sync(ddp, true);
	assert_int_equal(crun_ddp_grad_ready(ddp, 2), 0);
	assert_int_equal(crun_ddp_sync(ddp), 0);
	crun_ddp_set_no_sync(ddp, false);
	assert_int_equal(crun_ddp_sync(ddp), 0);
	crun_ddp_destroy(ddp);
	crun_ddp_destroy(NULL);
	crun_comm_destroy(comm);
	crun_store_close(st);
}

/*
 * no_sync switched on in the middle of a step (after a gradient was marked) must not strand
 * that step: crun_ddp_sync() finishes it, and the next step starts clean.
 */
static void ddp_no_sync_entered_mid_step_finishes_the_step(void **state)
{
	struct crun_init_opts o = {.single = true};
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 10000};
	static float p[2][100], g[2][100];
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	char err[256];

	(void)state;
	assert_int_equal(crun_init(&o, NULL, 0), 0);
	assert_int_equal(crun_worker_store_open(&st, err, sizeof(err)), 0);
	assert_int_equal(crun_comm_create(st, 0, 1, &co, &comm), 0);
	assert_int_equal(crun_ddp_create(comm, NULL, &ddp), 0);
	assert_int_equal(crun_ddp_register(ddp, p[0], g[0], 100), 0);
	assert_int_equal(crun_ddp_register(ddp, p[1], g[1], 100), 1);
	assert_int_equal(crun_ddp_grad_ready(ddp, 1), 0);
	crun_ddp_set_no_sync(ddp, true);
	assert_int_equal(crun_ddp_sync(ddp), 0);
	assert_int_equal(crun_ddp_buckets_reduced(ddp), 0);
	/* The step in flight was completed, so the DDP is between steps again. */
	assert_int_equal(crun_ddp_broadcast_params(ddp), 0);
	assert_int_equal(crun_ddp_grad_ready(ddp, 1), 0); /* no_sync: not marked */
	assert_int_equal(crun_ddp_sync(ddp), 0);
	crun_ddp_set_no_sync(ddp, false);
	assert_int_equal(crun_ddp_grad_ready(ddp, 1), 0);
	assert_int_equal(crun_ddp_grad_ready(ddp, 0), 0);
	assert_int_equal(crun_ddp_sync(ddp), 0);
	crun_ddp_destroy(ddp);
	crun_comm_destroy(comm);
	crun_store_close(st);
}

/*
 * crun_ddp_broadcast_params() between the marks of one step would run a collective beside the
 * step's (and overwrite parameters whose gradients are being reduced): it refuses with
 * -EBUSY and says why, even before any bucket is complete.
 */
static void ddp_broadcast_refuses_a_partly_marked_step(void **state)
{
	struct crun_init_opts o = {.single = true};
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 10000};
	static float p[2][100], g[2][100];
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	char err[256];

	(void)state;
	assert_int_equal(crun_init(&o, NULL, 0), 0);
	assert_int_equal(crun_worker_store_open(&st, err, sizeof(err)), 0);
	assert_int_equal(crun_comm_create(st, 0, 1, &co, &comm), 0);
	assert_int_equal(crun_ddp_create(comm, NULL, &ddp), 0);
	assert_int_equal(crun_ddp_register(ddp, p[0], g[0], 100), 0);
	assert_int_equal(crun_ddp_register(ddp, p[1], g[1], 100), 1);
	assert_int_equal(crun_ddp_broadcast_params(ddp), 0);
	assert_int_equal(crun_ddp_bucket_count(ddp), 1); /* both tensors in one bucket */
	assert_int_equal(crun_ddp_grad_ready(ddp, 1), 0);
	assert_int_equal(crun_ddp_broadcast_params(ddp), -EBUSY);
	assert_non_null(strstr(crun_ddp_last_error(ddp), "a step is in flight (1 of 2 gradients"));
	assert_int_equal(crun_ddp_grad_ready(ddp, 0), 0);
	assert_int_equal(crun_ddp_broadcast_params(ddp), -EBUSY);
	assert_int_equal(crun_ddp_sync(ddp), 0);
	assert_int_equal(crun_ddp_broadcast_params(ddp), 0);
	/* no_sync marks nothing: broadcasting between accumulated micro-batches is allowed. */
	crun_ddp_set_no_sync(ddp, true);
	assert_int_equal(crun_ddp_grad_ready(ddp, 1), 0);
	assert_int_equal(crun_ddp_broadcast_params(ddp), 0);
	crun_ddp_set_no_sync(ddp, false);
	crun_ddp_destroy(ddp);
	crun_comm_destroy(comm);
	crun_store_close(st);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(env_reads_torchrun_variables, setup, teardown),
		cmocka_unit_test_setup_teardown(env_outside_crun_is_enotcrun, setup, teardown),
		cmocka_unit_test_setup_teardown(env_rejects_bad_values, setup, teardown),
		cmocka_unit_test_setup_teardown(single_mode_has_private_store, setup, teardown),
		cmocka_unit_test_setup_teardown(barrier_times_out_without_peers, setup, teardown),
		cmocka_unit_test_setup_teardown(error_record_writes_torchrun_json, setup, teardown),
		cmocka_unit_test_setup_teardown(error_record_replaces_invalid_utf8, setup, teardown),
		cmocka_unit_test_setup_teardown(signal_handler_writes_record_and_reraises, setup,
						teardown),
		cmocka_unit_test(sampler_pads_by_wrapping),
		cmocka_unit_test(sampler_drop_last_trims),
		cmocka_unit_test(sampler_is_deterministic_and_shards_disjoint),
		cmocka_unit_test(sampler_matches_torch_distributed_sampler),
		cmocka_unit_test_setup_teardown(checkpoint_round_trips, setup, teardown),
		cmocka_unit_test_setup_teardown(checkpoint_rejects_corrupted_files, setup, teardown),
		cmocka_unit_test_setup_teardown(checkpoint_survives_kill_mid_write, setup, teardown),
		cmocka_unit_test_setup_teardown(checkpoint_rotation_keeps_newest_valid, setup,
						teardown),
		cmocka_unit_test_setup_teardown(ddp_no_sync_entered_mid_step_finishes_the_step, setup,
						teardown),
		cmocka_unit_test_setup_teardown(ddp_buckets_follow_reverse_registration, setup,
						teardown),
		cmocka_unit_test_setup_teardown(ddp_broadcast_refuses_a_partly_marked_step, setup,
						teardown),
	};

	return test_run_group("worker-unit", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
