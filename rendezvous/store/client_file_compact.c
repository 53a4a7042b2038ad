/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file_compact.c: move the file store to a compacted new file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <crun/error.h>

#include "rendezvous/store/client_file_internal.h"
#include "src/common/byteorder.h"
#include "src/common/clock.h"
#include "src/common/io.h"
#include "src/common/log.h"

#define SNAP_RECORD (1u << 20) /* payload size at which a snapshot record is cut */

/* Bytes the live keys would take in a compacted file. */
off_t fstore_live_bytes(struct store_backend *b)
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
	return total + total / 64 + REC_HDR + FILE_HDR;
}

/*
 * Write the file header and the live keys as REC_PUT records to @fd; returns the file's size
 * or a negative code.
 */
static ssize_t write_snapshot(struct store_backend *b, int fd)
{
	int64_t now = crun_wall_ms();
	uint8_t *buf = NULL, h[FILE_HDR];
	size_t cap = 0, len = REC_HDR, n = 0, i;
	off_t off = FILE_HDR;
	struct entry *e;
	int rc;

	fstore_file_header(h);
	rc = io_pwrite_full(fd, h, sizeof(h), 0);

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
				fstore_seal_header(buf, REC_PUT, len - REC_HDR);
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
			rc = fstore_ensure(&buf, &cap, len + need);
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
 * Remove what compactions of writers killed mid-way left behind ("<path>.compact.<pid>.<n>",
 * and its ".old" second name of a former store file: up to the store's size each). Called with
 * the exclusive lock held, which every compaction holds from creating its file to renaming it,
 * so any such file now is stale. Only regular files of ours, looked at and removed relative to
 * the directory without following links.
 */
static void remove_stale(const struct store_backend *b)
{
	char dir[PATH_MAX], prefix[NAME_MAX + 1];
	const char *slash = strrchr(b->path, '/');
	struct dirent *de;
	struct stat sb;
	size_t plen;
	DIR *d;

	if (slash == NULL) {
		snprintf(dir, sizeof(dir), ".");
	} else if ((size_t)(slash - b->path) < sizeof(dir)) {
		memcpy(dir, b->path, (size_t)(slash - b->path));
		dir[slash == b->path ? 1 : slash - b->path] = '\0';
	} else {
		return;
	}
	if ((size_t)snprintf(prefix, sizeof(prefix), "%s.compact.",
			     slash == NULL ? b->path : slash + 1) >= sizeof(prefix)) {
		return;
	}
	plen = strlen(prefix);
	d = opendir(dir);
	if (d == NULL) {
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, prefix, plen) != 0 ||
		    fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
			continue;
		}
		if (unlinkat(dirfd(d), de->d_name, 0) == 0) {
			log_info("store file://%s: removed %s/%s, left by a killed compaction",
				 b->path, dir, de->d_name);
		}
	}
	closedir(d);
}

/*
 * Called with the exclusive lock held and the index caught up to the end of the file. Moves the
 * store to a compacted new file (see the top of this file). Failure leaves the old file in use.
 */
void fstore_compact(struct store_backend *b)
{
	uint8_t moved[REC_HDR];
	char *tmp = NULL, *old = NULL;
	struct flock fl;
	ssize_t size;
	int fd = -1;
	const char *what = "create";
	int rc;

	remove_stale(b);
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
	fstore_seal_header(moved, REC_MOVED, 0);
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
