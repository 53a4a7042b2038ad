/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd.c: the etcd v3 store backend's operations (docs/etcd.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/backend.h"
#include "rendezvous/store/client_etcd_internal.h"
#include "src/common/backoff.h"
#include "src/common/clock.h"
#include "src/common/log.h"
#include "src/common/parse.h"

/* How long a look into the history may take to settle an ambiguous write. */
#define RESOLVE_MS 5000
/* An operation's name and key in messages: "add /crun/job/r/0/joined". */
#define LABEL_MAX 200
/*
 * A compare lost twice in a row means others write the key at the same time: the next try
 * waits a random time in [0, window) first; the window starts here and doubles with each loss
 * up to the cap. N writers retrying at once would cost N transactions per success (N^2 for N
 * adds, each a raft proposal); spread out, about one lands per try. 1,000 agents joining a
 * round at once push the window to the cap.
 */
#define CONFLICT_FIRST_MS 4
#define CONFLICT_MAX_MS 2048

int64_t etcd_deadline_of(int timeout_ms)
{
	return crun_now_ms() + (timeout_ms < 0 ? 300000 : timeout_ms);
}

static int oom(struct store_backend *b)
{
	return etcd_fail(b, -ENOMEM, "out of memory");
}

/* "OP ETCD_ROOT+KEY" into @buf, for messages: etcd's own name of the key (cut at 160 bytes). */
static const char *label(char *buf, size_t cap, const char *op, const char *key)
{
	size_t kl = strlen(key);

	snprintf(buf, cap, "%s %s%.*s%s", op, ETCD_ROOT, (int)(kl > 160 ? 160 : kl), key,
		 kl > 160 ? "..." : "");
	return buf;
}

/* {"key": ROOT+key} */
static struct json_object *key_obj(struct store_backend *b, const char *key, bool *bad)
{
	struct json_object *o = json_object_new_object();

	etcd_jset(o, "key", etcd_jkey(b, key), bad);
	return o;
}

/* {"request_put": {"key": ROOT+key, "value": val}} */
static struct json_object *put_op(struct store_backend *b, const char *key, const void *val,
				  size_t len, bool *bad)
{
	struct json_object *put = key_obj(b, key, bad), *op = json_object_new_object();

	etcd_jset(put, "value", etcd_jbytes(val, len), bad);
	etcd_jset(op, "request_put", put, bad);
	return op;
}

/* The first kv of a range answer into @kv (a copy of its value); absent: found = false. */
static int kv_from_range(struct store_backend *b, struct json_object *range, struct etcd_kv *kv)
{
	struct json_object *kvs = etcd_jget(range, "kvs"), *first;
	int rc;

	memset(kv, 0, sizeof(*kv));
	if (kvs == NULL || !json_object_is_type(kvs, json_type_array) ||
	    json_object_array_length(kvs) == 0) {
		return 0;
	}
	first = json_object_array_get_idx(kvs, 0);
	rc = etcd_jget_bytes(first, "value", &kv->val, &kv->len);
	if (rc < 0) {
		return etcd_fail(b, rc, "range: %s", rc == -ENOMEM ? "out of memory" : "bad base64");
	}
	kv->found = true;
	kv->mod_revision = etcd_jget_int(first, "mod_revision");
	kv->lease = etcd_jget_int(first, "lease");
	return 0;
}

/* Range one key: *@kv, and the revision it was read at in *@rev. */
static int read_one(struct store_backend *b, const char *op, const char *key, struct etcd_kv *kv,
		    int64_t *rev, int64_t deadline)
{
	struct json_object *req, *rep = NULL;
	bool bad = false;
	int rc;

	memset(kv, 0, sizeof(*kv));
	req = key_obj(b, key, &bad);
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, op, "/v3/kv/range", req, &rep, deadline);
	json_object_put(req);
	if (rc == 0) {
		rc = kv_from_range(b, rep, kv);
		if (rev != NULL) {
			*rev = etcd_revision(rep);
		}
	}
	json_object_put(rep);
	return rc;
}

/* The compare that holds while @key is as @seen found it: same mod_revision, or still absent. */
static struct json_object *cmp_unchanged(struct store_backend *b, const char *key,
					 const struct etcd_kv *seen, bool *bad)
{
	struct json_object *c = key_obj(b, key, bad);

	if (seen->found) {
		etcd_jset(c, "target", json_object_new_string("MOD"), bad);
		etcd_jset(c, "mod_revision", etcd_jint(seen->mod_revision), bad);
	} else {
		etcd_jset(c, "target", json_object_new_string("VERSION"), bad);
		etcd_jset(c, "version", etcd_jint(0), bad);
	}
	etcd_jset(c, "result", json_object_new_string("EQUAL"), bad);
	return c;
}

