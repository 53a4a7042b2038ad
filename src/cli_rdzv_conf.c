/* SPDX-License-Identifier: MIT */
/* src/cli_rdzv_conf.c: --rdzv-conf: crun's keys, torchrun's, and the typos of either. */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli_parser.h"
#include "src/common/parse.h"
#include "src/common/util.h"
#include "src/jobfile.h"

/*
 * Every --rdzv-conf key crun reads: a close misspelling of one is refused with a "did you
 * mean" (it would silently not apply); any other key is warned about and ignored, as torchrun
 * ignores keys its backend does not read.
 */
static const char *const conf_known[] = {
	"join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout",
	"keep_alive_interval", "keep_alive_max_attempt", "read_timeout", "is_host", "timeout",
	"store_type", "use_libuv", "rank",
	/* etcd (src/cli_etcd.c), in torchrun's etcd and etcd-v2 spellings */
	"protocol", "cacert", "ca_cert", "cert", "ssl_cert", "key", "ssl_cert_key",
	"password_file", "user",
};

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* Levenshtein distance of @a and @b, or a number above @max once it surely is. */
static size_t edit_distance(const char *a, const char *b, size_t max)
{
	size_t la = strlen(a), lb = strlen(b), row[64], i, j, diag, up, best;

	if (la >= ARRAY_SIZE(row) || lb >= ARRAY_SIZE(row)) {
		return max + 1;
	}
	for (j = 0; j <= lb; j++) {
		row[j] = j;
	}
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		best = row[0];
		for (j = 1; j <= lb; j++) {
			up = row[j];
			row[j] = min_size(min_size(row[j] + 1, row[j - 1] + 1),
					  diag + (a[i - 1] == b[j - 1] ? 0 : 1));
			diag = up;
			best = min_size(best, row[j]);
		}
		if (best > max) {
			return max + 1;
		}
	}
	return row[lb];
}

/* The key of conf_known[] @key is a likely typo of (one edit for short keys, two else). */
static const char *conf_typo_of(const char *key)
{
	size_t i, d, max = strlen(key) <= 4 ? 1 : 2;

	for (i = 0; i < ARRAY_SIZE(conf_known); i++) {
		d = edit_distance(key, conf_known[i], max);
		if (d > 0 && d <= max) {
			return conf_known[i];
		}
	}
	return NULL;
}

static int conf_item(struct cli_parser *p, const char *key, const char *val)
{
	static const struct {
		const char *key;
		size_t off;
		bool positive;
	} secs[] = {
		{"join_timeout", offsetof(struct rdzv_conf, join_timeout_ms), true},
		{"last_call_timeout", offsetof(struct rdzv_conf, last_call_timeout_ms), false},
		{"close_timeout", offsetof(struct rdzv_conf, close_timeout_ms), false},
		{"heartbeat_timeout", offsetof(struct rdzv_conf, heartbeat_timeout_ms), true},
		{"keep_alive_interval", offsetof(struct rdzv_conf, keep_alive_interval_ms), true},
		{"read_timeout", offsetof(struct rdzv_conf, read_timeout_ms), true},
	};
	struct job_spec *s = p->spec;
	const char *typo;
	char b[64], v[16];
	int64_t ms;
	size_t i;
	long n;
	bool yes;
	int rc;

	for (i = 0; i < ARRAY_SIZE(secs); i++) {
		if (strcmp(key, secs[i].key) != 0) {
			continue;
		}
		if (parse_seconds_ms(val, CLI_SECONDS_MAX, &ms) < 0) {
			return cli_fail(p, O_RDZV_CONF, "%s: expected seconds, got \"%s\"", key,
					opt_show(b, sizeof(b), val));
		}
		if (secs[i].positive && ms <= 0) {
			return cli_fail(p, O_RDZV_CONF, "%s: must be above 0 seconds", key);
		}
		memcpy((char *)&s->rdzv + secs[i].off, &ms, sizeof(ms));
		return 0;
	}
	if (strcmp(key, "keep_alive_max_attempt") == 0) {
		if (parse_long(val, 1, 1000000, &n) < 0) {
			return cli_fail(p, O_RDZV_CONF, "%s: expected an integer >= 1, got \"%s\"",
					key, opt_show(b, sizeof(b), val));
		}
		s->rdzv.keep_alive_max_attempt = (int)n;
		return 0;
	}
	if (strcmp(key, "is_host") == 0 || strcmp(key, "use_libuv") == 0) {
		if (opt_parse_bool(val, &yes) < 0 || *val == '\0') {
			return cli_fail(p, O_RDZV_CONF, "%s: expected 0 or 1, got \"%s\"", key,
					opt_show(b, sizeof(b), val));
		}
		if (key[0] == 'i') {
			s->is_host = yes ? 1 : 0;
		}
		/* use_libuv: torch's choice of TCPStore server; crun's store is always libuv. */
		return 0;
	}
	if (strcmp(key, "store_type") == 0) {
		/* torchrun's c10d store: "tcp" (crun's store server) or "file" (a FileStore). */
		for (i = 0; val[i] != '\0' && i + 1 < sizeof(v); i++) {
			v[i] = (char)tolower((unsigned char)val[i]);
		}
		v[i] = '\0';
		if (strcmp(v, "tcp") == 0) {
			return 0;
		}
		if (strcmp(v, "file") == 0) {
			return cli_fail(p, O_RDZV_CONF,
					"store_type=file: use --rdzv-backend file --rdzv-endpoint "
					"file:///SHARED/PATH (crun's shared-file store)");
		}
		return cli_fail(p, O_RDZV_CONF, "store_type: expected tcp or file, got \"%s\"",
				opt_show(b, sizeof(b), val));
	}
	if (strcmp(key, "rank") == 0) {
		return 0; /* torchrun sets it from --node-rank itself, as crun does */
	}
	rc = cli_etcd_conf_item(p, key, val);
	if (rc != 1) {
		return rc;
	}
	typo = conf_typo_of(key);
	if (typo != NULL) {
		return cli_fail(p, O_RDZV_CONF, "unknown key \"%s\" (did you mean %s?)",
				opt_show(b, sizeof(b), key), typo);
	}
	fprintf(stderr, "crun: warning: %s: key \"%s\" is not used by crun (ignored)\n",
		p->v[O_RDZV_CONF].origin, opt_show(b, sizeof(b), key));
	return 0;
}

