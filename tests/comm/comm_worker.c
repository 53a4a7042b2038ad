/* SPDX-License-Identifier: MIT */
/* tests/comm/comm_worker.c: one rank of a collectives test, started N times by test_comm. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/crun.h>

#include "config.h"
#include "src/common/util.h"
#include "src/common/clock.h"
#include "src/common/net.h"

#if CRUN_HAVE_NCCL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop
#endif

/*
 * usage: comm_worker ENDPOINT PREFIX RANK SIZE SCENARIO [TIMEOUT_MS]
 * Exit status: 0 pass, 1 fail, 3 "saw the expected error", 77 skip.
 */
#define EXIT_SAW_ERROR 3
#define EXIT_SKIP 77
/* How much earlier than its deadline a timeout may be reported (millisecond truncation). */
#define TIMEOUT_EARLY_MS 100

static int g_rank, g_size;

#define FAILF(...)                                                                                 \
	do {                                                                                       \
		fprintf(stderr, "comm_worker rank %d/%d: ", g_rank, g_size);                       \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)

/* Small integers: every sum is exact in float32, so results are compared bit for bit. */
static double val(int r, size_t i)
{
	return (double)((int)(((size_t)r * 7u + i * 13u) % 17u) - 8);
}

static size_t esz(enum crun_dtype dt)
{
	return dt == CRUN_DTYPE_FLOAT64 ? 8 : 4;
}

static void put(void *b, enum crun_dtype dt, size_t i, double v)
{
	if (dt == CRUN_DTYPE_FLOAT64) {
		((double *)b)[i] = v;
	} else {
		((float *)b)[i] = (float)v;
	}
}

static double get(const void *b, enum crun_dtype dt, size_t i)
{
	return dt == CRUN_DTYPE_FLOAT64 ? ((const double *)b)[i] : (double)((const float *)b)[i];
}

/* The reduced value of element i as the dtype holds it. */
static double want_reduced(enum crun_dtype dt, enum crun_redop op, size_t i)
{
	double s = 0;

	for (int r = 0; r < g_size; r++) {
		s += val(r, i);
	}
	if (op == CRUN_REDOP_AVG) {
		if (dt == CRUN_DTYPE_FLOAT32) {
			return (double)((float)s / (float)g_size);
		}
		return s / g_size;
	}
	return s;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);

	if (p == NULL) {
		FAILF("out of memory (%zu bytes)", n);
	}
	return p;
}

static const char *dtn(enum crun_dtype dt)
{
	return dt == CRUN_DTYPE_FLOAT64 ? "f64" : "f32";
}

static void check_rc(struct crun_comm *c, int rc, const char *what)
{
	if (rc != 0) {
		FAILF("%s: %s (%s)", what, crun_strerror(rc), crun_comm_last_error(c));
	}
}

static void t_allreduce(struct crun_comm *c, size_t count, enum crun_dtype dt, enum crun_redop op,
			bool inplace)
{
	size_t es = esz(dt);
	void *send = xmalloc(count * es), *recv = inplace ? send : xmalloc(count * es);
	char what[128];

	for (size_t i = 0; i < count; i++) {
		put(send, dt, i, val(g_rank, i));
		if (!inplace) {
			put(recv, dt, i, -12345);
		}
	}
	snprintf(what, sizeof(what), "allreduce count %zu %s %s %s", count, dtn(dt),
		 op == CRUN_REDOP_AVG ? "avg" : "sum", inplace ? "in place" : "out of place");
	check_rc(c, crun_comm_allreduce(c, send, recv, count, dt, op), what);
	for (size_t i = 0; i < count; i++) {
		double w = want_reduced(dt, op, i), g = get(recv, dt, i);

		if (g != w) {
			FAILF("%s: element %zu: got %g, want %g", what, i, g, w);
		}
		if (!inplace && get(send, dt, i) != val(g_rank, i)) {
			FAILF("%s: send buffer modified at %zu", what, i);
		}
	}
	if (!inplace) {
		free(recv);
	}
	free(send);
}

