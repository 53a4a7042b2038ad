/* SPDX-License-Identifier: MIT */
/* src/opt_store.c: the store's option group: one handler for every program (src/opt_store.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "src/common/fs.h"
#include "src/opt_store.h"

/* The member's value, or NULL when the program has no such option or it was not given. */
static const struct opt_val *given(const struct opt_val *v, const int ids[OS_COUNT],
				   enum opt_store_id m)
{
	return ids[m] >= 0 && v[ids[m]].set ? &v[ids[m]] : NULL;
}

/* A file name: not empty, no control character (it goes into workers' environment). */
static int file_name(const struct opt_val *v, const char **out, struct crun_diag *d)
{
	size_t i;

	if (v == NULL) {
		return 0;
	}
	if (v->val == NULL || v->val[0] == '\0') {
		return opt_fail(v, d, "empty value");
	}
	for (i = 0; v->val[i] != '\0'; i++) {
		if (iscntrl((unsigned char)v->val[i])) {
			return opt_fail(v, d, "control character in value");
		}
	}
	*out = v->val;
	return 0;
}

/* A credential file: it opens, and only its owner (this user) may read or write it. */
static int private_file(const struct opt_val *v, const char *what, struct crun_diag *d)
{
	struct crun_diag fd_diag = {0};
	int fd, rc;

	if (v == NULL) {
		return 0;
	}
	fd = open(v->val, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		return opt_fail(v, d, "%s: %s", v->val, strerror(errno));
	}
	rc = fs_check_private(fd, what, v->val, &fd_diag);
	close(fd);
	if (rc < 0) {
		return opt_fail(v, d, "%s", fd_diag.msg);
	}
	return 0;
}

int opt_store_take(const struct opt_val *v, const int ids[OS_COUNT], struct opt_store_flags *f,
		   struct crun_diag *d)
{
	const struct opt_val *ins = given(v, ids, OS_INSECURE), *tok = given(v, ids, OS_TOKEN_FILE);
	const struct opt_val *ep = given(v, ids, OS_ENDPOINT);
	char b[64];
	int rc;

	memset(f, 0, sizeof(*f));
	if (ins != NULL && opt_parse_bool(ins->val, &f->insecure) < 0) {
		return opt_fail(ins, d, "expected 0 or 1, got \"%s\"",
				opt_show(b, sizeof(b), ins->val));
	}
	if (tok != NULL && f->insecure) {
		return opt_fail(tok, d, "cannot be combined with --insecure");
	}
	f->endpoint = ep != NULL ? ep->val : NULL;
	if ((rc = file_name(tok, &f->token_file, d)) != 0 ||
	    (rc = file_name(given(v, ids, OS_TLS_CA), &f->tls_ca, d)) != 0 ||
	    (rc = file_name(given(v, ids, OS_TLS_CERT), &f->tls_cert, d)) != 0 ||
	    (rc = file_name(given(v, ids, OS_TLS_KEY), &f->tls_key, d)) != 0 ||
	    (rc = file_name(given(v, ids, OS_TLS_SERVER_NAME), &f->tls_server_name, d)) != 0) {
		return rc;
	}
	if ((f->tls_cert != NULL) != (f->tls_key != NULL)) {
		return opt_fail(NULL, d, "--tls-cert and --tls-key go together (give both)");
	}
	if ((rc = private_file(tok, "token file", d)) != 0 ||
	    (rc = private_file(given(v, ids, OS_TLS_KEY), "TLS key file", d)) != 0) {
		return rc;
	}
	return 0;
}
