/* SPDX-License-Identifier: MIT */
/* tests/worker/launch.c: a small stand-in for the agent: start N workers with the environment
 * crun would set, relay their output with a rank prefix, fail the group on the first failure,
 * restart it while restarts remain, and optionally kill one rank on cue (fault injection).
 * The store is the real TCP store server (rendezvous/store/server.c) on 127.0.0.1 with port 0, or a
 * real file store. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rendezvous/store/server.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/clock.h"

#define MAX_RANKS 64

extern char **environ;

struct child {
	pid_t pid;
	int fd;         /* read end of the child's stdout+stderr; -1 at EOF */
	char line[4096];
	size_t len;
	bool exited;
	int status;
};

static struct {
	int n;
	int restarts;
	int timeout_s;
	const char *store; /* "tcp" or "file" */
	int kill_rank;
	const char *kill_on;
	const char *error_dir;
	const char *rdzvd; /* crun-rdzvd binary for --store rdzvd */
	const char *token;        /* the store's token (crun-rdzvd --token) */
	const char *worker_token; /* CRUN_STORE_TOKEN given to workers; default: token */
	char **argv;
} opt = {.n = 2, .timeout_s = 120, .store = "tcp", .kill_rank = -1};

static char endpoint[PATH_MAX + 16];
static pid_t rdzvd_pid = -1;
static int rdzvd_fd = -1;
static char file_dir[PATH_MAX];

static void usage(FILE *f)
{
	fprintf(f, "usage: launch [-n N] [--store tcp|file|rdzvd --rdzvd PATH] [--restarts K]\n"
		   "              [--timeout SEC] [--token T [--worker-token T2]]\n"
		   "              [--kill-rank R --kill-on TEXT] [--error-dir DIR] -- PROG ARGS...\n");
}

static int parse_int(const char *what, const char *s, int lo, int hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "launch: %s: expected an integer in [%d, %d], got \"%s\"\n", what,
			lo, hi, s);
		exit(2);
	}
	return (int)v;
}

/* Build the child's environment: ours minus the variables we set, plus them. */
static char **make_env(int rank, int attempt)
{
	static const char *const ours[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=",
		"LOCAL_WORLD_SIZE=", "GROUP_RANK=", "GROUP_WORLD_SIZE=", "ROLE_RANK=",
		"ROLE_WORLD_SIZE=", "ROLE_NAME=", "MASTER_ADDR=", "MASTER_PORT=",
		"TORCHELASTIC_RESTART_COUNT=", "TORCHELASTIC_MAX_RESTARTS=", "TORCHELASTIC_RUN_ID=",
		"TORCHELASTIC_ERROR_FILE=", "CRUN_STORE_ENDPOINT=", "CRUN_STORE_PREFIX=",
		"CRUN_STORE_TOKEN=", "CRUN_SINGLE="};
	size_t n = 0, k = 0, i, j;
	char **env;
	bool skip;

	while (environ[n] != NULL) {
		n++;
	}
	env = calloc(n + 32, sizeof(char *));
	if (env == NULL) {
		return NULL;
	}
	for (i = 0; i < n; i++) {
		skip = false;
		for (j = 0; j < ARRAY_SIZE(ours); j++) {
			skip = skip || strncmp(environ[i], ours[j], strlen(ours[j])) == 0;
		}
		if (!skip) {
			env[k++] = strdup(environ[i]);
		}
	}
#define ADD(...)                                                                               \
	do {                                                                                   \
		if (asprintf(&env[k], __VA_ARGS__) < 0) {                                      \
			env[k] = NULL;                                                         \
		}                                                                              \
		k++;                                                                           \
	} while (0)
	ADD("RANK=%d", rank);
	ADD("LOCAL_RANK=%d", rank);
	ADD("WORLD_SIZE=%d", opt.n);
	ADD("LOCAL_WORLD_SIZE=%d", opt.n);
	ADD("GROUP_RANK=0");
	ADD("GROUP_WORLD_SIZE=1");
	ADD("ROLE_RANK=%d", rank);
	ADD("ROLE_WORLD_SIZE=%d", opt.n);
	ADD("ROLE_NAME=default");
	ADD("MASTER_ADDR=127.0.0.1");
	ADD("MASTER_PORT=29500");
	ADD("TORCHELASTIC_RESTART_COUNT=%d", attempt);
	ADD("TORCHELASTIC_MAX_RESTARTS=%d", opt.restarts);
	ADD("TORCHELASTIC_RUN_ID=launch-%ld", (long)getpid());
	ADD("CRUN_STORE_ENDPOINT=%s", endpoint);
	ADD("CRUN_STORE_PREFIX=launch/attempt-%d/", attempt);
	if (opt.worker_token != NULL || opt.token != NULL) {
		ADD("CRUN_STORE_TOKEN=%s", opt.worker_token != NULL ? opt.worker_token : opt.token);
	}
	if (opt.error_dir != NULL) {
		ADD("TORCHELASTIC_ERROR_FILE=%s/error-%d-%d.json", opt.error_dir, attempt, rank);
	}
#undef ADD
	for (i = 0; i < k; i++) {
		if (env[i] == NULL) {
			return NULL;
		}
	}
	return env;
}

