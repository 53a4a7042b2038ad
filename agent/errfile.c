/* SPDX-License-Identifier: MIT */
/* agent/errfile.c: a small, bounded, tolerant reader for torchrun's error-file JSON. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/errfile.h"
#include "src/common/io.h"
#include "src/common/log.h"
#include "src/common/signames.h"

/*
 * A recursive-descent skimmer: it walks just enough JSON to find the "message" member of the
 * top-level object, and the "message" member inside it when that is an object. Depth and
 * size are bounded, so hostile files only yield -EPROTO.
 */
struct jp {
	const char *p, *end;
	int depth;
	char *stack;      /* the "py_callstack" string (anywhere), newlines kept; or NULL */
	size_t stacklen;
};

#define JP_MAX_DEPTH 64

static void ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) {
		j->p++;
	}
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	if (c >= 'a' && c <= 'f') {
		return c - 'a' + 10;
	}
	if (c >= 'A' && c <= 'F') {
		return c - 'A' + 10;
	}
	return -1;
}

/*
 * Append one byte to @out (size @len, NUL kept), turning newlines into " | ". With @keep_nl
 * (a traceback) newlines stay and a full buffer drops its first half: the end matters.
 */
static void put_text(char *out, size_t len, size_t *o, char c, bool keep_nl)
{
	if (out == NULL || len == 0) {
		return;
	}
	if (keep_nl && (c == '\n' || (unsigned char)c >= 0x20)) {
		if (*o + 1 >= len && len >= 4) {
			memmove(out, out + len / 2, *o - len / 2);
			*o -= len / 2;
		}
		if (*o + 1 < len) {
			out[(*o)++] = c;
			out[*o] = '\0';
		}
		return;
	}
	if (c == '\n') {
		put_text(out, len, o, ' ', false);
		put_text(out, len, o, '|', false);
		put_text(out, len, o, ' ', false);
		return;
	}
	if (c == '\r' || c == '\0') {
		return;
	}
	if ((unsigned char)c < 0x20) {
		c = ' ';
	}
	if (*o + 1 < len) {
		out[(*o)++] = c;
		out[*o] = '\0';
	}
}

/* Parse a string at j->p (which is '"'); copy it to @out when not NULL (@keep_nl: put_text). */
static int str_text(struct jp *j, char *out, size_t len, bool keep_nl)
{
	size_t o = 0;

	if (out != NULL && len > 0) {
		out[0] = '\0';
	}
	if (j->p >= j->end || *j->p != '"') {
		return -EPROTO;
	}
	j->p++;
	while (j->p < j->end) {
		char c = *j->p++;

		if (c == '"') {
			return 0;
		}
		if (c != '\\') {
			put_text(out, len, &o, c, keep_nl);
			continue;
		}
		if (j->p >= j->end) {
			return -EPROTO;
		}
		c = *j->p++;
		switch (c) {
		case 'n':
			put_text(out, len, &o, '\n', keep_nl);
			break;
		case 't':
			put_text(out, len, &o, ' ', keep_nl);
			break;
		case 'r':
		case 'b':
		case 'f':
			break;
		case 'u': {
			int v = 0, i;

			if (j->end - j->p < 4) {
				return -EPROTO;
			}
			for (i = 0; i < 4; i++) {
				int h = hexval(j->p[i]);

				if (h < 0) {
					return -EPROTO;
				}
				v = v * 16 + h;
			}
			j->p += 4;
			/* Non-ASCII escapes are shown as '?': the report is a terminal line. */
			put_text(out, len, &o,
				 v < 0x80 && v >= 0x20 ? (char)v : (v == '\n' ? '\n' : '?'),
				 keep_nl);
			break;
		}
		default:
			put_text(out, len, &o, c, keep_nl);
			break;
		}
	}
	return -EPROTO;
}

static int str(struct jp *j, char *out, size_t len)
{
	return str_text(j, out, len, false);
}

static int value(struct jp *j, int want, char *out, size_t len, bool *found);

/*
 * Parse an object. When @want > 0, look for a "message" member: a string is copied to @out
 * (*found = true); an object is searched one level deeper (want - 1).
 */
