/* SPDX-License-Identifier: MIT */
/* tests/store/test_client_tcp.c: the TCP client's deadlines against a server that stalls, and
 * against a port that drops packets; its blocking get against a store older than WAIT's
 * ANY_GET mode. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <crun/error.h>

#include "rendezvous/store/backend.h"
#include "src/common/util.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "rendezvous/store/wire.h"

#define MAX_CONNS 8
#define T 20000 /* a generous timeout for the operations the fake server answers */

/*
 * A real TCP peer on 127.0.0.1 (port 0) that completes the handshake and answers PING, and
 * reads every other request without ever answering it: the client's own deadline is all
 * that can end such a call.
 */
struct mute {
	int lfd;
	int port;
	int stop[2];
	pthread_t th;
	int fd[MAX_CONNS];
	uint8_t buf[MAX_CONNS][4096];
	size_t len[MAX_CONNS];
	int accepted;
	int forge; /* answer SET with an OK reply of id 0 (a connection-level id) */
	int older; /* answer WAIT and GET as a store before WAIT's ANY_GET mode */
	int waits[3], gets; /* what the older store was asked: WAITs by mode, GETs */
};

static void answer(int fd, const struct wire_hdr *h)
{
	struct wire_buf b = {0};
	size_t off;

	off = wire_frame_begin(&b, h->op, WIRE_FLAG_REPLY, WIRE_OK, h->id);
	if (h->op == WIRE_OP_HELLO) {
		wire_put_u16(&b, WIRE_VERSION);
		wire_put_u16(&b, WIRE_AUTH_NONE);
		wire_put_u32(&b, 0); /* no nonce */
		wire_put_u32(&b, WIRE_MAX_FRAME);
		wire_put_u32(&b, CRUN_STORE_MAX_KEY_LEN);
		wire_put_u32(&b, CRUN_STORE_MAX_VALUE_LEN);
		wire_put_u32(&b, CRUN_STORE_MAX_KEYS);
		wire_put_u32(&b, 1024);
	}
	wire_frame_end(&b, off);
	if (!b.oom && send(fd, b.p, b.len, MSG_NOSIGNAL) != (ssize_t)b.len) {
		fprintf(stderr, "mute server: send: %s\n", strerror(errno));
	}
	wire_buf_finish(&b);
}

/*
 * A store before WAIT's ANY_GET mode (docs/protocol.md): mode 2 is refused as its decoder
 * refused it, ALL and ANY are answered with index 0, GET with "v".
 */
static void answer_older(struct mute *m, int fd, const struct wire_hdr *h, const uint8_t *payload)
{
	struct wire_buf b = {0};
	size_t off;

	if (h->op == WIRE_OP_WAIT && payload[0] > WIRE_WAIT_ANY) {
		m->waits[payload[0] < 3 ? payload[0] : 2]++;
		wire_put_error(&b, WIRE_OP_WAIT, h->id, WIRE_E_INVALID, "WAIT: bad mode 2");
	} else {
		off = wire_frame_begin(&b, h->op, WIRE_FLAG_REPLY, WIRE_OK, h->id);
		if (h->op == WIRE_OP_WAIT) {
			m->waits[payload[0]]++;
			wire_put_u32(&b, 0);
		} else {
			m->gets++;
			wire_put_u8(&b, 1);
			wire_put_bytes(&b, "v", 1);
		}
		wire_frame_end(&b, off);
	}
	if (!b.oom && send(fd, b.p, b.len, MSG_NOSIGNAL) != (ssize_t)b.len) {
		fprintf(stderr, "older server: send: %s\n", strerror(errno));
	}
	wire_buf_finish(&b);
}

