/* SPDX-License-Identifier: MIT */
/* include/crun/ddp.h: data-parallel training: gradient buckets, sharded sampler, checkpoints. */
#ifndef CRUN_DDP_H
#define CRUN_DDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/export.h>
#include <crun/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * DDP. Register every parameter tensor (float32 parameter and gradient arrays of n elements,
 * both borrowed: they must outlive the crun_ddp). Tensors are grouped into buckets in REVERSE
 * registration order (the order backward produces gradients): the first bucket is capped at
 * first_bucket_bytes, the others at bucket_cap_bytes. During backward, call
 * crun_ddp_grad_ready() for each tensor whose gradient is final; when a bucket is complete its
 * allreduce starts at once on the DDP's communication thread (overlap with the rest of
 * backward). Buckets are always reduced in bucket order, so ranks that mark gradients in
 * different orders still agree; a bucket that becomes ready is started at once, whatever is
 * still in flight. crun_ddp_sync() waits for every bucket; afterwards every gradient holds
 * the average over the world.
 *
 * Every rank must register the same tensor sizes in the same order with the same caps. The
 * call that builds the buckets (the first crun_ddp_broadcast_params(), crun_ddp_grad_ready()
 * or crun_ddp_sync()) checks it with one allgather of a fixed-size plan summary on the
 * communicator, so every rank must get there; a plan that differs fails on every rank with
 * CRUN_ECONFIG, and crun_ddp_last_error() names this rank's plan and the first different
 * rank's (tensor count, floats, buckets, caps, a hash of it all). The DDP stays failed.
 *
 * Memory. One engine serves host and device memory; opts->memory says which:
 * - CRUN_DDP_MEMORY_HOST (the default): host arrays, any communicator but nccl. A bucket is
 *   summed by crun_comm_allreduce() on the communication thread and scaled by 1/world.
 * - CRUN_DDP_MEMORY_CUDA: CUDA device arrays over an nccl communicator (libcrun-worker loads
 *   the CUDA runtime and NCCL at run time; built without them, CRUN_EBACKEND).
 *   crun_ddp_grad_ready() records a CUDA event on the program's compute stream (see
 *   crun_ddp_set_stream(); the kernels producing the gradient may still be running); the
 *   communication thread makes the communicator's own stream wait for the bucket's events and
 *   averages it there with ncclAllReduce, while the program keeps enqueuing backward; the
 *   copies and collectives of ready buckets are queued one after the other on that stream
 *   and waited for once, after the step's last bucket. crun_ddp_sync() returns once every
 *   bucket is averaged on the device: kernels enqueued afterwards on any stream see the
 *   result. crun_ddp_broadcast_params() first waits for the compute stream. Buckets whose
 *   tensors are not back to back go through a flat device buffer (device-to-device copies on
 *   the communicator's stream). The DDP uses the device that was current when it was
 *   created; a call made on a thread whose current device is another one switches to the
 *   DDP's for its CUDA calls and back before it returns.
 * Public headers stay free of CUDA types: a stream is a cudaStream_t passed as void *.
 *
 * Thread safety: crun_ddp_register(), crun_ddp_broadcast_params(), crun_ddp_sync(),
 * crun_ddp_set_no_sync(), crun_ddp_set_stream() and crun_ddp_destroy() are called by one
 * training thread. crun_ddp_grad_ready() may be called from any thread. The DDP's thread uses
 * the communicator only while a step is in flight (from the first crun_ddp_grad_ready() to
 * the return of crun_ddp_sync()); between steps the training thread may use it for its own
 * collectives. While a step is in flight the program must not use the communicator at all:
 * its collectives would run beside the DDP's buckets (with NCCL: two threads' calls on one
 * communicator and its stream, which NCCL does not allow) and could pair with a bucket of
 * another rank, a hang or wrong sums. Use a second communicator for the program's own
 * collectives during backward (examples/train_gpu reduces its host scalars on a cpu one).
 */
struct crun_ddp;

enum crun_ddp_memory {
	CRUN_DDP_MEMORY_HOST = 0, /* host arrays; a cpu communicator */
	CRUN_DDP_MEMORY_CUDA = 1, /* CUDA device arrays; an nccl communicator */
};

/*
 * Options. struct_size is sizeof(struct crun_ddp_opts) as the caller was compiled (set it
 * with CRUN_DDP_OPTS_INIT), so the struct can grow at its end without breaking callers; 0
 * means the 0.2.0 layout (the fields below), so a zeroed struct or designated initialisers
 * ({.bucket_cap_bytes = ...}) keep working. Fields a caller does not know stay at their
 * default.
 */
