/* SPDX-License-Identifier: MIT */
/*
 * src/cli_torch2.c: the flags torchrun 2.x added after crun's first round (--duplicate-std*-
 * filters, --numa-binding, --event-log-handler) and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE,
 * checked and stored in the job spec.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli.h"
#include "src/cli_parser.h"

#define DUP_FILTERS_MAX 64
#define PREFIX_TEMPLATE_MAX 256

/* The environment variable torchrun 2.x reads for its console line prefix. */
#define PREFIX_TEMPLATE_ENV "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"

static void free_list(char **list)
{
	if (list != NULL) {
		for (char **f = list; *f != NULL; f++) {
			free(*f);
		}
		free(list);
	}
}

/*
 * "a,b,,c" into {"a", "b,c", NULL}, as torchrun reads the list: ",," is a comma inside a
 * filter. Empty filters are dropped (an empty list duplicates nothing).
 */
static int take_filters(struct cli_parser *p, enum cli_opt_id id, char ***out)
{
	const char *s = p->v[id].val;
	char **list, *cur;
	size_t len = strlen(s), o = 0, i;
	int n = 0;

	for (i = 0; i < len; i++) {
		if (iscntrl((unsigned char)s[i])) {
			return cli_fail(p, id, "control character in value");
		}
	}
	list = calloc(DUP_FILTERS_MAX + 1, sizeof(*list));
	cur = malloc(len + 1);
	if (list == NULL || cur == NULL) {
		free(list);
		free(cur);
		return cli_oom(p);
	}
	for (i = 0; i <= len; i++) {
		if (i < len && s[i] == ',' && s[i + 1] == ',') {
			cur[o++] = ',';
			i++;
			continue;
		}
		if (i < len && s[i] != ',') {
			cur[o++] = s[i];
			continue;
		}
		cur[o] = '\0';
		if (o > 0 && n == DUP_FILTERS_MAX) {
			free(cur);
			free_list(list);
			return cli_fail(p, id, "more than %d filters", DUP_FILTERS_MAX);
		}
		if (o > 0 && (list[n++] = strdup(cur)) == NULL) {
			free(cur);
			free_list(list);
			return cli_oom(p);
		}
		o = 0;
	}
	free(cur);
	free_list(*out);
	*out = n > 0 ? list : NULL;
	if (n == 0) {
		free(list);
	}
	return 0;
}

/* One of @names (NULL-ended), or an error naming them all. */
static int take_choice(struct cli_parser *p, enum cli_opt_id id, const char *const *names,
		       char **out)
{
	char b[64], all[160];
	size_t o = 0;
	int i;

	for (i = 0; names[i] != NULL; i++) {
		if (strcmp(p->v[id].val, names[i]) == 0) {
			return cli_set_str(out, names[i]) < 0 ? cli_oom(p) : 0;
		}
		if (o < sizeof(all)) {
			o += (size_t)snprintf(all + o, sizeof(all) - o, "%s%s", i > 0 ? ", " : "",
					      names[i]);
		}
	}
	return cli_fail(p, id, "unknown name \"%s\" (expected one of %s)",
			opt_show(b, sizeof(b), p->v[id].val), all);
}

/* The mode only: the agent finds each worker's node, or says why it binds nothing. */
static int take_numa(struct cli_parser *p)
{
	static const char *const modes[] = {"node", "socket", "exclusive", "core-complex", NULL};

	return take_choice(p, O_NUMA_BINDING, modes, &p->spec->numa_binding);
}

/* ${name} or $name at @s (after the '$'): the crun template field it stands for, or NULL. */
static const char *template_field(const char *s, size_t *adv)
{
	static const char *const names[][2] = {
		{"role_name", "{role}"}, {"local_rank", "{local_rank}"}, {"rank", "{rank}"}};
	bool brace = *s == '{';
	const char *q = brace ? s + 1 : s;
	size_t n = 0, i;

	while (isalnum((unsigned char)q[n]) || q[n] == '_') {
		n++;
	}
	if (brace && q[n] != '}') {
		return NULL;
	}
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strlen(names[i][0]) == n && strncmp(q, names[i][0], n) == 0) {
			*adv = n + (brace ? 2 : 0);
			return names[i][1];
		}
	}
	return NULL;
}