static void t_broadcast(struct crun_comm *c, size_t count, enum crun_dtype dt, int root)
{
	void *buf = xmalloc(count * esz(dt));
	char what[128];

	for (size_t i = 0; i < count; i++) {
		put(buf, dt, i, g_rank == root ? val(root, i) : -999);
	}
	snprintf(what, sizeof(what), "broadcast count %zu %s root %d", count, dtn(dt), root);
	check_rc(c, crun_comm_broadcast(c, buf, count, dt, root), what);
	for (size_t i = 0; i < count; i++) {
		if (get(buf, dt, i) != val(root, i)) {
			FAILF("%s: element %zu: got %g, want %g", what, i, get(buf, dt, i),
			      val(root, i));
		}
	}
	free(buf);
}

static void t_allgather(struct crun_comm *c, size_t count, enum crun_dtype dt, bool inplace)
{
	size_t es = esz(dt), n = (size_t)g_size;
	char *recv = xmalloc(n * count * es), *send;
	char what[128];

	for (size_t i = 0; i < n * count; i++) {
		put(recv, dt, i, -7777);
	}
	send = inplace ? recv + (size_t)g_rank * count * es : xmalloc(count * es);
	for (size_t i = 0; i < count; i++) {
		put(send, dt, i, val(g_rank, i));
	}
	snprintf(what, sizeof(what), "allgather count %zu %s %s", count, dtn(dt),
		 inplace ? "in place" : "out of place");
	check_rc(c, crun_comm_allgather(c, send, recv, count, dt), what);
	for (size_t q = 0; q < n; q++) {
		for (size_t i = 0; i < count; i++) {
			if (get(recv, dt, q * count + i) != val((int)q, i)) {
				FAILF("%s: block %zu element %zu: got %g, want %g", what, q, i,
				      get(recv, dt, q * count + i), val((int)q, i));
			}
		}
	}
	if (!inplace) {
		free(send);
	}
	free(recv);
}

static void t_reduce_scatter(struct crun_comm *c, size_t rc_, enum crun_dtype dt,
			     enum crun_redop op, bool inplace)
{
	size_t es = esz(dt), n = (size_t)g_size, base = (size_t)g_rank * rc_;
	char *send = xmalloc(n * rc_ * es), *recv;
	char what[128];

	for (size_t i = 0; i < n * rc_; i++) {
		put(send, dt, i, val(g_rank, i));
	}
	recv = inplace ? send + base * es : xmalloc(rc_ * es);
	snprintf(what, sizeof(what), "reduce_scatter recvcount %zu %s %s %s", rc_, dtn(dt),
		 op == CRUN_REDOP_AVG ? "avg" : "sum", inplace ? "in place" : "out of place");
	check_rc(c, crun_comm_reduce_scatter(c, send, recv, rc_, dt, op), what);
	for (size_t i = 0; i < rc_; i++) {
		double w = want_reduced(dt, op, base + i), g = get(recv, dt, i);

		if (g != w) {
			FAILF("%s: element %zu: got %g, want %g", what, i, g, w);
		}
	}
	if (!inplace) {
		free(recv);
	}
	free(send);
}

