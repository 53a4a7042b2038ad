/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz_filestore.c: libFuzzer harness for the file store's record reader (replay). */
/*
 * Input: one control byte, then the bytes of a store file (file header and records, as
 * rendezvous/store/client_file_internal.h lays them out). The file goes into a memfd and is
 * replayed by fstore_catch_up(), the reader every handle runs. client_file_record.c is
 * included below and client_file_index.c compiled into this program, so both are instrumented
 * for the fuzzer (the store libraries are not); the reader reads 64 bytes at a time here
 * instead of 256 KiB, so that small inputs take the path of records that straddle reads.
 *
 * Control byte: bit 0 set: the file header's and every record's CRC-32 are recomputed before
 * the replay, so the fuzzer reaches the payload checks and the index behind the checksums.
 * Bits 1-7: where the file is split: the first part is replayed, then the rest is appended
 * and replayed incrementally, as a handle catches up with what other writers appended.
 *
 * Checked: every refusal carries a message (b->err); the split replay and a replay of the
 * whole file in one go agree (code, offset reached, torn tail, every key, value and TTL);
 * every value keeps the NUL after it; a torn tail lies inside the file.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define READ_CHUNK 64u
#include "rendezvous/store/client_file_record.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fds[2] = {-1, -1};

/* A fresh handle on memfd @i, emptied, as store_file_open() sets one up (no lock, no path). */
static struct store_backend *handle(int i)
{
	struct store_backend *b;

	if (fds[i] < 0) {
		fds[i] = memfd_create("fuzz_filestore", MFD_CLOEXEC);
		if (fds[i] < 0) {
			abort();
		}
	}
	if (ftruncate(fds[i], 0) < 0) {
		abort();
	}
	b = calloc(1, sizeof(*b));
	if (b == NULL) {
		abort();
	}
	b->fd = fds[i];
	b->path = (char *)"fuzz";
	b->torn_off = -1;
	b->bad_off = -1;
	b->quiet = true; /* the message goes to b->err only, as while opening */
	if (htab_init(&b->index, 64) < 0) {
		abort();
	}
	return b;
}

static void handle_free(struct store_backend *b)
{
	fstore_index_clear(b);
	htab_finish(&b->index);
	free(b->rbuf);
	free(b);
}

static void append(int fd, const uint8_t *p, size_t n)
{
	off_t end = lseek(fd, 0, SEEK_END);

	if (end < 0 || (n > 0 && io_pwrite_full(fd, p, n, end) < 0)) {
		abort();
	}
}

/* Give the file header and every record that fits a checksum that checks. */
static void fix_crcs(uint8_t *p, size_t n)
{
	size_t at = FILE_HDR, len;

	if (n < FILE_HDR) {
		return;
	}
	put_le32(p + 12, crc32_update(0, p, 12));
	while (n - at >= REC_HDR) {
		len = get_le32(p + at + 4);
		if (len > n - at - REC_HDR) {
			return;
		}
		put_le32(p + at + 12, crc32_update(0, p + at + REC_HDR, len));
		at += REC_HDR + len;
	}
}

/* Replay, then check what every replay must hold. Returns the code of the last call. */
static int replay(struct store_backend *b, off_t *tail)
{
	int rc = fstore_catch_up(b, tail);

	/* A refusal names its reason; only running out of memory may go without. */
	if (rc < 0 && rc != -ENOMEM && b->err[0] == '\0') {
		__builtin_trap();
	}
	if (rc == 0 && (*tail < 0 || lseek(b->fd, 0, SEEK_END) < b->off + *tail)) {
		__builtin_trap();
	}
	return rc;
}

/* Every entry of @a is in @b, alike; both hold as many. */
static bool same_index(struct store_backend *a, struct store_backend *b)
{
	struct htab_node *n, *next;
	struct entry *e, *f;
	size_t i;

	if (a->index.count != b->index.count) {
		return false;
	}
	htab_for_each_safe(&a->index, i, n, next) {
		e = entry_of(n);
		if (e->val != NULL && e->val[e->vlen] != '\0') {
			return false;
		}
		f = find(b, e->key, e->klen);
		if (f == NULL || f->vlen != e->vlen || f->expiry != e->expiry ||
		    (e->vlen > 0 && memcmp(f->val, e->val, e->vlen) != 0)) {
			return false;
		}
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct store_backend *whole, *split;
	off_t tw = 0, ts = 0;
	size_t n, cut;
	uint8_t *file;
	int rw, rs;

	if (size < 1) {
		return 0;
	}
	log_set_level(LOG_ERROR); /* "file shrank" and the like: not what is measured */
	n = size - 1;
	file = malloc(n + 1);
	if (file == NULL) {
		return 0;
	}
	if (n > 0) {
		memcpy(file, data + 1, n);
	}
	if (data[0] & 1) {
		fix_crcs(file, n);
	}
	cut = n * (data[0] >> 1) / 127;

	/* The whole file in one replay, as a handle that opens it. */
	whole = handle(0);
	append(whole->fd, file, n);
	rw = replay(whole, &tw);

	/* The same file seen in two steps, as a running handle catches up. */
	split = handle(1);
	append(split->fd, file, cut);
	rs = replay(split, &ts);
	if (!split->moved) {
		append(split->fd, file + cut, n - cut);
		rs = replay(split, &ts);
	}

	if (rw != -ENOMEM && rs != -ENOMEM &&
	    (rw != rs || whole->off != split->off || whole->moved != split->moved ||
	     (rw == 0 && (tw != ts || !same_index(whole, split))))) {
		__builtin_trap(); /* incremental replay must reach the state a fresh one reaches */
	}
	handle_free(split);
	handle_free(whole);
	free(file);
	return 0;
}
