/* SPDX-License-Identifier: MIT */
/* tests/worker/worker_helper.c: worker programs the multi-process tests start under the test
 * launcher. Uses only the public API (<crun/crun.h>). Exit 0 on success, 1 on a failed check.
 *   worker_helper env             print every query as key=value
 *   worker_helper barrier ROUNDS  check that no rank leaves a barrier before all arrived
 *   worker_helper ddp-equiv STEPS N ranks on shards == one process on the whole batch
 *   worker_helper ddp-overlap     a complete bucket is reduced before sync is called
 *   worker_helper ddp-peer-dies exit|hang   rank 0's sync fails in time when rank 1 leaves
 *   worker_helper ddp-plan-mismatch   ranks that register different sizes get CRUN_ECONFIG
 *                                 naming both plans, from every DDP call, without a hang
 *   worker_helper comm-auto       the backend CRUN_BACKEND (or auto) picks: an allreduce and a
 *                                 host DDP step (tests/worker/no_cuda.sh: no CUDA libraries)
 *   worker_helper fail MESSAGE    rank 0 records MESSAGE in the error file and exits 3
 *   worker_helper ckpt-write DIR STEP...  (no launcher: single mode) save checkpoints of
 *                                 one segment whose first word is the step
 *   worker_helper resume PREFIX   crun_checkpoint_resume() from PREFIX/rank<RANK> (node-local
 *                                 directories that differ); exit 4 when it fails
 *   worker_helper beat-long SECONDS  a long step that calls crun_heartbeat() every 200 ms
 *   worker_helper hang-once       rank 1 of restart 0 stops calling anything (hangs); the
 *                                 others, and every rank of a restart, pass a barrier */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <crun/crun.h>

#include "src/common/fnv.h"
#include "tests/lib/hashf.h"

static int check(int rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "worker_helper: rank %d: %s: %s\n", crun_rank(), what,
			crun_strerror(rc));
		exit(1);
	}
	return rc;
}

static int cmd_env(void)
{
	printf("rank=%d local_rank=%d world_size=%d local_world_size=%d node_rank=%d "
	       "node_count=%d restart_count=%d max_restarts=%d master_port=%d run_id=%s "
	       "master_addr=%s prefix=%s\n",
	       crun_rank(), crun_local_rank(), crun_world_size(), crun_local_world_size(),
	       crun_node_rank(), crun_node_count(), crun_restart_count(), crun_max_restarts(),
	       crun_master_port(), crun_run_id(), crun_master_addr(), crun_store_key_prefix());
	return 0;
}

static int cmd_barrier(int rounds)
{
	struct crun_store *st;
	char err[256], key[64];
	int64_t n;
	int r;

	if (crun_worker_store_open(&st, err, sizeof(err)) < 0) {
		fprintf(stderr, "worker_helper: %s\n", err);
		return 1;
	}
	for (r = 0; r < rounds; r++) {
		snprintf(key, sizeof(key), "test/arrived/%d", r);
		check(crun_store_add(st, key, 1, &n), "add");
		check(crun_barrier(60000), "barrier");
		/* Everyone has arrived before anyone leaves. */
		check(crun_store_add(st, key, 0, &n), "add");
		if (n != crun_world_size()) {
			fprintf(stderr, "rank %d left barrier %d with %" PRId64 " of %d arrived\n",
				crun_rank(), r, n, crun_world_size());
			crun_store_close(st);
			return 1;
		}
	}
	printf("rank %d passed %d barriers\n", crun_rank(), rounds);
	crun_store_close(st);
	return 0;
}

#define NT 5
static const size_t sizes[NT] = {37, 1000, 5, 2049, 300}; /* 3391 in all */

/* Add (1/@denom) * d loss_s / d p for samples [s0, s0 + ns) into @g: a nonlinear per-sample
 * gradient, tanh(p * a_s) - t_s, so the result depends on the parameters. */
