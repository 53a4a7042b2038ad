/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_parse.h: etcd endpoint lists (pure code, private). */
#ifndef CRUN_RENDEZVOUS_STORE_CLIENT_ETCD_PARSE_H
#define CRUN_RENDEZVOUS_STORE_CLIENT_ETCD_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "src/common/diag.h"

/*
 * Always built, with or without libcurl and json-c: store.c checks an etcd endpoint's syntax
 * in every build, and tests/unit tests this code alone.
 */

#define ETCD_MAX_ENDPOINTS 64

struct etcd_ep {
	char url[320];  /* "http://HOST:PORT" or "https://[V6]:PORT", no trailing slash */
	char name[300]; /* "HOST:PORT", for messages */
};

/**
 * Parse "etcd://HOST:PORT[,HOST:PORT...]", "etcd+https://..." or a list of "http://" /
 * "https://" URLs (an entry without a scheme takes the list's). A missing port is 2379.
 * On success *eps (malloc'd, caller frees) holds *n >= 1 endpoints. Returns 0 or -EINVAL /
 * -ENOMEM with a message in @d naming @endpoint.
 */
int etcd_parse_endpoints(const char *endpoint, struct etcd_ep **eps, size_t *n,
			 struct crun_diag *d);
/** Whether @endpoint has one of the schemes etcd_parse_endpoints() takes. */
bool etcd_is_endpoint(const char *endpoint);

#endif
