/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_internal.h: what the store server's files share (private). */
/*
 * The server is one libuv loop (server.c: listen, accept, shutdown) over connections
 * (server_conn.c: read, frame, write, backpressure, limits) whose requests are decoded by one
 * of two codecs, crun's frames (server_ops.c) or PyTorch's TCPStore (server_tcpstore.c), and
 * run against the one keyspace (keyspace.c: keys, TTLs, held waits; no sockets). Held waits
 * belong to their connection through server_wait.c, which also runs the keyspace's clock.
 * Small helpers on the per-request path are static inline here.
 */
#ifndef CRUN_RENDEZVOUS_STORE_SERVER_INTERNAL_H
#define CRUN_RENDEZVOUS_STORE_SERVER_INTERNAL_H

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <uv.h>

#include "rendezvous/store/keyspace.h"
#include "rendezvous/store/server.h"
#include "rendezvous/store/wire.h"
#include "src/common/htab.h"
#include "src/common/util.h"

#define READ_BUF_LEN (64 * 1024)

/* ---- data ---- */

struct conn;
struct ssl_st;     /* OpenSSL's SSL: only server_tls.c looks inside */
struct ssl_ctx_st; /* SSL_CTX */

/* ---- limits (server_limits.c) ---- */

enum srv_limit {
	LIMIT_CONNECTIONS,
	LIMIT_PER_ADDR,
	LIMIT_MEMORY,
	LIMIT_FRAME_TIME,
	LIMIT_UNTIMED_WAITS,
	LIMIT_KINDS,
};

/* Why a connection that never authenticated was refused or closed: counted, and summed up
 * in one log line per PREAUTH_LOG_MS (server_preauth.c), not one line each. */
enum srv_refusal {
	REFUSE_DEADLINE,      /* no handshake within its lifetime */
	REFUSE_SOURCE_QUOTA,  /* shed: its source's quota of pre-auth connections was full */
	REFUSE_TOTAL_QUOTA,   /* shed: the store's quota of pre-auth connections was full */
	REFUSE_FD_CAP,        /* shed or refused: the connection cap (fd limit) was reached */
	REFUSE_OVER_RATE,     /* admitted past its source's budget of new connections: short life */
	REFUSE_MEMORY,        /* the pre-authentication memory budget */
	REFUSE_HANDSHAKE,     /* an error reply: bad magic, frame too big, wrong token, ... */
	REFUSE_TCPSTORE_TLS,  /* a PyTorch TCPStore client on a TLS store */
	REFUSE_TCPSTORE_OFF,  /* one on a store that serves none (the first is logged) */
	REFUSE_KINDS,
};

/* One source of unauthenticated connections: loopback (one for all of 127/8 and ::1), an IPv4
 * /24 or an IPv6 /64 (server_preauth.c). */
struct source {
	struct htab_node node;   /* in server->sources */
	struct conn *pre_head;   /* its pre-auth connections, oldest first */
	struct conn *pre_tail;
	uint32_t npre;
	uint32_t credit_ms;      /* the budget of new connections, in ms of PREAUTH_RATE */
	int64_t refilled_at;
	int64_t last_seen;
	int64_t detail_at;       /* the interval of the refusal lines logged in full ... */
	uint32_t ndetail;        /* ... how many, and which (srv_preauth_log()) */
	uint64_t detail[8];
	uint8_t key[16];
	char name[80];           /* "127.0.0.0/8", "10.1.2.0/24", "fd00:1:2:3::/64" */
};


/* ---- server_metrics.c: counters, served as Prometheus text (opts.metrics_listen) ---- */

#define SRV_LAT_BUCKETS 11

/* Why a handshake was refused, for the metrics. */
enum srv_refuse {
	SRV_REFUSE_PROOF,     /* a wrong token proof */
	SRV_REFUSE_HANDSHAKE, /* a bad HELLO (magic, version) or a frame before it */
	SRV_REFUSE_SCOPE,     /* a request outside the connection's scope */
	SRV_REFUSE_TCPSTORE,  /* a TCPStore client where none is served */
	SRV_REFUSE_TLS,       /* a TLS handshake that failed */
	SRV_REFUSE_COUNT,
};

