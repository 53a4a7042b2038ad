/* SPDX-License-Identifier: MIT */
/* tests/comm/test_ddp_fake_gpu.c: the device DDP and the worker's GPU choice on fake CUDA/NCCL. */

/*
 * Issue 22's defects that the fakes (tests/comm/fake_gpu/) can show without a GPU:
 * --virtual-local-rank's environment accepted; mpirun's and srun's local rank and size read;
 * a blocking collective that never returns (NCCL connecting inside it to a peer that never
 * comes) aborted by the watchdog at the deadline; crun_ddp_sync() bounded when its
 * communication thread is stuck; the DDP refusing a device other than its communicator's;
 * no context made on GPU 0 by a thread that never chose a device; a collective from another
 * thread refused for the whole of a DDP step; crun_ddp_sync() not waiting on the host (the
 * compute stream waits for the step's collectives on the device) and a later step, wait or
 * the deadline reporting what failed after it returned. Each case runs in a child of its own
 * (fake_gpu_harness.h).
 */
#include <stdarg.h> /* cmocka 1.x wants these before cmocka.h */
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "tests/comm/fake_gpu_harness.h"

/* ---- the worker's device under crun --virtual-local-rank, mpirun and srun ---- */

/* LOCAL_RANK=0 of LOCAL_WORLD_SIZE=3 workers, each seeing one GPU: device 0, and NCCL on it. */
static void virtual_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	char err[256];
	int rc;

	rc = crun_cuda_device(err, sizeof(err));
	CHECK(rc == 0, "crun_cuda_device: %d: %s", rc, err);
	CHECK(crun_local_world_size() == 3, "LOCAL_WORLD_SIZE %d", crun_local_world_size());
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	crun_comm_destroy(c);
	store_done(st);
}

static void virtual_bad_case(void)
{
	char err[256];
	int rc;

	rc = crun_cuda_device(err, sizeof(err));
	CHECK(rc == CRUN_ECONFIG && strstr(err, "CRUN_VIRTUAL_LOCAL_RANK: expected 0 or 1") != NULL,
	      "crun_cuda_device: %d: %s", rc, err);
}

static void virtual_local_rank_is_accepted(void **state)
{
	static const char *const env[] = {"RANK=1",
					  "WORLD_SIZE=3",
					  "LOCAL_RANK=0",
					  "LOCAL_WORLD_SIZE=3",
					  "CUDA_VISIBLE_DEVICES=5",
					  "CRUN_VIRTUAL_LOCAL_RANK=1",
					  NULL};
	static const char *const bad[] = {"RANK=1",
					  "WORLD_SIZE=3",
					  "LOCAL_RANK=0",
					  "LOCAL_WORLD_SIZE=3",
					  "CRUN_VIRTUAL_LOCAL_RANK=yes",
					  NULL};

	(void)state;
	in_child(virtual_case, env);
	in_child(virtual_bad_case, bad);
}

/* WANT_LR / WANT_LWS: the local rank and size libcrun-worker must read; the device too. */
static void launcher_case(void)
{
	int lr = atoi(getenv("WANT_LR")), lws = atoi(getenv("WANT_LWS"));
	char err[256];
	int rc;

	CHECK(crun_local_rank() == lr, "local rank %d, expected %d: %s", crun_local_rank(), lr,
	      crun_init_error());
	CHECK(crun_local_world_size() == lws, "local world %d, expected %d",
	      crun_local_world_size(), lws);
	rc = crun_cuda_device(err, sizeof(err));
	CHECK(rc == lr, "crun_cuda_device: %d (expected %d): %s", rc, lr, err);
}

static void launcher_bad_case(void)
{
	int rc = crun_init(NULL, NULL, 0);

	CHECK(rc == CRUN_ECONFIG && strstr(crun_init_error(), "OMPI_COMM_WORLD_LOCAL_RANK") != NULL,
	      "crun_init: %d: %s", rc, crun_init_error());
}

