/* SPDX-License-Identifier: MIT */
/* rendezvous/util.h: small private helpers shared by every folder. */
#ifndef CRUN_RENDEZVOUS_UTIL_H
#define CRUN_RENDEZVOUS_UTIL_H

#include <stddef.h>
#include <stdint.h>
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

/* A human-readable error, filled at the point of failure: "<where>: <what>: <why>". */
struct crun_diag {
	int code;
	char msg[256];
};

/** Record @code and a printf-style message in @d (may be NULL); returns @code. */
int diag_set(struct crun_diag *d, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/** strdup that returns NULL on NULL. */
char *crun_strdup(const char *s);

/** Monotonic clock in milliseconds / nanoseconds. */
int64_t crun_now_ms(void);
int64_t crun_now_ns(void);
/** Wall clock in milliseconds since the epoch. */
int64_t crun_wall_ms(void);

/**
 * Parse "HOST:PORT", "[V6]:PORT" or "HOST" (port = @default_port; -1 means required) into
 * host (NUL-terminated, brackets removed) and port. Returns 0 or -EINVAL.
 */
int crun_parse_hostport(const char *s, int default_port, char *host, size_t hostlen, int *port);

#endif
