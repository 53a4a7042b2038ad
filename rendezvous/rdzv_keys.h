/* SPDX-License-Identifier: MIT */
/* rendezvous/rdzv_keys.h: the job's key schema, composed in one place. The agent, `crun status`,
 * crun-rdzvd and the rendezvous ask these functions; nobody else spells a key of the job. */
#ifndef CRUN_RENDEZVOUS_RDZV_KEYS_H
#define CRUN_RENDEZVOUS_RDZV_KEYS_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/*
 * Every key of run <run> in its store (after the store prefix: "<run>/" on etcd, else none):
 *   rdzv/<run>/...                    the rendezvous (rendezvous/rdzv_internal.h lists them)
 *   rdzv/<run>/end                    the job is over: "done ..." or "budget ..."
 *   rdzv/<run>/status/nodes           appended "<host>:<pid>\n" once per agent
 *   rdzv/<run>/status/node/<id>       that agent's status record (agent/notify_status.h)
 *   <run>/attempt/<R>/                round R's workers (CRUN_STORE_PREFIX, libcrun-worker)
 *   <run>/tcpstore/                   the only keys PyTorch's TCPStore clients (the workers,
 *                                     through the agent store) can reach; under it PyTorch
 *                                     writes "/worker/attempt_<N>/..."
 * The store confines a run-scoped credential to "rdzv/<run>/" and "<run>/"
 * (rendezvous/store/server_auth.c, docs/security.md), and counts what is stored under them
 * against the run's quotas by this same schema: "<run>/tcpstore/" against its TCPStore
 * namespace's, the rest against its scope's (ks_key_account() in rendezvous/store/keyspace.h;
 * change both together).
 *
 * Each function writes the NUL-terminated key into @buf (@cap bytes) and returns 0, or
 * -ENAMETOOLONG when it does not fit (@buf then holds a truncated key: do not use it).
 */

static inline int rdzv_key_fmt(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static inline int rdzv_key_fmt(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	return n >= 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

/** "rdzv/<run>/": the rendezvous handle's prefix; every rendezvous key is under it. */
static inline int rdzv_key_run(char *buf, size_t cap, const char *run)
{
	return rdzv_key_fmt(buf, cap, "rdzv/%s/", run);
}

/** "rdzv/<run>/end": how the job ended, once it has. */
static inline int rdzv_key_end(char *buf, size_t cap, const char *run)
{
	return rdzv_key_fmt(buf, cap, "rdzv/%s/end", run);
}

/** "rdzv/<run>/status/nodes": the index of the agents' status records. */
static inline int rdzv_key_status_index(char *buf, size_t cap, const char *run)
{
	return rdzv_key_fmt(buf, cap, "rdzv/%s/status/nodes", run);
}

/** "rdzv/<run>/status/node/<id>": one agent's status record (@id: "<host>:<pid>"). */
static inline int rdzv_key_status_node(char *buf, size_t cap, const char *run, const char *id)
{
	return rdzv_key_fmt(buf, cap, "rdzv/%s/status/node/%s", run, id);
}

/** "rdzv/<run>/status/hist/<id>": one agent's history, an event a line (notify_status.h). */
static inline int rdzv_key_status_hist(char *buf, size_t cap, const char *run, const char *id)
{
	return rdzv_key_fmt(buf, cap, "rdzv/%s/status/hist/%s", run, id);
}

/** "<base><run>/attempt/<round>/": round @round's workers' keys (@base: the store prefix). */
static inline int rdzv_key_workers(char *buf, size_t cap, const char *base, const char *run,
				   int round)
{
	return rdzv_key_fmt(buf, cap, "%s%s/attempt/%d/", base, run, round);
}

/** "<run>/tcpstore/": where PyTorch's TCPStore clients of run @run are confined. */
static inline int rdzv_key_tcpstore(char *buf, size_t cap, const char *run)
{
	return rdzv_key_fmt(buf, cap, "%s/tcpstore/", run);
}

#endif
