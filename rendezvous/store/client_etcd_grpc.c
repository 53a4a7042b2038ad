/* SPDX-License-Identifier: MIT */
/*
 * rendezvous/store/client_etcd_grpc.c: etcd's unary KV calls (Range, Put, DeleteRange, Txn)
 * over gRPC instead of the JSON gateway, behind etcd_call().
 *
 * The gateway decodes each request's JSON and encodes each answer's, then calls etcd's gRPC
 * server inside etcd: per request that is about half of etcd's CPU (bench/etcd_cost,
 * bench/notes/rdzv_scale.md: 1.14 ms against 0.52 ms). The client keeps building requests
 * and reading answers as JSON (one encoder, the gateway's shapes), and this file converts
 * between that JSON and protobuf with the descriptors protoc-c generates from etcd_kv.proto:
 * a JSON member is the field of the same name; bytes are base64, 64-bit integers decimal
 * strings (or numbers), enums their names; an answer's zero fields are left out, as the
 * gateway leaves them out. A request member that etcd_kv.proto lacks is refused, named, so a
 * field added to a request can never be dropped on the way. The HTTP/2 side (the handle, the
 * 5-byte message prefix, grpc-status) is client_etcd_http.c's attempt().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include <crun/error.h>

#include "rendezvous/store/client_etcd_internal.h"
#include "rendezvous/store/curl_lib.h"
#include "rendezvous/store/etcd_kv.pb-c.h"
#include "src/common/base64.h"
#include "src/common/log.h"

/* The KV calls that go over gRPC, by the gateway path crun's client names them with. */
static const struct {
	const char *path, *method;
	const ProtobufCMessageDescriptor *req, *rep;
} calls[] = {
	{"/v3/kv/range", "Range", &etcdserverpb__range_request__descriptor,
	 &etcdserverpb__range_response__descriptor},
	{"/v3/kv/put", "Put", &etcdserverpb__put_request__descriptor,
	 &etcdserverpb__put_response__descriptor},
	{"/v3/kv/deleterange", "DeleteRange", &etcdserverpb__delete_range_request__descriptor,
	 &etcdserverpb__delete_range_response__descriptor},
	{"/v3/kv/txn", "Txn", &etcdserverpb__txn_request__descriptor,
	 &etcdserverpb__txn_response__descriptor},
};

static int from_json(const ProtobufCMessageDescriptor *d, struct json_object *o,
		     ProtobufCMessage **out, char *why, size_t cap);

static ProtobufCMessage *new_message(const ProtobufCMessageDescriptor *d)
{
	ProtobufCMessage *m = calloc(1, d->sizeof_message);

	if (m != NULL) {
		d->message_init(m);
	}
	return m;
}

static int64_t json_int(struct json_object *v, bool *ok)
{
	const char *s;
	char *end;
	long long n;

	*ok = true;
	if (json_object_is_type(v, json_type_int)) {
		return json_object_get_int64(v);
	}
	if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
		errno = 0;
		n = strtoll(s, &end, 10);
		if (errno == 0 && end != s && *end == '\0') {
			return n;
		}
	}
	*ok = false;
	return 0;
}

/* One scalar (not repeated, not a message) field @f of @m from @v. */
static int scalar_from_json(const ProtobufCFieldDescriptor *f, void *at, struct json_object *v,
			    char *why, size_t cap)
{
	const ProtobufCEnumValue *ev;
	ProtobufCBinaryData *bd;
	const char *s;
	size_t n;
	bool ok = true;

	switch (f->type) {
	case PROTOBUF_C_TYPE_BOOL:
		ok = json_object_is_type(v, json_type_boolean);
		*(protobuf_c_boolean *)at = json_object_get_boolean(v);
		break;
	case PROTOBUF_C_TYPE_INT64:
		*(int64_t *)at = json_int(v, &ok);
		break;
	case PROTOBUF_C_TYPE_ENUM:
		ev = json_object_is_type(v, json_type_string)
			     ? protobuf_c_enum_descriptor_get_value_by_name(f->descriptor,
									      json_object_get_string(v))
			     : NULL;
		ok = ev != NULL;
		*(int *)at = ok ? ev->value : 0;
		break;
	case PROTOBUF_C_TYPE_BYTES:
		ok = json_object_is_type(v, json_type_string);
		s = ok ? json_object_get_string(v) : "";
		n = strlen(s);
		bd = at;
		bd->data = malloc(base64_decoded_cap(n) + 1);
		if (bd->data == NULL) {
			snprintf(why, cap, "out of memory");
			return -ENOMEM;
		}
		ok = ok && base64_decode(s, n, bd->data, &bd->len) == 0;
		break;
	default:
		ok = false;
		break;
	}
	if (!ok) {
		snprintf(why, cap, "field %s: cannot take %.60s", f->name,
			 json_object_to_json_string(v));
		return -EPROTO;
	}
	return 0;
}

