/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_internal.h: what the etcd backend's files share (private). */
#ifndef CRUN_RENDEZVOUS_STORE_CLIENT_ETCD_INTERNAL_H
#define CRUN_RENDEZVOUS_STORE_CLIENT_ETCD_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/store/backend.h"
#include "rendezvous/store/etcd_endpoint.h"
#include "src/common/diag.h"

/*
 * The etcd v3 backend speaks etcd's JSON gateway (/v3/kv/range, /v3/kv/txn, /v3/watch, ...)
 * over libcurl, with json-c. docs/etcd.md describes the key layout and the semantics.
 *   etcd_endpoint.c      pure: the grammar of member lists (etcd_endpoint.h, also crun's
 *                        --rdzv-endpoint; always built); base64 is src/common/base64.h
 *   client_etcd_http.c   one POST with fail-over between endpoints, error mapping, auth,
 *                        streamed replies, JSON helpers
 *   client_etcd_grpc.c   the unary KV calls to http:// members over gRPC (HTTP/2,
 *                        etcd_kv.proto), converted from and to the same JSON (protobuf-c)
 *   client_etcd.c        the store operations
 *   client_etcd_open.c   open: endpoints, TLS files and credentials from the environment
 *   client_etcd_wait.c   consistent multi-key reads, waits on watches, history look-ups
 */

/* Every key lives under this root, then the handle's prefix: "/crun/<prefix><key>". */
#define ETCD_ROOT "/crun/"
#define ETCD_ROOT_LEN 6
/* etcd's own cap on a lease's TTL, in seconds (lease.MaxLeaseTTL); longer TTLs never expire. */
#define ETCD_MAX_LEASE_TTL_S 9000000000LL
/* etcd's default --max-txn-ops: reads of more keys are split into transactions this big. */
#define ETCD_TXN_CHUNK 128
/*
 * What an operation returns when no member could serve it because the cluster has no leader
 * (every member that answered said "no leader": its quorum is lost). Not -ETIMEDOUT, which the
 * rendezvous reads as "nothing happened yet, keep waiting": this is a store failure.
 */
#define ETCD_ENOLEADER (-EHOSTDOWN)

/* ---- client_etcd.c ---- */

extern const struct store_ops etcd_store_ops;
/** Free a handle and everything it holds (its ops->close). NULL is a no-op. */
void etcd_backend_free(struct store_backend *b);

/* ---- client_etcd_http.c ---- */

struct json_object;
struct etcd_stream;

/* A streamed reply's messages, one at a time: return 0 to go on, 1 to stop, < 0 to fail. */
typedef int (*etcd_msg_cb)(struct store_backend *b, struct json_object *msg, void *arg);

struct curl_lib;

struct store_backend {
	const struct curl_lib *cu; /* libcurl's functions (curl_lib.h); NULL until loaded */
	void *curl;                /* CURL *: calls; single-threaded, like the handle */
	void *scurl;               /* CURL *: streams (watches) */
	void *share;               /* CURLSH *: TLS sessions and DNS, shared by the two */
	void *hdrs;                /* struct curl_slist *: the request headers */
	struct etcd_ep *eps;
	size_t neps;
	size_t cur;                /* the endpoint that answered last: tried first */
	char *cacert, *cert, *key; /* TLS files from the environment; NULL: none */
	char *user;                /* CRUN_ETCD_USER; NULL: no authentication */
	char *password;
	char *token;               /* from /v3/auth/authenticate; NULL: none yet */
	int connect_timeout_ms;
	bool maybe_applied;        /* the last etcd_call() retried after an answer it lost */
	bool opening;              /* in store_etcd_open(): errors go to its caller */
	unsigned seed;             /* rand_r(): seeds each retry loop's backoff jitter */
	char *rx;                  /* the reply body being read */
	size_t rx_len, rx_cap;
	int rx_err;                /* why reading it stopped: -EMSGSIZE, -ENOMEM; 0: it did not */
	int sends;                 /* requests the transfer sent (libcurl may send one again) */
	struct etcd_stream *stream; /* during etcd_stream() */
	/* gRPC (client_etcd_grpc.c): the unary KV calls to http:// members */
	void *gcurl;               /* CURL *: HTTP/2, one connection; NULL: gRPC not built */
	void *ghdrs;               /* struct curl_slist *: its headers (gRPC metadata) */
	const char *gmethod;       /* the call in flight: "Range", ...; NULL: the gateway */
	char *gbody;               /* its request, prefixed */
	size_t gblen;
	const struct etcd_ep *gep; /* the member the last gRPC call reached; NULL: none */
	/* An https member answered a gRPC call over HTTP/1.1 (nothing on the way agreed on
	 * HTTP/2): this handle's calls to https members use the gateway from then on. */
	bool grpc_tls_off;
	int gstatus;               /* grpc-status of the answer; -1: none seen */
	char gmsg[256];            /* grpc-message */
	struct {
		char *key;         /* the key add/append last wrote (a small value); NULL: none */
		void *val;         /* what it wrote, */
		size_t len;
		int64_t mod_revision; /* at this revision: the guess its next compare starts from */
	} last;
	struct {
		char *key;         /* the key last written with a TTL; NULL: none */
		int64_t ttl_s;
		int64_t id;        /* its lease, kept alive while the same key is rewritten */
	} lease;
	char errbuf[256];          /* curl's error text */
	int os_errno;              /* the last attempt's connect errno (curl's), or 0 */
	bool served;               /* a call past the open has been answered */
	bool keepalive;            /* in a lease keep-alive: its caller reports a failure */
	char where[300];           /* "store etcd://..." */
	struct crun_diag diag;     /* the last error: "store etcd://...: OP: why" */
};

