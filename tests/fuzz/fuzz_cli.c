/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz_cli.c: libFuzzer harness for crun's command-line parser (also replayed in CI). */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/cli.h"

/* The input is argv after "crun": arguments separated by NUL bytes, at most this many. */
#define FUZZ_MAX_ARGS 48

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int null = open("/dev/null", O_WRONLY);

	(void)argc;
	(void)argv;
	/* --help and --version print on stdout: keep the fuzzer's output readable. */
	if (null >= 0) {
		dup2(null, STDOUT_FILENO);
		close(null);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char prog[] = "crun";
	char *buf = malloc(size + 1), *argv[FUZZ_MAX_ARGS + 2];
	struct job_spec spec;
	struct crun_diag d;
	size_t i, start = 0;
	int argc = 1, rc;

	if (buf == NULL) {
		return 0;
	}
	memcpy(buf, data, size);
	buf[size] = '\0';
	argv[0] = prog;
	for (i = 0; i <= size && argc <= FUZZ_MAX_ARGS; i++) {
		if (buf[i] == '\0') {
			argv[argc++] = buf + start;
			start = i + 1;
		}
	}
	argv[argc] = NULL;
	memset(&d, 0, sizeof(d));
	rc = cli_parse_diag(argc, argv, &spec, &d);
	/* Every refusal names its problem in one line. */
	if (rc == CLI_USAGE && (d.msg[0] == '\0' || strchr(d.msg, '\n') != NULL)) {
		__builtin_trap();
	}
	if (rc != CLI_OK && rc != CLI_EXIT && rc != CLI_USAGE) {
		__builtin_trap();
	}
	jobspec_finish(&spec);
	free(buf);
	return 0;
}