struct scrape;
struct srv_metrics {
	uv_tcp_t listener;
	bool on;
	struct scrape *scrapes; /* open scrape connections */
	int nscrapers;
	uint64_t accepted, ts_ops, scrapes_refused;
	uint64_t accepted_unix;              /* of accepted: over the AF_UNIX socket */
	uint64_t ops[256];                   /* crun requests by operation */
	uint64_t lat[SRV_LAT_BUCKETS + 1];   /* handling time histogram (last: above all) */
	double lat_sum;
	uint64_t refused[SRV_REFUSE_COUNT];
	uint64_t limited[LIMIT_KINDS];
};

/** Count request @op handled since @t0_ns (crun_now_ns()). */
void srv_metric_op(struct store_server *s, uint8_t op, int64_t t0_ns);
/** Count a refused handshake. */
void srv_metric_refuse(struct store_server *s, enum srv_refuse why);
/** Listen for scrapes on @listen_addr (NULL: none). 0 or -errno with @d. */
int srv_metrics_start(struct store_server *s, const char *listen_addr, struct crun_diag *d);
/** Stop listening and close every scrape; each closed handle calls @on_closed. */
void srv_metrics_close(struct store_server *s, uv_close_cb on_closed);
/** Bind and listen on "ADDR:PORT" (what: "store", "metrics" for messages). 0 or -errno. */
int srv_bind_socket(const char *addr, const char *what, int *fd_out, struct crun_diag *d);
/* A TCP connection just accepted: its socket options (no Nagle delay, keepalive), from the
 * listener where the kernel copies them (server.c). */
void srv_accepted_sockopts(struct conn *c);

/* One peer address: its connection count and its log rate limiter. */
struct peer {
	struct htab_node node;  /* in server->peers */
	uint32_t nconns;
	uint32_t ts_data;       /* TCPStore connections that sent a request in the namespace */
	uint32_t ts_silent;     /* silent ones kept beside them (PyTorch 1.x's callback socket) */
	int64_t last_seen;      /* loop time its last connection closed */
	int64_t logged_at[LIMIT_KINDS];
	uint32_t suppressed[LIMIT_KINDS];
	uint8_t alen;
	uint8_t addr[16];
	char name[80];          /* the address, for messages */
};

struct conn {
	union {                   /* .data == this */
		uv_tcp_t tcp;     /* from the TCP listener */
		uv_pipe_t pipe;   /* from the AF_UNIX one (tcp.type is then UV_NAMED_PIPE) */
	};
	struct store_server *s;
	struct conn *prev;
	struct conn *next;        /* in server->conns */
	struct conn *flush_next;  /* in server->flush while it has replies to send */
	uint8_t *in;              /* a partial frame: grown only as its bytes arrive */
	uint32_t in_len;
	uint32_t in_cap;
	uint32_t need;            /* total bytes of the partial frame; 0: header incomplete */
	struct wire_buf out;      /* replies not yet handed to the socket */
	uint8_t *backlog;         /* input read but not processed while the peer was not reading */
	uint32_t backlog_len;
	struct ks_wait *waits;    /* held, linked by their owner's prev/next */
	uint32_t nwaits;
	uint32_t nuntimed;        /* waits without a deadline */
	struct peer *peer;        /* NULL when unknown (the per-address limit then skips it) */
	struct source *src;       /* while pre-auth: its source (NULL when unknown) */
	struct conn *src_prev;    /* in src's pre-auth list */
	struct conn *src_next;
	struct conn *pre_prev;    /* in server->pre_head's list, oldest first */
	struct conn *pre_next;
	int64_t pre_deadline;     /* a pre-auth connection is closed then */
	bool pre;                 /* not authenticated yet (server_preauth.c) */
	bool ts_data;             /* counted in peer->ts_data */
	bool ts_silent;           /* counted in peer->ts_silent */
	size_t mem;               /* bytes charged to the server's memory budget */
	uint32_t backlog_charged;
	int64_t frame_start;      /* loop time of the first byte of the partial frame */
	int64_t since;            /* accepted at (handshake deadline) */
	int64_t last_active;
	int64_t drain_until;
	unsigned refs;            /* 1 for the tcp handle + in-flight writes and shutdown */
	struct srv_auth_conn *auth; /* from HELLO on: nonces, key, scope (server_auth.c) */
	struct ssl_st *ssl;       /* the TLS session when the server has TLS (server_tls.c) */
	bool tls_seen;            /* the first byte came, and it started TLS */
	bool hello;               /* the handshake is complete (HELLO, and AUTH when required) */
	bool in_flush;
	bool failing;             /* error reply sent: discard input until EOF, then close */
	int64_t tarpit_until;     /* != 0: an AUTH held, answered then (failing set meanwhile) */
	uint32_t tarpit_id;       /* the held AUTH's request id */
	bool tarpit_ok;           /* the held proof was right */
	bool closing;
	bool paused;
	bool eof;                 /* the peer closed while an error reply was going out */
	bool shut;                /* the error reply is out and our side is shut down */
	uint8_t proto;            /* enum ts_proto: unknown until the first bytes tell */
	uint8_t npeek;            /* first bytes held while they do not tell yet */
	uint8_t peek[4];
	uint8_t peer_len;         /* bytes of peer_sa; 0: not asked yet (srv_conn_peername) */
	struct sockaddr_in6 peer_sa; /* a TCP peer's address (an IPv4 one fits), asked once */
};

