/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_http.c: etcd's JSON gateway over libcurl: fail-over, errors, auth. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/client_etcd_internal.h"
#include "rendezvous/store/curl_lib.h"
#include "rendezvous/store/wire.h"
#include "src/common/backoff.h"
#include "src/common/clock.h"
#include "src/common/log.h"

/*
 * One operation may try every endpoint several times. An attempt is bounded so that a member
 * that hangs (rather than refusing) cannot eat the whole deadline while others could answer,
 * and so that a proposal lost with a leader that died is sent again once a new one is
 * elected (about 1 s), not after etcd's own request timeout (about 7 s). Large bodies get
 * 1 ms more per KiB; watches are not bounded. Connecting gets CONNECT_CAP_MS when there is
 * another endpoint to try.
 */
#define ATTEMPT_CAP_MS 3000
#define CONNECT_CAP_MS 2000
/* Nobody serving an operation for this long is said on stderr, and again as often. */
#define PROGRESS_MS 5000
/*
 * Past the open, every member failing every sweep this long with at least one of them
 * answering with an error (a member without a leader answers "no leader", or times out
 * proposals) is a cluster without quorum: the operation gives up with ETCD_ENOLEADER
 * rather than at its deadline (read_timeout, 60 s by default), so a running job stops within
 * seconds. Several elections (about 1 s each with etcd's defaults) fit in it.
 */
#define QUORUM_LOST_MS 10000
/* Every member silent (nothing came back) this long past the open gives up too, -ETIMEDOUT:
 * heartbeat_timeout then bounds losing the store, not 3 keep-alives' 60 s (etcd/drop.sh). */
#define SILENT_MS QUORUM_LOST_MS
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 1000
/* A reply body bigger than this is refused: the largest legitimate one is a MULTI_GET chunk
 * or a 16 MiB value, base64 (4/3) inside JSON. */
#define MAX_REPLY_BYTES ((size_t)WIRE_MAX_FRAME / 3 * 4 + (1u << 20))

/* How one attempt on one endpoint ended. */
enum outcome {
	ATT_OK,     /* an answer: b->rx holds it, or the stream was stopped by its callback */
	ATT_FINAL,  /* an answer that is an error: return it */
	ATT_RETRY,  /* this endpoint could not serve it: try the next */
	ATT_REAUTH, /* the token expired: log in again, then retry here */
	ATT_TLSDROP, /* a new TLS connection closed before any answer: retry here, then TLS_FAIL */
};

/*
 * A member that wants a client certificate it does not get (or does not trust) finishes the
 * TLS 1.3 handshake and then sends an alert and closes: libcurl sees the alert, or just a
 * connection reset or closed before any answer, whichever comes first. A member that died
 * would refuse the next connection instead: a new TLS connection closed before any answer this
 * many times in a row is the member refusing this client.
 */
#define TLS_DROPS_MAX 3
/* The largest request sent over gRPC (etcd_call()); well under etcd's default
 * --max-request-bytes (1.5 MiB), far over a rendezvous request (under 1 KiB). */
#define GRPC_MAX_BODY (256u << 10)

struct etcd_stream {
	json_tokener *tok;
	etcd_msg_cb cb;
	void *arg;
	size_t pending; /* bytes of the message being parsed */
	int rc;         /* what stopped the stream: 1 from the callback, or < 0 */
	bool answered;  /* rc came from an error message of etcd's: see out */
	enum outcome out;
	bool amb;       /* that error leaves a write ambiguous */
	bool any;       /* at least one message arrived */
};

int etcd_fail(struct store_backend *b, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	diag_setv(&b->diag, code, fmt, ap);
	va_end(ap);
	return diag_prefix(&b->diag, "%s", b->where);
}

/* ---- the curl handle ---- */

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
	struct store_backend *b = arg;
	size_t n = size * nmemb, cap;
	char *q;

	if (b->rx_len + n + 1 > b->rx_cap) {
		if (b->rx_len + n + 1 > MAX_REPLY_BYTES) {
			b->rx_err = -EMSGSIZE;
			return 0;
		}
		cap = b->rx_cap ? b->rx_cap : 4096;
		while (cap < b->rx_len + n + 1) {
			cap *= 2;
		}
		q = realloc(b->rx, cap);
		if (q == NULL) {
			b->rx_err = -ENOMEM;
			return 0;
		}
		b->rx = q;
		b->rx_cap = cap;
	}
	memcpy(b->rx + b->rx_len, p, n);
	b->rx_len += n;
	b->rx[b->rx_len] = '\0';
	return n;
}

static bool error_of(struct json_object *o, int *code, const char **msg);
static enum outcome answer_error(struct store_backend *b, const char *op, int code,
				 const char *msg, bool *amb, int *rc);

