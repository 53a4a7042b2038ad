/* SPDX-License-Identifier: MIT */
/* tests/comm/test_comm_fake_gpu.c: the nccl backend's logic on a fake CUDA runtime and NCCL. */

/*
 * What the GPU path decides before NCCL does anything, shown without a GPU: which device a
 * rank uses, the refusal of more local ranks than GPUs, the check that the communicator's
 * device is the caller's, host buffers refused before NCCL sees them, the caller's device
 * restored after a collective, a freed buffer's address not approved by the cache, the collectives on a blocking communicator split off the
 * non-blocking one (with a deadline on the split), one thread at a time, the cause of a
 * CUDA initialisation failure named, and the device DDP queuing every ready bucket's
 * allreduce before the one before has completed (then waiting once, with the deadline and
 * the asynchronous errors of a collective). Each case runs in a child process of its own
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
#include <sys/mman.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "tests/comm/fake_gpu_harness.h"
#include "worker_api/gpu_device.h"

/* ---- the device rule, as arithmetic ---- */

static void device_rule_arithmetic(void **state)
{
	struct crun_diag d = {0};
	bool on = true;
	int dev = -1;

	(void)state;
	assert_int_equal(gpu_device_pick(0, 1, 1, false, NULL, &dev, &d), 0);
	assert_int_equal(dev, 0);
	assert_int_equal(gpu_device_pick(3, 8, 8, false, NULL, &dev, &d), 0);
	assert_int_equal(dev, 3);
	/* Fewer local ranks than GPUs: rank r still takes GPU r. */
	assert_int_equal(gpu_device_pick(1, 2, 4, false, NULL, &dev, &d), 0);
	assert_int_equal(dev, 1);
	/* More local ranks than GPUs: refused, naming both counts and CUDA_VISIBLE_DEVICES. */
	dev = -1;
	assert_int_equal(gpu_device_pick(0, 4, 2, false, "0,1", &dev, &d), CRUN_ECONFIG);
	assert_int_equal(dev, -1);
	assert_non_null(strstr(d.msg, "4 local ranks"));
	assert_non_null(strstr(d.msg, "2 visible GPUs"));
	assert_non_null(strstr(d.msg, "CUDA_VISIBLE_DEVICES=\"0,1\""));
	assert_non_null(strstr(d.msg, "CRUN_GPU_SHARING=1"));
	assert_int_equal(gpu_device_pick(2, 3, 1, false, NULL, &dev, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "1 visible GPU ("));
	assert_non_null(strstr(d.msg, "CUDA_VISIBLE_DEVICES unset"));
	/* ... unless sharing is asked for: r % n. */
	assert_int_equal(gpu_device_pick(3, 4, 2, true, "0,1", &dev, &d), 0);
	assert_int_equal(dev, 1);
	assert_int_equal(gpu_device_pick(0, 1, 0, true, NULL, &dev, &d), CRUN_ENODEV);
	assert_int_equal(gpu_device_pick(2, 2, 4, false, NULL, &dev, &d), -EINVAL);
	assert_int_equal(gpu_sharing_parse(NULL, &on, &d), 0);
	assert_false(on);
	assert_int_equal(gpu_sharing_parse("1", &on, &d), 0);
	assert_true(on);
	assert_int_equal(gpu_sharing_parse("0", &on, &d), 0);
	assert_false(on);
	assert_int_equal(gpu_sharing_parse("yes", &on, &d), CRUN_ECONFIG);
	assert_non_null(strstr(d.msg, "CRUN_GPU_SHARING"));
}

/* ---- a GPU visible, a program written for host buffers ---- */

