/* SPDX-License-Identifier: MIT */
/* tests/agent/test_live.c: live partial lines, the console hand-over between ranks, ptys. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "agent/logroute.h"
#include "agent/pty.h"
#include "src/common/clock.h"

/* Everything the console pipe holds, as a string. */
static const char *drain(int fd)
{
	static char out[8192];
	size_t n = 0;
	ssize_t r;

	while (n < sizeof(out) - 1 && (r = read(fd, out + n, sizeof(out) - 1 - n)) > 0) {
		n += (size_t)r;
	}
	out[n] = '\0';
	return out;
}

struct console {
	int p[2];
	struct logroute_stream a, b;
};

static int setup(void **state)
{
	struct console *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	assert_int_equal(pipe2(c->p, O_NONBLOCK), 0);
	assert_int_equal(logroute_init(&c->a, "[rank0]:", c->p[1], -1), 0);
	assert_int_equal(logroute_init(&c->b, "[rank1]:", c->p[1], -1), 0);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct console *c = *state;

	logroute_finish(&c->a);
	logroute_finish(&c->b);
	close(c->p[0]);
	close(c->p[1]);
	free(c);
	return 0;
}

/* A prompt waits for its delay, then shows with the prefix; the rest follows without one. */
static void partial_line_is_due_after_the_delay(void **state)
{
	struct console *c = *state;
	int64_t t0 = crun_now_ms(), due;

	logroute_feed(&c->a, "name? ", 6);
	assert_string_equal(drain(c->p[0]), "");
	due = logroute_partial_due(&c->a);
	assert_true(due >= t0 + LOGROUTE_PARTIAL_MS);
	assert_true(due <= crun_now_ms() + LOGROUTE_PARTIAL_MS);
	logroute_forward_partial(&c->a);
	assert_string_equal(drain(c->p[0]), "[rank0]:name? ");
	assert_int_equal(logroute_partial_due(&c->a), -1);
	/* The line has the console: its next bytes go out at once, without a prefix. */
	logroute_feed(&c->a, "bo", 2);
	assert_string_equal(drain(c->p[0]), "bo");
	logroute_feed(&c->a, "b\n", 2);
	assert_string_equal(drain(c->p[0]), "b\n");
}

/* Another rank's line ends the open line first; the interrupted one goes on with its prefix. */
static void other_rank_never_merges_into_an_open_line(void **state)
{
	struct console *c = *state;

	logroute_feed(&c->a, "epoch 1: ", 9);
	logroute_forward_partial(&c->a);
	logroute_feed(&c->b, "hello\n", 6);
	logroute_feed(&c->b, "stderr-like", 11);
	logroute_forward_partial(&c->b);
	logroute_feed(&c->a, "done\n", 5);
	logroute_feed(&c->b, "!\n", 2);
	assert_string_equal(drain(c->p[0]), "[rank0]:epoch 1: \n"
					    "[rank1]:hello\n"
					    "[rank1]:stderr-like\n"
					    "[rank0]:done\n"
					    "[rank1]:!\n");
}

/* An interrupted line whose rest is only its newline adds no empty prefixed line. */
static void interrupted_line_ending_adds_no_empty_line(void **state)
{
	struct console *c = *state;

	logroute_feed(&c->a, "50%", 3);
	logroute_forward_partial(&c->a);
	logroute_feed(&c->b, "x\n", 2);
	logroute_feed(&c->a, "\n", 1);
	logroute_feed(&c->a, "next\n", 5);
	assert_string_equal(drain(c->p[0]), "[rank0]:50%\n[rank1]:x\n[rank0]:next\n");
}

