/* SPDX-License-Identifier: MIT */
/* src/cli_etcd.c: --rdzv-backend etcd: member list, --rdzv-conf keys, the store endpoint. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <crun/error.h>

#include "rendezvous/store/etcd_endpoint.h"
#include "src/cli.h"
#include "src/cli_parser.h"

#define ETCD_LIST_MAX 4000 /* the normalised list, "etcd+https://" not counted */

/*
 * What each --rdzv-conf key of an etcd job is called (torchrun's etcd backend spells them
 * cacert, cert, key; its etcd-v2 backend ca_cert, ssl_cert, ssl_cert_key: both are read),
 * and where the value goes. Paths are made absolute: workers get them in CRUN_ETCD_*.
 */
static const struct {
	const char *key;
	size_t off;
	bool path;
} etcd_keys[] = {
	{"cacert", offsetof(struct job_spec, etcd_cacert), true},
	{"ca_cert", offsetof(struct job_spec, etcd_cacert), true},
	{"cert", offsetof(struct job_spec, etcd_cert), true},
	{"ssl_cert", offsetof(struct job_spec, etcd_cert), true},
	{"key", offsetof(struct job_spec, etcd_key), true},
	{"ssl_cert_key", offsetof(struct job_spec, etcd_key), true},
	{"password_file", offsetof(struct job_spec, etcd_password_file), true},
	{"user", offsetof(struct job_spec, etcd_user), false},
};

/* The member list's fault in --rdzv-endpoint's words (the grammar: rendezvous/store/etcd_endpoint.h). */
static int bad_members(struct cli_parser *p, const char *v, const struct etcd_ep_error *e)
{
	char b[64];

	switch (e->fault) {
	case ETCD_EP_SCHEME:
		return cli_fail(p, O_RDZV_ENDPOINT,
				"%s: expected http://, https://, etcd:// or no scheme for etcd",
				opt_show(b, sizeof(b), e->member));
	case ETCD_EP_EMPTY:
		return cli_fail(p, O_RDZV_ENDPOINT, "%s etcd member in \"%s\"",
				strspn(v, ",") == strlen(v) ? "no" : "an empty",
				opt_show(b, sizeof(b), v));
	case ETCD_EP_MANY:
		return cli_fail(p, O_RDZV_ENDPOINT, "more than %d etcd members",
				ETCD_MAX_ENDPOINTS);
	case ETCD_EP_NOMEM:
		return cli_oom(p);
	case ETCD_EP_HOSTPORT:
	case ETCD_EP_LONG:
	default:
		return cli_fail(p, O_RDZV_ENDPOINT,
				"expected HOST[:PORT][,HOST[:PORT]...] for etcd, got \"%s\"",
				opt_show(b, sizeof(b), e->member + e->skip));
	}
}

/*
 * --rdzv-endpoint for etcd: a member list in the store's grammar (each member with or without
 * http://, https://, etcd:// or etcd+https://, port 2379 when none is given), one protocol for
 * the whole cluster; empty means 127.0.0.1:2379. Sets spec->rdzv_endpoint to the normalised
 * list (no scheme yet: cli_etcd_finish() adds it once --rdzv-conf protocol is known),
 * rdzv_host and rdzv_port to the first member (the route to it picks the address this node
 * advertises).
 */
