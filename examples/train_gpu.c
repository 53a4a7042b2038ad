/* SPDX-License-Identifier: MIT */
/* examples/train_gpu.c: examples/train on CUDA: the same program, its math on the device. */

/*
 * The model, the data loading, the options, the initialisation, the checkpoints and the output
 * lines are examples/train_common.c's, shared with the CPU program (train.c), so the two builds
 * cannot drift apart: weights are initialised on the host with the same RNG and copied to the
 * device, which makes the CPU and CUDA loss curves comparable step by step. Only the training
 * step (train_batch, sgd_step) runs on the device (train_kernels.cu: cuBLAS sgemm, bias+ReLU,
 * softmax cross-entropy, SGD with momentum); evaluation reuses the host code on a copy of the
 * parameters, so test figures are computed the same way in both builds.
 *
 * Gradients are averaged with crun_ddp_cuda (the one DDP engine on device memory: NCCL on the
 * model's device; the allreduce runs on the communicator's own stream while the hidden layer's
 * backward is still being computed). Host-side scalars (train loss, evaluation sums) go
 * through a second, cpu communicator: the nccl one carries the DDP's buckets, and a program
 * must not run its own collectives on it while a step is in flight.
 *
 * Exit status: as train, plus 77 when no CUDA device is usable (the message says why); 2 also
 * when crun_cuda_device() refuses the device (more ranks on this node than GPUs).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Third-party header: not held to our warning flags. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#include <crun/crun.h>
#include <crun/ddp_cuda.h>

#include "examples/train_common.h"
#include "examples/train_gpu.h"

#define EXIT_NO_GPU 77

static void gpu_check(struct gpu_model *g, int rc, const char *what)
{
	if (rc < 0) {
		die("%s: %s", what, gpu_model_error(g));
	}
}

static void ddp_check(struct crun_ddp_cuda *ddp, int rc, const char *what)
{
	if (rc < 0) {
		const char *why = crun_ddp_cuda_last_error(ddp);

		die("ddp: %s: %s", what, why != NULL && *why != '\0' ? why : crun_strerror(rc));
	}
}

/* train_batch() on the device: output layer, its gradients handed to DDP, then hidden layer. */
static void gpu_train_batch(struct gpu_model *g, struct crun_ddp_cuda *ddp, const size_t *idx,
			    size_t nb, float scale, bool last_micro)
{
	gpu_check(g, gpu_model_forward_output(g, idx, nb, scale), "forward");
	if (last_micro) {
		ddp_check(ddp, crun_ddp_cuda_grad_ready(ddp, 3), "grad_ready");
		ddp_check(ddp, crun_ddp_cuda_grad_ready(ddp, 2), "grad_ready");
	}
	gpu_check(g, gpu_model_backward_hidden(g), "backward");
	if (last_micro) {
		ddp_check(ddp, crun_ddp_cuda_grad_ready(ddp, 1), "grad_ready");
		ddp_check(ddp, crun_ddp_cuda_grad_ready(ddp, 0), "grad_ready");
	}
}

/* train.c's bench(), on the device. */
static void gpu_bench(struct gpu_model *g, struct crun_ddp_cuda *ddp, size_t ntrain,
		      const struct opts *o, int rank, int world)
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
			gpu_check(g, gpu_model_sync(g), "bench");
			if ((rc = crun_barrier(60000)) < 0) {
				die("bench: barrier: %s", crun_strerror(rc));
			}
			t0 = now_s();
		}
		for (int b = 0; b < o->batch; b++) {
			idx[b] = (size_t)(rng_next(&s) % ntrain);
		}
		gpu_train_batch(g, ddp, idx, (size_t)o->batch, 1.0f / (float)o->batch, true);
		ts = now_s();
		ddp_check(ddp, crun_ddp_cuda_sync(ddp), "sync");
		if (step >= warm) {
			tsync += now_s() - ts;
		}
		gpu_check(g, gpu_model_sgd(g, (float)o->lr * 0.01f, (float)o->momentum), "sgd");
	}
	gpu_check(g, gpu_model_sync(g), "bench");
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

static void ckpt_save(struct gpu_model *g, struct model *m, const struct opts *o, int e,
		      uint64_t step)
{
	gpu_check(g, gpu_model_download(g, m->p, m->v), "checkpoint: download");
	checkpoint_save(o, m, e, step);
}

