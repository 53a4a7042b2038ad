/* SPDX-License-Identifier: MIT */
/* tests/agent/test_units.c: error-file parsing, line routing and worker env/argv building. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/errfile.h"
#include "src/common/signames.h"
#include "agent/jobspec.h"
#include "agent/logroute.h"
#include "agent/spawn.h"
#include "agent/torch_probe.h"
#include "agent/watchdog.h"
#include "tests/lib/cmocka_skip.h"

static int parse(const char *doc, char *msg, size_t len)
{
	return errfile_parse_message(doc, strlen(doc), msg, len);
}

static void errfile_reads_torchrun_record_shape(void **state)
{
	char m[256];

	(void)state;
	assert_int_equal(parse("{\"message\": {\"message\": \"ValueError: bad lr\", \"extraInfo\": "
			       "{\"py_callstack\": \"Traceback ...\", \"timestamp\": \"17\"}}}",
			       m, sizeof(m)),
			 0);
	assert_string_equal(m, "ValueError: bad lr");
	/* extraInfo first, nested objects and arrays skipped. */
	assert_int_equal(parse("{\"x\": [1, {\"message\": \"no\"}, null], \"message\": {\"extraInfo\": "
			       "{\"a\": true}, \"message\": \"yes\"}}",
			       m, sizeof(m)),
			 0);
	assert_string_equal(m, "yes");
}

static void errfile_reads_plain_message(void **state)
{
	char m[256];

	(void)state;
	assert_int_equal(parse("  {\"message\": \"line1\\nline2 \\u0041\"}  ", m, sizeof(m)), 0);
	assert_string_equal(m, "line1 | line2 A");
}

static void errfile_rejects_garbage_without_crashing(void **state)
{
	static const char *const bad[] = {
		"", "[]", "{", "{\"message\"", "{\"message\": }", "{\"other\": 1}", "null",
		"{\"message\": {\"extraInfo\": {}}}", "{\"message\": \"unterminated",
		"{\"message\": \"\\u12\"}", "\"message\"",
	};
	char m[64];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], m, sizeof(m)), -EPROTO);
	}
}

static void errfile_bounds_depth_and_length(void **state)
{
	size_t n = 100000, i;
	char *doc = malloc(n + 1), m[16];

	(void)state;
	assert_non_null(doc);
	for (i = 0; i < n; i++) {
		doc[i] = i % 2 ? '[' : '{';
	}
	doc[n] = '\0';
	memcpy(doc, "{\"a\":", 5);
	assert_int_equal(parse(doc, m, sizeof(m)), -EPROTO);
	free(doc);
	/* A long message is cut to fit, NUL-terminated. */
	assert_int_equal(parse("{\"message\": \"0123456789012345678901234567890\"}", m, sizeof(m)), 0);
	assert_string_equal(m, "012345678901234");
}

static void errfile_missing_file_is_enoent(void **state)
{
	char m[16];

	(void)state;
	assert_int_equal(errfile_read_message("/nonexistent/crun/error.json", m, sizeof(m)), -ENOENT);
}

static void errfile_names_signals(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(signal_name(9, b, sizeof(b)), "SIGKILL");
	assert_string_equal(signal_name(11, b, sizeof(b)), "SIGSEGV");
}

/* Read everything written so far to @fd into @buf. */
static size_t drain(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t r;

	while (n < cap && (r = read(fd, buf + n, cap - n)) > 0) {
		n += (size_t)r;
	}
	return n;
}

