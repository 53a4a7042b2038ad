/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file_record.c: file store records: encode, check, replay. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/*
 * Replay the records appended since b->off. The caller holds a lock. Stops at the first
 * record that does not check (torn, or the file ends inside it); *tail is set to the number
 * of bytes after the last valid record. Returns 0 or a negative code.
 */
int fstore_catch_up(struct store_backend *b, off_t *tail)
{
	struct stat sb;
	off_t size, off;
	size_t want, got, p, need, len;
	ssize_t r;
	const uint8_t *h;
	int rc;

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
	off = b->off;
	need = 0;
	while (off < size) {
		want = (size_t)(size - off) < READ_CHUNK ? (size_t)(size - off) : READ_CHUNK;
		if (want < need) {
			want = need;
		}
		rc = fstore_ensure(&b->rbuf, &b->rcap, want);
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
			if (get_le32(h) != REC_MAGIC || len > FILE_MAX_RECORD || h[9] || h[10] ||
			    h[11]) {
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
				*tail = 0;
				return 0;
			}
		}
		if (p == 0 && need == 0) {
			/* Fewer bytes than a header left at the end of the file. */
			goto stop;
		}
		off += (off_t)p;
	}
	*tail = 0;
	return 0;
stop:
	*tail = size - b->off;
	return 0;
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