int main(int argc, char **argv)
{
	struct crun_comm_opts nopts = {.backend = CRUN_BACKEND_NCCL, .timeout_ms = 120000,
				       .name = "train_gpu"};
	struct crun_comm_opts copts = {.backend = CRUN_BACKEND_CPU, .timeout_ms = 120000,
				       .name = "train_host"};
	struct crun_ddp_opts dopts = {0};
	struct crun_sampler smp;
	struct crun_store *st = NULL;
	struct crun_comm *comm = NULL, *ncomm = NULL;
	struct crun_ddp_cuda *ddp = NULL;
	struct gpu_model *g = NULL;
	struct dataset d = {0};
	struct model m = {0};
	struct opts o;
	char err[512], hex[65], devname[128];
	size_t ntrain, *idx, nb = 0, pos, micro_sz;
	uint64_t epoch0 = 0, step = 0;
	float *hid, lr_now;
	double ev[3], tl[2], loss_sum;
	int rank, world, rc, e, micro, ndev, device;
	cudaError_t ce;

	parse_args(argc, argv, &o);
	if (o.gradcheck) {
		/* The analytic gradients are the host step's; the device's are compared with
		 * them through the loss curve (tests/gpu). */
		return gradcheck(&o);
	}
	ndev = gpu_device_count(err, sizeof(err));
	if (ndev <= 0) {
		fprintf(stderr, "train_gpu: no GPU available: %s\n", err);
		return EXIT_NO_GPU;
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
	/*
	 * The one rule for "my device" (crun_cuda_device(): the local rank among the visible
	 * GPUs; more local ranks than GPUs refused unless CRUN_GPU_SHARING=1), made current
	 * before anything is created: the nccl communicator requires it to be this thread's
	 * current device, and the DDP takes the current device as its own.
	 */
	device = crun_cuda_device(err, sizeof(err));
	if (device == CRUN_ENODEV || device == CRUN_EBACKEND) {
		fprintf(stderr, "train_gpu: no GPU available: %s\n", err);
		return EXIT_NO_GPU;
	}
	if (device < 0) {
		fprintf(stderr, "train_gpu: %s\n", err);
		return 2;
	}
	ce = cudaSetDevice(device);
	if (ce != cudaSuccess) {
		die("cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
	}

	ntrain = data_prepare(&o, rank, &d);

	model_init(&m, o.hidden, o.seed);
	rc = gpu_model_create(device, m.h, (size_t)o.batch, d.x, d.y, d.n, &g, err, sizeof(err));
	if (rc < 0) {
		die("%s", err);
	}
	gpu_device_name(device, devname, sizeof(devname));
	fprintf(stderr, "train_gpu: rank %d: device %d: %s\n", rank, device, devname);

	rc = crun_worker_store_open(&st, err, sizeof(err));
	if (rc < 0) {
		die("%s", err);
	}
	rc = crun_comm_create(st, rank, world, &nopts, &ncomm);
	if (rc < 0) {
		die("nccl communicator: %s", crun_strerror(rc));
	}
	rc = crun_comm_create(st, rank, world, &copts, &comm);
	if (rc < 0) {
		die("host communicator: %s", crun_strerror(rc));
	}
	if (o.bucket_kib > 0) {
		dopts.bucket_cap_bytes = o.bucket_kib << 10;
		dopts.first_bucket_bytes = o.bucket_kib << 10;
	}
	rc = crun_ddp_cuda_create(ncomm, &dopts, gpu_model_stream(g), &ddp);
	if (rc < 0) {
		die("ddp: %s", crun_strerror(rc));
	}
	{
		float *p = gpu_model_params(g), *gr = gpu_model_grads(g);
		size_t o1 = (size_t)m.h * NFEAT, o2 = o1 + (size_t)m.h, o3 = o2 + (size_t)NCLASS * m.h;

		if (crun_ddp_cuda_register(ddp, p, gr, o1) != 0 ||
		    crun_ddp_cuda_register(ddp, p + o1, gr + o1, (size_t)m.h) != 1 ||
		    crun_ddp_cuda_register(ddp, p + o2, gr + o2, (size_t)NCLASS * m.h) != 2 ||
		    crun_ddp_cuda_register(ddp, p + o3, gr + o3, NCLASS) != 3) {
			die("ddp: register failed: %s", crun_ddp_cuda_last_error(ddp));
		}
	}

	if (o.ckpt_dir != NULL) {
		resume_from_checkpoint(&o, &m, rank, &epoch0, &step);
	}
	/* Bit-identical start: the host's initial (or resumed) parameters go to the device. */
	gpu_check(g, gpu_model_upload(g, m.p, m.v), "upload");
	rc = crun_ddp_cuda_broadcast_params(ddp);
	ddp_check(ddp, rc, "broadcast parameters");

	rc = crun_sampler_init(&smp, ntrain, rank, world, o.seed, true, false);
	if (rc < 0) {
		die("sampler: %s", crun_strerror(rc));
	}
	idx = malloc(smp.num_samples * sizeof(*idx));
	hid = malloc((size_t)m.h * sizeof(float));
	if (idx == NULL || hid == NULL) {
		die("out of memory");
	}
	if (rank == 0) {
		printf("train: world %d, %zu train / %zu test samples, hidden %d, batch %d per rank, "
		       "lr %g, %d buckets\n",
		       world, ntrain, d.n - ntrain, m.h, o.batch, o.lr,
		       crun_ddp_cuda_bucket_count(ddp));
		fflush(stdout);
	}

	if (o.bench) {
		gpu_bench(g, ddp, ntrain, &o, rank, world);
		o.epochs = 0;
	}
	for (e = (int)epoch0; e < o.epochs; e++) {
		rc = crun_sampler_indices(&smp, (uint64_t)e, idx);
		if (rc < 0) {
			die("sampler: %s", crun_strerror(rc));
		}
		lr_now = (float)(o.lr * 0.5 * (1.0 + cos(M_PI * e / o.epochs)));
		for (pos = 0; pos < smp.num_samples; pos += nb) {
			nb = smp.num_samples - pos < (size_t)o.batch ? smp.num_samples - pos
								    : (size_t)o.batch;
			micro_sz = (nb + (size_t)o.accum - 1) / (size_t)o.accum;
			crun_ddp_cuda_set_no_sync(ddp, o.accum > 1);
			for (micro = 0; (size_t)micro * micro_sz < nb; micro++) {
				size_t off = (size_t)micro * micro_sz;
				size_t cnt = nb - off < micro_sz ? nb - off : micro_sz;
				bool last = off + cnt >= nb;

				if (last) {
					crun_ddp_cuda_set_no_sync(ddp, false);
				}
				gpu_train_batch(g, ddp, idx + pos + off, cnt, 1.0f / (float)nb,
						last);
			}
			ddp_check(ddp, crun_ddp_cuda_sync(ddp), "sync");
			gpu_check(g, gpu_model_sgd(g, lr_now, (float)o.momentum), "sgd");
			step++;
		}
		gpu_check(g, gpu_model_take_loss(g, &loss_sum), "train loss");
		tl[0] = loss_sum;
		tl[1] = (double)smp.num_samples;
		rc = crun_comm_allreduce(comm, tl, tl, 2, CRUN_DTYPE_FLOAT64, CRUN_REDOP_SUM);
		if (rc < 0) {
			die("train loss: allreduce: %s", crun_strerror(rc));
		}
		gpu_check(g, gpu_model_download(g, m.p, NULL), "download");
		evaluate(&m, comm, &d, ntrain, rank, world, ev, hid);
		if (rank == 0) {
			printf("epoch %d step %" PRIu64 " train_loss %.4f test_loss %.4f "
			       "test_acc %.4f\n",
			       e + 1, step, tl[0] / tl[1], ev[0] / ev[2], ev[1] / ev[2]);
			fflush(stdout);
		}
		if (o.ckpt_dir != NULL && ((e + 1) % o.ckpt_every == 0 || e + 1 == o.epochs)) {
			ckpt_save(g, &m, &o, e, step);
		}
		if (o.fault_epoch == e + 1 && rank == o.fault_rank % world &&
		    crun_restart_count() == 0) {
			fprintf(stderr, "train: rank %d: --fault-epoch %d: aborting\n", rank, e + 1);
			abort();
		}
	}
	gpu_check(g, gpu_model_download(g, m.p, m.v), "download");
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
	crun_ddp_cuda_destroy(ddp);
	crun_comm_destroy(comm);
	crun_comm_destroy(ncomm);
	gpu_model_destroy(g);
	crun_store_close(st);
	model_free(&m);
	free(d.x);
	free(d.y);
	crun_finish();
	return 0;
}
