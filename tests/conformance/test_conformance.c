/* SPDX-License-Identifier: MIT */
/* tests/conformance/test_conformance.c: every store operation, timeout and limit, per backend. */
/*
 * Usage: test_conformance file [FILTER]
 *        test_conformance tcp PATH/TO/crun-rdzvd [FILTER]
 * The file run uses a store file in a fresh temporary directory; the tcp run starts a real
 * crun-rdzvd on 127.0.0.1 port 0 and reads the bound address from its first stdout line.
 * Every test goes through the public API (include/crun/store.h) with a prefix of its own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

static bool g_tcp;
static const char *g_rdzvd;
static char g_dir[256];      /* temporary directory of the fixture */
static char g_path[512];     /* file backend: the store file */
static char g_endpoint[600]; /* what every test connects to */
static pid_t g_pid = -1;     /* tcp: the crun-rdzvd we started */
static unsigned g_seq;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- fixture: the backend under test ---- */

static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms;
	size_t n = 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t r;

	while (n + 1 < cap) {
		int left = (int)(end - now_ms());

		if (left <= 0 || poll(&p, 1, left) <= 0) {
			return -ETIMEDOUT;
		}
		r = read(fd, buf + n, 1);
		if (r <= 0) {
			return -EPIPE;
		}
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 0;
		}
		n++;
	}
	return -EMSGSIZE;
}

static void stop_daemon(void)
{
	int64_t end;
	int status;

	if (g_pid <= 0) {
		return;
	}
	kill(g_pid, SIGTERM);
	end = now_ms() + 10000;
	while (waitpid(g_pid, &status, WNOHANG) == 0) {
		if (now_ms() > end) {
			kill(g_pid, SIGKILL);
			waitpid(g_pid, &status, 0);
			break;
		}
		usleep(10000);
	}
	g_pid = -1;
}

static int start_daemon(void)
{
	char line[256];
	int pfd[2];
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0) {
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		return -1;
	}
	if (pid == 0) {
		dup2(pfd[1], 1);
		execl(g_rdzvd, g_rdzvd, "--listen", "127.0.0.1:0", (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", g_rdzvd, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	g_pid = pid;
	if (read_line(pfd[0], line, sizeof(line), 15000) < 0) {
		fprintf(stderr, "conformance: %s printed no address within 15 s\n", g_rdzvd);
		close(pfd[0]);
		stop_daemon();
		return -1;
	}
	/* The daemon may log more to stdout: keep the pipe open but never block on it. */
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	snprintf(g_endpoint, sizeof(g_endpoint), "%s", line);
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/crun-conformance-XXXXXX");
	if (mkdtemp(g_dir) == NULL) {
		return -1;
	}
	snprintf(g_path, sizeof(g_path), "%s/store", g_dir);
	if (g_tcp) {
		return start_daemon();
	}
	snprintf(g_endpoint, sizeof(g_endpoint), "file://%s", g_path);
	return 0;
}

static int group_teardown(void **state)
{
	char p[600];

	(void)state;
	stop_daemon();
	snprintf(p, sizeof(p), "%s.torn", g_path);
	unlink(p);
	snprintf(p, sizeof(p), "%s.compact", g_path);
	unlink(p);
	unlink(g_path);
	rmdir(g_dir);
	return 0;
}

/* ---- helpers ---- */

static struct crun_store *open_with(const char *endpoint, const char *prefix, int timeout_ms)
{
	struct crun_store_opts o = {
		.endpoint = endpoint,
		.prefix = prefix,
		.connect_timeout_ms = 10000,
		.timeout_ms = timeout_ms,
	};
	struct crun_store *st = NULL;
	char err[256];
	int rc;

	rc = crun_store_open(&o, &st, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "open %s: %s (%s)\n", endpoint, err, crun_strerror(rc));
	}
	assert_int_equal(rc, 0);
	assert_non_null(st);
	return st;
}

/* A handle on the store under test with a prefix no other test uses. */
static struct crun_store *open_fresh(void)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "conf/%u/%u/", (unsigned)getpid(), ++g_seq);
	return open_with(g_endpoint, prefix, 30000);
}

static void want_value(struct crun_store *st, const char *key, const char *want)
{
	void *v = NULL;
	size_t len = 0;

	assert_int_equal(crun_store_get(st, key, &v, &len), 0);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(v, want, len);
	assert_int_equal(((char *)v)[len], '\0');
	free(v);
}

static int sets(struct crun_store *st, const char *key, const char *val)
{
	return crun_store_set(st, key, val, strlen(val));
}

/* ---- tests ---- */

static void set_get_roundtrip(void **state)
{
	struct crun_store *st = open_fresh();
	const char bin[] = {'a', 0, 'b', 0, (char)0xff};
	void *v;
	size_t len;

	(void)state;
	assert_int_equal(sets(st, "k", "hello"), 0);
	want_value(st, "k", "hello");
	assert_int_equal(sets(st, "k", "world!"), 0);
	want_value(st, "k", "world!");
	assert_int_equal(crun_store_set(st, "empty", NULL, 0), 0);
	want_value(st, "empty", "");
	assert_int_equal(crun_store_set(st, "bin", bin, sizeof(bin)), 0);
	assert_int_equal(crun_store_get(st, "bin", &v, &len), 0);
	assert_int_equal(len, sizeof(bin));
	assert_memory_equal(v, bin, sizeof(bin));
	free(v);
	assert_int_equal(crun_store_ping(st), 0);
	crun_store_close(st);
}

static void get_missing_is_enoent(void **state)
{
	struct crun_store *st = open_fresh();
	void *v = (void *)1;
	size_t len = 7;

	(void)state;
	assert_int_equal(crun_store_get(st, "nope", &v, &len), -ENOENT);
	assert_null(v);
	crun_store_close(st);
}

