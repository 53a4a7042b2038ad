/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_parse.c: etcd endpoint lists (pure code). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/store/client_etcd_parse.h"
#include "src/common/net.h"

#define ETCD_DEFAULT_PORT 2379

static const char *const list_schemes[] = {"etcd://", "etcd+https://", "http://", "https://"};

/* Length of the list scheme @s starts with (its index in *@which), or 0. */
static size_t list_scheme(const char *s, size_t *which)
{
	size_t i, l;

	for (i = 0; i < sizeof(list_schemes) / sizeof(list_schemes[0]); i++) {
		l = strlen(list_schemes[i]);
		if (strncmp(s, list_schemes[i], l) == 0) {
			*which = i;
			return l;
		}
	}
	return 0;
}

bool etcd_is_endpoint(const char *endpoint)
{
	size_t which;

	return endpoint != NULL && list_scheme(endpoint, &which) > 0;
}

static int bad(struct crun_diag *d, const char *endpoint, const char *why)
{
	return diag_set(d, -EINVAL,
			"store %s: endpoint: %s (expected etcd://HOST:PORT[,HOST:PORT...], "
			"etcd+https://... or http(s)://HOST:PORT[,...])",
			endpoint, why);
}

/* One entry of the list: [http://|https://]HOST[:PORT][/], @len bytes at @s. */
static int parse_entry(const char *endpoint, const char *s, size_t len, bool list_tls,
		       struct etcd_ep *ep, struct crun_diag *d)
{
	char buf[300], host[256], hp[300];
	bool tls = list_tls;
	int port;

	if (len == 0) {
		return bad(d, endpoint, "empty entry in the list");
	}
	if (len >= sizeof(buf)) {
		return bad(d, endpoint, "entry too long");
	}
	memcpy(buf, s, len);
	buf[len] = '\0';
	s = buf;
	if (strncmp(s, "http://", 7) == 0) {
		tls = false;
		s += 7;
	} else if (strncmp(s, "https://", 8) == 0) {
		tls = true;
		s += 8;
	} else if (strstr(s, "://") != NULL) {
		return bad(d, endpoint, "unsupported scheme in the list");
	}
	len = strlen(s);
	if (len > 0 && s[len - 1] == '/') {
		buf[s - buf + len - 1] = '\0'; /* "http://h:2379/" names the same server */
	}
	if (*s == '\0' || strchr(s, '/') != NULL || strchr(s, '@') != NULL) {
		return bad(d, endpoint, "expected HOST:PORT in every entry");
	}
	if (net_parse_hostport(s, ETCD_DEFAULT_PORT, host, sizeof(host), &port) < 0 ||
	    port <= 0 || host[0] == '\0') {
		return bad(d, endpoint, "expected HOST:PORT with a port in 1..65535");
	}
	net_join_hostport(hp, sizeof(hp), host, port);
	snprintf(ep->name, sizeof(ep->name), "%s", hp);
	snprintf(ep->url, sizeof(ep->url), "%s://%s", tls ? "https" : "http", hp);
	return 0;
}

int etcd_parse_endpoints(const char *endpoint, struct etcd_ep **eps, size_t *n,
			 struct crun_diag *d)
{
	struct etcd_ep *arr;
	const char *p, *comma;
	size_t which = 0, skip, count = 1, i = 0;
	bool tls;
	int rc;

	*eps = NULL;
	*n = 0;
	if (endpoint == NULL || (skip = list_scheme(endpoint, &which)) == 0) {
		return bad(d, endpoint ? endpoint : "(null)", "unsupported scheme");
	}
	/* "etcd://" and "etcd+https://" hold bare HOST:PORT entries; an http(s) list keeps
	 * its scheme on the first entry, which the others inherit. */
	tls = which == 1 || which == 3;
	p = which >= 2 ? endpoint : endpoint + skip;
	for (const char *c = p; *c != '\0'; c++) {
		count += *c == ',';
	}
	if (count > ETCD_MAX_ENDPOINTS) {
		return bad(d, endpoint, "more than 64 endpoints");
	}
	arr = calloc(count, sizeof(*arr));
	if (arr == NULL) {
		return diag_set(d, -ENOMEM, "store %s: out of memory", endpoint);
	}
	for (;;) {
		comma = strchr(p, ',');
		rc = parse_entry(endpoint, p, comma ? (size_t)(comma - p) : strlen(p), tls, &arr[i],
				 d);
		if (rc < 0) {
			free(arr);
			return rc;
		}
		tls = strncmp(arr[i].url, "https://", 8) == 0;
		i++;
		if (comma == NULL) {
			break;
		}
		p = comma + 1;
	}
	*eps = arr;
	*n = i;
	return 0;
}
