/* SPDX-License-Identifier: MIT */
/* src/common/fs.c: mkdir -p, rm -rf and durable atomic file replacement. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/common/fs.h"
#include "src/common/io.h"

int fs_check_private(int fd, const char *what, const char *path, struct crun_diag *d)
{
	struct stat sb;
	int rc;

	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		return diag_set(d, rc, "%s %s: %s", what, path, strerror(-rc));
	}
	if (!S_ISREG(sb.st_mode)) {
		return diag_set(d, -EACCES, "%s %s: not a regular file", what, path);
	}
	if (sb.st_uid != geteuid() || (sb.st_mode & 077) != 0) {
		return diag_set(d, -EACCES,
				"%s %s: refused: mode %04o, owner uid %u; it must be owned by uid "
				"%u and not readable or writable by group or others (chmod 600 %s)",
				what, path, (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid,
				(unsigned)geteuid(), path);
	}
	return 0;
}

int fs_mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path), i;

	if (len == 0) {
		return -EINVAL;
	}
	if (len >= sizeof(tmp)) {
		return -ENAMETOOLONG;
	}
	memcpy(tmp, path, len + 1);
	for (i = 1; i < len; i++) {
		if (tmp[i] != '/') {
			continue;
		}
		tmp[i] = '\0';
		if (mkdir(tmp, mode) != 0 && errno != EEXIST) {
			return -errno;
		}
		tmp[i] = '/';
	}
	if (mkdir(tmp, mode) != 0) {
		struct stat st;

		if (errno != EEXIST) {
			return -errno;
		}
		/* Something is there: fine if it is a directory (or a link to one). */
		if (stat(tmp, &st) != 0) {
			return -errno;
		}
		if (!S_ISDIR(st.st_mode)) {
			return -ENOTDIR;
		}
	}
	return 0;
}

/*
 * nftw() callbacks get no user pointer; these run in the calling thread only, so a
 * thread-local result is enough (the guard process calls fs_rm_rf() too, single-threaded).
 */
static __thread int walk_rc;
static __thread int walk_count;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0 && errno != ENOENT && walk_rc == 0) {
		walk_rc = -errno;
	}
	return 0;
}

int fs_rm_rf(const char *path)
{
	walk_rc = 0;
	if (path[0] == '\0') {
		return 0;
	}
	if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT &&
	    walk_rc == 0) {
		walk_rc = -errno;
	}
	return walk_rc;
}

static int count_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)st;
	(void)ftw;
	if (flag == FTW_F) {
		walk_count++;
	}
	return 0;
}

int fs_count_files(const char *path)
{
	walk_count = 0;
	if (path[0] != '\0') {
		nftw(path, count_entry, 16, FTW_PHYS);
	}
	return walk_count;
}

int fs_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0) {
		return -errno;
	}
	if (fsync(fd) < 0) {
		rc = -errno;
	}
	close(fd);
	return rc;
}

/* Split @path into its directory ("." when none) and base name. */
static int split_path(const char *path, char *dir, size_t dirlen, const char **base)
{
	const char *slash = strrchr(path, '/');
	size_t n;

	if (slash == NULL) {
		*base = path;
		return snprintf(dir, dirlen, ".") < (int)dirlen ? 0 : -ENAMETOOLONG;
	}
	*base = slash + 1;
	n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= dirlen) {
		return -ENAMETOOLONG;
	}
	memcpy(dir, path, n);
	dir[n] = '\0';
	return 0;
}

int fs_write_atomic(const char *path, const struct fs_chunk *chunks, size_t nchunks, mode_t mode,
		    const char *tmp_name)
{
	char dir[PATH_MAX], tmp[PATH_MAX];
	const char *base;
	size_t i;
	int fd, rc, n;

	rc = split_path(path, dir, sizeof(dir), &base);
	if (rc < 0) {
		return rc;
	}
	if (*base == '\0') {
		return -EINVAL;
	}
	if (tmp_name != NULL) {
		n = snprintf(tmp, sizeof(tmp), "%s/%s", dir, tmp_name);
	} else {
		n = snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.%ld", dir, base, (long)getpid());
	}
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		return -ENAMETOOLONG;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0) {
		return -errno;
	}
	rc = 0;
	for (i = 0; rc == 0 && i < nchunks; i++) {
		rc = io_write_full(fd, chunks[i].data, chunks[i].len);
	}
	if (rc == 0 && fsync(fd) < 0) {
		rc = -errno;
	}
	if (close(fd) < 0 && rc == 0) {
		rc = -errno;
	}
	if (rc == 0 && rename(tmp, path) < 0) {
		rc = -errno;
	}
	if (rc < 0) {
		unlink(tmp);
		return rc;
	}
	return fs_fsync_dir(dir);
}
