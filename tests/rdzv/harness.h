/* SPDX-License-Identifier: MIT */
/* tests/rdzv/harness.h: start a real store (crun-rdzvd, a file or etcd) for rendezvous tests. */
#ifndef CRUN_TESTS_RDZV_HARNESS_H
#define CRUN_TESTS_RDZV_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "tests/conformance/etcd_fixture.h"

struct store_fixture {
	bool file;	    /* file backend: endpoint is file://<dir>/<name> */
	bool etcd;	    /* one etcd member: endpoint is etcd://127.0.0.1:PORT */
	pid_t pid;	    /* crun-rdzvd or etcd, 0 for the file backend */
	char dir[256];	    /* temp dir of the file backend */
	char endpoint[512]; /* "127.0.0.1:PORT" (tcp); per-test file endpoints come from below */
	struct etcd_proc member; /* etcd: tests/conformance's fixture */
};

/* fixture_start()'s answer when etcd cannot be tested here (as meson's skip status). */
#define FIXTURE_SKIP 77

/**
 * Start crun-rdzvd @server --listen 127.0.0.1:0 (backend "tcp") and read its bound address;
 * make a temp dir (backend "file"); or start the etcd binary @server as a one-member cluster
 * on 127.0.0.1 (backend "etcd", tests/conformance/etcd_fixture.h). Returns 0, FIXTURE_SKIP
 * (no etcd binary, or crun built without its etcd backend; says so on stderr) or -1 with a
 * message on stderr.
 */
int fixture_start(struct store_fixture *f, const char *backend, const char *server,
		  const char *const *extra_args);
/** The endpoint for one test: the daemon, or a fresh file named @name in the temp dir. */
void fixture_endpoint(const struct store_fixture *f, const char *name, char *out, size_t cap);
/** SIGTERM the server (SIGKILL after 5 s) and reap it; remove the temp dir and its files. */
void fixture_stop(struct store_fixture *f);

struct store_settings;
struct rdzv_conf;
struct rdzv;
struct crun_diag;
/** rdzv_create() from plain settings (no token policy: what the settings say). */
int harness_rdzv_create(const struct store_settings *s, const struct rdzv_conf *c,
			struct rdzv **r, struct crun_diag *d);

#endif