static void scenario_all(struct crun_comm *c)
{
	size_t n = (size_t)g_size;
	size_t counts[] = {1, 2, 3, n > 1 ? n - 1 : 1, n, n + 1, 7, 1000, 4097, 65537};
	enum crun_dtype dts[] = {CRUN_DTYPE_FLOAT32, CRUN_DTYPE_FLOAT64};
	enum crun_redop ops[] = {CRUN_REDOP_SUM, CRUN_REDOP_AVG};

	for (size_t k = 0; k < ARRAY_SIZE(counts); k++) {
		for (int d = 0; d < 2; d++) {
			for (int o = 0; o < 2; o++) {
				t_allreduce(c, counts[k], dts[d], ops[o], (k + (size_t)o) % 2 == 0);
				t_allreduce(c, counts[k], dts[d], ops[o], (k + (size_t)o) % 2 == 1);
			}
		}
	}
	/* A size whose segments are larger than the reduction stage and the socket buffers. */
	t_allreduce(c, (1u << 20) + 3, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM, true);
	t_allreduce(c, (1u << 19) + 5, CRUN_DTYPE_FLOAT64, CRUN_REDOP_AVG, false);
	for (int root = 0; root < g_size; root++) {
		t_broadcast(c, 1, CRUN_DTYPE_FLOAT32, root);
		t_broadcast(c, 4097, root % 2 ? CRUN_DTYPE_FLOAT64 : CRUN_DTYPE_FLOAT32, root);
	}
	t_broadcast(c, (1u << 20) + 1, CRUN_DTYPE_FLOAT32, g_size - 1);
	for (size_t k = 0; k < 4; k++) {
		size_t cnt = k == 0 ? 1 : k == 1 ? 3 : k == 2 ? 1001 : 65536 + 5;

		t_allgather(c, cnt, dts[k % 2], k % 2 == 0);
		t_allgather(c, cnt, dts[(k + 1) % 2], k % 2 == 1);
		t_reduce_scatter(c, cnt, dts[k % 2], ops[k % 2], k % 2 == 0);
		t_reduce_scatter(c, cnt, dts[(k + 1) % 2], ops[(k + 1) % 2], k % 2 == 1);
	}
	for (int i = 0; i < 5; i++) {
		check_rc(c, crun_comm_barrier(c), "barrier");
	}
}

static void scenario_big(struct crun_comm *c)
{
	size_t count = (64u << 20) / sizeof(float); /* 64 MiB of float32 */

	t_allreduce(c, count, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM, true);
	t_broadcast(c, count, CRUN_DTYPE_FLOAT32, 0);
}

