/* SPDX-License-Identifier: MIT */
/* tests/rdzv/nodes.c: agents played by threads (struct node) for the cmocka rendezvous tests. */
#include "tests/rdzv/nodes.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include "rendezvous/store/store_conf.h"
#include "tests/rdzv/harness.h"


struct store_fixture fx;
const char *server_path;
char endpoint[600];
char run_id[64];
const char *backend = "tcp";
static int test_seq;

/* Every test gets its own run id (and, on the file backend, its own file). */
int per_test(void **state)
{
	char name[32];

	(void)state;
	test_seq++;
	snprintf(name, sizeof(name), "store%d", test_seq);
	fixture_endpoint(&fx, name, endpoint, sizeof(endpoint));
	snprintf(run_id, sizeof(run_id), "job%d-%d", (int)getpid(), test_seq);
	return 0;
}

void on_event(void *arg, enum rdzv_event ev, const char *detail)
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

int wait_event(struct node *n, int timeout_ms)
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

void capture_start(struct capture *c)
{
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	c->saved = dup(STDERR_FILENO);
	assert_true(c->saved >= 0);
	assert_true(dup2(p[1], STDERR_FILENO) >= 0);
	close(p[1]);
	c->rd = p[0];
}

const char *capture_stop(struct capture *c)
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

void node_init(struct node *n, int idx, int min, int max, int nproc)
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

void node_open(struct node *n)
{
	struct store_settings o = {0};
	int rc;

	o.endpoint = endpoint;
	o.connect_timeout_ms = 10000;
	rc = harness_rdzv_create(&o, &n->conf, &n->r, &n->d);
	if (rc != 0) {
		fail_msg("rdzv_create node %d: %s", n->idx, n->d.msg);
	}
}

void node_close(struct node *n)
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

void join_async(struct node *n)
{
	assert_int_equal(pthread_create(&n->thr, NULL, join_main, n), 0);
	n->thr_live = true;
}

int join_wait(struct node *n)
{
	if (n->thr_live) {
		pthread_join(n->thr, NULL);
		n->thr_live = false;
	}
	return n->rc;
}

void join_all(struct node *nodes, int k)
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

void check_round(struct node *nodes, int k, int round, int restarts)
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

void finish_async(struct node *n)
{
	assert_int_equal(pthread_create(&n->thr, NULL, finish_main, n), 0);
	n->thr_live = true;
}

void finish_all(struct node *nodes, int k)
{
	for (int i = 0; i < k; i++) {
		finish_async(&nodes[i]);
	}
	for (int i = 0; i < k; i++) {
		if (join_wait(&nodes[i]) != 0) {
			fail_msg("node %d: rdzv_finish: %s (%s)", i, crun_strerror(nodes[i].rc),
				 nodes[i].d.msg);
		}
	}
}

struct crun_store *run_store_open(int timeout_ms)
{
	struct crun_store_opts o = {0};
	struct crun_store *st = NULL;
	char prefix[128], err[256];

	snprintf(prefix, sizeof(prefix), "rdzv/%s/", run_id);
	o.endpoint = endpoint;
	o.prefix = prefix;
	o.timeout_ms = timeout_ms;
	assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), 0);
	return st;
}

void run_store_wait(const char *key, int timeout_ms)
{
	struct crun_store *st = run_store_open(0);
	const char *k[1] = {key};

	assert_int_equal(crun_store_wait(st, k, 1, timeout_ms), 0);
	crun_store_close(st);
}

int nodes_main(int argc, char **argv, const char *area, const struct CMUnitTest *tests, size_t n)
{
	const char *server = NULL, *filter = NULL;
	char name[64];
	int rc;

	/* PROG tcp PATH/crun-rdzvd [FILTER] | PROG file [FILTER] | PROG etcd PATH/etcd [FILTER] */
	if (argc < 2) {
		fprintf(stderr,
			"usage: %s tcp CRUN-RDZVD [FILTER] | file [FILTER] | etcd ETCD [FILTER]\n",
			argv[0]);
		return 2;
	}
	backend = argv[1];
	if (strcmp(backend, "tcp") == 0 || strcmp(backend, "etcd") == 0) {
		if (argc < 3) {
			fprintf(stderr, "%s: %s: the %s path is missing\n", argv[0], backend,
				backend[0] == 't' ? "crun-rdzvd" : "etcd");
			return 2;
		}
		server = argv[2];
		server_path = server;
		filter = argc > 3 ? argv[3] : NULL;
	} else if (strcmp(backend, "file") == 0) {
		filter = argc > 2 ? argv[2] : NULL;
	} else {
		fprintf(stderr, "%s: backend: expected tcp, file or etcd, got \"%s\"\n", argv[0],
			backend);
		return 2;
	}
	rc = fixture_start(&fx, backend, server, NULL);
	if (rc != 0) {
		return rc == FIXTURE_SKIP ? FIXTURE_SKIP : 1;
	}
	snprintf(name, sizeof(name), "rdzv-%s-%s", area, backend);
	rc = test_run_group_n(name, tests, n, filter, NULL, NULL);
	fixture_stop(&fx);
	return rc;
}