static void wait_all_times_out_within_bounds(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"present", "absent"};
	int64_t t0, dt;

	(void)state;
	assert_int_equal(sets(st, "present", "1"), 0);
	t0 = now_ms();
	assert_int_equal(crun_store_wait(st, keys, 2, 300), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 290);
	assert_true(dt < 3000);
	/* timeout 0 checks once */
	t0 = now_ms();
	assert_int_equal(crun_store_wait(st, keys, 2, 0), -ETIMEDOUT);
	assert_true(now_ms() - t0 < 2000);
	crun_store_close(st);
}

static void wait_any_times_out_within_bounds(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"x", "y", "z"};
	int64_t t0, dt;

	(void)state;
	t0 = now_ms();
	assert_int_equal(crun_store_wait_any(st, keys, 3, 250), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 240);
	assert_true(dt < 3000);
	crun_store_close(st);
}

static void wait_returns_at_once_when_present(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"a", "b", "c"};
	int64_t t0;

	(void)state;
	assert_int_equal(sets(st, "a", "1"), 0);
	assert_int_equal(sets(st, "b", "2"), 0);
	assert_int_equal(sets(st, "c", "3"), 0);
	t0 = now_ms();
	assert_int_equal(crun_store_wait(st, keys, 3, 20000), 0);
	assert_int_equal(crun_store_wait(st, keys, 3, 0), 0);
	assert_true(now_ms() - t0 < 5000);
	assert_int_equal(crun_store_delete(st, "a"), 0);
	assert_int_equal(crun_store_delete(st, "b"), 0);
	/* ANY reports the index of a key that exists. */
	assert_int_equal(crun_store_wait_any(st, keys, 3, 20000), 2);
	assert_int_equal(sets(st, "a", "1"), 0);
	assert_int_equal(crun_store_wait_any(st, keys, 3, 20000), 0);
	crun_store_close(st);
}

struct writer_arg {
	struct crun_store *st;
	const char *key;
	int rc;
};

static void *writer_main(void *p)
{
	struct writer_arg *a = p;
	const char *ready[] = {"ready"};

	/* Wait (through the store) until the main thread is about to block, then write. */
	a->rc = crun_store_wait(a->st, ready, 1, 20000);
	if (a->rc == 0) {
		usleep(50000); /* let the waiter park; correctness does not depend on it */
		a->rc = sets(a->st, a->key, "go");
	}
	return NULL;
}

static void wait_woken_by_second_handle(void **state)
{
	struct crun_store *st = open_fresh();
	struct writer_arg a = {.key = "target"};
	const char *all[] = {"target"};
	const char *any[] = {"never", "target"};
	pthread_t th;
	int64_t t0;

	(void)state;
	assert_int_equal(crun_store_clone(st, "", &a.st), 0);
	assert_string_equal(crun_store_prefix(a.st), crun_store_prefix(st));
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	assert_int_equal(sets(st, "ready", "1"), 0);
	t0 = now_ms();
	assert_int_equal(crun_store_wait(st, all, 1, 20000), 0);
	assert_true(now_ms() - t0 < 15000);
	pthread_join(th, NULL);
	assert_int_equal(a.rc, 0);
	want_value(st, "target", "go");

	/* The same with ANY: woken by the write, reports the index of the key written. */
	a.key = "target";
	assert_int_equal(crun_store_delete(st, "target"), 0);
	assert_int_equal(crun_store_delete(st, "ready"), 0);
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	assert_int_equal(sets(st, "ready", "1"), 0);
	assert_int_equal(crun_store_wait_any(st, any, 2, 20000), 1);
	pthread_join(th, NULL);
	assert_int_equal(a.rc, 0);
	crun_store_close(a.st);
	crun_store_close(st);
}

#define ADD_THREADS 8
#define ADD_EACH 1000

struct adder {
	struct crun_store *st;
	int rc;
	int64_t last;
};

static void *adder_main(void *p)
{
	struct adder *a = p;
	int i, rc;

	for (i = 0; i < ADD_EACH; i++) {
		rc = crun_store_add(a->st, "counter", 1, &a->last);
		if (rc < 0) {
			a->rc = rc;
			break;
		}
	}
	return NULL;
}

static void add_from_8_threads_is_exact(void **state)
{
	struct crun_store *st = open_fresh();
	struct adder ad[ADD_THREADS];
	pthread_t th[ADD_THREADS];
	char want[32];
	int64_t r;
	int i;

	(void)state;
	memset(ad, 0, sizeof(ad));
	for (i = 0; i < ADD_THREADS; i++) {
		assert_int_equal(crun_store_clone(st, "", &ad[i].st), 0);
	}
	for (i = 0; i < ADD_THREADS; i++) {
		assert_int_equal(pthread_create(&th[i], NULL, adder_main, &ad[i]), 0);
	}
	for (i = 0; i < ADD_THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(ad[i].rc, 0);
		assert_true(ad[i].last >= ADD_EACH && ad[i].last <= ADD_THREADS * ADD_EACH);
		crun_store_close(ad[i].st);
	}
	assert_int_equal(crun_store_add(st, "counter", 0, &r), 0);
	assert_int_equal(r, ADD_THREADS * ADD_EACH);
	snprintf(want, sizeof(want), "%d", ADD_THREADS * ADD_EACH);
	want_value(st, "counter", want);
	crun_store_close(st);
}

static void add_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	int64_t r = 0;

	(void)state;
	assert_int_equal(crun_store_add(st, "n", 5, &r), 0);
	assert_int_equal(r, 5);
	assert_int_equal(crun_store_add(st, "n", -7, &r), 0);
	assert_int_equal(r, -2);
	want_value(st, "n", "-2");
	assert_int_equal(sets(st, "s", "12"), 0);
	assert_int_equal(crun_store_add(st, "s", 30, &r), 0);
	assert_int_equal(r, 42);
	assert_int_equal(sets(st, "word", "abc"), 0);
	assert_int_equal(crun_store_add(st, "word", 1, &r), -EINVAL);
	want_value(st, "word", "abc");
	assert_int_equal(sets(st, "big", "9223372036854775807"), 0);
	assert_int_equal(crun_store_add(st, "big", 1, &r), -ERANGE);
	crun_store_close(st);
}

