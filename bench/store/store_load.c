/* SPDX-License-Identifier: MIT */
/* bench/store/store_load.c: load generator for the crun store (driven by bench/store/run). */
/*
 * store_load --endpoint E throughput --op set|get|waitget|add --clients N --seconds S
 *     N client processes, one connection each, run OP back to back for S seconds after a
 *     common start. Prints {"ops_s", "p50_us", "p99_us", "ops"}. waitget is a get with
 *     TCPStore's semantics (its get blocks until the key exists): crun_store_wait_get(), one
 *     round trip (the wait's reply carries the value), where TCPStore 1.13's client sends
 *     two requests, WAIT then GET, for one get.
 * store_load --endpoint E barrier --clients N --procs P [--timeout S]
 *     N connections spread over P processes. Each connection adds 1 to a counter; the one
 *     that brings it to N sets the release key; every connection then waits for it (a
 *     process waits through its connections in turn). Prints {"ms"}: first connect to last
 *     release.
 * store_load --endpoint E idle --clients N --procs P --server-pid PID
 *     N connections over P processes, each pinged once, then held open while the server's
 *     RSS is read from /proc. Prints {"rss_kb", "base_kb"}.
 * The semantics mirror bench/store/tcpstore_load.py exactly, so rows compare like for like.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "src/common/util.h"
#include <crun/error.h>
#include <crun/store.h>

#define HIST_US 200000 /* 1 us buckets up to 200 ms; slower ops land in the last one */

struct slot {
	int64_t ops;
	int64_t t_start_ns; /* barrier: before the first connect */
	int64_t t_end_ns;   /* barrier: after the last release; throughput: end of the run */
	int64_t t_begin_ns; /* throughput: start of the run */
	int rc;
	int ready;
	uint32_t hist[HIST_US];
};

static const char *g_endpoint;
static char g_prefix[64];

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "store_load: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static int open_store(struct crun_store **st, int timeout_ms)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	char err[256];
	int rc;

	o.endpoint = g_endpoint;
	o.prefix = g_prefix;
	o.connect_timeout_ms = timeout_ms;
	o.timeout_ms = timeout_ms;
	o.token_file = getenv("CRUN_STORE_TOKEN_FILE"); /* the daemon's token (bench/store/run) */
	rc = crun_store_open(&o, st, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "store_load: %s\n", err);
	}
	return rc;
}

/* Read end of a pipe that every child blocks on until the parent closes the write end. */
static int g_go[2];

static void wait_go(void)
{
	char c;

	close(g_go[1]);
	while (read(g_go[0], &c, 1) < 0 && errno == EINTR) {
	}
}

static void *shared(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		die("mmap: %s", strerror(errno));
	}
	return p;
}

/* Until every child is ready, one failed, or 300 s passed. */
static void wait_ready(struct slot *s, int n)
{
	int64_t end = crun_now_ns() + 300 * (int64_t)1000000000;
	int i;

	for (i = 0; i < n; i++) {
		while (!__atomic_load_n(&s[i].ready, __ATOMIC_ACQUIRE)) {
			if (__atomic_load_n(&s[i].rc, __ATOMIC_ACQUIRE) != 0 || crun_now_ns() > end) {
				return;
			}
			usleep(1000);
		}
	}
}

static int reap(int n)
{
	int status, bad = 0;

	while (n-- > 0) {
		if (wait(&status) < 0) {
			break;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			bad++;
		}
	}
	return bad;
}

