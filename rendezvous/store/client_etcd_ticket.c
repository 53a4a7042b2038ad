/* SPDX-License-Identifier: MIT */
/*
 * rendezvous/store/client_etcd_ticket.c: tickets on etcd (backend.h, store_ticket()): a
 * counter that many agents bump by one at once, counted in the key's version.
 *
 * add() on etcd is a read and a compare-and-swap retried on conflict: N agents adding to one
 * key at once cost O(N^2) transactions through raft. A put increments the key's version, and
 * with prev_kv it returns the version it replaced: that + 1 is this put's ticket. The value
 * is a mark that never changes, never a number, and a ticket puts it only where the key holds
 * it already or is absent (one transaction: compare the value, put; else, nested, compare
 * version 0, put; else range): N tickets at once are N commits that never conflict (etcd batches
 * concurrent ones into one raft entry). An older crun that add()s the key (read, parse,
 * compare-and-swap) fails on the mark ("value of ... is not an integer"), and a ticket that finds a
 * number there (an older crun's counter) is refused without writing, naming it (CRUN_EVERSION): one
 * round is never counted two ways without anybody noticing. The version restarts at 1 after a
 * delete: a ticket counter must live as long as what it counts (the rendezvous never deletes a live
 * round's keys; only the job's end deletes them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <crun/error.h>

#include "rendezvous/store/backend.h"
#include "rendezvous/store/client_etcd_internal.h"
#include "src/common/log.h"

/* What a ticket counter holds: not a number, so that add() refuses it. */
#define TICKET_MARK "crun-ticket-v1"
#define TICKET_MARK_LEN (sizeof(TICKET_MARK) - 1)

/* @kv (a KeyValue of etcd's JSON, may be NULL): its version into *@n, after checking the mark. */
static int kv_version(struct store_backend *b, const char *op, const char *key,
		      struct json_object *kv, int64_t *n)
{
	void *val = NULL;
	size_t len = 0;
	int rc;

	*n = 0;
	if (kv == NULL) {
		return 0;
	}
	rc = etcd_jget_bytes(kv, "value", &val, &len);
	if (rc < 0) {
		return etcd_fail(b, rc, "%s %s%s: %s", op, ETCD_ROOT, key,
				 rc == -ENOMEM ? "out of memory" : "bad base64 in etcd's answer");
	}
	if (len != TICKET_MARK_LEN || memcmp(val, TICKET_MARK, len) != 0) {
		rc = etcd_fail(b, CRUN_EVERSION,
			       "%s %s%s: the key holds \"%.*s\", not a ticket counter: an older "
			       "crun counts it with add (read and compare-and-swap); every agent "
			       "of a job must run the same crun version",
			       op, ETCD_ROOT, key, (int)(len > 40 ? 40 : len), (const char *)val);
		free(val);
		return rc;
	}
	free(val);
	*n = etcd_jget_int(kv, "version");
	if (*n <= 0) {
		return etcd_fail(b, -EPROTO, "%s %s%s: etcd's answer has no version", op, ETCD_ROOT,
				 key);
	}
	return 0;
}

/* responses[0].<what> of a transaction's answer, or NULL. */
static struct json_object *first_response(struct json_object *rep, const char *what)
{
	struct json_object *r = etcd_jget(rep, "responses");

	if (r == NULL || !json_object_is_type(r, json_type_array) ||
	    json_object_array_length(r) == 0) {
		return NULL;
	}
	return etcd_jget(json_object_array_get_idx(r, 0), what);
}

/* {"key": K, "target": TARGET, "result": "EQUAL", FIELD: V} (V taken) */
static struct json_object *cmp_eq(struct store_backend *b, const char *key, const char *target,
				  const char *field, struct json_object *v, bool *bad)
{
	struct json_object *c = json_object_new_object();

	etcd_jset(c, "key", etcd_jkey(b, key), bad);
	etcd_jset(c, "target", json_object_new_string(target), bad);
	etcd_jset(c, "result", json_object_new_string("EQUAL"), bad);
	etcd_jset(c, field, v, bad);
	return c;
}

/* {"compare": [@cmp], "success": [{"request_put": mark, prev_kv}], "failure": [@fail]} */
static struct json_object *txn_put_mark(struct store_backend *b, const char *key,
					struct json_object *cmp, struct json_object *fail,
					bool *bad)
{
	struct json_object *t = json_object_new_object(), *arr, *put, *o;

	arr = json_object_new_array();
	etcd_jpush(arr, cmp, bad);
	etcd_jset(t, "compare", arr, bad);
	put = json_object_new_object();
	etcd_jset(put, "key", etcd_jkey(b, key), bad);
	etcd_jset(put, "value", etcd_jbytes(TICKET_MARK, TICKET_MARK_LEN), bad);
	etcd_jset(put, "prev_kv", json_object_new_boolean(1), bad);
	o = json_object_new_object();
	etcd_jset(o, "request_put", put, bad);
	arr = json_object_new_array();
	etcd_jpush(arr, o, bad);
	etcd_jset(t, "success", arr, bad);
	arr = json_object_new_array();
	etcd_jpush(arr, fail, bad);
	etcd_jset(t, "failure", arr, bad);
	return t;
}