static void mpirun_and_srun_local_ranks_are_read(void **state)
{
	static const char *const ompi[] = {"RANK=5",
					   "WORLD_SIZE=8",
					   "OMPI_COMM_WORLD_LOCAL_RANK=1",
					   "OMPI_COMM_WORLD_LOCAL_SIZE=4",
					   "FAKE_CUDA_DEVICES=4",
					   "WANT_LR=1",
					   "WANT_LWS=4",
					   NULL};
	static const char *const slurm[] = {"RANK=6",
					    "WORLD_SIZE=8",
					    "SLURM_LOCALID=2",
					    "SLURM_NTASKS_PER_NODE=4",
					    "FAKE_CUDA_DEVICES=4",
					    "WANT_LR=2",
					    "WANT_LWS=4",
					    NULL};
	/* crun's (torchrun's) own names win over a launcher's. */
	static const char *const both[] = {"RANK=6",
					   "WORLD_SIZE=8",
					   "LOCAL_RANK=3",
					   "LOCAL_WORLD_SIZE=4",
					   "SLURM_LOCALID=0",
					   "SLURM_NTASKS_PER_NODE=2",
					   "FAKE_CUDA_DEVICES=4",
					   "WANT_LR=3",
					   "WANT_LWS=4",
					   NULL};
	static const char *const bad[] = {"RANK=5", "WORLD_SIZE=8", "OMPI_COMM_WORLD_LOCAL_RANK=x",
					  NULL};

	(void)state;
	in_child(launcher_case, ompi);
	in_child(launcher_case, slurm);
	in_child(launcher_case, both);
	in_child(launcher_bad_case, bad);
}

/* ---- deadlines that a call cannot bypass ---- */

/* A blocking collective that never returns: the watchdog aborts the communicator in time. */
static void watchdog_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	float *buf;
	int64_t t0;
	int rc;

	rc = create(st, CRUN_BACKEND_NCCL, 400, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	buf = dev_floats(8);
	CHECK(crun_comm_allreduce(c, buf, buf, 8, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM) == 0,
	      "allreduce: %s", crun_comm_last_error(c));
	CHECK(fk.stat("abort") == 0, "%d aborts before", fk.stat("abort"));
	setenv("FAKE_NCCL_HANG", "coll", 1);
	t0 = crun_now_ms();
	rc = crun_comm_allreduce(c, buf, buf, 8, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == -ETIMEDOUT, "allreduce inside NCCL for ever: %s: %s", crun_strerror(rc),
	      crun_comm_last_error(c));
	CHECK(crun_now_ms() - t0 < 10000, "took %lld ms", (long long)(crun_now_ms() - t0));
	CHECK(strstr(crun_comm_last_error(c), "ncclAllReduce: still inside NCCL after 400 ms") !=
		      NULL,
	      "message: %s", crun_comm_last_error(c));
	CHECK(fk.stat("abort") == 1, "%d aborts", fk.stat("abort"));
	/* Poisoned: the next call fails at once, without NCCL. */
	rc = crun_comm_barrier(c);
	CHECK(rc == -ETIMEDOUT, "barrier after: %s", crun_strerror(rc));
	unsetenv("FAKE_NCCL_HANG");
	crun_comm_destroy(c);
	CHECK(fk.stat("abort") == 1 && fk.stat("live") == 0, "after destroy: %d aborts, %d live",
	      fk.stat("abort"), fk.stat("live"));
	store_done(st);
}

static void blocking_collective_is_aborted_at_its_deadline(void **state)
{
	static const char *const env[] = {"CRUN_SINGLE=1", NULL};

	(void)state;
	in_child(watchdog_case, env);
}

/* Rank 0 of a 2-rank nccl communicator and a device DDP of two tensors in one bucket. */
static struct {
	struct crun_store *st;
	struct crun_comm *c;
	struct crun_ddp *d;
	float *p[2], *g[2];
} q;

