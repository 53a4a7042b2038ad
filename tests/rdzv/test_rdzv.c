/* SPDX-License-Identifier: MIT */
/* tests/rdzv/test_rdzv.c: rendezvous rounds played by agent threads against a real store. */
#include <stdarg.h> /* cmocka 1.x wants these before cmocka.h */
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>

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

static struct store_fixture fx;
static const char *backend = "tcp";
static const char *rdzvd_path;
static char endpoint[600];
static char run_id[64];
static int test_seq;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Every test gets its own run id (and, on the file backend, its own file). */
static int per_test(void **state)
{
	char name[32];

	(void)state;
	test_seq++;
	snprintf(name, sizeof(name), "store%d", test_seq);
	fixture_endpoint(&fx, name, endpoint, sizeof(endpoint));
	snprintf(run_id, sizeof(run_id), "job%d-%d", (int)getpid(), test_seq);
	return 0;
}

static void on_event(void *arg, enum rdzv_event ev, const char *detail)
{
	struct node *n = arg;

	pthread_mutex_lock(&n->mu);
	if (n->nev++ == 0) {
		n->ev = ev;
		snprintf(n->detail, sizeof(n->detail), "%s", detail != NULL ? detail : "");
	}
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

/* The first event within @timeout_ms, or -1. */
static int wait_event(struct node *n, int timeout_ms)
{
	struct timespec ts;
	int ev = -1;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&n->mu);
	while (n->nev == 0) {
		if (pthread_cond_timedwait(&n->cv, &n->mu, &ts) != 0) {
			break;
		}
	}
	if (n->nev > 0) {
		ev = (int)n->ev;
	}
	pthread_mutex_unlock(&n->mu);
	return ev;
}

/* Capture this process's stderr (log lines) into a pipe while a test runs. */
struct capture {
	int saved, rd;
	char buf[65536];
};

static void capture_start(struct capture *c)
{
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	c->saved = dup(STDERR_FILENO);
	assert_true(c->saved >= 0);
	assert_true(dup2(p[1], STDERR_FILENO) >= 0);
	close(p[1]);
	c->rd = p[0];
}

/* Restore stderr, echo what was captured there, and return it (NUL-terminated). */
static const char *capture_stop(struct capture *c)
{
	size_t n = 0;
	ssize_t got;

	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	while (n + 1 < sizeof(c->buf) &&
	       (got = read(c->rd, c->buf + n, sizeof(c->buf) - 1 - n)) > 0) {
		n += (size_t)got;
	}
	close(c->rd);
	c->buf[n] = '\0';
	fputs(c->buf, stderr);
	return c->buf;
}

/* A node with fast timeouts; @nproc workers; index @idx advertises 127.0.0.(idx+1). */
static void node_init(struct node *n, int idx, int min, int max, int nproc)
{
	memset(n, 0, sizeof(*n));
	n->idx = idx;
	pthread_mutex_init(&n->mu, NULL);
	pthread_cond_init(&n->cv, NULL);
	snprintf(n->addr, sizeof(n->addr), "127.0.0.%d", idx + 1);
	snprintf(n->host, sizeof(n->host), "node%d", idx);
	rdzv_conf_defaults(&n->conf);
	n->conf.run_id = run_id;
	n->conf.min_nodes = min;
	n->conf.max_nodes = max;
	n->conf.local_world_size = nproc;
	n->conf.advertise_addr = n->addr;
	n->conf.hostname = n->host;
	n->conf.max_restarts = 3;
	n->conf.join_timeout_ms = 30000;
	n->conf.last_call_timeout_ms = 400;
	/* Long enough that nodes without a watch thread (most tests) never look lost on a
	 * loaded machine; the liveness tests shorten it. */
	n->conf.heartbeat_timeout_ms = 8000;
	n->conf.keep_alive_interval_ms = 100;
	n->conf.progress_interval_ms = 1000;
	n->conf.read_timeout_ms = 20000;
}

static void node_open(struct node *n)
{
	struct crun_store_opts o = {0};
	int rc;

	o.endpoint = endpoint;
	o.connect_timeout_ms = 10000;
	rc = rdzv_create(&o, &n->conf, &n->r, &n->d);
	if (rc != 0) {
		fail_msg("rdzv_create node %d: %s", n->idx, n->d.msg);
	}
}

static void node_close(struct node *n)
{
	if (n->thr_live) {
		pthread_join(n->thr, NULL);
		n->thr_live = false;
	}
	rdzv_destroy(n->r);
	n->r = NULL;
	pthread_cond_destroy(&n->cv);
	pthread_mutex_destroy(&n->mu);
}

static void *join_main(void *arg)
{
	struct node *n = arg;

	memset(&n->d, 0, sizeof(n->d));
	n->rc = rdzv_next_round(n->r, &n->a, &n->d);
	return NULL;
}

static void join_async(struct node *n)
{
	assert_int_equal(pthread_create(&n->thr, NULL, join_main, n), 0);
	n->thr_live = true;
}

static int join_wait(struct node *n)
{
	if (n->thr_live) {
		pthread_join(n->thr, NULL);
		n->thr_live = false;
	}
	return n->rc;
}

