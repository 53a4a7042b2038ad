/* SPDX-License-Identifier: MIT */
/* src/common/opts.c: size-versioned copies of public options structs. */
#include <errno.h>
#include <string.h>

#include "src/common/opts.h"

int opts_copy(void *dst, size_t dst_size, const void *src, size_t base_size)
{
	size_t n;

	memset(dst, 0, dst_size);
	if (src == NULL) {
		return 0;
	}
	memcpy(&n, src, sizeof(n));
	if (n == 0) {
		n = base_size;
	}
	if (n < 2 * sizeof(size_t)) {
		return -EINVAL;
	}
	memcpy(dst, src, n < dst_size ? n : dst_size);
	memcpy(dst, &dst_size, sizeof(dst_size));
	return 0;
}
