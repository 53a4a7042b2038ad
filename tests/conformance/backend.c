/* SPDX-License-Identifier: MIT */
/* tests/conformance/backend.c: endpoints, failures, the file backend's format, locks, compaction. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "src/common/byteorder.h"
#include "src/common/crc32.h"
#include "tests/conformance/conformance.h"

void bad_endpoints_are_einval(void **state)
{
	/* http:// and https:// lists name etcd: "ftp://" stands for an unknown scheme. etcd's
	 * endpoint lists are checked before anything is contacted, whichever backend runs. */
	const char *bad[] = {"", "nonsense", "ftp://h:1", "file://relative/x", "file:///tmp/dir/",
			     "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:", ":5", "[::1",
			     "tcp://", "host:port", "etcd://", "etcd://h:99999",
			     "etcd://127.0.0.1:1,,127.0.0.1:2", "etcd+https://h:0", "http://h:1/v3",
			     "etcd://h:1,ftp://h:2", "https://"};
	struct crun_store_opts o = {.connect_timeout_ms = 1000};
	struct crun_store *st;
	char err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.endpoint = bad[i];
		st = (struct crun_store *)1;
		err[0] = '\0';
		assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), -EINVAL);
		assert_null(st);
		assert_true(strlen(err) > 0);
		if (bad[i][0] != '\0') {
			assert_non_null(strstr(err, bad[i]));
		}
	}
	o.endpoint = NULL;
	assert_int_equal(crun_store_open(&o, &st, err, sizeof(err)), -EINVAL);
	assert_int_equal(crun_store_open(NULL, &st, err, sizeof(err)), -EINVAL);
}

/* Every spelling of the endpoint reaches the same store. */
void endpoint_spellings_reach_the_same_store(void **state)
{
	struct crun_store *st = open_fresh(), *alt;
	char ep[700];

	(void)state;
	if (g_tcp) {
		snprintf(ep, sizeof(ep), "tcp://%s", g_endpoint);
	} else if (g_backend == CONF_ETCD) {
		/* The same member twice, as a URL list with a trailing slash. */
		snprintf(ep, sizeof(ep), "http://127.0.0.1:%d/,127.0.0.1:%d", g_etcd_port,
			 g_etcd_port);
	} else {
		/* A path with a redundant component names the same file. */
		snprintf(ep, sizeof(ep), "file://%s/./store", g_dir);
	}
	assert_int_equal(sets(st, "spelled", "yes"), 0);
	alt = open_with(ep, crun_store_prefix(st), 30000);
	want_value(alt, "spelled", "yes");
	crun_store_close(alt);
	crun_store_close(st);
}

void dead_endpoint_times_out(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	struct crun_store_opts o = {.connect_timeout_ms = 600};
	struct crun_store *st = NULL;
	char ep[320], err[256];
	int64_t t0, dt;
	int fd, rc;

	(void)state;
	if (g_backend == CONF_FILE) {
		/* The file backend's "dead endpoint": a directory that does not exist. */
		snprintf(ep, sizeof(ep), "file://%s/no/such/dir/store", g_dir);
		o.endpoint = ep;
		rc = crun_store_open(&o, &st, err, sizeof(err));
		assert_int_equal(rc, -ENOENT);
		assert_non_null(strstr(err, "no/such/dir"));
		assert_null(st);
		return;
	}
	/* A port held by a socket bound but not listening: connections are refused, and no
	 * other test is given the port before we are done (it is closed at the end). */
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(ep, sizeof(ep), "%s127.0.0.1:%d", g_backend == CONF_ETCD ? "etcd://" : "",
		 ntohs(sa.sin_port));
	o.endpoint = ep;
	t0 = crun_now_ms();
	rc = crun_store_open(&o, &st, err, sizeof(err));
	dt = crun_now_ms() - t0;
	/* The TCP client says what the last try met (issue 8); etcd's says it timed out. */
	assert_int_equal(rc, g_tcp ? -ECONNREFUSED : -ETIMEDOUT);
	if (g_tcp) {
		assert_non_null(strstr(err, "connection refused by"));
	}
	assert_null(st);
	assert_true(dt >= 500);
	assert_true(dt < 5000);
	assert_non_null(strstr(err, ep));
	close(fd);
}

