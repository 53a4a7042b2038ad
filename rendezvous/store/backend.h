/* SPDX-License-Identifier: MIT */
/* rendezvous/store/backend.h: the interface every store backend implements (private). */
#ifndef CRUN_RENDEZVOUS_STORE_BACKEND_H
#define CRUN_RENDEZVOUS_STORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/store.h>

#include "rendezvous/store/store_conf.h"

#include "src/common/diag.h"

/*
 * rendezvous/store/store.c owns struct crun_store: it parses the endpoint, picks the backend,
 * prefixes every key, checks sizes against the limits, and then calls these with FULL keys
 * (prefix applied). @timeout_ms is always resolved (>= 0) by the generic layer.
 * Semantics and return codes are those documented in include/crun/store.h.
 */
struct store_backend;
struct store_run;

struct store_ops {
	const char *name; /* "tcp", "file", "etcd" */
	int (*set)(struct store_backend *b, const char *key, const void *val, size_t len,
		   int64_t ttl_ms /* 0: no ttl */, int timeout_ms);
	/* Optional (NULL: set() is used): set without waiting for the reply; a failure is
	   returned by a later call (include/crun/store.h, crun_store_set_async()). */
	int (*set_async)(struct store_backend *b, const char *key, const void *val, size_t len,
			 int64_t ttl_ms /* 0: no ttl */, int timeout_ms);
	/* Optional (NULL: nothing is ever owed): wait for every set_async's reply. */
	int (*flush)(struct store_backend *b, int timeout_ms);
	int (*get)(struct store_backend *b, const char *key, void **val, size_t *len,
		   int timeout_ms);
	/* any=false: all keys; returns 0. any=true: returns index of an existing key. */
	int (*wait)(struct store_backend *b, const char *const *keys, size_t n, bool any,
		    int timeout_ms);
	/*
	 * Optional (NULL: wait(any=true), then get() of the key it returns): wait(any=true) that
	 * also returns the value of the key that ended it, as the backend saw it then (*@val
	 * malloc'd and NUL-terminated past *@len; NULL on error). etcd reads it in the wait's
	 * own read or watch event: one request fewer than the wait and a get. With @mark (NULL:
	 * none), store_conf.h's struct store_wait_mark: *@mark > 0 resumes from there instead of
	 * reading the keys; set to where this wait left off, or 0.
	 */
	int (*wait_get)(struct store_backend *b, const char *const *keys, size_t n, void **val,
			size_t *len, int timeout_ms, int64_t *mark);
	int (*add)(struct store_backend *b, const char *key, int64_t delta, int64_t *result,
		   int timeout_ms);
	/*
	 * Optional (NULL: add(key, 1) and add(key, 0)): a counter that many writers bump by
	 * exactly one at once. ticket() counts one more at @key and returns the count with it
	 * (1 for the first); ticket_count() reads the count (0: absent). A ticket counter is
	 * only ever bumped with ticket(), never with add(): etcd counts it in the key's version
	 * (a blind put, no compare, so N tickets at once are N raft commits, not N^2).
	 */
	int (*ticket)(struct store_backend *b, const char *key, int64_t *n, int timeout_ms);
	int (*ticket_count)(struct store_backend *b, const char *key, int64_t *n, int timeout_ms);
	int (*compare_set)(struct store_backend *b, const char *key, const void *expected,
			   size_t elen, const void *desired, size_t dlen, void **cur,
			   size_t *curlen, int timeout_ms);
	int (*del)(struct store_backend *b, const char *key, int timeout_ms);
	int (*check)(struct store_backend *b, const char *const *keys, size_t n, bool *all,
		     int timeout_ms);
	int (*num_keys)(struct store_backend *b, int64_t *n, int timeout_ms);
	int (*append)(struct store_backend *b, const char *key, const void *val, size_t len,
		      int timeout_ms);
	int (*multi_get)(struct store_backend *b, const char *const *keys, size_t n, void **vals,
			 size_t *lens, int timeout_ms);
	int (*multi_set)(struct store_backend *b, const char *const *keys, size_t n,
			 const void *const *vals, const size_t *lens, int timeout_ms);
	int (*ping)(struct store_backend *b, int timeout_ms);
	/* Optional: why the last operation failed, in words ("store <where>: ..."; "" if none). */
	const char *(*last_error)(const struct store_backend *b);
	/* Optional (NULL: the backend cannot): delete every key that starts with @prefix. */
	int (*del_prefix)(struct store_backend *b, const char *prefix, int timeout_ms);
	/* Optional (NULL: cannot): the runs the store holds (store_runs.h, store_list_runs()). */
	int (*list_runs)(struct store_backend *b, uint32_t max, struct store_run **runs,
			 uint32_t *n, uint32_t *total, int timeout_ms);
	/* Optional, with del_prefix: the command that deletes @prefix's keys by hand. */
	void (*forget_hint)(const char *prefix, char *buf, size_t cap);
	void (*close)(struct store_backend *b);
};

