/* SPDX-License-Identifier: MIT */
/* agent/backoff.c: the wait before a restart, and sleeping through it while signals count. */
#include "agent/backoff.h"
#include "agent/jobspec.h"

int64_t backoff_next(struct backoff *b, int64_t ran_ms)
{
	if (ran_ms >= BACKOFF_HEALTHY_MS) {
		backoff_reset(b);
	}
	return backoff_step(b);
}

struct sleeper {
	uv_timer_t timer;
	uv_signal_t sigs[JOBSPEC_MAX_SIGNALS];
	int nsigs;
	int got;
};

static void close_all(struct sleeper *s)
{
	int i;

	uv_close((uv_handle_t *)&s->timer, NULL);
	for (i = 0; i < s->nsigs; i++) {
		uv_close((uv_handle_t *)&s->sigs[i], NULL);
	}
}

static void on_timer(uv_timer_t *t)
{
	close_all(t->data);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct sleeper *s = h->data;

	if (s->got == 0) {
		s->got = signum;
		close_all(s);
	}
}

int backoff_sleep(uv_loop_t *loop, int64_t ms, const int *signals, int n)
{
	struct sleeper s = {.got = 0};
	int i, rc;

	if (ms <= 0) {
		return 0;
	}
	rc = uv_timer_init(loop, &s.timer);
	if (rc < 0) {
		return rc;
	}
	s.timer.data = &s;
	for (i = 0; i < n && i < JOBSPEC_MAX_SIGNALS; i++) {
		uv_signal_init(loop, &s.sigs[i]);
		s.sigs[i].data = &s;
		s.nsigs++;
		uv_signal_start(&s.sigs[i], on_signal, signals[i]);
	}
	/*
	 * A timer counts from the loop's cached time, which stands still while the agent blocks
	 * outside the loop (a rendezvous wait: a node whose workers finished waits there for the
	 * job's end): without this, a 2 s backoff after a 1.5 s wait ended after 0.5 s.
	 */
	uv_update_time(loop);
	uv_timer_start(&s.timer, on_timer, (uint64_t)ms, 0);
	uv_run(loop, UV_RUN_DEFAULT);
	return s.got;
}
