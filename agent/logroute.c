/* SPDX-License-Identifier: MIT */
/* agent/logroute.c: cut worker output into whole lines, prefix them, write each at once. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/logroute.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/fs.h"
#include "src/common/io.h"
#include "src/common/journal.h"
#include "src/common/log.h"

int logroute_init(struct logroute_stream *s, const char *prefix, int console_fd, int file_fd)
{
	memset(s, 0, sizeof(*s));
	s->console_fd = console_fd;
	s->file_fd = file_fd;
	s->dup_fd = -1;
	s->journal_rank = -1;
	s->prefix = strdup(prefix != NULL ? prefix : "");
	if (s->prefix == NULL) {
		/* The descriptor is ours from the call on, even when the call fails. */
		if (file_fd >= 0) {
			close(file_fd);
		}
		s->file_fd = -1;
		return -ENOMEM;
	}
	s->prefix_len = strlen(s->prefix);
	return 0;
}

/*
 * Write all of @p. A console the agent inherited may be non-blocking (a terminal shared with a
 * process that set O_NONBLOCK, a pipe to a slow reader): on EAGAIN wait for room, but at most
 * LOGROUTE_STALL_MS, then drop the rest of this write. The agent's loop must never spin or
 * stall for good on its console: the workers, signals and the rendezvous depend on it.
 */
static void write_all(int fd, const char *p, size_t n)
{
	/* Errors are dropped on purpose: a closed or stalled console must not stop the workers. */
	(void)io_write_full_stall(fd, p, n, LOGROUTE_STALL_MS);
}

int logroute_set_file_path(struct logroute_stream *s, const char *path)
{
	char *p = strdup(path);

	if (p == NULL) {
		return -ENOMEM;
	}
	free(s->file_path);
	s->file_path = p;
	return 0;
}

/*
 * Write @n bytes to the log file. The first failure is logged (naming the file) and ends the
 * file: later output is counted, not written, so the file never skips a part and goes on.
 */
static void file_write(struct logroute_stream *s, const char *p, size_t n)
{
	int rc;

	if (s->file_err != 0) {
		s->file_lost += n;
		return;
	}
	rc = io_write_full_stall(s->file_fd, p, n, LOGROUTE_STALL_MS);
	if (rc >= 0) {
		return;
	}
	s->file_err = -rc;
	s->file_lost += n;
	log_error("log file %s: %s: the rest of this worker's output is not written to it (it "
		  "keeps what was written before)",
		  s->file_path != NULL ? s->file_path : "(unnamed)", strerror(-rc));
}

/*
 * The stream whose partial line is on the console without its end, or NULL. Every stream is
 * fed from the agent's one loop thread, so one pointer is the whole state. stdout and stderr
 * count as one console: on a terminal they are the same screen.
 */
static struct logroute_stream *console_open;

/* End the line another stream left open on the console: a newline of the agent's own. */
static void console_break(const struct logroute_stream *s)
{
	if (console_open != NULL && console_open != s) {
		write_all(console_open->console_fd, "\n", 1);
		console_open = NULL;
	}
}

/* Is the \r at @i of @p (@n bytes) the start of a redrawn line (not the \r of a \r\n)? */
static bool cr_redraws(const char *p, size_t n, size_t i, bool nl_added)
{
	return p[i] == '\r' && (i + 1 < n ? p[i + 1] != '\n' : !nl_added);
}

/*
 * Write @p, @n to the console as ONE write(): the prefix first unless @s has the console
 * already, the prefix again after every \r that redraws the line, and a newline when @end
 * asks for one and @p lacks it. @s has the console afterwards unless the line ended.
 */