/* Loop allreduces until the launcher kills a peer: the error must come, not a hang. */
static int scenario_die(struct crun_comm *c, int timeout_ms)
{
	size_t count = 1u << 18;
	float *buf = xmalloc(count * sizeof(float));
	int64_t start = crun_now_ms(), t0;
	int rc = 0, rc2;

	memset(buf, 0, count * sizeof(float));
	for (int i = 0; crun_now_ms() - start < 60000; i++) {
		t0 = crun_now_ms();
		rc = crun_comm_allreduce(c, buf, buf, count, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
		if (rc < 0) {
			break;
		}
		if (i == 0) {
			printf("ready\n");
			fflush(stdout);
		}
	}
	free(buf);
	if (rc == 0) {
		FAILF("no error within 60 s of looping");
	}
	if (rc != -ECONNRESET && rc != -ETIMEDOUT) {
		FAILF("expected -ECONNRESET or -ETIMEDOUT, got %s (%s)", crun_strerror(rc),
		      crun_comm_last_error(c));
	}
	if (crun_now_ms() - t0 > timeout_ms + 3000) {
		FAILF("error after %lld ms, timeout was %d ms", (long long)(crun_now_ms() - t0),
		      timeout_ms);
	}
	/* The collective's deadline is its start plus the timeout: never a timeout before. */
	if (rc == -ETIMEDOUT && crun_now_ms() - t0 < timeout_ms - TIMEOUT_EARLY_MS) {
		FAILF("timed out after %lld ms, timeout was %d ms", (long long)(crun_now_ms() - t0),
		      timeout_ms);
	}
	/* Poisoned: the next call fails at once with the same error. */
	t0 = crun_now_ms();
	rc2 = crun_comm_barrier(c);
	if (rc2 != rc || crun_now_ms() - t0 > 1000) {
		FAILF("after the error a barrier returned %s in %lld ms", crun_strerror(rc2),
		      (long long)(crun_now_ms() - t0));
	}
	fprintf(stderr, "comm_worker rank %d: saw %s: %s\n", g_rank, crun_strerror(rc),
		crun_comm_last_error(c));
	/* For test_comm: a killed peer must give resets, a stopped one at least one timeout. */
	printf("saw %s\n", rc == -ETIMEDOUT ? "ETIMEDOUT" : "ECONNRESET");
	fflush(stdout);
	return EXIT_SAW_ERROR;
}

/* Ranks disagree about the collective: an error (-EPROTO here, a reset where it spreads). */
static int scenario_mismatch(struct crun_comm *c)
{
	float buf[16] = {0};
	int rc;

	rc = crun_comm_allreduce(c, buf, buf, g_rank == 0 ? 10 : 11, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	if (rc == 0) {
		FAILF("mismatched allreduce succeeded");
	}
	if (rc != -EPROTO && rc != -ECONNRESET) {
		FAILF("mismatched allreduce: got %s (%s)", crun_strerror(rc),
		      crun_comm_last_error(c));
	}
	fprintf(stderr, "comm_worker rank %d: saw %s: %s\n", g_rank, crun_strerror(rc),
		crun_comm_last_error(c));
	return EXIT_SAW_ERROR;
}

/*
 * Before joining, rank 1 sends rank 0 an empty connection, a garbage one and an impostor
 * hello, then sets "stray-sent": rank 2 (rank 0's predecessor) connects only after that, so
 * rank 0 finds all three in its accept queue ahead of the real one and must reject each.
 */
static void send_strays(struct crun_store *st)
{
	const char *keys[1] = {"stray/0/addr/0"};
	char host[64];
	uint8_t junk[64];
	size_t len;
	void *v;
	int port, rc;

	rc = crun_store_wait(st, keys, 1, 30000);
	if (rc == 0) {
		rc = crun_store_get(st, keys[0], &v, &len);
	}
	if (rc < 0) {
		FAILF("stray: rank 0's address: %s", crun_strerror(rc));
	}
	if (net_parse_hostport(v, -1, host, sizeof(host), &port) < 0) {
		FAILF("stray: bad address %s", (char *)v);
	}
	free(v);
	for (int k = 0; k < 3; k++) {
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		inet_pton(AF_INET, host, &sa.sin_addr);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			FAILF("stray: connect: %s", strerror(errno));
		}
		memset(junk, 0, sizeof(junk));
		if (k == 1) {
			memcpy(junk, "garbage!garbage!garbage!garbage!", 32);
		} else if (k == 2) {
			/* Right magic and version (2), but a generation nobody is in. */
			memcpy(junk, "CRCM\x02\x00\x01\x00", 8);
			junk[8] = (uint8_t)(g_size - 1);
			junk[12] = (uint8_t)g_size;
			junk[16] = 99;
			junk[24] = 5;
			memcpy(junk + 32, "stray", 5);
		}
		if (k > 0 && write(fd, junk, k == 2 ? 37 : 32) < 0) {
			FAILF("stray: write: %s", strerror(errno));
		}
		close(fd);
	}
	rc = crun_store_set(st, "stray-sent", "1", 1);
	if (rc < 0) {
		FAILF("stray: set stray-sent: %s", crun_strerror(rc));
	}
}

/* Rank 2 of the stray scenario: connect to rank 0 only once the strays are queued there. */
static void wait_strays(struct crun_store *st)
{
	const char *keys[1] = {"stray-sent"};
	int rc = crun_store_wait(st, keys, 1, 30000);

	if (rc < 0) {
		FAILF("stray: waiting for rank 1's strays: %s", crun_strerror(rc));
	}
}

/* Rank 0 of the stray scenario, every rank of links: stderr (the library's log) to a memfd
 * during create. */
static int capture_stderr(int *saved)
{
	int fd = memfd_create("comm-worker-log", MFD_CLOEXEC);

	fflush(stderr);
	*saved = dup(STDERR_FILENO);
	if (fd < 0 || *saved < 0 || dup2(fd, STDERR_FILENO) < 0) {
		FAILF("capturing stderr: %s", strerror(errno));
	}
	return fd;
}

/* Put stderr back and return what was captured (echoed) in @log. */
static void captured_log(int fd, int saved, char *log, size_t len)
{
	ssize_t n;

	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fd, log, len - 1, 0);
	close(fd);
	log[n > 0 ? n : 0] = '\0';
	fputs(log, stderr);
}

