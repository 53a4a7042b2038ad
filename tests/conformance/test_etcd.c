/* SPDX-License-Identifier: MIT */
/* tests/conformance/test_etcd.c: what only the etcd backend has: fail-over, leases, auth, TLS. */
/*
 * Usage: test_etcd PATH/TO/etcd [FILTER]. Each case that needs a special etcd (auth on, TLS,
 * one to kill) starts its own; the others share one started for the group. Exits 77 when this
 * build has no etcd backend or there is no etcd binary.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/backend.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/base64.h"
#include "src/common/clock.h"
#include "src/common/fs.h"
#include "tests/conformance/etcd_fixture.h"

static const char *g_bin;
static struct etcd_proc g_etcd = {.pid = -1};
static char g_tmp[256]; /* files the cases write: password files, certificates */

static int group_setup(void **state)
{
	(void)state;
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/crun-etcd-test-XXXXXX");
	if (mkdtemp(g_tmp) == NULL) {
		return -1;
	}
	return etcd_proc_start(g_bin, &g_etcd);
}

static int group_teardown(void **state)
{
	(void)state;
	etcd_proc_stop(&g_etcd);
	fs_rm_rf(g_tmp);
	return 0;
}

/* The etcd backend alone, configured as a worker's would be: from CRUN_ETCD_* (the backend
 * itself never reads the environment). */
static int backend_open(const char *endpoint, int connect_ms, struct store_backend **b,
			const struct store_ops **ops, struct crun_diag *d)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	struct store_conf c;
	int rc;

	o.endpoint = endpoint;
	o.connect_timeout_ms = connect_ms;
	if (store_conf_from_opts(&c, &o) < 0) {
		return -ENOMEM;
	}
	rc = store_etcd_open(&c, b, ops, d);
	store_conf_finish(&c);
	return rc;
}

static int open_ep(const char *endpoint, const char *prefix, int connect_ms, int timeout_ms,
		   struct crun_store **st, char *err, size_t errlen)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;

	o.endpoint = endpoint;
	o.prefix = prefix;
	o.connect_timeout_ms = connect_ms;
	o.timeout_ms = timeout_ms;
	*st = NULL;
	return crun_store_open(&o, st, err, errlen);
}

static void want(struct crun_store *st, const char *key, const char *val)
{
	void *v = NULL;
	size_t len = 0;

	assert_int_equal(crun_store_get(st, key, &v, &len), 0);
	assert_int_equal(len, strlen(val));
	assert_memory_equal(v, val, len);
	free(v);
}

static bool present(struct crun_store *st, const char *key)
{
	void *v = NULL;
	size_t len;
	int rc = crun_store_get(st, key, &v, &len);

	assert_true(rc == 0 || rc == -ENOENT);
	free(v);
	return rc == 0;
}

/* Two endpoints, the first a closed port: everything works, and at once. */
static void failover_skips_a_closed_port(void **state)
{
	char ep[128], err[512];
	struct crun_store *st;
	int64_t t0;
	int fd, closed = etcd_closed_port(&fd);

	(void)state;
	assert_true(closed > 0);
	snprintf(ep, sizeof(ep), "etcd://127.0.0.1:%d,127.0.0.1:%d", closed, g_etcd.port);
	t0 = crun_now_ms();
	assert_int_equal(open_ep(ep, "fo/", 5000, 5000, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "k", "v", 1), 0);
	want(st, "k", "v");
	assert_int_equal(crun_store_add(st, "n", 2, NULL), 0);
	assert_true(crun_now_ms() - t0 < 3000);
	crun_store_close(st);
	/* The same as an http:// URL list. */
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d,http://127.0.0.1:%d", closed, g_etcd.port);
	assert_int_equal(open_ep(ep, "fo/", 5000, 5000, &st, err, sizeof(err)), 0);
	want(st, "k", "v");
	crun_store_close(st);
	close(fd);
}

/* Nobody listening anywhere: a clear error, naming every endpoint, within the deadline. */
static void unreachable_list_fails_within_deadline(void **state)
{
	char ep[128], err[512], a[32], b[32];
	struct crun_store *st;
	int64_t t0, dt;
	int rc, fa, fb;

	(void)state;
	snprintf(a, sizeof(a), "127.0.0.1:%d", etcd_closed_port(&fa));
	snprintf(b, sizeof(b), "127.0.0.1:%d", etcd_closed_port(&fb));
	assert_true(fa >= 0 && fb >= 0);
	snprintf(ep, sizeof(ep), "etcd://%s,%s", a, b);
	t0 = crun_now_ms();
	rc = open_ep(ep, NULL, 800, 5000, &st, err, sizeof(err));
	dt = crun_now_ms() - t0;
	assert_int_equal(rc, -ETIMEDOUT);
	assert_null(st);
	assert_true(dt >= 700 && dt < 5000);
	assert_non_null(strstr(err, ep));
	assert_non_null(strstr(err, a));
	assert_non_null(strstr(err, b));
	assert_non_null(strstr(err, "no etcd endpoint could serve it"));
	close(fa);
	close(fb);
}

struct waiter {
	struct store_backend *b;
	const struct store_ops *ops;
	int rc;
	int64_t took;
};

static void *wait_main(void *p)
{
	struct waiter *w = p;
	const char *keys[] = {"never"};
	int64_t t0 = crun_now_ms();

	w->rc = w->ops->wait(w->b, keys, 1, false, 20000);
	w->took = crun_now_ms() - t0;
	return NULL;
}

/*
 * The only etcd dies: operations fail within the handle's connect timeout with a message that
 * names the endpoint, and so does a wait it was holding.
 */
