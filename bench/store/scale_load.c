/* SPDX-License-Identifier: MIT */
/* bench/store/scale_load.c: the store at the connection limit (driven by bench/store/scale). */
/*
 * scale_load --endpoint HOST:PORT --proto crun|tcpstore --clients N --procs P
 *            --server-pid PID [--steps A,B,...] [--sources K] [--timeout S] [--phased]
 *
 * N connections over P client processes (each process holds N/P: the per-process fd limit
 * binds the client side too). Every connection adds 1 to a counter; the one that brings it
 * to N sets the release key; every connection waits for it.
 *   --proto crun      crun's own protocol through libcrun-store: connect and authenticate
 *                     (CRUN_STORE_TOKEN_FILE), add, wait. A process waits through its
 *                     connections in turn, as bench/store_load barrier does.
 *   --proto tcpstore  PyTorch 1.x TCPStore's protocol on raw sockets (the encoding of
 *                     rendezvous/store/tcpstore_codec.c): connect and ADD at once (a silent
 *                     connection is unauthenticated to crun-rdzvd, which sheds the oldest past
 *                     256 from one address: bench/notes/scale.md), SET by the last, then WAIT
 *                     sent on every connection of the process before any answer is read, so
 *                     the server holds all N waits at once and wakes them together.
 * --sources K spreads the connections over K loopback addresses, 127.0.0.(1 + i % K): the
 * source of TCPStore-protocol connections (bound), the destination of crun-protocol ones
 * (libcrun-store binds no source; the server then listens on 0.0.0.0, which
 * bench/store/scale does in a network namespace of its own). Linux's connect() scans for a
 * free ephemeral port among the ones of one (source, destination) pair: past about half of
 * the range (14,000 here) each connect scans thousands, and 17,000 take 19 s, not 3.
 * Without --phased the processes run straight through after one common start: {"ms"} is
 * first connect to last release. With --phased the parent steps every process through the
 * phases together: opening up to each --steps count (then N), adding, waiting; it prints each
 * phase's wall time, the server's CPU time and its time runnable but waiting for a CPU (all its
 * threads, /proc/PID/task/TID/schedstat) and RSS (/proc/PID/status) after it. No connection
 * closes before the last phase is read (a close gate), so no phase carries another's teardown. Either way the last line is one JSON object; on a failure
 * it holds "error": the first client error, which names the limit that stopped the run.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "src/common/util.h"
#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/tcpstore_codec.h"
#include "src/common/net.h"

#define MAX_STEPS 8
#define MAX_PHASES (MAX_STEPS + 4) /* open steps, add, wait; the close gate */
#define PROGRESS_S 5               /* a wait says what it waits for this often */

struct shared {
	int done[MAX_PHASES]; /* processes through each phase */
	int failed;
	int64_t t_start_ns, t_end_ns;
	char err[256];
};

static struct {
	const char *endpoint;
	bool tcpstore;
	int clients, procs, sources, timeout_ms, server_pid, nsteps;
	int steps[MAX_STEPS + 1];
	struct sockaddr_in dst;
	char prefix[64];
} g;

static struct shared *sh;
static pid_t *kids;
static int go[MAX_PHASES][2]; /* a process starts phase k when go[k] reads EOF */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "scale_load: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* A client's failure: the first one is kept for the report; the process exits. */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "scale_load: %s\n", msg);
	if (__atomic_exchange_n(&sh->failed, 1, __ATOMIC_ACQ_REL) == 0) {
		snprintf(sh->err, sizeof(sh->err), "%s", msg);
	}
	_exit(1);
}

static void wait_go(int k)
{
	char c;

	while (read(go[k][0], &c, 1) < 0 && errno == EINTR) {
	}
}

/* ---- one connection, either protocol ---- */

struct conn {
	struct crun_store *st; /* --proto crun */
	int fd;                /* --proto tcpstore */
};

static void ts_send(int fd, struct wire_buf *b, const char *what)
{
	size_t off = 0;
	ssize_t n;

	if (b->oom) {
		fail("%s: out of memory", what);
	}
	while (off < b->len) {
		n = send(fd, b->p + off, b->len - off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			fail("%s: send: %s", what, n < 0 ? strerror(errno) : "closed");
		}
		off += (size_t)n;
	}
	b->len = 0;
}