struct crun_ddp_opts {
	size_t struct_size;          /* sizeof(struct crun_ddp_opts), or 0: the 0.2.0 layout */
	size_t bucket_cap_bytes;     /* 0: 25 MiB */
	size_t first_bucket_bytes;   /* 0: 1 MiB */
	enum crun_ddp_memory memory; /* where parameters and gradients live; 0: host */
};

/* struct crun_ddp_opts o = CRUN_DDP_OPTS_INIT; (C and C++) */
#define CRUN_DDP_OPTS_INIT {sizeof(struct crun_ddp_opts), 0, 0, CRUN_DDP_MEMORY_HOST}

/**
 * @comm borrowed (must outlive the DDP); @opts may be NULL (defaults: host memory).
 * *out owned by the caller (crun_ddp_destroy()). Returns 0, -EINVAL (NULL @comm or @out, an
 * unknown memory kind, a struct_size smaller than two fields), -ENOMEM, -EAGAIN (no thread),
 * CRUN_EBACKEND (host memory with an nccl communicator, CUDA memory with another one, or
 * CUDA memory in a build without CUDA/NCCL) or CRUN_ECUDA (crun_ddp_last_error() says why).
 * With CUDA memory the calling thread's current device is the one the DDP uses.
 */
CRUN_EXPORT int crun_ddp_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				struct crun_ddp **out);
/**
 * Stop the communication thread and free; NULL is a no-op. A bucket whose allreduce is in
 * flight, or a synced step's collectives still on the device, are waited for (bounded by the
 * communicator's timeout; a failure no call returned is logged); buckets not yet started are
 * dropped. Call it from the training thread, not concurrently with crun_ddp_grad_ready().
 */
CRUN_EXPORT void crun_ddp_destroy(struct crun_ddp *d);
/**
 * Register a tensor of @n floats (@param, @grad borrowed). Returns its index (>= 0, in
 * registration order), -EINVAL, -EBUSY (after the first broadcast/grad_ready/sync), -ENOMEM,
 * or CRUN_ECUDA (CUDA memory: no event).
 */
CRUN_EXPORT int crun_ddp_register(struct crun_ddp *d, float *param, float *grad, size_t n);
/**
 * Broadcast every parameter from rank 0 so all replicas start equal (builds the buckets).
 * Call it between steps. Returns 0, -EINVAL (nothing registered), -ENOMEM, -EBUSY (a step is
 * in flight: a gradient of this step is marked ready; crun_ddp_last_error() says how many;
 * call crun_ddp_sync() first), CRUN_ECONFIG (the ranks' bucket plans differ), the DDP's
 * sticky error, CRUN_ECUDA, or a communication code.
 */
CRUN_EXPORT int crun_ddp_broadcast_params(struct crun_ddp *d);
/**
 * Tensor @index's gradient is final for this step (do not write it until crun_ddp_sync()
 * returns; CUDA memory: final once the work enqueued so far on the compute stream completes).
 * Returns 0, -EINVAL (bad index, or nothing registered), -EALREADY (marked twice in one step),
 * -ENOMEM (building the buckets), CRUN_ECONFIG (the ranks' bucket plans differ), a
 * communication code (the plan check) or CRUN_ECUDA. A no-op returning 0 in no_sync mode.
 */
CRUN_EXPORT int crun_ddp_grad_ready(struct crun_ddp *d, int index);
/**
 * Mark any gradient not yet marked ready, wait for every bucket's allreduce, and average.
 * In no_sync mode: returns 0 at once, gradients stay local (accumulate them). Returns 0 or the
 * first error of the step, a collective's or CRUN_ECUDA (the DDP is then unusable: destroy it;
 * crun_ddp_last_error() says what failed).
 *
 * CUDA memory: the host does not wait for the data. Once every bucket's allreduce is queued
 * on the communicator's stream, the compute stream (crun_ddp_set_stream()'s) is made to wait
 * for them on the device (an event, cudaStreamWaitEvent) and this returns: work the program
 * then queues on the compute stream sees the averaged gradients; the host must not read
 * them before that stream (or crun_ddp_wait()) says so. A failure of those collectives (an
 * asynchronous NCCL error, or no completion within the communicator's timeout, which aborts
 * it) is seen by the DDP's thread after this returned: it is returned, naming the step
 * ("step N", counting syncs from 1), by the first crun_ddp_sync(), crun_ddp_wait() or
 * crun_ddp_broadcast_params() that follows its detection (at the latest, the one after the
 * communicator's timeout has run out), and logged by crun_ddp_destroy() if no call returned
 * it. Host memory: complete on return, as always.
 */
