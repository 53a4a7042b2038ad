#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/env.sh: single node, 1..16 workers, every variable checked exactly.
. "$(dirname "$0")/lib.sh"

# value FILE RANK KEY: the value rank RANK printed for KEY.
value() {
	grep -a "^\[rank$2\]:$3=" "$1" | head -n1 | sed "s/^\[rank$2\]:$3=//"
}

# c10d (--standalone) and a program that is not Python: rank 0's TCPStore by default, the agent
# store with --agent-store (docs/agent.md, "The agent store").
for n in 1 4 16; do
	as=False flag=()
	[ $n -eq 4 ] && as=True flag=(--agent-store)
	note "standalone, $n workers ${flag[*]}"
	run_crun 60 "$T/out" "$T/err" --standalone "${flag[@]}" --nproc-per-node $n \
		--max-restarts 3 "$W" env
	[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC with $n workers"; }
	runid=$(value "$T/out" 0 TORCHELASTIC_RUN_ID)
	port=$(value "$T/out" 0 MASTER_PORT)
	[ -n "$runid" ] && [ "$runid" != none ] || fail "run id: '$runid'"
	[ "$port" -gt 0 ] 2>/dev/null || fail "MASTER_PORT: '$port'"
	for ((r = 0; r < n; r++)); do
		expect_eq "$(value "$T/out" $r RANK)" $r "rank $r RANK"
		expect_eq "$(value "$T/out" $r LOCAL_RANK)" $r "rank $r LOCAL_RANK"
		expect_eq "$(value "$T/out" $r WORLD_SIZE)" $n "rank $r WORLD_SIZE"
		expect_eq "$(value "$T/out" $r LOCAL_WORLD_SIZE)" $n "rank $r LOCAL_WORLD_SIZE"
		expect_eq "$(value "$T/out" $r GROUP_RANK)" 0 "rank $r GROUP_RANK"
		expect_eq "$(value "$T/out" $r GROUP_WORLD_SIZE)" 1 "rank $r GROUP_WORLD_SIZE"
		expect_eq "$(value "$T/out" $r ROLE_RANK)" $r "rank $r ROLE_RANK"
		expect_eq "$(value "$T/out" $r ROLE_WORLD_SIZE)" $n "rank $r ROLE_WORLD_SIZE"
		expect_eq "$(value "$T/out" $r ROLE_NAME)" default "rank $r ROLE_NAME"
		expect_eq "$(value "$T/out" $r MASTER_ADDR)" 127.0.0.1 "rank $r MASTER_ADDR"
		expect_eq "$(value "$T/out" $r MASTER_PORT)" "$port" "rank $r MASTER_PORT"
		expect_eq "$(value "$T/out" $r TORCHELASTIC_RESTART_COUNT)" 0 "rank $r restart count"
		expect_eq "$(value "$T/out" $r TORCHELASTIC_MAX_RESTARTS)" 3 "rank $r max restarts"
		expect_eq "$(value "$T/out" $r TORCHELASTIC_RUN_ID)" "$runid" "rank $r run id"
		expect_eq "$(value "$T/out" $r TORCHELASTIC_USE_AGENT_STORE)" $as "rank $r agent store"
		expect_eq "$(value "$T/out" $r TORCH_NCCL_ASYNC_ERROR_HANDLING)" 1 "rank $r NCCL async"
		if [ $n -gt 1 ]; then
			expect_eq "$(value "$T/out" $r OMP_NUM_THREADS)" 1 "rank $r OMP_NUM_THREADS"
		else
			expect_eq "$(value "$T/out" $r OMP_NUM_THREADS)" "<unset>" "OMP_NUM_THREADS, nproc 1"
		fi
		ef=$(value "$T/out" $r TORCHELASTIC_ERROR_FILE)
		case "$ef" in
		"$T"/crun-*/attempt_0/error_$r.json) ;;
		*) fail "rank $r TORCHELASTIC_ERROR_FILE: '$ef'" ;;
		esac
		ep=$(value "$T/out" $r CRUN_STORE_ENDPOINT)
		case "$ep" in
		127.0.0.1:[1-9]*) ;;
		*) fail "rank $r CRUN_STORE_ENDPOINT: '$ep'" ;;
		esac
		pf=$(value "$T/out" $r CRUN_STORE_PREFIX)
		case "$pf" in
		*/) ;;
		*) fail "rank $r CRUN_STORE_PREFIX must end with '/': '$pf'" ;;
		esac
		expect_eq "$(value "$T/out" $r NCCL_SOCKET_IFNAME)" "<unset>" "NCCL_SOCKET_IFNAME"
		expect_eq "$(value "$T/out" $r CUDA_VISIBLE_DEVICES)" "<unset>" "CUDA_VISIBLE_DEVICES"
	done
	expect_eq "$(grep -ac '^\[rank[0-9]*\]:RANK=' "$T/out")" $n "RANK lines"
	# The per-attempt temp dir (error files) is gone after a success.
	[ -z "$(ls "$T" | grep '^crun-' || true)" ] || fail "temp dir left behind: $(ls "$T")"
