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
#include "src/common/signames.h"

/*
 * A recursive-descent skimmer: it walks just enough JSON to find the "message" member of the
 * top-level object, and the "message" member inside it when that is an object. Depth and
 * size are bounded, so hostile files only yield -EPROTO.
 */
struct jp {
	const char *p, *end;
	int depth;
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

/* Append one byte to @out (size @len, NUL kept), turning newlines into " | ". */
static void put(char *out, size_t len, size_t *o, char c)
{
	if (out == NULL || len == 0) {
		return;
	}
	if (c == '\n') {
		put(out, len, o, ' ');
		put(out, len, o, '|');
		put(out, len, o, ' ');
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

/* Parse a string at j->p (which is '"'); copy it to @out when not NULL. */
static int str(struct jp *j, char *out, size_t len)
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
			put(out, len, &o, c);
			continue;
		}
		if (j->p >= j->end) {
			return -EPROTO;
		}
		c = *j->p++;
		switch (c) {
		case 'n':
			put(out, len, &o, '\n');
			break;
		case 't':
			put(out, len, &o, ' ');
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
			put(out, len, &o, v < 0x80 && v >= 0x20 ? (char)v : (v == '\n' ? '\n' : '?'));
			break;
		}
		default:
			put(out, len, &o, c);
			break;
		}
	}
	return -EPROTO;
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
	struct jp j = {.p = doc, .end = doc + n, .depth = 0};
	bool found = false;
	int rc;

	if (len > 0) {
		msg[0] = '\0';
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
	char *doc;
	size_t n = 0;
	ssize_t r;
	int fd, rc;

	if (len > 0) {
		msg[0] = '\0';
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
	rc = errfile_parse_message(doc, n, msg, len);
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

static void line_out(int fd, const char *line)
{
	(void)io_write_full(fd, line, strlen(line)); /* a closed console loses the report only */
}

void errfile_report(int fd, const char *heading, const struct errfile_failure *f, int n)
{
	char line[ERRFILE_MAX_MESSAGE + 512];
	int i;

	snprintf(line, sizeof(line), "%s\n", heading);
	line_out(fd, line);
	snprintf(line, sizeof(line), "  %-5s %-24s %-16s %5s %5s %-16s %8s  %s\n", "", "time",
		 "host", "rank", "local", "exit", "pid", "message");
	line_out(fd, line);
	for (i = 0; i < n; i++) {
		char when[40], ex[48];

		fmt_time(f[i].wall_ms, when, sizeof(when));
		fmt_exit(&f[i], ex, sizeof(ex));
		snprintf(line, sizeof(line), "  %-5s %-24s %-16s %5d %5d %-16s %8d  %s\n",
			 i == 0 ? "first" : "", when, f[i].host, f[i].rank, f[i].local_rank, ex,
			 f[i].pid, f[i].message != NULL && f[i].message[0] != '\0' ? f[i].message
										: "-");
		line_out(fd, line);
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
	/* The rendezvous appends who reported it; that is not the worker's message. */
	p = strstr(msg, " (reported by node rank");
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