static int object(struct jp *j, int want, char *out, size_t len, bool *found)
{
	if (++j->depth > JP_MAX_DEPTH) {
		return -EPROTO;
	}
	j->p++; /* '{' */
	ws(j);
	if (j->p < j->end && *j->p == '}') {
		j->p++;
		j->depth--;
		return 0;
	}
	for (;;) {
		char key[32];
		int rc;
		bool is_msg;

		ws(j);
		rc = str(j, key, sizeof(key));
		if (rc < 0) {
			return rc;
		}
		is_msg = strcmp(key, "message") == 0;
		ws(j);
		if (j->p >= j->end || *j->p != ':') {
			return -EPROTO;
		}
		j->p++;
		ws(j);
		if (is_msg && want > 0 && !*found && j->p < j->end && *j->p == '"') {
			rc = str(j, out, len);
			if (rc == 0) {
				*found = true;
			}
		} else if (j->stack != NULL && strcmp(key, "py_callstack") == 0 && j->p < j->end &&
			   *j->p == '"') {
			rc = str_text(j, j->stack, j->stacklen, true);
		} else {
			rc = value(j, is_msg ? want - 1 : 0, out, len, found);
		}
		if (rc < 0) {
			return rc;
		}
		ws(j);
		if (j->p >= j->end) {
			return -EPROTO;
		}
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p == '}') {
			j->p++;
			j->depth--;
			return 0;
		}
		return -EPROTO;
	}
}

static int array(struct jp *j)
{
	bool dummy = false;

	if (++j->depth > JP_MAX_DEPTH) {
		return -EPROTO;
	}
	j->p++;
	ws(j);
	if (j->p < j->end && *j->p == ']') {
		j->p++;
		j->depth--;
		return 0;
	}
	for (;;) {
		int rc = value(j, 0, NULL, 0, &dummy);

		if (rc < 0) {
			return rc;
		}
		ws(j);
		if (j->p >= j->end) {
			return -EPROTO;
		}
		if (*j->p == ',') {
			j->p++;
			ws(j);
			continue;
		}
		if (*j->p == ']') {
			j->p++;
			j->depth--;
			return 0;
		}
		return -EPROTO;
	}
}

static int value(struct jp *j, int want, char *out, size_t len, bool *found)
{
	ws(j);
	if (j->p >= j->end) {
		return -EPROTO;
	}
	switch (*j->p) {
	case '{':
		return object(j, want, out, len, found);
	case '[':
		return array(j);
	case '"':
		return str(j, NULL, 0);
	default:
		/* Numbers, true, false, null: skip the bare token. */
		if (!(*j->p == '-' || (*j->p >= '0' && *j->p <= '9') || (*j->p >= 'a' && *j->p <= 'z'))) {
			return -EPROTO;
		}
		while (j->p < j->end && *j->p != ',' && *j->p != '}' && *j->p != ']' && *j->p != ' ' &&
		       *j->p != '\n' && *j->p != '\t' && *j->p != '\r') {
			j->p++;
		}
		return 0;
	}
}

int errfile_parse_message(const char *doc, size_t n, char *msg, size_t len)
{
	return errfile_parse(doc, n, msg, len, NULL, 0);
}

int errfile_parse(const char *doc, size_t n, char *msg, size_t len, char *stack, size_t stacklen)
{
	struct jp j = {.p = doc, .end = doc + n, .depth = 0, .stack = stack, .stacklen = stacklen};
	bool found = false;
	int rc;

	if (len > 0) {
		msg[0] = '\0';
	}
	if (stack != NULL && stacklen > 0) {
		stack[0] = '\0';
	} else {
		j.stack = NULL;
	}
	ws(&j);
	if (j.p >= j.end || *j.p != '{') {
		return -EPROTO;
	}
	rc = object(&j, 2, msg, len, &found);
	if (rc < 0) {
		/* A document cut short may still have given us the message. */
		return found ? 0 : rc;
	}
	return found ? 0 : -EPROTO;
}

int errfile_read_message(const char *path, char *msg, size_t len)
{
	return errfile_read(path, msg, len, NULL, 0);
}

int errfile_read(const char *path, char *msg, size_t len, char *stack, size_t stacklen)
{
	char *doc;
	size_t n = 0;
	ssize_t r;
	int fd, rc;

	if (len > 0) {
		msg[0] = '\0';
	}
	if (stack != NULL && stacklen > 0) {
		stack[0] = '\0';
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		return -errno;
	}
	doc = malloc(ERRFILE_MAX_READ);
	if (doc == NULL) {
		close(fd);
		return -ENOMEM;
	}
	r = io_read_full(fd, doc, ERRFILE_MAX_READ);
	n = r > 0 ? (size_t)r : 0;
	close(fd);
	rc = errfile_parse(doc, n, msg, len, stack, stacklen);
	free(doc);
	return rc;
}

static void fmt_time(int64_t wall_ms, char *buf, size_t len)
{
	time_t t = (time_t)(wall_ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	if (snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall_ms % 1000)) >= (int)len) {
		buf[len - 1] = '\0';
	}
}

