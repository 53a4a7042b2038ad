/* SPDX-License-Identifier: MIT */
/* tests/comm/test_comm.c: start a real crun-rdzvd and N comm_worker processes per test. */
#include <stdarg.h> /* cmocka 1.x wants these before cmocka.h */
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "src/common/util.h"
#include "src/common/clock.h"
#include "src/gpu_count.h"

#define MAX_PROCS 16
#define S(lit) ((char *)(lit)) /* execv() takes char *const[]; it does not write them */
#define EXIT_SAW_ERROR 3

static const char *worker_exe, *rdzvd_exe;

struct proc {
	pid_t pid;
	int out; /* read end of its stdout, or -1 */
};

struct store_daemon {
	struct proc p;
	char endpoint[128];
};

static int prefix_seq;

/* Start @argv with stdout on a pipe (when @pipe_out) and stderr inherited. */
static struct proc spawn(char *const argv[], bool pipe_out)
{
	struct proc p = {.pid = -1, .out = -1};
	int fds[2] = {-1, -1};

	if (pipe_out) {
		assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	}
	fflush(stdout);
	fflush(stderr);
	p.pid = fork();
	assert_true(p.pid >= 0);
	if (p.pid == 0) {
		if (pipe_out) {
			dup2(fds[1], STDOUT_FILENO);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	if (pipe_out) {
		close(fds[1]);
		p.out = fds[0];
	}
	return p;
}

/* Wait up to @timeout_ms for @pid: its wait status, or -ETIMEDOUT (the process is left). */
static int wait_proc(pid_t pid, int timeout_ms)
{
	int64_t deadline = crun_now_ms() + timeout_ms;
	int pfd, st, rc;

	pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	assert_true(pfd >= 0);
	for (;;) {
		struct pollfd pf = {.fd = pfd, .events = POLLIN};
		int left = (int)(deadline - crun_now_ms());

		if (left <= 0) {
			close(pfd);
			return -ETIMEDOUT;
		}
		rc = poll(&pf, 1, left);
		if (rc > 0) {
			break;
		}
	}
	close(pfd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

static void kill_proc(struct proc *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		p->pid = -1;
	}
	if (p->out >= 0) {
		close(p->out);
		p->out = -1;
	}
}

/* Read one line from @fd into @buf within @timeout_ms. */
static int read_line(int fd, char *buf, size_t len, int timeout_ms)
{
	int64_t deadline = crun_now_ms() + timeout_ms;
	size_t n = 0;

	while (n + 1 < len) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int left = (int)(deadline - crun_now_ms());
		ssize_t r;

		if (left <= 0 || poll(&pf, 1, left) <= 0) {
			return -ETIMEDOUT;
		}
		r = read(fd, buf + n, 1);
		if (r <= 0) {
			return -EPIPE;
		}
		if (buf[n] == '\n') {
			break;
		}
		n++;
	}
	buf[n] = '\0';
	return 0;
}

static void daemon_start(struct store_daemon *d)
{
	char *argv[] = {(char *)rdzvd_exe, S("--listen"), S("127.0.0.1:0"), S("--insecure"), NULL};
	char line[128];

	d->p = spawn(argv, true);
	if (read_line(d->p.out, line, sizeof(line), 20000) < 0) {
		kill_proc(&d->p);
		fail_msg("crun-rdzvd printed no address within 20 s");
	}
	snprintf(d->endpoint, sizeof(d->endpoint), "%s", line);
}

static void daemon_stop(struct store_daemon *d)
{
	kill(d->p.pid, SIGTERM);
	if (wait_proc(d->p.pid, 10000) >= 0) {
		d->p.pid = -1;
	}
	kill_proc(&d->p);
}

/*
 * Run ranks @first .. @last of a world of @size on @endpoint, each "comm_worker ENDPOINT
 * PREFIX RANK SIZE SCENARIO TIMEOUT"; wait up to @wait_ms for all and check every exit status
 * is @want_exit. A process still running at the deadline fails the test (and is killed).
 */
static void run_group(const char *endpoint, int first, int last, int size, const char *scen,
		      int timeout_ms, int wait_ms, int want_exit)
{
	struct proc ps[MAX_PROCS];
	char prefix[64], ranks[MAX_PROCS][16], sizes[16], tmo[16];
	int64_t deadline = crun_now_ms() + wait_ms;
	int bad = 0, n = last - first + 1;

	snprintf(prefix, sizeof(prefix), "test%d-%d/", (int)getpid(), ++prefix_seq);
	snprintf(sizes, sizeof(sizes), "%d", size);
	snprintf(tmo, sizeof(tmo), "%d", timeout_ms);
	for (int i = 0; i < n; i++) {
		char *argv[] = {(char *)worker_exe,
				(char *)endpoint,
				prefix,
				ranks[i],
				sizes,
				(char *)scen,
				tmo,
				NULL};

		snprintf(ranks[i], sizeof(ranks[i]), "%d", first + i);
		ps[i] = spawn(argv, false);
	}
	for (int i = 0; i < n; i++) {
		int left = (int)(deadline - crun_now_ms());
		int st = wait_proc(ps[i].pid, left > 0 ? left : 1);

		if (st == -ETIMEDOUT) {
			fprintf(stderr, "rank %d (%s, size %d) still running after %d ms\n",
				first + i, scen, size, wait_ms);
			bad++;
			continue;
		}
		ps[i].pid = -1;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != want_exit) {
			fprintf(stderr, "rank %d (%s, size %d): %s %d, want exit %d\n", first + i,
				scen, size, WIFEXITED(st) ? "exit" : "signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), want_exit);
			bad++;
		}
	}
	for (int i = 0; i < n; i++) {
		kill_proc(&ps[i]);
	}
	assert_int_equal(bad, 0);
}

static int setup_daemon(void **state)
{
	struct store_daemon *d = calloc(1, sizeof(*d));

	if (d == NULL) {
		return -1;
	}
	daemon_start(d);
	*state = d;
	return 0;
}

static int teardown_daemon(void **state)
{
	struct store_daemon *d = *state;

	daemon_stop(d);
	free(d);
	return 0;
}

/* Every collective against the serial reference, world sizes 1 to 8. */
static void collectives_match_reference_sizes_1_to_8(void **state)
{
	struct store_daemon *d = *state;

	for (int n = 1; n <= 8; n++) {
		run_group(d->endpoint, 0, n - 1, n, "all", 60000, 120000, 0);
	}
}

/* The same with shared memory turned off: every link over TCP, as between hosts. */
static void collectives_over_tcp_match_reference_sizes_1_to_8(void **state)
{
	struct store_daemon *d = *state;

	setenv("CRUN_COMM_SHM", "0", 1);
	for (int n = 1; n <= 8; n++) {
		run_group(d->endpoint, 0, n - 1, n, "all", 60000, 120000, 0);
	}
	unsetenv("CRUN_COMM_SHM");
}

/* The baseline (SSE2) reduction loops, which an AVX2 machine never picks by itself. */
static void baseline_reduction_loops_match_reference(void **state)
{
	struct store_daemon *d = *state;

	setenv("CRUN_COMM_SIMD", "base", 1);
	setenv("CRUN_COMM_SHM", "0", 1);
	run_group(d->endpoint, 0, 2, 3, "all", 60000, 120000, 0);
	unsetenv("CRUN_COMM_SHM");
	unsetenv("CRUN_COMM_SIMD");
}

/* Shared memory, but every byte copied through the rings (no process_vm_readv). */
static void collectives_over_shm_copy_match_reference_sizes_1_to_8(void **state)
{
	struct store_daemon *d = *state;

	setenv("CRUN_COMM_CMA", "0", 1);
	for (int n = 1; n <= 8; n++) {
		run_group(d->endpoint, 0, n - 1, n, "all", 60000, 120000, 0);
	}
	unsetenv("CRUN_COMM_CMA");
}

/* Opted into with CRUN_COMM_CMA=1: peers' buffers read with process_vm_readv. */
static void collectives_over_cma_match_reference_sizes_1_to_8(void **state)
{
	struct store_daemon *d = *state;

	setenv("CRUN_COMM_CMA", "1", 1);
	for (int n = 1; n <= 8; n++) {
		run_group(d->endpoint, 0, n - 1, n, "all", 60000, 120000, 0);
	}
	unsetenv("CRUN_COMM_CMA");
}

/*
 * One host: the rings copy by default (process_vm_readv lost every size on the 2-core guest,
 * bench/notes/allreduce.md); CRUN_COMM_CMA=1 reads peers' buffers instead; any other value is
 * warned about and copies.
 */
static void same_host_links_copy_unless_cma_is_asked_for(void **state)
{
	static const char *const cma[] = {NULL, "0", "yes", "1"};
	static const char *const want[] = {"shared memory", "shared memory", "shared memory",
					   "shared memory, single copy"};
	struct store_daemon *d = *state;

	for (size_t i = 0; i < sizeof(cma) / sizeof(cma[0]); i++) {
		if (cma[i] != NULL) {
			setenv("CRUN_COMM_CMA", cma[i], 1);
		}
		setenv("COMM_WANT_LINKS", want[i], 1);
		run_group(d->endpoint, 0, 2, 3, "links", 60000, 120000, 0);
		unsetenv("CRUN_COMM_CMA");
	}
	unsetenv("COMM_WANT_LINKS");
}

static void allreduce_and_broadcast_64mib_at_2_and_4_ranks(void **state)
{
	struct store_daemon *d = *state;

	run_group(d->endpoint, 0, 1, 2, "big", 60000, 120000, 0);
	run_group(d->endpoint, 0, 3, 4, "big", 60000, 120000, 0);
}

static void missing_peer_times_out_within_the_timeout(void **state)
{
	struct store_daemon *d = *state;

	/* Rank 3 of 4 never starts; the others must give up with -ETIMEDOUT in ~1.5 s. */
	run_group(d->endpoint, 0, 2, 4, "missing", 1500, 20000, EXIT_SAW_ERROR);
}

/*
 * Four ranks loop allreduces; rank 2 is killed (@stop false) or stopped with SIGSTOP (@stop
 * true: alive but silent, so its neighbours must time out). The others must all report an
 * error (-ECONNRESET or -ETIMEDOUT, then fail fast) within the timeout plus slack. A killed
 * peer's sockets close, so every survivor must see a reset, never a timeout; a stopped one
 * closes nothing, so some survivor must be the first to time out.
 */
static void broken_peer(struct store_daemon *d, bool stop)
{
	struct proc ps[4];
	char prefix[64], ranks[4][8], line[64];
	int bad = 0, timeouts = 0;

	snprintf(prefix, sizeof(prefix), "die%d-%d/", (int)getpid(), ++prefix_seq);
	for (int i = 0; i < 4; i++) {
		char *argv[] = {(char *)worker_exe, d->endpoint, prefix, ranks[i], S("4"),
				S("die"),	    S("2000"),	 NULL};

		snprintf(ranks[i], sizeof(ranks[i]), "%d", i);
		ps[i] = spawn(argv, true);
	}
	/* Once every rank has finished one allreduce they are all inside the loop. */
	for (int i = 0; i < 4; i++) {
		if (read_line(ps[i].out, line, sizeof(line), 30000) < 0 ||
		    strcmp(line, "ready") != 0) {
			bad++;
		}
	}
	if (stop) {
		kill(ps[2].pid, SIGSTOP);
	} else {
		kill_proc(&ps[2]);
	}
	for (int i = 0; i < 4 && bad == 0; i++) {
		int st;

		if (i == 2) {
			continue;
		}
		st = wait_proc(ps[i].pid, 20000);
		if (st == -ETIMEDOUT) {
			fprintf(stderr, "rank %d hangs after its peer was killed\n", i);
			bad++;
			continue;
		}
		ps[i].pid = -1;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != EXIT_SAW_ERROR) {
			fprintf(stderr, "rank %d: status 0x%x\n", i, st);
			bad++;
			continue;
		}
		if (read_line(ps[i].out, line, sizeof(line), 1000) < 0) {
			fprintf(stderr, "rank %d: did not say which error it saw\n", i);
			bad++;
		} else if (strcmp(line, "saw ETIMEDOUT") == 0) {
			timeouts++;
		} else if (strcmp(line, "saw ECONNRESET") != 0) {
			fprintf(stderr, "rank %d: said \"%s\"\n", i, line);
			bad++;
		}
	}
	for (int i = 0; i < 4; i++) {
		kill_proc(&ps[i]);
	}
	assert_int_equal(bad, 0);
	if (stop && timeouts == 0) {
		fail_msg("a stopped peer: no rank timed out, every one saw a reset");
	}
	if (!stop && timeouts > 0) {
		fail_msg("a killed peer: %d rank(s) timed out instead of seeing a reset", timeouts);
	}
}

static void killed_peer_gives_errors_not_a_hang(void **state)
{
	broken_peer(*state, false);
}

static void killed_peer_over_cma_gives_errors_not_a_hang(void **state)
{
	setenv("CRUN_COMM_CMA", "1", 1);
	broken_peer(*state, false);
	unsetenv("CRUN_COMM_CMA");
}

static void killed_peer_over_tcp_gives_errors_not_a_hang(void **state)
{
	setenv("CRUN_COMM_SHM", "0", 1);
	broken_peer(*state, false);
	unsetenv("CRUN_COMM_SHM");
}

static void stopped_peer_gives_timeouts_not_a_hang(void **state)
{
	broken_peer(*state, true);
}

static void stopped_peer_over_tcp_gives_timeouts_not_a_hang(void **state)
{
	setenv("CRUN_COMM_SHM", "0", 1);
	broken_peer(*state, true);
	unsetenv("CRUN_COMM_SHM");
}

static void stray_connections_are_rejected(void **state)
{
	struct store_daemon *d = *state;

	run_group(d->endpoint, 0, 2, 3, "stray", 60000, 120000, 0);
}

static void mismatched_collectives_fail_fast(void **state)
{
	struct store_daemon *d = *state;

	run_group(d->endpoint, 0, 2, 3, "mismatch", 20000, 15000, EXIT_SAW_ERROR);
}

static void bad_arguments_are_rejected(void **state)
{
	struct store_daemon *d = *state;

	run_group(d->endpoint, 0, 0, 1, "args", 10000, 30000, 0);
}

/* CRUN_COMM_ADDR picks the listening address (127.0.0.2 here); a bad one is refused. */
static void comm_addr_is_honoured_and_checked(void **state)
{
	struct store_daemon *d = *state;

	setenv("CRUN_COMM_ADDR", "127.0.0.2", 1);
	setenv("CRUN_COMM_SHM", "0", 1);
	run_group(d->endpoint, 0, 2, 3, "all", 60000, 120000, 0);
	setenv("CRUN_COMM_ADDR", "no.such.host.invalid", 1);
	run_group(d->endpoint, 0, 1, 2, "badaddr", 10000, 30000, EXIT_SAW_ERROR);
	unsetenv("CRUN_COMM_ADDR");
	unsetenv("CRUN_COMM_SHM");
}

struct tmp_store {
	char dir[32];
	char path[64];
};

static int setup_tmpdir(void **state)
{
	struct tmp_store *t = calloc(1, sizeof(*t));

	if (t == NULL) {
		return -1;
	}
	snprintf(t->dir, sizeof(t->dir), "/tmp/crun-comm-XXXXXX");
	if (mkdtemp(t->dir) == NULL) {
		free(t);
		return -1;
	}
	snprintf(t->path, sizeof(t->path), "%s/store", t->dir);
	*state = t;
	return 0;
}

/* Runs even when the test failed: remove whatever the file store left, then the folder. */
static int teardown_tmpdir(void **state)
{
	struct tmp_store *t = *state;
	struct dirent *e;
	DIR *d = opendir(t->dir);
	char path[320];

	while (d != NULL && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			snprintf(path, sizeof(path), "%s/%s", t->dir, e->d_name);
			unlink(path);
		}
	}
	if (d != NULL) {
		closedir(d);
	}
	if (rmdir(t->dir) < 0) {
		fprintf(stderr, "could not remove %s: %s\n", t->dir, strerror(errno));
	}
	free(t);
	return 0;
}