/*
 * One transaction: if @cmp (taken) holds, put @val at @key (*@ok = true); otherwise range
 * @key into *@now (caller frees now->val). *@rev: the revision of the answer.
 */
static int put_if(struct store_backend *b, const char *op, const char *key,
		  struct json_object *cmp, const void *val, size_t len, bool *ok,
		  struct etcd_kv *now, int64_t *rev, int64_t deadline)
{
	struct json_object *req = json_object_new_object(), *arr, *fail, *rep = NULL, *r;
	bool bad = false;
	int rc;

	memset(now, 0, sizeof(*now));
	*ok = false;
	arr = json_object_new_array();
	etcd_jpush(arr, cmp, &bad);
	etcd_jset(req, "compare", arr, &bad);
	arr = json_object_new_array();
	etcd_jpush(arr, put_op(b, key, val, len, &bad), &bad);
	etcd_jset(req, "success", arr, &bad);
	arr = json_object_new_array();
	fail = json_object_new_object();
	etcd_jset(fail, "request_range", key_obj(b, key, &bad), &bad);
	etcd_jpush(arr, fail, &bad);
	etcd_jset(req, "failure", arr, &bad);
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, op, "/v3/kv/txn", req, &rep, deadline);
	json_object_put(req);
	if (rc < 0) {
		return rc;
	}
	*rev = etcd_revision(rep);
	*ok = etcd_jget_bool(rep, "succeeded");
	if (!*ok) {
		r = etcd_jget(rep, "responses");
		r = r && json_object_is_type(r, json_type_array) && json_object_array_length(r) > 0
			    ? json_object_array_get_idx(r, 0)
			    : NULL;
		rc = kv_from_range(b, etcd_jget(r, "response_range"), now);
	}
	json_object_put(rep);
	return rc;
}

/*
 * After a failed compare that followed an attempt etcd may have applied: was the first write
 * to @key after @rev (what the compare was made against) our own @val?
 */
static bool was_ours(struct store_backend *b, const char *key, int64_t rev, const void *val,
		     size_t len, int64_t deadline)
{
	int64_t until = crun_now_ms() + RESOLVE_MS;
	bool found = false, put = false, ours;
	void *v = NULL;
	size_t vl = 0;

	if (until > deadline) {
		until = deadline;
	}
	if (etcd_first_write_after(b, key, rev, &found, &put, &v, &vl, until) < 0) {
		log_warn("%s: cannot tell whether a write to %s whose answer was lost took "
			 "effect (%s); assuming it did not",
			 b->where, key, b->diag.msg);
		return false;
	}
	ours = found && put && vl == len && (len == 0 || memcmp(v, val, len) == 0);
	free(v);
	log_debug("%s: a write to %s whose answer was lost %s", b->where, key,
		  ours ? "took effect" : "did not take effect");
	return ours;
}

/* ---- operations ---- */

/* A lease of @ttl_s for @key: the one this handle last used for @key, kept alive, or a new one. */
static int lease_for(struct store_backend *b, const char *key, int64_t ttl_s, int64_t *id,
		     int64_t deadline)
{
	struct json_object *req, *rep = NULL;
	bool bad = false;
	char op[LABEL_MAX];
	int rc;

	if (b->lease.key != NULL && b->lease.ttl_s == ttl_s && strcmp(b->lease.key, key) == 0) {
		req = json_object_new_object();
		etcd_jset(req, "ID", etcd_jint(b->lease.id), &bad);
		if (bad) {
			json_object_put(req);
			return oom(b);
		}
		b->keepalive = true;
		rc = etcd_call(b, label(op, sizeof(op), "lease keepalive for", key),
			       "/v3/lease/keepalive", req, &rep, deadline);
		b->keepalive = false;
		json_object_put(req);
		if (rc == 0 && etcd_jget_int(etcd_jget(rep, "result"), "TTL") > 0) {
			json_object_put(rep);
			*id = b->lease.id;
			return 0;
		}
		json_object_put(rep);
		rep = NULL;
		if (rc < 0 && rc != -ENOENT) {
			return rc;
		}
	}
	free(b->lease.key);
	b->lease.key = NULL;
	req = json_object_new_object();
	etcd_jset(req, "TTL", etcd_jint(ttl_s), &bad);
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, label(op, sizeof(op), "lease grant for", key), "/v3/lease/grant", req,
		       &rep, deadline);
	json_object_put(req);
	if (rc < 0) {
		return rc;
	}
	*id = etcd_jget_int(rep, "ID");
	if (etcd_jget_int(rep, "TTL") > ttl_s) {
		log_debug("%s: etcd granted %lld s for a TTL of %lld s (its minimum lease TTL)",
			  b->where, (long long)etcd_jget_int(rep, "TTL"), (long long)ttl_s);
	}
	json_object_put(rep);
	if (*id == 0) {
		return etcd_fail(b, -EPROTO, "%s: no lease ID in etcd's answer", op);
	}
	b->lease.key = strdup(key);
	b->lease.ttl_s = ttl_s;
	b->lease.id = *id;
	return 0;
}