/* The links scenario: create logged (debug) the kind of link $COMM_WANT_LINKS names. */
static void check_links(int fd, int saved)
{
	const char *want = getenv("COMM_WANT_LINKS");
	char log[8192], tag[64];
	const char *q;
	size_t wl;

	captured_log(fd, saved, log, sizeof(log));
	if (want == NULL) {
		FAILF("links: COMM_WANT_LINKS is not set");
	}
	snprintf(tag, sizeof(tag), "and from rank %d: ", (g_rank + g_size - 1) % g_size);
	q = strstr(log, tag);
	if (q == NULL) {
		FAILF("links: create logged no \"%s\" line", tag);
	}
	q += strlen(tag);
	wl = strlen(want);
	if (strncmp(q, want, wl) != 0 || (q[wl] != '\n' && q[wl] != '\0')) {
		FAILF("links: create chose \"%.*s\", want \"%s\"", (int)strcspn(q, "\n"), q,
		      want);
	}
}

/* Put stderr back, echo what was captured, and check each stray was rejected for its reason. */
static void check_strays_rejected(int fd, int saved)
{
	static const char *const why[] = {"Connection reset by peer", "bad magic",
					  "different generation"};
	char log[8192];
	int count = 0;

	captured_log(fd, saved, log, sizeof(log));
	for (const char *q = log; (q = strstr(q, "rejected connection from")) != NULL; q++) {
		count++;
	}
	if (count != 3) {
		FAILF("stray: rank 0 rejected %d connections, want 3", count);
	}
	for (size_t i = 0; i < ARRAY_SIZE(why); i++) {
		if (strstr(log, why[i]) == NULL) {
			FAILF("stray: no connection rejected for \"%s\"", why[i]);
		}
	}
}

/* Argument checks (size 1: errors here must not leave peers waiting). */
static int scenario_args(struct crun_store *st, struct crun_comm *c)
{
	struct crun_comm_opts o = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 5000};
	struct crun_comm *bad = NULL;
	float f[4] = {0};

#define EXPECT(expr, code)                                                                         \
	do {                                                                                       \
		int r_ = (expr);                                                                   \
		if (r_ != (code)) {                                                                \
			FAILF("%s: got %d (%s), want %s", #expr, r_, crun_strerror(r_),            \
			      crun_strerror(code));                                                \
		}                                                                                  \
	} while (0)

	EXPECT(crun_comm_create(st, 1, 1, &o, &bad), -EINVAL);
	EXPECT(crun_comm_create(st, -1, 2, &o, &bad), -EINVAL);
	EXPECT(crun_comm_create(NULL, 0, 1, &o, &bad), -EINVAL);
	EXPECT(crun_comm_create(st, 0, 1, &o, NULL), -EINVAL);
	o.name = "";
	EXPECT(crun_comm_create(st, 0, 1, &o, &bad), -EINVAL);
	o.name = NULL;
	o.backend = (enum crun_backend)42;
	EXPECT(crun_comm_create(st, 0, 1, &o, &bad), -EINVAL);
	o.backend = CRUN_BACKEND_AUTO;
	setenv("CRUN_BACKEND", "gpu-please", 1);
	EXPECT(crun_comm_create(st, 0, 1, &o, &bad), CRUN_ECONFIG);
	setenv("CRUN_BACKEND", "cpu", 1);
	EXPECT(crun_comm_create(st, 0, 1, &o, &bad), 0);
	EXPECT(crun_comm_backend(bad), CRUN_BACKEND_CPU);
	crun_comm_destroy(bad);
	unsetenv("CRUN_BACKEND");
	/* AUTO without the variable: nccl only where a GPU is visible, else cpu. */
	EXPECT(crun_comm_create(st, 0, 1, &o, &bad), 0);
	if (crun_comm_backend(bad) != CRUN_BACKEND_CPU &&
	    crun_comm_backend(bad) != CRUN_BACKEND_NCCL) {
		FAILF("AUTO chose backend %d", (int)crun_comm_backend(bad));
	}
	crun_comm_destroy(bad);
