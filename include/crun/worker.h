/* SPDX-License-Identifier: MIT */
/* include/crun/worker.h: what a worker knows about its job (rank, store, barrier, error file). */
#ifndef CRUN_WORKER_H
#define CRUN_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include <crun/export.h>
#include <crun/store.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The agent (crun) starts every worker with torchrun's environment (RANK, LOCAL_RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
 * TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
 * TORCHELASTIC_ERROR_FILE) plus CRUN_STORE_ENDPOINT, CRUN_STORE_PREFIX, CRUN_STORE_TOKEN and
 * CRUN_BACKEND. The environment is read once, by crun_init() or by the first query
 * (CRUN_GPU_SHARING and CUDA_VISIBLE_DEVICES: by crun_cuda_device() and the nccl backend).
 *
 * Single-process mode: with CRUN_SINGLE=1 in the environment (or opts.single), a program
 * started outside crun runs as rank 0 of 1 with a private "file://" store in a fresh
 * temporary directory that crun_finish() removes. Meant for tests and quick runs.
 */

/* Start from CRUN_INIT_OPTS_INIT (sets struct_size); struct_size 0 means the 0.2.0 layout. */
struct crun_init_opts {
	size_t struct_size;   /* set by CRUN_INIT_OPTS_INIT; 0: the 0.2.0 layout */
	bool single;          /* force single-process mode (as CRUN_SINGLE=1) */
	int store_timeout_ms; /* default deadline of store operations; <=0: 300000 */
};

#ifdef __cplusplus
/* Every field, in order: see CRUN_STORE_OPTS_INIT. */
#define CRUN_INIT_OPTS_INIT { sizeof(struct crun_init_opts), false, 0 }
#else
#define CRUN_INIT_OPTS_INIT { .struct_size = sizeof(struct crun_init_opts) }
#endif

/**
 * Read the environment. After a success later calls return 0 at once (until crun_finish());
 * a failure is not remembered: the next call reads the environment again.
 * @opts may be NULL (defaults). @err (may be NULL) receives a one-line message on failure,
 * e.g. "libcrun-worker: environment: RANK is not set: ...".
 * Returns 0, CRUN_ENOTCRUN (RANK/WORLD_SIZE absent and no single-process mode), CRUN_ECONFIG
 * (a variable does not parse or is out of range), -EINVAL (a garbage opts->struct_size), or
 * -errno (single mode: temp dir).
 * Thread-safe.
 */
CRUN_EXPORT int crun_init(const struct crun_init_opts *opts, char *err, size_t errlen);
/** Close the internal store handle and remove single-mode temp files. Not thread-safe. */
CRUN_EXPORT void crun_finish(void);
/** The message of the last failed crun_init() (static, "" when none). */
CRUN_EXPORT const char *crun_init_error(void);

/*
 * Queries. Each initialises lazily (crun_init(NULL)) and returns the value (>= 0) or the
 * negative crun_init() code. Thread-safe, and cheap after the first call.
 */
CRUN_EXPORT int crun_rank(void);
CRUN_EXPORT int crun_local_rank(void);
CRUN_EXPORT int crun_world_size(void);
CRUN_EXPORT int crun_local_world_size(void);
CRUN_EXPORT int crun_node_rank(void);      /* GROUP_RANK (default 0) */
CRUN_EXPORT int crun_node_count(void);     /* GROUP_WORLD_SIZE (default 1) */
CRUN_EXPORT int crun_restart_count(void);  /* TORCHELASTIC_RESTART_COUNT (default 0) */
CRUN_EXPORT int crun_max_restarts(void);   /* TORCHELASTIC_MAX_RESTARTS (default 0) */
CRUN_EXPORT int crun_master_port(void);    /* MASTER_PORT, or -ENOENT when unset */
/** Borrowed strings valid until crun_finish(); NULL when not initialised or unset. */
CRUN_EXPORT const char *crun_run_id(void);      /* TORCHELASTIC_RUN_ID (default "none") */
CRUN_EXPORT const char *crun_master_addr(void); /* MASTER_ADDR */
CRUN_EXPORT const char *crun_store_endpoint(void); /* CRUN_STORE_ENDPOINT */
CRUN_EXPORT const char *crun_store_key_prefix(void); /* CRUN_STORE_PREFIX (default "") */

