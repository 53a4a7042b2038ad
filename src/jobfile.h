/* SPDX-License-Identifier: MIT */
/* src/jobfile.h: crun --config FILE.yaml: a job file read with libyaml into the flag values. */
#ifndef CRUN_SRC_JOBFILE_H
#define CRUN_SRC_JOBFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "src/cli_parser.h"

/*
 * Private to src/cli*.c. A job file is one YAML mapping. Its keys are crun's long flags with
 * '-' written '_' (nproc_per_node), derived from cli_opts[] so that every flag has one, typed by
 * the flag: a flag without a value is a boolean, metavar N or PORT an integer, SECONDS a number,
 * anything else a string (a plain number is a string too). A few keys are structured: program
 * (a string), args (a list), env (a mapping of variables to values) and rdzv_conf (a mapping, or
 * the flag's KEY=VALUE,... string).
 *
 * jobfile_load() checks the file's shape and types; the values themselves go through the same
 * checks as on the command line, with "FILE:LINE:COLUMN: key" as their origin. Whatever fails
 * is one line naming the place, the key, what was expected and what was found.
 */

/* One KEY: VALUE of the env or rdzv_conf mapping. */
struct jobfile_pair {
	char *key;
	char *val;
	char origin[CLI_ORIGIN_MAX]; /* "FILE:LINE:COLUMN: rdzv_conf.join_timeout" */
};

struct jobfile {
	char *vals[O_COUNT]; /* the text of each flag the file sets, or NULL */
	char origins[O_COUNT][CLI_ORIGIN_MAX];
	char *program; /* NULL when the file names none */
	char program_origin[CLI_ORIGIN_MAX];
	char **args; /* NULL-terminated; NULL when the file has no args */
	int nargs;
	struct jobfile_pair *conf; /* rdzv_conf as a mapping */
	size_t nconf;
	struct jobfile_pair *env;
	size_t nenv;
};

/*
 * Read @path into @jf (zeroed by the caller; release with jobfile_finish() whatever this returns).
 * 0, or -EINVAL / -ENOENT / -ENOMEM... with @d set (CRUN_ECONFIG for every problem of the file).
 */
int jobfile_load(struct jobfile *jf, const char *path, struct crun_diag *d);
void jobfile_finish(struct jobfile *jf);

/* The job-file key of option @id written into @buf ("nproc_per_node"); NULL for options that a
 * job file cannot set (--config, --help, --version). */
const char *jobfile_key(enum cli_opt_id id, char *buf, size_t len);
/* The structured keys that are no flag: "program", "args", "env", then NULL. */
extern const char *const jobfile_extra_keys[];

#endif
