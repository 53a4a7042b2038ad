/* SPDX-License-Identifier: MIT */
/* tests/conformance/races.c: waits, and races between handles, threads and processes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/store_conf.h"
#include "tests/conformance/conformance.h"

void wait_all_times_out_within_bounds(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"present", "absent"};
	int64_t t0, dt;

	(void)state;
	assert_int_equal(sets(st, "present", "1"), 0);
	t0 = crun_now_ms();
	assert_int_equal(crun_store_wait(st, keys, 2, 300), -ETIMEDOUT);
	dt = crun_now_ms() - t0;
	assert_true(dt >= 290);
	assert_true(dt < 3000);
	/* timeout 0 checks once */
	t0 = crun_now_ms();
	assert_int_equal(crun_store_wait(st, keys, 2, 0), -ETIMEDOUT);
	assert_true(crun_now_ms() - t0 < 2000);
	crun_store_close(st);
}

void wait_any_times_out_within_bounds(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"x", "y", "z"};
	int64_t t0, dt;

	(void)state;
	t0 = crun_now_ms();
	assert_int_equal(crun_store_wait_any(st, keys, 3, 250), -ETIMEDOUT);
	dt = crun_now_ms() - t0;
	assert_true(dt >= 240);
	assert_true(dt < 3000);
	crun_store_close(st);
}

void wait_returns_at_once_when_present(void **state)
{
	struct crun_store *st = open_fresh();
	const char *keys[] = {"a", "b", "c"};
	int64_t t0;

	(void)state;
	assert_int_equal(sets(st, "a", "1"), 0);
	assert_int_equal(sets(st, "b", "2"), 0);
	assert_int_equal(sets(st, "c", "3"), 0);
	t0 = crun_now_ms();
	assert_int_equal(crun_store_wait(st, keys, 3, 20000), 0);
	assert_int_equal(crun_store_wait(st, keys, 3, 0), 0);
	assert_true(crun_now_ms() - t0 < 5000);
	assert_int_equal(crun_store_delete(st, "a"), 0);
	assert_int_equal(crun_store_delete(st, "b"), 0);
	/* ANY reports the index of a key that exists. */
	assert_int_equal(crun_store_wait_any(st, keys, 3, 20000), 2);
	assert_int_equal(sets(st, "a", "1"), 0);
	assert_int_equal(crun_store_wait_any(st, keys, 3, 20000), 0);
	crun_store_close(st);
}

/*
 * From the write to the woken wait's return: milliseconds. The bound leaves room for a loaded
 * 2-core machine and still fails when waking slows to seconds (a lost wake-up fails on its
 * own: the wait times out).
 */
#define WAKE_MS 2000

/* How long the waits may take to park: only a stuck store needs more. */
#define PARK_MS 10000

struct writer_arg {
	struct crun_store *st;
	const char *key;
	unsigned parked; /* write once this many waits have parked */
	int park_rc;
	int64_t wrote_at;
	int rc;
};

static void *writer_main(void *p)
{
	struct writer_arg *a = p;

	/* Write only once the main thread's wait is held, so that the write has to wake it. */
	a->park_rc = park_watch_until(a->parked, PARK_MS);
	a->wrote_at = crun_now_ms();
	a->rc = sets(a->st, a->key, "go");
	return NULL;
}

void wait_woken_by_second_handle(void **state)
{
	struct crun_store *st = open_fresh();
	struct writer_arg a = {.key = "target"};
	const char *all[] = {"target"};
	const char *any[] = {"never", "target"};
	pthread_t th;
	int64_t woke;
	int rc;

	(void)state;
	assert_int_equal(crun_store_clone(st, "", &a.st), 0);
	assert_string_equal(crun_store_prefix(a.st), crun_store_prefix(st));
	a.parked = park_watch_begin() + 1;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	rc = crun_store_wait(st, all, 1, 20000);
	woke = crun_now_ms();
	pthread_join(th, NULL);
	park_watch_end();
	assert_int_equal(a.park_rc, 0);
	assert_int_equal(rc, 0);
	assert_int_equal(a.rc, 0);
	assert_true(woke - a.wrote_at < WAKE_MS);
	want_value(st, "target", "go");

	/* The same with ANY: woken by the write, reports the index of the key written. */
	assert_int_equal(crun_store_delete(st, "target"), 0);
	a.parked = park_watch_begin() + 1;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	rc = crun_store_wait_any(st, any, 2, 20000);
	woke = crun_now_ms();
	pthread_join(th, NULL);
	park_watch_end();
	assert_int_equal(a.park_rc, 0);
	assert_int_equal(rc, 1);
	assert_int_equal(a.rc, 0);
	assert_true(woke - a.wrote_at < WAKE_MS);

	/* And the other way: what this handle writes, the clone sees. */
	assert_int_equal(sets(st, "ready", "1"), 0);
	want_value(a.st, "ready", "1");
	crun_store_close(a.st);
	crun_store_close(st);
}

