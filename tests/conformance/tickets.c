/* SPDX-License-Identifier: MIT */
/*
 * tests/conformance/tickets.c: store_ticket() and store_ticket_count() (store_conf.h), the
 * counter a round's joins and finishes bump by one at once: on etcd the key's version (one
 * blind put each), elsewhere add(key, 1).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/store_conf.h"
#include "tests/conformance/conformance.h"

#define TICKET_THREADS 16
#define TICKET_EACH 40

void ticket_semantics(void **state)
{
	struct crun_store *st = open_fresh();
	int64_t n = -1;

	(void)state;
	assert_true(store_has_tickets(st) == (g_backend == CONF_ETCD));
	assert_int_equal(store_ticket_count(st, "t", &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(store_ticket(st, "t", &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(store_ticket(st, "t", &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(store_ticket_count(st, "t", &n), 0);
	assert_int_equal(n, 2);
	crun_store_close(st);
}

struct ticketer {
	struct crun_store *st;
	int rc;
	int64_t got[TICKET_EACH];
};

static void *ticketer_main(void *p)
{
	struct ticketer *t = p;
	int i;

	for (i = 0; i < TICKET_EACH && t->rc == 0; i++) {
		t->rc = store_ticket(t->st, "seats", &t->got[i]);
	}
	return NULL;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Many joiners at once, one handle each: every ticket distinct, together exactly 1..N. */
void tickets_at_once_are_distinct_and_consecutive(void **state)
{
	struct crun_store *st = open_fresh();
	struct ticketer *t = calloc(TICKET_THREADS, sizeof(*t));
	int64_t *all = calloc(TICKET_THREADS * TICKET_EACH, sizeof(*all)), n;
	pthread_t th[TICKET_THREADS];
	int i, k;

	(void)state;
	assert_true(t != NULL && all != NULL);
	for (i = 0; i < TICKET_THREADS; i++) {
		assert_int_equal(crun_store_clone(st, "", &t[i].st), 0);
	}
	for (i = 0; i < TICKET_THREADS; i++) {
		assert_int_equal(pthread_create(&th[i], NULL, ticketer_main, &t[i]), 0);
	}
	for (i = 0; i < TICKET_THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].rc, 0);
		for (k = 0; k < TICKET_EACH; k++) {
			all[i * TICKET_EACH + k] = t[i].got[k];
			/* One handle's tickets rise: the store never hands one out twice. */
			assert_true(k == 0 || t[i].got[k] > t[i].got[k - 1]);
		}
		crun_store_close(t[i].st);
	}
	qsort(all, TICKET_THREADS * TICKET_EACH, sizeof(*all), cmp64);
	for (i = 0; i < TICKET_THREADS * TICKET_EACH; i++) {
		if (all[i] != i + 1) {
			fail_msg("ticket %d of %d is %lld, not %d", i + 1,
				 TICKET_THREADS * TICKET_EACH, (long long)all[i], i + 1);
		}
	}
	assert_int_equal(store_ticket_count(st, "seats", &n), 0);
	assert_int_equal(n, TICKET_THREADS * TICKET_EACH);
	free(t);
	free(all);
	crun_store_close(st);
}

/*
 * An older crun counts a round with add (a number in the key). On etcd a ticket that meets
 * one is refused with a message naming the key and why, and an add that meets a ticket
 * counter fails (not an integer): one round is never counted two ways unnoticed. Elsewhere a
 * ticket is an add of 1, so both count the same number.
 */
void old_counter_met_by_a_ticket_is_named(void **state)
{
	struct crun_store *st = open_fresh();
	const char *msg;
	int64_t n = 0;

	(void)state;
	assert_int_equal(crun_store_add(st, "joined", 5, &n), 0);
	if (g_backend != CONF_ETCD) {
		assert_int_equal(store_ticket(st, "joined", &n), 0);
		assert_int_equal(n, 6);
		assert_int_equal(store_ticket_count(st, "joined", &n), 0);
		assert_int_equal(n, 6);
		crun_store_close(st);
		return;
	}
	assert_int_equal(store_ticket(st, "joined", &n), CRUN_EVERSION);
	msg = store_last_error(st);
	if (strstr(msg, "joined: the key holds \"5\", not a ticket counter") == NULL ||
	    strstr(msg, "older crun") == NULL) {
		fail_msg("the refusal does not name the key and the old counter: \"%s\"", msg);
	}
	/* Refused without writing: the older agents' count is intact, and reading it as a
	 * ticket count is refused the same way. */
	assert_int_equal(crun_store_add(st, "joined", 0, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(store_ticket_count(st, "joined", &n), CRUN_EVERSION);
	/* The other way round: an older agent's add on a ticket counter fails. */
	assert_int_equal(store_ticket(st, "seats", &n), 0);
	assert_int_equal(crun_store_add(st, "seats", 1, &n), -EINVAL);
	crun_store_close(st);
}
