#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/cli/completion.sh: bash completion (tools/completion.bash, issue 21), run in bash
# against the real binaries: option names from each program's --help (its option table), values
# from the METAVAR (a|b words, files), crun status's own options, crun's program operand; and
# `meson install` puts it where bash-completion looks for each command.
. "$(dirname "$0")/../lib.sh"

export PATH=$BUILD/src:$BUILD/tools:$PATH
# shellcheck source=/dev/null
. "$SRC/tools/completion.bash"
# comp WORDS...: complete the last word; COMPREPLY as one sorted line in $GOT.
comp() {
	COMP_WORDS=("$@")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_crun_complete
	GOT=" $(printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ')"
}
has() {
	[[ $GOT == *" $1 "* ]] || fail "completing '${COMP_WORDS[*]}': no '$1' in:$GOT"
}
hasnt() {
	[[ $GOT != *" $1 "* ]] || fail "completing '${COMP_WORDS[*]}': '$1' should not be in:$GOT"
}

comp crun --nnod
has --nnodes
comp crun --rdzv
has --rdzv-backend
has --rdzv-endpoint
has --rdzv-id
has --rdzv-conf
comp crun --check
has --check
comp crun --exit-code ""
has crun
has torchrun
touch "$T/job.yaml"
comp crun --config "$T/jo"
has "$T/job.yaml"
comp crun sta
has status
comp crun status --js
has --json
hasnt --nnodes
comp crun status --wa
has --watch
comp crun-rdzvd --lis
has --listen
comp crun-store --ins
has --insecure
# After the program, its own arguments: crun's options are not offered.
comp crun --nnodes 2 /bin/true --nn
hasnt --nnodes

note "meson install puts the completion where bash-completion looks"
meson introspect "$BUILD" --installed >"$T/inst.json" || fail "meson introspect --installed"
python3 - "$T/inst.json" <<'PY' || fail "completion files in the install plan"
import json, sys
dests = set(json.load(open(sys.argv[1])).values())
for cmd in ("crun", "crun-rdzvd", "crun-store", "crun-pdsh", "crun-ssh"):
    assert any(d.endswith("/bash-completion/completions/" + cmd) for d in dests), cmd
PY
echo "completion: all checks passed"