/*
 * store_wait_any_get() (store_conf.h): the index of the key that ended the wait and its value,
 * whether the key was there at once (etcd: the wait's own read) or written while the wait was
 * parked (etcd: the watch event), with no get after it on etcd; elsewhere a wait and a get.
 */
void wait_any_get_returns_the_value(void **state)
{
	struct crun_store *st = open_fresh();
	struct writer_arg a = {.key = "late"};
	const char *now[] = {"absent", "here"};
	const char *later[] = {"never", "late"};
	void *v = NULL;
	size_t len = 0;
	pthread_t th;
	int rc;

	(void)state;
	assert_int_equal(sets(st, "here", "value now"), 0);
	assert_int_equal(store_wait_any_get(st, now, 2, 2, &v, &len, 20000, NULL), 1);
	assert_non_null(v);
	assert_int_equal(len, 9);
	assert_memory_equal(v, "value now", 10); /* NUL-terminated too */
	free(v);
	v = NULL;
	/* A key past the first @nval: its index, no value. */
	assert_int_equal(store_wait_any_get(st, now, 2, 1, &v, &len, 20000, NULL), 1);
	assert_null(v);
	assert_int_equal(store_wait_any_get(st, later, 2, 2, &v, &len, 200, NULL), -ETIMEDOUT);
	assert_null(v);
	/* Parked first, then woken by another handle's write: its value. */
	assert_int_equal(crun_store_clone(st, "", &a.st), 0);
	a.parked = park_watch_begin() + 1;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	rc = store_wait_any_get(st, later, 2, 2, &v, &len, 20000, NULL);
	pthread_join(th, NULL);
	park_watch_end();
	assert_int_equal(a.park_rc, 0);
	assert_int_equal(a.rc, 0);
	assert_int_equal(rc, 1);
	assert_non_null(v);
	assert_int_equal(len, 2);
	assert_memory_equal(v, "go", 3);
	free(v);
	crun_store_close(a.st);
	crun_store_close(st);
}

/*
 * crun_store_wait_get(), the blocking get: a key already there (an empty value too), a key
 * written by another handle while the get is parked (its value), and a deadline.
 */