/*
 * Opened by the generic layer according to the endpoint scheme. On failure @d (may be NULL)
 * says why, "store <where>: <what>: <why>" (an allocation failure leaves it as it was).
 */
struct token_cred;
struct tls_files;
/* @cred (borrowed, copied; NULL or cred->set false: none) is what the handshake proves. */
int store_tcp_open(const char *host, int port, const struct token_cred *cred,
		   int connect_timeout_ms, struct store_backend **out, const struct store_ops **ops,
		   struct crun_diag *d);
/*
 * A client waiting for a reply polls its socket without sleeping for up to this long first
 * (client_tcp_io.c, "The reply spin"); $CRUN_STORE_SPIN_US (store_conf.h) sets it, 0 turns
 * it off.
 */
#define STORE_SPIN_US_DEFAULT 30
#define STORE_SPIN_US_MAX 1000

/* How a crun-protocol connection is made and how it waits (all borrowed; zero: defaults). */
struct store_tcp_link {
	/* TLS on the connection (rendezvous/store/tls.h), the token handshake then running
	 * inside it; NULL or no file named: plain TCP. */
	const struct tls_files *tls;
	const char *unix_socket; /* the same-host socket setting (store_conf's); NULL: default */
	int connect_timeout_ms;	 /* <= 0: 30 s */
	int spin_us;		 /* the reply spin (client_tcp_io.c); 0: the default, < 0: none */
};
/* store_tcp_open() with the whole of @l. */
int store_tcp_open_link(const char *host, int port, const struct token_cred *cred,
			const struct store_tcp_link *l, struct store_backend **out,
			const struct store_ops **ops, struct crun_diag *d);
int store_file_open(const char *path, int connect_timeout_ms, struct store_backend **out,
		    const struct store_ops **ops, struct crun_diag *d);
/*
 * The etcd v3 backend (client_etcd*.c, built when libcurl and json-c are found: then
 * CRUN_HAVE_ETCD is 1). @endpoint is the whole list, "etcd://H:P[,H:P...]",
 * "etcd+https://..." or "http(s)://H:P[,...]" (@c->endpoint); TLS files and credentials
 * come from @c's etcd settings (docs/etcd.md), never from the environment. Nobody answering
 * within @c->connect_timeout_ms is -ETIMEDOUT.
 */
struct store_conf;
int store_etcd_open(const struct store_conf *c, struct store_backend **out,
		    const struct store_ops **ops, struct crun_diag *d);

/**
 * store.c, for the agent that ends a job: delete every key under @st's prefix (which must not
 * be empty). Returns 0, -EOPNOTSUPP where the backend cannot (only etcd can), -EINVAL, or the
 * backend's error.
 */
int store_delete_prefix(struct crun_store *st);

/* store_last_error(): declared in store_conf.h, crun's own store interface. */

/** client_tcp.c: the last error message of a TCP backend handle ("store H:P: OP: why"). */
const char *store_tcp_last_error(const struct store_backend *b);
/** client_file.c: why a file handle refused its file ("store file://P: why"; "" if never). */
const char *store_file_last_error(const struct store_backend *b);
/** client_etcd.c: the same for an etcd handle ("store etcd://...: OP: why"). */
const char *store_etcd_last_error(const struct store_backend *b);
/**
 * Send every later call of @b (an etcd handle) through etcd's JSON gateway, as a build
 * without gRPC does (client_etcd_grpc.c): bench/etcd_cost measures the two side by side.
 */
void store_etcd_gateway_only(struct store_backend *b);

#endif
