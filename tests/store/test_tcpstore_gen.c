/* SPDX-License-Identifier: MIT */
/* tests/store/test_tcpstore_gen.c: a real crun-rdzvd --tcpstore-run gives PyTorch's TCPStore
 * clients a fresh key space per generation of the run (rdzv_key_tcpstore_gen(), which each
 * agent raises before it spawns a round; issue 19): a connection opened after the generation
 * moved sees none of the old keys, an old generation's connection is closed, and so is every
 * one of a run whose generation says it ended (issue 20). */
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
#include <sys/socket.h>
#include <unistd.h>

#include <crun/store.h>

#include "rendezvous/rdzv_keys.h"
#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/byteorder.h"
#include "tests/lib/cmocka_skip.h"
#include "tests/store/helpers.h"

#define RUN "g1"

struct fixture {
	struct daemon d;
	struct crun_store *st; /* a crun client: the agents' side */
	char gen_key[128];
};

static int setup(void **state)
{
	static const char *const args[] = {"--tcpstore-run", RUN, NULL};
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	static struct fixture f;
	char ep[64], err[256];

	memset(&f, 0, sizeof(f));
	assert_int_equal(daemon_start(&f.d, args), 0);
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", f.d.port);
	o.endpoint = ep;
	o.connect_timeout_ms = IO_TIMEOUT_MS;
	o.timeout_ms = IO_TIMEOUT_MS;
	if (crun_store_open(&o, &f.st, err, sizeof(err)) != 0) {
		fail_msg("crun client: %s", err);
	}
	assert_int_equal(rdzv_key_tcpstore_gen(f.gen_key, sizeof(f.gen_key), RUN), 0);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	crun_store_close(f->st);
	assert_int_equal(daemon_stop(&f->d, SIGTERM), 0);
	return 0;
}

static void set_gen(struct fixture *f, const char *gen)
{
	assert_int_equal(crun_store_set(f->st, f->gen_key, gen, strlen(gen)), 0);
}

/* A TCPStore 1.x connection (PyTorch sends nothing until its first request). */
static int ts_open(struct fixture *f)
{
	int fd = raw_connect(f->d.port);

	assert_true(fd >= 0);
	return fd;
}

static void send_buf(int fd, struct wire_buf *b)
{
	assert_false(b->oom);
	assert_int_equal(raw_send(fd, b->p, b->len), 0);
	b->len = 0;
}

static void recv_all(int fd, uint8_t *p, size_t n)
{
	ssize_t k;

	while (n > 0) {
		k = recv(fd, p, n, 0); /* bounded: IO_TIMEOUT_MS */
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			fail_msg("TCPStore reply: %s", k == 0 ? "closed by the store" : strerror(errno));
		}
		p += k;
		n -= (size_t)k;
	}
}

/* ADD @key @delta; returns the value now stored. */
static int64_t ts_add(int fd, const char *key, int64_t delta)
{
	struct wire_buf b = {0};
	uint8_t x[8];

	ts_put_query(&b, TS_PROTO_V1, TS_OP_ADD);
	ts_put_vec(&b, key, strlen(key));
	ts_put_u64(&b, (uint64_t)delta);
	send_buf(fd, &b);
	wire_buf_finish(&b);
	recv_all(fd, x, sizeof(x));
	return (int64_t)get_le64(x);
}

static void ts_set(int fd, const char *key, const char *val)
{
	struct wire_buf b = {0};

	ts_put_query(&b, TS_PROTO_V1, TS_OP_SET);
	ts_put_vec(&b, key, strlen(key));
	ts_put_vec(&b, val, strlen(val));
	send_buf(fd, &b);
	wire_buf_finish(&b);
}

/* CHECK @key: whether it is set in this connection's key space. */
static bool ts_check(int fd, const char *key)
{
	struct wire_buf b = {0};
	uint8_t r;

	ts_put_query(&b, TS_PROTO_V1, TS_OP_CHECK);
	ts_put_u64(&b, 1);
	ts_put_vec(&b, key, strlen(key));
	send_buf(fd, &b);
	wire_buf_finish(&b);
	recv_all(fd, &r, 1);
	return r == TS_CHECK_READY;
}

static int64_t ts_num_keys(int fd)
{
	struct wire_buf b = {0};
	uint8_t x[8];

	ts_put_query(&b, TS_PROTO_V1, TS_OP_GETNUMKEYS);
	send_buf(fd, &b);
	wire_buf_finish(&b);
	recv_all(fd, x, sizeof(x));
	return (int64_t)get_le64(x);
}