static void ts_recv(int fd, void *p, size_t len, const char *what)
{
	size_t off = 0;
	ssize_t n;

	while (off < len) {
		n = recv(fd, (uint8_t *)p + off, len - off, 0);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0) {
			fail("%s: %s", what, errno == EAGAIN ? "no answer within --timeout"
							     : strerror(errno));
		}
		if (n == 0) {
			fail("%s: the server closed the connection", what);
		}
		off += (size_t)n;
	}
}

static void ts_open(struct conn *c, int i)
{
	struct timeval tv = {.tv_sec = g.timeout_ms / 1000};
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		fail("socket (connection %d): %s", i, strerror(errno));
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (g.sources > 1) {
		struct sockaddr_in src = {.sin_family = AF_INET};

		/* Many source addresses, each with its own ephemeral ports and per-address cap. */
		setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		src.sin_addr.s_addr = htonl(0x7f000001u + (uint32_t)(i % g.sources));
		if (bind(c->fd, (struct sockaddr *)&src, sizeof(src)) < 0) {
			fail("bind 127.0.0.%d: %s", 1 + i % g.sources, strerror(errno));
		}
	}
	if (connect(c->fd, (struct sockaddr *)&g.dst, sizeof(g.dst)) < 0) {
		fail("connect (connection %d): %s", i, strerror(errno));
	}
}

static void conn_open(struct conn *c, int i)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	char err[256], ep[64];

	if (g.tcpstore) {
		ts_open(c, i);
		return;
	}
	if (g.sources > 1) {
		/* Connection i to 127.0.0.(1 + i % K): each destination has its own ports. */
		snprintf(ep, sizeof(ep), "127.0.0.%d:%d", 1 + i % g.sources,
			 ntohs(g.dst.sin_port));
	}
	o.endpoint = g.sources > 1 ? ep : g.endpoint;
	o.prefix = g.prefix;
	o.connect_timeout_ms = g.timeout_ms;
	o.timeout_ms = g.timeout_ms;
	o.token_file = getenv("CRUN_STORE_TOKEN_FILE");
	if (crun_store_open(&o, &c->st, err, sizeof(err)) < 0) {
		fail("open (connection %d): %s", i, err);
	}
}

/* Adds 1 to the counter; the connection that makes it g.clients sets the release key. */
static void conn_add(struct conn *c)
{
	struct wire_buf b = {0};
	int64_t r;
	int rc;

	if (!g.tcpstore) {
		rc = crun_store_add(c->st, "count", 1, &r);
		if (rc < 0) {
			fail("add: %s", crun_store_last_error(c->st));
		}
		if (r == g.clients && crun_store_set(c->st, "release", "1", 1) < 0) {
			fail("set: %s", crun_store_last_error(c->st));
		}
		return;
	}
	ts_put_query(&b, TS_PROTO_V1, TS_OP_ADD);
	ts_put_vec(&b, "count", 5);
	ts_put_u64(&b, 1);
	ts_send(c->fd, &b, "ADD");
	ts_recv(c->fd, &r, sizeof(r), "ADD's answer"); /* little-endian, as this host */
	if (r == g.clients) {
		ts_put_query(&b, TS_PROTO_V1, TS_OP_SET); /* 1.x's SET has no answer */
		ts_put_vec(&b, "release", 7);
		ts_put_vec(&b, "1", 1);
		ts_send(c->fd, &b, "SET");
	}
	wire_buf_finish(&b);
}

static void ts_send_wait(struct conn *c)
{
	struct wire_buf b = {0};

	ts_put_query(&b, TS_PROTO_V1, TS_OP_WAIT);
	ts_put_u64(&b, 1);
	ts_put_vec(&b, "release", 7);
	ts_send(c->fd, &b, "WAIT");
	wire_buf_finish(&b);
}

static void conn_wait(struct conn *c)
{
	const char *rel[] = {"release"};
	uint8_t stop;

	if (!g.tcpstore) {
		if (crun_store_wait(c->st, rel, 1, g.timeout_ms) < 0) {
			fail("wait: %s", crun_store_last_error(c->st));
		}
		return;
	}
	ts_recv(c->fd, &stop, 1, "WAIT's answer");
	if (stop != TS_WAIT_STOP) {
		fail("WAIT answered %u, not STOP_WAITING", stop);
	}
}

