/* SPDX-License-Identifier: MIT */
/* rendezvous/store/store.c: the public store API (include/crun/store.h) over the backend vtable. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>
#include <crun/store.h>

#include "config.h"
#include "rendezvous/store/backend.h"
#include "rendezvous/store/etcd_endpoint.h"
#include "rendezvous/store/store_conf.h"
#include "rendezvous/store/store_runs.h"
#include "rendezvous/store/tls.h"
#include "rendezvous/store/unix_path.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/net.h"
#include "src/common/opts.h"
#include "src/common/parse.h"
#include "src/common/token.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 30000
#define DEFAULT_TIMEOUT_MS 300000

struct crun_store {
	const struct store_ops *ops;
	struct store_backend *b;
	struct store_conf conf;  /* what it was opened with (conf.prefix: the full prefix), for
				    clones and messages */
	struct token_cred cred;  /* the handshake's credential; cred.set false: none */
	const char *prefix;      /* never NULL; "" for none */
	size_t prefix_len;
	char *key;        /* scratch buffer for one full key */
	size_t key_cap;
};

/*
 * Endpoint forms: "file:///abs/path", "tcp://HOST:PORT", "HOST:PORT", "[V6]:PORT", and etcd's
 * "etcd://H:P[,H:P...]", "etcd+https://...", "http://H:P[,...]", "https://...".
 * Anything else is -EINVAL with a message that names the endpoint.
 */
static int open_backend(const struct store_conf *c, const struct token_cred *cred,
			struct store_backend **b, const struct store_ops **ops, struct crun_diag *d)
{
	const char *endpoint = c->endpoint;
	const struct tls_files tls = {c->tls_cert, c->tls_key, c->tls_ca, c->tls_server_name};
	struct store_tcp_link link = {0};
	char host[256];
	const char *hp;
	int port;
	int rc;

	if (endpoint == NULL || *endpoint == '\0') {
		return diag_set(d, -EINVAL,
				"store: no endpoint given (set --endpoint or CRUN_STORE_ENDPOINT)");
	}
	if (strncmp(endpoint, "file://", 7) == 0) {
		const char *path = endpoint + 7;

		if (path[0] != '/') {
			return diag_set(d, -EINVAL,
					"store %s: endpoint: expected file:///ABSOLUTE/PATH", endpoint);
		}
		if (path[strlen(path) - 1] == '/') {
			return diag_set(d, -EINVAL,
					"store %s: endpoint: names a directory, expected a file",
					endpoint);
		}
		return store_file_open(path, c->connect_timeout_ms, b, ops, d);
	}
	if (etcd_is_endpoint(endpoint)) {
		struct etcd_ep *eps;
		size_t n;

		/* The syntax is checked in every build, the backend or not. */
		rc = etcd_parse_endpoints(endpoint, &eps, &n, d);
		if (rc < 0) {
			return rc;
		}
		free(eps);
#if CRUN_HAVE_ETCD
		return store_etcd_open(c, b, ops, d);
#else
		return diag_set(d, -EOPNOTSUPP,
				"store %s: endpoint: this crun was built without the etcd backend "
				"(it needs libcurl and json-c)",
				endpoint);
#endif
	}
	hp = endpoint;
	if (strncmp(endpoint, "tcp://", 6) == 0) {
		hp = endpoint + 6;
	} else if (strstr(endpoint, "://") != NULL) {
		return diag_set(d, -EINVAL,
				"store %s: endpoint: unsupported scheme (expected tcp://, file://, "
				"etcd://, etcd+https://, http:// or https://)",
				endpoint);
	}
	rc = net_parse_hostport(hp, -1, host, sizeof(host), &port);
	if (rc < 0 || port == 0) {
		return diag_set(d, -EINVAL,
				"store %s: endpoint: expected HOST:PORT, [V6]:PORT, tcp://HOST:PORT "
				"or file:///PATH with a port in 1..65535",
				endpoint);
	}
	if (c->unix_socket != NULL && !store_unix_off(c->unix_socket) &&
	    c->unix_socket[0] != '/') {
		return diag_set(d, -EINVAL,
				"%s=%s: expected \"off\" or the absolute path of a store's socket",
				STORE_UNIX_ENV, c->unix_socket);
	}
	link.tls = &tls;
	link.unix_socket = c->unix_socket;
	link.connect_timeout_ms = c->connect_timeout_ms;
	if (c->spin_us != NULL && c->spin_us[0] != '\0') {
		if (parse_int(c->spin_us, 0, STORE_SPIN_US_MAX, &link.spin_us) < 0) {
			return diag_set(d, -EINVAL,
					"%s=%s: expected microseconds in 0..%d (0: no spin)",
					STORE_SPIN_ENV, c->spin_us, STORE_SPIN_US_MAX);
		}
		link.spin_us = link.spin_us == 0 ? -1 : link.spin_us;
	}
	return store_tcp_open_link(host, port, cred, &link, b, ops, d);
}

