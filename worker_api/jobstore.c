/* SPDX-License-Identifier: MIT */
/* worker_api/jobstore.c: the job's store as the agent passed it, and crun_barrier() over it. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <crun/error.h>
#include <crun/store.h>
#include <crun/worker.h>

#include "worker_api/worker_internal.h"

static pthread_mutex_t barrier_lock = PTHREAD_MUTEX_INITIALIZER;
static struct crun_store *barrier_store;
static uint64_t barrier_gen;

CRUN_EXPORT int crun_worker_store_open(struct crun_store **out, char *err, size_t errlen)
{
	const struct worker_env *e;
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	int rc;

	if (out == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	e = worker_env_get(&rc);
	if (e == NULL) {
		if (err != NULL && errlen > 0) {
			snprintf(err, errlen, "%s", crun_init_error());
		}
		return rc;
	}
	if (e->store_endpoint == NULL) {
		if (err != NULL && errlen > 0) {
			snprintf(err, errlen,
				 "libcrun-worker: store: CRUN_STORE_ENDPOINT is not set: the agent "
				 "passes it to every worker");
		}
		return CRUN_ECONFIG;
	}
	o.endpoint = e->store_endpoint;
	o.prefix = e->store_prefix;
	o.token = e->store_token;
	o.token_file = e->store_token_file; /* wins over the token */
	o.tls_ca = e->store_tls_ca;
	o.tls_cert = e->store_tls_cert;
	o.tls_key = e->store_tls_key;
	o.tls_server_name = e->store_tls_server_name;
	o.connect_timeout_ms = 30000;
	o.timeout_ms = e->store_timeout_ms;
	return crun_store_open(&o, out, err, errlen);
}

CRUN_EXPORT int crun_barrier(int timeout_ms)
{
	char count_key[64], done_key[64], err[256];
	const char *keys[1];
	const struct worker_env *e;
	int64_t arrived;
	uint64_t gen;
	int rc;

	e = worker_env_get(&rc);
	if (e == NULL) {
		return rc;
	}
	pthread_mutex_lock(&barrier_lock);
	if (barrier_store == NULL) {
		rc = crun_worker_store_open(&barrier_store, err, sizeof(err));
		if (rc < 0) {
			fprintf(stderr, "%s\n", err);
			goto out;
		}
	}
	gen = ++barrier_gen;
	snprintf(count_key, sizeof(count_key), "crun/barrier/%" PRIu64 "/count", gen);
	snprintf(done_key, sizeof(done_key), "crun/barrier/%" PRIu64 "/done", gen);
	rc = crun_store_add(barrier_store, count_key, 1, &arrived);
	if (rc < 0) {
		goto out;
	}
	if (arrived == e->world_size) {
		rc = crun_store_set(barrier_store, done_key, "1", 1);
		if (rc < 0) {
			goto out;
		}
		/* Every rank has left the previous generation's wait: its keys can go. */
		if (gen > 1) {
			snprintf(count_key, sizeof(count_key), "crun/barrier/%" PRIu64 "/count",
				 gen - 1);
			crun_store_delete(barrier_store, count_key);
			snprintf(count_key, sizeof(count_key), "crun/barrier/%" PRIu64 "/done",
				 gen - 1);
			crun_store_delete(barrier_store, count_key);
		}
	}
	keys[0] = done_key;
	rc = crun_store_wait(barrier_store, keys, 1, timeout_ms);
	if (rc == 0) {
		worker_heartbeat(); /* every rank got here: progress (--worker-timeout) */
	}
out:
	pthread_mutex_unlock(&barrier_lock);
	return rc;
}

void worker_store_finish(void)
{
	pthread_mutex_lock(&barrier_lock);
	crun_store_close(barrier_store);
	barrier_store = NULL;
	barrier_gen = 0;
	pthread_mutex_unlock(&barrier_lock);
}
