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
#include "rendezvous/store/client_etcd_parse.h"
#include "rendezvous/store/tls.h"
#include "src/common/util.h"
#include "src/common/diag.h"
#include "src/common/net.h"
#include "src/common/opts.h"
#include "src/common/token.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 30000
#define DEFAULT_TIMEOUT_MS 300000

struct crun_store {
	const struct store_ops *ops;
	struct store_backend *b;
	char *endpoint;   /* as given, for clone and messages */
	struct token_cred cred; /* the handshake's credential; cred.set false: none */
	struct tls_files tls;   /* malloc'd paths (NULL: none), for clones */
	char *prefix;     /* never NULL; "" for none */
	size_t prefix_len;
	int connect_timeout_ms;
	int timeout_ms;
	char *key;        /* scratch buffer for one full key */
	size_t key_cap;
};

/*
 * Endpoint forms: "file:///abs/path", "tcp://HOST:PORT", "HOST:PORT", "[V6]:PORT", and etcd's
 * "etcd://H:P[,H:P...]", "etcd+https://...", "http://H:P[,...]", "https://...".
 * Anything else is -EINVAL with a message that names the endpoint.
 */
static int open_backend(const char *endpoint, const struct token_cred *cred,
			const struct tls_files *tls, int connect_timeout_ms,
			struct store_backend **b, const struct store_ops **ops, struct crun_diag *d)
{
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
		return store_file_open(path, connect_timeout_ms, b, ops, d);
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
		return store_etcd_open(endpoint, connect_timeout_ms, b, ops, d);
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
	return store_tcp_open_tls(host, port, cred, tls, connect_timeout_ms, b, ops, d);
}

static void tls_files_free(struct tls_files *t)
{
	free((char *)t->cert);
	free((char *)t->key);
	free((char *)t->ca);
	free((char *)t->server_name);
	memset(t, 0, sizeof(*t));
}

/* A copy of @in's paths into @t (NULL stays NULL). 0 or -ENOMEM. */
static int tls_files_copy(struct tls_files *t, const struct tls_files *in)
{
	memset(t, 0, sizeof(*t));
	if (in == NULL) {
		return 0;
	}
	t->cert = in->cert != NULL ? crun_strdup(in->cert) : NULL;
	t->key = in->key != NULL ? crun_strdup(in->key) : NULL;
	t->ca = in->ca != NULL ? crun_strdup(in->ca) : NULL;
	t->server_name = in->server_name != NULL ? crun_strdup(in->server_name) : NULL;
	if ((in->cert != NULL && t->cert == NULL) || (in->key != NULL && t->key == NULL) ||
	    (in->ca != NULL && t->ca == NULL) ||
	    (in->server_name != NULL && t->server_name == NULL)) {
		tls_files_free(t);
		return -ENOMEM;
	}
	return 0;
}

static int handle_create(const char *endpoint, const struct token_cred *cred,
			 const struct tls_files *tls, const char *prefix1, const char *prefix2,
			 int connect_timeout_ms, int timeout_ms, struct crun_store **out,
			 struct crun_diag *d)
{
	struct crun_store *st;
	size_t l1, l2;
	int rc;

