/* SPDX-License-Identifier: MIT */
/* src/opt.h: the one table-driven option parser of crun, crun-rdzvd, crun-store, crun status. */
#ifndef CRUN_SRC_OPT_H
#define CRUN_SRC_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "src/common/diag.h"

/*
 * Each program describes its options in one table (an array of struct opt, in --help order)
 * and reads argv (and, where it wants, the environment) into one struct opt_val per entry:
 * the value as typed and the spelling it came under ("--nproc_per_node", "PET_NNODES",
 * "job.yaml:3:9: nnodes"), so that every error line names what the user wrote. The program
 * then checks each value itself. The conventions are the engine's, the same in every program:
 *
 *   --OPTION VALUE and --OPTION=VALUE; dashes and underscores in a name alike (--nproc_per_node);
 *   -x VALUE, -xVALUE and -x=VALUE for an option with a short letter;
 *   -- ends the options; "-" is an operand;
 *   with the table's abbrev, a unique prefix of a long name (--stand for --standalone);
 *   -h/--help prints the help on stdout (first line "Usage: ...") and exits 0;
 *   -V/--version prints "PROGRAM VERSION" on stdout and exits 0;
 *   every mistake is one line "PROGRAM: --OPTION: what" on stderr and exit status 2.
 */

/* Room for an origin: "--nproc_per_node", "PET_NNODES" or "FILE:LINE:COLUMN: key". */
#define OPT_ORIGIN_MAX 192

/* opt_read_argv() results; also the exit status of a bad command line (OPT_USAGE). */
enum { OPT_OK = 0, OPT_EXIT = 1, OPT_USAGE = 2 };

/* What an entry does besides holding a value. */
enum opt_role {
	OPT_VALUE = 0, /* an ordinary option */
	OPT_HELP,      /* print the table's usage on stdout, exit 0 */
	OPT_VERSION,   /* print the table's version line on stdout, exit 0 */
};

struct opt {
	const char *name;    /* long name with dashes; dashes and underscores in it match alike */
	char shrt;           /* short letter or 0 */
	bool arg;            /* takes a value */
	bool env;            /* also read from <table's env_prefix><NAME> (PET_NNODES) */
	const char *metavar; /* for --help */
	const char *help;    /* one line for --help, wrapped at 80 columns */
	const char *section; /* heading printed before this option, or NULL */
	bool optval;         /* no value, or one after '=' (--local-rank-arg=dash); arg is false */
	bool optnext;        /* as optval, and also the next word unless it starts with '-' */
	const char *alias;   /* another long name for the same option, or NULL */
	const char *envvar;  /* an environment variable read instead of the derived one, or NULL */
	enum opt_role role;
};

/* The conventions' entries, for every program's table: -h, -V, and -v/-q where a program
 * logs (opt_log_level() applies them). */
#define OPT_HELP_ENTRY(sect)                                                                  \
	{"help", 'h', false, false, NULL, "print this help and exit", sect, false, false, NULL, \
	 NULL, OPT_HELP}
#define OPT_VERSION_ENTRY                                                                     \
	{"version", 'V', false, false, NULL, "print the version and exit", NULL, false, false,  \
	 NULL, NULL, OPT_VERSION}
#define OPT_VERBOSE_ENTRY(sect, help) {"verbose", 'v', false, false, NULL, help, sect}
#define OPT_QUIET_ENTRY                                                                       \
	{"quiet", 'q', false, false, NULL, "log only warnings and errors", NULL}

/* Where a value came from: the spelling the user typed, for error lines. */
struct opt_val {
	const char *val; /* borrowed from argv, the environment or a job file */
	char origin[OPT_ORIGIN_MAX];
	bool set;
	int at; /* argv index it came from (the later of two options wins), 0 otherwise */
};

struct opt_table {
	const char *prog;          /* "crun status": error lines and "(see PROG --help)" */
	const struct opt *opts;    /* n entries */
	int n;
	const char *env_prefix;    /* "PET_": the entries with env read PREFIX<NAME>; or NULL */
	bool operands;             /* the first operand ends the options (crun's PROGRAM,
				    * crun-store's COMMAND); false: an operand is an error */
	void (*usage)(FILE *out);  /* --help */
	const char *version;       /* --version prints this line */
	bool abbrev;               /* a unique prefix of a long name selects it (argparse's
				    * allow_abbrev: torchrun takes --stand); an exact name always
				    * wins, an ambiguous prefix is an error naming the candidates;
				    * environment variables and job-file keys stay exact */
};

/* The entry named @name (@len bytes, without "--"; '_' matches '-'), or -1. Exact names only. */
int opt_find_long(const struct opt_table *t, const char *name, size_t len);
/*
 * As opt_find_long(), and with t->abbrev the one entry whose long name (or alias) starts with
 * @name when no name equals it. Returns the entry, -1 when none matches, or -2 when several
 * do (@cands, when not NULL, then lists them: "--nproc-per-node, --nnodes").
 */
int opt_find_abbrev(const struct opt_table *t, const char *name, size_t len, char *cands,
		    size_t candlen);
/* The entry with short letter @c, or -1. */
int opt_find_short(const struct opt_table *t, char c);

/* Record @val for @v, seen as @origin (@olen bytes, cut to fit). */
void opt_set(struct opt_val *v, const char *origin, size_t olen, const char *val);

/* Every entry with env (or envvar) that is set in the environment. Call before argv. */
void opt_read_env(const struct opt_table *t, struct opt_val *v);

/*
 * Read the options in @argv[1..] into @v (t->n entries; the command line overrides what the
 * environment set). *@first is the index of the first operand (@argc when none).
 * Returns OPT_OK; OPT_EXIT after printing --help or --version on stdout; or OPT_USAGE with
 * @d set to "ORIGIN: what" (the caller prints "PROG: " before it).
 */
int opt_read_argv(const struct opt_table *t, struct opt_val *v, int argc, char **argv,
		  int *first, struct crun_diag *d);

/* Record "ORIGIN: what" (or "what" when @v is NULL) in @d with CRUN_ECONFIG. Returns OPT_USAGE. */
int opt_fail(const struct opt_val *v, struct crun_diag *d, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Copy at most 48 bytes of @s into @buf for an error line, non-printables as '?'; returns @buf. */
const char *opt_show(char *buf, size_t len, const char *s);

/* 1/true/yes/on or 0/false/no/off/"" (any case) into *@out: 0, or -EINVAL. */
int opt_parse_bool(const char *s, bool *out);

/* The option list of --help: each entry (section headings before them), wrapped at 80. */
void opt_print_options(FILE *out, const struct opt_table *t);

/* -v/--verbose (debug) or -q/--quiet (warnings and errors), the later one winning over the
 * other and over $CRUN_LOG_LEVEL; neither given: the level stays. */
void opt_log_level(const struct opt_val *verbose, const struct opt_val *quiet);

/*
 * The common end of a program's parse: on OPT_USAGE print "PROG: MSG" on stderr. Returns the
 * exit status the program ends with when @rc is not OPT_OK (0 for OPT_EXIT, 2 for OPT_USAGE).
 */
int opt_exit_status(const struct opt_table *t, int rc, const struct crun_diag *d);

#endif