static void ddp_setup(int timeout_ms)
{
	struct crun_comm_opts co = CRUN_COMM_OPTS_INIT;
	struct crun_ddp_opts o = CRUN_DDP_OPTS_INIT;
	int rc, t;

	q.st = store_open();
	co.backend = CRUN_BACKEND_NCCL;
	co.timeout_ms = timeout_ms;
	rc = crun_comm_create(q.st, 0, 2, &co, &q.c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	o.memory = CRUN_DDP_MEMORY_CUDA;
	rc = crun_ddp_create(q.c, &o, &q.d);
	CHECK(rc == 0, "ddp create: %s", crun_strerror(rc));
	for (t = 0; t < 2; t++) {
		q.p[t] = dev_floats(16);
		q.g[t] = dev_floats(16);
		CHECK(crun_ddp_register(q.d, q.p[t], q.g[t], 16) == t, "register %d", t);
	}
	rc = crun_ddp_broadcast_params(q.d);
	CHECK(rc == 0, "broadcast: %s", crun_ddp_last_error(q.d));
}

/* The same through the DDP: the bucket's queued allreduce never returns. */
static void ddp_watchdog_case(void)
{
	int64_t t0;
	int rc;

	ddp_setup(400);
	setenv("FAKE_NCCL_HANG", "coll", 1);
	t0 = crun_now_ms();
	rc = crun_ddp_grad_ready(q.d, 1);
	CHECK(rc == 0, "grad_ready: %s", crun_ddp_last_error(q.d));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == -ETIMEDOUT, "sync: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	CHECK(crun_now_ms() - t0 < 10000, "took %lld ms", (long long)(crun_now_ms() - t0));
	CHECK(strstr(crun_ddp_last_error(q.d), "still inside NCCL") != NULL, "message: %s",
	      crun_ddp_last_error(q.d));
	CHECK(fk.stat("abort") == 1, "%d aborts", fk.stat("abort"));
	unsetenv("FAKE_NCCL_HANG");
	crun_ddp_destroy(q.d);
	crun_comm_destroy(q.c);
	store_done(q.st);
}

/* The communication thread stuck in a call with no deadline at all: sync still returns. */
static void ddp_stuck_case(void)
{
	int64_t t0;
	int rc;

	ddp_setup(300);
	setenv("FAKE_CUDA_HANG", "streamwait", 1);
	t0 = crun_now_ms();
	rc = crun_ddp_sync(q.d);
	CHECK(rc == -ETIMEDOUT, "sync: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	/* Twice the timeout and a second; 4x that on a loaded machine. */
	CHECK(crun_now_ms() - t0 < 4 * 1600, "took %lld ms", (long long)(crun_now_ms() - t0));
	CHECK(strstr(crun_ddp_last_error(q.d), "finished 0 of 1 buckets and then nothing for "
					       "1600 ms") != NULL,
	      "message: %s", crun_ddp_last_error(q.d));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == -ETIMEDOUT, "sync again: %s", crun_strerror(rc));
	/* The thread stays stuck: destroy leaves it (and the DDP's memory) behind. */
	crun_ddp_destroy(q.d);
}

static void ddp_waits_are_bounded(void **state)
{
	static const char *const env[] = {"FAKE_NCCL_RANKS=2", NULL};

	(void)state;
	in_child(ddp_watchdog_case, env);
	in_child(ddp_stuck_case, env);
}

/* ---- the end of a step: the compute stream waits on the device, not the host ---- */

#define SN 16 /* floats per tensor (ddp_setup()) */

/* A "kernel" on the compute stream: it writes (@out NULL) or reads (into @out) a gradient. */
struct grad_kernel {
	float *grad;
	float *out; /* NULL: produce grad[i] = 10 + i; else copy grad into out */
	int *ran;
};

static void grad_kernel_run(void *arg)
{
	struct grad_kernel *k = arg;
	int i;

	for (i = 0; i < SN; i++) {
		if (k->out == NULL) {
			k->grad[i] = (float)(10 + i);
		} else {
			k->out[i] = k->grad[i];
		}
	}
	__atomic_store_n(k->ran, 1, __ATOMIC_SEQ_CST);
}

static void launch_grad_kernel(float *grad, float *out, int *ran)
{
	struct grad_kernel *k = malloc(sizeof(*k));

	CHECK(k != NULL, "malloc");
	*k = (struct grad_kernel){grad, out, ran};
	CHECK(fk.launch(NULL, grad_kernel_run, k) == cudaSuccess, "fake kernel launch");
}

/*
 * The device held: gradients produced by kernels still queued on the compute stream (the
 * legacy one), marked ready, synced: sync returns with nothing of the step run (the host did
 * not wait); a kernel queued after sync sees, once the device runs, the averaged gradients
 * (the other rank's are +2: the average is +1), because the compute stream waits for the
 * step's collectives.
 */
static void stream_wait_case(void)
{
	static float seen[2][SN];
	int produced[2] = {0, 0}, consumed[2] = {0, 0};
	int t, i, rc;

	ddp_setup(3000);
	fk.hold(1);
	for (t = 1; t >= 0; t--) {
		launch_grad_kernel(q.g[t], NULL, &produced[t]);
		CHECK(crun_ddp_grad_ready(q.d, t) == 0, "grad_ready: %s", crun_ddp_last_error(q.d));
	}
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0,
	      "sync with the device held: %s: %s (it waited on the host for the step's "
	      "collectives instead of making the compute stream wait for them)",
	      crun_strerror(rc), crun_ddp_last_error(q.d));
	CHECK(!produced[0] && !produced[1] && q.g[0][0] == 0.0f,
	      "the device ran work while held");
	for (t = 0; t < 2; t++) {
		launch_grad_kernel(q.g[t], seen[t], &consumed[t]);
	}
	fk.hold(0);
	rc = crun_ddp_wait(q.d);
	CHECK(rc == 0, "wait: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	for (t = 0; t < 2; t++) {
		CHECK(produced[t] && consumed[t], "tensor %d: kernels ran: %d %d", t, produced[t],
		      consumed[t]);
		for (i = 0; i < SN; i++) {
			CHECK(seen[t][i] == (float)(11 + i),
			      "tensor %d[%d]: the kernel after sync saw %g, expected the average "
			      "%d: the compute stream did not wait for the allreduce",
			      t, i, (double)seen[t][i], 11 + i);
		}
	}
	CHECK(fk.stat("abort") == 0, "%d aborts", fk.stat("abort"));
	crun_ddp_destroy(q.d);
	crun_comm_destroy(q.c);
	store_done(q.st);
}

