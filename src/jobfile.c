/* SPDX-License-Identifier: MIT */
/* src/jobfile.c: crun --config FILE.yaml: libyaml's document, checked key by key. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include <crun/error.h>

#include "src/cli.h"
#include "src/jobfile.h"

#define JOBFILE_MAX_BYTES (1L << 20) /* a job file is a few lines; a megabyte is a mistake */
#define JOBFILE_MAX_ARGS 4096
#define JOBFILE_MAX_PAIRS 4096
#define KEY_MAX 64

const char *const jobfile_extra_keys[] = {"program", "args", "env", NULL};

/* What a flag's value is in YAML, from its table entry (so new flags get a type for free). */
enum kind { K_BOOL, K_INT, K_NUMBER, K_STRING, K_OPTVAL };

struct ctx {
	struct jobfile *jf;
	yaml_document_t *doc;
	const char *path;
	struct crun_diag *d;
};

const char *jobfile_key(enum cli_opt_id id, char *buf, size_t len)
{
	const char *name;
	size_t i;

	if ((int)id < 0 || id >= O_COUNT || id == O_CONFIG || id == O_CHECK || id == O_HELP ||
	    id == O_VERSION ||
	    id == O_VERBOSE || id == O_QUIET ||
	    len == 0) {
		return NULL;
	}
	name = cli_opts[id].name;
	for (i = 0; name[i] != '\0' && i + 1 < len; i++) {
		buf[i] = name[i] == '-' ? '_' : name[i];
	}
	buf[i] = '\0';
	return buf;
}

static enum kind kind_of(enum cli_opt_id id)
{
	const char *m = cli_opts[id].metavar;

	if (cli_opts[id].optval) {
		return K_OPTVAL; /* --local-rank-arg[=dash]: true, false or one of the values */
	}
	if (!cli_opts[id].arg || m == NULL) {
		return K_BOOL;
	}
	if (strcmp(m, "N") == 0 || strcmp(m, "PORT") == 0) {
		return K_INT;
	}
	if (strcmp(m, "SECONDS") == 0) {
		return K_NUMBER;
	}
	return K_STRING;
}

/* ---- messages: "FILE:LINE:COLUMN: what" ---- */

static void where(char *buf, size_t len, const struct ctx *c, yaml_mark_t m, const char *key)
{
	if (key != NULL) {
		snprintf(buf, len, "%.120s:%zu:%zu: %s", c->path, m.line + 1, m.column + 1, key);
	} else {
		snprintf(buf, len, "%.120s:%zu:%zu", c->path, m.line + 1, m.column + 1);
	}
}

static int fail_at(struct ctx *c, yaml_mark_t m, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail_at(struct ctx *c, yaml_mark_t m, const char *key, const char *fmt, ...)
{
	char at[CLI_ORIGIN_MAX], what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	where(at, sizeof(at), c, m, key);
	diag_set(c->d, CRUN_ECONFIG, "%s: %s", at, what);
	return -EINVAL;
}

static int oom(struct ctx *c)
{
	diag_set(c->d, -ENOMEM, "out of memory");
	return -ENOMEM;
}

static const char *text(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool plain(const yaml_node_t *n)
{
	return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ||
	       n->data.scalar.style == YAML_ANY_SCALAR_STYLE;
}

static bool is_null(const yaml_node_t *n)
{
	const char *s = NULL;

	if (n == NULL) {
		return true;
	}
	if (n->type != YAML_SCALAR_NODE || !plain(n)) {
		return false;
	}
	s = text(n);
	return *s == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
	       strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* What the file holds at @n, for "expected X, found Y". */
static const char *found(const yaml_node_t *n, char *buf, size_t len)
{
	char b[64];

	if (is_null(n)) {
		return "nothing";
	}
	if (n->type == YAML_MAPPING_NODE) {
		return "a mapping";
	}
	if (n->type == YAML_SEQUENCE_NODE) {
		return "a list";
	}
	snprintf(buf, len, "%s\"%s\"", plain(n) ? "" : "the quoted string ",
		 opt_show(b, sizeof(b), text(n)));
	return buf;
}

static bool is_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on"};
	static const char *const no[] = {"false", "no", "off"};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return true;
		}
	}
	return false;
}

static bool is_int(const char *s)
{
	size_t i = (*s == '-' || *s == '+') ? 1 : 0;

	if (s[i] == '\0') {
		return false;
	}
	for (; s[i] != '\0'; i++) {
		if (!isdigit((unsigned char)s[i])) {
			return false;
		}
	}
	return true;
}

