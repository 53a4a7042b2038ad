/* SPDX-License-Identifier: MIT */
/* tests/conformance/etcd_fixture.c: start and stop a real single-member etcd on loopback. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <crun/store.h>

#include "config.h"
#include "src/common/clock.h"
#include "src/common/fs.h"
#include "tests/conformance/etcd_fixture.h"

/* 32 MiB: a 16 MiB value (CRUN_STORE_MAX_VALUE_LEN) with its key in one transaction. */
#define MAX_REQUEST_BYTES "33554432"

bool etcd_proc_available(const char *etcd_bin)
{
	if (!CRUN_HAVE_ETCD) {
		fprintf(stderr, "etcd: this build has no etcd backend (libcurl, json-c): skipped\n");
		return false;
	}
	if (etcd_bin == NULL || access(etcd_bin, X_OK) < 0) {
		fprintf(stderr, "etcd: no etcd binary (%s; Debian: etcd-server): skipped\n",
			etcd_bin ? etcd_bin : "not found");
		return false;
	}
	return true;
}

/*
 * Bind a loopback port, SO_REUSEADDR, and keep the socket (not listening) in *@fd: while it is
 * open the kernel gives the port to nobody else (no free-port race with parallel tests), a
 * connection to it is refused, and etcd, which binds with SO_REUSEADDR too, can listen on it.
 */
static int bound_port(int *fd)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int one = 1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*fd < 0 || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(*fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(*fd, (struct sockaddr *)&sa, &sl) < 0) {
		if (*fd >= 0) {
			close(*fd);
		}
		*fd = -1;
		return -1;
	}
	return ntohs(sa.sin_port);
}

int etcd_closed_port(int *fd)
{
	return bound_port(fd);
}

static void print_log(const struct etcd_proc *p)
{
	char path[300], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/etcd.log", p->dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return;
	}
	if (lseek(fd, 0, SEEK_END) > (off_t)sizeof(buf)) {
		lseek(fd, -(off_t)sizeof(buf), SEEK_END);
	} else {
		lseek(fd, 0, SEEK_SET);
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n > 0) {
		fprintf(stderr, "--- etcd log (end) ---\n%.*s\n---\n", (int)n, buf);
	}
}

static pid_t spawn(const char *bin, const struct etcd_proc *p, int peer)
{
	char data[300], log[300], curl[64], purl[64], cluster[96];
	const char *argv[64];
	size_t n = 0, i;
	pid_t pid;
	int fd;

	snprintf(data, sizeof(data), "%s/data", p->dir);
	snprintf(log, sizeof(log), "%s/etcd.log", p->dir);
	snprintf(curl, sizeof(curl), "%s://127.0.0.1:%d", p->tls ? "https" : "http", p->port);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", peer);
	snprintf(cluster, sizeof(cluster), "crun-test=%s", purl);
	{
		const char *fixed[] = {bin, "--name", "crun-test", "--data-dir", data,
				       "--listen-client-urls", curl, "--advertise-client-urls", curl,
				       "--listen-peer-urls", purl, "--initial-advertise-peer-urls",
				       purl, "--initial-cluster", cluster, "--max-request-bytes",
				       MAX_REQUEST_BYTES, "--logger", "zap", "--log-level", "warn"};

		for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
			argv[n++] = fixed[i];
		}
	}
	for (i = 0; p->args != NULL && p->args[i] != NULL && n + 1 < 64; i++) {
		argv[n++] = p->args[i];
	}
	argv[n] = NULL;
	pid = fork();
	if (pid != 0) {
		return pid;
	}
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	execv(bin, (char *const *)argv);
	fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
	_exit(127);
}

/* 1 once etcd answers, 0 while it does not yet, -1 when it exited. */
static int ready(struct etcd_proc *p)
{
	struct crun_store_opts o = {.endpoint = p->endpoint, .connect_timeout_ms = 300,
				    .timeout_ms = 2000};
	struct crun_store *st = NULL;
	int status;

	if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
		p->pid = -1;
		return -1;
	}
	if (crun_store_open(&o, &st, NULL, 0) < 0) {
		return 0;
	}
	crun_store_close(st);
	return 1;
}

int etcd_proc_start(const char *bin, struct etcd_proc *p)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	int64_t end;
	int fd1, fd2, peer, r = -1;

	p->pid = -1;
	snprintf(p->dir, sizeof(p->dir), "%s/crun-etcd-XXXXXX", base);
	if (mkdtemp(p->dir) == NULL) {
		fprintf(stderr, "etcd: mkdtemp %s: %s\n", p->dir, strerror(errno));
		return -1;
	}
	/* Both ports stay bound here until etcd answers (bound_port). */
	p->port = bound_port(&fd1);
	peer = bound_port(&fd2);
	if (p->port > 0 && peer > 0) {
		snprintf(p->endpoint, sizeof(p->endpoint), "%s://127.0.0.1:%d",
			 p->tls ? "etcd+https" : "etcd", p->port);
		p->pid = spawn(bin, p, peer);
	}
	if (p->pid > 0) {
		end = crun_now_ms() + 20000;
		while ((r = ready(p)) == 0 && crun_now_ms() < end) {
			usleep(50000); /* polling a condition, bounded by @end */
		}
		if (r == 0) {
			r = -1;
		}
	}
	if (fd1 >= 0) {
		close(fd1);
	}
	if (fd2 >= 0) {
		close(fd2);
	}
	if (r < 0) {
		fprintf(stderr, "etcd: %s did not come up on 127.0.0.1:%d\n", bin, p->port);
		print_log(p);
		etcd_proc_stop(p);
		return -1;
	}
	return 0;
}

void etcd_proc_stop(struct etcd_proc *p)
{
	int64_t end;
	int status;

	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		end = crun_now_ms() + 10000;
		while (waitpid(p->pid, &status, WNOHANG) == 0) {
			if (crun_now_ms() > end) {
				kill(p->pid, SIGKILL);
				waitpid(p->pid, &status, 0);
				break;
			}
			usleep(10000);
		}
		p->pid = -1;
	}
	if (p->dir[0] != '\0') {
		fs_rm_rf(p->dir);
		p->dir[0] = '\0';
	}
}
