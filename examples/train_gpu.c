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

/* The device side of a run: the model on the GPU, the nccl communicator, the DDP engine. */
struct gpu_run {
	int device;
	struct gpu_model *g;
	struct crun_comm *ncomm;
	struct crun_ddp_cuda *ddp;
};

/*
 * A usable GPU, crun_init() (run_init()), and this rank's device made current; 0, or the exit
 * status (EXIT_NO_GPU, 2) with the message on stderr.
 */
static int gpu_start(struct run *r, struct gpu_run *gr)
{
	char err[512];
	cudaError_t ce;
	int rc;

	if (gpu_device_count(err, sizeof(err)) <= 0) {
		fprintf(stderr, "train_gpu: no GPU available: %s\n", err);
		return EXIT_NO_GPU;
	}
	rc = run_init(r);
	if (rc != 0) {
		return rc;
	}
	/*
	 * The one rule for "my device" (crun_cuda_device(): the local rank among the visible
	 * GPUs; more local ranks than GPUs refused unless CRUN_GPU_SHARING=1), made current
	 * before anything is created: the nccl communicator requires it to be this thread's
	 * current device, and the DDP takes the current device as its own.
	 */
	gr->device = crun_cuda_device(err, sizeof(err));
	if (gr->device == CRUN_ENODEV || gr->device == CRUN_EBACKEND) {
		fprintf(stderr, "train_gpu: no GPU available: %s\n", err);
		return EXIT_NO_GPU;
	}
	if (gr->device < 0) {
		fprintf(stderr, "train_gpu: %s\n", err);
		return 2;
	}
	ce = cudaSetDevice(gr->device);
	if (ce != cudaSuccess) {
		die("cudaSetDevice(%d): %s", gr->device, cudaGetErrorString(ce));
	}
	return 0;
}

/* The host model (the initialisation of train) and its copy on the device, with the data. */
static void gpu_setup_model(struct run *r, struct gpu_run *gr)
{
	char err[512], devname[128];
	int rc;

	model_init(&r->m, r->o.hidden, r->o.seed);
	rc = gpu_model_create(gr->device, r->m.h, (size_t)r->o.batch, r->d.x, r->d.y, r->d.n,
			      &gr->g, err, sizeof(err));
	if (rc < 0) {
		die("%s", err);
	}
	gpu_device_name(gr->device, devname, sizeof(devname));
	fprintf(stderr, "train_gpu: rank %d: device %d: %s\n", r->rank, gr->device, devname);
}

/* The nccl and host communicators, and the DDP over the device's parameters and gradients. */
static void gpu_setup_ddp(struct run *r, struct gpu_run *gr)
{
	struct crun_comm_opts nopts = {
		.backend = CRUN_BACKEND_NCCL, .timeout_ms = 120000, .name = "train_gpu"};
	struct crun_comm_opts copts = {
		.backend = CRUN_BACKEND_CPU, .timeout_ms = 120000, .name = "train_host"};
	struct crun_ddp_opts dopts = {0};
	float *p = gpu_model_params(gr->g), *g = gpu_model_grads(gr->g);
	size_t h = (size_t)r->m.h, o1 = h * NFEAT, o2 = o1 + h, o3 = o2 + (size_t)NCLASS * h;
	int rc;

	rc = crun_comm_create(r->st, r->rank, r->world, &nopts, &gr->ncomm);
	if (rc < 0) {
		die("nccl communicator: %s", crun_strerror(rc));
	}
	rc = crun_comm_create(r->st, r->rank, r->world, &copts, &r->comm);
	if (rc < 0) {
		die("host communicator: %s", crun_strerror(rc));
	}
	run_ddp_opts(r, &dopts);
	rc = crun_ddp_cuda_create(gr->ncomm, &dopts, gpu_model_stream(gr->g), &gr->ddp);
	if (rc < 0) {
		die("ddp: %s", crun_strerror(rc));
	}
	if (crun_ddp_cuda_register(gr->ddp, p, g, o1) != 0 ||
	    crun_ddp_cuda_register(gr->ddp, p + o1, g + o1, h) != 1 ||
	    crun_ddp_cuda_register(gr->ddp, p + o2, g + o2, (size_t)NCLASS * h) != 2 ||
	    crun_ddp_cuda_register(gr->ddp, p + o3, g + o3, NCLASS) != 3) {
		die("ddp: register failed: %s", crun_ddp_cuda_last_error(gr->ddp));
	}
}