static int etcd_set(struct store_backend *b, const char *key, const void *val, size_t len,
		    int64_t ttl_ms, int timeout_ms)
{
	int64_t deadline = etcd_deadline_of(timeout_ms), lease = 0, ttl_s;
	struct json_object *req, *rep = NULL;
	bool bad = false;
	char op[LABEL_MAX];
	int rc, tries = 0;

again:
	/* etcd counts leases in whole seconds and grants at least its minimum TTL: a key
	 * lives at least @ttl_ms. A TTL past etcd's largest lease is "never". */
	ttl_s = ttl_ms / 1000 + (ttl_ms % 1000 != 0);
	if (ttl_ms > 0 && ttl_s <= ETCD_MAX_LEASE_TTL_S) {
		rc = lease_for(b, key, ttl_s, &lease, deadline);
		if (rc < 0) {
			return rc;
		}
	}
	req = key_obj(b, key, &bad);
	etcd_jset(req, "value", etcd_jbytes(val, len), &bad);
	if (lease != 0) {
		etcd_jset(req, "lease", etcd_jint(lease), &bad);
	}
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, label(op, sizeof(op), "put", key), "/v3/kv/put", req, &rep, deadline);
	json_object_put(req);
	json_object_put(rep);
	if (rc == -ENOENT && lease != 0 && tries++ == 0) {
		/* The lease expired between keepalive and put: take a new one. */
		free(b->lease.key);
		b->lease.key = NULL;
		lease = 0;
		goto again;
	}
	return rc;
}