/* File backend: a half-written last record (a writer that crashed) is ignored and cut away. */
void torn_last_record_is_recovered(void **state)
{
	char ep[700], tpath[600];
	struct crun_store *st, *st2;
	struct stat sb;
	off_t good;
	int fd;
	/* A record header that promises 100 bytes of payload, followed by only 5. */
	const unsigned char torn[] = {0x43, 0x52, 0x53, 0x31, 100, 0, 0, 0, 1, 0, 0, 0,
				      0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5};
	/* A complete record whose CRC does not check. */
	unsigned char badcrc[16 + 8] = {0x43, 0x52, 0x53, 0x31, 8, 0, 0, 0, 2, 0, 0, 0, 1, 2, 3, 4,
					4, 0, 0, 0, 'a', 'b', 'c', 'd'};

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	snprintf(tpath, sizeof(tpath), "%s.torn", g_path);
	snprintf(ep, sizeof(ep), "file://%s", tpath);
	unlink(tpath);
	st = open_with(ep, "t/", 10000);
	assert_int_equal(sets(st, "k1", "one"), 0);
	assert_int_equal(crun_store_add(st, "n", 2, NULL), 0);
	crun_store_close(st);
	assert_int_equal(stat(tpath, &sb), 0);
	good = sb.st_size;

	for (int round = 0; round < 2; round++) {
		fd = open(tpath, O_WRONLY | O_APPEND);
		assert_true(fd >= 0);
		if (round == 0) {
			assert_int_equal(write(fd, torn, sizeof(torn)), (ssize_t)sizeof(torn));
		} else {
			assert_int_equal(write(fd, badcrc, sizeof(badcrc)),
					 (ssize_t)sizeof(badcrc));
		}
		close(fd);

		/* A reader sees everything before the torn record and nothing of it. */
		st = open_with(ep, "t/", 10000);
		want_value(st, "k1", "one");
		want_value(st, "n", round == 0 ? "2" : "3");
		/* The next writer cuts the torn bytes away and appends after the last good one. */
		assert_int_equal(crun_store_add(st, "n", 1, NULL), 0);
		assert_int_equal(stat(tpath, &sb), 0);
		assert_true(sb.st_size > good);
		assert_true(sb.st_size < good + 200);
		good = sb.st_size;
		/* A fresh handle replays the whole file, the new record included. */
		st2 = open_with(ep, "t/", 10000);
		want_value(st2, "k1", "one");
		want_value(st2, "n", round == 0 ? "3" : "4");
		crun_store_close(st2);
		crun_store_close(st);
	}
	unlink(tpath);
}

/*
 * File backend: hostile lengths at the end of the file (a header that claims 2^32-1 bytes; a
 * record with a good CRC whose count or key/value lengths claim ~2^32) are neither allocated
 * nor applied: readers keep the state before them and the next writer cuts them away.
 */
void hostile_record_lengths_are_rejected(void **state)
{
	char ep[700], tpath[600];
	struct crun_store *st;
	struct stat sb;
	unsigned char rec[16 + 32];
	size_t rlen;
	off_t good;
	int fd;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	snprintf(tpath, sizeof(tpath), "%s.hostile", g_path);
	snprintf(ep, sizeof(ep), "file://%s", tpath);
	unlink(tpath);
	st = open_with(ep, "h/", 10000);
	assert_int_equal(sets(st, "k", "v"), 0);
	crun_store_close(st);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(stat(tpath, &sb), 0);
		good = sb.st_size;
		memset(rec, 0, sizeof(rec));
		put_le32(rec, 0x31535243u);
		rec[8] = 1; /* REC_PUT */
		if (round == 0) {
			put_le32(rec + 4, 0xffffffffu); /* the header alone, claiming 4 GiB */
			rlen = 16;
		} else {
			/* u32 n, then one (klen, vlen, expiry) triple; CRC made to check. */
			put_le32(rec + 16, round == 1 ? 0xffffffffu : 1);
			put_le32(rec + 20, 0xfffffff0u);
			put_le32(rec + 24, 0xfffffff0u);
			rlen = 16 + 4 + 16 + 4;
			put_le32(rec + 4, (uint32_t)(rlen - 16));
			put_le32(rec + 12, crc32_update(0, rec + 16, rlen - 16));
		}
		fd = open(tpath, O_WRONLY | O_APPEND);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, rec, rlen), (ssize_t)rlen);
		close(fd);
		st = open_with(ep, "h/", 10000);
		want_value(st, "k", "v");
		assert_int_equal(sets(st, "k2", "w"), 0);
		assert_int_equal(stat(tpath, &sb), 0);
		assert_true(sb.st_size > good && sb.st_size < good + 100);
		crun_store_close(st);
		st = open_with(ep, "h/", 10000);
		want_value(st, "k2", "w");
		crun_store_close(st);
	}
	unlink(tpath);
}

/* File backend: a writer that holds the lock forever cannot hang anyone past the deadline. */
void held_lock_times_out(void **state)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	struct crun_store *st;
	int64_t t0, dt;
	int fd;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	st = open_with(g_endpoint, "lock/", 500);
	assert_int_equal(sets(st, "k", "v"), 0);
	fd = open(g_path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fcntl(fd, F_OFD_SETLK, &fl), 0);
	t0 = crun_now_ms();
	assert_int_equal(sets(st, "k", "w"), -ETIMEDOUT);
	dt = crun_now_ms() - t0;
	/* The handle's 500 ms, raised to the backend's 2 s floor for taking a lock. */
	assert_true(dt >= 400);
	assert_true(dt < 10000);
	close(fd); /* drops the lock */
	assert_int_equal(sets(st, "k", "w"), 0);
	want_value(st, "k", "w");
	crun_store_close(st);
}

#define COMPACT_THREADS 4

#define COMPACT_ADDS 1500

struct compact_adder {
	struct crun_store *st;
	int rc;
};

