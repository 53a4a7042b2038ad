/* SPDX-License-Identifier: MIT */
/* tests/rdzv/test_rdzv_watch.c: running rounds: liveness, failure, budget, scale-up, finish. */
#include "tests/rdzv/nodes.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/common/clock.h"
#include "rendezvous/store/store_conf.h"
#include "tests/rdzv/harness.h"


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
	t0 = crun_now_ms();
	join_async(&nodes[2]);
	for (int i = 0; i < 2; i++) {
		/* Event-driven (a wait on the next round's "joined"): milliseconds. */
		assert_int_equal(wait_event(&nodes[i], 5000), RDZV_EV_SCALE_UP);
		rdzv_watch_stop(nodes[i].r);
	}
	printf("# late join -> scale-up event on both nodes: %" PRId64 " ms\n", crun_now_ms() - t0);
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
	t0 = crun_now_ms();
	rdzv_watch_stop(nodes[1].r);
	for (int i = 0; i < 3; i += 2) {
		/* The 2 s heartbeat TTL, one 100 ms keep-alive slice, room for a busy box. */
		assert_int_equal(wait_event(&nodes[i], 10000), RDZV_EV_NODE_LOST);
		assert_non_null(strstr(nodes[i].detail, "heartbeat"));
		/* It names the node that went silent. */
		assert_non_null(strstr(nodes[i].detail, "host node1, address 127.0.0.2"));
		rdzv_watch_stop(nodes[i].r);
	}
	printf("# node lost detected %" PRId64 " ms after its heartbeat stopped\n",
	       crun_now_ms() - t0);
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
	struct crun_store *st;
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
	st = run_store_open(0);
	t0 = crun_now_ms();
	/* The 600 ms TTL runs out on the store: poll for it, with room for a busy box. */
	while (!gone && crun_now_ms() - t0 < 10000) {
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
	t0 = crun_now_ms();
	assert_int_equal(
		rdzv_report_failure(nodes[0].r, "rank 1 exited with code 3", &restart, &nodes[0].d),
		0);
	assert_true(restart);
	assert_int_equal(wait_event(&nodes[1], 5000), RDZV_EV_PEER_FAILED);
	printf("# failure report -> peer event: %" PRId64 " ms\n", crun_now_ms() - t0);
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
	char fin[64];
	bool restart;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	finish_async(&nodes[0]);
	/* Node 0 has recorded its success and waits for the others when node 1 fails. */
	snprintf(fin, sizeof(fin), "r/0/fin/%d", nodes[0].a.group_rank);
	run_store_wait(fin, 10000);
	assert_int_equal(rdzv_report_failure(nodes[1].r, "boom", &restart, &nodes[1].d), 0);
	assert_int_equal(join_wait(&nodes[0]), CRUN_EPEERFAIL);
	assert_non_null(strstr(nodes[0].d.msg, "boom"));
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

static void watch_stop_is_prompt(void **state)
{
	struct crun_store *st;
	struct node n;
	int64_t t0;

	(void)state;
	node_init(&n, 0, 1, 1, 1);
	n.conf.keep_alive_interval_ms = 5000;
	n.conf.heartbeat_timeout_ms = 15000;
	node_open(&n);
	join_async(&n);
	assert_int_equal(join_wait(&n), 0);
	/*
	 * The watch thread's first step is the heartbeat; its next one is the store wait (a 5 s
	 * slice: the ring check is 5 s away). Remove the heartbeat the join wrote, and once the
	 * thread has written it again, it is at its wait.
	 */
	st = run_store_open(0);
	assert_int_equal(crun_store_delete(st, "r/0/hb/0"), 0);
	crun_store_close(st);
	assert_int_equal(rdzv_watch_start(n.r, on_event, &n), 0);
	run_store_wait("r/0/hb/0", 10000);
	assert_int_equal(wait_event(&n, 0), -1);
	t0 = crun_now_ms();
	rdzv_watch_stop(n.r);
	printf("# rdzv_watch_stop of a watch blocked in a 5 s wait: %" PRId64 " ms\n",
	       crun_now_ms() - t0);
	assert_true(crun_now_ms() - t0 < 1500);
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
	run_store_wait("r/1/joined", 10000);
	finish_all(nodes, 2);
	assert_int_equal(join_wait(&nodes[2]), CRUN_ECLOSED);
	assert_non_null(strstr(nodes[2].d.msg, "finished"));
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

/* A fixed-size job (2 of 2) whose node 1 goes silent: node 0 hears NODE_LOST. */
static void fixed_pair_loses_node1(struct node nodes[2])
{
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		nodes[i].conf.heartbeat_timeout_ms = 1500;
		nodes[i].conf.last_call_timeout_ms = 200;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 0, 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(rdzv_watch_start(nodes[i].r, on_event, &nodes[i]), 0);
	}
	rdzv_watch_stop(nodes[1].r);
	assert_int_equal(wait_event(&nodes[0], 10000), RDZV_EV_NODE_LOST);
	rdzv_watch_stop(nodes[0].r);
}

/*
 * The job cannot go on without the lost node: the survivor's next join gives it
 * heartbeat_timeout to come back, then fails naming it, long before the 30 s join_timeout
 * (docs/reliability.md, "Losing the store"). Before, it waited the whole join_timeout.
 */
static void fixed_size_job_fails_when_a_lost_node_does_not_come_back(void **state)
{
	struct node nodes[2];
	int64_t t0, ms;

	(void)state;
	fixed_pair_loses_node1(nodes);
	t0 = crun_now_ms();
	join_async(&nodes[0]);
	assert_int_equal(join_wait(&nodes[0]), -ETIMEDOUT);
	ms = crun_now_ms() - t0;
	printf("# the survivor gave up %" PRId64 " ms after the loss: %s\n", ms, nodes[0].d.msg);
	assert_non_null(strstr(nodes[0].d.msg, "did not come back within heartbeat_timeout"));
	assert_non_null(strstr(nodes[0].d.msg, "host node1, address 127.0.0.2"));
	/* heartbeat_timeout is 1.5 s; 15 s leaves room for a busy box and is half the 30 s
	 * join_timeout the survivor used to wait out. */
	assert_true(ms < 15000);
	node_close(&nodes[0]);
	node_close(&nodes[1]);
}

/* ... and a lost node that comes back in time re-forms the job with it. */
static void fixed_size_job_reforms_when_the_lost_node_comes_back(void **state)
{
	struct node nodes[2];

	(void)state;
	fixed_pair_loses_node1(nodes);
	join_async(&nodes[0]);
	join_async(&nodes[1]);
	assert_int_equal(join_wait(&nodes[0]), 0);
	assert_int_equal(join_wait(&nodes[1]), 0);
	check_round(nodes, 2, 1, 0);
	node_close(&nodes[0]);
	node_close(&nodes[1]);
}

static void store_loss_is_reported_by_the_watch_thread(void **state)
{
	struct store_fixture own;
	struct store_settings o = {0};
	struct node n;

	(void)state;
	if (fx.file) {
		test_skip(); /* a file cannot go away like a daemon; the tcp run covers this */
	}
	/* On etcd: a one-member cluster that dies is a store that stops answering. */
	assert_int_equal(fixture_start(&own, backend, server_path, NULL), 0);
	node_init(&n, 0, 1, 1, 1);
	n.conf.keep_alive_max_attempt = 2;
	o.endpoint = own.endpoint;
	o.connect_timeout_ms = 300;
	o.timeout_ms = 2000;
	assert_int_equal(harness_rdzv_create(&o, &n.conf, &n.r, &n.d), 0);
	join_async(&n);
	assert_int_equal(join_wait(&n), 0);
	assert_int_equal(rdzv_watch_start(n.r, on_event, &n), 0);
	fixture_stop(&own);
	/* Two attempts 100 ms apart, each failing at once or within the 2 s request timeout. */
	assert_int_equal(wait_event(&n, 10000), RDZV_EV_STORE_LOST);
	assert_non_null(strstr(n.detail, "store"));
	node_close(&n);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(exhausted_budget_log_names_the_failure, per_test),
		cmocka_unit_test_setup(one_node_restarts_count_each_failure, per_test),
		cmocka_unit_test_setup(late_joiner_triggers_scale_up_and_joins_next_round,
				       per_test),
		cmocka_unit_test_setup(lapsed_heartbeat_reports_node_lost_and_survivors_reform,
				       per_test),
		cmocka_unit_test_setup(replacement_nodes_end_a_round_whose_nodes_all_died,
				       per_test),
		cmocka_unit_test_setup(reported_failure_reaches_peers_and_bumps_restart_count,
				       per_test),
		cmocka_unit_test_setup(exhausted_budget_fails_every_node, per_test),
		cmocka_unit_test_setup(turned_away_joiner_does_not_count_as_a_member_that_left,
				       per_test),
		cmocka_unit_test_setup(finish_waits_for_every_node, per_test),
		cmocka_unit_test_setup(finish_reports_a_peer_failure, per_test),
		cmocka_unit_test_setup(watch_stop_is_prompt, per_test),
		cmocka_unit_test_setup(late_joiner_is_told_when_the_job_finishes, per_test),
		cmocka_unit_test_setup(store_loss_is_reported_by_the_watch_thread, per_test),
		cmocka_unit_test_setup(fixed_size_job_fails_when_a_lost_node_does_not_come_back,
				       per_test),
		cmocka_unit_test_setup(fixed_size_job_reforms_when_the_lost_node_comes_back,
				       per_test),
	};

	return nodes_main(argc, argv, "watch", tests, ARRAY_SIZE(tests));
}
