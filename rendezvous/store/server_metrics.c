/* SPDX-License-Identifier: MIT */
/* rendezvous/store/server_metrics.c: the store's counters, served as Prometheus text. */
/*
 * Opt-in (store_server_opts.metrics_listen: crun-rdzvd --metrics, crun --metrics on the node
 * that hosts the store): a plain HTTP/1.x listener on the server's loop answering
 * "GET /metrics" with Prometheus' text format (version 0.0.4). When the store has a token,
 * a scrape must carry it as "Authorization: Bearer TOKEN" (Prometheus: authorization.
 * credentials_file pointing at the token file), compared in constant time; else 401. A scraper
 * gets SCRAPE_TIMEOUT_MS for its request and at most MAX_SCRAPERS run at once, so the endpoint
 * cannot be used to hold the store's loop or its descriptors.
 *
 * What it reports: connections (open, accepted, by protocol), requests by operation with a
 * latency histogram of their handling, handshakes refused by reason, limit refusals by kind,
 * the memory budget, keys held; and, read from the agents' status records in the keyspace
 * (agent/notify_status.h), runs, agents by state, rounds and restarts per run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>


#include "rendezvous/store/server_internal.h"
#include "src/common/token.h"
#include "src/common/clock.h"
#include "src/common/log.h"

#define SCRAPE_TIMEOUT_MS 5000
#define MAX_SCRAPERS 16
#define REQ_MAX 8192

struct scrape {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t wr;
	struct store_server *s;
	char req[REQ_MAX + 1];
	size_t len;
	char *out;
	int handles; /* open handles; freed at 0 */
	bool answered, closing;
	struct scrape *next; /* in the server's list */
};

static const double lat_bounds[SRV_LAT_BUCKETS] = {
	1e-6, 4e-6, 16e-6, 64e-6, 256e-6, 1e-3, 4e-3, 16e-3, 64e-3, 256e-3, 1.0,
};

static const char *const refuse_names[SRV_REFUSE_COUNT] = {
	[SRV_REFUSE_PROOF] = "wrong_proof",	  [SRV_REFUSE_HANDSHAKE] = "bad_handshake",
	[SRV_REFUSE_SCOPE] = "scope",		  [SRV_REFUSE_TCPSTORE] = "tcpstore_refused",
	[SRV_REFUSE_TLS] = "tls",
};

static const char *const limit_names[LIMIT_KINDS] = {
	[LIMIT_CONNECTIONS] = "connections", [LIMIT_PER_ADDR] = "per_address",
	[LIMIT_MEMORY] = "memory",	     [LIMIT_FRAME_TIME] = "frame_time",
	[LIMIT_UNTIMED_WAITS] = "untimed_waits",
};

/* ---- counting (the server's loop thread) ---- */

void srv_metric_op(struct store_server *s, uint8_t op, int64_t t0_ns)
{
	double sec = (double)(crun_now_ns() - t0_ns) / 1e9;
	int b = 0;

	s->met.ops[op]++;
	while (b < SRV_LAT_BUCKETS && sec > lat_bounds[b]) {
		b++;
	}
	s->met.lat[b]++;
	s->met.lat_sum += sec;
}

void srv_metric_refuse(struct store_server *s, enum srv_refuse why)
{
	if ((int)why >= 0 && why < SRV_REFUSE_COUNT) {
		s->met.refused[why]++;
	}
}

/* ---- the text ---- */

struct text {
	char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom) {
		return;
	}
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		char *g = realloc(t->p, t->cap * 2);
		if (g == NULL || n < 0) {
			t->oom = true;
			return;
		}
		t->p = g;
		t->cap *= 2;
	}
}