/*
 * A streamed reply: newline-separated JSON messages, parsed as the bytes arrive. Each is
 * {"result": {...}} (handed to the callback) or {"error": {...}} (ends the stream).
 */
static size_t on_stream(char *p, size_t size, size_t nmemb, void *arg)
{
	struct store_backend *b = arg;
	struct etcd_stream *s = b->stream;
	size_t n = size * nmemb, off = 0, used;
	struct json_object *msg;
	enum json_tokener_error e;
	const char *emsg;
	int chunk, code;

	while (off < n) {
		chunk = n - off > INT32_MAX ? INT32_MAX : (int)(n - off);
		msg = json_tokener_parse_ex(s->tok, p + off, chunk);
		e = json_tokener_get_error(s->tok);
		if (e == json_tokener_continue) {
			s->pending += (size_t)chunk;
			if (s->pending > MAX_REPLY_BYTES) {
				s->rc = etcd_fail(b, -EMSGSIZE, "watch: message over %zu bytes",
						  MAX_REPLY_BYTES);
				return 0;
			}
			return n;
		}
		if (e != json_tokener_success || msg == NULL) {
			s->rc = etcd_fail(b, -EPROTO, "watch: bad JSON in the stream: %s",
					  json_tokener_error_desc(e));
			json_object_put(msg);
			return 0;
		}
		used = json_tokener_get_parse_end(s->tok);
		off += used > 0 ? used : (size_t)chunk;
		json_tokener_reset(s->tok);
		s->pending = 0;
		s->any = true;
		if (error_of(msg, &code, &emsg)) {
			s->out = answer_error(b, "watch", code, emsg, &s->amb, &s->rc);
			s->answered = true;
		} else {
			s->rc = s->cb(b, etcd_jget(msg, "result") ? etcd_jget(msg, "result") : msg,
				      s->arg);
		}
		json_object_put(msg);
		if (s->rc != 0) {
			return 0;
		}
	}
	return n;
}

static int set_headers(struct store_backend *b)
{
	const struct curl_lib *cu = b->cu;
	struct curl_slist *h = NULL, *t;
	char auth[4200];

	/* No "Expect: 100-continue" round trip before large bodies. "hasleader": etcd refuses
	 * at once, rather than after its request timeout, on a member that has lost its leader,
	 * and ends a watch there; that member is then failed over like a dead one. */
	static const char *const fixed[] = {"Content-Type: application/json", "Expect:",
					    "Grpc-Metadata-hasleader: true"};

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		t = cu->slist_append(h, fixed[i]);
		if (t == NULL) {
			cu->slist_free_all(h);
			return -ENOMEM;
		}
		h = t;
	}
	if (b->token != NULL && b->token[0] != '\0') {
		snprintf(auth, sizeof(auth), "Authorization: %s", b->token);
		t = cu->slist_append(h, auth);
		if (t == NULL) {
			cu->slist_free_all(h);
			return -ENOMEM;
		}
		h = t;
	}
	cu->slist_free_all(b->hdrs);
	b->hdrs = h;
	cu->easy_setopt(b->curl, CURLOPT_HTTPHEADER, h);
	cu->easy_setopt(b->scurl, CURLOPT_HTTPHEADER, h);
#ifdef CRUN_ETCD_GRPC
	return b->gcurl != NULL ? etcd_grpc_headers(b) : 0;
#else
	return 0;
#endif
}

/*
 * Count the requests a transfer sends. libcurl sends a request again on its own, on a fresh
 * connection, when a reused connection dies before any answer arrives: if etcd had applied
 * the first one (and died, or its answer was lost), the second is a repeat that the caller
 * must know about. Only the outgoing headers are looked at; nothing is printed.
 */
static int on_debug(CURL *c, curl_infotype type, char *data, size_t size, void *arg)
{
	struct store_backend *b = arg;

	(void)c;
	(void)data;
	(void)size;
	if (type == CURLINFO_HEADER_OUT) {
		b->sends++;
	}
	return 0;
}

