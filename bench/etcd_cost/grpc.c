/* SPDX-License-Identifier: MIT */
/*
 * bench/etcd_cost/grpc.c: etcd's KV service over gRPC with libcurl and protobuf-c.
 *
 * A gRPC call is an HTTP/2 POST to /etcdserverpb.KV/<Method> with content-type
 * application/grpc and "te: trailers"; the body is one message behind a 5-byte prefix (a
 * compression flag, then the length, big-endian), and so is the answer; grpc-status and
 * grpc-message come in the trailers (or in the headers of an answer without a body). etcd
 * serves gRPC and its JSON gateway on the same client port: over cleartext HTTP/2 with prior
 * knowledge (no upgrade), etcd's listener hands a stream with that content-type to gRPC.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench/etcd_kv.pb-c.h" /* generated from etcd_cost/etcd_kv.proto */
#include "bench/etcd_cost/grpc.h"
#include "rendezvous/store/curl_lib.h"
#include "src/common/diag.h"

struct grpc_conn {
	const struct curl_lib *cl;
	CURL *c;
	struct curl_slist *hdrs;
	char base[128];
	unsigned char *buf; /* the answer's body */
	size_t len, cap;
	int status;         /* grpc-status; -1: none seen */
	char message[256];  /* grpc-message */
};

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
	struct grpc_conn *g = arg;
	size_t add = sz * n, cap;
	unsigned char *nb;

	if (g->len + add > g->cap) {
		cap = g->cap == 0 ? 4096 : g->cap;
		while (cap < g->len + add) {
			cap *= 2;
		}
		nb = realloc(g->buf, cap);
		if (nb == NULL) {
			return 0;
		}
		g->buf = nb;
		g->cap = cap;
	}
	memcpy(g->buf + g->len, p, add);
	g->len += add;
	return add;
}

/* Headers and trailers alike: keep grpc-status and grpc-message. */
static size_t on_header(char *p, size_t sz, size_t n, void *arg)
{
	struct grpc_conn *g = arg;
	size_t len = sz * n, vl;
	const char *v;

	if (len > 12 && strncasecmp(p, "grpc-status:", 12) == 0) {
		g->status = atoi(p + 12);
	} else if (len > 13 && strncasecmp(p, "grpc-message:", 13) == 0) {
		v = p + 13;
		vl = len - 13;
		while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n')) {
			vl--;
		}
		snprintf(g->message, sizeof(g->message), "%.*s", (int)vl, v);
	}
	return len;
}

struct grpc_conn *grpc_open(const char *hostport, char *err, size_t cap)
{
	struct crun_diag d = {0};
	struct grpc_conn *g = calloc(1, sizeof(*g));

