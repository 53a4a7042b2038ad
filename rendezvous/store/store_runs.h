/* SPDX-License-Identifier: MIT */
/* rendezvous/store/store_runs.h: the runs a shared store holds (LIST_RUNS, docs/protocol.md). */
#ifndef CRUN_RENDEZVOUS_STORE_STORE_RUNS_H
#define CRUN_RENDEZVOUS_STORE_STORE_RUNS_H

#include <stdint.h>

struct crun_store;

/* One run the store holds keys of, as the store knows it without reading a key. */
struct store_run {
	char id[129];	   /* the run id (its scope: rdzv/<id>/ and <id>/) */
	int64_t keys;	   /* present keys, its TCPStore namespace's included */
	int64_t bytes;	   /* their key + value bytes */
	int64_t wrote_ms;  /* wall-clock ms of its last write on the store (0: unknown) */
};

/**
 * The runs @st's store holds: at most @max (0: the server's cap), newest write first, into
 * *@runs (malloc'd, *@n of them; the caller frees) and *@total, how many there are in all.
 * A run-scoped connection sees only its run. Returns 0; -EOPNOTSUPP where the backend or the
 * server cannot list runs (file, etcd, a crun-rdzvd without LIST_RUNS); or the store's error
 * (store_last_error() says it).
 */
int store_list_runs(struct crun_store *st, uint32_t max, struct store_run **runs, uint32_t *n,
		    uint32_t *total);

#endif