void wait_get_blocks_until_the_key_exists(void **state)
{
	struct crun_store *st = open_fresh();
	struct writer_arg a = {.key = "wg.late"};
	void *v = NULL;
	size_t len = 7;
	pthread_t th;
	int rc;

	(void)state;
	assert_int_equal(sets(st, "wg.here", "now"), 0);
	assert_int_equal(crun_store_wait_get(st, "wg.here", &v, &len, 20000), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(v, "now", 4);
	free(v);
	assert_int_equal(crun_store_set(st, "wg.empty", "", 0), 0);
	assert_int_equal(crun_store_wait_get(st, "wg.empty", &v, &len, 20000), 0);
	assert_int_equal(len, 0);
	assert_non_null(v);
	free(v);
	v = NULL;
	assert_int_equal(crun_store_wait_get(st, "wg.never", &v, &len, 200), -ETIMEDOUT);
	assert_null(v);
	assert_int_equal(crun_store_clone(st, "", &a.st), 0);
	a.parked = park_watch_begin() + 1;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	rc = crun_store_wait_get(st, "wg.late", &v, &len, 20000);
	pthread_join(th, NULL);
	park_watch_end();
	assert_int_equal(a.park_rc, 0);
	assert_int_equal(a.rc, 0);
	assert_int_equal(rc, 0);
	assert_int_equal(len, 2);
	assert_memory_equal(v, "go", 3);
	free(v);
	crun_store_close(a.st);
	crun_store_close(st);
}

/* One store_wait_any_get() of a series with a mark; its index, and its value in *@v. */
static int mark_wait(struct crun_store *st, const char *const *keys, size_t n, int ms,
		     struct store_wait_mark *mk, char *v, size_t cap)
{
	void *val = NULL;
	size_t len = 0;
	int rc = store_wait_any_get(st, keys, n, n, &val, &len, ms, mk);

	snprintf(v, cap, "%s", val != NULL ? (char *)val : "");
	free(val);
	return rc;
}

/*
 * A series of waits with one mark (struct store_wait_mark; etcd resumes its watch instead of
 * reading): what was written between two waits is seen by the next one, a wait woken by one
 * key of a multi_set leaves the other key of the same write to the next, and so does a wait
 * whose first read found both.
 */
void wait_series_with_a_mark_misses_nothing(void **state)
{
	struct crun_store *st = open_fresh(), *other;
	const char *three[] = {"ms.a", "ms.b", "ms.c"}, *both[] = {"ms.b", "ms.a"};
	const char *vals[] = {"B", "A"};
	const size_t lens[] = {1, 1};
	struct store_wait_mark mk = {0};
	char v[16];

	(void)state;
	assert_int_equal(crun_store_clone(st, "", &other), 0);
	assert_int_equal(mark_wait(st, three, 3, 200, &mk, v, sizeof(v)), -ETIMEDOUT);
	assert_int_equal(sets(other, "ms.c", "C"), 0); /* between the waits */
	assert_int_equal(mark_wait(st, three, 3, 20000, &mk, v, sizeof(v)), 2);
	assert_string_equal(v, "C");
	/* ms.b and ms.a in one write: one wakes the wait, the next wait gets the other. */
	assert_int_equal(crun_store_multi_set(other, both, 2, (const void *const *)vals, lens), 0);
	assert_int_equal(mark_wait(st, three, 2, 20000, &mk, v, sizeof(v)) >= 0, 1);
	if (strcmp(v, "A") == 0) {
		assert_int_equal(mark_wait(st, three + 1, 1, 5000, &mk, v, sizeof(v)), 0);
		assert_string_equal(v, "B");
	} else {
		assert_string_equal(v, "B");
		assert_int_equal(mark_wait(st, three, 1, 5000, &mk, v, sizeof(v)), 0);
		assert_string_equal(v, "A");
	}
	/* A new series whose read finds both: the next wait must read again to see the other. */
	mk.rev = 0;
	assert_int_equal(mark_wait(st, three, 2, 20000, &mk, v, sizeof(v)), 0);
	assert_string_equal(v, "A");
	assert_int_equal(mark_wait(st, three + 1, 1, 5000, &mk, v, sizeof(v)), 0);
	assert_string_equal(v, "B");
	crun_store_close(other);
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

void add_from_8_threads_is_exact(void **state)
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

#define PROC_CHILDREN 4

#define PROC_EACH 300

/* Separate processes (separate connections, or separate opens of the file) add at once. */
void add_from_processes_is_exact(void **state)
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
	end = crun_now_ms() + 60000;
	while (done < PROC_CHILDREN) {
		for (i = 0; i < PROC_CHILDREN; i++) {
			if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
				assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
				pids[i] = 0;
				done++;
			}
		}
		if (crun_now_ms() > end) {
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
	int64_t woke;
};

static void *waiter_main(void *p)
{
	struct waiter *w = p;
	const char *keys[] = {"bell"};

	w->rc = crun_store_wait(w->st, keys, 1, 20000);
	w->woke = crun_now_ms();
	return NULL;
}

/* One write wakes every handle waiting on the key. */
void one_write_wakes_many_waiters(void **state)
{
	struct crun_store *st = open_fresh();
	struct waiter w[WAITERS];
	pthread_t th[WAITERS];
	unsigned base;
	int64_t t0, last = 0;
	int i, park_rc;

	(void)state;
	memset(w, 0, sizeof(w));
	for (i = 0; i < WAITERS; i++) {
		assert_int_equal(crun_store_clone(st, "", &w[i].st), 0);
		w[i].rc = 1;
	}
	base = park_watch_begin();
	for (i = 0; i < WAITERS; i++) {
		assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
	}
	/* Ring only once every waiter is held, so that the write has to wake all of them. */
	park_rc = park_watch_until(base + WAITERS, PARK_MS);
	t0 = crun_now_ms();
	assert_int_equal(sets(st, "bell", "ring"), 0);
	for (i = 0; i < WAITERS; i++) {
		pthread_join(th[i], NULL);
		last = w[i].woke > last ? w[i].woke : last;
	}
	park_watch_end();
	if (park_rc < 0) {
		fail_msg("fewer than %d waits parked within %d ms", WAITERS, PARK_MS);
	}
	for (i = 0; i < WAITERS; i++) {
		assert_int_equal(w[i].rc, 0);
		crun_store_close(w[i].st);
	}
	assert_true(last - t0 < WAKE_MS);
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
void multi_set_is_atomic_for_readers(void **state)
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

void compare_set_race_has_one_winner(void **state)
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
