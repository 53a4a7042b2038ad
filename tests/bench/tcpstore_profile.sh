#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/bench/tcpstore_profile.sh: bench/tcpstore/profile for real, one 1-second run of
# PyTorch's client's get on each server: both rows are there with a positive rate, each get
# crosses 2 requests (WAIT, GET), so crun-rdzvd makes exactly 2 writes a get (one a reply)
# and at least 2 reads, and PyTorch's server 3 sendto a get (where perf counts them); bad
# arguments are refused by name. Skipped (77) without PyTorch under /usr/bin/python3.
set -u
BUILD=${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}
SRC=${CRUN_SOURCE_DIR:?}
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-tsprof-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null ||
	"$SRC/tests/lib/skip.sh" "PyTorch not importable by /usr/bin/python3"
P="$SRC/bench/tcpstore/profile"

# The outer limit only catches a hang: the tool bounds its own client.
timeout -s KILL 300 "$P" "$BUILD" --op get --seconds 1 --repeat 1 >"$T/out" 2>"$T/err" ||
	{ cat "$T/out" "$T/err" >&2; fail "bench/tcpstore/profile failed"; }
cat "$T/out"
python3 - "$T/out" <<'PY' || fail "the table is not what one get per client makes"
import sys
lines = open(sys.argv[1]).read().splitlines()
head = lines[1].split()
rows = {l.split()[0]: dict(zip(head[1:], l.split()[1:]))
        for l in lines[2:] if not l.startswith("#")}
assert set(rows) == {"crun", "TCPStore"}, rows
for name, r in rows.items():
    assert float(r["ops_s"].replace(",", "")) > 0, (name, r)
    assert float(r["srv_oncpu"]) > 0, (name, r)
c, t = rows["crun"], rows["TCPStore"]
if c["writes"] != "-":  # perf counted them
    assert float(c["writes"]) == 2.0, c  # one write a reply, two replies a get
    assert float(c["reads"]) >= 2.0, c
    assert float(t["writes"]) == 3.0, t  # PyTorch's server: 1 + (8 MSG_MORE, then 32)
PY
for bad in "--op del" "--seconds 0" "--repeat x" "--frob"; do
	# shellcheck disable=SC2086
	"$P" "$BUILD" $bad >"$T/b.out" 2>"$T/b.err" && fail "$bad was accepted"
	grep -q "bench/tcpstore/profile: ${bad%% *}" "$T/b.err" ||
		grep -q "unknown option $bad" "$T/b.err" ||
		{ cat "$T/b.err" >&2; fail "$bad: no error naming it"; }
done
echo "ok"
