/* SPDX-License-Identifier: MIT */
/* worker_api/checkpoint.c: rank-0 checkpoints written atomically, validated on load. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <crun/ddp.h>
#include <crun/error.h>
#include <crun/worker.h>

#include "src/common/byteorder.h"
#include "src/common/crc32.h"
#include "src/common/diag.h"
#include "src/common/fs.h"
#include "src/common/io.h"
#include "worker_api/worker_internal.h"

/*
 * File layout, all integers little-endian:
 *   0  magic "CRUNCKPT"     8  u32 version (1)     12 u32 nsegs
 *   16 u64 epoch            24 u64 step            32 u64 payload length
 *   40 u32 payload CRC-32   44 u32 reserved (0)    48 u64 segment length x nsegs
 *   48 + 8 nsegs: u32 CRC-32 of every header byte before it, then the payload.
 */
#define CKPT_MAGIC "CRUNCKPT"
#define CKPT_VERSION 1u
#define CKPT_FIXED 48
#define CKPT_MAX_SEGS 1024
#define CKPT_KEEP 2

/* Returns 0, or -EBADMSG when the file ends early. */
static int read_all(int fd, void *data, size_t len)
{
	ssize_t n = io_read_full(fd, data, len);

	if (n < 0) {
		return (int)n;
	}
	return (size_t)n == len ? 0 : -EBADMSG;
}

/* "ckpt-<20 digits>.bin" -> step; false for anything else (temp files start with '.'). */
static bool parse_name(const char *name, uint64_t *step)
{
	unsigned long long v;
	int n = 0;

	if (strlen(name) != 29 || sscanf(name, "ckpt-%20llu.bin%n", &v, &n) != 1 || n != 29) {
		return false;
	}
	*step = v;
	return true;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/*
 * A file another user planted (in a sticky shared directory they may create names in) is not
 * ours to load or remove: false, said once, for a checkpoint-named entry owned by anyone but
 * us or root.
 */
static bool ours(DIR *d, const char *dir, const char *name)
{
	struct stat sb;

	if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		return false;
	}
	if (sb.st_uid == geteuid() || sb.st_uid == 0) {
		return true;
	}
	fprintf(stderr,
		"libcrun-worker: checkpoint %s/%s: ignored: owned by uid %u, not by uid %u\n", dir,
		name, (unsigned)sb.st_uid, (unsigned)geteuid());
	return false;
}

/* Steps of every checkpoint of ours in @dir, newest first. *out malloc'd (caller frees). */
static int list_steps(const char *dir, uint64_t **out, size_t *n)
{
	struct dirent *de;
	uint64_t *v = NULL, *nv, step;
	size_t cnt = 0, cap = 0;
	DIR *d = opendir(dir);

	*out = NULL;
	*n = 0;
	if (d == NULL) {
		return -errno;
	}
	while ((de = readdir(d)) != NULL) {
		if (!parse_name(de->d_name, &step) || !ours(d, dir, de->d_name)) {
			continue;
		}
		if (cnt == cap) {
			cap = cap == 0 ? 16 : cap * 2;
			nv = realloc(v, cap * sizeof(*v));
			if (nv == NULL) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
		}
		v[cnt++] = step;
	}
	closedir(d);
	if (cnt > 1) {
		qsort(v, cnt, sizeof(*v), cmp_desc);
	}
	*out = v;
	*n = cnt;
	return 0;
}

/*
 * @dir must be a directory nobody else can plant files in or replace ours in
 * (fs_check_dir_safe()): refused with a message naming it, or warned about once per process.
 */
static int check_dir(const char *dir)
{
	static char warned[PATH_MAX];
	struct crun_diag d = {0};
	int rc = fs_check_dir_safe(dir, "libcrun-worker: checkpoint directory", &d);

	if (rc < 0) {
		fprintf(stderr, "%s\n", d.msg);
	} else if (rc > 0 && strcmp(warned, dir) != 0) {
		fprintf(stderr, "%s\n", d.msg);
		snprintf(warned, sizeof(warned), "%s", dir);
	}
	return rc < 0 ? rc : 0;
}