static bool is_number(const char *s)
{
	char *end;
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		if (!isdigit((unsigned char)s[i]) && s[i] != '.' && s[i] != '-' && s[i] != '+' &&
		    s[i] != 'e' && s[i] != 'E') {
			return false; /* no inf, nan or hex: seconds are written in decimal */
		}
	}
	if (i == 0) {
		return false;
	}
	(void)strtod(s, &end);
	return *end == '\0';
}

/* A scalar's text, refusing what a C string cannot carry. */
static int scalar_text(struct ctx *c, const yaml_node_t *n, const char *key, const char **out)
{
	if (strlen(text(n)) != n->data.scalar.length) {
		return fail_at(c, n->start_mark, key, "expected a string, found a NUL byte in it");
	}
	*out = text(n);
	return 0;
}

static yaml_node_t *node(struct ctx *c, int id)
{
	return yaml_document_get_node(c->doc, id);
}

/* ---- unknown keys: the nearest known one ---- */

static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, row[KEY_MAX + 1], diag, up;

	if (la > KEY_MAX || lb > KEY_MAX) {
		return KEY_MAX;
	}
	for (j = 0; j <= lb; j++) {
		row[j] = j;
	}
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			up = row[j];
			row[j] = diag + (a[i - 1] == b[j - 1] ? 0 : 1);
			if (up + 1 < row[j]) {
				row[j] = up + 1;
			}
			if (row[j - 1] + 1 < row[j]) {
				row[j] = row[j - 1] + 1;
			}
			diag = up;
		}
	}
	return row[lb];
}

static void consider(const char *key, const char *cand, const char **best, size_t *bestd)
{
	size_t dist = distance(key, cand);

	if (strstr(cand, key) != NULL && strlen(key) >= 4 && dist > 1) {
		dist = 2; /* "nproc" for "nproc_per_node": a prefix is a near miss too */
	}
	if (dist < *bestd) {
		*bestd = dist;
		*best = cand;
	}
}

static int unknown_key(struct ctx *c, const yaml_node_t *k, const char *key)
{
	char keys[O_COUNT][KEY_MAX], norm[KEY_MAX], b[64];
	const char *best = NULL;
	size_t i, bestd = KEY_MAX, limit;
	int id;

	for (i = 0; key[i] != '\0' && i + 1 < sizeof(norm); i++) {
		norm[i] = key[i] == '-' ? '_' : (char)tolower((unsigned char)key[i]);
	}
	norm[i] = '\0';
	for (id = 0; id < O_COUNT; id++) {
		if (jobfile_key((enum cli_opt_id)id, keys[id], sizeof(keys[id])) != NULL) {
			consider(norm, keys[id], &best, &bestd);
		}
	}
	for (i = 0; jobfile_extra_keys[i] != NULL; i++) {
		consider(norm, jobfile_extra_keys[i], &best, &bestd);
	}
	limit = strlen(norm) < 6 ? 2 : 3;
	if (strcmp(norm, "config") == 0) {
		return fail_at(c, k->start_mark, NULL,
			       "unknown key \"config\" (a job file cannot include another)");
	}
	if (best != NULL && bestd <= limit) {
		return fail_at(c, k->start_mark, NULL, "unknown key \"%s\" (did you mean %s?)",
			       opt_show(b, sizeof(b), key), best);
	}
	return fail_at(c, k->start_mark, NULL, "unknown key \"%s\" (crun.yaml(5) lists the keys)",
		       opt_show(b, sizeof(b), key));
}

/* ---- the structured keys ---- */

static int set_string(struct ctx *c, char **dst, const char *s)
{
	char *copy = strdup(s);

	if (copy == NULL) {
		return oom(c);
	}
	free(*dst);
	*dst = copy;
	return 0;
}

/* A non-null scalar of any style: the text of a list item or mapping value. */
static int any_scalar(struct ctx *c, const yaml_node_t *v, const char *key, const char *expected,
		      const char **out)
{
	char fb[96];

	if (v == NULL || v->type != YAML_SCALAR_NODE || is_null(v)) {
		return fail_at(c, v != NULL ? v->start_mark : (yaml_mark_t){0}, key,
			       "expected %s, found %s", expected, found(v, fb, sizeof(fb)));
	}
	return scalar_text(c, v, key, out);
}

