#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/faults/run.sh [CASE...]: the fault-injection suite. Runs every case (or those named),
# each a real crun job with one injected fault, each under a time limit, and prints a table:
# case | injected fault | expected | result | time | pass/fail. Exit 1 if a case failed, 77
# when the suite cannot run here (not root, or network namespaces refused), else 0.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)
: "${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}"
: "${CRUN_SOURCE_DIR:?}"
. "$DIR/../lib/net.sh" # netns_teardown

# name | script | limit (s) | injected fault | expected
CASES=(
	"worker-exit|case_proc.sh|180|rank 1 of 2 exits 3 on the first attempt|restarted; finishes, digests agree (<120 s)"
	"worker-exit-budget|case_proc.sh|90|rank 1 exits 3 on every attempt, --max-restarts 1|fails: exit 3 naming rank 1, exit 3 (<60 s)"
	"worker-segv|case_proc.sh|180|rank 1 dies of SIGSEGV mid-training, once|restarted; finishes, digests agree (<120 s)"
	"worker-segv-budget|case_proc.sh|90|rank 1 dies of SIGSEGV on every attempt|fails: exit 139 naming rank 1, SIGSEGV (<60 s)"
	"worker-hang|case_proc.sh|180|rank 1 SIGSTOPped mid-training (it handles SIGTERM), once; --worker-timeout 3|rank 1 named with its step; restarted < 10 s after, no SIGKILL wait; digests agree (<120 s)"
	"worker-hang-budget|case_proc.sh|90|rank 1 SIGSTOPped on every attempt|fails: exit 143, 'hung: no heartbeat', rank 1 among the ranks named; stopped < 10 s after (<60 s)"
	"agent-kill9|case_proc.sh|180|agent of node 1 of 2 (127.0.0.3) SIGKILLed, --nnodes 1:2|no worker of it alive 1 s later; node 0 re-forms alone, finishes (<120 s)"
	"link-cut-10s|case_net.sh|180|node 1's link (netns, bridge port) down 10 s; heartbeat_timeout 20|rides through: no restart, no new round; digests agree"
	"link-cut-60s|case_net.sh|300|node 1's link down 60 s; heartbeat_timeout 20|node 1 lost; node 0 re-forms alone (<60 s), finishes; node 1 fails clearly (<60 s)"
	"store-stall-35s|case_outage.sh|420|crun-rdzvd SIGSTOPped 35 s under a 2-node job; heartbeat_timeout 60|rides through: no restart, no new round; digests agree"
	"store-stall-join|case_outage.sh|420|crun-rdzvd SIGSTOPped 35 s while node 0 waits in the round; heartbeat_timeout 60|node 0 waits on; the job forms when node 1 comes, no restart; digests agree"
	"partition-40s-fixed|case_outage.sh|480|node 1 of a fixed-size 2-node job cut off 40 s; heartbeat_timeout 20|node 0 fails naming node 1 (<150 s; join_timeout is 600 s); node 1 fails"
	"store-drop|case_outage.sh|300|nft DROP rule on the store's port|crun, crun-store, crun status: 'no answer (packets dropped?)' every few s; exit non-zero (<60 s each)"
	"store-unresolvable|case_outage.sh|120|store host name that does not resolve|crun: 'cannot resolve' every few s; exit non-zero (<50 s)"
	"store-refused|case_outage.sh|120|nothing listens on the store's port|crun: 'connection refused' every few s; exit non-zero (<50 s)"
	"store-kill9|case_proc.sh|90|crun-rdzvd SIGKILLed under a 2-node job|both agents exit 1 naming 'connection refused by HOST:PORT' (<20 s)"
	"log-full|case_disk.sh|60|--log-dir on a tmpfs with 64 KiB left|exit non-zero naming the file (ENOSPC); logs are prefixes of the output (<30 s)"
	"store-full|case_disk.sh|60|file store on a full tmpfs|exit 1 naming file and offset (ENOSPC); the file unchanged (<30 s)"
	"ckpt-full|case_disk.sh|180|checkpoint tmpfs filled while training (a save fails)|restarted; every rank resumes the newest complete checkpoint; digests agree (<120 s)"
	"store-damaged|case_disk.sh|60|one byte flipped in a file store's first record|exit 1 naming the file and offset 16; the file unchanged (<30 s)"
	"clock-ahead|case_proc.sh|300|node 1's wall clock +1 h, jumps to -1 h mid-run (libfaketime)|forms and finishes, no restart; digests agree (<240 s)"
	"clock-behind|case_proc.sh|300|node 1's wall clock -1 h, jumps to +1 h mid-run (libfaketime)|forms and finishes, no restart; digests agree (<240 s)"
)