static void host_buffers_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	float h[4] = {1, 2, 3, 4}, *d = dev_floats(4);
	int rc;

	rc = create(st, CRUN_BACKEND_AUTO, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	CHECK(crun_comm_backend(c) == CRUN_BACKEND_NCCL, "auto chose %d", crun_comm_backend(c));
	/* The fake NCCL aborts the process if a host pointer reaches it. */
	rc = crun_comm_allreduce(c, h, h, 4, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == -EFAULT, "host allreduce: %s", crun_strerror(rc));
	CHECK(strstr(crun_comm_last_error(c), "send buffer") != NULL &&
		      strstr(crun_comm_last_error(c), "host memory") != NULL &&
		      strstr(crun_comm_last_error(c), "CRUN_BACKEND=cpu") != NULL,
	      "message: %s", crun_comm_last_error(c));
	rc = crun_comm_allreduce(c, d, h, 4, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == -EFAULT && strstr(crun_comm_last_error(c), "recv buffer") != NULL,
	      "recv on the host: %s: %s", crun_strerror(rc), crun_comm_last_error(c));
	rc = crun_comm_broadcast(c, h, 4, CRUN_DTYPE_FLOAT32, 0);
	CHECK(rc == -EFAULT, "host broadcast: %s", crun_strerror(rc));
	/* An argument error: the communicator still works with device memory. */
	rc = crun_comm_allreduce(c, d, d, 4, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == 0, "device allreduce: %s: %s", crun_strerror(rc), crun_comm_last_error(c));
	rc = crun_comm_allgather(c, d, d, 4, CRUN_DTYPE_FLOAT32);
	CHECK(rc == 0, "device allgather: %s", crun_comm_last_error(c));
	crun_comm_destroy(c);
	store_done(st);
}

static void auto_backend_refuses_host_buffers(void **state)
{
	static const char *const env[] = {"CRUN_SINGLE=1", "FAKE_CUDA_DEVICES=1", NULL};

	(void)state;
	in_child(host_buffers_case, env);
}

/* ---- collectives on a blocking communicator, split off the non-blocking one ---- */

static void blocking_split_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	float *d = dev_floats(16);
	int rc, i;

	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	CHECK(fk.stat("split") == 1, "%d splits", fk.stat("split"));
	/* The parent is gone once the split is done: only the blocking one is left. */
	CHECK(fk.stat("live") == 1, "%d live NCCL communicators", fk.stat("live"));
	for (i = 0; i < 10; i++) {
		rc = crun_comm_allreduce(c, d, d, 16, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
		CHECK(rc == 0, "allreduce: %s", crun_comm_last_error(c));
	}
	CHECK(crun_comm_barrier(c) == 0, "barrier");
	CHECK(fk.stat("coll_nonblocking") == 0,
	      "%d collectives on a non-blocking communicator (a thread each in NCCL 2.28)",
	      fk.stat("coll_nonblocking"));
	CHECK(fk.stat("coll_blocking") == 12, "%d collectives", fk.stat("coll_blocking"));
	crun_comm_destroy(c);
	CHECK(fk.stat("live") == 0 && fk.stat("abort") == 0, "after destroy: %d live, %d aborted",
	      fk.stat("live"), fk.stat("abort"));
	store_done(st);
}

static void collectives_run_on_a_blocking_split(void **state)
{
	static const char *const env[] = {"CRUN_SINGLE=1", NULL};

	(void)state;
	in_child(blocking_split_case, env);
}

static void hang_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	const char *hang = getenv("FAKE_NCCL_HANG");
	int64_t t0 = crun_now_ms();
	int rc;

	rc = create(st, CRUN_BACKEND_NCCL, 400, &c);
	CHECK(rc == -ETIMEDOUT, "create with the %s hanging: %s", hang, crun_strerror(rc));
	CHECK(crun_now_ms() - t0 < 5000, "took %lld ms", (long long)(crun_now_ms() - t0));
	/* Both aborted, parent first (which hands over the split's child). */
	CHECK(fk.stat("live") == 0, "%d NCCL communicators left", fk.stat("live"));
	CHECK(fk.stat("abort") == (strcmp(hang, "split") == 0 ? 2 : 1), "%d aborts",
	      fk.stat("abort"));
	store_done(st);
}

