/* SPDX-License-Identifier: MIT */
/* rendezvous/store/etcd_endpoint.h: the grammar of etcd member lists, for the store and the CLI. */
#ifndef CRUN_RENDEZVOUS_STORE_ETCD_ENDPOINT_H
#define CRUN_RENDEZVOUS_STORE_ETCD_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "src/common/diag.h"

/*
 * The one grammar of an etcd endpoint, used by the store (etcd_parse_endpoints(), when a
 * handle opens one) and by crun's --rdzv-endpoint for --rdzv-backend etcd (etcd_parse_members(),
 * for its checks and its own messages). Pure code, built with or without libcurl and json-c.
 *
 *   list   = member *("," member)                 1 to ETCD_MAX_ENDPOINTS members
 *   member = [scheme] host [":" port] ["/"]       port 1..65535, 2379 when left out
 *   scheme = "http://" | "etcd://"                plain HTTP
 *          | "https://" | "etcd+https://"         TLS (schemes in any case)
 *   host   = a name (letters, digits, '.', '-', '_'), an IPv4 address or "[" IPv6 "]"
 *
 * A member without a scheme speaks the protocol of the member before it (the first: the
 * caller's default). So "etcd://h1,h2:2380" and "etcd+https://a:3,b" are lists whose scheme is
 * written once, and "https://a:1,b,http://c:3/" gives each member its own.
 */

#define ETCD_MAX_ENDPOINTS 64
#define ETCD_DEFAULT_PORT 2379 /* etcd's client port */

struct etcd_ep {
	char url[320];	/* "http://HOST:PORT" or "https://[V6]:PORT", no trailing slash */
	char name[300]; /* "HOST:PORT" ("[V6]:PORT"), for messages and normalised lists */
	char host[256]; /* HOST, without brackets */
	int port;
	bool tls;   /* https */
	bool named; /* the member named its scheme (else it took the one before) */
};

/* What is wrong with a list, for a caller that words its own message. */
enum etcd_ep_fault {
	ETCD_EP_SCHEME = 1, /* a member's scheme is none of the four */
	ETCD_EP_EMPTY,	    /* an empty member (",," or a list of commas) */
	ETCD_EP_HOSTPORT,   /* not HOST[:PORT] with a port in 1..65535 */
	ETCD_EP_LONG,	    /* a member of 300 bytes or more */
	ETCD_EP_MANY,	    /* more than ETCD_MAX_ENDPOINTS members */
	ETCD_EP_NOMEM,
};

struct etcd_ep_error {
	enum etcd_ep_fault fault;
	const char *why;  /* in words: "expected HOST:PORT with a port in 1..65535", ... */
	char member[300]; /* the member at fault as given (cut to fit), or "" */
	size_t skip;	  /* the length of its scheme: member + skip is HOST[:PORT] */
};

/**
 * Parse the member list @list; members without a scheme before the first that has one speak
 * TLS when @tls. On success *@eps (malloc'd, caller frees) holds *@n >= 1 members. Returns 0,
 * or -EINVAL / -ENOMEM with @err filled in.
 */
int etcd_parse_members(const char *list, bool tls, struct etcd_ep **eps, size_t *n,
		       struct etcd_ep_error *err);

/**
 * The store's endpoint: a member list whose first member names its scheme. Returns 0 or
 * -EINVAL / -ENOMEM with a message in @d naming @endpoint; *@eps as etcd_parse_members().
 */
int etcd_parse_endpoints(const char *endpoint, struct etcd_ep **eps, size_t *n,
			 struct crun_diag *d);
/** Whether @endpoint starts with one of the schemes (so the store takes it for etcd). */
bool etcd_is_endpoint(const char *endpoint);

/** The protocol of an etcd member list: named by a scheme or protocol=, or picked by the rule. */
enum etcd_proto {
	ETCD_PROTO_CONFLICT = -1, /* http named with TLS files: no certificate to verify */
	ETCD_PROTO_NONE = 0,	  /* no scheme named */
	ETCD_PROTO_HTTP = 1,
	ETCD_PROTO_HTTPS = 2,
};

/**
 * The protocol of the members of @list that the first one naming a scheme names; NONE when
 * none does (or @list does not parse: the store says why when it opens).
 */
enum etcd_proto etcd_named_protocol(const char *list);

/**
 * The one rule for crun and crun status, as etcdctl's: the @named protocol; none named,
 * https when the --tls-* flags give TLS files (@tls_files), else http. http named with
 * TLS files is ETCD_PROTO_CONFLICT, the caller's usage error naming both.
 */
enum etcd_proto etcd_protocol(enum etcd_proto named, bool tls_files);

#endif