#define PROC_CHILDREN 4
#define PROC_EACH 300

/* Separate processes (separate connections, or separate opens of the file) add at once. */
static void add_from_processes_is_exact(void **state)
{
	struct crun_store *st = open_fresh();
	char prefix[128];
	pid_t pids[PROC_CHILDREN];
	int64_t r, end;
	int i, status, done = 0;

	(void)state;
	snprintf(prefix, sizeof(prefix), "%s", crun_store_prefix(st));
	for (i = 0; i < PROC_CHILDREN; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct crun_store_opts o = {.endpoint = g_endpoint,
						    .prefix = prefix,
						    .connect_timeout_ms = 10000,
						    .timeout_ms = 30000};
			struct crun_store *cs;
			int k;

			if (crun_store_open(&o, &cs, NULL, 0) < 0) {
				_exit(1);
			}
			for (k = 0; k < PROC_EACH; k++) {
				if (crun_store_add(cs, "pcount", 1, NULL) < 0) {
					_exit(1);
				}
			}
			crun_store_close(cs);
			_exit(0);
		}
	}
	for (i = 0; i < PROC_EACH; i++) {
		assert_int_equal(crun_store_add(st, "pcount", 1, NULL), 0);
	}
	end = now_ms() + 60000;
	while (done < PROC_CHILDREN) {
		for (i = 0; i < PROC_CHILDREN; i++) {
			if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
				assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
				pids[i] = 0;
				done++;
			}
		}
		if (now_ms() > end) {
			for (i = 0; i < PROC_CHILDREN; i++) {
				if (pids[i] > 0) {
					kill(pids[i], SIGKILL);
					waitpid(pids[i], &status, 0);
				}
			}
			fail_msg("child processes did not finish within 60 s");
		}
		usleep(5000);
	}
	assert_int_equal(crun_store_add(st, "pcount", 0, &r), 0);
	assert_int_equal(r, (PROC_CHILDREN + 1) * PROC_EACH);
	crun_store_close(st);
}

#define WAITERS 16

struct waiter {
	struct crun_store *st;
	int rc;
};

static void *waiter_main(void *p)
{
	struct waiter *w = p;
	const char *keys[] = {"bell"};

	w->rc = crun_store_wait(w->st, keys, 1, 20000);
	return NULL;
}

/* One write wakes every handle waiting on the key. */
static void one_write_wakes_many_waiters(void **state)
{
	struct crun_store *st = open_fresh();
	struct waiter w[WAITERS];
	pthread_t th[WAITERS];
	int64_t t0;
	int i;

	(void)state;
	memset(w, 0, sizeof(w));
	for (i = 0; i < WAITERS; i++) {
		assert_int_equal(crun_store_clone(st, "", &w[i].st), 0);
		w[i].rc = 1;
		assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
	}
	usleep(100000); /* let the waiters park; correctness does not depend on it */
	t0 = now_ms();
	assert_int_equal(sets(st, "bell", "ring"), 0);
	for (i = 0; i < WAITERS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].rc, 0);
		crun_store_close(w[i].st);
	}
	assert_true(now_ms() - t0 < 15000);
	crun_store_close(st);
}

struct mset_writer {
	struct crun_store *st;
	volatile int done;
	int rc;
};