#if !CRUN_HAVE_NCCL
	o.backend = CRUN_BACKEND_NCCL;
	EXPECT(crun_comm_create(st, 0, 1, &o, &bad), CRUN_EBACKEND);
#endif
	EXPECT(crun_comm_allreduce(NULL, f, f, 4, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM), -EINVAL);
	EXPECT(crun_comm_allreduce(c, f, f, 4, (enum crun_dtype)7, CRUN_REDOP_SUM), -EINVAL);
	EXPECT(crun_comm_allreduce(c, f, f, 4, CRUN_DTYPE_FLOAT32, (enum crun_redop)9), -EINVAL);
	EXPECT(crun_comm_allreduce(c, NULL, f, 4, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM), -EINVAL);
	EXPECT(crun_comm_allreduce(c, f, f + 1, 3, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM), -EINVAL);
	if (strstr(crun_comm_last_error(c), "overlap") == NULL) {
		FAILF("last error \"%s\" does not say overlap", crun_comm_last_error(c));
	}
	EXPECT(crun_comm_allreduce(c, f, f, SIZE_MAX / 2, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM), -EOVERFLOW);
	EXPECT(crun_comm_broadcast(c, f, 4, CRUN_DTYPE_FLOAT32, g_size), -EINVAL);
	EXPECT(crun_comm_broadcast(c, f, 4, CRUN_DTYPE_FLOAT32, -1), -EINVAL);
	EXPECT(crun_comm_broadcast(c, NULL, 4, CRUN_DTYPE_FLOAT32, 0), -EINVAL);
	EXPECT(crun_comm_allgather(c, f, NULL, 1, CRUN_DTYPE_FLOAT32), -EINVAL);
	EXPECT(crun_comm_allgather(c, f + 1, f, 3, CRUN_DTYPE_FLOAT32), -EINVAL);
	if (strstr(crun_comm_last_error(c), "overlap") == NULL) {
		FAILF("last error \"%s\" does not say overlap", crun_comm_last_error(c));
	}
	EXPECT(crun_comm_reduce_scatter(c, f, f + 1, 2, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM), -EINVAL);
	EXPECT(crun_comm_set_stream(c, NULL), CRUN_EBACKEND);
	/* Zero elements: nothing to do, on every rank. */
	EXPECT(crun_comm_allreduce(c, NULL, NULL, 0, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM), 0);
	/* The argument errors above did not poison the communicator. */
	EXPECT(crun_comm_barrier(c), 0);
	EXPECT(crun_comm_rank(c), g_rank);
	EXPECT(crun_comm_size(c), g_size);
	crun_comm_destroy(NULL);
	return 0;
#undef EXPECT
}

#if CRUN_HAVE_NCCL
/*
 * One rank per GPU: this worker's crun environment (all ranks on this host), so that
 * crun_cuda_device() (the one rule the nccl backend checks) picks its device. Set before
 * anything reads the environment.
 */
static void nccl_env(void)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", g_rank);
	setenv("RANK", v, 1);
	setenv("LOCAL_RANK", v, 1);
	snprintf(v, sizeof(v), "%d", g_size);
	setenv("WORLD_SIZE", v, 1);
	setenv("LOCAL_WORLD_SIZE", v, 1);
}

static void nccl_device(void)
{
	char err[512];
	int dev = crun_cuda_device(err, sizeof(err));

	if (dev < 0) {
		FAILF("crun_cuda_device: %s", err);
	}
	if (cudaSetDevice(dev) != cudaSuccess) {
		FAILF("cudaSetDevice(%d) failed", dev);
	}
}

