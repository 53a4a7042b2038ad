/* SPDX-License-Identifier: MIT */
/* rendezvous/store/store_conf.h: the store's configuration as one value (private to crun). */
#ifndef CRUN_RENDEZVOUS_STORE_STORE_CONF_H
#define CRUN_RENDEZVOUS_STORE_STORE_CONF_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include <crun/store.h>

#include "src/common/diag.h"

/*
 * Every program of crun (the agent, crun-rdzvd, crun-store, crun status) and libcrun-worker
 * turns what it was told (flags, job file, environment) into one struct store_conf, once, and
 * every store it opens or serves is opened from that value: the backend openers take it
 * (store_open_conf()), the variants it needs (a quick client, the status publisher) are derived
 * from it (store_conf_derive()), and what its workers inherit is computed from it
 * (store_conf_worker_env()). Nothing else assembles struct crun_store_opts from settings, and
 * no backend reads the environment for its own process (docs/security.md, docs/etcd.md).
 */

/* What a program's flags say (all borrowed; NULL or 0: not given). */
struct store_settings {
	const char *endpoint;
	const char *prefix;
	const char *scope;	/* confine the connection to this run's keys */
	bool insecure;		/* --insecure: no credential at all */
	const char *token_file; /* --token-file */
	const char *token;	/* --token (crun-rdzvd, crun-store): less safe than a file */
	const char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
	const char *etcd_user, *etcd_password_file, *etcd_cacert, *etcd_cert, *etcd_key;
	int connect_timeout_ms; /* <= 0: the default (30 s) */
	int timeout_ms;		/* <= 0: the default (300 s) */
};

/*
 * The token policy (docs/security.md, "Tokens"). A flag always wins: --insecure (none),
 * --token-file, --token. Then, in this order, the sources the caller allows:
 */
enum store_token_policy {
	STORE_TOKEN_FLAGS = 0,		/* only what the flags say */
	STORE_TOKEN_ENV = 1u << 0,	/* $CRUN_STORE_TOKEN (always taken out of the environment,
					   so that workers never inherit it) */
	STORE_TOKEN_FRESH = 1u << 1,	/* a fresh random token: a store only this process uses */
	STORE_TOKEN_DEFAULT = 1u << 2,	/* the per-user default token file, when it exists */
	STORE_TOKEN_CREATE = 1u << 3,	/* ... created on first use (with STORE_TOKEN_DEFAULT) */
	STORE_TOKEN_READ = 1u << 4,	/* read a token file's bytes now: a store's host (agent,
					   crun-rdzvd) needs them; a client lets open read it */
	STORE_TOKEN_DROP_ENV = 1u << 5, /* take $CRUN_STORE_TOKEN out of the environment unused
					   (a store with its own access control: file, etcd) */
};

#define STORE_SPIN_ENV "CRUN_STORE_SPIN_US" /* the reply spin, microseconds (backend.h) */

struct store_conf {
	char *endpoint;
	char *prefix; /* NULL: none */
	char *scope;  /* NULL: unscoped */
	bool insecure;
	/* The credential, resolved once: */
	char *token;	  /* the token's bytes (wiped when freed); NULL: none, or a file
			     that open reads (token_file) */
	char *token_file; /* the file it is in (a token or a scoped credential); NULL */
	char token_src[PATH_MAX + 32]; /* where it came from, for messages; "" for none */
	bool token_created;	       /* the default file was created by this resolution */
	bool env_token_dropped;	       /* $CRUN_STORE_TOKEN held a token that was not used */
	char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
	char *etcd_user, *etcd_password_file, *etcd_cacert, *etcd_cert, *etcd_key;
	int connect_timeout_ms, timeout_ms;
	/* Same-host clients over AF_UNIX (rendezvous/store/unix_path.h): $CRUN_STORE_UNIX_SOCKET
	 * as this process found it; NULL: the default paths, "off": none, else that path. */
	char *unix_socket;
	/* The reply spin (rendezvous/store/backend.h): $CRUN_STORE_SPIN_US as this process found
	 * it; NULL: the default. Workers inherit it. */
	char *spin_us;
};

