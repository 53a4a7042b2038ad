/* SPDX-License-Identifier: MIT */
/* tests/unit/test_etcd_endpoint.c: the grammar of etcd member lists
 * (rendezvous/store/etcd_endpoint.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/etcd_endpoint.h"

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
	const char *bad[] = {"etcd://",		"etcd://h:0",	    "etcd://h:65536", "etcd://h:x",
			     "etcd://a:1,,b:2", "etcd://a:1,",	    "http://h:1/v3",  "https://",
			     "etcd://u@h:1",	"etcd://a,ftp://b", "tcp://h:1"};
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

/* The member grammar crun's --rdzv-endpoint uses: no scheme needed, the faults it words. */
static void members_without_a_scheme_and_their_faults(void **state)
{
	struct etcd_ep_error err;
	struct etcd_ep *eps;
	size_t n;

	(void)state;
	assert_int_equal(etcd_parse_members("h1,h2:2380,[::1],::2", false, &eps, &n, &err), 0);
	assert_int_equal(n, 4);
	assert_string_equal(eps[0].host, "h1");
	assert_int_equal(eps[0].port, 2379);
	assert_false(eps[0].named);
	assert_false(eps[0].tls);
	assert_string_equal(eps[1].name, "h2:2380");
	assert_string_equal(eps[2].host, "::1");
	assert_string_equal(eps[2].name, "[::1]:2379");
	assert_string_equal(eps[3].name, "[::2]:2379");
	free(eps);

	/* The caller's default protocol until a member names one; schemes in any case. */
	assert_int_equal(etcd_parse_members("a,HTTP://b:2/,c", true, &eps, &n, &err), 0);
	assert_true(eps[0].tls && !eps[0].named);
	assert_true(!eps[1].tls && eps[1].named);
	assert_true(!eps[2].tls && !eps[2].named);
	assert_string_equal(eps[1].url, "http://b:2");
	free(eps);
	assert_int_equal(etcd_parse_members("etcd://a,Etcd+Https://b", false, &eps, &n, &err), 0);
	assert_string_equal(eps[0].url, "http://a:2379");
	assert_string_equal(eps[1].url, "https://b:2379");
	free(eps);

	assert_int_equal(etcd_parse_members("a,ftp://h", false, &eps, &n, &err), -EINVAL);
	assert_null(eps);
	assert_int_equal(err.fault, ETCD_EP_SCHEME);
	assert_string_equal(err.member, "ftp://h");
	assert_int_equal(etcd_parse_members("a,https://h1:99999/", false, &eps, &n, &err), -EINVAL);
	assert_int_equal(err.fault, ETCD_EP_HOSTPORT);
	assert_string_equal(err.member + err.skip, "h1:99999");
	assert_int_equal(etcd_parse_members(",", false, &eps, &n, &err), -EINVAL);
	assert_int_equal(err.fault, ETCD_EP_EMPTY);
	assert_int_equal(etcd_parse_members("a,,b", false, &eps, &n, &err), -EINVAL);
	assert_int_equal(err.fault, ETCD_EP_EMPTY);
	/* Host names as crun takes them everywhere (src/common/net.c net_valid_host()). */
	assert_int_equal(etcd_parse_members("my host:1", false, &eps, &n, &err), -EINVAL);
	assert_int_equal(err.fault, ETCD_EP_HOSTPORT);
	assert_int_equal(etcd_parse_members("-h:1", false, &eps, &n, &err), -EINVAL);
	assert_int_equal(etcd_parse_members("[nope]:1", false, &eps, &n, &err), -EINVAL);
	assert_int_equal(etcd_parse_members("u@h:1", false, &eps, &n, &err), -EINVAL);
	assert_int_equal(etcd_parse_members("h:1/v3", false, &eps, &n, &err), -EINVAL);
}

/* crun's and crun status's one rule (etcdctl's): no scheme with TLS files is https. */
static void tls_files_pick_https_without_a_scheme(void **state)
{
	(void)state;
	assert_int_equal(etcd_named_protocol("a:1,b"), ETCD_PROTO_NONE);
	assert_int_equal(etcd_named_protocol("a:1,http://b"), ETCD_PROTO_HTTP);
	assert_int_equal(etcd_named_protocol("etcd+https://a"), ETCD_PROTO_HTTPS);
	assert_int_equal(etcd_named_protocol("ftp://a"), ETCD_PROTO_NONE); /* the open says */
	assert_int_equal(etcd_named_protocol(NULL), ETCD_PROTO_NONE);
	assert_int_equal(etcd_protocol(ETCD_PROTO_NONE, false), ETCD_PROTO_HTTP);
	assert_int_equal(etcd_protocol(ETCD_PROTO_NONE, true), ETCD_PROTO_HTTPS);
	assert_int_equal(etcd_protocol(ETCD_PROTO_HTTP, false), ETCD_PROTO_HTTP);
	assert_int_equal(etcd_protocol(ETCD_PROTO_HTTP, true), ETCD_PROTO_CONFLICT);
	assert_int_equal(etcd_protocol(ETCD_PROTO_HTTPS, false), ETCD_PROTO_HTTPS);
	assert_int_equal(etcd_protocol(ETCD_PROTO_HTTPS, true), ETCD_PROTO_HTTPS);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(endpoint_lists_parse),
		cmocka_unit_test(bad_endpoint_lists_name_the_endpoint),
		cmocka_unit_test(members_without_a_scheme_and_their_faults),
		cmocka_unit_test(tls_files_pick_https_without_a_scheme),
	};

	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("etcd-endpoint", tests, NULL, NULL);
}
