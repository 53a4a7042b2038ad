/* SPDX-License-Identifier: MIT */
/* rendezvous/store/etcd_endpoint.c: etcd member lists (pure code; the grammar is in the header). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rendezvous/store/etcd_endpoint.h"
#include "src/common/net.h"

static const struct {
	const char *name;
	bool tls;
} schemes[] = {
	{"http://", false},
	{"https://", true},
	{"etcd://", false},
	{"etcd+https://", true},
};

/* Length of the scheme @s starts with (*@tls its protocol); 0 for none, -1 for another one. */
static int scheme_of(const char *s, bool *tls)
{
	size_t i, l;

	for (i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
		l = strlen(schemes[i].name);
		if (strncasecmp(s, schemes[i].name, l) == 0) {
			*tls = schemes[i].tls;
			return (int)l;
		}
	}
	return strstr(s, "://") != NULL ? -1 : 0;
}

bool etcd_is_endpoint(const char *endpoint)
{
	bool tls;

	return endpoint != NULL && scheme_of(endpoint, &tls) > 0;
}

enum etcd_proto etcd_named_protocol(const char *list)
{
	struct etcd_ep_error err;
	enum etcd_proto named = ETCD_PROTO_NONE;
	struct etcd_ep *eps;
	size_t n, i;

	if (list == NULL || etcd_parse_members(list, false, &eps, &n, &err) < 0) {
		return ETCD_PROTO_NONE;
	}
	for (i = 0; i < n && named == ETCD_PROTO_NONE; i++) {
		if (eps[i].named) {
			named = eps[i].tls ? ETCD_PROTO_HTTPS : ETCD_PROTO_HTTP;
		}
	}
	free(eps);
	return named;
}

enum etcd_proto etcd_protocol(enum etcd_proto named, bool tls_files)
{
	if (named == ETCD_PROTO_HTTP && tls_files) {
		return ETCD_PROTO_CONFLICT;
	}
	if (named != ETCD_PROTO_NONE) {
		return named;
	}
	return tls_files ? ETCD_PROTO_HTTPS : ETCD_PROTO_HTTP;
}

static int fault(struct etcd_ep_error *e, enum etcd_ep_fault f, const char *why, const char *member,
		 size_t skip)
{
	e->fault = f;
	e->why = why;
	snprintf(e->member, sizeof(e->member), "%s", member);
	e->skip = skip < strlen(e->member) ? skip : strlen(e->member);
	return f == ETCD_EP_NOMEM ? -ENOMEM : -EINVAL;
}

/* One member, @len bytes at @s; *@tls: the protocol before it, then its own. */
static int parse_member(const char *s, size_t len, bool *tls, struct etcd_ep *ep,
			struct etcd_ep_error *e)
{
	char buf[300], *hp;
	size_t l;
	int skip;

	if (len == 0) {
		return fault(e, ETCD_EP_EMPTY, "empty entry in the list", "", 0);
	}
	if (len >= sizeof(buf)) {
		memcpy(buf, s, sizeof(buf) - 1);
		buf[sizeof(buf) - 1] = '\0';
		return fault(e, ETCD_EP_LONG, "entry too long", buf, 0);
	}
	memcpy(buf, s, len);
	buf[len] = '\0';
	skip = scheme_of(buf, tls);
	if (skip < 0) {
		return fault(e, ETCD_EP_SCHEME, "unsupported scheme in the list", buf, 0);
	}
	ep->named = skip > 0;
	hp = buf + skip;
	l = strlen(hp);
	if (l > 0 && hp[l - 1] == '/') {
		hp[l - 1] = '\0'; /* "http://h:2379/" (as etcdctl prints it): the same server */
	}
	if (net_parse_hostport(hp, ETCD_DEFAULT_PORT, ep->host, sizeof(ep->host), &ep->port) < 0 ||
	    ep->port <= 0 || !net_valid_host(ep->host) ||
	    (*hp == '[' && strchr(ep->host, ':') == NULL)) {
		return fault(e, ETCD_EP_HOSTPORT, "expected HOST:PORT with a port in 1..65535", buf,
			     (size_t)skip);
	}
	ep->tls = *tls;
	net_join_hostport(ep->name, sizeof(ep->name), ep->host, ep->port);
	snprintf(ep->url, sizeof(ep->url), "%s://%s", ep->tls ? "https" : "http", ep->name);
	return 0;
}

int etcd_parse_members(const char *list, bool tls, struct etcd_ep **eps, size_t *n,
		       struct etcd_ep_error *err)
{
	struct etcd_ep *arr;
	const char *p = list, *comma;
	size_t count = 1, i = 0;
	int rc;

	*eps = NULL;
	*n = 0;
	for (const char *c = list; *c != '\0'; c++) {
		count += *c == ',';
	}
	if (count > ETCD_MAX_ENDPOINTS) {
		return fault(err, ETCD_EP_MANY, "more than 64 endpoints", "", 0);
	}
	arr = calloc(count, sizeof(*arr));
	if (arr == NULL) {
		return fault(err, ETCD_EP_NOMEM, "out of memory", "", 0);
	}
	for (;;) {
		comma = strchr(p, ',');
		rc = parse_member(p, comma ? (size_t)(comma - p) : strlen(p), &tls, &arr[i], err);
		if (rc < 0) {
			free(arr);
			return rc;
		}
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

int etcd_parse_endpoints(const char *endpoint, struct etcd_ep **eps, size_t *n, struct crun_diag *d)
{
	struct etcd_ep_error err;
	const char *why = "unsupported scheme";
	int rc = -EINVAL;

	*eps = NULL;
	*n = 0;
	if (etcd_is_endpoint(endpoint)) {
		rc = etcd_parse_members(endpoint, false, eps, n, &err);
		if (rc == 0) {
			return 0;
		}
		if (rc == -ENOMEM) {
			return diag_set(d, rc, "store %s: out of memory", endpoint);
		}
		why = err.why;
	}
	return diag_set(d, rc,
			"store %s: endpoint: %s (expected etcd://HOST:PORT[,HOST:PORT...], "
			"etcd+https://... or http(s)://HOST:PORT[,...])",
			endpoint != NULL ? endpoint : "(null)", why);
}
