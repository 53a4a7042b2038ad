#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/faults/case_disk.sh CASE: faults of the disk: a full file system (a small tmpfs this
# script mounts and fills) under --log-dir, under a file store and under the checkpoint
# directory; a store file damaged in the middle.
# Run by tests/faults/run.sh; exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"

# Workers print 600 numbered lines of 100 bytes on each stream: more than the 64 KiB the log
# file system has left.
log_full() {
	local M=$T/logfs t0 ms f rank n
	tmpfs_mount "$M" 128k
	dd if=/dev/zero of="$M/fill" bs=4096 count=16 2>/dev/null
	t0=$(now_ms)
	timeout -s KILL 60 "$CRUN" --standalone --nproc-per-node 2 --log-dir "$M" \
		--tee 3 "$W" spam:600:100 print:done >"$T/out" 2>"$T/err"
	RC=$?
	ms=$(($(now_ms) - t0))
	[ $RC -ne 0 ] || { tail -n 20 "$T/err" >&2; fail "crun exited 0 with its logs cut short"; }
	expect_grep "error: log file $M/[^/]*/attempt_0/[01]/std\(out\|err\).log: No space left on" \
		"$T/err" "the full log file is named at once"
	expect_grep "the job finished, but its logs are incomplete: log file $M/" "$T/err" \
		"the end of the job says why it fails"
	# Nothing written is lost: every log file is a prefix of what its rank printed.
	n=0
	for f in "$M"/*/attempt_0/*/stdout.log; do
		rank=$(basename "$(dirname "$f")")
		grep -a "^\[rank$rank\]:" "$T/out" | sed "s/^\[rank$rank\]://" >"$T/console.$rank"
		cmp -s -n "$(stat -c %s "$f")" "$f" "$T/console.$rank" ||
			fail "$f is not a prefix of rank $rank's output"
		n=$((n + $(stat -c %s "$f")))
	done
	[ $n -gt 0 ] || fail "the log files hold nothing"
	expect_within $ms 30 "the job"
	result "exit $RC in $(secs $ms), the file named ($(grep -ac 'error: log file' "$T/err") lines);" \
		"the logs ($n bytes of stdout) are prefixes of the output"
}

# A file store that fills its file system: the write that does not fit is refused naming the
# file and the offset, the job fails, and the file is as it was (still a readable store).
store_full() {
	local M=$T/storefs E a b o need t0 ms
	tmpfs_mount "$M" 64k
	E=file://$M/store
	"$CSTORE" -e "$E" set k0 v || fail "crun-store set"
	a=$(stat -c %s "$M/store")
	"$CSTORE" -e "$E" set k1 x || fail "crun-store set"
	b=$(stat -c %s "$M/store")
	o=$((b - a - 1))
	# Pad the file to a page boundary, so the next record needs a new (absent) page.
	need=$((4096 - b - o))
	"$CSTORE" -e "$E" set k2 "$(head -c $need /dev/zero | tr '\0' p)" || fail "crun-store set"
	[ "$(stat -c %s "$M/store")" -eq 4096 ] || fail "could not pad the store to 4096 bytes"
	cp "$M/store" "$T/store.before"
	fill "$M"
	t0=$(now_ms)
	timeout -s KILL 60 "$CRUN" --nnodes 1 --rdzv-backend file --rdzv-endpoint "$E" \
		--rdzv-id full "$W" print:ran >"$T/out" 2>"$T/err"
	RC=$?
	ms=$(($(now_ms) - t0))
	[ $RC -eq 1 ] || { tail -n 20 "$T/err" >&2; fail "exit $RC, expected 1"; }
	expect_grep "store file://$M/store: writing a record of [0-9]* bytes at byte offset 4096: No sp" \
		"$T/err" "the file and offset named"
	grep -aq ":ran$" "$T/out" && fail "workers ran on a store that could not be written"
	cmp -s "$M/store" "$T/store.before" || fail "the store file changed"
	[ "$("$CSTORE" -e "$E" get k1)" = x ] || fail "the store lost k1"
	expect_within $ms 30 "the job"
	result "exit 1 in $(secs $ms) naming file and offset 4096; the file unchanged and readable"
}