static void split_and_init_keep_the_deadline(void **state)
{
	static const char *const split[] = {"CRUN_SINGLE=1", "FAKE_NCCL_HANG=split", NULL};
	static const char *const init[] = {"CRUN_SINGLE=1", "FAKE_NCCL_HANG=init", NULL};

	(void)state;
	in_child(hang_case, split);
	in_child(hang_case, init);
}

/* ---- one source of truth for the device ---- */

static void too_many_ranks_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	char err[512], log[4096];
	int rc, fd, saved;

	rc = crun_cuda_device(err, sizeof(err));
	CHECK(rc == CRUN_ECONFIG, "crun_cuda_device: %d", rc);
	CHECK(strstr(err, "4 local ranks") != NULL && strstr(err, "2 visible GPUs") != NULL &&
		      strstr(err, "CUDA_VISIBLE_DEVICES=\"0,1\"") != NULL,
	      "message: %s", err);
	fd = capture_begin(&saved);
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	capture_end(fd, saved, log, sizeof(log));
	CHECK(rc == CRUN_ECONFIG, "create: %s", crun_strerror(rc));
	CHECK(strstr(log, "4 local ranks") != NULL && strstr(log, "backend nccl") != NULL,
	      "log: %s", log);
	CHECK(fk.stat("live") == 0, "NCCL was called");
	store_done(st);
}

static void sharing_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	char err[512];
	int dev, rc;

	dev = crun_cuda_device(err, sizeof(err));
	CHECK(dev == 1, "local rank 3 of 4 on 2 GPUs, sharing: %d (%s)", dev, err);
	CHECK(fk.set_device(dev) == cudaSuccess, "set device");
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	crun_comm_destroy(c);
	store_done(st);
}

static void more_local_ranks_than_gpus_is_refused(void **state)
{
	static const char *const env[] = {"RANK=0",
					  "WORLD_SIZE=4",
					  "LOCAL_RANK=0",
					  "LOCAL_WORLD_SIZE=4",
					  "FAKE_CUDA_DEVICES=2",
					  "CUDA_VISIBLE_DEVICES=0,1",
					  NULL};
	static const char *const shared[] = {"RANK=3",
					     "WORLD_SIZE=4",
					     "LOCAL_RANK=3",
					     "LOCAL_WORLD_SIZE=4",
					     "FAKE_CUDA_DEVICES=2",
					     "CRUN_GPU_SHARING=1",
					     NULL};

	(void)state;
	in_child(too_many_ranks_case, env);
	in_child(sharing_case, shared);
}

static struct crun_comm *g_comm;
static float *g_buf;
static int g_rc;

static void *allreduce_thread(void *arg)
{
	(void)arg;
	g_rc = crun_comm_allreduce(g_comm, g_buf, g_buf, 8, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	return NULL;
}

static void device_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	char log[4096];
	float *on1, *on0;
	int rc, fd, saved, dev = -1;

	/* Local rank 1, but the thread's current device is still 0. */
	fd = capture_begin(&saved);
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	capture_end(fd, saved, log, sizeof(log));
	CHECK(rc == CRUN_ECONFIG, "create on the wrong device: %s", crun_strerror(rc));
	CHECK(strstr(log, "current CUDA device is 0, but this process's device is 1") != NULL,
	      "log: %s", log);
	on0 = dev_floats(8);
	CHECK(fk.set_device(crun_cuda_device(NULL, 0)) == cudaSuccess, "set device");
	on1 = dev_floats(8);
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	/* Another thread (device 0 by default, as a DDP's): the call switches and switches back. */
	g_comm = c;
	g_buf = on1;
	{
		pthread_t t;

		CHECK(pthread_create(&t, NULL, allreduce_thread, NULL) == 0, "thread");
		pthread_join(t, NULL);
	}
	CHECK(g_rc == 0, "allreduce from another thread: %s", crun_comm_last_error(c));
	CHECK(fk.set_device(0) == cudaSuccess, "set device 0");
	rc = crun_comm_allreduce(c, on1, on1, 8, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == 0, "allreduce: %s", crun_comm_last_error(c));
	fk.get_device(&dev);
	CHECK(dev == 0, "the caller's device after a collective: %d, expected 0 (restored)", dev);
	/* Memory of another device is refused. */
	rc = crun_comm_allreduce(c, on0, on0, 8, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == -EFAULT && strstr(crun_comm_last_error(c), "on CUDA device 0, the "
							       "communicator on device 1") != NULL,
	      "device 0 memory: %s: %s", crun_strerror(rc), crun_comm_last_error(c));
	crun_comm_destroy(c);
	store_done(st);
}

