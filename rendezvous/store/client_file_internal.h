/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file_internal.h: what the file store's files share (private). */
/*
 * File layout (format 2): a 16-byte file header, then a sequence of records.
 *
 *   offset size field
 *   0      8    magic   "CRUNSTOR"
 *   8      4    version FILE_VERSION (2)
 *   12     4    crc     CRC-32 (IEEE) of bytes 0..11
 *
 * An empty file is an empty store; the first writer writes the header. A file that starts
 * with anything else is refused and never written to: another format version (CRUN_EVERSION;
 * format 1, which had no header and began with a record, was written by older crun), or not
 * a store at all (CRUN_EMAGIC: an endpoint mistyped onto a script).
 *
 * Each record:
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
 * written: its header, length or CRC does not check, it is the last thing in the file and no
 * valid record follows it), then append one record with pwrite()
 * at the end and apply it to their own index. Readers take a shared lock while they catch up,
 * so they never see a record being written; on NFS taking the lock is also what revalidates
 * the client's cache, and the kernel flushes a writer's data before it releases the lock.
 * A record that does not check but is NOT such a tail (a valid record follows it, or more
 * follows it than one record can hold) is damage: every operation on the handle then fails
 * with -EBADMSG, the log names the file and the byte offset, and nothing is cut.
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
/*
 * The files: client_file.c (the operations and open), client_file_index.c (the in-memory
 * index), client_file_record.c (record codec and replay), client_file_lock.c (locks and the
 * write transaction), client_file_compact.c (compaction).
 */
#ifndef CRUN_RENDEZVOUS_STORE_CLIENT_FILE_INTERNAL_H
#define CRUN_RENDEZVOUS_STORE_CLIENT_FILE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "rendezvous/store/backend.h"
#include "src/common/htab.h"
#include "src/common/util.h"

#define FILE_MAGIC "CRUNSTOR"
#define FILE_VERSION 2u
#define FILE_HDR 16 /* the file header; the first record starts here */
#define REC_MAGIC 0x31535243u
#define REC_HDR 16
#define FILE_MAX_RECORD (33u << 20) /* as the TCP store's frame limit */
#ifndef READ_CHUNK
#define READ_CHUNK (256u << 10) /* replay reads this much at a time (tests/fuzz sets less) */
#endif
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
	off_t torn_off;       /* a torn tail was found at this offset... */
	off_t torn_size;      /* ...with the file this long (no need to check it again) */
	off_t bad_off;        /* a failure was reported at this offset (-1: none): log it once */
	off_t bad_size;       /* ...with the file this long */
	bool quiet;           /* opening: the failure goes to the caller's diag, not the log */
	char err[256];        /* why the store was refused ("" if it never was) */
};

/* ---- client_file_index.c: the in-memory index ---- */

/** Insert or find the entry for @k; its value is left as it was (empty when new). */
int fstore_upsert(struct store_backend *b, const char *k, size_t klen, struct entry **out);
void fstore_index_remove(struct store_backend *b, const char *k, size_t klen);
/** Forget every entry (the file is replayed from offset 0 next). */
void fstore_index_clear(struct store_backend *b);
/** Set (or, with @append, extend) @e's value; keeps a NUL after it. 0 or -ENOMEM. */
int fstore_set_value(struct entry *e, const uint8_t *v, size_t vlen, bool append);

/* ---- client_file_record.c: the record codec and replay ---- */

/** Apply a validated record payload to the index. */
int fstore_apply(struct store_backend *b, uint8_t op, const uint8_t *p, size_t len);
/** Grow *@buf (capacity *@cap) to hold @need bytes. 0 or -ENOMEM. */
int fstore_ensure(uint8_t **buf, size_t *cap, size_t need);
/**
 * Replay the records appended since b->off (lock held); *@tail: the bytes of a torn tail
 * after the last good record (a torn file header when b->off is still 0). Returns 0,
 * -EBADMSG (a damaged record: b->err names the file and the offset), CRUN_EMAGIC (not a
 * store file), CRUN_EVERSION (another format version) or another negative code.
 */
int fstore_catch_up(struct store_backend *b, off_t *tail);
/** Fill @h (FILE_HDR bytes) with this format's file header. */
void fstore_file_header(uint8_t *h);
/** Append to the record being built in b->wbuf. 0, -EMSGSIZE or -ENOMEM. */
int fstore_wput(struct store_backend *b, const void *p, size_t n);
int fstore_wput32(struct store_backend *b, uint32_t v);
int fstore_wput64(struct store_backend *b, uint64_t v);
/** Fill the record header at @h for the @len payload bytes after it. */
void fstore_seal_header(uint8_t *h, uint8_t op, size_t len);

/* ---- client_file_lock.c: locks, reads and the write transaction ---- */

void fstore_sleep_us(int64_t us);
/** Take a shared lock, replay what is new, release. */
int fstore_refresh(struct store_backend *b, int64_t deadline_ms);
/** Take the exclusive lock, replay, cut a torn tail; a record is then built in b->wbuf. */
int fstore_write_begin(struct store_backend *b, int64_t deadline_ms);
/** Append the record built in wbuf (if @op != 0), apply it locally, release the lock. */
int fstore_write_end(struct store_backend *b, uint8_t op);
/** End a write: append the record of type @op if @rc is 0, else just release the lock. */
int fstore_finish(struct store_backend *b, int rc, uint8_t op);
/** The deadline for taking the lock (with a floor: LOCK_MIN_MS). */
int64_t fstore_deadline(int timeout_ms);

/* ---- client_file_compact.c: compaction ---- */

/** Bytes the live keys would take in a compacted file. */
off_t fstore_live_bytes(struct store_backend *b);
/** Move the store to a compacted new file (exclusive lock held, index caught up). */
void fstore_compact(struct store_backend *b);

/* ---- index lookups (inline: replay and every read go through them) ---- */

static inline uint64_t hash_key(const char *k, size_t n)
{
	return htab_hash(k, n, NULL); /* the file's own keys: no secret needed */
}

static inline struct entry *entry_of(struct htab_node *n)
{
	return n != NULL ? container_of(n, struct entry, node) : NULL;
}

static inline bool live(const struct entry *e, int64_t now)
{
	return e->expiry == 0 || e->expiry > now;
}

static inline struct entry *find_hashed(struct store_backend *b, const char *k, size_t klen,
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
static inline struct entry *find(struct store_backend *b, const char *k, size_t klen)
{
	return find_hashed(b, k, klen, hash_key(k, klen));
}

static inline struct entry *find_live(struct store_backend *b, const char *k, int64_t now)
{
	struct entry *e = find(b, k, strlen(k));

	return (e != NULL && live(e, now)) ? e : NULL;
}

#endif
