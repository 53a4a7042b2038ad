#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/fanout/pdsh.sh: crun-pdsh on a 3-"host" cluster of network namespaces made here (each
# its own address on a veth into a bridge), reached with pdsh -R exec through
# "ip netns exec HOST": examples/train to equal digests, the first failure's exit status and
# host (issue 21), an unreachable host (named; nothing started), one Ctrl-C stopping every
# agent and worker, and a PyTorch gloo DDP job whose hosts start in either order (issue 18).
# Root only (exit 77 otherwise).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v pdsh >/dev/null || skip "pdsh is not installed"
TAG=cf$$
netns_usable "$TAG" || skip "ip netns add refused (needs CAP_SYS_ADMIN)"

# The hosts are named by their addresses, so the endpoint (the first host) needs no resolver.
NET=$(netns_subnet)
HOSTS=("$NET.1" "$NET.2" "$NET.3")
netns_bridge "$TAG" "$NET" "" "${HOSTS[@]}" || skip "no bridge support (ip link add type bridge refused)"
LIST=$(IFS=,; echo "${HOSTS[*]}")
# Ranks on different "hosts" must talk over the bridge, not shared memory; CRUN_* is forwarded.
export CRUN_COMM_SHM=0

# fanout ID ARGS...: crun-pdsh into the namespaces, run id ID; output in $T/ID.{out,err}; RC.
fanout() {
	local id=$1
	shift
	timeout -s KILL 240 bash "$PDSH_TOOL" -R exec --exec-prefix 'ip netns exec %h' \
		--crun "$CRUN" --connect-timeout 5 --rdzv-id "$id-$R" "$@" >"$T/$id.out" 2>"$T/$id.err"
	RC=$?
	[ $RC -ne 137 ] || { tail -n 30 "$T/$id.err" >&2; fail "crun-pdsh $id did not finish in 240 s"; }
}

note "3 hosts x 2 workers: examples/train to equal digests"
fanout train -w "$LIST" -- --nproc-per-node 2 --no-python "$TRAIN" --epochs 20
[ $RC -eq 0 ] || { cat "$T/train.err" >&2; fail "crun-pdsh exited $RC"; }
expect_digests 6 "$T/train.out"
for h in "${HOSTS[@]}"; do
	expect_grep "^$h: \[rank[0-5]\]:rank [0-5] params sha256" "$T/train.out" "host $h's output"
done
expect_grep "hosting the rendezvous store at ${HOSTS[0]}:" "$T/train.err" "the first host hosts the store"
expect_grep "world size 6" "$T/train.err" "one job of 6 workers"
# Nothing is left behind: the node script's pid and token files are gone.
[ -z "$(ls -A "$XDG_RUNTIME_DIR/crun-fanout")" ] || fail "left in the runtime dir: $(ls "$XDG_RUNTIME_DIR/crun-fanout")"

note "a hostfile with slots and --exclude; a worker failure: the first failure's exit status"
printf '# the cluster\n%s slots=2\n\n%s slots=2  # second\n%s slots=2\n' "${HOSTS[@]}" >"$T/hostfile"
fanout fail --hostfile "$T/hostfile" --exclude "${HOSTS[2]}" -- "$W" exit-if-rank:3:7 print:ok
expect_eq "$RC" 7 "exit status of a job whose rank 3 exits 7"
expect_grep "first failure: .* exited 7" "$T/fail.err" "the first failure named"
expect_grep "world size 4" "$T/fail.err" "2 hosts of slots=2"
! grep -aq "^${HOSTS[2]}: " "$T/fail.out" "$T/fail.err" || fail "the excluded host ran something"

note "the first failure names the host whose worker failed, not the first to exit (4 runs)"
# Node ranks follow the join order: the failing rank's host is the one that printed its "ok".
for k in 1 2 3 4; do
	fanout "first$k" -w "$LIST" -- --nproc-per-node 2 --no-python "$W" print:ok exit-if-rank:4:7
	expect_eq "$RC" 7 "run $k: exit status of a job whose rank 4 exits 7"
	h=$(sed -n 's/^\([^ :]*\): \[rank4\]:ok$/\1/p' "$T/first$k.out")
	[ -n "$h" ] || { cat "$T/first$k.out" >&2; fail "run $k: no host printed rank 4's output"; }
	expect_grep "first failure: $h exited 7" "$T/first$k.err" "run $k: the failing host ($h) named"
done

