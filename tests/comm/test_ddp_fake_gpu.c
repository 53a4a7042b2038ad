/* SPDX-License-Identifier: MIT */
/* tests/comm/test_ddp_fake_gpu.c: the device DDP and the worker's GPU choice on fake CUDA/NCCL. */

/*
 * Issue 22's defects that the fakes (tests/comm/fake_gpu/) can show without a GPU:
 * --virtual-local-rank's environment accepted; mpirun's and srun's local rank and size read;
 * a blocking collective that never returns (NCCL connecting inside it to a peer that never
 * comes) aborted by the watchdog at the deadline; crun_ddp_sync() bounded when its
 * communication thread is stuck; the DDP refusing a device other than its communicator's;
 * no context made on GPU 0 by a thread that never chose a device; a collective from another
 * thread refused for the whole of a DDP step. Each case runs in a child of its own
 * (fake_gpu_harness.h).
 */
#include <stdarg.h> /* cmocka 1.x wants these before cmocka.h */
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(virtual_local_rank_is_accepted),
		cmocka_unit_test(mpirun_and_srun_local_ranks_are_read),
	};

	return cmocka_run_group_tests_name("ddp-fake-gpu", tests, NULL, NULL);
}
