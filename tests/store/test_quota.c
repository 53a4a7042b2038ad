/* SPDX-License-Identifier: MIT */
/* tests/store/test_quota.c: the stored data's budget and quotas (issue 20), in the keyspace
 * alone and on a real crun-rdzvd. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/lib/cmocka_skip.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rendezvous/store/keyspace.h"
#include "rendezvous/store/wire.h"
#include "src/common/util.h"
#include "tests/store/helpers.h"

#define S(s) ((struct ks_str){(const uint8_t *)(s), (uint32_t)strlen(s)})

/* ---- the keyspace alone ---- */

static void on_done(struct keyspace *ks, struct ks_wait *w, int rc, uint32_t index)
{
	(void)ks;
	(void)w;
	(void)rc;
	(void)index;
}

static int ks_setup(void **state)
{
	struct keyspace *ks = calloc(1, sizeof(*ks));

	assert_non_null(ks);
	assert_int_equal(ks_init(ks, 1 << 20, on_done, NULL), 0);
	*state = ks;
	return 0;
}

static int ks_teardown(void **state)
{
	struct keyspace *ks = *state;

	ks_finish(ks);
	free(ks);
	return 0;
}

/* The bytes and keys of the present entries counted against @a (NULL: all), by a walk. */
static void sum_entries(struct keyspace *ks, const struct ks_acct *a, uint64_t *bytes,
			uint64_t *keys)
{
	struct htab_node *node, *next;
	struct ks_entry *e;
	size_t b;

	*bytes = *keys = 0;
	htab_for_each_safe(&ks->keys, b, node, next) {
		e = container_of(node, struct ks_entry, node);
		if (e->present && (a == NULL || e->acct == a)) {
			*bytes += (uint64_t)e->klen + e->vlen;
			(*keys)++;
		}
	}
}

/*
 * The accounts recomputed from scratch, by walking every present key: they must equal what
 * the keyspace keeps up to date write by write.
 */
static void assert_accounts_exact(struct keyspace *ks)
{
	struct htab_node *node, *next;
	const struct ks_acct *a;
	uint64_t bytes, keys;
	size_t b;

	sum_entries(ks, NULL, &bytes, &keys);
	assert_int_equal(ks->nbytes, bytes);
	assert_int_equal((uint64_t)ks->nkeys, keys);
	htab_for_each_safe(&ks->accts, b, node, next) {
		a = container_of(node, struct ks_acct, node);
		sum_entries(ks, a, &bytes, &keys);
		assert_int_equal(a->bytes, bytes);
		assert_int_equal(a->keys, keys);
		assert_true(a->refs > 0);
	}
}

static uint64_t acct_bytes(struct keyspace *ks, enum ks_acct_kind kind, const char *run)
{
	const struct ks_acct *a = ks_account(ks, kind, S(run));

	return a != NULL ? a->bytes : 0;
}

static void quota_key_accounts_are_named_in_one_place(void **state)
{
	struct ks_str name;

	(void)state;
	assert_int_equal(ks_key_account(S("rdzv/job1/r/0/joined"), &name), KS_ACCT_SCOPE);
	assert_int_equal(name.len, 4);
	assert_memory_equal(name.p, "job1", 4);
	assert_int_equal(ks_key_account(S("job1/attempt/0/x"), &name), KS_ACCT_SCOPE);
	assert_memory_equal(name.p, "job1", 4);
	assert_int_equal(ks_key_account(S("job1/tcpstore/init/"), &name), KS_ACCT_TCPSTORE);
	assert_memory_equal(name.p, "job1", 4);
	assert_int_equal(ks_key_account(S("rdzv/job1/tcpstore/x"), &name), KS_ACCT_SCOPE);
	assert_int_equal(ks_key_account(S("plain"), &name), KS_ACCT_NONE);
	assert_int_equal(ks_key_account(S("rdzv/x"), &name), KS_ACCT_NONE);
	assert_int_equal(ks_key_account(S("/x/y"), &name), KS_ACCT_NONE);
}