static int do_args(struct ctx *c, const yaml_node_t *v)
{
	struct jobfile *jf = c->jf;
	yaml_node_item_t *it;
	const char *s = NULL;
	char fb[96];
	size_t n;
	int rc;

	if (v->type != YAML_SEQUENCE_NODE) {
		return fail_at(c, v->start_mark, "args", "expected a list of strings, found %s",
			       found(v, fb, sizeof(fb)));
	}
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n > JOBFILE_MAX_ARGS) {
		return fail_at(c, v->start_mark, "args", "expected at most %d arguments, found %zu",
			       JOBFILE_MAX_ARGS, n);
	}
	jf->args = calloc(n + 1, sizeof(char *));
	if (jf->args == NULL) {
		return oom(c);
	}
	for (it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
		rc = any_scalar(c, node(c, *it), "args", "a string", &s);
		if (rc != 0) {
			return rc;
		}
		jf->args[jf->nargs] = strdup(s);
		if (jf->args[jf->nargs] == NULL) {
			return oom(c);
		}
		jf->nargs++;
	}
	return 0;
}

static bool env_name_ok(const char *s)
{
	size_t i;

	if (!isalpha((unsigned char)*s) && *s != '_') {
		return false;
	}
	for (i = 1; s[i] != '\0'; i++) {
		if (!isalnum((unsigned char)s[i]) && s[i] != '_') {
			return false;
		}
	}
	return true;
}

/* env or rdzv_conf: KEY: VALUE pairs into @out. */
static int do_pairs(struct ctx *c, const yaml_node_t *v, const char *key, bool env,
		    struct jobfile_pair **out, size_t *count)
{
	yaml_node_pair_t *pr, *prev;
	const yaml_node_t *k, *val;
	struct jobfile_pair *pairs, *pp;
	const char *ks = NULL, *vs = NULL;
	char fb[96], sub[KEY_MAX + 32], b[64];
	size_t n;
	int rc;

	if (v->type != YAML_MAPPING_NODE) {
		return fail_at(c, v->start_mark, key, "expected a mapping of %s, found %s",
			       env ? "NAME: value" : "key: value", found(v, fb, sizeof(fb)));
	}
	n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	if (n > JOBFILE_MAX_PAIRS) {
		return fail_at(c, v->start_mark, key, "expected at most %d entries, found %zu",
			       JOBFILE_MAX_PAIRS, n);
	}
	pairs = calloc(n + 1, sizeof(*pairs));
	if (pairs == NULL) {
		return oom(c);
	}
	*out = pairs;
	for (pr = v->data.mapping.pairs.start; pr < v->data.mapping.pairs.top; pr++) {
		k = node(c, pr->key);
		val = node(c, pr->value);
		rc = any_scalar(c, k, key, env ? "a variable name" : "a key name", &ks);
		if (rc != 0) {
			return rc;
		}
		if (env && !env_name_ok(ks)) {
			return fail_at(
				c, k->start_mark, key,
				"expected a variable name (letters, digits, _), found \"%s\"",
				opt_show(b, sizeof(b), ks));
		}
		for (prev = v->data.mapping.pairs.start; prev < pr; prev++) {
			const yaml_node_t *pk = node(c, prev->key);

			if (strcmp(text(pk), ks) == 0) {
				return fail_at(
					c, k->start_mark, key,
					"duplicate key \"%s\" (first at line %zu, column %zu)",
					opt_show(b, sizeof(b), ks), pk->start_mark.line + 1,
					pk->start_mark.column + 1);
			}
		}
		snprintf(sub, sizeof(sub), "%s.%.*s", key, KEY_MAX, ks);
		rc = any_scalar(c, val, sub, env ? "a value (quote an empty one: \"\")" : "a value",
				&vs);
		if (rc != 0) {
			return rc;
		}
		pp = &pairs[*count];
		pp->key = strdup(ks);
		pp->val = strdup(vs);
		if (pp->key == NULL || pp->val == NULL) {
			free(pp->key);
			free(pp->val);
			pp->key = pp->val = NULL;
			return oom(c);
		}
		where(pp->origin, sizeof(pp->origin), c, val->start_mark, key);
		(*count)++;
	}
	return 0;
}

