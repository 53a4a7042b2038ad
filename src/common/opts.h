/* SPDX-License-Identifier: MIT */
/* src/common/opts.h: read a public options struct that may come from an older or newer caller. */
#ifndef CRUN_SRC_COMMON_OPTS_H
#define CRUN_SRC_COMMON_OPTS_H

#include <stddef.h>

/*
 * Every public options struct starts with `size_t struct_size`, which the caller sets to
 * sizeof() of the struct it was compiled against (the CRUN_*_OPTS_INIT macros do), so the
 * struct can grow at its end without breaking callers built against an older header.
 * 0 means "the first versioned layout" (@base_size: the size in crun 0.2.0), so a
 * zero-initialised struct keeps working.
 *
 * opts_copy() zeroes @dst (@dst_size bytes: the library's sizeof) and copies the part of
 * @src (may be NULL: all defaults) that the caller knows about; fields the caller's header
 * did not have stay 0, their default. Fields beyond the library's own size are ignored (a
 * newer caller). Returns 0, or -EINVAL when struct_size is non-zero but smaller than the
 * first field (a garbage size).
 */
int opts_copy(void *dst, size_t dst_size, const void *src, size_t base_size);

#endif