/* The credential @c names, scoped to c->scope: the token it resolved (named by where it came
 * from), else the file open reads (a token or a scoped credential), else none. */
static int open_cred(const struct store_conf *c, struct token_cred *cred, struct crun_diag *d)
{
	memset(cred, 0, sizeof(*cred));
	if (c->insecure) {
		return 0;
	}
	if (c->token != NULL && c->token[0] != '\0') {
		return token_cred_from_token(cred, c->token, c->scope,
					     c->token_src[0] != '\0' ? c->token_src
								     : "the given token",
					     d);
	}
	if (c->token_file != NULL && c->token_file[0] != '\0') {
		return token_cred_load(cred, c->token_file, c->scope, d);
	}
	return 0;
}

/* A handle on @base's store with prefix @prefix1 + @prefix2 and credential @cred (NULL: read
 * it as @base says). */
static int handle_create(const struct store_conf *base, const struct token_cred *cred,
			 const char *prefix1, const char *prefix2, struct crun_store **out,
			 struct crun_diag *d)
{
	struct store_conf_variant v = {0};
	struct crun_store *st;
	size_t l1, l2;
	char *prefix;
	int rc;

	if (base->endpoint == NULL || *base->endpoint == '\0') {
		return diag_set(d, -EINVAL,
				"store: no endpoint given (set --endpoint or CRUN_STORE_ENDPOINT)");
	}
	l1 = prefix1 ? strlen(prefix1) : 0;
	l2 = prefix2 ? strlen(prefix2) : 0;
	if (l1 + l2 >= CRUN_STORE_MAX_KEY_LEN) {
		return diag_set(d, -EMSGSIZE,
				"store %s: prefix: %zu bytes, longer than the key limit of %d",
				base->endpoint, l1 + l2, CRUN_STORE_MAX_KEY_LEN);
	}
	st = calloc(1, sizeof(*st));
	prefix = malloc(l1 + l2 + 1);
	if (st == NULL || prefix == NULL) {
		free(st);
		free(prefix);
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	if (l1 > 0) {
		memcpy(prefix, prefix1, l1);
	}
	if (l2 > 0) {
		memcpy(prefix + l1, prefix2, l2);
	}
	prefix[l1 + l2] = '\0';
	v.prefix = prefix;
	v.no_prefix = l1 + l2 == 0;
	v.connect_timeout_ms =
		base->connect_timeout_ms > 0 ? base->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	v.timeout_ms = base->timeout_ms > 0 ? base->timeout_ms : DEFAULT_TIMEOUT_MS;
	rc = store_conf_derive(&st->conf, base, &v);
	free(prefix);
	if (rc < 0) {
		free(st);
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	st->prefix = st->conf.prefix != NULL ? st->conf.prefix : "";
	st->prefix_len = strlen(st->prefix);
	if (cred != NULL) {
		st->cred = *cred;
		rc = 0;
	} else {
		rc = open_cred(&st->conf, &st->cred, d);
	}
	if (rc == 0) {
		rc = open_backend(&st->conf, &st->cred, &st->b, &st->ops, d);
	}
	if (rc < 0) {
		explicit_bzero(&st->cred, sizeof(st->cred));
		store_conf_finish(&st->conf);
		free(st);
		return rc;
	}
	*out = st;
	return 0;
}

int store_open_conf(const struct store_conf *c, struct crun_store **out, struct crun_diag *d)
{
	if (c == NULL || out == NULL) {
		return diag_set(d, -EINVAL, "store: open: no configuration or result pointer");
	}
	*out = NULL;
	return handle_create(c, NULL, c->prefix, NULL, out, d);
}

/* struct crun_store_opts as crun 0.2.0 laid it out (struct_size 0): it ended with timeout_ms. */
#define STORE_OPTS_SIZE_0_2 (offsetof(struct crun_store_opts, timeout_ms) + sizeof(int))

CRUN_EXPORT int crun_store_open(const struct crun_store_opts *opts, struct crun_store **out,
				char *err, size_t errlen)
{
	struct crun_store_opts o;
	struct store_conf c;
	struct crun_diag d;
	int rc;

	/* The one place a diag becomes the caller's plain buffer ("" on success). */
	diag_clear(&d);
	if (opts == NULL || out == NULL) {
		rc = diag_set(&d, -EINVAL, "store: open: no options or result pointer");
	} else if (*out = NULL, opts_copy(&o, sizeof(o), opts, STORE_OPTS_SIZE_0_2) < 0) {
		rc = diag_set(&d, -EINVAL, "store: open: options: bad struct_size %zu",
			      opts->struct_size);
	} else if (store_conf_from_opts(&c, &o) < 0) {
		rc = diag_set(&d, -ENOMEM, "store: out of memory");
	} else {
		rc = store_open_conf(&c, out, &d);
		store_conf_finish(&c);
	}
	diag_copy_out(&d, err, errlen);
	return rc;
}

CRUN_EXPORT void crun_store_close(struct crun_store *st)
{
	if (st == NULL) {
		return;
	}
	if (st->ops != NULL) {
		st->ops->close(st->b);
	}
	free(st->key);
	explicit_bzero(&st->cred, sizeof(st->cred));
	store_conf_finish(&st->conf);
	free(st);
}

CRUN_EXPORT int crun_store_clone(struct crun_store *st, const char *subprefix,
				 struct crun_store **out)
{
	if (st == NULL || out == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	return handle_create(&st->conf, &st->cred, st->prefix, subprefix, out, NULL);
}

CRUN_EXPORT const char *crun_store_prefix(const struct crun_store *st)
{
	return st == NULL ? NULL : st->prefix;
}

/* Length of prefix + @key, or a negative code when it is missing or over the limit. */
static int full_len(const struct crun_store *st, const char *key, size_t *len)
{
	size_t l;

	if (key == NULL) {
		return -EINVAL;
	}
	l = st->prefix_len + strlen(key);
	if (l == 0) {
		return -EINVAL;
	}
	if (l > CRUN_STORE_MAX_KEY_LEN) {
		return -EMSGSIZE;
	}
	*len = l;
	return 0;
}

static char *join(const struct crun_store *st, const char *key, size_t len, char *dst)
{
	memcpy(dst, st->prefix, st->prefix_len);
	memcpy(dst + st->prefix_len, key, len - st->prefix_len + 1);
	return dst;
}

/* The full key in the handle's scratch buffer (valid until the next call on @st). */
static int one_key(struct crun_store *st, const char *key, const char **full)
{
	size_t len;
	char *p;
	int rc;

	rc = full_len(st, key, &len);
	if (rc < 0) {
		return rc;
	}
	if (len + 1 > st->key_cap) {
		p = realloc(st->key, len + 1);
		if (p == NULL) {
			return -ENOMEM;
		}
		st->key = p;
		st->key_cap = len + 1;
	}
	*full = join(st, key, len, st->key);
	return 0;
}

/*
 * Full keys for a multi-key request: one allocation holding the pointer array and the
 * strings. Checks every limit before any I/O. The caller frees *out with free().
 */
static int many_keys(struct crun_store *st, const char *const *keys, size_t n, bool allow_empty,
		     const char ***out)
{
	size_t total = 0, len, i;
	const char **arr;
	char *p;
	int rc;

	if (n == 0 && !allow_empty) {
		return -EINVAL;
	}
	if (n > CRUN_STORE_MAX_KEYS) {
		return -EMSGSIZE;
	}
	if (n > 0 && keys == NULL) {
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		rc = full_len(st, keys[i], &len);
		if (rc < 0) {
			return rc;
		}
		total += len + 1;
	}
	arr = malloc(n * sizeof(*arr) + total + 1);
	if (arr == NULL) {
		return -ENOMEM;
	}
	p = (char *)(arr + n);
	for (i = 0; i < n; i++) {
		len = st->prefix_len + strlen(keys[i]);
		arr[i] = join(st, keys[i], len, p);
		p += len + 1;
	}
	*out = arr;
	return 0;
}

static int resolve_timeout(const struct crun_store *st, int timeout_ms)
{
	return timeout_ms < 0 ? st->conf.timeout_ms : timeout_ms;
}

static int check_value(const void *val, size_t len)
{
	if (len > CRUN_STORE_MAX_VALUE_LEN) {
		return -EMSGSIZE;
	}
	if (len > 0 && val == NULL) {
		return -EINVAL;
	}
	return 0;
}

/* A value and its key, checked, the key made full (@*full) for a set, set_async or append. */
static int value_key(struct crun_store *st, const char *key, const void *val, size_t len,
		     const char **full)
{
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	rc = check_value(val, len);
	return rc < 0 ? rc : one_key(st, key, full);
}

/* A set, with a ttl (0: none), waiting for the reply or (@piped, where the backend can) not. */
static int set_one(struct crun_store *st, const char *key, const void *val, size_t len,
		   int64_t ttl_ms, bool piped)
{
	const char *k;
	int rc;

	if (ttl_ms < 0) {
		return -EINVAL;
	}
	rc = value_key(st, key, val, len, &k);
	if (rc < 0) {
		return rc;
	}
	if (piped && st->ops->set_async != NULL) {
		return st->ops->set_async(st->b, k, len ? val : "", len, ttl_ms, st->conf.timeout_ms);
	}
	return st->ops->set(st->b, k, len ? val : "", len, ttl_ms, st->conf.timeout_ms);
}

CRUN_EXPORT int crun_store_set_ttl(struct crun_store *st, const char *key, const void *val,
				   size_t len, int64_t ttl_ms)
{
	return set_one(st, key, val, len, ttl_ms, false);
}

CRUN_EXPORT int crun_store_set(struct crun_store *st, const char *key, const void *val,
			       size_t len)
{
	return set_one(st, key, val, len, 0, false);
}

int store_set_async_ttl(struct crun_store *st, const char *key, const void *val, size_t len,
			int64_t ttl_ms)
{
	return set_one(st, key, val, len, ttl_ms, true);
}

CRUN_EXPORT int crun_store_set_async(struct crun_store *st, const char *key, const void *val,
				     size_t len)
{
	return set_one(st, key, val, len, 0, true);
}

CRUN_EXPORT int crun_store_flush(struct crun_store *st)
{
	if (st == NULL) {
		return -EINVAL;
	}
	return st->ops->flush == NULL ? 0 : st->ops->flush(st->b, st->conf.timeout_ms);
}

CRUN_EXPORT int crun_store_get(struct crun_store *st, const char *key, void **val, size_t *len)
{
	const char *k;
	size_t l;
	int rc;

	if (st == NULL || val == NULL) {
		return -EINVAL;
	}
	*val = NULL;
	rc = one_key(st, key, &k);
	if (rc < 0) {
		return rc;
	}
	rc = st->ops->get(st->b, k, val, &l, st->conf.timeout_ms);
	if (rc == 0 && len != NULL) {
		*len = l;
	}
	return rc;
}

static int do_wait(struct crun_store *st, const char *const *keys, size_t n, bool any,
		   int timeout_ms)
{
	const char **full;
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	rc = many_keys(st, keys, n, !any, &full);
	if (rc < 0) {
		return rc;
	}
	if (n == 0) {
		free(full);
		return 0;
	}
	rc = st->ops->wait(st->b, full, n, any, resolve_timeout(st, timeout_ms));
	free(full);
	return rc;
}

CRUN_EXPORT int crun_store_wait(struct crun_store *st, const char *const *keys, size_t n,
				int timeout_ms)
{
	int rc = do_wait(st, keys, n, false, timeout_ms);

	return rc > 0 ? 0 : rc;
}

CRUN_EXPORT int crun_store_wait_any(struct crun_store *st, const char *const *keys, size_t n,
				    int timeout_ms)
{
	return do_wait(st, keys, n, true, timeout_ms);
}

CRUN_EXPORT int crun_store_wait_get(struct crun_store *st, const char *key, void **val,
				    size_t *len, int timeout_ms)
{
	const char *keys[1] = {key};
	int rc = store_wait_any_get(st, keys, 1, 1, val, len, timeout_ms, NULL);

	return rc < 0 ? rc : 0;
}

int store_wait_any_get(struct crun_store *st, const char *const *keys, size_t n, size_t nval,
		       void **val, size_t *len, int timeout_ms, struct store_wait_mark *mark)
{
	const char **full;
	size_t l = 0;
	int rc;

	if (st == NULL || val == NULL || n == 0) {
		return -EINVAL;
	}
	*val = NULL;
	if (st->ops->wait_get == NULL) {
		if (mark != NULL) {
			mark->rev = 0; /* nothing to resume: the store waits on its own state */
		}
		rc = do_wait(st, keys, n, true, timeout_ms);
		if (rc >= 0 && (size_t)rc < nval && (size_t)rc < n) {
			int g = crun_store_get(st, keys[rc], val, &l);

			rc = g < 0 ? g : rc;
		}
	} else {
		rc = many_keys(st, keys, n, false, &full);
		if (rc < 0) {
			return rc;
		}
		rc = st->ops->wait_get(st->b, full, n, val, &l, resolve_timeout(st, timeout_ms),
				       mark != NULL ? &mark->rev : NULL);
		free(full);
	}
	if (rc < 0 || (size_t)rc >= nval) {
		free(*val);
		*val = NULL;
		l = 0;
	} else if (*val == NULL) {
		rc = -ENOENT; /* the key that ended the wait was gone when its value was read */
	}
	if (rc >= 0 && len != NULL) {
		*len = l;
	}
	return rc;
}

CRUN_EXPORT int crun_store_add(struct crun_store *st, const char *key, int64_t delta,
			       int64_t *result)
{
	const char *k;
	int64_t r;
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	rc = one_key(st, key, &k);
	if (rc < 0) {
		return rc;
	}
	rc = st->ops->add(st->b, k, delta, &r, st->conf.timeout_ms);
	if (rc == 0 && result != NULL) {
		*result = r;
	}
	return rc;
}

/* A ticket (@count false) or the count of tickets taken (@count true): the backend's own op,
 * else its add of 1 or 0. */
static int ticket_op(struct crun_store *st, const char *key, bool count, int64_t *n)
{
	const char *k;
	int rc;

	if (st == NULL || n == NULL) {
		return -EINVAL;
	}
	rc = one_key(st, key, &k);
	if (rc < 0) {
		return rc;
	}
	if (count && st->ops->ticket_count != NULL) {
		return st->ops->ticket_count(st->b, k, n, st->conf.timeout_ms);
	}
	if (!count && st->ops->ticket != NULL) {
		return st->ops->ticket(st->b, k, n, st->conf.timeout_ms);
	}
	return st->ops->add(st->b, k, count ? 0 : 1, n, st->conf.timeout_ms);
}

int store_ticket(struct crun_store *st, const char *key, int64_t *n)
{
	return ticket_op(st, key, false, n);
}

int store_ticket_count(struct crun_store *st, const char *key, int64_t *n)
{
	return ticket_op(st, key, true, n);
}

bool store_has_tickets(const struct crun_store *st)
{
	return st != NULL && st->ops->ticket != NULL;
}

CRUN_EXPORT int crun_store_compare_set(struct crun_store *st, const char *key,
				       const void *expected, size_t elen, const void *desired,
				       size_t dlen, void **cur, size_t *curlen)
{
	const char *k;
	void *c = NULL;
	size_t cl = 0;
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	if (cur != NULL) {
		*cur = NULL;
	}
	rc = check_value(expected, elen);
	if (rc == 0) {
		rc = check_value(desired, dlen);
	}
	if (rc == 0) {
		rc = one_key(st, key, &k);
	}
	if (rc < 0) {
		return rc;
	}
	rc = st->ops->compare_set(st->b, k, elen ? expected : "", elen, dlen ? desired : "", dlen,
				  &c, &cl, st->conf.timeout_ms);
	if (rc < 0) {
		free(c);
		return rc;
	}
	if (cur != NULL) {
		*cur = c;
	} else {
		free(c);
	}
	if (curlen != NULL) {
		*curlen = cl;
	}
	return 0;
}

CRUN_EXPORT int crun_store_delete(struct crun_store *st, const char *key)
{
	const char *k;
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	rc = one_key(st, key, &k);
	if (rc < 0) {
		return rc;
	}
	return st->ops->del(st->b, k, st->conf.timeout_ms);
}

const char *store_last_error(const struct crun_store *st)
{
	if (st == NULL || st->ops == NULL || st->ops->last_error == NULL) {
		return "";
	}
	return st->ops->last_error(st->b);
}

int store_list_runs(struct crun_store *st, uint32_t max, struct store_run **runs, uint32_t *n,
		    uint32_t *total)
{
	*runs = NULL;
	*n = *total = 0;
	if (st == NULL || st->ops->list_runs == NULL) {
		return -EOPNOTSUPP;
	}
	return st->ops->list_runs(st->b, max, runs, n, total, st->conf.timeout_ms);
}

CRUN_EXPORT const char *crun_store_last_error(const struct crun_store *st)
{
	return store_last_error(st);
}

int store_delete_prefix(struct crun_store *st)
{
	if (st == NULL || st->prefix_len == 0) {
		return -EINVAL;
	}
	if (st->ops->del_prefix == NULL) {
		return -EOPNOTSUPP;
	}
	return st->ops->del_prefix(st->b, st->prefix, st->conf.timeout_ms);
}

int store_forget_job(struct crun_store *st, int members, int left_rc, struct crun_diag *d)
{
	int64_t left = 0;
	int rc = 0;

	if (st == NULL || st->ops->del_prefix == NULL) {
		return 0; /* nothing outlives its agents there: a TCP store, a user's file */
	}
	if (st->prefix_len == 0) {
		return diag_set(d, -EINVAL, "store %s: no job prefix: not deleting the whole store",
				st->conf.endpoint);
	}
	if (left_rc == 0) {
		/* Everyone has read the end; only the last to say so may delete what they read. */
		rc = store_ticket(st, "left", &left);
		if (rc == 0 && left < members) {
			return 0;
		}
	}
	if (rc == 0) {
		rc = store_delete_prefix(st);
	}
	if (rc < 0) {
		const char *why = store_last_error(st);
		char hint[CRUN_STORE_MAX_KEY_LEN + 64] = "";

		if (st->ops->forget_hint != NULL) {
			st->ops->forget_hint(st->prefix, hint, sizeof(hint));
		}
		return diag_set(d, rc, "%s%s%s", why[0] != '\0' ? why : crun_strerror(rc),
				hint[0] != '\0' ? "; delete them by hand: " : "", hint);
	}
	return 1;
}

CRUN_EXPORT int crun_store_check(struct crun_store *st, const char *const *keys, size_t n,
				 bool *all)
{
	const char **full;
	int rc;

	if (st == NULL || all == NULL) {
		return -EINVAL;
	}
	rc = many_keys(st, keys, n, true, &full);
	if (rc < 0) {
		return rc;
	}
	if (n == 0) {
		free(full);
		*all = true;
		return 0;
	}
	rc = st->ops->check(st->b, full, n, all, st->conf.timeout_ms);
	free(full);
	return rc;
}

CRUN_EXPORT int crun_store_num_keys(struct crun_store *st, int64_t *n)
{
	if (st == NULL || n == NULL) {
		return -EINVAL;
	}
	return st->ops->num_keys(st->b, n, st->conf.timeout_ms);
}

CRUN_EXPORT int crun_store_append(struct crun_store *st, const char *key, const void *val,
				  size_t len)
{
	const char *k;
	int rc;

	rc = value_key(st, key, val, len, &k);
	if (rc < 0) {
		return rc;
	}
	return st->ops->append(st->b, k, len ? val : "", len, st->conf.timeout_ms);
}

CRUN_EXPORT int crun_store_multi_get(struct crun_store *st, const char *const *keys, size_t n,
				     void **vals, size_t *lens)
{
	const char **full;
	size_t i;
	int rc;

	if (st == NULL || (n > 0 && (vals == NULL || lens == NULL))) {
		return -EINVAL;
	}
	rc = many_keys(st, keys, n, true, &full);
	if (rc < 0) {
		return rc;
	}
	for (i = 0; i < n; i++) {
		vals[i] = NULL;
		lens[i] = 0;
	}
	if (n == 0) {
		free(full);
		return 0;
	}
	rc = st->ops->multi_get(st->b, full, n, vals, lens, st->conf.timeout_ms);
	free(full);
	if (rc < 0) {
		/* All or nothing: the caller has nothing to free after an error. */
		for (i = 0; i < n; i++) {
			free(vals[i]);
			vals[i] = NULL;
			lens[i] = 0;
		}
	}
	return rc;
}

CRUN_EXPORT int crun_store_multi_set(struct crun_store *st, const char *const *keys, size_t n,
				     const void *const *vals, const size_t *lens)
{
	const char **full;
	size_t i;
	int rc;

	if (st == NULL || (n > 0 && (vals == NULL || lens == NULL))) {
		return -EINVAL;
	}
	for (i = 0; i < n && i <= CRUN_STORE_MAX_KEYS; i++) {
		rc = check_value(vals[i], lens[i]);
		if (rc < 0) {
			return rc;
		}
	}
	rc = many_keys(st, keys, n, true, &full);
	if (rc < 0) {
		return rc;
	}
	if (n == 0) {
		free(full);
		return 0;
	}
	rc = st->ops->multi_set(st->b, full, n, vals, lens, st->conf.timeout_ms);
	free(full);
	return rc;
}

CRUN_EXPORT int crun_store_ping(struct crun_store *st)
{
	if (st == NULL) {
		return -EINVAL;
	}
	return st->ops->ping(st->b, st->conf.timeout_ms);
}