/* All of @nodes join at once; every one must succeed. */
static void join_all(struct node *nodes, int k)
{
	for (int i = 0; i < k; i++) {
		join_async(&nodes[i]);
	}
	for (int i = 0; i < k; i++) {
		if (join_wait(&nodes[i]) != 0) {
			fail_msg("node %d: rdzv_next_round: %s (%s)", i, crun_strerror(nodes[i].rc),
				 nodes[i].d.msg);
		}
	}
}

/* The assignments of @k nodes form one consistent round. */
static void check_round(struct node *nodes, int k, int round, int restarts)
{
	struct node *by_rank[MAX_NODES] = {0};
	int world = 0, off = 0;

	for (int i = 0; i < k; i++) {
		struct rdzv_assignment *a = &nodes[i].a;

		assert_int_equal(a->round, round);
		assert_int_equal(a->group_world_size, k);
		assert_int_equal(a->restart_count, restarts);
		assert_true(a->group_rank >= 0 && a->group_rank < k);
		assert_null(by_rank[a->group_rank]);
		by_rank[a->group_rank] = &nodes[i];
		world += nodes[i].conf.local_world_size;
		assert_string_equal(a->worker_prefix, nodes[0].a.worker_prefix);
		assert_string_equal(a->master_addr, nodes[0].a.master_addr);
		assert_int_equal(a->master_port, nodes[0].a.master_port);
		assert_true(a->master_port > 0 && a->master_port < 65536);
	}
	for (int g = 0; g < k; g++) {
		assert_non_null(by_rank[g]);
		assert_int_equal(by_rank[g]->a.rank_offset, off);
		assert_int_equal(by_rank[g]->a.world_size, world);
		off += by_rank[g]->conf.local_world_size;
	}
	assert_string_equal(nodes[0].a.master_addr, by_rank[0]->addr);
	{
		char want[128];

		snprintf(want, sizeof(want), "%s/attempt/%d/", run_id, round);
		assert_string_equal(nodes[0].a.worker_prefix, want);
	}
}

static void *finish_main(void *arg)
{
	struct node *n = arg;

	memset(&n->d, 0, sizeof(n->d));
	n->rc = rdzv_finish(n->r, 30000, &n->d);
	return NULL;
}

static void finish_all(struct node *nodes, int k)
{
	for (int i = 0; i < k; i++) {
		assert_int_equal(pthread_create(&nodes[i].thr, NULL, finish_main, &nodes[i]), 0);
		nodes[i].thr_live = true;
	}
	for (int i = 0; i < k; i++) {
		if (join_wait(&nodes[i]) != 0) {
			fail_msg("node %d: rdzv_finish: %s (%s)", i, crun_strerror(nodes[i].rc),
				 nodes[i].d.msg);
		}
	}
}

static void run_fixed(int k)
{
	struct node nodes[MAX_NODES];

	for (int i = 0; i < k; i++) {
		node_init(&nodes[i], i, k, k, i + 1);
		node_open(&nodes[i]);
	}
	join_all(nodes, k);
	check_round(nodes, k, 0, 0);
	assert_int_equal(rdzv_wait_left(nodes[0].r, 100), -EINVAL); /* not finished yet */
	finish_all(nodes, k);
	/* The store host may stop its store: every node has seen the outcome. */
	assert_int_equal(rdzv_wait_left(nodes[0].r, 10000), 0);
	for (int i = 0; i < k; i++) {
		node_close(&nodes[i]);
	}
}

static void one_node_forms_a_round(void **state)
{
	(void)state;
	run_fixed(1);
}

static void two_nodes_form_a_round(void **state)
{
	(void)state;
	run_fixed(2);
}

static void three_nodes_with_different_nproc_form_a_round(void **state)
{
	(void)state;
	run_fixed(3);
}

static void elastic_round_closes_by_last_call_with_min(void **state)
{
	struct node nodes[2];
	int64_t t0;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 3, 2);
		nodes[i].conf.last_call_timeout_ms = 300;
		node_open(&nodes[i]);
	}
	t0 = mono_ms();
	join_all(nodes, 2);
	/* It waited for the last call, then closed with the two it had. */
	assert_true(mono_ms() - t0 >= 300);
	check_round(nodes, 2, 0, 0);
	finish_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

static void round_closes_at_once_at_max(void **state)
{
	struct node nodes[3];
	int64_t t0;

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 3, 1);
		nodes[i].conf.last_call_timeout_ms = 60000;
		node_open(&nodes[i]);
	}
	t0 = mono_ms();
	join_all(nodes, 3);
	/* A 60 s last call never ran: MAX closed it. */
	assert_true(mono_ms() - t0 < 30000);
	check_round(nodes, 3, 0, 0);
	finish_all(nodes, 3);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

