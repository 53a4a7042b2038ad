/* SPDX-License-Identifier: MIT */
/* bench/launch/stamp.c: a benchmark worker: records when it started, then exits or crashes. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * stamp DIR MODE
 *   DIR/start.<RANK>.<RESTART_COUNT> gets the CLOCK_REALTIME ns at which this worker started.
 *   MODE exit:       exit 0 at once
 *        hold:MS     sleep MS, exit 0
 *        crash-once[:MS]: rank 0 waits until every rank has stamped, then 200 ms plus a
 *                    random part of MS (default 100: a random point of torchrun's monitor
 *                    period), writes DIR/crash (ns) and exits 1, the others sleep; once
 *                    DIR/crash exists a worker writes DIR/re.<RANK> (its start ns), exits 0
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

/*
 * A stamp is a new file in the bench's own fresh directory (mkdtemp), read by the bench once
 * every worker has ended: O_EXCL|O_NOFOLLOW (never through a link, never an old file), and no
 * fsync. A durable write (fs_write_atomic: two fsyncs, 0.4 to 50 ms each on this box's ext4
 * under load) is the worker's cost, not the launcher's, and rank 0's crash mark is taken before
 * it, so every fsync there was counted as restart time for both launchers.
 */
static void put(const char *path, long long v)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%lld\n", v);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);

	if (fd < 0 || write(fd, buf, (size_t)n) != n || close(fd) != 0) {
		fprintf(stderr, "stamp: %s: %s\n", path, strerror(errno));
		exit(3);
	}
}

int main(int argc, char **argv)
{
	long long t = now_ns();
	int rank = env_int("RANK"), restart = env_int("TORCHELASTIC_RESTART_COUNT");
	int world = env_int("WORLD_SIZE");
	char path[4096];
	/* crash-once[:MS]: the period of the peer's monitor loop the crash is spread over */
	bool crash = argc > 2 && strncmp(argv[2], "crash-once", 10) == 0 &&
		     (argv[2][10] == '\0' || argv[2][10] == ':');
	long long period_ms = crash && argv[2][10] == ':' ? atoll(argv[2] + 11) : 100;

	if (argc < 3 || period_ms <= 0) {
		fprintf(stderr, "usage: stamp DIR exit|hold:MS|crash-once[:MS]\n");
		return 2;
	}
	if (crash) {
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
	if (crash) {
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
		/*
		 * Let every worker settle into its sleep, then crash at a random point of torchrun's
		 * monitor period (100 ms, or MS): a fixed 200 ms put the crash at the same phase of
		 * its loop every run (just before or just after a pass), so its restart was either a
		 * few ms or about 100 ms late, not the half period a failure at an arbitrary time
		 * costs it on average. crun sees the exit as it happens, whatever the phase.
		 */
		usleep((useconds_t)(200000 + (now_ns() / 1000) % (period_ms * 1000)));
		snprintf(path, sizeof(path), "%s/crash", argv[1]);
		put(path, now_ns());
		return 1;
	}
	return 2;
}
