/* SPDX-License-Identifier: MIT */
/*
 * tests/store/test_busy_poll.c: after a read that brought requests the server polls for
 * --busy-poll USEC before it sleeps (rendezvous/store/server_poll.c, issue 23), and then it
 * sleeps: an idle server with an open connection spends no CPU.
 *
 * Whether the server slept is read from its voluntary_ctxt_switches: a server that polls
 * (epoll_wait with no timeout) between a client's requests does not go to sleep, one that
 * does not poll sleeps in epoll_wait after nearly every reply. The counts are bounded loosely
 * (a loaded host can preempt either, which is not a voluntary switch).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/store.h>

#include "src/common/clock.h"
#include "src/common/util.h"
#include "tests/store/helpers.h"

#define ROUND_TRIPS 50
#define WAIT_S 20         /* bound on the wait for the server to sleep */
#define PROGRESS_S 5      /* that wait says what it waits for this often */
#define IDLE_WINDOW_MS 2000
#define IDLE_MAX_CPU_MS 200 /* an idle server: 0-10 ms seen; a polling one: the window */

static struct daemon d;

/* The server's main thread: a field of /proc/PID/task/PID/status, or -1. */
static long server_status(const char *name)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)d.pid, (int)d.pid);
	return util_status_field(path, name);
}

/* The server's main thread's state letter ('S': asleep), or '?'. */
static char server_state(void)
{
	return task_state(d.pid, d.pid);
}

/* The server's user + system CPU so far, in ms (/proc/PID/stat fields 14, 15), or -1. */
static long server_cpu_ms(void)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)d.pid);
	f = fopen(path, "r");
	if (f == NULL) {
		return -1;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
				&st) != 2) {
		return -1;
	}
	return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* Until the server sleeps twice in a row (its poll window over); fails after WAIT_S. */
static void until_server_sleeps(const char *why)
{
	int64_t start = crun_now_ns(), next = start + PROGRESS_S * 1000000000LL;
	long v;

	for (;;) {
		v = server_status("voluntary_ctxt_switches");
		if (server_state() == 'S') {
			usleep(10000);
			if (server_state() == 'S' && server_status("voluntary_ctxt_switches") == v) {
				return;
			}
		}
		if (crun_now_ns() - start > WAIT_S * 1000000000LL) {
			fail_msg("crun-rdzvd did not sleep within %d s (%s; state %c)", WAIT_S, why,
				 server_state());
		}
		if (crun_now_ns() > next) {
			print_message("waiting for crun-rdzvd to sleep (%s)\n", why);
			next += PROGRESS_S * 1000000000LL;
		}
		usleep(1000);
	}
}

/* The times the server slept during ROUND_TRIPS adds on @st, @gap_us apart, from a sleeping
 * server. */
static long sleeps_over_round_trips(struct crun_store *st, unsigned gap_us)
{
	long before, after;
	int i;

	until_server_sleeps("before the round trips");
	before = server_status("voluntary_ctxt_switches");
	for (i = 0; i < ROUND_TRIPS; i++) {
		assert_int_equal(crun_store_add(st, "n", 1, NULL), 0);
		if (gap_us > 0) {
			usleep(gap_us);
		}
	}
	after = server_status("voluntary_ctxt_switches");
	assert_true(before >= 0 && after >= before);
	return after - before;
}

static void start(const char *poll_us, struct crun_store **st)
{
	const char *args[] = {"--insecure", "--no-unix-socket", "--busy-poll", poll_us, NULL};

	assert_int_equal(daemon_start(&d, args), 0);
	assert_int_equal(daemon_client_open(&d, 60000, st), 0);
	assert_int_equal(crun_store_add(*st, "n", 1, NULL), 0);
}

/* 1 s windows: every round trip lands in the window the one before opened. */
static void polls_between_requests_then_sleeps_and_idles(void **state)
{
	struct crun_store *st = NULL;
	long slept, cpu0, cpu1;

	(void)state;
	start("1000000", &st);
	slept = sleeps_over_round_trips(st, 0);
	if (slept > ROUND_TRIPS / 10) {
		fail_msg("crun-rdzvd --busy-poll 1000000 slept %ld times in %d round trips",
			 slept, ROUND_TRIPS);
	}
	/* The window ends: it sleeps, and with the connection open and idle it spends ~0. */
	until_server_sleeps("the poll window over");
	cpu0 = server_cpu_ms();
	usleep(IDLE_WINDOW_MS * 1000);
	cpu1 = server_cpu_ms();
	assert_true(cpu0 >= 0 && cpu1 >= cpu0);
	if (cpu1 - cpu0 > IDLE_MAX_CPU_MS) {
		fail_msg("crun-rdzvd used %ld ms of CPU in %d ms with an idle connection", cpu1 - cpu0,
			 IDLE_WINDOW_MS);
	}
	crun_store_close(st);
	assert_int_equal(daemon_stop(&d, SIGTERM), 0);
}

/*
 * The control: without polling the server sleeps between a client's round trips. They are
 * CONTROL_GAP_US apart, and a batch is tried again up to CONTROL_BATCHES times: on a loaded
 * 2-core box the server, preempted after a reply (not a voluntary switch), can find the next
 * request already there when it runs again, and so not sleep, in a whole batch.
 */
#define CONTROL_GAP_US 2000
#define CONTROL_BATCHES 5
static void without_polling_sleeps_between_requests(void **state)
{
	struct crun_store *st = NULL;
	char seen[128] = "";
	long slept = 0;
	size_t len;
	int b;

	(void)state;
	start("0", &st);
	for (b = 0; b < CONTROL_BATCHES && slept < ROUND_TRIPS / 5; b++) {
		slept = sleeps_over_round_trips(st, CONTROL_GAP_US);
		len = strlen(seen);
		snprintf(seen + len, sizeof(seen) - len, "%s%ld", b > 0 ? ", " : "", slept);
	}
	crun_store_close(st);
	if (slept < ROUND_TRIPS / 5) {
		fail_msg("crun-rdzvd --busy-poll 0 slept only %s times in %d batches of %d round "
			 "trips %d us apart",
			 seen, CONTROL_BATCHES, ROUND_TRIPS, CONTROL_GAP_US);
	}
	assert_int_equal(daemon_stop(&d, SIGTERM), 0);
}

static int teardown(void **state)
{
	(void)state;
	if (d.pid > 0) {
		daemon_stop(&d, SIGKILL);
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(polls_between_requests_then_sleeps_and_idles, teardown),
		cmocka_unit_test_teardown(without_polling_sleeps_between_requests, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
