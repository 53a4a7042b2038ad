/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz_errfile.c: libFuzzer harness for the error-file and failure-summary readers. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/errfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char msg[ERRFILE_MAX_MESSAGE], host[64], smsg[256], *s;
	struct errfile_failure f;

	/* A worker's error file as the agent reads it (any bytes: it is the worker's to write). */
	if (errfile_parse_message((const char *)data, size, msg, sizeof(msg)) == 0 &&
	    strlen(msg) >= sizeof(msg)) {
		__builtin_trap();
	}
	/* Another node's failure summary, found inside the rendezvous' failure text. */
	s = malloc(size + 1);
	if (s == NULL) {
		return 0;
	}
	memcpy(s, data, size);
	s[size] = '\0';
	memset(&f, 0, sizeof(f));
	if (errfile_parse_summary(s, &f, host, sizeof(host), smsg, sizeof(smsg)) == 0 &&
	    (strlen(host) >= sizeof(host) || strlen(smsg) >= sizeof(smsg))) {
		__builtin_trap();
	}
	free(s);
	return 0;
}