static void grad(float *const *p, float *const *g, uint64_t s0, size_t ns, float denom)
{
	size_t t, i, s;

	for (t = 0; t < NT; t++) {
		for (s = s0; s < s0 + ns; s++) {
			for (i = 0; i < sizes[t]; i++) {
				float a = hashf(s, t, i), tg = hashf(s, t + 100, i);

				g[t][i] += (tanhf(p[t][i] * a * 3.0f) - tg) / denom;
			}
		}
	}
}

static void sgd(float *const *p, float *const *g, float *const *v)
{
	for (size_t t = 0; t < NT; t++) {
		for (size_t i = 0; i < sizes[t]; i++) {
			v[t][i] = 0.9f * v[t][i] + g[t][i];
			p[t][i] -= 0.1f * v[t][i];
			g[t][i] = 0.0f;
		}
	}
}

static int cmd_ddp_equiv(int steps)
{
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 60000};
	struct crun_ddp_opts dopt = {.bucket_cap_bytes = 4096, .first_bucket_bytes = 1024};
	float *p[NT], *g[NT], *v[NT], *rp[NT], *rg[NT], *rv[NT], *pflat, *gflat = NULL;
	int rank = crun_rank(), world = crun_world_size(), order[NT], step, t, k;
	const size_t b = 3; /* samples per rank per step */
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	uint64_t h = FNV1A64_INIT;
	double maxerr = 0.0, e;
	char err[256];
	size_t i, off;

	if (crun_worker_store_open(&st, err, sizeof(err)) < 0) {
		fprintf(stderr, "worker_helper: %s\n", err);
		return 1;
	}
	check(crun_comm_create(st, rank, world, &co, &comm), "comm_create");
	check(crun_ddp_create(comm, &dopt, &ddp), "ddp_create");
	/* Parameters back to back on every rank (buckets broadcast them in place); gradients
	 * back to back only on odd ranks, so in-place and copied buckets must pair up. */
	pflat = calloc(4096, sizeof(float));
	if (rank % 2 == 1) {
		gflat = calloc(4096, sizeof(float));
	}
	if (pflat == NULL || (rank % 2 == 1 && gflat == NULL)) {
		return 1;
	}
	for (t = 0, off = 0; t < NT; t++) {
		p[t] = pflat + off;
		g[t] = gflat != NULL ? gflat + off : calloc(sizes[t], sizeof(float));
		off += sizes[t];
		v[t] = calloc(sizes[t], sizeof(float));
		rp[t] = calloc(sizes[t], sizeof(float));
		rg[t] = calloc(sizes[t], sizeof(float));
		rv[t] = calloc(sizes[t], sizeof(float));
		if (!p[t] || !g[t] || !v[t] || !rp[t] || !rg[t] || !rv[t]) {
			return 1;
		}
		/* Ranks start different on purpose: broadcast_params must make them equal. */
		for (i = 0; i < sizes[t]; i++) {
			p[t][i] = hashf(1000 + (uint64_t)rank, t, i);
			rp[t][i] = hashf(1000, t, i);
		}
		if (check(crun_ddp_register(ddp, p[t], g[t], sizes[t]), "register") != t) {
			return 1;
		}
	}
	check(crun_ddp_broadcast_params(ddp), "broadcast_params");
	/* Each rank marks gradients ready in its own order: buckets must still line up. */
	for (t = 0; t < NT; t++) {
		order[t] = (t + rank) % NT;
	}
	for (step = 0; step < steps; step++) {
		uint64_t base = (uint64_t)step * b * (uint64_t)world + (uint64_t)rank * b;

		if (step % 2 == 1) {
			/* Gradient accumulation: two micro-batches, only the second communicates. */
			crun_ddp_set_no_sync(ddp, true);
			grad(p, g, base, 1, (float)b);
			check(crun_ddp_sync(ddp), "sync (no_sync)");
			crun_ddp_set_no_sync(ddp, false);
			grad(p, g, base + 1, b - 1, (float)b);
		} else {
			grad(p, g, base, b, (float)b);
		}
		for (k = 0; k < NT; k++) {
			check(crun_ddp_grad_ready(ddp, order[k]), "grad_ready");
		}
		check(crun_ddp_sync(ddp), "sync");
		sgd(p, g, v);

		/* The reference: one process, the whole global batch. */
		grad(rp, rg, (uint64_t)step * b * (uint64_t)world, b * (size_t)world,
		     (float)(b * (size_t)world));
		sgd(rp, rg, rv);
	}
	for (t = 0; t < NT; t++) {
		for (i = 0; i < sizes[t]; i++) {
			e = fabs((double)p[t][i] - (double)rp[t][i]) / (1.0 + fabs((double)rp[t][i]));
			maxerr = e > maxerr ? e : maxerr;
		}
		h = fnv1a64(h, p[t], sizes[t] * sizeof(float));
	}
	printf("rank %d ddp-equiv buckets %d max_rel_err %.3g digest %016" PRIx64 "\n", rank,
	       crun_ddp_bucket_count(ddp), maxerr, h);
	crun_ddp_destroy(ddp);
	crun_comm_destroy(comm);
	crun_store_close(st);
	for (t = 0; t < NT; t++) {
		if (gflat == NULL) {
			free(g[t]);
		}
		free(v[t]);
		free(rp[t]);
		free(rg[t]);
		free(rv[t]);
	}
	free(pflat);
	free(gflat);
	if (maxerr > 1e-5) {
		fprintf(stderr, "rank %d: DDP parameters differ from the reference by %.3g\n", rank,
			maxerr);
		return 1;
	}
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A bucket completed by grad_ready is reduced before anyone calls sync: overlap. */
static int cmd_ddp_overlap(void)
{
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 60000};
	struct crun_ddp_opts dopt = {.bucket_cap_bytes = 4096, .first_bucket_bytes = 4096};
	static float p[2][1024], g[2][1024];
	int rank = crun_rank(), world = crun_world_size();
	float want = (float)(world + 1) / 2.0f;
	struct timespec ms = {0, 1000000};
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	int64_t deadline;
	char err[256];
	int i, t;

	if (crun_worker_store_open(&st, err, sizeof(err)) < 0) {
		fprintf(stderr, "worker_helper: %s\n", err);
		return 1;
	}
	check(crun_comm_create(st, rank, world, &co, &comm), "comm_create");
	check(crun_ddp_create(comm, &dopt, &ddp), "ddp_create");
	for (t = 0; t < 2; t++) {
		check(crun_ddp_register(ddp, p[t], g[t], 1024), "register");
	}
	for (int step = 0; step < 3; step++) {
		for (t = 0; t < 2; t++) {
			for (i = 0; i < 1024; i++) {
				g[t][i] = (float)(rank + 1);
			}
		}
		/* Tensor 1 was registered last: it is bucket 0, reduced first. */
		check(crun_ddp_grad_ready(ddp, 1), "grad_ready");
		deadline = now_ms() + 30000;
		while (crun_ddp_buckets_reduced(ddp) < 1) {
			if (now_ms() > deadline) {
				fprintf(stderr, "rank %d: bucket 0 not reduced before sync\n", rank);
				return 1;
			}
			nanosleep(&ms, NULL);
		}
		if (g[1][0] != want || g[1][1023] != want || g[0][0] != (float)(rank + 1)) {
			fprintf(stderr, "rank %d: early bucket holds %g, want %g\n", rank, g[1][0],
				want);
			return 1;
		}
		check(crun_ddp_grad_ready(ddp, 0), "grad_ready");
		check(crun_ddp_sync(ddp), "sync");
		if (g[0][0] != want || crun_ddp_buckets_reduced(ddp) != 0) {
			fprintf(stderr, "rank %d: after sync %g, want %g\n", rank, g[0][0], want);
			return 1;
		}
	}
	printf("rank %d overlap ok (%d buckets)\n", rank, crun_ddp_bucket_count(ddp));
	crun_ddp_destroy(ddp);
	crun_comm_destroy(comm);
	crun_store_close(st);
	return 0;
}