static int etcd_get(struct store_backend *b, const char *key, void **val, size_t *len,
		    int timeout_ms)
{
	struct etcd_kv kv;
	char op[LABEL_MAX];
	int rc;

	rc = read_one(b, label(op, sizeof(op), "get", key), key, &kv, NULL,
		      etcd_deadline_of(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	if (!kv.found) {
		return -ENOENT;
	}
	*val = kv.val;
	*len = kv.len;
	return 0;
}

static int etcd_backend_wait(struct store_backend *b, const char *const *keys, size_t n,
			     bool any, int timeout_ms)
{
	return etcd_wait(b, keys, n, any, timeout_ms);
}

static void forget(struct store_backend *b)
{
	free(b->last.key);
	free(b->last.val);
	b->last.key = NULL;
	b->last.val = NULL;
}

/* Remember (a small) @val as what @key holds at @rev: the next update's first guess. */
static void remember(struct store_backend *b, const char *key, const void *val, size_t len,
		     int64_t rev)
{
	forget(b);
	if (len > 4096) {
		return;
	}
	b->last.key = strdup(key);
	b->last.val = malloc(len + 1);
	if (b->last.key == NULL || b->last.val == NULL) {
		forget(b);
		return;
	}
	memcpy(b->last.val, val, len);
	((char *)b->last.val)[len] = '\0';
	b->last.len = len;
	b->last.mod_revision = rev;
}

/* What this handle last wrote to @key, as if just read (a guess: the compare checks it). */
static bool recall(struct store_backend *b, const char *key, struct etcd_kv *kv, int64_t *rev)
{
	if (b->last.key == NULL || strcmp(b->last.key, key) != 0) {
		return false;
	}
	memset(kv, 0, sizeof(*kv));
	kv->val = malloc(b->last.len + 1);
	if (kv->val == NULL) {
		return false;
	}
	memcpy(kv->val, b->last.val, b->last.len + 1);
	kv->len = b->last.len;
	kv->found = true;
	kv->mod_revision = *rev = b->last.mod_revision;
	return true;
}

/*
 * Read, compute, write if unchanged, retried on conflict: add and append. @next computes the
 * new value from the current one into a malloc'd buffer, or fails (its code is returned).
 * The first try starts from what this handle wrote last, when it was this key: a counter one
 * handle keeps adding to costs one transaction per add, not a read and a transaction.
 * @fresh: read the key first instead (add 0 reads a counter; nothing is written when the
 * value would not change and no TTL is to be cleared).
 */
typedef int (*next_fn)(struct store_backend *b, const char *key, const struct etcd_kv *cur,
		       const void *arg, void **nv, size_t *nlen);

static int update(struct store_backend *b, const char *op, const char *key, next_fn next,
		  const void *arg, bool fresh, void **out, size_t *outlen, int timeout_ms)
{
	int64_t deadline = etcd_deadline_of(timeout_ms), rev = 0, nrev;
	struct etcd_kv cur, now;
	struct json_object *cmp;
	void *nv = NULL;
	size_t nlen = 0;
	bool ok, bad = false;
	struct backoff window; /* ms: full jitter, in [0, window) */
	int rc = 0, conflicts = 0;

	backoff_init(&window, CONFLICT_FIRST_MS, CONFLICT_MAX_MS);
	backoff_set_jitter(&window, BACKOFF_FULL, (unsigned)rand_r(&b->seed));
	if (fresh || !recall(b, key, &cur, &rev)) {
		rc = read_one(b, op, key, &cur, &rev, deadline);
	}
	while (rc == 0) {
		rc = next(b, key, &cur, arg, &nv, &nlen);
		if (rc < 0) {
			break;
		}
		if (fresh && cur.found && cur.lease == 0 && cur.len == nlen &&
		    memcmp(cur.val, nv, nlen) == 0) {
			remember(b, key, nv, nlen, cur.mod_revision);
			*out = nv;
			*outlen = nlen;
			nv = NULL;
			break;
		}
		cmp = cmp_unchanged(b, key, &cur, &bad);
		if (bad) {
			json_object_put(cmp);
			rc = oom(b);
			break;
		}
		rc = put_if(b, op, key, cmp, nv, nlen, &ok, &now, &nrev, deadline);
		if (rc < 0) {
			break;
		}
		/* The compare failed. If an earlier try of this same transaction was lost on
		 * the way back, it may be what changed the key: then it is done. */
		if (ok || (b->maybe_applied && was_ours(b, key, rev, nv, nlen, deadline))) {
			if (ok) {
				remember(b, key, nv, nlen, nrev);
			} else {
				forget(b); /* its revision is unknown */
			}
			free(now.val);
			*out = nv;
			*outlen = nlen;
			nv = NULL;
			break;
		}
		free(nv);
		nv = NULL;
		free(cur.val);
		cur = now;
		rev = nrev;
		conflicts++;
		if (crun_ms_until(deadline) == 0) {
			rc = etcd_fail(b, -ETIMEDOUT, "%s: gave up after %d conflicting writes", op,
				       conflicts);
			break;
		}
		/*
		 * The failed compare brought the current value: the first retry goes at once
		 * with it, no read needed. Losing again means others write it at the same time:
		 * wait a random while, longer with each loss, so that they spread out, then read
		 * the value afresh (what the failed compare brought is stale by then, and a
		 * retry with it would only lose again).
		 */
		if (conflicts > 1) {
			backoff_pause(&window, deadline);
			free(cur.val);
			rc = read_one(b, op, key, &cur, &rev, deadline);
		}
	}
	free(nv);
	free(cur.val);
	return rc;
}

static int add_next(struct store_backend *b, const char *key, const struct etcd_kv *cur,
		    const void *arg, void **nv, size_t *nlen)
{
	int64_t v = 0, delta = *(const int64_t *)arg;
	char *s;

	if (cur->found && parse_i64_bytes(cur->val, cur->len, &v) < 0) {
		return etcd_fail(b, -EINVAL, "ADD: value of %s is not an integer", key);
	}
	if (__builtin_add_overflow(v, delta, &v)) {
		return etcd_fail(b, -ERANGE, "ADD: overflow");
	}
	s = malloc(32);
	if (s == NULL) {
		return oom(b);
	}
	*nlen = (size_t)snprintf(s, 32, "%lld", (long long)v);
	*nv = s;
	return 0;
}

static int etcd_add(struct store_backend *b, const char *key, int64_t delta, int64_t *result,
		    int timeout_ms)
{
	void *nv = NULL;
	size_t nlen;
	int rc;

	rc = update(b, "add", key, add_next, &delta, delta == 0, &nv, &nlen, timeout_ms);
	if (rc == 0) {
		rc = parse_i64_bytes(nv, nlen, result);
	}
	free(nv);
	return rc;
}

struct append_arg {
	const void *val;
	size_t len;
};

static int append_next(struct store_backend *b, const char *key, const struct etcd_kv *cur,
		       const void *arg, void **nv, size_t *nlen)
{
	const struct append_arg *a = arg;
	char *p;

	if (cur->len + a->len > CRUN_STORE_MAX_VALUE_LEN) {
		return etcd_fail(b, -EMSGSIZE, "APPEND: value length %zu exceeds limit %u",
				 cur->len + a->len, (unsigned)CRUN_STORE_MAX_VALUE_LEN);
	}
	p = malloc(cur->len + a->len + 1);
	if (p == NULL) {
		return oom(b);
	}
	if (cur->len > 0) {
		memcpy(p, cur->val, cur->len);
	}
	if (a->len > 0) {
		memcpy(p + cur->len, a->val, a->len);
	}
	*nv = p;
	*nlen = cur->len + a->len;
	return 0;
}

static int etcd_append(struct store_backend *b, const char *key, const void *val, size_t len,
		       int timeout_ms)
{
	struct append_arg a = {val, len};
	void *nv = NULL;
	size_t nlen;
	int rc;

	rc = update(b, "append", key, append_next, &a, false, &nv, &nlen, timeout_ms);
	free(nv);
	return rc;
}

/* A compare on the value: equal to @expected (which a missing key never is). */
static struct json_object *cmp_value(struct store_backend *b, const char *key,
				     const void *expected, size_t elen, bool *bad)
{
	struct json_object *c = key_obj(b, key, bad);

	etcd_jset(c, "target", json_object_new_string("VALUE"), bad);
	etcd_jset(c, "value", etcd_jbytes(expected, elen), bad);
	etcd_jset(c, "result", json_object_new_string("EQUAL"), bad);
	return c;
}

static int etcd_compare_set(struct store_backend *b, const char *key, const void *expected,
			    size_t elen, const void *desired, size_t dlen, void **cur,
			    size_t *curlen, int timeout_ms)
{
	int64_t deadline = etcd_deadline_of(timeout_ms), rev;
	struct etcd_kv now = {0}, absent = {0};
	struct json_object *cmp;
	bool ok, bad = false, missing = true;
	char *p;
	int rc;

	/*
	 * A non-empty @expected: one transaction on the value. An empty one matches a missing
	 * key (compare version 0) or an empty value (compare the value), whichever the key is
	 * now: a transaction for the case last seen, until one holds or the key shows a value
	 * that does not match.
	 */
	for (;;) {
		cmp = elen > 0 || !missing ? cmp_value(b, key, expected, elen, &bad)
					   : cmp_unchanged(b, key, &absent, &bad);
		if (bad) {
			json_object_put(cmp);
			return oom(b);
		}
		rc = put_if(b, "compare_set", key, cmp, desired, dlen, &ok, &now, &rev, deadline);
		if (rc < 0) {
			return rc;
		}
		if (ok || elen > 0 || (now.found && now.len > 0)) {
			break;
		}
		/* Empty @expected, and the key turned out missing or empty: try that case. */
		free(now.val);
		now.val = NULL;
		missing = !now.found;
		if (crun_ms_until(deadline) == 0) {
			return etcd_fail(b, -ETIMEDOUT, "compare_set: gave up on conflicts");
		}
	}
	if (ok) {
		free(now.val);
		p = malloc(dlen + 1);
		if (p == NULL) {
			return oom(b);
		}
		memcpy(p, desired, dlen);
		p[dlen] = '\0';
		*cur = p;
		*curlen = dlen;
		return 0;
	}
	if (now.val == NULL) {
		now.val = calloc(1, 1);
		if (now.val == NULL) {
			return oom(b);
		}
		now.len = 0;
	}
	*cur = now.val;
	*curlen = now.len;
	return 0;
}

static int etcd_del(struct store_backend *b, const char *key, int timeout_ms)
{
	struct json_object *req, *rep = NULL;
	bool bad = false;
	char op[LABEL_MAX];
	int64_t deleted;
	int rc;

	req = key_obj(b, key, &bad);
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, label(op, sizeof(op), "delete", key), "/v3/kv/deleterange", req, &rep,
		       etcd_deadline_of(timeout_ms));
	json_object_put(req);
	if (rc < 0) {
		return rc;
	}
	deleted = etcd_jget_int(rep, "deleted");
	json_object_put(rep);
	/* A retried delete finds nothing when the try whose answer was lost deleted it. */
	return deleted > 0 || b->maybe_applied ? 0 : -ENOENT;
}

/* Every key that starts with ETCD_ROOT + @prefix: [that, that + 1), in one request. */
static int etcd_del_prefix(struct store_backend *b, const char *prefix, int timeout_ms)
{
	struct json_object *req = json_object_new_object(), *rep = NULL;
	size_t l = ETCD_ROOT_LEN + strlen(prefix);
	char *lo = malloc(l + 1), *hi = malloc(l + 1), op[LABEL_MAX];
	bool bad = false;
	int rc;

	if (lo == NULL || hi == NULL) {
		json_object_put(req);
		free(lo);
		free(hi);
		return oom(b);
	}
	snprintf(lo, l + 1, "%s%s", ETCD_ROOT, prefix);
	memcpy(hi, lo, l + 1);
	/* The first key after every key that starts with lo: its last byte below 0xff plus
	 * one, with what follows it dropped (the root's '/' is always one). */
	while ((unsigned char)hi[l - 1] == 0xff) {
		l--;
	}
	hi[l - 1]++;
	etcd_jset(req, "key", etcd_jbytes(lo, strlen(lo)), &bad);
	etcd_jset(req, "range_end", etcd_jbytes(hi, l), &bad);
	free(lo);
	free(hi);
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, label(op, sizeof(op), "delete prefix", prefix), "/v3/kv/deleterange",
		       req, &rep, etcd_deadline_of(timeout_ms));
	json_object_put(req);
	json_object_put(rep);
	forget(b);
	return rc;
}

