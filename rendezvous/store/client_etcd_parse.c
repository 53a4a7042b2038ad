/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_parse.c: etcd endpoint lists and base64 (pure code). */
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

static const char b64_chars[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t etcd_b64_len(size_t n)
{
	return (n + 2) / 3 * 4 + 1;
}

void etcd_b64_encode(const void *src, size_t n, char *dst)
{
	const unsigned char *s = src;
	size_t i;
	unsigned v;

	for (i = 0; i + 2 < n; i += 3) {
		v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
		*dst++ = b64_chars[v >> 18];
		*dst++ = b64_chars[(v >> 12) & 63];
		*dst++ = b64_chars[(v >> 6) & 63];
		*dst++ = b64_chars[v & 63];
	}
	if (i < n) {
		v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0);
		*dst++ = b64_chars[v >> 18];
		*dst++ = b64_chars[(v >> 12) & 63];
		*dst++ = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
		*dst++ = '=';
	}
	*dst = '\0';
}

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z') {
		return c - 'A';
	}
	if (c >= 'a' && c <= 'z') {
		return c - 'a' + 26;
	}
	if (c >= '0' && c <= '9') {
		return c - '0' + 52;
	}
	if (c == '+') {
		return 62;
	}
	if (c == '/') {
		return 63;
	}
	return -1;
}

int etcd_b64_decode(const char *src, size_t n, void *dst, size_t *outlen)
{
	unsigned char *o = dst;
	unsigned acc = 0;
	size_t i, bits = 0, pad = 0;
	int v;

	for (i = 0; i < n; i++) {
		if (src[i] == '=') {
			pad++;
			continue;
		}
		if (pad > 0) {
			return -EINVAL; /* data after padding */
		}
		v = b64_value((unsigned char)src[i]);
		if (v < 0) {
			return -EINVAL;
		}
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			*o++ = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	/* Leftover bits must be padding zeros: 0 bits, or 2 or 4 (one or two chars short). */
	if (pad > 2 || bits >= 6 || acc != 0 || (pad > 0 && (n % 4) != 0)) {
		return -EINVAL;
	}
	*outlen = (size_t)(o - (unsigned char *)dst);
	return 0;
}