static void late_joiner_triggers_scale_up_and_joins_next_round(void **state)
{
	struct node nodes[3];
	int64_t t0;

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 3, 1);
		nodes[i].conf.last_call_timeout_ms = 200;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 0, 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(rdzv_watch_start(nodes[i].r, on_event, &nodes[i]), 0);
	}
	t0 = mono_ms();
	join_async(&nodes[2]);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(wait_event(&nodes[i], 20000), RDZV_EV_SCALE_UP);
		rdzv_watch_stop(nodes[i].r);
	}
	printf("# late join -> scale-up event on both nodes: %" PRId64 " ms\n", mono_ms() - t0);
	for (int i = 0; i < 2; i++) {
		join_async(&nodes[i]);
	}
	for (int i = 0; i < 3; i++) {
		if (join_wait(&nodes[i]) != 0) {
			fail_msg("node %d: %s", i, nodes[i].d.msg);
		}
	}
	/* Scale-up spends no restart. */
	check_round(nodes, 3, 1, 0);
	finish_all(nodes, 3);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

static void closed_job_rejects_a_joiner_beyond_max(void **state)
{
	struct node nodes[3];

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 0, 0);
	join_async(&nodes[2]);
	assert_int_equal(join_wait(&nodes[2]), CRUN_ECLOSED);
	assert_non_null(strstr(nodes[2].d.msg, "closed to new nodes"));
	assert_non_null(strstr(nodes[2].d.msg, "node2"));
	finish_all(nodes, 2);
	/* A finished job turns joiners away too. */
	join_async(&nodes[2]);
	assert_int_equal(join_wait(&nodes[2]), CRUN_ECLOSED);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

static void lapsed_heartbeat_reports_node_lost_and_survivors_reform(void **state)
{
	struct node nodes[3];
	int64_t t0;

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 3, 1);
		nodes[i].conf.heartbeat_timeout_ms = 2000;
		nodes[i].conf.last_call_timeout_ms = 200;
		node_open(&nodes[i]);
	}
	join_all(nodes, 3);
	check_round(nodes, 3, 0, 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(rdzv_watch_start(nodes[i].r, on_event, &nodes[i]), 0);
	}
	/* Node 1 goes silent: its heartbeat stops, it never finishes. */
	t0 = mono_ms();
	rdzv_watch_stop(nodes[1].r);
	for (int i = 0; i < 3; i += 2) {
		assert_int_equal(wait_event(&nodes[i], 20000), RDZV_EV_NODE_LOST);
		assert_non_null(strstr(nodes[i].detail, "heartbeat"));
		/* It names the node that went silent. */
		assert_non_null(strstr(nodes[i].detail, "host node1, address 127.0.0.2"));
		rdzv_watch_stop(nodes[i].r);
	}
	printf("# node lost detected %" PRId64 " ms after its heartbeat stopped\n", mono_ms() - t0);
	join_async(&nodes[0]);
	join_async(&nodes[2]);
	assert_int_equal(join_wait(&nodes[0]), 0);
	assert_int_equal(join_wait(&nodes[2]), 0);
	{
		struct node two[2] = {nodes[0], nodes[2]};

		/* A lost node re-forms without spending the budget. */
		check_round(two, 2, 1, 0);
	}
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

static void replacement_nodes_end_a_round_whose_nodes_all_died(void **state)
{
	struct node old[2], fresh[2];
	struct crun_store_opts o = {0};
	struct crun_store *st;
	char prefix[128], err[256];
	bool gone = false;
	int64_t t0;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&old[i], i, 2, 2, 1);
		old[i].conf.heartbeat_timeout_ms = 600;
		node_open(&old[i]);
	}
	join_all(old, 2);
	/* Both agents vanish without a word: nobody is left to watch the round. */
	for (int i = 0; i < 2; i++) {
		node_close(&old[i]);
	}
	snprintf(prefix, sizeof(prefix), "rdzv/%s/", run_id);
	o.endpoint = endpoint;
	o.prefix = prefix;
	assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), 0);
	t0 = mono_ms();
	while (!gone && mono_ms() - t0 < 20000) {
		const char *k[1] = {"r/0/hb/0"};
		bool all = true;

		assert_int_equal(crun_store_check(st, k, 1, &all), 0);
		gone = !all;
		if (!gone) {
			usleep(50000); /* bounded: waits for the TTL to run out on the store */
		}
	}
	crun_store_close(st);
	assert_true(gone);
	for (int i = 0; i < 2; i++) {
		node_init(&fresh[i], i + 2, 2, 2, 1);
		node_open(&fresh[i]);
	}
	join_all(fresh, 2);
	check_round(fresh, 2, 1, 0);
	finish_all(fresh, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&fresh[i]);
	}
}

static void reported_failure_reaches_peers_and_bumps_restart_count(void **state)
{
	struct node nodes[2];
	bool restart = false;
	int64_t t0;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 2);
		nodes[i].conf.max_restarts = 2;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 0, 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(rdzv_watch_start(nodes[i].r, on_event, &nodes[i]), 0);
	}
	t0 = mono_ms();
	assert_int_equal(
		rdzv_report_failure(nodes[0].r, "rank 1 exited with code 3", &restart, &nodes[0].d),
		0);
	assert_true(restart);
	assert_int_equal(wait_event(&nodes[1], 20000), RDZV_EV_PEER_FAILED);
	printf("# failure report -> peer event: %" PRId64 " ms\n", mono_ms() - t0);
	assert_non_null(strstr(nodes[1].detail, "exited with code 3"));
	assert_non_null(strstr(nodes[1].detail, "node0"));
	for (int i = 0; i < 2; i++) {
		rdzv_watch_stop(nodes[i].r);
	}
	/* The reporter's own watch stays quiet. */
	assert_int_equal(nodes[0].nev, 0);
	join_all(nodes, 2);
	check_round(nodes, 2, 1, 1);
	finish_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