static void *mset_main(void *p)
{
	struct mset_writer *m = p;
	const char *keys[] = {"pair/a", "pair/b"};
	char v[16];
	const void *vals[] = {v, v};
	size_t lens[2];
	int i;

	for (i = 0; i < 200 && m->rc == 0; i++) {
		lens[0] = lens[1] = (size_t)snprintf(v, sizeof(v), "%d", i);
		m->rc = crun_store_multi_set(m->st, keys, 2, vals, lens);
	}
	__atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A reader never sees half of a multi_set. */
static void multi_set_is_atomic_for_readers(void **state)
{
	struct crun_store *st = open_fresh();
	struct mset_writer m = {0};
	const char *keys[] = {"pair/a", "pair/b"};
	void *vals[2];
	size_t lens[2];
	pthread_t th;
	int reads = 0;

	(void)state;
	assert_int_equal(crun_store_clone(st, "", &m.st), 0);
	assert_int_equal(pthread_create(&th, NULL, mset_main, &m), 0);
	while (!__atomic_load_n(&m.done, __ATOMIC_ACQUIRE) || reads == 0) {
		assert_int_equal(crun_store_multi_get(st, keys, 2, vals, lens), 0);
		assert_true((vals[0] == NULL) == (vals[1] == NULL));
		if (vals[0] != NULL) {
			assert_int_equal(lens[0], lens[1]);
			assert_memory_equal(vals[0], vals[1], lens[0]);
		}
		free(vals[0]);
		free(vals[1]);
		reads++;
	}
	pthread_join(th, NULL);
	assert_int_equal(m.rc, 0);
	crun_store_close(m.st);
	crun_store_close(st);
}

#define CAS_THREADS 8

struct caser {
	struct crun_store *st;
	char mine[32];
	char *got;
	size_t gotlen;
	int rc;
};

static void *cas_main(void *p)
{
	struct caser *c = p;
	const char *go[] = {"go"};
	void *cur = NULL;

	c->rc = crun_store_wait(c->st, go, 1, 20000);
	if (c->rc == 0) {
		c->rc = crun_store_compare_set(c->st, "winner", "", 0, c->mine, strlen(c->mine),
					       &cur, &c->gotlen);
	}
	c->got = cur;
	return NULL;
}

static void compare_set_race_has_one_winner(void **state)
{
	struct crun_store *st = open_fresh();
	struct caser c[CAS_THREADS];
	pthread_t th[CAS_THREADS];
	void *v;
	size_t len;
	int i, winners = 0;

	(void)state;
	memset(c, 0, sizeof(c));
	for (i = 0; i < CAS_THREADS; i++) {
		assert_int_equal(crun_store_clone(st, "", &c[i].st), 0);
		snprintf(c[i].mine, sizeof(c[i].mine), "thread-%d", i);
		assert_int_equal(pthread_create(&th[i], NULL, cas_main, &c[i]), 0);
	}
	assert_int_equal(sets(st, "go", "1"), 0);
	for (i = 0; i < CAS_THREADS; i++) {
		pthread_join(th[i], NULL);
	}
	assert_int_equal(crun_store_get(st, "winner", &v, &len), 0);
	for (i = 0; i < CAS_THREADS; i++) {
		assert_int_equal(c[i].rc, 0);
		assert_non_null(c[i].got);
		/* Everyone reads back the value that is stored: the winner's. */
		assert_int_equal(c[i].gotlen, len);
		assert_memory_equal(c[i].got, v, len);
		winners += strcmp(c[i].got, c[i].mine) == 0;
		free(c[i].got);
		crun_store_close(c[i].st);
	}
	assert_int_equal(winners, 1);
	free(v);
	crun_store_close(st);
}

static void compare_set_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	void *cur;
	size_t len;

	(void)state;
	/* missing key + non-empty expected: no swap, reply empty, key still missing */
	assert_int_equal(crun_store_compare_set(st, "k", "x", 1, "y", 1, &cur, &len), 0);
	assert_int_equal(len, 0);
	free(cur);
	assert_int_equal(crun_store_get(st, "k", &cur, &len), -ENOENT);
	/* missing key + empty expected: creates */
	assert_int_equal(crun_store_compare_set(st, "k", "", 0, "v1", 2, &cur, &len), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(cur, "v1", 2);
	free(cur);
	/* mismatch: returns the current value, no change */
	assert_int_equal(crun_store_compare_set(st, "k", "zz", 2, "v2", 2, &cur, &len), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(cur, "v1", 2);
	free(cur);
	want_value(st, "k", "v1");
	/* match: swaps; cur may be skipped */
	assert_int_equal(crun_store_compare_set(st, "k", "v1", 2, "v2", 2, NULL, NULL), 0);
	want_value(st, "k", "v2");
	crun_store_close(st);
}

static void delete_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	void *v;
	size_t len;

	(void)state;
	assert_int_equal(sets(st, "d", "1"), 0);
	assert_int_equal(crun_store_delete(st, "d"), 0);
	assert_int_equal(crun_store_get(st, "d", &v, &len), -ENOENT);
	assert_int_equal(crun_store_delete(st, "d"), -ENOENT);
	assert_int_equal(crun_store_delete(st, "never"), -ENOENT);
	assert_int_equal(sets(st, "d", "2"), 0);
	want_value(st, "d", "2");
	crun_store_close(st);
}

static void check_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"c1", "c2"};
	bool all = true;

	(void)state;
	assert_int_equal(crun_store_check(st, keys, 2, &all), 0);
	assert_false(all);
	assert_int_equal(sets(st, "c1", "1"), 0);
	assert_int_equal(crun_store_check(st, keys, 2, &all), 0);
	assert_false(all);
	assert_int_equal(sets(st, "c2", "1"), 0);
	assert_int_equal(crun_store_check(st, keys, 2, &all), 0);
	assert_true(all);
	crun_store_close(st);
}

static void num_keys_counts_every_prefix(void **state)
{
	struct crun_store *st = open_fresh();
	struct crun_store *other;
	int64_t before, after;

	(void)state;
	assert_int_equal(crun_store_clone(st, "other/", &other), 0);
	assert_int_equal(crun_store_num_keys(st, &before), 0);
	assert_int_equal(sets(st, "n1", "1"), 0);
	assert_int_equal(sets(st, "n2", "1"), 0);
	assert_int_equal(sets(other, "n1", "1"), 0);
	assert_int_equal(sets(st, "n1", "again"), 0);
	assert_int_equal(crun_store_num_keys(st, &after), 0);
	assert_int_equal(after - before, 3);
	assert_int_equal(crun_store_delete(st, "n2"), 0);
	assert_int_equal(crun_store_num_keys(other, &after), 0);
	assert_int_equal(after - before, 2);
	crun_store_close(other);
	crun_store_close(st);
}

static void append_semantics(void **state)
{
	struct crun_store *st = open_fresh();

	(void)state;
	assert_int_equal(crun_store_append(st, "log", "ab", 2), 0);
	want_value(st, "log", "ab");
	assert_int_equal(crun_store_append(st, "log", "cde", 3), 0);
	assert_int_equal(crun_store_append(st, "log", NULL, 0), 0);
	want_value(st, "log", "abcde");
	crun_store_close(st);
}

static void multi_get_with_absent_keys(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"m0", "missing", "m2"};
	void *vals[3];
	size_t lens[3];

	(void)state;
	assert_int_equal(sets(st, "m0", "zero"), 0);
	assert_int_equal(sets(st, "m2", ""), 0);
	assert_int_equal(crun_store_multi_get(st, keys, 3, vals, lens), 0);
	assert_non_null(vals[0]);
	assert_int_equal(lens[0], 4);
	assert_memory_equal(vals[0], "zero", 4);
	assert_null(vals[1]);
	assert_int_equal(lens[1], 0);
	assert_non_null(vals[2]); /* present and empty is not absent */
	assert_int_equal(lens[2], 0);
	free(vals[0]);
	free(vals[2]);
	crun_store_close(st);
}

