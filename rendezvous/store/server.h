/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server.h: the store server (libuv, one loop), embeddable in the agent. */
#ifndef CRUN_RENDEZVOUS_STORE_SERVER_H
#define CRUN_RENDEZVOUS_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "src/common/util.h"
#include "src/common/diag.h"

struct uv_loop_s;
struct store_server;

struct store_server_opts {
	const char *listen;        /* "ADDR:PORT" (port 0: pick one); binds exactly ADDR */
	const char *token;         /* required handshake token; NULL: none */
	int max_connections;       /* <=0: default (docs/protocol.md) */
	int idle_timeout_ms;       /* close a connection idle this long with no wait pending; <=0: default */
	int max_pending_per_conn;  /* outstanding requests per connection; <=0: default */
	size_t max_value_len;      /* 0: CRUN_STORE_MAX_VALUE_LEN */
};

/**
 * Bind and listen on @loop (borrowed; must outlive the server). On success *out is owned by
 * the caller (store_server_close()). Errors (address in use, bad address) go to @d.
 */
int store_server_create(struct uv_loop_s *loop, const struct store_server_opts *opts,
			struct store_server **out, struct crun_diag *d);
/** The bound address as "ADDR:PORT" (borrowed, valid until close) and the bound port. */
const char *store_server_address(const struct store_server *s);
int store_server_port(const struct store_server *s);
/** Stop listening, drop every connection, free when the loop has closed every handle. */
void store_server_close(struct store_server *s);

/*
 * The server on a thread of its own with its own loop: how the agent embeds it.
 * store_server_thread_start() returns once the socket is bound (or failed).
 */
struct store_server_thread;
int store_server_thread_start(const struct store_server_opts *opts,
			      struct store_server_thread **out, struct crun_diag *d);
const char *store_server_thread_address(const struct store_server_thread *t);
int store_server_thread_port(const struct store_server_thread *t);
/** Stop the loop, join the thread, free. NULL is a no-op. */
void store_server_thread_stop(struct store_server_thread *t);

#endif