static void fmt_exit(const struct errfile_failure *f, char *buf, size_t len)
{
	char sig[32];

	if (f->signal > 0) {
		snprintf(buf, len, "%s (%d)", signal_name(f->signal, sig, sizeof(sig)),
			 f->signal);
	} else {
		snprintf(buf, len, "exit %d", f->exit_code);
	}
}

/* One line of the report, in one write; on stderr at error priority, a journal entry when that
 * is the journal. A closed console loses the report only. */
static void line_out(int fd, const char *line)
{
	if (fd == STDERR_FILENO) {
		(void)log_raw_line(LOG_ERROR, line, strlen(line));
	} else {
		(void)io_write_full(fd, line, strlen(line));
	}
}

/* ---- the last lines of a text: a traceback, a worker's stderr ---- */

void errfile_tail_feed(struct errfile_tail *t, const char *data, size_t n)
{
	size_t at, k;

	if (n >= ERRFILE_TAIL_BYTES) {
		data += n - ERRFILE_TAIL_BYTES;
		t->total += n - ERRFILE_TAIL_BYTES;
		n = ERRFILE_TAIL_BYTES;
	}
	at = (size_t)(t->total % ERRFILE_TAIL_BYTES);
	k = ERRFILE_TAIL_BYTES - at < n ? ERRFILE_TAIL_BYTES - at : n;
	memcpy(t->buf + at, data, k);
	memcpy(t->buf, data + k, n - k);
	t->total += n;
}

int errfile_tail_lines(const struct errfile_tail *t, int nlines, char *out, size_t len)
{
	char lin[ERRFILE_TAIL_BYTES];
	size_t n = t->total < ERRFILE_TAIL_BYTES ? (size_t)t->total : ERRFILE_TAIL_BYTES;
	size_t start, first;

	/* The ring in order: the oldest byte sits where the next one goes once it has wrapped. */
	start = t->total < ERRFILE_TAIL_BYTES ? 0 : (size_t)(t->total % ERRFILE_TAIL_BYTES);
	first = ERRFILE_TAIL_BYTES - start < n ? ERRFILE_TAIL_BYTES - start : n;
	memcpy(lin, t->buf + start, first);
	memcpy(lin + first, t->buf, n - first);
	/* A ring that wrapped starts inside a line: drop that part. */
	if (t->total > ERRFILE_TAIL_BYTES) {
		char *nl = memchr(lin, '\n', n);

		if (nl == NULL) {
			return errfile_last_lines(lin, n, nlines, out, len);
		}
		return errfile_last_lines(nl + 1, n - (size_t)(nl + 1 - lin), nlines, out, len);
	}
	return errfile_last_lines(lin, n, nlines, out, len);
}

int errfile_last_lines(const char *text, size_t n, int nlines, char *out, size_t len)
{
	const char *end = text + n, *b, *e, *starts[ERRFILE_DETAIL_LINES_MAX];
	size_t lens[ERRFILE_DETAIL_LINES_MAX], o = 0, i, k;
	int got = 0, j;

	if (len > 0) {
		out[0] = '\0';
	}
	if (nlines > ERRFILE_DETAIL_LINES_MAX) {
		nlines = ERRFILE_DETAIL_LINES_MAX;
	}
	/* Walk back over lines, skipping empty ones (and '\r' progress redraws' leftovers). */
	for (e = end; e > text && got < nlines; e = b > text ? b - 1 : text) {
		for (b = e; b > text && b[-1] != '\n'; b--) {
		}
		for (i = (size_t)(e - b); i > 0 && (b[i - 1] == '\r' || b[i - 1] == ' '); i--) {
		}
		if (i > 0) {
			starts[got] = b;
			lens[got] = i;
			got++;
		}
		if (b == text) {
			break;
		}
	}
	for (j = got - 1; j >= 0; j--) {
		const char *q = starts[j];

		/* After a '\r' only the last redraw of a progress line is what a terminal shows. */
		for (k = lens[j]; k > 0; k--) {
			if (q[k - 1] == '\r') {
				break;
			}
		}
		for (i = k; i < lens[j] && i - k < ERRFILE_DETAIL_LINE_MAX && o + 2 < len; i++) {
			unsigned char c = (unsigned char)q[i];

			out[o++] = c == '\t' ? ' ' : (c < 0x20 || c == 0x7f) ? '?' : (char)c;
		}
		if (o + 1 < len && j > 0) {
			out[o++] = '\n';
		}
		if (len > 0) {
			out[o < len ? o : len - 1] = '\0';
		}
	}
	return got;
}

/* ---- the failure report ---- */

/* What errfile_summary_all() puts before the other failures. */
#define ALSO "also failed: "