static void dead_etcd_is_reported_within_deadline(void **state)
{
	struct etcd_proc e = {.pid = -1};
	const struct store_ops *ops, *ops2;
	struct store_backend *b, *b2;
	struct waiter w = {0};
	struct crun_diag d;
	pthread_t th;
	void *v;
	size_t len;
	int64_t t0, dt;
	char name[32];

	(void)state;
	assert_int_equal(etcd_proc_start(g_bin, &e), 0);
	snprintf(name, sizeof(name), "127.0.0.1:%d", e.port);
	assert_int_equal(backend_open(e.endpoint, 1000, &b, &ops, &d), 0);
	assert_int_equal(backend_open(e.endpoint, 1000, &b2, &ops2, &d), 0);
	assert_int_equal(ops->set(b, "dead/k", "v", 1, 0, 5000), 0);
	w.b = b2;
	w.ops = ops2;
	assert_int_equal(pthread_create(&th, NULL, wait_main, &w), 0);
	usleep(300000); /* let the wait park: it fails either way, this is only the usual case */
	etcd_proc_stop(&e);
	t0 = crun_now_ms();
	assert_int_equal(ops->get(b, "dead/k", &v, &len, 5000), -ETIMEDOUT);
	dt = crun_now_ms() - t0;
	assert_true(dt >= 800 && dt < 4000);
	assert_non_null(strstr(store_etcd_last_error(b), name));
	assert_non_null(strstr(store_etcd_last_error(b), "no etcd endpoint could serve it"));
	pthread_join(th, NULL);
	if (w.rc != -ETIMEDOUT) {
		fprintf(stderr, "wait: %d: %s\n", w.rc, store_etcd_last_error(b2));
	}
	assert_int_equal(w.rc, -ETIMEDOUT);
	assert_true(w.took < 5000);
	assert_non_null(strstr(store_etcd_last_error(b2), name));
	ops->close(b);
	ops2->close(b2);
}