/* Consume the complete frames buffered for connection @i; answer HELLO and PING only. */
static void frames(struct mute *m, int i)
{
	struct wire_hdr h;
	size_t total;

	while (m->len[i] >= WIRE_HDR_LEN) {
		if (wire_hdr_decode(m->buf[i], sizeof(m->buf[i]) - 4, &h) < 0) {
			m->len[i] = 0; /* not a frame this test sends: drop it */
			return;
		}
		total = (size_t)h.len + 4;
		if (m->len[i] < total) {
			return;
		}
		if (h.op == WIRE_OP_HELLO || h.op == WIRE_OP_PING) {
			answer(m->fd[i], &h);
		} else if ((h.op == WIRE_OP_WAIT || h.op == WIRE_OP_GET) &&
			   __atomic_load_n(&m->older, __ATOMIC_ACQUIRE)) {
			answer_older(m, m->fd[i], &h, m->buf[i] + WIRE_HDR_LEN);
		} else if (h.op == WIRE_OP_SET && __atomic_load_n(&m->forge, __ATOMIC_ACQUIRE)) {
			struct wire_hdr z = h;

			z.id = 0;
			answer(m->fd[i], &z);
		}
		memmove(m->buf[i], m->buf[i] + total, m->len[i] - total);
		m->len[i] -= total;
	}
}

static void *mute_main(void *arg)
{
	struct mute *m = arg;
	struct pollfd p[MAX_CONNS + 2];
	int i, n, fd;
	ssize_t k;

	for (;;) {
		p[0] = (struct pollfd){m->stop[0], POLLIN, 0};
		p[1] = (struct pollfd){m->lfd, POLLIN, 0};
		for (i = 0; i < MAX_CONNS; i++) {
			p[i + 2] = (struct pollfd){m->fd[i], POLLIN, 0}; /* fd -1 is skipped */
		}
		n = poll(p, MAX_CONNS + 2, 60000);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0 || p[0].revents != 0) {
			return NULL; /* stop, or a minute with nothing to do: the test is over */
		}
		if (p[1].revents & POLLIN) {
			fd = accept(m->lfd, NULL, NULL);
			for (i = 0; fd >= 0 && i < MAX_CONNS && m->fd[i] >= 0; i++) {
			}
			if (fd >= 0 && i == MAX_CONNS) {
				close(fd);
			} else if (fd >= 0) {
				m->fd[i] = fd;
				m->len[i] = 0;
				__atomic_fetch_add(&m->accepted, 1, __ATOMIC_RELEASE);
			}
		}
		for (i = 0; i < MAX_CONNS; i++) {
			if (m->fd[i] < 0 || p[i + 2].revents == 0) {
				continue;
			}
			k = recv(m->fd[i], m->buf[i] + m->len[i], sizeof(m->buf[i]) - m->len[i], 0);
			if (k <= 0) {
				close(m->fd[i]);
				m->fd[i] = -1;
				continue;
			}
			m->len[i] += (size_t)k;
			frames(m, i);
		}
	}
}

