/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file_lock.c: file store locks (bounded waits), reads, writes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rendezvous/store/client_file_internal.h"
#include "src/common/backoff.h"
#include "src/common/clock.h"
#include "src/common/io.h"
#include "src/common/log.h"

/* Only used with the F_SETLK fallback, where fcntl locks belong to the process. */
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;

void fstore_sleep_us(int64_t us)
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
	struct backoff bo; /* microseconds */
	int64_t left, us;
	int rc;

	if (b->setlk == F_SETLK) {
		pthread_mutex_lock(&proc_lock);
		b->locked_mutex = true;
	}
	/* Jittered in [d/2, d], so contending handles fall out of step. */
	backoff_init(&bo, 20, 20000);
	backoff_set_jitter(&bo, BACKOFF_HALF, (unsigned)rand_r(&b->seed));
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
		us = backoff_step(&bo);
		fstore_sleep_us(us < left * 1000 ? us : left * 1000);
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
	struct backoff bo;
	int fd;

	if (fstat(b->fd, &old) < 0) {
		return -errno;
	}
	backoff_init(&bo, 1000, 100000); /* us */
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
		fstore_sleep_us(backoff_step(&bo));
	}
	close(b->fd);
	b->fd = fd;
	fstore_index_clear(b);
	b->off = 0;
	b->moved = false;
	b->next_check = b->compact_at;
	b->torn_off = -1;
	b->bad_off = -1;
	return 0;
}

/* Take a shared lock, replay what is new, release. */
int fstore_refresh(struct store_backend *b, int64_t deadline_ms)
{
	off_t tail;
	int rc;

	for (;;) {
		rc = lock_file(b, F_RDLCK, deadline_ms);
		if (rc < 0) {
			return rc;
		}
		rc = fstore_catch_up(b, &tail);
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

/*
 * A write to the file failed (ENOSPC, EDQUOT, EIO): say so naming the file and the offset, in
 * b->err (the message store_last_error() gives) and in the log. Returns @rc.
 */
static int write_failed(struct store_backend *b, int rc, const char *what, size_t len, off_t at)
{
	snprintf(b->err, sizeof(b->err),
		 "store file://%s: writing %s of %zu bytes at byte offset %lld: %s (the file keeps "
		 "what it held)",
		 b->path, what, len, (long long)at, strerror(-rc));
	log_error("%s", b->err);
	return rc;
}

/* Take the exclusive lock, replay, and cut away a torn tail so the next record lands at b->off. */
int fstore_write_begin(struct store_backend *b, int64_t deadline_ms)
{
	off_t tail;
	int rc;

	for (;;) {
		rc = lock_file(b, F_WRLCK, deadline_ms);
		if (rc < 0) {
			return rc;
		}
		rc = fstore_catch_up(b, &tail);
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
		log_warn("store file://%s: dropping a torn %s of %lld bytes at offset %lld",
			 b->path, b->off == 0 ? "file header" : "record", (long long)tail,
			 (long long)b->off);
		if (ftruncate(b->fd, b->off) < 0) {
			rc = -errno;
		}
		b->torn_off = -1;
	}
	if (rc == 0 && b->off == 0) {
		/* A new (or empty) file: this writer gives it its header. */
		uint8_t h[FILE_HDR];

		fstore_file_header(h);
		rc = io_pwrite_full(b->fd, h, sizeof(h), 0);
		if (rc == 0) {
			b->off = FILE_HDR;
		} else {
			if (ftruncate(b->fd, 0) < 0) {
				log_warn("store file://%s: truncate after failed write: %s", b->path,
					 strerror(errno));
			}
			write_failed(b, rc, "the file header", sizeof(h), 0);
		}
	}
	if (rc < 0) {
		unlock_file(b);
	}
	b->wlen = REC_HDR;
	return rc;
}

/* Append the record built in wbuf (if @op != 0), apply it locally, and release the lock. */
int fstore_write_end(struct store_backend *b, uint8_t op)
{
	size_t len = b->wlen - REC_HDR;
	uint8_t *h = b->wbuf;
	int rc;

	if (op == 0) {
		unlock_file(b);
		return 0;
	}
	fstore_seal_header(h, op, len);
	rc = io_pwrite_full(b->fd, h, b->wlen, b->off);
	if (rc < 0) {
		/* Leave no torn record behind us if we can help it. */
		if (ftruncate(b->fd, b->off) < 0) {
			log_warn("store file://%s: truncate after failed write: %s", b->path,
				 strerror(errno));
		}
		unlock_file(b);
		return write_failed(b, rc, "a record", b->wlen, b->off);
	}
	rc = fstore_apply(b, op, h + REC_HDR, len);
	if (rc < 0) {
		/* Our index is now behind the file: rebuild it on the next call. */
		unlock_file(b);
		fstore_index_clear(b);
		b->off = 0;
		return rc;
	}
	b->off += (off_t)b->wlen;
	if (b->off >= b->next_check && b->off >= b->compact_at) {
		b->next_check = b->off + b->compact_at / 8;
		if (b->off > 2 * fstore_live_bytes(b)) {
			fstore_compact(b);
		}
	}
	unlock_file(b);
	return 0;
}

/* End a write: append the record of type @op if @rc is 0, else just release the lock. */
int fstore_finish(struct store_backend *b, int rc, uint8_t op)
{
	int wrc = fstore_write_end(b, rc == 0 ? op : 0);

	return rc < 0 ? rc : wrc;
}

/*
 * The deadline for taking the lock. It has a floor, so that an operation with a very short
 * timeout (a wait that checks once) on a busy file still gets to look at it.
 */
int64_t fstore_deadline(int timeout_ms)
{
	return crun_now_ms() + (timeout_ms > LOCK_MIN_MS ? timeout_ms : LOCK_MIN_MS);
}