/* @n keys read at one revision into a calloc'd array (*@kv, caller frees), values when @vals. */
static int read_keys(struct store_backend *b, const char *op, const char *const *keys, size_t n,
		     bool vals, struct etcd_kv **kv, int timeout_ms)
{
	int64_t rev;
	int rc;

	char lab[LABEL_MAX + 32];
	size_t l;

	*kv = calloc(n, sizeof(**kv));
	if (*kv == NULL) {
		return oom(b);
	}
	/* An error names the keys as a get's does: the first, and how many more. */
	l = strlen(label(lab, LABEL_MAX, op, n > 0 ? keys[0] : ""));
	if (n > 1) {
		snprintf(lab + l, sizeof(lab) - l, " and %zu more", n - 1);
	}
	rc = etcd_read_many(b, lab, keys, n, vals, *kv, &rev, etcd_deadline_of(timeout_ms));
	if (rc < 0) {
		free(*kv);
		*kv = NULL;
	}
	return rc;
}

static int etcd_check(struct store_backend *b, const char *const *keys, size_t n, bool *all,
		      int timeout_ms)
{
	struct etcd_kv *kv;
	size_t i;
	int rc;

	rc = read_keys(b, "check", keys, n, false, &kv, timeout_ms);
	if (rc < 0) {
		return rc;
	}
	*all = true;
	for (i = 0; i < n; i++) {
		*all = *all && kv[i].found;
	}
	free(kv);
	return 0;
}

