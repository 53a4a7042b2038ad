#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/parity.sh: the torchrun habits issue 11 names, against Debian's python3-torch as
# the real client: NCCL_ASYNC_ERROR_HANDLING, --local-rank-arg against torch's own launch, the
# interpreter (PYTHON_EXEC, --python, PATH's python3) named in a failure, --exit-code against
# torchrun's own exit, and torchrun's --rdzv-conf keys. Skipped (77) without torch.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
if ! "$PY" -c 'import torch' 2>/dev/null; then
	echo "torch is not importable by $PY: skipping"
	exit 77
fi
unset PYTHON_EXEC NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_ASYNC_ERROR_HANDLING
export GLOO_SOCKET_IFNAME=lo

# torch 1.13's Std.from_str() turns the default "0" into None on Python 3.11 (an enum change)
# and its launchers then fail; a map naming an absent local rank means the same: no files.
TORCH_STD="--redirects 7:1 --tee 7:1"

note "NCCL_ASYNC_ERROR_HANDLING is set beside TORCH_NCCL_ASYNC_ERROR_HANDLING; user values win"
cat >"$T/env.py" <<'PY'
import os
print("env", os.environ.get("NCCL_ASYNC_ERROR_HANDLING"),
      os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"))
PY
run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" "$T/env.py"
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "env: exit $RC"; }
expect_grep '^\[rank0\]:env 1 1$' "$T/out" "both names set"
NCCL_ASYNC_ERROR_HANDLING=0 TORCH_NCCL_ASYNC_ERROR_HANDLING=3 \
	run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" "$T/env.py"
expect_grep '^\[rank0\]:env 0 3$' "$T/out" "user values kept"

note "--local-rank-arg: the argv torch 1.13's own torch.distributed.launch gives, byte for byte"
cat >"$T/argv.py" <<'PY'
import os, sys
line = "argv %s %s" % (os.environ["LOCAL_RANK"], sys.argv[1:])
print(line, flush=True)
# torch's launcher does not always pass its workers' output on before it exits: a file does.
if os.environ.get("ARGV_OUT"):
    with open(os.path.join(os.environ["ARGV_OUT"], os.environ["LOCAL_RANK"]), "w") as f:
        f.write(line + "\n")
PY
# torch's launch (1.13: --local_rank) as the reference, on a port held for it.
mkdir "$T/launch.ref"
hold_port launch_port
ARGV_OUT=$T/launch.ref timeout -s KILL 120 "$PY" -m torch.distributed.launch --nproc_per_node 2 \
	$TORCH_STD --master_port "$launch_port" "$T/argv.py" a --flag 'b c' >"$T/launch.out" \
	2>"$T/launch.err"