/* TTLs are leases: a key lives at least its TTL (whole seconds, etcd's minimum), then goes. */
static void ttl_expires_through_the_lease(void **state)
{
	struct crun_store *st;
	char err[512];
	int64_t t0, end;
	int i;

	(void)state;
	assert_int_equal(open_ep(g_etcd.endpoint, "ttl/", 5000, 5000, &st, err, sizeof(err)), 0);
	t0 = crun_now_ms();
	assert_int_equal(crun_store_set_ttl(st, "short", "x", 1, 1500), 0);
	usleep(1200000);
	if (crun_now_ms() - t0 < 1450) {
		assert_true(present(st, "short"));
	}
	end = t0 + 10000;
	while (present(st, "short") && crun_now_ms() < end) {
		usleep(50000); /* polling a condition, bounded by @end */
	}
	assert_false(present(st, "short"));
	assert_true(crun_now_ms() - t0 >= 1500);

	/* Rewritten with the same TTL, a key stays (its lease kept alive), past the TTL. */
	t0 = crun_now_ms();
	for (i = 0; i < 8; i++) {
		assert_int_equal(crun_store_set_ttl(st, "hb", "1", 1, 2000), 0);
		usleep(500000);
		assert_true(present(st, "hb"));
	}
	assert_true(crun_now_ms() - t0 > 3500);
	/* Rewritten with another TTL: a lease of its own. */
	assert_int_equal(crun_store_set_ttl(st, "hb", "2", 1, 1000), 0);
	want(st, "hb", "2");
	end = crun_now_ms() + 10000;
	while (present(st, "hb") && crun_now_ms() < end) {
		usleep(50000); /* polling a condition, bounded by @end */
	}
	assert_false(present(st, "hb"));
	crun_store_close(st);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

struct setter {
	struct crun_store *st;
	int rc;
};

static void *set_last_main(void *p)
{
	struct setter *s = p;

	usleep(300000);
	s->rc = crun_store_set(s->st, "m299", "x", 1);
	return NULL;
}

/*
 * etcd's --max-txn-ops (128 by default): reads of more keys are split into transactions at
 * one revision; an atomic multi_set of more is refused as a limit (-EMSGSIZE), saying so.
 */
static void txn_size_limits(void **state)
{
	enum { N = 300 };
	const struct store_ops *ops;
	struct store_backend *b;
	struct crun_store *st;
	struct setter s = {0};
	static char names[N][8];
	const char *keys[N];
	const void *vals[N];
	size_t lens[N];
	void *got[N];
	char err[512];
	struct crun_diag d;
	pthread_t th;
	bool all;
	size_t i;

	(void)state;
	for (i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "m%zu", i);
		keys[i] = names[i];
		vals[i] = "v";
		lens[i] = 1;
	}
	assert_int_equal(open_ep(g_etcd.endpoint, "txn/", 5000, 10000, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_multi_set(st, keys, N, vals, lens), -EMSGSIZE);
	assert_int_equal(crun_store_multi_set(st, keys, 100, vals, lens), 0);
	for (i = 100; i < N - 1; i++) {
		assert_int_equal(crun_store_set(st, keys[i], "v", 1), 0);
	}
	assert_int_equal(crun_store_check(st, keys, N, &all), 0);
	assert_false(all);
	assert_int_equal(crun_store_multi_get(st, keys, N, got, lens), 0);
	for (i = 0; i < N; i++) {
		assert_true((got[i] != NULL) == (i < N - 1));
		free(got[i]);
	}
	/* A wait on all of them, woken by the last. */
	assert_int_equal(crun_store_clone(st, "", &s.st), 0);
	assert_int_equal(pthread_create(&th, NULL, set_last_main, &s), 0);
	assert_int_equal(crun_store_wait(st, keys, N, 10000), 0);
	pthread_join(th, NULL);
	assert_int_equal(s.rc, 0);
	assert_int_equal(crun_store_check(st, keys, N, &all), 0);
	assert_true(all);
	crun_store_close(s.st);
	crun_store_close(st);

	/* The message names etcd's limit. */
	assert_int_equal(backend_open(g_etcd.endpoint, 5000, &b, &ops, &d), 0);
	assert_int_equal(ops->multi_set(b, keys, N, vals, lens, 5000), -EMSGSIZE);
	assert_non_null(strstr(store_etcd_last_error(b), "too many operations"));
	ops->close(b);
}

/*
 * A loopback proxy in front of etcd that forwards every request but, for the first @drops
 * requests whose path contains @path (the JSON gateway's) or whose bytes contain @grpc
 * (@glen bytes: a gRPC call's, whose path HTTP/2 compresses), closes the client's connection
 * once etcd has answered, without passing the answer on: a write that etcd applied and whose
 * answer was lost.
 */
struct proxy {
	int lfd;            /* listening */
	int port;           /* its port */
	int upstream;       /* etcd's client port */
	const char *path;   /* "/v3/kv/txn" */
	const char *grpc;   /* the same call's bytes over gRPC */
	size_t glen;
	int drops;          /* answers still to lose */
	int dropped;
	int gateway_kv;     /* requests seen to the gateway's KV paths (/v3/kv/...) */
	int h2;             /* HTTP/2 connections seen (the client preface) */
	volatile int stop;
	pthread_t th;
};

#define PROXY_CONNS 16

static void *proxy_main(void *arg)
{
	struct proxy *px = arg;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct {
		int c, u;
		bool drop_next;
	} conn[PROXY_CONNS];
	struct pollfd p[1 + 2 * PROXY_CONNS];
	char buf[65536];
	size_t i, np;
	ssize_t k;
	int c, u, from, to;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)px->upstream);
	for (i = 0; i < PROXY_CONNS; i++) {
		conn[i].c = conn[i].u = -1;
	}
	while (!px->stop) {
		p[0] = (struct pollfd){.fd = px->lfd, .events = POLLIN};
		for (i = 0, np = 1; i < PROXY_CONNS; i++) {
			p[np++] = (struct pollfd){.fd = conn[i].c, .events = POLLIN};
			p[np++] = (struct pollfd){.fd = conn[i].u, .events = POLLIN};
		}
		if (poll(p, np, 50) <= 0) {
			continue;
		}
		if (p[0].revents) {
			c = accept(px->lfd, NULL, NULL);
			u = socket(AF_INET, SOCK_STREAM, 0);
			for (i = 0; i < PROXY_CONNS && conn[i].c >= 0; i++) {
			}
			if (c < 0 || u < 0 || i == PROXY_CONNS ||
			    connect(u, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
				close(c);
				close(u);
			} else {
				conn[i].c = c;
				conn[i].u = u;
				conn[i].drop_next = false;
			}
		}
		for (i = 0; i < PROXY_CONNS; i++) {
			short rc = p[1 + 2 * i].revents, ru = p[2 + 2 * i].revents;
			bool end = false;

			if (conn[i].c < 0 || !(rc || ru)) {
				continue;
			}
			from = rc ? conn[i].c : conn[i].u;
			to = rc ? conn[i].u : conn[i].c;
			if (!rc && conn[i].drop_next) {
				usleep(100000); /* let the whole answer arrive; lose it */
				px->drops--;
				px->dropped++;
				end = true;
			} else {
				k = read(from, buf, sizeof(buf));
				end = k <= 0 || write(to, buf, (size_t)k) != k;
				if (!end && rc) {
					px->gateway_kv += memmem(buf, (size_t)k, "POST /v3/kv/",
								 12) != NULL;
					px->h2 += memmem(buf, (size_t)k, "PRI * HTTP/2.0", 14) != NULL;
				}
				/* curl sends the request line and headers in one write. */
				if (!end && rc && px->drops > 0 &&
				    (memmem(buf, (size_t)k, px->path, strlen(px->path)) != NULL ||
				     memmem(buf, (size_t)k, px->grpc, px->glen) != NULL)) {
					conn[i].drop_next = true;
				}
			}
			if (end) {
				close(conn[i].c);
				close(conn[i].u);
				conn[i].c = conn[i].u = -1;
			}
		}
	}
	for (i = 0; i < PROXY_CONNS; i++) {
		if (conn[i].c >= 0) {
			close(conn[i].c);
			close(conn[i].u);
		}
	}
	return NULL;
}

static void proxy_start(struct proxy *px, int upstream, const char *path, const char *grpc,
			size_t glen, int drops)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);

	memset(px, 0, sizeof(*px));
	px->upstream = upstream;
	px->path = path;
	px->grpc = grpc;
	px->glen = glen;
	px->drops = drops;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(px->lfd >= 0);
	assert_int_equal(bind(px->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(px->lfd, 8), 0);
	assert_int_equal(getsockname(px->lfd, (struct sockaddr *)&sa, &sl), 0);
	px->port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&px->th, NULL, proxy_main, px), 0);
}

static void proxy_stop(struct proxy *px)
{
	px->stop = 1;
	pthread_join(px->th, NULL);
	close(px->lfd);
}

/*
 * Writes whose answer was lost after etcd applied them are tried again on the next endpoint
 * and not applied twice: add and append look the key's history up, delete reports 0,
 * compare_set reports the value it stored.
 */