	if (endpoint == NULL || *endpoint == '\0') {
		return diag_set(d, -EINVAL,
				"store: no endpoint given (set --endpoint or CRUN_STORE_ENDPOINT)");
	}
	l1 = prefix1 ? strlen(prefix1) : 0;
	l2 = prefix2 ? strlen(prefix2) : 0;
	if (l1 + l2 >= CRUN_STORE_MAX_KEY_LEN) {
		return diag_set(d, -EMSGSIZE,
				"store %s: prefix: %zu bytes, longer than the key limit of %d",
				endpoint, l1 + l2, CRUN_STORE_MAX_KEY_LEN);
	}
	st = calloc(1, sizeof(*st));
	if (st == NULL) {
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	st->connect_timeout_ms =
		connect_timeout_ms > 0 ? connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	st->timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
	st->endpoint = crun_strdup(endpoint);
	if (cred != NULL) {
		st->cred = *cred;
	}
	st->prefix = malloc(l1 + l2 + 1);
	if (st->endpoint == NULL || st->prefix == NULL || tls_files_copy(&st->tls, tls) < 0) {
		rc = diag_set(d, -ENOMEM, "store: out of memory");
		goto err;
	}
	if (l1 > 0) {
		memcpy(st->prefix, prefix1, l1);
	}
	if (l2 > 0) {
		memcpy(st->prefix + l1, prefix2, l2);
	}
	st->prefix[l1 + l2] = '\0';
	st->prefix_len = l1 + l2;
	rc = open_backend(endpoint, &st->cred, &st->tls, st->connect_timeout_ms, &st->b, &st->ops,
			  d);
	if (rc < 0) {
		goto err;
	}
	*out = st;
	return 0;
err:
	free(st->prefix);
	tls_files_free(&st->tls);
	memset(&st->cred, 0, sizeof(st->cred));
	free(st->endpoint);
	free(st);
	return rc;
}

/* struct crun_store_opts as crun 0.2.0 laid it out (struct_size 0): it ended with timeout_ms. */
#define STORE_OPTS_SIZE_0_2 (offsetof(struct crun_store_opts, timeout_ms) + sizeof(int))

/* The credential @o names: a token file, else a token, else none; scoped to o->scope. */
static int open_cred(const struct crun_store_opts *o, struct token_cred *c, struct crun_diag *d)
{
	memset(c, 0, sizeof(*c));
	if (o->token_file != NULL && o->token_file[0] != '\0') {
		return token_cred_load(c, o->token_file, o->scope, d);
	}
	if (o->token != NULL && o->token[0] != '\0') {
		return token_cred_from_token(c, o->token, o->scope, "the given token", d);
	}
	return 0;
}

CRUN_EXPORT int crun_store_open(const struct crun_store_opts *opts, struct crun_store **out,
				char *err, size_t errlen)
{
	struct crun_store_opts o;
	struct token_cred cred;
	struct crun_diag d;
	int rc;

	/* The one place a diag becomes the caller's plain buffer ("" on success). */
	diag_clear(&d);
	if (opts == NULL || out == NULL) {
		rc = diag_set(&d, -EINVAL, "store: open: no options or result pointer");
	} else if (*out = NULL, opts_copy(&o, sizeof(o), opts, STORE_OPTS_SIZE_0_2) < 0) {
		rc = diag_set(&d, -EINVAL, "store: open: options: bad struct_size %zu",
			      opts->struct_size);
	} else if ((rc = open_cred(&o, &cred, &d)) == 0) {
		struct tls_files tls = {o.tls_cert, o.tls_key, o.tls_ca, o.tls_server_name};

		rc = handle_create(o.endpoint, &cred, &tls, o.prefix, NULL, o.connect_timeout_ms,
				   o.timeout_ms, out, &d);
		memset(&cred, 0, sizeof(cred));
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
	free(st->prefix);
	tls_files_free(&st->tls);
	memset(&st->cred, 0, sizeof(st->cred));
	free(st->endpoint);
	free(st);
}

CRUN_EXPORT int crun_store_clone(struct crun_store *st, const char *subprefix,
				 struct crun_store **out)
{
	if (st == NULL || out == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	return handle_create(st->endpoint, &st->cred, &st->tls, st->prefix, subprefix,
			     st->connect_timeout_ms, st->timeout_ms, out, NULL);
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
	return timeout_ms < 0 ? st->timeout_ms : timeout_ms;
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

CRUN_EXPORT int crun_store_set_ttl(struct crun_store *st, const char *key, const void *val,
				   size_t len, int64_t ttl_ms)
{
	const char *k;
	int rc;

	if (st == NULL || ttl_ms < 0) {
		return -EINVAL;
	}
	rc = check_value(val, len);
	if (rc == 0) {
		rc = one_key(st, key, &k);
	}
	if (rc < 0) {
		return rc;
	}
	return st->ops->set(st->b, k, len ? val : "", len, ttl_ms, st->timeout_ms);
}

CRUN_EXPORT int crun_store_set(struct crun_store *st, const char *key, const void *val,
			       size_t len)
{
	return crun_store_set_ttl(st, key, val, len, 0);
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
	rc = st->ops->get(st->b, k, val, &l, st->timeout_ms);
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
	rc = st->ops->add(st->b, k, delta, &r, st->timeout_ms);
	if (rc == 0 && result != NULL) {
		*result = r;
	}
	return rc;
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
				  &c, &cl, st->timeout_ms);
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
	return st->ops->del(st->b, k, st->timeout_ms);
}

const char *store_last_error(const struct crun_store *st)
{
	if (st == NULL || st->ops == NULL || st->ops->last_error == NULL) {
		return "";
	}
	return st->ops->last_error(st->b);
}

int store_delete_prefix(struct crun_store *st)
{
	if (st == NULL || st->prefix_len == 0) {
		return -EINVAL;
	}
	if (st->ops->del_prefix == NULL) {
		return -EOPNOTSUPP;
	}
	return st->ops->del_prefix(st->b, st->prefix, st->timeout_ms);
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
	rc = st->ops->check(st->b, full, n, all, st->timeout_ms);
	free(full);
	return rc;
}

CRUN_EXPORT int crun_store_num_keys(struct crun_store *st, int64_t *n)
{
	if (st == NULL || n == NULL) {
		return -EINVAL;
	}
	return st->ops->num_keys(st->b, n, st->timeout_ms);
}

CRUN_EXPORT int crun_store_append(struct crun_store *st, const char *key, const void *val,
				  size_t len)
{
	const char *k;
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	rc = check_value(val, len);
	if (rc == 0) {
		rc = one_key(st, key, &k);
	}
	if (rc < 0) {
		return rc;
	}
	return st->ops->append(st->b, k, len ? val : "", len, st->timeout_ms);
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
	rc = st->ops->multi_get(st->b, full, n, vals, lens, st->timeout_ms);
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
	rc = st->ops->multi_set(st->b, full, n, vals, lens, st->timeout_ms);
	free(full);
	return rc;
}

CRUN_EXPORT int crun_store_ping(struct crun_store *st)
{
	if (st == NULL) {
		return -EINVAL;
	}
	return st->ops->ping(st->b, st->timeout_ms);
}