/* Wait (bounded, named) until the fake NCCL counts @n aborts. */
static bool aborts_reach(int n)
{
	int64_t end = crun_now_ms() + 10000;

	while (fk.stat("abort") < n) {
		if (crun_now_ms() > end) {
			return false;
		}
		usleep(1000);
	}
	return true;
}

/*
 * Step 1's collectives fail on the device (an asynchronous NCCL error) after its sync
 * returned: the DDP's thread aborts the communicator, and step 2's sync names step 1.
 */
static void async_error_next_step_case(void)
{
	int rc;

	ddp_setup(20000);
	fk.hold(1);
	CHECK(crun_ddp_grad_ready(q.d, 1) == 0, "grad_ready: %s", crun_ddp_last_error(q.d));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0, "sync 1 (device held): %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	fk.async_error(ncclRemoteError);
	CHECK(aborts_reach(1), "the communicator was not aborted within 10 s of the error (%d)",
	      fk.stat("abort"));
	fk.hold(0);
	rc = crun_ddp_grad_ready(q.d, 1);
	CHECK(rc == 0, "grad_ready 2: %s", crun_ddp_last_error(q.d));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == CRUN_ENCCL && strstr(crun_ddp_last_error(q.d), "step 1 ") != NULL &&
		      strstr(crun_ddp_last_error(q.d), "the step's collectives") != NULL,
	      "sync 2: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	/* Sticky, and the same for an explicit wait. */
	rc = crun_ddp_wait(q.d);
	CHECK(rc == CRUN_ENCCL, "wait: %s", crun_strerror(rc));
	crun_ddp_destroy(q.d);
	crun_comm_destroy(q.c);
	store_done(q.st);
}

/* A step whose allreduce never completes on the device: the watch's deadline fires. */
static void never_completes_case(void)
{
	int64_t t0;
	int rc;

	ddp_setup(400);
	fk.hold(1);
	t0 = crun_now_ms();
	CHECK(crun_ddp_grad_ready(q.d, 1) == 0, "grad_ready: %s", crun_ddp_last_error(q.d));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0, "sync: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	rc = crun_ddp_wait(q.d);
	CHECK(rc == -ETIMEDOUT && strstr(crun_ddp_last_error(q.d), "step 1 ") != NULL &&
		      strstr(crun_ddp_last_error(q.d), "not complete within 400 ms") != NULL,
	      "wait: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	CHECK(crun_now_ms() - t0 < 4 * 1400, "took %lld ms", (long long)(crun_now_ms() - t0));
	CHECK(fk.stat("abort") == 1, "%d aborts", fk.stat("abort"));
	fk.hold(0);
	rc = crun_ddp_sync(q.d);
	CHECK(rc == -ETIMEDOUT, "sync after: %s", crun_strerror(rc));
	crun_ddp_destroy(q.d);
	crun_comm_destroy(q.c);
	store_done(q.st);
}

static void sync_makes_the_compute_stream_wait(void **state)
{
	static const char *const env[] = {"FAKE_NCCL_RANKS=2", "FAKE_NCCL_PEER_ADD=2", NULL};

	(void)state;
	in_child(stream_wait_case, env);
	in_child(async_error_next_step_case, env);
	in_child(never_completes_case, env);
}

/* ---- devices ---- */

/* Local rank 1 of 2: the communicator on device 1, the DDP created on a thread on device 0. */
static void wrong_device_case(void)
{
	struct crun_ddp_opts o = CRUN_DDP_OPTS_INIT;
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	struct crun_ddp *d = NULL;
	int rc;

	CHECK(fk.set_device(1) == cudaSuccess, "set device 1");
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	CHECK(fk.set_device(0) == cudaSuccess, "set device 0");
	o.memory = CRUN_DDP_MEMORY_CUDA;
	rc = crun_ddp_create(c, &o, &d);
	CHECK(rc == CRUN_ECONFIG, "ddp on device 0 over a device 1 communicator: %s",
	      crun_strerror(rc));
	CHECK(fk.set_device(1) == cudaSuccess, "set device 1");
	rc = crun_ddp_create(c, &o, &d);
	CHECK(rc == 0, "ddp on device 1: %s", crun_strerror(rc));
	crun_ddp_destroy(d);
	crun_comm_destroy(c);
	store_done(st);
}

static struct crun_ddp *g_ddp;
static int g_rc;

static void *grad_ready_thread(void *arg)
{
	(void)arg;
	g_rc = crun_ddp_grad_ready(g_ddp, 1);
	if (g_rc == 0) {
		g_rc = crun_ddp_grad_ready(g_ddp, 0);
	}
	return NULL;
}

/* Device 1 only, and gradients marked on a thread that never chose a device (autograd's). */
static void no_context_case(void)
{
	pthread_t t;
	int rc;

	CHECK(fk.set_device(1) == cudaSuccess, "set device 1");
	ddp_setup(10000);
	g_ddp = q.d;
	CHECK(pthread_create(&t, NULL, grad_ready_thread, NULL) == 0, "thread");
	pthread_join(t, NULL);
	CHECK(g_rc == 0, "grad_ready on another thread: %s", crun_ddp_last_error(q.d));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0, "sync: %s", crun_ddp_last_error(q.d));
	CHECK(!device_has_context(0),
	      "GPU 0 has a context: the DDP switched a thread that never chose a device "
	      "\"back\" to device 0");
	CHECK(device_has_context(1), "GPU 1 has no context");
	crun_ddp_destroy(q.d);
	crun_comm_destroy(q.c);
	store_done(q.st);
}