/* Field @f of @m from the JSON value @v. */
static int field_from_json(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			   struct json_object *v, char *why, size_t cap)
{
	char *base = (char *)m;
	ProtobufCMessage **arr;
	size_t i, n;
	int rc;

	if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
		*(uint32_t *)(base + f->quantifier_offset) = f->id;
	}
	if (f->label == PROTOBUF_C_LABEL_REPEATED) {
		if (f->type != PROTOBUF_C_TYPE_MESSAGE || !json_object_is_type(v, json_type_array)) {
			snprintf(why, cap, "field %s: not a list of messages", f->name);
			return -EPROTO;
		}
		n = json_object_array_length(v);
		arr = calloc(n ? n : 1, sizeof(*arr));
		if (arr == NULL) {
			snprintf(why, cap, "out of memory");
			return -ENOMEM;
		}
		*(ProtobufCMessage ***)(base + f->offset) = arr;
		for (i = 0; i < n; i++) {
			rc = from_json(f->descriptor, json_object_array_get_idx(v, i), &arr[i], why,
				       cap);
			*(size_t *)(base + f->quantifier_offset) = i + (arr[i] != NULL);
			if (rc < 0) {
				return rc;
			}
		}
		return 0;
	}
	if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
		return from_json(f->descriptor, v, (ProtobufCMessage **)(base + f->offset), why,
				 cap);
	}
	return scalar_from_json(f, base + f->offset, v, why, cap);
}

/* A new message of @d from the JSON object @o into *@out (set as soon as it exists). */
static int from_json(const ProtobufCMessageDescriptor *d, struct json_object *o,
		     ProtobufCMessage **out, char *why, size_t cap)
{
	const ProtobufCFieldDescriptor *f;
	int rc;

	*out = NULL;
	if (!json_object_is_type(o, json_type_object)) {
		snprintf(why, cap, "%s: not a JSON object", d->short_name);
		return -EPROTO;
	}
	*out = new_message(d);
	if (*out == NULL) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	json_object_object_foreach(o, k, v)
	{
		f = protobuf_c_message_descriptor_get_field_by_name(d, k);
		if (f == NULL) {
			snprintf(why, cap, "%s has no field \"%s\" in etcd_kv.proto", d->short_name,
				 k);
			return -EPROTO;
		}
		rc = field_from_json(*out, f, v, why, cap);
		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

static int to_json(const ProtobufCMessage *m, struct json_object **out);

/* Field @f of @m (present and not zero) as JSON into *@v; NULL: left out. */
static int field_to_json(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
			 struct json_object **v)
{
	const char *base = (const char *)m;
	const void *at = base + f->offset;
	const ProtobufCBinaryData *bd;
	const ProtobufCEnumValue *ev;
	ProtobufCMessage *const *arr;
	struct json_object *e;
	char num[24];
	size_t i, n;
	bool bad = false;

	*v = NULL;
	if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
	    *(const uint32_t *)(base + f->quantifier_offset) != f->id) {
		return 0;
	}
	if (f->label == PROTOBUF_C_LABEL_REPEATED) {
		n = *(const size_t *)(base + f->quantifier_offset);
		arr = *(ProtobufCMessage *const *const *)at;
		if (n == 0 || f->type != PROTOBUF_C_TYPE_MESSAGE) {
			return 0;
		}
		*v = json_object_new_array();
		for (i = 0; i < n && !bad; i++) {
			bad = to_json(arr[i], &e) < 0;
			etcd_jpush(*v, e, &bad);
		}
		return bad ? -ENOMEM : 0;
	}
	switch (f->type) {
	case PROTOBUF_C_TYPE_MESSAGE:
		return *(ProtobufCMessage *const *)at != NULL
			       ? to_json(*(ProtobufCMessage *const *)at, v)
			       : 0;
	case PROTOBUF_C_TYPE_BOOL:
		*v = *(const protobuf_c_boolean *)at ? json_object_new_boolean(1) : NULL;
		return 0;
	case PROTOBUF_C_TYPE_INT64:
		*v = *(const int64_t *)at != 0 ? etcd_jint(*(const int64_t *)at) : NULL;
		break;
	case PROTOBUF_C_TYPE_UINT64:
		snprintf(num, sizeof(num), "%llu", (unsigned long long)*(const uint64_t *)at);
		*v = *(const uint64_t *)at != 0 ? json_object_new_string(num) : NULL;
		break;
	case PROTOBUF_C_TYPE_ENUM:
		ev = protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)at);
		*v = *(const int *)at != 0 && ev != NULL ? json_object_new_string(ev->name) : NULL;
		break;
	case PROTOBUF_C_TYPE_BYTES:
		bd = at;
		*v = bd->len > 0 ? etcd_jbytes(bd->data, bd->len) : NULL;
		if (bd->len > 0 && *v == NULL) {
			return -ENOMEM;
		}
		return 0;
	default:
		return 0; /* no other type is in etcd_kv.proto's answers */
	}
	return 0;
}

