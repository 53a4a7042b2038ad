/* SPDX-License-Identifier: MIT */
/* src/common/fs.h: directories, durable files (write-temp-fsync-rename), private-file and
 * shared-directory checks. */
#ifndef CRUN_SRC_COMMON_FS_H
#define CRUN_SRC_COMMON_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "src/common/diag.h"

/*
 * The directories searched for a program named without a '/' when PATH is unset: the command
 * line's check (src/program.c) and the workers' exec (agent/spawn_proc.c) search the same.
 */
#define FS_DEFAULT_PATH "/usr/local/bin:/bin:/usr/bin"

/** Create @path and its missing parents with @mode (existing ones are fine). 0 or -errno. */
int fs_mkdir_p(const char *path, mode_t mode);
/**
 * Remove @path and everything under it, not following symbolic links ("" and a missing path
 * are no-ops). Returns 0 or the first -errno met (it goes on removing what it can).
 */
int fs_rm_rf(const char *path);
/** Regular files under @path (0 for "" or a missing path). */
int fs_count_files(const char *path);
/** fsync(2) the directory @dir, so a rename or create inside it is durable. 0 or -errno. */
int fs_fsync_dir(const char *dir);

/**
 * The check every secret file passes before it is read (token files, TLS keys): @fd (open on
 * @path) must be a regular file owned by this user and neither readable nor writable by group
 * or others. Returns 0, or -EACCES (or -errno) with @d saying "@what @path: refused: mode
 * 0644, owner uid U; ... (chmod 600 @path)".
 */
int fs_check_private(int fd, const char *what, const char *path, struct crun_diag *d);

/**
 * Whether others can plant, replace or remove files in the directory @dir (its final component
 * followed), where this process is about to write @what ("checkpoint directory", "--log-dir").
 * Judged as ssh's StrictModes judges a home directory:
 * - refused, -EPERM, when it is owned by a user other than this one or root, or anyone may
 *   write it and it has no sticky bit;
 * - 1, a warning, when its group may write it and it has no sticky bit (a team directory);
 * - 0 when only its owner (or a sticky bit's rule) decides what happens to our files.
 * @d holds the refusal or the warning, naming @dir, its mode and owner; -errno (-ENOENT,
 * -ENOTDIR) when it cannot be looked at.
 */
int fs_check_dir_safe(const char *dir, const char *what, struct crun_diag *d);

/* One piece of a file written by fs_write_atomic(). */
struct fs_chunk {
	const void *data; /* borrowed */
	size_t len;
};

/**
 * Replace @path atomically and durably with the concatenation of @chunks, safely in a
 * directory others may write: everything happens relative to the directory opened once; the
 * data goes to an unnamed O_TMPFILE file that is fsync'd and then linked in under a fresh
 * random name (where the file system cannot, a file created under such a name with
 * O_CREAT|O_EXCL|O_NOFOLLOW), renamed over @path, and the directory fsync'd. The temporary
 * name is "<prefix><12 random hex digits>", prefix "." <base> ".tmp." or @tmp_prefix when not
 * NULL; a name or link planted in advance is never opened, followed or overwritten. A reader
 * sees the old file or the whole new one, never a part; on failure the temporary file is
 * removed and @path untouched. @mode is the new file's mode (less the umask).
 * Returns 0 or -errno (-ENAMETOOLONG).
 */
int fs_write_atomic(const char *path, const struct fs_chunk *chunks, size_t nchunks, mode_t mode,
		    const char *tmp_prefix);
/**
 * fs_write_atomic() with @durable false: the same atomic replacement (a reader sees the old
 * file or the whole new one), without its two fsyncs, for a file whose loss in a power cut is
 * acceptable and whose reader names and skips an empty or torn one (the run record: its two
 * fsyncs were 0.4 to 50 ms of every launch on a loaded ext4). @durable true is
 * fs_write_atomic().
 */
int fs_write_replace(const char *path, const struct fs_chunk *chunks, size_t nchunks,
		     mode_t mode, const char *tmp_prefix, bool durable);

#endif
