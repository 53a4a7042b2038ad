/* SPDX-License-Identifier: MIT */
/* tests/unit/test_net.c: src/common/net: "host:port" parsing and joining, socket address
 * formatting, numeric resolution and this machine's addresses. No packet is sent. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "src/common/net.h"
#include "tests/lib/cmocka_skip.h"

static const struct {
	const char *s;
	int default_port;
	int rc;
	const char *host;
	int port;
} hostports[] = {
	{"example.org:29400", -1, 0, "example.org", 29400},
	{"127.0.0.1:80", -1, 0, "127.0.0.1", 80},
	{"127.0.0.1:80", 5, 0, "127.0.0.1", 80},
	{"host:0", -1, 0, "host", 0},
	{"host:65535", -1, 0, "host", 65535},
	{"host", 29400, 0, "host", 29400},
	{"[::1]:29400", -1, 0, "::1", 29400},
	{"[::1]", 29400, 0, "::1", 29400},
	{"[fe80::1%eth0]:5", -1, 0, "fe80::1%eth0", 5},
	{"[2001:db8::7]:1", 9, 0, "2001:db8::7", 1},
	/* A bare IPv6 address: only when no port is required, and then all of it is the host. */
	{"::1", 29400, 0, "::1", 29400},
	{"2001:db8::1:80", 7, 0, "2001:db8::1:80", 7},
	{"::1", -1, -EINVAL, NULL, 0},
	/* Missing port. */
	{"host", -1, -EINVAL, NULL, 0},
	{"[::1]", -1, -EINVAL, NULL, 0},
	{"host:", -1, -EINVAL, NULL, 0},
	{"host:", 80, -EINVAL, NULL, 0},
	{"[::1]:", -1, -EINVAL, NULL, 0},
	/* Bad port. */
	{"host:65536", -1, -EINVAL, NULL, 0},
	{"host:-1", -1, -EINVAL, NULL, 0},
	{"host:+80", -1, -EINVAL, NULL, 0},
	{"[::1]:+80", -1, -EINVAL, NULL, 0},
	{"host:http", -1, -EINVAL, NULL, 0},
	{"host:80x", -1, -EINVAL, NULL, 0},
	{"host: 80", -1, -EINVAL, NULL, 0},
	{"host:80 ", -1, -EINVAL, NULL, 0},
	{"host:99999999999", -1, -EINVAL, NULL, 0},
	{"[::1]:x", -1, -EINVAL, NULL, 0},
	{"[::1]:65536", -1, -EINVAL, NULL, 0},
	/* Missing host, broken brackets. */
	{"", 80, -EINVAL, NULL, 0},
	{":80", -1, -EINVAL, NULL, 0},
	{":80", 5, -EINVAL, NULL, 0},
	{"[]:80", -1, -EINVAL, NULL, 0},
	{"[::1", 80, -EINVAL, NULL, 0},
	{"[::1]80", -1, -EINVAL, NULL, 0},
	{"[::1]x:80", -1, -EINVAL, NULL, 0},
};

static void net_parse_hostport_splits_host_and_port(void **state)
{
	char host[64];
	size_t i;
	int port, rc;

	(void)state;
	for (i = 0; i < sizeof(hostports) / sizeof(hostports[0]); i++) {
		port = -12345;
		rc = net_parse_hostport(hostports[i].s, hostports[i].default_port, host,
					sizeof(host), &port);
		if (rc != hostports[i].rc) {
			print_error("\"%s\" (default %d): got %d, expected %d\n", hostports[i].s,
				    hostports[i].default_port, rc, hostports[i].rc);
			fail();
		}
		if (rc == 0) {
			assert_string_equal(host, hostports[i].host);
			assert_int_equal(port, hostports[i].port);
		}
	}
	assert_int_equal(net_parse_hostport(NULL, 80, host, sizeof(host), &port), -EINVAL);
}

static void net_parse_hostport_refuses_a_host_longer_than_the_buffer(void **state)
{
	char host[8];
	int port;

	(void)state;
	/* Seven characters and the NUL fit; eight do not. */
	assert_int_equal(net_parse_hostport("1234567:1", -1, host, sizeof(host), &port), 0);
	assert_string_equal(host, "1234567");
	assert_int_equal(net_parse_hostport("12345678:1", -1, host, sizeof(host), &port), -EINVAL);
	assert_int_equal(net_parse_hostport("12345678", 1, host, sizeof(host), &port), -EINVAL);
	assert_int_equal(net_parse_hostport("[1:2:3:44]:1", -1, host, sizeof(host), &port),
			 -EINVAL);
	assert_int_equal(net_parse_hostport("[1:2:3:4]:1", -1, host, sizeof(host), &port), 0);
	assert_string_equal(host, "1:2:3:4");
}

