/* SPDX-License-Identifier: MIT */
/* tests/unit/test_rdzv_plan.c: rendezvous/rdzv_plan: where the store is, what the workers meet
 * through, and the node record field that carries group rank 0's answer to every node. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <crun/error.h>

#include "rendezvous/rdzv_plan.h"
#include "tests/lib/cmocka_skip.h"

/* A 2-node c10d job whose endpoint is host A's address, run with --agent-store. */
static struct rdzv_plan_in c10d(bool local)
{
	struct rdzv_plan_in in = {
		.backend = RDZV_PLAN_C10D,
		.agent_store = RDZV_AGENT_STORE_ON,
		.endpoint_host = "10.0.0.1",
		.endpoint_port = 29400,
		.max_nodes = 2,
		.node_rank = -1,
		.is_host = -1,
		.endpoint_local = local,
	};
	return in;
}

static struct rdzv_plan_in static_job(int node_rank, bool no_agent_store)
{
	struct rdzv_plan_in in = {
		.backend = RDZV_PLAN_STATIC,
		.max_nodes = 2,
		.node_rank = node_rank,
		.master_addr = "10.0.0.1",
		.master_port = 29500,
		.agent_store = no_agent_store ? RDZV_AGENT_STORE_OFF : RDZV_AGENT_STORE_RULE,
		.is_host = -1,
	};
	return in;
}

static void c10d_client_asks_the_store(void **state)
{
	struct rdzv_plan_in in = c10d(false);
	struct rdzv_plan p;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_NO);
	assert_int_equal(p.workers, RDZV_WORKERS_ASK);
	assert_string_equal(p.store_host, "10.0.0.1");
	assert_int_equal(p.store_port, 29400);
	assert_int_equal(p.advertise, RDZV_ADV_ROUTE);
	assert_null(p.tcpstore_refusal);
}

static void c10d_local_endpoint_tries_to_host(void **state)
{
	struct rdzv_plan_in in = c10d(true);
	struct rdzv_plan p;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_TRY);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
	rdzv_plan_hosted(&p, true, 29400);
	assert_int_equal(p.host, RDZV_HOST_YES);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);

	/* Another agent here bound it first: join it, and ask it like any client. */
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	rdzv_plan_hosted(&p, false, 0);
	assert_int_equal(p.host, RDZV_HOST_NO);
	assert_int_equal(p.workers, RDZV_WORKERS_ASK);
}

static void c10d_is_host_overrides_the_address(void **state)
{
	struct rdzv_plan_in in = c10d(false);
	struct rdzv_plan p;

	(void)state;
	in.is_host = 1;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_YES);
	in = c10d(true);
	in.is_host = 0;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_NO);
}

static void c10d_standalone_hosts_a_private_store(void **state)
{
	struct rdzv_plan_in in = c10d(false);
	struct rdzv_plan p;

	(void)state;
	in.standalone = true;
	in.endpoint_host = "127.0.0.1";
	in.endpoint_port = 0;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_YES);
	assert_int_equal(p.store_port, 0);
	assert_int_equal(p.advertise, RDZV_ADV_FALLBACK);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
	rdzv_plan_hosted(&p, true, 41000);
	assert_int_equal(p.store_port, 41000);
}

static void no_agent_store_means_rank0_and_a_refusal(void **state)
{
	struct rdzv_plan_in in = c10d(true);
	struct rdzv_plan p;

	(void)state;
	in.agent_store = RDZV_AGENT_STORE_OFF;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	assert_non_null(p.tcpstore_refusal);
	assert_non_null(strstr(p.tcpstore_refusal, "--no-agent-store"));
	in.tls = true;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_non_null(strstr(p.tcpstore_refusal, "TLS"));
	/* A client's plan refuses nobody: it serves nothing. */
	in = c10d(false);
	in.agent_store = RDZV_AGENT_STORE_OFF;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	assert_null(p.tcpstore_refusal);
}

