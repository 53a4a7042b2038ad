/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/cli_fixture.c: the scratch folder, a clean PET_* environment, parse(). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/agent/cli/cli_fixture.h"
#include "tests/lib/cmocka_files.h"

extern char **environ;

/* A scratch folder with a .py file, a plain script, a non-executable file and an executable. */
char tmpdir[64];
char py_file[128], noexec_file[128], exec_file[128], plain_script[128], exec_py[128];

/* Drop every PET_* variable so the caller's environment cannot steer the tests. */
void clear_pet_env(void)
{
	char name[128];
	const char *eq;
	bool again = true;
	int i;

	while (again) {
		again = false;
		for (i = 0; environ[i] != NULL; i++) {
			if (strncmp(environ[i], "PET_", 4) != 0) {
				continue;
			}
			eq = strchr(environ[i], '=');
			if (eq == NULL || (size_t)(eq - environ[i]) >= sizeof(name)) {
				continue;
			}
			memcpy(name, environ[i], (size_t)(eq - environ[i]));
			name[eq - environ[i]] = '\0';
			unsetenv(name);
			again = true;
			break;
		}
	}
	unsetenv("PYTHON_EXEC");
}

int group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/crun-cli-XXXXXX");
	if (mkdtemp(tmpdir) == NULL) {
		return -1;
	}
	snprintf(py_file, sizeof(py_file), "%s/train.py", tmpdir);
	snprintf(noexec_file, sizeof(noexec_file), "%s/noexec", tmpdir);
	snprintf(exec_file, sizeof(exec_file), "%s/worker", tmpdir);
	snprintf(plain_script, sizeof(plain_script), "%s/script", tmpdir);
	snprintf(exec_py, sizeof(exec_py), "%s/tool.py", tmpdir);
	test_write_file(py_file, "print('hi')\n", 0644);
	test_write_file(noexec_file, "#!/bin/sh\nexit 0\n", 0644);
	test_write_file(exec_file, "#!/bin/sh\nexit 0\n", 0755);
	test_write_file(plain_script, "print('plain')\n", 0644);
	test_write_file(exec_py, "#!/bin/sh\nexit 0\n", 0755);
	clear_pet_env();
	return 0;
}

int group_teardown(void **state)
{
	char path[160];

	(void)state;
	unlink(py_file);
	unlink(noexec_file);
	unlink(exec_file);
	unlink(plain_script);
	unlink(exec_py);
	/* What a failed assertion may have left behind. */
	snprintf(path, sizeof(path), "%s/store", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/out", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/err", tmpdir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/stderr", tmpdir);
	unlink(path);
	if (rmdir(tmpdir) != 0) {
		fprintf(stderr, "rmdir %s: %s\n", tmpdir, strerror(errno));
		return -1;
	}
	return 0;
}

int each_teardown(void **state)
{
	(void)state;
	clear_pet_env();
	unsetenv("CUDA_VISIBLE_DEVICES");
	return 0;
}

/* Run cli_parse_diag on {"crun", @args..., NULL}. */
int parse(const char *const *args, struct job_spec *s, struct crun_diag *d)
{
	char *argv[MAXARGS + 2];
	int argc = 0;

	argv[argc++] = (char *)"crun";
	while (*args != NULL && argc <= MAXARGS) {
		argv[argc++] = (char *)*args++;
	}
	argv[argc] = NULL;
	memset(d, 0, sizeof(*d));
	return cli_parse_diag(argc, argv, s, d);
}
