/* SPDX-License-Identifier: MIT */
/* worker_api/version.c: crun_version(), the version of the library actually loaded. */
#include <crun/version.h>

CRUN_EXPORT unsigned crun_version(void)
{
	return CRUN_VERSION_NUMBER;
}

CRUN_EXPORT const char *crun_version_string(void)
{
	return CRUN_VERSION_STRING;
}