CRUN_EXPORT int crun_ddp_sync(struct crun_ddp *d);
/**
 * CUDA memory: wait on the host until the collectives of the steps synced so far have
 * completed on the device (at most the communicator's timeout after the last sync; says
 * every 5 s what it waits for), e.g. before reading gradients on the host or saving a
 * checkpoint. Returns 0, a failure of those collectives (as crun_ddp_sync() would report
 * it), the DDP's sticky error, -EBUSY (a step is in flight: call crun_ddp_sync() first),
 * -ETIMEDOUT (the DDP's thread is stuck) or -EINVAL (NULL). Host memory: returns the sticky
 * error (0) at once.
 */
CRUN_EXPORT int crun_ddp_wait(struct crun_ddp *d);
/**
 * Enter (@on) or leave no_sync mode (gradient accumulation without communication). It takes
 * effect at a step boundary: a step already in flight (a gradient marked ready) is still
 * completed and reduced by the next crun_ddp_sync().
 */
CRUN_EXPORT void crun_ddp_set_no_sync(struct crun_ddp *d, bool on);
/**
 * CUDA memory: the program computes gradients on @stream (a cudaStream_t, borrowed; NULL, the
 * default after crun_ddp_create(): the legacy default stream). Events for later
 * crun_ddp_grad_ready() calls are recorded there, and crun_ddp_broadcast_params() waits for
 * it. Call it between steps. Returns 0, -EINVAL (NULL @d) or CRUN_EBACKEND (host memory).
 */
CRUN_EXPORT int crun_ddp_set_stream(struct crun_ddp *d, void *stream);
/** Number of buckets (after the first broadcast/grad_ready/sync; 0 before, or for NULL). */
CRUN_EXPORT int crun_ddp_bucket_count(const struct crun_ddp *d);
/**
 * Buckets whose allreduce has completed in the current step (0 .. bucket count): lets a
 * program (or a test) see communication finish while backward is still running. Host memory
 * counts each bucket as it completes; CUDA memory queues the buckets on the device and counts
 * them all when the step's last one is queued and the compute stream made to wait for it.
 */
CRUN_EXPORT int crun_ddp_buckets_reduced(struct crun_ddp *d);
/** Index of the bucket holding tensor @index, or -EINVAL. */
CRUN_EXPORT int crun_ddp_bucket_of(const struct crun_ddp *d, int index);
/**
 * The message of the DDP's last failure, "<where>: <what>: <why>" (a CUDA call, a collective),
 * or "" when none (or for NULL). Borrowed; valid until the next call on @d.
 */
CRUN_EXPORT const char *crun_ddp_last_error(const struct crun_ddp *d);

/*
 * Sampler, as torch's DistributedSampler: the epoch's order is a permutation of [0, len)
 * determined by seed + epoch (identity when !shuffle); without drop_last it is padded by
 * wrapping around to a multiple of the world size, with drop_last the tail is trimmed; rank r
 * takes positions r, r + world, r + 2 world, ...  The permutation is torch.randperm's on the
 * CPU (MT19937 seeded with the low 32 bits of seed + epoch), so a rank gets the same indices
 * as DistributedSampler(seed=seed, num_replicas=world, rank=rank, drop_last=drop_last) after
 * set_epoch(epoch) (checked against torch 1.13; for datasets below 2^32/20 samples, where
 * torch 2.x keeps that algorithm). One difference: with drop_last and fewer samples than
 * ranks torch yields empty shards, crun_sampler_init() returns -EINVAL. Pure computation,
 * thread-safe.
 */
struct crun_sampler {
	size_t dataset_len;
	int rank;
	int world;
	uint64_t seed;
	bool shuffle;
	bool drop_last;
	size_t num_samples; /* per rank */
	size_t total_size;  /* num_samples * world */
};

/** Returns 0 or -EINVAL (world < 1, rank out of range, empty dataset with drop_last...). */
CRUN_EXPORT int crun_sampler_init(struct crun_sampler *s, size_t dataset_len, int rank,
				  int world, uint64_t seed, bool shuffle, bool drop_last);
