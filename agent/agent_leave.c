/* SPDX-License-Identifier: MIT */
/* agent/agent_leave.c: this node leaving the job when its operator stops it (a signal while the
 * workers run): the others are told before its workers die (rendezvous/rdzv.h, rdzv_leave()). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agent/agent_internal.h"
#include "rendezvous/rdzv.h"
#include "src/common/log.h"
#include "src/common/signames.h"

/* How long the loop waits for the other nodes to hear that this one leaves. */
#define LEAVE_WAIT_MS 2000

static void *leave_main(void *arg)
{
	struct agent *a = arg;

	(void)rdzv_leave(a->r, a->rep.summary);
	return NULL;
}

/*
 * The operator stopped this node (systemctl stop, a signal to this agent): tell the others it
 * leaves (they re-form without it and spend no restart, or stop when the job cannot go on
 * without it) before its workers die, so a peer's collective breaking is not counted as the
 * failure. On the report thread, waited for at most LEAVE_WAIT_MS: a hung store never holds
 * the signal back long; on_group_done() joins it.
 */
void agent_leave_round(struct agent *a, int signum)
{
	char name[32];
	struct timespec until;
	sigset_t all, old;
	int rc;

	if (a->rep.reported || a->r == NULL) {
		return;
	}
	a->rep.reported = true; /* this attempt's one publication */
	snprintf(a->rep.summary, sizeof(a->rep.summary), "stopped by its operator (%s)",
		 signal_name(signum, name, sizeof(name)));
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&a->rep.thr, NULL, leave_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		log_warn("leaving the job: no thread (%s): the others will see this node lost",
			 strerror(rc));
		return;
	}
	a->rep.thr_running = true;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += LEAVE_WAIT_MS / 1000;
	if (pthread_timedjoin_np(a->rep.thr, NULL, &until) == 0) {
		a->rep.thr_running = false;
	}
}
