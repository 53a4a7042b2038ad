/* SPDX-License-Identifier: MIT */
/* tests/unit/test_opts.c: src/common/opts: size-versioned options from older and newer callers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "src/common/opts.h"
#include "tests/lib/cmocka_skip.h"

/* The same options struct in three releases: the library is built against v2. */
struct opts_v1 {
	size_t struct_size;
	int timeout_ms;
	int flags;
};

struct opts_v2 {
	size_t struct_size;
	int timeout_ms;
	int flags;
	long bucket_bytes;
};

struct opts_v3 {
	size_t struct_size;
	int timeout_ms;
	int flags;
	long bucket_bytes;
	long from_the_future;
};

/* What the library holds before the copy: anything, so leftovers would show. */
static void scribble(struct opts_v2 *o)
{
	memset(o, 0xa5, sizeof(*o));
}

static void opts_copy_of_null_gives_all_defaults(void **state)
{
	struct opts_v2 o, zero;

	(void)state;
	scribble(&o);
	memset(&zero, 0, sizeof(zero));
	assert_int_equal(opts_copy(&o, sizeof(o), NULL, sizeof(struct opts_v1)), 0);
	assert_memory_equal(&o, &zero, sizeof(o));
}

static void opts_copy_reads_struct_size_zero_as_the_base_layout(void **state)
{
	struct opts_v1 in = {.struct_size = 0, .timeout_ms = 500, .flags = 3};
	struct opts_v2 o;

	(void)state;
	scribble(&o);
	assert_int_equal(opts_copy(&o, sizeof(o), &in, sizeof(struct opts_v1)), 0);
	assert_int_equal(o.timeout_ms, 500);
	assert_int_equal(o.flags, 3);
	assert_int_equal(o.bucket_bytes, 0);
	assert_int_equal(o.struct_size, sizeof(o));
}

static void opts_copy_from_an_older_caller_defaults_the_new_fields(void **state)
{
	struct opts_v1 in = {.struct_size = sizeof(in), .timeout_ms = 7, .flags = 1};
	struct opts_v2 o;

	(void)state;
	scribble(&o);
	assert_int_equal(opts_copy(&o, sizeof(o), &in, sizeof(struct opts_v1)), 0);
	assert_int_equal(o.timeout_ms, 7);
	assert_int_equal(o.flags, 1);
	assert_int_equal(o.bucket_bytes, 0);
	assert_int_equal(o.struct_size, sizeof(o));
}

static void opts_copy_from_the_same_release_copies_everything(void **state)
{
	struct opts_v2 in = {.struct_size = sizeof(in), .timeout_ms = 9, .flags = 2,
			     .bucket_bytes = 1L << 40};
	struct opts_v2 o;

	(void)state;
	scribble(&o);
	assert_int_equal(opts_copy(&o, sizeof(o), &in, sizeof(struct opts_v1)), 0);
	assert_memory_equal(&o, &in, sizeof(o));
}

static void opts_copy_from_a_newer_caller_ignores_fields_it_does_not_know(void **state)
{
	struct opts_v3 in = {.struct_size = sizeof(in), .timeout_ms = 11, .flags = 4,
			     .bucket_bytes = 4096, .from_the_future = 99};
	struct {
		struct opts_v2 o;
		long guard;
	} out;

	(void)state;
	scribble(&out.o);
	out.guard = 0x1234;
	assert_int_equal(opts_copy(&out.o, sizeof(out.o), &in, sizeof(struct opts_v1)), 0);
	assert_int_equal(out.o.timeout_ms, 11);
	assert_int_equal(out.o.flags, 4);
	assert_int_equal(out.o.bucket_bytes, 4096);
	/* The library's view says its own size; nothing past it was written. */
	assert_int_equal(out.o.struct_size, sizeof(out.o));
	assert_int_equal(out.guard, 0x1234);
}

static void opts_copy_refuses_a_garbage_size(void **state)
{
	struct opts_v1 in = {.timeout_ms = 5};
	struct opts_v2 o, zero;
	size_t bad;

	(void)state;
	memset(&zero, 0, sizeof(zero));
	for (bad = 1; bad < 2 * sizeof(size_t); bad++) {
		in.struct_size = bad;
		scribble(&o);
		assert_int_equal(opts_copy(&o, sizeof(o), &in, sizeof(struct opts_v1)), -EINVAL);
		/* Nothing half copied: all defaults. */
		assert_memory_equal(&o, &zero, sizeof(o));
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(opts_copy_of_null_gives_all_defaults),
		cmocka_unit_test(opts_copy_reads_struct_size_zero_as_the_base_layout),
		cmocka_unit_test(opts_copy_from_an_older_caller_defaults_the_new_fields),
		cmocka_unit_test(opts_copy_from_the_same_release_copies_everything),
		cmocka_unit_test(opts_copy_from_a_newer_caller_ignores_fields_it_does_not_know),
		cmocka_unit_test(opts_copy_refuses_a_garbage_size),
	};

	return test_run_group("unit-opts", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
