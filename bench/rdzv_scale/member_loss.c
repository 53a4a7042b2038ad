/* SPDX-License-Identifier: MIT */
/* bench/rdzv_scale/member_loss.c: what a job sees of an etcd member's loss (rdzv_scale/run). */
/*
 * member_loss --endpoint etcd://A,B,C --kill-pid PID [--before-ms 2000] [--after-ms 6000]
 *             [--interval-ms 10]
 * Does what a running job does to its store, through crun's etcd backend, while the member
 * PID is SIGKILLed: a "heartbeat" thread writes a TTL key every --interval-ms (as an agent's
 * watch thread does), and a waiter blocks in a wait on a key that is written 200 ms after the
 * kill (as agents wait on round keys). Prints one JSON line:
 *   "inflight_ms": how long the write that was in flight at the kill took,
 *   "first_ok_ms": kill -> the first write issued after the kill completed,
 *   "max_gap_ms":  the longest time between two completed writes across the kill,
 *   "wake_ms":     the write issued -> the waiter woke, "set_ms": that write alone,
 *   "failed":      writes that failed (each operation retries across members itself).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/clock.h"

static const char *g_endpoint;
static char g_prefix[64];
static int g_interval_ms = 10;
static atomic_bool g_stop;
static int64_t g_kill_ns;

struct writes {
	int64_t last_ok_ns;  /* completion of the previous successful write */
	int64_t max_gap_ns;  /* around the kill */
	int64_t inflight_ns; /* the write in flight at the kill */
	int64_t first_ok_ns; /* kill -> first write started after it completed */
	int failed;
};

static struct crun_store *open_store(void)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	struct crun_store *st = NULL;
	char err[256];

	o.endpoint = g_endpoint;
	o.prefix = g_prefix;
	o.connect_timeout_ms = 10000;
	o.timeout_ms = 30000;
	if (crun_store_open(&o, &st, err, sizeof(err)) != 0) {
		fprintf(stderr, "member_loss: %s\n", err);
		exit(1);
	}
	return st;
}

static void *writer_main(void *arg)
{
	struct writes *w = arg;
	struct crun_store *st = open_store();
	int64_t t0, t1, kill_ns;

	w->last_ok_ns = crun_now_ns();
	while (!atomic_load(&g_stop)) {
		t0 = crun_now_ns();
		if (crun_store_set_ttl(st, "hb", "1", 1, 30000) != 0) {
			w->failed++;
			continue;
		}
		t1 = crun_now_ns();
		kill_ns = __atomic_load_n(&g_kill_ns, __ATOMIC_ACQUIRE);
		if (kill_ns != 0) {
			if (t0 <= kill_ns && t1 >= kill_ns) {
				w->inflight_ns = t1 - t0;
			}
			if (t0 > kill_ns && w->first_ok_ns == 0) {
				w->first_ok_ns = t1 - kill_ns;
			}
			if (t1 - w->last_ok_ns > w->max_gap_ns) {
				w->max_gap_ns = t1 - w->last_ok_ns;
			}
		}
		w->last_ok_ns = t1;
		usleep((useconds_t)g_interval_ms * 1000);
	}
	crun_store_close(st);
	return NULL;
}

static int64_t g_woke_ns;

static void *waiter_main(void *arg)
{
	struct crun_store *st = arg;
	const char *keys[1] = {"go"};

	if (crun_store_wait(st, keys, 1, 30000) == 0) {
		g_woke_ns = crun_now_ns();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct writes w = {0};
	struct crun_store *waiter, *setter;
	pthread_t wt, vt;
	int64_t before_ms = 2000, after_ms = 6000, set_t0, set_t1;
	pid_t victim = 0;
	int i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--endpoint") == 0) {
			g_endpoint = argv[i + 1];
		} else if (strcmp(argv[i], "--kill-pid") == 0) {
			victim = (pid_t)atoi(argv[i + 1]);
		} else if (strcmp(argv[i], "--before-ms") == 0) {
			before_ms = atoll(argv[i + 1]);
		} else if (strcmp(argv[i], "--after-ms") == 0) {
			after_ms = atoll(argv[i + 1]);
		} else if (strcmp(argv[i], "--interval-ms") == 0) {
			g_interval_ms = atoi(argv[i + 1]);
		} else {
			break;
		}
	}
	if (i != argc || g_endpoint == NULL || victim <= 0 || g_interval_ms < 1) {
		fprintf(stderr, "usage: %s --endpoint etcd://A,B,C --kill-pid PID [--before-ms MS] "
				"[--after-ms MS] [--interval-ms MS]\n",
			argv[0]);
		return 2;
	}
	snprintf(g_prefix, sizeof(g_prefix), "bench-member-loss/%d/", (int)getpid());
	waiter = open_store();
	setter = open_store();
	if (pthread_create(&wt, NULL, writer_main, &w) != 0 ||
	    pthread_create(&vt, NULL, waiter_main, waiter) != 0) {
		fprintf(stderr, "member_loss: pthread_create failed\n");
		return 1;
	}
	usleep((useconds_t)before_ms * 1000);
	__atomic_store_n(&g_kill_ns, crun_now_ns(), __ATOMIC_RELEASE);
	if (kill(victim, SIGKILL) != 0) {
		fprintf(stderr, "member_loss: kill %d: %s\n", (int)victim, strerror(errno));
		return 1;
	}
	usleep(200 * 1000);
	set_t0 = crun_now_ns();
	if (crun_store_set(setter, "go", "1", 1) != 0) {
		fprintf(stderr, "member_loss: set go failed\n");
		return 1;
	}
	set_t1 = crun_now_ns();
	pthread_join(vt, NULL);
	usleep((useconds_t)after_ms * 1000);
	atomic_store(&g_stop, true);
	pthread_join(wt, NULL);
	printf("{\"inflight_ms\": %.1f, \"first_ok_ms\": %.1f, \"max_gap_ms\": %.1f, "
	       "\"set_ms\": %.1f, \"wake_ms\": %.1f, \"failed\": %d}\n",
	       (double)w.inflight_ns / 1e6, (double)w.first_ok_ns / 1e6,
	       (double)w.max_gap_ns / 1e6, (double)(set_t1 - set_t0) / 1e6,
	       g_woke_ns != 0 ? (double)(g_woke_ns - set_t0) / 1e6 : -1.0, w.failed);
	(void)crun_store_delete(setter, "go");
	(void)crun_store_delete(setter, "hb");
	crun_store_close(setter);
	crun_store_close(waiter);
	return g_woke_ns != 0 && w.failed == 0 ? 0 : 1;
}
