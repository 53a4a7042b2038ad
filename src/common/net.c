/* SPDX-License-Identifier: MIT */
/* src/common/net.c: address parsing, formatting and resolution. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/common/net.h"
#include "src/common/parse.h"

/* Digits only: a port has no sign. */
static int parse_port(const char *s, int *port)
{
	if (*s < '0' || *s > '9') {
		return -EINVAL;
	}
	return parse_int(s, 0, 65535, port) == 0 ? 0 : -EINVAL;
}

int net_parse_hostport(const char *s, int default_port, char *host, size_t hostlen, int *port)
{
	const char *colon, *hend;
	size_t hl;

	if (s == NULL || *s == '\0') {
		return -EINVAL;
	}
	if (*s == '[') {
		hend = strchr(s, ']');
		if (hend == NULL) {
			return -EINVAL;
		}
		hl = (size_t)(hend - s - 1);
		if (hl == 0 || hl >= hostlen) {
			return -EINVAL;
		}
		memcpy(host, s + 1, hl);
		host[hl] = '\0';
		if (hend[1] == '\0') {
			if (default_port < 0) {
				return -EINVAL;
			}
			*port = default_port;
			return 0;
		}
		if (hend[1] != ':') {
			return -EINVAL;
		}
		return parse_port(hend + 2, port);
	}
	colon = strrchr(s, ':');
	if (colon != NULL && strchr(s, ':') != colon) {
		/* Bare IPv6 without brackets: only valid without a port. */
		colon = NULL;
		if (default_port < 0) {
			return -EINVAL;
		}
	}
	hl = colon ? (size_t)(colon - s) : strlen(s);
	if (hl == 0 || hl >= hostlen) {
		return -EINVAL;
	}
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (colon == NULL) {
		if (default_port < 0) {
			return -EINVAL;
		}
		*port = default_port;
		return 0;
	}
	return parse_port(colon + 1, port);
}

bool net_valid_host(const char *h)
{
	struct in6_addr a6;
	size_t i;

	if (strchr(h, ':') != NULL) {
		return inet_pton(AF_INET6, h, &a6) == 1;
	}
	for (i = 0; h[i] != '\0'; i++) {
		if (!isalnum((unsigned char)h[i]) && h[i] != '.' && h[i] != '-' && h[i] != '_') {
			return false;
		}
	}
	return i > 0 && i <= 253 && h[0] != '-' && h[0] != '.';
}

int net_join_hostport(char *out, size_t len, const char *host, int port)
{
	if (strchr(host, ':') != NULL) {
		return snprintf(out, len, "[%s]:%d", host, port);
	}
	return snprintf(out, len, "%s:%d", host, port);
}

int net_sockaddr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		return ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
	}
	if (sa->sa_family == AF_INET6) {
		return ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
	}
	return -1;
}

void net_format_sockaddr(const struct sockaddr *sa, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN];
	const void *a;

	if (sa->sa_family == AF_INET) {
		a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
	} else if (sa->sa_family == AF_INET6) {
		a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
	} else {
		snprintf(out, len, "?");
		return;
	}
	if (inet_ntop(sa->sa_family, a, host, sizeof(host)) == NULL) {
		snprintf(out, len, "?");
		return;
	}
	net_join_hostport(out, len, host, net_sockaddr_port(sa));
}

int net_resolve(const char *host, int port, bool numeric, struct sockaddr_storage *ss,
		socklen_t *sl)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	char ps[16];
	int rc;

	hints.ai_flags = numeric ? AI_NUMERICHOST : 0;
	snprintf(ps, sizeof(ps), "%d", port);
	rc = getaddrinfo(host, ps, &hints, &ai);
	if (rc != 0) {
		return rc == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*sl = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family) {
		return false;
	}
	if (a->sa_family == AF_INET) {
		return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
	}
	if (a->sa_family == AF_INET6) {
		return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
			      &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
			      sizeof(struct in6_addr)) == 0;
	}
	return false;
}

bool net_addr_is_local(const char *host)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL, *ai;
	struct ifaddrs *ifs = NULL, *i;
	bool local = false;

	if (strcmp(host, "localhost") == 0) {
		return true;
	}
	if (getaddrinfo(host, NULL, &hints, &res) != 0) {
		return false;
	}
	if (getifaddrs(&ifs) != 0) {
		freeaddrinfo(res);
		return false;
	}
	for (ai = res; ai != NULL && !local; ai = ai->ai_next) {
		for (i = ifs; i != NULL && !local; i = i->ifa_next) {
			local = i->ifa_addr != NULL && same_addr(ai->ai_addr, i->ifa_addr);
		}
	}
	freeifaddrs(ifs);
	freeaddrinfo(res);
	return local;
}

