/* SPDX-License-Identifier: MIT */
/* worker_api/errfile.c: the error file the agent reads (torchrun's JSON shape), and a
 * fatal-signal handler that writes a minimal one. */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/worker.h>

#include "src/common/fs.h"
#include "src/common/json.h"
#include "src/common/signames.h"
#include "worker_api/worker_internal.h"

/* A growable string; on allocation failure it stops growing and remembers it. */
struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
	char *np;
	size_t ncap;

	if (b->oom) {
		return;
	}
	if (b->len + n + 1 > b->cap) {
		ncap = b->cap == 0 ? 256 : b->cap;
		while (ncap < b->len + n + 1) {
			ncap *= 2;
		}
		np = realloc(b->p, ncap);
		if (np == NULL) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
	sb_putn(b, s, strlen(s));
}

/* Append @s as the body of a JSON string (src/common/json.h: invalid UTF-8 becomes U+FFFD). */
static void sb_json(struct sbuf *b, const char *s)
{
	char small[256], *e = small;
	size_t n = json_escape(small, sizeof(small), s);

	if (n >= sizeof(small)) {
		e = malloc(n + 1);
		if (e == NULL) {
			b->oom = true;
			return;
		}
		json_escape(e, n + 1, s);
	}
	sb_putn(b, e, n);
	if (e != small) {
		free(e);
	}
}

static pthread_mutex_t errfile_lock = PTHREAD_MUTEX_INITIALIZER;

CRUN_EXPORT int crun_error_record(const char *message)
{
	const char *path = getenv("TORCHELASTIC_ERROR_FILE");
	void *frames[64];
	char **syms, ts[32];
	struct sbuf b = {0};
	int nframes, i, rc;

	if (path == NULL || *path == '\0') {
		return -ENOENT;
	}
	if (message == NULL) {
		message = "(no message)";
	}
	nframes = backtrace(frames, (int)(sizeof(frames) / sizeof(frames[0])));
	syms = backtrace_symbols(frames, nframes);
	snprintf(ts, sizeof(ts), "%lld", (long long)time(NULL));
	sb_puts(&b, "{\"message\": {\"message\": \"");
	sb_json(&b, message);
	sb_puts(&b, "\", \"extraInfo\": {\"py_callstack\": \"");
	if (syms != NULL) {
		for (i = 0; i < nframes; i++) {
			sb_json(&b, syms[i]);
			sb_json(&b, "\n");
		}
		free(syms);
	} else {
		sb_puts(&b, "(no call stack)");
	}
	sb_puts(&b, "\", \"timestamp\": \"");
	sb_puts(&b, ts);
	sb_puts(&b, "\"}}}\n");
	if (b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	pthread_mutex_lock(&errfile_lock);
	rc = fs_write_atomic(path, &(struct fs_chunk){b.p, b.len}, 1, 0644, NULL);
	pthread_mutex_unlock(&errfile_lock);
	free(b.p);
	return rc;
}

/* Everything the signal handler needs, prepared at install time. */
static char sig_path[PATH_MAX];
static char sig_rank[16];
static char sig_altstack[65536];

static size_t fmt_u(char *out, unsigned long long v)
{
	char tmp[24];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	for (i = 0; i < n; i++) {
		out[i] = tmp[n - 1 - i];
	}
	return n;
}

static void put(char *buf, size_t *len, size_t cap, const char *s)
{
	while (*s != '\0' && *len + 1 < cap) {
		buf[(*len)++] = *s++;
	}
}

/* Async-signal-safe: signal_abbrev() is a table lookup returning static strings. */
static const char *sig_name(int sig)
{
	const char *n = signal_abbrev(sig);

	return n != NULL ? n : "signal";
}

/* Async-signal-safe only: open, write, fsync, close, rename, unlink, getpid, clock_gettime,
 * sigaction, raise. */
static void on_fatal_signal(int sig)
{
	char buf[1024], tmp[PATH_MAX + 32], num[24];
	struct sigaction dfl;
	struct timespec now;
	size_t len = 0, n;
	int fd, saved = errno;

	n = strlen(sig_path);
	if (n + 24 < sizeof(tmp)) {
		memcpy(tmp, sig_path, n);
		memcpy(tmp + n, ".sig.", 5);
		n += 5;
		n += fmt_u(tmp + n, (unsigned long long)getpid());
		tmp[n] = '\0';
		clock_gettime(CLOCK_REALTIME, &now);
		put(buf, &len, sizeof(buf), "{\"message\": {\"message\": \"fatal signal ");
		num[fmt_u(num, (unsigned long long)sig)] = '\0';
		put(buf, &len, sizeof(buf), num);
		put(buf, &len, sizeof(buf), " (");
		put(buf, &len, sizeof(buf), sig_name(sig));
		put(buf, &len, sizeof(buf), ") in rank ");
		put(buf, &len, sizeof(buf), sig_rank);
		put(buf, &len, sizeof(buf), ", pid ");
		num[fmt_u(num, (unsigned long long)getpid())] = '\0';
		put(buf, &len, sizeof(buf), num);
		put(buf, &len, sizeof(buf),
		    "\", \"extraInfo\": {\"py_callstack\": \"(not available: fatal signal)\", "
		    "\"timestamp\": \"");
		num[fmt_u(num, (unsigned long long)now.tv_sec)] = '\0';
		put(buf, &len, sizeof(buf), num);
		put(buf, &len, sizeof(buf), "\"}}}\n");
		/* A fresh file, never one planted (or left) at the name, never through a link. */
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd >= 0) {
			if (write(fd, buf, len) == (ssize_t)len && fsync(fd) == 0) {
				close(fd);
				rename(tmp, sig_path);
			} else {
				close(fd);
				unlink(tmp);
			}
		}
	}
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	errno = saved;
	raise(sig);
}

CRUN_EXPORT int crun_error_install_signal_handler(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	const char *path = getenv("TORCHELASTIC_ERROR_FILE");
	struct sigaction sa;
	stack_t ss;
	int rank;
	size_t i;

	if (path == NULL || *path == '\0') {
		return -ENOENT;
	}
	if (strlen(path) + 1 > sizeof(sig_path)) {
		return -ENAMETOOLONG;
	}
	strcpy(sig_path, path);
	rank = crun_rank();
	if (rank >= 0) {
		snprintf(sig_rank, sizeof(sig_rank), "%d", rank);
	} else {
		snprintf(sig_rank, sizeof(sig_rank), "?");
	}
	memset(&ss, 0, sizeof(ss));
	ss.ss_sp = sig_altstack;
	ss.ss_size = sizeof(sig_altstack);
	if (sigaltstack(&ss, NULL) < 0) {
		return -errno;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal_signal;
	/* SA_RESETHAND: a fault inside the handler itself ends the process with the default action
	 * instead of re-entering the handler. */
	sa.sa_flags = SA_ONSTACK | SA_NODEFER | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		if (sigaction(sigs[i], &sa, NULL) < 0) {
			return -errno;
		}
	}
	return 0;
}
