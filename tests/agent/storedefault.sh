#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/storedefault.sh: whether workers meet through the agent store, by the rule
# (docs/agent.md, "The agent store"; issue 19): static mode yes; c10d (here --standalone) only
# with --agent-store (flag, PET_AGENT_STORE, job file key) or when the program is Python and
# its interpreter's torch is 2.4 or later, asked once without importing torch (a fake torch
# package on PYTHONPATH stands for each version; a python that never answers is given up on
# after 5 s; torch 2.4+'s TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 honoured); --agent-store with
# --no-agent-store or TLS is refused, naming both.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
unset TORCHELASTIC_USE_AGENT_STORE PYTHON_EXEC PYTHONPATH

# value FILE KEY: what rank 0 printed for KEY.
value() {
	grep -a "^\[rank0\]:$2=" "$1" | head -n1 | sed "s/^\[rank0\]:$2=//"
}

cat >"$T/env.py" <<'PY'
import os
for k in ("TORCHELASTIC_USE_AGENT_STORE", "MASTER_PORT"):
    print("%s=%s" % (k, os.environ.get(k, "<unset>")))
PY

# fake_torch DIR VERSION: a package "torch" whose version.py says VERSION (never imported).
fake_torch() {
	mkdir -p "$1/torch"
	printf '__version__ = "%s"\n' "$2" >"$1/torch/version.py"
	echo 'raise ImportError("the probe must not import torch")' >"$1/torch/__init__.py"
}

# check NAME WANT ARGS...: run crun ARGS; its rank 0 must print TORCHELASTIC_USE_AGENT_STORE
# WANT (True: MASTER_PORT is the store crun hosts; False: another port).
check() {
	local name=$1 want=$2 store
	shift 2
	run_crun 60 "$T/$name.out" "$T/$name.err" "$@"
	[ $RC -eq 0 ] || { cat "$T/$name.err" >&2; fail "$name: exit $RC"; }
	expect_eq "$(value "$T/$name.out" TORCHELASTIC_USE_AGENT_STORE)" "$want" "$name"
	store=$(sed -n 's/.*hosting the rendezvous store at 127.0.0.1:\([0-9]*\).*/\1/p' \
		"$T/$name.err" | head -n1)
	if [ "$want" = True ]; then
		expect_eq "$(value "$T/$name.out" MASTER_PORT)" "$store" "$name: MASTER_PORT"
	else
		[ "$(value "$T/$name.out" MASTER_PORT)" != "$store" ] ||
			fail "$name: MASTER_PORT is the store's port"
	fi
}

note "c10d, a program that is not Python: rank 0's TCPStore unless --agent-store"
check exec False --standalone "$W" env
expect_grep "workers' rank 0 hosts their TCPStore" "$T/exec.err" "the log says so"
check exec-on True --standalone --agent-store "$W" env
PET_AGENT_STORE=1 check exec-pet True --standalone "$W" env
printf 'standalone: true\nagent_store: true\n' >"$T/job.yaml"
check exec-file True --config "$T/job.yaml" "$W" env

note "static mode keeps the agent store, whatever the workers' torch"
mkdir -p "$T/t13" "$T/t24" "$T/t3" "$T/t23"
fake_torch "$T/t13" 1.13.1
PYTHONPATH=$T/t13 check static True --nproc-per-node 1 --python "$PY" "$T/env.py"

note "c10d, Python: the workers' torch decides (2.4 and later: the agent store)"
PYTHONPATH=$T/t13 check t13 False --standalone --python "$PY" "$T/env.py"
expect_grep "info: the workers' python $PY has torch 1.13.1, whose torchrun gives c10d workers rank 0's own TCPStore" \
	"$T/t13.err" "the version seen, logged"
fake_torch "$T/t23" 2.3.1+cu121
PYTHONPATH=$T/t23 check t23 False --standalone --python "$PY" "$T/env.py"
fake_torch "$T/t24" 2.4.0a0+git1234
PYTHONPATH=$T/t24 check t24 True --standalone --python "$PY" "$T/env.py"
expect_grep "info: the workers' python $PY has torch 2.4.0a0+git1234, whose torchrun shares its c10d store" \
	"$T/t24.err" "2.4 logged"
fake_torch "$T/t3" 10.0
cp "$T/env.py" "$T/t3/envmod.py"
PYTHONPATH=$T/t3 check module True --standalone --python "$PY" -m envmod
PYTHONPATH=$T/t24 check t24-off False --standalone --no-agent-store --python "$PY" \
	"$T/env.py"
PYTHONPATH=$T/t24 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 check t24-dis False --standalone \
	--python "$PY" "$T/env.py"
expect_grep "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 keeps" "$T/t24-dis.err" "torch's opt-out, said"
PYTHONPATH=$T/t13 check t13-on True --standalone --agent-store --python "$PY" "$T/env.py"
expect_eq "$(grep -ac "the workers' python" "$T/t13-on.err")" 0 "no probe with --agent-store"

note "c10d, Python without torch, or a python that never answers: rank 0's TCPStore"
mkdir -p "$T/bin"
printf '#!/bin/sh\nexec %s -S "$@"\n' "$PY" >"$T/bin/nosite"
chmod +x "$T/bin/nosite"
check none False --standalone --python "$T/bin/nosite" "$T/env.py"
expect_grep "has no torch" "$T/none.err" "no torch, logged"
# Answers -c (the probe) only after 30 s; runs programs at once.
printf '#!/bin/sh\n[ "$1" = -c ] && exec sleep 30\nexec %s "$@"\n' "$PY" >"$T/bin/slow"
chmod +x "$T/bin/slow"
start=$(now_ms)
check slow False --standalone --python "$T/bin/slow" "$T/env.py"
took=$(($(now_ms) - start))
expect_grep "warning: could not tell which torch the workers' python $T/bin/slow has (no answer in 5 s)" \
	"$T/slow.err" "the timeout, logged"
[ $took -lt 25000 ] || fail "the probe was not cut short: the job took ${took} ms"

note "--agent-store with --no-agent-store or TLS: refused, naming both"
run_crun 30 "$T/out" "$T/err" --standalone --agent-store --no-agent-store "$W" env
expect_eq "$RC" 2 "both flags"
expect_grep "^crun: --agent-store: cannot be combined with --no-agent-store: choose one$" \
	"$T/err" "both flags named"
PET_NO_AGENT_STORE=1 run_crun 30 "$T/out" "$T/err" --standalone --agent-store "$W" env
expect_eq "$RC" 2 "flag and PET_NO_AGENT_STORE"
expect_grep "cannot be combined with PET_NO_AGENT_STORE" "$T/err" "the variable named"
touch "$T/ca.pem"
run_crun 30 "$T/out" "$T/err" --standalone --agent-store --tls-ca "$T/ca.pem" "$W" env
expect_eq "$RC" 2 "--agent-store with TLS"
expect_grep "^crun: --agent-store: PyTorch's TCPStore clients cannot speak TLS" "$T/err" \
	"TLS named"
echo "ok"