static void exhausted_budget_fails_every_node(void **state)
{
	struct node nodes[2];
	bool restart = true;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		nodes[i].conf.max_restarts = 1;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	assert_int_equal(rdzv_report_failure(nodes[1].r, "first crash", &restart, &nodes[1].d), 0);
	assert_true(restart);
	join_all(nodes, 2);
	check_round(nodes, 2, 1, 1);
	assert_int_equal(rdzv_report_failure(nodes[0].r, "second crash", &restart, &nodes[0].d), 0);
	assert_false(restart);
	for (int i = 0; i < 2; i++) {
		join_async(&nodes[i]);
		assert_int_equal(join_wait(&nodes[i]), CRUN_ERESTARTS);
		assert_non_null(strstr(nodes[i].d.msg, "budget"));
	}
	assert_non_null(strstr(nodes[1].d.msg, "second crash"));
	/* Both saw the end: a store-hosting agent may now stop its store. */
	assert_int_equal(rdzv_wait_left(nodes[0].r, 10000), 0);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

/* The reporter logs the failure it published, not the "end" record it wrote for the budget. */
static void exhausted_budget_log_names_the_failure(void **state)
{
	struct node n;
	struct capture c;
	const char *log;
	bool restart = true;

	(void)state;
	node_init(&n, 0, 1, 1, 2);
	n.conf.max_restarts = 0;
	node_open(&n);
	join_all(&n, 1);
	capture_start(&c);
	assert_int_equal(rdzv_report_failure(n.r, "rank 1 exited with code 9", &restart, &n.d), 0);
	log = capture_stop(&c);
	assert_false(restart);
	assert_non_null(strstr(log, "marked failed: workers failed: rank 1 exited with code 9 "
				    "(restart budget exhausted)"));
	assert_null(strstr(log, "marked failed: budget"));
	node_close(&n);
}

/*
 * One node restarting after failures (the fast path: the round left is read once, rank 0
 * takes the master from its own record): the count goes up by one per failure, a fresh
 * master port each round, and the budget ends it.
 */
static void one_node_restarts_count_each_failure(void **state)
{
	struct node n;
	bool restart = false;

	(void)state;
	node_init(&n, 0, 1, 1, 4);
	n.conf.max_restarts = 2;
	node_open(&n);
	join_all(&n, 1);
	check_round(&n, 1, 0, 0);
	for (int k = 1; k <= 2; k++) {
		assert_int_equal(rdzv_report_failure(n.r, "crash", &restart, &n.d), 0);
		assert_true(restart);
		join_all(&n, 1);
		check_round(&n, 1, k, k);
		assert_string_equal(n.a.master_addr, n.addr);
		assert_true(n.a.master_port > 0 && n.a.master_port < 65536);
	}
	assert_int_equal(rdzv_report_failure(n.r, "crash", &restart, &n.d), 0);
	assert_false(restart);
	/* The job is over for late joiners too. */
	join_async(&n);
	assert_int_equal(join_wait(&n), CRUN_ERESTARTS);
	node_close(&n);
}

static void join_timeout_names_missing_static_ranks(void **state)
{
	struct node nodes[2];
	int ranks[2] = {0, 2};

	(void)state;
	struct capture cap;
	const char *log;

	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 3, 3, 1);
		nodes[i].conf.node_rank = ranks[i];
		nodes[i].conf.join_timeout_ms = 1500;
		nodes[i].conf.progress_interval_ms = 300;
		node_open(&nodes[i]);
	}
	capture_start(&cap);
	for (int i = 0; i < 2; i++) {
		join_async(&nodes[i]);
	}
	for (int i = 0; i < 2; i++) {
		join_wait(&nodes[i]);
	}
	log = capture_stop(&cap);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(nodes[i].rc, -ETIMEDOUT);
	}
	/* No silent wait: the open round said who it waited for, and for how long. */
	assert_non_null(strstr(log, "2 of 3..3 nodes joined; missing node ranks: 1;"));
	assert_non_null(strstr(log, "timeout in"));
	/* At least the node that declared the timeout names who never came. */
	assert_true(strstr(nodes[0].d.msg, "never came: node ranks 1") != NULL ||
		    strstr(nodes[1].d.msg, "never came: node ranks 1") != NULL);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

static void join_timeout_counts_missing_dynamic_nodes(void **state)
{
	struct node n;

	(void)state;
	node_init(&n, 0, 2, 4, 1);
	n.conf.join_timeout_ms = 800;
	node_open(&n);
	join_async(&n);
	assert_int_equal(join_wait(&n), -ETIMEDOUT);
	assert_non_null(strstr(n.d.msg, "1 of 2 required nodes joined"));
	assert_non_null(strstr(n.d.msg, "node0"));
	assert_non_null(strstr(n.d.msg, "1 more never came"));
	node_close(&n);
}

