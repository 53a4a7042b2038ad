/* SPDX-License-Identifier: MIT */
/*
 * bench/etcd_cost: etcd's CPU per request through its JSON gateway against its gRPC API.
 *
 *   etcd_cost [--etcd PATH] [--requests N] [--rounds R] [--data-dir DIR] [--tls DIR]
 *
 * --tls DIR: the member speaks only TLS and wants client certificates (DIR holds ca.pem,
 * server.pem and server.key for 127.0.0.1, client.pem and client.key: bench/etcd_cost/run
 * --https makes them), and both handles reach it over https.
 * Starts one etcd member on 127.0.0.1 (free ports, data under DIR, default $TMPDIR or /tmp)
 * and sends it, R times, N requests of each kind a rendezvous round uses: a range of one key
 * (get), a ticket (client_etcd_ticket.c's transaction), a put (set), and compare_set's
 * transaction. Each block of N goes through crun's own etcd client twice, on two handles: one
 * over the JSON gateway (store_etcd_gateway_only(): one keep-alive HTTP/1.1 connection, as
 * crun spoke to etcd before gRPC) and one over gRPC (client_etcd_grpc.c: one HTTP/2
 * connection), the same requests built by the same code, the order alternating. etcd's CPU
 * (utime + stime, /proc/PID/stat) is read before and after each block. Every answer is
 * checked. Prints, per kind and transport, the median etcd CPU and wall time per request, and
 * the gateway/gRPC ratio. etcd is killed by PID and its data removed at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <crun/store.h>

#include "rendezvous/store/backend.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/clock.h"
#include "src/common/fs.h"

#define TMO_MS 30000
#define ROUNDS_MAX 99

enum kind { K_RANGE, K_TICKET, K_PUT, K_CAS, K_N };
static const char *const kind_name[K_N] = {"range", "ticket txn", "put", "compare_set txn"};

struct ctx {
	struct store_backend *b[2]; /* crun's etcd client: 0 the JSON gateway, 1 gRPC */
	const struct store_ops *ops;
	pid_t etcd;
	const char *data; /* etcd's data directory, removed at the end */
	const char *tls;  /* NULL: http; else the directory of the TLS files (--tls) */
	int64_t tickets; /* tickets taken so far, by either transport */
};

/* Per kind and transport (0: gateway, 1: gRPC), per round: etcd CPU and wall, us/request. */
static double cpu_us[K_N][2][ROUNDS_MAX], wall_us[K_N][2][ROUNDS_MAX];

__attribute__((format(printf, 2, 3), noreturn)) static void die(struct ctx *c,
								      const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "etcd_cost: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (c != NULL && c->etcd > 0) {
		kill(c->etcd, SIGKILL);
		waitpid(c->etcd, NULL, 0);
	}
	if (c != NULL && c->data != NULL) {
		fs_rm_rf(c->data);
	}
	exit(1);
}

/* etcd's user + system CPU so far, in microseconds (/proc/PID/stat fields 14 and 15). */
static int64_t etcd_cpu_us(struct ctx *c)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, stt;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)c->etcd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0) {
		close(fd);
	}
	if (n <= 0) {
		die(c, "cannot read %s (did etcd exit?)", path);
	}
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&ut, &stt) != 2) {
		die(c, "cannot parse %s", path);
	}
	return (int64_t)(ut + stt) * 1000000 / sysconf(_SC_CLK_TCK);
}

/* One request of @k over transport @t, its answer checked. */
static void one(struct ctx *c, enum kind k, int t)
{
	struct store_backend *b = c->b[t];
	void *v = NULL;
	size_t len = 0;
	int64_t n = 0;
	int rc;

	switch (k) {
	case K_RANGE:
		rc = c->ops->get(b, "ec/range", &v, &len, TMO_MS);
		rc = rc == 0 && (len != 5 || memcmp(v, "value", 5) != 0) ? -EPROTO : rc;
		break;
	case K_TICKET:
		rc = c->ops->ticket(b, "ec/ticket", &n, TMO_MS);
		rc = rc == 0 && n != ++c->tickets ? -EPROTO : rc;
		break;
	case K_PUT:
		rc = c->ops->set(b, "ec/put", "p", 1, 0, TMO_MS);
		break;
	default:
		rc = c->ops->compare_set(b, "ec/cas", "A", 1, "A", 1, &v, &len, TMO_MS);
		rc = rc == 0 && (len != 1 || memcmp(v, "A", 1) != 0) ? -EPROTO : rc;
		break;
	}
	free(v);
	if (rc != 0) {
		die(c, "%s over %s: %s", kind_name[k], t == 0 ? "the gateway" : "gRPC",
		    rc == -EPROTO ? "the answer is not what was stored" : c->ops->last_error(b));
	}
}

