/* SPDX-License-Identifier: MIT */
/* examples/train_common.h: what examples/train and train_gpu share: options, data, model. */
#ifndef CRUN_EXAMPLES_TRAIN_COMMON_H
#define CRUN_EXAMPLES_TRAIN_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <crun/crun.h>

#define NFEAT 64
#define NCLASS 10

struct opts {
	int epochs;
	int batch;
	double lr;
	double momentum;
	int hidden;
	uint64_t seed;
	const char *ckpt_dir;
	int ckpt_every;
	const char *data;
	bool synthetic;
	int accum;
	size_t bucket_kib;
	int samples; /* synthetic dataset size */
	bool bench;
	int bench_steps;
	int fault_epoch; /* fault injection: crash after this epoch on the first attempt */
	int fault_rank;
	bool gradcheck;
};

struct dataset {
	float *x; /* n x NFEAT */
	int *y;
	size_t n;
};

struct model {
	int h;
	size_t np;
	float *p, *g, *v; /* params, grads, momentum: W1 (h x 64), b1 (h), W2 (10 x h), b2 (10) */
	float *w1, *b1, *w2, *b2;
	float *gw1, *gb1, *gw2, *gb2;
};

/* Per-batch work arrays, feature-major ("T": one row per unit, one column per sample). */
struct scratch {
	float *x;   /* batch x NFEAT: the batch's samples, gathered */
	float *hid; /* h x batch: hidden activations */
	float *dh;  /* h x batch: gradient at the hidden layer */
	float *z;   /* NCLASS x batch: logits, then d loss / d logits */
};

/*
 * One run of train or train_gpu: what both programs hold besides their DDP engine, and what
 * the shared steps below (run_*) work on.
 */
struct run {
	struct opts o;
	int rank, world;
	struct dataset d;
	size_t ntrain; /* d's first ntrain samples train; the rest are held out */
	struct model m;
	struct crun_store *st;
	struct crun_comm *comm; /* the host (cpu) communicator: train loss, evaluation */
	struct crun_sampler smp;
	size_t *idx; /* smp.num_samples: this rank's samples of the epoch, in order */
	float *hid;  /* m.h floats for evaluate() */
	uint64_t epoch0, step;
};

/* This process's rank in messages (-1 before crun_init()). */
extern int g_rank;

/** Print "train: rank R: <message>" to stderr, record it in the error file, exit 1. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/** Parse the command line into @o; exits 2 with a message on a bad option, 0 after --help. */
void parse_args(int argc, char **argv, struct opts *o);
/** splitmix64: the one RNG of the examples (initialisation, synthetic data, bench batches). */
uint64_t rng_next(uint64_t *s);
double now_s(void);

/** Ten noisy prototypes in [0,1]^64; @d's arrays are malloc'd. */
void data_synthetic(struct dataset *d, size_t n, uint64_t seed);
/** sklearn's digits.csv.gz; 0, or a negative code with the reason in @err. */
int data_load(struct dataset *d, const char *path, char *err, size_t errlen);
/** Put the samples in a fixed pseudo-random order, the same for every run and rank. */
void shuffle_fixed(struct dataset *d);
/**
 * The dataset of @o: the digits file, or generated data (rank 0 warns) when it cannot be read;
 * in the fixed order of the split. Returns the number of training samples (the rest, 20%, is
 * held out).
 */
size_t data_prepare(const struct opts *o, int rank, struct dataset *d);

/** Weights uniform in +-sqrt(6 / fan-in) drawn from @seed; biases, gradients, momentum 0. */
void model_init(struct model *m, int h, uint64_t seed);
void model_free(struct model *m);
void scratch_alloc(struct scratch *s, int h, int batch);
void scratch_free(struct scratch *s);
/**
 * One micro-batch on the host: accumulate d(mean loss * @scale)/dparams into m->g and return
 * the batch's summed loss. With @last_micro the gradients are handed to @ddp as they complete
 * (tensors 3, 2 after the output layer, then 1, 0).
 */
double train_batch(struct model *m, struct crun_ddp *ddp, const struct dataset *d,
		   const size_t *idx, size_t nb, float scale, bool last_micro, struct scratch *sc);
/** v = mu v + g; p -= lr v; g = 0. */
void sgd_step(struct model *m, float lr, float mu);
/**
 * Test loss, correct count and sample count of the held-out samples from @first on, each
 * rank taking every world-th, summed over @comm into @out; @hid holds m->h floats.
 */
void evaluate(const struct model *m, struct crun_comm *comm, const struct dataset *d,
	      size_t first, int rank, int world, double out[3], float *hid);
/** --gradcheck: the analytic gradients against finite differences; returns the exit status. */
int gradcheck(const struct opts *o);
void sha256_hex(const void *data, size_t len, char hex[65]);

/** Resume from the newest checkpoint of o->ckpt_dir (parameters, momentum), or start fresh. */
void resume_from_checkpoint(const struct opts *o, struct model *m, int rank, uint64_t *epoch0,
			    uint64_t *step);
/** Save m->p and m->v as the checkpoint of epoch @e (0-based) at @step (every rank calls). */
void checkpoint_save(const struct opts *o, struct model *m, int e, uint64_t step);

/**
 * crun_init(), the error-file signal handler, r->rank, r->world and g_rank; 0, or 2 (the exit
 * status) with the message on stderr.
 */
int run_init(struct run *r);
/** Open the worker's store into r->st; dies on failure. */
void run_open_store(struct run *r);
/** DDP options from --bucket-kib (the first bucket and the others alike). */
void run_ddp_opts(const struct run *r, struct crun_ddp_opts *dopts);
/** The sampler over the training samples, r->idx and r->hid; dies on failure. */
void run_alloc(struct run *r);
/** Rank 0's first line: world, samples, model, batch, learning rate, @nbuckets. */
void run_print_banner(const struct run *r, int nbuckets);
/** Epoch @e's samples into r->idx; returns its learning rate (cosine decay over the run). */
float run_epoch_begin(struct run *r, int e);
/** A step's samples from @pos of the epoch: --batch-size, or what is left. */
size_t run_batch_len(const struct run *r, size_t pos);
/** The epoch's train loss summed over the ranks: @tl[0] the loss, @tl[1] the samples. */
void run_train_loss(struct run *r, double loss_sum, double tl[2]);
/** Evaluate (r->m must hold the current parameters) and print epoch @e's line on rank 0. */
void run_report_epoch(struct run *r, int e, const double tl[2]);
/** Whether epoch @e (0-based) ends with a checkpoint. */
bool run_checkpoint_due(const struct run *r, int e);
/** --fault-epoch: the chosen rank aborts after epoch @e on the first attempt. */
void run_fault_point(const struct run *r, int e);
/** The final evaluation (not after --bench) and every rank's parameter checksum. */
void run_report_final(struct run *r);
/** Free the buffers, close the store, crun_finish(): the DDP and communicators are gone. */
void run_end(struct run *r);

#endif
