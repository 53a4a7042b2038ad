#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/pyselect.sh: which python runs a .py program (issue 19). The first python3 on PATH
# here is a fake that cannot import torch; with a torchrun on PATH, crun runs the program under
# torchrun's own python (read from its #! line, or pip's "'''exec'" form), says so, and
# --python / PYTHON_EXEC still choose; without a torchrun, the first python3 on PATH runs it.
. "$(dirname "$0")/lib.sh"

REAL=/usr/bin/python3
"$REAL" -c 'import torch.distributed.run' 2>/dev/null ||
	{ echo "$REAL cannot import torch.distributed.run: skipping"; exit 77; }
unset PYTHON_EXEC

mkdir -p "$T/fake" "$T/tr" "$T/trpip" "$T/trenv"
cat >"$T/fake/python3" <<'EOF'
#!/bin/sh
echo "fake python3: No module named 'torch'" >&2
exit 9
EOF
chmod +x "$T/fake/python3"
# A torchrun as setuptools writes it, and one as pip writes it for a long interpreter path.
printf '#!%s\nfrom torch.distributed.run import main\nmain()\n' "$REAL" >"$T/tr/torchrun"
printf "#!/bin/sh\n'''exec' %s \"\$0\" \"\$@\"\n' '''\nfrom torch.distributed.run import main\nmain()\n" \
	"$REAL" >"$T/trpip/torchrun"
# "#!/usr/bin/env python3" says nothing beyond the first python3 on PATH.
printf '#!/usr/bin/env python3\nfrom torch.distributed.run import main\nmain()\n' >"$T/trenv/torchrun"
chmod +x "$T"/tr*/torchrun
cat >"$T/prog.py" <<'EOF'
import sys
import torch.distributed.run  # what torchrun's workers can import
print("python", sys.executable)
EOF
WANT="python $(readlink -f "$REAL")"

# run_py NAME PATH ARGS...: crun --nproc-per-node 2 ARGS... prog.py with that PATH.
run_py() {
	local name=$1 path=$2
	shift 2
	local to
	to=$(command -v timeout)
	PATH=$path "$to" -s KILL 120 "$CRUN" --nproc-per-node 2 "$@" "$T/prog.py" \
		>"$T/out.$name" 2>"$T/err.$name"
	RC=$?
	[ "$RC" -ne 137 ] || { cat "$T/err.$name" >&2; fail "$name: crun did not finish in 120 s"; }
}
# real_of FILE: the interpreters the workers printed, resolved, once each.
real_of() {
	sed -n 's/^\[rank[0-9]*\]:python //p' "$1" | xargs -r -n1 readlink -f | sort -u
}

note "fake python3 first on PATH, torchrun's #! names the real one: the real one runs it"
run_py tr "$T/fake:$T/tr:$PATH"
expect_eq "$RC" 0 "exit status under torchrun's python"
expect_eq "python $(real_of "$T/out.tr")" "$WANT" "interpreter the workers ran under"
expect_grep "the python of torchrun on PATH, not under the first python3 on PATH ($T/fake/python3); choose with --python" \
	"$T/err.tr" "crun says which python and how to choose"

note "the same with pip's '''exec' torchrun"
run_py pip "$T/fake:$T/trpip:$PATH"
expect_eq "$RC" 0 "exit status under pip's torchrun's python"
expect_eq "python $(real_of "$T/out.pip")" "$WANT" "interpreter (pip's form)"

note "--python and PYTHON_EXEC still win"
run_py opt "$T/fake:$T/tr:$PATH" --python python3
expect_eq "$RC" 9 "--python python3 runs the fake"
expect_grep "No module named 'torch'" "$T/err.opt" "the fake's own error"
PYTHON_EXEC=python3 run_py env "$T/fake:$T/tr:$PATH"
expect_eq "$RC" 9 "PYTHON_EXEC=python3 runs the fake"

note "no torchrun with a python of its own on PATH: the first python3, as before"
run_py none "$T/fake:$T/trenv"
expect_eq "$RC" 9 "the first python3 runs it without a torchrun"
if grep -q "the python of torchrun" "$T/err.none"; then
	fail "a note about torchrun's python without one"
fi
echo "pyselect: ok"
