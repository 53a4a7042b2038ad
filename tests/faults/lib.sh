# SPDX-License-Identifier: MIT
# tests/faults/lib.sh: helpers for the fault cases (sourced by case_*.sh). Every process, network
# namespace, veth and mount a case makes is recorded and removed by the EXIT trap, even when
# the case fails or the driver's timeout stops it (SIGTERM).
# shellcheck disable=SC2034 # the variables set here are for the case scripts that source it
set -u

BUILD=${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}
SRC=${CRUN_SOURCE_DIR:?}
CRUN=$BUILD/src/crun
RDZVD=$BUILD/src/crun-rdzvd
CSTORE=$BUILD/src/crun-store
TRAIN=$BUILD/examples/train
W=$BUILD/tests/agent/agent-test-worker
FW=$SRC/tests/faults/worker.sh
T=$(mktemp -d "${FAULTS_TMP:-${TMPDIR:-/tmp}}/crun-fault.XXXXXX")
export TMPDIR=$T
# This test's agents leave their run records here (agent/run_record.h).
export CRUN_STATE_DIR=$T/state
# Names made here carry this tag, so the driver can sweep whatever a killed case left.
TAG=${FAULTS_TAG:-cf$$}
PIDS=""
NETNS=""
LINKS=""
MOUNTS=""
# The result line the driver prints in its table; set by result(), or by fail().
RESULT_FILE=${FAULTS_RESULT:-/dev/null}

cleanup() {
	local p
	trap - EXIT TERM INT
	kill_tracked
	for p in $MOUNTS; do
		umount -l "$p" 2>/dev/null
	done
	netns_teardown "$NETNS" "$LINKS"
	if [ -n "${FAULTS_KEEP-}" ]; then
		echo "--- kept $T" >&2
	else
		rm -rf "$T"
	fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

result() {
	echo "$*" >"$RESULT_FILE"
	echo "--- result: $*" >&2
}

fail() {
	echo "FAIL: $*" >&2
	[ -s "$RESULT_FILE" ] || echo "$*" >"$RESULT_FILE"
	exit 1
}

skip() {
	echo "SKIP: $*" >&2
	echo "skipped: $*" >"$RESULT_FILE"
	exit 77
}

. "$(dirname "${BASH_SOURCE[0]}")/../lib/proc.sh"   # note, track, alive, wait_for, start_rdzvd...
. "$(dirname "${BASH_SOURCE[0]}")/../lib/expect.sh" # expect_grep, digests, expect_digests
. "$(dirname "${BASH_SOURCE[0]}")/../lib/net.sh"    # netns_teardown

# expect_within MS LIMIT_S WHAT: fail when MS is over LIMIT_S seconds.
expect_within() {
	[ "$1" -le $(($2 * 1000)) ] || fail "$3 took $1 ms (bound ${2} s)"
}

# secs MS: "12.34 s"
secs() {
	printf '%d.%02d s' $(($1 / 1000)) $((($1 % 1000) / 10))
}

# tmpfs_mount DIR SIZE: a small tmpfs on DIR (created), unmounted by the trap.
tmpfs_mount() {
	mkdir -p "$1"
	mount -t tmpfs -o "size=$2,mode=0755" "crun-fault-$TAG" "$1" ||
		skip "mount -t tmpfs refused (needs root / CAP_SYS_ADMIN)"
	MOUNTS="$1 $MOUNTS"
}

# fill DIR: fill the file system of DIR to the last byte (a file named fill).
fill() {
	dd if=/dev/zero of="$1/fill" bs=4096 2>/dev/null
	dd if=/dev/zero of="$1/fill.tail" bs=1 2>/dev/null
	[ "$(df --output=avail "$1" | tail -n1 | tr -d ' ')" -eq 0 ] || fail "could not fill $1"
}

# The training job every "finishes" case runs: examples/train on the digits, long enough
# (150 epochs: 2 s unloaded, 25 s in an ASan build on a loaded machine) that a fault lands
# while it trains.
EPOCHS=${FAULTS_EPOCHS:-150}
train_args() {
	echo --no-python "$FW" --epochs "$EPOCHS" --lr 0.1
}
export FAULT_TRAIN=$TRAIN FAULT_W=$W