struct wreq {
	uv_write_t req;
	struct conn *c;
	uint8_t *buf; /* owned; freed with the request */
};

struct store_server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	uv_timer_t ks_timer;      /* the keyspace's next deadline (TTL or wait) */
	int64_t ks_armed;         /* the deadline ks_timer is set for; KS_NO_DEADLINE: none */
	uv_timer_t sweep_timer;
	uv_prepare_t accept_turn; /* each loop turn: a new accept budget, deferred accepts taken */
	uint32_t accepts;         /* connections accepted in this turn */
	uv_stream_t *deferred[2]; /* listeners whose next connection waits for the next turn */
	uv_idle_t poll_idle;      /* active: poll without sleeping until poll_until (server_poll.c) */
	uint64_t poll_until, poll_ns; /* uv_hrtime() deadline; the window, 0: never poll */
	unsigned refs; /* open server handles + live connections + 1 until close */
	struct conn *conns;
	size_t nconns;
	struct conn *flush;
	struct keyspace ks;       /* keys, TTLs, held waits: both protocols operate on it */
	uint8_t *rbuf;
	char *token;
	size_t token_len;
	struct srv_guard *guard;  /* failed handshakes per source (server_auth.c); NULL: none yet */
	uint8_t nonce_pool[4096]; /* getrandom(2) bytes for HELLO nonces (server_auth.c) */
	uint16_t nonce_left;      /* unused bytes at the pool's end */
	int8_t sockopts;          /* accepted TCP sockets: 0 unchecked, 1 inherit the listener's
				   * options, -1 get them set one by one (server.c) */
	struct ssl_ctx_st *tls_ctx; /* NULL: plain TCP (server_tls.c) */
	uint8_t *tls_plain;       /* decrypted input, READ_BUF_LEN bytes, for one read at a time */
	int max_connections;
	int idle_timeout_ms;
	uint32_t max_pending;
	struct htab peers;        /* struct peer, by address */
	struct htab sources;      /* struct source, by loopback, /24 or /64 (server_preauth.c) */
	struct conn *pre_head;    /* pre-auth connections, oldest first */
	struct conn *pre_tail;
	uint32_t npre;
	uint32_t max_preauth;     /* pre-auth connections, whole store */
	uint32_t max_preauth_per_source;
	size_t pre_mem_used;      /* the part of mem_used that pre-auth connections hold */
	size_t max_pre_memory;
	uint32_t refused[REFUSE_KINDS]; /* since the last summary line */
	int64_t refused_logged_at;
	char refused_source[80];  /* the source of the last refusal, for the summary */
	uint32_t max_per_addr;
	size_t max_memory;
	size_t mem_used;          /* sum of every conn->mem */
	size_t mem_peak;          /* highest mem_used since the last trim */
	int frame_timeout_ms;
	uint32_t max_untimed_per_conn;
	uint32_t max_untimed;
	uint32_t nuntimed;
	int64_t max_wait_ms;      /* 0: none */
	int64_t accept_logged_at; /* accept errors: one line per interval */
	uint32_t accept_suppressed;
	unsigned sweeps;
	struct wire_limits lim;
	bool closing;
	int port;
	char addr[80];
	/* TCPStore clients (server_tcpstore.c): the run's space "<run>/tcpstore/" (NULL: they are
	 * refused), the key naming its generation, and the current generation's namespace,
	 * "<run>/tcpstore/<gen>/" (the space itself while the key is not set) */
	char *ts_prefix;
	size_t ts_prefix_len;
	char *ts_gen_key;
	char ts_ns[STORE_TCPSTORE_MAX_PREFIX + 1];
	uint32_t ts_ns_len;
	bool ts_ended;            /* the generation is "end" (or not a number): none served */
	char *ts_refusal;         /* why they are refused (log line); NULL: a default */
	bool ts_refusal_logged;   /* the first refusal was logged; the rest are counted */
	struct srv_metrics met;
	/* Same-host clients (server_unix.c): the socket file, its lock; unix_on false: none */
	uv_pipe_t unix_listener;
	int unix_lock;
	bool unix_on;
	char unix_path[108];      /* sizeof(sockaddr_un.sun_path) */
};

