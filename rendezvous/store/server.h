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

/*
 * The limits that keep one client from hurting the others (docs/reliability.md, "Store
 * limits"): their defaults, in one place. crun-rdzvd prints them in --help.
 */
#define STORE_DEFAULT_MAX_CONNECTIONS 65536   /* and at most NOFILE_PERCENT of the fd limit */
#define STORE_NOFILE_PERCENT 90               /* default cap: this % of RLIMIT_NOFILE ... */
#define STORE_NOFILE_RESERVE 64               /* ... minus the fds kept for everything else */
#define STORE_DEFAULT_MAX_CONNS_PER_ADDR 4096 /* connections from one peer address */
#define STORE_DEFAULT_MAX_PENDING 1024        /* waits held per connection */
#define STORE_DEFAULT_MAX_MEMORY (256u << 20) /* partial frames + held waits, all connections */
#define STORE_DEFAULT_FRAME_TIMEOUT_MS 30000  /* a frame must end this long after its 1st byte */
#define STORE_DEFAULT_UNTIMED_WAITS_PER_CONN 256 /* waits without a deadline, per connection */
#define STORE_DEFAULT_UNTIMED_WAITS 65536     /* waits without a deadline, whole server */
#define STORE_LIMIT_LOG_INTERVAL_MS 10000     /* one log line per limit and source per this */
#define STORE_DEFAULT_BUSY_POLL_US 0        /* poll this long after input before sleeping */
#define STORE_TCPSTORE_MAX_PREFIX 256         /* bytes of the TCPStore clients' key prefix */
/*
 * Connections that have not authenticated (docs/security.md, "Before authentication"): a
 * quota of their own, per source (loopback, an IPv4 /24, an IPv6 /64) and for the store, so
 * they never take the slots authenticated clients need, and a short life.
 */
#define STORE_PREAUTH_PER_SOURCE 256     /* at once from one source; the oldest is shed */
#define STORE_PREAUTH_SHARE 4            /* at most 1/4 of the connection cap, all sources */
#define STORE_PREAUTH_MIN 64             /* ... but at least this many */
#define STORE_PREAUTH_TIMEOUT_MS 5000    /* the handshake's deadline from the accept */
#define STORE_PREAUTH_RATE 128           /* new connections per s per source, then ... */
#define STORE_PREAUTH_BURST 1024         /* ... after a burst of this many ... */
#define STORE_PREAUTH_OVER_RATE_MS 1000  /* ... each gets this deadline instead */
#define STORE_PREAUTH_MAX_FRAME 1024     /* bytes of a crun frame before authentication */
#define STORE_PREAUTH_MEMORY_SHARE 8     /* pre-auth buffers: 1/8 of the memory budget */
#define STORE_PREAUTH_LOG_MS 5000        /* one summary line of refusals per this */
#define STORE_ACCEPTS_PER_TURN 64        /* connections accepted per loop turn; more: the next */
/*
 * Stored data (docs/reliability.md, "Stored data"): key + value bytes and keys. The store's
 * budget defaults to the memory budget above (max_memory, given or not): the data and the
 * connections' buffers together then keep the heap near twice that, and a key count of one
 * per 256 budget bytes bounds the table's own overhead (about 150 bytes a key) to less
 * again. Each run's scope gets a quarter of both (four values of the largest size), so one
 * run's token holder fills at most a quarter of the store. Each run's TCPStore namespace (no authentication) gets a fixed quota
 * sized for a 1,000-rank PyTorch bootstrap: torch 1.13's gloo stores W + 3 keys and about
 * 136 W^2 bytes for W ranks, 130 MiB at 1,000 (docs/reliability.md, "Stored data").
 */
#define STORE_DATA_KEY_BYTES 256              /* default keys: one per this many data bytes */
#define STORE_SCOPE_SHARE 4                   /* default scope quota: 1/this of the store's */
#define STORE_DEFAULT_TS_MAX_DATA (160u << 20) /* a TCPStore namespace's bytes */
#define STORE_DEFAULT_TS_MAX_KEYS 65536       /* a TCPStore namespace's keys */

struct store_server_opts {
	const char *listen;        /* "ADDR:PORT" (port 0: pick one); binds exactly ADDR */
	const char *token;         /* required handshake token; NULL: none */
	int max_connections;       /* <=0: default (the lower of the two above) */
	int idle_timeout_ms;       /* close a connection idle this long with no wait pending; <=0: default */
	int max_pending_per_conn;  /* outstanding requests per connection; <=0: default */
	size_t max_value_len;      /* 0: CRUN_STORE_MAX_VALUE_LEN */
	/* Every limit below: 0 (or less) means its STORE_DEFAULT_*. */
	int max_conns_per_addr;    /* connections from one peer address */
	size_t max_memory;         /* bytes of partial frames and held waits, all connections */
	int frame_timeout_ms;      /* a frame's last byte must come this long after its first */
	int max_untimed_waits_per_conn; /* waits without a deadline held by one connection */
	int max_untimed_waits;     /* waits without a deadline held by the whole server */
	int busy_poll_us;          /* after a read, poll this long before sleeping (server_poll.c);
				    * 0: STORE_DEFAULT_BUSY_POLL_US, < 0: never */
	int64_t max_wait_ms;       /* the longest a wait is held (0: no maximum): the deadline
				    * of a wait that gave none, and the cap of longer ones */
	/* Stored data (key + value bytes, keys); 0: the default above. */
	uint64_t max_data;         /* the whole store (default: max_memory) */
	uint64_t max_keys;         /* the whole store (default: max_data / 256) */
	uint64_t scope_max_data;   /* each run's rdzv/<run>/ and <run>/ (default: a quarter) */
	uint64_t scope_max_keys;
	uint64_t tcpstore_max_data; /* each run's <run>/tcpstore/ */
	uint64_t tcpstore_max_keys;
	/* PyTorch TCPStore clients (docs/protocol.md, "TCPStore"): they cannot authenticate,
	 * so they see only the keys of this run's current generation, "<run>/tcpstore/<gen>/"
	 * (rendezvous/rdzv_keys.h; server_tcpstore.c); NULL: refused, with a log line ending in
	 * tcpstore_refusal when given. */
	const char *tcpstore_run;
	const char *tcpstore_refusal;
	/* TLS (docs/security.md): PEM files; none named: plain TCP. With tls_ca, every client
	 * must present a certificate signed by it (mutual TLS). */
	const char *tls_cert;
	const char *tls_key;
	const char *tls_ca;
	/* Same-host clients over AF_UNIX (docs/security.md, "Same-host clients"): NULL: none; "":
	 * the default path for the bound address (rendezvous/store/unix_path.h); else this
	 * path. The socket is removed at close. */
	const char *unix_socket;
	/* "ADDR:PORT": serve Prometheus metrics there (server_metrics.c); NULL: none. */
	const char *metrics_listen;
};

/**
 * Raise this process's soft RLIMIT_NOFILE to its hard limit, as systemd and etcd do: crun-rdzvd
 * at start, the agent before it hosts a store (its workers get back the limit it was given:
 * agent/spawn.h, spawn_keep_nofile()). The
 * connection cap is derived from it. Returns the soft limit now in force, or -errno.
 */
long store_server_raise_nofile(void);

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
