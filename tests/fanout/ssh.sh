#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/fanout/ssh.sh: crun-ssh against an sshd started here on 127.0.0.1 and a high port, with
# a throwaway host key and user key; "hosts" 127.0.0.2 and 127.0.0.3 both reach it through the
# ssh config file the test passes (-F). examples/train to equal digests, forwarded environment
# (quotes and spaces intact), an unreachable host (named; nothing started), and a SIGTERM to
# crun-ssh stopping every agent and worker by run id; and crun-pdsh -R ssh through the same
# sshd. Root only (exit 77 otherwise).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || skip "needs root (sshd, logging in as root with a test key)"
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
if ! [ -x "$SSHD" ] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
	skip "openssh-server and openssh-client are not installed"
fi
# sshd's privilege-separation directory (made by its service unit; none runs here).
[ -d /run/sshd ] || mkdir -m 755 /run/sshd || skip "cannot make /run/sshd"

K=$T/ssh
mkdir -m 700 "$K"
ssh-keygen -q -t ed25519 -N '' -C crun-fanout-test-host -f "$K/host_key" || fail "ssh-keygen (host)"
ssh-keygen -q -t ed25519 -N '' -C crun-fanout-test-user -f "$K/id" || fail "ssh-keygen (user)"
cp "$K/id.pub" "$K/authorized_keys"
echo "crun-fanout-test $(cut -d' ' -f1,2 "$K/host_key.pub")" >"$K/known_hosts"

# An sshd of our own, on a port held for this test (tests/lib/net.sh hold_port).
hold_port PORT
cat >"$K/sshd_config" <<CONF
Port $PORT
ListenAddress 127.0.0.1
HostKey $K/host_key
PidFile $K/sshd.pid
AuthorizedKeysFile $K/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
CONF
"$SSHD" -D -e -f "$K/sshd_config" 2>"$K/sshd.log" &
SSHD_PID=$!
track $SSHD_PID
# sshd_up: sshd listens on PORT; fails the test at once when sshd exited instead.
sshd_up() {
	alive $SSHD_PID || { cat "$K/sshd.log" >&2; fail "sshd did not start"; }
	[ -n "$(ss -Htln "sport = :$PORT" 2>/dev/null)" ]
}
wait_for 20 sshd_up
# A port held but never listened on: connections to it are refused.
hold_port CLOSED
cat >"$K/config" <<CONF
Host 127.0.0.2 127.0.0.3
	Port $PORT
Host 127.0.0.4
	Port $CLOSED
Host *
	HostName 127.0.0.1
	User root
	IdentityFile $K/id
	IdentitiesOnly yes
	HostKeyAlias crun-fanout-test
	UserKnownHostsFile $K/known_hosts
	StrictHostKeyChecking yes
	LogLevel ERROR
CONF
ssh -F "$K/config" -o BatchMode=yes 127.0.0.2 true </dev/null ||
	{ cat "$K/sshd.log" >&2; fail "ssh to the test sshd"; }

# fanout ID ARGS...: crun-ssh to the test sshd, run id ID; output in $T/ID.{out,err}; RC.
fanout() {
	local id=$1
	shift
	timeout -s KILL 240 bash "$SSH_TOOL" -F "$K/config" --crun "$CRUN" --connect-timeout 5 \
		--rdzv-id "$id-$R" "$@" >"$T/$id.out" 2>"$T/$id.err"
	RC=$?
	[ $RC -ne 137 ] || { tail -n 30 "$T/$id.err" >&2; fail "crun-ssh $id did not finish in 240 s"; }
}

RUNDIR=/tmp/crun-fanout-0 # the node script's: no XDG_RUNTIME_DIR without PAM

note "2 hosts x 2 workers over ssh: examples/train to equal digests"
fanout train -w '127.0.0.[2-3]' -- --nproc-per-node 2 --no-python "$TRAIN" --epochs 20
[ $RC -eq 0 ] || { cat "$T/train.err" >&2; fail "crun-ssh exited $RC"; }
expect_digests 4 "$T/train.out"
for h in 127.0.0.2 127.0.0.3; do
	expect_grep "^$h: \[rank[0-3]\]:rank [0-3] params sha256" "$T/train.out" "host $h's output"
done
expect_grep "world size 4" "$T/train.err" "one job of 4 workers"
! ls "$RUNDIR"/train-"$R".* >/dev/null 2>&1 || fail "pid or token files left: $(ls "$RUNDIR"/train-"$R".*)"

note "forwarded environment: CRUN_*/NCCL_* from here, --export, --env-file; quoting intact"
printf '# env\nFO_FILE="from file"\n\nexport FO_FILE2=x=y\n' >"$T/envfile"
# shellcheck disable=SC2016 # expanded by the worker's sh
CHECK='[ "$NCCL_FO_PROBE" = "x  y" ] && [ "$FO_PROBE" = "it'\''s \$HOME" ] &&
	[ "$FO_FILE" = "from file" ] && [ "$FO_FILE2" = x=y ] || { env | grep FO_ >&2; exit 9; }'
