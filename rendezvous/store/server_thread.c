/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_thread.c: the store server on its own thread and loop (the agent's). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "rendezvous/store/server.h"

struct store_server_thread {
	uv_loop_t loop;
	uv_async_t stop;
	struct store_server *srv;
	pthread_t tid;
	char addr[80];
	int port;
};

static void on_stop(uv_async_t *a)
{
	struct store_server_thread *t = a->data;

	store_server_close(t->srv);
	t->srv = NULL;
	uv_close((uv_handle_t *)&t->stop, NULL);
}

static void *run(void *arg)
{
	struct store_server_thread *t = arg;

	uv_run(&t->loop, UV_RUN_DEFAULT);
	return NULL;
}

int store_server_thread_start(const struct store_server_opts *opts,
			      struct store_server_thread **out, struct crun_diag *d)
{
	struct store_server_thread *t;
	int rc;

	t = calloc(1, sizeof(*t));
	if (t == NULL) {
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	rc = uv_loop_init(&t->loop);
	if (rc < 0) {
		free(t);
		return diag_set(d, rc, "store: event loop: %s", uv_strerror(rc));
	}
	/* Bind on the caller's thread: the socket is listening when this returns. The loop is
	 * handed to the new thread by pthread_create, which orders the memory. */
	rc = store_server_create(&t->loop, opts, &t->srv, d);
	if (rc < 0) {
		goto err_loop;
	}
	snprintf(t->addr, sizeof(t->addr), "%s", store_server_address(t->srv));
	t->port = store_server_port(t->srv);
	rc = uv_async_init(&t->loop, &t->stop, on_stop);
	if (rc < 0) {
		diag_set(d, rc, "store: async handle: %s", uv_strerror(rc));
		store_server_close(t->srv);
		goto err_loop;
	}
	t->stop.data = t;
	rc = pthread_create(&t->tid, NULL, run, t);
	if (rc != 0) {
		diag_set(d, -rc, "store: thread: %s", strerror(rc));
		store_server_close(t->srv);
		uv_close((uv_handle_t *)&t->stop, NULL);
		rc = -rc;
		goto err_loop;
	}
	*out = t;
	return 0;
err_loop:
	uv_run(&t->loop, UV_RUN_DEFAULT); /* lets the close callbacks free what was made */
	uv_loop_close(&t->loop);
	free(t);
	return rc;
}

const char *store_server_thread_address(const struct store_server_thread *t)
{
	return t->addr;
}

int store_server_thread_port(const struct store_server_thread *t)
{
	return t->port;
}

void store_server_thread_stop(struct store_server_thread *t)
{
	if (t == NULL) {
		return;
	}
	uv_async_send(&t->stop);
	pthread_join(t->tid, NULL);
	uv_loop_close(&t->loop);
	free(t);
}