/*
 * Rank 1 leaves (@how "exit": the process ends; "hang": it stays but stops taking part) after
 * the parameters are broadcast; rank 0's next sync must fail within the comm timeout.
 */
static int cmd_ddp_peer_dies(const char *how)
{
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 3000};
	static float p[4096], g[4096];
	int rank = crun_rank(), world = crun_world_size(), rc;
	const char *done[] = {"test/done"};
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	int64_t t0, dt;
	char err[256];

	if (crun_worker_store_open(&st, err, sizeof(err)) < 0) {
		fprintf(stderr, "worker_helper: %s\n", err);
		return 1;
	}
	check(crun_comm_create(st, rank, world, &co, &comm), "comm_create");
	check(crun_ddp_create(comm, NULL, &ddp), "ddp_create");
	check(crun_ddp_register(ddp, p, g, 4096), "register");
	check(crun_ddp_broadcast_params(ddp), "broadcast_params");
	if (rank == 1) {
		if (strcmp(how, "exit") == 0) {
			printf("rank 1 exits\n");
			fflush(stdout);
			_exit(0);
		}
		printf("rank 1 hangs\n");
		fflush(stdout);
		rc = crun_store_wait(st, done, 1, 60000);
		crun_ddp_destroy(ddp);
		crun_comm_destroy(comm);
		crun_store_close(st);
		return rc < 0 ? 1 : 0;
	}
	if (rank == 0) {
		t0 = now_ms();
		rc = crun_ddp_sync(ddp);
		dt = now_ms() - t0;
		printf("rank 0 sync returned %d (%s) after %" PRId64 " ms\n", rc, crun_strerror(rc),
		       dt);
		check(crun_store_set(st, "test/done", "1", 1), "set");
		crun_ddp_destroy(ddp);
		crun_comm_destroy(comm);
		crun_store_close(st);
		return rc < 0 && dt < 20000 ? 0 : 1;
	}
	crun_ddp_destroy(ddp);
	crun_comm_destroy(comm);
	crun_store_close(st);
	return 0;
}