static void conn_close(struct conn *c)
{
	if (g.tcpstore) {
		close(c->fd);
	} else {
		crun_store_close(c->st);
	}
}

/* ---- a client process ---- */

static void phase_done(int k)
{
	__atomic_add_fetch(&sh->done[k], 1, __ATOMIC_ACQ_REL);
}

/* Process @p's share of the first @upto connections (they are dealt round-robin). */
static int share(int p, int upto)
{
	return upto / g.procs + (p < upto % g.procs);
}

static void child(int p, bool phased)
{
	int n = share(p, g.clients), have = 0, s, i, k = 0;
	struct conn *c = calloc((size_t)n, sizeof(*c));

	if (c == NULL) {
		fail("out of memory");
	}
	wait_go(k);
	if (!phased) {
		int64_t t = crun_now_ns(), old = 0;

		__atomic_compare_exchange_n(&sh->t_start_ns, &old, t, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE);
	}
	for (s = 0; s < g.nsteps; s++) {
		if (phased && s > 0) {
			wait_go(k);
		}
		for (; have < share(p, g.steps[s]); have++) {
			conn_open(&c[have], have * g.procs + p);
			if (g.tcpstore) {
				conn_add(&c[have]); /* see the top of the file */
			}
		}
		phase_done(k++);
	}
	if (phased) {
		wait_go(k);
	}
	for (i = 0; i < n && !g.tcpstore; i++) {
		conn_add(&c[i]);
	}
	phase_done(k++);
	if (phased) {
		wait_go(k);
	}
	if (g.tcpstore) {
		for (i = 0; i < n; i++) {
			ts_send_wait(&c[i]);
		}
	}
	for (i = 0; i < n; i++) {
		conn_wait(&c[i]);
	}
	phase_done(k);
	if (phased) {
		/* Hold every connection until the parent has read the wait phase's CPU: a
		 * process that closed as soon as its own waits were done put its teardown
		 * (EOF read, epoll_ctl, close: 3 syscalls a connection) into the other
		 * processes' wait phase, and the wait read about twice the add. */
		wait_go(k + 1);
	}
	if (!phased) {
		int64_t t = crun_now_ns(), cur = __atomic_load_n(&sh->t_end_ns, __ATOMIC_ACQUIRE);

		while (t > cur && !__atomic_compare_exchange_n(&sh->t_end_ns, &cur, t, false,
								__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		}
	}
	for (i = 0; i < n; i++) {
		conn_close(&c[i]);
	}
	free(c);
	_exit(0);
}

/* ---- the parent: the server's RSS and CPU, the phases ---- */

/*
 * The server's CPU time so far, every thread, in ns (schedstat's first field); with @rq,
 * also its time runnable but waiting for a CPU (the second field): the part of a phase's
 * wall time the server lost to the machine's other processes, not to its own work.
 */
static int64_t cpu_ns_rq(int64_t *rq)
{
	char path[96];
	struct dirent *e;
	long long v, w;
	int64_t sum = 0, wait = 0;
	DIR *d;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task", g.server_pid);
	d = opendir(path);
	if (d == NULL) {
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.') {
			continue;
		}
		snprintf(path, sizeof(path), "/proc/%d/task/%.20s/schedstat", g.server_pid,
			 e->d_name);
		f = fopen(path, "r");
		if (f != NULL) {
			if (fscanf(f, "%lld %lld", &v, &w) == 2) {
				sum += v;
				wait += w;
			}
			fclose(f);
		}
	}
	closedir(d);
	if (rq != NULL) {
		*rq = wait;
	}
	return sum;
}

static int64_t cpu_ns(void)
{
	return cpu_ns_rq(NULL);
}

/* Until every process is through phase @k, one failed, or the timeout: false if not. */
static bool wait_phase(int k, const char *what)
{
	int64_t start = crun_now_ns(), next = start + PROGRESS_S * (int64_t)1000000000;
	int64_t end = start + (int64_t)g.timeout_ms * 1000000;
	int d;

	while ((d = __atomic_load_n(&sh->done[k], __ATOMIC_ACQUIRE)) < g.procs) {
		if (__atomic_load_n(&sh->failed, __ATOMIC_ACQUIRE)) {
			return false;
		}
		if (crun_now_ns() > end) {
			snprintf(sh->err, sizeof(sh->err), "%s: %d of %d processes done after %d s",
				 what, d, g.procs, g.timeout_ms / 1000);
			sh->failed = 1;
			return false;
		}
		if (crun_now_ns() > next) {
			fprintf(stderr, "scale_load: waiting for %s: %d of %d processes done\n", what,
				d, g.procs);
			next += PROGRESS_S * (int64_t)1000000000;
		}
		usleep(100);
	}
	return true;
}