/**
 * Build @c from @s (copied) and resolve its credential by the token policy, @policy a mask
 * of enum store_token_policy. With STORE_TOKEN_ENV or STORE_TOKEN_DROP_ENV, $CRUN_STORE_TOKEN
 * is taken out of the environment (call before any thread starts: unsetenv() is not
 * thread-safe); c->env_token_dropped says whether it held a token left unused. Returns 0 or
 * a negative code with @d saying which source failed. @c: store_conf_finish(), even after a
 * failure.
 */
int store_conf_init(struct store_conf *c, const struct store_settings *s, unsigned policy,
		    struct crun_diag *d);

/** Free and wipe @c; a zeroed @c is a no-op. */
void store_conf_finish(struct store_conf *c);

/* What differs in a derived value (NULL or 0: as in the base). */
struct store_conf_variant {
	const char *endpoint;
	const char *prefix;
	bool no_prefix; /* drop the base's prefix */
	const char *scope;
	int connect_timeout_ms, timeout_ms;
};

/** A deep copy of @base with @v's changes (NULL: none). Returns 0 or -ENOMEM. */
int store_conf_derive(struct store_conf *out, const struct store_conf *base,
		      const struct store_conf_variant *v);

/**
 * The options a backend opener takes, borrowing @c's strings (valid while @c is): the only
 * place that fills struct crun_store_opts from settings. The token file, when there is one,
 * names the credential (so that a mismatch names the file); else the token.
 */
void store_conf_opts(const struct store_conf *c, struct crun_store_opts *o);

/**
 * The value a public crun_store_opts describes (libcrun-worker's programs, tests): its
 * fields, and the etcd settings of this process's environment (CRUN_ETCD_USER,
 * CRUN_ETCD_PASSWORD_FILE, CRUN_ETCD_CACERT, CRUN_ETCD_CERT, CRUN_ETCD_KEY), which is how a
 * worker learns them (docs/etcd.md). The credential is left for open to read. 0 or -ENOMEM.
 */
int store_conf_from_opts(struct store_conf *c, const struct crun_store_opts *o);

/**
 * The etcd settings a worker (or a user) exported, CRUN_ETCD_USER, CRUN_ETCD_PASSWORD_FILE,
 * CRUN_ETCD_CACERT, CRUN_ETCD_CERT and CRUN_ETCD_KEY, into those of @s that are not given.
 * The strings are the environment's: use @s before the environment changes.
 */
void store_settings_etcd_env(struct store_settings *s);

/* One variable of a worker's environment: set to @val; when @val is NULL, removed, or left
 * as the agent's environment has it when @keep. */
struct store_env_var {
	const char *name;
	const char *val;
	bool keep;
};
#define STORE_CONF_ENV_MAX 12

/**
 * What workers inherit from @c (borrowed): CRUN_STORE_ENDPOINT, the TLS files' paths
 * (CRUN_STORE_TLS_*, removed when not given, so that a stale one cannot turn TLS on), the
 * etcd settings (CRUN_ETCD_*, a value the user exported stays when crun was given none,
 * except CRUN_ETCD_PASSWORD_FILE: only the job's etcd store's, else removed),
 * CRUN_STORE_TOKEN_FILE = @cred_file (the workers' own credential; NULL: none) and never
 * CRUN_STORE_TOKEN. Fills @out and returns how many entries it used.
 */
size_t store_conf_worker_env(const struct store_conf *c, const char *cred_file,
			     struct store_env_var out[STORE_CONF_ENV_MAX]);

struct store_server_opts;

/**
 * The credential and TLS files a store's host serves with, from @c (borrowed, valid while @c
 * is): the one place that fills them in struct store_server_opts (rendezvous/store/server.h);
 * the listen address, limits and TCPStore settings are the host's own.
 */
void store_conf_server_opts(const struct store_conf *c, struct store_server_opts *o);