static void console_put(struct logroute_stream *s, const char *p, size_t n, bool end)
{
	bool nl = n > 0 && p[n - 1] == '\n';
	bool add_nl = end && !nl;
	bool head = console_open != s;
	size_t total, i, o, crs = 0;
	char stackbuf[4096];
	char *out;

	console_break(s);
	/* A fresh console line is at its start: a leading \r there would only add a prefix. */
	while (head && n > 0 && cr_redraws(p, n, 0, add_nl)) {
		p++;
		n--;
	}
	for (i = 0; i < n; i++) {
		crs += cr_redraws(p, n, i, add_nl);
	}
	total = (head ? s->prefix_len : 0) + n + crs * s->prefix_len + (add_nl ? 1 : 0);
	out = total <= sizeof(stackbuf) ? stackbuf : malloc(total);
	if (out == NULL) {
		/* No memory for one buffer: several writes are better than losing the line. */
		if (head) {
			write_all(s->console_fd, s->prefix, s->prefix_len);
		}
		write_all(s->console_fd, p, n);
		if (add_nl) {
			write_all(s->console_fd, "\n", 1);
		}
	} else {
		o = 0;
		if (head) {
			memcpy(out, s->prefix, s->prefix_len);
			o = s->prefix_len;
		}
		for (i = 0; i < n; i++) {
			out[o++] = p[i];
			if (cr_redraws(p, n, i, add_nl)) {
				memcpy(out + o, s->prefix, s->prefix_len);
				o += s->prefix_len;
			}
		}
		if (add_nl) {
			out[o++] = '\n';
		}
		write_all(s->console_fd, out, o);
		if (out != stackbuf) {
			free(out);
		}
	}
	console_open = end || nl ? NULL : s;
}

void logroute_set_duplicate(struct logroute_stream *s, char *const *filters, int fd)
{
	s->dup_filters = filters;
	s->dup_fd = fd;
}

/* The line @p (@n bytes) holds one of s->dup_filters. */
static bool dup_match(const struct logroute_stream *s, const char *p, size_t n)
{
	char *const *f;

	for (f = s->dup_filters; *f != NULL; f++) {
		if (memmem(p, n, *f, strlen(*f)) != NULL) {
			return true;
		}
	}
	return false;
}

/* A matching line to the shared filtered_std*.log: prefix + line + newline, in one write. */
static void dup_write(struct logroute_stream *s, const char *p, size_t n, bool nl)
{
	char *line;

	if (s->dup_fd < 0 || s->dup_filters == NULL || !dup_match(s, p, n)) {
		return;
	}
	line = malloc(s->prefix_len + n + 2);
	if (line == NULL) {
		return;
	}
	memcpy(line, s->prefix, s->prefix_len);
	memcpy(line + s->prefix_len, p, n);
	if (!nl) {
		line[s->prefix_len + n++] = '\n';
	}
	/* Dropped on error as the console's are: a full disk must not stop the workers. */
	(void)io_write_full_stall(s->dup_fd, line, s->prefix_len + n, LOGROUTE_STALL_MS);
	free(line);
}

void logroute_set_journal(struct logroute_stream *s, int rank)
{
	s->journal_rank = rank;
}

/* One line (@p, @n, without its newline) as a journal entry; 0, or why it went elsewhere. */
static int journal_line(const struct logroute_stream *s, const char *p, size_t n)
{
	char stackbuf[4096], extra[32];
	size_t total = s->prefix_len + n;
	char *msg = total <= sizeof(stackbuf) ? stackbuf : malloc(total);
	int rc;

	if (msg == NULL) {
		return -ENOMEM;
	}
	memcpy(msg, s->prefix, s->prefix_len);
	memcpy(msg + s->prefix_len, p, n);
	snprintf(extra, sizeof(extra), "RANK=%d\n", s->journal_rank);
	rc = journal_send(6, "crun", msg, total, extra); /* journald's default for a stream */
	if (msg != stackbuf) {
		free(msg);
	}
	return rc;
}

/*
 * Write one line (@p, @n; it may lack its newline) to the file and the console. The first
 * s->shown bytes of it (p is then s->buf) are on the console already.
 */
static void emit(struct logroute_stream *s, const char *p, size_t n)
{
	bool nl = n > 0 && p[n - 1] == '\n';
	size_t shown = s->shown;

	s->shown = 0;
	dup_write(s, p, n, nl);
	if (s->file_fd >= 0) {
		file_write(s, p, n);
		if (!nl) {
			file_write(s, "\n", 1);
		}
	}
	if (s->console_fd < 0) {
		return;
	}
	if (s->journal_rank >= 0 && shown == 0 && journal_line(s, p, nl ? n - 1 : n) == 0) {
		return;
	}
	/*
	 * An interrupted live line whose rest is only its newline: the agent ended it already,
	 * a line holding just the prefix would say nothing.
	 */
	if (shown > 0 && console_open != s && (n - shown == 0 || (n - shown == 1 && nl))) {
		return;
	}
	console_put(s, p + shown, n - shown, true);
}

