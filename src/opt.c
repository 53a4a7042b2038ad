/* SPDX-License-Identifier: MIT */
/* src/opt.c: the option engine every program's table runs on (src/opt.h). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <crun/error.h>

#include "src/common/log.h"
#include "src/opt.h"

const char *opt_show(char *buf, size_t len, const char *s)
{
	size_t i, n = 0;

	for (i = 0; s[i] != '\0' && n + 4 < len && i < 48; i++) {
		buf[n++] = isprint((unsigned char)s[i]) ? s[i] : '?';
	}
	if (s[i] != '\0' && n + 4 < len) {
		buf[n++] = '.';
		buf[n++] = '.';
		buf[n++] = '.';
	}
	buf[n] = '\0';
	return buf;
}

int opt_fail(const struct opt_val *v, struct crun_diag *d, const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (v == NULL) {
		diag_set(d, CRUN_ECONFIG, "%s", what);
	} else {
		diag_set(d, CRUN_ECONFIG, "%s: %s", v->origin, what);
	}
	return OPT_USAGE;
}

int opt_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off", ""};
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
	}
	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* @name (@len bytes) equals @want with '_' read as '-'. */
static bool same_name(const char *name, size_t len, const char *want)
{
	size_t i;

	if (want == NULL || strlen(want) != len) {
		return false;
	}
	for (i = 0; i < len; i++) {
		if ((name[i] == '_' ? '-' : name[i]) != want[i]) {
			return false;
		}
	}
	return true;
}

int opt_find_long(const struct opt_table *t, const char *name, size_t len)
{
	int k;

	if (len == 0) {
		return -1;
	}
	for (k = 0; k < t->n; k++) {
		if (same_name(name, len, t->opts[k].name) ||
		    same_name(name, len, t->opts[k].alias)) {
			return k;
		}
	}
	return -1;
}

/* @name (@len bytes) starts @want, with '_' read as '-'. */
static bool starts_name(const char *name, size_t len, const char *want)
{
	size_t i;

	if (want == NULL || strlen(want) < len) {
		return false;
	}
	for (i = 0; i < len; i++) {
		if ((name[i] == '_' ? '-' : name[i]) != want[i]) {
			return false;
		}
	}
	return true;
}

int opt_find_abbrev(const struct opt_table *t, const char *name, size_t len, char *cands,
		    size_t candlen)
{
	size_t o = 0;
	int k, found = -1, n = 0;

	k = opt_find_long(t, name, len);
	if (k >= 0 || !t->abbrev || len == 0) {
		return k;
	}
	if (cands != NULL && candlen > 0) {
		cands[0] = '\0';
	}
	for (k = 0; k < t->n; k++) {
		if (!starts_name(name, len, t->opts[k].name) &&
		    !starts_name(name, len, t->opts[k].alias)) {
			continue;
		}
		found = k;
		n++;
		if (cands != NULL && o < candlen) {
			o += (size_t)snprintf(cands + o, candlen - o, "%s--%s", n > 1 ? ", " : "",
					      t->opts[k].name);
		}
	}
	return n > 1 ? -2 : found;
}

int opt_find_short(const struct opt_table *t, char c)
{
	int k;

	for (k = 0; k < t->n; k++) {
		if (t->opts[k].shrt != 0 && t->opts[k].shrt == c) {
			return k;
		}
	}
	return -1;
}

void opt_set(struct opt_val *v, const char *origin, size_t olen, const char *val)
{
	if (olen >= sizeof(v->origin)) {
		olen = sizeof(v->origin) - 1;
	}
	memcpy(v->origin, origin, olen);
	v->origin[olen] = '\0';
	v->val = val;
	v->set = true;
	v->at = 0;
}

