/* SPDX-License-Identifier: MIT */
/* tests/lib/cmocka_files.h: writing a test's scratch files from a cmocka program. */
#ifndef CRUN_TESTS_LIB_CMOCKA_FILES_H
#define CRUN_TESTS_LIB_CMOCKA_FILES_H

/* Include after <cmocka.h>. */
#include <stdio.h>
#include <sys/stat.h>

/* @text into a new @path with @mode; the case fails if that cannot be done. */
static inline void test_write_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, mode), 0);
}

#endif
