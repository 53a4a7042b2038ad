/* SPDX-License-Identifier: MIT */
/* tests/agent/cli/cli_fixture.h: what the command-line tests share. Include after cmocka.h. */
#ifndef CRUN_TESTS_AGENT_CLI_CLI_FIXTURE_H
#define CRUN_TESTS_AGENT_CLI_CLI_FIXTURE_H

#include "src/cli.h"

/*
 * A scratch folder made by group_setup() with a .py file, a plain script, a non-executable
 * file, an executable and an executable .py, removed by group_teardown().
 */
extern char tmpdir[64];
extern char py_file[128], noexec_file[128], exec_file[128], plain_script[128], exec_py[128];

/* Drop every PET_* variable and PYTHON_EXEC so the caller's environment cannot steer tests. */
void clear_pet_env(void);
int group_setup(void **state);
int group_teardown(void **state);
/* After each test: clear_pet_env() and no CUDA_VISIBLE_DEVICES. */
int each_teardown(void **state);

#define MAXARGS 40

/* Run cli_parse_diag on {"crun", @args..., NULL}. */
int parse(const char *const *args, struct job_spec *s, struct crun_diag *d);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

#endif
