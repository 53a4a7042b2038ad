/* SPDX-License-Identifier: MIT */
/* tests/store/helpers.h: start a real crun-rdzvd, speak raw frames to it. */
#ifndef CRUN_TESTS_STORE_HELPERS_H
#define CRUN_TESTS_STORE_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "crun/store.h"
#include "rendezvous/store/wire.h"

#define IO_TIMEOUT_MS 20000

struct daemon {
	pid_t pid;
	int pidfd;
	char addr[80]; /* "127.0.0.1:PORT" as printed by the daemon */
	int port;
};

/* Start crun-rdzvd ($CRUN_RDZVD) with --listen 127.0.0.1:0 and @args (NULL-terminated,
 * may be NULL); read the bound address from its stdout. Returns 0 or -errno. */
int daemon_start(struct daemon *d, const char *const *args);
/* The same on 127.0.0.1:@port (0: any). */
int daemon_start_at(struct daemon *d, const char *const *args, int port);
/*
 * A loopback port held by a socket bound with SO_REUSEADDR but not listening (*@fd): the kernel
 * gives it to no other process meanwhile (a daemon another test starts on port 0 included),
 * connections to it are refused, and a store (libuv binds with SO_REUSEADDR) can still listen
 * on it. A test that stops its daemon and then expects refused connections holds the port for
 * the whole test, so no other test's daemon can take it and answer. The caller closes @fd.
 */
int port_hold(int *fd);
/* Send @sig and wait (bounded) for the exit; returns the wait status, or -1 on timeout
 * (the daemon is then killed with SIGKILL and reaped). */
int daemon_stop(struct daemon *d, int sig);
/* Run crun-rdzvd with @args to completion (bounded); returns the exit code or -1. */
int daemon_run(const char *const *args, char *err, size_t errlen);
/* VmRSS of @pid in KiB, or -1. */
long rss_kib(pid_t pid);
/* The state letter of thread @tid of process @pid ('S': asleep; /proc/PID/task/TID/stat, after
 * the command's ')'), or '?'. */
char task_state(pid_t pid, pid_t tid);

/* A blocking TCP connection to 127.0.0.1:@port with IO_TIMEOUT_MS send/receive timeouts. */
int raw_connect(int port);
int raw_send(int fd, const void *p, size_t n);
/* Build and send one request frame. */
int raw_frame(int fd, uint8_t op, uint32_t id, const void *payload, size_t plen);
/* The handshake as a client with @token (NULL: none) and @scope (NULL: none): HELLO, then
 * AUTH when asked, checking the store's proof. Returns 0; -EACCES for an error reply (its
 * status and message into @status and @msg when not NULL); another code for broken replies. */
int raw_handshake(int fd, const char *token, const char *scope, uint16_t *status, char *msg,
		  size_t len);
/* raw_handshake() with no scope, no interest in the error. */
int raw_hello(int fd, const char *token);
/* A HELLO with no nonce and no scope, answered OK (asserted): the connection waits for AUTH. */
void raw_hello_unproved(int fd);
/* Read one frame: header into @h, payload (NUL-terminated) into @buf of @cap bytes. */
int raw_read(int fd, struct wire_hdr *h, uint8_t *buf, size_t cap);
/* Read one frame and check it is an error reply with @status and exactly @msg. */
void raw_expect_error(int fd, uint8_t op, uint32_t id, uint16_t status, const char *msg);
/* Check that the server closed the connection (EOF or reset within the timeout). */
void raw_expect_closed(int fd);
/* Close @fd once the server has seen it go: shut our side, then wait (IO_TIMEOUT_MS at
 * most) for the server to close its end, which it does after counting the connection out. */
void raw_close_seen(int fd);
/* Wait (@timeout_ms at most) until a connection of this network namespace to 127.0.0.1:@port
 * is in CLOSE_WAIT (/proc/net/tcp): the server closed its end and the client has not seen it
 * yet. Returns true, or false at the timeout. */
bool server_closed_a_conn(int port, int timeout_ms);
/* A fresh connection that completes HELLO and PING: the server still serves others. */
void raw_expect_served(int port);
/** The same with the handshake proving @token (NULL: an --insecure daemon). */
void raw_expect_served_with(int port, const char *token);

/* Open a store handle on @d (127.0.0.1:PORT, the token from the environment) with a 20 s
 * connect timeout and @timeout_ms per operation; the error is printed. Inline: only the
 * tests that link the client library use it. */
static inline int daemon_client_open(const struct daemon *d, int timeout_ms,
				     struct crun_store **st)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	char ep[64], err[512];
	int rc;

	snprintf(ep, sizeof(ep), "127.0.0.1:%d", d->port);
	o.endpoint = ep;
	o.connect_timeout_ms = 20000;
	o.timeout_ms = timeout_ms;
	rc = crun_store_open(&o, st, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "open %s: %s\n", ep, err);
	}
	return rc;
}

#endif