static void free_env(char **env)
{
	for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
		free(env[i]);
	}
	free(env);
}

static int spawn(struct child *c, int rank, int attempt)
{
	char **env = make_env(rank, attempt);
	int p[2];

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	if (env == NULL || pipe2(p, O_CLOEXEC) < 0) {
		free_env(env);
		return -ENOMEM;
	}
	c->pid = fork();
	if (c->pid < 0) {
		close(p[0]);
		close(p[1]);
		free_env(env);
		return -errno;
	}
	if (c->pid == 0) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		execvpe(opt.argv[0], opt.argv, env);
		dprintf(STDERR_FILENO, "launch: exec %s: %s\n", opt.argv[0], strerror(errno));
		_exit(127);
	}
	close(p[1]);
	c->fd = p[0];
	free_env(env);
	return 0;
}

static void emit(struct child *c, int rank, bool *kill_now)
{
	c->line[c->len] = '\0';
	printf("[rank %d] %s\n", rank, c->line);
	fflush(stdout);
	if (opt.kill_on != NULL && strstr(c->line, opt.kill_on) != NULL) {
		*kill_now = true;
	}
	c->len = 0;
}

static void drain(struct child *c, int rank, bool *kill_now)
{
	char buf[4096];
	ssize_t n, i;

	n = read(c->fd, buf, sizeof(buf));
	if (n <= 0) {
		if (n < 0 && errno == EINTR) {
			return;
		}
		if (c->len > 0) {
			emit(c, rank, kill_now);
		}
		close(c->fd);
		c->fd = -1;
		return;
	}
	for (i = 0; i < n; i++) {
		if (buf[i] == '\n' || c->len + 1 >= sizeof(c->line)) {
			emit(c, rank, kill_now);
			if (buf[i] == '\n') {
				continue;
			}
		}
		c->line[c->len++] = buf[i];
	}
}

