/* SPDX-License-Identifier: MIT */
/* src/common/signames.c: one table of Linux signal names. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "src/common/parse.h"
#include "src/common/signames.h"
#include "src/common/util.h"

/* Number to name takes the first entry: SIGPOLL for 29, as glibc's sigabbrev_np() says. */
static const struct {
	const char *name;
	int sig;
} signals[] = {
	{"SIGHUP", SIGHUP},     {"SIGINT", SIGINT},       {"SIGQUIT", SIGQUIT},
	{"SIGILL", SIGILL},     {"SIGTRAP", SIGTRAP},     {"SIGABRT", SIGABRT},
	{"SIGBUS", SIGBUS},     {"SIGFPE", SIGFPE},       {"SIGKILL", SIGKILL},
	{"SIGUSR1", SIGUSR1},   {"SIGSEGV", SIGSEGV},     {"SIGUSR2", SIGUSR2},
	{"SIGPIPE", SIGPIPE},   {"SIGALRM", SIGALRM},     {"SIGTERM", SIGTERM},
	{"SIGSTKFLT", SIGSTKFLT}, {"SIGCHLD", SIGCHLD},   {"SIGCONT", SIGCONT},
	{"SIGSTOP", SIGSTOP},   {"SIGTSTP", SIGTSTP},     {"SIGTTIN", SIGTTIN},
	{"SIGTTOU", SIGTTOU},   {"SIGURG", SIGURG},       {"SIGXCPU", SIGXCPU},
	{"SIGXFSZ", SIGXFSZ},   {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF},
	{"SIGWINCH", SIGWINCH}, {"SIGPOLL", SIGPOLL}, {"SIGIO", SIGIO},         {"SIGPWR", SIGPWR},
	{"SIGSYS", SIGSYS},
};

const char *signal_abbrev(int sig)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(signals); i++) {
		if (signals[i].sig == sig) {
			return signals[i].name;
		}
	}
	return NULL;
}

const char *signal_name(int sig, char *buf, size_t len)
{
	const char *n = signal_abbrev(sig);

	if (n != NULL) {
		snprintf(buf, len, "%s", n);
	} else if (sig == SIGRTMIN) {
		snprintf(buf, len, "SIGRTMIN");
	} else if (sig > SIGRTMIN && sig <= SIGRTMAX) {
		snprintf(buf, len, "SIGRTMIN+%d", sig - SIGRTMIN);
	} else {
		snprintf(buf, len, "signal %d", sig);
	}
	return buf;
}

int signal_parse(const char *name)
{
	size_t i;
	int n;

	if (parse_int(name, 1, SIGRTMAX, &n) == 0) {
		return n;
	}
	if (strncasecmp(name, "SIG", 3) == 0) {
		name += 3;
	}
	for (i = 0; i < ARRAY_SIZE(signals); i++) {
		if (strcasecmp(name, signals[i].name + 3) == 0) {
			return signals[i].sig;
		}
	}
	return -EINVAL;
}