/* The same start on every rank: resumed (or initial) host parameters, uploaded, broadcast. */
static void gpu_start_state(struct run *r, struct gpu_run *gr)
{
	if (r->o.ckpt_dir != NULL) {
		resume_from_checkpoint(&r->o, &r->m, r->rank, &r->epoch0, &r->step);
	}
	/* Bit-identical start: the host's initial (or resumed) parameters go to the device. */
	gpu_check(gr->g, gpu_model_upload(gr->g, r->m.p, r->m.v), "upload");
	ddp_check(gr->ddp, crun_ddp_cuda_broadcast_params(gr->ddp), "broadcast parameters");
}

/* One optimiser step on the @nb samples from @pos of the epoch (the loss stays on the device). */
static void gpu_train_step(struct run *r, struct gpu_run *gr, size_t pos, size_t nb, float lr)
{
	size_t micro_sz = (nb + (size_t)r->o.accum - 1) / (size_t)r->o.accum;
	int micro;

	crun_ddp_cuda_set_no_sync(gr->ddp, r->o.accum > 1);
	for (micro = 0; (size_t)micro * micro_sz < nb; micro++) {
		size_t off = (size_t)micro * micro_sz;
		size_t cnt = nb - off < micro_sz ? nb - off : micro_sz;
		bool last = off + cnt >= nb;

		if (last) {
			crun_ddp_cuda_set_no_sync(gr->ddp, false);
		}
		gpu_train_batch(gr->g, gr->ddp, r->idx + pos + off, cnt, 1.0f / (float)nb, last);
	}
	ddp_check(gr->ddp, crun_ddp_cuda_sync(gr->ddp), "sync");
	gpu_check(gr->g, gpu_model_sgd(gr->g, lr, (float)r->o.momentum), "sgd");
	r->step++;
}

/* Epoch @e: its steps, its line (evaluated on the host), its checkpoint, the fault point. */
static void gpu_train_epoch(struct run *r, struct gpu_run *gr, int e)
{
	float lr_now = run_epoch_begin(r, e);
	double loss_sum, tl[2];
	size_t pos, nb;

	for (pos = 0; pos < r->smp.num_samples; pos += nb) {
		nb = run_batch_len(r, pos);
		gpu_train_step(r, gr, pos, nb, lr_now);
	}
	gpu_check(gr->g, gpu_model_take_loss(gr->g, &loss_sum), "train loss");
	run_train_loss(r, loss_sum, tl);
	gpu_check(gr->g, gpu_model_download(gr->g, r->m.p, NULL), "download");
	run_report_epoch(r, e, tl);
	if (run_checkpoint_due(r, e)) {
		ckpt_save(gr->g, &r->m, &r->o, e, r->step);
	}
	run_fault_point(r, e);
}

int main(int argc, char **argv)
{
	struct gpu_run gr = {0};
	struct run r = {0};
	int rc, e;

	parse_args(argc, argv, &r.o);
	if (r.o.gradcheck) {
		/* The analytic gradients are the host step's; the device's are compared with
		 * them through the loss curve (tests/gpu). */
		return gradcheck(&r.o);
	}
	rc = gpu_start(&r, &gr);
	if (rc != 0) {
		return rc;
	}
	r.ntrain = data_prepare(&r.o, r.rank, &r.d);
	gpu_setup_model(&r, &gr);
	run_open_store(&r);
	gpu_setup_ddp(&r, &gr);
	gpu_start_state(&r, &gr);
	run_alloc(&r);
	run_print_banner(&r, crun_ddp_cuda_bucket_count(gr.ddp));

	if (r.o.bench) {
		gpu_bench(gr.g, gr.ddp, r.ntrain, &r.o, r.rank, r.world);
		r.o.epochs = 0;
	}
	for (e = (int)r.epoch0; e < r.o.epochs; e++) {
		gpu_train_epoch(&r, &gr, e);
	}
	gpu_check(gr.g, gpu_model_download(gr.g, r.m.p, r.m.v), "download");
	run_report_final(&r);

	crun_ddp_cuda_destroy(gr.ddp);
	crun_comm_destroy(r.comm);
	crun_comm_destroy(gr.ncomm);
	gpu_model_destroy(gr.g);
	run_end(&r);
	return 0;
}