static int etcd_num_keys(struct store_backend *b, int64_t *n, int timeout_ms)
{
	struct json_object *req = json_object_new_object(), *rep = NULL;
	static const char root_end[] = ETCD_ROOT;
	char end[ETCD_ROOT_LEN];
	bool bad = false;
	int rc;

	/* Every key under the root: [ETCD_ROOT, ETCD_ROOT with its last byte + 1). */
	memcpy(end, root_end, ETCD_ROOT_LEN);
	end[ETCD_ROOT_LEN - 1]++;
	etcd_jset(req, "key", etcd_jbytes(ETCD_ROOT, ETCD_ROOT_LEN), &bad);
	etcd_jset(req, "range_end", etcd_jbytes(end, ETCD_ROOT_LEN), &bad);
	etcd_jset(req, "count_only", json_object_new_boolean(1), &bad);
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, "num_keys", "/v3/kv/range", req, &rep, etcd_deadline_of(timeout_ms));
	json_object_put(req);
	if (rc == 0) {
		*n = etcd_jget_int(rep, "count");
	}
	json_object_put(rep);
	return rc;
}

static int etcd_multi_get(struct store_backend *b, const char *const *keys, size_t n,
			  void **vals, size_t *lens, int timeout_ms)
{
	struct etcd_kv *kv;
	size_t i;
	int rc;

	rc = read_keys(b, "multi_get", keys, n, true, &kv, timeout_ms);
	if (rc < 0) {
		return rc;
	}
	for (i = 0; i < n; i++) {
		vals[i] = kv[i].val;
		lens[i] = kv[i].len;
	}
	free(kv);
	return 0;
}

