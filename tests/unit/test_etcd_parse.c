/* SPDX-License-Identifier: MIT */
/* tests/unit/test_etcd_parse.c: etcd endpoint lists (rendezvous/store/client_etcd_parse.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/client_etcd_parse.h"

static void endpoint_lists_parse(void **state)
{
	struct etcd_ep *eps;
	struct crun_diag d;
	size_t n;

	(void)state;
	assert_int_equal(etcd_parse_endpoints("etcd://h1:2379,10.0.0.2:2380", &eps, &n, &d), 0);
	assert_int_equal(n, 2);
	assert_string_equal(eps[0].url, "http://h1:2379");
	assert_string_equal(eps[0].name, "h1:2379");
	assert_string_equal(eps[1].url, "http://10.0.0.2:2380");
	free(eps);

	assert_int_equal(etcd_parse_endpoints("etcd+https://h1:1,[::1]:2", &eps, &n, &d), 0);
	assert_int_equal(n, 2);
	assert_string_equal(eps[0].url, "https://h1:1");
	assert_string_equal(eps[1].url, "https://[::1]:2");
	assert_string_equal(eps[1].name, "[::1]:2");
	free(eps);

	/* An http(s) list: entries without a scheme take the one before; a missing port is
	 * etcd's 2379; a trailing slash is the same server. */
	assert_int_equal(etcd_parse_endpoints("https://a:1,b,http://c:3/", &eps, &n, &d), 0);
	assert_int_equal(n, 3);
	assert_string_equal(eps[0].url, "https://a:1");
	assert_string_equal(eps[1].url, "https://b:2379");
	assert_string_equal(eps[2].url, "http://c:3");
	free(eps);

	assert_true(etcd_is_endpoint("etcd://x"));
	assert_true(etcd_is_endpoint("http://x:1"));
	assert_false(etcd_is_endpoint("tcp://x:1"));
	assert_false(etcd_is_endpoint("x:1"));
	assert_false(etcd_is_endpoint(NULL));
}

static void bad_endpoint_lists_name_the_endpoint(void **state)
{
	const char *bad[] = {"etcd://",        "etcd://h:0",      "etcd://h:65536", "etcd://h:x",
			     "etcd://a:1,,b:2", "etcd://a:1,",     "http://h:1/v3",  "https://",
			     "etcd://u@h:1",    "etcd://a,ftp://b", "tcp://h:1"};
	struct etcd_ep *eps = (struct etcd_ep *)1;
	struct crun_diag d;
	size_t n = 9, i;
	char many[64 * 6 + 16];

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		diag_clear(&d);
		assert_int_equal(etcd_parse_endpoints(bad[i], &eps, &n, &d), -EINVAL);
		assert_null(eps);
		assert_int_equal(n, 0);
		assert_non_null(strstr(d.msg, bad[i]));
	}
	/* At most 64 endpoints. */
	strcpy(many, "etcd://h:1");
	for (i = 1; i < 65; i++) {
		strcat(many, ",h:1");
	}
	assert_int_equal(etcd_parse_endpoints(many, &eps, &n, &d), -EINVAL);
	assert_non_null(strstr(d.msg, "more than 64"));
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(endpoint_lists_parse),
		cmocka_unit_test(bad_endpoint_lists_name_the_endpoint),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("etcd-parse", tests, NULL, NULL);
}