static void multi_set_then_get(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"s0", "s1", "s2"};
	const void *vals[] = {"a", "bb", ""};
	const size_t lens[] = {1, 2, 0};
	bool all;

	(void)state;
	assert_int_equal(sets(st, "s1", "old"), 0);
	assert_int_equal(crun_store_multi_set(st, keys, 3, vals, lens), 0);
	assert_int_equal(crun_store_check(st, keys, 3, &all), 0);
	assert_true(all);
	want_value(st, "s0", "a");
	want_value(st, "s1", "bb");
	want_value(st, "s2", "");
	crun_store_close(st);
}

/* A TTL far in the future (up to INT64_MAX ms) means "never expires", not an overflow. */
static void huge_ttl_does_not_overflow(void **state)
{
	struct crun_store *st = open_fresh();

	(void)state;
	assert_int_equal(crun_store_set_ttl(st, "max", "m", 1, INT64_MAX), 0);
	assert_int_equal(crun_store_set_ttl(st, "big", "b", 1, INT64_MAX / 2 + 1), 0);
	want_value(st, "max", "m");
	want_value(st, "big", "b");
	crun_store_close(st);
}

/* Appends cannot grow a value past the value limit (a later compaction could not hold it). */
static void append_past_value_limit_is_emsgsize(void **state)
{
	struct crun_store *st = open_fresh();
	size_t n = CRUN_STORE_MAX_VALUE_LEN;
	char *big = malloc(n);
	void *v = NULL;
	size_t len = 0;

	(void)state;
	assert_non_null(big);
	memset(big, 'a', n);
	assert_int_equal(crun_store_append(st, "log", big, n - 1), 0);
	assert_int_equal(crun_store_append(st, "log", "b", 1), 0);
	assert_int_equal(crun_store_append(st, "log", "c", 1), -EMSGSIZE);
	assert_int_equal(crun_store_get(st, "log", &v, &len), 0);
	assert_int_equal(len, n);
	assert_int_equal(((char *)v)[n - 1], 'b');
	free(v);
	free(big);
	crun_store_close(st);
}

static void ttl_key_expires(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"t"};
	int64_t end;
	void *v;
	size_t len;
	int rc;

	(void)state;
	assert_int_equal(crun_store_set_ttl(st, "t", "x", 1, 300), 0);
	assert_int_equal(crun_store_set_ttl(st, "keep", "y", 1, 300), 0);
	assert_int_equal(sets(st, "keep", "z"), 0); /* a plain write clears the TTL */
	assert_int_equal(crun_store_set_ttl(st, "neg", "y", 1, -1), -EINVAL);
	want_value(st, "t", "x");
	end = now_ms() + 10000;
	do {
		rc = crun_store_get(st, "t", &v, &len);
		if (rc == 0) {
			free(v);
			usleep(20000); /* polling a condition, bounded by @end */
		}
	} while (rc == 0 && now_ms() < end);
	assert_int_equal(rc, -ENOENT);
	assert_int_equal(crun_store_wait(st, keys, 1, 100), -ETIMEDOUT);
	want_value(st, "keep", "z");
	crun_store_close(st);
}

static void prefix_isolation_and_clone(void **state)
{
	char pa[64], pb[64], want[128];
	struct crun_store *a, *b, *sub, *root;
	void *v;
	size_t len;

	(void)state;
	snprintf(pa, sizeof(pa), "iso/%u/%u/a/", (unsigned)getpid(), ++g_seq);
	snprintf(pb, sizeof(pb), "iso/%u/%u/b/", (unsigned)getpid(), g_seq);
	a = open_with(g_endpoint, pa, 30000);
	b = open_with(g_endpoint, pb, 30000);
	root = open_with(g_endpoint, NULL, 30000);
	assert_string_equal(crun_store_prefix(a), pa);
	assert_string_equal(crun_store_prefix(root), "");
	assert_int_equal(sets(a, "k", "from-a"), 0);
	assert_int_equal(sets(b, "k", "from-b"), 0);
	want_value(a, "k", "from-a");
	want_value(b, "k", "from-b");
	assert_int_equal(crun_store_delete(b, "k"), 0);
	want_value(a, "k", "from-a");
	assert_int_equal(crun_store_get(b, "k", &v, &len), -ENOENT);

	assert_int_equal(crun_store_clone(a, "sub/", &sub), 0);
	snprintf(want, sizeof(want), "%ssub/", pa);
	assert_string_equal(crun_store_prefix(sub), want);
	assert_int_equal(sets(sub, "deep", "1"), 0);
	want_value(a, "sub/deep", "1");
	snprintf(want, sizeof(want), "%ssub/deep", pa);
	want_value(root, want, "1");
	crun_store_close(sub);
	crun_store_close(root);
	crun_store_close(b);
	crun_store_close(a);
}

