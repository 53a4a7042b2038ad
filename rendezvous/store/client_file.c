/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file.c: the store over one shared, append-only file (file:///PATH). */
/*
 * File layout: a sequence of records, nothing else (an empty file is an empty store).
 *
 *   offset size field
 *   0      4    magic  0x31535243 ("CRS1" in little-endian byte order)
 *   4      4    len    payload length (<= FILE_MAX_RECORD)
 *   8      1    op     REC_PUT, REC_DEL, REC_APPEND or REC_MOVED
 *   9      3    zero
 *   12     4    crc    CRC-32 (IEEE) of the payload
 *   16     len  payload
 *
 * All integers are little-endian. Payloads:
 *   REC_PUT     u32 n, n x (u32 klen, u32 vlen, i64 expiry_wall_ms (0: none), key, value)
 *   REC_DEL     u32 klen, key
 *   REC_APPEND  u32 klen, u32 vlen, u8 reset, key, value
 *   REC_MOVED   (empty) the file is sealed: the store continues in a new file at the same path
 *
 * Every handle keeps an in-memory index of the whole store and the offset it has replayed up
 * to; it replays only the records appended since. Writers take an exclusive fcntl lock on the
 * whole file, catch up, cut away a torn tail (a record that a crashed writer left half
 * written: its header, length or CRC does not check), then append one record with pwrite()
 * at the end and apply it to their own index. Readers take a shared lock while they catch up,
 * so they never see a record being written; on NFS taking the lock is also what revalidates
 * the client's cache, and the kernel flushes a writer's data before it releases the lock.
 * Locks are open-file-description locks (F_OFD_SETLK), so two handles of one process exclude
 * each other; every lock wait is bounded by the operation's deadline (F_SETLK retried with
 * backoff, never F_SETLKW).
 *
 * Records are deterministic: whatever depends on the current state (an ADD's sum, whether an
 * APPEND starts a new value, whether a key expired) is decided by the writer under the lock
 * and written down, so every handle replays to the same state. The one exception is TTL
 * expiry, which each handle evaluates against its own wall clock: the file backend needs
 * loosely synchronised clocks (the TCP store does not).
 *
 * Compaction: when a writer finds the file past compact_at (64 MiB by default, or
 * CRUN_STORE_FILE_COMPACT_BYTES) and more than half of it dead, it writes the live keys to a
 * new file beside it, locks that new file, renames it over the path, appends REC_MOVED to the
 * old file and only then releases both locks. A handle that replays REC_MOVED reopens the
 * path and replays the new file. Nobody can write to the new file before the old one is
 * sealed (its lock is held), and if sealing fails the old file is renamed back (from a hard
 * link made before), so there is never a split between two files.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/log.h"
#include "rendezvous/store/backend.h"
#include "src/common/util.h"
#include "src/common/byteorder.h"
#include "src/common/clock.h"
#include "src/common/crc32.h"
#include "src/common/diag.h"
#include "src/common/htab.h"
#include "src/common/io.h"
#include "src/common/parse.h"

#define REC_MAGIC 0x31535243u
#define REC_HDR 16
#define FILE_MAX_RECORD (33u << 20) /* as the TCP store's frame limit */
#define READ_CHUNK (256u << 10)
#define LOCK_MIN_MS 2000 /* the shortest bounded wait for a lock */

enum { REC_PUT = 1, REC_DEL = 2, REC_APPEND = 3, REC_MOVED = 4 };

struct entry {
	struct htab_node node; /* in store_backend.index, by the key's hash */
	int64_t expiry; /* wall-clock ms; 0: none */
	uint8_t *val;
	size_t vlen;
	size_t klen;
	char key[];
};

struct store_backend {
	int fd;
	char *path;
	int setlk;            /* F_OFD_SETLK, or F_SETLK where OFD locks are missing */
	bool locked_mutex;    /* F_SETLK fallback: threads of one process share the lock */
	off_t off;            /* replayed up to here: the end of the last valid record */
	struct htab index;    /* struct entry, live or expired */
	uint8_t *rbuf;
	size_t rcap;
	uint8_t *wbuf;
	size_t wlen, wcap;
	unsigned int seed;
	bool moved;           /* replayed a REC_MOVED: the store lives in a new file at path */
	off_t compact_at;     /* compact when the file is past this and mostly dead records */
	off_t next_check;     /* file offset at which to look at the live size again */
};

/* Only used with the F_SETLK fallback, where fcntl locks belong to the process. */
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the in-memory index ---- */

static uint64_t hash_key(const char *k, size_t n)
{
	return htab_hash(k, n, 0);
}

static struct entry *entry_of(struct htab_node *n)
{
	return n != NULL ? container_of(n, struct entry, node) : NULL;
}

static bool live(const struct entry *e, int64_t now)
{
	return e->expiry == 0 || e->expiry > now;
}

static struct entry *find_hashed(struct store_backend *b, const char *k, size_t klen,
				 uint64_t h)
{
	struct htab_node *n;
	struct entry *e;

	for (n = htab_chain(&b->index, h); n != NULL; n = n->next) {
		e = entry_of(n);
		if (n->hash == h && e->klen == klen && memcmp(e->key, k, klen) == 0) {
			return e;
		}
	}
	return NULL;
}

/* The entry for @k whether live or expired, or NULL. */
static struct entry *find(struct store_backend *b, const char *k, size_t klen)
{
	return find_hashed(b, k, klen, hash_key(k, klen));
}

static struct entry *find_live(struct store_backend *b, const char *k, int64_t now)
{
	struct entry *e = find(b, k, strlen(k));

	return (e != NULL && live(e, now)) ? e : NULL;
}

/* Insert or find the entry for @k; its value is left as it was (empty when new). */
static int upsert(struct store_backend *b, const char *k, size_t klen, struct entry **out)
{
	uint64_t h = hash_key(k, klen);
	struct entry *e = find_hashed(b, k, klen, h);

	if (e != NULL) {
		*out = e;
		return 0;
	}
	e = calloc(1, sizeof(*e) + klen + 1);
	if (e == NULL) {
		return -ENOMEM;
	}
	e->klen = klen;
	memcpy(e->key, k, klen);
	htab_insert(&b->index, &e->node, h);
	*out = e;
	return 0;
}

static void index_remove(struct store_backend *b, const char *k, size_t klen)
{
	struct entry *e = find(b, k, klen);

	if (e == NULL) {
		return;
	}
	htab_remove(&b->index, &e->node);
	free(e->val);
	free(e);
}

static void index_clear(struct store_backend *b)
{
	struct htab_node *n, *next;
	struct entry *e;
	size_t i;

	htab_for_each_safe(&b->index, i, n, next) {
		e = entry_of(n);
		free(e->val);
		free(e);
	}
	memset(b->index.buckets, 0, b->index.nbuckets * sizeof(*b->index.buckets));
	b->index.count = 0;
}

static int set_value(struct entry *e, const uint8_t *v, size_t vlen, bool append)
{
	size_t base = append ? e->vlen : 0;
	uint8_t *p;

	p = realloc(e->val, base + vlen + 1);
	if (p == NULL) {
		return -ENOMEM;
	}
	memcpy(p + base, v, vlen);
	p[base + vlen] = 0;
	e->val = p;
	e->vlen = base + vlen;
	return 0;
}

/* ---- records ---- */

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
static int apply(struct store_backend *b, uint8_t op, const uint8_t *p, size_t len)
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
			rc = upsert(b, (const char *)p + at, kl, &e);
			if (rc == 0) {
				rc = set_value(e, p + at + kl, vl, false);
			}
			if (rc < 0) {
				return rc;
			}
			e->expiry = exp;
			at += kl + vl;
		}
		return 0;
	case REC_DEL:
		index_remove(b, (const char *)p + 4, get_le32(p));
		return 0;
	case REC_APPEND:
		kl = get_le32(p);
		vl = get_le32(p + 4);
		rc = upsert(b, (const char *)p + 9, kl, &e);
		if (rc == 0) {
			rc = set_value(e, p + 9 + kl, vl, p[8] == 0);
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

static int ensure(uint8_t **buf, size_t *cap, size_t need)
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
static int catch_up(struct store_backend *b, off_t *tail)
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
		index_clear(b);
		b->off = 0;
	}
	off = b->off;
	need = 0;
	while (off < size) {
		want = (size_t)(size - off) < READ_CHUNK ? (size_t)(size - off) : READ_CHUNK;
		if (want < need) {
			want = need;
		}
		rc = ensure(&b->rbuf, &b->rcap, want);
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
			rc = apply(b, h[8], h + REC_HDR, len);
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

/* ---- locking: bounded waits ---- */

static void sleep_us(int64_t us)
{
	struct timespec ts;

	if (us <= 0) {
		return;
	}
	ts.tv_sec = us / 1000000;
	ts.tv_nsec = (long)(us % 1000000) * 1000;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

/* Jittered: between half and all of @us, so contending handles fall out of step. */
static int64_t jitter(struct store_backend *b, int64_t us)
{
	return us / 2 + (int64_t)(rand_r(&b->seed) % (unsigned int)(us / 2 + 1));
}

static void mutex_release(struct store_backend *b)
{
	if (b->locked_mutex) {
		b->locked_mutex = false;
		pthread_mutex_unlock(&proc_lock);
	}
}

static int lock_file(struct store_backend *b, short type, int64_t deadline_ms)
{
	struct flock fl;
	int64_t backoff = 20, left, us; /* microseconds */
	int rc;

	if (b->setlk == F_SETLK) {
		pthread_mutex_lock(&proc_lock);
		b->locked_mutex = true;
	}
	for (;;) {
		memset(&fl, 0, sizeof(fl));
		fl.l_type = type;
		fl.l_whence = SEEK_SET;
		if (fcntl(b->fd, b->setlk, &fl) == 0) {
			return 0;
		}
		rc = -errno;
		if (rc == -EINVAL && b->setlk == F_OFD_SETLK) {
			/* No OFD locks (old kernel or file system): process locks + a mutex. */
			b->setlk = F_SETLK;
			pthread_mutex_lock(&proc_lock);
			b->locked_mutex = true;
			continue;
		}
		if (rc != -EAGAIN && rc != -EACCES && rc != -EINTR) {
			break;
		}
		left = deadline_ms - crun_now_ms();
		if (left <= 0) {
			rc = -ETIMEDOUT;
			break;
		}
		us = jitter(b, backoff);
		sleep_us(us < left * 1000 ? us : left * 1000);
		backoff = backoff * 2 > 20000 ? 20000 : backoff * 2;
	}
	mutex_release(b);
	return rc;
}

static void unlock_file(struct store_backend *b)
{
	struct flock fl;

	memset(&fl, 0, sizeof(fl));
	fl.l_type = F_UNLCK;
	fl.l_whence = SEEK_SET;
	if (fcntl(b->fd, b->setlk, &fl) < 0) {
		log_warn("store file://%s: unlock: %s", b->path, strerror(errno));
	}
	mutex_release(b);
}

/*
 * The file we have open was sealed by a compaction: open the path again. Until the rename is
 * visible here (an NFS client's lookup cache can lag), the path still names the sealed file:
 * retry with backoff until @deadline_ms.
 */
static int reopen(struct store_backend *b, int64_t deadline_ms)
{
	struct stat old, cur;
	int64_t backoff = 1000; /* us */
	int fd;

	if (fstat(b->fd, &old) < 0) {
		return -errno;
	}
	for (;;) {
		fd = open(b->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0) {
			return -errno;
		}
		if (fstat(fd, &cur) < 0) {
			close(fd);
			return -errno;
		}
		if (cur.st_ino != old.st_ino || cur.st_dev != old.st_dev) {
			break;
		}
		close(fd);
		if (crun_now_ms() >= deadline_ms) {
			return -ETIMEDOUT;
		}
		sleep_us(backoff);
		backoff = backoff * 2 > 100000 ? 100000 : backoff * 2;
	}
	close(b->fd);
	b->fd = fd;
	index_clear(b);
	b->off = 0;
	b->moved = false;
	b->next_check = b->compact_at;
	return 0;
}

/* Take a shared lock, replay what is new, release. */
static int refresh(struct store_backend *b, int64_t deadline_ms)
{
	off_t tail;
	int rc;

	for (;;) {
		rc = lock_file(b, F_RDLCK, deadline_ms);
		if (rc < 0) {
			return rc;
		}
		rc = catch_up(b, &tail);
		unlock_file(b);
		if (rc < 0 || !b->moved) {
			return rc;
		}
		rc = reopen(b, deadline_ms);
		if (rc < 0) {
			return rc;
		}
	}
}

/* Take the exclusive lock, replay, and cut away a torn tail so the next record lands at b->off. */
static int write_begin(struct store_backend *b, int64_t deadline_ms)
{
	off_t tail;
	int rc;

	for (;;) {
		rc = lock_file(b, F_WRLCK, deadline_ms);
		if (rc < 0) {
			return rc;
		}
		rc = catch_up(b, &tail);
		if (rc == 0 && b->moved) {
			unlock_file(b);
			rc = reopen(b, deadline_ms);
			if (rc < 0) {
				return rc;
			}
			continue;
		}
		break;
	}
	if (rc == 0 && tail > 0) {
		log_warn("store file://%s: dropping a torn record of %lld bytes at offset %lld",
			 b->path, (long long)tail, (long long)b->off);
		if (ftruncate(b->fd, b->off) < 0) {
			rc = -errno;
		}
	}
	if (rc < 0) {
		unlock_file(b);
	}
	b->wlen = REC_HDR;
	return rc;
}

static int wput(struct store_backend *b, const void *p, size_t n)
{
	int rc;

	if (b->wlen + n - REC_HDR > FILE_MAX_RECORD) {
		return -EMSGSIZE;
	}
	rc = ensure(&b->wbuf, &b->wcap, b->wlen + n);
	if (rc < 0) {
		return rc;
	}
	if (n > 0) {
		memcpy(b->wbuf + b->wlen, p, n);
	}
	b->wlen += n;
	return 0;
}

static int wput_le32(struct store_backend *b, uint32_t v)
{
	uint8_t x[4];

	put_le32(x, v);
	return wput(b, x, 4);
}

static int wput_le64(struct store_backend *b, uint64_t v)
{
	uint8_t x[8];

	put_le64(x, v);
	return wput(b, x, 8);
}

static void seal_header(uint8_t *h, uint8_t op, size_t len)
{
	put_le32(h, REC_MAGIC);
	put_le32(h + 4, (uint32_t)len);
	h[8] = op;
	h[9] = h[10] = h[11] = 0;
	put_le32(h + 12, crc32_update(0, h + REC_HDR, len));
}

/* Bytes the live keys would take in a compacted file. */
static off_t live_bytes(struct store_backend *b)
{
	int64_t now = crun_wall_ms();
	struct htab_node *n, *next;
	struct entry *e;
	off_t total = 0;
	size_t i;

	htab_for_each_safe(&b->index, i, n, next) {
		e = entry_of(n);
		if (live(e, now)) {
			total += (off_t)(16 + e->klen + e->vlen);
		}
	}
	return total + total / 64 + REC_HDR;
}

#define SNAP_RECORD (1u << 20) /* payload size at which a snapshot record is cut */

/* Write the live keys as REC_PUT records to @fd; returns the bytes written or a negative code. */
static ssize_t write_snapshot(struct store_backend *b, int fd)
{
	int64_t now = crun_wall_ms();
	uint8_t *buf = NULL;
	size_t cap = 0, len = REC_HDR, n = 0, i;
	off_t off = 0;
	struct entry *e;
	int rc = 0;

	for (i = 0; i <= b->index.nbuckets && rc == 0; i++) {
		e = i < b->index.nbuckets ? entry_of(b->index.buckets[i]) : NULL;
		for (;;) {
			bool last = i == b->index.nbuckets;
			size_t need = e ? 16 + e->klen + e->vlen : 0;

			if (!last && e == NULL) {
				break;
			}
			if (!last && !live(e, now)) {
				e = entry_of(e->node.next);
				continue;
			}
			/* Cut the record here when it is full, or at the very end. */
			if (n > 0 && (last || len - REC_HDR + need > SNAP_RECORD ||
				      n == CRUN_STORE_MAX_KEYS)) {
				put_le32(buf + REC_HDR, (uint32_t)n);
				seal_header(buf, REC_PUT, len - REC_HDR);
				rc = io_pwrite_full(fd, buf, len, off);
				if (rc < 0) {
					break;
				}
				off += (off_t)len;
				len = REC_HDR;
				n = 0;
			}
			if (last) {
				break;
			}
			if (n == 0) {
				len = REC_HDR + 4;
			}
			rc = ensure(&buf, &cap, len + need);
			if (rc < 0) {
				break;
			}
			put_le32(buf + len, (uint32_t)e->klen);
			put_le32(buf + len + 4, (uint32_t)e->vlen);
			put_le64(buf + len + 8, (uint64_t)e->expiry);
			memcpy(buf + len + 16, e->key, e->klen);
			if (e->vlen > 0) {
				memcpy(buf + len + 16 + e->klen, e->val, e->vlen);
			}
			len += need;
			n++;
			e = entry_of(e->node.next);
		}
	}
	free(buf);
	return rc < 0 ? rc : (ssize_t)off;
}

/*
 * Called with the exclusive lock held and the index caught up to the end of the file. Moves the
 * store to a compacted new file (see the top of this file). Failure leaves the old file in use.
 */
static void compact(struct store_backend *b)
{
	uint8_t moved[REC_HDR];
	char *tmp = NULL, *old = NULL;
	struct flock fl;
	ssize_t size;
	int fd = -1;
	const char *what = "create";
	int rc;

	if (asprintf(&tmp, "%s.compact.%d.%u", b->path, (int)getpid(),
		     (unsigned int)rand_r(&b->seed)) < 0) {
		return;
	}
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	/* Locked before it has a name anyone can open, and until the old file is sealed. */
	memset(&fl, 0, sizeof(fl));
	fl.l_type = F_WRLCK;
	fl.l_whence = SEEK_SET;
	what = "lock";
	if (fcntl(fd, b->setlk, &fl) < 0) {
		rc = -errno;
		goto fail;
	}
	what = "write";
	size = write_snapshot(b, fd);
	if (size < 0) {
		rc = (int)size;
		goto fail;
	}
	if (fsync(fd) < 0) {
		rc = -errno;
		goto fail;
	}
	/* A second name for the old file, so that a failed seal can put it back. */
	what = "link";
	if (asprintf(&old, "%s.old", tmp) < 0) {
		old = NULL;
		rc = -ENOMEM;
		goto fail;
	}
	if (link(b->path, old) < 0) {
		rc = -errno;
		goto fail;
	}
	what = "rename";
	if (rename(tmp, b->path) < 0) {
		rc = -errno;
		unlink(old);
		goto fail;
	}
	memset(moved, 0, sizeof(moved));
	seal_header(moved, REC_MOVED, 0);
	rc = io_pwrite_full(b->fd, moved, sizeof(moved), b->off);
	if (rc < 0) {
		what = "seal";
		/* Nobody can have used the new file (we hold its lock): put the old one back. */
		if (ftruncate(b->fd, b->off) < 0 || rename(old, b->path) < 0) {
			log_error("store file://%s: compaction: cannot restore the old file: %s",
				  b->path, strerror(errno));
		}
		goto fail;
	}
	unlink(old);
	free(old);
	log_info("store file://%s: compacted %lld bytes to %lld", b->path, (long long)b->off,
		 (long long)size);
	/* Our index is already the new file's content (expired keys aside, which are absent
	 * either way): continue on the new file. Closing the old file releases its lock; the
	 * new file's lock (and, with process locks, the mutex) is released by the caller. */
	close(b->fd);
	b->fd = fd;
	b->off = (off_t)size;
	b->next_check = b->off + b->compact_at / 8;
	free(tmp);
	return;
fail:
	log_warn("store file://%s: compaction: %s %s: %s", b->path, what, tmp, crun_strerror(rc));
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	}
	free(old);
	free(tmp);
	/* Do not try again before the file has grown by another stretch. */
	b->next_check = b->off + b->compact_at / 8;
}

/* Append the record built in wbuf (if @op != 0), apply it locally, and release the lock. */
static int write_end(struct store_backend *b, uint8_t op)
{
	size_t len = b->wlen - REC_HDR;
	uint8_t *h = b->wbuf;
	int rc;

	if (op == 0) {
		unlock_file(b);
		return 0;
	}
	seal_header(h, op, len);
	rc = io_pwrite_full(b->fd, h, b->wlen, b->off);
	if (rc < 0) {
		/* Leave no torn record behind us if we can help it. */
		if (ftruncate(b->fd, b->off) < 0) {
			log_warn("store file://%s: truncate after failed write: %s", b->path,
				 strerror(errno));
		}
		unlock_file(b);
		return rc;
	}
	rc = apply(b, op, h + REC_HDR, len);
	if (rc < 0) {
		/* Our index is now behind the file: rebuild it on the next call. */
		unlock_file(b);
		index_clear(b);
		b->off = 0;
		return rc;
	}
	b->off += (off_t)b->wlen;
	if (b->off >= b->next_check && b->off >= b->compact_at) {
		b->next_check = b->off + b->compact_at / 8;
		if (b->off > 2 * live_bytes(b)) {
			compact(b);
		}
	}
	unlock_file(b);
	return 0;
}

/* End a write: append the record of type @op if @rc is 0, else just release the lock. */
static int finish(struct store_backend *b, int rc, uint8_t op)
{
	int wrc = write_end(b, rc == 0 ? op : 0);

	return rc < 0 ? rc : wrc;
}

/*
 * The deadline for taking the lock. It has a floor, so that an operation with a very short
 * timeout (a wait that checks once) on a busy file still gets to look at it.
 */
static int64_t deadline(int timeout_ms)
{
	return crun_now_ms() + (timeout_ms > LOCK_MIN_MS ? timeout_ms : LOCK_MIN_MS);
}

/* ---- operations ---- */

static int put_one(struct store_backend *b, const char *key, size_t klen, const void *val,
		   size_t len, int64_t expiry)
{
	int rc;

	rc = wput_le32(b, (uint32_t)klen);
	if (rc == 0) {
		rc = wput_le32(b, (uint32_t)len);
	}
	if (rc == 0) {
		rc = wput_le64(b, (uint64_t)expiry);
	}
	if (rc == 0) {
		rc = wput(b, key, klen);
	}
	if (rc == 0) {
		rc = wput(b, val, len);
	}
	return rc;
}

static int f_set(struct store_backend *b, const char *key, const void *val, size_t len,
		 int64_t ttl_ms, int timeout_ms)
{
	int64_t expiry = 0;
	int rc;

	/* A TTL past the end of time never expires (and must not wrap to the past). */
	if (ttl_ms > 0 && __builtin_add_overflow(crun_wall_ms(), ttl_ms, &expiry)) {
		expiry = INT64_MAX;
	}
	rc = write_begin(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	rc = wput_le32(b, 1);
	if (rc == 0) {
		rc = put_one(b, key, strlen(key), val, len, expiry);
	}
	return finish(b, rc, REC_PUT);
}

static int copy_out(const struct entry *e, void **val, size_t *len)
{
	uint8_t *p = malloc(e->vlen + 1);

	if (p == NULL) {
		return -ENOMEM;
	}
	if (e->vlen > 0) {
		memcpy(p, e->val, e->vlen);
	}
	p[e->vlen] = 0;
	*val = p;
	*len = e->vlen;
	return 0;
}

static int f_get(struct store_backend *b, const char *key, void **val, size_t *len,
		 int timeout_ms)
{
	struct entry *e;
	int rc;

	rc = refresh(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	if (e == NULL) {
		return -ENOENT;
	}
	return copy_out(e, val, len);
}

/* ALL: 1 when every key exists. ANY: index + 1 of the first that exists. 0: not yet. */
static int satisfied(struct store_backend *b, const char *const *keys, size_t n, bool any)
{
	int64_t now = crun_wall_ms();
	size_t i;

	for (i = 0; i < n; i++) {
		bool have = find_live(b, keys[i], now) != NULL;

		if (any && have) {
			return (int)i + 1;
		}
		if (!any && !have) {
			return 0;
		}
	}
	return any ? 0 : 1;
}

static int f_wait(struct store_backend *b, const char *const *keys, size_t n, bool any,
		  int timeout_ms)
{
	int64_t end = crun_now_ms() + timeout_ms, left, backoff = 1000; /* us */
	int rc, s;

	for (;;) {
		rc = refresh(b, deadline((int)(end - crun_now_ms())));
		if (rc < 0) {
			return rc;
		}
		s = satisfied(b, keys, n, any);
		if (s > 0) {
			return any ? s - 1 : 0;
		}
		left = end - crun_now_ms();
		if (left <= 0) {
			return -ETIMEDOUT;
		}
		sleep_us(backoff < left * 1000 ? backoff : left * 1000);
		backoff = backoff * 2 > 100000 ? 100000 : backoff * 2;
	}
}

static int f_add(struct store_backend *b, const char *key, int64_t delta, int64_t *result,
		 int timeout_ms)
{
	struct entry *e;
	int64_t cur = 0, sum = 0;
	char num[32];
	int rc, n;

	rc = write_begin(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	if (e != NULL) {
		/* Not an integer (or out of range): -EINVAL, as the TCP store's NOT_NUMBER. */
		rc = parse_i64_bytes(e->val, e->vlen, &cur) < 0 ? -EINVAL : 0;
	}
	if (rc == 0 && __builtin_add_overflow(cur, delta, &sum)) {
		rc = -ERANGE;
	}
	if (rc == 0) {
		n = snprintf(num, sizeof(num), "%" PRId64, sum);
		rc = wput_le32(b, 1);
		if (rc == 0) {
			rc = put_one(b, key, strlen(key), num, (size_t)n, 0);
		}
	}
	rc = finish(b, rc, REC_PUT);
	if (rc == 0) {
		*result = sum;
	}
	return rc;
}

static int f_compare_set(struct store_backend *b, const char *key, const void *expected,
			 size_t elen, const void *desired, size_t dlen, void **cur,
			 size_t *curlen, int timeout_ms)
{
	struct entry *e;
	bool swap;
	int rc, wrc;

	rc = write_begin(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	if (e == NULL) {
		swap = elen == 0;
	} else {
		swap = e->vlen == elen && (elen == 0 || memcmp(e->val, expected, elen) == 0);
	}
	if (swap) {
		rc = wput_le32(b, 1);
		if (rc == 0) {
			rc = put_one(b, key, strlen(key), desired, dlen, 0);
		}
		wrc = write_end(b, rc == 0 ? REC_PUT : 0);
		if (rc == 0 && wrc < 0) {
			rc = wrc;
		}
		if (rc < 0) {
			return rc;
		}
		*cur = malloc(dlen + 1);
		if (*cur == NULL) {
			return -ENOMEM;
		}
		if (dlen > 0) {
			memcpy(*cur, desired, dlen);
		}
		((uint8_t *)*cur)[dlen] = 0;
		*curlen = dlen;
		return 0;
	}
	if (e != NULL) {
		rc = copy_out(e, cur, curlen);
	} else {
		*cur = calloc(1, 1);
		*curlen = 0;
		rc = *cur == NULL ? -ENOMEM : 0;
	}
	write_end(b, 0);
	return rc;
}

static int f_del(struct store_backend *b, const char *key, int timeout_ms)
{
	size_t kl = strlen(key);
	int rc;

	rc = write_begin(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	if (find_live(b, key, crun_wall_ms()) == NULL) {
		/* An expired entry is already gone for everyone; the record would be a no-op. */
		write_end(b, 0);
		return -ENOENT;
	}
	rc = wput_le32(b, (uint32_t)kl);
	if (rc == 0) {
		rc = wput(b, key, kl);
	}
	return finish(b, rc, REC_DEL);
}

static int f_check(struct store_backend *b, const char *const *keys, size_t n, bool *all,
		   int timeout_ms)
{
	int rc;

	rc = refresh(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	*all = satisfied(b, keys, n, false) > 0;
	return 0;
}

static int f_num_keys(struct store_backend *b, int64_t *n, int timeout_ms)
{
	int64_t now, c = 0;
	struct htab_node *e, *next;
	size_t i;
	int rc;

	rc = refresh(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	now = crun_wall_ms();
	htab_for_each_safe(&b->index, i, e, next) {
		c += live(entry_of(e), now);
	}
	*n = c;
	return 0;
}

static int f_append(struct store_backend *b, const char *key, const void *val, size_t len,
		    int timeout_ms)
{
	size_t kl = strlen(key);
	struct entry *e;
	uint8_t reset;
	int rc;

	rc = write_begin(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	reset = e == NULL;
	/* As the TCP store: the value stays within the limit (a snapshot must hold it). */
	if (e != NULL && (e->vlen > CRUN_STORE_MAX_VALUE_LEN ||
			  len > CRUN_STORE_MAX_VALUE_LEN - e->vlen)) {
		write_end(b, 0);
		return -EMSGSIZE;
	}
	rc = wput_le32(b, (uint32_t)kl);
	if (rc == 0) {
		rc = wput_le32(b, (uint32_t)len);
	}
	if (rc == 0) {
		rc = wput(b, &reset, 1);
	}
	if (rc == 0) {
		rc = wput(b, key, kl);
	}
	if (rc == 0) {
		rc = wput(b, val, len);
	}
	return finish(b, rc, REC_APPEND);
}

static int f_multi_get(struct store_backend *b, const char *const *keys, size_t n, void **vals,
		       size_t *lens, int timeout_ms)
{
	struct entry *e;
	int64_t now;
	size_t i, total = 0;
	int rc;

	rc = refresh(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	now = crun_wall_ms();
	for (i = 0; i < n; i++) {
		e = find_live(b, keys[i], now);
		if (e == NULL) {
			continue;
		}
		total += e->vlen;
		if (total > FILE_MAX_RECORD) {
			rc = -EMSGSIZE;
			break;
		}
		rc = copy_out(e, &vals[i], &lens[i]);
		if (rc < 0) {
			break;
		}
	}
	if (rc < 0) {
		for (i = 0; i < n; i++) {
			free(vals[i]);
			vals[i] = NULL;
			lens[i] = 0;
		}
	}
	return rc;
}

static int f_multi_set(struct store_backend *b, const char *const *keys, size_t n,
		       const void *const *vals, const size_t *lens, int timeout_ms)
{
	size_t i, total = 4;
	int rc;

	for (i = 0; i < n; i++) {
		total += 16 + strlen(keys[i]) + lens[i];
	}
	if (total > FILE_MAX_RECORD) {
		return -EMSGSIZE;
	}
	rc = write_begin(b, deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	rc = wput_le32(b, (uint32_t)n);
	for (i = 0; rc == 0 && i < n; i++) {
		rc = put_one(b, keys[i], strlen(keys[i]), lens[i] ? vals[i] : "", lens[i], 0);
	}
	return finish(b, rc, REC_PUT);
}

static int f_ping(struct store_backend *b, int timeout_ms)
{
	return refresh(b, deadline(timeout_ms));
}

static void f_close(struct store_backend *b)
{
	if (b == NULL) {
		return;
	}
	if (b->index.buckets != NULL) {
		index_clear(b);
	}
	if (b->fd >= 0) {
		close(b->fd);
	}
	htab_finish(&b->index);
	free(b->rbuf);
	free(b->wbuf);
	free(b->path);
	free(b);
}

static const struct store_ops file_ops = {
	.name = "file",
	.set = f_set,
	.get = f_get,
	.wait = f_wait,
	.add = f_add,
	.compare_set = f_compare_set,
	.del = f_del,
	.check = f_check,
	.num_keys = f_num_keys,
	.append = f_append,
	.multi_get = f_multi_get,
	.multi_set = f_multi_set,
	.ping = f_ping,
	.close = f_close,
};

int store_file_open(const char *path, int connect_timeout_ms, struct store_backend **out,
		    const struct store_ops **ops, struct crun_diag *d)
{
	struct store_backend *b;
	const char *what, *env;
	int rc;

	b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return -ENOMEM;
	}
	b->fd = -1;
	b->setlk = F_OFD_SETLK;
	b->compact_at = 64 << 20;
	env = getenv("CRUN_STORE_FILE_COMPACT_BYTES");
	if (env != NULL && *env != '\0') {
		int64_t v;

		if (parse_i64(env, &v) == 0 && v >= 4096) {
			b->compact_at = (off_t)v;
		}
	}
	b->next_check = b->compact_at;
	b->seed = (unsigned int)crun_now_ns() ^ (unsigned int)getpid();
	htab_init(&b->index, 64);
	b->path = crun_strdup(path);
	if (b->index.buckets == NULL || b->path == NULL) {
		rc = -ENOMEM;
		what = "open";
		goto err;
	}
	b->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (b->fd < 0) {
		rc = -errno;
		what = "open";
		goto err;
	}
	/* Replay now, so an unreadable or unlockable file fails here and not at first use. */
	rc = refresh(b, deadline(connect_timeout_ms));
	if (rc < 0) {
		what = "lock and read";
		goto err;
	}
	*out = b;
	*ops = &file_ops;
	return 0;
err:
	diag_set(d, rc, "store file://%s: %s: %s", path, what, crun_strerror(rc));
	f_close(b);
	return rc;
}
