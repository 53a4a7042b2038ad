/* SPDX-License-Identifier: MIT */
/* tests/agent/worker.c: a tiny worker for the agent tests; argv is a list of steps. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * Steps, run in order:
 *   env                  print every variable the agent must set, "KEY=VALUE" per line
 *   print:TEXT           print TEXT
 *   exit:N               exit with N
 *   exit-if-rank:R:N     exit with N when RANK == R
 *   exit-if-restart:C:N  exit with N when TORCHELASTIC_RESTART_COUNT == C
 *   sleep:MS             sleep MS milliseconds
 *   raise:SIG            kill itself with signal number SIG
 *   raise-if-rank:R:SIG
 *   spam:LINES:LEN       print LINES lines of LEN bytes on stdout and stderr, written in odd
 *                        pieces so the agent must reassemble them
 *   grandchild:DIR       fork a child that sleeps (in the same process group) and write
 *                        "<worker pid> <child pid>" to DIR/pids.<RANK>
 *   errfile:MSG          write torchrun's error JSON with MSG to $TORCHELASTIC_ERROR_FILE
 *   ignore-term          ignore SIGTERM (tests the SIGKILL after the grace period)
 *   ignore-term-if-rank:R  the same, only when RANK == R
 *   touch:PATH           create PATH (PATH may contain %r for RANK)
 *   wait-file:PATH       wait (up to 120 s) until PATH exists
 *   term-exit:N          on SIGTERM, print "got SIGTERM" and exit with N
 *   exit-if-env:KEY:VAL:N  exit with N when $KEY == VAL
 *   fds                  print "FDS=" and the worker's open descriptors ("0 1 2" when clean)
 */
static const char *const vars[] = {
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
	"ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
	"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
	"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
	"OMP_NUM_THREADS", "CRUN_STORE_ENDPOINT", "CRUN_STORE_PREFIX", "NCCL_SOCKET_IFNAME",
	"GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES",
};

static int term_exit = -1;

static void on_term(int sig)
{
	static const char msg[] = "got SIGTERM\n";

	(void)sig;
	if (write(1, msg, sizeof(msg) - 1) < 0) {
		_exit(term_exit);
	}
	_exit(term_exit);
}

static int env_int(const char *k)
{
	const char *v = getenv(k);

	return v != NULL ? atoi(v) : -1;
}

static void msleep(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

static void subst_rank(const char *in, char *out, size_t len)
{
	const char *p = strstr(in, "%r");

	if (p == NULL) {
		snprintf(out, len, "%s", in);
	} else {
		snprintf(out, len, "%.*s%d%s", (int)(p - in), in, env_int("RANK"), p + 2);
	}
}

static void spam(int lines, int len)
{
	char *line = malloc((size_t)len + 64);
	int i, rank = env_int("RANK");

	for (i = 0; i < lines; i++) {
		int n = snprintf(line, 64, "<r%d l%d ", rank, i), k, off;

		while (n < len - 1) {
			line[n] = (char)('a' + (i + n) % 26);
			n++;
		}
		line[n++] = '>';
		line[n++] = '\n';
		/* Odd pieces, both streams, so lines reach the agent cut at random places. */
		for (off = 0; off < n; off += k) {
			k = 1 + (i * 7 + off) % 97;
			if (k > n - off) {
				k = n - off;
			}
			if (write(1, line + off, (size_t)k) < 0 || write(2, line + off, (size_t)k) < 0) {
				exit(3);
			}
		}
	}
	free(line);
}

/* The open descriptors, less the one that reads /proc/self/fd, with what each one is. */
static void print_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char line[8192], what[512], link[300];
	size_t n = 0;

	if (d == NULL) {
		exit(6);
	}
	line[0] = '\0';
	while ((e = readdir(d)) != NULL) {
		ssize_t k;

		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d)) {
			continue;
		}
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		k = readlink(link, what, sizeof(what) - 1);
		what[k > 0 ? k : 0] = '\0';
		n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s", n > 0 ? " " : "",
				      e->d_name);
		if (atoi(e->d_name) > 2 && n < sizeof(line)) {
			n += (size_t)snprintf(line + n, sizeof(line) - n, "(%s)", what);
		}
		if (n >= sizeof(line)) {
			break;
		}
	}
	closedir(d);
	printf("FDS=%s\n", line);
}

