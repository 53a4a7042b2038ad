/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file_record.c: file store records: encode, check, replay. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <crun/error.h>

#include "rendezvous/store/client_file_internal.h"
#include "src/common/byteorder.h"
#include "src/common/crc32.h"
#include "src/common/io.h"
#include "src/common/log.h"

/* ---- reading ---- */

/* Check that a payload is well formed before anything is applied: -EPROTO if not. */
static int validate(uint8_t op, const uint8_t *p, size_t len)
{
	size_t at = 4, i, n, kl, vl;

	switch (op) {
	case REC_PUT:
		if (len < 4) {
			return -EPROTO;
		}
		n = get_le32(p);
		if (n == 0 || n > CRUN_STORE_MAX_KEYS) {
			return -EPROTO;
		}
		for (i = 0; i < n; i++) {
			if (len - at < 16) {
				return -EPROTO;
			}
			kl = get_le32(p + at);
			vl = get_le32(p + at + 4);
			at += 16;
			if (kl == 0 || kl > CRUN_STORE_MAX_KEY_LEN ||
			    vl > CRUN_STORE_MAX_VALUE_LEN || len - at < kl + vl) {
				return -EPROTO;
			}
			at += kl + vl;
		}
		return at == len ? 0 : -EPROTO;
	case REC_DEL:
		if (len < 4) {
			return -EPROTO;
		}
		kl = get_le32(p);
		return (kl > 0 && kl <= CRUN_STORE_MAX_KEY_LEN && len == 4 + kl) ? 0 : -EPROTO;
	case REC_MOVED:
		return len == 0 ? 0 : -EPROTO;
	case REC_APPEND:
		if (len < 9) {
			return -EPROTO;
		}
		kl = get_le32(p);
		vl = get_le32(p + 4);
		return (kl > 0 && kl <= CRUN_STORE_MAX_KEY_LEN && vl <= CRUN_STORE_MAX_VALUE_LEN &&
			len == 9 + kl + vl && p[8] <= 1)
			       ? 0
			       : -EPROTO;
	default:
		return -EPROTO;
	}
}

/* Apply a validated payload to the index. */
int fstore_apply(struct store_backend *b, uint8_t op, const uint8_t *p, size_t len)
{
	struct entry *e;
	size_t at = 4, i, n, kl, vl;
	int64_t exp;
	int rc;

	(void)len;
	switch (op) {
	case REC_PUT:
		n = get_le32(p);
		for (i = 0; i < n; i++) {
			kl = get_le32(p + at);
			vl = get_le32(p + at + 4);
			exp = (int64_t)get_le64(p + at + 8);
			at += 16;
			rc = fstore_upsert(b, (const char *)p + at, kl, &e);
			if (rc == 0) {
				rc = fstore_set_value(e, p + at + kl, vl, false);
			}
			if (rc < 0) {
				return rc;
			}
			e->expiry = exp;
			at += kl + vl;
		}
		return 0;
	case REC_DEL:
		fstore_index_remove(b, (const char *)p + 4, get_le32(p));
		return 0;
	case REC_APPEND:
		kl = get_le32(p);
		vl = get_le32(p + 4);
		rc = fstore_upsert(b, (const char *)p + 9, kl, &e);
		if (rc == 0) {
			rc = fstore_set_value(e, p + 9 + kl, vl, p[8] == 0);
		}
		if (rc < 0) {
			return rc;
		}
		e->expiry = 0;
		return 0;
	case REC_MOVED:
		b->moved = true;
		return 0;
	default:
		return -EPROTO;
	}
}

int fstore_ensure(uint8_t **buf, size_t *cap, size_t need)
{
	uint8_t *p;
	size_t n;

	if (need <= *cap) {
		return 0;
	}
	n = *cap ? *cap : 4096;
	while (n < need) {
		n *= 2;
	}
	p = realloc(*buf, n);
	if (p == NULL) {
		return -ENOMEM;
	}
	*buf = p;
	*cap = n;
	return 0;
}