/*
 * One transaction: if @key holds the mark, put it again; else if it is absent, put it (the
 * first ticket); else range it and put nothing (an older crun's number: refused by the
 * caller). The compare is on the value, which no ticket changes: tickets at once never fail
 * it. *@prev: the KeyValue replaced, or found (NULL: the first ticket), inside *@rep.
 */
static int put_mark(struct store_backend *b, const char *key, struct json_object **rep,
		    struct json_object **prev, int64_t deadline)
{
	struct json_object *req, *inner, *range, *o, *kvs, *r;
	bool bad = false;
	int rc;

	range = json_object_new_object();
	etcd_jset(range, "key", etcd_jkey(b, key), &bad);
	o = json_object_new_object();
	etcd_jset(o, "request_range", range, &bad);
	inner = txn_put_mark(b, key, cmp_eq(b, key, "VERSION", "version", etcd_jint(0), &bad), o,
			     &bad);
	o = json_object_new_object();
	etcd_jset(o, "request_txn", inner, &bad);
	req = txn_put_mark(
		b, key,
		cmp_eq(b, key, "VALUE", "value", etcd_jbytes(TICKET_MARK, TICKET_MARK_LEN), &bad),
		o, &bad);
	if (bad) {
		json_object_put(req);
		return etcd_fail(b, -ENOMEM, "ticket: out of memory");
	}
	rc = etcd_call(b, "ticket", "/v3/kv/txn", req, rep, deadline);
	json_object_put(req);
	if (rc < 0) {
		return rc;
	}
	if (etcd_jget_bool(*rep, "succeeded")) {
		*prev = etcd_jget(first_response(*rep, "response_put"), "prev_kv");
		return 0;
	}
	r = first_response(*rep, "response_txn");
	if (etcd_jget_bool(r, "succeeded")) {
		*prev = etcd_jget(first_response(r, "response_put"), "prev_kv");
		return 0;
	}
	kvs = etcd_jget(first_response(r, "response_range"), "kvs");
	*prev = kvs != NULL && json_object_is_type(kvs, json_type_array) &&
				json_object_array_length(kvs) > 0
			? json_object_array_get_idx(kvs, 0)
			: NULL;
	if (*prev == NULL) {
		return etcd_fail(b, -EPROTO, "ticket %s%s: etcd's answer has no branch taken",
				 ETCD_ROOT, key);
	}
	return 0;
}

int etcd_ticket(struct store_backend *b, const char *key, int64_t *n, int timeout_ms)
{
	struct json_object *rep = NULL, *prev = NULL;
	int64_t v = 0;
	int rc;

	rc = put_mark(b, key, &rep, &prev, etcd_deadline_of(timeout_ms));
	if (rc == 0) {
		/* A number found (nothing put): refused here, naming it. */
		rc = kv_version(b, "ticket", key, prev, &v);
	}
	json_object_put(rep);
	if (rc < 0) {
		return rc;
	}
	if (b->maybe_applied) {
		/* An earlier try whose answer was lost may have put too: it took ticket v,
		 * which nobody holds. Whoever counts the seats meets it as a seat with no
		 * owner (the rendezvous: a node record that never comes, rdzv_seats.c). */
		log_warn("%s: ticket %s%s: an answer was lost and the put retried: ticket %lld "
			 "may be taken by the lost try",
			 b->where, ETCD_ROOT, key, (long long)v);
	}
	*n = v + 1;
	return 0;
}

int etcd_ticket_count(struct store_backend *b, const char *key, int64_t *n, int timeout_ms)
{
	struct json_object *req = json_object_new_object(), *rep = NULL, *kvs;
	bool bad = false;
	int rc;

	etcd_jset(req, "key", etcd_jkey(b, key), &bad);
	if (bad) {
		json_object_put(req);
		return etcd_fail(b, -ENOMEM, "ticket count: out of memory");
	}
	rc = etcd_call(b, "ticket count", "/v3/kv/range", req, &rep, etcd_deadline_of(timeout_ms));
	json_object_put(req);
	if (rc == 0) {
		kvs = etcd_jget(rep, "kvs");
		rc = kv_version(b, "ticket count", key,
				kvs != NULL && json_object_is_type(kvs, json_type_array) &&
						json_object_array_length(kvs) > 0
					? json_object_array_get_idx(kvs, 0)
					: NULL,
				n);
	}
	json_object_put(rep);
	return rc;
}