note "an unreachable host (no such namespace) is named and nothing starts"
fanout unreach -w "$LIST,$NET.9" -- --nproc-per-node 2 --no-python "$TRAIN"
expect_eq "$RC" 1 "exit status when a host fails the check"
expect_grep "$NET.9: .*Cannot open network namespace" "$T/unreach.err" "the unreachable host and why"
expect_grep "1 of 4 hosts failed the check; nothing was started" "$T/unreach.err" "the summary"
for h in "${HOSTS[@]}"; do
	! grep -aq "^$h:.*fail" "$T/unreach.err" || fail "reachable host $h was reported"
done
[ -z "$(run_id_pids "unreach-$R")" ] || fail "processes of run unreach: $(run_id_pids "unreach-$R")"
! grep -aq '\[rank' "$T/unreach.out" || fail "a worker ran although a host was unreachable"

note "a host whose token file holds another token is named and nothing starts"
# hostwrap HOST CMD...: CMD in HOST's namespace; on $ODD_HOST with another token bind-mounted
# over the token file, in a mount namespace of its own (as a host without a shared home); on
# $FAIL_HOST the agent's start fails at once (exit 3).
cat >"$T/hostwrap" <<'WRAP'
#!/bin/bash
h=$1
shift
if [ "$h" = "${FAIL_HOST-}" ]; then
	case "$*" in
	*"crun-fanout 'start'"*)
		echo "hostwrap: $h fails to start its agent" >&2
		exit 3
		;;
	esac
fi
if [ "$h" = "${ODD_HOST-}" ]; then
	exec unshare -m --propagation private bash -c \
		'mount --bind "$ODD_TOKEN" "$CRUN_TOKEN_FILE" && exec ip netns exec "$@"' hostwrap "$h" "$@"
fi
exec ip netns exec "$h" "$@"
WRAP
chmod +x "$T/hostwrap"
token_file "$T/token.odd"
ODD_HOST=${HOSTS[1]} ODD_TOKEN=$T/token.odd timeout -s KILL 60 bash "$PDSH_TOOL" -R exec \
	--exec-prefix "$T/hostwrap %h" --crun "$CRUN" --rdzv-id "tok-$R" -w "$LIST" -- "$W" print:never \
	>"$T/tok.out" 2>"$T/tok.err"
expect_eq "$?" 1 "exit status when a host's token differs"
expect_grep "^crun-pdsh: ${HOSTS[1]}: token file $CRUN_TOKEN_FILE has fingerprint [0-9a-f]\{16\} there, [0-9a-f]\{16\} here" \
	"$T/tok.err" "the host with another token"
expect_eq "$(grep -c "token file" "$T/tok.err")" 1 "hosts named for their token"
expect_grep "1 of 3 hosts failed the check; nothing was started" "$T/tok.err" "the summary"
! grep -aq 'never' "$T/tok.out" || fail "a worker ran although a host's token differs"

note "a host whose agent fails before the round forms: the others are stopped, its status"
t0=$(now_ms)
FAIL_HOST=${HOSTS[2]} timeout -s KILL 120 bash "$PDSH_TOOL" -R exec --exec-prefix "$T/hostwrap %h" \
	--crun "$CRUN" --rdzv-id "early-$R" -w "$LIST" -- "$W" print:never >"$T/early.out" 2>"$T/early.err"
RC=$?
ms=$(($(now_ms) - t0))
expect_eq "$RC" 3 "exit status when one host's agent fails at once"
expect_grep "a host failed 10 s ago: stopping run early-$R on the hosts still running" "$T/early.err" \
	"the others stopped"
[ $ms -lt 60000 ] || fail "the job ended $ms ms after it started (not stopped after the grace)"
[ -z "$(run_id_pids "early-$R")" ] || fail "processes of run early: $(run_id_pids "early-$R")"
note "ended in $ms ms"

note "Ctrl-C mid-run stops every agent and every worker"
# Each worker writes its pid, then becomes train for a long run.
# shellcheck disable=SC2016 # expanded by the worker's sh
WSCRIPT='echo $$ >"$0/worker.$RANK"; exec "$1" --epochs 100000'
set -m # the launcher gets SIGINT itself, as from a terminal (not ignored as a background job)
bash "$PDSH_TOOL" -R exec --exec-prefix 'ip netns exec %h' --crun "$CRUN" --rdzv-id "ctrlc-$R" \
	-w "$LIST" -- --nproc-per-node 2 --no-python /bin/sh -c "$WSCRIPT" "$T" "$TRAIN" \
	>"$T/ctrlc.out" 2>"$T/ctrlc.err" &