static int g_thread_dev;

static void *allreduce_thread_dev(void *arg)
{
	(void)arg;
	g_rc = crun_comm_allreduce(g_comm, g_buf, g_buf, 8, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	fk.get_device(&g_thread_dev);
	return NULL;
}

static void unused_device_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	pthread_t t;
	int rc;

	/* Device 1 from the start: nothing in this process ever touches device 0. */
	CHECK(fk.set_device(crun_cuda_device(NULL, 0)) == cudaSuccess, "set device");
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	g_comm = c;
	g_buf = dev_floats(8);
	/* A thread that never chose a device reads 0; switching it "back" would create a
	 * context on GPU 0 (cudaSetDevice initialises it): it stays on the comm's device. */
	CHECK(pthread_create(&t, NULL, allreduce_thread_dev, NULL) == 0, "thread");
	pthread_join(t, NULL);
	CHECK(g_rc == 0, "allreduce: %s", crun_comm_last_error(c));
	CHECK(g_thread_dev == 1, "the thread's device after the collective: %d, expected 1",
	      g_thread_dev);
	crun_comm_destroy(c);
	store_done(st);
}

static void no_crun_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	float *d;
	int rc;

	/* Ranks from the caller, no crun environment: the current device is the one. */
	CHECK(crun_cuda_device(NULL, 0) == CRUN_ENOTCRUN, "crun_cuda_device outside crun");
	CHECK(fk.set_device(1) == cudaSuccess, "set device");
	d = dev_floats(8);
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	rc = crun_comm_allreduce(c, d, d, 8, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == 0, "allreduce: %s", crun_comm_last_error(c));
	crun_comm_destroy(c);
	store_done(st);
}

static void communicator_device_is_the_callers(void **state)
{
	static const char *const env[] = {"RANK=1",
					  "WORLD_SIZE=2",
					  "LOCAL_RANK=1",
					  "LOCAL_WORLD_SIZE=2",
					  "FAKE_CUDA_DEVICES=2",
					  NULL};
	static const char *const outside[] = {"FAKE_CUDA_DEVICES=2", NULL};

	(void)state;
	in_child(device_case, env);
	in_child(unused_device_case, env);
	in_child(no_crun_case, outside);
}

/* ---- the usable-buffer cache forgets freed allocations ---- */

#define STALE_N 1024 /* floats: one page */

