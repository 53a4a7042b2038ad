/* SPDX-License-Identifier: MIT */
/* src/program.c: the program a job runs: an executable found as execvp() would, or python. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <crun/error.h>

#include "src/cli_parser.h" /* opt_show(), cli_set_str() */
#include "src/common/fs.h"
#include "src/program.h"

/* 0 if @path is an executable regular file, else -ENOENT, -EISDIR or -EACCES. */
static int check_exec(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0) {
		return -errno;
	}
	if (S_ISDIR(st.st_mode)) {
		return -EISDIR;
	}
	if (!S_ISREG(st.st_mode) || access(path, X_OK) != 0) {
		return -EACCES;
	}
	return 0;
}

/* execvp's search: a name with a '/' is used as is; otherwise each PATH entry is tried. */
static int find_exec(const char *name, char **out)
{
	const char *path = getenv("PATH");
	const char *dir, *colon;
	char cand[PATH_MAX];
	size_t dl;
	int rc, best = -ENOENT;

	if (strchr(name, '/') != NULL) {
		rc = check_exec(name);
		if (rc == 0) {
			*out = strdup(name);
			return *out == NULL ? -ENOMEM : 0;
		}
		return rc;
	}
	if (path == NULL) {
		path = FS_DEFAULT_PATH;
	}
	for (dir = path;; dir = colon + 1) {
		colon = strchr(dir, ':');
		dl = colon ? (size_t)(colon - dir) : strlen(dir);
		if (dl == 0) {
			rc = snprintf(cand, sizeof(cand), "%s", name);
		} else {
			rc = snprintf(cand, sizeof(cand), "%.*s/%s", (int)dl, dir, name);
		}
		if (rc > 0 && (size_t)rc < sizeof(cand)) {
			rc = check_exec(cand);
			if (rc == 0) {
				*out = strdup(cand);
				return *out == NULL ? -ENOMEM : 0;
			}
			if (rc == -EACCES) {
				best = -EACCES;
			}
		}
		if (colon == NULL) {
			break;
		}
	}
	return best == -EACCES ? -EACCES : -ENOEXEC; /* -ENOEXEC here: not found in PATH */
}