LPID=$!
set +m
track $LPID
# shellcheck disable=SC2016 # evaluated by wait_for
wait_for 60 eval '[ "$(ls "$T"/worker.* 2>/dev/null | wc -l)" -eq 6 ]'
wait_for 60 grep -aq '\[rank0\]:epoch 2 ' "$T/ctrlc.out"
AGENTS=$(cat "$XDG_RUNTIME_DIR"/crun-fanout/ctrlc-"$R".*.pid)
WORKERS=$(cat "$T"/worker.*)
expect_eq "$(echo "$AGENTS" | wc -w)" 3 "agents' pid files"
no_token_in_argv
kill -INT $LPID
wait_pid 90 $LPID
expect_eq "$RC" 130 "the launcher's exit status after Ctrl-C"
for p in $AGENTS $WORKERS; do
	! alive "$p" || fail "pid $p (agent or worker) is still alive after Ctrl-C"
done
expect_grep "stopping run ctrlc-$R on 3 hosts" "$T/ctrlc.err" "the stop announced"
left=$(run_id_pids "ctrlc-$R")
for p in $left; do
	echo "left: pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" >&2
done
[ -z "$left" ] || fail "processes of run ctrlc: $left"
[ -z "$(ls -A "$XDG_RUNTIME_DIR/crun-fanout")" ] || fail "left in the runtime dir: $(ls "$XDG_RUNTIME_DIR/crun-fanout")"
note "PyTorch gloo DDP over crun-pdsh: both hosts' workers get the same master in any start order"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	# pywrap HOST CMD...: CMD in HOST's namespace, gloo on that namespace's veth. With
	# LAST_HOST set, that host's agent starts only once the other one's has (bounded wait).
	cat >"$T/pywrap" <<'WRAP'
#!/bin/bash
h=$1
shift
GLOO_SOCKET_IFNAME=$(ip netns exec "$h" ls /sys/class/net | grep -vx lo | head -n 1)
export GLOO_SOCKET_IFNAME PYTHON_EXEC=/usr/bin/python3
case "$*" in
*"crun-fanout 'start'"*)
	if [ "$h" = "${LAST_HOST-}" ]; then
		for _ in $(seq 1500); do
			[ -n "$(ls "$PYWRAP_DIR" 2>/dev/null)" ] && break
			sleep 0.02
		done
	else
		touch "$PYWRAP_DIR/$h"
	fi
	;;
esac
exec ip netns exec "$h" "$@"
WRAP
	chmod +x "$T/pywrap"
	PAIR="${HOSTS[0]},${HOSTS[1]}"
	for run in 1 2 3 4; do
		id=ddp$run
		# Runs 1 and 2: the host of the store (the first) starts last; 3 and 4: both at once.
		last=""
		[ $run -le 2 ] && last=${HOSTS[0]}
		mkdir -p "$T/pw$run"
		LAST_HOST=$last PYWRAP_DIR=$T/pw$run timeout -s KILL 180 bash "$PDSH_TOOL" -R exec \
			--exec-prefix "$T/pywrap %h" --crun "$CRUN" --rdzv-id "$id-$R" -w "$PAIR" -- \
			--agent-store --nproc-per-node 1 "$SRC/tests/agent/ddp_order.py" >"$T/$id.out" \
			2>"$T/$id.err"
		RC=$?
		order="both at once"
		[ -z "$last" ] || order="the store's host last"
		note "$id ($order): exit $RC, workers got" \
			"$(sed -n 's/^.*\[rank[0-9]*\]:\([MT][A-Z_]*=\)/\1/p' "$T/$id.out" | sort -u | tr '\n' ' ')"
		for v in MASTER_ADDR MASTER_PORT TORCHELASTIC_USE_AGENT_STORE; do
			n=$(sed -n "s/^.*\[rank[0-9]*\]:$v=//p" "$T/$id.out" | sort -u | wc -l)
			[ "$n" = 1 ] || { tail -n 20 "$T/$id.err" >&2; grep -a "=" "$T/$id.out" >&2; fail "$id: the hosts gave their workers $n values of $v"; }
		done
		[ $RC -eq 0 ] || { tail -n 30 "$T/$id.err" >&2; fail "$id: crun-pdsh exited $RC"; }
		expect_eq "$(sed -n 's/^.*\[rank[0-9]*\]:params=//p' "$T/$id.out" | sort -u | wc -l)" 1 \
			"$id: one parameter digest"
		expect_eq "$(sed -n 's/^.*\[rank[0-9]*\]:MASTER_ADDR=//p' "$T/$id.out" | sort -u)" \
			"${HOSTS[0]}" "$id: MASTER_ADDR is the store's host"
	done
else
	echo "torch is not importable by /usr/bin/python3: DDP runs skipped"
fi
echo "fanout-pdsh: ok"