/* An easy handle with the options every request shares. */
static CURL *easy(struct store_backend *b)
{
	const struct curl_lib *cu = b->cu;
	CURL *c = cu->easy_init();

	if (c == NULL) {
		return NULL;
	}
	cu->easy_setopt(c, CURLOPT_SHARE, b->share);
	cu->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	cu->easy_setopt(c, CURLOPT_PROXY, ""); /* etcd is reached directly, whatever http_proxy says */
	cu->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	cu->easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	cu->easy_setopt(c, CURLOPT_POST, 1L);
	cu->easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	/* A dead host under a held watch is noticed by TCP keepalive. */
	cu->easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	cu->easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 10L);
	cu->easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 5L);
	cu->easy_setopt(c, CURLOPT_ERRORBUFFER, b->errbuf);
	cu->easy_setopt(c, CURLOPT_WRITEDATA, b);
	cu->easy_setopt(c, CURLOPT_DEBUGFUNCTION, on_debug);
	cu->easy_setopt(c, CURLOPT_DEBUGDATA, b);
	cu->easy_setopt(c, CURLOPT_VERBOSE, 1L);
	if (b->cacert != NULL) {
		cu->easy_setopt(c, CURLOPT_CAINFO, b->cacert);
	}
	if (b->cert != NULL) {
		cu->easy_setopt(c, CURLOPT_SSLCERT, b->cert);
	}
	if (b->key != NULL) {
		cu->easy_setopt(c, CURLOPT_SSLKEY, b->key);
	}
	return c;
}

