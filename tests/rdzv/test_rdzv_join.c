/* SPDX-License-Identifier: MIT */
/* tests/rdzv/test_rdzv_join.c: forming rounds: static and dynamic joins, closing, join timeouts. */
#include "tests/rdzv/nodes.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/common/clock.h"
#include "rendezvous/store/store_conf.h"
#include "tests/rdzv/harness.h"


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

/* master_fn: each node would answer differently (its own address, 10000 + its index). It runs
 * on the joining threads: it counts, and the test asserts afterwards. */
static atomic_int master_calls, master_bad_port;

static void node_master(void *arg, const char *addr, int free_port, struct rdzv_master *m)
{
	const struct node *n = arg;

	if (free_port <= 0 || free_port >= 65536) {
		atomic_fetch_add(&master_bad_port, 1);
	}
	atomic_fetch_add(&master_calls, 1);
	m->how = RDZV_BOOT_AGENT_STORE;
	snprintf(m->addr, sizeof(m->addr), "%s", addr);
	m->port = 10000 + n->idx;
}

/* Only group rank 0 decides, once it joined; every node takes its answer from the round. */
static void rank0s_master_reaches_every_node(void **state)
{
	struct node nodes[3];
	const struct node *r0 = NULL;

	(void)state;
	atomic_store(&master_calls, 0);
	atomic_store(&master_bad_port, 0);
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 3, 3, 1);
		nodes[i].conf.master_fn = node_master;
		nodes[i].conf.master_arg = &nodes[i];
		node_open(&nodes[i]);
	}
	join_all(nodes, 3);
	check_round(nodes, 3, 0, 0);
	assert_int_equal(atomic_load(&master_calls), 1);
	assert_int_equal(atomic_load(&master_bad_port), 0);
	for (int i = 0; i < 3; i++) {
		if (nodes[i].a.group_rank == 0) {
			r0 = &nodes[i];
		}
	}
	assert_non_null(r0);
	for (int i = 0; i < 3; i++) {
		assert_true(nodes[i].a.master_agreed);
		assert_int_equal(nodes[i].a.boot, RDZV_BOOT_AGENT_STORE);
		assert_string_equal(nodes[i].a.master_addr, r0->addr);
		assert_int_equal(nodes[i].a.master_port, 10000 + r0->idx);
	}
	finish_all(nodes, 3);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
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
	t0 = crun_now_ms();
	join_all(nodes, 2);
	/* It waited for the last call, then closed with the two it had. */
	assert_true(crun_now_ms() - t0 >= 300);
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
	t0 = crun_now_ms();
	join_all(nodes, 3);
	/* A 60 s last call never ran: MAX closed it (at once; 10 s leaves room for a busy box). */
	assert_true(crun_now_ms() - t0 < 10000);
	check_round(nodes, 3, 0, 0);
	finish_all(nodes, 3);
	for (int i = 0; i < 3; i++) {
		node_close(&nodes[i]);
	}
}

/* A handle on the run's store where counters are tickets (etcd); skips the test elsewhere. */
static struct crun_store *tickets_store_or_skip(void)
{
	struct crun_store *st = run_store_open(60000);

	if (!store_has_tickets(st)) {
		crun_store_close(st);
		test_skip();
	}
	return st;
}

/*
 * A node counted in that died before it published its record: on etcd a ticket with no owner
 * (rendezvous/rdzv_seats.c). The closer waits close_timeout for the record, then closes the
 * round as never formed, and the living nodes meet in round 1 without it. Where the position
 * and the workers come in one add (crun's store, the file store) there is no such gap: skip.
 */
static void node_dead_mid_join_is_left_out_of_the_next_round(void **state)
{
	struct node nodes[2];
	struct crun_store *st;
	int64_t v = 0;

	(void)state;
	st = tickets_store_or_skip();
	/* The dead agent: position 1 of round 0, no record, no heartbeat. */
	assert_int_equal(store_ticket(st, "r/0/joined", &v), 0);
	assert_int_equal(v, 1);
	crun_store_close(st);
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 3, 1);
		nodes[i].conf.close_timeout_ms = 1000;
		nodes[i].conf.last_call_timeout_ms = 300;
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 1, 0);
	finish_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