/*
 * Rank r registers tensors of 100 and 50 + r floats: the bucket plans differ, and the first
 * call that builds the buckets must say so on every rank (CRUN_ECONFIG, both plans named)
 * instead of pairing 50 floats with 51. Later calls return the same error at once.
 */
static int cmd_ddp_plan_mismatch(void)
{
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 10000};
	static float p[2][100], g[2][100];
	int rank = crun_rank(), world = crun_world_size(), rc;
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	char err[256];

	if (crun_worker_store_open(&st, err, sizeof(err)) < 0) {
		fprintf(stderr, "worker_helper: %s\n", err);
		return 1;
	}
	check(crun_comm_create(st, rank, world, &co, &comm), "comm_create");
	check(crun_ddp_create(comm, NULL, &ddp), "ddp_create");
	check(crun_ddp_register(ddp, p[0], g[0], 100), "register");
	check(crun_ddp_register(ddp, p[1], g[1], 50 + (size_t)rank), "register");
	rc = crun_ddp_broadcast_params(ddp);
	printf("rank %d broadcast_params: %d (%s): %s\n", rank, rc, crun_strerror(rc),
	       crun_ddp_last_error(ddp));
	if (rc != CRUN_ECONFIG || crun_ddp_grad_ready(ddp, 0) != CRUN_ECONFIG ||
	    crun_ddp_sync(ddp) != CRUN_ECONFIG || crun_ddp_broadcast_params(ddp) != CRUN_ECONFIG ||
	    crun_ddp_bucket_count(ddp) != 0) {
		fprintf(stderr, "rank %d: a bucket plan mismatch was not reported\n", rank);
		return 1;
	}
	printf("rank %d plan mismatch reported\n", rank);
	crun_ddp_destroy(ddp);
	/* The communicator is still in step: the plans were gathered, nothing else ran. */
	check(crun_comm_barrier(comm), "barrier");
	crun_comm_destroy(comm);
	crun_store_close(st);
	return 0;
}

