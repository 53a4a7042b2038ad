/* SPDX-License-Identifier: MIT */
/* rendezvous/store/client_etcd_open.c: open an etcd store: endpoints, TLS files, credentials. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include <crun/error.h>
#include <crun/store.h>

#include "rendezvous/store/backend.h"
#include "rendezvous/store/client_etcd_internal.h"
#include "rendezvous/store/store_conf.h"
#include "src/common/backoff.h"
#include "src/common/clock.h"
#include "src/common/diag.h"

/* A file the setting @var (its variable's name, for messages) names, which must be readable;
 * NULL when not given. */
static int conf_file(struct store_backend *b, const char *var, const char *v, char **out,
		     struct crun_diag *d)
{
	*out = NULL;
	if (v == NULL || *v == '\0') {
		return 0;
	}
	if (access(v, R_OK) < 0) {
		return diag_set(d, CRUN_ECONFIG, "%s: %s=%s: %s", b->where, var, v, strerror(errno));
	}
	*out = strdup(v);
	return *out == NULL ? diag_set(d, -ENOMEM, "%s: out of memory", b->where) : 0;
}

/*
 * The password in CRUN_ETCD_PASSWORD_FILE: its first line. The file must be a regular file
 * owned by this user that neither group nor others can access, as ssh asks of a key.
 */
static int read_password(struct store_backend *b, const char *path, struct crun_diag *d)
{
	const char *var = "CRUN_ETCD_PASSWORD_FILE";
	char buf[4097];
	struct stat sb;
	ssize_t n;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return diag_set(d, CRUN_ECONFIG, "%s: %s %s: %s", b->where, var, path,
				strerror(errno));
	}
	if (fstat(fd, &sb) < 0) {
		rc = diag_set(d, CRUN_ECONFIG, "%s: %s %s: %s", b->where, var, path,
			      strerror(errno));
	} else if (!S_ISREG(sb.st_mode)) {
		rc = diag_set(d, CRUN_ECONFIG, "%s: %s %s: not a regular file", b->where, var,
			      path);
	} else if (sb.st_uid != geteuid()) {
		rc = diag_set(d, CRUN_ECONFIG,
			      "%s: %s %s: owned by uid %u, not by this user (uid %u): refusing it",
			      b->where, var, path, (unsigned)sb.st_uid, (unsigned)geteuid());
	} else if ((sb.st_mode & 077) != 0) {
		rc = diag_set(d, CRUN_ECONFIG,
			      "%s: %s %s: mode %04o lets group or others at it: refusing it "
			      "(chmod 600 %s)",
			      b->where, var, path, (unsigned)(sb.st_mode & 07777), path);
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0) {
		return diag_set(d, CRUN_ECONFIG, "%s: %s %s: %s", b->where, var, path,
				strerror(errno));
	}
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (buf[0] == '\0' || (size_t)n == sizeof(buf) - 1) {
		explicit_bzero(buf, sizeof(buf));
		return diag_set(d, CRUN_ECONFIG, "%s: %s %s: %s", b->where, var, path,
				buf[0] == '\0' ? "empty" : "longer than 4 KiB");
	}
	b->password = strdup(buf);
	explicit_bzero(buf, sizeof(buf));
	return b->password == NULL ? diag_set(d, -ENOMEM, "%s: out of memory", b->where) : 0;
}

static bool given(const char *v)
{
	return v != NULL && *v != '\0';
}

/*
 * The TLS files: etcd's own (--rdzv-conf cacert=, cert=, key=; CRUN_ETCD_*), else the store's
 * TLS options (--tls-ca, --tls-cert, --tls-key of crun status and crun-store), which name
 * the same files. Those over http members are refused, not ignored: http has no certificate
 * to verify.
 */
static int tls_conf(struct store_backend *b, const struct store_conf *c, struct crun_diag *d)
{
	bool own = given(c->etcd_cacert) || given(c->etcd_cert) || given(c->etcd_key);
	size_t i;
	int rc;

	if (own || (!given(c->tls_ca) && !given(c->tls_cert) && !given(c->tls_key))) {
		rc = conf_file(b, "CRUN_ETCD_CACERT", c->etcd_cacert, &b->cacert, d);
		if (rc == 0) {
			rc = conf_file(b, "CRUN_ETCD_CERT", c->etcd_cert, &b->cert, d);
		}
		return rc < 0 ? rc : conf_file(b, "CRUN_ETCD_KEY", c->etcd_key, &b->key, d);
	}
	for (i = 0; i < b->neps; i++) {
		if (!b->eps[i].tls) {
			return diag_set(d, CRUN_ECONFIG,
					"%s: --tls-%s: member %s is reached over http, which has no "
					"certificate to verify: give etcd+https:// or https:// members",
					b->where,
					given(c->tls_ca) ? "ca" : given(c->tls_cert) ? "cert" : "key",
					b->eps[i].name);
		}
	}
	rc = conf_file(b, "--tls-ca", c->tls_ca, &b->cacert, d);
	if (rc == 0) {
		rc = conf_file(b, "--tls-cert", c->tls_cert, &b->cert, d);
	}
	return rc < 0 ? rc : conf_file(b, "--tls-key", c->tls_key, &b->key, d);
}

