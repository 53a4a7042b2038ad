/* SPDX-License-Identifier: MIT */
/* tests/rdzv/rdzv_scale.c: N agents (threads, one store handle each) complete one round. */
/*
 * Stores: "tcp CRUN-RDZVD" and "etcd ETCD" start their own server (a one-member etcd on
 * 127.0.0.1), "file" a temp file, and "endpoint EP" uses a store that is already running (a
 * crun-rdzvd, or an etcd cluster: etcd://H1:P1,H2:P2). bench/rdzv_scale/run compares them.
 * --server-pid PID (up to 8: the processes of a store that is already running) prints what
 * each phase cost them in CPU, beside what it cost the agents' threads here.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/common/clock.h"
#include "src/common/log.h"
#include "rendezvous/rdzv.h"
#include "tests/rdzv/harness.h"
#include "rendezvous/store/store_conf.h"


struct agent {
	struct rdzv *r;
	struct rdzv_assignment a;
	struct crun_diag d;
	int rc;
	int64_t done_ns;
	pthread_t thr;
};

static pthread_barrier_t start_line;
static int phase; /* 0: next_round, 1: finish */

/* The store's processes (--server-pid): what the store spends in each phase. */
#define MAX_SERVER_PIDS 8
static long server_pids[MAX_SERVER_PIDS];
static int n_server_pids;

/*
 * The time every thread of the store's processes has run so far and waited to run (ns), from
 * the scheduler's /proc/PID/task/TID/schedstat. Returns -1 when a process cannot be read.
 */
static int server_cpu(int64_t *run, int64_t *wait)
{
	*run = 0;
	*wait = 0;
	for (int i = 0; i < n_server_pids; i++) {
		char path[64];
		struct dirent *e;
		DIR *dir;

		snprintf(path, sizeof(path), "/proc/%ld/task", server_pids[i]);
		dir = opendir(path);
		if (dir == NULL) {
			return -1;
		}
		while ((e = readdir(dir)) != NULL) {
			char f[600];
			long long r, w;
			FILE *fh;

			if (e->d_name[0] == '.') {
				continue;
			}
			snprintf(f, sizeof(f), "%s/%s/schedstat", path, e->d_name);
			fh = fopen(f, "r");
			if (fh == NULL) {
				continue; /* a thread that just exited */
			}
			if (fscanf(fh, "%lld %lld", &r, &w) == 2) {
				*run += r;
				*wait += w;
			}
			fclose(fh);
		}
		closedir(dir);
	}
	return 0;
}

