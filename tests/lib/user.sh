# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/user.sh: a throwaway unprivileged local user, the other user on the machine in the
# tests that attack a root job's store and files (tests/faults/preauth.sh, files.sh, quota.sh).
# Sourced. The test names the user (ATK, with its PID in it) and its EXIT trap calls user_del.

# user_need WHO TOOL...: the test runs as root and useradd, userdel, runuser and every TOOL are
# on PATH; otherwise it prints "WHO: skipped: " and why, and exits 77.
user_need() {
	local who=$1 t
	shift
	if [ "$(id -u)" -ne 0 ]; then
		echo "$who: skipped: needs root (it creates a throwaway user); running as uid $(id -u)"
		exit 77
	fi
	for t in useradd userdel runuser "$@"; do
		command -v "$t" >/dev/null || { echo "$who: skipped: no $t here"; exit 77; }
	done
}

# user_add WHO: create the user "$ATK": a system account with no home and no login shell;
# "WHO: skipped: " and exit 77 when useradd refuses it.
user_add() {
	useradd -M -r -s /usr/sbin/nologin "$ATK" ||
		{ echo "$1: skipped: useradd $ATK refused"; exit 77; }
}

# user_del: remove the user "$ATK" (quiet when it was never made); for the EXIT trap.
user_del() {
	userdel "$ATK" 2>/dev/null
}

# as_atk CMD...: run CMD as the user "$ATK".
as_atk() {
	runuser -u "$ATK" -- "$@"
}