int cli_etcd_endpoint(struct cli_parser *p, const char *v)
{
	struct job_spec *s = p->spec;
	struct etcd_ep_error err;
	struct etcd_ep *eps;
	size_t n, i, len = 0;
	char *list;
	int rc = 0;

	if (*v == '\0') {
		v = "127.0.0.1";
	}
	if (etcd_parse_members(v, false, &eps, &n, &err) < 0) {
		return bad_members(p, v, &err);
	}
	p->etcd_tls_endpoint = -1;
	for (i = 0; i < n; i++) {
		if (!eps[i].named) {
			continue;
		}
		if (p->etcd_tls_endpoint > 0 && p->etcd_tls_endpoint != (eps[i].tls ? 2 : 1)) {
			free(eps);
			return cli_fail(p, O_RDZV_ENDPOINT,
					"mixes http and https members (one protocol per cluster)");
		}
		p->etcd_tls_endpoint = eps[i].tls ? 2 : 1;
	}
	list = malloc(ETCD_LIST_MAX + 1);
	if (list == NULL) {
		free(eps);
		return cli_oom(p);
	}
	list[0] = '\0';
	for (i = 0; i < n && rc == 0; i++) {
		if (len + strlen(eps[i].name) + 2 > ETCD_LIST_MAX) {
			rc = cli_fail(p, O_RDZV_ENDPOINT, "the member list is too long");
			break;
		}
		len += (size_t)snprintf(list + len, ETCD_LIST_MAX + 1 - len, "%s%s",
					len > 0 ? "," : "", eps[i].name);
	}
	if (rc == 0 && (cli_set_str(&s->rdzv_host, eps[0].host) < 0 ||
			cli_set_str(&s->rdzv_endpoint, list) < 0)) {
		rc = cli_oom(p);
	}
	if (rc == 0) {
		s->rdzv_port = eps[0].port;
	}
	free(list);
	free(eps);
	return rc;
}

/*
 * One --rdzv-conf item that belongs to etcd: protocol, the TLS files, user, password_file.
 * Returns 1 when @key is not one of them (the caller goes on), 0, or CLI_USAGE.
 */
int cli_etcd_conf_item(struct cli_parser *p, const char *key, const char *val)
{
	struct job_spec *s = p->spec;
	char b[64], abs[PATH_MAX], **dst;
	bool protocol = strcmp(key, "protocol") == 0;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(etcd_keys); i++) {
		if (strcmp(key, etcd_keys[i].key) == 0) {
			break;
		}
	}
	if (!protocol && i == ARRAY_SIZE(etcd_keys)) {
		return 1;
	}
	if (s->rdzv_kind != RDZV_KIND_ETCD) {
		return cli_fail(p, O_RDZV_CONF, "%s: only for --rdzv-backend etcd", key);
	}
	if (protocol) {
		if (strcasecmp(val, "http") == 0) {
			p->etcd_tls_conf = 1;
		} else if (strcasecmp(val, "https") == 0) {
			p->etcd_tls_conf = 2;
		} else {
			return cli_fail(p, O_RDZV_CONF,
					"protocol: expected http or https, got \"%s\"",
					opt_show(b, sizeof(b), val));
		}
		return 0;
	}
	if (*val == '\0') {
		return cli_fail(p, O_RDZV_CONF, "%s: empty value", key);
	}
	dst = (char **)((char *)s + etcd_keys[i].off);
	if (!etcd_keys[i].path) {
		if (strlen(val) > 255 || strpbrk(val, "\t\n\r") != NULL) {
			return cli_fail(p, O_RDZV_CONF, "%s: not a usable etcd user name", key);
		}
		return cli_set_str(dst, val) < 0 ? cli_oom(p) : 0;
	}
	/* Checked here, so a typo is a usage error rather than a failure in every worker. */
	if (realpath(val, abs) == NULL) {
		return cli_fail(p, O_RDZV_CONF, "%s: %s: %s", key, opt_show(b, sizeof(b), val),
				strerror(errno));
	}
	return cli_set_str(dst, abs) < 0 ? cli_oom(p) : 0;
}

/*
 * After --rdzv-endpoint and --rdzv-conf: the protocol (from the scheme or protocol=; they must
 * agree), TLS settings that need https, a key with its certificate, and the store endpoint
 * "etcd://LIST" or "etcd+https://LIST" in spec->rdzv_endpoint.
 */