void opt_read_env(const struct opt_table *t, struct opt_val *v)
{
	const struct opt *o;
	char name[80];
	const char *val;
	size_t i, n;
	int k;

	for (k = 0; k < t->n; k++) {
		o = &t->opts[k];
		if (o->envvar != NULL) {
			n = (size_t)snprintf(name, sizeof(name), "%s", o->envvar);
		} else if (o->env && t->env_prefix != NULL) {
			n = (size_t)snprintf(name, sizeof(name), "%s", t->env_prefix);
			for (i = 0; o->name[i] != '\0' && n + 1 < sizeof(name); i++) {
				name[n++] = o->name[i] == '-' ? '_' : (char)toupper(o->name[i]);
			}
			name[n] = '\0';
		} else {
			continue;
		}
		val = getenv(name);
		if (val != NULL) {
			opt_set(&v[k], name, strlen(name), val);
		}
	}
}

/* Print what an OPT_HELP or OPT_VERSION entry asks for. */
static int act(const struct opt_table *t, const struct opt *o)
{
	if (o->role == OPT_HELP) {
		t->usage(stdout);
	} else {
		printf("%s\n", t->version);
	}
	fflush(stdout);
	return OPT_EXIT;
}

/* A value that is missing: the end of argv, or what is clearly the next long option. */
static bool missing(const char *next)
{
	return next == NULL || (next[0] == '-' && next[1] == '-' && next[2] != '\0');
}

/* One "--OPTION[=value]" at argv[*i]; takes argv[*i + 1] as its value when it needs one. */
static int read_long(const struct opt_table *t, struct opt_val *v, int argc, char **argv, int *i,
		     struct crun_diag *d)
{
	const char *a = argv[*i], *eq, *val, *next;
	const struct opt *o;
	char b[64], shown[72], cands[160];
	size_t nlen;
	int k;

	eq = strchr(a + 2, '=');
	nlen = eq ? (size_t)(eq - a) : strlen(a);
	k = opt_find_abbrev(t, a + 2, nlen - 2, cands, sizeof(cands));
	if (k < 0) {
		snprintf(shown, sizeof(shown), "%.*s", (int)(nlen > 60 ? 60 : nlen), a);
		if (k == -2) {
			return opt_fail(NULL, d, "%s: ambiguous option: could be %s",
					opt_show(b, sizeof(b), shown), cands);
		}
		return opt_fail(NULL, d, "%s: unknown option (see %s --help)",
				opt_show(b, sizeof(b), shown), t->prog);
	}
	o = &t->opts[k];
	if (o->role != OPT_VALUE) {
		return act(t, o);
	}
	next = *i + 1 < argc ? argv[*i + 1] : NULL;
	if (!o->arg) {
		if (eq != NULL && (o->optval || o->optnext)) {
			val = eq + 1;
		} else if (eq != NULL) {
			opt_set(&v[k], a, nlen, "1");
			return opt_fail(&v[k], d, "takes no value");
		} else if (o->optnext && next != NULL && next[0] != '-') {
			val = next;
			(*i)++;
		} else {
			val = o->optnext ? NULL : "1";
		}
	} else if (eq != NULL) {
		val = eq + 1;
	} else if (missing(next)) {
		opt_set(&v[k], a, nlen, "");
		return opt_fail(&v[k], d, "missing value (%s)", o->metavar);
	} else {
		val = next;
		(*i)++;
	}
	opt_set(&v[k], a, nlen, val);
	v[k].at = *i;
	return OPT_OK;
}

/* One "-x", "-x VALUE", "-xVALUE" or "-x=VALUE" at argv[*i]. */
static int read_short(const struct opt_table *t, struct opt_val *v, int argc, char **argv, int *i,
		      struct crun_diag *d)
{
	const char *a = argv[*i], *val;
	const struct opt *o;
	char b[64];
	int k;