/* c10d by the rule: the agent store only when the workers' torch shares its store (2.4+). */
static void c10d_rule_follows_the_workers_torch(void **state)
{
	struct rdzv_plan_in in = c10d(true);
	struct rdzv_plan p;
	struct rdzv_master m;

	(void)state;
	in.agent_store = RDZV_AGENT_STORE_RULE;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_TRY);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	assert_non_null(p.tcpstore_refusal);
	assert_non_null(strstr(p.tcpstore_refusal, "--agent-store"));
	rdzv_plan_master(&p, "10.0.0.2", 41005, 1, &m);
	assert_int_equal(m.how, RDZV_BOOT_RANK0);
	assert_string_equal(m.addr, "10.0.0.2");
	assert_int_equal(m.port, 41005);
	/* A client decides without asking the store. */
	in = c10d(false);
	in.agent_store = RDZV_AGENT_STORE_RULE;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	assert_null(p.tcpstore_refusal);
	/* torch 2.4+: as --agent-store. */
	in.torch_shares = true;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_ASK);
	in = c10d(true);
	in.agent_store = RDZV_AGENT_STORE_RULE;
	in.torch_shares = true;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
	assert_null(p.tcpstore_refusal);
	/* --no-agent-store wins over what the workers' torch would do. */
	in.agent_store = RDZV_AGENT_STORE_OFF;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	assert_non_null(strstr(p.tcpstore_refusal, "--no-agent-store"));
	/* --standalone is c10d: the same rule. */
	in = c10d(false);
	in.agent_store = RDZV_AGENT_STORE_RULE;
	in.standalone = true;
	in.endpoint_host = "127.0.0.1";
	in.endpoint_port = 0;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_YES);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	in.agent_store = RDZV_AGENT_STORE_ON;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
}

/* Static mode keeps the agent store by the rule, whatever the workers' torch (torchrun 1.x's
 * static mode used it too). */
static void static_rule_keeps_the_agent_store(void **state)
{
	struct rdzv_plan_in in = static_job(1, false);
	struct rdzv_plan p;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
	in.torch_shares = true;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
	in.agent_store = RDZV_AGENT_STORE_ON;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
	assert_int_equal(p.store_port, 29500);
}

static void static_node0_hosts_on_the_master_port(void **state)
{
	struct rdzv_plan_in in = static_job(0, false);
	struct rdzv_plan p;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_YES);
	assert_string_equal(p.store_host, "10.0.0.1");
	assert_int_equal(p.store_port, 29500);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
	assert_true(p.master_fixed);
	in = static_job(1, false);
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_NO);
	assert_int_equal(p.store_port, 29500);
	assert_int_equal(p.workers, RDZV_WORKERS_AGENT_STORE);
}

static void static_no_agent_store_moves_the_store_one_up(void **state)
{
	struct rdzv_plan_in in = static_job(0, true);
	struct crun_diag d = {0};
	struct rdzv_plan p;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.store_port, 29501);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	assert_non_null(p.tcpstore_refusal);
	in.master_port = 65535;
	assert_int_equal(rdzv_plan_make(&in, &p, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "--master-port: 65535"));
}

static void static_one_node_uses_a_private_port(void **state)
{
	struct rdzv_plan_in in = static_job(0, false);
	struct rdzv_plan p;

	(void)state;
	in.max_nodes = 1;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_YES);
	assert_string_equal(p.store_host, "127.0.0.1");
	assert_int_equal(p.store_port, 0);
	assert_int_equal(p.advertise, RDZV_ADV_FALLBACK);
}

static void file_and_etcd_host_nothing(void **state)
{
	struct rdzv_plan_in in = {.backend = RDZV_PLAN_FILE, .max_nodes = 2, .is_host = -1};
	struct rdzv_plan p;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_NO);
	assert_int_equal(p.workers, RDZV_WORKERS_RANK0);
	assert_int_equal(p.advertise, RDZV_ADV_FALLBACK);
	in.backend = RDZV_PLAN_ETCD;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.host, RDZV_HOST_NO);
	assert_int_equal(p.advertise, RDZV_ADV_ROUTE);
	in.advertise_addr = "10.0.0.9";
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	assert_int_equal(p.advertise, RDZV_ADV_GIVEN);
}