	if (g == NULL) {
		snprintf(err, cap, "out of memory");
		return NULL;
	}
	g->cl = curl_lib_get(&d);
	if (g->cl == NULL) {
		snprintf(err, cap, "%s", d.msg);
		free(g);
		return NULL;
	}
	snprintf(g->base, sizeof(g->base), "http://%s/etcdserverpb.KV/", hostport);
	g->c = g->cl->easy_init();
	g->hdrs = g->cl->slist_append(NULL, "content-type: application/grpc");
	g->hdrs = g->hdrs != NULL ? g->cl->slist_append(g->hdrs, "te: trailers") : NULL;
	if (g->c == NULL || g->hdrs == NULL) {
		snprintf(err, cap, "libcurl: out of memory");
		grpc_close(g);
		return NULL;
	}
	g->cl->easy_setopt(g->c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
	g->cl->easy_setopt(g->c, CURLOPT_HTTPHEADER, g->hdrs);
	g->cl->easy_setopt(g->c, CURLOPT_POST, 1L);
	g->cl->easy_setopt(g->c, CURLOPT_WRITEFUNCTION, on_body);
	g->cl->easy_setopt(g->c, CURLOPT_WRITEDATA, g);
	g->cl->easy_setopt(g->c, CURLOPT_HEADERFUNCTION, on_header);
	g->cl->easy_setopt(g->c, CURLOPT_HEADERDATA, g);
	g->cl->easy_setopt(g->c, CURLOPT_TIMEOUT_MS, 30000L);
	g->cl->easy_setopt(g->c, CURLOPT_NOSIGNAL, 1L);
	return g;
}

void grpc_close(struct grpc_conn *g)
{
	if (g == NULL) {
		return;
	}
	if (g->c != NULL) {
		g->cl->easy_cleanup(g->c);
	}
	if (g->hdrs != NULL) {
		g->cl->slist_free_all(g->hdrs);
	}
	free(g->buf);
	free(g);
}

/*
 * One unary call: @req packed behind the gRPC prefix, POSTed to @method; the answer unpacked
 * with @out_desc into *@out (caller frees with protobuf_c_message_free_unpacked).
 */
static int call(struct grpc_conn *g, const char *method, const ProtobufCMessage *req,
		const ProtobufCMessageDescriptor *out_desc, ProtobufCMessage **out, char *err,
		size_t cap)
{
	size_t n = protobuf_c_message_get_packed_size(req), mlen;
	unsigned char *body = malloc(n + 5);
	char url[192];
	long http = 0, version = 0;
	CURLcode rc;

	*out = NULL;
	if (body == NULL) {
		snprintf(err, cap, "%s: out of memory", method);
		return -1;
	}
	body[0] = 0;
	body[1] = (unsigned char)(n >> 24);
	body[2] = (unsigned char)(n >> 16);
	body[3] = (unsigned char)(n >> 8);
	body[4] = (unsigned char)n;
	protobuf_c_message_pack(req, body + 5);
	snprintf(url, sizeof(url), "%s%s", g->base, method);
	g->len = 0;
	g->status = -1;
	g->message[0] = '\0';
	g->cl->easy_setopt(g->c, CURLOPT_URL, url);
	g->cl->easy_setopt(g->c, CURLOPT_POSTFIELDS, body);
	g->cl->easy_setopt(g->c, CURLOPT_POSTFIELDSIZE, (long)(n + 5));
	rc = g->cl->easy_perform(g->c);
	free(body);
	if (rc != CURLE_OK) {
		snprintf(err, cap, "%s: %s", method, g->cl->easy_strerror(rc));
		return -1;
	}
	g->cl->easy_getinfo(g->c, CURLINFO_RESPONSE_CODE, &http);
	g->cl->easy_getinfo(g->c, CURLINFO_HTTP_VERSION, &version);
	if (version != CURL_HTTP_VERSION_2_0) {
		snprintf(err, cap, "%s: answered over HTTP version %ld, not HTTP/2", method, version);
		return -1;
	}
	/*
	 * libcurl 7.88.1 (Debian 12) fails a request that reuses a connection opened with
	 * prior knowledge ("Error in the HTTP2 framing layer": it stacks a second HTTP/2 layer
	 * on it; curl issue 10634, fixed in 8.0). Later requests ask for plain HTTP/2, which
	 * reuses the open HTTP/2 connection; the version check above catches a new one.
	 */
	g->cl->easy_setopt(g->c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_0);
	if (http != 200 || g->status != 0) {
		snprintf(err, cap, "%s: HTTP %ld, grpc-status %d (%s)", method, http, g->status,
			 g->status < 0 ? "absent" : g->message);
		return -1;
	}
	mlen = g->len >= 5 ? ((size_t)g->buf[1] << 24 | (size_t)g->buf[2] << 16 |
			      (size_t)g->buf[3] << 8 | g->buf[4])
			   : 0;
	if (g->len < 5 || g->buf[0] != 0 || mlen != g->len - 5) {
		snprintf(err, cap, "%s: answer of %zu bytes is not one uncompressed gRPC message",
			 method, g->len);
		return -1;
	}
	*out = protobuf_c_message_unpack(out_desc, NULL, mlen, g->buf + 5);
	if (*out == NULL) {
		snprintf(err, cap, "%s: the answer does not decode as %s", method, out_desc->name);
		return -1;
	}
	return 0;
}

static ProtobufCBinaryData bytes(const char *s)
{
	ProtobufCBinaryData b = {strlen(s), (uint8_t *)s};

	return b;
}

static bool same(ProtobufCBinaryData b, const char *s)
{
	return b.len == strlen(s) && memcmp(b.data, s, b.len) == 0;
}

int grpc_range(struct grpc_conn *g, const char *key, const char *want, char *err, size_t cap)
{
	Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
	Etcdserverpb__RangeResponse *rep;
	ProtobufCMessage *out;
	int rc = -1;

	req.key = bytes(key);
	if (call(g, "Range", &req.base, &etcdserverpb__range_response__descriptor, &out, err,
		 cap) < 0) {
		return -1;
	}
	rep = (Etcdserverpb__RangeResponse *)out;
	if (rep->header == NULL || rep->header->revision <= 0 || rep->n_kvs != 1 ||
	    !same(rep->kvs[0]->key, key) || !same(rep->kvs[0]->value, want)) {
		snprintf(err, cap, "Range %s: want one kv with \"%s\", got %zu kv(s), revision %lld",
			 key, want, rep->n_kvs,
			 rep->header != NULL ? (long long)rep->header->revision : -1LL);
	} else {
		rc = 0;
	}
	protobuf_c_message_free_unpacked(out, NULL);
	return rc;
}

int grpc_put(struct grpc_conn *g, const char *key, const char *val, int64_t *rev, char *err,
	     size_t cap)
{
	Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
	Etcdserverpb__PutResponse *rep;
	ProtobufCMessage *out;
	int rc = -1;

	req.key = bytes(key);
	req.value = bytes(val);
	if (call(g, "Put", &req.base, &etcdserverpb__put_response__descriptor, &out, err, cap) <
	    0) {
		return -1;
	}
	rep = (Etcdserverpb__PutResponse *)out;
	if (rep->header == NULL || rep->header->revision <= *rev) {
		snprintf(err, cap, "Put %s: want a revision above %lld, got %lld", key,
			 (long long)*rev,
			 rep->header != NULL ? (long long)rep->header->revision : -1LL);
	} else {
		*rev = rep->header->revision;
		rc = 0;
	}
	protobuf_c_message_free_unpacked(out, NULL);
	return rc;
}

/* The first response of a transaction's answer if it is of @kind, else NULL. */
static Etcdserverpb__ResponseOp *first(const Etcdserverpb__TxnResponse *t,
				       Etcdserverpb__ResponseOp__ResponseCase kind)
{
	return t != NULL && t->n_responses > 0 && t->responses[0]->response_case == kind
		       ? t->responses[0]
		       : NULL;
}

int grpc_ticket(struct grpc_conn *g, const char *key, const char *mark, int64_t *n, char *err,
		size_t cap)
{
	Etcdserverpb__Compare c_mark = ETCDSERVERPB__COMPARE__INIT,
			      c_new = ETCDSERVERPB__COMPARE__INIT, *pc_mark = &c_mark,
			      *pc_new = &c_new;
	Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
	Etcdserverpb__RangeRequest range = ETCDSERVERPB__RANGE_REQUEST__INIT;
	Etcdserverpb__RequestOp o_put = ETCDSERVERPB__REQUEST_OP__INIT,
				o_range = ETCDSERVERPB__REQUEST_OP__INIT,
				o_txn = ETCDSERVERPB__REQUEST_OP__INIT, *po_put = &o_put,
				*po_range = &o_range, *po_txn = &o_txn;
	Etcdserverpb__TxnRequest outer = ETCDSERVERPB__TXN_REQUEST__INIT,
				 inner = ETCDSERVERPB__TXN_REQUEST__INIT;
	Etcdserverpb__TxnResponse *rep;
	Etcdserverpb__ResponseOp *r;
	Etcdserverpb__KeyValue *prev;
	ProtobufCMessage *out;
	int rc = -1;

	c_mark.key = c_new.key = put.key = range.key = bytes(key);
	c_mark.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
	c_mark.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
	c_mark.value = bytes(mark);
	c_new.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
	c_new.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
	c_new.version = 0;
	put.value = bytes(mark);
	put.prev_kv = 1;
	o_put.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
	o_put.request_put = &put;
	o_range.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
	o_range.request_range = &range;
	inner.n_compare = inner.n_success = inner.n_failure = 1;
	inner.compare = &pc_new;
	inner.success = &po_put;
	inner.failure = &po_range;
	o_txn.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
	o_txn.request_txn = &inner;
	outer.n_compare = outer.n_success = outer.n_failure = 1;
	outer.compare = &pc_mark;
	outer.success = &po_put;
	outer.failure = &po_txn;
	if (call(g, "Txn", &outer.base, &etcdserverpb__txn_response__descriptor, &out, err, cap) <
	    0) {
		return -1;
	}
	rep = (Etcdserverpb__TxnResponse *)out;
	if (!rep->succeeded) {
		r = first(rep, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN);
		rep = r != NULL ? r->response_txn : NULL;
	}
	r = rep != NULL && rep->succeeded
		    ? first(rep, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT)
		    : NULL;
	prev = r != NULL ? r->response_put->prev_kv : NULL;
	if (r == NULL) {
		snprintf(err, cap, "Txn (ticket) %s: no put was taken", key);
	} else if (prev != NULL && (!same(prev->value, mark) || prev->version <= 0)) {
		snprintf(err, cap, "Txn (ticket) %s: prev_kv is not the mark at a version", key);
	} else {
		*n = (prev != NULL ? prev->version : 0) + 1;
		rc = 0;
	}
	protobuf_c_message_free_unpacked(out, NULL);
	return rc;
}

int grpc_cas(struct grpc_conn *g, const char *key, const char *expected, const char *desired,
	     char *err, size_t cap)
{
	Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT, *pcmp = &cmp;
	Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
	Etcdserverpb__RangeRequest range = ETCDSERVERPB__RANGE_REQUEST__INIT;
	Etcdserverpb__RequestOp o_put = ETCDSERVERPB__REQUEST_OP__INIT,
				o_range = ETCDSERVERPB__REQUEST_OP__INIT, *po_put = &o_put,
				*po_range = &o_range;
	Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
	Etcdserverpb__TxnResponse *rep;
	ProtobufCMessage *out;
	int rc = -1;

	cmp.key = put.key = range.key = bytes(key);
	cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
	cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
	cmp.value = bytes(expected);
	put.value = bytes(desired);
	o_put.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
	o_put.request_put = &put;
	o_range.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
	o_range.request_range = &range;
	req.n_compare = 1;
	req.compare = &pcmp;
	req.n_success = 1;
	req.success = &po_put;
	req.n_failure = 1;
	req.failure = &po_range;
	if (call(g, "Txn", &req.base, &etcdserverpb__txn_response__descriptor, &out, err, cap) <
	    0) {
		return -1;
	}
	rep = (Etcdserverpb__TxnResponse *)out;
	if (!rep->succeeded || first(rep, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT) == NULL) {
		snprintf(err, cap, "Txn (compare_set) %s: the compare on \"%s\" did not hold", key,
			 expected);
	} else {
		rc = 0;
	}
	protobuf_c_message_free_unpacked(out, NULL);
	return rc;
}
