/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_file.c: the store over one shared, append-only file (file:///PATH). */
/*
 * The operations and open. The file format, the locking protocol and compaction are described
 * in client_file_internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/client_file_internal.h"
#include "src/common/backoff.h"
#include "src/common/clock.h"
#include "src/common/diag.h"
#include "src/common/log.h"
#include "src/common/parse.h"

static int put_one(struct store_backend *b, const char *key, size_t klen, const void *val,
		   size_t len, int64_t expiry)
{
	int rc;

	rc = fstore_wput32(b, (uint32_t)klen);
	if (rc == 0) {
		rc = fstore_wput32(b, (uint32_t)len);
	}
	if (rc == 0) {
		rc = fstore_wput64(b, (uint64_t)expiry);
	}
	if (rc == 0) {
		rc = fstore_wput(b, key, klen);
	}
	if (rc == 0) {
		rc = fstore_wput(b, val, len);
	}
	return rc;
}

static int f_set(struct store_backend *b, const char *key, const void *val, size_t len,
		 int64_t ttl_ms, int timeout_ms)
{
	int64_t expiry = 0;
	int rc;

	/* A TTL past the end of time never expires (and must not wrap to the past). */
	if (ttl_ms > 0 && __builtin_add_overflow(crun_wall_ms(), ttl_ms, &expiry)) {
		expiry = INT64_MAX;
	}
	rc = fstore_write_begin(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	rc = fstore_wput32(b, 1);
	if (rc == 0) {
		rc = put_one(b, key, strlen(key), val, len, expiry);
	}
	return fstore_finish(b, rc, REC_PUT);
}

static int copy_out(const struct entry *e, void **val, size_t *len)
{
	uint8_t *p = malloc(e->vlen + 1);

	if (p == NULL) {
		return -ENOMEM;
	}
	if (e->vlen > 0) {
		memcpy(p, e->val, e->vlen);
	}
	p[e->vlen] = 0;
	*val = p;
	*len = e->vlen;
	return 0;
}

static int f_get(struct store_backend *b, const char *key, void **val, size_t *len,
		 int timeout_ms)
{
	struct entry *e;
	int rc;

	rc = fstore_refresh(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	if (e == NULL) {
		return -ENOENT;
	}
	return copy_out(e, val, len);
}

/* ALL: 1 when every key exists. ANY: index + 1 of the first that exists. 0: not yet. */
static int satisfied(struct store_backend *b, const char *const *keys, size_t n, bool any)
{
	int64_t now = crun_wall_ms();
	size_t i;

	for (i = 0; i < n; i++) {
		bool have = find_live(b, keys[i], now) != NULL;

		if (any && have) {
			return (int)i + 1;
		}
		if (!any && !have) {
			return 0;
		}
	}
	return any ? 0 : 1;
}

static int f_wait(struct store_backend *b, const char *const *keys, size_t n, bool any,
		  int timeout_ms)
{
	int64_t end = crun_now_ms() + timeout_ms, left, us;
	struct backoff bo;
	int rc, s;

	backoff_init(&bo, 1000, 100000); /* us */
	for (;;) {
		rc = fstore_refresh(b, fstore_deadline((int)(end - crun_now_ms())));
		if (rc < 0) {
			return rc;
		}
		s = satisfied(b, keys, n, any);
		if (s > 0) {
			return any ? s - 1 : 0;
		}
		left = end - crun_now_ms();
		if (left <= 0) {
			return -ETIMEDOUT;
		}
		/* Once per wait; tests wait for this line before writing (server_wait.c's twin). */
		if (bo.cur == bo.first) {
			log_debug("store file://%s: WAIT parked (%s of %zu key%s), polling",
				  b->path, any ? "any" : "all", n, n == 1 ? "" : "s");
		}
		us = backoff_step(&bo);
		fstore_sleep_us(us < left * 1000 ? us : left * 1000);
	}
}

static int f_add(struct store_backend *b, const char *key, int64_t delta, int64_t *result,
		 int timeout_ms)
{
	struct entry *e;
	int64_t cur = 0, sum = 0;
	char num[32];
	int rc, n;

	rc = fstore_write_begin(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	if (e != NULL) {
		/* Not an integer (or out of range): -EINVAL, as the TCP store's NOT_NUMBER. */
		rc = parse_i64_bytes(e->val, e->vlen, &cur) < 0 ? -EINVAL : 0;
	}
	if (rc == 0 && __builtin_add_overflow(cur, delta, &sum)) {
		rc = -ERANGE;
	}
	if (rc == 0) {
		n = snprintf(num, sizeof(num), "%" PRId64, sum);
		rc = fstore_wput32(b, 1);
		if (rc == 0) {
			rc = put_one(b, key, strlen(key), num, (size_t)n, 0);
		}
	}
	rc = fstore_finish(b, rc, REC_PUT);
	if (rc == 0) {
		*result = sum;
	}
	return rc;
}

static int f_compare_set(struct store_backend *b, const char *key, const void *expected,
			 size_t elen, const void *desired, size_t dlen, void **cur,
			 size_t *curlen, int timeout_ms)
{
	struct entry *e;
	bool swap;
	int rc, wrc;

	rc = fstore_write_begin(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	if (e == NULL) {
		swap = elen == 0;
	} else {
		swap = e->vlen == elen && (elen == 0 || memcmp(e->val, expected, elen) == 0);
	}
	if (swap) {
		rc = fstore_wput32(b, 1);
		if (rc == 0) {
			rc = put_one(b, key, strlen(key), desired, dlen, 0);
		}
		wrc = fstore_write_end(b, rc == 0 ? REC_PUT : 0);
		if (rc == 0 && wrc < 0) {
			rc = wrc;
		}
		if (rc < 0) {
			return rc;
		}
		*cur = malloc(dlen + 1);
		if (*cur == NULL) {
			return -ENOMEM;
		}
		if (dlen > 0) {
			memcpy(*cur, desired, dlen);
		}
		((uint8_t *)*cur)[dlen] = 0;
		*curlen = dlen;
		return 0;
	}
	if (e != NULL) {
		rc = copy_out(e, cur, curlen);
	} else {
		*cur = calloc(1, 1);
		*curlen = 0;
		rc = *cur == NULL ? -ENOMEM : 0;
	}
	fstore_write_end(b, 0);
	return rc;
}

static int f_del(struct store_backend *b, const char *key, int timeout_ms)
{
	size_t kl = strlen(key);
	int rc;

	rc = fstore_write_begin(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	if (find_live(b, key, crun_wall_ms()) == NULL) {
		/* An expired entry is already gone for everyone; the record would be a no-op. */
		fstore_write_end(b, 0);
		return -ENOENT;
	}
	rc = fstore_wput32(b, (uint32_t)kl);
	if (rc == 0) {
		rc = fstore_wput(b, key, kl);
	}
	return fstore_finish(b, rc, REC_DEL);
}

static int f_check(struct store_backend *b, const char *const *keys, size_t n, bool *all,
		   int timeout_ms)
{
	int rc;

	rc = fstore_refresh(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	*all = satisfied(b, keys, n, false) > 0;
	return 0;
}

static int f_num_keys(struct store_backend *b, int64_t *n, int timeout_ms)
{
	int64_t now, c = 0;
	struct htab_node *e, *next;
	size_t i;
	int rc;

	rc = fstore_refresh(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	now = crun_wall_ms();
	htab_for_each_safe(&b->index, i, e, next) {
		c += live(entry_of(e), now);
	}
	*n = c;
	return 0;
}

static int f_append(struct store_backend *b, const char *key, const void *val, size_t len,
		    int timeout_ms)
{
	size_t kl = strlen(key);
	struct entry *e;
	uint8_t reset;
	int rc;

	rc = fstore_write_begin(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	e = find_live(b, key, crun_wall_ms());
	reset = e == NULL;
	/* As the TCP store: the value stays within the limit (a snapshot must hold it). */
	if (e != NULL && (e->vlen > CRUN_STORE_MAX_VALUE_LEN ||
			  len > CRUN_STORE_MAX_VALUE_LEN - e->vlen)) {
		fstore_write_end(b, 0);
		return -EMSGSIZE;
	}
	rc = fstore_wput32(b, (uint32_t)kl);
	if (rc == 0) {
		rc = fstore_wput32(b, (uint32_t)len);
	}
	if (rc == 0) {
		rc = fstore_wput(b, &reset, 1);
	}
	if (rc == 0) {
		rc = fstore_wput(b, key, kl);
	}
	if (rc == 0) {
		rc = fstore_wput(b, val, len);
	}
	return fstore_finish(b, rc, REC_APPEND);
}

static int f_multi_get(struct store_backend *b, const char *const *keys, size_t n, void **vals,
		       size_t *lens, int timeout_ms)
{
	struct entry *e;
	int64_t now;
	size_t i, total = 0;
	int rc;

	rc = fstore_refresh(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	now = crun_wall_ms();
	for (i = 0; i < n; i++) {
		e = find_live(b, keys[i], now);
		if (e == NULL) {
			continue;
		}
		total += e->vlen;
		if (total > FILE_MAX_RECORD) {
			rc = -EMSGSIZE;
			break;
		}
		rc = copy_out(e, &vals[i], &lens[i]);
		if (rc < 0) {
			break;
		}
	}
	if (rc < 0) {
		for (i = 0; i < n; i++) {
			free(vals[i]);
			vals[i] = NULL;
			lens[i] = 0;
		}
	}
	return rc;
}

static int f_multi_set(struct store_backend *b, const char *const *keys, size_t n,
		       const void *const *vals, const size_t *lens, int timeout_ms)
{
	size_t i, total = 4;
	int rc;

	for (i = 0; i < n; i++) {
		total += 16 + strlen(keys[i]) + lens[i];
	}
	if (total > FILE_MAX_RECORD) {
		return -EMSGSIZE;
	}
	rc = fstore_write_begin(b, fstore_deadline(timeout_ms));
	if (rc < 0) {
		return rc;
	}
	rc = fstore_wput32(b, (uint32_t)n);
	for (i = 0; rc == 0 && i < n; i++) {
		rc = put_one(b, keys[i], strlen(keys[i]), lens[i] ? vals[i] : "", lens[i], 0);
	}
	return fstore_finish(b, rc, REC_PUT);
}

static int f_ping(struct store_backend *b, int timeout_ms)
{
	return fstore_refresh(b, fstore_deadline(timeout_ms));
}

const char *store_file_last_error(const struct store_backend *b)
{
	return b != NULL ? b->err : "";
}

static void f_close(struct store_backend *b)
{
	if (b == NULL) {
		return;
	}
	if (b->index.buckets != NULL) {
		fstore_index_clear(b);
	}
	if (b->fd >= 0) {
		close(b->fd);
	}
	htab_finish(&b->index);
	free(b->rbuf);
	free(b->wbuf);
	free(b->path);
	free(b);
}

static const struct store_ops file_ops = {
	.name = "file",
	.set = f_set,
	.get = f_get,
	.wait = f_wait,
	.add = f_add,
	.compare_set = f_compare_set,
	.del = f_del,
	.check = f_check,
	.num_keys = f_num_keys,
	.append = f_append,
	.multi_get = f_multi_get,
	.multi_set = f_multi_set,
	.ping = f_ping,
	.last_error = store_file_last_error,
	.close = f_close,
};

int store_file_open(const char *path, int connect_timeout_ms, struct store_backend **out,
		    const struct store_ops **ops, struct crun_diag *d)
{
	struct store_backend *b;
	const char *what, *env;
	int rc;

	b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return -ENOMEM;
	}
	b->fd = -1;
	b->setlk = F_OFD_SETLK;
	b->torn_off = -1;
	b->bad_off = -1;
	b->compact_at = 64 << 20;
	env = getenv("CRUN_STORE_FILE_COMPACT_BYTES");
	if (env != NULL && *env != '\0') {
		int64_t v;

		if (parse_i64(env, &v) == 0 && v >= 4096) {
			b->compact_at = (off_t)v;
		}
	}
	b->next_check = b->compact_at;
	b->seed = backoff_seed(); /* also names compaction files */
	htab_init(&b->index, 64);
	b->path = crun_strdup(path);
	if (b->index.buckets == NULL || b->path == NULL) {
		rc = -ENOMEM;
		what = "open";
		goto err;
	}
	b->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (b->fd < 0) {
		rc = -errno;
		what = "open";
		goto err;
	}
	/*
	 * Replay now, so an unreadable, unlockable, damaged or foreign file fails here and not at
	 * first use; the reason goes to @d (the caller reports it), not to the log as well.
	 */
	b->quiet = true;
	rc = fstore_refresh(b, fstore_deadline(connect_timeout_ms));
	b->quiet = false;
	b->bad_off = -1; /* a later operation that finds it again logs it */
	if (rc < 0 && b->err[0] != '\0') {
		diag_set(d, rc, "%s", b->err);
		f_close(b);
		return rc;
	}
	if (rc < 0) {
		what = "lock and read";
		goto err;
	}
	*out = b;
	*ops = &file_ops;
	return 0;
err:
	diag_set(d, rc, "store file://%s: %s: %s", path, what, crun_strerror(rc));
	f_close(b);
	return rc;
}
