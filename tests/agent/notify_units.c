/* SPDX-License-Identifier: MIT */
/* tests/agent/notify_units.c: the notify protocol's sender and the status record's codec. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/common/notify.h"
#include "agent/notify_status.h"

static void status_record_round_trips(void **state)
{
	struct node_record r = {0}, back;
	char line[1024];

	(void)state;
	snprintf(r.host, sizeof(r.host), "node07");
	r.pid = 4242;
	r.state = NODE_RESTARTING;
	r.node_rank = 3;
	r.nodes = 16;
	r.world_size = 128;
	r.round = 2;
	r.restarts = 1;
	r.max_restarts = 3;
	r.hb_wall_ms = 1764000000123;
	r.since_wall_ms = 1764000000000;
	r.fail_rank = 27;
	r.fail_exit = 137;
	r.fail_wall_ms = 1764000000100;
	snprintf(r.fail_msg, sizeof(r.fail_msg), "rank 27 (host node07): signal 9: a\nb=c msg=x");
	assert_true(notify_status_format(&r, line, sizeof(line)) > 0);
	assert_null(strchr(line, '\n')); /* one line, whatever the message held */
	assert_int_equal(notify_status_parse(line, &back), 0);
	assert_string_equal(back.host, "node07");
	assert_int_equal(back.pid, 4242);
	assert_int_equal(back.state, NODE_RESTARTING);
	assert_int_equal(back.node_rank, 3);
	assert_int_equal(back.nodes, 16);
	assert_int_equal(back.world_size, 128);
	assert_int_equal(back.round, 2);
	assert_int_equal(back.restarts, 1);
	assert_int_equal(back.max_restarts, 3);
	assert_true(back.hb_wall_ms == r.hb_wall_ms && back.since_wall_ms == r.since_wall_ms);
	assert_int_equal(back.fail_rank, 27);
	assert_int_equal(back.fail_exit, 137);
	assert_true(back.fail_wall_ms == r.fail_wall_ms);
	assert_string_equal(back.fail_msg, "rank 27 (host node07): signal 9: a b=c msg=x");
}

static void status_record_rejects_other_lines(void **state)
{
	struct node_record r;

	(void)state;
	assert_int_equal(notify_status_parse("", &r), -EBADMSG);
	assert_int_equal(notify_status_parse("v2 state=running", &r), -EBADMSG);
	assert_int_equal(notify_status_parse("v1 state=running host=h pid=1 rank=0", &r), -EBADMSG);
	/* An unknown state parses (a newer agent) but names no known state. */
	assert_int_equal(notify_status_parse("v1 state=paused host=h pid=1 rank=0 nodes=1 world=1 "
					     "round=0 restarts=0 max=0 hb=1 since=1 frank=-1 "
					     "fexit=-1 ftime=0 msg=",
					     &r),
			 0);
	assert_string_equal(node_state_name(r.state), "unknown");
	assert_string_equal(node_state_name(NODE_FINISHED), "finished");
}

/* Bind a datagram socket at @path ('@' for abstract); returns its fd. */
static int bind_dgram(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(a.sun_path, path, strlen(path));
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	if (path[0] == '@') {
		a.sun_path[0] = '\0';
	} else {
		len++;
	}
	assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
	return fd;
}

static void recv_is(int fd, const char *want)
{
	char buf[2048];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

static void notify_sends_one_datagram_and_hides_the_variables(void **state)
{
	char dir[] = "/tmp/crun-notify-XXXXXX", path[200];
	char big[3000];
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/notify", dir);
	fd = bind_dgram(path);
	setenv("NOTIFY_SOCKET", path, 1);
	setenv("WATCHDOG_USEC", "5000000", 1);
	unsetenv("WATCHDOG_PID");
	assert_int_equal(notify_init(), 0);
	assert_true(notify_enabled());
	assert_null(getenv("NOTIFY_SOCKET"));
	assert_null(getenv("WATCHDOG_USEC"));
	assert_true(notify_watchdog_usec() == 5000000);
	assert_int_equal(notify_send("READY=1\nSTATUS=%s", "running"), 0);
	recv_is(fd, "READY=1\nSTATUS=running");
	/* Too long for one message: cut, never dropped. */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(notify_send("STATUS=%s", big), 0);
	{
		char buf[4096];
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		assert_true(n > 900 && n < 1024);
		assert_memory_equal(buf, "STATUS=xxx", 10);
	}
	notify_finish();
	assert_false(notify_enabled());
	assert_int_equal(notify_send("STOPPING=1"), 0); /* off: a no-op */
	close(fd);
	unlink(path);
	rmdir(dir);
}

static void notify_abstract_socket_and_foreign_watchdog(void **state)
{
	char name[64], pid[32];
	int fd;

	(void)state;
	snprintf(name, sizeof(name), "@crun-notify-unit-%ld", (long)getpid());
	fd = bind_dgram(name);
	setenv("NOTIFY_SOCKET", name, 1);
	setenv("WATCHDOG_USEC", "100000", 1);
	snprintf(pid, sizeof(pid), "%ld", (long)getpid() + 1);
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(notify_init(), 0);
	assert_true(notify_watchdog_usec() == 0); /* another process's watchdog */
	assert_null(getenv("WATCHDOG_PID"));
	assert_int_equal(notify_watchdog_start(), 0);
	assert_int_equal(notify_send("STOPPING=1"), 0);
	recv_is(fd, "STOPPING=1");
	notify_finish();
	close(fd);
}

static void notify_refuses_what_is_not_a_unix_socket(void **state)
{
	(void)state;
	setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
	assert_int_equal(notify_init(), -EAFNOSUPPORT);
	assert_false(notify_enabled());
	assert_null(getenv("NOTIFY_SOCKET"));
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(notify_init(), 0);
	assert_false(notify_enabled());
	notify_finish();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(status_record_round_trips),
		cmocka_unit_test(status_record_rejects_other_lines),
		cmocka_unit_test(notify_sends_one_datagram_and_hides_the_variables),
		cmocka_unit_test(notify_abstract_socket_and_foreign_watchdog),
		cmocka_unit_test(notify_refuses_what_is_not_a_unix_socket),
	};

	return cmocka_run_group_tests_name("notify", tests, NULL, NULL);
}