static void child_throughput(struct slot *s, int id, const char *op, int seconds)
{
	struct crun_store *st;
	char key[32], val[32];
	int64_t t0, t1, end, r;
	void *v;
	size_t len;
	int rc;

	if (open_store(&st, 30000) < 0) {
		s->rc = 1;
		_exit(1);
	}
	snprintf(key, sizeof(key), "set/%d", id);
	memset(val, 'v', sizeof(val));
	if (strcmp(op, "get") == 0 || strcmp(op, "waitget") == 0) {
		crun_store_set(st, "get", val, sizeof(val));
	}
	__atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
	wait_go();
	t0 = crun_now_ns();
	s->t_begin_ns = t0;
	end = t0 + (int64_t)seconds * 1000000000;
	do {
		if (op[0] == 's') {
			/* As TCPStore's set: sent, its reply read later (by the flush below). */
			rc = crun_store_set_async(st, key, val, sizeof(val));
		} else if (op[0] == 'g') {
			rc = crun_store_get(st, "get", &v, &len);
			free(v);
		} else if (op[0] == 'w') {
			rc = crun_store_wait_get(st, "get", &v, &len, -1);
			free(v);
		} else {
			rc = crun_store_add(st, "add", 1, &r);
		}
		t1 = crun_now_ns();
		if (rc < 0) {
			fprintf(stderr, "store_load: %s: %s\n", op, crun_strerror(rc));
			s->rc = 1;
			_exit(1);
		}
		s->hist[(t1 - t0) / 1000 < HIST_US ? (t1 - t0) / 1000 : HIST_US - 1]++;
		s->ops++;
		t0 = t1;
	} while (t1 < end);
	if (op[0] == 's') {
		/* Every set answered (stored) within the time measured. */
		rc = crun_store_flush(st);
		t1 = crun_now_ns();
		if (rc < 0) {
			fprintf(stderr, "store_load: set: %s\n", crun_store_last_error(st));
			s->rc = 1;
			_exit(1);
		}
	}
	s->t_end_ns = t1;
	crun_store_close(st);
	_exit(0);
}

static double pct(const uint64_t *h, uint64_t total, double q)
{
	uint64_t want = (uint64_t)(q * (double)total), acc = 0;
	int i;

	for (i = 0; i < HIST_US; i++) {
		acc += h[i];
		if (acc > want) {
			return i + 0.5;
		}
	}
	return HIST_US;
}

static int throughput(const char *op, int clients, int seconds)
{
	struct slot *s = shared(sizeof(*s) * (size_t)clients);
	uint64_t *h = calloc(HIST_US, sizeof(*h)), ops = 0;
	int64_t b = INT64_MAX, e = 0;
	int i, j;

	if (h == NULL || pipe(g_go) < 0) {
		die("out of memory");
	}
	for (i = 0; i < clients; i++) {
		if (fork() == 0) {
			child_throughput(&s[i], i, op, seconds);
		}
	}
	close(g_go[0]);
	wait_ready(s, clients);
	close(g_go[1]);
	if (reap(clients) > 0) {
		fprintf(stderr, "store_load: a client failed\n");
		return 1;
	}
	for (i = 0; i < clients; i++) {
		ops += (uint64_t)s[i].ops;
		b = s[i].t_begin_ns < b ? s[i].t_begin_ns : b;
		e = s[i].t_end_ns > e ? s[i].t_end_ns : e;
		for (j = 0; j < HIST_US; j++) {
			h[j] += s[i].hist[j];
		}
	}
	printf("{\"ops\": %" PRIu64 ", \"ops_s\": %.0f, \"p50_us\": %.1f, \"p99_us\": %.1f}\n",
	       ops, (double)ops / ((double)(e - b) / 1e9), pct(h, ops, 0.50), pct(h, ops, 0.99));
	free(h);
	return 0;
}

static void child_barrier(struct slot *s, int first, int count, int total, int timeout_ms)
{
	struct crun_store **st = calloc((size_t)count, sizeof(*st));
	const char *rel[] = {"release"};
	int64_t r;
	int i, rc;

	if (st == NULL) {
		_exit(1);
	}
	__atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
	wait_go();
	s->t_start_ns = crun_now_ns();
	for (i = 0; i < count; i++) {
		if (open_store(&st[i], timeout_ms) < 0) {
			_exit(1);
		}
		rc = crun_store_add(st[i], "count", 1, &r);
		if (rc < 0) {
			fprintf(stderr, "store_load: add: %s\n", crun_strerror(rc));
			_exit(1);
		}
		if (r == total) {
			crun_store_set(st[i], "release", "1", 1);
		}
	}
	for (i = 0; i < count; i++) {
		rc = crun_store_wait(st[i], rel, 1, timeout_ms);
		if (rc < 0) {
			fprintf(stderr, "store_load: wait: %s\n", crun_strerror(rc));
			_exit(1);
		}
	}
	s->t_end_ns = crun_now_ns();
	(void)first;
	for (i = 0; i < count; i++) {
		crun_store_close(st[i]);
	}
	free(st);
	_exit(0);
}

