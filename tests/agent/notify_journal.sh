#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/notify_journal.sh: log lines by destination (src/common/log.c): the journal
# ($JOURNAL_STREAM names stderr) gets "<priority>text"; a file or pipe gets date, time zone and
# host; a terminal keeps the short form; none carries colour codes.
. "$(dirname "$0")/lib.sh"

HOST=$(hostname)

# Where journald listens, crun's lines go to it as entries (src/common/journal.c,
# agent-journal_fields): the stream's own "<N>" format, its fallback, is checked with the
# socket hidden in a private mount namespace (root), or not at all.
NOJOURNAL=()
if [ -S /run/systemd/journal/socket ]; then
	if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
		# shellcheck disable=SC2016 # expanded by the inner shell
		NOJOURNAL=(unshare -m --propagation private sh -c
			'mount -t tmpfs crun-nojournal /run/systemd/journal && exec "$@"' _)
	else
		NOJOURNAL=(skip)
	fi
fi

# rdzvd NAME [ENV...]: crun-rdzvd --insecure (one warning, then info lines) until SIGTERM, stderr
# to $T/NAME.err; the environment assignments are given to it.
rdzvd() {
	local name=$1 pid
	shift
	: >"$T/$name.err"
	"${WRAP[@]}" env "$@" JOURNAL_STREAM="${JS:-}" "$RDZVD" --listen 127.0.0.1:0 --insecure \
		>"$T/$name.out" 2>>"$T/$name.err" &
	pid=$!
	track $pid
	wait_for 20 grep -q 'listening on' "$T/$name.err"
	kill -TERM $pid
	wait_pid 20 $pid
	expect_eq $RC 0 "crun-rdzvd exit status"
}

WRAP=()
if [ "${NOJOURNAL[0]:-}" = skip ]; then
	note "journald listens here and this is not root: the journal stream's format is not checked"
else
	note "stderr is the journal, journald's socket absent: a priority prefix, no time, no name"
	: >"$T/j.err"
	WRAP=("${NOJOURNAL[@]}")
	JS=$(stat -c '%d:%i' "$T/j.err") rdzvd j
	WRAP=()
	expect_grep '^<4>--insecure: any client' "$T/j.err" "a warning at priority 4"
	expect_grep '^<6>listening on 127.0.0.1:' "$T/j.err" "an info line at priority 6"
	bad=$(grep -v '^<[3467]>' "$T/j.err" || true)
	[ -z "$bad" ] || fail "journal lines without a priority: $bad"
fi

note "JOURNAL_STREAM names another file: date, offset and host"
: >"$T/other"
JS=$(stat -c '%d:%i' "$T/other") rdzvd p TZ=IST-5:30
ISO='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}'
grep -Eq "^crun-rdzvd ${ISO}\+05:30 $HOST warning: --insecure" "$T/p.err" ||
	{ cat "$T/p.err" >&2; fail "ISO 8601 time with +05:30 and the host"; }
bad=$(grep -Ev "^crun-rdzvd ${ISO}\+05:30 $HOST (info|warning): " "$T/p.err" || true)
[ -z "$bad" ] || fail "lines not in the file format: $bad"
JS=bogus rdzvd z TZ=UTC0
expect_grep "^crun-rdzvd [0-9T:.-]*+00:00 $HOST info: listening" "$T/z.err" "UTC as +00:00"
JS= rdzvd w TZ=PST8
expect_grep "^crun-rdzvd [0-9T:.-]*-08:00 $HOST info: listening" "$T/w.err" "a negative offset"

note "a terminal: the short form, as before"
if command -v script >/dev/null; then
	# Stopped once its listening line has come through the terminal into tty.out (script
	# copies it there as it comes), not after a guess of 0.5 s; the timeout bounds the wait.
	timeout -s KILL 30 script -qec "'$RDZVD' --listen 127.0.0.1:0 --insecure & p=\$!;
		until grep -q 'info: listening' '$T/tty.out'; do sleep 0.05; done;
		kill \$p; wait \$p" /dev/null >"$T/tty.out" 2>&1
	grep -Eq "^crun-rdzvd [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} info: listening" "$T/tty.out" ||
		{ cat "$T/tty.out" >&2; fail "the terminal format"; }
else
	note "no script(1): terminal case not checked"
fi

note "no colour codes anywhere"
if grep -l $'\e' "$T"/*.err "$T/tty.out" 2>/dev/null; then
	fail "escape sequences in log lines"
fi
echo "ok"
