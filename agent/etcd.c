/* SPDX-License-Identifier: MIT */
/* agent/etcd.c: what an agent does differently on an etcd job: environment, key prefix, cleanup. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <crun/error.h>
#include <crun/store.h>

#include "agent/etcd.h"
#include "agent/spawn.h"
#include "rendezvous/store/backend.h"
#include "src/common/log.h"

int agent_etcd_env(const struct job_spec *spec, struct crun_diag *d)
{
	const struct spawn_inherit vars[] = {
		{"CRUN_ETCD_CACERT", spec->etcd_cacert},
		{"CRUN_ETCD_CERT", spec->etcd_cert},
		{"CRUN_ETCD_KEY", spec->etcd_key},
		{"CRUN_ETCD_USER", spec->etcd_user},
		{"CRUN_ETCD_PASSWORD_FILE", spec->etcd_password_file},
	};
	const char *tok = getenv("CRUN_STORE_TOKEN");
	int rc;

	if (spec->etcd_v2_name) {
		log_info("--rdzv-backend etcd-v2: crun speaks etcd's v3 API (etcd 3.4 and later), "
			 "the same as --rdzv-backend etcd");
	}
	/* Values the user exported stay: workers read them when crun was given none. */
	rc = spawn_inherit_env(vars, ARRAY_SIZE(vars), false, d);
	if (rc < 0) {
		return rc;
	}
	if (tok != NULL) {
		if (tok[0] != '\0') {
			log_warn("CRUN_STORE_TOKEN is not used with etcd (etcd checks its own "
				 "users and TLS: --rdzv-conf user=,password_file=,cacert=,cert=,"
				 "key=); workers do not get it");
		}
		unsetenv("CRUN_STORE_TOKEN");
	}
	return 0;
}

void agent_etcd_prefix(const struct job_spec *spec, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/", spec->rdzv_id);
}

void agent_etcd_forget(const struct job_spec *spec, const char *endpoint, int members,
		       int left_rc, int64_t timeout_ms)
{
	struct crun_store_opts o = CRUN_STORE_OPTS_INIT;
	struct crun_store *st = NULL;
	char prefix[256], err[256] = "";
	int64_t left = 0;
	int rc;

	agent_etcd_prefix(spec, prefix, sizeof(prefix));
	o.endpoint = endpoint;
	o.prefix = prefix;
	o.connect_timeout_ms = (int)timeout_ms;
	o.timeout_ms = (int)timeout_ms;
	rc = crun_store_open(&o, &st, err, sizeof(err));
	if (rc == 0 && left_rc == 0) {
		/* Everyone has read the end; only the last to say so may delete what they read. */
		rc = crun_store_add(st, "left", 1, &left);
		if (rc == 0 && left < members) {
			log_debug("etcd: %lld of %d nodes left; the last deletes the job's keys",
				  (long long)left, members);
			crun_store_close(st);
			return;
		}
	}
	if (rc == 0) {
		rc = store_delete_prefix(st);
	}
	if (rc < 0) {
		log_warn("etcd: could not delete the job's keys: %s; delete them by hand: "
			 "etcdctl del --prefix /crun/%s",
			 err[0] != '\0' ? err : crun_strerror(rc), prefix);
	} else {
		log_debug("etcd: deleted the job's keys (/crun/%s)", prefix);
	}
	crun_store_close(st);
}