static bool same_way(const struct errfile_failure *a, const struct errfile_failure *b)
{
	const char *ma = a->message != NULL ? a->message : "";
	const char *mb = b->message != NULL ? b->message : "";

	if (a->signal != b->signal || (a->signal == 0 && a->exit_code != b->exit_code)) {
		return false;
	}
	return strcmp(ma, mb) == 0;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

int errfile_format_ranks(const int *ranks, int n, char *buf, size_t len)
{
	size_t o = 0;
	int i, j, w;

	if (len == 0) {
		return 0;
	}
	buf[0] = '\0';
	for (i = 0; i < n; i = j + 1) {
		for (j = i; j + 1 < n && ranks[j + 1] == ranks[j] + 1; j++) {
		}
		if (j > i) {
			w = snprintf(buf + o, len - o, "%s%d-%d", i > 0 ? ", " : "", ranks[i],
				     ranks[j]);
		} else {
			w = snprintf(buf + o, len - o, "%s%d", i > 0 ? ", " : "", ranks[i]);
		}
		if (w < 0 || (size_t)w >= len - o) {
			/* Out of room: end with ", ..." when it fits, else cut. */
			if (len >= 6) {
				snprintf(buf + (o + 5 < len ? o : len - 6), 6, ", ...");
			}
			return -ENOSPC;
		}
		o += (size_t)w;
	}
	return 0;
}

static void report_groups(int fd, const struct errfile_failure *f, int n)
{
	char line[ERRFILE_MAX_MESSAGE + 512], list[256], ex[48], tail[80];
	const char *d, *nl;
	bool *done;
	int *ranks, i, k, m;

	done = calloc((size_t)n, sizeof(*done));
	ranks = calloc((size_t)n, sizeof(*ranks));
	if (done == NULL || ranks == NULL) {
		free(done);
		free(ranks);
		return;
	}
	for (i = 0; i < n; i++) {
		if (done[i]) {
			continue;
		}
		m = 0;
		for (k = i; k < n; k++) {
			if (!done[k] && same_way(&f[i], &f[k])) {
				done[k] = true;
				ranks[m++] = f[k].rank;
			}
		}
		qsort(ranks, (size_t)m, sizeof(*ranks), cmp_int);
		errfile_format_ranks(ranks, m, list, sizeof(list));
		fmt_exit(&f[i], ex, sizeof(ex));
		d = f[i].detail != NULL ? f[i].detail : "";
		if (f[i].message != NULL && strcmp(d, f[i].message) == 0) {
			d = ""; /* one line, already the message */
		}
		if (*d == '\0') {
			tail[0] = '\0';
		} else if (m > 1) {
			snprintf(tail, sizeof(tail), " (last lines of rank %d's %s)", f[i].rank,
				 f[i].detail_what != NULL ? f[i].detail_what : "output");
		} else {
			snprintf(tail, sizeof(tail), " (last lines of its %s)",
				 f[i].detail_what != NULL ? f[i].detail_what : "output");
		}
		snprintf(line, sizeof(line), "  rank%s %s: %s%s%s%s\n", m > 1 ? "s" : "", list, ex,
			 f[i].message != NULL && f[i].message[0] != '\0' ? ": " : "",
			 f[i].message != NULL ? f[i].message : "", tail);
		line_out(fd, line);
		for (; *d != '\0'; d = nl != NULL ? nl + 1 : d + strlen(d)) {
			nl = strchr(d, '\n');
			snprintf(line, sizeof(line), "    %.*s\n",
				 (int)(nl != NULL ? (size_t)(nl - d) : strlen(d)), d);
			line_out(fd, line);
		}
	}
	free(done);
	free(ranks);
}

void errfile_report(int fd, const char *heading, const struct errfile_failure *f, int n)
{
	char line[ERRFILE_MAX_MESSAGE + 512];
	bool details = n > 1;
	int i;

	snprintf(line, sizeof(line), "%s\n", heading);
	line_out(fd, line);
	snprintf(line, sizeof(line), "  %-5s %-24s %-16s %5s %5s %-16s %8s  %s\n", "", "time",
		 "host", "rank", "local", "exit", "pid", "message");
	line_out(fd, line);
	for (i = 0; i < n; i++) {
		char when[40], ex[48];

		details = details || (f[i].detail != NULL && f[i].detail[0] != '\0');
		if (i == ERRFILE_REPORT_ROWS) {
			snprintf(line, sizeof(line),
				 "  ... and %d more failed rank%s (all below)\n", n - i,
				 n - i == 1 ? "" : "s");
			line_out(fd, line);
		}
		if (i >= ERRFILE_REPORT_ROWS) {
			continue;
		}
		fmt_time(f[i].wall_ms, when, sizeof(when));
		fmt_exit(&f[i], ex, sizeof(ex));
		snprintf(line, sizeof(line), "  %-5s %-24s %-16s %5d %5d %-16s %8d  %s\n",
			 i == 0 ? "first" : "", when, f[i].host, f[i].rank, f[i].local_rank, ex,
			 f[i].pid, f[i].message != NULL && f[i].message[0] != '\0' ? f[i].message
										: "-");
		line_out(fd, line);
	}
	/* Ranks that failed the same way once, each with the last lines that say why. */
	if (details) {
		report_groups(fd, f, n);
	}
}

void errfile_summary(const struct errfile_failure *f, char *buf, size_t len)
{
	char ex[48];

	fmt_exit(f, ex, sizeof(ex));
	snprintf(buf, len, "rank %d (host %s, local rank %d, pid %d): %s%s%s", f->rank, f->host,
		 f->local_rank, f->pid, ex, f->message != NULL && f->message[0] != '\0' ? ": " : "",
		 f->message != NULL ? f->message : "");
}

void errfile_summary_all(const struct errfile_failure *f, int n, char *buf, size_t len)
{
	char others[320], ex[48];
	size_t o = 0, keep;
	int i, w;

	others[0] = '\0';
	for (i = 1; i < n && o < sizeof(others); i++) {
		fmt_exit(&f[i], ex, sizeof(ex));
		w = snprintf(others + o, sizeof(others) - o, "%s%s%d: %s", i == 1 ? " (" ALSO : ", ",
			     "rank ", f[i].rank, ex);
		if (w < 0 || (size_t)w >= sizeof(others) - o - 2) {
			others[o] = '\0';
			snprintf(others + o, sizeof(others) - o, "%s...", i == 1 ? " (" ALSO : ", ");
			o = strlen(others);
			break;
		}
		o += (size_t)w;
	}
	if (o > 0) {
		snprintf(others + o, sizeof(others) - o, ")");
		o = strlen(others);
	}
	keep = len > o ? len - o : 1;
	errfile_summary(&f[0], buf, keep);
	if (len > o) {
		memcpy(buf + strlen(buf), others, o + 1);
	}
}

/*
 * The "exit 1" or "SIGKILL (9)" of a summary at @s into @f; returns the length it spans, or -1.
 * sscanf() returns after a partial match with the fields so far assigned: only a reached %n
 * proves the whole pattern matched (fuzzing found a stale offset used after a partial match).
 */
static int parse_exit(const char *s, struct errfile_failure *f)
{
	int v, n = -1;

	if (sscanf(s, "exit %d%n", &v, &n) == 1 && n >= 0) {
		f->exit_code = v;
		return n;
	}
	n = -1;
	if ((sscanf(s, "%*[A-Z0-9] (%d)%n", &v, &n) == 1 && n >= 0) ||
	    (n = -1, sscanf(s, "signal %d (%*d)%n", &v, &n) == 1 && n >= 0)) {
		f->signal = v;
		return n;
	}
	return -1;
}

int errfile_parse_summary(const char *s, struct errfile_failure *f, char *host, size_t hostlen,
			  char *msg, size_t msglen)
{
	const char *p = s, *rest;
	char h[256];
	int rank, lr, pid, n = 0;

	memset(f, 0, sizeof(*f));
	for (p = strstr(p, "rank "); p != NULL; p = strstr(p + 1, "rank ")) {
		if (sscanf(p, "rank %d (host %255[^,], local rank %d, pid %d): %n", &rank, h, &lr,
			   &pid, &n) == 4 &&
		    n > 0) {
			break;
		}
	}
	if (p == NULL) {
		return -EINVAL;
	}
	rest = p + n;
	n = parse_exit(rest, f);
	if (n < 0) {
		return -EINVAL;
	}
	rest += n;
	if (strncmp(rest, ": ", 2) == 0) {
		rest += 2;
	}
	snprintf(host, hostlen, "%s", h);
	snprintf(msg, msglen, "%s", rest);
	/* The rendezvous appends who reported it, errfile_summary_all() the other failures;
	 * neither is the worker's message. */
	p = strstr(msg, " (reported by node rank");
	if (p != NULL) {
		msg[p - msg] = '\0';
	}
	p = strstr(msg, " (" ALSO);
	if (p != NULL) {
		msg[p - msg] = '\0';
	}
	f->host = host;
	f->message = msg;
	f->rank = rank;
	f->local_rank = lr;
	f->pid = pid;
	return 0;
}
