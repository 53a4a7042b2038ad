/* SPDX-License-Identifier: MIT */
/* tests/unit/test_io.c: src/common/io: whole transfers over pipes with short and interrupted
 * reads and writes, positioned I/O, and the bounded stall on a full non-blocking pipe. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "src/common/clock.h"
#include "src/common/io.h"
#include "tests/lib/cmocka_skip.h"

enum { BIG = 256 << 10 };

static uint8_t pattern_byte(size_t i)
{
	return (uint8_t)(i * 131 + (i >> 9));
}

static void fill_pattern(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		p[i] = pattern_byte(i);
	}
}

struct peer {
	int fd;
	uint8_t *buf;
	size_t len;
	size_t done;
	int err;
};

/* Writes @len bytes of the pattern in pieces of 1..997 bytes, then closes @fd. */
static void *short_writer(void *arg)
{
	struct peer *w = arg;
	size_t k;
	ssize_t n;

	while (w->done < w->len) {
		k = 1 + (w->done * 7) % 997;
		if (k > w->len - w->done) {
			k = w->len - w->done;
		}
		n = write(w->fd, w->buf + w->done, k);
		if (n < 0) {
			w->err = errno;
			break;
		}
		w->done += (size_t)n;
	}
	close(w->fd);
	return NULL;
}

/* Reads until end of file in pieces of at most 100 bytes. */
static void *short_reader(void *arg)
{
	struct peer *r = arg;
	ssize_t n;

	for (;;) {
		size_t k = r->len - r->done < 100 ? r->len - r->done : 100;

		if (k == 0) {
			break;
		}
		n = read(r->fd, r->buf + r->done, k);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			r->err = n < 0 ? errno : 0;
			break;
		}
		r->done += (size_t)n;
	}
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
}

/*
 * Interrupt this thread every millisecond with a handler installed without SA_RESTART, so blocking
 * reads and writes return early (EINTR, or a short count) while the test runs. Other
 * threads block SIGALRM (they are created with it blocked).
 */
static void interrupts_start(void)
{
	struct sigaction sa;
	struct itimerval it = {{0, 1000}, {0, 1000}};

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
	assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
}

static void interrupts_stop(void)
{
	struct itimerval off = {{0, 0}, {0, 0}};

	assert_int_equal(setitimer(ITIMER_REAL, &off, NULL), 0);
	/* Ignored, not default: one may still be pending, and must not end the program. */
	signal(SIGALRM, SIG_IGN);
}

static void start_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t block, old;

	sigemptyset(&block);
	sigaddset(&block, SIGALRM);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
	assert_int_equal(pthread_create(t, NULL, fn, arg), 0);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
}

static void io_read_full_assembles_short_writes(void **state)
{
	uint8_t *src = malloc(BIG), *dst = malloc(BIG + 16);
	struct peer w = {.buf = src, .len = BIG};
	pthread_t t;
	int p[2];

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	fill_pattern(src, BIG);
	assert_int_equal(pipe(p), 0);
	w.fd = p[1];
	start_thread(&t, short_writer, &w);
	interrupts_start();
	assert_int_equal(io_read_full(p[0], dst, BIG), BIG);
	/* Then end of file: a short count, then 0. */
	assert_int_equal(io_read_full(p[0], dst, 16), 0);
	interrupts_stop();
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.err, 0);
	assert_memory_equal(src, dst, BIG);
	close(p[0]);
	free(src);
	free(dst);
}

static void io_read_full_stops_at_end_of_file(void **state)
{
	char buf[64];
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "twelve bytes", 12), 12);
	close(p[1]);
	assert_int_equal(io_read_full(p[0], buf, sizeof(buf)), 12);
	assert_memory_equal(buf, "twelve bytes", 12);
	assert_int_equal(io_read_full(p[0], buf, sizeof(buf)), 0);
	assert_int_equal(io_read_full(p[0], buf, 0), 0);
	close(p[0]);
}

static void io_write_full_delivers_everything_to_a_slow_reader(void **state)
{
	uint8_t *src = malloc(BIG), *dst = malloc(BIG);
	struct peer r = {.buf = dst, .len = BIG};
	pthread_t t;
	int p[2];

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	fill_pattern(src, BIG);
	assert_int_equal(pipe(p), 0);
	/* A small pipe: the writer blocks many times and its writes are cut by the interrupts. */
	fcntl(p[1], F_SETPIPE_SZ, 4096);
	r.fd = p[0];
	start_thread(&t, short_reader, &r);
	interrupts_start();
	assert_int_equal(io_write_full(p[1], src, BIG), 0);
	interrupts_stop();
	close(p[1]);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(r.err, 0);
	assert_int_equal(r.done, BIG);
	assert_memory_equal(src, dst, BIG);
	close(p[0]);
	free(src);
	free(dst);
}