/* A buffer approved, freed, and then host memory or device 1's buffer at its address. */
static void stale_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	size_t bytes = STALE_N * sizeof(float);
	float *buf;
	void *m;
	int rc;

	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	buf = dev_floats(STALE_N);
	rc = crun_comm_allreduce(c, buf, buf, STALE_N, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == 0, "allreduce: %s", crun_comm_last_error(c));
	CHECK(fk.free(buf) == cudaSuccess, "fake cudaFree");
	/* Host memory where the buffer was: NCCL (the fake aborts) must never see it. */
	m = mmap(buf, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	CHECK(m == buf, "host memory at %p: %p (%s)", (void *)buf, m, strerror(errno));
	rc = crun_comm_allreduce(c, buf, buf, STALE_N, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == -EFAULT && strstr(crun_comm_last_error(c), "is host memory") != NULL,
	      "host memory at a freed buffer's address: %s: %s", crun_strerror(rc),
	      crun_comm_last_error(c));
	munmap(m, bytes);
	/* Device 1's allocation at the same address. */
	CHECK(fk.set_device(1) == cudaSuccess && fk.malloc_at(buf, bytes) == cudaSuccess &&
		      fk.set_device(0) == cudaSuccess,
	      "device 1 buffer at %p", (void *)buf);
	rc = crun_comm_allreduce(c, buf, buf, STALE_N, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == -EFAULT && strstr(crun_comm_last_error(c), "is on CUDA device 1, the "
							       "communicator on device 0") != NULL,
	      "device 1 memory at a freed buffer's address: %s: %s", crun_strerror(rc),
	      crun_comm_last_error(c));
	/* Freed and reallocated on the right device: usable again. */
	CHECK(fk.free(buf) == cudaSuccess && fk.malloc_at(buf, bytes) == cudaSuccess, "realloc");
	rc = crun_comm_allreduce(c, buf, buf, STALE_N, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == 0, "allreduce on device 0 again: %s", crun_comm_last_error(c));
	crun_comm_destroy(c);
	store_done(st);
}

static void freed_buffers_are_checked_again(void **state)
{
	static const char *const env[] = {"FAKE_CUDA_DEVICES=2", NULL};

	(void)state;
	in_child(stale_case, env);
}

/* ---- one thread at a time ---- */

static void busy_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	pthread_t t;
	int rc;

	rc = create(st, CRUN_BACKEND_NCCL, 20000, &c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	g_comm = c;
	g_buf = dev_floats(8);
	fk.hold(1);
	CHECK(pthread_create(&t, NULL, allreduce_thread, NULL) == 0, "thread");
	while (fk.held_queries() == 0) {
		usleep(1000);
	}
	/* The other thread is waiting for its collective: this call must not enter. */
	rc = crun_comm_barrier(c);
	fk.hold(0);
	pthread_join(t, NULL);
	CHECK(rc == -EBUSY, "a second thread's barrier: %s", crun_strerror(rc));
	CHECK(g_rc == 0, "the first thread's allreduce: %s", crun_comm_last_error(c));
	CHECK(crun_comm_barrier(c) == 0, "barrier after: %s", crun_comm_last_error(c));
	crun_comm_destroy(c);
	store_done(st);
}

static void second_thread_gets_ebusy(void **state)
{
	static const char *const env[] = {"CRUN_SINGLE=1", NULL};

	(void)state;
	in_child(busy_case, env);
}

/* ---- the cause of a CUDA initialisation failure ---- */

static void init_failure_case(void)
{
	struct crun_store *st = store_open();
	struct crun_comm *c = NULL;
	const char *want = getenv("WANT");
	char err[512];
	int rc;

	rc = crun_cuda_device(err, sizeof(err));
	CHECK(rc == CRUN_ENODEV && strstr(err, want) != NULL, "crun_cuda_device: %d: %s", rc, err);
	rc = create(st, CRUN_BACKEND_NCCL, 10000, &c);
	CHECK(rc == CRUN_ENODEV, "create: %s", crun_strerror(rc));
	/* Auto: no usable GPU, so cpu. */
	rc = create(st, CRUN_BACKEND_AUTO, 10000, &c);
	CHECK(rc == 0 && crun_comm_backend(c) == CRUN_BACKEND_CPU, "auto: %s", crun_strerror(rc));
	crun_comm_destroy(c);
	store_done(st);
}

