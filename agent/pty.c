/* SPDX-License-Identifier: MIT */
/* agent/pty.c: a pseudo-terminal for a worker stream that the agent shows on a terminal. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "agent/pty.h"
#include "src/common/io.h"

bool pty_wanted(enum tty_mode mode, int console_fd, bool has_file)
{
	if (mode == TTY_NEVER || console_fd < 0) {
		return false;
	}
	if (mode == TTY_ALWAYS) {
		return true;
	}
	return !has_file && isatty(console_fd) == 1;
}

void pty_resize(int master, int console_fd, size_t prefix_len)
{
	struct winsize ws = {0};

	if (console_fd < 0 || ioctl(console_fd, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) {
		ws.ws_col = PTY_DEFAULT_COLS;
		ws.ws_row = PTY_DEFAULT_ROWS;
	}
	/* The prefix takes columns of every line; a very narrow screen keeps 20 for the worker. */
	if (ws.ws_col > prefix_len + 20) {
		ws.ws_col = (unsigned short)(ws.ws_col - prefix_len);
	} else if (ws.ws_col > 20) {
		ws.ws_col = 20;
	}
	(void)ioctl(master, TIOCSWINSZ, &ws);
}

int pty_open(int console_fd, size_t prefix_len, int *master, int *slave)
{
	struct termios t;
	char name[64];
	int m, s = -1, rc;

	m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0) {
		return -errno;
	}
	m = io_lift_fd(m);
	if (m < 0) {
		return m;
	}
	/* The agent's loop reads it until it would block. */
	if (grantpt(m) != 0 || unlockpt(m) != 0 || fcntl(m, F_SETFL, O_NONBLOCK) != 0) {
		rc = -errno;
		goto fail;
	}
	rc = ptsname_r(m, name, sizeof(name));
	if (rc != 0) {
		rc = -rc;
		goto fail;
	}
	s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0) {
		rc = -errno;
		goto fail;
	}
	s = io_lift_fd(s);
	if (s < 0) {
		rc = s;
		s = -1;
		goto fail;
	}
	/* Lines come out with \n alone: the agent cuts them and its terminal adds the \r. */
	if (tcgetattr(s, &t) == 0) {
		t.c_oflag &= ~(tcflag_t)ONLCR;
		(void)tcsetattr(s, TCSANOW, &t);
	}
	pty_resize(m, console_fd, prefix_len);
	*master = m;
	*slave = s;
	return 0;
fail:
	if (s >= 0) {
		close(s);
	}
	close(m);
	return rc;
}