/* Keys of a MULTI_SET test list: a length byte, then the bytes. */
static struct ks_str test_next(const uint8_t **cur)
{
	struct ks_str s = {*cur + 1, **cur};

	*cur += 1 + s.len;
	return s;
}

/* Every write, delete, queue op and expiry keeps the store's and each run's usage exact. */
static void quota_every_operation_keeps_the_accounts(void **state)
{
	struct keyspace *ks = *state;
	uint8_t pairs[64], *item;
	struct ks_list l;
	uint64_t n;
	uint32_t len;
	int64_t v;
	bool m;

	assert_int_equal(ks_set(ks, S("rdzv/a/k"), S("12345"), KS_NO_DEADLINE), 0);
	assert_accounts_exact(ks);
	assert_int_equal(acct_bytes(ks, KS_ACCT_SCOPE, "a"), 8 + 5);
	assert_int_equal(ks_set(ks, S("rdzv/a/k"), S("1"), KS_NO_DEADLINE), 0); /* replace */
	assert_int_equal(acct_bytes(ks, KS_ACCT_SCOPE, "a"), 8 + 1);
	assert_int_equal(ks_add(ks, S("rdzv/a/k"), 999, &v), 0);
	assert_int_equal(acct_bytes(ks, KS_ACCT_SCOPE, "a"), 8 + 4);
	assert_int_equal(ks_append(ks, S("a/x"), NULL, 0, S("abc"), &n), 0);
	assert_int_equal(ks_append(ks, S("a/x"), (const uint8_t *)"h", 1, S("de"), &n), 0);
	assert_int_equal(acct_bytes(ks, KS_ACCT_SCOPE, "a"), 8 + 4 + 3 + 6);
	assert_int_equal(ks_cas(ks, S("a/c"), S(""), S("v"), &m), 0);
	assert_true(m);
	assert_int_equal(ks_queue_push(ks, S("a/tcpstore/q"), S("one"), &n), 0);
	assert_int_equal(ks_queue_push(ks, S("a/tcpstore/q"), S("two!"), &n), 0);
	assert_int_equal(acct_bytes(ks, KS_ACCT_TCPSTORE, "a"), 12 + 7 + 8);
	assert_accounts_exact(ks);
	assert_int_equal(ks_queue_pop(ks, S("a/tcpstore/q"), &item, &len), 0);
	free(item);
	assert_int_equal(acct_bytes(ks, KS_ACCT_TCPSTORE, "a"), 12 + 8);
	assert_accounts_exact(ks);
	assert_int_equal(ks_queue_pop(ks, S("a/tcpstore/q"), &item, &len), 0);
	free(item);
	assert_null(ks_account(ks, KS_ACCT_TCPSTORE, S("a"))); /* its last key went */
	assert_true(ks_delete(ks, S("a/x")));
	assert_accounts_exact(ks);
	/* MULTI_SET under a prefix */
	memcpy(pairs, "\1k\1v\2k2\2vv", 11);
	l = (struct ks_list){2, pairs, test_next, (const uint8_t *)"b/", 2};
	assert_int_equal(ks_multi_set(ks, &l), 0);
	assert_int_equal(acct_bytes(ks, KS_ACCT_SCOPE, "b"), 3 + 1 + 4 + 2);
	/* expiry */
	assert_int_equal(ks_set(ks, S("rdzv/b/ttl"), S("xx"), 100), 0);
	assert_accounts_exact(ks);
	ks_expire(ks, 100);
	assert_null(ks_get(ks, S("rdzv/b/ttl")));
	assert_int_equal(acct_bytes(ks, KS_ACCT_SCOPE, "b"), 3 + 1 + 4 + 2);
	assert_accounts_exact(ks);
}