static void limits_are_emsgsize(void **state)
{
	struct crun_store *st = open_fresh();
	struct crun_store *root = open_with(g_endpoint, NULL, 30000);
	size_t plen = strlen(crun_store_prefix(st));
	char *key = malloc(CRUN_STORE_MAX_KEY_LEN + 2);
	const char **keys = calloc(CRUN_STORE_MAX_KEYS + 1, sizeof(*keys));
	void **vals = calloc(CRUN_STORE_MAX_KEYS + 1, sizeof(*vals));
	size_t *lens = calloc(CRUN_STORE_MAX_KEYS + 1, sizeof(*lens));
	bool all;
	size_t i;

	(void)state;
	assert_non_null(key);
	assert_non_null(keys);
	/* A key of exactly the limit works; prefix + key one over it does not. */
	memset(key, 'k', CRUN_STORE_MAX_KEY_LEN);
	key[CRUN_STORE_MAX_KEY_LEN] = '\0';
	assert_int_equal(sets(root, key, "ok"), 0);
	want_value(root, key, "ok");
	assert_int_equal(crun_store_delete(root, key), 0);
	key[CRUN_STORE_MAX_KEY_LEN - plen + 1] = '\0';
	assert_int_equal(sets(st, key, "x"), -EMSGSIZE);
	assert_int_equal(crun_store_add(st, key, 1, NULL), -EMSGSIZE);
	assert_int_equal(crun_store_get(st, key, &vals[0], &lens[0]), -EMSGSIZE);
	/* A value over the limit: refused before anything is sent (no buffer needed). */
	assert_int_equal(crun_store_set(st, "v", key, (size_t)CRUN_STORE_MAX_VALUE_LEN + 1),
			 -EMSGSIZE);
	assert_int_equal(crun_store_append(st, "v", key, (size_t)CRUN_STORE_MAX_VALUE_LEN + 1),
			 -EMSGSIZE);
	/* Too many keys in one request. */
	for (i = 0; i <= CRUN_STORE_MAX_KEYS; i++) {
		keys[i] = "same";
	}
	assert_int_equal(crun_store_wait(st, keys, CRUN_STORE_MAX_KEYS + 1, 10), -EMSGSIZE);
	assert_int_equal(crun_store_check(st, keys, CRUN_STORE_MAX_KEYS + 1, &all), -EMSGSIZE);
	assert_int_equal(crun_store_multi_get(st, keys, CRUN_STORE_MAX_KEYS + 1, vals, lens),
			 -EMSGSIZE);
	assert_int_equal(crun_store_multi_set(st, keys, CRUN_STORE_MAX_KEYS + 1,
					      (const void *const *)vals, lens),
			 -EMSGSIZE);
	/* The handle still works after refusals. */
	assert_int_equal(crun_store_check(st, keys, CRUN_STORE_MAX_KEYS, &all), 0);
	assert_false(all);
	assert_int_equal(crun_store_ping(st), 0);
	free(lens);
	free(vals);
	free(keys);
	free(key);
	crun_store_close(root);
	crun_store_close(st);
}

static void bad_endpoints_are_einval(void **state)
{
	const char *bad[] = {"", "nonsense", "http://h:1", "file://relative/x", "file:///tmp/dir/",
			     "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:", ":5", "[::1",
			     "tcp://", "host:port"};
	struct crun_store_opts o = {.connect_timeout_ms = 1000};
	struct crun_store *st;
	char err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.endpoint = bad[i];
		st = (struct crun_store *)1;
		err[0] = '\0';
		assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), -EINVAL);
		assert_null(st);
		assert_true(strlen(err) > 0);
		if (bad[i][0] != '\0') {
			assert_non_null(strstr(err, bad[i]));
		}
	}
	o.endpoint = NULL;
	assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), -EINVAL);
	assert_int_equal(crun_store_open(NULL, &st, err, sizeof(err)), -EINVAL);
}

/* Every spelling of the endpoint reaches the same store. */
static void endpoint_spellings_reach_the_same_store(void **state)
{
	struct crun_store *st = open_fresh(), *alt;
	char ep[700];

	(void)state;
	if (g_tcp) {
		snprintf(ep, sizeof(ep), "tcp://%s", g_endpoint);
	} else {
		/* A path with a redundant component names the same file. */
		snprintf(ep, sizeof(ep), "file://%s/./store", g_dir);
	}
	assert_int_equal(sets(st, "spelled", "yes"), 0);
	alt = open_with(ep, crun_store_prefix(st), 30000);
	want_value(alt, "spelled", "yes");
	crun_store_close(alt);
	crun_store_close(st);
}

static void dead_endpoint_times_out(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	struct crun_store_opts o = {.connect_timeout_ms = 600};
	struct crun_store *st = NULL;
	char ep[320], err[256];
	int64_t t0, dt;
	int fd, rc;

	(void)state;
	if (!g_tcp) {
		/* The file backend's "dead endpoint": a directory that does not exist. */
		snprintf(ep, sizeof(ep), "file://%s/no/such/dir/store", g_dir);
		o.endpoint = ep;
		rc = crun_store_open(&o, &st, err, sizeof(err));
		assert_int_equal(rc, -ENOENT);
		assert_non_null(strstr(err, "no/such/dir"));
		assert_null(st);
		return;
	}
	/* A port that was just bound and released: nothing listens there. */
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	close(fd);
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", ntohs(sa.sin_port));
	o.endpoint = ep;
	t0 = now_ms();
	rc = crun_store_open(&o, &st, err, sizeof(err));
	dt = now_ms() - t0;
	assert_int_equal(rc, -ETIMEDOUT);
	assert_null(st);
	assert_true(dt >= 500);
	assert_true(dt < 5000);
	assert_non_null(strstr(err, ep));
}

