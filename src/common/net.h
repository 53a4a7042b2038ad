/* SPDX-License-Identifier: MIT */
/* src/common/net.h: "host:port" strings, socket addresses and this machine's own addresses. */
#ifndef CRUN_SRC_COMMON_NET_H
#define CRUN_SRC_COMMON_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "src/common/diag.h"

/* Longest "[v6 address]:65535" net_format_sockaddr() writes, with its NUL. */
#define NET_ADDRSTRLEN 64

/**
 * Parse "HOST:PORT", "[V6]:PORT" or "HOST" (port = @default_port; -1 means the port is
 * required) into @host (NUL-terminated, brackets removed) and *@port. A bare IPv6 address
 * without brackets is accepted only when no port is required. Returns 0 or -EINVAL.
 */
int net_parse_hostport(const char *s, int default_port, char *host, size_t hostlen, int *port);
/**
 * Whether @h can name a host: a name of letters, digits, '.', '-' and '_' (not starting with
 * '-' or '.', at most 253 bytes), an IPv4 literal, or an IPv6 literal (without brackets).
 */
bool net_valid_host(const char *h);
/** "HOST:PORT", or "[HOST]:PORT" when @host is an IPv6 literal. Returns snprintf's count. */
int net_join_hostport(char *out, size_t len, const char *host, int port);
/** "1.2.3.4:5" or "[::1]:5" for an AF_INET/AF_INET6 address, "?" for anything else. */
void net_format_sockaddr(const struct sockaddr *sa, char *out, size_t len);
/** The port of an AF_INET/AF_INET6 address (host order), or -1. */
int net_sockaddr_port(const struct sockaddr *sa);
/**
 * Resolve @host and @port (numeric only when @numeric) to the first address getaddrinfo()
 * gives. Returns 0, -EADDRNOTAVAIL (does not resolve) or -errno.
 */
int net_resolve(const char *host, int port, bool numeric, struct sockaddr_storage *ss,
		socklen_t *sl);
/** Whether @host ("localhost", an address or a name) is an address of this machine. */
bool net_addr_is_local(const char *host);
/**
 * The local address the kernel would use to reach @host, numeric, in @out (a UDP connect:
 * no packet is sent). Returns 0 or -EHOSTUNREACH.
 */
int net_route_source(const char *host, char *out, size_t len);
/**
 * What a user's --local-addr means: an IPv4/IPv6 literal (normalised), an interface name (its
 * IPv4 address, else a global IPv6 one; *@ifname is then set) or a host name (its first IPv4,
 * else IPv6 address). *@addr and *@ifname (NULL when not an interface) are malloc'd, caller
 * frees. Returns 0, -ENOENT (with a message in @d) or -ENOMEM.
 */
int net_resolve_local_addr(const char *s, char **addr, char **ifname, struct crun_diag *d);

#endif
