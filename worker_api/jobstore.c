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

#include "rendezvous/store/store_conf.h"
#include "src/common/diag.h"
#include "worker_api/worker_internal.h"

static pthread_mutex_t barrier_lock = PTHREAD_MUTEX_INITIALIZER;
static struct crun_store *barrier_store;
static uint64_t barrier_gen;

CRUN_EXPORT int crun_worker_store_open(struct crun_store **out, char *err, size_t errlen)
{
	const struct worker_env *e;
	struct store_settings s = {0};
	struct crun_diag d = {0};
	struct store_conf c;
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
	/* What the agent passed (worker_env.c read it once) into the store's configuration. */
	s.endpoint = e->store_endpoint;
	s.prefix = e->store_prefix;
	s.token_file = e->store_token_file; /* wins over the token */
	s.token = e->store_token;
	s.tls_ca = e->store_tls_ca;
	s.tls_cert = e->store_tls_cert;
	s.tls_key = e->store_tls_key;
	s.tls_server_name = e->store_tls_server_name;
	s.connect_timeout_ms = 30000;
	s.timeout_ms = e->store_timeout_ms;
	store_settings_etcd_env(&s);
	/* No policy beyond what the agent passed: a worker's environment is left as it is. */
	rc = store_conf_init(&c, &s, STORE_TOKEN_FLAGS, &d);
	if (rc == 0) {
		rc = store_open_conf(&c, out, &d);
	}
	store_conf_finish(&c);
	diag_copy_out(&d, err, errlen);
	return rc;
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
		/* Not waited for: the wait below follows it on the connection (one round trip
		 * for both), and returns its failure if the store refused it. */
		rc = crun_store_set_async(barrier_store, done_key, "1", 1);
		if (rc < 0) {
			goto out;
		}
	}
	keys[0] = done_key;
	rc = crun_store_wait(barrier_store, keys, 1, timeout_ms);
	if (rc == 0) {
		worker_heartbeat(); /* every rank got here: progress (--worker-timeout) */
	}
	if (rc == 0 && arrived == e->world_size && gen > 1) {
		/* Every rank has left the previous generation's wait: its keys can go. */
		snprintf(count_key, sizeof(count_key), "crun/barrier/%" PRIu64 "/count", gen - 1);
		crun_store_delete(barrier_store, count_key);
		snprintf(count_key, sizeof(count_key), "crun/barrier/%" PRIu64 "/done", gen - 1);
		crun_store_delete(barrier_store, count_key);
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