/** Fill @out (num_samples entries) with this rank's indices for @epoch. 0, -EINVAL or -ENOMEM. */
CRUN_EXPORT int crun_sampler_indices(const struct crun_sampler *s, uint64_t epoch, size_t *out);

/*
 * Checkpoints. A checkpoint is a list of segments (e.g. parameters, optimiser state) in one
 * file "<dir>/ckpt-<step>.bin" with a header (magic, version, epoch, step, segment sizes, CRC-32
 * of the payload and of the header). Rank 0 writes a temporary file, fsyncs it, renames it
 * into place and fsyncs the directory; then every rank meets in crun_barrier(), so when
 * crun_checkpoint_save() returns on any rank the checkpoint is durable. The two newest
 * checkpoints that validate are kept, the one just written always among them: a file that fails
 * validation is removed and never pushes a valid one out. Temporary files left by a writer
 * killed mid-write are removed by the next save and never carry a checkpoint's name, so an
 * interrupted write never leaves a file that validates. The temporary file is never opened
 * through a link or under a name someone else made (O_TMPFILE, else a random name with
 * O_EXCL|O_NOFOLLOW); a directory others could write is refused (docs/security.md, "Files").
 */
struct crun_ckpt_seg {
	void *data; /* borrowed: read by save, written by load */
	size_t len;
};

/**
 * Save (rank 0 writes; all ranks call). @dir is created if missing, with its parents; @segs
 * borrowed. Returns 0, -EINVAL (NULL @dir, more than 1024 segments), -EPERM (@dir is owned by
 * another user than us or root, or anyone may write it and it has no sticky bit: refused with
 * a line on stderr naming it and its mode), a crun_init() code,
 * -errno (rank 0's file system error; the other ranks still return after the barrier), or a
 * barrier error (-ETIMEDOUT after @timeout_ms).
 */
CRUN_EXPORT int crun_checkpoint_save(const char *dir, uint64_t epoch, uint64_t step,
				     const struct crun_ckpt_seg *segs, size_t nsegs,
				     int timeout_ms);
/**
 * Load one file. Returns 0, -ENOENT, -EBADMSG (bad magic, checksum, truncated), -EPROTO
 * (unsupported version) or -EINVAL (segment count or sizes differ from @segs).
 * On failure the segments may be partly overwritten.
 */
CRUN_EXPORT int crun_checkpoint_load(const char *path, uint64_t *epoch, uint64_t *step,
				     const struct crun_ckpt_seg *segs, size_t nsegs);
/**
 * Load the newest valid checkpoint in @dir (newer files that fail validation are skipped with
 * a warning on stderr). Returns 0 (loaded), -ENOENT (none: start fresh), or another code.
 * @path (may be NULL) receives the file's path. This rank alone decides: to resume a job, use
 * crun_checkpoint_resume(), which makes every rank load the same file.
 */
CRUN_EXPORT int crun_checkpoint_load_latest(const char *dir, uint64_t *epoch, uint64_t *step,
					    const struct crun_ckpt_seg *segs, size_t nsegs,
					    char *path, size_t pathlen);
/**
 * Resume the job (every rank calls; a collective): rank 0 chooses the newest checkpoint of
 * @dir it can load (as crun_checkpoint_load_latest()) and publishes its file name on the job's
 * store; every other rank loads exactly that file from its own @dir, so ranks whose @dir
 * differ (node-local disks after a partition) still resume the same step. Then every rank
 * meets the others (crun_barrier()), so either all ranks loaded it or all fail.
 * Returns 0 (loaded; @path, may be NULL, receives the file's path), -ENOENT (rank 0 has no
 * checkpoint: every rank starts fresh, whatever its own @dir holds), -EINVAL and the other
 * codes of crun_checkpoint_load() for rank 0's own failure (on every rank), CRUN_EPEERFAIL
 * when some rank could not load rank 0's choice (on every rank), or a store or barrier error
 * (-ETIMEDOUT after @timeout_ms). On failure @err (may be NULL) receives the reason, naming
 * the file and the rank ("checkpoint resume: rank 3 cannot load DIR/ckpt-...bin (chosen by
 * rank 0): No such file or directory"). Single-process and one-rank jobs just load locally.
 * Since CRUN_WORKER_1.2. Not thread-safe: one resume at a time, in the same order on every
 * rank.
 */
CRUN_EXPORT int crun_checkpoint_resume(const char *dir, uint64_t *epoch, uint64_t *step,
				       const struct crun_ckpt_seg *segs, size_t nsegs, char *path,
				       size_t pathlen, char *err, size_t errlen, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