/* ---- server_poll.c: poll briefly before sleeping after a read that brought input ---- */

/** From @o->busy_poll_us; the idle handle holds a reference until srv_poll_close(). */
void srv_poll_init(struct store_server *s, const struct store_server_opts *o);
/** Input was handled: keep the loop polling, not sleeping, for the window from now. */
void srv_poll_kick(struct store_server *s);
void srv_poll_close(struct store_server *s, uv_close_cb on_closed);

/* ---- server_unix.c: same-host clients over an AF_UNIX socket (docs/security.md) ---- */

/**
 * Listen on opts->unix_socket ("": the default path for the bound address, unix_path.h) too.
 * 0 (also when the default path cannot be served: said in the log), or a negative code with
 * @d when a path given cannot be served.
 */
int srv_unix_start(struct store_server *s, const struct store_server_opts *o,
		   struct crun_diag *d);
/** Stop listening and remove the socket file; the closed handle calls @on_closed. */
void srv_unix_close(struct store_server *s, uv_close_cb on_closed);
/** Whether @c came over the AF_UNIX socket. */
static inline bool srv_conn_is_unix(const struct conn *c)
{
	return c->tcp.type == UV_NAMED_PIPE;
}
/**
 * @c's peer address for the per-address and pre-authentication limits and the handshake's
 * rate limit: a unix client counts as loopback (127.0.0.1), as a local TCP client would.
 * 0 or a libuv error.
 */
int srv_conn_peername(struct conn *c, struct sockaddr_storage *ss, int *n);
/** A unix client's name for messages: "unix:uid=U,pid=P". */
void srv_unix_peer(struct conn *c, char *buf, size_t len);
/** A unix client's user id (SO_PEERCRED): 0 and *@uid, or -1 when the kernel does not say. */
int srv_unix_uid(struct conn *c, uid_t *uid);

/* ---- server_wait.c: held waits of connections, the keyspace's clock ---- */

/** The keyspace's callback: answer the ended wait @w on its connection. */
void srv_on_wait_done(struct keyspace *ks, struct ks_wait *w, int rc, uint32_t index);
/** Unlink and free @w without replying. */
void srv_wait_destroy(struct store_server *s, struct ks_wait *w);
/** Answer @w with an error reply, then destroy it. */
void srv_wait_fail(struct store_server *s, struct ks_wait *w, uint16_t status, const char *msg);
/**
 * Hold a wait of @c on @l (its memory charged to @c) until @timeout_ms (< 0: none), answered
 * with the value of the key that ended it when @with_value (crun's ANY_GET); the
 * caller has checked it is not ready and within its limits. 0: held; 1: the memory budget
 * dropped @c (stop using it); -ENOMEM.
 */
int srv_wait_hold(struct conn *c, const struct ks_list *l, uint8_t mode, bool with_value,
		  int64_t timeout_ms, uint32_t id);
/** (Re)start the keyspace's timer for its next deadline (after every batch of work). */
void srv_ks_arm(struct store_server *s);
/** WAIT (crun): answer now, or hold a wait until its keys are written or its deadline. */
void srv_op_wait(struct conn *c, const struct wire_req *r);
/** Queue @c to be flushed by srv_flush_all(). */
void srv_flush_later(struct conn *c);

/* ---- server_auth.c: the handshake, its rate limit, and scopes ---- */

/** HELLO: check magic and version, answer with a nonce when a token is required. */
void srv_auth_hello(struct conn *c, const struct wire_req *r);
/** AUTH: check the client's proof (rate-limited per source), answer with the server's. */
void srv_auth_proof(struct conn *c, const struct wire_req *r);
/** A connection holding a wrong proof: answer it once @now is past its delay. Returns whether
 * @c is (or was until now) held, so the sweep leaves it alone this time. */
