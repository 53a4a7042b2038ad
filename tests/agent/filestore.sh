#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/filestore.sh: a crun job on a damaged or foreign file store fails, naming the
# file (and the byte offset), and leaves the file as it was.
. "$(dirname "$0")/lib.sh"

STORE_CLI=$BUILD/src/crun-store

# job NAME STORE: one node over file://STORE; sets RC, output in $T/NAME.{out,err}.
job() {
	run_crun 60 "$T/$1.out" "$T/$1.err" --nnodes 1 --nproc-per-node 1 --rdzv-backend file \
		--rdzv-endpoint "file://$2" --rdzv-id "$1" "$W" print:ran
}

note "a good store: the job runs"
job good "$T/good"
[ $RC -eq 0 ] || { cat "$T/good.err" >&2; fail "job on a fresh store exited $RC"; }

note "damaged record in the middle of the store: refused with the file and the offset"
S=$T/damaged
for k in a b c; do
	"$STORE_CLI" --endpoint "file://$S" set "key-$k" "value-$k" || fail "crun-store set $k"
done
# Flip one byte of the middle record's value ("value-b" -> "valuE-b").
at=$(grep -abo "key-bvalue-b" "$S" | cut -d: -f1)
[ -n "$at" ] || fail "the record of key-b is not in the store"
printf 'E' | dd of="$S" bs=1 seek=$((at + 9)) conv=notrunc status=none
# The record starts 16 (header) + 4 (count) + 16 (lengths, expiry) bytes before its key.
off=$((at - 36))
cp "$S" "$T/damaged.before"
job damaged "$S"
[ $RC -ne 0 ] || { cat "$T/damaged.err" >&2; fail "job on a damaged store exited 0"; }
expect_grep "store file://$S: damaged record at byte offset $off" "$T/damaged.err" \
	"the message names the file and the offset"
cmp -s "$S" "$T/damaged.before" || fail "the damaged store was changed"
if grep -q "ran" "$T/damaged.out"; then
	fail "workers ran on a damaged store"
fi

note "a shell script given as the store: refused, and left alone"
printf '#!/bin/sh\necho hello\n' >"$T/script.sh"
cp "$T/script.sh" "$T/script.before"
job script "$T/script.sh"
[ $RC -ne 0 ] || fail "job on a shell script exited 0"
expect_grep "store file://$T/script.sh: not a crun store file" "$T/script.err" \
	"the message names the file"
cmp -s "$T/script.sh" "$T/script.before" || fail "the script was changed"
echo "filestore: ok"
