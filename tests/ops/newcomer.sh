#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/ops/newcomer.sh: what a newcomer trips over (issue 21), checked on what is built and
# run: the man pages as man(1) renders them (an example's "\n", crun(1)'s "128+N", the library
# file and crun version libcrun-worker(3) names), what the docs point at (etcdctl installed by
# scripts/install-deps, the Slurm example), and messages that named a thing twice or did not
# say "tab".
. "$(dirname "$0")/../agent/lib.sh"

MAN=$BUILD/man
command -v man >/dev/null || skip_reason="no man(1)"
render() { MANWIDTH=200 man -l "$1" 2>/dev/null; }

if [ -z "${skip_reason-}" ]; then
	note "man pages as rendered"
	render "$MAN/libcrun-worker.3" >"$T/lw.txt"
	expect_grep 'fprintf(stderr, "%s\\n", err);' "$T/lw.txt" "libcrun-worker(3)'s example keeps \\n"
	! grep -aq '"%sn"' "$T/lw.txt" || fail "libcrun-worker(3) renders \"%sn\""
	render "$MAN/crun.1" >"$T/crun.txt"
	! grep -aq '_N_' "$T/crun.txt" || fail "crun(1) renders _N_: $(grep -a '_N_' "$T/crun.txt")"
	expect_grep '128+N' "$T/crun.txt" "crun(1)'s exit status 128+N"
	lib=$(cd "$BUILD/worker_api" && ls libcrun-worker.so.1.*.* | grep -v '\.p$' | head -n 1)
	ver=$("$CRUN" --version | awk '{ print $2 }')
	# One line, and a word broken after its own hyphen ("libcrun-" at a line end) joined again.
	tr -s ' \n' ' ' <"$T/lw.txt" | sed 's/- /-/g' >"$T/lw1.txt"
	expect_grep "$lib, the library of crun $ver" "$T/lw1.txt" \
		"libcrun-worker(3) names the built library ($lib) with crun $ver"
else
	note "man pages not checked: $skip_reason"
fi

note "what the docs point at"
grep -q 'etcdctl' "$SRC/docs/etcd.md" || fail "docs/etcd.md no longer mentions etcdctl"
grep -qw 'etcd-client' "$SRC/scripts/install-deps" || fail "install-deps does not install etcdctl"
expect_grep 'examples/slurm/slurm.conf' "$SRC/docs/slurm.md" "docs/slurm.md names the example"
[ -f "$SRC/examples/slurm/slurm.conf" ] || fail "examples/slurm/slurm.conf is missing"

note "messages name each thing once, and a tab as a tab"
hold_port port
timeout -s KILL 60 "$CRUN" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
	--rdzv-conf join_timeout=2 --no-python "$W" print:ok >/dev/null 2>"$T/jt.err"
expect_grep "error: rendezvous .* round 0: join timeout" "$T/jt.err" "the join timeout"
! grep -aq "rendezvous: rendezvous" "$T/jt.err" || fail "$(grep -a 'rendezvous: rendezvous' "$T/jt.err")"
printf 'program: %s/nonexistent\n' "$T" >"$T/prog.yaml"
"$CRUN" --config "$T/prog.yaml" >/dev/null 2>"$T/prog.err"
expect_eq $? 2 "exit code of a job file with a missing program"
expect_grep "prog.yaml:1:10: program $T/nonexistent: no such file" "$T/prog.err" "the program"
! grep -aq "program: program" "$T/prog.err" || fail "$(cat "$T/prog.err")"
printf 'nnodes: 1\nargs:\n\t- x\n' >"$T/tab.yaml"
"$CRUN" --config "$T/tab.yaml" /bin/true >/dev/null 2>"$T/tab.err"
expect_eq $? 2 "exit code of a job file indented with a tab"
expect_grep "tab.yaml:3:1: YAML syntax error: a tab character" "$T/tab.err" "the tab named"
echo PASS