static void net_valid_host_takes_names_and_literals(void **state)
{
	char longest[255];

	(void)state;
	assert_true(net_valid_host("node-7.example_net"));
	assert_true(net_valid_host("10.0.0.1"));
	assert_true(net_valid_host("::1"));
	assert_true(net_valid_host("fe80::1"));
	assert_false(net_valid_host(""));
	assert_false(net_valid_host("-h"));
	assert_false(net_valid_host(".h"));
	assert_false(net_valid_host("my host"));
	assert_false(net_valid_host("u@h"));
	assert_false(net_valid_host("h/x"));
	assert_false(net_valid_host("1:2:3"));
	memset(longest, 'a', 253);
	longest[253] = '\0';
	assert_true(net_valid_host(longest));
	longest[253] = 'a';
	longest[254] = '\0';
	assert_false(net_valid_host(longest));
}

static void net_join_hostport_brackets_ipv6(void **state)
{
	char out[NET_ADDRSTRLEN], tiny[6];

	(void)state;
	assert_int_equal(net_join_hostport(out, sizeof(out), "10.0.0.1", 29400), 14);
	assert_string_equal(out, "10.0.0.1:29400");
	assert_int_equal(net_join_hostport(out, sizeof(out), "::1", 5), 7);
	assert_string_equal(out, "[::1]:5");
	assert_int_equal(net_join_hostport(out, sizeof(out), "node7", 0), 7);
	assert_string_equal(out, "node7:0");
	/* snprintf's count, and a cut, terminated string when it does not fit. */
	assert_int_equal(net_join_hostport(tiny, sizeof(tiny), "10.0.0.1", 29400), 14);
	assert_string_equal(tiny, "10.0.");
}

/* What net_join_hostport() writes, net_parse_hostport() reads back. */
static void net_join_then_parse_round_trips(void **state)
{
	static const char *const hosts[] = {"10.0.0.1", "::1", "fe80::1%lo", "node-7.cluster"};
	char out[NET_ADDRSTRLEN], host[64];
	size_t i;
	int port;

	(void)state;
	for (i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		net_join_hostport(out, sizeof(out), hosts[i], 65535);
		assert_int_equal(net_parse_hostport(out, -1, host, sizeof(host), &port), 0);
		assert_string_equal(host, hosts[i]);
		assert_int_equal(port, 65535);
	}
}

static void net_format_sockaddr_prints_v4_and_v6(void **state)
{
	struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(29400)};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(5)};
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	char out[NET_ADDRSTRLEN];

	(void)state;
	assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &a4.sin_addr), 1);
	net_format_sockaddr((struct sockaddr *)&a4, out, sizeof(out));
	assert_string_equal(out, "127.0.0.1:29400");
	assert_int_equal(net_sockaddr_port((struct sockaddr *)&a4), 29400);

	assert_int_equal(inet_pton(AF_INET6, "::1", &a6.sin6_addr), 1);
	net_format_sockaddr((struct sockaddr *)&a6, out, sizeof(out));
	assert_string_equal(out, "[::1]:5");
	assert_int_equal(net_sockaddr_port((struct sockaddr *)&a6), 5);

	assert_int_equal(inet_pton(AF_INET6, "2001:db8:0:0:0:0:0:ff", &a6.sin6_addr), 1);
	a6.sin6_port = htons(65535);
	net_format_sockaddr((struct sockaddr *)&a6, out, sizeof(out));
	assert_string_equal(out, "[2001:db8::ff]:65535");

	assert_int_equal(inet_pton(AF_INET6, "::ffff:10.1.2.3", &a6.sin6_addr), 1);
	net_format_sockaddr((struct sockaddr *)&a6, out, sizeof(out));
	assert_string_equal(out, "[::ffff:10.1.2.3]:65535");

	/* The longest form fits NET_ADDRSTRLEN. */
	memset(&a6.sin6_addr, 0xff, sizeof(a6.sin6_addr));
	net_format_sockaddr((struct sockaddr *)&a6, out, sizeof(out));
	assert_string_equal(out, "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");

	net_format_sockaddr((struct sockaddr *)&un, out, sizeof(out));
	assert_string_equal(out, "?");
	assert_int_equal(net_sockaddr_port((struct sockaddr *)&un), -1);
}

