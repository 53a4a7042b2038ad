/* SPDX-License-Identifier: MIT */
/* src/opt_store.h: the store's options, one group in the table of every program (src/opt.h). */
#ifndef CRUN_SRC_OPT_STORE_H
#define CRUN_SRC_OPT_STORE_H

#include <stdbool.h>

#include "src/common/diag.h"
#include "src/opt.h"

/*
 * crun, crun-rdzvd, crun-store and crun status name the store and its credentials with the
 * same options, spelt, checked and documented once here: each program's table includes the
 * members it uses through the OPT_STORE_* entries below (the section heading and the
 * environment it reads are the program's), and one handler, opt_store_take(), turns them
 * into a plain struct opt_store_flags. What a program then does with them (the token policy,
 * opening the store) is the store configuration's business, not the parser's.
 *
 * One rule for credential files in every program: a --token-file or --tls-key that cannot be
 * opened, is not a regular file, or is readable or writable by group or others, is a usage
 * error (exit status 2), named before anything starts (src/common/fs.h fs_check_private()).
 */

/* The members of the group, in the order a program's map lists them. */
enum opt_store_id {
	OS_ENDPOINT,        /* --rdzv-endpoint, alias --endpoint, -e */
	OS_TOKEN_FILE,      /* --token-file */
	OS_INSECURE,        /* --insecure */
	OS_TLS_CA,          /* --tls-ca */
	OS_TLS_CERT,        /* --tls-cert */
	OS_TLS_KEY,         /* --tls-key */
	OS_TLS_SERVER_NAME, /* --tls-server-name */
	OS_CONFIG,          /* --config FILE.yaml: the job file that names the others */
	OS_COUNT
};

/*
 * The entries. @sect: the heading printed before it (or NULL); @env: the endpoint is also read
 * from the table's env_prefix (PET_RDZV_ENDPOINT); @envvar: a variable read for it instead
 * (CRUN_STORE_TLS_CA), or NULL; @metavar: how the endpoint is shown; @help: the program's
 * line for --help, as it means the option in its own role (a daemon serves the certificate
 * that a client presents). Names, letters, aliases and value kinds are the group's.
 */
#define OPT_STORE_ENDPOINT(sect, env, envvar, metavar, help)                                \
	{"rdzv-endpoint", 'e', true, env, metavar, help, sect, false, false, "endpoint", envvar, \
	 OPT_VALUE}
#define OPT_STORE_TOKEN_FILE(sect, help) {"token-file", 0, true, false, "FILE", help, sect}
#define OPT_STORE_INSECURE(sect, help) {"insecure", 0, false, false, NULL, help, sect}
#define OPT_STORE_TLS_CA(sect, envvar, help)                                                  \
	{"tls-ca", 0, true, false, "FILE", help, sect, false, false, NULL, envvar, OPT_VALUE}
#define OPT_STORE_TLS_CERT(sect, envvar, help)                                                \
	{"tls-cert", 0, true, false, "FILE", help, sect, false, false, NULL, envvar, OPT_VALUE}
#define OPT_STORE_TLS_KEY(sect, envvar, help)                                                 \
	{"tls-key", 0, true, false, "FILE", help, sect, false, false, NULL, envvar, OPT_VALUE}
#define OPT_STORE_TLS_SERVER_NAME(sect, envvar, help)                                         \
	{"tls-server-name", 0, true, false, "NAME", help, sect, false, false, NULL, envvar,     \
	 OPT_VALUE}
#define OPT_STORE_CONFIG(sect, help) {"config", 0, true, false, "FILE.yaml", help, sect}

/* The store flags as given (borrowed from argv, the environment or a job file). */
struct opt_store_flags {
	const char *endpoint;   /* NULL when not given */
	const char *token_file; /* NULL when not given; opened and checked private */
	const char *tls_ca, *tls_cert, *tls_key, *tls_server_name; /* NULL when not given */
	bool insecure;
};

/*
 * Check the members of @v (a program's values) that @ids maps (ids[OS_x] is the member's index
 * in the program's table, or -1 when the program has no such option) and fill @f: no empty
 * file name or control character; --insecure is 0 or 1 and not with --token-file; --tls-cert
 * and --tls-key together; --token-file and --tls-key private files (the rule above).
 * Returns 0, or OPT_USAGE with @d saying "ORIGIN: what".
 */
int opt_store_take(const struct opt_val *v, const int ids[OS_COUNT], struct opt_store_flags *f,
		   struct crun_diag *d);

#endif
