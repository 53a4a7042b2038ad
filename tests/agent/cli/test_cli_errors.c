/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/test_cli_errors.c: bad command lines: one exact line each, never a crash. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <crun/error.h>

#include "tests/agent/cli/cli_fixture.h"

/* ---- bad command lines: one exact line each, exit 2 ---- */

struct bad {
	const char *args[12];
	const char *msg;  /* exact, or a prefix when prefix is set */
	bool prefix;
};

static void bad_command_lines_fail_with_one_line(void **state)
{
	char nonexec[160], dirprog[160], missing_py[160], path_hint[160], fileep[200];
	char bigval[5000];
	const struct bad table[] = {
		{{"--nnodes", "3:2", "true"}, "--nnodes: MIN 3 is above MAX 2", false},
		{{"--nnodes", "0", "true"},
		 "--nnodes: expected N or MIN:MAX with 1 <= N <= 1000000, got \"0\"", false},
		{{"--nnodes", "1:", "true"},
		 "--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX <= 1000000, got \"1:\"", false},
		{{"--nnodes", "1:2", "true"},
		 "--nnodes: static rendezvous needs a fixed node count, got 1:2 (use --rdzv-backend "
		 "c10d for elastic jobs)", false},
		{{"--nproc-per-node", "0", "true"}, "--nproc-per-node: 0 is out of range 1..4096", false},
		/* a rank past the world would leave stdin unread (issue 20) */
		{{"--nproc-per-node", "2", "--stdin", "99", "true"},
		 "--stdin: rank 99 is not in the job: 1 node x --nproc-per-node 2 makes ranks 0..1",
		 false},
		{{"--nnodes", "2", "--nproc-per-node", "2", "--stdin", "4", "--master-addr",
		  "127.0.0.1", "--master-port", "1", "true"},
		 "--stdin: rank 4 is not in the job: 2 nodes x --nproc-per-node 2 makes ranks 0..3",
		 false},
		{{"--nproc_per_node=-2", "true"}, "--nproc_per_node: -2 is out of range 1..4096", false},
		{{"--nproc-per-node", "eight", "true"},
		 "--nproc-per-node: expected a count, gpu, cpu or auto, got \"eight\"", false},
		{{"--nproc-per-node", "99999999999999999999", "true"},
		 "--nproc-per-node: 99999999999999999999 is out of range 1..4096", false},
		{{"--rdzv-backend", "c10d", "--rdzv-endpoint", "h", "--node-rank", "1", "--nnodes",
		  "2", "true"},
		 "--node-rank: only for --rdzv-backend static (c10d assigns node ranks itself)", false},
		{{"--nnodes", "2", "--node-rank", "2", "true"}, "--node-rank: 2 is out of range 0..1",
		 false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "host:99999", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"host:99999\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "[::1", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"[::1\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", ":29400", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \":29400\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "my host:29400", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"my host:29400\"", false},
		{{"--rdzv-backend=c10d", "--rdzv-endpoint", "[nope]:1", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"[nope]:1\"", false},
		{{"--rdzv-endpoint", "-h:1", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT], got \"-h:1\"", false},
		{{"--master-addr", "a,b", "true"},
		 "--master-addr: expected a host name or IP address, got \"a,b\"", false},
		{{"--rdzv-backend=c10d", "--nnodes=2", "--rdzv-endpoint", "h:0", "true"},
		 "--rdzv-endpoint: port 0 cannot be found by other nodes (--nnodes 2:2)", false},
		{{"--rdzv-backend", "zk", "true"},
		 "--rdzv-backend: unknown backend \"zk\" (use c10d, tcp, static, file, etcd or "
		 "slurm)",
		 false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "ftp://h", "true"},
		 "--rdzv-endpoint: ftp://h: expected http://, https://, etcd:// or no scheme for etcd",
		 false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "http://a,https://b", "true"},
		 "--rdzv-endpoint: mixes http and https members (one protocol per cluster)", false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "a,h1:99999", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT][,HOST[:PORT]...] for etcd, got \"h1:99999\"",
		 false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "a:0", "true"},
		 "--rdzv-endpoint: expected HOST[:PORT][,HOST[:PORT]...] for etcd, got \"a:0\"",
		 false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", ",", "true"},
		 "--rdzv-endpoint: no etcd member in \",\"", false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "a,,b", "true"},
		 "--rdzv-endpoint: an empty etcd member in \"a,,b\"", false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "https://a", "--rdzv-conf",
		  "protocol=http", "true"},
		 "--rdzv-conf: protocol: http, but --rdzv-endpoint says https", false},
		{{"--rdzv-backend", "etcd", "--rdzv-conf", "protocol=ftp", "true"},
		 "--rdzv-conf: protocol: expected http or https, got \"ftp\"", false},
		{{"--rdzv-backend", "etcd", "--rdzv-endpoint", "http://a", "--tls-ca", "/etc/passwd",
		  "true"},
		 "--tls-ca: the etcd members are reached over http (--rdzv-endpoint names http), "
		 "which has no certificate to verify: give https:// members or no scheme",
		 false},
		{{"--rdzv-backend", "etcd", "--rdzv-conf", "cacert=/etc/passwd", "true"},
		 "--rdzv-conf: cacert, cert and key need https (protocol=https or https:// members)",
		 false},
		{{"--rdzv-backend", "etcd", "--rdzv-conf", "protocol=https,cert=/etc/passwd", "true"},
		 "--rdzv-conf: cert without key: a client certificate needs both", false},
		{{"--rdzv-backend", "etcd", "--rdzv-conf", "protocol=https,cacert=/no/such", "true"},
		 "--rdzv-conf: cacert: /no/such: No such file or directory", false},
		{{"--rdzv-backend", "etcd", "--rdzv-conf", "user=", "true"},
		 "--rdzv-conf: user: empty value", false},
		{{"--rdzv-backend", "c10d", "--rdzv-conf", "protocol=https", "true"},
		 "--rdzv-conf: protocol: only for --rdzv-backend etcd", false},
		{{"--rdzv-backend", "etcd", "--rdzv-conf", "is_host=1", "true"},
		 "--rdzv-conf: is_host: an etcd job never hosts a store (etcd is the store)", false},
		{{"--rdzv-backend", "etcd", "--rdzv-conf", "protocl=https", "true"},
		 "--rdzv-conf: unknown key \"protocl\" (did you mean protocol?)", false},
		{{"--rdzv-backend", "etcd", "--node-rank", "1", "--nnodes", "2", "true"},
		 "--node-rank: only for --rdzv-backend static (etcd assigns node ranks itself)", false},
		{{"--rdzv-backend", "file", "true"},
		 "--rdzv-endpoint: required with --rdzv-backend file (file:///shared/path)", false},
		{{"--rdzv-backend", "file", "--rdzv-endpoint", "/tmp/x", "true"},
		 "--rdzv-endpoint: expected file:///ABSOLUTE/PATH, got \"/tmp/x\"", false},
		{{"--rdzv-backend", "file", "--rdzv-endpoint", "file:///no/such/dir/x", "true"},
		 "--rdzv-endpoint: directory /no/such/dir: No such file or directory", false},
		{{"--rdzv-endpoint", "file:///tmp/x", "true"},
		 "--rdzv-endpoint: a file:// endpoint needs --rdzv-backend file", false},
		{{"--rdzv-id", "a/b", "true"},
		 "--rdzv-id: \"/\" and spaces are not allowed in a run id", false},
		{{"--rdzv-id=", "true"}, "--rdzv-id: empty value", false},
		{{"--rdzv-conf", "join_timeout=5,join_timout=1", "true"},
		 "--rdzv-conf: unknown key \"join_timout\" (did you mean join_timeout?)", false},
		{{"--rdzv-conf", "join_timeout=abc", "true"},
		 "--rdzv-conf: join_timeout: expected seconds, got \"abc\"", false},
		{{"--rdzv-conf", "join_timeout=0", "true"},
		 "--rdzv-conf: join_timeout: must be above 0 seconds", false},
		{{"--rdzv-conf", "is_host=maybe", "true"},
		 "--rdzv-conf: is_host: expected 0 or 1, got \"maybe\"", false},
		{{"--rdzv-conf", "timeout", "true"},
		 "--rdzv-conf: expected KEY=VALUE, got \"timeout\"", false},
		{{"--rdzv-conf", "keep_alive_max_attempt=0", "true"},
		 "--rdzv-conf: keep_alive_max_attempt: expected an integer >= 1, got \"0\"", false},
		{{"--max-restarts", "1x", "true"}, "--max-restarts: expected an integer, got \"1x\"",
		 false},
		{{"--max_restarts", "-1", "true"}, "--max_restarts: -1 is out of range 0..1000000",
		 false},
		{{"--restart-backoff", "2", "--restart-backoff-max", "1", "true"},
		 "--restart-backoff-max: 1 s is below --restart-backoff (2 s)", false},
		{{"--restart-backoff", "soon", "true"},
		 "--restart-backoff: expected seconds, got \"soon\"", false},
		{{"--worker-timeout", "-5", "true"},
		 "--worker-timeout: -5 seconds is out of range 0..", true},
		{{"--master-port", "70000", "true"}, "--master-port: 70000 is out of range 0..65535",
		 false},
		{{"--master-port", "65535", "--nnodes", "2", "true"},
		 "--master-port: port 65535 leaves no port for the store (it uses the master port + 1)",
		 false},
		{{"--nnodes=2", "--master-port=0", "true"},
		 "--master-port: port 0 cannot be found by other nodes", false},
		{{"--shutdown-timeout", "-1", "true"},
		 "--shutdown-timeout: -1 seconds is out of range 0..31536000", false},
		{{"--monitor-interval", "nan", "true"},
		 "--monitor-interval: expected seconds, got \"nan\"", false},
		{{"--start-method", "thread", "true"},
		 "--start-method: expected spawn, fork or forkserver, got \"thread\"", false},
		{{"--logs-specs", "mypkg", "true"},
		 "--logs-specs: Python LogsSpecs plugins are not supported (only \"default\"; use "
		 "--log-dir and --log-prefix)", false},
		{{"--bogus", "true"}, "--bogus: unknown option (see crun --help)", false},
		{{"--bogus=1", "true"}, "--bogus: unknown option (see crun --help)", false},
		{{"-x", "true"}, "-x: unknown option (see crun --help)", false},
		{{"--nnodes"}, "--nnodes: missing value (N|MIN:MAX)", false},
		{{"--nnodes", "--nproc-per-node", "2", "true"}, "--nnodes: missing value (N|MIN:MAX)",
		 false},
		{{"-r"}, "-r: missing value (STD|RANK:STD,...)", false},
		{{"--standalone=1", "true"}, "--standalone: takes no value", false},
		{{"-mx", "true"}, "-m: takes no value (got \"-mx\")", false},
		{{"--standalone", "--nnodes", "2", "true"},
		 "--standalone: runs one node, but --nnodes is 2:2", false},
		{{"-m", "--no-python", "mod"}, "-m: cannot be combined with --no-python", false},
		{{"--run-path", "--no_python", "x"}, "--run-path: cannot be combined with --no-python",
		 false},
		{{"--redirects", "4", "true"},
		 "--redirects: expected 0..3 or LOCAL_RANK:0..3,..., got \"4\"", false},
		{{"-t", "0:1,x", "true"}, "-t: expected LOCAL_RANK:0..3, got \"x\"", false},
		{{"-t", "5000:1", "true"},
		 "-t: expected LOCAL_RANK:0..3 with LOCAL_RANK < 1024, got \"5000:1\"", false},
		{{"--local-ranks-filter", "0,5", "--nproc-per-node", "2", "true"},
		 "--local-ranks-filter: local rank 5 is out of range 0..1 (--nproc-per-node 2)", false},
		{{"--local-ranks-filter", "a", "true"},
		 "--local-ranks-filter: expected local ranks like 0,2, got \"a\"", false},
		{{"--signals-to-handle", "SIGFOO", "true"},
		 "--signals-to-handle: unknown signal \"SIGFOO\"", false},
		{{"--signals-to-handle", "SIGKILL", "true"},
		 "--signals-to-handle: SIGKILL cannot be handled", false},
		{{"--signals-to-handle", ",", "true"}, "--signals-to-handle: no signal given", false},
		{{"--log-prefix", "[{bogus}]", "true"},
		 "--log-prefix: unknown field \"{bogus}\" (use {rank} {local_rank} {role} {host})", false},
		{{"--log-prefix", "{rank", "true"}, "--log-prefix: unclosed \"{\" in \"{rank\"", false},
		{{"--log-dir", "/etc/passwd", "true"},
		 "--log-dir: /etc/passwd exists and is not a directory", false},
		{{"--role", "", "true"}, "--role: empty value", false},
		{{"--master-addr", "a\nb", "true"}, "--master-addr: control character in value", false},
		{{"--local-addr", "no-such-host.invalid", "true"},
		 "--local-addr: \"no-such-host.invalid\" is not an address, an interface or a known "
		 "host (", true},
		{{"/nonexistent/prog"}, "program /nonexistent/prog: no such file", false},
		{{"no-such-cmd-xyz"}, "program no-such-cmd-xyz: not found in PATH", false},
		{{nonexec}, NULL, false}, /* filled below */
		{{"/tmp"}, "program /tmp: is a directory", false},
		{{"--no-python", dirprog}, NULL, false},
		{{"missing.py"}, "program missing.py: no such file", false},
		{{"-m", ""}, "program: empty name", false},
		{{}, "missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun --help)",
		 false},
		{{"--nproc-per-node", "2"},
		 "missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun --help)",
		 false},
		{{"--", NULL},
		 "missing PROGRAM to run (usage: crun [OPTIONS] PROGRAM [ARGS...]; see crun --help)",
		 false},
		{{"--role", bigval, "true"}, "--role: longer than 128 bytes", false},
		{{path_hint}, NULL, false},
		{{"--rdzv-backend", "file", "--rdzv-endpoint", fileep, "true"}, NULL, false},
	};
	char expect[256];
	struct job_spec s;
	struct crun_diag d;
	size_t i;
	int rc;

	(void)state;
	memset(bigval, 'x', sizeof(bigval) - 1);
	bigval[sizeof(bigval) - 1] = '\0';
	snprintf(nonexec, sizeof(nonexec), "%s", noexec_file);
	snprintf(dirprog, sizeof(dirprog), "%s", tmpdir);
	snprintf(missing_py, sizeof(missing_py), "%s/none.py", tmpdir);
	snprintf(path_hint, sizeof(path_hint), "%s", "worker");
	snprintf(fileep, sizeof(fileep), "file://%s/", tmpdir);
	assert_int_equal(chdir(tmpdir), 0);
	for (i = 0; i < ARRAY_SIZE(table); i++) {
		rc = parse(table[i].args, &s, &d);
		print_message("case %zu: rc %d: %s\n", i, rc, d.msg);
		assert_int_equal(rc, CLI_USAGE);
		assert_int_equal(d.code, CRUN_ECONFIG);
		assert_null(strchr(d.msg, '\n'));
		if (table[i].args[0] == nonexec) {
			snprintf(expect, sizeof(expect),
				 "program %s: not executable (chmod +x it, or use --run-path to run it "
				 "under python)", noexec_file);
		} else if (table[i].args[1] == dirprog) {
			snprintf(expect, sizeof(expect), "program %s: is a directory", tmpdir);
		} else if (table[i].args[0] == path_hint) {
			/* "worker" exists here, but not in PATH: suggest ./worker like a shell. */
			snprintf(expect, sizeof(expect),
				 "program worker: not found in PATH (use ./worker)");
		} else if (table[i].args[3] == fileep) {
			snprintf(expect, sizeof(expect),
				 "--rdzv-endpoint: file://%s/ names a directory, not a file", tmpdir);
		} else {
			snprintf(expect, sizeof(expect), "%s", table[i].msg);
		}
		if (table[i].prefix) {
			assert_true(strncmp(d.msg, expect, strlen(expect)) == 0);
		} else {
			assert_string_equal(d.msg, expect);
		}
		jobspec_finish(&s);
	}
	assert_int_equal(chdir("/"), 0);
}