static int write_file(const char *dir, uint64_t epoch, uint64_t step,
		      const struct crun_ckpt_seg *segs, size_t nsegs)
{
	char tmp[64], final[PATH_MAX];
	struct fs_chunk *chunks;
	uint8_t *hdr;
	size_t hlen = CKPT_FIXED + 8 * nsegs + 4, i;
	uint64_t total = 0;
	uint32_t crc = 0;
	int rc;

	rc = fs_mkdir_p(dir, 0755);
	if (rc < 0) {
		return rc;
	}
	rc = check_dir(dir);
	if (rc < 0) {
		return rc;
	}
	/* The temporary name starts with '.' so list_steps() never takes it for a checkpoint;
	 * fs_write_atomic() adds a random suffix. The next save removes what a writer killed
	 * mid-write left (only where O_TMPFILE is unavailable: an unnamed file leaves nothing). */
	snprintf(tmp, sizeof(tmp), ".ckpt-%020" PRIu64 ".bin.tmp.", step);
	if ((size_t)snprintf(final, sizeof(final), "%s/ckpt-%020" PRIu64 ".bin", dir, step) >=
	    sizeof(final)) {
		return -ENAMETOOLONG;
	}
	hdr = calloc(1, hlen);
	chunks = calloc(nsegs + 1, sizeof(*chunks));
	if (hdr == NULL || chunks == NULL) {
		free(hdr);
		free(chunks);
		return -ENOMEM;
	}
	chunks[0] = (struct fs_chunk){hdr, hlen};
	for (i = 0; i < nsegs; i++) {
		total += segs[i].len;
		crc = crc32_update(crc, segs[i].data, segs[i].len);
		put_le64(hdr + CKPT_FIXED + 8 * i, segs[i].len);
		chunks[i + 1] = (struct fs_chunk){segs[i].data, segs[i].len};
	}
	memcpy(hdr, CKPT_MAGIC, 8);
	put_le32(hdr + 8, CKPT_VERSION);
	put_le32(hdr + 12, (uint32_t)nsegs);
	put_le64(hdr + 16, epoch);
	put_le64(hdr + 24, step);
	put_le64(hdr + 32, total);
	put_le32(hdr + 40, crc);
	put_le32(hdr + hlen - 4, crc32_update(0, hdr, hlen - 4));
	rc = fs_write_atomic(final, chunks, nsegs + 1, 0644, tmp);
	free(chunks);
	free(hdr);
	return rc;
}

/* ".ckpt-<20 digits>.bin.tmp.<random>": a temporary file of write_file(). */
static bool is_temp_name(const char *name)
{
	size_t i;

	if (strncmp(name, ".ckpt-", 6) != 0 || strlen(name) < 6 + 20 + 9 + 1) {
		return false;
	}
	for (i = 6; i < 26; i++) {
		if (name[i] < '0' || name[i] > '9') {
			return false;
		}
	}
	return strncmp(name + 26, ".bin.tmp.", 9) == 0;
}

/*
 * Open @path and read and check its header: *@fd the open file positioned at the payload,
 * *@hdr the header (malloc'd, caller frees), *@nsegs its segment count. Returns 0, -errno,
 * -EBADMSG (bad magic, checksum, truncated) or -EPROTO (unsupported version).
 */
static int open_checked(const char *path, int *fd, uint8_t **hdr, uint32_t *nsegs)
{
	uint8_t fixed[CKPT_FIXED], *h = NULL;
	uint64_t total = 0;
	size_t hlen, i;
	int rc;

	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0) {
		return -errno;
	}
	rc = read_all(*fd, fixed, sizeof(fixed));
	if (rc < 0) {
		goto err;
	}
	if (memcmp(fixed, CKPT_MAGIC, 8) != 0) {
		rc = -EBADMSG;
		goto err;
	}
	if (get_le32(fixed + 8) != CKPT_VERSION) {
		rc = -EPROTO;
		goto err;
	}
	*nsegs = get_le32(fixed + 12);
	if (*nsegs > CKPT_MAX_SEGS) {
		rc = -EBADMSG;
		goto err;
	}
	hlen = CKPT_FIXED + 8 * (size_t)*nsegs + 4;
	h = malloc(hlen);
	if (h == NULL) {
		rc = -ENOMEM;
		goto err;
	}
	memcpy(h, fixed, CKPT_FIXED);
	rc = read_all(*fd, h + CKPT_FIXED, hlen - CKPT_FIXED);
	if (rc < 0) {
		goto err;
	}
	if (get_le32(h + hlen - 4) != crc32_update(0, h, hlen - 4)) {
		rc = -EBADMSG;
		goto err;
	}
	for (i = 0; i < *nsegs; i++) {
		total += get_le64(h + CKPT_FIXED + 8 * i);
	}
	if (total != get_le64(h + 32)) {
		rc = -EBADMSG;
		goto err;
	}
	*hdr = h;
	return 0;
