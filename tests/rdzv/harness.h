/* SPDX-License-Identifier: MIT */
/* tests/rdzv/harness.h: start a real store (crun-rdzvd or a file) for rendezvous tests. */
#ifndef CRUN_TESTS_RDZV_HARNESS_H
#define CRUN_TESTS_RDZV_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

struct store_fixture {
	bool file;	    /* file backend: endpoint is file://<dir>/<name> */
	pid_t pid;	    /* crun-rdzvd, 0 for the file backend */
	char dir[256];	    /* temp dir of the file backend */
	char endpoint[512]; /* "127.0.0.1:PORT" (tcp); per-test file endpoints come from below */
};

/**
 * Start crun-rdzvd @rdzvd --listen 127.0.0.1:0 (backend "tcp") and read its bound address, or
 * make a temp dir (backend "file"). Returns 0 or -1 with a message on stderr.
 */
int fixture_start(struct store_fixture *f, const char *backend, const char *rdzvd,
		  const char *const *extra_args);
/** The endpoint for one test: the daemon, or a fresh file named @name in the temp dir. */
void fixture_endpoint(const struct store_fixture *f, const char *name, char *out, size_t cap);
/** SIGTERM the daemon (SIGKILL after 5 s) and reap it; remove the temp dir and its files. */
void fixture_stop(struct store_fixture *f);

#endif
