/* SPDX-License-Identifier: MIT */
/* tests/store/test_tcpstore_stress.c: the TCPStore path of a real crun-rdzvd under many
 * concurrent clients, requests split at every boundary, wait+get races, multi-get, append;
 * every value checked byte for byte (issue 19: gloo once read a value of another key). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/byteorder.h"
#include "tests/store/helpers.h"

/*
 * A run: one daemon serving TCPStore (--tcpstore-run), CLIENTS threads, each its own
 * connection, half speaking PyTorch 1.x and half 2.x, doing ROUNDS rounds of what gloo's
 * full-mesh set-up does (every rank sets its address, then waits for and gets every other
 * rank's) plus a multi-get (2.x), an append to a shared key and a barrier (ADD, SET, WAIT).
 * Values differ in length (45 to 244 bytes) and content per key and round, so a value read
 * under the wrong key cannot pass. Requests are sent whole, split in two at a random byte,
 * or a byte at a time. $CRUN_TCPSTORE_STRESS_RUNS runs it that many times (default 1).
 */
#define CLIENTS 16
#define ROUNDS 12
#define MAX_VAL 256
#define CHUNK 8

struct client {
	pthread_t thread;
	int port;
	int index;
	int fd;
	enum ts_proto proto;
	uint64_t rng;
	unsigned run;
	int round;
	char doing[96]; /* the request in flight, for messages */
	char err[256];	/* the first failure; empty: none */
};

static uint64_t rnd(struct client *c)
{
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return c->rng;
}

/* Rank @i's value in round @r: its length and bytes are the key's own. */
static size_t value_of(unsigned run, int r, int i, uint8_t *v)
{
	size_t n = 45 + (size_t)((r * 31 + i * 17 + (int)run * 7) % 200), k;

	for (k = 0; k < n; k++) {
		v[k] = (uint8_t)(k * 131 + (size_t)i * 7 + (size_t)r * 13 + run + (k >> 3));
	}
	v[0] = (uint8_t)i;
	v[1] = (uint8_t)r;
	return n;
}

