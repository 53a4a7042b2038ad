#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/ops/journal.sh: the failure table at a journal priority (issue 21). With stderr the
# journal ($JOURNAL_STREAM names it), every line crun writes carries sd-daemon(3)'s "<N>"
# prefix, the failure table's at error priority (3), so `journalctl -p warning` shows the
# failure and not only "(failure reported above)".
. "$(dirname "$0")/../agent/lib.sh"

note "a worker exits 3 on one node, no restarts left; stderr is the journal"
: >"$T/j.err"
JOURNAL_STREAM=$(stat -c '%d:%i' "$T/j.err") timeout -s KILL 60 "$CRUN" --standalone \
	--nproc-per-node 2 --max-restarts 0 --no-python "$W" exit-if-rank:1:3 print:ok \
	>"$T/j.out" 2>>"$T/j.err"
RC=$?
expect_eq "$RC" 3 "crun's exit status (the worker's)"
expect_grep '^<3>crun: worker failure on ' "$T/j.err" "the table's heading at error priority"
expect_grep '^<3>  first .* exit 3 ' "$T/j.err" "the failing rank's row at error priority"
# (crun's own log lines go to journald's socket where one listens, else here with "<N>".)
bad=$(grep -av '^<[0-7]>' "$T/j.err" || true)
[ -z "$bad" ] || { cat "$T/j.err" >&2; fail "lines without a journal priority: $bad"; }
echo PASS