/* Keep @n bytes of a partial line; past LOGROUTE_MAX_LINE the line goes out in pieces. */
static void keep(struct logroute_stream *s, const char *p, size_t n)
{
	while (n > 0) {
		size_t k;

		if (s->len == s->cap) {
			size_t ncap = s->cap == 0 ? 256 : s->cap * 2;
			char *nb;

			if (ncap > LOGROUTE_MAX_LINE) {
				ncap = LOGROUTE_MAX_LINE;
			}
			if (ncap == s->cap) {
				emit(s, s->buf, s->len);
				s->len = 0;
				continue;
			}
			nb = realloc(s->buf, ncap);
			if (nb == NULL) {
				/* Out of memory: write what we hold and the rest as it comes. */
				if (s->len > 0) {
					emit(s, s->buf, s->len);
					s->len = 0;
				}
				emit(s, p, n);
				return;
			}
			s->buf = nb;
			s->cap = ncap;
		}
		k = s->cap - s->len;
		if (k > n) {
			k = n;
		}
		memcpy(s->buf + s->len, p, k);
		s->len += k;
		p += k;
		n -= k;
	}
}

void logroute_feed(struct logroute_stream *s, const char *data, size_t n)
{
	if (n > 0) {
		s->fed_ms = crun_now_ms();
	}
	while (n > 0) {
		const char *nl = memchr(data, '\n', n);
		size_t seg;

		if (nl == NULL) {
			keep(s, data, n);
			/*
			 * A redrawn line (a progress bar) goes out at its \r, not after the delay;
			 * so does the rest of a line that has the console already (the echo after
			 * a prompt): it cannot merge with anything.
			 */
			if (s->len > s->shown &&
			    (console_open == s ||
			     memchr(s->buf + s->shown, '\r', s->len - s->shown) != NULL)) {
				logroute_forward_partial(s);
			}
			return;
		}
		seg = (size_t)(nl - data) + 1;
		if (s->len == 0 && seg <= LOGROUTE_MAX_LINE) {
			emit(s, data, seg);
		} else {
			keep(s, data, seg);
			if (s->len > 0) {
				emit(s, s->buf, s->len);
				s->len = 0;
			}
		}
		data += seg;
		n -= seg;
	}
}

/* How many of the held bytes may go out live: all but a trailing \r (a \r\n may follow). */
static size_t showable(const struct logroute_stream *s)
{
	size_t k = s->len - s->shown;

	if (k > 0 && s->buf[s->len - 1] == '\r') {
		k--;
	}
	return k;
}

int64_t logroute_partial_due(const struct logroute_stream *s)
{
	if (s->console_fd < 0 || s->journal_rank >= 0 || s->len <= s->shown || showable(s) == 0) {
		return -1;
	}
	return s->fed_ms + LOGROUTE_PARTIAL_MS;
}

void logroute_forward_partial(struct logroute_stream *s)
{
	size_t k;

	if (s->console_fd < 0 || s->journal_rank >= 0 || s->len <= s->shown) {
		return;
	}
	k = showable(s);
	if (k == 0) {
		return;
	}
	console_put(s, s->buf + s->shown, k, false);
	s->shown += k;
}

void logroute_flush(struct logroute_stream *s)
{
	if (s->len > 0) {
		emit(s, s->buf, s->len);
		s->len = 0;
	}
}

void logroute_finish(struct logroute_stream *s)
{
	if (s->prefix == NULL && s->buf == NULL && s->file_path == NULL) {
		return;
	}
	logroute_flush(s);
	if (console_open == s) {
		console_open = NULL;
	}
	if (s->file_fd >= 0) {
		close(s->file_fd);
	}
	free(s->buf);
	free(s->prefix);
	free(s->file_path);
	memset(s, 0, sizeof(*s));
	s->console_fd = -1;
	s->file_fd = -1;
	s->dup_fd = -1;
}