static void net_resolve_numeric_fills_the_address(void **state)
{
	struct sockaddr_storage ss;
	char out[NET_ADDRSTRLEN];
	socklen_t sl;

	(void)state;
	assert_int_equal(net_resolve("127.0.0.1", 29400, true, &ss, &sl), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(sl, sizeof(struct sockaddr_in));
	net_format_sockaddr((struct sockaddr *)&ss, out, sizeof(out));
	assert_string_equal(out, "127.0.0.1:29400");

	assert_int_equal(net_resolve("::1", 80, true, &ss, &sl), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(sl, sizeof(struct sockaddr_in6));
	net_format_sockaddr((struct sockaddr *)&ss, out, sizeof(out));
	assert_string_equal(out, "[::1]:80");

	assert_int_equal(net_resolve("10.0.0.1", 0, true, &ss, &sl), 0);
	assert_int_equal(net_sockaddr_port((struct sockaddr *)&ss), 0);
}

/* Numeric only: a name is refused without asking any resolver. */
static void net_resolve_numeric_refuses_names_and_garbage(void **state)
{
	struct sockaddr_storage ss;
	socklen_t sl;

	(void)state;
	assert_int_equal(net_resolve("localhost", 80, true, &ss, &sl), -EADDRNOTAVAIL);
	assert_int_equal(net_resolve("not an address", 80, true, &ss, &sl), -EADDRNOTAVAIL);
	assert_int_equal(net_resolve("256.0.0.1", 80, true, &ss, &sl), -EADDRNOTAVAIL);
	assert_int_equal(net_resolve("[::1]", 80, true, &ss, &sl), -EADDRNOTAVAIL);
}

/* Whether this machine has @addr (numeric) on an interface. */
static bool machine_has(int family, const char *addr)
{
	struct ifaddrs *ifs, *i;
	char buf[INET6_ADDRSTRLEN];
	bool found = false;

	if (getifaddrs(&ifs) != 0) {
		return false;
	}
	for (i = ifs; i != NULL && !found; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family) {
			continue;
		}
		if (family == AF_INET) {
			inet_ntop(family, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr,
				  buf, sizeof(buf));
		} else {
			inet_ntop(family, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr,
				  buf, sizeof(buf));
		}
		found = strcmp(buf, addr) == 0;
	}
	freeifaddrs(ifs);
	return found;
}

static void net_addr_is_local_knows_loopback_and_not_test_net(void **state)
{
	(void)state;
	assert_true(net_addr_is_local("localhost"));
	if (!machine_has(AF_INET, "127.0.0.1")) {
		test_skip(); /* a machine without 127.0.0.1 on lo cannot answer this */
	}
	assert_true(net_addr_is_local("127.0.0.1"));
	if (machine_has(AF_INET6, "::1")) {
		assert_true(net_addr_is_local("::1"));
	}
	/* RFC 5737 TEST-NET-1: not this machine's unless someone configured it. */
	if (!machine_has(AF_INET, "192.0.2.1")) {
		assert_false(net_addr_is_local("192.0.2.1"));
	}
	assert_false(net_addr_is_local("2001:db8::dead"));
}

static void net_route_source_of_loopback_is_loopback(void **state)
{
	char out[NET_ADDRSTRLEN];

	(void)state;
	if (!machine_has(AF_INET, "127.0.0.1")) {
		test_skip();
	}
	assert_int_equal(net_route_source("127.0.0.1", out, sizeof(out)), 0);
	assert_string_equal(out, "127.0.0.1");
}

static void net_resolve_local_addr_normalises_a_literal(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{"127.0.0.1", "127.0.0.1"},
		{"10.1.2.3", "10.1.2.3"},
		{"::1", "::1"},
		{"0:0:0:0:0:0:0:1", "::1"},
		{"2001:DB8:0::1", "2001:db8::1"},
	};
	struct crun_diag d = {0};
	char *addr, *ifname;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(net_resolve_local_addr(cases[i].in, &addr, &ifname, &d), 0);
		assert_string_equal(addr, cases[i].out);
		assert_null(ifname);
		free(addr);
	}
	assert_int_equal(d.code, 0);
}

static void net_resolve_local_addr_takes_an_interface_name(void **state)
{
	struct crun_diag d = {0};
	char *addr, *ifname;

	(void)state;
	if (!machine_has(AF_INET, "127.0.0.1")) {
		test_skip(); /* lo without its IPv4 address */
	}
	assert_int_equal(net_resolve_local_addr("lo", &addr, &ifname, &d), 0);
	assert_string_equal(addr, "127.0.0.1");
	assert_non_null(ifname);
	assert_string_equal(ifname, "lo");
	free(addr);
	free(ifname);
	assert_int_equal(d.code, 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(net_parse_hostport_splits_host_and_port),
		cmocka_unit_test(net_parse_hostport_refuses_a_host_longer_than_the_buffer),
		cmocka_unit_test(net_valid_host_takes_names_and_literals),
		cmocka_unit_test(net_join_hostport_brackets_ipv6),
		cmocka_unit_test(net_join_then_parse_round_trips),
		cmocka_unit_test(net_format_sockaddr_prints_v4_and_v6),
		cmocka_unit_test(net_resolve_numeric_fills_the_address),
		cmocka_unit_test(net_resolve_numeric_refuses_names_and_garbage),
		cmocka_unit_test(net_addr_is_local_knows_loopback_and_not_test_net),
		cmocka_unit_test(net_route_source_of_loopback_is_loopback),
		cmocka_unit_test(net_resolve_local_addr_normalises_a_literal),
		cmocka_unit_test(net_resolve_local_addr_takes_an_interface_name),
	};

	return test_run_group("unit-net", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