/* A flag's key: type-check the scalar against the flag's kind and keep its text. */
static int do_flag(struct ctx *c, enum cli_opt_id id, const char *key, const yaml_node_t *v)
{
	struct jobfile *jf = c->jf;
	const char *s = NULL, *expected;
	char fb[96];
	bool yes;
	int rc;

	switch (kind_of(id)) {
	case K_BOOL:
		expected = "true or false";
		break;
	case K_INT:
		expected = "an integer";
		break;
	case K_NUMBER:
		expected = "a number of seconds";
		break;
	default:
		expected = NULL;
		break;
	}
	if (v->type != YAML_SCALAR_NODE || is_null(v)) {
		if (expected == NULL) {
			return fail_at(c, v->start_mark, key, "expected a string (%s), found %s",
				       cli_opts[id].metavar, found(v, fb, sizeof(fb)));
		}
		return fail_at(c, v->start_mark, key, "expected %s, found %s", expected,
			       found(v, fb, sizeof(fb)));
	}
	rc = scalar_text(c, v, key, &s);
	if (rc != 0) {
		return rc;
	}
	switch (kind_of(id)) {
	case K_BOOL:
		if (!plain(v) || !is_bool(s, &yes)) {
			return fail_at(c, v->start_mark, key, "expected %s, found %s", expected,
				       found(v, fb, sizeof(fb)));
		}
		s = yes ? "1" : "0";
		break;
	case K_INT:
		if (!plain(v) || !is_int(s)) {
			return fail_at(c, v->start_mark, key, "expected %s, found %s", expected,
				       found(v, fb, sizeof(fb)));
		}
		break;
	case K_NUMBER:
		if (!plain(v) || !is_number(s)) {
			return fail_at(c, v->start_mark, key, "expected %s, found %s", expected,
				       found(v, fb, sizeof(fb)));
		}
		break;
	case K_OPTVAL:
		if (plain(v) && is_bool(s, &yes)) {
			s = yes ? "1" : "0";
		}
		break;
	default:
		break;
	}
	where(jf->origins[id], sizeof(jf->origins[id]), c, v->start_mark, key);
	return set_string(c, &jf->vals[id], s);
}

static int do_key(struct ctx *c, const yaml_node_t *k, const char *key, const yaml_node_t *v)
{
	char buf[KEY_MAX];
	const char *s = NULL;
	char fb[96];
	int id, rc;

	if (strcmp(key, "program") == 0) {
		if (v->type != YAML_SCALAR_NODE || is_null(v)) {
			return fail_at(c, v->start_mark, key,
				       "expected a program (a path, a name on PATH or a .py "
				       "file), found %s",
				       found(v, fb, sizeof(fb)));
		}
		rc = scalar_text(c, v, key, &s);
		where(c->jf->program_origin, sizeof(c->jf->program_origin), c, v->start_mark, key);
		return rc != 0 ? rc : set_string(c, &c->jf->program, s);
	}
	if (strcmp(key, "args") == 0) {
		return do_args(c, v);
	}
	if (strcmp(key, "env") == 0) {
		return do_pairs(c, v, key, true, &c->jf->env, &c->jf->nenv);
	}
	if (strcmp(key, "rdzv_conf") == 0 && v->type == YAML_MAPPING_NODE) {
		return do_pairs(c, v, key, false, &c->jf->conf, &c->jf->nconf);
	}
	for (id = 0; id < O_COUNT; id++) {
		if (jobfile_key((enum cli_opt_id)id, buf, sizeof(buf)) != NULL &&
		    strcmp(buf, key) == 0) {
			return do_flag(c, (enum cli_opt_id)id, key, v);
		}
	}
	return unknown_key(c, k, key);
}