/* A refused write names its quota and changes nothing; shrinking is always allowed. */
static void quota_refusals_change_nothing(void **state)
{
	struct keyspace *ks = *state;
	struct ks_quotas q = {{1000, 100}, {200, 5}, {100, 3}};
	char msg[256], key[32];
	uint64_t n;
	int64_t v;
	int i;

	ks_set_quotas(ks, &q);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "j/tcpstore/%d", i);
		assert_int_equal(ks_set(ks, S(key), S("v"), KS_NO_DEADLINE), 0);
	}
	assert_int_equal(ks_set(ks, S("j/tcpstore/x"), S("v"), KS_NO_DEADLINE), -EDQUOT);
	ks_refusal_msg(ks, msg, sizeof(msg));
	assert_string_equal(msg, "the TCPStore namespace quota of run \"j\" is full: 3 keys "
				 "(this write would make 4)");
	assert_null(ks_get(ks, S("j/tcpstore/x")));
	assert_int_equal(ks_add(ks, S("j/tcpstore/y"), 1, &v), -EDQUOT);
	/* the same run's other keys, and other runs, are under their own quotas */
	assert_int_equal(ks_set(ks, S("rdzv/j/x"), S("v"), KS_NO_DEADLINE), 0);
	assert_int_equal(ks_set(ks, S("k/tcpstore/x"), S("v"), KS_NO_DEADLINE), 0);
	/* replacing within the quota is fine; growing past its bytes is refused, value kept */
	assert_int_equal(ks_set(ks, S("j/tcpstore/0"), S("0123456789"), KS_NO_DEADLINE), 0);
	memset(msg, 'x', 100);
	msg[100] = '\0';
	assert_int_equal(ks_set(ks, S("j/tcpstore/0"), S(msg), KS_NO_DEADLINE), -EDQUOT);
	assert_non_null(ks_get(ks, S("j/tcpstore/0")));
	assert_int_equal(ks_get(ks, S("j/tcpstore/0"))->vlen, 10);
	assert_int_equal(ks_append(ks, S("j/tcpstore/0"), NULL, 0, S(msg), &n), -EDQUOT);
	assert_int_equal(ks_get(ks, S("j/tcpstore/0"))->vlen, 10);
	ks_refusal_msg(ks, msg, sizeof(msg));
	assert_string_equal(msg, "the TCPStore namespace quota of run \"j\" is full: 100 bytes "
				 "(this write would make 148)");
	/* a smaller value and a delete always pass, even over a quota lowered under the usage */
	q.tcpstore.keys = 1;
	ks_set_quotas(ks, &q);
	assert_int_equal(ks_set(ks, S("j/tcpstore/0"), S("s"), KS_NO_DEADLINE), 0);
	assert_true(ks_delete(ks, S("j/tcpstore/1")));
	/* the scope's quota, then the store's */
	for (i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "rdzv/s/%d", i);
		assert_int_equal(ks_set(ks, S(key), S("v"), KS_NO_DEADLINE), 0);
	}
	assert_int_equal(ks_set(ks, S("s/attempt/0/z"), S("v"), KS_NO_DEADLINE), -EDQUOT);
	ks_refusal_msg(ks, msg, sizeof(msg));
	assert_string_equal(msg, "the scope quota of run \"s\" is full: 5 keys (this write "
				 "would make 6)");
	q.total.bytes = ks->nbytes + 4;
	ks_set_quotas(ks, &q);
	assert_int_equal(ks_set(ks, S("other"), S("12345"), KS_NO_DEADLINE), -EDQUOT);
	ks_refusal_msg(ks, msg, sizeof(msg));
	assert_true(strncmp(msg, "the store's data budget is full: ", 33) == 0);
	assert_int_equal(ks_set(ks, S("ot"), S("a"), KS_NO_DEADLINE), 0);
	assert_accounts_exact(ks);
}

/* ---- a real crun-rdzvd ---- */

static struct daemon d;

static int daemon_teardown(void **state)
{
	(void)state;
	if (d.pid > 0) {
		daemon_stop(&d, SIGKILL);
	}
	return 0;
}