/* Record a failure in b->err and log it once per place (polling waits see it many times). */
static int fail(struct store_backend *b, int rc, off_t at, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(struct store_backend *b, int rc, off_t at, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(b->err, sizeof(b->err), "store file://%s: ", b->path);
	if (n < 0 || (size_t)n >= sizeof(b->err)) {
		return rc;
	}
	va_start(ap, fmt);
	vsnprintf(b->err + n, sizeof(b->err) - (size_t)n, fmt, ap);
	va_end(ap);
	if (at != b->bad_off && !b->quiet) {
		log_error("%s", b->err);
	}
	b->bad_off = at;
	return rc;
}

void fstore_file_header(uint8_t *h)
{
	memcpy(h, FILE_MAGIC, 8);
	put_le32(h + 8, FILE_VERSION);
	put_le32(h + 12, crc32_update(0, h, 12));
}

/* The first bytes of a foreign file, printable, for the message. */
static void sample(const uint8_t *h, size_t n, char *out, size_t cap)
{
	size_t i, o = 0;

	for (i = 0; i < n && o + 5 < cap; i++) {
		if (h[i] >= 0x20 && h[i] < 0x7f && h[i] != '"' && h[i] != '\\') {
			out[o++] = (char)h[i];
		} else {
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", h[i]);
		}
	}
	out[o] = '\0';
}

/*
 * The file header, when nothing has been replayed yet. Sets b->off past it, or leaves b->off at
 * 0 with *tail = size for an empty file or a torn header (a creator that crashed), which the
 * next writer replaces. Anything else is refused.
 */
static int check_header(struct store_backend *b, off_t size, off_t *tail)
{
	uint8_t h[FILE_HDR], want[FILE_HDR];
	size_t n = size < FILE_HDR ? (size_t)size : FILE_HDR;
	char first[80];
	ssize_t r;

	r = io_pread_full(b->fd, h, n, 0);
	if (r < 0) {
		return (int)r;
	}
	n = (size_t)r;
	fstore_file_header(want);
	if ((off_t)n == size && n < FILE_HDR && memcmp(h, want, n) == 0) {
		*tail = (off_t)n;
		return 0;
	}
	if (n >= 8 && memcmp(h, FILE_MAGIC, 8) == 0) {
		if (n < FILE_HDR || crc32_update(0, h, 12) != get_le32(h + 12)) {
			return fail(b, -EBADMSG, 0,
				    "damaged file header at byte offset 0 (checksum mismatch): "
				    "refusing to use it");
		}
		if (get_le32(h + 8) != FILE_VERSION) {
			return fail(b, CRUN_EVERSION, 0,
				    "file format version %u; this crun reads version %u: "
				    "use the crun that wrote it, or another path",
				    get_le32(h + 8), FILE_VERSION);
		}
		b->off = FILE_HDR;
		return 0;
	}
	if (n >= 4 ? get_le32(h) == REC_MAGIC : memcmp(h, "CRS1", n) == 0) {
		return fail(b, CRUN_EVERSION, 0,
			    "written by an older crun (file format 1, no file header); this "
			    "crun reads format %u and leaves the file as it is: finish that job "
			    "with the crun that started it, or remove the file",
			    FILE_VERSION);
	}
	sample(h, n, first, sizeof(first));
	return fail(b, CRUN_EMAGIC, 0,
		    "not a crun store file (it starts with \"%s\"): refusing to read or write it",
		    first);
}

static bool header_ok(const uint8_t *h)
{
	return get_le32(h) == REC_MAGIC && h[9] == 0 && h[10] == 0 && h[11] == 0;
}

/* A complete, checking record at @h, with @n bytes available there? */
static bool record_ok(const uint8_t *h, size_t n)
{
	size_t len;

	if (n < REC_HDR || !header_ok(h)) {
		return false;
	}
	len = get_le32(h + 4);
	return len <= FILE_MAX_RECORD && len <= n - REC_HDR &&
	       crc32_update(0, h + REC_HDR, len) == get_le32(h + 12) &&
	       validate(h[8], h + REC_HDR, len) == 0;
}

/* Why the record at @h (of @n bytes to the end of the file) does not check. */
static const char *what_is_wrong(const uint8_t *h, size_t n)
{
	size_t len;

	if (n < REC_HDR) {
		return "a partial record header";
	}
	if (!header_ok(h)) {
		return "not a record header";
	}
	len = get_le32(h + 4);
	if (len > FILE_MAX_RECORD) {
		return "a record length over the limit";
	}
	if (len > n - REC_HDR) {
		return "a partial record";
	}
	if (crc32_update(0, h + REC_HDR, len) != get_le32(h + 12)) {
		return "checksum mismatch";
	}
	return "a malformed record";
}

/*
 * The bytes from b->off to @size do not start with a good record. Either they are the torn
 * tail a crashed writer left (a partial last record, or zeros where the file grew before the
 * data reached the disk) and nothing valid follows: 0 with *tail set, for the next writer to
 * cut. Or the file is damaged there: -EBADMSG, and nobody may cut or append.
 */
static int classify_tail(struct store_backend *b, off_t size, off_t *tail)
{
	off_t at = b->off, rest = size - at;
	uint8_t *buf = NULL;
	const char *what, *why;
	char follows[80];
	size_t n, q, len;
	bool zero = true;
	ssize_t r;

	if (at == b->torn_off && size == b->torn_size) {
		*tail = rest;
		return 0;
	}
	if (at == b->bad_off && size == b->bad_size) {
		return -EBADMSG; /* as found last time (b->err says where) */
	}
	b->bad_size = size;
	if (rest > (off_t)(REC_HDR + FILE_MAX_RECORD)) {
		r = io_pread_full(b->fd, b->rbuf, REC_HDR, at);
		what = r == REC_HDR ? what_is_wrong(b->rbuf, REC_HDR) : "unreadable";
		if (r == REC_HDR && strcmp(what, "a partial record") == 0) {
			what = "a record that does not check";
		}
		return fail(b, -EBADMSG, at,
			    "damaged record at byte offset %lld (%s), and %lld bytes follow, more "
			    "than one record holds: refusing to read or write the store (nothing "
			    "was cut)",
			    (long long)at, what, (long long)rest);
	}
	n = (size_t)rest;
	buf = malloc(n);
	if (buf == NULL) {
		return -ENOMEM;
	}
	r = io_pread_full(b->fd, buf, n, at);
	if (r < 0) {
		free(buf);
		return (int)r;
	}
	n = (size_t)r;
	what = what_is_wrong(buf, n);
	for (q = 0; q < n && zero; q++) {
		zero = buf[q] == 0;
	}
	why = NULL;
	if (!zero && n >= REC_HDR) {
		len = get_le32(buf + 4);
		if (!header_ok(buf)) {
			why = "and more follows it"; /* garbage where a header should be */
		} else if (len <= FILE_MAX_RECORD && REC_HDR + len < n) {
			why = "and it is not the last record";
		}
		for (q = 1; why == NULL && q + REC_HDR <= n; q++) {
			if (record_ok(buf + q, n - q)) {
				snprintf(follows, sizeof(follows),
					 "and a valid record follows at byte offset %lld",
					 (long long)(at + (off_t)q));
				why = follows;
			}
		}
	}
	free(buf);
	if (why != NULL) {
		return fail(b, -EBADMSG, at,
			    "damaged record at byte offset %lld (%s), %s: refusing to read or "
			    "write the store (nothing was cut)",
			    (long long)at, what, why);
	}
	b->torn_off = at;
	b->torn_size = size;
	*tail = rest;
	return 0;
}

/*
 * Replay the records appended since b->off. The caller holds a lock. Stops at the first
 * record that does not check: a torn tail sets *tail to the number of bytes after the last
 * valid record; damage is -EBADMSG (classify_tail()). Returns 0 or a negative code.
 */
int fstore_catch_up(struct store_backend *b, off_t *tail)
{
	struct stat sb;
	off_t size, off;
	size_t want, got, p, need, len;
	ssize_t r;
	const uint8_t *h;
	int rc;

	*tail = 0;
	if (fstat(b->fd, &sb) < 0) {
		return -errno;
	}
	size = sb.st_size;
	if (size < b->off) {
		/* The file was replaced or cut below what we replayed: start over. */
		log_warn("store file://%s: file shrank from %lld to %lld bytes; replaying it",
			 b->path, (long long)b->off, (long long)size);
		fstore_index_clear(b);
		b->off = 0;
	}
	if (b->off == 0) {
		rc = check_header(b, size, tail);
		if (rc < 0 || b->off == 0) {
			return rc;
		}
	}
	off = b->off;
	need = 0;
	while (off < size) {
		want = (size_t)(size - off) < READ_CHUNK ? (size_t)(size - off) : READ_CHUNK;
		if (want < need) {
			want = need;
		}
		rc = fstore_ensure(&b->rbuf, &b->rcap, want < REC_HDR ? REC_HDR : want);
		if (rc < 0) {
			return rc;
		}
		r = io_pread_full(b->fd, b->rbuf, want, off);
		if (r < 0) {
			return (int)r;
		}
		got = (size_t)r;
		if (got < want) {
			size = off + (off_t)got; /* shrank under us: treat the rest as absent */
		}
		p = 0;
		need = 0;
		while (p + REC_HDR <= got) {
			h = b->rbuf + p;
			len = get_le32(h + 4);
			if (!header_ok(h) || len > FILE_MAX_RECORD) {
				goto stop;
			}
			if (p + REC_HDR + len > got) {
				if (off + (off_t)(p + REC_HDR + len) > size) {
					goto stop;
				}
				need = REC_HDR + len;
				break;
			}
			if (crc32_update(0, h + REC_HDR, len) != get_le32(h + 12) ||
			    validate(h[8], h + REC_HDR, len) < 0) {
				goto stop;
			}
			rc = fstore_apply(b, h[8], h + REC_HDR, len);
			if (rc < 0) {
				return rc;
			}
			p += REC_HDR + len;
			b->off = off + (off_t)p;
			if (b->moved) {
				/* Sealed by a compaction: nothing after this record counts. */
				return 0;
			}
		}
		if (p == 0 && need == 0) {
			/* Fewer bytes than a header left at the end of the file. */
			goto stop;
		}
		off += (off_t)p;
	}
	return 0;
stop:
	if (b->off >= size) {
		return 0;
	}
	return classify_tail(b, size, tail);
}

/* ---- writing ---- */

int fstore_wput(struct store_backend *b, const void *p, size_t n)
{
	int rc;

	if (b->wlen + n - REC_HDR > FILE_MAX_RECORD) {
		return -EMSGSIZE;
	}
	rc = fstore_ensure(&b->wbuf, &b->wcap, b->wlen + n);
	if (rc < 0) {
		return rc;
	}
	if (n > 0) {
		memcpy(b->wbuf + b->wlen, p, n);
	}
	b->wlen += n;
	return 0;
}

int fstore_wput32(struct store_backend *b, uint32_t v)
{
	uint8_t x[4];

	put_le32(x, v);
	return fstore_wput(b, x, 4);
}

int fstore_wput64(struct store_backend *b, uint64_t v)
{
	uint8_t x[8];

	put_le64(x, v);
	return fstore_wput(b, x, 8);
}

void fstore_seal_header(uint8_t *h, uint8_t op, size_t len)
{
	put_le32(h, REC_MAGIC);
	put_le32(h + 4, (uint32_t)len);
	h[8] = op;
	h[9] = h[10] = h[11] = 0;
	put_le32(h + 12, crc32_update(0, h + REC_HDR, len));
}
