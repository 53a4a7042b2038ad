#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/manflags.sh: every option that crun, crun status, crun-rdzvd and crun-store print in
# --help has an entry in its man page (a line "*--flag* ..." or "*-f, --flag* ..." in man/*.scd).
# (crun.yaml(5) and the job-file keys: tests/unit/test_jobfile.c.)
. "$(dirname "$0")/lib.sh"

missing=0
check() { # EXE PAGE
	local exe=$1 page=$SRC/man/$2 flag n=0
	[ -f "$page" ] || fail "$page: no such man page"
	# The option column of --help: "  -x, --flag ARG" or "      --flag ARG".
	for flag in $("$exe" --help | sed -n 's/^ \{1,8\}\(-[A-Za-z0-9], \)\{0,1\}\(--[a-z0-9][a-z0-9-]*\).*/\2/p' | sort -u); do
		n=$((n + 1))
		if ! grep -Eq -- "^\*(.*[ ,*])?$flag(\*|[ =]|$)" "$page"; then
			echo "FAIL: $(basename "$exe") --help lists $flag, man/$2 has no entry for it" >&2
			missing=$((missing + 1))
		fi
	done
	[ "$n" -ge 3 ] || fail "$(basename "$exe") --help: only $n options found (format changed?)"
	note "$(basename "$exe"): $n options checked against man/$2"
}

crun_status() { "$CRUN" status "$@"; }

check "$CRUN" crun.1.scd
check crun_status crun.1.scd
check "$RDZVD" crun-rdzvd.8.scd
check "$BUILD/src/crun-store" crun-store.1.scd
[ "$missing" -eq 0 ] || fail "$missing options missing from their man pages"
echo "manflags: ok"