char *logroute_format_prefix(const char *tmpl, int rank, int local_rank, const char *host,
			     const char *role)
{
	static const char *const keys[] = {"{rank}", "{local_rank}", "{host}", "{role}"};
	size_t cap = 64, len = 0;
	char *out = malloc(cap);

	if (out == NULL) {
		return NULL;
	}
	while (*tmpl != '\0') {
		char num[16];
		const char *rep = NULL;
		size_t adv = 1, rl, i;

		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			size_t kl = strlen(keys[i]);

			if (strncmp(tmpl, keys[i], kl) != 0) {
				continue;
			}
			adv = kl;
			if (i == 0 || i == 1) {
				snprintf(num, sizeof(num), "%d", i == 0 ? rank : local_rank);
				rep = num;
			} else {
				rep = i == 2 ? host : role;
			}
			break;
		}
		if (rep == NULL) {
			rep = tmpl;
			rl = 1;
		} else {
			rl = strlen(rep);
		}
		if (len + rl + 1 > cap) {
			char *n2;

			while (len + rl + 1 > cap) {
				cap *= 2;
			}
			n2 = realloc(out, cap);
			if (n2 == NULL) {
				free(out);
				return NULL;
			}
			out = n2;
		}
		memcpy(out + len, rep, rl);
		len += rl;
		tmpl += adv;
	}
	out[len] = '\0';
	return out;
}

/* ---- the --log-dir layout ---- */

int logroute_check_dir(const char *log_dir)
{
	struct crun_diag d = {0};
	int rc;

	rc = fs_mkdir_p(log_dir, 0755);
	if (rc < 0) {
		return rc;
	}
	/* Others must not be able to swap our run folder or logs (ssh's StrictModes rule). */
	rc = fs_check_dir_safe(log_dir, "--log-dir", &d);
	if (rc < 0) {
		log_error("%s", d.msg);
		return rc;
	}
	if (rc > 0) {
		log_warn("%s", d.msg);
	}
	return 0;
}

/* A run folder's name: one path part, never "." or "..", no newline (a log line names it). */
static bool name_ok(const char *name)
{
	return name[0] != '\0' && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
	       strpbrk(name, "/\n") == NULL;
}

int logroute_claim_run_dir(const char *log_dir, const char *run_id, char *name, size_t cap,
			   bool *made, struct crun_diag *d)
{
	char path[PATH_MAX];
	struct stat st;
	int n, k;

	*made = false;
	if (!name_ok(run_id)) {
		return diag_set(d, -EINVAL, "--log-dir: \"%s\" cannot name a folder", run_id);
	}
	/*
	 * A rerun's logs never mix with the first run's: "<run_id>", then "<run_id>.1", ..., in
	 * the order of the runs. Proposed, not made: nodes that propose at once see the same
	 * names taken and propose the same one; logroute_join_run_dir() makes it.
	 */
	for (n = 0; n < LOGROUTE_RERUNS; n++) {
		k = n == 0 ? snprintf(name, cap, "%s", run_id) : snprintf(name, cap, "%s.%d", run_id, n);
		if (k < 0 || (size_t)k + 8 >= cap ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", log_dir, name) >= sizeof(path) - 8) {
			return diag_set(d, -ENAMETOOLONG, "--log-dir: %s/%s: name too long", log_dir,
					run_id);
		}
		if (lstat(path, &st) != 0) {
			if (errno == ENOENT) {
				return 0;
			}
			return diag_set(d, -errno, "--log-dir: %s: %s", path, strerror(errno));
		}
	}
	/* All taken (names planted in a shared folder): a random suffix, as mkdtemp(3) makes it,
	 * which nobody can guess in advance, so planted names cannot stop the job. */
	snprintf(name, cap, "%s.XXXXXX", run_id);
	snprintf(path, sizeof(path), "%s/%s", log_dir, name);
	if (mkdtemp(path) == NULL) {
		return diag_set(d, -errno, "--log-dir: mkdtemp %s: %s", path, strerror(errno));
	}
	*made = true;
	snprintf(name, cap, "%s", strrchr(path, '/') + 1);
	return 0;
}

/* Whether @path is a folder of ours (not a link) that only we can enter. */
static bool ours(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       (st.st_mode & 077) == 0;
}