/* "WHAT NAME: why", the name shown as every command-line message shows a value (opt_show()). */
static int exec_error(struct crun_diag *d, const char *what, const char *name, int rc, bool hint)
{
	char b[64];

	opt_show(b, sizeof(b), name);
	switch (rc) {
	case -ENOENT:
		return diag_set(d, CRUN_ECONFIG, "%s %s: no such file", what, b);
	case -ENOEXEC:
		if (hint && access(name, F_OK) == 0) {
			return diag_set(d, CRUN_ECONFIG, "%s %s: not found in PATH (use ./%s)",
					what, b, b);
		}
		return diag_set(d, CRUN_ECONFIG, "%s %s: not found in PATH", what, b);
	case -EISDIR:
		return diag_set(d, CRUN_ECONFIG, "%s %s: is a directory", what, b);
	case -EACCES:
		if (hint) {
			return diag_set(
				d, CRUN_ECONFIG,
				"%s %s: not executable (chmod +x it, or use --run-path to run "
				"it under python)",
				what, b);
		}
		return diag_set(d, CRUN_ECONFIG, "%s %s: not executable", what, b);
	case -ENOMEM:
		return diag_set(d, -ENOMEM, "out of memory");
	default:
		return diag_set(d, CRUN_ECONFIG, "%s %s: %s", what, b, strerror(-rc));
	}
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

enum program_kind program_kind_of(const char *name, bool module, bool no_python, bool run_path)
{
	if (module) {
		return PROGRAM_MODULE;
	}
	if (no_python) {
		return PROGRAM_EXEC;
	}
	if (run_path || ends_with(name, ".py")) {
		return PROGRAM_PYTHON;
	}
	return PROGRAM_EXEC;
}

/*
 * The interpreter named by the script at @path: "#!/usr/bin/python3.11" (arguments after it
 * dropped), or pip's long-path form "#!/bin/sh" then "'''exec' /long/path/python3 ...". NULL
 * for "#!/usr/bin/env python3" (that is the first python3 on PATH anyway), anything else, or
 * an interpreter that is not an executable file. Returns a malloc'd path.
 */
static char *shebang_python(const char *path)
{
	char buf[1024], *line2, *q, *end;
	FILE *f = fopen(path, "re");
	size_t n;

	if (f == NULL) {
		return NULL;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (n < 3 || buf[0] != '#' || buf[1] != '!') {
		return NULL;
	}
	line2 = strchr(buf, '\n');
	if (line2 == NULL) {
		return NULL;
	}
	*line2++ = '\0';
	for (q = buf + 2; *q == ' ' || *q == '\t'; q++) {
	}
	end = q + strcspn(q, " \t\r");
	*end = '\0';
	if (strcmp(q, "/bin/sh") == 0 && strncmp(line2, "'''exec' ", 9) == 0) {
		q = line2 + 9;
		if (*q == '"' || *q == '\'') {
			q++;
		}
		q[strcspn(q, "\"' \t\n")] = '\0';
	}
	if (*q != '/' || strstr(strrchr(q, '/'), "python") == NULL || check_exec(q) != 0) {
		return NULL;
	}
	return strdup(q);
}

/*
 * No --python, no $PYTHON_EXEC: the python behind a `torchrun` on PATH, when there is one, is
 * the one that has torch; the first python3 on PATH may not be (a venv without it, a fake).
 * Returns 0 with *@out set, or -ENOENT when there is no such torchrun.
 */
static int torchrun_python(char **out)
{
	char *torchrun = NULL;

	if (find_exec("torchrun", &torchrun) < 0) {
		return -ENOENT;
	}
	*out = shebang_python(torchrun);
	free(torchrun);
	return *out != NULL ? 0 : -ENOENT;
}

/* Say so when torchrun's python is not the first python3 on PATH, and how to choose. */
static void note_torchrun_python(const char *chosen)
{
	char *first = NULL, a[PATH_MAX], b[PATH_MAX];

	if (find_exec("python3", &first) == 0 && realpath(first, a) != NULL &&
	    realpath(chosen, b) != NULL && strcmp(a, b) != 0) {
		fprintf(stderr,
			"crun: note: Python programs run under %.256s, the python of torchrun on "
			"PATH, not under the first python3 on PATH (%.256s); choose with --python "
			"PATH or PYTHON_EXEC=PATH\n",
			chosen, first);
	}
	free(first);
}

int program_resolve(struct job_spec *s, const char *name, bool hint, bool python_chosen,
		    struct crun_diag *d)
{
	const char *pyenv = getenv("PYTHON_EXEC");
	struct stat st;
	char *found = NULL;
	char b[64];
	int rc;

	if (s->program_kind == PROGRAM_EXEC) {
		rc = find_exec(name, &found);
		if (rc < 0) {
			return exec_error(d, "program", name, rc, hint);
		}
		free(s->program);
		s->program = found;
		return 0;
	}
	if (pyenv != NULL && *pyenv != '\0' && cli_set_str(&s->python_exec, pyenv) < 0) {
		return diag_set(d, -ENOMEM, "out of memory");
	}
	rc = -ENOENT;
	if (!python_chosen && strcmp(s->python_exec, "python3") == 0 &&
	    torchrun_python(&found) == 0) {
		note_torchrun_python(found);
		rc = 0;
	}
	if (rc < 0) {
		rc = find_exec(s->python_exec, &found);
	}
	if (rc < 0) {
		rc = exec_error(d, "python interpreter", s->python_exec, rc, false);
		if (d->code == CRUN_ECONFIG && !python_chosen) {
			char msg[sizeof(d->msg)];

			memcpy(msg, d->msg, sizeof(msg));
			rc = diag_set(d, CRUN_ECONFIG,
				      "%.300s (choose one with --python PATH or PYTHON_EXEC=PATH)",
				      msg);
		}
		return rc;
	}
	/* Workers run the one found here, so a failure can name it (agent/agent.c). */
	free(s->python_path);
	s->python_path = found;
	if (s->program_kind == PROGRAM_PYTHON) {
		if (stat(name, &st) != 0) {
			return exec_error(d, "program", name, -errno, false);
		}
		if (S_ISDIR(st.st_mode)) {
			return diag_set(d, CRUN_ECONFIG, "program %s: is a directory",
					opt_show(b, sizeof(b), name));
		}
		if (access(name, R_OK) != 0) {
			return diag_set(d, CRUN_ECONFIG, "program %s: not readable",
					opt_show(b, sizeof(b), name));
		}
	}
	if (cli_set_str(&s->program, name) < 0) {
		return diag_set(d, -ENOMEM, "out of memory");
	}
	return 0;
}
