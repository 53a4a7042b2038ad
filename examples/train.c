/* SPDX-License-Identifier: MIT */
/* examples/train.c: an MLP digit classifier trained data-parallel with libcrun-worker. */

/*
 * The CPU program: host DDP (crun_ddp) over a cpu communicator. The options, data, model,
 * host training step, evaluation and checkpoints are examples/train_common.c's, shared with
 * the CUDA build (examples/train_gpu.c).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <crun/crun.h>

#include "examples/train_common.h"

/* Time --bench steps of forward+backward+sync+update on random batches (no evaluation). */
static void bench(struct model *m, struct crun_ddp *ddp, const struct dataset *d,
		  size_t ntrain, const struct opts *o, int rank, int world, struct scratch *sc)
{
	size_t *idx = malloc((size_t)o->batch * sizeof(size_t));
	uint64_t s = o->seed + (uint64_t)rank;
	double t0 = 0.0, t, ts, tsync = 0.0;
	int step, rc, warm = 3;

	if (idx == NULL) {
		die("bench: out of memory");
	}
	for (step = 0; step < o->bench_steps + warm; step++) {
		if (step == warm) {
			if ((rc = crun_barrier(60000)) < 0) {
				die("bench: barrier: %s", crun_strerror(rc));
			}
			t0 = now_s();
		}
		for (int b = 0; b < o->batch; b++) {
			idx[b] = (size_t)(rng_next(&s) % ntrain);
		}
		train_batch(m, ddp, d, idx, (size_t)o->batch, 1.0f / (float)o->batch, true, sc);
		ts = now_s();
		if ((rc = crun_ddp_sync(ddp)) < 0) {
			die("bench: ddp sync: %s", crun_strerror(rc));
		}
		if (step >= warm) {
			tsync += now_s() - ts;
		}
		sgd_step(m, (float)o->lr * 0.01f, (float)o->momentum);
	}
	t = now_s() - t0;
	if (rank == 0) {
		printf("bench world %d hidden %d batch %d steps %d step_ms %.3f samples_per_s %.1f "
		       "sync_wait_ms %.3f\n",
		       world, o->hidden, o->batch, o->bench_steps, 1e3 * t / o->bench_steps,
		       (double)world * o->batch * o->bench_steps / t,
		       1e3 * tsync / o->bench_steps);
		fflush(stdout);
	}
	free(idx);
}

/*
 * The host DDP over a cpu communicator and the model registered with it, in the same start
 * state on every rank (resumed from the newest checkpoint with --checkpoint-dir).
 */
static struct crun_ddp *setup_ddp(struct run *r)
{
	struct crun_comm_opts copts = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 120000};
	struct crun_ddp_opts dopts = {0};
	struct crun_ddp *ddp = NULL;
	struct model *m = &r->m;
	int rc;

	rc = crun_comm_create(r->st, r->rank, r->world, &copts, &r->comm);
	if (rc < 0) {
		die("communicator: %s", crun_strerror(rc));
	}
	run_ddp_opts(r, &dopts);
	rc = crun_ddp_create(r->comm, &dopts, &ddp);
	if (rc < 0) {
		die("ddp: %s", crun_strerror(rc));
	}
	model_init(m, r->o.hidden, r->o.seed);
	if (crun_ddp_register(ddp, m->w1, m->gw1, (size_t)m->h * NFEAT) != 0 ||
	    crun_ddp_register(ddp, m->b1, m->gb1, (size_t)m->h) != 1 ||
	    crun_ddp_register(ddp, m->w2, m->gw2, (size_t)NCLASS * m->h) != 2 ||
	    crun_ddp_register(ddp, m->b2, m->gb2, NCLASS) != 3) {
		die("ddp: register failed");
	}

	if (r->o.ckpt_dir != NULL) {
		resume_from_checkpoint(&r->o, m, r->rank, &r->epoch0, &r->step);
	}
	rc = crun_ddp_broadcast_params(ddp);
	if (rc < 0) {
		die("ddp: broadcast parameters: %s", crun_strerror(rc));
	}
	return ddp;
}

/* One optimiser step on the @nb samples from @pos of the epoch, their losses added to @loss_sum. */
static void train_step(struct run *r, struct crun_ddp *ddp, struct scratch *sc, size_t pos,
		       size_t nb, float lr, double *loss_sum)
{
	/* Gradient accumulation: micro-batches without communication, then one synchronised
	 * step. */
	size_t micro_sz = (nb + (size_t)r->o.accum - 1) / (size_t)r->o.accum;
	int micro, rc;

	crun_ddp_set_no_sync(ddp, r->o.accum > 1);
	for (micro = 0; (size_t)micro * micro_sz < nb; micro++) {
		size_t off = (size_t)micro * micro_sz;
		size_t cnt = nb - off < micro_sz ? nb - off : micro_sz;
		bool last = off + cnt >= nb;

		if (last) {
			crun_ddp_set_no_sync(ddp, false);
		}
		*loss_sum += train_batch(&r->m, ddp, &r->d, r->idx + pos + off, cnt,
					 1.0f / (float)nb, last, sc);
	}
	rc = crun_ddp_sync(ddp);
	if (rc < 0) {
		die("ddp: sync: %s", crun_strerror(rc));
	}
	sgd_step(&r->m, lr, (float)r->o.momentum);
	r->step++;
}

/* Epoch @e: its steps, its line, its checkpoint, and the fault injection point. */
static void train_epoch(struct run *r, struct crun_ddp *ddp, struct scratch *sc, int e)
{
	float lr_now = run_epoch_begin(r, e);
	double loss_sum = 0.0, tl[2];
	size_t pos, nb;

	for (pos = 0; pos < r->smp.num_samples; pos += nb) {
		nb = run_batch_len(r, pos);
		train_step(r, ddp, sc, pos, nb, lr_now, &loss_sum);
	}
	run_train_loss(r, loss_sum, tl);
	run_report_epoch(r, e, tl);
	if (run_checkpoint_due(r, e)) {
		checkpoint_save(&r->o, &r->m, e, r->step);
	}
	run_fault_point(r, e);
}

int main(int argc, char **argv)
{
	struct run r = {0};
	struct crun_ddp *ddp;
	struct scratch sc;
	int rc, e;

	parse_args(argc, argv, &r.o);
	if (r.o.gradcheck) {
		return gradcheck(&r.o);
	}
	rc = run_init(&r);
	if (rc != 0) {
		return rc;
	}
	r.ntrain = data_prepare(&r.o, r.rank, &r.d);
	run_open_store(&r);
	ddp = setup_ddp(&r);
	run_alloc(&r);
	scratch_alloc(&sc, r.m.h, r.o.batch);
	run_print_banner(&r, crun_ddp_bucket_count(ddp));

	if (r.o.bench) {
		bench(&r.m, ddp, &r.d, r.ntrain, &r.o, r.rank, r.world, &sc);
		r.o.epochs = 0;
	}
	for (e = (int)r.epoch0; e < r.o.epochs; e++) {
		train_epoch(&r, ddp, &sc, e);
	}
	run_report_final(&r);

	scratch_free(&sc);
	crun_ddp_destroy(ddp);
	crun_comm_destroy(r.comm);
	run_end(&r);
	return 0;
}