static int mute_setup(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	struct mute *m = calloc(1, sizeof(*m));
	int i;

	if (m == NULL) {
		return -1;
	}
	for (i = 0; i < MAX_CONNS; i++) {
		m->fd[i] = -1;
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	m->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (m->lfd < 0 || bind(m->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(m->lfd, 16) < 0 || getsockname(m->lfd, (struct sockaddr *)&sa, &sl) < 0 ||
	    pipe(m->stop) < 0) {
		if (m->lfd >= 0) {
			close(m->lfd);
		}
		free(m);
		return -1;
	}
	m->port = ntohs(sa.sin_port);
	if (pthread_create(&m->th, NULL, mute_main, m) != 0) {
		close(m->lfd);
		close(m->stop[0]);
		close(m->stop[1]);
		free(m);
		return -1;
	}
	*state = m;
	return 0;
}

static int mute_teardown(void **state)
{
	struct mute *m = *state;
	int i;

	close(m->stop[1]);
	pthread_join(m->th, NULL);
	close(m->stop[0]);
	close(m->lfd);
	for (i = 0; i < MAX_CONNS; i++) {
		if (m->fd[i] >= 0) {
			close(m->fd[i]);
		}
	}
	free(m);
	return 0;
}

static void open_client(struct mute *m, struct store_backend **b, const struct store_ops **ops)
{
	struct crun_diag err = {0};
	int rc;

	rc = store_tcp_open("127.0.0.1", m->port, NULL, T, b, ops, &err);
	if (rc < 0) {
		fail_msg("store_tcp_open: %s", err.msg);
	}
}

/* A request the server never answers ends at the operation's own timeout, with a message. */
static void unanswered_get_times_out_at_its_deadline(void **state)
{
	struct mute *m = *state;
	const struct store_ops *ops;
	struct store_backend *b;
	int64_t t0, dt;
	size_t len;
	void *v = NULL;
	int rc;

	open_client(m, &b, &ops);
	assert_int_equal(ops->ping(b, T), 0);
	t0 = crun_now_ms();
	rc = ops->get(b, "k", &v, &len, 300);
	dt = crun_now_ms() - t0;
	assert_int_equal(rc, -ETIMEDOUT);
	assert_null(v);
	assert_non_null(strstr(store_tcp_last_error(b), "no reply in time"));
	if (dt < 250 || dt >= 5000) {
		fail_msg("a 300 ms get against a mute server returned after %lld ms", (long long)dt);
	}
	/* The stalled connection was dropped: the next call reconnects and is answered. */
	assert_int_equal(ops->ping(b, T), 0);
	assert_int_equal(__atomic_load_n(&m->accepted, __ATOMIC_ACQUIRE), 2);
	ops->close(b);
}

/*
 * A store older than WAIT's ANY_GET mode refuses it: the blocking get still works, as a wait
 * and a get, and the handle does not ask for ANY_GET again.
 */
static void wait_get_falls_back_on_an_older_store(void **state)
{
	struct mute *m = *state;
	const struct store_ops *ops;
	const char *keys[] = {"k"};
	struct store_backend *b;
	void *v = NULL;
	size_t len = 0;
	int i;

	__atomic_store_n(&m->older, 1, __ATOMIC_RELEASE);
	open_client(m, &b, &ops);
	for (i = 0; i < 2; i++) {
		assert_int_equal(ops->wait_get(b, keys, 1, &v, &len, T, NULL), 0);
		assert_int_equal(len, 1);
		assert_memory_equal(v, "v", 2);
		free(v);
		v = NULL;
	}
	ops->close(b);
	__atomic_store_n(&m->older, 0, __ATOMIC_RELEASE);
	/* The server thread counted before it answered, so the counts are final. */
	assert_int_equal(m->waits[WIRE_WAIT_ANY_GET], 1);
	assert_int_equal(m->waits[WIRE_WAIT_ANY], 2);
	assert_int_equal(m->gets, 2);
}

/*
 * Id 0 is only a connection-level error (the server closes after it): an OK reply with id 0
 * answers no request. A set, waited for or not, is not taken as stored on the word of one.
 */
static void ok_reply_with_id_0_is_no_answer(void **state)
{
	struct mute *m = *state;
	const struct store_ops *ops;
	struct store_backend *b;
	int rc;

	open_client(m, &b, &ops);
	assert_int_equal(ops->ping(b, T), 0);
	__atomic_store_n(&m->forge, 1, __ATOMIC_RELEASE);
	assert_int_equal(ops->set_async(b, "k", "v", 1, 0, T), 0);
	rc = ops->flush(b, T);
	print_message("flush: %d: %s\n", rc, store_tcp_last_error(b));
	assert_int_equal(rc, -EPROTO);
	assert_non_null(strstr(store_tcp_last_error(b), "SET \"k\" (sent without waiting)"));
	rc = ops->set(b, "k2", "v", 1, 0, T);
	print_message("set: %d: %s\n", rc, store_tcp_last_error(b));
	assert_int_equal(rc, -EPROTO);
	ops->close(b);
}

/*
 * The receive timeout is cached per connection: a short operation after long ones must not
 * inherit the long timeout, and a long one after short ones must not end early.
 */
static void receive_timeout_follows_each_operations_deadline(void **state)
{
	struct mute *m = *state;
	const struct store_ops *ops;
	struct store_backend *b;
	int64_t t0, dt, r = 0;
	int rc;

	open_client(m, &b, &ops);
	assert_int_equal(ops->ping(b, T), 0); /* caches about 20 s */
	t0 = crun_now_ms();
	rc = ops->add(b, "n", 1, &r, 200);
	dt = crun_now_ms() - t0;
	assert_int_equal(rc, -ETIMEDOUT);
	if (dt < 150 || dt >= 5000) {
		fail_msg("a 200 ms add after a 20 s ping returned after %lld ms", (long long)dt);
	}
	/* Reconnect with a 1 s ping cached, then a 1.5 s call: its first receive may time out
	 * after about 1 s, and the call must go on waiting until its own deadline. */
	assert_int_equal(ops->ping(b, 1000), 0);
	t0 = crun_now_ms();
	rc = ops->del(b, "k", 1500);
	dt = crun_now_ms() - t0;
	assert_int_equal(rc, -ETIMEDOUT);
	if (dt < 1400 || dt >= 6500) {
		fail_msg("a 1500 ms delete after a 1 s ping returned after %lld ms", (long long)dt);
	}
	ops->close(b);
}

/*
 * A port whose SYNs are dropped, as behind a firewall's DROP rule: a listener whose accept
 * queue is full (backlog 0, filled, never accepted) drops them on Linux. Each try's connect is
 * bounded (3 s), so an 8 s connect budget makes several tries and names the cause; before, one
 * connect took the whole budget (and, with the agent's 600 s, the kernel's two minutes of SYN
 * retries) and said only "timed out connecting".
 */
static void connect_to_a_port_that_drops_packets_is_bounded_per_try(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int lfd, fill[3], i, rc, tries = 0;
	const struct store_ops *ops;
	struct store_backend *b = NULL;
	struct crun_diag err = {0};
	char want[80];
	const char *p;
	int64_t t0, dt;

	(void)state;
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 0), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
	for (i = 0; i < 3; i++) {
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		assert_true(fill[i] >= 0);
		(void)connect(fill[i], (struct sockaddr *)&a, sizeof(a));
	}
	t0 = crun_now_ms();
	rc = store_tcp_open("127.0.0.1", ntohs(a.sin_port), NULL, 8000, &b, &ops, &err);
	dt = crun_now_ms() - t0;
	printf("# %lld ms: %s\n", (long long)dt, err.msg);
	assert_int_equal(rc, -ETIMEDOUT);
	snprintf(want, sizeof(want), "no answer from 127.0.0.1:%d (packets dropped?)",
		 ntohs(a.sin_port));
	assert_non_null(strstr(err.msg, want));
	p = strstr(err.msg, " tries)");
	assert_non_null(p);
	while (p > err.msg && p[-1] >= '0' && p[-1] <= '9') {
		p--;
	}
	tries = atoi(p);
	if (tries < 2) {
		fail_msg("one connect try took the whole 8 s budget: %s", err.msg);
	}
	if (dt < 7500 || dt >= 20000) {
		fail_msg("an 8 s connect budget ended after %lld ms", (long long)dt);
	}
	for (i = 0; i < 3; i++) {
		close(fill[i]);
	}
	close(lfd);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(unanswered_get_times_out_at_its_deadline,
						mute_setup, mute_teardown),
		cmocka_unit_test_setup_teardown(receive_timeout_follows_each_operations_deadline,
						mute_setup, mute_teardown),
		cmocka_unit_test_setup_teardown(wait_get_falls_back_on_an_older_store, mute_setup,
						mute_teardown),
		cmocka_unit_test_setup_teardown(ok_reply_with_id_0_is_no_answer, mute_setup,
						mute_teardown),
		cmocka_unit_test(connect_to_a_port_that_drops_packets_is_bounded_per_try),
	};

	signal(SIGPIPE, SIG_IGN);
	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("store-client-tcp", tests, NULL, NULL);
}