static void cuda_init_failures_name_the_cause(void **state)
{
	static const char *const old[] = {
		"CRUN_SINGLE=1", "FAKE_CUDA_ERROR=35", "FAKE_CUDA_DRIVER=12020",
		"WANT=the NVIDIA driver supports CUDA 12.2, older than the "
		"CUDA runtime 13.0",
		NULL};
	static const char *const none[] = {"CRUN_SINGLE=1", "FAKE_CUDA_ERROR=35",
					   "FAKE_CUDA_DRIVER=0", "WANT=no NVIDIA driver", NULL};
	static const char *const fm[] = {"CRUN_SINGLE=1", "FAKE_CUDA_ERROR=802",
					 "WANT=nvidia-fabricmanager", NULL};
	static const char *const hidden[] = {
		"CRUN_SINGLE=1", "FAKE_CUDA_DEVICES=0", "CUDA_VISIBLE_DEVICES=-1",
		"WANT=no CUDA device visible (CUDA_VISIBLE_DEVICES=\"-1\")", NULL};

	(void)state;
	in_child(init_failure_case, old);
	in_child(init_failure_case, none);
	in_child(init_failure_case, fm);
	in_child(init_failure_case, hidden);
}

/* ---- the device DDP queues every ready bucket, then waits once ---- */

#define QT 8  /* tensors, two per bucket */
#define QN 64 /* floats per tensor */
#define QB 4  /* buckets */

static struct {
	struct crun_store *st;
	struct crun_comm *c;
	struct crun_ddp *d;
	float *p[QT], *g[QT];
} q;

/*
 * Rank 0 of a 2-rank nccl communicator (the fake NCCL's other rank holds the same data: an
 * average is the data itself) and a device DDP of QT tensors in QB buckets: tensors 0-3's
 * gradients back to back in one allocation, 4-7's each in its own (through flat buffers).
 */
static void queue_setup(int timeout_ms)
{
	struct crun_comm_opts co = CRUN_COMM_OPTS_INIT;
	struct crun_ddp_opts o = CRUN_DDP_OPTS_INIT;
	float *block;
	int rc, t;

	q.st = store_open();
	co.backend = CRUN_BACKEND_NCCL;
	co.timeout_ms = timeout_ms;
	rc = crun_comm_create(q.st, 0, 2, &co, &q.c);
	CHECK(rc == 0, "create: %s", crun_strerror(rc));
	o.memory = CRUN_DDP_MEMORY_CUDA;
	o.bucket_cap_bytes = 2 * QN * sizeof(float);
	o.first_bucket_bytes = 2 * QN * sizeof(float);
	rc = crun_ddp_create(q.c, &o, &q.d);
	CHECK(rc == 0, "ddp create: %s", crun_strerror(rc));
	block = dev_floats(4 * QN);
	for (t = 0; t < QT; t++) {
		q.p[t] = dev_floats(QN);
		q.g[t] = t < 4 ? block + (size_t)t * QN : dev_floats(QN);
		CHECK(crun_ddp_register(q.d, q.p[t], q.g[t], QN) == t, "register %d", t);
	}
	rc = crun_ddp_broadcast_params(q.d);
	CHECK(rc == 0, "broadcast: %s", crun_ddp_last_error(q.d));
	CHECK(crun_ddp_bucket_count(q.d) == QB, "%d buckets", crun_ddp_bucket_count(q.d));
}

static void queue_done(void)
{
	crun_ddp_destroy(q.d);
	crun_comm_destroy(q.c);
	store_done(q.st);
}

/* Fill the gradients (step @k), clear the queue log, mark every gradient ready. */
static void queue_step(int k)
{
	char log[256];
	int t, i;

	for (t = 0; t < QT; t++) {
		for (i = 0; i < QN; i++) {
			q.g[t][i] = (float)(k * 1000 + t * 10 + i % 7);
		}
	}
	fk.log(log, sizeof(log), 1);
	for (t = QT - 1; t >= 0; t--) {
		CHECK(crun_ddp_grad_ready(q.d, t) == 0, "grad_ready %d: %s", t,
		      crun_ddp_last_error(q.d));
	}
}