# The checkpoint file system fills up while the job trains (a save fails with ENOSPC); the
# space comes back during the restart backoff; every rank resumes from the newest checkpoint
# that was completely written.
ckpt_full() {
	local M=$T/ckfs t0 ms newest
	export FAULT=none
	tmpfs_mount "$M" 1m
	t0=$(now_ms)
	# shellcheck disable=SC2046
	"$CRUN" --standalone --nproc-per-node 2 --max-restarts 1 --restart-backoff 3 \
		$(train_args) --checkpoint-dir "$M/ck" --checkpoint-every 5 >"$T/out" 2>"$T/err" &
	job=$!
	track $job
	wait_for 60 eval 'ls "$M"/ck/ckpt-*.bin >/dev/null 2>&1'
	fill "$M"
	note "checkpoint file system filled at $(ls "$M"/ck | tr '\n' ' ')"
	wait_for 60 grep -aq "restarting the workers" "$T/err"
	newest=$(ls "$M"/ck/ckpt-*.bin | sort | tail -n1)
	note "the save failed; newest complete checkpoint: $newest; freeing the space"
	rm -f "$M/fill" "$M/fill.tail"
	wait_pid 90 $job
	ms=$(($(now_ms) - t0))
	[ $RC -eq 0 ] || { tail -n 30 "$T/err" >&2; fail "exit $RC"; }
	expect_grep "checkpoint $M/ck: No space left on device" "$T/err" "the failed save is named"
	expect_eq_n() { [ "$1" = "$2" ] || fail "$3: expected $2, got $1"; }
	expect_eq_n "$(grep -ac "rank [01] resumed from $newest at epoch" "$T/out")" 2 \
		"ranks resumed from $(basename "$newest")"
	expect_digests 2 "$T/out"
	expect_within $ms 120 "the job"
	result "save failed (ENOSPC, named); both ranks resumed from $(basename "$newest");" \
		"exit 0 in $(secs $ms); digests agree"
}

# A store file damaged in the middle (one byte of its first record): a job on it fails naming
# the file and the offset, and the file is left as it was.
store_damaged() {
	local S=$T/store t0 ms
	timeout -s KILL 60 "$CRUN" --nnodes 1 --rdzv-backend file --rdzv-endpoint "file://$S" \
		--rdzv-id first "$W" print:ran >"$T/out" 2>"$T/err" || fail "the first job failed"
	[ "$(stat -c %s "$S")" -gt 200 ] || fail "the store holds too little"
	# Offset 40: inside the first record (file header 16 bytes, record header after it).
	printf '\377' | dd of="$S" bs=1 seek=40 conv=notrunc 2>/dev/null
	cp "$S" "$T/store.before"
	t0=$(now_ms)
	timeout -s KILL 60 "$CRUN" --nnodes 1 --rdzv-backend file --rdzv-endpoint "file://$S" \
		--rdzv-id second "$W" print:ran >"$T/out" 2>"$T/err"
	RC=$?
	ms=$(($(now_ms) - t0))
	[ $RC -eq 1 ] || { tail -n 20 "$T/err" >&2; fail "exit $RC, expected 1"; }
	expect_grep "store file://$S: damaged record at byte offset 16" "$T/err" "file and offset named"
	grep -aq ":ran$" "$T/out" && fail "workers ran on a damaged store"
	cmp -s "$S" "$T/store.before" || fail "the damaged file was changed"
	expect_within $ms 30 "the job"
	result "exit 1 in $(secs $ms): 'damaged record at byte offset 16'; the file left as it was"
}

case ${1:?case} in
log-full) log_full ;;
store-full) store_full ;;
ckpt-full) ckpt_full ;;
store-damaged) store_damaged ;;
*) fail "unknown case $1" ;;
esac
exit 0