static int scenario_nccl(struct crun_comm *c)
{
	size_t count = 1000003;
	float *h = xmalloc(count * sizeof(float)), *d = NULL;
	int ndev = 0, dev = -1, other;

	for (size_t i = 0; i < count; i++) {
		h[i] = (float)val(g_rank, i);
	}
	if (cudaMalloc((void **)&d, count * sizeof(float)) != cudaSuccess ||
	    cudaMemcpy(d, h, count * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess) {
		FAILF("cuda setup failed");
	}
	check_rc(c, crun_comm_allreduce(c, d, d, count, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM),
		 "nccl allreduce");
	cudaMemcpy(h, d, count * sizeof(float), cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < count; i++) {
		if (h[i] != (float)want_reduced(CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM, i)) {
			FAILF("nccl allreduce: element %zu: got %g", i, (double)h[i]);
		}
	}
	/* Host memory is refused before NCCL sees it, without poisoning the communicator. */
	if (crun_comm_allreduce(c, h, h, count, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM) != -EFAULT ||
	    strstr(crun_comm_last_error(c), "host memory") == NULL) {
		FAILF("nccl allreduce of host memory: %s", crun_comm_last_error(c));
	}
	/* The caller's current device is restored after a collective. */
	cudaGetDeviceCount(&ndev);
	cudaGetDevice(&dev);
	other = ndev > 1 ? (dev + 1) % ndev : dev;
	cudaSetDevice(other);
	check_rc(c, crun_comm_broadcast(c, d, count, CRUN_DTYPE_FLOAT32, 0), "nccl broadcast");
	cudaGetDevice(&ndev);
	if (ndev != other) {
		FAILF("after a collective the current device is %d, the caller had %d", ndev,
		      other);
	}
	cudaSetDevice(dev);
	check_rc(c, crun_comm_barrier(c), "nccl barrier");
	cudaFree(d);
	free(h);
	return 0;
}
#endif

/*
 * Wait (up to 45 s) until every rank of the world has started and reached this point. The
 * die scenario uses a 2 s collective timeout, which also bounds crun_comm_create(); without
 * this, the time it takes the test to fork and start four processes on a loaded machine
 * counted against that bound, and a late rank made the others fail in create.
 */
static void start_barrier(struct crun_store *st)
{
	char key[32], keys[64][32];
	const char *kp[64];
	int rc;

	if (g_size > 64) {
		FAILF("start barrier: at most 64 ranks");
	}
	snprintf(key, sizeof(key), "up/%d", g_rank);
	rc = crun_store_set(st, key, "1", 1);
	for (int r = 0; r < g_size; r++) {
		snprintf(keys[r], sizeof(keys[r]), "up/%d", r);
		kp[r] = keys[r];
	}
	if (rc == 0) {
		rc = crun_store_wait(st, kp, (size_t)g_size, 45000);
	}
	if (rc < 0) {
		FAILF("start barrier: %s", crun_strerror(rc));
	}
}

int main(int argc, char **argv)
{
	struct crun_store_opts so = {0};
	struct crun_comm_opts co = {.backend = CRUN_BACKEND_CPU};
	struct crun_store *st = NULL;
	struct crun_comm *c = NULL;
	const char *scen;
	char err[256];
	int rc, timeout_ms, status = 0, log_fd = -1, saved_stderr = -1;
	int64_t t0;

	if (argc < 6) {
		fprintf(stderr, "usage: %s ENDPOINT PREFIX RANK SIZE SCENARIO [TIMEOUT_MS]\n",
			argv[0]);
		return 2;
	}
	g_rank = atoi(argv[3]);
	g_size = atoi(argv[4]);
	scen = argv[5];
	if (strcmp(scen, "stray") == 0 && g_rank == 0) {
		const char *lvl = getenv("CRUN_LOG_LEVEL");

		/* The rejections are warnings: a level that hides them would fail the check.
		 * Set before anything logs (the level is read once). */
		if (lvl != NULL && strcasecmp(lvl, "error") == 0) {
			setenv("CRUN_LOG_LEVEL", "warn", 1);
		}
	}
	if (strcmp(scen, "links") == 0) {
		setenv("CRUN_LOG_LEVEL", "debug", 1); /* the link kind is a debug line */
	}
	timeout_ms = argc > 6 ? atoi(argv[6]) : 60000;
	so.endpoint = argv[1];
	so.prefix = argv[2];
	so.connect_timeout_ms = 30000;
	so.timeout_ms = 60000;
	rc = crun_store_open(&so, &st, err, sizeof(err));
	if (rc < 0) {
		FAILF("store %s: %s", argv[1], err);
	}
	co.timeout_ms = timeout_ms;
	co.name = strcmp(scen, "stray") == 0 ? "stray" : NULL;
	if (strcmp(scen, "nccl") == 0) {
		co.backend = CRUN_BACKEND_NCCL;
#if CRUN_HAVE_NCCL
		nccl_env();
		nccl_device();
#endif
	}
	if (strcmp(scen, "stray") == 0 && g_rank == 1) {
		send_strays(st);
	}
	if (strcmp(scen, "stray") == 0 && g_rank == 2) {
		wait_strays(st);
	}
	if ((strcmp(scen, "stray") == 0 && g_rank == 0) || strcmp(scen, "links") == 0) {
		log_fd = capture_stderr(&saved_stderr);
	}
	if (strcmp(scen, "die") == 0) {
		start_barrier(st);
	}
	t0 = crun_now_ms();
	rc = crun_comm_create(st, g_rank, g_size, &co, &c);
	if (log_fd >= 0 && strcmp(scen, "links") == 0) {
		check_links(log_fd, saved_stderr);
	} else if (log_fd >= 0) {
		check_strays_rejected(log_fd, saved_stderr);
	}
	if (strcmp(scen, "badaddr") == 0) {
		crun_store_close(st);
		if (rc != CRUN_ECONFIG) {
			FAILF("create with a bad CRUN_COMM_ADDR: got %s, want CRUN_ECONFIG",
			      crun_strerror(rc));
		}
		return EXIT_SAW_ERROR;
	}
	if (strcmp(scen, "missing") == 0) {
		int64_t took = crun_now_ms() - t0;

		crun_store_close(st);
		/* The missing rank's neighbours time out; the others may instead see a
		 * neighbour give up (a reset), which is how the failure spreads. */
		if (rc != -ETIMEDOUT &&
		    (rc != -ECONNRESET || g_rank == 0 || g_rank == g_size - 2)) {
			FAILF("create with a missing peer: got %s, want -ETIMEDOUT",
			      crun_strerror(rc));
		}
		if (took > timeout_ms + 2000 ||
		    (rc == -ETIMEDOUT && took < timeout_ms - TIMEOUT_EARLY_MS)) {
			FAILF("create with a missing peer took %lld ms (timeout %d)",
			      (long long)took, timeout_ms);
		}
		fprintf(stderr, "comm_worker rank %d: missing peer: %s after %lld ms\n", g_rank,
			crun_strerror(rc), (long long)took);
		return EXIT_SAW_ERROR;
	}
	if (rc == CRUN_EBACKEND && strcmp(scen, "nccl") == 0 && !CRUN_HAVE_NCCL) {
		crun_store_close(st);
		fprintf(stderr, "comm_worker: built without NCCL: skipping\n");
		return EXIT_SKIP;
	}
	if (rc < 0) {
		/* nccl included: test_comm runs it only where a GPU is visible. */
		FAILF("create: %s", crun_strerror(rc));
	}
	crun_store_close(st);
	st = NULL;
	if (strcmp(scen, "all") == 0 || strcmp(scen, "stray") == 0 || strcmp(scen, "links") == 0) {
		scenario_all(c);
	} else if (strcmp(scen, "big") == 0) {
		scenario_big(c);
	} else if (strcmp(scen, "die") == 0) {
		status = scenario_die(c, timeout_ms);
	} else if (strcmp(scen, "mismatch") == 0) {
		status = scenario_mismatch(c);
	} else if (strcmp(scen, "args") == 0) {
		/* Argument checks need a store for the create calls: reopen it. */
		rc = crun_store_open(&so, &st, err, sizeof(err));
		if (rc < 0) {
			FAILF("store %s: %s", argv[1], err);
		}
		status = scenario_args(st, c);
		crun_store_close(st);
#if CRUN_HAVE_NCCL
	} else if (strcmp(scen, "nccl") == 0) {
		status = scenario_nccl(c);
#endif
	} else {
		FAILF("unknown scenario %s", scen);
	}
	crun_comm_destroy(c);
	return status;
}