static void file_store_works_too(void **state)
{
	struct tmp_store *t = *state;
	char ep[96];

	snprintf(ep, sizeof(ep), "file://%s", t->path);
	run_group(ep, 0, 2, 3, "all", 60000, 120000, 0);
}

/* Run the nccl scenario on @n ranks (one per GPU): 0 when every rank passed. */
static int run_nccl_ranks(struct store_daemon *d, int n)
{
	struct proc p[4];
	char prefix[64], ranks[4][16], size[16];
	int bad = 0;

	snprintf(prefix, sizeof(prefix), "nccl%d-%d/", (int)getpid(), ++prefix_seq);
	snprintf(size, sizeof(size), "%d", n);
	for (int i = 0; i < n; i++) {
		char *argv[] = {(char *)worker_exe, d->endpoint, prefix, ranks[i], size,
				S("nccl"),	    S("60000"), NULL};

		snprintf(ranks[i], sizeof(ranks[i]), "%d", i);
		p[i] = spawn(argv, false);
	}
	for (int i = 0; i < n; i++) {
		int st = wait_proc(p[i].pid, 180000);
		int code = st == -ETIMEDOUT ? -1
			   : WIFEXITED(st)  ? WEXITSTATUS(st)
					    : 128 + WTERMSIG(st);

		if (st != -ETIMEDOUT) {
			p[i].pid = -1;
		}
		if (code != 0) {
			/* 77 too: the worker found no usable GPU, but one is visible. */
			fprintf(stderr, "nccl worker rank %d of %d: %s %d%s\n", i, n,
				code < 0 ? "timed out" : "exit", code,
				code == 77 ? " (no usable GPU, although one is visible)" : "");
			bad++;
		}
	}
	for (int i = 0; i < n; i++) {
		kill_proc(&p[i]);
	}
	return bad == 0 ? 0 : 1;
}

