/* SPDX-License-Identifier: MIT */
/*
 * rendezvous/store/server_poll.c: the server polls briefly before it sleeps (issue 23).
 *
 * On a loaded host a client's request that finds the server asleep in epoll_wait pays for the
 * wake-up (the kernel runs it on the sender's time), and a client whose requests do not wait
 * for a reply (PyTorch's TCPStore set) pays one for nearly every request. So after a read that
 * brought requests, the loop polls without blocking (an active idle handle: epoll_wait with a
 * zero timeout) for opts->busy_poll_us more; every read in that window extends it. With no
 * input the handle is stopped and the loop blocks as before: an idle server, and one whose
 * connections are idle, spend no CPU on it. Each pass of the window yields the CPU
 * (sched_yield): on a host with fewer cores than runnable processes a polling server would
 * otherwise take the time its clients need. Off by default (STORE_DEFAULT_BUSY_POLL_US): on
 * a 2-core host it lost bench/tcpstore's set rows even so (bench/notes/tcpstore.md).
 */
#include <sched.h>

#include <uv.h>

#include "rendezvous/store/server_internal.h"

static void on_poll(uv_idle_t *h)
{
	struct store_server *s = h->data;

	if (uv_hrtime() >= s->poll_until) {
		uv_idle_stop(h);
	} else {
		sched_yield(); /* a runnable client on this CPU goes first */
	}
}

void srv_poll_init(struct store_server *s, const struct store_server_opts *o)
{
	int us = o->busy_poll_us == 0 ? STORE_DEFAULT_BUSY_POLL_US : o->busy_poll_us;

	s->poll_ns = us > 0 ? (uint64_t)us * 1000u : 0;
	uv_idle_init(s->loop, &s->poll_idle);
	s->poll_idle.data = s;
	s->refs++;
}

void srv_poll_kick(struct store_server *s)
{
	if (s->poll_ns == 0 || s->closing) {
		return;
	}
	s->poll_until = uv_hrtime() + s->poll_ns;
	if (!uv_is_active((uv_handle_t *)&s->poll_idle)) {
		uv_idle_start(&s->poll_idle, on_poll);
	}
}

void srv_poll_close(struct store_server *s, uv_close_cb on_closed)
{
	uv_close((uv_handle_t *)&s->poll_idle, on_closed);
}
