/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_wait.c: etcd reads of many keys at one revision, waits on watches. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/client_etcd_internal.h"
#include "rendezvous/store/wire.h"
#include "src/common/base64.h"
#include "src/common/clock.h"
#include "src/common/log.h"

/* The reads before a wait may take this long past the wait's own deadline (the TCP client's
 * socket margin). */
#define WAIT_MARGIN_MS 5000
/* A wait on up to this many distinct keys watches each; on more, the range they span. */
#define WATCH_EACH_MAX 16

void etcd_kvs_free(struct etcd_kv *kv, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(kv[i].val);
		kv[i].val = NULL;
	}
}

/* One transaction of ranges for keys [@from, @from + @m); @rev 0: now, and *@got the revision. */
static int read_chunk(struct store_backend *b, const char *op, const char *const *keys,
		      size_t from, size_t m, bool values, struct etcd_kv *out, int64_t rev,
		      int64_t *got, int64_t deadline)
{
	struct json_object *req = json_object_new_object(), *arr = json_object_new_array();
	struct json_object *rep = NULL, *range, *resp, *kvs, *kv;
	bool bad = false;
	size_t i;
	int rc = 0;

	for (i = 0; i < m; i++) {
		struct json_object *r = json_object_new_object(), *op_obj = json_object_new_object();

		etcd_jset(r, "key", etcd_jkey(b, keys[from + i]), &bad);
		if (!values) {
			etcd_jset(r, "count_only", json_object_new_boolean(1), &bad);
		}
		if (rev > 0) {
			etcd_jset(r, "revision", etcd_jint(rev), &bad);
		}
		etcd_jset(op_obj, "request_range", r, &bad);
		etcd_jpush(arr, op_obj, &bad);
	}
	etcd_jset(req, "success", arr, &bad);
	if (bad) {
		json_object_put(req);
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	rc = etcd_call(b, op, "/v3/kv/txn", req, &rep, deadline);
	json_object_put(req);
	if (rc < 0) {
		return rc;
	}
	*got = etcd_revision(rep);
	resp = etcd_jget(rep, "responses");
	if (resp == NULL || !json_object_is_type(resp, json_type_array) ||
	    json_object_array_length(resp) != m) {
		json_object_put(rep);
		return etcd_fail(b, -EPROTO, "%s: txn: %zu answers for %zu ranges", op,
				 resp ? json_object_array_length(resp) : 0, m);
	}
	for (i = 0; i < m && rc == 0; i++) {
		range = etcd_jget(json_object_array_get_idx(resp, i), "response_range");
		if (!values) {
			out[from + i].found = etcd_jget_int(range, "count") > 0;
			continue;
		}
		kvs = etcd_jget(range, "kvs");
		if (kvs == NULL || !json_object_is_type(kvs, json_type_array) ||
		    json_object_array_length(kvs) == 0) {
			continue;
		}
		kv = json_object_array_get_idx(kvs, 0);
		rc = etcd_jget_bytes(kv, "value", &out[from + i].val, &out[from + i].len);
		if (rc < 0) {
			rc = etcd_fail(b, rc, "%s: %s", op,
				       rc == -ENOMEM ? "out of memory" : "bad base64 from etcd");
			break;
		}
		out[from + i].found = true;
		out[from + i].mod_revision = etcd_jget_int(kv, "mod_revision");
	}
	json_object_put(rep);
	return rc;
}

int etcd_read_many(struct store_backend *b, const char *op, const char *const *keys, size_t n,
		   bool values, struct etcd_kv *out, int64_t *rev, int64_t deadline)
{
	uint64_t total;
	size_t from, m, i;
	int64_t got = 0;
	int rc, restarts = 0;

restart:
	memset(out, 0, n * sizeof(*out));
	*rev = 0;
	total = 8 + 4; /* a MULTI_GET reply of the TCP store: header, count, then each key */
	for (from = 0; from < n; from += m) {
		m = n - from > ETCD_TXN_CHUNK ? ETCD_TXN_CHUNK : n - from;
		rc = read_chunk(b, op, keys, from, m, values, out, *rev, &got, deadline);
		if (rc == -ESTALE && from > 0 && restarts++ < 3) {
			/* The first chunk's revision was compacted meanwhile: read again. */
			etcd_kvs_free(out, n);
			goto restart;
		}
		if (rc < 0) {
			etcd_kvs_free(out, n);
			return rc;
		}
		if (from == 0) {
			*rev = got;
		}
		/* The TCP store's bound on what one reply carries, checked as the values come
		 * (4096 keys of 16 MiB would not fit in memory). */
		for (i = from; values && i < from + m; i++) {
			total += 1 + (out[i].found ? 4 + out[i].len : 0);
		}
		if (total > WIRE_MAX_FRAME) {
			etcd_kvs_free(out, n);
			return etcd_fail(b, -EMSGSIZE,
					 "%s: reply of over %llu bytes exceeds the frame limit", op,
					 (unsigned long long)total);
		}
	}
	return 0;
}

/* ---- waits ---- */

struct waiter {
	const char *const *keys;
	size_t n;
	size_t *order;   /* indices of keys, sorted by key then index: for bsearch */
	bool *seen;      /* key i has existed since the wait began */
	size_t left;     /* ALL: keys not seen yet */
	bool any;
	int hit;         /* ANY: the index that ended the wait */
	int64_t rev;     /* events up to this revision are accounted for */
	bool synced;     /* the keys' state is known (a whole read, or a resumed mark) */
	bool hit_read;   /* ANY: the read, not an event, ended the wait */
	size_t found;    /* how many of the keys that read found */
	bool parked;
	bool want_val;   /* ANY: keep the value of the key that ended the wait */
	void *val;       /* that value (malloc'd, NUL-terminated), when want_val */
	size_t len;
};

static int by_key_then_index(const void *a, const void *b, void *w)
{
	const struct waiter *wt = w;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int c = strcmp(wt->keys[i], wt->keys[j]);

	return c != 0 ? c : (i > j) - (i < j);
}

/* The lowest index of the key that the etcd key @k (@kl bytes) names, or -1. */
static long find_key(const struct waiter *w, const char *k, size_t kl)
{
	size_t lo = 0, hi = w->n, mid, ml;
	int c;

	if (kl < ETCD_ROOT_LEN || memcmp(k, ETCD_ROOT, ETCD_ROOT_LEN) != 0) {
		return -1;
	}
	k += ETCD_ROOT_LEN;
	kl -= ETCD_ROOT_LEN;
	/* The first entry whose key is >= k: entries of equal keys are in index order. */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		ml = strlen(w->keys[w->order[mid]]);
		c = memcmp(w->keys[w->order[mid]], k, ml < kl ? ml : kl);
		if (c == 0) {
			c = (ml > kl) - (ml < kl);
		}
		if (c < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	if (lo < w->n && strlen(w->keys[w->order[lo]]) == kl &&
	    memcmp(w->keys[w->order[lo]], k, kl) == 0) {
		return (long)w->order[lo];
	}
	return -1;
}

/* Mark key @i (and its repeats) seen; true when that ends the wait. */
static bool mark(struct waiter *w, size_t i)
{
	size_t j;

	if (w->any) {
		w->hit = (int)i;
		return true;
	}
	for (j = i; j < w->n; j++) {
		if (!w->seen[j] && strcmp(w->keys[j], w->keys[i]) == 0) {
			w->seen[j] = true;
			w->left--;
		}
	}
	return w->left == 0;
}

static int on_watch(struct store_backend *b, struct json_object *res, void *arg)
{
	struct waiter *w = arg;
	struct json_object *ev = etcd_jget(res, "events"), *kv, *key;
	const char *reason;
	char small[512], *buf;
	size_t i, len, kl;
	int64_t mr;
	bool done = false, bad_val = false;
	long k;

	if (etcd_jget_bool(res, "canceled")) {
		if (etcd_jget_int(res, "compact_revision") > 0) {
			return etcd_fail(b, -ESTALE, "wait: watch from revision %lld: compacted",
					 (long long)(w->rev + 1));
		}
		reason = json_object_get_string(etcd_jget(res, "cancel_reason"));
		reason = reason ? reason : "canceled";
		if (etcd_transient(0, reason)) {
			return etcd_fail(b, -EAGAIN, "wait: etcd said: %s", reason);
		}
		if (b->user != NULL && (strstr(reason, "invalid auth token") != NULL ||
					strstr(reason, "auth store is old") != NULL)) {
			etcd_fail(b, -EKEYEXPIRED, "wait: etcd said: %s", reason);
			return -EKEYEXPIRED;
		}
		return etcd_map_error(b, "wait", 0, reason);
	}
	if (etcd_jget_bool(res, "created") && !w->parked) {
		w->parked = true;
		/* tests/conformance/parked.c counts these lines. */
		log_debug("%s: WAIT parked (%zu key%s, watching from revision %lld)", b->where,
			  w->n, w->n == 1 ? "" : "s", (long long)(w->rev + 1));
	}
	len = ev && json_object_is_type(ev, json_type_array) ? json_object_array_length(ev) : 0;
	for (i = 0; i < len && !done; i++) {
		kv = etcd_jget(json_object_array_get_idx(ev, i), "kv");
		mr = etcd_jget_int(kv, "mod_revision");
		w->rev = mr > w->rev ? mr : w->rev;
		key = etcd_jget(kv, "key");
		if (key == NULL || !json_object_is_type(key, json_type_string)) {
			continue;
		}
		kl = (size_t)json_object_get_string_len(key);
		buf = base64_decoded_cap(kl) <= sizeof(small) ? small : malloc(base64_decoded_cap(kl));
		if (buf == NULL) {
			return etcd_fail(b, -ENOMEM, "out of memory");
		}
		if (base64_decode(json_object_get_string(key), kl, buf, &kl) == 0) {
			k = find_key(w, buf, kl);
			/* The watch filters deletes out: every event is a write. */
			if (k >= 0 && (w->any || !w->seen[k])) {
				done = mark(w, (size_t)k);
			}
			/* An empty value has no "value" field: etcd_jget_bytes() gives "". */
			if (done && w->want_val &&
			    etcd_jget_bytes(kv, "value", &w->val, &w->len) < 0) {
				bad_val = true;
			}
		}
		if (buf != small) {
			free(buf);
		}
		if (bad_val) {
			return etcd_fail(b, -EPROTO, "wait: a bad value from etcd");
		}
	}
	return done ? 1 : 0;
}

/* {"create_request": {...}} for the etcd keys [@lo, @hi + "\0") from w->rev + 1, puts only. */
static struct json_object *create_req(struct store_backend *b, const struct waiter *w,
				      const char *lo, const char *hi, bool *bad)
{
	struct json_object *req = json_object_new_object(), *cr = json_object_new_object();
	struct json_object *filters = json_object_new_array();

	etcd_jset(cr, "key", etcd_jkey(b, lo), bad);
	if (strcmp(lo, hi) != 0) {
		etcd_jset(cr, "range_end", etcd_jkey_suffix(b, hi, "", 1), bad);
	}
	etcd_jset(cr, "start_revision", etcd_jint(w->rev + 1), bad);
	etcd_jpush(filters, json_object_new_string("NODELETE"), bad);
	etcd_jset(cr, "filters", filters, bad);
	etcd_jset(req, "create_request", cr, bad);
	return req;
}

/*
 * The watch request for @w: one watch per distinct key, on one stream (an array: etcd takes
 * several create requests in one /v3/watch body), so that only writes to these keys reach
 * this waiter. A wait on many keys is one watch over [lowest, highest]: keys between that
 * were not asked for are skipped as their events arrive.
 */
static struct json_object *watch_req(struct store_backend *b, const struct waiter *w, bool *bad)
{
	const char *lo = w->keys[w->order[0]], *hi = w->keys[w->order[w->n - 1]], *k, *prev;
	struct json_object *arr;
	size_t i, distinct = 1;

	for (i = 1; i < w->n; i++) {
		distinct += strcmp(w->keys[w->order[i]], w->keys[w->order[i - 1]]) != 0;
	}
	if (distinct == 1 || distinct > WATCH_EACH_MAX) {
		return create_req(b, w, lo, hi, bad);
	}
	arr = json_object_new_array();
	for (i = 0, prev = NULL; i < w->n; i++) {
		k = w->keys[w->order[i]];
		if (prev == NULL || strcmp(k, prev) != 0) {
			etcd_jpush(arr, create_req(b, w, k, k, bad), bad);
		}
		prev = k;
	}
	return arr;
}

static void pause_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

/* Read every key now; 1 when that ends the wait. */
static int sync_state(struct store_backend *b, struct waiter *w, int64_t deadline)
{
	struct etcd_kv *kv = calloc(w->n, sizeof(*kv));
	size_t i;
	int rc;

	if (kv == NULL) {
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	/* Presence only, unless the caller wants the value the wait ends on (its read is the
	 * same one range per key: etcd_wait_get() saves the get after the wait). */
	rc = etcd_read_many(b, "wait", w->keys, w->n, w->want_val, kv, &w->rev,
			    deadline > INT64_MAX - WAIT_MARGIN_MS ? deadline
								  : deadline + WAIT_MARGIN_MS);
	w->synced = rc == 0;
	for (i = 0, w->found = 0; rc == 0 && i < w->n; i++) {
		w->found += kv[i].found;
	}
	for (i = 0; rc == 0 && i < w->n; i++) {
		if (kv[i].found && (w->any || !w->seen[i]) && mark(w, i)) {
			w->hit_read = true;
			rc = 1; /* ANY: the lowest index present, as the TCP store answers */
			if (w->want_val) {
				w->val = kv[i].val;
				w->len = kv[i].len;
				kv[i].val = NULL;
			}
		}
	}
	if (rc >= 0) {
		etcd_kvs_free(kv, w->n);
	}
	free(kv);
	return rc;
}

/*
 * Where the next wait of a series may resume (struct store_wait_mark): after a hit seen in a
 * watch event, that event's revision (other writes of that revision may follow it in the
 * same answer); after a hit in the read, the next revision when the read found no other key;
 * after a timeout, past the last event accounted for; else 0 (read again).
 */
static int64_t resume_mark(const struct waiter *w, int rc)
{
	if (rc == 1 && w->hit_read) {
		return w->found == 1 ? w->rev + 1 : 0;
	}
	if (rc == 1 || (rc == -ETIMEDOUT && w->synced)) {
		return rc == 1 ? w->rev : w->rev + 1;
	}
	return 0;
}

/* etcd_wait(), and with @val (ANY only) etcd_wait_get(); @mark: etcd_wait_get()'s. */
static int wait_keys(struct store_backend *b, const char *const *keys, size_t n, bool any,
		     int timeout_ms, void **val, size_t *len, int64_t *mark)
{
	int64_t start = crun_now_ms(), deadline = start + (timeout_ms < 0 ? 300000 : timeout_ms);
	struct waiter w = {
		.keys = keys, .n = n, .left = n, .any = any, .hit = -1, .want_val = val != NULL};
	struct json_object *req;
	bool bad = false, resync = true, stale = true;
	int rc = 0, broken = 0;
	size_t i;

	w.order = malloc(n * sizeof(*w.order));
	w.seen = calloc(n, sizeof(*w.seen));
	if (w.order == NULL || w.seen == NULL) {
		rc = etcd_fail(b, -ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		w.order[i] = i;
	}
	qsort_r(w.order, n, sizeof(*w.order), by_key_then_index, &w);
	if (any && mark != NULL && *mark > 0) {
		/* The series' last wait accounted for every write before *mark: watch from
		 * there, no read (a resumed watch whose revision was compacted reads again). */
		w.rev = *mark - 1;
		w.synced = true;
		resync = false;
	}
	for (;;) {
		/* The keys as they are now, then every write from that revision on: nothing
		 * between the read and the watch is missed. After a broken stream the keys are
		 * read again (which gives up, as every call does, when no endpoint answers) and
		 * the watch resumes from the last event it saw, on the next endpoint; after a
		 * compaction, from the new read. */
		if (resync) {
			int64_t seen_rev = w.rev;

			rc = sync_state(b, &w, deadline);
			if (rc != 0) {
				break;
			}
			if (!stale && seen_rev > 0) {
				w.rev = seen_rev;
			}
		}
		if (crun_ms_until(deadline) == 0) {
			rc = etcd_fail(b, -ETIMEDOUT, "WAIT: wait timed out after %d ms",
				       (int)(crun_now_ms() - start));
			break;
		}
		req = watch_req(b, &w, &bad);
		if (bad) {
			json_object_put(req);
			rc = etcd_fail(b, -ENOMEM, "out of memory");
			break;
		}
		rc = etcd_stream(b, "wait", "/v3/watch", req, on_watch, &w, deadline);
		json_object_put(req);
		resync = rc == -ESTALE || rc == -EAGAIN;
		stale = rc == -ESTALE;
		if (rc == -EKEYEXPIRED) {
			rc = etcd_authenticate(b, deadline + WAIT_MARGIN_MS);
			if (rc < 0) {
				break;
			}
			continue;
		}
		if (rc == -ETIMEDOUT) {
			rc = etcd_fail(b, -ETIMEDOUT, "WAIT: wait timed out after %d ms",
				       (int)(crun_now_ms() - start));
			break;
		}
		if (rc != -EAGAIN && rc != -ESTALE) {
			break;
		}
		/* A stream that keeps breaking at once must not spin. */
		if (++broken > (int)b->neps) {
			pause_ms(broken > 10 ? 500 : 50);
		}
	}
out:
	free(w.order);
	free(w.seen);
	if (mark != NULL) {
		*mark = any ? resume_mark(&w, rc) : 0;
	}
	if (rc == 1 && val != NULL) {
		*val = w.val;
		*len = w.len;
		w.val = NULL;
	}
	free(w.val);
	if (rc == 1) {
		return any ? w.hit : 0;
	}
	return rc;
}

int etcd_wait(struct store_backend *b, const char *const *keys, size_t n, bool any, int timeout_ms)
{
	return wait_keys(b, keys, n, any, timeout_ms, NULL, NULL, NULL);
}

int etcd_wait_get(struct store_backend *b, const char *const *keys, size_t n, void **val,
		  size_t *len, int timeout_ms, int64_t *mark)
{
	*val = NULL;
	*len = 0;
	return wait_keys(b, keys, n, true, timeout_ms, val, len, mark);
}

/* ---- history ---- */

struct first_write {
	bool found, put;
	void *val;
	size_t len;
	int rc;
};

static int on_first(struct store_backend *b, struct json_object *res, void *arg)
{
	struct first_write *f = arg;
	struct json_object *ev = etcd_jget(res, "events"), *e;
	const char *type;

	if (etcd_jget_bool(res, "canceled")) {
		return etcd_fail(b, -ESTALE, "history: the watch was canceled (%s)",
				 etcd_jget_int(res, "compact_revision") > 0
					 ? "compacted"
					 : json_object_get_string(etcd_jget(res, "cancel_reason")));
	}
	if (ev == NULL || !json_object_is_type(ev, json_type_array) ||
	    json_object_array_length(ev) == 0) {
		return 0;
	}
	e = json_object_array_get_idx(ev, 0);
	type = json_object_get_string(etcd_jget(e, "type"));
	f->found = true;
	f->put = type == NULL || strcmp(type, "PUT") == 0;
	if (f->put) {
		f->rc = etcd_jget_bytes(etcd_jget(e, "kv"), "value", &f->val, &f->len);
	}
	return 1;
}

int etcd_first_write_after(struct store_backend *b, const char *key, int64_t rev, bool *found,
			   bool *put, void **val, size_t *len, int64_t deadline)
{
	struct json_object *req = json_object_new_object(), *cr = json_object_new_object();
	struct first_write f = {0};
	bool bad = false;
	int rc = -EAGAIN, tries = 0;

	etcd_jset(cr, "key", etcd_jkey(b, key), &bad);
	etcd_jset(cr, "start_revision", etcd_jint(rev + 1), &bad);
	etcd_jset(req, "create_request", cr, &bad);
	if (bad) {
		json_object_put(req);
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	while (rc == -EAGAIN && tries++ < (int)b->neps) {
		rc = etcd_stream(b, "history", "/v3/watch", req, on_first, &f, deadline);
	}
	json_object_put(req);
	if (rc == 1 && f.rc < 0) {
		rc = f.rc;
	}
	if (rc != 1) {
		free(f.val);
		return rc < 0 ? rc : -EPROTO;
	}
	*found = f.found;
	*put = f.put;
	*val = f.val;
	*len = f.len;
	return 0;
}
