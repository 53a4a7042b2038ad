# SPDX-License-Identifier: MIT
# tests/agent/lib.sh: helpers for the agent tests (sourced). Every wait is bounded, every
# process started here is killed by PID on exit, and the temp dir is removed.
# shellcheck disable=SC2034 # the variables set here are for the test scripts and tests/lib
set -u

BUILD=${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}
SRC=${CRUN_SOURCE_DIR:?}
CRUN=${CRUN_EXE:-$BUILD/src/crun}
RDZVD=${CRUN_RDZVD_EXE:-$BUILD/src/crun-rdzvd}
STORE_CLI=${CRUN_STORE_EXE:-$BUILD/src/crun-store}
W=$BUILD/tests/agent/agent-test-worker
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-agent-test.XXXXXX")
export TMPDIR=$T
# This test's agents leave their run records here (agent/run_record.h).
export CRUN_STATE_DIR=$T/state
# Authentication is on by default: the daemon and the agents share this per-test token file.
export CRUN_TOKEN_FILE=$T/token
unset CRUN_STORE_TOKEN CRUN_STORE_TOKEN_FILE
PIDS=""
# The network namespaces and links a test made (need_netns, then tests/lib/net.sh's
# netns_bridge records them here): removed on exit.
NETNS=""
LINKS=""

cleanup() {
	kill_tracked
	netns_teardown "$NETNS" "$LINKS"
	rm -rf "$T"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

. "$(dirname "${BASH_SOURCE[0]}")/../lib/proc.sh"   # note, track, alive, wait_for, wait_key, start_rdzvd...
. "$(dirname "${BASH_SOURCE[0]}")/../lib/expect.sh" # expect_eq, expect_grep, expect_digests
. "$(dirname "${BASH_SOURCE[0]}")/../lib/net.sh"    # hold_port, hold_port_pair

# run_crun SECONDS OUT ERR ARGS...: run crun in the foreground with a time limit; sets RC.
run_crun() {
	local limit=$1 out=$2 err=$3
	shift 3
	timeout -s KILL "$limit" "$CRUN" "$@" >"$out" 2>"$err"
	RC=$?
	if [ $RC -eq 137 ]; then
		cat "$err" >&2
		fail "crun $* did not finish in ${limit}s"
	fi
}

# need_netns TAG: the test runs as root and may make network namespaces (netns_usable TAG);
# otherwise it says which is missing and is skipped (exit 77).
need_netns() {
	[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces): skipping"; exit 77; }
	netns_usable "$1" || { echo "ip netns add refused: skipping"; exit 77; }
}

# need_torch: PYTHON_EXEC is Debian's python3 with torch (the real PyTorch client), gloo on
# loopback; otherwise the test is skipped (exit 77).
# peer_runs: whether a test runs its peer's half (torchrun) too. The sanitizer pass of
# scripts/test sets CRUN_TEST_PEER=0: crun runs there under ASan+UBSan, the peer (Python) gains
# nothing from it, and the plain pass already compares the two. Without the peer a comparison
# checks crun's half alone: the exit status the case expects, output, digests that agree.
peer_runs() { [ "${CRUN_TEST_PEER:-1}" != 0 ]; }

need_torch() {
	export PYTHON_EXEC=/usr/bin/python3
	if ! "$PYTHON_EXEC" -c 'import torch' 2>/dev/null; then
		echo "torch is not importable by $PYTHON_EXEC: skipping"
		exit 77
	fi
	export GLOO_SOCKET_IFNAME=lo
}