/*
 * TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (torchrun 2.x: a Python string.Template with
 * ${role_name}, ${rank} and ${local_rank}; $$ is a dollar) into crun's prefix template, when
 * neither --log-prefix nor a job file set one. Read here, once: the agent reads no settings
 * from the environment.
 */
static int take_prefix_template(struct cli_parser *p)
{
	const char *t = getenv(PREFIX_TEMPLATE_ENV), *f;
	char out[PREFIX_TEMPLATE_MAX * 4 + 1], b[64];
	size_t o = 0, adv, n;

	if (t == NULL || p->v[O_LOG_PREFIX].set) {
		return 0;
	}
	if (strlen(t) > PREFIX_TEMPLATE_MAX) {
		return cli_fail(p, O_COUNT, "%s: longer than %d bytes", PREFIX_TEMPLATE_ENV,
				PREFIX_TEMPLATE_MAX);
	}
	for (; *t != '\0'; t += adv) {
		adv = 1;
		if (iscntrl((unsigned char)*t)) {
			return cli_fail(p, O_COUNT, "%s: control character in template",
					PREFIX_TEMPLATE_ENV);
		}
		if (*t == '{' || *t == '}') {
			return cli_fail(p, O_COUNT,
					"%s: \"%c\" outside ${...} is not supported (crun's prefix "
					"fields use braces; see --log-prefix)",
					PREFIX_TEMPLATE_ENV, *t);
		}
		if (*t != '$') {
			out[o++] = *t;
			continue;
		}
		if (t[1] == '$') {
			out[o++] = '$';
			adv = 2;
			continue;
		}
		f = template_field(t + 1, &adv);
		if (f == NULL) {
			return cli_fail(
				p, O_COUNT,
				"%s: unknown variable at \"%s\" (use ${role_name}, ${rank}, "
				"${local_rank}, or $$ for a dollar)",
				PREFIX_TEMPLATE_ENV, opt_show(b, sizeof(b), t));
		}
		n = strlen(f);
		memcpy(out + o, f, n);
		o += n;
		adv++; /* the '$' */
	}
	out[o] = '\0';
	return cli_set_str(&p->spec->log_prefix, out) < 0 ? cli_oom(p) : 0;
}

int cli_do_torch2(struct cli_parser *p)
{
	static const char *const handlers[] = {"null", "console", "dynamic_rendezvous", NULL};
	int rc;

	if (p->v[O_DUP_STDOUT].set &&
	    (rc = take_filters(p, O_DUP_STDOUT, &p->spec->dup_filters[0])) != 0) {
		return rc;
	}
	if (p->v[O_DUP_STDERR].set &&
	    (rc = take_filters(p, O_DUP_STDERR, &p->spec->dup_filters[1])) != 0) {
		return rc;
	}
	if ((p->spec->dup_filters[0] != NULL || p->spec->dup_filters[1] != NULL) &&
	    p->spec->log_dir == NULL) {
		fprintf(stderr, "crun: warning: --duplicate-std*-filters write "
				"filtered_std{out,err}.log in the --log-dir folder; without "
				"--log-dir nothing is duplicated\n");
	}
	if (p->v[O_NUMA_BINDING].set && (rc = take_numa(p)) != 0) {
		return rc;
	}
	if (p->v[O_EVENT_LOG_HANDLER].set && (rc = take_choice(p, O_EVENT_LOG_HANDLER, handlers,
							       &p->spec->event_log_handler)) != 0) {
		return rc;
	}
	return take_prefix_template(p);
}