static void describe(int rank, int status)
{
	if (WIFEXITED(status)) {
		printf("launch: rank %d exited with code %d\n", rank, WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		printf("launch: rank %d killed by signal %d (%s)\n", rank, WTERMSIG(status),
		       strsignal(WTERMSIG(status)));
	}
	fflush(stdout);
}

/* Run one attempt. Returns 0 when every rank exits 0, 1 on a failure, 124 on the deadline. */
static int run_attempt(int attempt, int sfd, int64_t deadline)
{
	struct child ch[MAX_RANKS];
	struct pollfd pfd[MAX_RANKS + 1];
	struct signalfd_siginfo si;
	int nfd, i, rc, live, result = 0, status, wait_ms;
	int64_t term_at = -1, now;
	bool kill_now = false, failed = false, killed_one = false;
	pid_t pid;

	for (i = 0; i < opt.n; i++) {
		rc = spawn(&ch[i], i, attempt);
		if (rc < 0) {
			fprintf(stderr, "launch: spawn rank %d: %s\n", i, strerror(-rc));
			opt.n = i; /* reap those already started */
			failed = true;
			result = 1;
			break;
		}
	}
	live = opt.n;
	while (live > 0) {
		nfd = 0;
		pfd[nfd].fd = sfd;
		pfd[nfd++].events = POLLIN;
		for (i = 0; i < opt.n; i++) {
			pfd[nfd].fd = ch[i].fd;
			pfd[nfd++].events = POLLIN;
		}
		now = crun_now_ms();
		wait_ms = (int)(deadline - now);
		if (term_at >= 0 && term_at - now < wait_ms) {
			wait_ms = (int)(term_at - now);
		}
		if (wait_ms < 0) {
			wait_ms = 0;
		}
		rc = poll(pfd, (nfds_t)nfd, wait_ms);
		if (rc < 0 && errno != EINTR) {
			perror("launch: poll");
			exit(1);
		}
		now = crun_now_ms();
		if (now >= deadline && result != 124) {
			printf("launch: deadline of %d s passed: killing every rank\n", opt.timeout_s);
			fflush(stdout);
			for (i = 0; i < opt.n; i++) {
				if (!ch[i].exited) {
					kill(ch[i].pid, SIGKILL);
				}
			}
			result = 124;
		}
		if (term_at >= 0 && now >= term_at) {
			for (i = 0; i < opt.n; i++) {
				if (!ch[i].exited) {
					kill(ch[i].pid, SIGKILL);
				}
			}
			term_at = -1;
		}
		for (i = 0; i < opt.n; i++) {
			if (pfd[i + 1].fd >= 0 && (pfd[i + 1].revents & (POLLIN | POLLHUP))) {
				drain(&ch[i], i, &kill_now);
			}
		}
		if (kill_now && !killed_one && attempt == 0 && opt.kill_rank >= 0 &&
		    opt.kill_rank < opt.n && !ch[opt.kill_rank].exited) {
			printf("launch: fault injection: SIGKILL rank %d\n", opt.kill_rank);
			fflush(stdout);
			kill(ch[opt.kill_rank].pid, SIGKILL);
			killed_one = true;
		}
		if (pfd[0].revents & POLLIN) {
			while (read(sfd, &si, sizeof(si)) > 0) {
			}
		}
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			for (i = 0; i < opt.n; i++) {
				if (ch[i].pid != pid) {
					continue;
				}
				ch[i].exited = true;
				ch[i].status = status;
				live--;
				if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
					describe(i, status);
					if (!failed) {
						failed = true;
						result = result == 0 ? 1 : result;
						/* The group fails as one: SIGTERM, then SIGKILL after
						 * a grace period. */
						for (int j = 0; j < opt.n; j++) {
							if (!ch[j].exited) {
								kill(ch[j].pid, SIGTERM);
							}
						}
						term_at = crun_now_ms() + 5000;
					}
				}
			}
		}
	}
	/* Drain what the children wrote before they exited. */
	for (i = 0; i < opt.n; i++) {
		while (ch[i].fd >= 0) {
			drain(&ch[i], i, &kill_now);
		}
	}
	return result;
}

/* Start crun-rdzvd on 127.0.0.1 port 0 and read the bound address from its first line. */
static int start_rdzvd(void)
{
	char line[256];
	size_t len = 0;
	int p[2], status;
	struct pollfd pfd;
	int64_t deadline = crun_now_ms() + 20000;
	ssize_t n;

	if (pipe2(p, O_CLOEXEC) < 0) {
		return -errno;
	}
	rdzvd_pid = fork();
	if (rdzvd_pid < 0) {
		return -errno;
	}
	if (rdzvd_pid == 0) {
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(p[1], STDOUT_FILENO);
		if (opt.token != NULL) {
			execl(opt.rdzvd, opt.rdzvd, "--listen", "127.0.0.1:0", "--quiet", "--token",
			      opt.token, (char *)NULL);
		} else {
			execl(opt.rdzvd, opt.rdzvd, "--listen", "127.0.0.1:0", "--quiet",
			      "--insecure", (char *)NULL);
		}
		dprintf(STDERR_FILENO, "launch: exec %s: %s\n", opt.rdzvd, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	rdzvd_fd = p[0];
	while (len + 1 < sizeof(line)) {
		pfd.fd = rdzvd_fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, (int)(deadline - crun_now_ms())) <= 0) {
			fprintf(stderr, "launch: crun-rdzvd printed no address in 20 s\n");
			return -ETIMEDOUT;
		}
		n = read(rdzvd_fd, line + len, 1);
		if (n <= 0) {
			waitpid(rdzvd_pid, &status, 0);
			rdzvd_pid = -1;
			fprintf(stderr, "launch: crun-rdzvd exited before printing its address\n");
			return -EPIPE;
		}
		if (line[len] == '\n') {
			break;
		}
		len++;
	}
	line[len] = '\0';
	snprintf(endpoint, sizeof(endpoint), "%s", line);
	printf("launch: crun-rdzvd pid %ld listening on %s\n", (long)rdzvd_pid, endpoint);
	fflush(stdout);
	return 0;
}

