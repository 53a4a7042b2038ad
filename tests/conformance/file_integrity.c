/* SPDX-License-Identifier: MIT */
/* tests/conformance/file_integrity.c: the file backend refuses damaged, foreign and old files. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/byteorder.h"
#include "src/common/crc32.h"
#include "tests/conformance/conformance.h"

/* A whole file, malloc'd (the caller frees); *len is its size. */
static uint8_t *slurp(const char *path, size_t *len)
{
	struct stat sb;
	uint8_t *buf;
	int fd;

	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	buf = malloc((size_t)sb.st_size + 1);
	assert_non_null(buf);
	assert_int_equal(read(fd, buf, (size_t)sb.st_size), sb.st_size);
	close(fd);
	*len = (size_t)sb.st_size;
	return buf;
}

static void spill(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Open @ep expecting failure @want; the message goes to @err. */
static void open_fails(const char *ep, int want, char *err, size_t cap)
{
	struct crun_store_opts o = {.endpoint = ep, .connect_timeout_ms = 2000, .timeout_ms = 2000};
	struct crun_store *st = (struct crun_store *)1;

	err[0] = '\0';
	assert_int_equal(crun_store_open(&o, &st, err, cap), want);
	assert_null(st);
}

/* Offset of the first occurrence of @needle in @buf, which must be there. */
static size_t find_bytes(const uint8_t *buf, size_t len, const char *needle)
{
	size_t n = strlen(needle), i;

	for (i = 0; i + n <= len; i++) {
		if (memcmp(buf + i, needle, n) == 0) {
			return i;
		}
	}
	fail_msg("\"%s\" is not in the file", needle);
	return 0;
}

static void file_paths(const char *what, char *path, size_t pcap, char *ep, size_t ecap)
{
	snprintf(path, pcap, "%s.%s", g_path, what);
	snprintf(ep, ecap, "file://%s", path);
	unlink(path);
}

/* A new store file starts with the format header; a torn header is replaced, not refused. */
void file_has_format_header(void **state)
{
	char ep[700], path[600];
	struct crun_store *st;
	uint8_t *buf;
	size_t len;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	file_paths("hdr", path, sizeof(path), ep, sizeof(ep));
	st = open_with(ep, "h/", 5000);
	assert_int_equal(sets(st, "k", "v"), 0);
	crun_store_close(st);
	buf = slurp(path, &len);
	assert_true(len > 16);
	assert_memory_equal(buf, "CRUNSTOR", 8);
	assert_int_equal(get_le32(buf + 8), 2);
	assert_int_equal(get_le32(buf + 12), crc32_update(0, buf, 12));

	/* A creator that crashed while writing the header: 5 bytes of it. */
	spill(path, buf, 5);
	free(buf);
	st = open_with(ep, "h/", 5000);
	assert_int_equal(crun_store_get(st, "k", &(void *){NULL}, &(size_t){0}), -ENOENT);
	assert_int_equal(sets(st, "k", "w"), 0);
	crun_store_close(st);
	st = open_with(ep, "h/", 5000);
	want_value(st, "k", "w");
	crun_store_close(st);
	unlink(path);
}

/*
 * A damaged record in the middle of the file (valid records after it) is refused, by a new
 * handle and by one that has not read that far yet, naming the file and the byte offset; the
 * file is left exactly as it was. The same damage in the last record would be a torn tail.
 */
void damaged_middle_record_is_refused(void **state)
{
	char ep[700], path[600], err[256], want[128];
	struct crun_store *st, *early;
	uint8_t *buf, *after;
	void *v = NULL;
	size_t len, alen, at, rec;
	int64_t n;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	file_paths("damaged", path, sizeof(path), ep, sizeof(ep));
	st = open_with(ep, "d/", 5000);
	assert_int_equal(sets(st, "k1", "one"), 0);
	early = open_with(ep, "d/", 2000); /* has replayed k1 only */
	assert_int_equal(sets(st, "k2", "two"), 0);
	assert_int_equal(sets(st, "k3", "three"), 0);
	crun_store_close(st);

	buf = slurp(path, &len);
	at = find_bytes(buf, len, "d/k2two"); /* the key and value of the second record */
	buf[at + 5] ^= 0x20;                  /* "two" -> "tWo": its CRC no longer checks */
	spill(path, buf, len);
	/* The record starts 16 (header) + 4 (count) + 16 (lengths, expiry) before its key. */
	rec = at - 36;
	snprintf(want, sizeof(want), "byte offset %zu", rec);

	open_fails(ep, -EBADMSG, err, sizeof(err));
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, want));
	assert_non_null(strstr(err, "damaged record"));

	/* The early handle fails on reads and on writes, and writes nothing. */
	assert_int_equal(crun_store_get(early, "k3", &v, &(size_t){0}), -EBADMSG);
	assert_int_equal(sets(early, "k4", "four"), -EBADMSG);
	assert_int_equal(crun_store_add(early, "n", 1, &n), -EBADMSG);
	crun_store_close(early);
	after = slurp(path, &alen);
	assert_int_equal(alen, len);
	assert_memory_equal(after, buf, len);
	free(after);

	/* With the last record damaged instead, it is a torn tail: cut, and the store goes on. */
	buf[at + 5] ^= 0x20;
	at = find_bytes(buf, len, "d/k3three");
	buf[at + 4] ^= 0x20;
	spill(path, buf, len);
	st = open_with(ep, "d/", 5000);
	want_value(st, "k2", "two");
	assert_int_equal(crun_store_get(st, "k3", &v, &(size_t){0}), -ENOENT);
	assert_int_equal(sets(st, "k4", "four"), 0);
	crun_store_close(st);
	free(buf);
	unlink(path);
}

