/* SPDX-License-Identifier: MIT */
/* include/crun/ddp.h: data-parallel training: gradient buckets, sharded sampler, checkpoints. */
#ifndef CRUN_DDP_H
#define CRUN_DDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/export.h>
#include <crun/comm.h>

/*
 * DDP. Register every parameter tensor (float32 parameter and gradient arrays of n elements,
 * both borrowed: they must outlive the crun_ddp). Tensors are grouped into buckets in REVERSE
 * registration order (the order backward produces gradients): the first bucket is capped at
 * first_bucket_bytes, the others at bucket_cap_bytes. During backward, call
 * crun_ddp_grad_ready() for each tensor whose gradient is final; when a bucket is complete its
 * allreduce starts at once on the DDP's communication thread (overlap with the rest of
 * backward). Buckets are always reduced in bucket order, so ranks that mark gradients in
 * different orders still agree. crun_ddp_sync() waits for every bucket; afterwards every
 * gradient holds the average over the world.
 *
 * Thread safety: crun_ddp_register(), crun_ddp_broadcast_params(), crun_ddp_sync(),
 * crun_ddp_set_no_sync() and crun_ddp_destroy() are called by one training thread.
 * crun_ddp_grad_ready() may be called from any thread. The DDP's thread uses the communicator
 * only while a step is in flight (from the first crun_ddp_grad_ready() to the return of
 * crun_ddp_sync()); between steps the training thread may use it for its own collectives.
 */
struct crun_ddp;

struct crun_ddp_opts {
	size_t bucket_cap_bytes;   /* 0: 25 MiB */
	size_t first_bucket_bytes; /* 0: 1 MiB */
};

/**
 * @comm borrowed (must outlive the DDP); @opts may be NULL (defaults). *out owned by the caller
 * (crun_ddp_destroy()). Returns 0, -EINVAL, -ENOMEM, -EAGAIN (no thread), or CRUN_EBACKEND
 * for an NCCL communicator (the reducer works on host memory).
 */
CRUN_EXPORT int crun_ddp_create(struct crun_comm *comm, const struct crun_ddp_opts *opts,
				struct crun_ddp **out);
/**
 * Stop the communication thread and free; NULL is a no-op. A bucket whose allreduce is in
 * flight is waited for (bounded by the communicator's timeout); buckets not yet started are
 * dropped. Call it from the training thread, not concurrently with crun_ddp_grad_ready().
 */
CRUN_EXPORT void crun_ddp_destroy(struct crun_ddp *d);
/**
 * Register a tensor of @n floats (@param, @grad borrowed). Returns its index (>= 0, in
 * registration order), -EINVAL, -EBUSY (after the first broadcast/grad_ready/sync), -ENOMEM.
 */
CRUN_EXPORT int crun_ddp_register(struct crun_ddp *d, float *param, float *grad, size_t n);
/**
 * Broadcast every parameter from rank 0 so all replicas start equal (builds the buckets).
 * Call it between steps. Returns 0, -EINVAL (nothing registered), -ENOMEM, -EBUSY (a step is
 * in flight), the DDP's sticky error, or a communication code.
 */
CRUN_EXPORT int crun_ddp_broadcast_params(struct crun_ddp *d);
/**
 * Tensor @index's gradient is final for this step (do not write it until crun_ddp_sync()
 * returns). Returns 0, -EINVAL (bad index, or nothing registered), -EALREADY (marked twice in
 * one step) or -ENOMEM (building the buckets). A no-op returning 0 in no_sync mode.
 */
CRUN_EXPORT int crun_ddp_grad_ready(struct crun_ddp *d, int index);
/**
 * Mark any gradient not yet marked ready, wait for every bucket's allreduce, and average.
 * In no_sync mode: returns 0 at once, gradients stay local (accumulate them). Returns 0 or the
 * first communication error (the DDP is then unusable: destroy it).
 */
CRUN_EXPORT int crun_ddp_sync(struct crun_ddp *d);
/**
 * Enter (@on) or leave no_sync mode (gradient accumulation without communication). It takes
 * effect at a step boundary: a step already in flight (a gradient marked ready) is still
 * completed and reduced by the next crun_ddp_sync().
 */
CRUN_EXPORT void crun_ddp_set_no_sync(struct crun_ddp *d, bool on);
/*
 * The DDP must not be NULL for the functions below (nor for crun_ddp_set_no_sync()).
 * Number of buckets (after the first broadcast/grad_ready/sync; 0 before).
 */
CRUN_EXPORT int crun_ddp_bucket_count(const struct crun_ddp *d);
/**
 * Buckets whose allreduce has completed in the current step (0 .. bucket count): lets a
 * program (or a test) see communication finish while backward is still running.
 */
CRUN_EXPORT int crun_ddp_buckets_reduced(struct crun_ddp *d);
/** Index of the bucket holding tensor @index, or -EINVAL. */
CRUN_EXPORT int crun_ddp_bucket_of(const struct crun_ddp *d, int index);

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
 * checkpoints are kept; temporary files left by a writer killed mid-write are removed by the
 * next save.
 */
struct crun_ckpt_seg {
	void *data; /* borrowed: read by save, written by load */
	size_t len;
};

/**
 * Save (rank 0 writes; all ranks call). @dir is created if missing, with its parents; @segs
 * borrowed. Returns 0, -EINVAL (NULL @dir, more than 1024 segments), a crun_init() code,
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
 * @path (may be NULL) receives the file's path.
 */
CRUN_EXPORT int crun_checkpoint_load_latest(const char *dir, uint64_t *epoch, uint64_t *step,
					    const struct crun_ckpt_seg *segs, size_t nsegs,
					    char *path, size_t pathlen);

#endif