/* A \r bar goes out at once, each redraw with the prefix again; \r\n stays as is. */
static void carriage_return_redraws_keep_the_prefix(void **state)
{
	struct console *c = *state;

	logroute_feed(&c->a, "\r 10%", 5);
	assert_string_equal(drain(c->p[0]), "[rank0]: 10%");
	logroute_feed(&c->a, "\r 20%", 5);
	assert_string_equal(drain(c->p[0]), "\r[rank0]: 20%");
	/* A trailing \r waits: it may be the start of a \r\n. */
	logroute_feed(&c->a, " ok\r", 4);
	assert_string_equal(drain(c->p[0]), " ok");
	logroute_feed(&c->a, "\n", 1);
	assert_string_equal(drain(c->p[0]), "\r\n");
	logroute_feed(&c->b, "a\rb\r\n", 5);
	assert_string_equal(drain(c->p[0]), "[rank1]:a\r[rank1]:b\r\n");
}

/* The end of a stream ends its open line; the file gets whole lines only. */
static void flush_ends_an_open_line_and_files_get_whole_lines(void **state)
{
	struct console *c = *state;
	struct logroute_stream f;
	char path[] = "/tmp/crun-test-live.XXXXXX";
	char got[64];
	int fd = mkstemp(path);
	ssize_t n;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(logroute_init(&f, "[rank2]:", c->p[1], dup(fd)), 0);
	logroute_feed(&f, "partial", 7);
	logroute_forward_partial(&f);
	logroute_feed(&f, " more", 5);
	logroute_finish(&f);
	assert_string_equal(drain(c->p[0]), "[rank2]:partial more\n");
	n = pread(fd, got, sizeof(got) - 1, 0);
	assert_true(n >= 0);
	got[n] = '\0';
	assert_string_equal(got, "partial more\n");
	close(fd);
	unlink(path);
}

/* Nothing shown on the console: nothing is ever due. */
static void hidden_stream_has_nothing_due(void **state)
{
	struct logroute_stream s;

	(void)state;
	assert_int_equal(logroute_init(&s, "[rank0]:", -1, -1), 0);
	logroute_feed(&s, "x", 1);
	assert_int_equal(logroute_partial_due(&s), -1);
	logroute_finish(&s);
}

/* A worker's pty: a terminal for the worker, \n not turned into \r\n, narrowed by the prefix. */
static void pty_is_a_terminal_that_passes_newlines(void **state)
{
	struct winsize ws;
	char buf[16];
	int m, s;
	ssize_t n;

	(void)state;
	if (pty_open(-1, 8, &m, &s) != 0) {
		skip(); /* no /dev/ptmx in this sandbox */
	}
	assert_true(m > 2 && s > 2);
	assert_int_equal(isatty(s), 1);
	assert_true(fcntl(m, F_GETFD) & FD_CLOEXEC);
	assert_true(fcntl(s, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(ioctl(m, TIOCGWINSZ, &ws), 0);
	assert_int_equal(ws.ws_col, PTY_DEFAULT_COLS - 8);
	assert_int_equal(write(s, "a\n", 2), 2);
	n = read(m, buf, sizeof(buf));
	assert_int_equal(n, 2);
	assert_memory_equal(buf, "a\n", 2);
	close(s);
	close(m);
}

static void pty_wanted_follows_the_mode(void **state)
{
	int p[2];

	(void)state;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_false(pty_wanted(TTY_AUTO, p[1], false)); /* a pipe is no terminal */
	assert_true(pty_wanted(TTY_ALWAYS, p[1], true));
	assert_false(pty_wanted(TTY_ALWAYS, -1, false)); /* not shown */
	assert_false(pty_wanted(TTY_NEVER, p[1], false));
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(partial_line_is_due_after_the_delay, setup,
						teardown),
		cmocka_unit_test_setup_teardown(other_rank_never_merges_into_an_open_line, setup,
						teardown),
		cmocka_unit_test_setup_teardown(interrupted_line_ending_adds_no_empty_line, setup,
						teardown),
		cmocka_unit_test_setup_teardown(carriage_return_redraws_keep_the_prefix, setup,
						teardown),
		cmocka_unit_test_setup_teardown(flush_ends_an_open_line_and_files_get_whole_lines,
						setup, teardown),
		cmocka_unit_test(hidden_stream_has_nothing_due),
		cmocka_unit_test(pty_is_a_terminal_that_passes_newlines),
		cmocka_unit_test(pty_wanted_follows_the_mode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