NCCL_FO_PROBE="x  y" fanout env -w 127.0.0.2,127.0.0.3 --env-file "$T/envfile" \
	--export "FO_PROBE=it's \$HOME" -- --no-python /bin/sh -c "$CHECK"
[ $RC -eq 0 ] || { cat "$T/env.err" >&2; fail "forwarded environment: crun-ssh exited $RC"; }

note "an unreachable host is named and nothing starts"
fanout unreach -w 127.0.0.2,127.0.0.4,127.0.0.3 -- --no-python "$TRAIN"
expect_eq "$RC" 1 "exit status when a host fails the check"
expect_grep "127.0.0.4: unreachable: .*Connection refused" "$T/unreach.err" "the unreachable host and why"
expect_grep "1 of 3 hosts failed the check; nothing was started" "$T/unreach.err" "the summary"
[ -z "$(run_id_pids "unreach-$R")" ] || fail "processes of run unreach: $(run_id_pids "unreach-$R")"
! grep -aq '\[rank' "$T/unreach.out" || fail "a worker ran although a host was unreachable"

note "crun-pdsh -R ssh through the same sshd (pdsh's ssh reads the test config)"
# The "hosts" share this machine's file system, so the token file's path holds the same token.
# The store is named 127.0.0.1: crun-pdsh cannot tell one host to host it (one command for all),
# and crun takes only its interfaces' addresses as its own (127.0.0.2 is not one).
PDSH_SSH_ARGS_APPEND="-F $K/config" timeout -s KILL 240 bash "$PDSH_TOOL" -R ssh -w '127.0.0.[2-3]' \
	--crun "$CRUN" --connect-timeout 5 --rdzv-id "pdsh-$R" --rdzv-endpoint 127.0.0.1 \
	-- --nproc-per-node 2 --no-python "$TRAIN" --epochs 20 >"$T/pdsh.out" 2>"$T/pdsh.err"
RC=$?
[ $RC -eq 0 ] || { cat "$T/pdsh.err" >&2; fail "crun-pdsh -R ssh exited $RC"; }
expect_digests 4 "$T/pdsh.out"
expect_grep "^127.0.0.3: \[rank[0-3]\]:rank [0-3] params sha256" "$T/pdsh.out" "host 127.0.0.3's output"

note "SIGTERM to crun-ssh stops every agent and worker by run id"
# shellcheck disable=SC2016 # expanded by the worker's sh
WSCRIPT='echo $$ >"$0/worker.$RANK"; exec "$1" sleep:600000'
bash "$SSH_TOOL" -F "$K/config" --crun "$CRUN" --rdzv-id "stop-$R" -w 127.0.0.2,127.0.0.3 \
	-- --nproc-per-node 2 --no-python /bin/sh -c "$WSCRIPT" "$T" "$W" >"$T/stop.out" 2>"$T/stop.err" &
LPID=$!
track $LPID
# shellcheck disable=SC2016 # evaluated by wait_for
wait_for 60 eval '[ "$(ls "$T"/worker.* 2>/dev/null | wc -l)" -eq 4 ]'
AGENTS=$(cat "$RUNDIR"/stop-"$R".*.pid)
WORKERS=$(cat "$T"/worker.*)
expect_eq "$(echo "$AGENTS" | wc -w)" 2 "agents' pid files"
TOKENS=("$RUNDIR"/stop-"$R".*.token)
expect_eq "${#TOKENS[@]}" 2 "0600 token files while the agents run"
expect_eq "$(stat -c %a "$RUNDIR"/stop-"$R".*.token | sort -u)" 600 "the token files' mode"
no_token_in_argv
kill -TERM $LPID
wait_pid 90 $LPID
expect_eq "$RC" 143 "crun-ssh's exit status after SIGTERM"
for p in $AGENTS $WORKERS; do
	! alive "$p" || fail "pid $p (agent or worker) is still alive after SIGTERM"
done
expect_grep "stopping run stop-$R on 2 hosts" "$T/stop.err" "the stop announced"
# Each agent is stopped by its own SIGTERM, or, when the other's arrived first, by that node
# leaving the job (a signalled agent leaves the round: issue 21), whichever comes first.
n_sig=$(grep -ac 'received SIGTERM' "$T/stop.err")
n_left=$(grep -ac 'stopped by its operator (SIGTERM)' "$T/stop.err")
[ "$n_sig" -ge 1 ] && { [ "$n_sig" -ge 2 ] || [ "$n_left" -ge 1 ]; } ||
	{ cat "$T/stop.err" >&2; fail "agents told to stop: $n_sig SIGTERM lines, $n_left leaving lines"; }
! ls "$RUNDIR"/stop-"$R".* >/dev/null 2>&1 || fail "pid or token files left: $(ls "$RUNDIR"/stop-"$R".*)"
echo "fanout-ssh: ok"