/* One KEY=VALUE of either source; torchrun's legacy "timeout" is kept aside in *timeout_ms. */
static int conf_pair(struct cli_parser *p, const char *key, const char *val, int64_t *timeout_ms,
		     bool *join_given)
{
	char b[64];

	if (strcmp(key, "timeout") == 0) {
		/* torchrun's legacy rendezvous timeout: the join timeout, unless given. */
		if (parse_seconds_ms(val, CLI_SECONDS_MAX, timeout_ms) < 0 || *timeout_ms <= 0) {
			return cli_fail(p, O_RDZV_CONF, "timeout: expected seconds above 0, got \"%s\"",
					opt_show(b, sizeof(b), val));
		}
		return 0;
	}
	*join_given = *join_given || strcmp(key, "join_timeout") == 0;
	return conf_item(p, key, val);
}

/* rdzv_conf as a job-file mapping: each item with its own FILE:LINE:COLUMN (src/jobfile.h). */
static int jobfile_conf(struct cli_parser *p, int64_t *timeout_ms, bool *join_given)
{
	struct opt_val *ov = &p->v[O_RDZV_CONF];
	char saved[sizeof(ov->origin)];
	size_t i;
	int rc = 0;

	if (p->jf == NULL) {
		return 0;
	}
	memcpy(saved, ov->origin, sizeof(saved));
	for (i = 0; i < p->jf->nconf && rc == 0; i++) {
		memcpy(ov->origin, p->jf->conf[i].origin, sizeof(ov->origin));
		rc = conf_pair(p, p->jf->conf[i].key, p->jf->conf[i].val, timeout_ms, join_given);
	}
	memcpy(ov->origin, saved, sizeof(saved));
	return rc;
}

/* A job file's rdzv_conf mapping first, then --rdzv-conf: the command line wins per key. */
int cli_do_rdzv_conf(struct cli_parser *p)
{
	const char *v = p->v[O_RDZV_CONF].val;
	char *copy = NULL, *item, *save = NULL, *eq;
	char b[64];
	int64_t timeout_ms = -1;
	bool join_given = false;
	int rc;

	rc = jobfile_conf(p, &timeout_ms, &join_given);
	if (rc != 0 || !p->v[O_RDZV_CONF].set || *v == '\0') {
		goto out;
	}
	copy = strdup(v);
	if (copy == NULL) {
		return cli_oom(p);
	}
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		eq = strchr(item, '=');
		if (eq == NULL || eq == item) {
			rc = cli_fail(p, O_RDZV_CONF, "expected KEY=VALUE, got \"%s\"",
				      opt_show(b, sizeof(b), item));
			break;
		}
		*eq = '\0';
		if ((rc = conf_pair(p, item, eq + 1, &timeout_ms, &join_given)) != 0) {
			break;
		}
	}
	free(copy);
out:
	if (rc == 0 && timeout_ms > 0 && !join_given) {
		p->spec->rdzv.join_timeout_ms = timeout_ms;
	}
	return rc;
}