static void queue_check_grads(int k)
{
	int t, i;

	for (t = 0; t < QT; t++) {
		for (i = 0; i < QN; i++) {
			CHECK(q.g[t][i] == (float)(k * 1000 + t * 10 + i % 7),
			      "step %d: gradient %d[%d] = %g after the average", k, t, i,
			      (double)q.g[t][i]);
		}
	}
}

/* Wait (up to 5 s) until the queue log holds @n allreduces and the DDP waits on its stream. */
static bool queue_wait_queued(int n, char *log, size_t len)
{
	int64_t end = crun_now_ms() + 5000;
	int q0 = fk.held_queries(), i, got;

	for (;;) {
		fk.log(log, len, 0);
		for (i = 0, got = 0; log[i] != '\0'; i++) {
			got += log[i] == 'A';
		}
		if (got >= n && fk.held_queries() > q0) {
			return true;
		}
		if (crun_now_ms() > end) {
			return false;
		}
		usleep(1000);
	}
}

static void queue_case(void)
{
	char log[256];
	bool queued;
	int k, rc;

	queue_setup(20000);
	/* Each step: the QB allreduces queued back to back ('A'), the step's end found complete
	 * once ('W'); one at a time would read "AWAWAWAW". The host reads the gradients, so it
	 * waits for them first (sync itself does not wait). */
	for (k = 1; k <= 2; k++) {
		queue_step(k);
		rc = crun_ddp_sync(q.d);
		CHECK(rc == 0, "sync: %s", crun_ddp_last_error(q.d));
		rc = crun_ddp_wait(q.d);
		CHECK(rc == 0, "wait: %s", crun_ddp_last_error(q.d));
		fk.log(log, sizeof(log), 0);
		CHECK(strcmp(log, "AAAAW") == 0,
		      "step %d: queue log \"%s\", expected \"AAAAW\" (every bucket queued, "
		      "then one wait)",
		      k, log);
		queue_check_grads(k);
	}
	/* The stream held (the first bucket never completes): every bucket is still queued,
	 * and the DDP's thread waits inside the communicator, so another thread gets -EBUSY. */
	fk.hold(1);
	queue_step(3);
	queued = queue_wait_queued(QB, log, sizeof(log));
	rc = queued ? crun_comm_barrier(q.c) : 0;
	fk.hold(0);
	CHECK(queued,
	      "with the first bucket incomplete, the queue log is \"%s\" after 5 s: "
	      "expected %d allreduces queued and a wait",
	      log, QB);
	CHECK(rc == -EBUSY, "a barrier while the buckets are in flight: %s", crun_strerror(rc));
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0, "sync: %s", crun_ddp_last_error(q.d));
	rc = crun_ddp_wait(q.d);
	CHECK(rc == 0, "wait: %s", crun_ddp_last_error(q.d));
	fk.log(log, sizeof(log), 0);
	CHECK(strcmp(log, "AAAAW") == 0, "held step: queue log \"%s\"", log);
	queue_check_grads(3);
	CHECK(fk.stat("abort") == 0, "%d aborts", fk.stat("abort"));
	queue_done();
}

/*
 * The step's end is watched with the communicator's deadline, which aborts it as a
 * collective's wait does; sync itself returned at once, and the failure is the next call's.
 */
