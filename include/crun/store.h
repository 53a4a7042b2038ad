/* SPDX-License-Identifier: MIT */
/* include/crun/store.h: the key-value store that agents and workers meet through. */
#ifndef CRUN_STORE_H
#define CRUN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One interface over every backend (TCP store daemon "HOST:PORT" or "tcp://HOST:PORT",
 * shared file "file:///path", etcd v3 cluster "etcd://HOST:PORT[,HOST:PORT...]"). Semantics
 * follow torch's TCPStore where they overlap; docs/etcd.md lists etcd's few differences.
 * A handle is blocking and NOT thread-safe: use one handle per thread (open more, they are
 * cheap). Every key argument is borrowed and is relative to the handle's prefix.
 */
struct crun_store;

/* Wire-level limits every backend enforces (docs/protocol.md). */
#define CRUN_STORE_MAX_KEY_LEN 4096
#define CRUN_STORE_MAX_VALUE_LEN (16u << 20)
#define CRUN_STORE_MAX_KEYS 4096

/*
 * Options structs can grow at their end (see libcrun-worker(3), "OPTIONS STRUCTS"): start from
 * CRUN_STORE_OPTS_INIT, which sets struct_size, then assign the fields you need. A struct_size
 * of 0 (e.g. "= {0}") means the crun 0.2.0 layout.
 */
struct crun_store_opts {
	size_t struct_size;     /* set by CRUN_STORE_OPTS_INIT; 0: the 0.2.0 layout */
	const char *endpoint;   /* "HOST:PORT", "tcp://HOST:PORT", "[V6]:PORT", "file:///PATH",
				   "etcd://HOST:PORT[,HOST:PORT...]", "etcd+https://..." */
	const char *prefix;     /* prepended to every key; NULL or "" for none */
	const char *token;      /* shared secret for the handshake; NULL for none (less safe
				   than token_file: prefer that) */
	int connect_timeout_ms; /* retry with backoff+jitter until this deadline; <=0: 30000 */
	int timeout_ms;         /* default deadline of one operation; <=0: 300000 */
	/* Added after 0.2.0 (a struct_size of 0 leaves them out): */
	const char *token_file; /* a 0600 file holding the token, or the job credential crun
				   gives workers (CRUN_STORE_TOKEN_FILE); wins over token */
	const char *scope;      /* a run id: confine the connection to that run's keys; NULL
				   for none */
	/* TLS to a crun store (tcp:// endpoints; docs/security.md): any file named turns it
	   on. Paths to PEM files; NULL for none. */
	const char *tls_ca;     /* the CA the store's certificate is verified against */
	const char *tls_cert;   /* our certificate, for mutual TLS (with tls_key) */
	const char *tls_key;    /* our private key, a file only we can read */
	const char *tls_server_name; /* the name the store's certificate carries; NULL: the
					endpoint's host */
};

#ifdef __cplusplus
/*
 * C++ before C++20 has no designated initialisers: every field, in order. The api tests
 * compile this with -Wextra -Werror, so a field added above without a value here fails them.
 */
#define CRUN_STORE_OPTS_INIT                                                                   \
	{ sizeof(struct crun_store_opts), NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL }
#else
#define CRUN_STORE_OPTS_INIT { .struct_size = sizeof(struct crun_store_opts) }
#endif

/**
 * Connect to (or open) the store. On success *out is owned by the caller (crun_store_close()).
 * Returns 0; when no server could be reached within the connect timeout, the cause of the last
 * try: -ECONNREFUSED, -EHOSTUNREACH/-ENETUNREACH, or -ETIMEDOUT (no answer in time); -EINVAL
 * (endpoint does not parse, or a garbage opts->struct_size), CRUN_EVERSION/CRUN_EMAGIC/CRUN_EAUTH
 * (handshake refused: a different token, none where one is required, or one where the store has
 * none; for a file store: another format version, or not a store file), -EACCES (a token file
 * readable by others or not ours), -EBADMSG (a damaged file store), or another negative code.
 * @err, if not NULL, receives a one-line human message ("store: connection refused by
 * 127.0.0.1:29400 (waited 30.0 s)", "store file:///p: damaged record at byte offset 96 ...").
 */
CRUN_EXPORT int crun_store_open(const struct crun_store_opts *opts, struct crun_store **out,
				char *err, size_t errlen);
/** Close and free; NULL is a no-op. */
CRUN_EXPORT void crun_store_close(struct crun_store *st);

/** A new handle to the same store with prefix = parent prefix + @subprefix. */
CRUN_EXPORT int crun_store_clone(struct crun_store *st, const char *subprefix,
				 struct crun_store **out);

/** Set @key to @val (borrowed). */
CRUN_EXPORT int crun_store_set(struct crun_store *st, const char *key, const void *val,
			       size_t len);
/** Set with a time-to-live: the key disappears @ttl_ms after this write unless written again. */
CRUN_EXPORT int crun_store_set_ttl(struct crun_store *st, const char *key, const void *val,
				   size_t len, int64_t ttl_ms);