err:
	free(h);
	close(*fd);
	*fd = -1;
	return rc;
}

/* After the payload: nothing more, and the payload's CRC is the header's. */
static int check_end(int fd, const uint8_t *hdr, uint32_t crc)
{
	uint8_t extra;

	return read(fd, &extra, 1) != 0 || crc != get_le32(hdr + 40) ? -EBADMSG : 0;
}

/* The whole file checks out (header and payload CRC), whatever its segments' sizes. */
static int ckpt_validate(const char *path)
{
	enum { CHUNK = 1 << 20 };
	uint8_t *hdr = NULL, *buf;
	uint64_t left;
	uint32_t nsegs, crc = 0;
	size_t take;
	int fd, rc;

	rc = open_checked(path, &fd, &hdr, &nsegs);
	if (rc < 0) {
		return rc;
	}
	buf = malloc(CHUNK);
	if (buf == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	for (left = get_le64(hdr + 32); left > 0; left -= take) {
		take = left < CHUNK ? (size_t)left : CHUNK;
		rc = read_all(fd, buf, take);
		if (rc < 0) {
			goto out;
		}
		crc = crc32_update(crc, buf, take);
	}
	rc = check_end(fd, hdr, crc);
out:
	free(buf);
	free(hdr);
	close(fd);
	return rc;
}

/*
 * Remove temporary files that writers killed mid-write left behind (only rank 0 writes, one
 * save at a time, and its own temp file has just been renamed, so any temp file here is stale).
 * Relative to the directory, never following a link; only our own (a sticky directory refuses
 * the others anyway).
 */
static void remove_temps(const char *dir)
{
	struct dirent *de;
	struct stat sb;
	DIR *d;

	d = opendir(dir);
	if (d == NULL) {
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (is_temp_name(de->d_name) &&
		    fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    sb.st_uid == geteuid()) {
			unlinkat(dirfd(d), de->d_name, 0);
		}
	}
	closedir(d);
}

/*
 * Rotation: keep the CKPT_KEEP newest checkpoints that validate, the one just written (step
 * @written) always among them. A file that fails validation (-EBADMSG: damaged, truncated, not a
 * checkpoint) can never be loaded, so it is removed and counts for nothing: a damaged file never
 * pushes a valid one out. A file that cannot be judged (another version, an I/O error) is left
 * alone and counts for nothing either. Valid files older than the CKPT_KEEP kept ones go.
 */
static void prune(const char *dir, uint64_t written)
{
	char path[PATH_MAX];
	uint64_t *steps;
	size_t n, i, kept = 1; /* the file just written */
	int rc;

	remove_temps(dir);
	if (list_steps(dir, &steps, &n) < 0) {
		return;
	}
	for (i = 0; i < n; i++) {
		if (steps[i] == written) {
			continue;
		}
		snprintf(path, sizeof(path), "%s/ckpt-%020" PRIu64 ".bin", dir, steps[i]);
		if (kept >= CKPT_KEEP && steps[i] < written) {
			unlink(path);
			continue;
		}
		rc = ckpt_validate(path);
		if (rc == 0) {
			if (kept >= CKPT_KEEP && steps[i] < written) {
				unlink(path);
			} else {
				kept++; /* a newer valid file (step numbers reused) is never removed */
			}
		} else if (rc == -EBADMSG) {
			fprintf(stderr, "libcrun-worker: checkpoint %s: %s: removed (it can never be "
					"loaded)\n", path, crun_strerror(rc));
			unlink(path);
		} else if (rc != -ENOENT) {
			fprintf(stderr, "libcrun-worker: checkpoint %s: %s: left in place, not counted "
					"among the %d kept\n", path, crun_strerror(rc), CKPT_KEEP);
		}
	}
	free(steps);
}

CRUN_EXPORT int crun_checkpoint_save(const char *dir, uint64_t epoch, uint64_t step,
				     const struct crun_ckpt_seg *segs, size_t nsegs,
				     int timeout_ms)
{
	int rank, world, rc = 0, brc;

	if (dir == NULL || (segs == NULL && nsegs > 0) || nsegs > CKPT_MAX_SEGS) {
		return -EINVAL;
	}
	rank = crun_rank();
	if (rank < 0) {
		return rank;
	}
	world = crun_world_size();
	if (rank == 0) {
		rc = write_file(dir, epoch, step, segs, nsegs);
		if (rc < 0) {
			fprintf(stderr, "libcrun-worker: checkpoint %s step %" PRIu64 ": %s\n", dir,
				step, crun_strerror(rc));
		} else {
			prune(dir, step);
		}
		worker_heartbeat(); /* a long save is progress (--worker-timeout) */
	}
	/* Every rank meets here even when rank 0 failed, so nobody waits for a timeout. */
	if (world > 1) {
		brc = crun_barrier(timeout_ms);
		if (rc == 0) {
			rc = brc;
		}
	}
	return rc;
}

CRUN_EXPORT int crun_checkpoint_load(const char *path, uint64_t *epoch, uint64_t *step,
				     const struct crun_ckpt_seg *segs, size_t nsegs)
{
	uint8_t *hdr = NULL;
	uint32_t fnsegs, crc = 0;
	size_t i;
	int fd, rc;

	if (path == NULL || (segs == NULL && nsegs > 0)) {
		return -EINVAL;
	}
	rc = open_checked(path, &fd, &hdr, &fnsegs);
	if (rc < 0) {
		return rc;
	}
	if (fnsegs != nsegs) {
		rc = -EINVAL;
		goto out;
	}
	for (i = 0; i < nsegs; i++) {
		if (get_le64(hdr + CKPT_FIXED + 8 * i) != segs[i].len) {
			rc = -EINVAL;
			goto out;
		}
	}
	for (i = 0; i < nsegs; i++) {
		rc = read_all(fd, segs[i].data, segs[i].len);
		if (rc < 0) {
			goto out;
		}
		crc = crc32_update(crc, segs[i].data, segs[i].len);
	}
	rc = check_end(fd, hdr, crc);
	if (rc < 0) {
		goto out;
	}
	if (epoch != NULL) {
		*epoch = get_le64(hdr + 16);
	}
	if (step != NULL) {
		*step = get_le64(hdr + 24);
	}
out:
	free(hdr);
	close(fd);
	return rc;
}

CRUN_EXPORT int crun_checkpoint_load_latest(const char *dir, uint64_t *epoch, uint64_t *step,
					    const struct crun_ckpt_seg *segs, size_t nsegs,
					    char *path, size_t pathlen)
{
	char p[PATH_MAX];
	uint64_t *steps;
	size_t n, i;
	int rc;

	if (dir == NULL) {
		return -EINVAL;
	}
	rc = list_steps(dir, &steps, &n);
	if (rc < 0) {
		return rc;
	}
	rc = -ENOENT;
	for (i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "%s/ckpt-%020" PRIu64 ".bin", dir, steps[i]);
		rc = crun_checkpoint_load(p, epoch, step, segs, nsegs);
		if (rc == 0) {
			if (path != NULL && pathlen > 0) {
				snprintf(path, pathlen, "%s", p);
			}
			break;
		}
		if (rc != -EBADMSG && rc != -EPROTO) {
			fprintf(stderr, "libcrun-worker: checkpoint %s: %s\n", p, crun_strerror(rc));
			break;
		}
		fprintf(stderr, "libcrun-worker: checkpoint %s: %s: skipped, trying an older one\n",
			p, crun_strerror(rc));
		rc = -ENOENT;
	}
	free(steps);
	return rc;
}
