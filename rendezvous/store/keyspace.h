/* SPDX-License-Identifier: MIT */
/* rendezvous/store/keyspace.h: the store server's one keyspace: keys, TTLs, waits (private). */
/*
 * The keyspace is what both of the server's protocols operate on: crun's frames
 * (server_ops.c) and PyTorch's TCPStore requests (server_tcpstore.c) are codecs that decode a
 * request, call one operation here and encode its answer. It holds the key table (a hash
 * table under a secret SipHash key), the TTL deadlines and the held waits; it has no sockets,
 * no event loop and no clock of its own: the caller passes times (milliseconds on any
 * monotonic clock) and runs ks_expire() when ks_next_deadline() comes. A held wait ends
 * through the one callback the caller gives ks_init(), whoever wrote the key.
 * It also keeps the stored data's accounts (ks_set_quotas()): the bytes (key + value) and
 * the keys of the whole store, of each run's scope and of each run's TCPStore namespace,
 * updated by every write, delete and expiry, and checked before a write grows them; each run's
 * account also keeps the wall time of its last change (ks->wall_ms, which the caller sets
 * before a request: the server's LIST_RUNS reports it).
 * Not thread-safe. tests/unit/test_keyspace.c runs it alone.
 */
#ifndef CRUN_RENDEZVOUS_STORE_KEYSPACE_H
#define CRUN_RENDEZVOUS_STORE_KEYSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/common/htab.h"

#define KS_MAX_PREFIX 256 /* bytes of a list's key prefix (TCPStore's namespace) */
#define KS_NO_DEADLINE INT64_MAX

enum ks_wait_mode {
	KS_WAIT_ALL = 0, /* answered when every key is present */
	KS_WAIT_ANY = 1, /* answered when one is, with its index */
};

/* Borrowed bytes. */
struct ks_str {
	const uint8_t *p;
	uint32_t len;
};

/*
 * A list of keys (or key, value pairs) in a codec's own encoding: @next walks it from
 * @list. Every key gets @prefix in front (none when @prefix_len is 0), as TCPStore clients'
 * keys get their run's namespace.
 */
struct ks_list {
	uint32_t n;
	const uint8_t *list;
	struct ks_str (*next)(const uint8_t **cur);
	const uint8_t *prefix;
	uint32_t prefix_len;
};

struct ks_hnode {
	int64_t at;
	size_t idx; /* SIZE_MAX when not in a heap */
};

/* A binary min-heap of deadlines (TTL keys, wait deadlines). */
struct ks_heap {
	struct ks_hnode **a;
	size_t n;
	size_t cap;
};

struct ks_wait;

/* One key of one wait, linked into the key's entry while the key is still awaited. */
struct ks_link {
	struct ks_link *prev;
	struct ks_link *next;
	struct ks_entry *e; /* NULL when not linked */
	struct ks_wait *w;
	uint32_t index;
};

/*
 * Whose quota a key counts against, from the key alone (ks_key_account(), the one place):
 *   rdzv/<run>/...      KS_ACCT_SCOPE <run>     (the run's rendezvous)
 *   <run>/tcpstore/...  KS_ACCT_TCPSTORE <run>  (PyTorch's TCPStore clients of the run)
 *   <run>/...           KS_ACCT_SCOPE <run>     (its workers' keys)
 *   anything else       KS_ACCT_NONE            (the store-wide budget only)
 * (rendezvous/rdzv_keys.h composes these keys; a run-scoped credential reaches only them.)
 */
enum ks_acct_kind {
	KS_ACCT_NONE = 0,
	KS_ACCT_SCOPE = 1,
	KS_ACCT_TCPSTORE = 2,
};

/* One quota: 0 in either field means no bound. */
struct ks_limit {
	uint64_t bytes; /* key + value bytes of present keys */
	uint64_t keys;	/* present keys */
};

struct ks_quotas {
	struct ks_limit total;	  /* the whole store */
	struct ks_limit scope;	  /* each rdzv/<run>/ and <run>/ (not its TCPStore keys) */
	struct ks_limit tcpstore; /* each <run>/tcpstore/ */
};

/* The usage of one run's scope or TCPStore namespace; freed with its last entry. */
struct ks_acct {
	struct htab_node node; /* in accts, by htab_hash(kind + name, seed) */
	uint64_t bytes;
	uint64_t keys;
	int64_t wrote_ms; /* ks->wall_ms at its last write, delete or expiry (0: never set) */
	uint32_t refs; /* entries (present or only waited on) that count here */
	uint8_t kind;  /* enum ks_acct_kind */
	uint32_t nlen;
	uint8_t name[]; /* the run */
};