int logroute_join_run_dir(const char *log_dir, const char *name, char *out, size_t len,
			  struct crun_diag *d)
{
	if (!name_ok(name)) {
		return diag_set(d, -EINVAL, "--log-dir: the job's folder name \"%s\" is not one "
				"path part", name);
	}
	if ((size_t)snprintf(out, len, "%s/%s", log_dir, name) + 8 >= len) {
		return diag_set(d, -ENAMETOOLONG, "--log-dir: %s/%s: name too long", log_dir, name);
	}
	/* Made by the node that proposed it where --log-dir is shared; here when it is not. */
	if (mkdir(out, 0700) != 0 && errno != EEXIST) {
		return diag_set(d, -errno, "--log-dir: mkdir %s: %s", out, strerror(errno));
	}
	if (ours(out)) {
		return 0;
	}
	/* Someone else's, a link, or open to others: not where this job's logs go. */
	log_warn("--log-dir: %s is not a private folder of ours (a name planted there?); this "
		 "node's logs go to a folder of its own", out);
	strcat(out, ".XXXXXX");
	if (mkdtemp(out) == NULL) {
		return diag_set(d, -errno, "--log-dir: mkdtemp %s: %s", out, strerror(errno));
	}
	return 0;
}

void logroute_drop_run_dir(const char *log_dir, const char *name)
{
	char path[PATH_MAX];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", log_dir, name) < sizeof(path)) {
		(void)rmdir(path); /* empty: we made it a moment ago and another proposal won */
	}
}

/* rename(), or a copy when @dst is on another file system; private (0600) either way. */
static int move_file(const char *src, const char *dst)
{
	char buf[8192];
	ssize_t n;
	int in, out, rc = 0;

	if (rename(src, dst) == 0) {
		return chmod(dst, 0600) == 0 ? 0 : -errno; /* in our own 0700 folder */
	}
	if (errno != EXDEV) {
		return -errno;
	}
	in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0) {
		return -errno;
	}
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		rc = -errno;
		close(in);
		return rc;
	}
	while ((n = io_read_full(in, buf, sizeof(buf))) > 0) {
		rc = io_write_full(out, buf, (size_t)n);
		if (rc < 0) {
			break;
		}
	}
	if (n < 0 && rc == 0) {
		rc = (int)n;
	}
	close(in);
	if (close(out) != 0 && rc == 0) {
		rc = -errno;
	}
	if (rc == 0) {
		unlink(src);
	}
	return rc;
}

int logroute_keep_errfiles(const char *errdir, const char *run_dir, int attempt)
{
	char src[PATH_MAX], dst[PATH_MAX], dir[PATH_MAX];
	struct dirent *e;
	size_t n;
	DIR *dp;
	int rc = 0, moved = 0;

	if ((size_t)snprintf(dir, sizeof(dir), "%s/attempt_%d", run_dir, attempt) >= sizeof(dir)) {
		return -ENAMETOOLONG;
	}
	dp = opendir(errdir);
	if (dp == NULL) {
		return errno == ENOENT ? 0 : -errno;
	}
	while ((e = readdir(dp)) != NULL) {
		n = strlen(e->d_name);
		if (strncmp(e->d_name, "error_", 6) != 0 || n < 11 ||
		    strcmp(e->d_name + n - 5, ".json") != 0) {
			continue;
		}
		if ((size_t)snprintf(src, sizeof(src), "%s/%s", errdir, e->d_name) >= sizeof(src) ||
		    (size_t)snprintf(dst, sizeof(dst), "%s/%s", dir, e->d_name) >= sizeof(dst)) {
			rc = -ENAMETOOLONG;
			break;
		}
		if (moved == 0 && (rc = fs_mkdir_p(dir, 0700)) < 0) {
			break;
		}
		rc = move_file(src, dst);
		if (rc < 0) {
			break;
		}
		moved++;
	}
	closedir(dp);
	if (rc < 0) {
		log_warn("--log-dir: keeping the error files in %s: %s", dir, strerror(-rc));
		return rc;
	}
	if (moved > 0) {
		log_info("error files of attempt %d are kept in %s", attempt, dir);
	}
	return moved;
}
