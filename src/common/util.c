/* SPDX-License-Identifier: MIT */
/* src/common/util.c: crun_strdup. */
#include <string.h>

#include "src/common/util.h"

char *crun_strdup(const char *s)
{
	return s == NULL ? NULL : strdup(s);
}
