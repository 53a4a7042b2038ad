/* SPDX-License-Identifier: MIT */
/* tests/conformance/etcd_fixture.h: a real single-member etcd on loopback for the tests. */
#ifndef CRUN_TESTS_CONFORMANCE_ETCD_FIXTURE_H
#define CRUN_TESTS_CONFORMANCE_ETCD_FIXTURE_H

#include <stdbool.h>
#include <sys/types.h>

struct etcd_proc {
	/* Set before etcd_proc_start() (zero: defaults). */
	const char *const *args; /* more etcd flags, NULL-terminated; NULL: none */
	bool tls;                /* https for clients: pass --cert-file and --key-file in args */
	/* Set by etcd_proc_start(). */
	pid_t pid;          /* -1: not running */
	int port;           /* its client port on 127.0.0.1 */
	char dir[256];      /* data directory and log, removed by etcd_proc_stop() */
	char endpoint[64];  /* "etcd://127.0.0.1:PORT" ("etcd+https://..." with tls) */
};

/**
 * Whether this build has the etcd backend and @etcd_bin runs; false with the reason on
 * stderr (the caller then exits 77).
 */
bool etcd_proc_available(const char *etcd_bin);
/**
 * Start etcd @etcd_bin on two free loopback ports, in a fresh data directory (on /dev/shm when
 * there is one: etcd fsyncs every write), with crun's limits (16 MiB values: a larger
 * --max-request-bytes), and wait until it answers through crun_store_open() (up to 20 s: the
 * environment must let it in, CRUN_ETCD_* included). Returns 0 or -1 (etcd's log is printed).
 */
int etcd_proc_start(const char *etcd_bin, struct etcd_proc *p);
/** SIGTERM (SIGKILL after 10 s) by PID, then remove its directory. A stopped one is a no-op. */
void etcd_proc_stop(struct etcd_proc *p);
/** A loopback port held by a socket bound but not listening (*@fd, the caller closes it):
 * connections to it are refused, and no one else is given it meanwhile. */
int etcd_closed_port(int *fd);

#endif
