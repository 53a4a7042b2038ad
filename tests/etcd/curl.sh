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

LIB=$(ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*libcurl\.so\.4 (.*) => //p' | head -n1)
[ -n "$LIB" ] || { echo "SKIP: no libcurl.so.4 in the loader's cache to hide"; exit 77; }
unshare -m true 2>/dev/null || { echo "SKIP: unshare -m refused (needs root)"; exit 77; }

# hidden CMD...: CMD in a private mount namespace where libcurl.so.4 is an empty file (the
# loader refuses it), bounded by 120 s.
hidden() {
	timeout -s KILL 120 unshare -m --propagation private sh -c \
		'mount --bind /dev/null "$0" && exec "$@"' "$LIB" "$@"
}

note "libcurl.so.4 hidden: an etcd job fails at once, naming it"
hold_port port
t0=$(now_ms)
hidden "$CRUN" --nnodes 1 --nproc-per-node 1 --rdzv-backend etcd \
	--rdzv-endpoint "127.0.0.1:$port" --rdzv-id nocurl /bin/true >"$T/etcd.out" 2>"$T/etcd.err"
rc=$?
dt=$(($(now_ms) - t0))
cat "$T/etcd.err" >&2
[ $rc -ne 0 ] || fail "an etcd job without libcurl exited 0"
[ $rc -ne 137 ] || fail "an etcd job without libcurl ran past 120 s"
expect_grep "the etcd backend needs libcurl: cannot load libcurl.so.4" "$T/etcd.err" \
	"the missing library named"
[ $dt -lt 20000 ] || fail "an etcd job without libcurl took $dt ms to fail (not at once)"

note "libcurl.so.4 hidden: a job through crun's own store runs"
hidden "$CRUN" --standalone --nproc-per-node 1 /bin/echo crun-without-curl \
	>"$T/c10d.out" 2>"$T/c10d.err"
rc=$?
[ $rc -eq 0 ] || { cat "$T/c10d.err" >&2; fail "a standalone job without libcurl: exit $rc"; }
expect_grep "crun-without-curl" "$T/c10d.out" "the worker's output"
exit 0