static void queue_timeout_case(void)
{
	char log[256];
	int64_t t0;
	int rc;

	queue_setup(300);
	fk.hold(1);
	t0 = crun_now_ms();
	queue_step(1);
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0, "sync with the stream held: %s: %s", crun_strerror(rc),
	      crun_ddp_last_error(q.d));
	rc = crun_ddp_wait(q.d);
	fk.hold(0);
	fk.log(log, sizeof(log), 0);
	CHECK(rc == -ETIMEDOUT, "wait with the stream held: %s: %s", crun_strerror(rc),
	      crun_ddp_last_error(q.d));
	CHECK(crun_now_ms() - t0 < 5000, "took %lld ms", (long long)(crun_now_ms() - t0));
	CHECK(strcmp(log, "AAAA") == 0, "queue log \"%s\"", log);
	CHECK(strstr(crun_ddp_last_error(q.d), "step 1 ") != NULL &&
		      strstr(crun_ddp_last_error(q.d), "not complete within 300 ms") != NULL,
	      "message: %s", crun_ddp_last_error(q.d));
	CHECK(fk.stat("abort") == 1, "%d aborts", fk.stat("abort"));
	/* Poisoned, as after a synchronous collective's timeout. */
	rc = crun_comm_allreduce(q.c, q.g[0], q.g[0], QN, CRUN_DTYPE_FLOAT32, CRUN_REDOP_SUM);
	CHECK(rc == -ETIMEDOUT, "allreduce after: %s", crun_strerror(rc));
	queue_done();
}

/* An asynchronous NCCL error while the step is watched, and one already raised at a bucket's
 * enqueue. */
static void queue_async_error_case(void)
{
	char log[256];
	bool queued;
	int rc;

	queue_setup(20000);
	fk.hold(1);
	queue_step(1);
	rc = crun_ddp_sync(q.d);
	CHECK(rc == 0, "sync: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	queued = queue_wait_queued(QB, log, sizeof(log));
	fk.async_error(ncclRemoteError);
	rc = crun_ddp_wait(q.d);
	fk.hold(0);
	CHECK(queued, "queue log \"%s\"", log);
	CHECK(rc == CRUN_ENCCL, "wait: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	CHECK(strstr(crun_ddp_last_error(q.d), "the step's collectives") != NULL, "message: %s",
	      crun_ddp_last_error(q.d));
	CHECK(fk.stat("abort") == 1, "%d aborts", fk.stat("abort"));
	queue_done();

	/* Raised before the step: the first bucket's enqueue reports it and aborts, the others
	 * are not queued, the wait answers at once, and the first message is kept. */
	fk.async_error(0);
	queue_setup(20000);
	fk.async_error(ncclRemoteError);
	queue_step(1);
	rc = crun_ddp_sync(q.d);
	fk.log(log, sizeof(log), 0);
	CHECK(rc == CRUN_ENCCL, "sync: %s: %s", crun_strerror(rc), crun_ddp_last_error(q.d));
	CHECK(strcmp(log, "A") == 0, "queue log \"%s\"", log);
	CHECK(strstr(crun_ddp_last_error(q.d), "ddp_cuda: allreduce: ") != NULL &&
		      strstr(crun_ddp_last_error(q.d), "ncclAllReduce") != NULL,
	      "message: %s", crun_ddp_last_error(q.d));
	CHECK(fk.stat("abort") == 2, "%d aborts", fk.stat("abort"));
	queue_done();
}

static void ddp_buckets_are_queued_before_the_previous_completes(void **state)
{
	static const char *const env[] = {"FAKE_NCCL_RANKS=2", NULL};

	(void)state;
	in_child(queue_case, env);
	in_child(queue_timeout_case, env);
	in_child(queue_async_error_case, env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(device_rule_arithmetic),
		cmocka_unit_test(auto_backend_refuses_host_buffers),
		cmocka_unit_test(collectives_run_on_a_blocking_split),
		cmocka_unit_test(split_and_init_keep_the_deadline),
		cmocka_unit_test(more_local_ranks_than_gpus_is_refused),
		cmocka_unit_test(communicator_device_is_the_callers),
		cmocka_unit_test(freed_buffers_are_checked_again),
		cmocka_unit_test(second_thread_gets_ebusy),
		cmocka_unit_test(cuda_init_failures_name_the_cause),
		cmocka_unit_test(ddp_buckets_are_queued_before_the_previous_completes),
	};

	return cmocka_run_group_tests_name("comm-fake-gpu", tests, NULL, NULL);
}