static void logroute_prefixes_whole_lines(void **state)
{
	struct logroute_stream s;
	int p[2];
	char out[4096];
	size_t n;

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	assert_int_equal(logroute_init(&s, "[rank3]:", p[1], -1), 0);
	logroute_feed(&s, "ab", 2);
	logroute_feed(&s, "c\nde", 4);
	logroute_feed(&s, "f\n\ng", 4);
	logroute_finish(&s);
	n = drain(p[0], out, sizeof(out));
	out[n] = '\0';
	assert_string_equal(out, "[rank3]:abc\n[rank3]:def\n[rank3]:\n[rank3]:g\n");
	close(p[0]);
	close(p[1]);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * A non-blocking console that nobody reads: a write must give up after LOGROUTE_STALL_MS
 * instead of spinning on EAGAIN for ever (it used to, and the agent's loop stopped with it).
 * The test is killed by SIGALRM if routing does not come back.
 */
static void logroute_gives_up_on_a_stuck_nonblocking_console(void **state)
{
	struct logroute_stream s;
	char fill[65536], line[200];
	int p[2], i;
	int64_t t0, dt;

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	memset(fill, 'x', sizeof(fill));
	while (write(p[1], fill, sizeof(fill)) > 0) {
	}
	assert_int_equal(errno, EAGAIN);
	memset(line, 'y', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\n';
	assert_int_equal(logroute_init(&s, "[rank0]:", p[1], -1), 0);
	alarm(30);
	t0 = mono_ms();
	for (i = 0; i < 2; i++) {
		logroute_feed(&s, line, sizeof(line));
	}
	dt = mono_ms() - t0;
	alarm(0);
	assert_true(dt >= 2 * LOGROUTE_STALL_MS - 50);
	/* Two stalls and a few ms; 1 s more still holds on a loaded machine. */
	assert_true(dt < 2 * LOGROUTE_STALL_MS + 1000);
	logroute_finish(&s);
	close(p[0]);
	close(p[1]);
}

/* A file descriptor handed to logroute_init is its own even when the call fails. */
static void logroute_init_owns_the_file_fd(void **state)
{
	struct logroute_stream s;
	int fd;

	(void)state;
	fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(logroute_init(&s, "p", -1, fd), 0);
	logroute_finish(&s);
	/* finish closed it: the number is free again */
	assert_int_equal(fcntl(fd, F_GETFD), -1);
}

/*
 * A log file on a full disk (/dev/full: every write is ENOSPC): the failure is recorded with
 * the path (the agent turns it into a non-zero exit) and the console still gets every line.
 * Before, the error was dropped and the job exited 0 with its log file silently cut.
 */
static void logroute_records_a_failing_log_file(void **state)
{
	struct logroute_stream s;
	char out[4096];
	int p[2], fd;
	size_t n;

	(void)state;
	fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		skip();
	}
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	assert_int_equal(logroute_init(&s, "[r]:", p[1], fd), 0);
	assert_int_equal(logroute_set_file_path(&s, "/logs/0/stdout.log"), 0);
	logroute_feed(&s, "one\ntwo\n", 8);
	assert_int_equal(s.file_err, ENOSPC);
	assert_int_equal(s.file_lost, 8);
	assert_string_equal(s.file_path, "/logs/0/stdout.log");
	logroute_finish(&s);
	n = drain(p[0], out, sizeof(out));
	out[n] = '\0';
	assert_string_equal(out, "[r]:one\n[r]:two\n");
	close(p[0]);
	close(p[1]);
}

static void logroute_cuts_overlong_lines(void **state)
{
	struct logroute_stream s;
	size_t len = LOGROUTE_MAX_LINE * 2 + 10, n, i, lines = 0;
	char *big = malloc(len), *out = malloc(len + 1000);
	int p[2];

	(void)state;
	assert_non_null(big);
	assert_non_null(out);
	memset(big, 'x', len);
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	assert_int_equal(logroute_init(&s, "P", p[1], -1), 0);
	for (i = 0; i < len; i += 1000) {
		logroute_feed(&s, big + i, len - i < 1000 ? len - i : 1000);
	}
	logroute_feed(&s, "\n", 1);
	logroute_finish(&s);
	n = drain(p[0], out, len + 1000);
	for (i = 0; i < n; i++) {
		lines += out[i] == '\n';
	}
	assert_int_equal(lines, 3);
	assert_int_equal(n, len + 3 * 2);
	assert_int_equal(out[0], 'P');
	assert_int_equal(out[LOGROUTE_MAX_LINE + 2], 'P');
	close(p[0]);
	close(p[1]);
	free(big);
	free(out);
}

static void logroute_formats_prefix_templates(void **state)
{
	char *p;

	(void)state;
	p = logroute_format_prefix("[{role}:{host}:{rank}/{local_rank}] {x}", 12, 4, "h1", "trainer");
	assert_string_equal(p, "[trainer:h1:12/4] {x}");
	free(p);
}

/* The watchdog names every rank silent since the oldest step, not the one silent longest. */
static void watchdog_names_every_rank_silent_since_the_oldest_step(void **state)
{
	struct watchdog_beat b[4] = {0};
	struct watchdog_beat *p[4] = {&b[0], &b[1], &b[2], NULL}; /* rank 3 has exited */
	int out[4];

	(void)state;
	/* ranks 0 and 1 stopped at step 17 (0 a little later), rank 2 at 18: timeout 3 s */
	b[0] = (struct watchdog_beat){.last_ms = 1000, .step = 17};
	b[1] = (struct watchdog_beat){.last_ms = 800, .step = 17};
	b[2] = (struct watchdog_beat){.last_ms = 900, .step = 18};
	assert_int_equal(watchdog_hung(p, 4, 3700, 3000, out), 0); /* none silent 3 s yet */
	assert_int_equal(watchdog_hung(p, 4, 3900, 3000, out), 2);
	assert_int_equal(out[0], 1); /* longest silence first at the same step */
	assert_int_equal(out[1], 0);
	/* a rank still beating (silent under half the timeout) is never named */
	b[0].last_ms = 3000;
	assert_int_equal(watchdog_hung(p, 4, 3900, 3000, out), 1);
	assert_int_equal(out[0], 1);
	/* without steps (plain touches) every silent rank is named, longest first */
	b[0] = (struct watchdog_beat){.last_ms = 1000};
	b[1] = (struct watchdog_beat){.last_ms = 800};
	b[2] = (struct watchdog_beat){.last_ms = 900};
	assert_int_equal(watchdog_hung(p, 4, 3900, 3000, out), 3);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 2);
	assert_int_equal(out[2], 0);
}

static void spawn_env_has_torchrun_names(void **state)
{
	struct job_spec spec;
	struct spawn_env e;
	const struct store_settings ss = {
		.endpoint = "10.0.0.1:29400", .insecure = true, .tls_ca = "/etc/ca.pem",
		.etcd_user = "trainer",
	};
	struct store_conf sc;
	struct spawn_worker_info wi = {
		.spec = &spec, .local_rank = 1, .rank = 5, .world_size = 8, .group_rank = 1,
		.group_world_size = 2, .restart_count = 2, .run_id = "job", .master_addr = "10.0.0.1",
		.master_port = 29500, .store = &sc, .store_prefix = "p/",
		.error_file = "/tmp/e.json", .store_token_file = "/tmp/crun-x/store-token",
	};
	char e1[] = "OMP_NUM_THREADS=4", e2[] = "CUDA_VISIBLE_DEVICES=2,3", e3[] = "PATH=/bin";
	char e4[] = "CRUN_STORE_TLS_CERT=/stale.pem", e5[] = "CRUN_STORE_TOKEN=secret";
	char e6[] = "CRUN_ETCD_KEY=/mine.key";
	char ifname[] = "eth7";
	char *base[] = {e1, e2, e3, e4, e5, e6, NULL};

	(void)state;
	assert_int_equal(store_conf_init(&sc, &ss, STORE_TOKEN_FLAGS, NULL), 0);
	memset(&spec, 0, sizeof(spec));
	spec.nproc_per_node = 4;
	spec.max_restarts = 3;
	spec.virtual_local_rank = true;
	spec.socket_ifname = ifname;
	assert_int_equal(spawn_worker_env(&wi, base, &e), 0);
	assert_string_equal(spawn_env_get(&e, "RANK"), "5");
	assert_string_equal(spawn_env_get(&e, "LOCAL_RANK"), "0");
	assert_string_equal(spawn_env_get(&e, "CUDA_VISIBLE_DEVICES"), "3");
	/* As torchrun: LOCAL_WORLD_SIZE stays nproc; crun's word that GPU 0 is this rank's. */
	assert_string_equal(spawn_env_get(&e, "LOCAL_WORLD_SIZE"), "4");
	assert_string_equal(spawn_env_get(&e, "CRUN_VIRTUAL_LOCAL_RANK"), "1");
	assert_string_equal(spawn_env_get(&e, "OMP_NUM_THREADS"), "4");
	assert_string_equal(spawn_env_get(&e, "ROLE_NAME"), "default");
	assert_string_equal(spawn_env_get(&e, "GROUP_RANK"), "1");
	assert_string_equal(spawn_env_get(&e, "TORCHELASTIC_RESTART_COUNT"), "2");
	assert_string_equal(spawn_env_get(&e, "TORCHELASTIC_MAX_RESTARTS"), "3");
	assert_string_equal(spawn_env_get(&e, "NCCL_SOCKET_IFNAME"), "eth7");
	assert_string_equal(spawn_env_get(&e, "CRUN_STORE_PREFIX"), "p/");
	assert_string_equal(spawn_env_get(&e, "PATH"), "/bin");
	assert_null(spawn_env_get(&e, "CRUN_STORE_TOKEN"));
	/* The credential is a file name, never the token. */
	assert_string_equal(spawn_env_get(&e, "CRUN_STORE_TOKEN_FILE"), "/tmp/crun-x/store-token");
	/* What the store's configuration says workers inherit (store_conf_worker_env()): its
	 * endpoint and TLS files, a stale TLS file removed; the user's own etcd key kept. */
	assert_string_equal(spawn_env_get(&e, "CRUN_STORE_ENDPOINT"), "10.0.0.1:29400");
	assert_string_equal(spawn_env_get(&e, "CRUN_STORE_TLS_CA"), "/etc/ca.pem");
	assert_null(spawn_env_get(&e, "CRUN_STORE_TLS_CERT"));
	assert_string_equal(spawn_env_get(&e, "CRUN_ETCD_USER"), "trainer");
	assert_string_equal(spawn_env_get(&e, "CRUN_ETCD_KEY"), "/mine.key");
	spawn_env_finish(&e);
	store_conf_finish(&sc);
}

static void spawn_argv_expands_only_the_macro(void **state)
{
	struct job_spec spec;
	char a1[] = "--x=${local_rank}${local_rank}", a2[] = "$$", a3[] = "${local_rankx}";
	char prog[] = "pkg.train", py[] = "py3";
	char *args[] = {a1, a2, a3, NULL};
	char **argv;

	(void)state;
	memset(&spec, 0, sizeof(spec));
	spec.program_kind = PROGRAM_MODULE;
	spec.program = prog;
	spec.python_exec = py;
	spec.args = args;
	spec.nargs = 3;
	spec.local_rank_arg = true;
	assert_int_equal(spawn_worker_argv(&spec, 7, &argv), 0);
	assert_string_equal(argv[0], "py3");
	assert_string_equal(argv[1], "-u");
	assert_string_equal(argv[2], "-m");
	assert_string_equal(argv[3], "pkg.train");
	/* Where torch.distributed.launch puts it: after the program, before its arguments. */
	assert_string_equal(argv[4], "--local_rank=7");
	assert_string_equal(argv[5], "--x=77");
	assert_string_equal(argv[6], "$$");
	assert_string_equal(argv[7], "${local_rankx}");
	assert_null(argv[8]);
	spawn_argv_free(argv);
}

static void errfile_summary_round_trips(void **state)
{
	struct errfile_failure f = {.host = "node7", .rank = 12, .local_rank = 4, .exit_code = 3,
				    .pid = 999, .message = "CUDA out of memory"};
	struct errfile_failure g;
	char buf[512], wrapped[600], host[64], msg[256], *partial;

	(void)state;
	errfile_summary(&f, buf, sizeof(buf));
	snprintf(wrapped, sizeof(wrapped), "workers failed: %s (reported by node rank 1, host x)", buf);
	assert_int_equal(errfile_parse_summary(wrapped, &g, host, sizeof(host), msg, sizeof(msg)), 0);
	assert_string_equal(g.host, "node7");
	assert_int_equal(g.rank, 12);
	assert_int_equal(g.local_rank, 4);
	assert_int_equal(g.exit_code, 3);
	assert_int_equal(g.pid, 999);
	assert_string_equal(g.message, "CUDA out of memory");
	f.signal = 9;
	f.message = NULL;
	errfile_summary(&f, buf, sizeof(buf));
	assert_int_equal(errfile_parse_summary(buf, &g, host, sizeof(host), msg, sizeof(msg)), 0);
	assert_int_equal(g.signal, 9);
	assert_string_equal(g.message, "");
	assert_int_equal(errfile_parse_summary("rank x (host", &g, host, sizeof(host), msg,
					       sizeof(msg)),
			 -EINVAL);
	/* A partial match of the exit part once reused a stale offset and read past the string
	 * (found by tests/fuzz/fuzz_errfile; ASan in CI catches a regression). */
	partial = strdup("rank 0 (host h, local rank 0, pid 5): signal 9 (S"); /* exact size */
	assert_non_null(partial);
	assert_int_equal(errfile_parse_summary(partial, &g, host, sizeof(host), msg, sizeof(msg)),
			 -EINVAL);
	free(partial);
}

/* torch versions as version.py and pip write them: 2.4 is the first whose torchrun shares its
 * c10d store with its workers. */
static void torch_versions_compare_by_major_and_minor(void **state)
{
	(void)state;
	assert_false(torch_version_at_least("1.13.0a0", 2, 4));
	assert_false(torch_version_at_least("1.13.1+cu117", 2, 4));
	assert_false(torch_version_at_least("2.3.1", 2, 4));
	assert_true(torch_version_at_least("2.4.0", 2, 4));
	assert_true(torch_version_at_least("2.4.0a0+git1234", 2, 4));
	assert_true(torch_version_at_least("2.4.0.dev20240601", 2, 4));
	assert_true(torch_version_at_least("2.10.1", 2, 4)); /* not "2.1" */
	assert_true(torch_version_at_least("3.0", 2, 4));
	assert_false(torch_version_at_least("", 2, 4));
	assert_false(torch_version_at_least("2", 2, 4));
	assert_false(torch_version_at_least("v2.5", 2, 4));
	assert_false(torch_version_at_least("2.x", 2, 4));
}

/* The probe against processes that answer badly: nothing, garbage, a failure, no answer. */
static void torch_probe_survives_bad_answers(void **state)
{
	char ver[64], why[64];

	(void)state;
	assert_int_equal(torch_probe_version("/bin/true", 5000, ver, why, sizeof(ver)), -EPROTO);
	assert_string_equal(ver, "");
	assert_string_equal(why, "no output");
	assert_int_equal(torch_probe_version("/bin/false", 5000, ver, why, sizeof(ver)), -EPROTO);
	assert_int_equal(torch_probe_version("/nonexistent/python", 5000, ver, why, sizeof(ver)),
			 -ENOENT);
	/* `sleep -c ...` fails at once; the timeout itself is tests/agent/storedefault.sh's. */
	assert_true(torch_probe_version("sleep", 5000, ver, why, sizeof(ver)) < 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(errfile_reads_torchrun_record_shape),
		cmocka_unit_test(errfile_reads_plain_message),
		cmocka_unit_test(errfile_rejects_garbage_without_crashing),
		cmocka_unit_test(errfile_bounds_depth_and_length),
		cmocka_unit_test(errfile_missing_file_is_enoent),
		cmocka_unit_test(errfile_names_signals),
		cmocka_unit_test(errfile_summary_round_trips),
		cmocka_unit_test(logroute_prefixes_whole_lines),
		cmocka_unit_test(logroute_cuts_overlong_lines),
		cmocka_unit_test(logroute_gives_up_on_a_stuck_nonblocking_console),
		cmocka_unit_test(logroute_init_owns_the_file_fd),
		cmocka_unit_test(logroute_records_a_failing_log_file),
		cmocka_unit_test(logroute_formats_prefix_templates),
		cmocka_unit_test(watchdog_names_every_rank_silent_since_the_oldest_step),
		cmocka_unit_test(spawn_env_has_torchrun_names),
		cmocka_unit_test(spawn_argv_expands_only_the_macro),
		cmocka_unit_test(torch_versions_compare_by_major_and_minor),
		cmocka_unit_test(torch_probe_survives_bad_answers),
	};

	return test_run_group("agent-units", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
