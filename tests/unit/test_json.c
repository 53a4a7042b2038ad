/* SPDX-License-Identifier: MIT */
/* tests/unit/test_json.c: src/common/json: escapes, U+FFFD for every byte of invalid UTF-8,
 * cutting at whole escapes, and the quoted stream form. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/json.h"

static void is(const char *in, const char *want)
{
	char out[256];

	assert_int_equal(json_escape(out, sizeof(out), in), strlen(want));
	assert_string_equal(out, want);
	assert_int_equal(json_escape(NULL, 0, in), strlen(want));
}

static void json_escapes_quotes_backslashes_and_controls(void **state)
{
	(void)state;
	is("", "");
	is("plain text 123", "plain text 123");
	is("a\"b\\c/d", "a\\\"b\\\\c/d");
	is("\n\r\t\b\f", "\\n\\r\\t\\b\\f");
	is("\x01\x1f\x1b[31m\x7f", "\\u0001\\u001f\\u001b[31m\\u007f");
}

static void json_keeps_utf8_and_replaces_each_invalid_byte(void **state)
{
	(void)state;
	/* Well-formed: 2, 3 and 4 bytes, the highest code point. */
	is("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",
	   "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf");
	/* Latin-1, a lone continuation byte, bytes never in UTF-8. */
	is("caf\xe9", "caf\\ufffd");
	is("\x80x", "\\ufffdx");
	is("\xff\xfe\xc0\xc1\xf5", "\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd");
	/* Overlong, surrogate, above U+10FFFF, and cut short by the end of the string. */
	is("\xc0\xaf", "\\ufffd\\ufffd");
	is("\xe0\x80\xaf", "\\ufffd\\ufffd\\ufffd");
	is("\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd");
	is("\xf4\x90\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd");
	is("ab\xe2\x82", "ab\\ufffd\\ufffd");
	/* A bad lead byte before a good sequence spoils only itself. */
	is("\xe2\xc3\xa9", "\\ufffd\xc3\xa9");
}

static void json_escape_cuts_at_whole_pieces(void **state)
{
	char out[8];

	(void)state;
	/* "ab" + "\\u0001" (6) does not fit in 7 + NUL: cut before the escape. */
	assert_int_equal(json_escape(out, sizeof(out), "ab\x01"), 8);
	assert_string_equal(out, "ab");
	assert_int_equal(json_escape(out, 4, "a\xc3\xa9z"), 4);
	assert_string_equal(out, "a\xc3\xa9");
	assert_int_equal(json_escape(out, 3, "a\xc3\xa9z"), 4);
	assert_string_equal(out, "a");
	assert_int_equal(json_escape(out, 1, "xyz"), 3);
	assert_string_equal(out, "");
}

static void json_fput_str_quotes(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	(void)state;
	assert_non_null(f);
	assert_int_equal(json_fput_str(f, "say \"hi\"\n\xff"), 0);
	assert_int_equal(fclose(f), 0);
	assert_string_equal(buf, "\"say \\\"hi\\\"\\n\\ufffd\"");
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(json_escapes_quotes_backslashes_and_controls),
		cmocka_unit_test(json_keeps_utf8_and_replaces_each_invalid_byte),
		cmocka_unit_test(json_escape_cuts_at_whole_pieces),
		cmocka_unit_test(json_fput_str_quotes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