/**
 * The CUDA device this process uses: its local rank (crun_local_rank()) among the devices
 * the CUDA runtime sees (CUDA_VISIBLE_DEVICES applies). The one rule for "my device": the
 * nccl backend requires it to be the calling thread's current device when a communicator is
 * created, and the device DDP uses the current device, so call
 * cudaSetDevice(crun_cuda_device(NULL, 0)) first. More local ranks (LOCAL_WORLD_SIZE) than
 * visible devices is refused (NCCL refuses two ranks of one communicator on one GPU) unless
 * CRUN_GPU_SHARING=1, which gives local rank r device r % count. Loads the CUDA runtime
 * (libcrun-worker(3)). Returns the device (>= 0), the crun_init() code, CRUN_EBACKEND (no
 * CUDA runtime, or built without CUDA), CRUN_ENODEV (no device visible, with the cause: no
 * driver, a driver older than the runtime, ...) or CRUN_ECONFIG (more local ranks than
 * devices, or a bad CRUN_GPU_SHARING); @err (may be NULL) receives the message.
 * Thread-safe.
 */
CRUN_EXPORT int crun_cuda_device(char *err, size_t errlen);

/**
 * Open a new handle to the job's store, scoped to this attempt's prefix (CRUN_STORE_PREFIX)
 * and authenticated with CRUN_STORE_TOKEN. *out is owned by the caller (crun_store_close()).
 * Returns 0, the crun_init() code, CRUN_ECONFIG (no CRUN_STORE_ENDPOINT), or a
 * crun_store_open() code; @err (may be NULL) receives a message. Thread-safe (a fresh handle
 * per call; each handle is then used by one thread at a time).
 */
CRUN_EXPORT int crun_worker_store_open(struct crun_store **out, char *err, size_t errlen);

/**
 * Block until every rank of the job has called crun_barrier() the same number of times, or
 * @timeout_ms passes (-ETIMEDOUT; <0: the store's default). Implemented on the store with
 * generation-numbered keys ("crun/barrier/<gen>/..."), so it is reusable. Uses a library-owned
 * store handle opened on first use. Thread-safe (calls are serialised), but every rank must
 * call it in the same order as its other barriers.
 */
CRUN_EXPORT int crun_barrier(int timeout_ms);

/**
 * Tell the agent this worker is alive (crun --worker-timeout): touch the file named in
 * CRUN_HEARTBEAT_FILE. The library does it by itself after every completed collective,
 * crun_barrier() and checkpoint save; call it from long stretches without those (data loading,
 * evaluation, a long step on one rank). Cheap: at most one futimens(2) per 100 ms, the other
 * calls only read a coarse clock. Every call also counts a step in the file's first 8 bytes
 * (a shared mapping, no system call), which the agent reports for the ranks it finds hung. Returns 0 (also when no watchdog is on), or -errno when the
 * file cannot be opened or touched. Thread-safe; async-signal-unsafe. Since CRUN_WORKER_1.2.
 */
CRUN_EXPORT int crun_heartbeat(void);

/**
 * Write TORCHELASTIC_ERROR_FILE in torchrun's JSON shape:
 * {"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "<s>"}}}
 * (@message borrowed, JSON-escaped, bytes that are not well-formed UTF-8 replaced by U+FFFD so
 * the file is always valid JSON; the call stack is this thread's backtrace). Written to a
 * temporary file, fsync'd, then renamed into place, so the agent never reads half a record.
 * Returns 0, -ENOENT when TORCHELASTIC_ERROR_FILE is not set (nothing written), or -errno.
 * Thread-safe.
 */
CRUN_EXPORT int crun_error_record(const char *message);

/**
 * Opt in to a fatal-signal handler: on SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT it writes a
 * minimal error record (signal name, rank, timestamp) using async-signal-safe calls only,
 * restores the default action and re-raises, so the exit status still shows the signal.
 * Runs on an alternate signal stack installed for the calling thread (a stack overflow in that
 * thread is caught too; threads have no alternate stack of their own, so an overflow there
 * ends the process without a record). Returns 0, -ENOENT
 * when TORCHELASTIC_ERROR_FILE is not set (nothing installed), -ENAMETOOLONG, or -errno.
 * Call once from the main thread before starting other threads.
 */
CRUN_EXPORT int crun_error_install_signal_handler(void);

#ifdef __cplusplus
}
#endif

#endif
