/* SPDX-License-Identifier: MIT */
/* src/common/error.c: crun_strerror() for 0, -errno and CRUN_E* codes. */
#include <string.h>

#include <crun/error.h>

static const char *const crun_messages[] = {
#define X(name, msg) msg,
	CRUN_ERROR_MAP(X)
#undef X
};

CRUN_EXPORT const char *crun_strerror(int code)
{
	if (code == 0) {
		return "success";
	}
	if (code > CRUN_ERROR_BASE && code < CRUN_ERROR_END) {
		return crun_messages[code - CRUN_ERROR_BASE - 1];
	}
	if (code < 0 && code > -4096) {
		/* strerror() of glibc returns a static string for known codes and a
		 * thread-local buffer for unknown ones: never NULL. */
		return strerror(-code);
	}
	return "unknown error";
}