/* A join timeout that runs out during the last call, with MIN already there, closes the
 * round with the nodes present instead of failing it. */
static void join_timeout_during_last_call_closes_with_the_nodes_present(void **state)
{
	struct node nodes[2];
	int64_t t0;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 3, 1);
		nodes[i].conf.join_timeout_ms = 3000;
		nodes[i].conf.last_call_timeout_ms = 60000;
		node_open(&nodes[i]);
	}
	t0 = mono_ms();
	join_all(nodes, 2);
	assert_true(mono_ms() - t0 < 30000);
	check_round(nodes, 2, 0, 0);
	finish_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

/*
 * A node that waits in round 1 since before round 0 failed must not close round 1 with the
 * restart count it read when it arrived: the failure of round 0 spends one restart.
 */
static void restart_count_is_read_when_the_round_closes(void **state)
{
	struct node nodes[3]; /* 0, 1: the running job; 2: waits in round 1 */
	struct crun_store_opts o = {0};
	struct crun_store *st;
	const char *k[1] = {"r/1/joined"};
	char prefix[128], err[256];
	bool restart = false;

	(void)state;
	for (int i = 0; i < 3; i++) {
		/* Node 2 (MIN 3) starts its last call only once all three are in round 1, and
		 * its last call runs out first: it is the one that closes round 1. */
		node_init(&nodes[i], i, i == 2 ? 3 : 2, 4, 1);
		nodes[i].conf.last_call_timeout_ms = i == 2 ? 1000 : 4000;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 0, 0);
	/* Node 2 arrives late (no watch threads run, so nobody re-forms for it yet). */
	join_async(&nodes[2]);
	snprintf(prefix, sizeof(prefix), "rdzv/%s/", run_id);
	o.endpoint = endpoint;
	o.prefix = prefix;
	assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_wait(st, k, 1, 20000), 0);
	crun_store_close(st);
	/* Now round 0 fails: round 1 must carry restart count 1 on every node. */
	assert_int_equal(rdzv_report_failure(nodes[1].r, "crash", &restart, &nodes[1].d), 0);
	assert_true(restart);
	/* Nodes 0 and 1 come back as fresh agents with MIN 3: the third joiner of round 1
	 * marks MIN, so node 2's short last call starts with everyone there. */
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
		node_init(&nodes[i], i, 3, 4, 1);
		nodes[i].conf.last_call_timeout_ms = 4000;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	if (join_wait(&nodes[2]) != 0) {
		fail_msg("node 2: %s", nodes[2].d.msg);
	}
	check_round(nodes, 3, 1, 1);
	finish_all(nodes, 3);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

/* A node that waits for a round that never ends is told that, not "0 more never came". */
static void join_timeout_behind_a_running_round_says_so(void **state)
{
	struct node nodes[3];

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 1, 3, 1);
		nodes[i].conf.last_call_timeout_ms = 1500; /* both get in, even on a busy box */
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 0, 0);
	/* No watch threads: nobody re-forms round 0 for the late node. */
	nodes[2].conf.join_timeout_ms = 1000;
	rdzv_destroy(nodes[2].r);
	node_open(&nodes[2]);
	join_async(&nodes[2]);
	assert_int_equal(join_wait(&nodes[2]), -ETIMEDOUT);
	assert_non_null(strstr(nodes[2].d.msg, "round 0 is still running"));
	assert_null(strstr(nodes[2].d.msg, "never came"));
	finish_all(nodes, 2);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

static void static_ranks_are_kept_whatever_the_join_order(void **state)
{
	struct node nodes[3];
	int nproc[3] = {2, 3, 4}; /* by node rank */

	(void)state;
	/* Thread i has node rank 2 - i: the highest rank joins first. */
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 3, 3, nproc[2 - i]);
		nodes[i].conf.node_rank = 2 - i;
		node_open(&nodes[i]);
	}
	for (int i = 0; i < 3; i++) {
		join_async(&nodes[i]);
	}
	for (int i = 0; i < 3; i++) {
		join_wait(&nodes[i]);
	}
	for (int i = 0; i < 3; i++) {
		if (nodes[i].rc != 0) {
			fail_msg("node %d: %s", i, nodes[i].d.msg);
		}
		assert_int_equal(nodes[i].a.group_rank, 2 - i);
	}
	assert_int_equal(nodes[2].a.rank_offset, 0);
	assert_int_equal(nodes[1].a.rank_offset, 2);
	assert_int_equal(nodes[0].a.rank_offset, 5);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(nodes[i].a.world_size, 9);
		assert_string_equal(nodes[i].a.master_addr, nodes[2].addr);
	}
	finish_all(nodes, 3);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

/*
 * A static rank above CRUN_STORE_MAX_KEYS (4096) sums the records of all ranks below it,
 * more than one store request can name. The 4100 lower ranks are played by records written
 * straight into the store; the node under test is rank 4100 of 4101 and closes the round.
 */