static void io_full_calls_report_errno(void **state)
{
	char b[4] = "abc";
	int p[2];

	(void)state;
	assert_int_equal(io_write_full(-1, b, 3), -EBADF);
	assert_int_equal(io_read_full(-1, b, 3), -EBADF);
	assert_int_equal(io_pwrite_full(-1, b, 3, 0), -EBADF);
	assert_int_equal(io_pread_full(-1, b, 3, 0), -EBADF);
	assert_int_equal(io_write_full_stall(-1, b, 3, 10), -EBADF);
	/* Nothing to write is done at once, even on a bad descriptor. */
	assert_int_equal(io_write_full(-1, b, 0), 0);
	/* A pipe nobody reads any more: EPIPE, not a signal (ignored here as crun does). */
	signal(SIGPIPE, SIG_IGN);
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	assert_int_equal(io_write_full(p[1], b, 3), -EPIPE);
	assert_int_equal(io_write_full_stall(p[1], b, 3, 10), -EPIPE);
	close(p[1]);
	signal(SIGPIPE, SIG_DFL);
}

static int temp_file(void)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/crun-unit-io.XXXXXX",
		 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	return fd;
}

static void io_pwrite_and_pread_full_use_the_offset(void **state)
{
	uint8_t *src = malloc(BIG), *dst = malloc(BIG);
	char b[8];
	int fd = temp_file();

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	fill_pattern(src, BIG);
	assert_int_equal(io_pwrite_full(fd, src, BIG, 4096), 0);
	assert_int_equal(io_pwrite_full(fd, "head", 4, 0), 0);
	/* The file offset is not moved by positioned I/O. */
	assert_int_equal(lseek(fd, 0, SEEK_CUR), 0);
	assert_int_equal(io_pread_full(fd, dst, BIG, 4096), BIG);
	assert_memory_equal(src, dst, BIG);
	assert_int_equal(io_pread_full(fd, b, 4, 0), 4);
	assert_memory_equal(b, "head", 4);
	/* The hole between reads as zeros; a read across the end is short; past it, 0. */
	assert_int_equal(io_pread_full(fd, b, 8, 100), 8);
	assert_memory_equal(b, "\0\0\0\0\0\0\0\0", 8);
	assert_int_equal(io_pread_full(fd, b, 8, 4096 + BIG - 3), 3);
	assert_memory_equal(b, src + BIG - 3, 3);
	assert_int_equal(io_pread_full(fd, b, 8, 4096 + BIG + 10), 0);
	close(fd);
	free(src);
	free(dst);
}

/* Fill a non-blocking pipe until the kernel refuses more. */
static void fill_pipe(int fd)
{
	static char junk[65536];

	while (write(fd, junk, sizeof(junk)) > 0) {
	}
	assert_int_equal(errno, EAGAIN);
	while (write(fd, junk, 1) > 0) {
	}
	assert_int_equal(errno, EAGAIN);
}

static void io_write_full_stall_gives_up_on_a_full_pipe_within_the_stall(void **state)
{
	int p[2];
	int64_t t0, dt;

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	fill_pipe(p[1]);
	/* If the stall bound is broken, die instead of hanging the suite. */
	signal(SIGALRM, SIG_DFL);
	alarm(30);
	t0 = crun_now_ms();
	assert_int_equal(io_write_full_stall(p[1], "x", 1, 200), -ETIMEDOUT);
	dt = crun_now_ms() - t0;
	alarm(0);
	/* One stall of 200 ms: not less (it waited), and well under 10x on a loaded machine. */
	assert_true(dt >= 190);
	assert_true(dt < 2000);
	close(p[0]);
	close(p[1]);
}

/* A reader that keeps draining: every byte arrives and no stall is hit. */
static void io_write_full_stall_completes_while_the_reader_drains(void **state)
{
	uint8_t *src = malloc(BIG), *dst = malloc(BIG);
	struct peer r = {.buf = dst, .len = BIG};
	pthread_t t;
	int p[2];

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	fill_pattern(src, BIG);
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	fcntl(p[1], F_SETPIPE_SZ, 4096);
	/* The reader's end must block: O_NONBLOCK is per open file, so set it on p[1] only. */
	assert_int_equal(fcntl(p[0], F_SETFL, 0), 0);
	r.fd = p[0];
	start_thread(&t, short_reader, &r);
	assert_int_equal(io_write_full_stall(p[1], src, BIG, 10000), 0);
	close(p[1]);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(r.done, BIG);
	assert_memory_equal(src, dst, BIG);
	close(p[0]);
	free(src);
	free(dst);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(io_read_full_assembles_short_writes),
		cmocka_unit_test(io_read_full_stops_at_end_of_file),
		cmocka_unit_test(io_write_full_delivers_everything_to_a_slow_reader),
		cmocka_unit_test(io_full_calls_report_errno),
		cmocka_unit_test(io_pwrite_and_pread_full_use_the_offset),
		cmocka_unit_test(io_write_full_stall_gives_up_on_a_full_pipe_within_the_stall),
		cmocka_unit_test(io_write_full_stall_completes_while_the_reader_drains),
	};

	return test_run_group("unit-io", tests, argc > 1 ? argv[1] : NULL, NULL, NULL);
}
