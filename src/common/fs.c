/* SPDX-License-Identifier: MIT */
/* src/common/fs.c: mkdir -p, rm -rf and durable atomic file replacement. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/common/fs.h"
#include "src/common/io.h"
#include "src/common/util.h"

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

int fs_check_dir_safe(const char *dir, const char *what, struct crun_diag *d)
{
	struct stat sb;
	unsigned mode;
	int rc;

	if (stat(dir, &sb) < 0) {
		rc = -errno;
		return diag_set(d, rc, "%s %s: %s", what, dir, strerror(-rc));
	}
	if (!S_ISDIR(sb.st_mode)) {
		return diag_set(d, -ENOTDIR, "%s %s: not a directory", what, dir);
	}
	mode = (unsigned)(sb.st_mode & 07777);
	if (sb.st_uid != geteuid() && sb.st_uid != 0) {
		return diag_set(d, -EPERM,
				"%s %s: refused: owned by uid %u (mode %04o), not by uid %u or "
				"root: its owner could replace what crun writes there (use a "
				"directory of your own)",
				what, dir, (unsigned)sb.st_uid, mode, (unsigned)geteuid());
	}
	if ((mode & S_ISVTX) != 0 || (mode & 022) == 0) {
		return 0;
	}
	if ((mode & 002) != 0) {
		return diag_set(d, -EPERM,
				"%s %s: refused: mode %04o: anyone can write it and it has no "
				"sticky bit, so anyone could replace or remove what crun writes "
				"there (chmod o-w or +t %s)",
				what, dir, mode, dir);
	}
	diag_set(d, 0,
		 "%s %s: warning: mode %04o: members of group %u can write it and it has no "
		 "sticky bit, so they could replace or remove what crun writes there (chmod "
		 "g-w or +t %s)",
		 what, dir, mode, (unsigned)sb.st_gid, dir);
	return 1;
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

/* @n random lowercase hex characters into @out (NUL-terminated). */
static int random_hex(char *out, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[16];
	size_t i;

	if (n > 2 * sizeof(raw)) {
		return -EINVAL;
	}
	if (util_random(raw, (n + 1) / 2) < 0) {
		return -EIO;
	}
	for (i = 0; i < n; i++) {
		out[i] = hex[(raw[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
	}
	out[n] = '\0';
	return 0;
}

/* "<prefix><12 random hex digits>" into @buf. */
static int temp_name(char *buf, size_t len, const char *prefix)
{
	char rnd[13];
	int rc = random_hex(rnd, 12);

	if (rc < 0) {
		return rc;
	}
	if ((size_t)snprintf(buf, len, "%s%s", prefix, rnd) >= len) {
		return -ENAMETOOLONG;
	}
	return 0;
}

/*
 * Give the unnamed O_TMPFILE file @fd the fresh name @name in @dfd: linkat() never follows or
 * replaces what is at the new name, so a planted name is EEXIST. AT_EMPTY_PATH needs
 * CAP_DAC_READ_SEARCH; the /proc/self/fd link works for everyone else where /proc is mounted.
 */
static int link_tmpfile(int fd, int dfd, const char *name)
{
	char proc[64];

	if (linkat(fd, "", dfd, name, AT_EMPTY_PATH) == 0) {
		return 0;
	}
	if (errno == EEXIST) {
		return -EEXIST;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW) == 0 ? 0 : -errno;
}

/*
 * Create the temporary file in @dfd, named *@name on return (a fresh random name, never an
 * existing one: O_CREAT|O_EXCL|O_NOFOLLOW). With @tmpfile set it is an O_TMPFILE file that
 * gets its name only once written (see publish_temp()), so a writer killed mid-write leaves
 * nothing behind; otherwise it is named at once. Returns the fd or -errno.
 */
static int open_temp(int dfd, const char *prefix, mode_t mode, bool tmpfile, char *name,
		     size_t namelen)
{
	int fd, rc, tries;

	if (tmpfile) {
		fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
		return fd < 0 ? -errno : fd;
	}
	for (tries = 0; tries < 16; tries++) {
		rc = temp_name(name, namelen, prefix);
		if (rc < 0) {
			return rc;
		}
		fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		if (fd >= 0 || errno != EEXIST) {
			return fd < 0 ? -errno : fd;
		}
	}
	return -EEXIST;
}

/* An O_TMPFILE file's fresh random name in @dfd (see link_tmpfile()). */
static int publish_temp(int fd, int dfd, const char *prefix, char *name, size_t namelen)
{
	int rc = -EEXIST, tries;

	for (tries = 0; tries < 16 && rc == -EEXIST; tries++) {
		rc = temp_name(name, namelen, prefix);
		if (rc == 0) {
			rc = link_tmpfile(fd, dfd, name);
		}
	}
	return rc;
}

/* Write @chunks to @fd and fsync it when @durable. */
static int write_chunks(int fd, const struct fs_chunk *chunks, size_t nchunks, bool durable)
{
	size_t i;
	int rc = 0;

	for (i = 0; rc == 0 && i < nchunks; i++) {
		rc = io_write_full(fd, chunks[i].data, chunks[i].len);
	}
	if (rc == 0 && durable && fsync(fd) < 0) {
		rc = -errno;
	}
	return rc;
}

/* O_TMPFILE refused by the file system or the kernel, or no way to link it (no /proc). */
static bool tmpfile_unsupported(int rc)
{
	return rc == -EOPNOTSUPP || rc == -EISDIR || rc == -EINVAL || rc == -ENOENT ||
	       rc == -EPERM || rc == -EXDEV || rc == -ENOSYS;
}

/*
 * One attempt with O_TMPFILE (@tmpfile) or with a named temporary file. *@fallback is set when
 * O_TMPFILE is not available here and nothing was changed: the caller tries a name instead.
 */
static int write_via_temp(int dfd, const char *base, const char *prefix,
			  const struct fs_chunk *chunks, size_t nchunks, mode_t mode, bool tmpfile,
			  bool durable, bool *fallback)
{
	char name[NAME_MAX + 1] = "";
	int fd, rc;

	*fallback = false;
	fd = open_temp(dfd, prefix, mode, tmpfile, name, sizeof(name));
	if (fd < 0) {
		*fallback = tmpfile && tmpfile_unsupported(fd);
		return fd;
	}
	rc = write_chunks(fd, chunks, nchunks, durable);
	if (rc == 0 && tmpfile) {
		rc = publish_temp(fd, dfd, prefix, name, sizeof(name));
		if (rc < 0) {
			*fallback = rc != -EEXIST && tmpfile_unsupported(rc);
			name[0] = '\0'; /* nothing named to remove */
		}
	}
	if (close(fd) < 0 && rc == 0) {
		rc = -errno;
	}
	if (rc == 0 && renameat(dfd, name, dfd, base) < 0) {
		rc = -errno;
	}
	if (rc < 0 && name[0] != '\0') {
		unlinkat(dfd, name, 0);
	}
	if (rc == 0 && durable && fsync(dfd) < 0) {
		rc = -errno;
	}
	return rc;
}

int fs_write_atomic(const char *path, const struct fs_chunk *chunks, size_t nchunks, mode_t mode,
		    const char *tmp_prefix)
{
	return fs_write_replace(path, chunks, nchunks, mode, tmp_prefix, true);
}

int fs_write_replace(const char *path, const struct fs_chunk *chunks, size_t nchunks,
		     mode_t mode, const char *tmp_prefix, bool durable)
{
	char dir[PATH_MAX], prefix[NAME_MAX + 1];
	const char *base;
	bool fallback;
	int dfd, rc;

	rc = split_path(path, dir, sizeof(dir), &base);
	if (rc < 0) {
		return rc;
	}
	if (*base == '\0') {
		return -EINVAL;
	}
	if (tmp_prefix == NULL) {
		rc = snprintf(prefix, sizeof(prefix), ".%s.tmp.", base);
	} else {
		rc = snprintf(prefix, sizeof(prefix), "%s", tmp_prefix);
	}
	/* Room for the 12 random characters. */
	if (rc < 0 || (size_t)rc + 12 >= sizeof(prefix)) {
		return -ENAMETOOLONG;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		return -errno;
	}
	rc = write_via_temp(dfd, base, prefix, chunks, nchunks, mode, true, durable, &fallback);
	if (fallback) {
		rc = write_via_temp(dfd, base, prefix, chunks, nchunks, mode, false, durable,
				    &fallback);
	}
	close(dfd);
	return rc;
}
