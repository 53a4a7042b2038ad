# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/expect.sh: checks the script tests share (sourced by tests/agent/lib.sh,
# tests/faults/lib.sh, tests/fanout/lib.sh and tests/slurm/slurm.sh): a value, a line in a
# file, and the "params sha256" digests examples/train prints. A check that does not hold
# calls the sourcing script's fail() (how a failure is recorded differs).

# expect_eq GOT WANT WHAT: GOT is WANT.
expect_eq() {
	[ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
}

# expect_grep PATTERN FILE WHAT: a line of FILE matches PATTERN (grep's basic regex; FILE is
# read as text even if it holds binary bytes). Else the end of FILE goes to stderr.
expect_grep() {
	grep -aq -- "$1" "$2" || { tail -n 30 "$2" >&2; fail "$3: '$1' not in $2"; }
}

# digests FILE...: the distinct "params sha256" digests printed in FILEs, and how many ranks
# printed one: sets NDIG (lines) and DIG (the distinct digests, space separated).
digests() {
	DIG=$(cat "$@" | sed -n 's/.*rank [0-9]* params sha256 \([0-9a-f]*\).*/\1/p' | sort -u | tr '\n' ' ')
	DIG=${DIG% }
	NDIG=$(cat "$@" | grep -ac 'rank [0-9]* params sha256 ')
}

# expect_digests N FILE...: N ranks printed their digest and all agree (sets NDIG and DIG).
expect_digests() {
	local n=$1
	shift
	digests "$@"
	[ "$NDIG" -eq "$n" ] || { tail -n 20 "$@" >&2; fail "$NDIG of $n ranks printed a digest"; }
	[ "$(echo "$DIG" | wc -w)" -eq 1 ] || fail "the ranks' digests differ: $DIG"
}