/** Replace @c's endpoint (the agent learns it once its store is bound). 0 or -ENOMEM. */
int store_conf_set_endpoint(struct store_conf *c, const char *endpoint);

/**
 * Open the store @c describes: the one open path (crun_store_open() goes through it too).
 * Returns 0 with *out, or a negative code with @d saying why (as crun_store_open()).
 */
int store_open_conf(const struct store_conf *c, struct crun_store **out, struct crun_diag *d);

/**
 * The job is over for every node and this node was a member of its last round (@members
 * nodes); @left_rc is what the wait for the others to leave said. Where the store keeps the
 * job's keys after its agents are gone (etcd), delete them once no member can still be
 * waiting on one: every member counts itself in "left" under @st's prefix, and the last one
 * deletes everything under the prefix (a member whose wait failed deletes at once). Returns
 * 1 when this node deleted them, 0 when another will (or the store forgets by itself: a TCP
 * store ends with its host, a file store is the user's file), or a negative code with @d
 * saying how to delete them by hand.
 */
int store_forget_job(struct crun_store *st, int members, int left_rc, struct crun_diag *d);

/**
 * store.c: crun_store_set_async() with a time to live (crun_store_set_ttl()'s @ttl_ms; 0: none):
 * sent without waiting for the reply where the backend can (crun's store), so a caller that
 * follows it with a request it must wait for anyway pays one round trip for both. A failure
 * is returned by the next call on @st (include/crun/store.h); elsewhere it sets at once.
 */
int store_set_async_ttl(struct crun_store *st, const char *key, const void *val, size_t len,
			int64_t ttl_ms);

/**
 * store.c: a counter that many agents bump by exactly one at once (a round's joins, its
 * finishes). store_ticket() counts one more at @key and sets *@n to the count with it (1 for
 * the first); store_ticket_count() reads the count (0 while absent). Where the backend has
 * native tickets (etcd: the key's version, one blind put per ticket, backend.h) the key holds
 * a marker, not a number, and must never be add()ed; elsewhere a ticket is add(key, 1) and
 * the count add(key, 0). Returns 0 or a negative code (store_last_error() says why; on etcd,
 * a key that holds an older crun's number instead of the marker is CRUN_EVERSION, named).
 */
int store_ticket(struct crun_store *st, const char *key, int64_t *n);
int store_ticket_count(struct crun_store *st, const char *key, int64_t *n);
/** Whether @st counts tickets natively (etcd): then a ticket counter holds no sum. */
bool store_has_tickets(const struct crun_store *st);

/**
 * Where a store_wait_any_get() left off, so that the next wait on the same keys (or fewer of
 * them) need not read them again: on etcd, the revision its watch resumes from (0: read
 * first). Zero it before the first wait of a series; a backend without the notion keeps it 0.
 * Only for a series in which none of the keys is deleted: a resumed wait reports the writes
 * since the mark, and the key that ended the last wait again if it is waited for again.
 */
struct store_wait_mark {
	int64_t rev;
};

/**
 * store.c: crun_store_wait_any() that also returns the value of the key that ended the wait,
 * when it is one of the first @nval keys (*@val malloc'd, NUL-terminated past *@len; else, and
 * on error, NULL): the wait and a get of that key, in one request fewer where the backend
 * reads it in the wait itself (etcd); elsewhere the get only for those keys. With @mark
 * (NULL: none) a wait resumes where the last one of the series left off (above). Returns the
 * key's index or a negative code (-ENOENT: deleted between the wait and the get).
 */
int store_wait_any_get(struct crun_store *st, const char *const *keys, size_t n, size_t nval,
		       void **val, size_t *len, int timeout_ms, struct store_wait_mark *mark);

/**
 * store.c: the message of @st's last failed operation, where the backend keeps one: which
 * store, and what happened ("store H:P: connection refused by H:P (...)", "store file://P:
 * damaged record at byte offset N ..."). "" when it has none. Valid until the next call on @st.
 */
const char *store_last_error(const struct crun_store *st);

#endif