static void lost_answers_are_not_applied_twice(void **state)
{
	const char *const ops[] = {"add", "append", "delete", "compare_set"};
	struct crun_store *st, *direct;
	struct proxy px;
	char ep[128], err[512], prefix[32], grpc[64];
	void *cur = NULL;
	size_t len;
	int64_t n;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		snprintf(prefix, sizeof(prefix), "lost/%zu/", i);
		assert_int_equal(open_ep(g_etcd.endpoint, prefix, 5000, 5000, &direct, err,
					 sizeof(err)), 0);
		assert_int_equal(crun_store_set(direct, "k", "5", 1), 0);
		/* Over gRPC: DeleteRange's key (field 1), or the key of a Txn's compare (field
		 * 3), which a Range (field 1) does not have. */
		snprintf(grpc, sizeof(grpc), "%c%c/crun/%sk", i == 2 ? 0x0a : 0x1a,
			 (int)(strlen("/crun/k") + strlen(prefix)), prefix);
		proxy_start(&px, g_etcd.port, i == 2 ? "/v3/kv/deleterange" : "/v3/kv/txn", grpc,
			    strlen(grpc), 1);
		snprintf(ep, sizeof(ep), "etcd://127.0.0.1:%d,127.0.0.1:%d", px.port, g_etcd.port);
		assert_int_equal(open_ep(ep, prefix, 5000, 10000, &st, err, sizeof(err)), 0);
		switch (i) {
		case 0:
			assert_int_equal(crun_store_add(st, "k", 2, &n), 0);
			assert_int_equal(n, 7);
			want(direct, "k", "7");
			break;
		case 1:
			assert_int_equal(crun_store_append(st, "k", "x", 1), 0);
			want(direct, "k", "5x");
			break;
		case 2:
			assert_int_equal(crun_store_delete(st, "k"), 0);
			assert_false(present(direct, "k"));
			break;
		default:
			assert_int_equal(crun_store_compare_set(st, "k", "5", 1, "6", 1, &cur, &len),
					 0);
			assert_int_equal(len, 1);
			assert_memory_equal(cur, "6", 1);
			free(cur);
			want(direct, "k", "6");
			break;
		}
		assert_int_equal(px.dropped, 1);
		crun_store_close(st);
		proxy_stop(&px);
		crun_store_close(direct);
	}
}

/*
 * Where the client was built with gRPC (protobuf-c), its KV calls to an http:// member go
 * over gRPC: not one reaches the JSON gateway's /v3/kv/ paths, and each answer is right.
 */