/* @m as the gateway's JSON (zero fields left out). */
static int to_json(const ProtobufCMessage *m, struct json_object **out)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	struct json_object *v;
	bool bad = false;
	unsigned i;

	*out = json_object_new_object();
	for (i = 0; i < d->n_fields && !bad; i++) {
		bad = field_to_json(m, &d->fields[i], &v) < 0;
		if (!bad && v != NULL) {
			etcd_jset(*out, d->fields[i].name, v, &bad);
		}
	}
	if (bad || *out == NULL) {
		json_object_put(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

int etcd_grpc_encode(struct store_backend *b, const char *op, const char *path,
		     struct json_object *req, const char **method, char **body, size_t *len)
{
	ProtobufCMessage *m = NULL;
	char why[200];
	size_t i, n;
	int rc;

	*method = NULL;
	*body = NULL;
	for (i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		if (strcmp(path, calls[i].path) == 0) {
			break;
		}
	}
	if (i == sizeof(calls) / sizeof(calls[0])) {
		return 0; /* leases, watches, auth, status: the gateway */
	}
	rc = from_json(calls[i].req, req, &m, why, sizeof(why));
	if (rc < 0) {
		if (m != NULL) {
			protobuf_c_message_free_unpacked(m, NULL);
		}
		return etcd_fail(b, rc, "%s: gRPC request: %s", op, why);
	}
	n = protobuf_c_message_get_packed_size(m);
	*body = malloc(n + 5);
	if (*body == NULL) {
		protobuf_c_message_free_unpacked(m, NULL);
		return etcd_fail(b, -ENOMEM, "%s: out of memory", op);
	}
	/* gRPC's message prefix: not compressed, then the length, big-endian. */
	(*body)[0] = 0;
	(*body)[1] = (char)(n >> 24);
	(*body)[2] = (char)(n >> 16);
	(*body)[3] = (char)(n >> 8);
	(*body)[4] = (char)n;
	protobuf_c_message_pack(m, (uint8_t *)*body + 5);
	protobuf_c_message_free_unpacked(m, NULL);
	*method = calls[i].method;
	*len = n + 5;
	return 1;
}

int etcd_grpc_decode(struct store_backend *b, const char *op, const char *method,
		     const char *rx, size_t len, struct json_object **out)
{
	const ProtobufCMessageDescriptor *d = NULL;
	const unsigned char *p = (const unsigned char *)rx;
	ProtobufCMessage *m;
	size_t i, n;
	int rc;

	*out = NULL;
	for (i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		if (strcmp(method, calls[i].method) == 0) {
			d = calls[i].rep;
		}
	}
	n = len >= 5 ? ((size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4]) : 0;
	if (d == NULL || len < 5 || p[0] != 0 || n != len - 5) {
		return etcd_fail(b, CRUN_ESERVER,
				 "%s: an answer of %zu bytes that is not one gRPC message", op, len);
	}
	m = protobuf_c_message_unpack(d, NULL, n, p + 5);
	if (m == NULL) {
		return etcd_fail(b, CRUN_ESERVER, "%s: etcd's answer does not decode as %s", op,
				 d->name);
	}
	rc = to_json(m, out);
	protobuf_c_message_free_unpacked(m, NULL);
	return rc < 0 ? etcd_fail(b, -ENOMEM, "%s: out of memory", op) : 0;
}

/* grpc-message is percent-encoded: decode it in place. */
static void unpercent(char *s)
{
	char *w = s, hex[3] = {0};

	for (; *s != '\0'; s++) {
		if (s[0] == '%' && s[1] != '\0' && s[2] != '\0') {
			hex[0] = s[1];
			hex[1] = s[2];
			*w++ = (char)strtol(hex, NULL, 16);
			s += 2;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

size_t etcd_grpc_on_header(char *p, size_t size, size_t nmemb, void *arg)
{
	struct store_backend *b = arg;
	size_t len = size * nmemb, vl;
	const char *v;

	if (len > 12 && strncasecmp(p, "grpc-status:", 12) == 0) {
		b->gstatus = atoi(p + 12);
	} else if (len > 13 && strncasecmp(p, "grpc-message:", 13) == 0) {
		v = p + 13;
		vl = len - 13;
		while (vl > 0 && (*v == ' ' || *v == '\t')) {
			v++;
			vl--;
		}
		while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n')) {
			vl--;
		}
		snprintf(b->gmsg, sizeof(b->gmsg), "%.*s", (int)vl, v);
		unpercent(b->gmsg);
	}
	return len;
}

int etcd_grpc_headers(struct store_backend *b)
{
	const struct curl_lib *cu = b->cu;
	struct curl_slist *h = NULL, *t;
	char tok[4200];
	size_t i;
	/* The metadata the gateway's headers carry ("hasleader", the token), by their names. */
	const char *const fixed[] = {"Content-Type: application/grpc", "TE: trailers", "Expect:",
				     "hasleader: true", tok};

	snprintf(tok, sizeof(tok), "token: %s", b->token != NULL ? b->token : "");
	for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		if (fixed[i] == tok && (b->token == NULL || b->token[0] == '\0')) {
			break;
		}
		t = cu->slist_append(h, fixed[i]);
		if (t == NULL) {
			cu->slist_free_all(h);
			return -ENOMEM;
		}
		h = t;
	}
	cu->slist_free_all(b->ghdrs);
	b->ghdrs = h;
	cu->easy_setopt(b->gcurl, CURLOPT_HTTPHEADER, h);
	return 0;
}

/*
 * libcurl 7.88.1 (Debian 12) fails a request that reuses a connection opened with HTTP/2
 * prior knowledge, before sending it ("Error in the HTTP2 framing layer": it stacks a second
 * HTTP/2 layer on the connection; curl issue 10634, fixed in 8.0). So prior knowledge opens a
 * fresh connection, and the calls after it to the same member ask for plain HTTP/2, which
 * reuses it. Should that connection be gone, libcurl opens an HTTP/1.1 one instead, which
 * etcd answers without serving the call: etcd_grpc_answer() sees it, and the call is retried
 * with prior knowledge.
 */
void etcd_grpc_prepare(struct store_backend *b, void *c, const struct etcd_ep *ep)
{
	if (ep->tls) {
		/* https: HTTP/2 is agreed in the TLS handshake (ALPN "h2"), as etcd's own
		 * clients reach it; no prior knowledge, so the 7.88.1 bug above cannot arise. */
		b->cu->easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
		b->cu->easy_setopt(c, CURLOPT_FRESH_CONNECT, 0L);
	} else {
		b->cu->easy_setopt(c, CURLOPT_HTTP_VERSION,
				   b->gep == ep ? (long)CURL_HTTP_VERSION_2_0
						: (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
		b->cu->easy_setopt(c, CURLOPT_FRESH_CONNECT, b->gep == ep ? 0L : 1L);
	}
	b->gstatus = -1;
	b->gmsg[0] = '\0';
}

int etcd_grpc_answer(struct store_backend *b, void *c, const char *op, const struct etcd_ep *ep,
		     long http, struct json_object **reply)
{
	long version = 0;

	b->cu->easy_getinfo(c, CURLINFO_HTTP_VERSION, &version);
	if (version != CURL_HTTP_VERSION_2_0) {
		b->gep = NULL; /* not served (etcd_grpc_prepare()): open HTTP/2 again */
		if (ep->tls && !b->grpc_tls_off) {
			/* TLS agreed on HTTP/1.1 only: the gateway serves this handle's calls. */
			b->grpc_tls_off = true;
			log_warn("%s: %s answered a gRPC call over HTTP/1.1 (no HTTP/2 in the TLS "
				 "handshake): its calls go through the JSON gateway",
				 b->where, ep->name);
		}
		return etcd_fail(b, -ECONNRESET, "%s: %s: answered over HTTP/1 (HTTP %ld)", op,
				 ep->name, http);
	}
	if (b->gep != ep) {
		log_debug("%s: KV calls to %s over gRPC (HTTP/2, %s)", b->where, ep->name,
			  ep->tls ? "TLS with ALPN h2" : "prior knowledge");
	}
	b->gep = ep;
	if (b->gstatus < 0) {
		return etcd_fail(b, http >= 500 ? -ETIMEDOUT : CRUN_ESERVER,
				 "%s: %s: HTTP %ld with no grpc-status: not etcd's gRPC", op,
				 ep->name, http);
	}
	if (b->gstatus != 0) {
		if (b->gmsg[0] == '\0') {
			snprintf(b->gmsg, sizeof(b->gmsg), "(no message)");
		}
		return 1;
	}
	return etcd_grpc_decode(b, op, b->gmethod, b->rx, b->rx_len, reply);
}