/*
 * TLS files and credentials from the store's configuration (docs/etcd.md): the agent's from
 * --rdzv-conf, a worker's from the CRUN_ETCD_* variables it inherited, whose names the
 * messages use.
 */
static int read_conf(struct store_backend *b, const struct store_conf *c, struct crun_diag *d)
{
	const char *user = c->etcd_user, *pwf = c->etcd_password_file;
	int rc;

	rc = tls_conf(b, c, d);
	if (rc < 0) {
		return rc;
	}
	if (b->key != NULL && b->cert == NULL) {
		return diag_set(d, CRUN_ECONFIG, "%s: CRUN_ETCD_KEY is set but CRUN_ETCD_CERT is not",
				b->where);
	}
	if (user == NULL || *user == '\0') {
		if (pwf != NULL && *pwf != '\0') {
			return diag_set(d, CRUN_ECONFIG,
					"%s: CRUN_ETCD_PASSWORD_FILE is set but CRUN_ETCD_USER is not",
					b->where);
		}
		return 0;
	}
	if (pwf == NULL || *pwf == '\0') {
		return diag_set(d, CRUN_ECONFIG,
				"%s: CRUN_ETCD_USER is set but CRUN_ETCD_PASSWORD_FILE is not",
				b->where);
	}
	b->user = strdup(user);
	if (b->user == NULL) {
		return diag_set(d, -ENOMEM, "%s: out of memory", b->where);
	}
	return read_password(b, pwf, d);
}

/* First contact: log in, or read one key, so that open fails as the TCP store's does. */
static int probe(struct store_backend *b, int64_t deadline)
{
	struct json_object *req, *rep = NULL;
	bool bad = false;
	int rc;

	if (b->user != NULL) {
		return etcd_authenticate(b, deadline);
	}
	/* Serializable: any live member answers, leader or not; "user name is empty" here
	 * means etcd wants credentials. */
	req = json_object_new_object();
	etcd_jset(req, "key", etcd_jbytes(ETCD_ROOT, ETCD_ROOT_LEN), &bad);
	etcd_jset(req, "serializable", json_object_new_boolean(1), &bad);
	etcd_jset(req, "count_only", json_object_new_boolean(1), &bad);
	if (bad) {
		json_object_put(req);
		return etcd_fail(b, -ENOMEM, "out of memory");
	}
	rc = etcd_call(b, "connect", "/v3/kv/range", req, &rep, deadline);
	json_object_put(req);
	json_object_put(rep);
	return rc;
}

int store_etcd_open(const struct store_conf *c, struct store_backend **out,
		    const struct store_ops **ops, struct crun_diag *d)
{
	const char *endpoint = c->endpoint;
	int connect_timeout_ms = c->connect_timeout_ms;
	struct store_backend *b;
	int rc;

	b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	snprintf(b->where, sizeof(b->where), "store %.280s", endpoint);
	rc = etcd_parse_endpoints(endpoint, &b->eps, &b->neps, d);
	if (rc < 0) {
		free(b);
		return rc;
	}
	b->connect_timeout_ms = connect_timeout_ms > 0 ? connect_timeout_ms : 30000;
	b->seed = backoff_seed();
	rc = read_conf(b, c, d);
	if (rc == 0) {
		rc = etcd_http_init(b);
		if (rc < 0) {
			diag_set(d, rc, "%s", b->diag.msg);
		}
	}
	if (rc == 0) {
		b->opening = true;
		rc = probe(b, crun_now_ms() + b->connect_timeout_ms);
		b->opening = false;
		if (rc < 0) {
			diag_set(d, rc, "%s", b->diag.msg);
		}
	}
	if (rc < 0) {
		etcd_backend_free(b);
		return rc;
	}
	*out = b;
	*ops = &etcd_store_ops;
	return 0;
}

const char *store_etcd_last_error(const struct store_backend *b)
{
	return b->diag.msg;
}
