/* SPDX-License-Identifier: MIT */
/* rendezvous/store/store_conf.c: the store's configuration as one value: the token policy,
 * the options a backend opener takes, variants, and what workers inherit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crun/error.h>

#include "rendezvous/store/store_conf.h"
#include "rendezvous/store/unix_path.h"
#include "rendezvous/store/server.h"
#include "src/common/log.h"
#include "src/common/token.h"

/* *@dst = a copy of @src; NULL and "" both mean "not given". 0 or -ENOMEM. */
static int set_str(char **dst, const char *src)
{
	free(*dst);
	*dst = NULL;
	if (src == NULL || src[0] == '\0') {
		return 0;
	}
	*dst = strdup(src);
	return *dst == NULL ? -ENOMEM : 0;
}

int store_conf_set_endpoint(struct store_conf *c, const char *endpoint)
{
	return set_str(&c->endpoint, endpoint);
}

/* The fields of @c that are not the credential, from @s. */
static int copy_settings(struct store_conf *c, const struct store_settings *s)
{
	int rc = 0;

	rc |= set_str(&c->endpoint, s->endpoint);
	rc |= set_str(&c->prefix, s->prefix);
	rc |= set_str(&c->scope, s->scope);
	rc |= set_str(&c->tls_ca, s->tls_ca);
	rc |= set_str(&c->tls_cert, s->tls_cert);
	rc |= set_str(&c->tls_key, s->tls_key);
	rc |= set_str(&c->tls_server_name, s->tls_server_name);
	rc |= set_str(&c->etcd_user, s->etcd_user);
	rc |= set_str(&c->etcd_password_file, s->etcd_password_file);
	rc |= set_str(&c->etcd_cacert, s->etcd_cacert);
	rc |= set_str(&c->etcd_cert, s->etcd_cert);
	rc |= set_str(&c->etcd_key, s->etcd_key);
	/* Read here, once, like the etcd settings: workers inherit it with the environment. */
	rc |= set_str(&c->unix_socket, getenv(STORE_UNIX_ENV));
	rc |= set_str(&c->spin_us, getenv(STORE_SPIN_ENV));
	c->insecure = s->insecure;
	c->connect_timeout_ms = s->connect_timeout_ms;
	c->timeout_ms = s->timeout_ms;
	return rc != 0 ? -ENOMEM : 0;
}

/* A token file: its path, and with STORE_TOKEN_READ its bytes. */
static int from_file(struct store_conf *c, const char *path, unsigned policy, struct crun_diag *d)
{
	if (set_str(&c->token_file, path) < 0) {
		return diag_set(d, -ENOMEM, "out of memory");
	}
	snprintf(c->token_src, sizeof(c->token_src), "token file %s", path);
	return (policy & STORE_TOKEN_READ) != 0 ? token_file_read(path, &c->token, d) : 0;
}

/* The per-user default token file: read (or created, with STORE_TOKEN_CREATE) when it can be. */
static int from_default(struct store_conf *c, unsigned policy, struct crun_diag *d)
{
	char path[PATH_MAX];
	char *tok = NULL;
	int rc;

	rc = token_default_path(path, sizeof(path), d);
	if (rc < 0) {
		/* A client without a default simply has no token; a host must make one. */
		return (policy & STORE_TOKEN_CREATE) != 0 ? rc : (diag_clear(d), 0);
	}
	if ((policy & STORE_TOKEN_CREATE) == 0) {
		return access(path, F_OK) == 0 ? from_file(c, path, policy, d) : 0;
	}
	rc = token_file_ensure(path, &tok, &c->token_created, d);
	if (rc < 0) {
		return rc;
	}
	if (set_str(&c->token_file, path) < 0) {
		token_wipe(tok);
		return diag_set(d, -ENOMEM, "out of memory");
	}
	snprintf(c->token_src, sizeof(c->token_src), "token file %s", path);
	if ((policy & STORE_TOKEN_READ) != 0) {
		c->token = tok;
	} else {
		token_wipe(tok);
	}
	return 0;
}

