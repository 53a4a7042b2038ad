/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_sweep.c: how the members failed an operation (a sweep), and what
 * is said of it: the progress line, the give-up message, short past the open (issue 21). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <crun/error.h>

#include "rendezvous/store/client_etcd_internal.h"
#include "src/common/clock.h"
#include "src/common/log.h"

/* Append @s to the NUL-terminated @sum of @cap bytes, cutting what does not fit. */
static void append(char *sum, size_t cap, const char *s)
{
	size_t l = strlen(sum), k = strlen(s);

	if (l + 1 >= cap) {
		return;
	}
	k = k < cap - l - 1 ? k : cap - l - 1;
	memcpy(sum + l, s, k);
	sum[l + k] = '\0';
}

/* Append "NAME: why" (the message after "<where>: <op>: ") to the sweep's summary. */
static void note(char *sum, size_t cap, const struct store_backend *b, const struct etcd_ep *ep,
		 const char *op)
{
	const char *m = b->diag.msg;
	size_t wl = strlen(b->where), ol = strlen(op);

	if (strncmp(m, b->where, wl) == 0 && strncmp(m + wl, ": ", 2) == 0) {
		m += wl + 2;
	}
	if (strncmp(m, op, ol) == 0 && strncmp(m + ol, ": ", 2) == 0) {
		m += ol + 2;
	}
	if (sum[0] != '\0') {
		append(sum, cap, "; ");
	}
	if (strncmp(m, ep->name, strlen(ep->name)) != 0) {
		append(sum, cap, ep->name);
		append(sum, cap, ": ");
	}
	append(sum, cap, m);
}

/* Why one endpoint failed, in a few words, for the progress line and the quorum give-up. */
static void brief_note(struct sweep *s, const struct store_backend *b, const struct etcd_ep *ep,
		       int rc)
{
	const char *said = strstr(b->diag.msg, "etcd said: "), *w;
	char why[200];

	if (said != NULL) {
		said += strlen("etcd said: ");
		w = strncmp(said, "etcdserver: ", 12) == 0 ? said + 12 : said;
	} else if (rc == -ECONNREFUSED) {
		w = strstr(b->diag.msg, "resolve") != NULL ? "cannot resolve the name"
		    : b->os_errno == ECONNREFUSED	    ? "refused"
		    : b->os_errno != 0			    ? strerror(b->os_errno)
							    : "cannot connect";
	} else {
		w = rc == -ETIMEDOUT ? "no answer in time"
		    : rc == -ECONNRESET ? "connection lost"
					: crun_strerror(rc);
	}
	snprintf(why, sizeof(why), "%s%.120s %.60s", s->brief[0] != '\0' ? "; " : "", ep->name, w);
	append(s->brief, sizeof(s->brief), why);
}

/* The length of @op's verb: "lease keepalive" of "lease keepalive for /crun/KEY". */
static int verb_len(const char *op)
{
	const char *k = strstr(op, " " ETCD_ROOT);
	size_t n = k != NULL ? (size_t)(k - op) : strlen(op);

	if (n >= 4 && strncmp(op + n - 4, " for", 4) == 0) {
		n -= 4;
	}
	return (int)n;
}

/*
 * Past the open, an operation that every member leaves silent, or (of several) answers only
 * with errors, gives up within SILENT_MS (client_etcd_http.c: QUORUM_LOST_MS): said once then, by its caller.
 */
static bool quick_give_up(const struct store_backend *b, const struct sweep *s)
{
	return !b->opening && b->served && (s->silent || (b->neps > 1 && s->said));
}

/* The members' names, "h1:p1,h2:p2", into @out. */
static void member_names(const struct store_backend *b, char *out, size_t cap)
{
	out[0] = '\0';
	for (size_t i = 0; i < b->neps; i++) {
		if (i > 0) {
			append(out, cap, ",");
		}
		append(out, cap, b->eps[i].name);
	}
}

/*
 * The message of an operation that no endpoint could serve within @ms, after sweep @s. Past
 * the open it is short, each member once (a running job's caller logs it with its own bound
 * on each keep-alive that fails), the endpoints' full answers at debug level.
 */
int etcd_give_up(struct store_backend *b, const char *op, const struct sweep *s, int ms)
{
	char names[200];

	if (s->noleader) {
		/* Short, and each member once: it is logged on every operation that meets it. */
		(void)op; /* the cluster's state, whatever the operation */
		return diag_set(&b->diag, ETCD_ENOLEADER,
				"etcd has no leader (quorum lost?) for %d s: %s",
				(ms + 500) / 1000, s->brief[0] != '\0' ? s->brief : s->sum);
	}
	etcd_fail(b, -ETIMEDOUT, "%s: no etcd endpoint could serve it within %d ms%s: %s", op, ms,
		  s->said      ? " (has the cluster lost its quorum?)"
		  : s->refused ? " (is etcd running there?)"
		  : s->silent  ? " (no answer: packets dropped, or the host down?)"
			       : "",
		  s->sum);
	if (b->opening || !b->served) {
		return -ETIMEDOUT;
	}
	log_debug("%s", b->diag.msg);
	if (s->silent) {
		member_names(b, names, sizeof(names));
		return diag_set(&b->diag, -ETIMEDOUT,
				"%.*s: no etcd endpoint could serve it in %d s (%s: no answer)",
				verb_len(op), op, (ms + 500) / 1000, names);
	}
	return diag_set(&b->diag, -ETIMEDOUT, "%.*s: no etcd endpoint could serve it in %d s (%s)",
			verb_len(op), op, (ms + 500) / 1000,
			s->brief[0] != '\0' ? s->brief : "no member tried");
}

/* Endpoint @ep failed @op with @rc (b->diag says how): into the sweep's record. */
void etcd_sweep_note(struct sweep *cur, const struct store_backend *b, const struct etcd_ep *ep,
		     const char *op, int rc)
{
	cur->refused = cur->refused && rc == -ECONNREFUSED;
	cur->silent = cur->silent && rc == -ETIMEDOUT && strstr(b->diag.msg, "etcd said") == NULL;
	cur->said = cur->said || strstr(b->diag.msg, "etcd said") != NULL;
	cur->noleader = cur->noleader || strstr(b->diag.msg, "no leader") != NULL;
	note(cur->sum, sizeof(cur->sum), b, ep, op);
	brief_note(cur, b, ep, rc);
}

/*
 * Nobody has served @op since @start: say so, each member once, and for how long yet. A
 * keep-alive that gives up within seconds is said once, when it does, by its caller (the
 * rendezvous, with heartbeat_timeout): its progress is at debug level.
 */
void etcd_progress(const struct store_backend *b, const char *op, const struct sweep *s,
		   int64_t start, int64_t until)
{
	log_msg(b->keepalive && quick_give_up(b, s) ? LOG_DEBUG : LOG_WARN,
	       "etcd: %.*s: no member has answered for %" PRId64 " s (trying for %" PRId64
	       " s more): %s",
	       verb_len(op), op, (crun_now_ms() - start) / 1000,
	       (int64_t)crun_ms_until(until) / 1000,
	       s->brief[0] != '\0' ? s->brief : "no member tried yet");
}
