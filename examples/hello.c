/* SPDX-License-Identifier: MIT */
/* examples/hello.c: print what crun told this worker; a smoke test of libcrun-worker. */
#include <stdio.h>
#include <string.h>

#include <crun/crun.h>

int main(int argc, char **argv)
{
	char err[256];
	int rc, barrier = argc > 1 && strcmp(argv[1], "--barrier") == 0;

	rc = crun_init(NULL, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "hello: %s\n", err);
		return 2;
	}
	printf("hello from rank %d of %d (local rank %d of %d, node %d of %d, restart %d, "
	       "run %s)\n",
	       crun_rank(), crun_world_size(), crun_local_rank(), crun_local_world_size(),
	       crun_node_rank(), crun_node_count(), crun_restart_count(), crun_run_id());
	fflush(stdout);
	if (barrier) {
		rc = crun_barrier(60000);
		if (rc < 0) {
			fprintf(stderr, "hello: rank %d: barrier: %s\n", crun_rank(),
				crun_strerror(rc));
			crun_finish();
			return 1;
		}
		printf("rank %d passed the barrier\n", crun_rank());
	}
	crun_finish();
	return 0;
}