/* The token policy, in its order (store_conf.h); @env is $CRUN_STORE_TOKEN's copy or NULL. */
static int resolve(struct store_conf *c, const struct store_settings *s, char **env,
		   unsigned policy, struct crun_diag *d)
{
	char gen[TOKEN_GEN_HEX + 1];
	int rc = 0;

	if (s->insecure) {
		return 0;
	}
	if (s->token_file != NULL && s->token_file[0] != '\0') {
		return from_file(c, s->token_file, policy, d);
	}
	if (s->token != NULL && s->token[0] != '\0') {
		snprintf(c->token_src, sizeof(c->token_src), "the given token");
		return set_str(&c->token, s->token) < 0 ? diag_set(d, -ENOMEM, "out of memory") : 0;
	}
	if (*env != NULL && (policy & STORE_TOKEN_ENV) != 0) {
		c->token = *env;
		*env = NULL;
		snprintf(c->token_src, sizeof(c->token_src), "$CRUN_STORE_TOKEN");
		return 0;
	}
	if ((policy & STORE_TOKEN_FRESH) != 0) {
		if (token_generate(gen) < 0 || (c->token = strdup(gen)) == NULL) {
			rc = diag_set(d, -EIO, "cannot make a random token");
		}
		explicit_bzero(gen, sizeof(gen));
		snprintf(c->token_src, sizeof(c->token_src), "a fresh random token");
		return rc;
	}
	if ((policy & STORE_TOKEN_DEFAULT) != 0) {
		return from_default(c, policy, d);
	}
	return 0;
}

int store_conf_init(struct store_conf *c, const struct store_settings *s, unsigned policy,
		    struct crun_diag *d)
{
	const char *env = NULL;
	char *from_env = NULL;
	char fpr[TOKEN_FPR_HEX + 1];
	int rc;

	memset(c, 0, sizeof(*c));
	if (copy_settings(c, s) < 0) {
		return diag_set(d, -ENOMEM, "store: out of memory");
	}
	if ((policy & (STORE_TOKEN_ENV | STORE_TOKEN_DROP_ENV)) != 0) {
		env = getenv("CRUN_STORE_TOKEN");
		if (env != NULL && env[0] != '\0' && (from_env = strdup(env)) == NULL) {
			return diag_set(d, -ENOMEM, "store: out of memory");
		}
		if (env != NULL) {
			unsetenv("CRUN_STORE_TOKEN"); /* the workers must not inherit it */
		}
	}
	rc = resolve(c, s, &from_env, policy, d);
	c->env_token_dropped = from_env != NULL; /* read, and a flag or the policy left it */
	token_wipe(from_env);
	if (rc == 0 && c->token != NULL) {
		rc = token_check_strength(c->token, c->token_src, d); /* files, flags, environment */
	}
	if (rc < 0) {
		return diag_prefix(d, "store token");
	}
	if (c->token != NULL) {
		token_fingerprint(c->token, strlen(c->token), fpr);
		log_debug("store token: %s (fingerprint %s)", c->token_src, fpr);
	}
	return 0;
}

void store_conf_finish(struct store_conf *c)
{
	char **s[] = {&c->endpoint,    &c->prefix,
		      &c->scope,       &c->token_file,
		      &c->tls_ca,      &c->tls_cert,
		      &c->tls_key,     &c->tls_server_name,
		      &c->etcd_user,   &c->etcd_password_file,
		      &c->etcd_cacert, &c->etcd_cert,
		      &c->etcd_key,    &c->unix_socket,
		      &c->spin_us};
	size_t i;

	token_wipe(c->token);
	for (i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
		free(*s[i]);
	}
	explicit_bzero(c, sizeof(*c));
}

int store_conf_derive(struct store_conf *out, const struct store_conf *base,
		      const struct store_conf_variant *v)
{
	const struct store_settings s = {
		.endpoint = v != NULL && v->endpoint != NULL ? v->endpoint : base->endpoint,
		.prefix = v != NULL && v->no_prefix	   ? NULL
			  : v != NULL && v->prefix != NULL ? v->prefix
							   : base->prefix,
		.scope = v != NULL && v->scope != NULL ? v->scope : base->scope,
		.insecure = base->insecure,
		.tls_ca = base->tls_ca,
		.tls_cert = base->tls_cert,
		.tls_key = base->tls_key,
		.tls_server_name = base->tls_server_name,
		.etcd_user = base->etcd_user,
		.etcd_password_file = base->etcd_password_file,
		.etcd_cacert = base->etcd_cacert,
		.etcd_cert = base->etcd_cert,
		.etcd_key = base->etcd_key,
		.connect_timeout_ms = v != NULL && v->connect_timeout_ms > 0
					      ? v->connect_timeout_ms
					      : base->connect_timeout_ms,
		.timeout_ms = v != NULL && v->timeout_ms > 0 ? v->timeout_ms : base->timeout_ms,
	};

	memset(out, 0, sizeof(*out));
	if (copy_settings(out, &s) < 0 || set_str(&out->token, base->token) < 0 ||
	    set_str(&out->token_file, base->token_file) < 0) {
		store_conf_finish(out);
		return -ENOMEM;
	}
	memcpy(out->token_src, base->token_src, sizeof(out->token_src));
	return 0;
}