static void *compact_adder_main(void *p)
{
	struct compact_adder *a = p;
	char val[100];
	int i;

	memset(val, 'x', sizeof(val));
	for (i = 0; i < COMPACT_ADDS && a->rc == 0; i++) {
		a->rc = crun_store_add(a->st, "ccount", 1, NULL);
		if (a->rc == 0 && i % 10 == 0) {
			a->rc = crun_store_set(a->st, "churn", val, sizeof(val));
		}
	}
	return NULL;
}

/*
 * File backend: with a small compaction threshold, the file is rewritten several times while
 * handles opened before keep reading and writing (adds stay exact), TTLs, appends and deletes
 * survive, and the file stays small.
 */
/* @path now holds @text. */
static void put(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

void file_compaction_keeps_every_key(void **state)
{
	char ep[700], tpath[600], stale[640], stale_old[660], victim[640], link_name[640];
	struct compact_adder ad[COMPACT_THREADS];
	pthread_t th[COMPACT_THREADS];
	struct crun_store *a, *b, *c;
	struct stat sb;
	char big[300];
	int64_t r;
	void *v;
	size_t len;
	int i;

	(void)state;
	if (g_backend != CONF_FILE) {
		test_skip();
	}
	snprintf(tpath, sizeof(tpath), "%s.compact", g_path);
	snprintf(ep, sizeof(ep), "file://%s", tpath);
	unlink(tpath);
	/* What a writer killed mid-compaction leaves (its new file and the old file's second
	 * name) goes at the next compaction; a link planted at such a name is not followed. */
	snprintf(stale, sizeof(stale), "%s.compact.99999.7", tpath);
	snprintf(stale_old, sizeof(stale_old), "%s.old", stale);
	snprintf(victim, sizeof(victim), "%s.victim", tpath);
	snprintf(link_name, sizeof(link_name), "%s.compact.99998.8", tpath);
	put(stale, "stale new file");
	put(stale_old, "stale old file");
	put(victim, "untouched");
	assert_int_equal(symlink(victim, link_name), 0);
	setenv("CRUN_STORE_FILE_COMPACT_BYTES", "65536", 1);
	a = open_with(ep, "c/", 30000);
	b = open_with(ep, "c/", 30000);
	memset(ad, 0, sizeof(ad));
	for (i = 0; i < COMPACT_THREADS; i++) {
		ad[i].st = open_with(ep, "c/", 30000);
	}
	unsetenv("CRUN_STORE_FILE_COMPACT_BYTES");

	assert_int_equal(sets(a, "gone", "x"), 0);
	assert_int_equal(crun_store_delete(a, "gone"), 0);
	assert_int_equal(crun_store_append(a, "log", "ab", 2), 0);
	assert_int_equal(crun_store_append(b, "log", "cd", 2), 0);
	assert_int_equal(crun_store_set_ttl(a, "ttl", "t", 1, 600000), 0);
	assert_int_equal(crun_store_set_ttl(a, "short", "t", 1, 1), 0);
	for (i = 0; i < COMPACT_THREADS; i++) {
		assert_int_equal(pthread_create(&th[i], NULL, compact_adder_main, &ad[i]), 0);
	}
	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (i = 0; i < 400; i++) {
		char k[16];

		snprintf(k, sizeof(k), "k%d", i % 10);
		assert_int_equal(sets(a, k, big), 0);
	}
	for (i = 0; i < COMPACT_THREADS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(ad[i].rc, 0);
		crun_store_close(ad[i].st);
	}
	/* b was opened before every compaction and has not looked since its append. */
	assert_int_equal(crun_store_add(b, "ccount", 0, &r), 0);
	assert_int_equal(r, COMPACT_THREADS * COMPACT_ADDS);
	want_value(b, "log", "abcd");
	want_value(b, "ttl", "t");
	want_value(b, "k9", big);
	assert_int_equal(crun_store_get(b, "gone", &v, &len), -ENOENT);
	assert_int_equal(crun_store_get(b, "short", &v, &len), -ENOENT);
	assert_int_equal(sets(b, "fromb", "1"), 0);
	want_value(a, "fromb", "1");
	/* The file holds about the live keys, not the whole history (about 450 KB of writes). */
	assert_int_equal(stat(tpath, &sb), 0);
	assert_true(sb.st_size < 150000);
	/* A fresh handle replays the compacted file to the same state. */
	c = open_with(ep, "c/", 30000);
	want_value(c, "log", "abcd");
	want_value(c, "k0", big);
	assert_int_equal(crun_store_add(c, "ccount", 1, &r), 0);
	assert_int_equal(r, COMPACT_THREADS * COMPACT_ADDS + 1);
	crun_store_close(c);
	crun_store_close(b);
	crun_store_close(a);
	assert_int_equal(access(stale, F_OK), -1);
	assert_int_equal(access(stale_old, F_OK), -1);
	assert_int_equal(lstat(link_name, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	assert_int_equal(stat(victim, &sb), 0);
	assert_int_equal(sb.st_size, 9);
	unlink(link_name);
	unlink(victim);
	unlink(tpath);
}