static void print_err(void)
{
	char *q;

	for (q = sh->err; *q != '\0'; q++) {
		if (*q == '"' || *q == '\\') {
			*q = '\'';
		}
	}
	printf("\"error\": \"%s\"", sh->err);
}

static int run_phased(void)
{
	int nph = g.nsteps + 2, k;
	int64_t t0, c0, t1, c1, q0, q1;
	char what[64];

	printf("{\"phases\": [");
	for (k = 0; k < nph; k++) {
		if (k < g.nsteps) {
			snprintf(what, sizeof(what), "%s %d", g.tcpstore ? "open+add" : "open",
				 g.steps[k]);
		} else {
			snprintf(what, sizeof(what), "%s", k == g.nsteps ? "add" : "wait");
		}
		t0 = crun_now_ns();
		c0 = cpu_ns_rq(&q0);
		close(go[k][1]);
		if (!wait_phase(k, what)) {
			break;
		}
		t1 = crun_now_ns();
		c1 = cpu_ns_rq(&q1);
		if (g.tcpstore && k == g.nsteps) {
			continue; /* the adds were in the open phases */
		}
		printf("%s{\"phase\": \"%s\", \"conns\": %d, \"ms\": %.2f, \"server_cpu_ms\": %.2f, "
		       "\"server_runq_ms\": %.2f, \"rss_kb\": %ld}",
		       k ? ", " : "", what, k < g.nsteps ? g.steps[k] : g.clients,
		       (double)(t1 - t0) / 1e6, (double)(c1 - c0) / 1e6, (double)(q1 - q0) / 1e6,
		       util_rss_kib(g.server_pid));
		fflush(stdout);
	}
	printf("]");
	return k == nph ? 0 : 1;
}

static int run(bool phased)
{
	int k, status, bad = 0, nph = g.nsteps + 2, ngo = nph + 1; /* + the close gate */
	long base = util_rss_kib(g.server_pid);
	int64_t c0 = cpu_ns(), c1;
	int rc;

	if (base < 0) {
		die("--server-pid %d: no such process", g.server_pid);
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	kids = calloc((size_t)g.procs, sizeof(*kids));
	if (sh == MAP_FAILED || kids == NULL) {
		die("out of memory");
	}
	for (k = 0; k < ngo; k++) {
		if (pipe(go[k]) < 0) {
			die("pipe: %s", strerror(errno));
		}
	}
	for (k = 0; k < g.procs; k++) {
		kids[k] = fork();
		if (kids[k] < 0) {
			die("fork: %s", strerror(errno));
		}
		if (kids[k] == 0) {
			for (int j = 0; j < ngo; j++) {
				close(go[j][1]);
			}
			child(k, phased);
		}
	}
	for (k = 0; k < ngo; k++) {
		close(go[k][0]);
	}
	if (phased) {
		rc = run_phased();
		printf(", ");
	} else {
		close(go[0][1]);
		rc = wait_phase(nph - 1, "the barrier's release") ? 0 : 1;
		if (rc == 0) {
			printf("{\"ms\": %.1f, ", (double)(sh->t_end_ns - sh->t_start_ns) / 1e6);
		} else {
			printf("{");
		}
	}
	c1 = cpu_ns();
	printf("\"clients\": %d, \"procs\": %d, \"base_kb\": %ld, \"rss_kb\": %ld, "
	       "\"server_cpu_ms\": %.1f",
	       g.clients, g.procs, base, util_rss_kib(g.server_pid), (double)(c1 - c0) / 1e6);
	for (k = 0; k < ngo; k++) {
		if (phased) {
			close(go[k][1]); /* the close gate; after a failure, let the rest exit */
		}
	}
	if (rc != 0 || sh->failed) {
		printf(", ");
		print_err();
		rc = 1;
	}
	printf("}\n");
	fflush(stdout);
	for (k = 0; rc != 0 && k < g.procs; k++) {
		kill(kids[k], SIGTERM); /* a failed run: its clients may still be waiting */
	}
	while (wait(&status) > 0) {
		bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	return rc || bad ? 1 : 0;
}

static int intarg(const char *flag, const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v <= 0 || v > 1000000) {
		die("%s: expected a positive integer, got \"%s\"", flag, s);
	}
	return (int)v;
}

static void parse_steps(const char *s)
{
	char *copy = strdup(s), *tok, *save = NULL;

	if (copy == NULL) {
		die("out of memory");
	}
	for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		if (g.nsteps == MAX_STEPS) {
			die("--steps: at most %d counts", MAX_STEPS);
		}
		g.steps[g.nsteps] = intarg("--steps", tok);
		if (g.nsteps > 0 && g.steps[g.nsteps] <= g.steps[g.nsteps - 1]) {
			die("--steps: counts must rise, got %d after %d", g.steps[g.nsteps],
			    g.steps[g.nsteps - 1]);
		}
		g.nsteps++;
	}
	free(copy);
}

