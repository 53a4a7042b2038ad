/* SPDX-License-Identifier: MIT */
/* bench/launch/floor.c: what starting N workers costs with no launcher at all. */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/*
 * floor N WORKER ARGS...: posix_spawn N copies of WORKER ARGS (each with RANK=i and
 * TORCHELASTIC_RESTART_COUNT=0 added to this environment, as a launcher would give them),
 * then wait for all of them. Exit 0 when each exited 0. bench/launch/run times it beside the
 * launchers: the part of a launch row that the machine, not the launcher, costs (the execs,
 * the workers' own start-up, their exits).
 */
extern char **environ;

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[1]) : 0, bad = 0, e;
	size_t ne = 0;
	pid_t *pid;
	char **env, restart[] = "TORCHELASTIC_RESTART_COUNT=0";

	if (n < 1 || n > 4096) {
		fprintf(stderr, "usage: floor N(1..4096) WORKER [ARGS...]\n");
		return 2;
	}
	while (environ[ne] != NULL) {
		ne++;
	}
	pid = calloc((size_t)n, sizeof(*pid));
	env = calloc(ne + 3, sizeof(*env));
	if (pid == NULL || env == NULL) {
		fprintf(stderr, "floor: out of memory\n");
		return 1;
	}
	memcpy(env, environ, ne * sizeof(*env));
	env[ne + 1] = restart;
	for (int i = 0; i < n; i++) {
		char rank[32];

		snprintf(rank, sizeof(rank), "RANK=%d", i);
		env[ne] = rank;
		e = posix_spawn(&pid[i], argv[2], NULL, NULL, argv + 2, env);
		if (e != 0) {
			fprintf(stderr, "floor: spawn %s: %s\n", argv[2], strerror(e));
			return 1;
		}
	}
	for (int i = 0; i < n; i++) {
		int st;

		while (waitpid(pid[i], &st, 0) < 0) {
			if (errno != EINTR) {
				fprintf(stderr, "floor: wait: %s\n", strerror(errno));
				return 1;
			}
		}
		bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	free(pid);
	free(env);
	if (bad > 0) {
		fprintf(stderr, "floor: %d of %d workers failed\n", bad, n);
		return 1;
	}
	return 0;
}