done

note "user settings win: OMP_NUM_THREADS, TORCH_NCCL_ASYNC_ERROR_HANDLING, GLOO_SOCKET_IFNAME"
OMP_NUM_THREADS=7 TORCH_NCCL_ASYNC_ERROR_HANDLING=0 GLOO_SOCKET_IFNAME=mine \
	run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --local-addr lo "$W" env
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
expect_eq "$(value "$T/out" 1 OMP_NUM_THREADS)" 7 "OMP_NUM_THREADS kept"
expect_eq "$(value "$T/out" 1 TORCH_NCCL_ASYNC_ERROR_HANDLING)" 0 "NCCL async kept"
expect_eq "$(value "$T/out" 1 NCCL_SOCKET_IFNAME)" lo "NCCL_SOCKET_IFNAME from --local-addr lo"
expect_eq "$(value "$T/out" 1 GLOO_SOCKET_IFNAME)" mine "GLOO_SOCKET_IFNAME kept"

note "--virtual-local-rank narrows CUDA_VISIBLE_DEVICES; --role"
CUDA_VISIBLE_DEVICES=3,5,7 run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 3 \
	--virtual-local-rank --role trainer "$W" env
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
for r in 0 1 2; do
	expect_eq "$(value "$T/out" $r LOCAL_RANK)" 0 "virtual LOCAL_RANK of $r"
	expect_eq "$(value "$T/out" $r ROLE_NAME)" trainer "ROLE_NAME"
done
expect_eq "$(value "$T/out" 0 CUDA_VISIBLE_DEVICES)" 3 "CUDA_VISIBLE_DEVICES of rank 0"
expect_eq "$(value "$T/out" 1 CUDA_VISIBLE_DEVICES)" 5 "CUDA_VISIBLE_DEVICES of rank 1"
expect_eq "$(value "$T/out" 2 CUDA_VISIBLE_DEVICES)" 7 "CUDA_VISIBLE_DEVICES of rank 2"

note '${local_rank} macro and --local-rank-arg; $$ passes through untouched'
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 --local-rank-arg \
	--no-python /bin/echo 'lr=${local_rank}' '$$' '${other}'
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
# The argument goes where torch.distributed.launch puts it: after the program, before its args.
expect_grep '^\[rank0\]:--local_rank=0 lr=0 \$\$ \${other}$' "$T/out" "macro rank 0"
expect_grep '^\[rank1\]:--local_rank=1 lr=1 \$\$ \${other}$' "$T/out" "macro rank 1"