/*
 * etcd: an older crun counted round 0 with add (a number in r/0/joined); a new agent's
 * ticket is refused without writing, and its join fails at once naming the key and why,
 * instead of the two counting one round two ways. Other stores: a ticket is an add there.
 */
static void old_agents_counter_is_named(void **state)
{
	struct node n;
	struct crun_store *st;
	int64_t v = 0;

	(void)state;
	st = tickets_store_or_skip();
	assert_int_equal(crun_store_add(st, "r/0/joined", ((int64_t)1 << 32) | 1, &v), 0);
	node_init(&n, 0, 2, 2, 1);
	node_open(&n);
	join_async(&n);
	assert_int_equal(join_wait(&n), CRUN_EVERSION);
	if (strstr(n.d.msg, "r/0/joined: the key holds \"4294967297\", not a ticket counter") ==
		    NULL ||
	    strstr(n.d.msg, "older crun") == NULL) {
		fail_msg("the join's error does not name the old counter: %s", n.d.msg);
	}
	/* Nothing written: the older agent's count is as it left it. */
	assert_int_equal(crun_store_add(st, "r/0/joined", 0, &v), 0);
	assert_int_equal(v, ((int64_t)1 << 32) | 1);
	crun_store_close(st);
	node_close(&n);
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
	/* A fixed count reads "2 of 3", not "2 of 3..3". */
	assert_non_null(strstr(log, "2 of 3 nodes joined; missing node ranks: 1;"));
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
	t0 = crun_now_ms();
	join_all(nodes, 2);
	/* The 3 s join timeout closed it, not the 60 s last call. */
	assert_true(crun_now_ms() - t0 >= 3000);
	assert_true(crun_now_ms() - t0 < 15000);
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
	run_store_wait("r/1/joined", 10000);
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

/*
 * A dynamic round's progress line names who joined and who of the round before is not back
 * (issue 21: "2 of 3..3 nodes joined; waiting for 1 more" named nobody).
 */
static void progress_names_nodes_not_back_from_the_last_round(void **state)
{
	struct node nodes[2];
	struct capture cap;
	bool restart = false;
	const char *log;

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	check_round(nodes, 2, 0, 0);
	assert_int_equal(rdzv_report_failure(nodes[0].r, "crash", &restart, &nodes[0].d), 0);
	assert_true(restart);
	/* Node 0 comes back; node 1 does not. */
	node_close(&nodes[0]);
	node_init(&nodes[0], 0, 2, 2, 1);
	nodes[0].conf.join_timeout_ms = 1500;
	nodes[0].conf.progress_interval_ms = 300;
	node_open(&nodes[0]);
	capture_start(&cap);
	join_async(&nodes[0]);
	assert_int_equal(join_wait(&nodes[0]), -ETIMEDOUT);
	log = capture_stop(&cap);
	assert_non_null(strstr(log, "round 1: 1 of 2 nodes joined; joined: node0; not back from "
				    "round 0: node1; waiting for 1 more;"));
	for (int i = 0; i < 2; i++) {
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
 * They are written 100 at a time: on etcd a multi_set is one transaction, and etcd takes at
 * most 128 operations in one (its default --max-txn-ops).
 */
static void static_rank_above_the_key_limit_gets_its_offset(void **state)
{
	enum { LOWER = 4100, BATCH = 100 };
	struct crun_store *st;
	char (*keys)[48] = calloc(BATCH, sizeof(*keys));
	const char **kp = calloc(BATCH, sizeof(*kp));
	const void **vp = calloc(BATCH, sizeof(*vp));
	size_t *lens = calloc(BATCH, sizeof(*lens));
	const char *rec0 = "1 0 4242 127.0.0.9 fake0", *rec = "1 0 0 127.0.0.9 fake";
	int64_t v = 0;
	struct node n;

	(void)state;
	assert_true(keys != NULL && kp != NULL && vp != NULL && lens != NULL);
	st = run_store_open(60000);
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
	/* The lower ranks have joined: 4100 positions, 4100 workers (etcd: 4100 tickets, the
	 * count a ticket store keeps, rendezvous/rdzv_seats.c). */
	if (store_has_tickets(st)) {
		for (int i = 0; i < LOWER; i++) {
			assert_int_equal(store_ticket(st, "r/0/joined", &v), 0);
		}
		assert_int_equal(v, LOWER);
	} else {
		assert_int_equal(
			crun_store_add(st, "r/0/joined", ((int64_t)LOWER << 32) | LOWER, &v), 0);
	}
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
	/* rank 0's record is an older crun's, without "master=": its address and port. */
	assert_false(n.a.master_agreed);
	assert_int_equal(n.a.boot, RDZV_BOOT_RANK0);
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

/*
 * Two nodes of a 3-node static job both claim node rank 1 (from hosts 0 and 1, or both from
 * host 0 when @one_host); returns the index of the one refused by name (the other times out
 * waiting for ranks 0 and 2), its message in nodes[that].d.msg. The caller closes them.
 */
static int two_claim_rank_1(struct node nodes[2], bool one_host)
{
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], one_host ? 0 : i, 3, 3, 1);
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
	assert_true((nodes[0].rc == CRUN_ECONFIG) != (nodes[1].rc == CRUN_ECONFIG));
	return nodes[0].rc == CRUN_ECONFIG ? 0 : 1;
}

static void duplicate_static_rank_is_refused(void **state)
{
	struct node nodes[2];
	int refused;

	(void)state;
	refused = two_claim_rank_1(nodes, false);
	assert_non_null(strstr(nodes[refused].d.msg, "node rank 1 is already taken by host"));
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

/* Two agents of one host and address claiming one rank write records that differ only in
 * their instance tag: the second is still refused, naming this host. */
static void duplicate_static_rank_from_one_host_is_refused(void **state)
{
	struct node nodes[2];
	int refused;

	(void)state;
	refused = two_claim_rank_1(nodes, true); /* both 127.0.0.1, "node0" */
	assert_non_null(strstr(nodes[refused].d.msg, "already taken by another crun on this host "
						     "(node0, address 127.0.0.1)"));
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

/* A node refused for a duplicate --node-rank must not use up a place of the round. */
static void duplicate_static_rank_does_not_take_a_place(void **state)
{
	struct node nodes[3]; /* rank 0, rank 1, and a second rank 0 */
	int ranks[3] = {0, 1, 0};

	(void)state;
	for (int i = 0; i < 3; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		nodes[i].conf.node_rank = ranks[i];
		node_open(&nodes[i]);
	}
	join_async(&nodes[0]);
	run_store_wait("r/0/node/0", 10000);
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

static void bad_configuration_is_refused_with_a_message(void **state)
{
	struct store_settings o = {0};
	struct rdzv_conf c;
	struct crun_diag d = {0};
	struct rdzv *r = NULL;

	(void)state;
	o.endpoint = endpoint;
	rdzv_conf_defaults(&c);
	c.run_id = run_id;
	c.min_nodes = 3;
	c.max_nodes = 2;
	assert_int_equal(harness_rdzv_create(&o, &c, &r, &d), CRUN_ECONFIG);
	assert_null(r);
	assert_non_null(strstr(d.msg, "3:2"));
	c.min_nodes = 2;
	c.max_nodes = 2;
	c.node_rank = 2;
	assert_int_equal(harness_rdzv_create(&o, &c, &r, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "node rank"));
	c.node_rank = -1;
	c.run_id = "";
	assert_int_equal(harness_rdzv_create(&o, &c, &r, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "run id"));
}

/* rdzv_agree(): a proposal that counts its calls and writes "from-<arg>". */
struct proposer {
	const char *name;
	int calls;
};

static int propose(void *arg, char *val, size_t cap, struct crun_diag *d)
{
	struct proposer *p = arg;

	(void)d;
	p->calls++;
	snprintf(val, cap, "from-%s", p->name);
	return 0;
}

/* The --log-dir folder's agreement: the first proposal wins; a node that asks later is not
 * asked to propose and gets the same answer (agent/agent_setup.c agent_log_folder()). */
static void the_first_proposal_is_agreed_by_every_node(void **state)
{
	struct node nodes[2];
	struct proposer a = {"a", 0}, b = {"b", 0};
	struct crun_diag d = {0};
	char out[64];

	(void)state;
	for (int i = 0; i < 2; i++) {
		node_init(&nodes[i], i, 2, 2, 1);
		node_open(&nodes[i]);
	}
	join_all(nodes, 2);
	assert_int_equal(rdzv_agree(nodes[0].r, "logdir", propose, &a, out, sizeof(out), &d), 1);
	assert_string_equal(out, "from-a");
	memset(out, 0, sizeof(out));
	assert_int_equal(rdzv_agree(nodes[1].r, "logdir", propose, &b, out, sizeof(out), &d), 0);
	assert_string_equal(out, "from-a");
	assert_int_equal(b.calls, 0);
	/* Asked again (a node's next round): the same, and no new proposal. */
	assert_int_equal(rdzv_agree(nodes[0].r, "logdir", propose, &a, out, sizeof(out), &d), 0);
	assert_string_equal(out, "from-a");
	assert_int_equal(a.calls, 1);
	finish_all(nodes, 2);
	for (int i = 0; i < 2; i++) {
		node_close(&nodes[i]);
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(one_node_forms_a_round, per_test),
		cmocka_unit_test_setup(two_nodes_form_a_round, per_test),
		cmocka_unit_test_setup(three_nodes_with_different_nproc_form_a_round, per_test),
		cmocka_unit_test_setup(rank0s_master_reaches_every_node, per_test),
		cmocka_unit_test_setup(elastic_round_closes_by_last_call_with_min, per_test),
		cmocka_unit_test_setup(round_closes_at_once_at_max, per_test),
		cmocka_unit_test_setup(node_dead_mid_join_is_left_out_of_the_next_round, per_test),
		cmocka_unit_test_setup(old_agents_counter_is_named, per_test),
		cmocka_unit_test_setup(closed_job_rejects_a_joiner_beyond_max, per_test),
		cmocka_unit_test_setup(join_timeout_names_missing_static_ranks, per_test),
		cmocka_unit_test_setup(join_timeout_counts_missing_dynamic_nodes, per_test),
		cmocka_unit_test_setup(join_timeout_during_last_call_closes_with_the_nodes_present,
				       per_test),
		cmocka_unit_test_setup(restart_count_is_read_when_the_round_closes, per_test),
		cmocka_unit_test_setup(join_timeout_behind_a_running_round_says_so, per_test),
		cmocka_unit_test_setup(progress_names_nodes_not_back_from_the_last_round, per_test),
		cmocka_unit_test_setup(static_ranks_are_kept_whatever_the_join_order, per_test),
		cmocka_unit_test_setup(static_ranks_survive_a_restart, per_test),
		cmocka_unit_test_setup(static_rank_above_the_key_limit_gets_its_offset, per_test),
		cmocka_unit_test_setup(duplicate_static_rank_is_refused, per_test),
		cmocka_unit_test_setup(duplicate_static_rank_from_one_host_is_refused, per_test),
		cmocka_unit_test_setup(duplicate_static_rank_does_not_take_a_place, per_test),
		cmocka_unit_test_setup(bad_configuration_is_refused_with_a_message, per_test),
		cmocka_unit_test_setup(the_first_proposal_is_agreed_by_every_node, per_test),
	};

	return nodes_main(argc, argv, "join", tests, ARRAY_SIZE(tests));
}
