/* SPDX-License-Identifier: MIT */
/* agent/etcd.h: what an agent does differently on an etcd job: environment, key prefix, cleanup. */
#ifndef CRUN_AGENT_ETCD_H
#define CRUN_AGENT_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "agent/jobspec.h"
#include "src/common/diag.h"

/**
 * Before any thread starts: export the spec's etcd settings (--rdzv-conf cacert, cert, key,
 * user, password_file) as CRUN_ETCD_CACERT, CRUN_ETCD_CERT, CRUN_ETCD_KEY, CRUN_ETCD_USER and
 * CRUN_ETCD_PASSWORD_FILE, over what the environment already says. The store backend reads them
 * in this process, and every worker inherits them, so libcrun-worker's store works the same
 * way. CRUN_STORE_TOKEN is dropped with a warning: etcd authenticates with its own users.
 * Returns 0 or -ENOMEM.
 */
int agent_etcd_env(const struct job_spec *spec, struct crun_diag *d);

/** The store prefix of an etcd job, "<run_id>/": every key of the job lives under it. */
void agent_etcd_prefix(const struct job_spec *spec, char *buf, size_t cap);

/**
 * The job is over for every node and this node was a member of its last round (@members
 * nodes); @left_rc is what rdzv_wait_left() said. Delete the job's keys (everything under its
 * prefix) once no member can still be waiting on one: every member counts itself in "left"
 * after its wait returned, and the last one deletes. A member whose wait timed out (another
 * never came) deletes at once. Failures are logged with the command that deletes by hand.
 */
void agent_etcd_forget(const struct job_spec *spec, const char *endpoint, int members,
		       int left_rc, int64_t timeout_ms);

#endif
