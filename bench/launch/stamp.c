/* SPDX-License-Identifier: MIT */
/* bench/launch/stamp.c: a benchmark worker: records when it started, then exits or crashes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/common/fs.h"

/*
 * stamp DIR MODE
 *   DIR/start.<RANK>.<RESTART_COUNT> gets the CLOCK_REALTIME ns at which this worker started.
 *   MODE exit:       exit 0 at once
 *        hold:MS     sleep MS, exit 0
 *        crash-once: rank 0 waits until every rank has stamped, writes DIR/crash (ns) and
 *                    exits 1, the others sleep; once DIR/crash exists a worker writes
 *                    DIR/re.<RANK> (its start ns) and exits 0
 */
static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int env_int(const char *k)
{
	const char *v = getenv(k);

	return v != NULL ? atoi(v) : 0;
}

/* The one atomic writer (src/common/fs.c): never a predictable temp name, never a link. */
static void put(const char *path, long long v)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%lld\n", v);

	if (fs_write_atomic(path, &(struct fs_chunk){buf, (size_t)n}, 1, 0644, NULL) < 0) {
		exit(3);
	}
}

int main(int argc, char **argv)
{
	long long t = now_ns();
	int rank = env_int("RANK"), restart = env_int("TORCHELASTIC_RESTART_COUNT");
	int world = env_int("WORLD_SIZE");
	char path[4096];

	if (argc < 3) {
		fprintf(stderr, "usage: stamp DIR exit|hold:MS|crash-once\n");
		return 2;
	}
	if (strcmp(argv[2], "crash-once") == 0) {
		/*
		 * torchrun keeps the restart count of nodes that did not fail, so a replacement
		 * is recognised by the crash mark instead.
		 */
		snprintf(path, sizeof(path), "%s/crash", argv[1]);
		if (access(path, F_OK) == 0) {
			snprintf(path, sizeof(path), "%s/re.%d", argv[1], rank);
			put(path, t);
			return 0;
		}
	}
	snprintf(path, sizeof(path), "%s/start.%d.%d", argv[1], rank, restart);
	put(path, t);
	if (strcmp(argv[2], "exit") == 0) {
		return 0;
	}
	if (strncmp(argv[2], "hold:", 5) == 0) {
		usleep((useconds_t)atoi(argv[2] + 5) * 1000);
		return 0;
	}
	if (strcmp(argv[2], "crash-once") == 0) {
		int r, tries;

		if (rank != 0) {
			sleep(120);
			return 0;
		}
		for (r = 0; r < world; r++) {
			snprintf(path, sizeof(path), "%s/start.%d.0", argv[1], r);
			for (tries = 0; tries < 6000 && access(path, F_OK) != 0; tries++) {
				usleep(10000);
			}
		}
		usleep(200000); /* let every worker settle into its sleep */
		snprintf(path, sizeof(path), "%s/crash", argv[1]);
		put(path, now_ns());
		return 1;
	}
	return 2;
}
