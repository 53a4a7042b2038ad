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
		path = "/usr/local/bin:/bin:/usr/bin"; /* glibc's execvp default */
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

int program_resolve(struct job_spec *s, const char *name, bool hint, struct crun_diag *d)
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
	rc = find_exec(s->python_exec, &found);
	if (rc < 0) {
		return exec_error(d, "python interpreter", s->python_exec, rc, false);
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