static void static_rank_above_the_key_limit_gets_its_offset(void **state)
{
	enum { LOWER = 4100, BATCH = 1000 };
	struct crun_store_opts o = {0};
	struct crun_store *st;
	char prefix[128], err[256];
	char (*keys)[48] = calloc(BATCH, sizeof(*keys));
	const char **kp = calloc(BATCH, sizeof(*kp));
	const void **vp = calloc(BATCH, sizeof(*vp));
	size_t *lens = calloc(BATCH, sizeof(*lens));
	const char *rec0 = "1 0 4242 127.0.0.9 fake0", *rec = "1 0 0 127.0.0.9 fake";
	int64_t v = 0;
	struct node n;

	(void)state;
	assert_true(keys != NULL && kp != NULL && vp != NULL && lens != NULL);
	snprintf(prefix, sizeof(prefix), "rdzv/%s/", run_id);
	o.endpoint = endpoint;
	o.prefix = prefix;
	o.timeout_ms = 60000;
	assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), 0);
	for (int base = 0; base < LOWER; base += BATCH) {
		int k = LOWER - base < BATCH ? LOWER - base : BATCH;

		for (int i = 0; i < k; i++) {
			snprintf(keys[i], sizeof(keys[i]), "r/0/node/%d", base + i);
			kp[i] = keys[i];
			vp[i] = base + i == 0 ? rec0 : rec;
			lens[i] = strlen(vp[i]);
		}
		assert_int_equal(crun_store_multi_set(st, kp, (size_t)k, vp, lens), 0);
	}
	/* The lower ranks have joined: 4100 positions, 4100 workers. */
	assert_int_equal(crun_store_add(st, "r/0/joined", ((int64_t)LOWER << 32) | LOWER, &v), 0);
	crun_store_close(st);
	node_init(&n, 0, LOWER + 1, LOWER + 1, 1);
	n.conf.node_rank = LOWER;
	node_open(&n);
	join_async(&n);
	if (join_wait(&n) != 0) {
		fail_msg("rank %d: %s", LOWER, n.d.msg);
	}
	assert_int_equal(n.a.group_rank, LOWER);
	assert_int_equal(n.a.group_world_size, LOWER + 1);
	assert_int_equal(n.a.rank_offset, LOWER);
	assert_int_equal(n.a.world_size, LOWER + 1);
	assert_string_equal(n.a.master_addr, "127.0.0.9");
	assert_int_equal(n.a.master_port, 4242);
	node_close(&n);
	free(keys);
	free(kp);
	free(vp);
	free(lens);
}

static void static_ranks_survive_a_restart(void **state)
{
	struct node nodes[2];
	bool restart = false;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 2);
		nodes[i].conf.node_rank = 1 - i;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	assert_int_equal(rdzv_report_failure(nodes[0].r, "crash", &restart, &nodes[0].d), 0);
	assert_true(restart);
	join_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(nodes[i].a.round, 1);
		assert_int_equal(nodes[i].a.group_rank, 1 - i);
		assert_int_equal(nodes[i].a.rank_offset, 2 * (1 - i));
		assert_int_equal(nodes[i].a.restart_count, 1);
		assert_string_equal(nodes[i].a.master_addr, nodes[1].addr);
	}
	finish_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

static void duplicate_static_rank_is_refused(void **state)
{
	struct node nodes[2];

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 3, 3, 1);
		nodes[i].conf.node_rank = 1;
		nodes[i].conf.join_timeout_ms = 1500;
		node_open(&nodes[i]);
	}
	for (int i = 0; i < 2; i++) {
		join_async(&nodes[i]);
	}
	for (int i = 0; i < 2; i++) {
		join_wait(&nodes[i]);
	}
	/* One of them is refused by name; the other times out waiting. */
	assert_true(nodes[0].rc == CRUN_ECONFIG || nodes[1].rc == CRUN_ECONFIG);
	assert_true(strstr(nodes[0].d.msg, "already taken") != NULL ||
		    strstr(nodes[1].d.msg, "already taken") != NULL);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

/* A node refused for a duplicate --node-rank must not use up a place of the round. */
static void duplicate_static_rank_does_not_take_a_place(void **state)
{
	struct node nodes[3]; /* rank 0, rank 1, and a second rank 0 */
	int ranks[3] = {0, 1, 0};
	struct crun_store_opts o = {0};
	struct crun_store *st;
	const char *k[1] = {"r/0/node/0"};
	char prefix[128], err[256];

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		nodes[i].conf.node_rank = ranks[i];
		node_open(&nodes[i]);
	}
	join_async(&nodes[0]);
	snprintf(prefix, sizeof(prefix), "rdzv/%s/", run_id);
	o.endpoint = endpoint;
	o.prefix = prefix;
	assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_wait(st, k, 1, 20000), 0);
	crun_store_close(st);
	join_async(&nodes[2]);
	assert_int_equal(join_wait(&nodes[2]), CRUN_ECONFIG);
	assert_non_null(strstr(nodes[2].d.msg, "already taken by host node0"));
	/* The real rank 1 still gets in, and the round forms. */
	join_async(&nodes[1]);
	for (int i = 0; i < 2; i++) {
		if (join_wait(&nodes[i]) != 0) {
			fail_msg("node %d: %s", i, nodes[i].d.msg);
		}
	}
	check_round(nodes, 2, 0, 0);
	finish_all(nodes, 2);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