	k = opt_find_short(t, a[1]);
	if (k < 0) {
		return opt_fail(NULL, d, "%s: unknown option (see %s --help)",
				opt_show(b, sizeof(b), a), t->prog);
	}
	o = &t->opts[k];
	if (o->role != OPT_VALUE && a[2] == '\0') {
		return act(t, o);
	}
	if (!o->arg) {
		opt_set(&v[k], a, 2, o->optnext ? NULL : "1");
		v[k].at = *i;
		if (a[2] != '\0') {
			return opt_fail(&v[k], d, "takes no value (got \"%s\")",
					opt_show(b, sizeof(b), a));
		}
		return OPT_OK;
	}
	if (a[2] != '\0') {
		val = a[2] == '=' ? a + 3 : a + 2;
	} else {
		val = *i + 1 < argc ? argv[*i + 1] : NULL;
		if (missing(val)) {
			opt_set(&v[k], a, 2, "");
			return opt_fail(&v[k], d, "missing value (%s)", o->metavar);
		}
		(*i)++;
	}
	opt_set(&v[k], a, 2, val);
	v[k].at = *i;
	return OPT_OK;
}

int opt_read_argv(const struct opt_table *t, struct opt_val *v, int argc, char **argv, int *first,
		  struct crun_diag *d)
{
	const char *a;
	char b[64];
	int i, rc;

	for (i = 1; i < argc; i++) {
		a = argv[i];
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0') {
			break; /* an operand: with t->operands, it and everything after it */
		}
		rc = a[1] == '-' ? read_long(t, v, argc, argv, &i, d)
				 : read_short(t, v, argc, argv, &i, d);
		if (rc != OPT_OK) {
			return rc;
		}
	}
	if (i < argc && !t->operands) {
		return opt_fail(NULL, d, "unexpected argument \"%s\" (see %s --help)",
				opt_show(b, sizeof(b), argv[i]), t->prog);
	}
	*first = i;
	return OPT_OK;
}

/* "  LEFT  help..." with the help text wrapped at 80 columns under column 32. */
static void print_wrapped(FILE *out, const char *left, const char *help)
{
	const char *q = help;
	size_t n, brk;

	while (*q != '\0') {
		n = strlen(q);
		brk = n;
		if (n > 48) {
			for (brk = 48; brk > 0 && q[brk] != ' '; brk--) {
			}
			if (brk == 0) {
				brk = n;
			}
		}
		fprintf(out, "  %-28s  %.*s\n", left, (int)brk, q);
		left = "";
		q += brk;
		while (*q == ' ') {
			q++;
		}
	}
}

void opt_print_options(FILE *out, const struct opt_table *t)
{
	const struct opt *o;
	char left[160], names[96], sh[8];
	int k;

	for (k = 0; k < t->n; k++) {
		o = &t->opts[k];
		if (o->section != NULL) {
			fprintf(out, "\n%s:\n", o->section);
		}
		snprintf(sh, sizeof(sh), o->shrt != 0 ? "-%c, " : "    ", o->shrt);
		snprintf(names, sizeof(names), "--%s%s%s", o->name, o->alias != NULL ? ", --" : "",
			 o->alias != NULL ? o->alias : "");
		if (o->optval || o->optnext) {
			snprintf(left, sizeof(left), "%s%s%s%s%s", sh, names,
				 o->optnext ? " [" : "[=", o->metavar, "]");
		} else {
			snprintf(left, sizeof(left), "%s%s%s%s", sh, names, o->arg ? " " : "",
				 o->arg ? o->metavar : "");
		}
		if (strlen(left) > 28) {
			fprintf(out, "  %s\n", left);
			left[0] = '\0';
		}
		print_wrapped(out, left, o->help);
	}
}

void opt_log_level(const struct opt_val *verbose, const struct opt_val *quiet)
{
	if (verbose->set || quiet->set) {
		log_set_level(verbose->set && (!quiet->set || verbose->at > quiet->at) ? LOG_DEBUG
										       : LOG_WARN);
	}
}

int opt_exit_status(const struct opt_table *t, int rc, const struct crun_diag *d)
{
	if (rc == OPT_EXIT) {
		return 0;
	}
	fprintf(stderr, "%s: %s\n", t->prog, d->msg);
	return OPT_USAGE;
}
