/* SPDX-License-Identifier: MIT */
/* tests/conformance/test_conformance.c: the conformance harness: backend fixture, helpers, main. */
/*
 * Usage: test_conformance file [FILTER]
 *        test_conformance tcp PATH/TO/crun-rdzvd [FILTER]
 *        test_conformance etcd PATH/TO/etcd [FILTER]
 * The file run uses a store file in a fresh temporary directory; the tcp run starts a real
 * crun-rdzvd on 127.0.0.1 port 0 and reads the bound address from its first stdout line; its
 * stderr passes through parked.c, which counts the waits it holds. The etcd run starts a real
 * single-member etcd on free loopback ports (etcd_fixture.c) and exits 77 when this build has
 * no etcd backend or there is no etcd binary.
 * Every test goes through the public API (include/crun/store.h) with a prefix of its own.
 * The tests live beside this file, by area: ops.c (each operation's semantics, TTLs, prefixes,
 * limits), races.c (waits and races between handles, threads and processes), backend.c
 * (endpoints, failures, and the file backend's format, locks and compaction); parked.c lets a
 * test see that the store holds a wait before it writes the key.
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
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "tests/conformance/conformance.h"
#include "tests/conformance/etcd_fixture.h"

enum conf_backend g_backend;
bool g_tcp;
static const char *g_rdzvd;
static const char *g_etcd_bin;
static struct etcd_proc g_etcd = {.pid = -1};
int g_etcd_port;
char g_dir[256];         /* temporary directory of the fixture */
char g_path[512];        /* file backend: the store file */
char g_endpoint[600];    /* what every test connects to */
static pid_t g_pid = -1; /* tcp: the crun-rdzvd we started */
unsigned g_seq;

/* ---- fixture: the backend under test ---- */

static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	int64_t end = crun_now_ms() + timeout_ms;
	size_t n = 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t r;

	while (n + 1 < cap) {
		int left = (int)(end - crun_now_ms());

		if (left <= 0 || poll(&p, 1, left) <= 0) {
			return -ETIMEDOUT;
		}
		r = read(fd, buf + n, 1);
		if (r <= 0) {
			return -EPIPE;
		}
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 0;
		}
		n++;
	}
	return -EMSGSIZE;
}

static void stop_daemon(void)
{
	int64_t end;
	int status;

	if (g_pid <= 0) {
		return;
	}
	kill(g_pid, SIGTERM);
	end = crun_now_ms() + 10000;
	while (waitpid(g_pid, &status, WNOHANG) == 0) {
		if (crun_now_ms() > end) {
			kill(g_pid, SIGKILL);
			waitpid(g_pid, &status, 0);
			break;
		}
		usleep(10000);
	}
	g_pid = -1;
}

static int start_daemon(void)
{
	char line[256];
	int pfd[2], efd[2];
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0) {
		return -1;
	}
	if (pipe2(efd, O_CLOEXEC) < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		return -1;
	}
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(efd[1], 2);
		/* --verbose: each held WAIT is logged (parked.c counts them). */
		execl(g_rdzvd, g_rdzvd, "--listen", "127.0.0.1:0", "--verbose", "--insecure",
		      (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", g_rdzvd, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	close(efd[1]);
	g_pid = pid;
	if (parked_tap_daemon(efd[0]) < 0) {
		close(pfd[0]);
		stop_daemon();
		return -1;
	}
	if (read_line(pfd[0], line, sizeof(line), 15000) < 0) {
		fprintf(stderr, "conformance: %s printed no address within 15 s\n", g_rdzvd);
		close(pfd[0]);
		stop_daemon();
		parked_tap_stop();
		return -1;
	}
	/* The daemon may log more to stdout: keep the pipe open but never block on it. */
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	snprintf(g_endpoint, sizeof(g_endpoint), "%s", line);
	return 0;
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/crun-conformance-XXXXXX");
	if (mkdtemp(g_dir) == NULL) {
		return -1;
	}
	snprintf(g_path, sizeof(g_path), "%s/store", g_dir);
	if (g_tcp) {
		return start_daemon();
	}
	if (g_backend == CONF_ETCD) {
		if (etcd_proc_start(g_etcd_bin, &g_etcd) < 0) {
			return -1;
		}
		g_etcd_port = g_etcd.port;
		snprintf(g_endpoint, sizeof(g_endpoint), "%s", g_etcd.endpoint);
		return 0;
	}
	snprintf(g_endpoint, sizeof(g_endpoint), "file://%s", g_path);
	return 0;
}

static int group_teardown(void **state)
{
	char p[600];

	(void)state;
	park_watch_end();
	stop_daemon();
	etcd_proc_stop(&g_etcd);
	parked_tap_stop();
	snprintf(p, sizeof(p), "%s.torn", g_path);
	unlink(p);
	snprintf(p, sizeof(p), "%s.compact", g_path);
	unlink(p);
	unlink(g_path);
	rmdir(g_dir);
	return 0;
}

/* ---- helpers ---- */

struct crun_store *open_with(const char *endpoint, const char *prefix, int timeout_ms)
{
	struct crun_store_opts o = {
		.endpoint = endpoint,
		.prefix = prefix,
		.connect_timeout_ms = 10000,
		.timeout_ms = timeout_ms,
	};
	struct crun_store *st = NULL;
	char err[256];
	int rc;

	rc = crun_store_open(&o, &st, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "open %s: %s (%s)\n", endpoint, err, crun_strerror(rc));
	}
	assert_int_equal(rc, 0);
	assert_non_null(st);
	return st;
}

