/* SPDX-License-Identifier: MIT */
/*
 * tests/store/test_pipeline.c: sets that do not wait for their replies (crun_store_set_async,
 * crun_store_flush; issue 23) against a real crun-rdzvd: their order, a refused one named by
 * the next call, and a server lost with sets unanswered reported, never taken for a success.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/store.h>

#include "tests/store/helpers.h"

/* More than the 1024 sets a handle leaves unanswered: the client drains on the way. */
#define MANY 3000

static struct daemon d;

static int client_open(struct crun_store **st)
{
	return daemon_client_open(&d, 20000, st);
}

static void expect_stored(struct crun_store *st, const char *key, const char *want)
{
	void *v = NULL;
	size_t n = 0;

	assert_int_equal(crun_store_get(st, key, &v, &n), 0);
	assert_string_equal((const char *)v, want);
	assert_int_equal(n, strlen(want));
	free(v);
}

/* Many sets of one key and of their own keys: every one stored, the last one last. */
static void async_sets_arrive_in_order(void **state)
{
	static const char *const args[] = {"--insecure", NULL};
	struct crun_store *st = NULL, *other = NULL;
	char key[64], val[32];
	int64_t keys = 0;
	int i;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	assert_int_equal(client_open(&st), 0);
	assert_int_equal(client_open(&other), 0);
	for (i = 0; i < MANY; i++) {
		snprintf(key, sizeof(key), "own/%d", i);
		snprintf(val, sizeof(val), "%d", i);
		if (crun_store_set_async(st, "seq", val, strlen(val)) != 0 ||
		    crun_store_set_async(st, key, val, strlen(val)) != 0) {
			fail_msg("set %d: %s", i, crun_store_last_error(st));
		}
	}
	/* The next call on the handle comes after them on the connection. */
	snprintf(val, sizeof(val), "%d", MANY - 1);
	expect_stored(st, "seq", val);
	assert_int_equal(crun_store_num_keys(st, &keys), 0);
	assert_int_equal(keys, MANY + 1);
	/* Another connection sees them too, each with its own value. */
	for (i = 0; i < MANY; i += 97) {
		snprintf(key, sizeof(key), "own/%d", i);
		snprintf(val, sizeof(val), "%d", i);
		expect_stored(other, key, val);
	}
	assert_int_equal(crun_store_set_async(st, "last", "x", 1), 0);
	assert_int_equal(crun_store_flush(st), 0);
	expect_stored(other, "last", "x");
	assert_int_equal(crun_store_flush(st), 0); /* nothing owed: nothing to say */
	crun_store_close(st);
	crun_store_close(other);
	assert_int_equal(daemon_stop(&d, SIGTERM), 0);
}

/*
 * The scope quota refuses two of ten sets: the next call (a get) returns the first refusal,
 * naming the key and the server's words and counting the other; the handle goes on working.
 * A refusal found by crun_store_flush() is returned by it.
 */
static void refused_async_set_is_named_by_the_next_call(void **state)
{
	static const char *const args[] = {"--insecure", "--scope-max-keys", "8", NULL};
	struct crun_store *st = NULL;
	const char *msg;
	void *v = NULL;
	char key[64];
	int i, rc;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	assert_int_equal(client_open(&st), 0);
	for (i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "rdzv/flood/%d", i);
		assert_int_equal(crun_store_set_async(st, key, "v", 1), 0);
	}
	rc = crun_store_get(st, "rdzv/flood/0", &v, NULL);
	free(v);
	msg = crun_store_last_error(st);
	print_message("get after the sets: %d: %s\n", rc, msg);
	assert_true(rc < 0);
	assert_non_null(strstr(msg, "SET \"rdzv/flood/8\" (sent without waiting) was refused"));
	assert_non_null(strstr(msg, "the scope quota of run \"flood\" is full: 8 keys"));
	assert_non_null(strstr(msg, "(and 1 more sets sent without waiting failed)"));
	/* Reported once: the handle works again, and the accepted sets are there. */
	expect_stored(st, "rdzv/flood/7", "v");
	assert_int_equal(crun_store_set_async(st, "rdzv/flood/x", "v", 1), 0);
	rc = crun_store_flush(st);
	msg = crun_store_last_error(st);
	print_message("flush: %d: %s\n", rc, msg);
	assert_true(rc < 0);
	assert_non_null(strstr(msg, "SET \"rdzv/flood/x\" (sent without waiting) was refused"));
	assert_int_equal(crun_store_flush(st), 0);
	crun_store_close(st);
	assert_int_equal(daemon_stop(&d, SIGTERM), 0);
}

/*
 * The server stops reading (SIGSTOP), takes sets into its socket, and is killed: flush says
 * they may or may not be stored, naming the first; nothing is resent, and the next call
 * (nothing listens any more) fails too.
 */
static void server_killed_with_sets_unanswered_is_an_error(void **state)
{
	static const char *const args[] = {"--insecure", NULL};
	struct crun_store *st = NULL;
	const char *msg;
	char key[64];
	int i, rc;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	assert_int_equal(client_open(&st), 0);
	assert_int_equal(crun_store_set(st, "before", "1", 1), 0);
	assert_int_equal(kill(d.pid, SIGSTOP), 0);
	for (i = 0; i < 50; i++) {
		snprintf(key, sizeof(key), "lost/%d", i);
		assert_int_equal(crun_store_set_async(st, key, "v", 1), 0);
	}
	assert_int_equal(daemon_stop(&d, SIGKILL), SIGKILL); /* a stopped process dies of it */
	rc = crun_store_flush(st);
	msg = crun_store_last_error(st);
	print_message("flush: %d: %s\n", rc, msg);
	assert_true(rc < 0);
	assert_non_null(strstr(msg, "SET \"lost/0\" and the later sets (sent without waiting): "
				    "the connection was lost before the store answered, so they "
				    "may or may not be stored"));
	rc = crun_store_ping(st);
	print_message("ping: %d: %s\n", rc, crun_store_last_error(st));
	assert_true(rc < 0);
	crun_store_close(st);
}

/* A test that failed half-way leaves no daemon behind (its stdout would hold meson). */
static int stop_daemon(void **state)
{
	(void)state;
	if (d.pid > 0) {
		daemon_stop(&d, SIGKILL);
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(async_sets_arrive_in_order, stop_daemon),
		cmocka_unit_test_teardown(refused_async_set_is_named_by_the_next_call, stop_daemon),
		cmocka_unit_test_teardown(server_killed_with_sets_unanswered_is_an_error,
					  stop_daemon),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