/* Garbage that is not a record header, with more after it, is damage too (not a torn tail). */
void garbage_after_records_is_refused(void **state)
{
	char ep[700], path[600], err[256];
	struct crun_store *st;
	uint8_t *buf;
	size_t len;
	int fd;
	const char junk[] = "this is not a store record, and it is longer than one header";

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	file_paths("garbage", path, sizeof(path), ep, sizeof(ep));
	st = open_with(ep, "g/", 5000);
	assert_int_equal(sets(st, "k", "v"), 0);
	crun_store_close(st);
	buf = slurp(path, &len);
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	open_fails(ep, -EBADMSG, err, sizeof(err));
	assert_non_null(strstr(err, "not a record header"));
	free(buf);
	buf = slurp(path, &len);
	assert_memory_equal(buf + len - sizeof(junk), junk, sizeof(junk));
	free(buf);
	unlink(path);
}

/* Zeros after the last record (the file grew before a crashed writer's data reached the disk)
 * are a torn tail: cut, with the store intact. */
void zero_tail_is_torn(void **state)
{
	char ep[700], path[600];
	struct crun_store *st;
	uint8_t zeros[200] = {0};
	struct stat sb;
	off_t good;
	int fd;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	file_paths("zeros", path, sizeof(path), ep, sizeof(ep));
	st = open_with(ep, "z/", 5000);
	assert_int_equal(sets(st, "k", "v"), 0);
	crun_store_close(st);
	assert_int_equal(stat(path, &sb), 0);
	good = sb.st_size;
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, zeros, sizeof(zeros)), (ssize_t)sizeof(zeros));
	close(fd);
	st = open_with(ep, "z/", 5000);
	want_value(st, "k", "v");
	assert_int_equal(sets(st, "k2", "w"), 0);
	assert_int_equal(stat(path, &sb), 0);
	assert_true(sb.st_size > good && sb.st_size < good + 100);
	crun_store_close(st);
	unlink(path);
}

/* A file that is not a store (an endpoint mistyped onto a script) is refused and left alone. */
void foreign_file_is_refused(void **state)
{
	char ep[700], path[600], err[256];
	const char script[] = "#!/bin/sh\necho hello\n";
	uint8_t *buf;
	size_t len;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	file_paths("script.sh", path, sizeof(path), ep, sizeof(ep));
	spill(path, script, strlen(script));
	open_fails(ep, CRUN_EMAGIC, err, sizeof(err));
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "not a crun store file"));
	assert_non_null(strstr(err, "#!/bin/sh"));
	buf = slurp(path, &len);
	assert_int_equal(len, strlen(script));
	assert_memory_equal(buf, script, len);
	free(buf);
	/* Short foreign files too (fewer bytes than a header). */
	spill(path, "hi\n", 3);
	open_fails(ep, CRUN_EMAGIC, err, sizeof(err));
	/* And a header of this magic but a later format version. */
	{
		uint8_t h[16];

		memcpy(h, "CRUNSTOR", 8);
		put_le32(h + 8, 3);
		put_le32(h + 12, crc32_update(0, h, 12));
		spill(path, h, sizeof(h));
		open_fails(ep, CRUN_EVERSION, err, sizeof(err));
		assert_non_null(strstr(err, "version 3"));
	}
	unlink(path);
}

/* A file in the previous format (records from offset 0, no header) gets its own message. */
void old_format_file_is_refused(void **state)
{
	char ep[700], path[600], err[256];
	uint8_t rec[16 + 4 + 16 + 2];
	uint8_t *buf;
	size_t len;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	file_paths("v1", path, sizeof(path), ep, sizeof(ep));
	/* A format-1 REC_PUT of "k" = "v". */
	memset(rec, 0, sizeof(rec));
	put_le32(rec, 0x31535243u);
	put_le32(rec + 4, sizeof(rec) - 16);
	rec[8] = 1;
	put_le32(rec + 16, 1);
	put_le32(rec + 20, 1);
	put_le32(rec + 24, 1);
	rec[36] = 'k';
	rec[37] = 'v';
	put_le32(rec + 12, crc32_update(0, rec + 16, sizeof(rec) - 16));
	spill(path, rec, sizeof(rec));
	open_fails(ep, CRUN_EVERSION, err, sizeof(err));
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "written by an older crun"));
	buf = slurp(path, &len);
	assert_int_equal(len, sizeof(rec));
	assert_memory_equal(buf, rec, len);
	free(buf);
	unlink(path);
}
