/* SPDX-License-Identifier: MIT */
/* tests/unit/test_fs.c: src/common/fs: mkdir -p, rm -rf (symlinks not followed), file counts,
 * and atomic replacement (content, mode, no temp file, the old file kept on failure). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/common/fs.h"
#include "tests/lib/cmocka_skip.h"

static char tmp[PATH_MAX / 2]; /* this test's directory; half, for the names appended */

static int tmp_setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "%s/crun-unit-fs.XXXXXX",
		 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(tmp) == NULL ? -1 : 0;
}

/* Plain rm -rf, not the code under test, so a broken fs_rm_rf() leaves nothing behind. */
static int tmp_teardown(void **state)
{
	char cmd[PATH_MAX];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* @tmp/@rel in a static buffer (one at a time: copy it to keep it). */
static const char *at(const char *rel)
{
	static char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", tmp, rel);
	return p;
}

static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* The file's whole content in a static buffer, or NULL. */
static const char *slurp(const char *path)
{
	static char buf[4096];
	size_t n;
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		return NULL;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static bool exists(const char *path)
{
	struct stat sb;

	return lstat(path, &sb) == 0;
}

static bool is_dir(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Entries of @tmp/@rel other than . and .. */
static int entries(const char *rel)
{
	DIR *d = opendir(at(rel));
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	}
	closedir(d);
	return n;
}

static void fs_mkdir_p_creates_every_missing_parent(void **state)
{
	char p[PATH_MAX];

	(void)state;
	snprintf(p, sizeof(p), "%s", at("a/b/c/d"));
	assert_int_equal(fs_mkdir_p(p, 0755), 0);
	assert_true(is_dir(p));
	assert_true(is_dir(at("a/b")));
	/* Existing directories, all or some, are fine. */
	assert_int_equal(fs_mkdir_p(p, 0755), 0);
	snprintf(p, sizeof(p), "%s", at("a/b/x/y"));
	assert_int_equal(fs_mkdir_p(p, 0755), 0);
	assert_true(is_dir(p));
	/* A trailing slash and doubled slashes. */
	snprintf(p, sizeof(p), "%s", at("t//u/"));
	assert_int_equal(fs_mkdir_p(p, 0755), 0);
	assert_true(is_dir(at("t/u")));
}

static void fs_mkdir_p_applies_the_mode(void **state)
{
	char p[PATH_MAX];
	struct stat sb;
	mode_t old = umask(022);

	(void)state;
	snprintf(p, sizeof(p), "%s", at("m1/m2"));
	assert_int_equal(fs_mkdir_p(p, 0750), 0);
	umask(old);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0750);
	assert_int_equal(stat(at("m1"), &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0750);
}

static void fs_mkdir_p_reports_what_stops_it(void **state)
{
	char p[PATH_MAX + 16];

	(void)state;
	assert_int_equal(fs_mkdir_p("", 0755), -EINVAL);
	put_file(at("file"), "x");
	snprintf(p, sizeof(p), "%s", at("file/sub"));
	assert_int_equal(fs_mkdir_p(p, 0755), -ENOTDIR);
	assert_int_equal(fs_mkdir_p(at("file"), 0755), -ENOTDIR);
	memset(p, 'n', sizeof(p) - 1);
	p[0] = '/';
	p[sizeof(p) - 1] = '\0';
	assert_int_equal(fs_mkdir_p(p, 0755), -ENAMETOOLONG);
}

static void fs_rm_rf_removes_a_tree_but_not_what_its_symlinks_point_to(void **state)
{
	char root[PATH_MAX], p[PATH_MAX];

	(void)state;
	snprintf(root, sizeof(root), "%s", at("tree"));
	snprintf(p, sizeof(p), "%s", at("tree/d1/d2"));
	assert_int_equal(fs_mkdir_p(p, 0755), 0);
	put_file(at("tree/f0"), "0");
	put_file(at("tree/d1/f1"), "1");
	put_file(at("tree/d1/d2/f2"), "2");
	snprintf(p, sizeof(p), "%s", at("outside"));
	assert_int_equal(mkdir(p, 0755), 0);
	put_file(at("outside/keep"), "keep");
	put_file(at("outside-file"), "keep too");
	/* A link to a directory and one to a file, inside the tree. */
	snprintf(p, sizeof(p), "%s", at("tree/d1/dirlink"));
	assert_int_equal(symlink(at("outside"), p), 0);
	snprintf(p, sizeof(p), "%s", at("tree/filelink"));
	assert_int_equal(symlink(at("outside-file"), p), 0);
	snprintf(p, sizeof(p), "%s", at("tree/dangling"));
	assert_int_equal(symlink("/nonexistent/crun", p), 0);

	assert_int_equal(fs_rm_rf(root), 0);
	assert_false(exists(root));
	assert_string_equal(slurp(at("outside/keep")), "keep");
	assert_string_equal(slurp(at("outside-file")), "keep too");
}

static void fs_rm_rf_of_a_symlink_removes_only_the_link(void **state)
{
	char link[PATH_MAX], p[PATH_MAX];

	(void)state;
	snprintf(p, sizeof(p), "%s", at("target"));
	assert_int_equal(mkdir(p, 0755), 0);
	put_file(at("target/keep"), "k");
	snprintf(link, sizeof(link), "%s", at("link"));
	assert_int_equal(symlink(p, link), 0);
	assert_int_equal(fs_rm_rf(link), 0);
	assert_false(exists(link));
	assert_string_equal(slurp(at("target/keep")), "k");
}

static void fs_rm_rf_of_nothing_is_a_no_op(void **state)
{
	char p[PATH_MAX];

	(void)state;
	assert_int_equal(fs_rm_rf(""), 0);
	snprintf(p, sizeof(p), "%s", at("missing/deeper"));
	assert_int_equal(fs_rm_rf(p), 0);
	/* A plain file is removed like a tree of one. */
	put_file(at("single"), "s");
	snprintf(p, sizeof(p), "%s", at("single"));
	assert_int_equal(fs_rm_rf(p), 0);
	assert_false(exists(p));
	assert_int_equal(entries(""), 0);
}

static void fs_count_files_counts_regular_files_only(void **state)
{
	char p[PATH_MAX];

	(void)state;
	assert_int_equal(fs_count_files(""), 0);
	snprintf(p, sizeof(p), "%s", at("missing"));
	assert_int_equal(fs_count_files(p), 0);
	snprintf(p, sizeof(p), "%s", at("c/d/e"));
	assert_int_equal(fs_mkdir_p(p, 0755), 0);
	snprintf(p, sizeof(p), "%s", at("c"));
	assert_int_equal(fs_count_files(p), 0);
	put_file(at("c/1"), "");
	put_file(at("c/d/2"), "");
	put_file(at("c/d/e/3"), "");
	put_file(at("elsewhere"), "");
	/* Links are not files of the tree, and are not followed. */
	snprintf(p, sizeof(p), "%s", at("c/d/link"));
	assert_int_equal(symlink(at("elsewhere"), p), 0);
	snprintf(p, sizeof(p), "%s", at("c/d/uplink"));
	assert_int_equal(symlink(tmp, p), 0);
	snprintf(p, sizeof(p), "%s", at("c"));
	assert_int_equal(fs_count_files(p), 3);
	snprintf(p, sizeof(p), "%s", at("c/d/e/3"));
	assert_int_equal(fs_count_files(p), 1);
}

static void fs_fsync_dir_needs_a_directory(void **state)
{
	char p[PATH_MAX];

	(void)state;
	assert_int_equal(fs_fsync_dir(tmp), 0);
	snprintf(p, sizeof(p), "%s", at("missing"));
	assert_int_equal(fs_fsync_dir(p), -ENOENT);
	put_file(at("f"), "");
	snprintf(p, sizeof(p), "%s", at("f"));
	assert_int_equal(fs_fsync_dir(p), -ENOTDIR);
}

static void fs_write_atomic_writes_every_chunk_with_the_mode(void **state)
{
	const struct fs_chunk chunks[] = {{"head:", 5}, {"", 0}, {"body", 4}, {"\n", 1}};
	char p[PATH_MAX];
	struct stat sb;
	mode_t old = umask(022);

	(void)state;
	snprintf(p, sizeof(p), "%s", at("out"));
	assert_int_equal(fs_write_atomic(p, chunks, 4, 0640, NULL), 0);
	umask(old);
	assert_string_equal(slurp(p), "head:body\n");
	assert_int_equal(stat(p, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(sb.st_mode & 07777, 0640);
	/* Nothing but the file itself: the temporary name is gone. */
	assert_int_equal(entries(""), 1);
	/* No chunks: an empty file. */
	assert_int_equal(fs_write_atomic(p, NULL, 0, 0600, NULL), 0);
	assert_string_equal(slurp(p), "");
	assert_int_equal(entries(""), 1);
}

static void fs_write_atomic_replaces_the_old_file_whole(void **state)
{
	const struct fs_chunk c1[] = {{"a long first version\n", 21}};
	const struct fs_chunk c2[] = {{"v2\n", 3}};
	char p[PATH_MAX];

	(void)state;
	snprintf(p, sizeof(p), "%s", at("f"));
	assert_int_equal(fs_write_atomic(p, c1, 1, 0644, NULL), 0);
	assert_int_equal(fs_write_atomic(p, c2, 1, 0644, "custom.tmp"), 0);
	assert_string_equal(slurp(p), "v2\n");
	assert_false(exists(at("custom.tmp")));
	assert_int_equal(entries(""), 1);
}

/* Not durable (fs_write_replace, durable false): the same whole replacement, mode and no temp. */
static void fs_write_replace_without_fsync_replaces_the_file_whole(void **state)
{
	const struct fs_chunk c1[] = {{"first\n", 6}};
	const struct fs_chunk c2[] = {{"second ", 7}, {"version\n", 8}};
	char p[PATH_MAX];
	struct stat sb;
	mode_t old = umask(022);

	(void)state;
	snprintf(p, sizeof(p), "%s", at("rec"));
	assert_int_equal(fs_write_replace(p, c1, 1, 0600, NULL, false), 0);
	assert_int_equal(fs_write_replace(p, c2, 2, 0600, NULL, false), 0);
	umask(old);
	assert_string_equal(slurp(p), "second version\n");
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0600);
	assert_int_equal(entries(""), 1);
}

/* A name without a directory goes to the current one. */
static void fs_write_atomic_takes_a_bare_file_name(void **state)
{
	const struct fs_chunk c[] = {{"here", 4}};
	char cwd[PATH_MAX];

	(void)state;
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(tmp), 0);
	assert_int_equal(fs_write_atomic("bare", c, 1, 0644, NULL), 0);
	assert_int_equal(chdir(cwd), 0);
	assert_string_equal(slurp(at("bare")), "here");
	assert_int_equal(entries(""), 1);
}

static void fs_write_atomic_refuses_a_directory_name(void **state)
{
	const struct fs_chunk c[] = {{"x", 1}};
	char p[PATH_MAX];

	(void)state;
	snprintf(p, sizeof(p), "%s/", tmp);
	assert_int_equal(fs_write_atomic(p, c, 1, 0644, NULL), -EINVAL);
	snprintf(p, sizeof(p), "%s", at("no/such/dir/f"));
	assert_int_equal(fs_write_atomic(p, c, 1, 0644, NULL), -ENOENT);
	assert_int_equal(entries(""), 0);
}

/*
 * A write that fails half way (the file size limit, in a child so the limit stays there):
 * the old file is untouched and the temporary one removed.
 */
static void fs_write_atomic_failing_mid_write_keeps_the_old_file(void **state)
{
	static char big[65536];
	const struct fs_chunk c[] = {{"new", 3}, {big, sizeof(big)}};
	char p[PATH_MAX];
	int status;
	pid_t pid;

	(void)state;
	snprintf(p, sizeof(p), "%s", at("keep"));
	put_file(p, "old content\n");
	memset(big, 'b', sizeof(big));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = {4096, 4096};

		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0) {
			_exit(100);
		}
		_exit(fs_write_atomic(p, c, 2, 0644, NULL) == -EFBIG ? 0 : 101);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_string_equal(slurp(p), "old content\n");
	assert_int_equal(entries(""), 1);
}

/* The rename fails (a directory holds the name): the temporary file does not stay behind. */
static void fs_write_atomic_failing_rename_leaves_no_temp_file(void **state)
{
	const struct fs_chunk c[] = {{"x", 1}};
	char p[PATH_MAX];

	(void)state;
	snprintf(p, sizeof(p), "%s", at("busy/inner"));
	assert_int_equal(fs_mkdir_p(p, 0755), 0);
	snprintf(p, sizeof(p), "%s", at("busy"));
	assert_int_equal(fs_write_atomic(p, c, 1, 0644, NULL), -EISDIR);
	assert_true(is_dir(p));
	assert_int_equal(entries(""), 1);
	assert_int_equal(fs_write_atomic(p, c, 1, 0644, "named.tmp"), -EISDIR);
	assert_int_equal(entries(""), 1);
}

/*
 * Links planted at the names a writer used to use (".keep.tmp.<pid>", the prefix itself) and
 * at the final name are never followed: the file they point to is unchanged, the new file is
 * a regular file, and the planted temp-name links are still there (not ours to remove).
 */
static void fs_write_atomic_never_follows_a_planted_link(void **state)
{
	const struct fs_chunk c[] = {{"new", 3}};
	char p[PATH_MAX], link[PATH_MAX], victim[PATH_MAX];
	struct stat sb;

	(void)state;
	snprintf(victim, sizeof(victim), "%s", at("victim"));
	put_file(victim, "secret\n");
	snprintf(link, sizeof(link), "%s/.keep.tmp.%ld", tmp, (long)getpid());
	assert_int_equal(symlink(victim, link), 0);
	snprintf(link, sizeof(link), "%s/.keep.tmp.", tmp);
	assert_int_equal(symlink(victim, link), 0);
	snprintf(p, sizeof(p), "%s", at("keep"));
	assert_int_equal(fs_write_atomic(p, c, 1, 0644, NULL), 0);
	assert_string_equal(slurp(victim), "secret\n");
	assert_string_equal(slurp(p), "new");
	assert_int_equal(entries(""), 4);
	/* A link at the final name is replaced, not written through. */
	assert_int_equal(unlink(p), 0);
	assert_int_equal(symlink(victim, p), 0);
	assert_int_equal(fs_write_atomic(p, c, 1, 0644, NULL), 0);
	assert_int_equal(lstat(p, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_string_equal(slurp(victim), "secret\n");
}

/* fs_check_dir_safe() judges a directory as ssh's StrictModes would, naming it and its mode. */
static void fs_check_dir_safe_refuses_what_others_can_write(void **state)
{
	struct crun_diag d = {0};
	char p[PATH_MAX];

	(void)state;
	snprintf(p, sizeof(p), "%s", at("d"));
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(fs_check_dir_safe(p, "checkpoint directory", &d), 0);
	assert_int_equal(chmod(p, 01777), 0);
	assert_int_equal(fs_check_dir_safe(p, "checkpoint directory", &d), 0);
	assert_int_equal(chmod(p, 0770), 0);
	assert_int_equal(fs_check_dir_safe(p, "checkpoint directory", &d), 1);
	assert_non_null(strstr(d.msg, "warning: mode 0770"));
	assert_non_null(strstr(d.msg, p));
	assert_int_equal(chmod(p, 0777), 0);
	assert_int_equal(fs_check_dir_safe(p, "checkpoint directory", &d), -EPERM);
	assert_non_null(strstr(d.msg, "refused: mode 0777"));
	assert_non_null(strstr(d.msg, p));
	assert_int_equal(fs_check_dir_safe(at("missing"), "x", &d), -ENOENT);
	put_file(at("f"), "");
	assert_int_equal(fs_check_dir_safe(at("f"), "x", &d), -ENOTDIR);
	if (geteuid() == 0) { /* another owner: only root can make one */
		assert_int_equal(chmod(p, 0755), 0);
		assert_int_equal(chown(p, 54321, 0), 0);
		assert_int_equal(fs_check_dir_safe(p, "checkpoint directory", &d), -EPERM);
		assert_non_null(strstr(d.msg, "owned by uid 54321"));
	}
}

#define T(f) cmocka_unit_test_setup_teardown(f, tmp_setup, tmp_teardown)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(fs_mkdir_p_creates_every_missing_parent),
		T(fs_mkdir_p_applies_the_mode),
		T(fs_mkdir_p_reports_what_stops_it),
		T(fs_rm_rf_removes_a_tree_but_not_what_its_symlinks_point_to),
		T(fs_rm_rf_of_a_symlink_removes_only_the_link),
		T(fs_rm_rf_of_nothing_is_a_no_op),
		T(fs_count_files_counts_regular_files_only),
		T(fs_fsync_dir_needs_a_directory),
		T(fs_write_atomic_writes_every_chunk_with_the_mode),
		T(fs_write_atomic_replaces_the_old_file_whole),
		T(fs_write_replace_without_fsync_replaces_the_file_whole),
		T(fs_write_atomic_takes_a_bare_file_name),
		T(fs_write_atomic_refuses_a_directory_name),
		T(fs_write_atomic_failing_mid_write_keeps_the_old_file),
		T(fs_write_atomic_failing_rename_leaves_no_temp_file),
		T(fs_write_atomic_never_follows_a_planted_link),
		T(fs_check_dir_safe_refuses_what_others_can_write),
	};

	return test_run_group("unit-fs", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