/* CPU (user + system, ns) of this process so far: the agents' threads. */
static int64_t self_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static void *agent_main(void *arg)
{
	struct agent *ag = arg;

	pthread_barrier_wait(&start_line);
	if (phase == 0) {
		ag->rc = rdzv_next_round(ag->r, &ag->a, &ag->d);
	} else {
		ag->rc = rdzv_finish(ag->r, 120000, &ag->d);
	}
	ag->done_ns = crun_now_ns();
	return NULL;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Release every agent at once; returns ms until the last one returned, or -1. */
static double run_phase(struct agent *ags, int n, int which)
{
	pthread_attr_t attr;
	int64_t t0, last = 0, cpu0, run0 = 0, wait0 = 0, run1 = 0, wait1 = 0;
	int i, bad = 0, srv;

	phase = which;
	pthread_barrier_init(&start_line, NULL, (unsigned)n + 1);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (i = 0; i < n; i++) {
		if (pthread_create(&ags[i].thr, &attr, agent_main, &ags[i]) != 0) {
			fprintf(stderr, "rdzv_scale: pthread_create %d: %s\n", i, strerror(errno));
			exit(1);
		}
	}
	pthread_attr_destroy(&attr);
	srv = server_cpu(&run0, &wait0);
	cpu0 = self_cpu();
	t0 = crun_now_ns();
	pthread_barrier_wait(&start_line);
	for (i = 0; i < n; i++) {
		pthread_join(ags[i].thr, NULL);
		if (ags[i].rc != 0 && bad++ < 5) {
			fprintf(stderr, "rdzv_scale: agent %d: %s: %s\n", i,
				crun_strerror(ags[i].rc), ags[i].d.msg);
		}
		if (ags[i].done_ns > last) {
			last = ags[i].done_ns;
		}
	}
	pthread_barrier_destroy(&start_line);
	cpu0 = self_cpu() - cpu0;
	if (srv == 0) {
		srv = server_cpu(&run1, &wait1);
	}
	/* What a round costs the store, apart from the agents it shares the machine with here. */
	if (bad == 0 && n_server_pids > 0 && srv == 0) {
		printf("rdzv_scale: %s: store CPU %.1f ms (%.1f ms more waiting for a CPU), "
		       "agents' CPU %.1f ms\n",
		       which == 0 ? "round" : "finish", (double)(run1 - run0) / 1e6,
		       (double)(wait1 - wait0) / 1e6, (double)cpu0 / 1e6);
	} else if (bad == 0 && n_server_pids > 0) {
		fprintf(stderr, "rdzv_scale: cannot read the store's /proc/PID/task/*/schedstat\n");
	}
	if (bad == 0) {
		int64_t *d = malloc((size_t)n * sizeof(*d));

		for (i = 0; d != NULL && i < n; i++) {
			d[i] = ags[i].done_ns - t0;
		}
		if (d != NULL) {
			qsort(d, (size_t)n, sizeof(*d), cmp64);
			printf("rdzv_scale: %s: per agent p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
			       which == 0 ? "round" : "finish", (double)d[n / 2] / 1e6,
			       (double)d[(n * 99) / 100] / 1e6, (double)d[n - 1] / 1e6);
		}
		free(d);
	}
	return bad ? -1.0 : (double)(last - t0) / 1e6;
}

int main(int argc, char **argv)
{
	struct store_fixture fx;
	struct store_settings o = {0};
	struct rlimit rl;
	struct agent *ags;
	const char *backend, *server = NULL;
	char endpoint[600], run_id[64];
	double join_ms, fin_ms, conn_ms, max_ms = 0;
	int n = 1000, i, argi = 1, rc = 1;
	int64_t t0;
	char *seen;

	while (argi < argc && argv[argi][0] == '-') {
		if (strcmp(argv[argi], "--agents") == 0 && argi + 1 < argc) {
			n = atoi(argv[argi + 1]);
			argi += 2;
		} else if (strcmp(argv[argi], "--server-pid") == 0 && argi + 1 < argc &&
			   n_server_pids < MAX_SERVER_PIDS) {
			server_pids[n_server_pids++] = atol(argv[argi + 1]);
			argi += 2;
		} else if (strcmp(argv[argi], "--max-ms") == 0 && argi + 1 < argc) {
			max_ms = atof(argv[argi + 1]);
			argi += 2;
		} else {
			fprintf(stderr, "rdzv_scale: unknown option %s\n", argv[argi]);
			return 2;
		}
	}
	if (n < 1 || n > 10000 || argi >= argc) {
		fprintf(stderr,
			"usage: %s [--agents 1..10000] [--max-ms MS] [--server-pid PID]... "
			"tcp CRUN-RDZVD | file | etcd ETCD | endpoint ENDPOINT\n",
			argv[0]);
		return 2;
	}
	backend = argv[argi];
	if (strcmp(backend, "tcp") == 0 || strcmp(backend, "etcd") == 0 ||
	    strcmp(backend, "endpoint") == 0) {
		if (argi + 1 >= argc) {
			fprintf(stderr, "rdzv_scale: %s: the %s is missing\n", backend,
				backend[0] == 't'   ? "crun-rdzvd path"
				: backend[1] == 't' ? "etcd path"
						    : "store endpoint");
			return 2;
		}
		server = argv[argi + 1];
	}
	/* One connection per agent, plus the daemon's own: raise the descriptor limit. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
		fprintf(stderr, "rdzv_scale: %d agents need %d descriptors, the limit is %lu\n", n,
			n + 64, (unsigned long)rl.rlim_cur);
		return 1;
	}
	log_set_level(LOG_WARN);
	memset(&fx, 0, sizeof(fx));
	if (strcmp(backend, "endpoint") == 0) {
		snprintf(endpoint, sizeof(endpoint), "%s", server);
		backend = strncmp(server, "etcd", 4) == 0 ? "etcd" : "tcp";
	} else {
		rc = fixture_start(&fx, backend, server, NULL);
		if (rc != 0) {
			return rc == FIXTURE_SKIP ? FIXTURE_SKIP : 1;
		}
		fixture_endpoint(&fx, "scale", endpoint, sizeof(endpoint));
		rc = 1;
	}
	snprintf(run_id, sizeof(run_id), "scale-%d", (int)getpid());
	ags = calloc((size_t)n, sizeof(*ags));
	seen = calloc((size_t)n, 1);
	if (ags == NULL || seen == NULL) {
		fprintf(stderr, "rdzv_scale: out of memory\n");
		goto out;
	}
	o.endpoint = endpoint;
	o.connect_timeout_ms = 30000;
	o.token_file = getenv("CRUN_STORE_TOKEN_FILE"); /* a store that needs one (bench) */
	/* An https etcd, or one with users (bench/notes/rdzv_scale.md): CRUN_ETCD_*. */
	store_settings_etcd_env(&o);
	t0 = crun_now_ns();
	for (i = 0; i < n; i++) {
		struct rdzv_conf c;
		char host[32];

		rdzv_conf_defaults(&c);
		snprintf(host, sizeof(host), "sim%d", i);
		c.run_id = run_id;
		c.min_nodes = n;
		c.max_nodes = n;
		c.local_world_size = 8;
		c.advertise_addr = "127.0.0.1";
		c.hostname = host;
		c.join_timeout_ms = 120000;
		if (harness_rdzv_create(&o, &c, &ags[i].r, &ags[i].d) != 0) {
			fprintf(stderr, "rdzv_scale: agent %d: %s\n", i, ags[i].d.msg);
			goto out;
		}
	}
	conn_ms = (double)(crun_now_ns() - t0) / 1e6;
	join_ms = run_phase(ags, n, 0);
	if (join_ms < 0) {
		goto out;
	}
	for (i = 0; i < n; i++) {
		const struct rdzv_assignment *a = &ags[i].a;

		if (a->group_world_size != n || a->world_size != 8 * n || a->group_rank < 0 ||
		    a->group_rank >= n || seen[a->group_rank] ||
		    a->rank_offset != 8 * a->group_rank ||
		    strcmp(a->master_addr, ags[0].a.master_addr) != 0 ||
		    a->master_port != ags[0].a.master_port) {
			fprintf(stderr,
				"rdzv_scale: agent %d: inconsistent assignment (rank %d of %d)\n",
				i, a->group_rank, a->group_world_size);
			goto out;
		}
		seen[a->group_rank] = 1;
	}
	fin_ms = run_phase(ags, n, 1);
	if (fin_ms < 0) {
		goto out;
	}
	printf("rdzv_scale: backend %s, %d agents (one thread and one store handle each): "
	       "connect %.1f ms, one round (release -> last agent assigned) %.1f ms, "
	       "finish (all done) %.1f ms\n",
	       backend, n, conn_ms, join_ms, fin_ms);
	if (max_ms > 0 && join_ms > max_ms) {
		fprintf(stderr, "rdzv_scale: the round took %.1f ms, over the %.1f ms bound\n",
			join_ms, max_ms);
		goto out;
	}
	rc = 0;
out:
	for (i = 0; ags != NULL && i < n; i++) {
		rdzv_destroy(ags[i].r);
	}
	free(ags);
	free(seen);
	fixture_stop(&fx);
	return rc;
}