/*
 * NCCL: skip (77) only where no GPU is visible (src/gpu_count.h: no driver library and no
 * /dev/nvidia*); where one is visible, a broken driver or a worker that cannot use it fails.
 * One rank, then one per GPU (up to 4) when there are several: NCCL refuses two ranks on one.
 */
static int run_nccl(void)
{
	struct store_daemon d;
	struct crun_diag diag = {0};
	struct gpu_probe g;
	int rc, n;

	if (!CRUN_HAVE_NCCL) {
		printf("nccl: built without NCCL: skipped\n");
		return 77;
	}
	if (gpu_probe(&g, &diag) < 0) {
		fprintf(stderr, "nccl: the GPU probe failed: %s\n", diag.msg);
		return 1;
	}
	if (g.state == GPU_NONE) {
		printf("nccl: no GPU visible: skipped (%s)\n", g.msg);
		return 77;
	}
	if (g.state == GPU_BROKEN) {
		fprintf(stderr, "nccl: a GPU is visible but broken: %s\n", g.msg);
		return 1;
	}
	printf("nccl: %s\n", g.msg);
	n = g.count < 4 ? g.count : 4;
	daemon_start(&d);
	rc = run_nccl_ranks(&d, 1);
	if (rc == 0 && n >= 2) {
		rc = run_nccl_ranks(&d, n);
	} else if (rc == 0) {
		printf("nccl: one GPU: the multi-rank case needs two (NCCL refuses two ranks on "
		       "one GPU)\n");
	}
	daemon_stop(&d);
	return rc;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(bad_arguments_are_rejected, setup_daemon,
						teardown_daemon),
		cmocka_unit_test_setup_teardown(collectives_match_reference_sizes_1_to_8,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(collectives_over_tcp_match_reference_sizes_1_to_8,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(
			collectives_over_shm_copy_match_reference_sizes_1_to_8, setup_daemon,
			teardown_daemon),
		cmocka_unit_test_setup_teardown(collectives_over_cma_match_reference_sizes_1_to_8,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(same_host_links_copy_unless_cma_is_asked_for,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(baseline_reduction_loops_match_reference,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(allreduce_and_broadcast_64mib_at_2_and_4_ranks,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(missing_peer_times_out_within_the_timeout,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(killed_peer_gives_errors_not_a_hang, setup_daemon,
						teardown_daemon),
		cmocka_unit_test_setup_teardown(killed_peer_over_cma_gives_errors_not_a_hang,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(killed_peer_over_tcp_gives_errors_not_a_hang,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(stopped_peer_gives_timeouts_not_a_hang,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(stopped_peer_over_tcp_gives_timeouts_not_a_hang,
						setup_daemon, teardown_daemon),
		cmocka_unit_test_setup_teardown(stray_connections_are_rejected, setup_daemon,
						teardown_daemon),
		cmocka_unit_test_setup_teardown(mismatched_collectives_fail_fast, setup_daemon,
						teardown_daemon),
		cmocka_unit_test_setup_teardown(comm_addr_is_honoured_and_checked, setup_daemon,
						teardown_daemon),
		cmocka_unit_test_setup_teardown(file_store_works_too, setup_tmpdir,
						teardown_tmpdir),
	};

	if (argc < 3) {
		fprintf(stderr, "usage: %s COMM_WORKER CRUN_RDZVD [--nccl | TEST_FILTER]\n",
			argv[0]);
		return 2;
	}
	worker_exe = argv[1];
	rdzvd_exe = argv[2];
	signal(SIGPIPE, SIG_IGN);
	if (argc > 3 && strcmp(argv[3], "--nccl") == 0) {
		return run_nccl();
	}
	if (argc > 3) {
		cmocka_set_test_filter(argv[3]);
	}
	return cmocka_run_group_tests_name("comm", tests, NULL, NULL);
}
