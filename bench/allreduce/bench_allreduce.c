/* SPDX-License-Identifier: MIT */
/* bench/allreduce/bench_allreduce.c: one rank of crun's cpu allreduce benchmark (see run). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <crun/crun.h>

/* usage: bench_allreduce ENDPOINT PREFIX RANK SIZE MIN_BYTES MAX_BYTES
 * Rank 0 prints "bytes iters seconds" per size: the best of 5 loops of the slowest rank's mean. */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define REPEATS 5
#define MAX_RANKS 64

/* The same count on every rank: about 32 MiB of data per timed loop, 2 to 100 calls. */
static int iters_for(size_t bytes)
{
	size_t n = (32u << 20) / bytes;

	return n < 2 ? 2 : n > 100 ? 100 : (int)n;
}

int main(int argc, char **argv)
{
	struct crun_store_opts so = CRUN_STORE_OPTS_INIT;
	struct crun_comm_opts co = {
		.backend = CRUN_BACKEND_CPU, .timeout_ms = 300000, .name = "bench"};
	struct crun_store *st;
	struct crun_comm *c;
	size_t minb, maxb;
	char err[256];
	float *buf;
	int rank, size, rc;

	if (argc != 7) {
		fprintf(stderr, "usage: %s ENDPOINT PREFIX RANK SIZE MIN_BYTES MAX_BYTES\n",
			argv[0]);
		return 2;
	}
	so.endpoint = argv[1];
	so.prefix = argv[2];
	so.token_file = getenv("CRUN_STORE_TOKEN_FILE"); /* the daemon's (bench/allreduce/run) */
	rank = atoi(argv[3]);
	size = atoi(argv[4]);
	minb = strtoull(argv[5], NULL, 10);
	maxb = strtoull(argv[6], NULL, 10);
	if (minb < 4 || maxb < minb || size < 1 || size > MAX_RANKS || rank < 0 || rank >= size) {
		fprintf(stderr,
			"bench_allreduce: expected 4 <= MIN_BYTES <= MAX_BYTES and "
			"0 <= RANK < SIZE <= %d\n",
			MAX_RANKS);
		return 2;
	}
	rc = crun_store_open(&so, &st, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "bench_allreduce: %s\n", err);
		return 1;
	}
	rc = crun_comm_create(st, rank, size, &co, &c);
	crun_store_close(st);
	if (rc < 0) {
		fprintf(stderr, "bench_allreduce: create: %s\n", crun_strerror(rc));
		return 1;
	}
	buf = malloc(maxb);
	if (buf == NULL) {
		fprintf(stderr, "bench_allreduce: %zu bytes: out of memory\n", maxb);
		return 1;
	}
	memset(buf, 0, maxb);
	for (size_t b = minb; b <= maxb; b *= 4) {
		size_t count = b / sizeof(float);
		int iters = iters_for(b);
		double best = 1e30;

		rc = crun_comm_allreduce(c, buf, buf, count, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM); /* warm up */
		/* The machine is shared: the best of REPEATS timed loops, each loop timed by its
		 * slowest rank. */
		for (int k = 0; k < REPEATS && rc == 0; k++) {
			double t0, dt, all[MAX_RANKS];

			rc = crun_comm_barrier(c);
			t0 = now();
			for (int i = 0; i < iters && rc == 0; i++) {
				rc = crun_comm_allreduce(c, buf, buf, count, CRUN_DTYPE_FLOAT32,
							 CRUN_REDOP_SUM);
			}
			dt = (now() - t0) / iters;
			if (rc == 0) {
				rc = crun_comm_allgather(c, &dt, all, 1, CRUN_DTYPE_FLOAT64);
			}
			for (int r = 0; rc == 0 && r < size; r++) {
				dt = all[r] > dt ? all[r] : dt;
			}
			best = dt < best ? dt : best;
		}
		if (rc < 0) {
			fprintf(stderr, "bench_allreduce: %zu bytes: %s (%s)\n", b,
				crun_strerror(rc), crun_comm_last_error(c));
			break;
		}
		if (rank == 0) {
			printf("%zu %d %.9f\n", b, iters, best);
			fflush(stdout);
		}
	}
	free(buf);
	crun_comm_destroy(c);
	return rc < 0 ? 1 : 0;
}
