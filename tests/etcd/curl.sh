#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/etcd/curl.sh: libcurl is loaded only for the etcd backend (issue 23): crun does not
# link it, and where libcurl.so.4 cannot be loaded (hidden in a private mount namespace of
# this test) a job through etcd fails at once naming the library, while a job through crun's
# own store runs. The loaded case is every other etcd test. Needs root (unshare -m) for the
# second part; skips (77) without it.
. "$(dirname "$0")/lib.sh"

note "crun does not link libcurl"
ldd "$CRUN" >"$T/ldd" 2>&1 || { cat "$T/ldd" >&2; fail "ldd $CRUN"; }
if grep -a "libcurl" "$T/ldd" >&2; then
	fail "crun links libcurl: every start of crun loads it and its dependencies"
fi

. "$SRC/tests/lib/hide_libs.sh" # hide_libs, hidden, fails_at_once
hide_libs libcurl.so.4

note "libcurl.so.4 hidden: an etcd job fails at once, naming it"
hold_port port
fails_at_once "an etcd job" "the etcd backend needs libcurl: cannot load libcurl.so.4" \
	"$CRUN" --nnodes 1 --nproc-per-node 1 --rdzv-backend etcd \
	--rdzv-endpoint "127.0.0.1:$port" --rdzv-id nocurl /bin/true

note "libcurl.so.4 hidden: a job through crun's own store runs"
hidden 120 "$CRUN" --standalone --nproc-per-node 1 /bin/echo crun-without-curl \
	>"$T/c10d.out" 2>"$T/c10d.err"
rc=$?
[ $rc -eq 0 ] || { cat "$T/c10d.err" >&2; fail "a standalone job without libcurl: exit $rc"; }
expect_grep "crun-without-curl" "$T/c10d.out" "the worker's output"
exit 0
