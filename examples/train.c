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

int main(int argc, char **argv)
{
	struct crun_comm_opts copts = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 120000};
	struct crun_ddp_opts dopts = {0};
	struct crun_sampler smp;
	struct crun_store *st = NULL;
	struct crun_comm *comm = NULL;
	struct crun_ddp *ddp = NULL;
	struct dataset d = {0};
	struct model m = {0};
	struct opts o;
	char err[512], hex[65];
	size_t ntrain, *idx, nb, pos, micro_sz;
	uint64_t epoch0 = 0, step = 0;
	struct scratch sc;
	float *hid, lr_now;
	double ev[3], tl[2], loss_sum;
	int rank, world, rc, e, micro;

	parse_args(argc, argv, &o);
	if (o.gradcheck) {
		return gradcheck(&o);
	}
	rc = crun_init(NULL, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "train: %s\n", err);
		return 2;
	}
	crun_error_install_signal_handler();
	rank = crun_rank();
	world = crun_world_size();
	g_rank = rank;

	ntrain = data_prepare(&o, rank, &d);

	rc = crun_worker_store_open(&st, err, sizeof(err));
	if (rc < 0) {
		die("%s", err);
	}
	rc = crun_comm_create(st, rank, world, &copts, &comm);
	if (rc < 0) {
		die("communicator: %s", crun_strerror(rc));
	}
	if (o.bucket_kib > 0) {
		dopts.bucket_cap_bytes = o.bucket_kib << 10;
		dopts.first_bucket_bytes = o.bucket_kib << 10;
	}
	rc = crun_ddp_create(comm, &dopts, &ddp);
	if (rc < 0) {
		die("ddp: %s", crun_strerror(rc));
	}
	model_init(&m, o.hidden, o.seed);
	if (crun_ddp_register(ddp, m.w1, m.gw1, (size_t)m.h * NFEAT) != 0 ||
	    crun_ddp_register(ddp, m.b1, m.gb1, (size_t)m.h) != 1 ||
	    crun_ddp_register(ddp, m.w2, m.gw2, (size_t)NCLASS * m.h) != 2 ||
	    crun_ddp_register(ddp, m.b2, m.gb2, NCLASS) != 3) {
		die("ddp: register failed");
	}

	if (o.ckpt_dir != NULL) {
		resume_from_checkpoint(&o, &m, rank, &epoch0, &step);
	}
	rc = crun_ddp_broadcast_params(ddp);
	if (rc < 0) {
		die("ddp: broadcast parameters: %s", crun_strerror(rc));
	}

	rc = crun_sampler_init(&smp, ntrain, rank, world, o.seed, true, false);
	if (rc < 0) {
		die("sampler: %s", crun_strerror(rc));
	}
	idx = malloc(smp.num_samples * sizeof(*idx));
	hid = malloc((size_t)m.h * sizeof(float));
	scratch_alloc(&sc, m.h, o.batch);
	if (idx == NULL || hid == NULL) {
		die("out of memory");
	}
	if (rank == 0) {
		printf("train: world %d, %zu train / %zu test samples, hidden %d, batch %d per rank, "
		       "lr %g, %d buckets\n",
		       world, ntrain, d.n - ntrain, m.h, o.batch, o.lr, crun_ddp_bucket_count(ddp));
		fflush(stdout);
	}

	if (o.bench) {
		bench(&m, ddp, &d, ntrain, &o, rank, world, &sc);
		o.epochs = 0;
	}
	for (e = (int)epoch0; e < o.epochs; e++) {
		rc = crun_sampler_indices(&smp, (uint64_t)e, idx);
		if (rc < 0) {
			die("sampler: %s", crun_strerror(rc));
		}
		loss_sum = 0.0;
		/* Cosine decay of the learning rate over the run. */
		lr_now = (float)(o.lr * 0.5 * (1.0 + cos(M_PI * e / o.epochs)));
		for (pos = 0; pos < smp.num_samples; pos += nb) {
			nb = smp.num_samples - pos < (size_t)o.batch ? smp.num_samples - pos
								    : (size_t)o.batch;
			/* Gradient accumulation: micro-batches without communication, then one
			 * synchronised step. */
			micro_sz = (nb + (size_t)o.accum - 1) / (size_t)o.accum;
			crun_ddp_set_no_sync(ddp, o.accum > 1);
			for (micro = 0; (size_t)micro * micro_sz < nb; micro++) {
				size_t off = (size_t)micro * micro_sz;
				size_t cnt = nb - off < micro_sz ? nb - off : micro_sz;
				bool last = off + cnt >= nb;

				if (last) {
					crun_ddp_set_no_sync(ddp, false);
				}
				loss_sum += train_batch(&m, ddp, &d, idx + pos + off, cnt,
							1.0f / (float)nb, last, &sc);
			}
			rc = crun_ddp_sync(ddp);
			if (rc < 0) {
				die("ddp: sync: %s", crun_strerror(rc));
			}
			sgd_step(&m, lr_now, (float)o.momentum);
			step++;
		}
		tl[0] = loss_sum;
		tl[1] = (double)smp.num_samples;
		rc = crun_comm_allreduce(comm, tl, tl, 2, CRUN_DTYPE_FLOAT64, CRUN_REDOP_SUM);
		if (rc < 0) {
			die("train loss: allreduce: %s", crun_strerror(rc));
		}
		evaluate(&m, comm, &d, ntrain, rank, world, ev, hid);
		if (rank == 0) {
			printf("epoch %d step %" PRIu64 " train_loss %.4f test_loss %.4f "
			       "test_acc %.4f\n",
			       e + 1, step, tl[0] / tl[1], ev[0] / ev[2], ev[1] / ev[2]);
			fflush(stdout);
		}
		if (o.ckpt_dir != NULL && ((e + 1) % o.ckpt_every == 0 || e + 1 == o.epochs)) {
			checkpoint_save(&o, &m, e, step);
		}
		/* Fault injection for restart tests: one rank crashes on the first attempt. */
		if (o.fault_epoch == e + 1 && rank == o.fault_rank % world &&
		    crun_restart_count() == 0) {
			fprintf(stderr, "train: rank %d: --fault-epoch %d: aborting\n", rank, e + 1);
			abort();
		}
	}
	if (!o.bench) {
		evaluate(&m, comm, &d, ntrain, rank, world, ev, hid);
		printf("rank %d final test_loss %.4f test_acc %.4f\n", rank, ev[0] / ev[2],
		       ev[1] / ev[2]);
	}
	sha256_hex(m.p, m.np * sizeof(float), hex);
	printf("rank %d params sha256 %s\n", rank, hex);
	fflush(stdout);

	free(idx);
	free(hid);
	scratch_free(&sc);
	crun_ddp_destroy(ddp);
	crun_comm_destroy(comm);
	crun_store_close(st);
	model_free(&m);
	free(d.x);
	free(d.y);
	crun_finish();
	return 0;
}