/* Whether the crun client finds @key (the whole key, in the store's own space). */
static bool crun_has(struct fixture *f, const char *key)
{
	void *v = NULL;
	size_t n = 0;
	int rc = crun_store_get(f->st, key, &v, &n);

	free(v);
	assert_true(rc == 0 || rc == -ENOENT);
	return rc == 0;
}

static void new_generation_sees_none_of_the_old_keys(void **state)
{
	struct fixture *f = *state;
	char old_key[128];
	int a, b;

	set_gen(f, "0000000001");
	a = ts_open(f);
	ts_set(a, "/worker/attempt_0/addr", "10.0.0.1:4242");
	assert_int_equal(ts_add(a, "/joined", 1), 1); /* also: the SET before it is done */
	snprintf(old_key, sizeof(old_key), "%s/tcpstore/0000000001//joined", RUN);
	assert_true(crun_has(f, old_key)); /* where the server keeps generation 1's keys */

	set_gen(f, "0000000002");
	b = ts_open(f);
	assert_false(ts_check(b, "/worker/attempt_0/addr"));
	assert_int_equal(ts_add(b, "/joined", 1), 1); /* not 2: a count of its own */
	assert_int_equal(ts_num_keys(b), 1);
	raw_expect_closed(a); /* generation 1's connection: its worker was stopped */
	assert_false(crun_has(f, old_key)); /* and its keys are gone */
	close(a);
	close(b);
}

/* With no new client to notice, the sweep closes the old generation's connections. */
static void old_generation_connection_is_closed(void **state)
{
	struct fixture *f = *state;
	int a;

	set_gen(f, "0000000003");
	a = ts_open(f);
	assert_int_equal(ts_add(a, "/joined", 1), 1);
	set_gen(f, "0000000004");
	raw_expect_closed(a);
	close(a);
}

/* A request on @fd gets no answer: the store closes the connection (TCPStore has no error
 * replies). */
static void expect_refused(int fd)
{
	struct wire_buf b = {0};
	uint8_t x[8];
	ssize_t n;

	ts_put_query(&b, TS_PROTO_V1, TS_OP_GETNUMKEYS);
	send_buf(fd, &b);
	wire_buf_finish(&b);
	do {
		n = recv(fd, x, sizeof(x), 0); /* bounded: IO_TIMEOUT_MS */
	} while (n < 0 && errno == EINTR);
	if (n > 0) {
		fail_msg("the store answered a TCPStore client of a run that ended");
	}
	if (n < 0 && errno != ECONNRESET) {
		fail_msg("not closed: %s", strerror(errno));
	}
}

/* "end" (the agents' last step): every TCPStore connection of the run is closed, new ones
 * are not served, and a new run of the same id is served again from its first round. */
static void ended_run_connections_are_closed(void **state)
{
	struct fixture *f = *state;
	int a, b, c;

	set_gen(f, "0000000005");
	a = ts_open(f);
	b = ts_open(f);
	assert_int_equal(ts_add(a, "/joined", 1), 1);
	assert_int_equal(ts_add(b, "/joined", 1), 2);
	set_gen(f, "end");
	raw_expect_closed(a);
	raw_expect_closed(b);
	c = ts_open(f);
	expect_refused(c);
	close(a);
	close(b);
	close(c);

	set_gen(f, "0000000000");
	a = ts_open(f);
	assert_int_equal(ts_add(a, "/joined", 1), 1);
	close(a);
}

/* A generation that is not one (digits, or "end") is named in the log and serves nobody. */
static void bad_generation_serves_nobody(void **state)
{
	struct fixture *f = *state;
	int a;

	set_gen(f, "0000000007");
	a = ts_open(f);
	assert_int_equal(ts_add(a, "/joined", 1), 1);
	set_gen(f, "seven");
	raw_expect_closed(a);
	close(a);
	a = ts_open(f);
	expect_refused(a);
	close(a);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(new_generation_sees_none_of_the_old_keys, setup,
						teardown),
		cmocka_unit_test_setup_teardown(old_generation_connection_is_closed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(ended_run_connections_are_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_generation_serves_nobody, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return test_run_group("store-tcpstore-gen", tests, argc > 1 ? argv[1] : NULL, NULL,
			      NULL);
}
