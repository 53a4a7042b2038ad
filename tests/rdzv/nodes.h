/* SPDX-License-Identifier: MIT */
/* tests/rdzv/nodes.h: agents played by threads (struct node) for the cmocka rendezvous tests. */
#ifndef CRUN_TESTS_RDZV_NODES_H
#define CRUN_TESTS_RDZV_NODES_H

/* cmocka 1.x wants these before cmocka.h */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <pthread.h>
#include <stdbool.h>

#include <crun/store.h>

#include "rendezvous/rdzv.h"
#include "tests/rdzv/harness.h"

#define MAX_NODES 8

struct node {
	int idx;
	struct rdzv *r;
	struct rdzv_conf conf;
	char addr[32], host[32];
	struct rdzv_assignment a;
	struct crun_diag d;
	int rc;
	pthread_t thr;
	bool thr_live;
	/* Events from the watch thread. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nev;
	enum rdzv_event ev;
	char detail[512];
};

/* The store of this run (started once by nodes_main()) and what the current test uses. */
extern struct store_fixture fx;
extern const char *backend;     /* "tcp", "file" or "etcd" */
extern const char *server_path; /* crun-rdzvd or etcd, for tests that start a store of their own */
extern char endpoint[600];     /* this test's store endpoint */
extern char run_id[64];	       /* this test's run id */

/** cmocka setup: every test gets its own run id (and, on the file backend, its own file). */
int per_test(void **state);

/** rdzv_event_cb for rdzv_watch_start(): records the first event in the node (@arg). */
void on_event(void *arg, enum rdzv_event ev, const char *detail);
/** The first event within @timeout_ms, or -1. */
int wait_event(struct node *n, int timeout_ms);

/* Capture this process's stderr (log lines) into a pipe while a test runs. */
struct capture {
	int saved, rd;
	char buf[65536];
};

void capture_start(struct capture *c);
/** Restore stderr, echo what was captured there, and return it (NUL-terminated, in @c). */
const char *capture_stop(struct capture *c);

/** A node with fast timeouts; @nproc workers; index @idx advertises 127.0.0.(idx+1). */
void node_init(struct node *n, int idx, int min, int max, int nproc);
void node_open(struct node *n);
void node_close(struct node *n);

/** rdzv_next_round() on a thread of its own; join_wait() joins it and returns its result. */
void join_async(struct node *n);
int join_wait(struct node *n);
/** All of @nodes join at once; every one must succeed. */
void join_all(struct node *nodes, int k);
/** The assignments of @k nodes form one consistent round. */
void check_round(struct node *nodes, int k, int round, int restarts);
/** rdzv_finish() (30 s) on a thread of its own: join_wait() returns its result. */
void finish_async(struct node *n);
/** All of @nodes finish at once; every one must succeed. */
void finish_all(struct node *nodes, int k);

/** A store handle on this run's rendezvous keys ("rdzv/<run id>/"): crun_store_close(). */
struct crun_store *run_store_open(int timeout_ms);
/** Wait (up to @timeout_ms) until the rendezvous key @key of this run exists; asserts it. */
void run_store_wait(const char *key, int timeout_ms);

/**
 * main() of a test program: "PROG tcp CRUN-RDZVD [FILTER]" or "PROG file [FILTER]". Starts
 * the store, runs @tests as group "rdzv-<area>-<backend>", stops the store.
 */
int nodes_main(int argc, char **argv, const char *area, const struct CMUnitTest *tests, size_t n);

#endif