bool srv_auth_tarpit_due(struct conn *c, int64_t now);
/** Before the handshake is done, only HELLO then AUTH pass; false: refused and closing. */
bool srv_auth_gate(struct conn *c, uint8_t op, uint32_t id);
/** A scoped connection touches only its run's keys; false: an error reply was queued. */
bool srv_auth_in_scope(struct conn *c, const struct wire_req *r);
/** The run a scoped connection is confined to (LIST_RUNS names only it), or NULL. */
const char *srv_auth_scope(const struct conn *c);
void srv_auth_conn_free(struct conn *c);
void srv_auth_guard_free(struct store_server *s);

/* ---- server_preauth.c: connections that have not authenticated ---- */

/**
 * A new connection (every one starts pre-auth): find its source, give it a deadline (short
 * when the source is over its budget of new connections), and make room: the oldest pre-auth
 * connection of the source, or of the store, is shed first. False: @c itself was refused.
 */
bool srv_preauth_begin(struct conn *c);
/** @c authenticated (or sent its first TCPStore request in the namespace): no longer pre-auth. */
void srv_preauth_end(struct conn *c);
/** @c closes: out of the pre-auth lists and the TCPStore pairing counts. */
void srv_preauth_close(struct conn *c);
/** Count one refusal of a pre-auth connection for the summary line (@c may be NULL). */
void srv_preauth_refused(struct store_server *s, struct conn *c, enum srv_refusal why);
/**
 * Count the refusal of pre-auth @c, and log "store: dropping PEER: @what" at info level when
 * its source has not logged the same refusal in this interval, up to 8 different ones per
 * source and interval (an operator's misconfigured client is named; a flood is counted);
 * otherwise at debug level.
 */
void srv_preauth_log(struct conn *c, enum srv_refusal why, const char *what);
/** The sweep: close pre-auth connections past their deadline, keep PyTorch's silent callback
 * sockets paired with a served one, log the summary line when due, forget idle sources. */
void srv_preauth_sweep(struct store_server *s, int64_t now);
/** A TCPStore connection sent its first request in the namespace: count it for pairing. */
void srv_preauth_ts_served(struct conn *c);
void srv_preauth_finish(struct store_server *s);

/* ---- server_tcpstore.c: PyTorch TCPStore clients ---- */

/**
 * Bytes of a connection not yet known to speak crun's frames: tell its protocol and serve
 * TCPStore requests. Returns the bytes taken; 0 with c->proto set to TS_PROTO_CRUN when the
 * connection speaks crun's frames (the caller runs c->peek, then @p, as frames).
 */
size_t srv_ts_consume(struct conn *c, const uint8_t *p, size_t n);
/** server_wait.c: a TCPStore connection's wait was answered (@ok), or failed for @why. */
void srv_ts_wait_done(struct conn *c, bool ok, const char *why);
/** server.c: the run @run's TCPStore space and generation key; 0 or a negative code. */
int srv_ts_init(struct store_server *s, const char *run, struct crun_diag *d);
/**
 * The sweep: when the run's generation key changed, close the connections of the old
 * generation and drop its keys (also done before serving any TCPStore request).
 */
void srv_ts_sweep(struct store_server *s);

/* ---- server_ops.c: one handler per request ---- */

/** Decode and run one complete request frame (@plen payload bytes at @payload). */
void srv_dispatch(struct conn *c, const struct wire_hdr *h, const uint8_t *payload,
		  size_t plen);

/* ---- server_tls.c: TLS over memory BIOs (rendezvous/store/tls.h has the OpenSSL bridge) ---- */

/** The server's TLS context from @o's files (none named: plain TCP). 0 or a negative code. */
int srv_tls_init(struct store_server *s, const struct store_server_opts *o,
		 struct crun_diag *d);
void srv_tls_finish(struct store_server *s);
/** A new connection starts in the TLS handshake when the server has TLS. False: closed. */
bool srv_tls_conn_start(struct conn *c);
void srv_tls_conn_free(struct conn *c);
/** Bytes from the socket: the handshake, then the plaintext to srv_conn_input(). */
void srv_tls_read(struct conn *c, const uint8_t *p, size_t n);
/** Encrypt the replies in c->out, and put what TLS has to send in c->out instead. */
void srv_tls_seal(struct conn *c);