note "a python program runs under \$PYTHON_EXEC -u"
cat >"$T/p.py" <<'PY'
import os, sys
print("py", os.environ["RANK"], int("-u" in sys.orig_argv), sys.argv[1:])
PY
if command -v python3 >/dev/null; then
	run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 "$T/p.py" a 'b c'
	[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC"; }
	expect_grep "^\[rank1\]:py 1 1 \['a', 'b c'\]$" "$T/out" "python worker"
fi
note "two --standalone jobs at once: separate stores, run ids and master ports"
# Each rank waits for the same rank of the other job, so both jobs are surely up at once.
"$CRUN" --standalone --nproc-per-node 2 "$W" env touch:"$T/a-up.%r" wait-file:"$T/b-up.%r" \
	>"$T/a.out" 2>"$T/a.err" &
pa=$!
track $pa
"$CRUN" --standalone --nproc-per-node 2 "$W" env touch:"$T/b-up.%r" wait-file:"$T/a-up.%r" \
	>"$T/b.out" 2>"$T/b.err" &
pb=$!
track $pb
wait_pid 60 $pa
ra=$RC
wait_pid 60 $pb
expect_eq "$ra $RC" "0 0" "exit codes of two concurrent standalone jobs"
for k in TORCHELASTIC_RUN_ID CRUN_STORE_ENDPOINT; do
	[ "$(value "$T/a.out" 0 $k)" != "$(value "$T/b.out" 0 $k)" ] || fail "both jobs share $k"
done

note "bad command lines: exit 2 with one line naming the flag, nothing started"
for bad in "--nnodes 3:2" "--nproc-per-node 0" "--rdzv-endpoint :x --rdzv-backend c10d --nnodes 2"; do
	run_crun 30 "$T/out" "$T/err" $bad "$W" env
	expect_eq $RC 2 "exit status for '$bad'"
	expect_eq "$(wc -l <"$T/err")" 1 "error lines for '$bad'"
	expect_grep "^crun: --" "$T/err" "flag named for '$bad'"
	[ ! -s "$T/out" ] || fail "'$bad' started workers"
done
# --virtual-local-rank with fewer visible devices than workers would hand some worker a device
# the user hid: refused before anything starts.
CUDA_VISIBLE_DEVICES=3,5 run_crun 30 "$T/out" "$T/err" --standalone --nproc-per-node 3 \
	--virtual-local-rank "$W" env
expect_eq $RC 2 "exit status for too few CUDA_VISIBLE_DEVICES"
expect_grep '^crun: --virtual-local-rank: 3 workers per node, but CUDA_VISIBLE_DEVICES="3,5" lists 2 devices$' \
	"$T/err" "the shortage is named"
[ ! -s "$T/out" ] || fail "workers started with too few devices"
run_crun 30 "$T/out" "$T/err" --standalone --no-python "$T/does-not-exist"
expect_eq $RC 2 "exit status for a missing program"

note "etcd credentials: the user's password file stays out of workers; a password over http is named"
printf 'secret\n' >"$T/etcd-pw"
chmod 600 "$T/etcd-pw"
CRUN_ETCD_USER=alice CRUN_ETCD_PASSWORD_FILE=$T/etcd-pw run_crun 60 "$T/out" "$T/err" \
	--standalone --nproc-per-node 2 --no-python /bin/sh -c \
	'echo "pw=${CRUN_ETCD_PASSWORD_FILE-unset} user=${CRUN_ETCD_USER-unset}"'
expect_eq $RC 0 "exit status"
expect_eq "$(grep -ac 'pw=unset user=alice' "$T/out")" 2 \
	"the password file is not inherited (the user name, no secret, is)"
# The warning comes while the store is resolved, before the first connection: no etcd is
# needed (port 1 on loopback: nothing listens), and the agent is stopped once its line about
# the store is seen. Over https (crun takes one protocol for the whole list) there is none.
for scheme in etcd etcd+https; do
	"$CRUN" --rdzv-backend etcd --rdzv-endpoint "$scheme://127.0.0.1:1" --rdzv-id pw \
		--nnodes 1 --rdzv-conf "user=alice,password_file=$T/etcd-pw" "$W" env \
		>"$T/out" 2>"$T/err" &
	pw_agent=$!
	track $pw_agent
	wait_for 30 grep -aq "rendezvous through etcd at $scheme://127.0.0.1:1" "$T/err"
	kill -TERM $pw_agent
	wait $pw_agent 2>/dev/null
	if [ $scheme = etcd ]; then
		expect_grep "etcd: the password of user alice ($T/etcd-pw) goes to http://127.0.0.1:1 over plain http" \
			"$T/err" "the password over http is named"
	elif grep -aq "over plain http" "$T/err"; then
		fail "a password over https was called plain"
	fi
done
echo "env: ok"
