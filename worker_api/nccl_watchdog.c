/* SPDX-License-Identifier: MIT */
/* worker_api/nccl_watchdog.c: a deadline on a blocking NCCL call that the call cannot bypass. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "src/common/clock.h"
#include "src/common/log.h"
#include "worker_api/nccl_watchdog.h"

static void *watch(void *arg)
{
	struct nccl_watchdog *w = arg;
	struct timespec ts;

	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		if (w->comm == NULL) {
			pthread_cond_wait(&w->cv, &w->mu);
			continue;
		}
		if (crun_now_ms() < w->deadline) {
			ts = crun_mono_timespec(w->deadline);
			crun_cond_wait_mono(&w->cv, &w->mu, &ts);
			continue;
		}
		/* Past the deadline and the call has not returned: abort under the lock, so that
		 * disarm() waits for the abort to complete before anyone looks at the comm. */
		log_debug("nccl watchdog: a blocking NCCL call passed its deadline: aborting "
			  "the communicator");
		w->nc->ncclCommAbort(w->comm);
		w->comm = NULL;
		w->fired = true;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int nccl_watchdog_start(struct nccl_watchdog *w, const struct gpu_nccl *nc)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->nc = nc;
	pthread_mutex_init(&w->mu, NULL);
	crun_cond_init_monotonic(&w->cv);
	rc = pthread_create(&w->thread, NULL, watch, w);
	if (rc != 0) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		return -rc;
	}
	pthread_setname_np(w->thread, "crun-nccl-wd");
	w->started = true;
	return 0;
}

void nccl_watchdog_arm(struct nccl_watchdog *w, ncclComm_t comm, int64_t deadline)
{
	pthread_mutex_lock(&w->mu);
	w->comm = comm;
	w->deadline = deadline;
	w->fired = false;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

bool nccl_watchdog_disarm(struct nccl_watchdog *w)
{
	bool fired;

	pthread_mutex_lock(&w->mu);
	w->comm = NULL;
	fired = w->fired;
	w->fired = false;
	pthread_mutex_unlock(&w->mu);
	return fired;
}

void nccl_watchdog_stop(struct nccl_watchdog *w)
{
	if (!w->started) {
		return;
	}
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	w->started = false;
}