int cli_etcd_finish(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	const char *scheme;
	char *ep;
	size_t n;
	int tls, flag;

	if (s->rdzv_kind != RDZV_KIND_ETCD) {
		return 0;
	}
	if (p->etcd_tls_conf > 0 && p->etcd_tls_endpoint > 0 &&
	    p->etcd_tls_conf != p->etcd_tls_endpoint) {
		return cli_fail(p, O_RDZV_CONF, "protocol: %s, but --rdzv-endpoint says %s",
				p->etcd_tls_conf == 2 ? "https" : "http",
				p->etcd_tls_endpoint == 2 ? "https" : "http");
	}
	/* etcdctl's rule, crun status's too: no scheme with --tls-* files is https. */
	flag = p->v[O_TLS_CA].set ? O_TLS_CA : p->v[O_TLS_CERT].set ? O_TLS_CERT : -1;
	tls = etcd_protocol(p->etcd_tls_conf > 0 ? p->etcd_tls_conf
			    : p->etcd_tls_endpoint > 0 ? p->etcd_tls_endpoint
						       : ETCD_PROTO_NONE,
			    flag >= 0);
	if (tls == ETCD_PROTO_CONFLICT) {
		return cli_fail(p, flag,
				"the etcd members are reached over http (%s), which has no "
				"certificate to verify: give https:// members or no scheme",
				p->etcd_tls_conf > 0 ? "--rdzv-conf protocol=http"
						     : "--rdzv-endpoint names http");
	}
	if (tls != ETCD_PROTO_HTTPS &&
	    (s->etcd_cacert != NULL || s->etcd_cert != NULL || s->etcd_key != NULL)) {
		return cli_fail(p, O_RDZV_CONF,
				"cacert, cert and key need https (protocol=https or https:// "
				"members)");
	}
	if ((s->etcd_cert == NULL) != (s->etcd_key == NULL)) {
		return cli_fail(p, O_RDZV_CONF, "%s without %s: a client certificate needs both",
				s->etcd_cert != NULL ? "cert" : "key",
				s->etcd_cert != NULL ? "key" : "cert");
	}
	if (s->is_host != -1) {
		return cli_fail(p, O_RDZV_CONF,
				"is_host: an etcd job never hosts a store (etcd is the store)");
	}
	scheme = tls == ETCD_PROTO_HTTPS ? "etcd+https://" : "etcd://";
	n = strlen(scheme) + strlen(s->rdzv_endpoint) + 1;
	ep = malloc(n);
	if (ep == NULL) {
		return cli_oom(p);
	}
	snprintf(ep, n, "%s%s", scheme, s->rdzv_endpoint);
	free(s->rdzv_endpoint);
	s->rdzv_endpoint = ep;
	return 0;
}

/* @dst (an etcd TLS file) from the --tls-* flag @flag's @val, unless --rdzv-conf gave another. */
static int tls_file(struct cli_parser *p, int flag, const char *key, const char *val, char **dst)
{
	if (val == NULL) {
		return 0;
	}
	if (*dst != NULL && strcmp(*dst, val) != 0) {
		return cli_fail(p, flag, "%s, but --rdzv-conf %s=%s: give one of them", val, key,
				*dst);
	}
	return *dst == NULL && cli_set_str(dst, val) < 0 ? cli_oom(p) : 0;
}

int cli_etcd_tls(struct cli_parser *p)
{
	struct job_spec *s = p->spec;
	int rc;

	if (s->rdzv_kind != RDZV_KIND_ETCD || (s->tls_ca == NULL && s->tls_cert == NULL)) {
		return 0;
	}
	/* cli_etcd_finish() made the members https with these files, or refused http ones. */
	if ((rc = tls_file(p, O_TLS_CA, "cacert", s->tls_ca, &s->etcd_cacert)) != 0 ||
	    (rc = tls_file(p, O_TLS_CERT, "cert", s->tls_cert, &s->etcd_cert)) != 0 ||
	    (rc = tls_file(p, O_TLS_KEY, "key", s->tls_key, &s->etcd_key)) != 0) {
		return rc;
	}
	return 0;
}