/*
 * A communicator whose backend the environment picks (CRUN_BACKEND, else auto), an allreduce
 * and one step of a host DDP made with CRUN_DDP_OPTS_INIT. A failed creation prints the
 * library's reason (it also logs it) and exits 1.
 */
static int cmd_comm_auto(void)
{
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_AUTO, .timeout_ms = 60000,
				    .name = "auto"};
	struct crun_ddp_opts dopt = CRUN_DDP_OPTS_INIT;
	int rank = crun_rank(), world = crun_world_size(), rc, i;
	static float p[3000], g[3000];
	float sum = (float)(rank + 1);
	struct crun_store *st;
	struct crun_comm *comm;
	struct crun_ddp *ddp;
	char err[256];

	if (crun_worker_store_open(&st, err, sizeof(err)) < 0) {
		fprintf(stderr, "worker_helper: %s\n", err);
		return 1;
	}
	rc = crun_comm_create(st, rank, world, &co, &comm);
	if (rc < 0) {
		fprintf(stderr, "worker_helper: rank %d: comm_create: %s\n", rank,
			crun_strerror(rc));
		crun_store_close(st);
		return 1;
	}
	printf("rank %d backend %s\n", rank,
	       crun_comm_backend(comm) == CRUN_BACKEND_CPU ? "cpu" : "nccl");
	check(crun_comm_allreduce(comm, &sum, &sum, 1, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM), "allreduce");
	if (sum != (float)(world * (world + 1) / 2)) {
		fprintf(stderr, "rank %d: allreduce gave %g\n", rank, (double)sum);
		return 1;
	}
	dopt.bucket_cap_bytes = 4096;
	dopt.first_bucket_bytes = 1024;
	check(crun_ddp_create(comm, &dopt, &ddp), "ddp_create");
	check(crun_ddp_set_stream(ddp, NULL) == CRUN_EBACKEND ? 0 : -EPROTO, "set_stream");
	check(crun_ddp_register(ddp, p, g, 1000), "register");
	check(crun_ddp_register(ddp, p + 1000, g + 1000, 2000), "register");
	for (i = 0; i < 3000; i++) {
		p[i] = (float)(rank * 10 + i % 3);
		g[i] = (float)(rank + 1);
	}
	check(crun_ddp_broadcast_params(ddp), "broadcast_params");
	check(crun_ddp_grad_ready(ddp, 1), "grad_ready");
	check(crun_ddp_sync(ddp), "sync");
	for (i = 0; i < 3000; i++) {
		if (p[i] != (float)(i % 3) || g[i] != (float)(world + 1) / 2.0f) {
			fprintf(stderr, "rank %d: element %d: param %g grad %g\n", rank, i,
				(double)p[i], (double)g[i]);
			return 1;
		}
	}
	printf("rank %d comm-auto ok (%d buckets)\n", rank, crun_ddp_bucket_count(ddp));
	crun_ddp_destroy(ddp);
	crun_comm_destroy(comm);
	crun_store_close(st);
	return 0;
}

static int cmd_ckpt_write(const char *dir, char **steps, int n)
{
	struct crun_init_opts o = {.single = true};
	uint64_t v[16] = {0};
	struct crun_ckpt_seg segs[1] = {{v, sizeof(v)}};
	int i;

	check(crun_init(&o, NULL, 0), "init (single)");
	for (i = 0; i < n; i++) {
		v[0] = strtoull(steps[i], NULL, 10);
		check(crun_checkpoint_save(dir, v[0], v[0], segs, 1, 5000), "checkpoint_save");
	}
	crun_finish();
	return 0;
}