void store_conf_opts(const struct store_conf *c, struct crun_store_opts *o)
{
	*o = (struct crun_store_opts)CRUN_STORE_OPTS_INIT;
	o->endpoint = c->endpoint;
	o->prefix = c->prefix;
	o->token = c->token;
	o->token_file = c->token_file;
	o->scope = c->scope;
	o->connect_timeout_ms = c->connect_timeout_ms;
	o->timeout_ms = c->timeout_ms;
	o->tls_ca = c->tls_ca;
	o->tls_cert = c->tls_cert;
	o->tls_key = c->tls_key;
	o->tls_server_name = c->tls_server_name;
}

void store_conf_server_opts(const struct store_conf *c, struct store_server_opts *o)
{
	o->token = c->token;
	o->tls_cert = c->tls_cert;
	o->tls_key = c->tls_key;
	o->tls_ca = c->tls_ca;
	/* The server's socket: the default path unless turned off (crun-rdzvd's flags may
	 * override this). */
	o->unix_socket = store_unix_off(c->unix_socket) ? NULL
			 : c->unix_socket != NULL	  ? c->unix_socket
							  : "";
}

void store_settings_etcd_env(struct store_settings *s)
{
	struct {
		const char **field, *var;
	} m[] = {
		{&s->etcd_user, "CRUN_ETCD_USER"},
		{&s->etcd_password_file, "CRUN_ETCD_PASSWORD_FILE"},
		{&s->etcd_cacert, "CRUN_ETCD_CACERT"},
		{&s->etcd_cert, "CRUN_ETCD_CERT"},
		{&s->etcd_key, "CRUN_ETCD_KEY"},
	};
	size_t i;

	for (i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		if (*m[i].field == NULL || (*m[i].field)[0] == '\0') {
			*m[i].field = getenv(m[i].var);
		}
	}
}

int store_conf_from_opts(struct store_conf *c, const struct crun_store_opts *o)
{
	struct store_settings s = {
		.endpoint = o->endpoint,
		.prefix = o->prefix,
		.scope = o->scope,
		.tls_ca = o->tls_ca,
		.tls_cert = o->tls_cert,
		.tls_key = o->tls_key,
		.tls_server_name = o->tls_server_name,
		.connect_timeout_ms = o->connect_timeout_ms,
		.timeout_ms = o->timeout_ms,
	};
	int rc;

	memset(c, 0, sizeof(*c));
	store_settings_etcd_env(&s);
	rc = copy_settings(c, &s);
	/* The token file wins over the token (crun/store.h); open reads it. */
	if (rc == 0 && o->token_file != NULL && o->token_file[0] != '\0') {
		rc = set_str(&c->token_file, o->token_file);
		snprintf(c->token_src, sizeof(c->token_src), "token file %s", o->token_file);
	} else if (rc == 0) {
		rc = set_str(&c->token, o->token);
		snprintf(c->token_src, sizeof(c->token_src), "the given token");
	}
	if (rc < 0) {
		store_conf_finish(c);
	}
	return rc;
}

size_t store_conf_worker_env(const struct store_conf *c, const char *cred_file,
			     struct store_env_var out[STORE_CONF_ENV_MAX])
{
	const struct store_env_var v[] = {
		{"CRUN_STORE_ENDPOINT", c->endpoint, true},
		/* Paths only, never a key (docs/security.md, "TLS"). */
		{"CRUN_STORE_TLS_CA", c->tls_ca, false},
		{"CRUN_STORE_TLS_CERT", c->tls_cert, false},
		{"CRUN_STORE_TLS_KEY", c->tls_key, false},
		{"CRUN_STORE_TLS_SERVER_NAME", c->tls_server_name, false},
		/* Values the user exported stay: workers read them when crun was given none. */
		{"CRUN_ETCD_USER", c->etcd_user, true},
		/* A credential, like the token: only the job's own etcd store's, never one the
		 * user exported for something else (issue 20). */
		{"CRUN_ETCD_PASSWORD_FILE", c->etcd_password_file, false},
		{"CRUN_ETCD_CACERT", c->etcd_cacert, true},
		{"CRUN_ETCD_CERT", c->etcd_cert, true},
		{"CRUN_ETCD_KEY", c->etcd_key, true},
		/* The credential travels as a private file, never as the token itself. */
		{"CRUN_STORE_TOKEN_FILE", cred_file, true},
		{"CRUN_STORE_TOKEN", NULL, false},
	};
	size_t i;

	_Static_assert(sizeof(v) / sizeof(v[0]) <= STORE_CONF_ENV_MAX, "STORE_CONF_ENV_MAX");
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		out[i] = v[i];
	}
	return i;
}