/** client_etcd.c: the deadline of an operation given @timeout_ms (< 0: 300 s). */
int64_t etcd_deadline_of(int timeout_ms);

/* ---- client_etcd_ticket.c: the ticket ops (backend.h), on a key's version ---- */
int etcd_ticket(struct store_backend *b, const char *key, int64_t *n, int timeout_ms);
int etcd_ticket_count(struct store_backend *b, const char *key, int64_t *n, int timeout_ms);

/** Record an error "<where>: <fmt...>" in b->diag; returns @code. */
int etcd_fail(struct store_backend *b, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/** libcurl loaded (once per process, curl_lib.h), the easy handles and their fixed options. */
int etcd_http_init(struct store_backend *b);
void etcd_http_finish(struct store_backend *b);
/**
 * POST @req (borrowed) to @path, trying the endpoints in turn from the last one that answered
 * and sweeping again with backoff while none can serve it, until @deadline or the connect
 * timeout, whichever comes first. On 0, *@reply (caller json_object_put()s) is the answer.
 * Sets b->maybe_applied when an attempt that etcd may have applied was retried. Returns 0,
 * -ETIMEDOUT (no endpoint could serve it; the message names each and why), ETCD_ENOLEADER
 * (the same, and the members that answered had no leader), CRUN_EAUTH (etcd refused it, or
 * TLS failed), -EMSGSIZE (a limit of etcd's), -ENOENT (etcd's NotFound), -ESTALE (a compacted
 * revision), CRUN_ESERVER or another negative code, with "<where>: <op>: ..." in b->diag.
 * Failures the caller's code alone would not explain (a give-up, CRUN_EAUTH, CRUN_ESERVER)
 * are logged as warnings too, except while opening. @op names the operation and its key.
 */
int etcd_call(struct store_backend *b, const char *op, const char *path, struct json_object *req,
	      struct json_object **reply, int64_t deadline);
/**
 * POST @req to a streaming @path (a watch) on the current endpoint and hand each message to
 * @cb until it returns non-zero or @deadline. @req is one request, or a JSON array of requests
 * sent one after another on the same stream (several watches). Returns 1 (stopped by @cb),
 * -ETIMEDOUT at the deadline, -EAGAIN when the stream broke or the endpoint failed (the next
 * endpoint is made current: re-read and call again), or a final error as etcd_call().
 */
int etcd_stream(struct store_backend *b, const char *op, const char *path,
		struct json_object *req, etcd_msg_cb cb, void *arg, int64_t deadline);
/** Log in as b->user (an empty token when etcd has no auth enabled). */
int etcd_authenticate(struct store_backend *b, int64_t deadline);
/** Whether etcd's error (gRPC @code, @msg) is one another member, or a later try, may not have. */
bool etcd_transient(int code, const char *msg);
/** Map an error etcd reported (gRPC @code, @msg) for @op to a return code, in b->diag. */
int etcd_map_error(struct store_backend *b, const char *op, int code, const char *msg);

/* JSON helpers: builders return NULL only when out of memory. */
/** ETCD_ROOT + @key, base64, as a JSON string. */
struct json_object *etcd_jkey(struct store_backend *b, const char *key);
/** ETCD_ROOT + @key + @suffix (@slen bytes, may hold NUL), base64. */
struct json_object *etcd_jkey_suffix(struct store_backend *b, const char *key,
				     const void *suffix, size_t slen);
struct json_object *etcd_jbytes(const void *p, size_t n);
/** An int64 as etcd's JSON writes it: a decimal string. */
struct json_object *etcd_jint(int64_t v);
/** Add @v (taken) to @o under @k; a NULL @o or @v sets *@bad. */
void etcd_jset(struct json_object *o, const char *k, struct json_object *v, bool *bad);
/** Append @v (taken) to the array @a; a NULL @a or @v sets *@bad. */
void etcd_jpush(struct json_object *a, struct json_object *v, bool *bad);
/** A member, or NULL. */
struct json_object *etcd_jget(struct json_object *o, const char *k);
/** An int64 member (a string or a number); 0 when absent, as proto3 JSON omits zeros. */
int64_t etcd_jget_int(struct json_object *o, const char *k);
bool etcd_jget_bool(struct json_object *o, const char *k);
/** header.revision of a reply. */
int64_t etcd_revision(struct json_object *reply);
/**
 * A base64 member decoded into a malloc'd, NUL-terminated buffer (caller frees); absent is
 * empty. Returns 0, -EPROTO (not base64) or -ENOMEM.
 */
int etcd_jget_bytes(struct json_object *o, const char *k, void **p, size_t *n);

/* ---- client_etcd_grpc.c (built with protobuf-c: CRUN_ETCD_GRPC) ---- */
/**
 * The gRPC request for the gateway @path's JSON @req: 1 with *@method ("Range", "Put",
 * "DeleteRange", "Txn") and *@body (malloc'd, gRPC-prefixed, @len bytes); 0 when @path is
 * no KV call (it stays on the gateway); < 0 with b->diag set (a member not in etcd_kv.proto).
 */
int etcd_grpc_encode(struct store_backend *b, const char *op, const char *path,
		     struct json_object *req, const char **method, char **body, size_t *len);
/** The answer (gRPC-prefixed, @len bytes) to @method as the gateway's JSON; 0 or < 0. */
int etcd_grpc_decode(struct store_backend *b, const char *op, const char *method,
		     const char *rx, size_t len, struct json_object **out);
/** libcurl's header callback (headers and trailers): b->gstatus and b->gmsg. */
size_t etcd_grpc_on_header(char *p, size_t size, size_t nmemb, void *arg);
/** b->ghdrs for b->gcurl: content type, trailers, and the gateway's metadata. 0 or -ENOMEM. */
int etcd_grpc_headers(struct store_backend *b);
/** Before a call on @c (b->gcurl) to @ep: its HTTP version (libcurl 7.88.1's bug). */
void etcd_grpc_prepare(struct store_backend *b, void *c, const struct etcd_ep *ep);
/**
 * After a call came back from @ep with no transport error: 0 with *@reply (the gateway's
 * JSON); 1: etcd's error in b->gstatus and b->gmsg; -ECONNRESET (not served: retry),
 * -ETIMEDOUT (HTTP 5xx: retry), or a final negative code; b->diag says why.
 */
int etcd_grpc_answer(struct store_backend *b, void *c, const char *op, const struct etcd_ep *ep,
		     long http, struct json_object **reply);

/* ---- client_etcd_wait.c ---- */

/* What a consistent read found for one key. */
struct etcd_kv {
	bool found;
	void *val;           /* malloc'd, NUL-terminated; NULL when not asked for or absent */
	size_t len;
	int64_t mod_revision;
	int64_t lease;       /* its lease; 0: none */
};

/**
 * Read @n keys (presence only, or values too when @values) at one revision: one range per
 * key, ETCD_TXN_CHUNK to a transaction, every transaction after the first pinned to the
 * first's revision (*@rev). @out[i] is filled; on error nothing in it needs freeing.
 */
int etcd_read_many(struct store_backend *b, const char *op, const char *const *keys, size_t n,
		   bool values, struct etcd_kv *out, int64_t *rev, int64_t deadline);
void etcd_kvs_free(struct etcd_kv *kv, size_t n);
/** The backend's wait (ALL: 0; ANY: the index), on a watch from the read's revision. */
int etcd_wait(struct store_backend *b, const char *const *keys, size_t n, bool any,
	      int timeout_ms);
/** etcd_wait() ANY that also returns the value of the key that ended it, from the read or
 * the watch event that saw it (malloc'd, NUL-terminated, *@val NULL on error). @mark (NULL:
 * none; backend.h): *@mark > 0 watches from that revision without reading first; set to the
 * revision to resume from next, or 0 when the next wait must read. */
int etcd_wait_get(struct store_backend *b, const char *const *keys, size_t n, void **val,
		  size_t *len, int timeout_ms, int64_t *mark);
/**
 * The first write to @key after revision @rev (history): *@found, and when it was a put
 * (*@put) its value (malloc'd, caller frees). Bounded by @deadline. Returns 0 or < 0.
 */
int etcd_first_write_after(struct store_backend *b, const char *key, int64_t rev, bool *found,
			   bool *put, void **val, size_t *len, int64_t deadline);

/* How the endpoints of one sweep failed. */
struct sweep {
	bool said;     /* a member answered with an error */
	bool refused;  /* every connection was refused */
	bool noleader; /* a member answered "no leader" */
	bool silent;   /* nothing came back at all: every attempt timed out */
	char sum[sizeof(((struct crun_diag *)0)->msg)];
	char brief[200]; /* "h1:p1 connection refused; h2:p2 etcdserver: no leader" */
};

/* ---- client_etcd_sweep.c ---- */

/* Endpoint @ep failed @op with @rc (b->diag says how): into the sweep's record @cur. */
void etcd_sweep_note(struct sweep *cur, const struct store_backend *b, const struct etcd_ep *ep,
		     const char *op, int rc);
/* @op was served by no member within @ms (sweep @s): b->diag says so; the code to return. */
int etcd_give_up(struct store_backend *b, const char *op, const struct sweep *s, int ms);
/* The progress line of @op, unserved since @start and tried until @until. */
void etcd_progress(const struct store_backend *b, const char *op, const struct sweep *s,
		   int64_t start, int64_t until);

#endif
