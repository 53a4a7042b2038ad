#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/journal_fields.sh: when stderr is the journal, crun's log lines go to journald's
# native socket as entries with fields (src/common/journal.c): MESSAGE, PRIORITY,
# SYSLOG_IDENTIFIER and the agent's RUN_ID, NODE_RANK and ROUND, so `journalctl RUN_ID=...`
# finds a run's lines across units. A real 2-worker job whose rank 1 fails twice (a warning
# when it restarts in round 0, an error when the budget is spent in round 1) runs with
# $JOURNAL_STREAM naming its stderr, in a private mount namespace whose
# /run/systemd/journal/socket is a python listener (tests/lib/journal_listen.py). Then the
# fallback: no listener behind the socket, and every line is on stderr with its "<N>" priority.
# The workers' lines the agent forwards to the journal's stream are entries too, with RANK.
# Root only (a mount namespace); skipped (77) otherwise.
if [ -z "${CRUN_JOURNAL_NS:-}" ]; then
	[ "$(id -u)" = 0 ] || exec "$(dirname "$0")/../lib/skip.sh" "needs root for a mount namespace"
	command -v unshare >/dev/null ||
		exec "$(dirname "$0")/../lib/skip.sh" "no unshare(1)"
	exec unshare -m --propagation private env CRUN_JOURNAL_NS=1 bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

JDIR=/run/systemd/journal
# Only this namespace sees the tmpfs: the host's journal (if any) is untouched.
mkdir -p /run/systemd 2>/dev/null || true
mount -t tmpfs -o mode=0755,size=4m crun-journal-test /run/systemd || fail "mount tmpfs on /run/systemd"
mkdir -p "$JDIR"
LISTEN=$SRC/tests/lib/journal_listen.py

listener() {
	python3 "$LISTEN" "$JDIR/socket" "$T/entries" &
	LPID=$!
	track $LPID
	wait_for 20 test -S "$JDIR/socket"
}

cat >"$T/w.sh" <<'EOF2'
#!/bin/bash
echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT"
[ "$RANK" = 1 ] && { echo "rank 1 gives up" >&2; exit 3; }
exit 0
EOF2
chmod +x "$T/w.sh"

# job ERR: the job above with stderr to ERR, which $JOURNAL_STREAM names; sets RC.
job() {
	: >"$1"
	hold_port port
	# shellcheck disable=SC2154 # set by hold_port
	JOURNAL_STREAM=$(stat -c '%d:%i' "$1") run_crun 120 "$T/out" "$1" --nnodes 1 \
		--nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
		--rdzv-id jfields --max-restarts 1 --restart-backoff 0.1 --no-python "$T/w.sh"
	expect_eq "$RC" 3 "the job's exit status (rank 1's exit 3)"
}

note "the journal's socket listens: entries with fields"
listener
job "$T/j.err"
# Every entry crun sent is in $T/entries before crun exits (datagrams on one host are queued
# in order); the listener may still be writing the last ones out: wait for the final error.
wait_for 20 grep -q '"PRIORITY": "3"' "$T/entries"
python3 - "$T/entries" <<'EOF2' || { cat "$T/entries" >&2; fail "journal fields"; }
import json, sys
es = [json.loads(l) for l in open(sys.argv[1])]
bad = [e for e in es if "_BAD" in e]
assert not bad, "entries that do not parse: %r" % bad
for e in es:
    for k in ("MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "RUN_ID"):
        assert k in e, "no %s in %r" % (k, e)
    assert e["SYSLOG_IDENTIFIER"] == "crun", e
    assert e["RUN_ID"] == "jfields", e
    assert e["PRIORITY"] in ("3", "4", "6", "7"), e
    assert not e["MESSAGE"].endswith("\n") and not e["MESSAGE"].startswith("<"), e
def one(prio, text):
    m = [e for e in es if e["PRIORITY"] == prio and text in e["MESSAGE"]]
    assert m, "no priority %s entry with %r" % (prio, text)
    return m[0]
w = one("4", "restarting in")
assert (w.get("NODE_RANK"), w.get("ROUND")) == ("0", "0"), "the warning's fields: %r" % w
e = one("3", "restart budget (1) spent")
assert (e.get("NODE_RANK"), e.get("ROUND")) == ("0", "1"), "the error's fields: %r" % e
i = one("6", "round 1: complete")
first = es.index(i)
assert all(x.get("ROUND") != "0" for x in es[first + 1:]), "ROUND 0 after round 1 began"
assert not any("NODE_RANK" in x for x in es if "hosting the rendezvous store" in x["MESSAGE"]), \
    "a node rank before the first round"
# A worker's stderr line the agent forwards: an entry with its rank, round and the prefix.
ws = [x for x in es if x["MESSAGE"] == "[rank1]:rank 1 gives up"]
assert [(x.get("RANK"), x.get("ROUND"), x.get("NODE_RANK"), x["PRIORITY"]) for x in ws] == \
    [("1", "0", "0", "6"), ("1", "1", "0", "6")], "rank 1's forwarded lines: %r" % ws
assert not any("RANK" in x for x in es if x not in ws), "RANK on the agent's own lines"
print("ok: %d entries" % len(es))
EOF2
bad=$(grep -E '^(<[0-7]>|\[rank)' "$T/j.err" || true)
[ -z "$bad" ] || fail "lines on stderr although the journal took entries: $bad"
# stdout is not the journal's stream here ($JOURNAL_STREAM names stderr): it keeps its lines.
expect_grep '^\[rank1\]:rank 1 attempt 1$' "$T/out" "the workers' stdout on the console"

note "nothing listens behind the socket: every line on stderr with its priority"
kill $LPID
wait $LPID 2>/dev/null
n=$(wc -l <"$T/entries")
job "$T/f.err"
expect_eq "$(wc -l <"$T/entries")" "$n" "entries after the listener stopped"
expect_grep '^<4>restarting in' "$T/f.err" "the warning on stderr"
expect_grep '^<3>job failed, restart budget (1) spent' "$T/f.err" "the error on stderr"
expect_grep '^\[rank1\]:rank 1 gives up' "$T/f.err" "the workers' lines on stderr"

note "no socket at all"
rm -f "$JDIR/socket"
job "$T/g.err"
expect_grep '^<3>job failed, restart budget (1) spent' "$T/g.err" "the error on stderr"
echo "ok"