/* A handle on the store under test with a prefix no other test uses. */
struct crun_store *open_fresh(void)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "conf/%u/%u/", (unsigned)getpid(), ++g_seq);
	return open_with(g_endpoint, prefix, 30000);
}

void want_value(struct crun_store *st, const char *key, const char *want)
{
	void *v = NULL;
	size_t len = 0;

	assert_int_equal(crun_store_get(st, key, &v, &len), 0);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(v, want, len);
	assert_int_equal(((char *)v)[len], '\0');
	free(v);
}

int sets(struct crun_store *st, const char *key, const char *val)
{
	return crun_store_set(st, key, val, strlen(val));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(set_get_roundtrip),
		cmocka_unit_test(get_missing_is_enoent),
		cmocka_unit_test(wait_all_times_out_within_bounds),
		cmocka_unit_test(wait_any_times_out_within_bounds),
		cmocka_unit_test(wait_returns_at_once_when_present),
		cmocka_unit_test(wait_woken_by_second_handle),
		cmocka_unit_test(wait_any_get_returns_the_value),
		cmocka_unit_test(wait_series_with_a_mark_misses_nothing),
		cmocka_unit_test(wait_get_blocks_until_the_key_exists),
		cmocka_unit_test(add_from_8_threads_is_exact),
		cmocka_unit_test(ticket_semantics),
		cmocka_unit_test(tickets_at_once_are_distinct_and_consecutive),
		cmocka_unit_test(old_counter_met_by_a_ticket_is_named),
		cmocka_unit_test(add_from_processes_is_exact),
		cmocka_unit_test(one_write_wakes_many_waiters),
		cmocka_unit_test(multi_set_is_atomic_for_readers),
		cmocka_unit_test(add_semantics),
		cmocka_unit_test(compare_set_race_has_one_winner),
		cmocka_unit_test(compare_set_semantics),
		cmocka_unit_test(delete_semantics),
		cmocka_unit_test(check_semantics),
		cmocka_unit_test(num_keys_counts_every_prefix),
		cmocka_unit_test(append_semantics),
		cmocka_unit_test(multi_get_with_absent_keys),
		cmocka_unit_test(multi_set_then_get),
		cmocka_unit_test(ttl_key_expires),
		cmocka_unit_test(huge_ttl_does_not_overflow),
		cmocka_unit_test(append_past_value_limit_is_emsgsize),
		cmocka_unit_test(prefix_isolation_and_clone),
		cmocka_unit_test(limits_are_emsgsize),
		cmocka_unit_test(bad_endpoints_are_einval),
		cmocka_unit_test(endpoint_spellings_reach_the_same_store),
		cmocka_unit_test(dead_endpoint_times_out),
		cmocka_unit_test(torn_last_record_is_recovered),
		cmocka_unit_test(hostile_record_lengths_are_rejected),
		cmocka_unit_test(held_lock_times_out),
		cmocka_unit_test(file_compaction_keeps_every_key),
		cmocka_unit_test(file_has_format_header),
		cmocka_unit_test(damaged_middle_record_is_refused),
		cmocka_unit_test(garbage_after_records_is_refused),
		cmocka_unit_test(zero_tail_is_torn),
		cmocka_unit_test(foreign_file_is_refused),
		cmocka_unit_test(old_format_file_is_refused),
	};
	static const char *const names[] = {"conformance-file", "conformance-tcp",
					    "conformance-etcd"};
	int filter_at;

	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "file") == 0) {
		g_backend = CONF_FILE;
		filter_at = 2;
	} else if (argc >= 3 && strcmp(argv[1], "tcp") == 0) {
		g_backend = CONF_TCP;
		g_rdzvd = argv[2];
		filter_at = 3;
	} else if (argc >= 3 && strcmp(argv[1], "etcd") == 0) {
		g_backend = CONF_ETCD;
		g_etcd_bin = argv[2];
		filter_at = 3;
		if (!etcd_proc_available(g_etcd_bin)) {
			return 77;
		}
	} else {
		fprintf(stderr,
			"usage: %s file [FILTER] | tcp PATH/TO/crun-rdzvd [FILTER] | "
			"etcd PATH/TO/etcd [FILTER]\n",
			argv[0]);
		return 2;
	}
	g_tcp = g_backend == CONF_TCP;
	return test_run_group(names[g_backend], tests, argc > filter_at ? argv[filter_at] : NULL,
			      group_setup, group_teardown);
}