static void stop_rdzvd(void)
{
	int status;

	if (rdzvd_pid > 0) {
		kill(rdzvd_pid, SIGTERM);
		waitpid(rdzvd_pid, &status, 0);
		rdzvd_pid = -1;
	}
	if (rdzvd_fd >= 0) {
		close(rdzvd_fd);
		rdzvd_fd = -1;
	}
}

static void cleanup_store(struct store_server_thread *srv)
{
	char path[PATH_MAX + 32];

	stop_rdzvd();
	store_server_thread_stop(srv);
	if (file_dir[0] != '\0') {
		snprintf(path, sizeof(path), "rm -rf '%s'", file_dir);
		if (system(path) != 0) {
			fprintf(stderr, "launch: could not remove %s\n", file_dir);
		}
	}
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"store", required_argument, NULL, 's'},
		{"restarts", required_argument, NULL, 'r'},
		{"timeout", required_argument, NULL, 't'},
		{"kill-rank", required_argument, NULL, 'k'},
		{"kill-on", required_argument, NULL, 'K'},
		{"error-dir", required_argument, NULL, 'e'},
		{"rdzvd", required_argument, NULL, 'R'},
		{"token", required_argument, NULL, 'T'},
		{"worker-token", required_argument, NULL, 'W'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct store_server_opts so = {.listen = "127.0.0.1:0"};

	struct store_server_thread *srv = NULL;
	struct crun_diag d = {0};
	int64_t deadline;
	sigset_t mask;
	int c, sfd, attempt, rc = 1;

	while ((c = getopt_long(argc, argv, "+n:h", longs, NULL)) != -1) {
		switch (c) {
		case 'n':
			opt.n = parse_int("-n", optarg, 1, MAX_RANKS);
			break;
		case 's':
			opt.store = optarg;
			break;
		case 'r':
			opt.restarts = parse_int("--restarts", optarg, 0, 100);
			break;
		case 't':
			opt.timeout_s = parse_int("--timeout", optarg, 1, 86400);
			break;
		case 'k':
			opt.kill_rank = parse_int("--kill-rank", optarg, 0, MAX_RANKS - 1);
			break;
		case 'K':
			opt.kill_on = optarg;
			break;
		case 'e':
			opt.error_dir = optarg;
			break;
		case 'R':
			opt.rdzvd = optarg;
			break;
		case 'T':
			opt.token = optarg;
			break;
		case 'W':
			opt.worker_token = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "launch: no program given\n");
		usage(stderr);
		return 2;
	}
	opt.argv = argv + optind;

	/* Block SIGCHLD before the store thread starts, so that it inherits the mask and the
	 * signal can only reach our signalfd. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	if (strcmp(opt.store, "tcp") == 0) {
		so.token = opt.token;
		if (store_server_thread_start(&so, &srv, &d) < 0) {
			fprintf(stderr, "launch: store: %s\n", d.msg);
			return 1;
		}
		snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", store_server_thread_port(srv));
	} else if (strcmp(opt.store, "rdzvd") == 0) {
		if (opt.rdzvd == NULL) {
			fprintf(stderr, "launch: --store rdzvd needs --rdzvd PATH\n");
			return 2;
		}
		if (start_rdzvd() < 0) {
			stop_rdzvd();
			return 1;
		}
	} else if (strcmp(opt.store, "file") == 0) {
		snprintf(file_dir, sizeof(file_dir), "%s/crun-launch-XXXXXX",
			 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
		if (mkdtemp(file_dir) == NULL) {
			fprintf(stderr, "launch: mkdtemp %s: %s\n", file_dir, strerror(errno));
			return 1;
		}
		snprintf(endpoint, sizeof(endpoint), "file://%s/store", file_dir);
	} else {
		fprintf(stderr, "launch: --store: expected tcp, file or rdzvd, got \"%s\"\n",
			opt.store);
		return 2;
	}

	sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0) {
		perror("launch: signalfd");
		cleanup_store(srv);
		return 1;
	}
	deadline = crun_now_ms() + (int64_t)opt.timeout_s * 1000;
	for (attempt = 0; attempt <= opt.restarts; attempt++) {
		if (attempt > 0) {
			printf("launch: restarting the group (restart %d of %d)\n", attempt,
			       opt.restarts);
			fflush(stdout);
		}
		rc = run_attempt(attempt, sfd, deadline);
		if (rc != 1) {
			break;
		}
	}
	printf("launch: %s\n", rc == 0 ? "all ranks succeeded" : "FAILED");
	fflush(stdout);
	close(sfd);
	cleanup_store(srv);
	return rc;
}