static void bad_input_is_named(void **state)
{
	struct rdzv_plan_in in = c10d(false);
	struct crun_diag d = {0};
	struct rdzv_plan p;

	(void)state;
	in.endpoint_host = "";
	assert_int_equal(rdzv_plan_make(&in, &p, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "--rdzv-endpoint"));
	in.backend = (enum rdzv_plan_backend)42;
	assert_int_equal(rdzv_plan_make(&in, &p, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "--rdzv-backend"));
}

/*
 * The defect of issue 18: whichever node is group rank 0 (the one hosting the store, or the
 * other one), what it publishes is the same, so no start order can split the job.
 */
static void either_node_as_rank0_publishes_the_same_master(void **state)
{
	struct rdzv_plan_in hin = c10d(true), cin = c10d(false);
	struct rdzv_plan host, client;
	struct rdzv_master hm, cm;

	(void)state;
	assert_int_equal(rdzv_plan_make(&hin, &host, NULL), 0);
	rdzv_plan_hosted(&host, true, 29400);
	assert_int_equal(rdzv_plan_make(&cin, &client, NULL), 0);
	rdzv_plan_master(&host, "10.0.0.1", 41001, -1, &hm);
	rdzv_plan_master(&client, "10.0.0.2", 41002, 1, &cm);
	assert_int_equal(hm.how, RDZV_BOOT_AGENT_STORE);
	assert_int_equal(cm.how, RDZV_BOOT_AGENT_STORE);
	assert_string_equal(hm.addr, cm.addr);
	assert_int_equal(hm.port, cm.port);
	assert_string_equal(cm.addr, "10.0.0.1");
	assert_int_equal(cm.port, 29400);
}

static void an_unserving_store_gives_rank0s_tcpstore(void **state)
{
	struct rdzv_plan_in in = c10d(false);
	struct rdzv_plan p;
	struct rdzv_master m;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	rdzv_plan_master(&p, "10.0.0.2", 41002, 0, &m);
	assert_int_equal(m.how, RDZV_BOOT_RANK0_UNSERVED);
	assert_string_equal(m.addr, "10.0.0.2");
	assert_int_equal(m.port, 41002);
	rdzv_plan_master(&p, "10.0.0.2", 41002, -1, &m);
	assert_int_equal(m.how, RDZV_BOOT_RANK0_UNSERVED);
	in.agent_store = RDZV_AGENT_STORE_OFF;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	rdzv_plan_master(&p, "10.0.0.2", 41002, 1, &m);
	assert_int_equal(m.how, RDZV_BOOT_RANK0);
	assert_int_equal(m.port, 41002);
}

static void static_master_is_the_one_given(void **state)
{
	struct rdzv_plan_in in = static_job(0, true);
	struct rdzv_plan p;
	struct rdzv_master m;

	(void)state;
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	rdzv_plan_master(&p, "10.0.0.7", 41003, -1, &m);
	assert_int_equal(m.how, RDZV_BOOT_RANK0);
	assert_string_equal(m.addr, "10.0.0.1");
	assert_int_equal(m.port, 29500);
	in = static_job(0, false);
	assert_int_equal(rdzv_plan_make(&in, &p, NULL), 0);
	rdzv_plan_master(&p, "10.0.0.7", 41003, -1, &m);
	assert_int_equal(m.how, RDZV_BOOT_AGENT_STORE);
	assert_string_equal(m.addr, "10.0.0.1");
	assert_int_equal(m.port, 29500);
}

