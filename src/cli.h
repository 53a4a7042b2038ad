/* SPDX-License-Identifier: MIT */
/* src/cli.h: the crun command line: torchrun's flags, PET_* environment, validation. */
#ifndef CRUN_SRC_CLI_H
#define CRUN_SRC_CLI_H

#include <stdio.h>

#include "agent/jobspec.h"
#include "src/common/util.h"
#include "src/common/diag.h"

/* cli_parse() results, also crun's exit status for the first two. */
#define CLI_OK 0
#define CLI_EXIT 1  /* --help or --version: already printed on stdout; exit 0 */
#define CLI_USAGE 2 /* bad command line: one line already printed on stderr; exit 2 */

/**
 * Parse @argv (borrowed) plus the PET_<FLAG> environment (the command line wins) into @spec,
 * which is initialised here (jobspec_defaults()) and owned by the caller afterwards: release it
 * with jobspec_finish() whatever this returns.
 *
 * Everything is validated and resolved before anything starts: nproc "gpu|cpu|auto" is counted,
 * --local-addr is turned into a literal address (an interface name also sets socket_ifname),
 * the endpoint is split into host/port or path, the program is found (PATH search like execvp,
 * or the .py file must exist) and the rdzv timeouts land in spec->rdzv (milliseconds).
 *
 * Returns CLI_OK; CLI_EXIT after printing --help/--version on stdout; or CLI_USAGE after
 * printing exactly one line "crun: --flag: problem" on stderr.
 */
int cli_parse(int argc, char **argv, struct job_spec *spec);

/**
 * cli_parse() without printing the error: on CLI_USAGE, @d->msg holds the line without the
 * "crun: " prefix and without a newline (e.g. "--nnodes: MIN 3 is above MAX 2"), and @d->code
 * is CRUN_ECONFIG. --help/--version still print on stdout.
 */
int cli_parse_diag(int argc, char **argv, struct job_spec *spec, struct crun_diag *d);

/** Print the --help text on @out (borrowed). */
void cli_usage(FILE *out);

#endif