[ $? -eq 0 ] || { cat "$T/launch.err" >&2; fail "torch.distributed.launch failed"; }
cat "$T/launch.ref"/* | sort >"$T/launch.argv"
expect_eq "$(wc -l <"$T/launch.argv")" 2 "torch's launch ran two workers"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --local-rank-arg \
	--python "$PY" "$T/argv.py" a --flag 'b c'
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "--local-rank-arg: exit $RC"; }
sed -n 's/^\[rank[0-9]*\]://p' "$T/out" | grep -a '^argv ' | sort >"$T/crun.argv"
diff "$T/launch.argv" "$T/crun.argv" >&2 || fail "crun's --local-rank-arg differs from launch"
expect_grep "^argv 1 \['--local_rank=1', 'a', '--flag', 'b c'\]$" "$T/crun.argv" "1.x order"

note "--local-rank-arg=dash: torch 2.x's --local-rank=N, which argparse reads as local_rank"
cat >"$T/launch2.py" <<'PY'
import argparse
p = argparse.ArgumentParser()
p.add_argument("--local-rank", type=int, required=True)
p.add_argument("rest", nargs="*")
a = p.parse_args()
print("lr", a.local_rank, a.rest)
PY
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --local-rank-arg=dash \
	--python "$PY" "$T/launch2.py" x y
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "--local-rank-arg=dash: exit $RC"; }
expect_grep "^\[rank1\]:lr 1 \['x', 'y'\]$" "$T/out" "dash style"
PET_LOCAL_RANK_ARG=none run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" \
	"$T/argv.py" z
expect_grep "^\[rank0\]:argv 0 \['z'\]$" "$T/out" "PET_LOCAL_RANK_ARG=none"
run_crun 60 "$T/out" "$T/err" --standalone --use-env --local-rank-arg=dash "$T/argv.py"
expect_eq "$RC" 2 "--use-env with --local-rank-arg=dash"
expect_grep "cannot be combined with --use-env" "$T/err" "--use-env clash message"

note "the interpreter: PATH's python3 (without torch) fails naming itself; --python works"
mkdir -p "$T/bin"
# A python3 first on PATH that cannot see Debian's dist-packages (no site: no torch).
printf '#!/bin/sh\nexec %s -S "$@"\n' "$PY" >"$T/bin/python3"
chmod +x "$T/bin/python3"
cat >"$T/usetorch.py" <<'PY'
import torch
print("torch", torch.__version__.split("+")[0])
PY
PATH="$T/bin:$PATH" run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 \
	"$T/usetorch.py"
expect_eq "$RC" 1 "a python without torch"
head -n 40 "$T/err" | grep -a "worker failure on" | head -n1 >"$T/first"
expect_grep "python $T/bin/python3):$" "$T/first" "the failure's first line names the interpreter"
expect_grep "ModuleNotFoundError: No module named 'torch'" "$T/err" "the module error"
PATH="$T/bin:$PATH" run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" "$T/usetorch.py"
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "--python $PY: exit $RC"; }
expect_grep '^\[rank0\]:torch [0-9]' "$T/out" "--python runs the one with torch"
PATH="$T/bin:$PATH" PYTHON_EXEC="$PY" run_crun 60 "$T/out" "$T/err" --standalone \
	--python "$T/bin/python3" "$T/usetorch.py"
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "PYTHON_EXEC over --python: exit $RC"; }
expect_grep 'PYTHON_EXEC .* overrides --python' "$T/err" "the override is said"

note "failure report: every failed rank, grouped, each once, with the traceback's last lines"
cat >"$T/fail.py" <<'PY'
import os, signal, sys, time
# Every rank fails on its own: the stop's SIGTERM must not cut one short.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
open(os.path.join(sys.argv[1], "up.%d" % r), "w").close()
while len([f for f in os.listdir(sys.argv[1]) if f.startswith("up.")]) < n:
    time.sleep(0.01)
def check(x):
    raise ValueError("bad input %d" % x)
if r == 4:
    raise KeyError("other")
check(7)
PY
mkdir -p "$T/sync"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 6 --python "$PY" "$T/fail.py" \
	"$T/sync"
expect_eq "$RC" 1 "the first failure's exit code"
group='^  ranks 0-3, 5: exit 1: ValueError: bad input 7 (last lines of rank [0-35].s stderr)$'
expect_eq "$(grep -ac "$group" "$T/err")" 1 "one group line for ranks 0-3, 5"
group="^  rank 4: exit 1: KeyError: 'other' (last lines of its stderr)$"
expect_eq "$(grep -ac "$group" "$T/err")" 1 "one line for rank 4"
expect_grep "^    ValueError: bad input 7$" "$T/err" "the traceback's last line"
expect_grep '^        raise ValueError("bad input %d" % x)$' "$T/err" "a traceback line"
expect_eq "$(grep -ac '^  first \|^        20' "$T/err")" 6 "one table row per failed rank"
grep -aq ' -$' "$T/err" && fail "a row without a message (-)"
grep -a "restart budget" "$T/err" | grep -aq "ValueError" && fail "the failure printed twice"

note "failure report from torch's @record error file: its message and traceback"
cat >"$T/rec.py" <<'PY'
import os
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    if os.environ["RANK"] == "1":
        raise RuntimeError("rank one broke")
main()
PY
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --python "$PY" "$T/rec.py"
expect_eq "$RC" 1 "@record failure"
expect_grep "^  rank 1: exit 1: RuntimeError: rank one broke (last lines of its traceback)$" \
	"$T/err" "the error file's traceback"
expect_grep '^        raise RuntimeError("rank one broke")$' "$T/err" "a traceback line"

note "exit codes: the worker's code and 128+signal; --exit-code torchrun gives 1, as torchrun"
cat >"$T/exit.py" <<'PY'
import os, signal, sys
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGABRT)
sys.exit(int(sys.argv[1]))
PY
hold_port run_port
timeout -s KILL 120 "$PY" -m torch.distributed.run --nnodes 1 --nproc_per_node 1 \
	$TORCH_STD --master_port "$run_port" "$T/exit.py" 7 >"$T/tr.out" 2>"$T/tr.err"
TRC=$?
run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" "$T/exit.py" 7
expect_eq "$RC" 7 "crun: the worker's code"
run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" --exit-code torchrun "$T/exit.py" 7
expect_eq "$RC" "$TRC" "--exit-code torchrun: what torchrun itself exited with"
expect_eq "$RC" 1 "--exit-code torchrun"
run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" "$T/exit.py" kill
expect_eq "$RC" 134 "crun: 128+SIGABRT"
PET_EXIT_CODE=torchrun run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" \
	"$T/exit.py" kill
expect_eq "$RC" 1 "PET_EXIT_CODE=torchrun with a signal"
run_crun 60 "$T/out" "$T/err" --exit-code torchrun --nproc-per-node 0 "$T/exit.py" 0
expect_eq "$RC" 2 "a bad command line stays 2"

note "--rdzv-conf: torchrun's keys run, unknown ones warn, typos of crun's keys fail"
run_crun 60 "$T/out" "$T/err" --standalone --python "$PY" \
	--rdzv-conf store_type=tcp,use_libuv=1,timeout=30,read_timeout=60,some_new_key=1 \
	"$T/exit.py" 0
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "torchrun's keys: exit $RC"; }
expect_grep 'warning: --rdzv-conf: key "some_new_key" is not used by crun (ignored)' "$T/err" \
	"the unknown key's warning"
run_crun 60 "$T/out" "$T/err" --standalone --rdzv-conf keep_alive_intervl=5 "$T/exit.py" 0
expect_eq "$RC" 2 "a typo of a crun key"
expect_grep 'did you mean keep_alive_interval?' "$T/err" "did you mean"
echo "parity: ok"