static int cmd_resume(const char *prefix)
{
	uint64_t v[16] = {0}, epoch = 0, step = 0;
	struct crun_ckpt_seg segs[1] = {{v, sizeof(v)}};
	char dir[4096], path[4200], err[4400];
	int rank = crun_rank(), rc;

	snprintf(dir, sizeof(dir), "%s/rank%d", prefix, rank);
	rc = crun_checkpoint_resume(dir, &epoch, &step, segs, 1, path, sizeof(path), err,
				    sizeof(err), 30000);
	if (rc == 0) {
		printf("rank %d resumed step %" PRIu64 " value %" PRIu64 " from %s\n", rank, step,
		       v[0], path);
		return 0;
	}
	if (rc == -ENOENT) {
		printf("rank %d starts fresh\n", rank);
		return 0;
	}
	printf("rank %d resume failed (%s): %s\n", rank, crun_strerror(rc), err);
	return 4;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

static int cmd_beat_long(double seconds)
{
	long i, n = (long)(seconds * 5);

	for (i = 0; i < n; i++) {
		check(crun_heartbeat(), "heartbeat");
		sleep_ms(200);
	}
	check(crun_barrier(30000), "barrier");
	printf("rank %d long step done\n", crun_rank());
	return 0;
}

static int cmd_hang_once(void)
{
	/* Rank 1 goes silent from its start; the others wait for it in the barrier after a
	 * heartbeat, so it is the one silent the longest. */
	if (crun_rank() == 1 && crun_restart_count() == 0) {
		printf("rank 1 hangs\n");
		fflush(stdout);
		for (;;) {
			pause();
		}
	}
	check(crun_heartbeat(), "heartbeat");
	check(crun_barrier(60000), "barrier");
	printf("rank %d restart %d passed\n", crun_rank(), crun_restart_count());
	return 0;
}

int main(int argc, char **argv)
{
	char err[256];
	int rc;

	if (argc >= 4 && strcmp(argv[1], "ckpt-write") == 0) {
		return cmd_ckpt_write(argv[2], argv + 3, argc - 3);
	}
	if (argc < 2) {
		fprintf(stderr, "usage: worker_helper env|barrier N|ddp-equiv STEPS|fail MSG\n");
		return 2;
	}
	rc = crun_init(NULL, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "worker_helper: %s\n", err);
		return 2;
	}
	if (strcmp(argv[1], "env") == 0) {
		rc = cmd_env();
	} else if (strcmp(argv[1], "barrier") == 0 && argc == 3) {
		rc = cmd_barrier(atoi(argv[2]));
	} else if (strcmp(argv[1], "ddp-equiv") == 0 && argc == 3) {
		rc = cmd_ddp_equiv(atoi(argv[2]));
	} else if (strcmp(argv[1], "ddp-overlap") == 0) {
		rc = cmd_ddp_overlap();
	} else if (strcmp(argv[1], "ddp-plan-mismatch") == 0) {
		rc = cmd_ddp_plan_mismatch();
	} else if (strcmp(argv[1], "ddp-peer-dies") == 0 && argc == 3) {
		rc = cmd_ddp_peer_dies(argv[2]);
	} else if (strcmp(argv[1], "comm-auto") == 0) {
		rc = cmd_comm_auto();
	} else if (strcmp(argv[1], "resume") == 0 && argc == 3) {
		rc = cmd_resume(argv[2]);
	} else if (strcmp(argv[1], "beat-long") == 0 && argc == 3) {
		rc = cmd_beat_long(atof(argv[2]));
	} else if (strcmp(argv[1], "hang-once") == 0) {
		rc = cmd_hang_once();
	} else if (strcmp(argv[1], "fail") == 0 && argc == 3) {
		/* Rank 0 fails; the others succeed, so the group is not torn down before rank 0
		 * has written its record. */
		rc = 0;
		if (crun_rank() == 0) {
			check(crun_error_record(argv[2]), "error_record");
			rc = 3;
		}
	} else {
		fprintf(stderr, "worker_helper: unknown command \"%s\"\n", argv[1]);
		rc = 2;
	}
	crun_finish();
	return rc;
}
