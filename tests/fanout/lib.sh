# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/fanout/lib.sh: helpers for the fan-out tests (sourced): the launchers under test, the
# training example, digests, and an EXIT trap that kills every process started here by PID,
# deletes the network namespaces and links made here, and removes the temp dir.
# shellcheck disable=SC2034 # the variables set here are for the test scripts that source it
set -u

BUILD=${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}
SRC=${CRUN_SOURCE_DIR:?}
CRUN=$BUILD/src/crun
TRAIN=$BUILD/examples/train
W=$BUILD/tests/agent/agent-test-worker
PDSH_TOOL=$BUILD/tools/crun-pdsh
SSH_TOOL=$BUILD/tools/crun-ssh
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-fanout-test.XXXXXX")
export TMPDIR=$T
# This test's agents leave their run records here (agent/run_record.h).
export CRUN_STATE_DIR=$T/state
# A token of this test's own, created by the launcher on first use.
export CRUN_TOKEN_FILE=$T/token
unset CRUN_STORE_TOKEN CRUN_STORE_TOKEN_FILE
# The node script keeps its pid and token files under $XDG_RUNTIME_DIR/crun-fanout.
mkdir -m 700 "$T/xdg"
export XDG_RUNTIME_DIR=$T/xdg
PIDS=""
NETNS=""
LINKS=""

# Run ids carry this suffix; on exit, whatever agent of them is left is killed by the pid its
# node script recorded (in $XDG_RUNTIME_DIR/crun-fanout, or /tmp/crun-fanout-UID over ssh).
R=$$
RUN_DIRS="$XDG_RUNTIME_DIR/crun-fanout /tmp/crun-fanout-$(id -u)"

cleanup() {
	local p q f
	trap - EXIT TERM INT
	for p in $RUN_DIRS; do
		for f in "$p"/*-"$R".*.pid "$p"/*-"$R".*.pid.stop; do
			[ -f "$f" ] || continue
			q=$(cat "$f")
			kill -9 "$q" 2>/dev/null
			rm -f "$f" "${f%.pid*}.token"
		done
	done
	kill_tracked
	netns_teardown "$NETNS" "$LINKS"
	if [ -n "${FANOUT_KEEP-}" ]; then
		echo "--- kept $T" >&2
	else
		rm -rf "$T"
	fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

skip() {
	echo "SKIP: $*" >&2
	exit 77
}

. "$(dirname "${BASH_SOURCE[0]}")/../lib/proc.sh"   # note, track, alive, wait_for, wait_pid...
. "$(dirname "${BASH_SOURCE[0]}")/../lib/expect.sh" # expect_eq, expect_grep, expect_digests
. "$(dirname "${BASH_SOURCE[0]}")/../lib/net.sh"    # hold_port, netns_teardown

# run_id_pids ID: processes whose command line holds ID (a read-only look at /proc).
run_id_pids() {
	local d
	for d in /proc/[0-9]*; do
		tr '\0' '\n' 2>/dev/null <"$d/cmdline" | grep -qxF -- "$1" && echo "${d#/proc/}"
	done
}

# no_token_in_argv: the token appears in no process's command line.
no_token_in_argv() {
	local tok d
	tok=$(head -n 1 "$CRUN_TOKEN_FILE")
	for d in /proc/[0-9]*; do
		if tr '\0' ' ' 2>/dev/null <"$d/cmdline" | grep -qF -- "$tok"; then
			fail "the token is on the command line of pid ${d#/proc/}: $(tr '\0' ' ' <"$d/cmdline")"
		fi
	done
}
