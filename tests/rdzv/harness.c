/* SPDX-License-Identifier: MIT */
/* tests/rdzv/harness.c: start a real store (crun-rdzvd, a file or etcd) for rendezvous tests. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "src/common/fs.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/store/store_conf.h"
#include "tests/rdzv/harness.h"

/* Read one line from @fd within @timeout_ms. Returns its length or -1. */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	int64_t deadline = crun_now_ms() + timeout_ms;
	size_t n = 0;

	while (n + 1 < cap) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - crun_now_ms();
		ssize_t got;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
			return -1;
		}
		got = read(fd, buf + n, 1);
		if (got <= 0) {
			return -1;
		}
		if (buf[n] == '\n') {
			break;
		}
		n++;
	}
	buf[n] = '\0';
	return (int)n;
}

int fixture_start(struct store_fixture *f, const char *backend, const char *server,
		  const char *const *extra_args)
{
	const char *argv[16];
	const char *rdzvd = server;
	int pfd[2], n = 0, rc;
	char line[256];

	memset(f, 0, sizeof(*f));
	if (strcmp(backend, "etcd") == 0) {
		/* tests/conformance's member: /dev/shm data, free ports, ready through crun. */
		if (!etcd_proc_available(server)) {
			return FIXTURE_SKIP;
		}
		f->etcd = true;
		rc = etcd_proc_start(server, &f->member);
		snprintf(f->endpoint, sizeof(f->endpoint), "%s", f->member.endpoint);
		f->pid = f->member.pid;
		return rc;
	}
	if (strcmp(backend, "file") == 0) {
		f->file = true;
		snprintf(f->dir, sizeof(f->dir), "/tmp/crun-rdzv-test.XXXXXX");
		if (mkdtemp(f->dir) == NULL) {
			fprintf(stderr, "fixture: mkdtemp: %s\n", strerror(errno));
			return -1;
		}
		return 0;
	}
	if (strcmp(backend, "tcp") != 0 || rdzvd == NULL) {
		fprintf(stderr, "fixture: backend: expected tcp (with the crun-rdzvd path), file, "
				"or etcd (with the etcd path)\n");
		return -1;
	}
	argv[n++] = rdzvd;
	argv[n++] = "--listen";
	argv[n++] = "127.0.0.1:0";
	argv[n++] = "--insecure"; /* the clients under test carry no token */
	for (int i = 0; extra_args != NULL && extra_args[i] != NULL && n < 15; i++) {
		argv[n++] = extra_args[i];
	}
	argv[n] = NULL;
	if (pipe2(pfd, O_CLOEXEC) != 0) {
		fprintf(stderr, "fixture: pipe: %s\n", strerror(errno));
		return -1;
	}
	f->pid = fork();
	if (f->pid < 0) {
		fprintf(stderr, "fixture: fork: %s\n", strerror(errno));
		return -1;
	}
	if (f->pid == 0) {
		/* The daemon dies with the test, even when the test itself is killed. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pfd[1], STDOUT_FILENO);
		execv(rdzvd, (char *const *)argv);
		fprintf(stderr, "fixture: exec %s: %s\n", rdzvd, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	if (read_line(pfd[0], line, sizeof(line), 20000) <= 0) {
		fprintf(stderr, "fixture: %s printed no address within 20 s\n", rdzvd);
		close(pfd[0]);
		fixture_stop(f);
		return -1;
	}
	close(pfd[0]);
	snprintf(f->endpoint, sizeof(f->endpoint), "%s", line);
	return 0;
}

void fixture_endpoint(const struct store_fixture *f, const char *name, char *out, size_t cap)
{
	if (f->file) {
		snprintf(out, cap, "file://%s/%s", f->dir, name);
	} else {
		snprintf(out, cap, "%s", f->endpoint);
	}
}

void fixture_stop(struct store_fixture *f)
{
	if (f->etcd) {
		etcd_proc_stop(&f->member);
		f->pid = 0;
		return;
	}
	if (f->pid > 0) {
		int64_t deadline = crun_now_ms() + 5000;
		int status;

		kill(f->pid, SIGTERM);
		while (waitpid(f->pid, &status, WNOHANG) == 0) {
			if (crun_now_ms() > deadline) {
				kill(f->pid, SIGKILL);
				waitpid(f->pid, &status, 0);
				break;
			}
			usleep(10000);
		}
		f->pid = 0;
	}
	if (f->file && f->dir[0] != '\0') {
		(void)fs_rm_rf(f->dir);
		f->dir[0] = '\0';
	}
}

int harness_rdzv_create(const struct store_settings *s, const struct rdzv_conf *c,
			struct rdzv **r, struct crun_diag *d)
{
	struct store_conf sc;
	int rc;

	rc = store_conf_init(&sc, s, STORE_TOKEN_FLAGS, d);
	if (rc == 0) {
		rc = rdzv_create(&sc, c, r, d);
	}
	store_conf_finish(&sc);
	return rc;
}
