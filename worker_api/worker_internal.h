/* SPDX-License-Identifier: MIT */
/* worker_api/worker_internal.h: state shared by the libcrun-worker core files (private). */
#ifndef CRUN_WORKER_API_WORKER_INTERNAL_H
#define CRUN_WORKER_API_WORKER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

/* What the environment said, read once by crun_init(). */
struct worker_env {
	int rank;
	int local_rank;
	int world_size;
	int local_world_size;
	int node_rank;
	int node_count;
	int restart_count;
	int max_restarts;
	int master_port; /* -ENOENT when unset */
	char *run_id;
	char *master_addr;
	char *store_endpoint;
	char *store_prefix;
	char *store_token;      /* CRUN_STORE_TOKEN: compatibility; crun never sets it */
	char *store_token_file; /* CRUN_STORE_TOKEN_FILE: what crun gives its workers */
	char *store_tls_ca;     /* CRUN_STORE_TLS_*: paths of the TLS files crun was given */
	char *store_tls_cert;
	char *store_tls_key;
	char *store_tls_server_name;
	char *error_file;
	char *single_dir; /* single mode: the private temp dir, removed by crun_finish() */
	int store_timeout_ms;
	bool single;
};

/** Initialise if needed; returns the environment or NULL (then *rc holds the code). */
const struct worker_env *worker_env_get(int *rc);

/** Touch the heartbeat file (crun_heartbeat()), ignoring errors: after every collective. */
void worker_heartbeat(void);

/** Close the library-owned store handle used by crun_barrier() (store.c). */
void worker_store_finish(void);

#endif
