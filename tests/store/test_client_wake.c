/* SPDX-License-Identifier: MIT */
/*
 * tests/store/test_client_wake.c: a client waiting for its reply on the store's unix socket
 * sleeps until the reply comes, not also when the server reads its request (issue 23,
 * bench/notes/scale.md). A reader blocked in a unix socket's recv() is woken by every
 * wake-up of the socket, the write-space one included, which the server's read of the
 * request raises: each round trip then woke the client twice and cost the server a
 * wake-up (16% of crun-rdzvd's samples at 10,000 connections).
 *
 * The server is stopped (SIGSTOP) while the client sends a WAIT it will hold, so the
 * client is asleep before the server reads; once the server has read it (a later round
 * trip on another connection is answered), the waiting thread must not have run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <crun/store.h>

#include "src/common/util.h"
#include "src/common/clock.h"
#include "tests/store/helpers.h"

#define WAIT_S 20    /* bound on each wait for the waiting thread's state */
#define PROGRESS_S 5 /* a wait says what it waits for this often */

static struct daemon d;
static char sock_path[128];

static struct {
	struct crun_store *st;
	pid_t tid; /* set by the thread itself, read through __atomic */
	int rc;
} w;

static int client_open(struct crun_store **st)
{
	return daemon_client_open(&d, 60000, st);
}

static void *waiter(void *arg)
{
	const char *keys[] = {"never-yet"};

	(void)arg;
	__atomic_store_n(&w.tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	w.rc = crun_store_wait(w.st, keys, 1, 60000);
	return NULL;
}

/* The times the thread went to sleep (voluntary_ctxt_switches), or -1. */
static long sleeps(pid_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	return util_status_field(path, "voluntary_ctxt_switches");
}

/* Until the waiting thread sleeps ('S'); fails after WAIT_S, saying so every PROGRESS_S. */
static void until_asleep(const char *why)
{
	int64_t start = crun_now_ns(), next = start + PROGRESS_S * 1000000000LL;
	pid_t tid;

	for (;;) {
		tid = __atomic_load_n(&w.tid, __ATOMIC_ACQUIRE);
		if (tid > 0 && task_state(getpid(), tid) == 'S') {
			return;
		}
		if (crun_now_ns() - start > WAIT_S * 1000000000LL) {
			fail_msg("the waiting thread did not sleep within %d s (%s; state %c)", WAIT_S,
				 why, tid > 0 ? task_state(getpid(), tid) : '-');
		}
		if (crun_now_ns() > next) {
			print_message("waiting for the waiting thread to sleep (%s)\n", why);
			next += PROGRESS_S * 1000000000LL;
		}
		usleep(1000);
	}
}

static void reading_the_request_does_not_wake_the_waiter(void **state)
{
	const char *args[] = {"--insecure", "--unix-socket", sock_path, NULL};
	struct crun_store *other = NULL;
	pthread_t th;
	long before, after;
	char dir[] = "/tmp/crun-test-wake.XXXXXX"; /* a directory only this user can write */

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(sock_path, sizeof(sock_path), "%s/store.sock", dir);
	/* The clients use this socket: the test is about AF_UNIX. */
	assert_int_equal(setenv("CRUN_STORE_UNIX_SOCKET", sock_path, 1), 0);
	assert_int_equal(daemon_start(&d, args), 0);
	assert_int_equal(client_open(&w.st), 0);
	assert_int_equal(client_open(&other), 0);
	assert_int_equal(crun_store_add(w.st, "warm", 1, NULL), 0);

	assert_int_equal(kill(d.pid, SIGSTOP), 0);
	assert_int_equal(pthread_create(&th, NULL, waiter, NULL), 0);
	until_asleep("its WAIT sent to the stopped server");
	before = sleeps(w.tid);
	assert_int_equal(kill(d.pid, SIGCONT), 0);
	/* Answered after the server read the WAIT, which was waiting on its socket first. */
	assert_int_equal(crun_store_add(other, "after", 1, NULL), 0);
	/* A thread the read woke is runnable until it has looked and slept again. */
	until_asleep("the server has read its WAIT");
	after = sleeps(w.tid);
	assert_true(before >= 0 && after >= 0);
	if (after != before) {
		fail_msg("the client waiting for its reply was woken %ld time(s) when the server "
			 "read its request",
			 after - before);
	}

	assert_int_equal(crun_store_set(other, "never-yet", "1", 1), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(w.rc, 0);
	crun_store_close(w.st);
	crun_store_close(other);
	assert_int_equal(daemon_stop(&d, SIGTERM), 0);
}

/* A failed check leaves the daemon (perhaps stopped) behind: it goes here. */
static int teardown(void **state)
{
	(void)state;
	if (d.pid > 0) {
		daemon_stop(&d, SIGKILL);
	}
	if (sock_path[0] != '\0') {
		unlink(sock_path);
		*strrchr(sock_path, '/') = '\0';
		rmdir(sock_path);
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(reading_the_request_does_not_wake_the_waiter, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
