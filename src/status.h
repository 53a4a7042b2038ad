/* SPDX-License-Identifier: MIT */
/* src/status.h: `crun status`: a job's state read from its store (docs/operations.md). */
#ifndef CRUN_SRC_STATUS_H
#define CRUN_SRC_STATUS_H

/* Exit statuses of `crun status` (crun(1), STATUS). */
enum status_exit {
	STATUS_EXIT_RUNNING = 0,
	STATUS_EXIT_FAILED = 1,
	STATUS_EXIT_USAGE = 2,
	STATUS_EXIT_FINISHED = 3,
	STATUS_EXIT_UNKNOWN = 4,  /* no such run in the store, or every agent of it is lost */
	STATUS_EXIT_STORE = 5,    /* the store could not be reached or read */
	STATUS_EXIT_CANCELLED = 6, /* every agent was stopped by a signal (its operator) */
};

/** `crun status ARGS` (@argv[0] is "status"). Returns the exit status above. */
int status_main(int argc, char **argv);

#endif