/* File backend: a half-written last record (a writer that crashed) is ignored and cut away. */
static void torn_last_record_is_recovered(void **state)
{
	char ep[700], tpath[600];
	struct crun_store *st, *st2;
	struct stat sb;
	off_t good;
	int fd;
	/* A record header that promises 100 bytes of payload, followed by only 5. */
	const unsigned char torn[] = {0x43, 0x52, 0x53, 0x31, 100, 0, 0, 0, 1, 0, 0, 0,
				      0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5};
	/* A complete record whose CRC does not check. */
	unsigned char badcrc[16 + 8] = {0x43, 0x52, 0x53, 0x31, 8, 0, 0, 0, 2, 0, 0, 0, 1, 2, 3, 4,
					4, 0, 0, 0, 'a', 'b', 'c', 'd'};

	(void)state;
	if (g_tcp) {
		skip();
	}
	snprintf(tpath, sizeof(tpath), "%s.torn", g_path);
	snprintf(ep, sizeof(ep), "file://%s", tpath);
	unlink(tpath);
	st = open_with(ep, "t/", 10000);
	assert_int_equal(sets(st, "k1", "one"), 0);
	assert_int_equal(crun_store_add(st, "n", 2, NULL), 0);
	crun_store_close(st);
	assert_int_equal(stat(tpath, &sb), 0);
	good = sb.st_size;

	for (int round = 0; round < 2; round++) {
		fd = open(tpath, O_WRONLY | O_APPEND);
		assert_true(fd >= 0);
		if (round == 0) {
			assert_int_equal(write(fd, torn, sizeof(torn)), (ssize_t)sizeof(torn));
		} else {
			assert_int_equal(write(fd, badcrc, sizeof(badcrc)),
					 (ssize_t)sizeof(badcrc));
		}
		close(fd);

		/* A reader sees everything before the torn record and nothing of it. */
		st = open_with(ep, "t/", 10000);
		want_value(st, "k1", "one");
		want_value(st, "n", round == 0 ? "2" : "3");
		/* The next writer cuts the torn bytes away and appends after the last good one. */
		assert_int_equal(crun_store_add(st, "n", 1, NULL), 0);
		assert_int_equal(stat(tpath, &sb), 0);
		assert_true(sb.st_size > good);
		assert_true(sb.st_size < good + 200);
		good = sb.st_size;
		/* A fresh handle replays the whole file, the new record included. */
		st2 = open_with(ep, "t/", 10000);
		want_value(st2, "k1", "one");
		want_value(st2, "n", round == 0 ? "3" : "4");
		crun_store_close(st2);
		crun_store_close(st);
	}
	unlink(tpath);
}

static uint32_t test_crc32(const unsigned char *p, size_t n)
{
	uint32_t c = 0xffffffffu;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++) {
			c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
		}
	}
	return c ^ 0xffffffffu;
}

static void le32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

/*
 * File backend: hostile lengths at the end of the file (a header that claims 2^32-1 bytes; a
 * record with a good CRC whose count or key/value lengths claim ~2^32) are neither allocated
 * nor applied: readers keep the state before them and the next writer cuts them away.
 */
static void hostile_record_lengths_are_rejected(void **state)
{
	char ep[700], tpath[600];
	struct crun_store *st;
	struct stat sb;
	unsigned char rec[16 + 32];
	size_t rlen;
	off_t good;
	int fd;

	(void)state;
	if (g_tcp) {
		skip();
	}
	snprintf(tpath, sizeof(tpath), "%s.hostile", g_path);
	snprintf(ep, sizeof(ep), "file://%s", tpath);
	unlink(tpath);
	st = open_with(ep, "h/", 10000);
	assert_int_equal(sets(st, "k", "v"), 0);
	crun_store_close(st);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(stat(tpath, &sb), 0);
		good = sb.st_size;
		memset(rec, 0, sizeof(rec));
		le32(rec, 0x31535243u);
		rec[8] = 1; /* REC_PUT */
		if (round == 0) {
			le32(rec + 4, 0xffffffffu); /* the header alone, claiming 4 GiB */
			rlen = 16;
		} else {
			/* u32 n, then one (klen, vlen, expiry) triple; CRC made to check. */
			le32(rec + 16, round == 1 ? 0xffffffffu : 1);
			le32(rec + 20, 0xfffffff0u);
			le32(rec + 24, 0xfffffff0u);
			rlen = 16 + 4 + 16 + 4;
			le32(rec + 4, (uint32_t)(rlen - 16));
			le32(rec + 12, test_crc32(rec + 16, rlen - 16));
		}
		fd = open(tpath, O_WRONLY | O_APPEND);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, rec, rlen), (ssize_t)rlen);
		close(fd);
		st = open_with(ep, "h/", 10000);
		want_value(st, "k", "v");
		assert_int_equal(sets(st, "k2", "w"), 0);
		assert_int_equal(stat(tpath, &sb), 0);
		assert_true(sb.st_size > good && sb.st_size < good + 100);
		crun_store_close(st);
		st = open_with(ep, "h/", 10000);
		want_value(st, "k2", "w");
		crun_store_close(st);
	}
	unlink(tpath);
}

/* File backend: a writer that holds the lock forever cannot hang anyone past the deadline. */
static void held_lock_times_out(void **state)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	struct crun_store *st;
	int64_t t0, dt;
	int fd;

	(void)state;
	if (g_tcp) {
		skip();
	}
	st = open_with(g_endpoint, "lock/", 500);
	assert_int_equal(sets(st, "k", "v"), 0);
	fd = open(g_path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fcntl(fd, F_OFD_SETLK, &fl), 0);
	t0 = now_ms();
	assert_int_equal(sets(st, "k", "w"), -ETIMEDOUT);
	dt = now_ms() - t0;
	/* The handle's 500 ms, raised to the backend's 2 s floor for taking a lock. */
	assert_true(dt >= 400);
	assert_true(dt < 10000);
	close(fd); /* drops the lock */
	assert_int_equal(sets(st, "k", "w"), 0);
	want_value(st, "k", "w");
	crun_store_close(st);
}

#define COMPACT_THREADS 4
#define COMPACT_ADDS 1500

struct compact_adder {
	struct crun_store *st;
	int rc;
};

static void *compact_adder_main(void *p)
{
	struct compact_adder *a = p;
	char val[100];
	int i;

	memset(val, 'x', sizeof(val));
	for (i = 0; i < COMPACT_ADDS && a->rc == 0; i++) {
		a->rc = crun_store_add(a->st, "ccount", 1, NULL);
		if (a->rc == 0 && i % 10 == 0) {
			a->rc = crun_store_set(a->st, "churn", val, sizeof(val));
		}
	}
	return NULL;
}

/*
 * File backend: with a small compaction threshold, the file is rewritten several times while
 * handles opened before keep reading and writing (adds stay exact), TTLs, appends and deletes
 * survive, and the file stays small.
 */