static void kv_calls_go_over_grpc(void **state)
{
#ifndef CRUN_ETCD_GRPC
	(void)state;
	skip();
#else
	struct crun_store *st;
	struct proxy px;
	char ep[64], err[512];
	void *v = NULL;
	size_t len;
	int64_t n;

	(void)state;
	proxy_start(&px, g_etcd.port, "/never", NULL, 0, 0);
	snprintf(ep, sizeof(ep), "etcd://127.0.0.1:%d", px.port);
	assert_int_equal(open_ep(ep, "grpc/", 5000, 5000, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "k", "v1", 2), 0);
	assert_int_equal(crun_store_get(st, "k", &v, &len), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(v, "v1", 2);
	free(v);
	assert_int_equal(crun_store_add(st, "n", 3, &n), 0);
	assert_int_equal(crun_store_add(st, "n", 4, &n), 0);
	assert_int_equal(n, 7);
	assert_int_equal(crun_store_compare_set(st, "k", "v1", 2, "v2", 2, &v, &len), 0);
	assert_memory_equal(v, "v2", 2);
	free(v);
	assert_int_equal(store_ticket(st, "t", &n), 0);
	assert_int_equal(store_ticket(st, "t", &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(crun_store_delete(st, "k"), 0);
	assert_int_equal(crun_store_get(st, "k", &v, &len), -ENOENT);
	crun_store_close(st);
	proxy_stop(&px);
	assert_int_equal(px.gateway_kv, 0);
	assert_true(px.h2 > 0);
#endif
}

/* A job's keys go in one request: everything under the handle's prefix, nothing else. */
static void delete_prefix_removes_a_job(void **state)
{
	struct crun_store *job, *other, *root;
	char err[512];
	int64_t before, after;

	(void)state;
	assert_int_equal(open_ep(g_etcd.endpoint, "dp/job/", 5000, 5000, &job, err, sizeof(err)),
			 0);
	assert_int_equal(open_ep(g_etcd.endpoint, "dp/job2/", 5000, 5000, &other, err,
				 sizeof(err)), 0);
	assert_int_equal(open_ep(g_etcd.endpoint, NULL, 5000, 5000, &root, err, sizeof(err)), 0);
	assert_int_equal(store_delete_prefix(root), -EINVAL); /* never the whole store */
	assert_int_equal(crun_store_num_keys(root, &before), 0);
	assert_int_equal(crun_store_set(job, "a", "1", 1), 0);
	assert_int_equal(crun_store_set(job, "sub/deep", "1", 1), 0);
	assert_int_equal(crun_store_set_ttl(job, "hb", "1", 1, 60000), 0);
	assert_int_equal(crun_store_add(job, "n", 1, NULL), 0);
	assert_int_equal(crun_store_set(other, "a", "2", 1), 0);
	assert_int_equal(crun_store_set(root, "dp/job", "3", 1), 0);
	assert_int_equal(store_delete_prefix(job), 0);
	assert_false(present(job, "a"));
	assert_false(present(job, "sub/deep"));
	assert_false(present(job, "hb"));
	want(other, "a", "2");
	want(root, "dp/job", "3");
	assert_int_equal(crun_store_num_keys(root, &after), 0);
	assert_int_equal(after - before, 2);
	/* The handle goes on: its counter starts again. */
	assert_int_equal(crun_store_add(job, "n", 1, &after), 0);
	assert_int_equal(after, 1);
	assert_int_equal(store_delete_prefix(job), 0);
	assert_int_equal(store_delete_prefix(other), 0);
	assert_int_equal(crun_store_delete(root, "dp/job"), 0);
	crun_store_close(root);
	crun_store_close(other);
	crun_store_close(job);
}

/*
 * The end-of-job clean-up behind the store interface (store_forget_job()): each member counts
 * itself out, the last deletes the job's prefix; one whose wait failed deletes at once. A file
 * store keeps its keys (the user's file) and writes nothing.
 */
static void forget_job_last_member_deletes(void **state)
{
	struct crun_store *a, *b, *root, *f;
	struct crun_diag d = {0};
	char err[512], ep[512];
	int64_t n;

	(void)state;
	assert_int_equal(open_ep(g_etcd.endpoint, "fj/job/", 5000, 5000, &a, err, sizeof(err)),
			 0);
	assert_int_equal(open_ep(g_etcd.endpoint, "fj/job/", 5000, 5000, &b, err, sizeof(err)),
			 0);
	assert_int_equal(open_ep(g_etcd.endpoint, NULL, 5000, 5000, &root, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(a, "rdzv/x", "1", 1), 0);
	assert_int_equal(crun_store_set(root, "fj/other", "2", 1), 0);
	assert_int_equal(store_forget_job(a, 2, 0, &d), 0); /* one of two: the keys stay */
	assert_true(present(a, "rdzv/x"));
	assert_int_equal(store_forget_job(b, 2, 0, &d), 1); /* the last: all of them go */
	assert_false(present(a, "rdzv/x"));
	assert_false(present(a, "left"));
	want(root, "fj/other", "2");
	assert_int_equal(crun_store_set(a, "rdzv/y", "1", 1), 0);
	assert_int_equal(store_forget_job(a, 2, -ETIMEDOUT, &d), 1); /* a wait failed: at once */
	assert_false(present(a, "rdzv/y"));
	assert_int_equal(store_forget_job(root, 1, 0, &d), -EINVAL); /* never the whole store */
	assert_int_equal(crun_store_delete(root, "fj/other"), 0);

	snprintf(ep, sizeof(ep), "file://%s/forget.store", g_tmp);
	assert_int_equal(open_ep(ep, "fj/job/", 5000, 5000, &f, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(f, "rdzv/x", "1", 1), 0);
	assert_int_equal(store_forget_job(f, 1, 0, &d), 0);
	assert_true(present(f, "rdzv/x"));
	assert_false(present(f, "left"));
	assert_int_equal(crun_store_num_keys(f, &n), 0);
	assert_int_equal(n, 1);
	crun_store_close(f);
	crun_store_close(root);
	crun_store_close(b);
	crun_store_close(a);
}

/* A value over etcd's --max-request-bytes: -EMSGSIZE, with etcd's reason in the message. */
static void value_over_etcd_limit_is_emsgsize(void **state)
{
	const char *args[] = {"--max-request-bytes", "1048576", NULL};
	struct etcd_proc e = {.pid = -1, .args = args};
	const struct store_ops *ops;
	struct store_backend *b;
	struct crun_diag d;
	size_t n = 2u << 20;
	char *big = malloc(n);

	(void)state;
	assert_non_null(big);
	memset(big, 'v', n);
	/* The fixture's own flag comes first; a later one wins in etcd's flag parsing. */
	assert_int_equal(etcd_proc_start(g_bin, &e), 0);
	assert_int_equal(backend_open(e.endpoint, 5000, &b, &ops, &d), 0);
	assert_int_equal(ops->set(b, "big", big, n, 0, 5000), -EMSGSIZE);
	/* gRPC's own limit (--max-request-bytes + 512 KiB), or etcd's "request is too large" */
	assert_true(strstr(store_etcd_last_error(b), "etcd said: grpc: received message larger "
							"than max") != NULL ||
		    strstr(store_etcd_last_error(b), "etcd said: etcdserver: request is too large") !=
			    NULL);
	assert_int_equal(ops->set(b, "small", big, 1000, 0, 5000), 0);
	ops->close(b);
	etcd_proc_stop(&e);
	free(big);
}

/* The password file must belong to this user and be closed to group and others. */
static void password_file_must_be_private(void **state)
{
	struct crun_store *st;
	char path[300], err[512], mode[16];
	int rc;

	(void)state;
	snprintf(path, sizeof(path), "%s/password", g_tmp);
	setenv("CRUN_ETCD_USER", "someone", 1);
	unsetenv("CRUN_ETCD_PASSWORD_FILE");
	rc = open_ep(g_etcd.endpoint, NULL, 3000, 3000, &st, err, sizeof(err));
	assert_int_equal(rc, CRUN_ECONFIG);
	assert_non_null(strstr(err, "CRUN_ETCD_PASSWORD_FILE is not"));

	setenv("CRUN_ETCD_PASSWORD_FILE", path, 1);
	for (int m = 0; m < 3; m++) {
		mode_t bad = m == 0 ? 0644 : m == 1 ? 0640 : 0602;

		write_file(path, "secret\n", bad);
		rc = open_ep(g_etcd.endpoint, NULL, 3000, 3000, &st, err, sizeof(err));
		assert_int_equal(rc, CRUN_ECONFIG);
		assert_null(st);
		assert_non_null(strstr(err, path));
		snprintf(mode, sizeof(mode), "%04o", (unsigned)bad);
		assert_non_null(strstr(err, mode));
	}
	if (geteuid() == 0) {
		write_file(path, "secret\n", 0600);
		assert_int_equal(chown(path, 65534, 65534), 0);
		rc = open_ep(g_etcd.endpoint, NULL, 3000, 3000, &st, err, sizeof(err));
		assert_int_equal(rc, CRUN_ECONFIG);
		assert_non_null(strstr(err, "owned by uid 65534"));
	}
	/* A private file passes; this etcd has no auth, so the user goes unused. */
	write_file(path, "secret\n", 0600);
	rc = open_ep(g_etcd.endpoint, NULL, 3000, 3000, &st, err, sizeof(err));
	assert_int_equal(rc, 0);
	crun_store_close(st);

	/* TLS files must exist. */
	unsetenv("CRUN_ETCD_USER");
	unsetenv("CRUN_ETCD_PASSWORD_FILE");
	setenv("CRUN_ETCD_CACERT", "/nonexistent/ca.pem", 1);
	rc = open_ep(g_etcd.endpoint, NULL, 3000, 3000, &st, err, sizeof(err));
	unsetenv("CRUN_ETCD_CACERT");
	assert_int_equal(rc, CRUN_ECONFIG);
	assert_non_null(strstr(err, "CRUN_ETCD_CACERT=/nonexistent/ca.pem"));
	unlink(path);
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p;
	(void)arg;
	return size * n;
}

/* POST @body to etcd's gateway at @port, as @token (NULL: none). Returns the HTTP status. */
static long post(int port, const char *path, const char *body, const char *token)
{
	struct curl_slist *h = NULL;
	char url[128], auth[512];
	long code = 0;
	CURL *c = curl_easy_init();

	assert_non_null(c);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	if (token != NULL) {
		snprintf(auth, sizeof(auth), "Authorization: %s", token);
		h = curl_slist_append(h, auth);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return code;
}

/* Append what a GET brings to a growing string. */
struct text {
	char *p;
	size_t len;
};

static size_t keep(char *p, size_t size, size_t n, void *arg)
{
	struct text *t = arg;
	char *q = realloc(t->p, t->len + size * n + 1);

	if (q == NULL) {
		return 0;
	}
	memcpy(q + t->len, p, size * n);
	t->len += size * n;
	q[t->len] = '\0';
	t->p = q;
	return size * n;
}

/* How many Txn calls etcd at @port has handled (its /metrics, gRPC's counter). */
static long txn_calls(int port)
{
	struct text t = {NULL, 0};
	char url[128], *line;
	long total = 0, v;
	CURL *c = curl_easy_init();

	assert_non_null(c);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", port);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_cleanup(c);
	assert_non_null(t.p);
	for (line = strtok(t.p, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		if (strncmp(line, "grpc_server_handled_total{", 26) == 0 &&
		    strstr(line, "grpc_method=\"Txn\"") != NULL &&
		    sscanf(strrchr(line, ' '), "%ld", &v) == 1) {
			total += v;
		}
	}
	free(t.p);
	return total;
}

/*
 * A wait resumed from a mark (store_wait_any_get(), struct store_wait_mark) watches from where
 * the last one left off instead of reading the keys: etcd handles no Txn (a wait's read) for
 * it, and gets the write made between the two. Without a mark the same wait reads.
 */
static void resumed_wait_reads_nothing(void **state)
{
	const char *keys[] = {"k1", "k2"};
	struct store_wait_mark mk = {0};
	struct crun_store *st, *other;
	char err[512];
	void *v = NULL;
	size_t len = 0;
	long before;

	(void)state;
	assert_int_equal(open_ep(g_etcd.endpoint, "rw/", 5000, 5000, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_clone(st, "", &other), 0);
	assert_int_equal(store_wait_any_get(st, keys, 2, 2, &v, &len, 200, &mk), -ETIMEDOUT);
	assert_true(mk.rev > 0);
	assert_int_equal(crun_store_set(other, "k2", "v2", 2), 0);
	before = txn_calls(g_etcd.port);
	assert_int_equal(store_wait_any_get(st, keys, 2, 2, &v, &len, 20000, &mk), 1);
	assert_int_equal(txn_calls(g_etcd.port) - before, 0);
	assert_int_equal(len, 2);
	assert_memory_equal(v, "v2", 3);
	free(v);
	before = txn_calls(g_etcd.port);
	assert_int_equal(store_wait_any_get(st, keys, 2, 2, &v, &len, 20000, NULL), 1);
	assert_int_equal(txn_calls(g_etcd.port) - before, 1);
	free(v);
	crun_store_close(other);
	crun_store_close(st);
}

#define ADDERS 48
#define ADDS 4

struct adder {
	const char *endpoint;
	pthread_barrier_t *go;
	int64_t got[ADDS];
	int rc;
};

static void *adder_main(void *p)
{
	struct adder *a = p;
	struct crun_store *st;
	char err[512];
	int i;

	a->rc = open_ep(a->endpoint, "hot/", 5000, 60000, &st, err, sizeof(err));
	pthread_barrier_wait(a->go);
	for (i = 0; a->rc == 0 && i < ADDS; i++) {
		a->rc = crun_store_add(st, "n", 1, &a->got[i]);
	}
	if (st != NULL) {
		crun_store_close(st);
	}
	return NULL;
}

/*
 * Many handles adding to one key at once: every add lands once (the results are 1..N·k, each
 * once), and lost compares back off instead of retrying against each other: a few
 * transactions per add, not one per contender (48 adders retrying at once cost about 24 each).
 */
static void contended_adds_land_once_with_few_transactions(void **state)
{
	static struct adder a[ADDERS];
	static bool seen[ADDERS * ADDS + 1];
	pthread_t t[ADDERS];
	pthread_barrier_t go;
	long before, txns;
	int i, j;

	(void)state;
	memset(seen, 0, sizeof(seen));
	assert_int_equal(pthread_barrier_init(&go, NULL, ADDERS), 0);
	before = txn_calls(g_etcd.port);
	for (i = 0; i < ADDERS; i++) {
		a[i] = (struct adder){.endpoint = g_etcd.endpoint, .go = &go};
		assert_int_equal(pthread_create(&t[i], NULL, adder_main, &a[i]), 0);
	}
	for (i = 0; i < ADDERS; i++) {
		pthread_join(t[i], NULL);
	}
	pthread_barrier_destroy(&go);
	txns = txn_calls(g_etcd.port) - before;
	for (i = 0; i < ADDERS; i++) {
		assert_int_equal(a[i].rc, 0);
		for (j = 0; j < ADDS; j++) {
			assert_true(a[i].got[j] >= 1 && a[i].got[j] <= ADDERS * ADDS);
			assert_false(seen[a[i].got[j]]);
			seen[a[i].got[j]] = true;
		}
	}
	print_message("%d adds on one key from %d handles at once: %ld transactions\n",
		      ADDERS * ADDS, ADDERS, txns);
	assert_true(txns < 8 * ADDERS * ADDS);
}

/*
 * A wait on keys far apart watches each of them, not the range between: it wakes for either,
 * and a write between them does not end it.
 */
static void wait_watches_each_key(void **state)
{
	const char *keys[] = {"w/a", "w/z"};
	struct crun_store *st, *w;
	char err[512];

	(void)state;
	assert_int_equal(open_ep(g_etcd.endpoint, "wk/", 5000, 5000, &st, err, sizeof(err)), 0);
	assert_int_equal(open_ep(g_etcd.endpoint, "wk/", 5000, 5000, &w, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "w/m", "1", 1), 0);
	assert_int_equal(crun_store_wait_any(w, keys, 2, 300), -ETIMEDOUT);
	assert_int_equal(crun_store_set(st, "w/z", "1", 1), 0);
	assert_int_equal(crun_store_wait_any(w, keys, 2, 5000), 1);
	assert_true(crun_store_delete(st, "w/z") >= 0);
	assert_int_equal(crun_store_wait_any(w, keys, 2, 300), -ETIMEDOUT);
	assert_int_equal(crun_store_set(st, "w/a", "1", 1), 0);
	assert_int_equal(crun_store_wait_any(w, keys, 2, 5000), 0);
	crun_store_close(w);
	crun_store_close(st);
}

/*
 * etcd's own users and roles: a user whose role may read and write "/crun/job1/" only. Auth
 * tokens live 2 s, so the handle has to log in again along the way.
 */
static void auth_confines_a_role_to_its_prefix(void **state)
{
	const char *args[] = {"--auth-token-ttl", "2", NULL};
	struct etcd_proc e = {.pid = -1, .args = args};
	struct crun_store *st, *root;
	char body[512], from[32], to[32], path[300], err[512];
	const char *keys[] = {"ready"};
	int64_t n;
	int rc;

	(void)state;
	assert_int_equal(etcd_proc_start(g_bin, &e), 0);
	assert_int_equal(post(e.port, "/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"r\"}",
			      NULL), 200);
	assert_int_equal(post(e.port, "/v3/auth/role/add", "{\"name\":\"root\"}", NULL), 200);
	assert_int_equal(post(e.port, "/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}",
			      NULL), 200);
	assert_int_equal(post(e.port, "/v3/auth/user/add", "{\"name\":\"job\",\"password\":\"pw\"}",
			      NULL), 200);
	assert_int_equal(post(e.port, "/v3/auth/role/add", "{\"name\":\"jobs\"}", NULL), 200);
	base64_encode("/crun/job1/", 11, from);
	base64_encode("/crun/job10", 11, to); /* the end of the prefix: '/' + 1 */
	snprintf(body, sizeof(body),
		 "{\"name\":\"jobs\",\"perm\":{\"permType\":\"READWRITE\",\"key\":\"%s\","
		 "\"range_end\":\"%s\"}}",
		 from, to);
	assert_int_equal(post(e.port, "/v3/auth/role/grant", body, NULL), 200);
	assert_int_equal(post(e.port, "/v3/auth/user/grant", "{\"user\":\"job\",\"role\":\"jobs\"}",
			      NULL), 200);
	assert_int_equal(post(e.port, "/v3/auth/enable", "{}", NULL), 200);

	/* No credentials: refused at open, saying what to set. */
	rc = open_ep(e.endpoint, "job1/", 3000, 3000, &st, err, sizeof(err));
	assert_int_equal(rc, CRUN_EAUTH);
	assert_non_null(strstr(err, "CRUN_ETCD_USER"));

	snprintf(path, sizeof(path), "%s/jobpw", g_tmp);
	setenv("CRUN_ETCD_USER", "job", 1);
	setenv("CRUN_ETCD_PASSWORD_FILE", path, 1);
	write_file(path, "wrong\n", 0600);
	rc = open_ep(e.endpoint, "job1/", 3000, 3000, &st, err, sizeof(err));
	assert_int_equal(rc, CRUN_EAUTH);
	assert_non_null(strstr(err, "authentication failed"));

	write_file(path, "pw\n", 0600);
	assert_int_equal(open_ep(e.endpoint, "job1/", 3000, 5000, &st, err, sizeof(err)), 0);
	assert_int_equal(open_ep(e.endpoint, NULL, 3000, 5000, &root, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "k", "v", 1), 0);
	want(st, "k", "v");
	assert_int_equal(crun_store_set_ttl(st, "t", "v", 1, 60000), 0);
	assert_int_equal(crun_store_add(st, "n", 3, &n), 0);
	assert_int_equal(n, 3);
	/* Outside the role's prefix: refused. */
	assert_int_equal(crun_store_set(root, "job2/k", "v", 1), CRUN_EAUTH);
	assert_int_equal(crun_store_num_keys(root, &n), CRUN_EAUTH);
	want(root, "job1/k", "v");

	/* The token expires; the handle logs in again, for plain calls and for watches. */
	usleep(3500000);
	want(st, "k", "v");
	usleep(3500000);
	assert_int_equal(crun_store_set(root, "job1/ready", "1", 1), 0);
	assert_int_equal(crun_store_wait(st, keys, 1, 5000), 0);
	crun_store_close(root);
	crun_store_close(st);
	unsetenv("CRUN_ETCD_USER");
	unsetenv("CRUN_ETCD_PASSWORD_FILE");
	unlink(path);
	etcd_proc_stop(&e);
}

/* Make a CA, a server certificate for 127.0.0.1 and a client certificate in @dir. */
static int make_certs(const char *dir)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && exec >openssl.log 2>&1 && "
		 "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=crun-test-ca "
		 "-keyout ca.key -out ca.pem && "
		 "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key "
		 "-out server.csr && "
		 "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' "
		 ">ext && "
		 "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		 "-days 2 -extfile ext -out server.pem && "
		 "openssl req -newkey rsa:2048 -nodes -subj /CN=crun-client -keyout client.key "
		 "-out client.csr && "
		 "printf 'extendedKeyUsage=clientAuth\\n' >cext && "
		 "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		 "-days 2 -extfile cext -out client.pem",
		 dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* https with a client certificate, the files named by CRUN_ETCD_CACERT/CERT/KEY. */
static void tls_with_client_certificates(void **state)
{
	char dir[300], ca[320], cert[320], key[320], sk[320], sc[320], err[512];
	const char *args[] = {"--cert-file", sc, "--key-file", sk, "--trusted-ca-file", ca,
			      "--client-cert-auth", NULL};
	struct etcd_proc e = {.pid = -1, .args = args, .tls = true};
	struct crun_store *st;
	int rc;

	(void)state;
	if (system("command -v openssl >/dev/null 2>&1") != 0) {
		test_skip();
	}
	snprintf(dir, sizeof(dir), "%s/tls", g_tmp);
	assert_int_equal(fs_mkdir_p(dir, 0700), 0);
	assert_int_equal(make_certs(dir), 0);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(cert, sizeof(cert), "%s/client.pem", dir);
	snprintf(key, sizeof(key), "%s/client.key", dir);
	snprintf(sc, sizeof(sc), "%s/server.pem", dir);
	snprintf(sk, sizeof(sk), "%s/server.key", dir);
	setenv("CRUN_ETCD_CACERT", ca, 1);
	setenv("CRUN_ETCD_CERT", cert, 1);
	setenv("CRUN_ETCD_KEY", key, 1);
	assert_int_equal(etcd_proc_start(g_bin, &e), 0);
	assert_int_equal(open_ep(e.endpoint, "tls/", 5000, 5000, &st, err, sizeof(err)), 0);
	assert_int_equal(crun_store_set(st, "k", "secure", 6), 0);
	want(st, "k", "secure");
	crun_store_close(st);

	/* Without a client certificate the server refuses: an error at once, not a timeout. */
	unsetenv("CRUN_ETCD_CERT");
	unsetenv("CRUN_ETCD_KEY");
	rc = open_ep(e.endpoint, "tls/", 5000, 5000, &st, err, sizeof(err));
	assert_true(rc < 0);
	assert_non_null(strstr(err, e.endpoint));
	/* Without the CA the server's certificate is not trusted. */
	unsetenv("CRUN_ETCD_CACERT");
	setenv("CRUN_ETCD_CERT", cert, 1);
	setenv("CRUN_ETCD_KEY", key, 1);
	rc = open_ep(e.endpoint, "tls/", 5000, 5000, &st, err, sizeof(err));
	assert_int_equal(rc, CRUN_EAUTH);
	assert_non_null(strstr(err, "TLS"));
	unsetenv("CRUN_ETCD_CERT");
	unsetenv("CRUN_ETCD_KEY");
	etcd_proc_stop(&e);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(failover_skips_a_closed_port),
		cmocka_unit_test(unreachable_list_fails_within_deadline),
		cmocka_unit_test(dead_etcd_is_reported_within_deadline),
		cmocka_unit_test(ttl_expires_through_the_lease),
		cmocka_unit_test(txn_size_limits),
		cmocka_unit_test(value_over_etcd_limit_is_emsgsize),
		cmocka_unit_test(lost_answers_are_not_applied_twice),
		cmocka_unit_test(kv_calls_go_over_grpc),
		cmocka_unit_test(delete_prefix_removes_a_job),
		cmocka_unit_test(forget_job_last_member_deletes),
		cmocka_unit_test(contended_adds_land_once_with_few_transactions),
		cmocka_unit_test(resumed_wait_reads_nothing),
		cmocka_unit_test(wait_watches_each_key),
		cmocka_unit_test(password_file_must_be_private),
		cmocka_unit_test(auth_confines_a_role_to_its_prefix),
		cmocka_unit_test(tls_with_client_certificates),
	};

	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/TO/etcd [FILTER]\n", argv[0]);
		return 2;
	}
	g_bin = argv[1];
	if (!etcd_proc_available(g_bin)) {
		return 77;
	}
	/* The environment is the test's own: nothing inherited may change what a case sees. */
	unsetenv("CRUN_ETCD_USER");
	unsetenv("CRUN_ETCD_PASSWORD_FILE");
	unsetenv("CRUN_ETCD_CACERT");
	unsetenv("CRUN_ETCD_CERT");
	unsetenv("CRUN_ETCD_KEY");
	return test_run_group("etcd", tests, argc > 2 ? argv[2] : NULL, group_setup,
			      group_teardown);
}