/* SET @key=@val on @fd as request @id; returns the reply (its message into @msg). */
static uint16_t set_on(int fd, uint32_t id, const char *key, const char *val, char *msg,
		       size_t len)
{
	struct wire_buf b = {0};
	struct wire_hdr h;
	uint8_t buf[512];

	wire_put_bytes(&b, key, strlen(key));
	wire_put_bytes(&b, val, strlen(val));
	wire_put_i64(&b, 0);
	assert_int_equal(raw_frame(fd, WIRE_OP_SET, id, b.p, b.len), 0);
	wire_buf_finish(&b);
	assert_int_equal(raw_read(fd, &h, buf, sizeof(buf)), 0);
	assert_int_equal(h.id, id);
	snprintf(msg, len, "%s", h.status != WIRE_OK ? (const char *)buf : "");
	return h.status;
}

/*
 * The flags reach the server: one run's scope fills up and its writes are refused with a reply
 * naming the quota, its limit and the run; its stored keys and other runs are untouched.
 */
static void quota_daemon_refuses_named_and_serves_others(void **state)
{
	static const char *const args[] = {"--insecure", "--scope-max-keys", "8",
					   "--max-keys", "20", NULL};
	char msg[512], key[64];
	uint32_t id = 1;
	int fd, i;

	(void)state;
	assert_int_equal(daemon_start(&d, args), 0);
	fd = raw_connect(d.port);
	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	for (i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "rdzv/flood/%d", i);
		assert_int_equal(set_on(fd, id++, key, "v", msg, sizeof(msg)), WIRE_OK);
	}
	assert_int_equal(set_on(fd, id++, "flood/attempt/0/x", "v", msg, sizeof(msg)),
			 WIRE_E_NO_MEMORY);
	assert_string_equal(msg, "SET: the scope quota of run \"flood\" is full: 8 keys (this "
				 "write would make 9)");
	/* replacing a stored key still works; another run is served */
	assert_int_equal(set_on(fd, id++, "rdzv/flood/0", "w", msg, sizeof(msg)), WIRE_OK);
	assert_int_equal(set_on(fd, id++, "rdzv/other/0", "v", msg, sizeof(msg)), WIRE_OK);
	for (i = 0; i < 11; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(set_on(fd, id++, key, "v", msg, sizeof(msg)), WIRE_OK);
	}
	assert_int_equal(set_on(fd, id++, "rdzv/third/0", "v", msg, sizeof(msg)),
			 WIRE_E_NO_MEMORY);
	assert_string_equal(msg, "SET: the store's data budget is full: 20 keys (this write "
				 "would make 21)");
	close(fd);
	raw_expect_served(d.port);
	i = daemon_stop(&d, SIGTERM);
	assert_true(i != -1 && WIFEXITED(i) && WEXITSTATUS(i) == 0);
}

/* Bad values are usage errors naming the flag. */
static void quota_daemon_flags_checked(void **state)
{
	static const char *const zero[] = {"--listen", "127.0.0.1:0", "--insecure",
					   "--tcpstore-max-keys", "0", NULL};
	static const char *const mib[] = {"--listen", "127.0.0.1:0", "--insecure",
					  "--scope-max-data", "1x", NULL};
	char err[512];

	(void)state;
	assert_int_equal(daemon_run(zero, err, sizeof(err)), 2);
	assert_non_null(strstr(err, "--tcpstore-max-keys"));
	assert_int_equal(daemon_run(mib, err, sizeof(err)), 2);
	assert_non_null(strstr(err, "--scope-max-data"));
	assert_non_null(strstr(err, "MiB"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(quota_key_accounts_are_named_in_one_place),
		cmocka_unit_test_setup_teardown(quota_every_operation_keeps_the_accounts,
						ks_setup, ks_teardown),
		cmocka_unit_test_setup_teardown(quota_refusals_change_nothing, ks_setup,
						ks_teardown),
		cmocka_unit_test_teardown(quota_daemon_refuses_named_and_serves_others,
					  daemon_teardown),
		cmocka_unit_test(quota_daemon_flags_checked),
	};

	signal(SIGPIPE, SIG_IGN);
	unsetenv("CRUN_STORE_TOKEN");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