/*
 * rdzv_wait_left() waits for the members of the last round: a node that was never in the
 * job and is turned away at the end must not count as one of them.
 */
static void turned_away_joiner_does_not_count_as_a_member_that_left(void **state)
{
	struct node nodes[3];
	bool restart = true;

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		nodes[i].conf.max_restarts = 0;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	assert_int_equal(rdzv_report_failure(nodes[0].r, "crash", &restart, &nodes[0].d), 0);
	assert_false(restart);
	/* A stranger arrives and is told the job is over. */
	join_async(&nodes[2]);
	assert_int_equal(join_wait(&nodes[2]), CRUN_ERESTARTS);
	/* Node 1 has not seen the end yet: the store host must keep waiting. */
	assert_int_equal(rdzv_wait_left(nodes[0].r, 300), -ETIMEDOUT);
	join_async(&nodes[1]);
	assert_int_equal(join_wait(&nodes[1]), CRUN_ERESTARTS);
	assert_int_equal(rdzv_wait_left(nodes[0].r, 10000), 0);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

static void finish_waits_for_every_node(void **state)
{
	struct node nodes[2];

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	/* Node 1 still runs (its watch keeps its heartbeat): node 0's finish waits. */
	assert_int_equal(rdzv_watch_start(nodes[1].r, on_event, &nodes[1]), 0);
	assert_int_equal(rdzv_finish(nodes[0].r, 500, &nodes[0].d), -ETIMEDOUT);
	assert_non_null(strstr(nodes[0].d.msg, "still running"));
	rdzv_watch_stop(nodes[1].r);
	assert_int_equal(nodes[1].nev, 0);
	finish_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

static void finish_reports_a_peer_failure(void **state)
{
	struct node nodes[2];
	bool restart;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	assert_int_equal(pthread_create(&nodes[0].thr, NULL, finish_main, &nodes[0]), 0);
	nodes[0].thr_live = true;
	assert_int_equal(rdzv_report_failure(nodes[1].r, "boom", &restart, &nodes[1].d), 0);
	assert_int_equal(join_wait(&nodes[0]), CRUN_EPEERFAIL);
	assert_non_null(strstr(nodes[0].d.msg, "boom"));
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

static void watch_stop_is_prompt(void **state)
{
	struct node n;
	int64_t t0;

	(void)state;
	node_init(&n, 0, 1, 1, 1);
	n.conf.keep_alive_interval_ms = 5000;
	n.conf.heartbeat_timeout_ms = 15000;
	node_open(&n);
	join_async(&n);
	assert_int_equal(join_wait(&n), 0);
	assert_int_equal(rdzv_watch_start(n.r, on_event, &n), 0);
	/* Let the thread reach its store wait (a 5 s slice) before stopping it. */
	assert_int_equal(wait_event(&n, 200), -1);
	t0 = mono_ms();
	rdzv_watch_stop(n.r);
	printf("# rdzv_watch_stop of a watch blocked in a 5 s wait: %" PRId64 " ms\n",
	       mono_ms() - t0);
	assert_true(mono_ms() - t0 < 2500);
	assert_int_equal(n.nev, 0);
	node_close(&n);
}

static void late_joiner_is_told_when_the_job_finishes(void **state)
{
	struct node nodes[3];

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 3, 1);
		nodes[i].conf.last_call_timeout_ms = 200;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	/* No watch threads: the round keeps running while node 2 waits in round 1. */
	join_async(&nodes[2]);
	finish_all(nodes, 2);
	assert_int_equal(join_wait(&nodes[2]), CRUN_ECLOSED);
	assert_non_null(strstr(nodes[2].d.msg, "finished"));
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

static void store_loss_is_reported_by_the_watch_thread(void **state)
{
	struct store_fixture own;
	struct crun_store_opts o = {0};
	struct node n;

	(void)state;
	if (fx.file) {
		skip(); /* a file cannot go away like a daemon; the tcp run covers this */
	}
	assert_int_equal(fixture_start(&own, "tcp", rdzvd_path, NULL), 0);
	node_init(&n, 0, 1, 1, 1);
	n.conf.keep_alive_max_attempt = 2;
	o.endpoint = own.endpoint;
	o.connect_timeout_ms = 300;
	o.timeout_ms = 2000;
	assert_int_equal(rdzv_create(&o, &n.conf, &n.r, &n.d), 0);
	join_async(&n);
	assert_int_equal(join_wait(&n), 0);
	assert_int_equal(rdzv_watch_start(n.r, on_event, &n), 0);
	fixture_stop(&own);
	assert_int_equal(wait_event(&n, 30000), RDZV_EV_STORE_LOST);
	assert_non_null(strstr(n.detail, "store"));
	node_close(&n);
}

static void bad_configuration_is_refused_with_a_message(void **state)
{
	struct crun_store_opts o = {0};
	struct rdzv_conf c;
	struct crun_diag d = {0};
	struct rdzv *r = NULL;

	(void)state;
	o.endpoint = endpoint;
	rdzv_conf_defaults(&c);
	c.run_id = run_id;
	c.min_nodes = 3;
	c.max_nodes = 2;
	assert_int_equal(rdzv_create(&o, &c, &r, &d), CRUN_ECONFIG);
	assert_null(r);
	assert_non_null(strstr(d.msg, "3:2"));
	c.min_nodes = 2;
	c.max_nodes = 2;
	c.node_rank = 2;
	assert_int_equal(rdzv_create(&o, &c, &r, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "node rank"));
	c.node_rank = -1;
	c.run_id = "";
	assert_int_equal(rdzv_create(&o, &c, &r, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "run id"));
}

static int group_setup(void **state)
{
	(void)state;
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(one_node_forms_a_round, per_test),
		cmocka_unit_test_setup(two_nodes_form_a_round, per_test),
		cmocka_unit_test_setup(exhausted_budget_log_names_the_failure, per_test),
		cmocka_unit_test_setup(one_node_restarts_count_each_failure, per_test),
		cmocka_unit_test_setup(three_nodes_with_different_nproc_form_a_round, per_test),
		cmocka_unit_test_setup(elastic_round_closes_by_last_call_with_min, per_test),
		cmocka_unit_test_setup(round_closes_at_once_at_max, per_test),
		cmocka_unit_test_setup(late_joiner_triggers_scale_up_and_joins_next_round,
				       per_test),
		cmocka_unit_test_setup(closed_job_rejects_a_joiner_beyond_max, per_test),
		cmocka_unit_test_setup(lapsed_heartbeat_reports_node_lost_and_survivors_reform,
				       per_test),
		cmocka_unit_test_setup(replacement_nodes_end_a_round_whose_nodes_all_died,
				       per_test),
		cmocka_unit_test_setup(reported_failure_reaches_peers_and_bumps_restart_count,
				       per_test),
		cmocka_unit_test_setup(exhausted_budget_fails_every_node, per_test),
		cmocka_unit_test_setup(turned_away_joiner_does_not_count_as_a_member_that_left,
				       per_test),
		cmocka_unit_test_setup(join_timeout_names_missing_static_ranks, per_test),
		cmocka_unit_test_setup(join_timeout_counts_missing_dynamic_nodes, per_test),
		cmocka_unit_test_setup(join_timeout_during_last_call_closes_with_the_nodes_present,
				       per_test),
		cmocka_unit_test_setup(restart_count_is_read_when_the_round_closes, per_test),
		cmocka_unit_test_setup(join_timeout_behind_a_running_round_says_so, per_test),
		cmocka_unit_test_setup(static_ranks_are_kept_whatever_the_join_order, per_test),
		cmocka_unit_test_setup(static_ranks_survive_a_restart, per_test),
		cmocka_unit_test_setup(static_rank_above_the_key_limit_gets_its_offset, per_test),
		cmocka_unit_test_setup(duplicate_static_rank_is_refused, per_test),
		cmocka_unit_test_setup(duplicate_static_rank_does_not_take_a_place, per_test),
		cmocka_unit_test_setup(finish_waits_for_every_node, per_test),
		cmocka_unit_test_setup(finish_reports_a_peer_failure, per_test),
		cmocka_unit_test_setup(watch_stop_is_prompt, per_test),
		cmocka_unit_test_setup(late_joiner_is_told_when_the_job_finishes, per_test),
		cmocka_unit_test_setup(store_loss_is_reported_by_the_watch_thread, per_test),
		cmocka_unit_test_setup(bad_configuration_is_refused_with_a_message, per_test),
	};
	const char *rdzvd = NULL;
	char name[64];
	int rc;

	/* test_rdzv tcp PATH/crun-rdzvd [FILTER] | test_rdzv file [FILTER] */
	if (argc < 2) {
		fprintf(stderr, "usage: %s tcp CRUN-RDZVD [FILTER] | file [FILTER]\n", argv[0]);
		return 2;
	}
	backend = argv[1];
	if (strcmp(backend, "tcp") == 0) {
		if (argc < 3) {
			fprintf(stderr, "%s: tcp: the crun-rdzvd path is missing\n", argv[0]);
			return 2;
		}
		rdzvd = argv[2];
		rdzvd_path = rdzvd;
		if (argc > 3) {
			cmocka_set_test_filter(argv[3]);
		}
	} else if (strcmp(backend, "file") == 0) {
		if (argc > 2) {
			cmocka_set_test_filter(argv[2]);
		}
	} else {
		fprintf(stderr, "%s: backend: expected tcp or file, got \"%s\"\n", argv[0],
			backend);
		return 2;
	}
	if (fixture_start(&fx, backend, rdzvd, NULL) != 0) {
		return 1;
	}
	snprintf(name, sizeof(name), "rdzv-%s", backend);
	rc = cmocka_run_group_tests_name(name, tests, group_setup, NULL);
	fixture_stop(&fx);
	return rc;
}