static void block(struct ctx *c, enum kind k, int t, int round, int n)
{
	int64_t cpu0 = etcd_cpu_us(c), t0 = crun_now_ns(), cpu1, t1;
	int i;

	for (i = 0; i < n; i++) {
		one(c, k, t);
	}
	t1 = crun_now_ns();
	cpu1 = etcd_cpu_us(c);
	cpu_us[k][t][round] = (double)(cpu1 - cpu0) / n;
	wall_us[k][t][round] = (double)(t1 - t0) / 1e3 / n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
	double s[ROUNDS_MAX];

	memcpy(s, v, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void report(int rounds, int n)
{
	double g, r, sum[2] = {0, 0};
	int k;

	printf("| kind (crun's etcd client) | gateway: etcd CPU us/req | gRPC: etcd CPU us/req | CPU ratio "
	       "gateway/gRPC | gateway: wall us/req | gRPC: wall us/req |\n");
	printf("|---|---|---|---|---|---|\n");
	for (k = 0; k < K_N; k++) {
		g = median(cpu_us[k][0], rounds);
		r = median(cpu_us[k][1], rounds);
		sum[0] += g;
		sum[1] += r;
		printf("| %s | %.0f | %.0f | %.2fx | %.0f | %.0f |\n", kind_name[k], g, r,
		       r > 0 ? g / r : 0.0, median(wall_us[k][0], rounds),
		       median(wall_us[k][1], rounds));
	}
	printf("| mean of the four | %.0f | %.0f | %.2fx | | |\n", sum[0] / K_N, sum[1] / K_N,
	       sum[1] > 0 ? sum[0] / sum[1] : 0.0);
	printf("(medians of %d rounds of %d requests per kind and transport; CPU from "
	       "/proc/PID/stat at %ld ticks/s)\n",
	       rounds, n, sysconf(_SC_CLK_TCK));
}

/* A free TCP port on 127.0.0.1 (bound and released: etcd binds it right after). */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &al) == 0) {
		port = ntohs(a.sin_port);
	}
	if (fd >= 0) {
		close(fd);
	}
	return port;
}

static void exec_etcd(const char *etcd, const char *data, const char *tls, int cport, int pport)
{
	char dir[320], log[320], curl[64], purl[64], cluster[80], cert[300], key[300], ca[300];
	const char *argv[32] = {etcd, "--name", "ec", "--data-dir", dir, "--listen-client-urls",
				curl, "--advertise-client-urls", curl, "--listen-peer-urls", purl,
				"--initial-advertise-peer-urls", purl, "--initial-cluster", cluster};
	int fd, n = 15;

	snprintf(dir, sizeof(dir), "%s/member", data);
	snprintf(log, sizeof(log), "%s/etcd.log", data);
	snprintf(curl, sizeof(curl), "%s://127.0.0.1:%d", tls != NULL ? "https" : "http", cport);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", pport);
	snprintf(cluster, sizeof(cluster), "ec=%s", purl);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	if (tls != NULL) {
		snprintf(cert, sizeof(cert), "%s/server.pem", tls);
		snprintf(key, sizeof(key), "%s/server.key", tls);
		snprintf(ca, sizeof(ca), "%s/ca.pem", tls);
		argv[n++] = "--cert-file";
		argv[n++] = cert;
		argv[n++] = "--key-file";
		argv[n++] = key;
		argv[n++] = "--trusted-ca-file";
		argv[n++] = ca;
		argv[n++] = "--client-cert-auth";
	}
	argv[n] = NULL;
	execv(etcd, (char *const *)argv);
	fprintf(stderr, "etcd_cost: cannot run %s: %s\n", etcd, strerror(errno));
	_exit(127);
}

/* The end of etcd's log, to stderr (it is removed with the data directory). */
static void log_tail(const char *data)
{
	char path[320], buf[2048];
	ssize_t n;
	off_t end;
	int fd;

	snprintf(path, sizeof(path), "%s/etcd.log", data);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return;
	}
	end = lseek(fd, 0, SEEK_END);
	lseek(fd, end > (off_t)sizeof(buf) ? end - (off_t)sizeof(buf) : 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n > 0) {
		fprintf(stderr, "etcd_cost: the end of %s:\n%.*s\n", path, (int)n, buf);
	}
}