/* ---- server_conn.c: connections ---- */

/** Frames from the peer (decrypted, with TLS): run them, keeping what backpressure holds. */
void srv_conn_input(struct conn *c, const uint8_t *p, size_t n);

/** Idempotent: drop every wait, close the socket, free in the close callback. */
void srv_conn_close(struct conn *c);
/** Send an error reply, then close this connection alone (after the reply is out). */
void srv_conn_fail(struct conn *c, uint8_t op, uint32_t id, uint16_t status, const char *msg);
/** srv_conn_fail() for a limit: the log line is srv_limit_log()'s, rate limited. */
void srv_conn_drop(struct conn *c, enum srv_limit kind, uint16_t status, const char *msg);
/** Hand @c's pending replies to the socket. */
void srv_flush(struct conn *c);
/** srv_flush() every connection queued with flush_later(). */
void srv_flush_all(struct store_server *s);
/** "addr:port" of @c's peer into @buf ("?" when unknown), for messages. */
void srv_conn_peer(struct conn *c, char *buf, size_t len);
void srv_on_connection(uv_stream_t *server, int status);
/** The accept_turn prepare callback: a new accept budget, and the connections deferred. */
void srv_on_accept_turn(uv_prepare_t *h);
void srv_on_sweep(uv_timer_t *t);

/* ---- server_limits.c: connection caps, the memory budget, rate-limited log lines ---- */

/** Apply @o's limits (or their defaults) to @s; logs where the fd limit lowers the cap. */
void srv_limits_init(struct store_server *s, const struct store_server_opts *o);
/** Free every peer record (shutdown). */
void srv_limits_finish(struct store_server *s);
/** Find or create @c's peer record from its address; false (and a log) when over a cap. */
bool srv_peer_attach(struct conn *c);
void srv_peer_detach(struct conn *c);
/** Forget peers with no connection whose log interval is over (from the sweep). */
void srv_peers_sweep(struct store_server *s, int64_t now);
/**
 * One warning line for @kind from @c's peer address, at most one per address and kind per
 * STORE_LIMIT_LOG_INTERVAL_MS (the next one says how many were held back).
 */
void srv_limit_log(struct conn *c, enum srv_limit kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/**
 * Charge @n bytes to @c under the memory budget. When the budget would be exceeded, the
 * connection holding the most (@c counting @n) is dropped, others first while they hold
 * more than @c would. Returns false when @c itself was dropped (then stop using its input).
 */
bool srv_mem_charge(struct conn *c, size_t n);
void srv_mem_release(struct conn *c, size_t n);
/** Return freed heap memory to the system once mem_used fell well below its peak (sweep). */
void srv_mem_trim(struct store_server *s);
/** Log an accept failure, rate limited. */
void srv_accept_log(struct store_server *s, int status);

/* ---- server.c: lifecycle ---- */

/** Drop one reference; the last one frees the server. */
void srv_server_unref(struct store_server *s);

/* ---- inline helpers of the request path ---- */

static inline size_t reply_begin(struct conn *c, const struct wire_req *r)
{
	return wire_frame_begin(&c->out, r->op, WIRE_FLAG_REPLY, WIRE_OK, r->id);
}

static inline void reply_empty(struct conn *c, const struct wire_req *r)
{
	wire_frame_end(&c->out, reply_begin(c, r));
}

static inline void reply_error(struct conn *c, const struct wire_req *r, uint16_t status,
			       const char *msg)
{
	wire_put_error(&c->out, r->op, r->id, status, msg);
}

/* Room for a keyspace write's failure in words (srv_ks_error()). */
#define SRV_KS_ERROR_LEN 256

/* A keyspace write's failure @rc in words: the quota it hit (its limit, its run), or "out of
 * memory". Returns @buf or a constant. */
static inline const char *srv_ks_error(struct store_server *s, int rc, char *buf, size_t len)
{
	return rc == -EDQUOT ? ks_refusal_msg(&s->ks, buf, len) : "out of memory";
}

/* Loop time @ms from now, saturated: a peer may send any int64. */
static inline int64_t deadline_after(struct store_server *s, int64_t ms)
{
	int64_t now = (int64_t)uv_now(s->loop);

	return ms > INT64_MAX / 2 - now ? INT64_MAX / 2 : now + ms;
}

#endif