if [ "$(id -u)" -ne 0 ]; then
	echo "faults: skipped: needs root (network namespaces, tmpfs mounts); running as uid $(id -u)"
	exit 77
fi
probe=crunf-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then
	echo "faults: skipped: 'ip netns add' is refused here (needs CAP_SYS_ADMIN and iproute2)"
	exit 77
fi
ip netns del "$probe"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/crun-faults.XXXXXX")
export FAULTS_TMP=$ROOT
CUR=""
# Whatever a case killed by its time limit left behind: its processes (by PID: the case's
# process group), namespaces and links (by the case's tag), mounts (under ROOT).
sweep() {
	local tag=$1 m
	netns_teardown "$(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag")" \
		"$(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$tag")"
	for m in $(awk '{print $2}' /proc/mounts | grep "^$ROOT/" | sort -r); do
		umount -l "$m" 2>/dev/null
	done
}
finish() {
	[ -z "$CUR" ] || kill -9 -- "-$CUR" 2>/dev/null
	sweep "cf$$x"
	rm -rf "$ROOT"
}
trap finish EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

want=" $* "
for w in "$@"; do # a name that is no case is a mistake, not an empty run
	printf '%s\n' "${CASES[@]}" | grep -q "^$w|" || { echo "faults: no case named '$w'" >&2; exit 2; }
done
rows=()
nfail=0
i=0
for c in "${CASES[@]}"; do
	IFS='|' read -r name script limit fault expect <<<"$c"
	i=$((i + 1))
	[ $# -eq 0 ] || [[ "$want" == *" $name "* ]] || continue
	res=$ROOT/result.$name
	: >"$res"
	echo "=== $name: $fault" >&2
	t0=${EPOCHREALTIME//[!0-9]/}
	# Its own process group (set -m), so a case over its limit is stopped with all it started.
	set -m
	FAULTS_RESULT=$res FAULTS_TAG=cf$$x$i timeout -k 10 "$limit" bash "$DIR/$script" "$name" \
		>&2 &
	CUR=$!
	set +m
	wait $CUR
	rc=$?
	CUR=""
	t1=${EPOCHREALTIME//[!0-9]/}
	sweep "cf$$x$i"
	ms=$(((t1 - t0) / 1000))
	text=$(head -n1 "$res")
	case $rc in
	0) verdict=pass ;;
	77) verdict=skip ;;
	124 | 137)
		verdict=FAIL
		text="over its ${limit} s limit${text:+: $text}"
		;;
	*) verdict=FAIL ;;
	esac
	[ "$verdict" != FAIL ] || nfail=$((nfail + 1))
	rows+=("$name|$fault|$expect|${text:-(no result)}|$(printf '%d.%02d s' $((ms / 1000)) $(((ms % 1000) / 10)))|$verdict")
	echo "=== $name: $verdict (${ms} ms)" >&2
done

echo
echo "Fault table: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -n), $(nproc) cores, crun $("$CRUN_BUILD_DIR/src/crun" --version 2>/dev/null | head -n1)"
echo
echo "| case | injected fault | expected | result | time | pass/fail |"
echo "|---|---|---|---|---|---|"
for r in "${rows[@]}"; do
	echo "| ${r//|/ | } |"
done
echo
echo "faults: ${#rows[@]} cases, $nfail failed"
[ $nfail -eq 0 ]