static void master_field_round_trips(void **state)
{
	static const struct rdzv_master ms[] = {
		{RDZV_BOOT_AGENT_STORE, "10.0.0.1", 29400},
		{RDZV_BOOT_RANK0, "node-a.example.org", 41000},
		{RDZV_BOOT_RANK0_UNSERVED, "[fd00::1]", 1},
		{RDZV_BOOT_RANK0, "fd00::2", 65535},
	};
	char rec[600];
	struct rdzv_master m;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		snprintf(rec, sizeof(rec), "2 2 41000 10.0.0.2 vm");
		assert_int_equal(rdzv_master_format(&ms[i], rec, sizeof(rec)), 0);
		assert_true(rdzv_master_parse(rec, &m));
		assert_int_equal(m.how, ms[i].how);
		assert_string_equal(m.addr, ms[i].addr);
		assert_int_equal(m.port, ms[i].port);
	}
	/* A static record: the instance stays the sixth field. */
	snprintf(rec, sizeof(rec), "2 0 41000 10.0.0.2 vm 0123456789abcdef");
	assert_int_equal(rdzv_master_format(&ms[0], rec, sizeof(rec)), 0);
	assert_string_equal(rec,
			    "2 0 41000 10.0.0.2 vm 0123456789abcdef master=agent,29400,10.0.0.1");
}

static void older_and_bad_records_have_no_master(void **state)
{
	static const char *const bad[] = {
		"2 0 41000 10.0.0.2 vm",		      /* an older crun's */
		"2 0 41000 10.0.0.2 vm 0123456789abcdef",     /* an older static one */
		"2 0 41000 10.0.0.2 vm master=agent,29400,",  /* no address */
		"2 0 41000 10.0.0.2 vm master=agent,70000,h", /* port out of range */
		"2 0 41000 10.0.0.2 vm master=agent,-1,h",
		"2 0 41000 10.0.0.2 vm master=agent,x,h",
		"2 0 41000 10.0.0.2 vm master=agent29400,h",
		"2 0 41000 10.0.0.2 vm master=tcpstore,29400,h", /* an unknown kind */
		"2 0 41000 10.0.0.2 vm master=",
	};
	struct rdzv_master m;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(rdzv_master_parse(bad[i], &m));
	}
}

static void format_refuses_what_a_record_cannot_hold(void **state)
{
	struct rdzv_master m = {RDZV_BOOT_RANK0, "a b", 1};
	char rec[40] = "2 0 41000 10.0.0.2 vm";

	(void)state;
	assert_int_equal(rdzv_master_format(&m, rec, sizeof(rec)), -1);
	snprintf(m.addr, sizeof(m.addr), "a,b");
	assert_int_equal(rdzv_master_format(&m, rec, sizeof(rec)), -1);
	m.addr[0] = '\0';
	assert_int_equal(rdzv_master_format(&m, rec, sizeof(rec)), -1);
	/* Too long for the buffer: the record is left as it was. */
	snprintf(m.addr, sizeof(m.addr), "a-rather-long-host-name.example.org");
	assert_int_equal(rdzv_master_format(&m, rec, sizeof(rec)), -1);
	assert_string_equal(rec, "2 0 41000 10.0.0.2 vm");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(c10d_client_asks_the_store),
		cmocka_unit_test(c10d_local_endpoint_tries_to_host),
		cmocka_unit_test(c10d_is_host_overrides_the_address),
		cmocka_unit_test(c10d_standalone_hosts_a_private_store),
		cmocka_unit_test(no_agent_store_means_rank0_and_a_refusal),
		cmocka_unit_test(c10d_rule_follows_the_workers_torch),
		cmocka_unit_test(static_rule_keeps_the_agent_store),
		cmocka_unit_test(static_node0_hosts_on_the_master_port),
		cmocka_unit_test(static_no_agent_store_moves_the_store_one_up),
		cmocka_unit_test(static_one_node_uses_a_private_port),
		cmocka_unit_test(file_and_etcd_host_nothing),
		cmocka_unit_test(bad_input_is_named),
		cmocka_unit_test(either_node_as_rank0_publishes_the_same_master),
		cmocka_unit_test(an_unserving_store_gives_rank0s_tcpstore),
		cmocka_unit_test(static_master_is_the_one_given),
		cmocka_unit_test(master_field_round_trips),
		cmocka_unit_test(older_and_bad_records_have_no_master),
		cmocka_unit_test(format_refuses_what_a_record_cannot_hold),
	};

	return test_run_group("unit-rdzv-plan", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
