/* SPDX-License-Identifier: MIT */
/* src/common/util.h: array size, container_of, invariants and strdup, used by every folder. */
#ifndef CRUN_SRC_COMMON_UTIL_H
#define CRUN_SRC_COMMON_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Broken invariant: abort with the place, even in release builds. Never for peer input. */
#define crun_require(expr)                                                                     \
	do {                                                                                   \
		if (!(expr)) {                                                                 \
			fprintf(stderr, "crun: %s:%d: requirement failed: %s\n", __FILE__,     \
				__LINE__, #expr);                                              \
			abort();                                                               \
		}                                                                              \
	} while (0)

/** strdup that returns NULL on NULL. */
char *crun_strdup(const char *s);

/**
 * @n random bytes into @buf from the kernel (getrandom(2), retried on EINTR): nonces, tokens,
 * salts, run ids, hash seeds, temporary names. OpenSSL's generator is not
 * used (its first call costs a process about 1 ms; docs/security.md). Returns 0 or -EIO.
 */
int util_random(void *buf, size_t n);

/** The number after "NAME:" in a /proc status file (@path), e.g. "VmRSS" (kB) or
 * "voluntary_ctxt_switches"; -1 when the file or the field is missing. */
long util_status_field(const char *path, const char *name);
/** Resident set size of process @pid in KiB (VmRSS of /proc/PID/status), or -1. */
long util_rss_kib(int pid);

#endif