static void metric(struct text *t, const char *name, const char *type, const char *help)
{
	put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as Prometheus' text format quotes it. */
static void put_label(struct text *t, const uint8_t *v, size_t n)
{
	size_t i;

	for (i = 0; i < n && i < 200; i++) {
		if (v[i] == '"' || v[i] == '\\') {
			put(t, "\\%c", v[i]);
		} else if (v[i] == '\n') {
			put(t, "\\n");
		} else if (v[i] >= 0x20 && v[i] < 0x7f) {
			put(t, "%c", v[i]);
		}
	}
}

static void store_metrics(struct store_server *s, struct text *t)
{
	uint64_t cum = 0;
	int i;

	metric(t, "crun_store_connections", "gauge", "connections open now");
	put(t, "crun_store_connections %zu\n", s->nconns);
	metric(t, "crun_store_connections_accepted_total", "counter", "connections accepted");
	put(t, "crun_store_connections_accepted_total %" PRIu64 "\n", s->met.accepted);
	metric(t, "crun_store_unix_connections_accepted_total", "counter",
	       "connections accepted on the AF_UNIX socket (same-host clients)");
	put(t, "crun_store_unix_connections_accepted_total %" PRIu64 "\n", s->met.accepted_unix);
	metric(t, "crun_store_connection_limit", "gauge", "the connection cap in force");
	put(t, "crun_store_connection_limit %d\n", s->max_connections);
	metric(t, "crun_store_requests_total", "counter", "requests handled, by operation");
	for (i = 0; i < 256; i++) {
		if (s->met.ops[i] != 0) {
			put(t, "crun_store_requests_total{op=\"%s\"} %" PRIu64 "\n",
			    wire_op_name((uint8_t)i), s->met.ops[i]);
		}
	}
	metric(t, "crun_store_tcpstore_requests_total", "counter",
	       "PyTorch TCPStore requests handled");
	put(t, "crun_store_tcpstore_requests_total %" PRIu64 "\n", s->met.ts_ops);
	metric(t, "crun_store_request_seconds", "histogram",
	       "time the server spent on a request (a held wait counts until it is held)");
	for (i = 0; i < SRV_LAT_BUCKETS; i++) {
		cum += s->met.lat[i];
		put(t, "crun_store_request_seconds_bucket{le=\"%g\"} %" PRIu64 "\n", lat_bounds[i],
		    cum);
	}
	cum += s->met.lat[SRV_LAT_BUCKETS];
	put(t, "crun_store_request_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
	put(t, "crun_store_request_seconds_sum %.9f\ncrun_store_request_seconds_count %" PRIu64 "\n",
	    s->met.lat_sum, cum);
	metric(t, "crun_store_handshakes_refused_total", "counter", "handshakes refused, by reason");
	for (i = 0; i < SRV_REFUSE_COUNT; i++) {
		put(t, "crun_store_handshakes_refused_total{reason=\"%s\"} %" PRIu64 "\n",
		    refuse_names[i], s->met.refused[i]);
	}
	metric(t, "crun_store_limit_refusals_total", "counter",
	       "connections or requests refused by a limit, by kind");
	for (i = 0; i < LIMIT_KINDS; i++) {
		put(t, "crun_store_limit_refusals_total{limit=\"%s\"} %" PRIu64 "\n", limit_names[i],
		    s->met.limited[i]);
	}
	metric(t, "crun_store_memory_bytes", "gauge",
	       "bytes of partial frames and held waits (the memory budget's use)");
	put(t, "crun_store_memory_bytes %zu\n", s->mem_used);
	metric(t, "crun_store_memory_limit_bytes", "gauge", "the memory budget");
	put(t, "crun_store_memory_limit_bytes %zu\n", s->max_memory);
	metric(t, "crun_store_keys", "gauge", "keys held");
	put(t, "crun_store_keys %" PRId64 "\n", s->ks.nkeys);
	metric(t, "crun_store_keys_limit", "gauge", "the data budget's keys");
	put(t, "crun_store_keys_limit %" PRIu64 "\n", s->ks.quota.total.keys);
	metric(t, "crun_store_data_bytes", "gauge", "key and value bytes held");
	put(t, "crun_store_data_bytes %" PRIu64 "\n", s->ks.nbytes);
	metric(t, "crun_store_data_limit_bytes", "gauge", "the data budget's bytes");
	put(t, "crun_store_data_limit_bytes %" PRIu64 "\n", s->ks.quota.total.bytes);
	metric(t, "crun_store_quota_refusals_total", "counter",
	       "writes refused by a data quota: the store's, a run's scope's, a TCPStore namespace's");
	put(t, "crun_store_quota_refusals_total %" PRIu64 "\n", s->ks.nrefused);
}

/* Whether @e is an agent's status record ("rdzv/<run>/status/node/<id>"); *@run, *@rl. */
static bool status_key(const struct ks_entry *e, const uint8_t **run, size_t *rl)
{
	static const char tail[] = "/status/node/";
	const uint8_t *k = e->key, *end = e->key + e->klen, *p;

	if (!e->present || e->klen < 6 || memcmp(k, "rdzv/", 5) != 0) {
		return false;
	}
	for (p = k + 5; p < end && *p != '/'; p++) {
	}
	if ((size_t)(end - p) <= sizeof(tail) - 1 || memcmp(p, tail, sizeof(tail) - 1) != 0) {
		return false;
	}
	*run = k + 5;
	*rl = (size_t)(p - (k + 5));
	return true;
}

/* Runs and agents, from the status records the agents keep in this store. */
static void job_metrics(struct store_server *s, struct text *t)
{
	static const char *const states[] = {"joining", "running", "restarting", "waiting",
					     "stopping", "finished", "failed"};
	uint64_t by_state[8] = {0}, agents = 0;
	struct htab_node *n, *next;
	size_t b, i;

	metric(t, "crun_run_round", "gauge", "the newest round an agent of the run is in");
	metric(t, "crun_run_restarts", "gauge", "failure restarts the run spent");
	htab_for_each_safe(&s->ks.keys, b, n, next) {
		const struct ks_entry *e = (const struct ks_entry *)n;
		const uint8_t *run;
		char rec[640], state[32];
		int round = -1, restarts = 0;
		size_t rl;

		if (!status_key(e, &run, &rl)) {
			continue;
		}
		snprintf(rec, sizeof(rec), "%.*s", (int)(e->vlen < sizeof(rec) ? e->vlen : 0),
			 e->val != NULL ? (const char *)e->val : "");
		if (sscanf(rec, "v1 state=%31s host=%*s pid=%*d rank=%*d nodes=%*d world=%*d "
				"round=%d restarts=%d", state, &round, &restarts) != 3) {
			continue;
		}
		agents++;
		for (i = 0; i < 7; i++) {
			by_state[i] += strcmp(state, states[i]) == 0;
		}
		/* One line per agent record, labelled by run and agent; Prometheus sums or takes
		 * the max per run itself (max by (run) (crun_run_round)). */
		put(t, "crun_run_round{run=\"");
		put_label(t, run, rl);
		put(t, "\",agent=\"");
		put_label(t, e->key + 5 + rl + 13, e->klen - 5 - rl - 13);
		put(t, "\"} %d\ncrun_run_restarts{run=\"", round);
		put_label(t, run, rl);
		put(t, "\",agent=\"");
		put_label(t, e->key + 5 + rl + 13, e->klen - 5 - rl - 13);
		put(t, "\"} %d\n", restarts);
	}
	metric(t, "crun_agents", "gauge", "agents with a status record here, by state");
	for (i = 0; i < 7; i++) {
		put(t, "crun_agents{state=\"%s\"} %" PRIu64 "\n", states[i], by_state[i]);
	}
	metric(t, "crun_agents_total", "gauge", "agents with a status record here");
	put(t, "crun_agents_total %" PRIu64 "\n", agents);
}

/* ---- HTTP ---- */

static void scrape_unlink(struct scrape *sc)
{
	struct scrape **pp;

	for (pp = &sc->s->met.scrapes; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == sc) {
			*pp = sc->next;
			break;
		}
	}
}

static void scrape_closed(uv_handle_t *h)
{
	struct scrape *sc = h->data;
	struct store_server *s = sc->s;

	if (--sc->handles > 0) {
		return;
	}
	free(sc->out);
	free(sc);
	srv_server_unref(s);
}

static void scrape_close(struct scrape *sc)
{
	if (sc->closing) {
		return;
	}
	sc->closing = true;
	scrape_unlink(sc);
	sc->s->met.nscrapers--;
	uv_close((uv_handle_t *)&sc->tcp, scrape_closed);
	uv_close((uv_handle_t *)&sc->timer, scrape_closed);
}

static void on_written(uv_write_t *w, int status)
{
	scrape_close(w->data);
}

static void respond(struct scrape *sc, const char *status, const char *ctype, const char *body,
		    size_t blen)
{
	char head[256];
	int hn;
	uv_buf_t b;

	if (sc->answered) {
		return;
	}
	sc->answered = true;
	uv_read_stop((uv_stream_t *)&sc->tcp);
	hn = snprintf(head, sizeof(head),
		      "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
		      "Connection: close\r\n\r\n",
		      status, ctype, blen,
		      strncmp(status, "401", 3) == 0 ? "WWW-Authenticate: Bearer\r\n" : "");
	sc->out = malloc((size_t)hn + blen);
	if (sc->out == NULL) {
		scrape_close(sc);
		return;
	}
	memcpy(sc->out, head, (size_t)hn);
	memcpy(sc->out + hn, body, blen);
	b = uv_buf_init(sc->out, (unsigned)((size_t)hn + blen));
	sc->wr.data = sc;
	if (uv_write(&sc->wr, (uv_stream_t *)&sc->tcp, &b, 1, on_written) < 0) {
		scrape_close(sc);
	}
}

static void respond_text(struct scrape *sc, const char *status, const char *msg)
{
	respond(sc, status, "text/plain; charset=utf-8", msg, strlen(msg));
}

/* Whether the request carries the store's token as a bearer credential. */
static bool authorized(const struct store_server *s, const char *req)
{
	const char *h = req, *v, *end;
	static const char name[] = "authorization:";

	if (s->token == NULL) {
		return true; /* an --insecure store: its metrics are as open as it is */
	}
	while ((h = strchr(h, '\n')) != NULL) {
		h++;
		if (strncasecmp(h, name, sizeof(name) - 1) != 0) {
			continue;
		}
		v = h + sizeof(name) - 1;
		v += strspn(v, " \t");
		if (strncasecmp(v, "Bearer ", 7) != 0) {
			return false;
		}
		v += 7;
		end = v + strcspn(v, "\r\n");
		while (end > v && (end[-1] == ' ' || end[-1] == '\t')) {
			end--;
		}
		return (size_t)(end - v) == s->token_len &&
		       token_equal(v, s->token, s->token_len);
	}
	return false;
}

static void answer(struct scrape *sc)
{
	struct store_server *s = sc->s;
	struct text t = {malloc(16384), 0, 16384, false};
	char path[64] = "";

	if (sscanf(sc->req, "GET %63s HTTP/1.", path) != 1) {
		free(t.p);
		respond_text(sc, "400 Bad Request", "expected GET /metrics\n");
		return;
	}
	if (strcmp(path, "/metrics") != 0) {
		free(t.p);
		respond_text(sc, "404 Not Found", "the metrics are at /metrics\n");
		return;
	}
	if (!authorized(s, sc->req)) {
		free(t.p);
		s->met.scrapes_refused++;
		respond_text(sc, "401 Unauthorized",
			     "send the store's token: Authorization: Bearer TOKEN\n");
		return;
	}
	if (t.p == NULL) {
		respond_text(sc, "503 Service Unavailable", "out of memory\n");
		return;
	}
	store_metrics(s, &t);
	job_metrics(s, &t);
	if (t.oom) {
		respond_text(sc, "503 Service Unavailable", "out of memory\n");
	} else {
		respond(sc, "200 OK", "text/plain; version=0.0.4; charset=utf-8", t.p, t.len);
	}
	free(t.p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct scrape *sc = h->data;

	*buf = uv_buf_init(sc->req + sc->len, (unsigned)(REQ_MAX - sc->len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	struct scrape *sc = st->data;

	if (n < 0) {
		scrape_close(sc);
		return;
	}
	sc->len += (size_t)n;
	sc->req[sc->len] = '\0';
	if (strstr(sc->req, "\r\n\r\n") != NULL || strstr(sc->req, "\n\n") != NULL) {
		answer(sc);
	} else if (sc->len == REQ_MAX) {
		respond_text(sc, "431 Request Header Fields Too Large", "request too large\n");
	}
}

static void on_timeout(uv_timer_t *t)
{
	struct scrape *sc = t->data;

	if (!sc->answered) {
		respond_text(sc, "408 Request Timeout", "no request within 5 s\n");
	}
}

static void on_scraper(uv_stream_t *listener, int status)
{
	struct store_server *s = listener->data;
	struct scrape *sc;

	if (status < 0 || s->closing) {
		return;
	}
	sc = calloc(1, sizeof(*sc));
	if (sc == NULL) {
		return;
	}
	sc->s = s;
	uv_tcp_init(s->loop, &sc->tcp);
	uv_timer_init(s->loop, &sc->timer);
	sc->tcp.data = sc->timer.data = sc;
	sc->handles = 2;
	s->refs++;
	sc->next = s->met.scrapes;
	s->met.scrapes = sc;
	s->met.nscrapers++;
	if (uv_accept(listener, (uv_stream_t *)&sc->tcp) < 0) {
		scrape_close(sc);
		return;
	}
	if (s->met.nscrapers > MAX_SCRAPERS) {
		respond_text(sc, "503 Service Unavailable", "too many scrapes at once\n");
		return;
	}
	uv_timer_start(&sc->timer, on_timeout, SCRAPE_TIMEOUT_MS, 0);
	if (uv_read_start((uv_stream_t *)&sc->tcp, on_alloc, on_read) < 0) {
		scrape_close(sc);
	}
}

int srv_metrics_start(struct store_server *s, const char *listen_addr, struct crun_diag *d)
{
	int fd = -1, rc;

	if (listen_addr == NULL) {
		return 0;
	}
	rc = srv_bind_socket(listen_addr, "metrics", &fd, d);
	if (rc < 0) {
		return rc;
	}
	uv_tcp_init(s->loop, &s->met.listener);
	s->met.listener.data = s;
	s->met.on = true;
	s->refs++;
	rc = uv_tcp_open(&s->met.listener, fd);
	if (rc == 0) {
		rc = uv_listen((uv_stream_t *)&s->met.listener, 64, on_scraper);
	} else {
		close(fd);
	}
	if (rc < 0) {
		return diag_set(d, rc, "store: metrics: listen %s: %s", listen_addr,
				uv_strerror(rc));
	}
	log_info("store: Prometheus metrics at http://%s/metrics%s", listen_addr,
		 s->token != NULL ? " (Authorization: Bearer with the store's token)" : "");
	return 0;
}

void srv_metrics_close(struct store_server *s, uv_close_cb on_closed)
{
	if (!s->met.on) {
		return;
	}
	s->met.on = false;
	uv_close((uv_handle_t *)&s->met.listener, on_closed);
	while (s->met.scrapes != NULL) {
		scrape_close(s->met.scrapes);
	}
}