int etcd_http_init(struct store_backend *b)
{
	const struct curl_lib *cu = curl_lib_get(&b->diag);

	if (cu == NULL) {
		return diag_prefix(&b->diag, "%s", b->where);
	}
	b->cu = cu;
	/*
	 * Two easy handles: one for calls, whose connection stays open between them, and one
	 * for watches, whose connection is dropped when a wait ends. They share TLS sessions
	 * and DNS answers (one thread uses both: no locks).
	 */
	b->share = cu->share_init();
	if (b->share != NULL) {
		cu->share_setopt(b->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
		cu->share_setopt(b->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	}
	b->curl = easy(b);
	b->scurl = easy(b);
	if (b->share == NULL || b->curl == NULL || b->scurl == NULL) {
		return etcd_fail(b, -ENOMEM, "curl_easy_init failed");
	}
#ifdef CRUN_ETCD_GRPC
	/* The KV calls: gRPC over HTTP/2 (client_etcd_grpc.c), with the same TLS files and checks
	 * as the gateway's handles (easy()). One cached connection: a call to another member
	 * closes the last one's (see etcd_grpc_prepare()). */
	b->gcurl = easy(b);
	if (b->gcurl == NULL) {
		return etcd_fail(b, -ENOMEM, "curl_easy_init failed");
	}
	cu->easy_setopt(b->gcurl, CURLOPT_MAXCONNECTS, 1L);
	cu->easy_setopt(b->gcurl, CURLOPT_HEADERFUNCTION, etcd_grpc_on_header);
	cu->easy_setopt(b->gcurl, CURLOPT_HEADERDATA, b);
#endif
	if (set_headers(b) < 0) {
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	return 0;
}

void etcd_http_finish(struct store_backend *b)
{
	const struct curl_lib *cu = b->cu;

	if (cu != NULL) { /* NULL: libcurl could not be loaded, so nothing of it was made */
		cu->easy_cleanup(b->curl);
		cu->easy_cleanup(b->scurl);
		if (b->gcurl != NULL) {
			cu->easy_cleanup(b->gcurl);
		}
		cu->slist_free_all(b->ghdrs);
		if (b->share != NULL) {
			cu->share_cleanup(b->share);
		}
		cu->slist_free_all(b->hdrs);
	}
	b->curl = b->scurl = b->share = b->hdrs = b->gcurl = b->ghdrs = NULL;
	free(b->rx);
	b->rx = NULL;
	b->rx_len = b->rx_cap = 0;
}

void store_etcd_gateway_only(struct store_backend *b)
{
	if (b->gcurl != NULL) {
		b->cu->easy_cleanup(b->gcurl);
		b->gcurl = NULL;
	}
}

/* ---- errors ---- */

/* Errors after which etcd may or may not have applied the request. */
static bool ambiguous_msg(const char *msg)
{
	return strstr(msg, "request timed out") != NULL || strstr(msg, "leader changed") != NULL ||
	       strstr(msg, "connection lost") != NULL;
}

bool etcd_transient(int code, const char *msg)
{
	/* A member shutting down closes the gateway's own gRPC connection: "transport is
	 * closing", "the client connection is closing" (Unavailable, or Canceled). */
	return code == 14 /* Unavailable */ || code == 4 /* DeadlineExceeded */ ||
	       code == 1 /* Canceled */ || ambiguous_msg(msg) || strstr(msg, "no leader") != NULL ||
	       strstr(msg, "too many requests") != NULL || strstr(msg, "server stopped") != NULL ||
	       strstr(msg, "not capable") != NULL || strstr(msg, "is closing") != NULL;
}

static bool token_expired(const char *msg)
{
	return strstr(msg, "invalid auth token") != NULL ||
	       strstr(msg, "revision of auth store is old") != NULL;
}

int etcd_map_error(struct store_backend *b, const char *op, int code, const char *msg)
{
	int rc = CRUN_ESERVER;

	if (strstr(msg, "permission denied") != NULL && b->user != NULL) {
		/* etcd's own words, and whose roles did not grant it (@op names the key). */
		return etcd_fail(b, CRUN_EAUTH,
				 "%s: etcd said: %s (etcd user %s: no role of it grants this key)",
				 op, msg, b->user);
	} else if (code == 7 || code == 16 || strstr(msg, "permission denied") != NULL ||
		   strstr(msg, "authentication failed") != NULL) {
		rc = CRUN_EAUTH;
	} else if (strstr(msg, "user name is empty") != NULL) {
		return etcd_fail(b, CRUN_EAUTH,
				 "%s: etcd said: %s (etcd has authentication on: set CRUN_ETCD_USER "
				 "and CRUN_ETCD_PASSWORD_FILE)",
				 op, msg);
	} else if (code == 8 || strstr(msg, "too large") != NULL ||
		   strstr(msg, "too many operations") != NULL) {
		/* --max-request-bytes, --max-txn-ops, gRPC's message size */
		rc = -EMSGSIZE;
	} else if (strstr(msg, "compacted") != NULL) {
		rc = -ESTALE;
	} else if (code == 5) {
		rc = -ENOENT;
	}
	return etcd_fail(b, rc, "%s: etcd said: %s", op, msg);
}

/*
 * The gRPC status of an error answer: {"error": "...", "message": "...", "code": N} (unary)
 * or {"error": {"grpc_code": N, "message": "..."}} (inside a stream). False: not one.
 */
static bool error_of(struct json_object *o, int *code, const char **msg)
{
	struct json_object *e = etcd_jget(o, "error");

	if (e == NULL) {
		return false;
	}
	if (json_object_is_type(e, json_type_object)) {
		*code = (int)etcd_jget_int(e, "grpc_code");
		*msg = json_object_get_string(etcd_jget(e, "message"));
	} else {
		*code = (int)etcd_jget_int(o, "code");
		*msg = json_object_get_string(etcd_jget(o, "message"));
		if (*msg == NULL || **msg == '\0') {
			*msg = json_object_get_string(e);
		}
	}
	if (*msg == NULL) {
		*msg = "(no message)";
	}
	/* LeaseGrantResponse has an "error" string of its own, empty when all is well. */
	return *code != 0 || **msg != '\0';
}

/* Classify etcd's error answer; b->diag gets the message. */
static enum outcome answer_error(struct store_backend *b, const char *op, int code,
				 const char *msg, bool *amb, int *rc)
{
	if (token_expired(msg) && b->user != NULL) {
		*rc = etcd_fail(b, CRUN_EAUTH, "%s: etcd said: %s", op, msg);
		return ATT_REAUTH;
	}
	if (etcd_transient(code, msg)) {
		*amb = *amb || code == 4 || ambiguous_msg(msg);
		*rc = etcd_fail(b, -ETIMEDOUT, "%s: etcd said: %s", op, msg);
		return ATT_RETRY;
	}
	*rc = etcd_map_error(b, op, code, msg);
	return ATT_FINAL;
}

/* ---- TLS ---- */

/* An alert from the member in curl's message (OpenSSL: "... SSL routines::... alert ..."). */
static bool tls_alert(const char *msg)
{
	return strstr(msg, "SSL") != NULL && strstr(msg, "alert") != NULL;
}

/*
 * Whether the transfer that just failed opened a new TLS connection, finished its handshake
 * and lost it before any answer came.
 */
static bool dropped_after_handshake(struct store_backend *b, CURL *c, const struct etcd_ep *ep)
{
	const struct curl_lib *cu = b->cu;
	curl_off_t tls_us = 0;
	long conns = 0;

	if (strncmp(ep->url, "https:", 6) != 0) {
		return false;
	}
	cu->easy_getinfo(c, CURLINFO_NUM_CONNECTS, &conns);
	cu->easy_getinfo(c, CURLINFO_APPCONNECT_TIME_T, &tls_us);
	return conns > 0 && tls_us > 0 && (b->stream != NULL ? !b->stream->any : b->rx_len == 0);
}

/*
 * A TLS failure: not transient (the same files give the same answer), so it is final at once,
 * naming the files this handle used and curl's message.
 */
static int tls_fail(struct store_backend *b, const char *op, const struct etcd_ep *ep,
		    const char *why)
{
	char cert[200], ca[200];

	if (b->cert != NULL) {
		snprintf(cert, sizeof(cert), "client certificate %.80s%s%.80s", b->cert,
			 b->key != NULL ? ", key " : "", b->key != NULL ? b->key : "");
	} else {
		snprintf(cert, sizeof(cert), "no client certificate (--tls-cert, --rdzv-conf "
					     "cert= and key=, or CRUN_ETCD_CERT)");
	}
	snprintf(ca, sizeof(ca), "%s%.120s", b->cacert != NULL ? "CA " : "the system's CAs",
		 b->cacert != NULL ? b->cacert : "");
	/* The files first: curl's message is long, and the diagnostic cuts what does not fit. */
	return etcd_fail(b, CRUN_EAUTH, "%s: %s: TLS failed (%s; %s): %s", op, ep->name, cert, ca,
			 why);
}

/* ---- one attempt ---- */

static enum outcome attempt(struct store_backend *b, const struct etcd_ep *ep, const char *op,
			    const char *path, const char *body, size_t blen, int tmo_ms,
			    int conn_ms, bool *amb, struct json_object **reply, int *rc)
{
	const struct curl_lib *cu = b->cu;
	bool grpc = b->gmethod != NULL && b->stream == NULL && !(ep->tls && b->grpc_tls_off);
	CURL *c = b->stream != NULL ? b->scurl : grpc ? b->gcurl : b->curl;
	char url[400];
	struct json_object *o;
	json_tokener *tok;
	CURLcode cc;
	long http = 0;
	int code;
	const char *msg;

	*reply = NULL;
	snprintf(url, sizeof(url), "%s%s", ep->url, path);
#ifdef CRUN_ETCD_GRPC
	if (grpc) {
		snprintf(url, sizeof(url), "%s/etcdserverpb.KV/%s", ep->url, b->gmethod);
		body = b->gbody;
		blen = b->gblen;
		etcd_grpc_prepare(b, c, ep);
	}
#endif
	cu->easy_setopt(c, CURLOPT_URL, url);
	cu->easy_setopt(c, CURLOPT_POSTFIELDS, body);
	cu->easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
	cu->easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(tmo_ms > 0 ? tmo_ms : 1));
	cu->easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(conn_ms > 0 ? conn_ms : 1));
	cu->easy_setopt(c, CURLOPT_WRITEFUNCTION, b->stream ? on_stream : on_body);
	b->rx_len = 0;
	b->rx_err = 0;
	b->errbuf[0] = '\0';
	b->sends = 0;
	cc = cu->easy_perform(c);
	cu->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
	{
		long oe = 0;

		cu->easy_getinfo(c, CURLINFO_OS_ERRNO, &oe);
		b->os_errno = (int)oe;
	}
	/* Sent twice: the first may have been applied, whatever the second's answer. */
	*amb = *amb || b->sends > 1;
	if (grpc && cc != CURLE_OK) {
		b->gep = NULL;
		if (b->gstatus > 0) {
			/* etcd refused the call and reset its stream (a request over gRPC's
			 * size limit, refused before it was all sent): its status says why. */
			return answer_error(b, op, b->gstatus, b->gmsg, amb, rc);
		}
	}

	if (b->stream != NULL && b->stream->rc != 0) {
		*rc = b->stream->rc; /* the callback stopped it, or failed */
		if (b->stream->answered) {
			*amb = *amb || b->stream->amb;
			return b->stream->out;
		}
		if (*rc == 1) {
			return ATT_OK;
		}
		if (*rc == -EAGAIN) {
			return ATT_RETRY;
		}
		return ATT_FINAL;
	}
	if (cc == CURLE_WRITE_ERROR && b->rx_err < 0) {
		*rc = b->rx_err == -ENOMEM
			      ? etcd_fail(b, -ENOMEM, "%s: out of memory", op)
			      : etcd_fail(b, -EMSGSIZE, "%s: reply over %zu bytes", op, MAX_REPLY_BYTES);
		return ATT_FINAL;
	}
	switch (cc) {
	case CURLE_OK:
		break;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
		/* Refused on a second try after a reused connection died with the request. */
		*amb = *amb || b->sends > 0;
		*rc = etcd_fail(b, -ECONNREFUSED, "%s: %s: %s", op, ep->name,
				b->errbuf[0] ? b->errbuf : cu->easy_strerror(cc));
		return ATT_RETRY;
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:        /* gRPC: the connection failed */
	case CURLE_HTTP2_STREAM: /* gRPC: the call's stream was reset */
		if (cc != CURLE_OPERATION_TIMEDOUT && tls_alert(b->errbuf)) {
			/* The member refused this client during or right after the handshake. */
			*rc = tls_fail(b, op, ep, b->errbuf);
			return ATT_FINAL;
		}
		/* Sent, or partly: etcd may have applied it. */
		*amb = *amb || b->sends > 0;
		*rc = etcd_fail(b, cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNRESET,
				"%s: %s: %s", op, ep->name,
				b->errbuf[0] ? b->errbuf : cu->easy_strerror(cc));
		if (cc != CURLE_OPERATION_TIMEDOUT && dropped_after_handshake(b, c, ep)) {
			return ATT_TLSDROP;
		}
		return ATT_RETRY;
	case CURLE_OUT_OF_MEMORY:
		*rc = etcd_fail(b, -ENOMEM, "%s: out of memory", op);
		return ATT_FINAL;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_CLIENTCERT:
	case CURLE_USE_SSL_FAILED:
		*rc = tls_fail(b, op, ep, b->errbuf[0] ? b->errbuf : cu->easy_strerror(cc));
		return ATT_FINAL;
	default:
		*rc = etcd_fail(b, -EPROTO, "%s: %s: %s", op, ep->name,
				b->errbuf[0] ? b->errbuf : cu->easy_strerror(cc));
		return ATT_FINAL;
	}
	if (b->stream != NULL) {
		/* The server ended the stream (a member stopping): resynchronise elsewhere. */
		*amb = true;
		*rc = etcd_fail(b, -ECONNRESET, "%s: %s: the stream ended (HTTP %ld)", op, ep->name,
				http);
		return b->stream->any || http == 200 ? ATT_RETRY : ATT_FINAL;
	}
#ifdef CRUN_ETCD_GRPC
	if (grpc) {
		*rc = etcd_grpc_answer(b, c, op, ep, http, reply);
		if (*rc == 1) {
			return answer_error(b, op, b->gstatus, b->gmsg, amb, rc);
		}
		return *rc == 0				      ? ATT_OK
		       : *rc == -ECONNRESET || *rc == -ETIMEDOUT ? ATT_RETRY
								 : ATT_FINAL;
	}
#endif
	tok = json_tokener_new();
	if (tok == NULL) {
		*rc = etcd_fail(b, -ENOMEM, "%s: out of memory", op);
		return ATT_FINAL;
	}
	o = json_tokener_parse_ex(tok, b->rx ? b->rx : "", (int)b->rx_len);
	if (json_tokener_get_error(tok) != json_tokener_success ||
	    (o != NULL && json_tokener_get_parse_end(tok) < b->rx_len &&
	     strspn(b->rx + json_tokener_get_parse_end(tok), " \r\n\t") !=
		     b->rx_len - json_tokener_get_parse_end(tok))) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	if (o == NULL || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		/* Not etcd's gateway (another server, or an etcd older than 3.4's /v3). */
		*rc = etcd_fail(b, http >= 500 ? -ETIMEDOUT : CRUN_ESERVER,
				"%s: %s: HTTP %ld, not an etcd v3 answer: %.100s", op, ep->name,
				http, b->rx_len ? b->rx : "(empty)");
		return http >= 500 ? ATT_RETRY : ATT_FINAL;
	}
	if (error_of(o, &code, &msg)) {
		enum outcome r = answer_error(b, op, code, msg, amb, rc);

		json_object_put(o);
		return r;
	}
	if (http != 200) {
		json_object_put(o);
		*rc = etcd_fail(b, CRUN_ESERVER, "%s: %s: HTTP %ld", op, ep->name, http);
		return ATT_FINAL;
	}
	*reply = o;
	*rc = 0;
	return ATT_OK;
}

/*
 * The body of @req: its JSON, or for an array of requests (several watches on one stream)
 * each element's JSON on a line of its own, in *@owned (caller frees). NULL: out of memory.
 */
static const char *request_body(struct json_object *req, size_t *len, char **owned)
{
	const int flags = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;
	size_t i, n, l, cap = 0, used = 0;
	const char *s;
	char *p;

	*owned = NULL;
	if (!json_object_is_type(req, json_type_array)) {
		return json_object_to_json_string_length(req, flags, len);
	}
	n = json_object_array_length(req);
	for (i = 0; i < n; i++) {
		if (json_object_to_json_string_length(json_object_array_get_idx(req, i), flags,
						      &l) == NULL) {
			return NULL;
		}
		cap += l + 1;
	}
	p = malloc(cap + 1);
	if (p == NULL) {
		return NULL;
	}
	for (i = 0; i < n; i++) {
		s = json_object_to_json_string_length(json_object_array_get_idx(req, i), flags, &l);
		memcpy(p + used, s, l);
		used += l;
		p[used++] = '\n';
	}
	p[used] = '\0';
	*len = used;
	*owned = p;
	return p;
}

/* Log in again (the token expired) and start a stream's parse afresh; 0 or a negative code. */
static int reauth(struct store_backend *b, int64_t deadline)
{
	struct etcd_stream *s = b->stream;
	int rc;

	b->stream = NULL;
	rc = etcd_authenticate(b, deadline);
	b->stream = s;
	if (rc == 0 && s != NULL) {
		json_tokener_reset(s->tok);
		s->rc = 0;
		s->answered = false;
		s->pending = 0;
	}
	return rc;
}

/* The common loop of etcd_call() and etcd_stream(). */
static int run(struct store_backend *b, const char *op, const char *path, struct json_object *req,
	       struct json_object **reply, int64_t deadline, bool sweep)
{
	int64_t start = crun_now_ms(), until = start + b->connect_timeout_ms;
	int64_t said_at = start;
	int reauths = 0, drops = 0, rc = -ETIMEDOUT;
	struct backoff bo;
	int left, tmo, conn, cap;
	struct sweep cur, full = {.sum = ""};
	bool amb = false, full_seen = false, r_gave_up = false;
	const char *body;
	char *owned = NULL;
	size_t blen, ep, tried;
	enum outcome r;

	b->maybe_applied = false;
	body = request_body(req, &blen, &owned);
	if (body == NULL) {
		return etcd_fail(b, -ENOMEM, "%s: out of memory", op);
	}
	cap = ATTEMPT_CAP_MS + (int)(blen / 1024);
	/* Nobody answering at all is given up after the connect timeout, as the TCP store
	 * gives up reconnecting; an operation's own deadline may come first. */
	if (until > deadline || b->connect_timeout_ms <= 0) {
		until = deadline;
	}
	backoff_init(&bo, BACKOFF_FIRST_MS, BACKOFF_MAX_MS);
	backoff_set_jitter(&bo, BACKOFF_HALF, (unsigned)rand_r(&b->seed));
	for (;;) {
		memset(&cur, 0, sizeof(cur));
		cur.refused = true;
		cur.silent = true;
		for (tried = 0; tried < b->neps; tried++) {
			ep = (b->cur + tried) % b->neps;
			left = crun_ms_until(sweep ? until : deadline);
			if (left == 0 && tried > 0) {
				break;
			}
			tmo = crun_ms_until(deadline);
			conn = left;
			if (b->stream == NULL && tmo > cap) {
				tmo = cap;
			}
			if (b->neps > 1 && conn > CONNECT_CAP_MS) {
				conn = CONNECT_CAP_MS;
			}
			conn = conn > tmo ? tmo : conn;
			r = attempt(b, &b->eps[ep], op, path, body, blen, tmo, conn, &amb, reply,
				    &rc);
			if (r == ATT_REAUTH && reauths++ < 2) {
				rc = reauth(b, deadline);
				if (rc < 0) {
					goto out;
				}
				tried--; /* the same endpoint again, with the new token */
				continue;
			}
			if (r == ATT_TLSDROP) {
				if (++drops < TLS_DROPS_MAX && crun_ms_until(deadline) > 0) {
					tried--; /* at once, on the same endpoint */
					continue;
				}
				rc = tls_fail(b, op, &b->eps[ep],
					      "the member closed every new connection after the TLS "
					      "handshake, before answering: it refuses this client");
				r = ATT_FINAL;
			}
			drops = 0;
			if (r == ATT_OK || r == ATT_FINAL || r == ATT_REAUTH) {
				b->served = b->served || (r == ATT_OK && !b->opening);
				b->cur = ep;
				b->maybe_applied = amb;
				goto out;
			}
			if (!sweep) {
				/* A stream: at its deadline it just ended; otherwise the
				 * endpoint failed, and the caller resynchronises elsewhere. */
				b->maybe_applied = amb;
				if (rc != -ETIMEDOUT || crun_ms_until(deadline) > 0) {
					b->cur = (ep + 1) % b->neps;
					rc = -EAGAIN;
				}
				goto out;
			}
			etcd_sweep_note(&cur, b, &b->eps[ep], op, rc);
		}
		if (tried == b->neps || !full_seen) {
			/* The last sweep that tried them all is the one to report. */
			full = cur;
			full_seen = tried == b->neps;
		}
		if (crun_ms_until(until) == 0) {
			break;
		}
		/* Only once the cluster has served this client: one still forming at start is
		 * waited for (with the progress line), as the open waits. */
		if (!b->opening && b->served && b->neps > 1 && tried == b->neps && cur.said &&
		    crun_now_ms() - start >= QUORUM_LOST_MS) {
			full.noleader = true;
			break;
		}
		if (!b->opening && b->served && tried == b->neps && cur.silent &&
		    crun_now_ms() - start >= SILENT_MS) {
			break;
		}
		if (crun_now_ms() - said_at >= PROGRESS_MS) {
			said_at = crun_now_ms();
			etcd_progress(b, op, &cur, start,
				 !b->opening && b->served && cur.silent && start + SILENT_MS < until
					 ? start + SILENT_MS
					 : until);
		}
		backoff_pause(&bo, until); /* jittered in [d/2, d] */
	}
	b->maybe_applied = amb;
	rc = etcd_give_up(b, op, &full, (int)(crun_now_ms() - start));
	r_gave_up = true;
out:
	free(owned);
	/* The store API returns only a code: say here what it does not (open has its message;
	 * a -EMSGSIZE or a missing key speaks for itself). */
	if (rc < 0 && !b->opening &&
	    (rc == -ETIMEDOUT || rc == ETCD_ENOLEADER || rc == CRUN_EAUTH || rc == CRUN_ESERVER) &&
	    (rc != -ETIMEDOUT || r_gave_up)) {
		/* A keep-alive's caller says it, with its own bound (rdzv_watch.c). */
		log_msg(b->keepalive ? LOG_DEBUG : LOG_WARN, "%s", b->diag.msg);
	}
	return rc;
}

int etcd_call(struct store_backend *b, const char *op, const char *path, struct json_object *req,
	      struct json_object **reply, int64_t deadline)
{
	/* An outer call's gRPC request, while this one logs in again (reauth()). */
	const char *method = b->gmethod;
	char *body = b->gbody;
	size_t blen = b->gblen;
	int rc = 0;

	*reply = NULL;
	b->gmethod = NULL;
	b->gbody = NULL;
#ifdef CRUN_ETCD_GRPC
	if (b->gcurl != NULL) {
		rc = etcd_grpc_encode(b, op, path, req, &b->gmethod, &b->gbody, &b->gblen);
	}
	if (rc > 0 && b->gblen > GRPC_MAX_BODY) {
		/* etcd's gRPC server stops reading a request over its limit and libcurl 7.88.1
		 * then waits out its timeout: a big request goes to the gateway, which names it. */
		free(b->gbody);
		b->gbody = NULL;
		b->gmethod = NULL;
	}
#endif
	if (rc >= 0) {
		rc = run(b, op, path, req, reply, deadline, true);
	}
	free(b->gbody);
	b->gmethod = method;
	b->gbody = body;
	b->gblen = blen;
	return rc;
}

int etcd_stream(struct store_backend *b, const char *op, const char *path,
		struct json_object *req, etcd_msg_cb cb, void *arg, int64_t deadline)
{
	struct etcd_stream s = {.cb = cb, .arg = arg};
	struct json_object *unused = NULL;
	int rc;

	s.tok = json_tokener_new();
	if (s.tok == NULL) {
		return etcd_fail(b, -ENOMEM, "%s: out of memory", op);
	}
	b->stream = &s;
	rc = run(b, op, path, req, &unused, deadline, false);
	b->stream = NULL;
	json_object_put(unused);
	json_tokener_free(s.tok);
	return rc;
}

int etcd_authenticate(struct store_backend *b, int64_t deadline)
{
	struct json_object *req, *rep = NULL, *t;
	bool bad = false, opening;
	char *tok;
	int rc;

	free(b->token);
	b->token = NULL;
	if (set_headers(b) < 0) {
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	req = json_object_new_object();
	etcd_jset(req, "name", json_object_new_string(b->user), &bad);
	etcd_jset(req, "password", json_object_new_string(b->password), &bad);
	if (bad) {
		json_object_put(req);
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	/* Quiet: "authentication is not enabled" is no failure; a real one is logged below. */
	opening = b->opening;
	b->opening = true;
	rc = etcd_call(b, "authenticate", "/v3/auth/authenticate", req, &rep, deadline);
	b->opening = opening;
	json_object_put(req);
	if (rc < 0) {
		if (strstr(b->diag.msg, "authentication is not enabled") != NULL) {
			/* etcd without auth: go on without a token. */
			log_debug("%s: authentication is not enabled in etcd; user %s unused",
				  b->where, b->user);
			return 0;
		}
		if (rc == CRUN_ESERVER || rc == -EINVAL) {
			rc = b->diag.code = CRUN_EAUTH;
		}
		if (!opening) {
			log_warn("%s", b->diag.msg);
		}
		return rc;
	}
	t = etcd_jget(rep, "token");
	tok = t ? strdup(json_object_get_string(t)) : NULL;
	json_object_put(rep);
	if (tok == NULL || strlen(tok) > 4000) {
		free(tok);
		return etcd_fail(b, -EPROTO, "authenticate: no usable token in etcd's answer");
	}
	b->token = tok;
	if (set_headers(b) < 0) {
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	return 0;
}