static void ddp_device_is_the_communicators(void **state)
{
	static const char *const env[] = {"RANK=1",
					  "WORLD_SIZE=2",
					  "LOCAL_RANK=1",
					  "LOCAL_WORLD_SIZE=2",
					  "FAKE_CUDA_DEVICES=2",
					  NULL};

	(void)state;
	in_child(wrong_device_case, env);
}

static void no_context_on_gpu_0(void **state)
{
	static const char *const env[] = {"RANK=1",
					  "WORLD_SIZE=2",
					  "LOCAL_RANK=1",
					  "LOCAL_WORLD_SIZE=2",
					  "FAKE_CUDA_DEVICES=2",
					  "FAKE_NCCL_RANKS=2",
					  NULL};

	(void)state;
	in_child(no_context_case, env);
}

/* ---- the communicator is the DDP's for the whole of a step ---- */

static void held_case(void)
{
	int rc;

	ddp_setup(10000);
	/* One of the bucket's two gradients: nothing queued yet, but the step has begun. */
	CHECK(crun_ddp_grad_ready(q.d, 1) == 0, "grad_ready: %s", crun_ddp_last_error(q.d));
	rc = crun_comm_barrier(q.c);
	CHECK(rc == -EBUSY, "a barrier between grad_ready and sync: %s", crun_strerror(rc));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0, "sync: %s", crun_ddp_last_error(q.d));
	rc = crun_comm_barrier(q.c);
	CHECK(rc == 0, "a barrier after sync: %s", crun_comm_last_error(q.c));
	/* And the next step again. */
	CHECK(crun_ddp_grad_ready(q.d, 0) == 0, "grad_ready: %s", crun_ddp_last_error(q.d));
	CHECK(crun_comm_barrier(q.c) == -EBUSY, "barrier in step 2");
	CHECK(crun_ddp_sync(q.d) == 0, "sync 2: %s", crun_ddp_last_error(q.d));
	crun_ddp_destroy(q.d);
	crun_comm_destroy(q.c);
	store_done(q.st);
}

static void a_step_holds_the_communicator(void **state)
{
	static const char *const env[] = {"FAKE_NCCL_RANKS=2", NULL};

	(void)state;
	in_child(held_case, env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(virtual_local_rank_is_accepted),
		cmocka_unit_test(mpirun_and_srun_local_ranks_are_read),
		cmocka_unit_test(blocking_collective_is_aborted_at_its_deadline),
		cmocka_unit_test(ddp_waits_are_bounded),
		cmocka_unit_test(sync_makes_the_compute_stream_wait),
		cmocka_unit_test(ddp_device_is_the_communicators),
		cmocka_unit_test(no_context_on_gpu_0),
		cmocka_unit_test(a_step_holds_the_communicator),
	};

	return cmocka_run_group_tests_name("ddp-fake-gpu", tests, NULL, NULL);
}
