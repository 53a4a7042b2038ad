/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_tcp_internal.h: the TCP client's handle and its transport (private). */
#ifndef CRUN_RENDEZVOUS_STORE_CLIENT_TCP_INTERNAL_H
#define CRUN_RENDEZVOUS_STORE_CLIENT_TCP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "rendezvous/store/wire.h"
#include "src/common/diag.h"
#include "src/common/token.h"

struct addrinfo;

/*
 * client_tcp.c speaks the protocol (frames, handshake, reconnects); client_tcp_io.c moves its
 * bytes: a plain socket, or TLS over it (rendezvous/store/tls.h) when the handle has a TLS
 * context. Every transport call takes the deadline of the operation it serves.
 */
struct store_backend {
	int fd;                /* -1 when disconnected: the next operation reconnects */
	char *host;
	int port;
	struct token_cred cred; /* cred.set false: no credential (an --insecure client) */
	int connect_timeout_ms;
	bool was_up;           /* a handshake has succeeded on this handle */
	int hs_try_ms;         /* the next handshake try's bound (client_tcp.c); 0: the first */
	int64_t down_since;    /* when the connection was lost (or first tried); 0: up */
	uint32_t next_id;
	struct wire_buf out;   /* the request being sent; reused */
	uint8_t *rb;           /* received bytes: [rb_off, rb_off + rb_len) not yet consumed */
	size_t rb_cap;
	size_t rb_off;
	size_t rb_len;
	const uint8_t *in;     /* the last reply's payload, inside rb until the next read */
	struct wire_hdr rh;    /* the reply header */
	uint32_t max_value_len;
	int rcvtimeo_ms;       /* SO_RCVTIMEO now set on fd; 0: not set yet (blocks forever) */
	SSL_CTX *tls_ctx;      /* NULL: plain TCP */
	SSL *ssl;              /* the TLS session on fd (fd is then non-blocking) */
	char *tls_name;        /* the name the store's certificate must match */
	char io_msg[400];      /* why the last transport call failed, when errno cannot say */
	char where[300];       /* "store HOST:PORT" */
	uint8_t junk[64];      /* the first bytes of a reply that was no frame (the handshake's) */
	size_t junk_len;
	struct crun_diag diag; /* the last error: "store H:P: what" (server's message, or ours) */
};

/** Close the connection (TLS session included); the next operation reconnects. */
void tcp_io_disconnect(struct store_backend *b);
/** Connect to @ai before @deadline (TCP only). 0, -ETIMEDOUT or -errno. */
int tcp_io_connect(struct store_backend *b, const struct addrinfo *ai, int64_t deadline);
/**
 * The TLS handshake on the new connection, when the handle has a TLS context (else a no-op).
 * Failures leave the reason in b->io_msg: CRUN_EAUTH (a certificate refused either way),
 * -EPROTO (the store does not speak TLS), -ECONNRESET, -ETIMEDOUT.
 */
int tcp_io_tls_start(struct store_backend *b, int64_t deadline);
/** Send all @n bytes before @deadline. 0 or a negative code. */
int tcp_io_send(struct store_backend *b, const uint8_t *p, size_t n, int64_t deadline);
/** Make @need bytes available at b->rb + b->rb_off before @deadline. 0 or a negative code. */
int tcp_io_fill(struct store_backend *b, size_t need, int64_t deadline);
/** The words for a transport failure @rc: b->io_msg when set, else crun_strerror(@rc). */
const char *tcp_io_strerror(const struct store_backend *b, int rc);

#endif