/* crun's etcd client on @ep, waiting for etcd up to 30 s. */
static struct store_backend *open_backend(struct ctx *c, const char *ep, const char *data)
{
	struct store_settings s = {.endpoint = ep, .connect_timeout_ms = TMO_MS,
				   .timeout_ms = TMO_MS};
	struct store_backend *b = NULL;
	struct crun_diag d = {0};
	struct store_conf conf;
	char ca[300], cert[300], key[300];

	if (c->tls != NULL) {
		snprintf(ca, sizeof(ca), "%s/ca.pem", c->tls);
		snprintf(cert, sizeof(cert), "%s/client.pem", c->tls);
		snprintf(key, sizeof(key), "%s/client.key", c->tls);
		s.etcd_cacert = ca;
		s.etcd_cert = cert;
		s.etcd_key = key;
	}
	if (store_conf_init(&conf, &s, STORE_TOKEN_FLAGS, &d) < 0) {
		die(c, "%s", d.msg);
	}
	if (store_etcd_open(&conf, &b, &c->ops, &d) != 0) {
		log_tail(data);
		die(c, "crun's etcd client: %s", d.msg);
	}
	store_conf_finish(&conf);
	return b;
}

/*
 * Start etcd on free ports with its data under @data, open crun's client on it twice (the
 * first open waits for etcd, up to 30 s, and says so), and store what the blocks read.
 */
static void start_etcd(struct ctx *c, const char *etcd, const char *data)
{
	int cport = free_port(), pport = free_port();
	char ep[64];
	int64_t n = 0;

	if (cport < 0 || pport < 0 || cport == pport) {
		die(c, "%s", "no free port on 127.0.0.1");
	}
	c->etcd = fork();
	if (c->etcd < 0) {
		die(c, "fork: %s", strerror(errno));
	}
	if (c->etcd == 0) {
		exec_etcd(etcd, data, c->tls, cport, pport);
	}
	snprintf(ep, sizeof(ep), "etcd%s://127.0.0.1:%d", c->tls != NULL ? "+https" : "", cport);
	fprintf(stderr, "etcd_cost: waiting up to 30 s for etcd (pid %d, %s, log %s/etcd.log)\n",
		(int)c->etcd, ep, data);
	c->b[0] = open_backend(c, ep, data);
	store_etcd_gateway_only(c->b[0]);
	c->b[1] = open_backend(c, ep, data);
	if (c->ops->set(c->b[0], "ec/range", "value", 5, 0, TMO_MS) != 0 ||
	    c->ops->set(c->b[0], "ec/cas", "A", 1, 0, TMO_MS) != 0 ||
	    c->ops->ticket(c->b[0], "ec/ticket", &n, TMO_MS) != 0) {
		die(c, "setting up the keys: %s", c->ops->last_error(c->b[0]));
	}
	c->tickets = n;
}

int main(int argc, char **argv)
{
	const char *etcd = "/usr/bin/etcd", *dir = getenv("TMPDIR");
	int n = 2000, rounds = 3, r, k, i, t;
	struct ctx c = {0};
	char data[256];

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--etcd") == 0 && i + 1 < argc) {
			etcd = argv[++i];
		} else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc) {
			n = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
			rounds = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--data-dir") == 0 && i + 1 < argc) {
			dir = argv[++i];
		} else if (strcmp(argv[i], "--tls") == 0 && i + 1 < argc) {
			c.tls = argv[++i];
		} else {
			die(NULL, "bad argument %s: usage: etcd_cost [--etcd PATH] [--requests N] "
				  "[--rounds R (1-99)] [--data-dir DIR] [--tls DIR]",
			    argv[i]);
		}
	}
	if (n < 1 || rounds < 1 || rounds > ROUNDS_MAX) {
		die(NULL, "%s", "--requests must be >= 1 and --rounds 1-99");
	}
	snprintf(data, sizeof(data), "%s/etcd_cost.XXXXXX", dir != NULL ? dir : "/tmp");
	if (mkdtemp(data) == NULL) {
		die(NULL, "cannot create a directory under %s", dir != NULL ? dir : "/tmp");
	}
	c.data = data;
	start_etcd(&c, etcd, data);
	for (r = 0; r < rounds; r++) {
		for (k = 0; k < K_N; k++) {
			for (i = 0; i < 2; i++) {
				t = (i + r + k) % 2; /* alternate which transport goes first */
				block(&c, (enum kind)k, t, r, n);
			}
		}
	}
	report(rounds, n);
	c.ops->close(c.b[0]);
	c.ops->close(c.b[1]);
	kill(c.etcd, SIGKILL);
	waitpid(c.etcd, NULL, 0);
	fs_rm_rf(data);
	return 0;
}
