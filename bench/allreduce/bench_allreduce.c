/* SPDX-License-Identifier: MIT */
/* bench/allreduce/bench_allreduce.c: one rank of crun's cpu allreduce benchmark (see run). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <crun/crun.h>

/* usage: bench_allreduce ENDPOINT PREFIX RANK SIZE MIN_BYTES MAX_BYTES
 * Rank 0 prints "bytes iters seconds copy_warm copy_cold reduce_warm reduce_cold cpu" per size:
 * the allreduce's time per call (the best of 5 loops of the slowest rank's mean), then this core's
 * own limit at that size in GB/s, measured by rank 0 in the same run while the other ranks wait
 * at a barrier: memcpy of the size, and a two-input reduce (d[i] = a[i] + b[i], float32) of the
 * size, each warm (the buffers just touched: in cache where they fit) and cold (a 64 MiB
 * scratch buffer written between calls evicts them), then the CPU time per call of all ranks
 * together in seconds (CLOCK_PROCESS_CPUTIME_ID over the 5 loops; cpu / seconds is the cores the
 * collective kept busy: on a loaded machine a measure of the work done, not of the share won),
 * then the time per call all ranks spent runnable but waiting for a core (run_delay of
 * /proc/self/schedstat, the same loops): what other tenants' load cost this run, then the
 * copy and the reduce again, GB/s, with the input another core has just written (rank 1 writes
 * a shared buffer, rank 0 then reads it: what a rank of a same-host allreduce does with its
 * peers' data; 0 with one rank). */

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds this thread has waited on a run queue (schedstat's run_delay); 0 if unknown. */
static double run_delay(void)
{
	unsigned long long cpu_ns, wait_ns = 0;
	FILE *f = fopen("/proc/self/schedstat", "r");

	if (f != NULL) {
		if (fscanf(f, "%llu %llu", &cpu_ns, &wait_ns) != 2) {
			wait_ns = 0;
		}
		fclose(f);
	}
	return (double)wait_ns * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

#define REPEATS 5
#define MAX_RANKS 64
/* The same count on every rank: about 32 MiB of data per timed loop, 2 to 100 calls. */
static int iters_for(size_t bytes)
{
	size_t n = (32u << 20) / bytes;

	return n < 2 ? 2 : n > 100 ? 100 : (int)n;
}

#define EVICT_BYTES (64u << 20) /* larger than any last-level cache here (lscpu) */

struct limit_bufs {
	float *a, *b, *d;
	unsigned char *evict;
};

static void evict(const struct limit_bufs *lb)
{
	/* Writing the scratch buffer pushes a, b and d out of every cache level. */
	memset(lb->evict, 1, EVICT_BYTES);
	__asm__ volatile("" ::: "memory");
}

/* d = a + b in blocks of 8 (vectorized at -O2 like the library's kernels), built twice like
 * them: baseline and AVX2, the latter taken when this CPU has it. */
#define REDUCE2_BODY                                                                          \
	for (size_t k = 0; k + 8 <= n; k += 8) {                                              \
		for (size_t j = 0; j < 8; j++) {                                              \
			d[k + j] = a[k + j] + b[k + j];                                       \
		}                                                                             \
	}
static void reduce2_base(float *restrict d, const float *restrict a, const float *restrict b,
			 size_t n)
{
	REDUCE2_BODY
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) static void
reduce2_avx2(float *restrict d, const float *restrict a, const float *restrict b, size_t n)
{
	REDUCE2_BODY
}
#endif

static void reduce2(float *d, const float *a, const float *b, size_t n)
{
#if defined(__x86_64__) || defined(__i386__)
	if (__builtin_cpu_supports("avx2")) {
		reduce2_avx2(d, a, b, n);
		return;
	}
#endif
	reduce2_base(d, a, b, n);
}

/* Bytes per second of one copy (op 0) or one two-input reduce (op 1) of `bytes`: the best of a
 * few calls, each evicted first when `cold`. */
static double limit_op(const struct limit_bufs *lb, size_t bytes, int op, int cold)
{
	size_t count = bytes / sizeof(float);
	int iters = cold ? 5 : iters_for(bytes) + 2;
	double best = 1e30;

	for (int i = 0; i < iters; i++) {
		double t0, dt;

		if (cold) {
			evict(lb);
		}
		t0 = now();
		if (op == 0) {
			memcpy(lb->d, lb->a, bytes);
		} else {
			reduce2(lb->d, lb->a, lb->b, count);
		}
		__asm__ volatile("" ::: "memory");
		dt = now() - t0;
		best = dt < best ? dt : best;
	}
	return (double)bytes / best;
}

/* This core's limit at `bytes`, GB/s: copy warm, copy cold, reduce warm, reduce cold. */
static void measure_limit(const struct limit_bufs *lb, size_t bytes, double out[4])
{
	for (int op = 0; op < 2; op++) {
		for (int cold = 0; cold < 2; cold++) {
			out[op * 2 + cold] = limit_op(lb, bytes, op, cold) / 1e9;
		}
	}
}

static int limit_alloc(struct limit_bufs *lb, size_t maxb)
{
	lb->a = malloc(maxb);
	lb->b = malloc(maxb);
	lb->d = malloc(maxb);
	lb->evict = malloc(EVICT_BYTES);
	if (lb->a == NULL || lb->b == NULL || lb->d == NULL || lb->evict == NULL) {
		return -1;
	}
	for (size_t k = 0; k < maxb / sizeof(float); k++) {
		lb->a[k] = (float)k;
		lb->b[k] = 1.0f;
	}
	memset(lb->d, 0, maxb);
	return 0;
}

static void limit_free(struct limit_bufs *lb)
{
	free(lb->a);
	free(lb->b);
	free(lb->d);
	free(lb->evict);
}

/*
 * A buffer rank 1 writes and rank 0 then reads, shared by the ranks of this host (shm_open,
 * named after the run's store prefix; unlinked once every rank has it). x->p is NULL where it
 * could not be made: the cross-core columns then read 0. Every rank takes part in the barriers.
 */
struct xcore {
	float *p;
	size_t len;
};

static void xcore_open(struct crun_comm *c, const char *prefix, int rank, int size, size_t maxb,
		       struct xcore *x)
{
	char name[128] = "/crun-bench-xcore-";
	size_t k = strlen(name);
	int fd = -1;

	x->p = NULL;
	x->len = maxb;
	for (const char *q = prefix; *q != '\0' && k + 1 < sizeof(name); q++) {
		name[k++] = (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') ? *q : '_';
	}
	name[k] = '\0';
	if (size < 2) {
		return;
	}
	if (rank == 0) {
		fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
		if (fd >= 0 && ftruncate(fd, (off_t)maxb) < 0) {
			close(fd);
			fd = -1;
		}
	}
	(void)crun_comm_barrier(c); /* made */
	if (rank == 1) {
		fd = shm_open(name, O_RDWR, 0);
	}
	if (fd >= 0) {
		void *m = mmap(NULL, maxb, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		x->p = m == MAP_FAILED ? NULL : m;
		close(fd);
	}
	(void)crun_comm_barrier(c); /* opened */
	if (rank == 0) {
		shm_unlink(name);
	}
}

#define XCORE_TRIES 5

/*
 * GB/s of rank 0's copy (out[0]) and two-input reduce (out[1]) of @bytes whose input rank 1 has
 * just written (in rank 1's cache where it fits), the best of XCORE_TRIES; rank 0 only.
 */
static void xcore_measure(struct crun_comm *c, int rank, const struct xcore *x,
			  const struct limit_bufs *lb, size_t bytes, double out[2])
{
	size_t count = bytes / sizeof(float);

	for (int op = 0; op < 2; op++) {
		double best = 1e30;

		for (int i = 0; i < XCORE_TRIES; i++) {
			if (rank == 1 && x->p != NULL) {
				for (size_t k = 0; k < count; k++) {
					x->p[k] = (float)(k + (size_t)i);
				}
			}
			(void)crun_comm_barrier(c); /* written */
			if (rank == 0 && x->p != NULL && lb->a != NULL) {
				double t0 = now(), dt;

				if (op == 0) {
					memcpy(lb->d, x->p, bytes);
				} else {
					reduce2(lb->d, lb->a, x->p, count);
				}
				__asm__ volatile("" ::: "memory");
				dt = now() - t0;
				best = dt < best ? dt : best;
			}
			(void)crun_comm_barrier(c); /* read: the next write may start */
		}
		out[op] = best < 1e30 ? (double)bytes / best / 1e9 : 0.0;
	}
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
	struct limit_bufs lb = {0};
	struct xcore xc = {0};
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
	if (buf == NULL || (rank == 0 && limit_alloc(&lb, maxb) < 0)) {
		fprintf(stderr, "bench_allreduce: %zu bytes: out of memory\n", maxb);
		return 1;
	}
	memset(buf, 0, maxb);
	xcore_open(c, argv[2], rank, size, maxb, &xc);
	for (size_t b = minb; b <= maxb; b *= 4) {
		size_t count = b / sizeof(float);
		int iters = iters_for(b);
		double best = 1e30, lim[4] = {0}, per[2], every[2 * MAX_RANKS], sum[2] = {0};
		double xl[2] = {0, 0};

		rc = crun_comm_allreduce(c, buf, buf, count, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM); /* warm up */
		per[0] = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		per[1] = run_delay();
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
		/* This rank's CPU and run-queue wait per call (the barriers and gathers between loops
		 * are noise), summed over the ranks. */
		per[0] = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - per[0]) / (REPEATS * iters);
		per[1] = (run_delay() - per[1]) / (REPEATS * iters);
		if (rc == 0) {
			rc = crun_comm_allgather(c, per, every, 2, CRUN_DTYPE_FLOAT64);
		}
		for (int r = 0; rc == 0 && r < size; r++) {
			sum[0] += every[2 * r];
			sum[1] += every[2 * r + 1];
		}
		if (rc < 0) {
			fprintf(stderr, "bench_allreduce: %zu bytes: %s (%s)\n", b,
				crun_strerror(rc), crun_comm_last_error(c));
			break;
		}
		/* The limit of this size, on rank 0 while the others wait at the barrier. */
		if (rank == 0) {
			measure_limit(&lb, b, lim);
		}
		rc = crun_comm_barrier(c);
		if (rc == 0 && size > 1) {
			xcore_measure(c, rank, &xc, &lb, b, xl);
		}
		if (rank == 0 && rc == 0) {
			printf("%zu %d %.9f %.3f %.3f %.3f %.3f %.9f %.9f %.3f %.3f\n", b, iters, best,
			       lim[0], lim[1], lim[2], lim[3], sum[0], sum[1], xl[0], xl[1]);
			fflush(stdout);
		}
	}
	if (xc.p != NULL) {
		munmap(xc.p, xc.len);
	}
	free(buf);
	limit_free(&lb);
	crun_comm_destroy(c);
	return rc < 0 ? 1 : 0;
}