static void file_compaction_keeps_every_key(void **state)
{
	char ep[700], tpath[600];
	struct compact_adder ad[COMPACT_THREADS];
	pthread_t th[COMPACT_THREADS];
	struct crun_store *a, *b, *c;
	struct stat sb;
	char big[300];
	int64_t r;
	void *v;
	size_t len;
	int i;

	(void)state;
	if (g_tcp) {
		skip();
	}
	snprintf(tpath, sizeof(tpath), "%s.compact", g_path);
	snprintf(ep, sizeof(ep), "file://%s", tpath);
	unlink(tpath);
	setenv("CRUN_STORE_FILE_COMPACT_BYTES", "65536", 1);
	a = open_with(ep, "c/", 30000);
	b = open_with(ep, "c/", 30000);
	memset(ad, 0, sizeof(ad));
	for (i = 0; i < COMPACT_THREADS; i++) {
		ad[i].st = open_with(ep, "c/", 30000);
	}
	unsetenv("CRUN_STORE_FILE_COMPACT_BYTES");

	assert_int_equal(sets(a, "gone", "x"), 0);
	assert_int_equal(crun_store_delete(a, "gone"), 0);
	assert_int_equal(crun_store_append(a, "log", "ab", 2), 0);
	assert_int_equal(crun_store_append(b, "log", "cd", 2), 0);
	assert_int_equal(crun_store_set_ttl(a, "ttl", "t", 1, 600000), 0);
	assert_int_equal(crun_store_set_ttl(a, "short", "t", 1, 1), 0);
	for (i = 0; i < COMPACT_THREADS; i++) {
		assert_int_equal(pthread_create(&th[i], NULL, compact_adder_main, &ad[i]), 0);
	}
	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (i = 0; i < 400; i++) {
		char k[16];

		snprintf(k, sizeof(k), "k%d", i % 10);
		assert_int_equal(sets(a, k, big), 0);
	}
	for (i = 0; i < COMPACT_THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(ad[i].rc, 0);
		crun_store_close(ad[i].st);
	}
	/* b was opened before every compaction and has not looked since its append. */
	assert_int_equal(crun_store_add(b, "ccount", 0, &r), 0);
	assert_int_equal(r, COMPACT_THREADS * COMPACT_ADDS);
	want_value(b, "log", "abcd");
	want_value(b, "ttl", "t");
	want_value(b, "k9", big);
	assert_int_equal(crun_store_get(b, "gone", &v, &len), -ENOENT);
	assert_int_equal(crun_store_get(b, "short", &v, &len), -ENOENT);
	assert_int_equal(sets(b, "fromb", "1"), 0);
	want_value(a, "fromb", "1");
	/* The file holds about the live keys, not the whole history (about 450 KB of writes). */
	assert_int_equal(stat(tpath, &sb), 0);
	assert_true(sb.st_size < 150000);
	/* A fresh handle replays the compacted file to the same state. */
	c = open_with(ep, "c/", 30000);
	want_value(c, "log", "abcd");
	want_value(c, "k0", big);
	assert_int_equal(crun_store_add(c, "ccount", 1, &r), 0);
	assert_int_equal(r, COMPACT_THREADS * COMPACT_ADDS + 1);
	crun_store_close(c);
	crun_store_close(b);
	crun_store_close(a);
	unlink(tpath);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(set_get_roundtrip),
		cmocka_unit_test(get_missing_is_enoent),
		cmocka_unit_test(wait_all_times_out_within_bounds),
		cmocka_unit_test(wait_any_times_out_within_bounds),
		cmocka_unit_test(wait_returns_at_once_when_present),
		cmocka_unit_test(wait_woken_by_second_handle),
		cmocka_unit_test(add_from_8_threads_is_exact),
		cmocka_unit_test(add_from_processes_is_exact),
		cmocka_unit_test(one_write_wakes_many_waiters),
		cmocka_unit_test(multi_set_is_atomic_for_readers),
		cmocka_unit_test(add_semantics),
		cmocka_unit_test(compare_set_race_has_one_winner),
		cmocka_unit_test(compare_set_semantics),
		cmocka_unit_test(delete_semantics),
		cmocka_unit_test(check_semantics),
		cmocka_unit_test(num_keys_counts_every_prefix),
		cmocka_unit_test(append_semantics),
		cmocka_unit_test(multi_get_with_absent_keys),
		cmocka_unit_test(multi_set_then_get),
		cmocka_unit_test(ttl_key_expires),
		cmocka_unit_test(huge_ttl_does_not_overflow),
		cmocka_unit_test(append_past_value_limit_is_emsgsize),
		cmocka_unit_test(prefix_isolation_and_clone),
		cmocka_unit_test(limits_are_emsgsize),
		cmocka_unit_test(bad_endpoints_are_einval),
		cmocka_unit_test(endpoint_spellings_reach_the_same_store),
		cmocka_unit_test(dead_endpoint_times_out),
		cmocka_unit_test(torn_last_record_is_recovered),
		cmocka_unit_test(hostile_record_lengths_are_rejected),
		cmocka_unit_test(held_lock_times_out),
		cmocka_unit_test(file_compaction_keeps_every_key),
	};
	int filter_at;

	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "file") == 0) {
		g_tcp = false;
		filter_at = 2;
	} else if (argc >= 3 && strcmp(argv[1], "tcp") == 0) {
		g_tcp = true;
		g_rdzvd = argv[2];
		filter_at = 3;
	} else {
		fprintf(stderr, "usage: %s file [FILTER] | tcp PATH/TO/crun-rdzvd [FILTER]\n",
			argv[0]);
		return 2;
	}
	if (argc > filter_at) {
		cmocka_set_test_filter(argv[filter_at]);
	}
	return cmocka_run_group_tests_name(g_tcp ? "conformance-tcp" : "conformance-file", tests,
					   group_setup, group_teardown);
}
