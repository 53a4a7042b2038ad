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
 * Sets sent without waiting for their replies (crun_store_set_async): the server answers every
 * request of a connection in order, so the replies still owed are those of these sets, oldest
 * first, matched by the frame id. Bounded: past TCP_PIPE_MAX_SETS sets or TCP_PIPE_MAX_BYTES of
 * their frames, the next one first reads the replies owed (client_tcp_pipe.c).
 */
#define TCP_PIPE_MAX_SETS 1024
#define TCP_PIPE_MAX_BYTES (4u << 20)

struct tcp_pend {
	uint32_t id;
	uint32_t bytes; /* the frame's length */
	char *key;	/* the full key, to name it in an error */
};

struct tcp_pipe {
	struct tcp_pend *q; /* a ring of cap entries: n owed from head */
	size_t cap, head, n;
	size_t bytes;	      /* frame bytes owed a reply */
	struct crun_diag err; /* the first set refused or lost, not yet reported; code 0: none */
	size_t more;	      /* sets refused or lost after it */
};

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
	int64_t spin_ns;       /* the reply spin's window (client_tcp_io.c); 0: none */
	uint32_t spin_skip;    /* waits left that do not spin, after spins that failed */
	uint32_t spin_backoff; /* how many the next failed spin skips (doubles, capped) */
	int rcvtimeo_ms;       /* SO_RCVTIMEO now set on fd; 0: not set yet (blocks forever) */
	SSL_CTX *tls_ctx;      /* NULL: plain TCP */
	SSL *ssl;              /* the TLS session on fd (fd is then non-blocking) */
	char *tls_name;        /* the name the store's certificate must match */
	char io_msg[400];      /* why the last transport call failed, when errno cannot say */
	char where[300];       /* "store HOST:PORT" */
	uint8_t junk[64];      /* the first bytes of a reply that was no frame (the handshake's) */
	size_t junk_len;
	struct crun_diag diag; /* the last error: "store H:P: what" (server's message, or ours) */
	struct tcp_pipe pipe;  /* sets sent without waiting for their replies */
	bool unix_off;         /* no AF_UNIX socket, even for a local endpoint */
	char unix_given[108];  /* the socket to use for a local endpoint; "": the default ones */
	char unix_path[108];   /* the connection's socket; "": TCP */
	bool no_wait_get;      /* the store refused WAIT's ANY_GET mode: wait, then get */
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
/**
 * When an address in @res (getaddrinfo's) is this host's, connect to the store's AF_UNIX
 * socket (rendezvous/store/unix_path.h) if there is one and its server is its directory's
 * owner (SO_PEERCRED). 0: connected (b->unix_path names it); else -ENOENT, and the caller
 * connects over TCP (why, at debug level).
 */
int tcp_unix_connect(struct store_backend *b, const struct addrinfo *res, int64_t deadline);
/** Send all @n bytes before @deadline. 0 or a negative code. */
int tcp_io_send(struct store_backend *b, const uint8_t *p, size_t n, int64_t deadline);
/** Make @need bytes available at b->rb + b->rb_off before @deadline. 0 or a negative code. */
int tcp_io_fill(struct store_backend *b, size_t need, int64_t deadline);
/* ---- client_tcp_pipe.c: the sets owed a reply ---- */
/** Queue the set with frame id @id for @key (copied); 0 or -ENOMEM. */
int tcp_pipe_push(struct store_backend *b, uint32_t id, const char *key, size_t frame_len);
/** Whether a new set of @frame_len bytes must first wait for the replies owed. */
bool tcp_pipe_full(const struct store_backend *b, size_t frame_len);
/**
 * The oldest set's reply, in b->rh and b->in (@plen payload bytes), arrived: dequeue it and,
 * for an error reply, keep the server's words, naming the key. 0, or -EPROTO when the reply's
 * id is not the oldest set's (the caller drops the connection).
 */
int tcp_pipe_answered(struct store_backend *b, size_t plen);
/**
 * The connection is gone with sets owed a reply: each may or may not be stored. Keep that,
 * naming the first key and the cause (b->diag, set before the connection is dropped), and
 * forget them.
 */
void tcp_pipe_lost(struct store_backend *b);
/** The kept error, moved to b->diag and forgotten: its code, or 0 when none. */
int tcp_pipe_take_error(struct store_backend *b);
/** Forget everything (the handle is closed). */
void tcp_pipe_finish(struct store_backend *b);
/** Read the replies owed before @deadline. 0, or the kept error (a set refused or lost). */
int tcp_pipe_drain(struct store_backend *b, int64_t deadline);
/** The backend's set_async and flush (rendezvous/store/backend.h). */
int tcp_set_async(struct store_backend *b, const char *key, const void *val, size_t len,
		  int64_t ttl_ms, int timeout_ms);
int tcp_flush(struct store_backend *b, int timeout_ms);
/** Closing: wait (bounded) for the replies owed; log what failed, there being no caller. */
void tcp_pipe_close(struct store_backend *b);
/** Drop the connection (tcp_io_disconnect()); sets owed a reply are lost (tcp_pipe_lost()). */
void tcp_disconnect(struct store_backend *b);

/* ---- client_tcp.c: the protocol ---- */
/** Record "store H:P: <fmt>" in b->diag; returns @code. */
int tcp_fail(struct store_backend *b, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/** Build a SET request in b->out with a new frame id (b->rh.id). */
void tcp_set_frame(struct store_backend *b, const char *key, const void *val, size_t len,
		   int64_t ttl_ms);
/** Connect and handshake when disconnected, before @deadline; b->out is kept. 0 or the cause. */
int tcp_ensure_conn(struct store_backend *b, int64_t deadline);

/* ---- client_tcp_io.c: frames ---- */
/** Whether b->out can be sent (built without running out of memory, within a frame). */
bool tcp_out_ok(struct store_backend *b);
/** Send b->out; a transport failure drops the connection. 0 or a negative code. */
int tcp_send_out(struct store_backend *b, int64_t deadline);
/**
 * Read one frame into b->rh and b->in (*@plen payload bytes). A transport failure or a frame
 * that does not decode drops the connection: a negative code, the words in b->diag.
 */
int tcp_recv_frame(struct store_backend *b, int64_t deadline, size_t *plen);

/** The words for a transport failure @rc: b->io_msg when set, else crun_strerror(@rc). */
const char *tcp_io_strerror(const struct store_backend *b, int rc);

#endif