static int by_key_then_index(const void *a, const void *b, void *keys)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int c = strcmp(((const char *const *)keys)[i], ((const char *const *)keys)[j]);

	return c != 0 ? c : (i > j) - (i < j);
}

static int etcd_multi_set(struct store_backend *b, const char *const *keys, size_t n,
			  const void *const *vals, const size_t *lens, int timeout_ms)
{
	struct json_object *req = json_object_new_object(), *arr = json_object_new_array();
	struct json_object *rep = NULL;
	size_t *idx = malloc(n * sizeof(*idx)), i;
	bool bad = false;
	int rc;

	if (idx == NULL) {
		json_object_put(req);
		json_object_put(arr);
		free(idx);
		return oom(b);
	}
	/* etcd refuses a key twice in one transaction: the last value of a key wins, as it
	 * does in the TCP store. */
	for (i = 0; i < n; i++) {
		idx[i] = i;
	}
	qsort_r(idx, n, sizeof(*idx), by_key_then_index, (void *)keys);
	for (i = 0; i < n; i++) {
		if (i + 1 < n && strcmp(keys[idx[i]], keys[idx[i + 1]]) == 0) {
			continue; /* a later value for the same key follows */
		}
		etcd_jpush(arr, put_op(b, keys[idx[i]], vals[idx[i]] ? vals[idx[i]] : "",
				       lens[idx[i]], &bad),
			   &bad);
	}
	free(idx);
	etcd_jset(req, "success", arr, &bad);
	if (bad) {
		json_object_put(req);
		return oom(b);
	}
	rc = etcd_call(b, "multi_set", "/v3/kv/txn", req, &rep, etcd_deadline_of(timeout_ms));
	json_object_put(req);
	json_object_put(rep);
	return rc;
}

static int etcd_ping(struct store_backend *b, int timeout_ms)
{
	struct json_object *req = json_object_new_object(), *rep = NULL;
	int rc;

	if (req == NULL) {
		return oom(b);
	}
	rc = etcd_call(b, "ping", "/v3/maintenance/status", req, &rep, etcd_deadline_of(timeout_ms));
	json_object_put(req);
	json_object_put(rep);
	return rc;
}

void etcd_backend_free(struct store_backend *b)
{
	if (b == NULL) {
		return;
	}
	etcd_http_finish(b);
	free(b->eps);
	free(b->cacert);
	free(b->cert);
	free(b->key);
	free(b->user);
	if (b->password != NULL) {
		explicit_bzero(b->password, strlen(b->password));
		free(b->password);
	}
	free(b->token);
	free(b->lease.key);
	forget(b);
	free(b);
}

static void etcd_forget_hint(const char *prefix, char *buf, size_t cap)
{
	snprintf(buf, cap, "etcdctl del --prefix %s%s", ETCD_ROOT, prefix);
}

const struct store_ops etcd_store_ops = {
	.name = "etcd",
	.set = etcd_set,
	.get = etcd_get,
	.wait = etcd_backend_wait,
	.wait_get = etcd_wait_get,
	.add = etcd_add,
	.ticket = etcd_ticket,
	.ticket_count = etcd_ticket_count,
	.compare_set = etcd_compare_set,
	.del = etcd_del,
	.check = etcd_check,
	.num_keys = etcd_num_keys,
	.append = etcd_append,
	.multi_get = etcd_multi_get,
	.multi_set = etcd_multi_set,
	.ping = etcd_ping,
	.del_prefix = etcd_del_prefix,
	.forget_hint = etcd_forget_hint,
	.last_error = store_etcd_last_error,
	.close = etcd_backend_free,
};