/* Why the last write returned -EDQUOT (ks_refusal_msg() says it in words). */
struct ks_refusal {
	uint8_t kind;	/* enum ks_acct_kind: KS_ACCT_NONE is the store-wide budget */
	bool keys;	/* the key count (else the bytes) */
	uint64_t limit;
	uint64_t would; /* what the write would have made it */
	char scope[129]; /* the run, cut to 128 bytes */
};

struct ks_entry {
	struct htab_node node; /* in keys, by htab_hash(key, seed) */
	struct ks_acct *acct;  /* NULL: the key is in no run's scope */
	uint8_t *val;	       /* malloc'd when present (NULL for an empty value) */
	uint32_t vlen;
	uint32_t vcap;
	bool present;	     /* false: only waiters keep this entry alive */
	struct ks_hnode ttl; /* in the TTL heap while the key has a TTL */
	struct ks_link *watchers;
	uint32_t klen;
	uint8_t key[];
};

/*
 * A held wait. The keyspace owns the links and the deadline; the fields marked "owner's" are
 * the caller's to use (the server keeps its connection's list and budgets there) and the
 * keyspace never reads them.
 */
struct ks_wait {
	struct ks_wait *prev; /* owner's: its list of waits */
	struct ks_wait *next; /* owner's */
	void *owner;	      /* owner's: the connection */
	int64_t timeout_ms;   /* owner's: for messages */
	size_t cost;	      /* owner's: bytes charged to a budget */
	uint32_t id;	      /* owner's: the request id */
	bool untimed;	      /* owner's */
	bool with_value;      /* owner's: answer with the value of the key that ended it */
	uint8_t mode;	      /* enum ks_wait_mode */
	/* ANY: the entry whose write ended the wait, set for on_wait_done (NULL otherwise). */
	const struct ks_entry *woke;
	struct ks_hnode dl;   /* in the wait heap when it has a deadline */
	uint32_t n;
	uint32_t missing;
	struct ks_link links[];
};

struct keyspace;

/*
 * A held wait ended: @rc is 0 (its keys are written; @index is ANY's key) or -ETIMEDOUT (its
 * deadline passed). @w is unlinked from every key; the keyspace frees it when this returns.
 * The callback must not call into the keyspace except ks_get() and ks_wait_cancel() of
 * *other* waits.
 */
typedef void ks_wait_cb(struct keyspace *ks, struct ks_wait *w, int rc, uint32_t index);

struct keyspace {
	struct htab keys;      /* struct ks_entry: present keys and keys only waited on */
	int64_t nkeys;	       /* present keys */
	uint64_t nbytes;       /* key + value bytes of present keys */
	struct htab accts;     /* struct ks_acct: runs with an entry */
	struct ks_quotas quota;
	struct ks_refusal refused; /* the last -EDQUOT */
	uint64_t nrefused;	   /* writes refused by a quota, ever */
	struct htab_seed seed; /* secret: clients choose keys */
	struct ks_heap ttl;
	struct ks_heap waits;
	uint32_t max_value_len; /* APPEND's bound (SET's is the codec's) */
	int64_t wall_ms;	/* the caller's: wall-clock ms of the request at hand (stamps accounts) */
	ks_wait_cb *on_wait_done;
	void *data; /* the caller's */
};

/**
 * Start an empty keyspace with a random hash key. @max_value_len bounds APPEND's result;
 * @on_wait_done ends held waits. 0, -ENOMEM, or getrandom's negative errno.
 */
int ks_init(struct keyspace *ks, uint32_t max_value_len, ks_wait_cb *on_wait_done, void *data);
/** Free every entry and the table; every wait must be gone (ks_wait_cancel()). */
void ks_finish(struct keyspace *ks);
/** Bound the stored data (none until called; the server's defaults: server.h). */
void ks_set_quotas(struct keyspace *ks, const struct ks_quotas *q);
/**
 * Whose quota key @k counts against: its kind, and the run's name in *@name (@k's bytes,
 * *@nlen long). KS_ACCT_NONE: no run's.
 */
enum ks_acct_kind ks_key_account(struct ks_str k, struct ks_str *name);
/** The usage of run @name's account of @kind, or NULL when it has no key. */
const struct ks_acct *ks_account(struct keyspace *ks, enum ks_acct_kind kind, struct ks_str name);
/**
 * The last refusal (-EDQUOT) in words: which quota, its limit, the scope, into @buf.
 * Returns @buf.
 */
const char *ks_refusal_msg(const struct keyspace *ks, char *buf, size_t len);

/** The present entry of @k, or NULL. Borrowed until the next write. */
const struct ks_entry *ks_get(struct keyspace *ks, struct ks_str k);
/** ks_get() of the next key of @l (its prefix in front); *@cur starts at l->list. */
const struct ks_entry *ks_get_next(struct keyspace *ks, const struct ks_list *l,
				   const uint8_t **cur);
