/* SPDX-License-Identifier: MIT */
/* src/common/notify.c: sd_notify(3)'s datagram protocol in a few lines, and the watchdog thread. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "src/common/notify.h"
#include "src/common/log.h"

/*
 * Why not libsystemd's sd_notify(): the protocol is one datagram of "KEY=VALUE" lines to the
 * AF_UNIX socket named by $NOTIFY_SOCKET (a path, or '@' for the abstract namespace), which
 * systemd documents as a stable interface meant to be reimplemented. These lines keep every
 * build the same (no optional dependency that changes behaviour) and keep libsystemd, with its
 * own threads-and-fork rules, out of a process that forks workers.
 */

static struct {
	int fd;
	struct sockaddr_un addr;
	socklen_t addrlen;
	uint64_t watchdog_usec;
	pthread_t thr;
	bool thr_running;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
} nt = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static uint64_t watchdog_from_env(void)
{
	const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	char *end;
	unsigned long long v, p;

	if (usec == NULL || usec[0] == '\0') {
		return 0;
	}
	errno = 0;
	v = strtoull(usec, &end, 10);
	if (errno != 0 || *end != '\0' || v == 0) {
		log_warn("systemd: WATCHDOG_USEC=\"%s\" is not a positive number: no watchdog",
			 usec);
		return 0;
	}
	if (pid != NULL && pid[0] != '\0') {
		/* The watchdog is for another process of the unit (as sd_watchdog_enabled(3)). */
		errno = 0;
		p = strtoull(pid, &end, 10);
		if (errno != 0 || *end != '\0' || p != (unsigned long long)getpid()) {
			return 0;
		}
	}
	return v;
}

int notify_init(void)
{
	const char *e = getenv("NOTIFY_SOCKET");
	size_t n;
	int fd;

	nt.watchdog_usec = watchdog_from_env();
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	if (e == NULL || e[0] == '\0') {
		nt.watchdog_usec = 0;
		unsetenv("NOTIFY_SOCKET");
		return 0;
	}
	n = strlen(e);
	if ((e[0] != '/' && e[0] != '@') || n >= sizeof(nt.addr.sun_path)) {
		/* vsock: and other forms are for VMs and containers, not a node agent. */
		log_warn("systemd: NOTIFY_SOCKET=\"%s\" is not a unix socket path: not notifying",
			 e);
		unsetenv("NOTIFY_SOCKET");
		nt.watchdog_usec = 0;
		return -EAFNOSUPPORT;
	}
	memset(&nt.addr, 0, sizeof(nt.addr));
	nt.addr.sun_family = AF_UNIX;
	memcpy(nt.addr.sun_path, e, n);
	if (e[0] == '@') {
		nt.addr.sun_path[0] = '\0'; /* the abstract namespace: no terminating NUL counted */
	}
	nt.addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (e[0] == '/'));
	unsetenv("NOTIFY_SOCKET");
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_warn("systemd: notify socket: %s", strerror(errno));
		nt.watchdog_usec = 0;
		return -errno;
	}
	nt.fd = fd;
	return 0;
}

bool notify_enabled(void)
{
	return nt.fd >= 0;
}

uint64_t notify_watchdog_usec(void)
{
	return nt.fd >= 0 ? nt.watchdog_usec : 0;
}

int notify_send(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n;

	if (nt.fd < 0) {
		return 0;
	}
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0) {
		return -EINVAL;
	}
	if ((size_t)n >= sizeof(msg)) {
		n = (int)sizeof(msg) - 1; /* a long STATUS= is cut, never left out */
	}
	/* One datagram: systemd reads the message whole or not at all. */
	if (sendto(nt.fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&nt.addr,
		   nt.addrlen) < 0) {
		n = -errno;
		log_debug("systemd: notify: %s", strerror(-n));
		return n;
	}
	return 0;
}

static void *watchdog_main(void *arg)
{
	struct timespec at;
	uint64_t half = nt.watchdog_usec / 2;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &at);
	pthread_mutex_lock(&nt.lock);
	while (!nt.stop) {
		pthread_mutex_unlock(&nt.lock);
		notify_send("WATCHDOG=1");
		pthread_mutex_lock(&nt.lock);
		at.tv_sec += (time_t)(half / 1000000);
		at.tv_nsec += (long)(half % 1000000) * 1000;
		if (at.tv_nsec >= 1000000000) {
			at.tv_sec++;
			at.tv_nsec -= 1000000000;
		}
		while (!nt.stop && crun_cond_wait_mono(&nt.cond, &nt.lock, &at) != ETIMEDOUT) {
		}
	}
	pthread_mutex_unlock(&nt.lock);
	return NULL;
}

int notify_watchdog_start(void)
{
	pthread_condattr_t ca;
	sigset_t all, old;
	int rc;

	if (notify_watchdog_usec() == 0 || nt.thr_running) {
		return 0;
	}
	/* The cond waits on the monotonic clock, so a wall-clock jump never starves the pings. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_destroy(&nt.cond);
	pthread_cond_init(&nt.cond, &ca);
	pthread_condattr_destroy(&ca);
	nt.stop = false;
	/* Signals belong to the caller's thread (the agent's loop). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&nt.thr, NULL, watchdog_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		log_warn("systemd: watchdog thread: %s", strerror(rc));
		return -rc;
	}
	nt.thr_running = true;
	log_debug("systemd: watchdog every %llu ms", (unsigned long long)nt.watchdog_usec / 2000);
	return 0;
}

void notify_finish(void)
{
	if (nt.thr_running) {
		pthread_mutex_lock(&nt.lock);
		nt.stop = true;
		pthread_cond_signal(&nt.cond);
		pthread_mutex_unlock(&nt.lock);
		pthread_join(nt.thr, NULL);
		nt.thr_running = false;
	}
	if (nt.fd >= 0) {
		close(nt.fd);
		nt.fd = -1;
	}
}