static int do_root(struct ctx *c, const yaml_node_t *root)
{
	yaml_node_pair_t *pr, *prev;
	const yaml_node_t *k, *v;
	const char *key = NULL;
	char fb[96], b[64];
	int rc;

	if (root->type != YAML_MAPPING_NODE) {
		return fail_at(c, root->start_mark, NULL,
			       "expected a mapping of keys (nproc_per_node: 4, ...), found %s",
			       found(root, fb, sizeof(fb)));
	}
	for (pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top; pr++) {
		k = node(c, pr->key);
		v = node(c, pr->value);
		if (k == NULL || v == NULL || k->type != YAML_SCALAR_NODE || is_null(k)) {
			return fail_at(c, k != NULL ? k->start_mark : root->start_mark, NULL,
				       "expected a key name, found %s", found(k, fb, sizeof(fb)));
		}
		rc = scalar_text(c, k, NULL, &key);
		if (rc != 0) {
			return rc;
		}
		for (prev = root->data.mapping.pairs.start; prev < pr; prev++) {
			const yaml_node_t *pk = node(c, prev->key);

			if (strcmp(text(pk), key) == 0) {
				return fail_at(
					c, k->start_mark, NULL,
					"duplicate key \"%s\" (first at line %zu, column %zu)",
					opt_show(b, sizeof(b), key), pk->start_mark.line + 1,
					pk->start_mark.column + 1);
			}
		}
		rc = do_key(c, k, key, v);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

/* Whether byte @idx of the file at @path is a tab (libyaml names one only in some places). */
static bool tab_at(const char *path, size_t idx)
{
	FILE *f = fopen(path, "rb");
	int ch = EOF;

	if (f == NULL) {
		return false;
	}
	if (idx <= LONG_MAX && fseek(f, (long)idx, SEEK_SET) == 0) {
		ch = fgetc(f);
	}
	fclose(f);
	return ch == '\t';
}

static int syntax_error(struct ctx *c, const yaml_parser_t *ps)
{
	char b[96];

	if (ps->error == YAML_MEMORY_ERROR) {
		return oom(c);
	}
	if (ps->context != NULL) {
		snprintf(b, sizeof(b), " (%s at line %zu, column %zu)", ps->context,
			 ps->context_mark.line + 1, ps->context_mark.column + 1);
	} else {
		b[0] = '\0';
	}
	if (ps->problem != NULL && strstr(ps->problem, "tab") == NULL &&
	    tab_at(c->path, ps->problem_mark.index)) {
		/* libyaml says "cannot start any token": say what the character is. */
		return fail_at(c, ps->problem_mark, NULL,
			       "YAML syntax error: a tab character (YAML indents with spaces, "
			       "never tabs): %s%s",
			       ps->problem, b);
	}
	return fail_at(c, ps->problem_mark, NULL, "YAML syntax error: %s%s",
		       ps->problem != NULL ? ps->problem : "unreadable", b);
}

int jobfile_load(struct jobfile *jf, const char *path, struct crun_diag *d)
{
	struct ctx c = {.jf = jf, .path = path, .d = d};
	yaml_document_t doc, more;
	yaml_parser_t ps;
	yaml_node_t *root, *extra;
	struct stat st;
	FILE *f;
	int rc, err;

	f = fopen(path, "rb");
	if (f == NULL) {
		err = errno;
		diag_set(d, CRUN_ECONFIG, "--config: %.200s: %s", path, strerror(err));
		return -err;
	}
	if (fstat(fileno(f), &st) == 0 && (S_ISDIR(st.st_mode) || st.st_size > JOBFILE_MAX_BYTES)) {
		diag_set(d, CRUN_ECONFIG, "--config: %.200s: %s", path,
			 S_ISDIR(st.st_mode) ? "is a directory" : "larger than 1 MiB");
		fclose(f);
		return -EINVAL;
	}
	if (!yaml_parser_initialize(&ps)) {
		fclose(f);
		return oom(&c);
	}
	yaml_parser_set_input_file(&ps, f);
	if (!yaml_parser_load(&ps, &doc)) {
		rc = syntax_error(&c, &ps);
		goto out_parser;
	}
	c.doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (root == NULL) {
		rc = fail_at(&c, (yaml_mark_t){0}, NULL,
			     "expected a mapping of keys (nproc_per_node: 4, ...), found an empty "
			     "file");
		goto out_doc;
	}
	if (!yaml_parser_load(&ps, &more)) {
		rc = syntax_error(&c, &ps);
		goto out_doc;
	}
	extra = yaml_document_get_root_node(&more);
	if (extra != NULL) {
		rc = fail_at(&c, more.start_mark, NULL,
			     "expected one YAML document, found a second one (\"---\")");
		yaml_document_delete(&more);
		goto out_doc;
	}
	yaml_document_delete(&more);
	rc = do_root(&c, root);
out_doc:
	yaml_document_delete(&doc);
out_parser:
	yaml_parser_delete(&ps);
	fclose(f);
	return rc;
}

static void free_pairs(struct jobfile_pair *pairs, size_t n)
{
	size_t i;

	for (i = 0; pairs != NULL && i < n; i++) {
		free(pairs[i].key);
		free(pairs[i].val);
	}
	free(pairs);
}

void jobfile_finish(struct jobfile *jf)
{
	int i;

	if (jf == NULL) {
		return;
	}
	for (i = 0; i < O_COUNT; i++) {
		free(jf->vals[i]);
	}
	free(jf->program);
	for (i = 0; jf->args != NULL && i < jf->nargs; i++) {
		free(jf->args[i]);
	}
	free(jf->args);
	free_pairs(jf->conf, jf->nconf);
	free_pairs(jf->env, jf->nenv);
	memset(jf, 0, sizeof(*jf));
}