/**
 * Set @key to @val (borrowed) without waiting for the store's answer (CRUN_WORKER_1.3):
 * requests keep their order on the handle's connection, so a later operation on this handle
 * sees the value. A set the store refuses (a full quota), or one whose connection is lost
 * before the answer (it may or may not be stored: it is never sent again), is returned by the
 * next call on this handle, whatever it is, with crun_store_last_error() naming the key and
 * the store's words; that call's own request is then not run to completion (it may have been
 * sent: its connection is dropped). crun_store_flush() waits for every answer. At most 1024
 * sets (4 MiB of them) are unanswered at a time: the next one first reads the answers.
 * Returns 0 when sent, a local error (-EINVAL, -EMSGSIZE), or an earlier set's failure.
 * Backends other than TCP set synchronously.
 */
CRUN_EXPORT int crun_store_set_async(struct crun_store *st, const char *key, const void *val,
				     size_t len);
/**
 * Wait for the answers to every crun_store_set_async() on this handle (the handle's timeout).
 * Returns 0 when each was stored, else the first failure (later ones counted in the message).
 */
CRUN_EXPORT int crun_store_flush(struct crun_store *st);
/**
 * Non-blocking get. On success *val is a malloc'd copy, NUL-terminated for convenience (not
 * counted in *len), owned by the caller (free()). Returns -ENOENT when the key is absent.
 */
CRUN_EXPORT int crun_store_get(struct crun_store *st, const char *key, void **val, size_t *len);
/**
 * Wait until every key in @keys exists, or @timeout_ms passes (-ETIMEDOUT; <0 uses the
 * handle's default). The server holds the reply: no polling on the wire.
 */
CRUN_EXPORT int crun_store_wait(struct crun_store *st, const char *const *keys, size_t n,
				int timeout_ms);
/**
 * Wait until ANY key in @keys exists. Returns the index (>= 0) of one that exists, or a
 * negative code (-ETIMEDOUT).
 */
CRUN_EXPORT int crun_store_wait_any(struct crun_store *st, const char *const *keys, size_t n,
				    int timeout_ms);
/**
 * Blocking get (TCPStore's get): wait until @key exists, or @timeout_ms passes (-ETIMEDOUT;
 * <0 uses the handle's default), then return its value as crun_store_get() does. One round
 * trip on crun's store (the wait's reply carries the value), not a wait and a get.
 */
CRUN_EXPORT int crun_store_wait_get(struct crun_store *st, const char *key, void **val,
				    size_t *len, int timeout_ms);
/** Atomically add @delta to the 64-bit counter at @key (created at 0); *result = new value. */
CRUN_EXPORT int crun_store_add(struct crun_store *st, const char *key, int64_t delta,
			       int64_t *result);
/**
 * If the current value equals @expected (a missing key matches an empty @expected), set
 * @desired. Either way *cur (malloc'd, caller frees; may be NULL to skip) receives the value
 * now stored: @desired when the swap happened. Returns 0 either way.
 */
CRUN_EXPORT int crun_store_compare_set(struct crun_store *st, const char *key,
				       const void *expected, size_t elen, const void *desired,
				       size_t dlen, void **cur, size_t *curlen);
/** Delete @key. Returns 0 if it was deleted, -ENOENT if it did not exist. */
CRUN_EXPORT int crun_store_delete(struct crun_store *st, const char *key);
/** *all = whether every key exists now (no waiting). */
CRUN_EXPORT int crun_store_check(struct crun_store *st, const char *const *keys, size_t n,
				 bool *all);
/** Number of keys in the whole store (all prefixes), as TCPStore's num_keys. */
CRUN_EXPORT int crun_store_num_keys(struct crun_store *st, int64_t *n);
/** Append @val to @key (created empty when missing). */
CRUN_EXPORT int crun_store_append(struct crun_store *st, const char *key, const void *val,
				  size_t len);
/**
 * Get @n keys at once. On success vals[i] is malloc'd (caller frees each) or NULL when key i
 * is absent (lens[i] = 0).
 */
CRUN_EXPORT int crun_store_multi_get(struct crun_store *st, const char *const *keys, size_t n,
				     void **vals, size_t *lens);
/** Set @n keys at once, atomically with respect to other clients. */
CRUN_EXPORT int crun_store_multi_set(struct crun_store *st, const char *const *keys, size_t n,
				     const void *const *vals, const size_t *lens);
/** Round trip to the server (the file backend checks the file is readable). */
CRUN_EXPORT int crun_store_ping(struct crun_store *st);

/**
 * Why the last failed call on @st failed, in words ("store H:P: SET \"k\" (sent without
 * waiting) was refused: ..."); "" when none did. Borrowed, valid until the next call on @st.
 */
CRUN_EXPORT const char *crun_store_last_error(const struct crun_store *st);

/** The handle's prefix (borrowed, valid until close). */
CRUN_EXPORT const char *crun_store_prefix(const struct crun_store *st);

#ifdef __cplusplus
}
#endif

#endif