static bool note_fail(struct client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool note_fail(struct client *c, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (c->err[0] != '\0') {
		return false;
	}
	n = snprintf(c->err, sizeof(c->err), "client %d (%s), round %d, %s: ", c->index,
		     ts_proto_name(c->proto), c->round, c->doing);
	va_start(ap, fmt);
	vsnprintf(c->err + n, sizeof(c->err) - (size_t)n, fmt, ap);
	va_end(ap);
	return false;
}

/* Send @b's request(s): whole, split in two at a random byte, or a byte at a time. */
static bool send_req(struct client *c, struct wire_buf *b)
{
	size_t k, cut;
	bool ok = !b->oom;

	switch (rnd(c) % 4) {
	case 0:
		for (k = 0; ok && k < b->len; k++) {
			ok = raw_send(c->fd, b->p + k, 1) == 0;
		}
		break;
	case 1:
		cut = b->len > 1 ? 1 + rnd(c) % (b->len - 1) : b->len;
		ok = ok && raw_send(c->fd, b->p, cut) == 0 &&
		     raw_send(c->fd, b->p + cut, b->len - cut) == 0;
		break;
	default:
		ok = ok && raw_send(c->fd, b->p, b->len) == 0;
	}
	b->len = 0;
	return ok || note_fail(c, "send: %s", strerror(errno));
}

static bool recv_n(struct client *c, uint8_t *p, size_t n)
{
	ssize_t k;

	while (n > 0) {
		k = recv(c->fd, p, n, 0);
		if (k < 0 && errno == EINTR) {
			continue;
		}
		if (k <= 0) {
			return note_fail(c, "recv: %s",
					 k == 0 ? "closed by the store" : strerror(errno));
		}
		p += k;
		n -= (size_t)k;
	}
	return true;
}

static bool recv_u64(struct client *c, uint64_t *v)
{
	uint8_t x[8];

	if (!recv_n(c, x, 8)) {
		return false;
	}
	*v = get_le64(x);
	return true;
}

/* A u64 length and bytes; checked equal to @want (@n bytes) for @what. */
static bool expect_vec(struct client *c, const uint8_t *want, size_t n, const char *what)
{
	uint8_t got[MAX_VAL];
	uint64_t len;

	if (!recv_u64(c, &len)) {
		return false;
	}
	if (len != n || len > sizeof(got)) {
		return note_fail(c, "%s: a %llu-byte value where %zu were set", what,
				 (unsigned long long)len, n);
	}
	if (!recv_n(c, got, n)) {
		return false;
	}
	if (memcmp(got, want, n) != 0) {
		return note_fail(c, "%s: the value's bytes differ from what was set", what);
	}
	return true;
}

static bool expect_u8(struct client *c, uint8_t want, const char *what)
{
	uint8_t b;

	if (!recv_n(c, &b, 1)) {
		return false;
	}
	return b == want || note_fail(c, "%s: answered %u, expected %u", what, b, want);
}

static void put_key(struct wire_buf *b, const char *k)
{
	ts_put_vec(b, k, strlen(k));
}

static void key(char *buf, size_t len, unsigned run, int r, const char *what, int i)
{
	snprintf(buf, len, "/run%u/r%d/%s/%d", run, r, what, i);
}

/* WAIT for @k, then GET it, as PyTorch's get() does; the value must be rank @j's. */
static bool wait_get(struct client *c, struct wire_buf *b, int r, int j)
{
	uint8_t want[MAX_VAL];
	size_t n = value_of(c->run, r, j, want);
	char k[64], what[96];

	key(k, sizeof(k), c->run, r, "addr", j);
	snprintf(what, sizeof(what), "GET %s", k);
	ts_put_query(b, c->proto, TS_OP_WAIT);
	ts_put_u64(b, 1);
	put_key(b, k);
	snprintf(c->doing, sizeof(c->doing), "WAIT %s", k);
	if (!send_req(c, b) || !expect_u8(c, TS_WAIT_STOP, "WAIT")) {
		return false;
	}
	ts_put_query(b, c->proto, TS_OP_GET);
	put_key(b, k);
	snprintf(c->doing, sizeof(c->doing), "%s", what);
	return send_req(c, b) && expect_vec(c, want, n, what);
}

static bool multi_get(struct client *c, struct wire_buf *b, int r)
{
	uint8_t want[MAX_VAL];
	char k[64];
	int j;

	snprintf(c->doing, sizeof(c->doing), "MULTI_GET");
	ts_put_query(b, c->proto, TS_OP_MULTI_GET);
	ts_put_u64(b, CLIENTS);
	for (j = 0; j < CLIENTS; j++) {
		key(k, sizeof(k), c->run, r, "addr", j);
		put_key(b, k);
	}
	if (!send_req(c, b)) {
		return false;
	}
	for (j = 0; j < CLIENTS; j++) {
		if (!expect_vec(c, want, value_of(c->run, r, j, want), "MULTI_GET")) {
			return false;
		}
	}
	return true;
}

/* Every 2.x rank (odd index: 1.x has no APPEND) appended its 8-byte chunk once before the
 * barrier: the log holds each exactly once. */
static bool check_log(struct client *c, struct wire_buf *b, int r)
{
	uint8_t got[CLIENTS / 2 * CHUNK], seen[CLIENTS] = {0};
	char k[64], chunk[CHUNK + 1];
	uint64_t len;
	int i, who;

	key(k, sizeof(k), c->run, r, "log", 0);
	snprintf(c->doing, sizeof(c->doing), "GET %s", k);
	ts_put_query(b, c->proto, TS_OP_GET);
	put_key(b, k);
	if (!send_req(c, b) || !recv_u64(c, &len)) {
		return false;
	}
	if (len != sizeof(got)) {
		return note_fail(c, "the append log is %llu bytes, expected %zu",
				 (unsigned long long)len, sizeof(got));
	}
	if (!recv_n(c, got, sizeof(got))) {
		return false;
	}
	for (i = 0; i < CLIENTS / 2; i++) {
		memcpy(chunk, got + i * CHUNK, CHUNK);
		chunk[CHUNK] = '\0';
		if (sscanf(chunk, "<%d>", &who) != 1 || who < 0 || who >= CLIENTS || who % 2 == 0 ||
		    seen[who]++) {
			return note_fail(c, "the append log has a bad or repeated chunk \"%s\"",
					 chunk);
		}
	}
	return true;
}

/* APPEND (2.x) or nothing; ADD to the count; the last arrival sets done; all WAIT for it. */
static bool barrier(struct client *c, struct wire_buf *b, int r)
{
	char k[64], chunk[CHUNK + 1];
	uint64_t n;

	key(k, sizeof(k), c->run, r, "log", 0);
	snprintf(chunk, sizeof(chunk), "<%d>%*s", c->index, CHUNK - 2 - (c->index > 9 ? 2 : 1), "");
	ts_put_query(b, TS_PROTO_V2, TS_OP_APPEND);
	put_key(b, k);
	ts_put_vec(b, chunk, CHUNK);
	if (c->proto == TS_PROTO_V2 && !send_req(c, b)) {
		return false;
	}
	b->len = 0;
	key(k, sizeof(k), c->run, r, "count", 0);
	snprintf(c->doing, sizeof(c->doing), "ADD %s", k);
	ts_put_query(b, c->proto, TS_OP_ADD);
	put_key(b, k);
	ts_put_u64(b, 1);
	if (!send_req(c, b) || !recv_u64(c, &n)) {
		return false;
	}
	if (n < 1 || n > CLIENTS) {
		return note_fail(c, "ADD of the barrier returned %llu", (unsigned long long)n);
	}
	key(k, sizeof(k), c->run, r, "done", 0);
	if (n == CLIENTS) {
		ts_put_query(b, c->proto, TS_OP_SET);
		put_key(b, k);
		ts_put_vec(b, "1", 1);
		if (!send_req(c, b)) {
			return false;
		}
	}
	ts_put_query(b, c->proto, TS_OP_WAIT);
	ts_put_u64(b, 1);
	put_key(b, k);
	snprintf(c->doing, sizeof(c->doing), "WAIT %s", k);
	return send_req(c, b) && expect_u8(c, TS_WAIT_STOP, "WAIT for the barrier");
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	struct wire_buf b = {0};
	uint8_t v[MAX_VAL];
	char k[64];
	int r, j;
	size_t n;

	c->fd = raw_connect(c->port);
	if (c->fd < 0) {
		note_fail(c, "connect: %s", strerror(-c->fd));
		return NULL;
	}
	if (c->proto == TS_PROTO_V2) {
		ts_put_query(&b, c->proto, TS_OP_VALIDATE);
		ts_put_u32(&b, TS_MAGIC);
		send_req(c, &b);
	}
	for (r = 0; r < ROUNDS && c->err[0] == '\0'; r++) {
		c->round = r;
		/* gloo's connectFullMesh: set my address, then wait for and get every peer's */
		key(k, sizeof(k), c->run, r, "addr", c->index);
		n = value_of(c->run, r, c->index, v);
		ts_put_query(&b, c->proto, TS_OP_SET);
		put_key(&b, k);
		ts_put_vec(&b, v, n);
		if (!send_req(c, &b)) {
			break;
		}
		for (j = 1; j < CLIENTS && c->err[0] == '\0'; j++) {
			wait_get(c, &b, r, (c->index + j) % CLIENTS);
		}
		if (c->err[0] == '\0' && c->proto == TS_PROTO_V2) {
			multi_get(c, &b, r);
		}
		if (c->err[0] == '\0' && barrier(c, &b, r) && c->proto == TS_PROTO_V2) {
			check_log(c, &b, r);
		}
	}
	close(c->fd);
	wire_buf_finish(&b);
	return NULL;
}

/* One request pair (SET, then GET of the same key) sent split at byte @cut, both versions:
 * whatever the boundary, the value comes back whole. */
static void split_everywhere(int port, enum ts_proto proto)
{
	struct client c = {.port = port, .index = 0, .proto = proto};
	struct wire_buf b = {0};
	uint8_t v[MAX_VAL];
	size_t n = value_of(7, 1, 3, v), cut, total;

	c.fd = raw_connect(port);
	assert_true(c.fd >= 0);
	if (proto == TS_PROTO_V2) {
		ts_put_query(&b, proto, TS_OP_VALIDATE);
		ts_put_u32(&b, TS_MAGIC);
	}
	ts_put_query(&b, proto, TS_OP_SET);
	put_key(&b, "/split");
	ts_put_vec(&b, v, 20);
	ts_put_query(&b, proto, TS_OP_GET);
	put_key(&b, "/split");
	total = b.len;
	assert_true(raw_send(c.fd, b.p, total) == 0);
	assert_true(expect_vec(&c, v, 20, "GET /split"));
	b.len = 0;
	ts_put_query(&b, proto, TS_OP_SET);
	put_key(&b, "/split");
	ts_put_vec(&b, v, n);
	ts_put_query(&b, proto, TS_OP_GET);
	put_key(&b, "/split");
	total = b.len;
	for (cut = 1; cut < total; cut++) {
		v[2] = (uint8_t)cut;		   /* each pass sets a value of its own */
		memcpy(b.p + 1 + 8 + 6 + 8, v, n); /* SET's value: after the query, key, length */
		assert_true(raw_send(c.fd, b.p, cut) == 0);
		assert_true(raw_send(c.fd, b.p + cut, total - cut) == 0);
		if (!expect_vec(&c, v, n, "GET /split")) {
			fail_msg("split at byte %zu of %zu: %s", cut, total, c.err);
		}
	}
	close(c.fd);
	wire_buf_finish(&b);
}

static unsigned runs(void)
{
	const char *s = getenv("CRUN_TCPSTORE_STRESS_RUNS");
	long n = s != NULL ? strtol(s, NULL, 10) : 1;

	return n > 0 && n < 100000 ? (unsigned)n : 1;
}

static void tcpstore_requests_split_at_every_byte_are_answered_whole(void **state)
{
	const char *const args[] = {"--tcpstore-run", "stress", NULL};
	struct daemon d;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	split_everywhere(d.port, TS_PROTO_V1);
	split_everywhere(d.port, TS_PROTO_V2);
	assert_int_equal(daemon_stop(&d, SIGTERM), 0);
}

static void tcpstore_many_clients_read_every_value_byte_for_byte(void **state)
{
	const char *const args[] = {"--tcpstore-run", "stress", NULL};
	static struct client cl[CLIENTS];
	unsigned run, n = runs();
	struct daemon d;
	int i, bad;

	(void)state;
	for (run = 0; run < n; run++) {
		assert_int_equal(daemon_start(&d, args), 0);
		for (i = 0; i < CLIENTS; i++) {
			memset(&cl[i], 0, sizeof(cl[i]));
			cl[i].port = d.port;
			cl[i].index = i;
			cl[i].run = run;
			cl[i].proto = i % 2 ? TS_PROTO_V2 : TS_PROTO_V1;
			cl[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + run;
			assert_int_equal(pthread_create(&cl[i].thread, NULL, client_main, &cl[i]),
					 0);
		}
		for (i = 0; i < CLIENTS; i++) {
			pthread_join(cl[i].thread, NULL);
		}
		bad = 0;
		for (i = 0; i < CLIENTS; i++) {
			if (cl[i].err[0] != '\0') {
				print_error("run %u of %u: %s\n", run + 1, n, cl[i].err);
				bad++;
			}
		}
		if (bad > 0) {
			daemon_stop(&d, SIGKILL);
			fail_msg("run %u of %u: %d of %d clients failed", run + 1, n, bad, CLIENTS);
		}
		assert_int_equal(daemon_stop(&d, SIGTERM), 0);
	}
	if (n > 1) {
		print_message("%u runs of %d clients x %d rounds: every value byte for byte\n", n,
			      CLIENTS, ROUNDS);
	}
}

/*
 * A TCPStore client dropped by a limit (here the frame deadline: half a request, then
 * nothing) sees the connection close and no byte before it: TCPStore has no error replies,
 * and a crun error frame would be read as the answer to its request.
 */
static void tcpstore_client_over_a_limit_is_closed_without_a_crun_frame(void **state)
{
	const char *const args[] = {"--tcpstore-run", "stress", "--frame-timeout", "1", NULL};
	struct wire_buf b = {0};
	struct daemon d;
	uint8_t buf[256];
	ssize_t n;
	int fd, err;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	fd = raw_connect(d.port);
	assert_true(fd >= 0);
	ts_put_query(&b, TS_PROTO_V1, TS_OP_SET);
	ts_put_u64(&b, 100); /* a 100-byte key, of which 3 come */
	wire_put_raw(&b, "/ab", 3);
	assert_int_equal(raw_send(fd, b.p, b.len), 0);
	do {
		n = recv(fd, buf, sizeof(buf), 0); /* bounded: IO_TIMEOUT_MS */
	} while (n < 0 && errno == EINTR);
	err = errno;
	close(fd);
	wire_buf_finish(&b);
	assert_int_equal(daemon_stop(&d, SIGTERM), 0);
	if (n > 0) {
		fail_msg("the store sent %zd bytes to a TCPStore client it dropped", n);
	}
	if (n < 0 && err != ECONNRESET) {
		fail_msg("not closed: %s", strerror(err));
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tcpstore_requests_split_at_every_byte_are_answered_whole),
		cmocka_unit_test(tcpstore_many_clients_read_every_value_byte_for_byte),
		cmocka_unit_test(tcpstore_client_over_a_limit_is_closed_without_a_crun_frame),
	};

	signal(SIGPIPE, SIG_IGN);
	return test_run_group("store-tcpstore-stress", tests, argc > 1 ? argv[1] : NULL, NULL,
			      NULL);
}