static void resolve_endpoint(void)
{
	char host[256];
	int port;

	if (net_parse_hostport(g.endpoint, -1, host, sizeof(host), &port) < 0 ||
	    inet_pton(AF_INET, host, &g.dst.sin_addr) != 1) {
		die("--endpoint: expected IPV4:PORT, got \"%s\"", g.endpoint);
	}
	g.dst.sin_family = AF_INET;
	g.dst.sin_port = htons((uint16_t)port);
}

int main(int argc, char **argv)
{
	const char *proto = NULL, *steps = NULL;
	bool phased = false;
	struct rlimit rl;
	int i;

	g.procs = 8;
	g.sources = 1;
	g.timeout_ms = 120000;
	snprintf(g.prefix, sizeof(g.prefix), "scale/%d/", (int)getpid());
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--phased") == 0) {
			phased = true;
			continue;
		}
		if (v == NULL) {
			die("%s needs a value", a);
		}
		if (strcmp(a, "--endpoint") == 0) {
			g.endpoint = v;
		} else if (strcmp(a, "--proto") == 0) {
			proto = v;
		} else if (strcmp(a, "--clients") == 0) {
			g.clients = intarg(a, v);
		} else if (strcmp(a, "--procs") == 0) {
			g.procs = intarg(a, v);
		} else if (strcmp(a, "--sources") == 0) {
			g.sources = intarg(a, v);
		} else if (strcmp(a, "--timeout") == 0) {
			g.timeout_ms = intarg(a, v) * 1000;
		} else if (strcmp(a, "--server-pid") == 0) {
			g.server_pid = intarg(a, v);
		} else if (strcmp(a, "--steps") == 0) {
			steps = v;
		} else {
			die("unknown argument %s", a);
		}
		i++;
	}
	if (g.endpoint == NULL || proto == NULL || g.clients == 0 || g.server_pid == 0) {
		die("usage: scale_load --endpoint HOST:PORT --proto crun|tcpstore --clients N "
		    "--server-pid PID [--procs P] [--steps A,B] [--sources K] [--timeout S] "
		    "[--phased]");
	}
	if (strcmp(proto, "crun") != 0 && strcmp(proto, "tcpstore") != 0) {
		die("--proto: expected crun or tcpstore, got \"%s\"", proto);
	}
	g.tcpstore = proto[0] == 't';
	resolve_endpoint();
	if (g.sources > 254) {
		die("--sources: at most 254 loopback addresses, got %d", g.sources);
	}
	if (g.procs > g.clients) {
		g.procs = g.clients;
	}
	if (steps != NULL) {
		parse_steps(steps);
	}
	if (g.nsteps > 0 && g.steps[g.nsteps - 1] >= g.clients) {
		die("--steps: every count must be below --clients (%d)", g.clients);
	}
	g.steps[g.nsteps++] = g.clients;
	/* Many connections per process: the soft fd limit up to the hard one. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		if (share(0, g.clients) + 16 > (long)rl.rlim_cur) {
			die("%d connections in one process pass its open file limit %ld: raise "
			    "--procs", share(0, g.clients), (long)rl.rlim_cur);
		}
	}
	signal(SIGPIPE, SIG_IGN);
	return run(phased);
}
