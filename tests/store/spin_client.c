/* SPDX-License-Identifier: MIT */
/*
 * tests/store/spin_client.c: the client of tests/store/client_spin.sh, which runs it under
 * strace to see when the store client spins for its reply (rendezvous/store/client_tcp_io.c,
 * "The reply spin").
 *
 *   spin_client ENDPOINT TOKEN_FILE fast N     N adds on one handle, back to back
 *   spin_client ENDPOINT TOKEN_FILE slow N MS  N waits on one handle, each for a key that a
 *                                              second handle (another thread) sets MS after
 *                                              the one before
 *
 * With CRUN_STORE_TLS_CA set, it speaks TLS, verifying the store against that CA.
 * Exits 0 when every operation succeeded, else 1 with the store's message.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <crun/store.h>

static const char *endpoint, *token_file;
static char prefix[64]; /* this run's keys: spin-PID/ */
static int n_ops, delay_ms;

static struct crun_store *open_store(void)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	struct crun_store *st = NULL;
	char err[512];

	o.endpoint = endpoint;
	o.token_file = token_file;
	o.prefix = prefix;
	o.tls_ca = getenv("CRUN_STORE_TLS_CA"); /* NULL: plain TCP */
	o.connect_timeout_ms = 20000;
	o.timeout_ms = 20000;
	if (crun_store_open(&o, &st, err, sizeof(err)) != 0) {
		fprintf(stderr, "spin_client: open: %s\n", err);
		exit(1);
	}
	return st;
}

static void fail(struct crun_store *st, const char *what)
{
	fprintf(stderr, "spin_client: %s: %s\n", what, crun_store_last_error(st));
	exit(1);
}

/* The second handle: sets key i delay_ms after key i - 1, so each wait lasts about that. */
static void *setter(void *arg)
{
	struct crun_store *st = open_store();
	struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
	char key[32];
	int i;

	(void)arg;
	for (i = 0; i < n_ops; i++) {
		nanosleep(&ts, NULL);
		snprintf(key, sizeof(key), "k/%d", i);
		if (crun_store_set(st, key, "v", 1) != 0) {
			fail(st, "set");
		}
	}
	crun_store_close(st);
	return NULL;
}

int main(int argc, char **argv)
{
	struct crun_store *st;
	pthread_t thr;
	char key[32];
	int64_t v;
	int i;

	if (argc < 5 || (strcmp(argv[3], "fast") != 0 && strcmp(argv[3], "slow") != 0) ||
	    (strcmp(argv[3], "slow") == 0 && argc < 6)) {
		fprintf(stderr, "usage: spin_client ENDPOINT TOKEN_FILE fast N | slow N MS\n");
		return 2;
	}
	endpoint = argv[1];
	token_file = argv[2];
	n_ops = atoi(argv[4]);
	snprintf(prefix, sizeof(prefix), "spin-%d/", (int)getpid());
	st = open_store();
	if (strcmp(argv[3], "fast") == 0) {
		for (i = 0; i < n_ops; i++) {
			if (crun_store_add(st, "counter", 1, &v) != 0) {
				fail(st, "add");
			}
		}
		crun_store_close(st);
		return 0;
	}
	delay_ms = atoi(argv[5]);
	if (pthread_create(&thr, NULL, setter, NULL) != 0) {
		return 1;
	}
	for (i = 0; i < n_ops; i++) {
		snprintf(key, sizeof(key), "k/%d", i);
		if (crun_store_wait(st, (const char *const[]){key}, 1, 20000) != 0) {
			fail(st, "wait");
		}
	}
	pthread_join(thr, NULL);
	crun_store_close(st);
	return 0;
}