int main(int argc, char **argv)
{
	int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 1; i < argc; i++) {
		const char *s = argv[i];
		int a, b;
		char path[4096];

		if (strcmp(s, "env") == 0) {
			size_t k;

			for (k = 0; k < sizeof(vars) / sizeof(vars[0]); k++) {
				const char *v = getenv(vars[k]);

				printf("%s=%s\n", vars[k], v != NULL ? v : "<unset>");
			}
		} else if (strcmp(s, "fds") == 0) {
			print_fds();
		} else if (strncmp(s, "exit-if-env:", 12) == 0) {
			char key[128], val[256];

			if (sscanf(s + 12, "%127[^:]:%255[^:]:%d", key, val, &a) != 3) {
				fprintf(stderr, "worker: bad step %s\n", s);
				return 64;
			}
			if (getenv(key) != NULL && strcmp(getenv(key), val) == 0) {
				exit(a);
			}
		} else if (strncmp(s, "print:", 6) == 0) {
			printf("%s\n", s + 6);
		} else if (sscanf(s, "exit-if-rank:%d:%d", &a, &b) == 2) {
			if (env_int("RANK") == a) {
				exit(b);
			}
		} else if (sscanf(s, "exit-if-restart:%d:%d", &a, &b) == 2) {
			if (env_int("TORCHELASTIC_RESTART_COUNT") == a) {
				exit(b);
			}
		} else if (sscanf(s, "raise-if-rank:%d:%d", &a, &b) == 2) {
			if (env_int("RANK") == a) {
				signal(b, SIG_DFL);
				raise(b);
			}
		} else if (sscanf(s, "exit:%d", &a) == 1) {
			exit(a);
		} else if (sscanf(s, "sleep:%d", &a) == 1) {
			msleep(a);
		} else if (sscanf(s, "raise:%d", &a) == 1) {
			signal(a, SIG_DFL);
			raise(a);
		} else if (sscanf(s, "spam:%d:%d", &a, &b) == 2) {
			spam(a, b);
		} else if (strncmp(s, "grandchild:", 11) == 0) {
			pid_t c = fork();
			FILE *f;

			if (c == 0) {
				for (;;) {
					pause();
				}
			}
			snprintf(path, sizeof(path), "%s/pids.%d", s + 11, env_int("RANK"));
			f = fopen(path, "w");
			if (f == NULL) {
				exit(4);
			}
			fprintf(f, "%d %d\n", (int)getpid(), (int)c);
			fclose(f);
		} else if (strncmp(s, "errfile:", 8) == 0) {
			const char *p = getenv("TORCHELASTIC_ERROR_FILE");
			FILE *f = p != NULL ? fopen(p, "w") : NULL;

			if (f == NULL) {
				exit(5);
			}
			fprintf(f, "{\"message\": {\"message\": \"%s\", \"extraInfo\": "
				   "{\"py_callstack\": \"Traceback\\n  x\", \"timestamp\": \"1\"}}}",
				s + 8);
			fclose(f);
		} else if (sscanf(s, "ignore-term-if-rank:%d", &a) == 1) {
			if (env_int("RANK") == a) {
				signal(SIGTERM, SIG_IGN);
			}
		} else if (strcmp(s, "ignore-term") == 0) {
			signal(SIGTERM, SIG_IGN);
		} else if (sscanf(s, "term-exit:%d", &a) == 1) {
			term_exit = a;
			signal(SIGTERM, on_term);
		} else if (strncmp(s, "touch:", 6) == 0) {
			int fd;

			subst_rank(s + 6, path, sizeof(path));
			fd = open(path, O_WRONLY | O_CREAT, 0644);
			if (fd >= 0) {
				close(fd);
			}
		} else if (strncmp(s, "wait-file:", 10) == 0) {
			int t;

			subst_rank(s + 10, path, sizeof(path));
			for (t = 0; t < 12000 && access(path, F_OK) != 0; t++) {
				msleep(10);
			}
		} else {
			fprintf(stderr, "worker: unknown step %s\n", s);
			return 64;
		}
	}
	return 0;
}