static int barrier(int clients, int procs, int timeout_ms)
{
	struct slot *s;
	int64_t b = INT64_MAX, e = 0;
	int i, first = 0, count;

	if (procs > clients) {
		procs = clients;
	}
	s = shared(sizeof(*s) * (size_t)procs);
	if (pipe(g_go) < 0) {
		die("pipe: %s", strerror(errno));
	}
	for (i = 0; i < procs; i++) {
		count = clients / procs + (i < clients % procs);
		if (fork() == 0) {
			child_barrier(&s[i], first, count, clients, timeout_ms);
		}
		first += count;
	}
	close(g_go[0]);
	wait_ready(s, procs);
	close(g_go[1]);
	if (reap(procs) > 0) {
		fprintf(stderr, "store_load: a client failed\n");
		return 1;
	}
	for (i = 0; i < procs; i++) {
		b = s[i].t_start_ns < b ? s[i].t_start_ns : b;
		e = s[i].t_end_ns > e ? s[i].t_end_ns : e;
	}
	printf("{\"ms\": %.1f}\n", (double)(e - b) / 1e6);
	return 0;
}

static void child_idle(struct slot *s, int count, int hold[2])
{
	struct crun_store **st = calloc((size_t)count, sizeof(*st));
	char c;
	int i;

	close(hold[1]);
	if (st == NULL) {
		_exit(1);
	}
	for (i = 0; i < count; i++) {
		if (open_store(&st[i], 60000) < 0 || crun_store_ping(st[i]) < 0) {
			s->rc = 1;
			_exit(1);
		}
	}
	__atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
	while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
	}
	for (i = 0; i < count; i++) {
		crun_store_close(st[i]);
	}
	free(st);
	_exit(0);
}

static int idle(int clients, int procs, int server_pid)
{
	struct slot *s;
	long base = util_rss_kib(server_pid), rss;
	int hold[2], i;

	if (base < 0) {
		die("no such server process: %d", server_pid);
	}
	if (procs > clients) {
		procs = clients;
	}
	s = shared(sizeof(*s) * (size_t)procs);
	if (pipe(hold) < 0) {
		die("pipe: %s", strerror(errno));
	}
	for (i = 0; i < procs; i++) {
		if (fork() == 0) {
			child_idle(&s[i], clients / procs + (i < clients % procs), hold);
		}
	}
	close(hold[0]);
	wait_ready(s, procs);
	usleep(200000); /* let the server finish accepting before reading its RSS */
	rss = util_rss_kib(server_pid);
	close(hold[1]);
	if (reap(procs) > 0) {
		fprintf(stderr, "store_load: a client failed\n");
		return 1;
	}
	printf("{\"rss_kb\": %ld, \"base_kb\": %ld}\n", rss, base);
	return 0;
}

static int intarg(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v <= 0 || v > 1000000) {
		die("expected a positive integer, got \"%s\"", s);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	const char *mode = NULL, *op = "get";
	int clients = 1, procs = 50, seconds = 2, timeout_s = 120, pid = 0, i;
	struct rlimit rl;

	signal(SIGPIPE, SIG_IGN);
	snprintf(g_prefix, sizeof(g_prefix), "bench/%d/", (int)getpid());
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "throughput") == 0 || strcmp(a, "barrier") == 0 ||
		    strcmp(a, "idle") == 0) {
			mode = a;
			continue;
		}
		if (v == NULL) {
			die("%s needs a value", a);
		}
		if (strcmp(a, "--endpoint") == 0) {
			g_endpoint = v;
		} else if (strcmp(a, "--op") == 0) {
			op = v;
		} else if (strcmp(a, "--clients") == 0) {
			clients = intarg(v);
		} else if (strcmp(a, "--procs") == 0) {
			procs = intarg(v);
		} else if (strcmp(a, "--seconds") == 0) {
			seconds = intarg(v);
		} else if (strcmp(a, "--timeout") == 0) {
			timeout_s = intarg(v);
		} else if (strcmp(a, "--server-pid") == 0) {
			pid = intarg(v);
		} else {
			die("unknown argument %s", a);
		}
		i++;
	}
	if (mode == NULL || g_endpoint == NULL) {
		die("usage: store_load --endpoint E throughput|barrier|idle [options]");
	}
	/* Many connections per process: lift the soft fd limit to the hard one. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (strcmp(mode, "throughput") == 0) {
		if (strcmp(op, "set") != 0 && strcmp(op, "get") != 0 &&
		    strcmp(op, "waitget") != 0 && strcmp(op, "add") != 0) {
			die("--op: expected set, get, waitget or add, got \"%s\"", op);
		}
		return throughput(op, clients, seconds);
	}
	if (strcmp(mode, "barrier") == 0) {
		return barrier(clients, procs, timeout_s * 1000);
	}
	return idle(clients, procs, pid);
}