/** Whether every key of @l is present. */
bool ks_check(struct keyspace *ks, const struct ks_list *l);
/** Present keys: all (@prefix_len 0) or those starting with @prefix (a scan). */
int64_t ks_num_keys(struct keyspace *ks, const uint8_t *prefix, uint32_t prefix_len);

/**
 * SET: @k gets the bytes @v (borrowed, copied) and a TTL deadline @expire_at (KS_NO_DEADLINE:
 * none); its waiters are answered. 0, -ENOMEM or -EDQUOT (over a quota: ks->refused says
 * which) with nothing changed. Every write below may return -EDQUOT the same way; a write that
 * does not grow the bytes or the keys never does.
 */
int ks_set(struct keyspace *ks, struct ks_str k, struct ks_str v, int64_t expire_at);
/**
 * ADD: @k (absent: 0) plus @delta, stored as decimal; *@out is the result. 0, -ENOMEM,
 * -EINVAL (the value is not a decimal integer) or -EOVERFLOW; on error nothing changed.
 */
int ks_add(struct keyspace *ks, struct ks_str k, int64_t delta, int64_t *out);
/**
 * COMPARE_SET: when @k's value is @expected (absent matches only the empty @expected), it
 * becomes @desired. *@matched says which. 0 or -ENOMEM (nothing changed).
 */
int ks_cas(struct keyspace *ks, struct ks_str k, struct ks_str expected, struct ks_str desired,
	   bool *matched);
/** DELETE: whether @k was present. */
bool ks_delete(struct keyspace *ks, struct ks_str k);
/**
 * APPEND: @head (@hlen bytes, may be 0) then @v to @k's value (absent: empty), clearing its
 * TTL. 0, -EMSGSIZE (past max_value_len; *@newlen says how long it would be) or -ENOMEM.
 */
int ks_append(struct keyspace *ks, struct ks_str k, const uint8_t *head, uint32_t hlen,
	      struct ks_str v, uint64_t *newlen);
/**
 * MULTI_SET: every key, value pair of @pairs (a list of 2 x pairs->n strings), in one go: no
 * waiter runs before all are written. 0, -ENOMEM or -EDQUOT (the pairs before the failure
 * are set).
 */
int ks_multi_set(struct keyspace *ks, const struct ks_list *pairs);

/* A queue (TCPStore 2.x's QUEUE_*) is a value of items, each a big-endian u32 length + bytes. */
/** Items of @e's queue: 0 for NULL, -1 when the value is not a queue. */
int64_t ks_queue_len(const struct ks_entry *e);
/** QUEUE_PUSH: ks_append() of one item. */
int ks_queue_push(struct keyspace *ks, struct ks_str k, struct ks_str item, uint64_t *newlen);
/**
 * QUEUE_POP: remove the first item of @k's queue; *@item is a malloc'd copy of it (caller
 * frees), *@len its length. 0, -ENOENT (empty or absent), -EINVAL (not a queue),
 * -ENOMEM. An emptied queue is deleted, so a WAIT waits for the next push.
 */
int ks_queue_pop(struct keyspace *ks, struct ks_str k, uint8_t **item, uint32_t *len);

/**
 * Whether a WAIT on @l in @mode is answered now (ALL: every key present; ANY: one is, its
 * index in *@index). An empty list is never ready.
 */
bool ks_wait_ready(struct keyspace *ks, const struct ks_list *l, uint8_t mode, uint32_t *index);
/** Bytes a held wait on @l costs at most (itself, its links, an entry per key). */
size_t ks_wait_cost(const struct ks_list *l);
/**
 * Hold a wait on @l until its keys are written (on_wait_done with 0) or @deadline
 * (KS_NO_DEADLINE: none; on_wait_done with -ETIMEDOUT). Call it when ks_wait_ready() said
 * no. *@out is the wait (owner's fields zeroed), which the keyspace frees after its callback
 * or in ks_wait_cancel(). 0 or -ENOMEM.
 */
int ks_wait_start(struct keyspace *ks, const struct ks_list *l, uint8_t mode, int64_t deadline,
		  struct ks_wait **out);
/** Drop @w without calling back, and free it. */
void ks_wait_cancel(struct keyspace *ks, struct ks_wait *w);

/** The earliest TTL or wait deadline, or KS_NO_DEADLINE. */
int64_t ks_next_deadline(const struct keyspace *ks);
/** Delete the keys whose TTL is at or before @now, then end the waits whose deadline is. */
void ks_expire(struct keyspace *ks, int64_t now);

#endif