/* Odd argument vectors never crash: each returns 0, 1 or 2, and a failure is one line. */
static void odd_argv_never_crashes(void **state)
{
	static char huge[100000];
	const char *const odd[][6] = {
		{"", NULL},          {"=", NULL},        {"--=", "true", NULL},
		{"---", "true"},     {"-", NULL},        {"--nnodes=", "true"},
		{"--nnodes=:", "true"}, {"--rdzv-conf=,,,", "true"}, {"--rdzv-conf==", "true"},
		{"-r", "", "true"},  {"-rx", "true"},    {"-t=", "true"},
		{"--tee", ",", "true"}, {"--local-ranks-filter=,", "true"},
		{"--log-prefix={}", "true"}, {"--log-prefix=}{", "true"},
		{"--nproc-per-node", " 1", "true"}, {"--nnodes", "1 ", "true"},
		{"--signals-to-handle", "0", "true"}, {"--signals-to-handle", "99999", "true"},
		{"--master-addr", huge, "true"}, {huge, NULL}, {"--local-addr", huge, "true"},
		{"--rdzv-id", huge, "true"}, {"--rdzv-conf", huge, "true"},
		{"--rdzv-backend=c10d", "--rdzv-endpoint", huge, "true"},
		{"\xff\xfe", NULL}, {"--\xff", "true"}, {"-\x01", "true"},
		{"--local-addr", "", "true"}, {"--log-dir", "", "true"},
	};
	struct job_spec s;
	struct crun_diag d;
	size_t i;
	int rc;

	(void)state;
	memset(huge, 'a', sizeof(huge) - 1);
	huge[sizeof(huge) - 1] = '\0';
	for (i = 0; i < ARRAY_SIZE(odd); i++) {
		rc = parse(odd[i], &s, &d);
		assert_true(rc == CLI_OK || rc == CLI_USAGE);
		if (rc == CLI_USAGE) {
			assert_true(d.msg[0] != '\0');
			assert_null(strchr(d.msg, '\n'));
		}
		jobspec_finish(&s);
	}
}

/* cli_parse() itself prints "crun: <msg>\n" on stderr and nothing else. */
static void cli_parse_prints_one_line(void **state)
{
	char *argv[] = {(char *)"crun", (char *)"--nnodes", (char *)"3:2", (char *)"true", NULL};
	char path[160], buf[512];
	struct job_spec s;
	ssize_t n;
	int fd, saved;

	(void)state;
	snprintf(path, sizeof(path), "%s/stderr", tmpdir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	fflush(stderr);
	saved = dup(2);
	assert_true(saved >= 0);
	dup2(fd, 2);
	assert_int_equal(cli_parse(4, argv, &s), CLI_USAGE);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_string_equal(buf, "crun: --nnodes: MIN 3 is above MAX 2\n");
	jobspec_finish(&s);
}


int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(bad_command_lines_fail_with_one_line, each_teardown),
		cmocka_unit_test_teardown(odd_argv_never_crashes, each_teardown),
		cmocka_unit_test_teardown(cli_parse_prints_one_line, each_teardown),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("cli-errors", tests, group_setup, group_teardown);
}
