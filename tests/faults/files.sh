#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/faults/files.sh [CASE...]: another local user attacks the files a root job creates
# (issue 20). A throwaway unprivileged user (crunatk<PID>, removed at exit) plants links and
# names in shared directories; root then runs real jobs: checkpoints through the C worker API
# (tests/worker/worker_helper ckpt-write), crun jobs with a shared or open --log-dir and
# --token-file. Each case checks the root-only target file is unchanged and that the job either
# did its work safely or refused naming the directory. Exit 1 if a case failed, 77 when it
# cannot run here (not root, no useradd/runuser/unshare).
# shellcheck disable=SC2016 # the attacker's scripts expand in the attacker's shell
set -u
: "${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}"
CRUN=${CRUN_EXE:-$CRUN_BUILD_DIR/src/crun}
HELPER=$CRUN_BUILD_DIR/tests/worker/worker_helper
W=$CRUN_BUILD_DIR/tests/agent/agent-test-worker
ATK=crunatk$$
LIMIT=60 # seconds, for every job this test runs
. "$(dirname "$0")/../lib/user.sh" # user_need, user_add, user_del, as_atk

user_need files unshare sha256sum
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/crun-files.XXXXXX")
chmod 0755 "$ROOT" # the attacker must reach the shared directories under it
cleanup() {
	user_del
	rm -rf "$ROOT"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
user_add files

nfail=0
fail() {
	echo "FAIL: $CASE: $*"
	nfail=$((nfail + 1))
}

# A root-only file the attacker wants overwritten, and its digest.
VICTIM=$ROOT/victim
new_victim() {
	head -c 65536 /dev/urandom >"$VICTIM"
	chmod 0600 "$VICTIM"
	SUM=$(sha256sum <"$VICTIM")
}
new_victim
# A fresh victim after a failure, so that the next case is judged on its own.
victim_intact() {
	[ "$(sha256sum <"$VICTIM")" = "$SUM" ] && return
	fail "the root-only file $VICTIM was overwritten"
	new_victim
}

# plant_ckpt_links DIR STEP: the attacker links every temporary name a checkpoint writer of
# step STEP used to use (".ckpt-<step>.bin.tmp.<pid>", pids 1..64: the writer runs in a fresh
# PID namespace, so its pid is small) to the victim.
plant_ckpt_links() {
	as_atk bash -c 'for p in $(seq 1 64) ""; do
		ln -s "$3" "$1/$(printf ".ckpt-%020d.bin.tmp.%s" "$2" "$p")"; done' _ "$1" "$2" "$VICTIM"
}
# ckpt_write DIR STEP: root saves checkpoint STEP into DIR in single mode, as a job's rank 0.
ckpt_write() {
	timeout -s KILL "$LIMIT" unshare --pid --fork --mount-proc "$HELPER" ckpt-write "$1" "$2" \
		>"$ROOT/out" 2>"$ROOT/err"
}

want=" $* "
cases() { [ -z "${want// /}" ] || [[ "$want" == *" $1 "* ]]; }

CASE=ckpt-sticky
if cases $CASE; then
	echo "=== $CASE: links planted at the temp names in a shared sticky (1777) checkpoint dir"
	D=$ROOT/shared-ckpt
	mkdir -m 1777 "$D"
	plant_ckpt_links "$D" 7
	ckpt_write "$D" 7
	rc=$?
	victim_intact
	[ "$rc" -eq 0 ] || fail "the save failed (exit $rc): $(cat "$ROOT/err")"
	f=$D/ckpt-00000000000000000007.bin
	if [ ! -f "$f" ] || [ -L "$f" ]; then fail "no checkpoint file $f"; fi
	[ "$(stat -c %u "$f" 2>/dev/null)" = 0 ] || fail "$f is not root's"
	[ "$(find "$D" -maxdepth 1 -type l | wc -l)" -eq 65 ] || fail "planted links were touched"
fi

CASE=ckpt-foreign-dir
if cases $CASE; then
	echo "=== $CASE: the checkpoint dir belongs to the attacker, links planted in it"
	D=$ROOT/atk-ckpt
	mkdir -m 0755 "$D" && chown "$ATK" "$D"
	plant_ckpt_links "$D" 3
	ckpt_write "$D" 3
	rc=$?
	victim_intact
	[ "$rc" -ne 0 ] || fail "root saved a checkpoint into a directory the attacker owns"
	grep -q "checkpoint directory $D: refused: owned by uid $(id -u "$ATK")" "$ROOT/err" ||
		fail "no refusal naming $D and its owner: $(cat "$ROOT/err")"
fi

CASE=ckpt-world-writable
if cases $CASE; then
	echo "=== $CASE: a world-writable checkpoint dir without the sticky bit (0777)"
	D=$ROOT/open-ckpt
	mkdir "$D" && chmod 0777 "$D"
	plant_ckpt_links "$D" 5
	ckpt_write "$D" 5
	rc=$?
	victim_intact
	[ "$rc" -ne 0 ] || fail "root saved a checkpoint into a 0777 directory"
	grep -q "checkpoint directory $D: refused: mode 0777" "$ROOT/err" ||
		fail "no refusal naming $D and its mode: $(cat "$ROOT/err")"
fi

JOB=(--standalone --nproc-per-node 1 --max-restarts 0)
CASE=logdir-planted
if cases $CASE; then
	echo "=== $CASE: every run-folder name a rerun would take planted in a shared sticky --log-dir"
	L=$ROOT/shared-logs
	mkdir -m 1777 "$L"
	# DIR/<run_id>, then <run_id>.1 .. .99 (agent/logroute.h LOGROUTE_RERUNS), then a random
	# suffix nobody can plant.
	as_atk bash -c 'cd "$1" || exit 1
		mkdir planted planted.{1..99} || exit 1
		ln -s "$2" "planted.XXXXXX"' _ "$L" "$VICTIM" || fail "planting failed"
	# --standalone draws a random run id: a fixed one (as a multi-node job has) is guessable.
	timeout -s KILL "$LIMIT" "$CRUN" --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 \
		--rdzv-id planted --nproc-per-node 1 --max-restarts 0 --log-dir "$L" \
		"$W" print:logged >"$ROOT/out" 2>"$ROOT/err"
	rc=$?
	victim_intact
	[ "$rc" -eq 0 ] || fail "the job failed (exit $rc): $(tail -n3 "$ROOT/err")"
	mine=$(find "$L" -maxdepth 1 -name 'planted*' -user 0 -type d)
	[ "$(echo "$mine" | grep -c .)" -eq 1 ] || fail "root's run folder: '$mine' in $(find "$L" -maxdepth 1 -user 0)"
	[ -z "$mine" ] || [ "$(stat -c %a "$mine")" = 700 ] || fail "$mine is not 0700"
	log=$(find "$L" -user 0 -name stdout.log | head -n1)
	if [ -z "$log" ] || ! grep -qx logged "$log"; then fail "no log with the job's output"; fi
	[ -z "$log" ] || [ "$(stat -c %a "$log")" = 600 ] || fail "$log is not 0600"
fi

CASE=logdir-world-writable
if cases $CASE; then
	echo "=== $CASE: a world-writable --log-dir without the sticky bit (0777)"
	L=$ROOT/open-logs
	mkdir "$L" && chmod 0777 "$L"
	timeout -s KILL "$LIMIT" "$CRUN" "${JOB[@]}" --log-dir "$L" "$W" print:logged \
		>"$ROOT/out" 2>"$ROOT/err"
	rc=$?
	[ "$rc" -ne 0 ] || fail "root's job wrote its logs into a 0777 directory"
	grep -q -- "--log-dir $L: refused: mode 0777" "$ROOT/err" ||
		fail "no refusal naming $L and its mode: $(cat "$ROOT/err")"
	[ -z "$(ls -A "$L")" ] || fail "something was created in $L: $(ls -A "$L")"
fi

CASE=token-symlink
if cases $CASE; then
	echo "=== $CASE: --token-file is a link; to root's own token, then to the attacker's"
	mkdir -m 0700 "$ROOT/tok"
	head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$ROOT/tok/real"
	chmod 0600 "$ROOT/tok/real"
	ln -s "$ROOT/tok/real" "$ROOT/tok/link"
	timeout -s KILL "$LIMIT" "$CRUN" "${JOB[@]}" --token-file "$ROOT/tok/link" \
		"$W" print:tokened >"$ROOT/out" 2>"$ROOT/err"
	rc=$?
	[ "$rc" -eq 0 ] || fail "a linked token file was not followed (exit $rc): $(tail -n3 "$ROOT/err")"
	grep -q tokened "$ROOT/out" || fail "the job did not run"
	# The attacker's own 0600 file behind a link: followed, and its owner refused.
	mkdir -m 0700 "$ROOT/atk-tok" && chown "$ATK" "$ROOT/atk-tok"
	as_atk bash -c 'umask 077; echo atk-token >"$1/tok"' _ "$ROOT/atk-tok"
	ln -sf "$ROOT/atk-tok/tok" "$ROOT/tok/link"
	timeout -s KILL "$LIMIT" "$CRUN" "${JOB[@]}" --token-file "$ROOT/tok/link" \
		"$W" print:tokened >"$ROOT/out" 2>"$ROOT/err"
	rc=$?
	[ "$rc" -ne 0 ] || fail "an attacker-owned token file behind a link was used"
	grep -q "token file $ROOT/tok/link: refused: mode 0600, owner uid $(id -u "$ATK")" \
		"$ROOT/err" || fail "no refusal naming the link and its target's owner: $(cat "$ROOT/err")"
fi

echo "files: $nfail failed"
[ "$nfail" -eq 0 ]