int net_route_source(const char *host, char *out, size_t len)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
	struct addrinfo *res = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd, rc = -EHOSTUNREACH;

	if (getaddrinfo(host, "9", &hints, &res) != 0) {
		return -EHOSTUNREACH;
	}
	fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
	    getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)len, NULL, 0,
			NI_NUMERICHOST) == 0) {
		rc = 0;
	}
	if (fd >= 0) {
		close(fd);
	}
	freeaddrinfo(res);
	return rc;
}

/*
 * The address of interface @name: IPv4 first (NCCL and gloo prefer it), then a global IPv6
 * one. Returns 1 (found, in @buf), 0 (no such interface) or -ENOENT (the interface exists but
 * has no usable address).
 */
static int interface_addr(const char *name, char *buf, size_t len)
{
	struct ifaddrs *ifs = NULL, *it;
	const void *src = NULL;
	bool named = false;
	int family = 0, pass;

	if (strlen(name) >= IFNAMSIZ || getifaddrs(&ifs) != 0) {
		return 0;
	}
	for (pass = 0; pass < 2 && src == NULL; pass++) {
		for (it = ifs; it != NULL; it = it->ifa_next) {
			if (strcmp(it->ifa_name, name) != 0) {
				continue;
			}
			named = true;
			if (it->ifa_addr == NULL) {
				continue;
			}
			family = it->ifa_addr->sa_family;
			if (pass == 0 && family == AF_INET) {
				src = &((struct sockaddr_in *)(void *)it->ifa_addr)->sin_addr;
				break;
			}
			if (pass == 1 && family == AF_INET6 &&
			    !IN6_IS_ADDR_LINKLOCAL(
				    &((struct sockaddr_in6 *)(void *)it->ifa_addr)->sin6_addr)) {
				src = &((struct sockaddr_in6 *)(void *)it->ifa_addr)->sin6_addr;
				break;
			}
		}
	}
	if (src != NULL) {
		inet_ntop(family, src, buf, (socklen_t)len);
	}
	freeifaddrs(ifs);
	return src != NULL ? 1 : named ? -ENOENT : 0;
}

int net_resolve_local_addr(const char *s, char **addr, char **ifname, struct crun_diag *d)
{
	char buf[INET6_ADDRSTRLEN];
	struct in6_addr a6;
	struct in_addr a4;
	struct addrinfo hints, *res = NULL, *ai;
	const void *src = NULL;
	int family = 0, rc, pass;

	*addr = NULL;
	*ifname = NULL;
	if (inet_pton(AF_INET, s, &a4) == 1) {
		inet_ntop(AF_INET, &a4, buf, sizeof(buf));
		goto found;
	}
	if (inet_pton(AF_INET6, s, &a6) == 1) {
		inet_ntop(AF_INET6, &a6, buf, sizeof(buf));
		goto found;
	}
	rc = interface_addr(s, buf, sizeof(buf));
	if (rc < 0) {
		return diag_set(d, -ENOENT, "interface %s has no usable address", s);
	}
	if (rc == 1) {
		*ifname = strdup(s);
		if (*ifname == NULL) {
			return diag_set(d, -ENOMEM, "out of memory");
		}
		goto found;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(s, NULL, &hints, &res);
	if (rc != 0) {
		return diag_set(d, -ENOENT, "\"%s\" is not an address, an interface or a known host (%s)",
				s, gai_strerror(rc));
	}
	for (pass = 0; pass < 2 && src == NULL; pass++) {
		for (ai = res; ai != NULL; ai = ai->ai_next) {
			if (pass == 0 && ai->ai_family == AF_INET) {
				src = &((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr;
			} else if (pass == 1 && ai->ai_family == AF_INET6) {
				src = &((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr;
			}
			if (src != NULL) {
				family = ai->ai_family;
				break;
			}
		}
	}
	if (src == NULL) {
		freeaddrinfo(res);
		return diag_set(d, -ENOENT, "%s has no IPv4 or IPv6 address", s);
	}
	inet_ntop(family, src, buf, sizeof(buf));
	freeaddrinfo(res);
found:
	*addr = strdup(buf);
	if (*addr == NULL) {
		free(*ifname);
		*ifname = NULL;
		return diag_set(d, -ENOMEM, "out of memory");
	}
	return 0;
}
