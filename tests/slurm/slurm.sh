#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/slurm/slurm.sh: crun in a real two-node Slurm cluster started here (root): munged,
# slurmctld and two slurmd (n1 at 127.0.0.2, n2 at 127.0.0.3), every file under a temp dir.
# sbatch of examples/slurm/train.sbatch and a bare `srun crun` train examples/train to equal
# digests; scancel of a running job stops every worker. Skips (77) without root or Slurm.
set -u

BUILD=${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}
SRC=${CRUN_SOURCE_DIR:?}
CRUN=${CRUN_EXE:-$BUILD/src/crun}
TRAIN=$BUILD/examples/train
W=$BUILD/tests/agent/agent-test-worker

if [ "$(id -u)" != 0 ]; then
	echo "SKIP: needs root (slurmd runs jobs as their user)" >&2
	exit 77
fi
for p in munged slurmctld slurmd srun sbatch scancel squeue scontrol sinfo; do
	if ! command -v "$p" >/dev/null && ! [ -x "/usr/sbin/$p" ]; then
		echo "SKIP: $p not found (Debian: apt-get install slurm-wlm munge)" >&2
		exit 77
	fi
done
export PATH=$PATH:/usr/sbin

T=$(mktemp -d /tmp/crun-slurm-test.XXXXXX)
chmod 755 "$T"
export TMPDIR=$T CRUN_TOKEN_FILE=$T/token SLURM_CONF=$T/slurm.conf
unset CRUN_STORE_TOKEN CRUN_STORE_TOKEN_FILE
# Nothing of an outer Slurm job may leak into this cluster's jobs.
for v in $(env | sed -n 's/^\(SLURM[A-Z_]*\)=.*/\1/p'); do
	[ "$v" = SLURM_CONF ] || unset "$v"
done
PIDS=""     # the test's own processes: killed by pid on exit
DAEMONS=""  # munged, slurmctld, slurmd: stopped last

fail() {
	echo "FAIL: $*" >&2
	for f in "$T"/log/*; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }
	done
	exit 1
}

. "$(dirname "$0")/../lib/proc.sh"   # note, track, alive, now_ms, wait_for
. "$(dirname "$0")/../lib/expect.sh" # expect_digests
. "$(dirname "$0")/../lib/net.sh"    # hold_ports

cleanup() {
	local p i jobs
	if [ -n "$DAEMONS" ]; then
		# Jobs first: a slurmstepd outlives its slurmd, so steps end through Slurm.
		jobs=$(timeout 10 squeue -h -o %i 2>/dev/null)
		[ -n "$jobs" ] && timeout 10 scancel $jobs 2>/dev/null
		for ((i = 0; i < 100; i++)); do
			[ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && ! ls "$T"/spool/*/*_[0-9]* >/dev/null 2>&1 && break
			sleep 0.2
		done
	fi
	for p in $PIDS; do
		kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null # reaped here, bash reports no "Killed"
	done
	for p in $DAEMONS; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in $DAEMONS; do
		for ((i = 0; i < 50; i++)); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$p" 2>/dev/null
	done
	for p in $PIDS $DAEMONS; do
		wait "$p" 2>/dev/null
	done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- the cluster ----

mkdir -p "$T/munge" "$T/state" "$T/spool/n1" "$T/spool/n2" "$T/log" "$T/pids"
chmod 711 "$T/munge" # clients need to reach the socket; the key stays 0400
head -c 1024 /dev/urandom >"$T/munge/munge.key"
chmod 400 "$T/munge/munge.key"
munged -F -f --key-file="$T/munge/munge.key" --socket="$T/munge/socket" \
	--pid-file="$T/munge/munged.pid" --log-file="$T/log/munged.log" \
	--seed-file="$T/munge/seed" >"$T/log/munged.out" 2>&1 &
DAEMONS="$DAEMONS $!"
wait_for 20 test -S "$T/munge/socket"

# Ports P..P+3 held for the test on every address (slurmctld, slurmd, n1, n2: all bind the
# wildcard with SO_REUSEADDR).
hold_ports ports 0.0.0.0 4 consecutive
P=${ports%% *}
# The cluster is examples/slurm/slurm.conf (the example docs/slurm.md points at), filled in.
sed -e "s/@CLUSTER@/crun$$/" -e "s|@DIR@|$T|g" -e "s/@HOST@/$(hostname)/" -e "s/@PORT0@/$P/" \
	-e "s/@PORT1@/$((P + 1))/" -e "s/@PORT2@/$((P + 2))/" -e "s/@PORT3@/$((P + 3))/" \
	"$SRC/examples/slurm/slurm.conf" >"$SLURM_CONF" || fail "cannot fill in examples/slurm/slurm.conf"
! grep -q '@[A-Z0-9]*@' "$SLURM_CONF" || fail "placeholders left in $SLURM_CONF"
slurmctld -D -c -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
DAEMONS="$DAEMONS $!"
for n in n1 n2; do
	slurmd -D -N $n -f "$SLURM_CONF" >"$T/log/slurmd.$n.out" 2>&1 &
	DAEMONS="$DAEMONS $!"
done
both_idle() {
	[ "$(timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null | sort | tr '\n' ' ')" = "n1 idle n2 idle " ]
}
note "munged, slurmctld and slurmd n1 (127.0.0.2), n2 (127.0.0.3)"
wait_for 60 both_idle

# job_state ID: Slurm's JobState of a job.
job_state() {
	timeout 10 scontrol -o show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
}
job_done() {
	case "$(job_state "$1")" in
	PENDING | RUNNING | CONFIGURING | COMPLETING | "") return 1 ;;
	*) return 0 ;;
	esac
}

# ---- crun's hostlist expansion against Slurm's own ----

note "hostlists: crun expands them as scontrol show hostnames does"
if [ -x "$BUILD/tests/slurm/test_slurm" ]; then
	for l in 'n[1-3,5]' 'x[9-11]' 'x[09-11],login' 'n[01-3]' 'rack[1-2]-gpu[01-02]' \
		'a[1-2]b[3-4]' 'n0,m[7-8]'; do
		want=$(timeout 10 scontrol show hostnames "$l" | tr '\n' ' ')
		got=$("$BUILD/tests/slurm/test_slurm" --expand "$l" | tr '\n' ' ')
		[ -n "$want" ] && [ "$got" = "$want" ] || fail "hostlist $l: crun '$got', Slurm '$want'"
	done
else
	# test_slurm is a cmocka program; slurm-cmocka-missing reports the build without it.
	note "SKIPPED: no $BUILD/tests/slurm/test_slurm (built without cmocka)"
fi

# ---- sbatch of the example ----

note "sbatch examples/slurm/train.sbatch: 2 nodes train examples/train"
id=$(sbatch --parsable -o "$T/batch.out" -e "$T/batch.err" \
	--export=ALL,CRUN="$CRUN",TRAIN="$TRAIN",EPOCHS=2 "$SRC/examples/slurm/train.sbatch") ||
	fail "sbatch failed"
wait_for 300 job_done "$id"
state=$(job_state "$id")
[ "$state" = COMPLETED ] || { cat "$T/batch.out" "$T/batch.err" >&2; fail "batch job $id ended $state"; }
expect_digests 2 "$T/batch.out"
# One worker per node (SLURM_CPUS_ON_NODE=1): ranks 0 and 1 only if both nodes formed one job.
for r in 0 1; do
	grep -aq "^\[rank$r\]:rank $r params sha256" "$T/batch.out" || fail "no digest from rank $r"
done
grep -aq "rendezvous from Slurm (--rdzv-backend slurm): job $id step 0, node rank 1 of 2 on n2 (127.0.0.3), node 0 n1 (127.0.0.2)" "$T/batch.err" ||
	{ cat "$T/batch.err" >&2; fail "no Slurm line for node rank 1"; }
grep -aq "hosting the rendezvous store at 127.0.0.2:" "$T/batch.err" ||
	{ cat "$T/batch.err" >&2; fail "the store is not on n1's NodeAddr"; }

# ---- srun crun, the backend found from the environment ----

note "srun -N2 --ntasks-per-node=1 crun train: no rendezvous flags, Slurm detected"
timeout -s KILL 300 srun -N2 --ntasks-per-node=1 "$CRUN" --nproc-per-node 2 \
	"$TRAIN" --epochs 2 --lr 0.1 >"$T/srun.out" 2>"$T/srun.err"
rc=$?
[ $rc -eq 0 ] || { cat "$T/srun.err" >&2; fail "srun crun exited $rc"; }
expect_digests 4 "$T/srun.out"
[ "$(grep -ac 'rendezvous from Slurm (detected: SLURM_JOB_ID and SLURM_STEP_ID are set)' "$T/srun.err")" = 2 ] ||
	{ cat "$T/srun.err" >&2; fail "not detected on both nodes"; }
for r in 0 1 2 3; do
	grep -aq "^\[rank$r\]:rank $r params sha256" "$T/srun.out" || fail "no digest from rank $r"
done

note "two tasks on one node are refused with the srun line to use"
timeout -s KILL 60 srun -N1 -n2 -O "$CRUN" "$W" exit:0 >"$T/two.out" 2>"$T/two.err"
[ $? -ne 0 ] || fail "two crun tasks on one node were accepted"
grep -aq "in a Slurm step (SLURM_STEP_ID is set): 2 tasks on 1 node, but crun is one agent per node .*srun --ntasks-per-node=1" "$T/two.err" ||
	{ cat "$T/two.err" >&2; fail "no clear message for two tasks per node"; }

# ---- scancel ----

note "scancel of a running job stops every worker on both nodes"
id=$(sbatch --parsable -N2 -o "$T/long.out" -e "$T/long.err" --wrap \
	"srun --ntasks-per-node=1 $CRUN --nproc-per-node 2 $W grandchild:$T/pids sleep:600000") ||
	fail "sbatch failed"
four_workers() { [ "$(ls "$T/pids" | wc -l)" -eq 4 ] && [ "$(cat "$T"/pids/* | wc -w)" -eq 8 ]; }
wait_for 120 four_workers
pids=$(cat "$T"/pids/*)
agents=""
for p in $(cat "$T"/pids/* | awk '{print $1}'); do
	agents="$agents $(ps -o ppid= -p "$p")"
done
agents=$(echo $agents | tr ' ' '\n' | sort -u | tr '\n' ' ')
[ "$(echo $agents | wc -w)" -eq 2 ] || fail "expected 2 crun agents, found '$agents'"
for p in $pids $agents; do
	kill -0 "$p" 2>/dev/null || fail "process $p is not running before scancel"
done
t0=$(now_ms)
scancel "$id" || fail "scancel $id failed"
all_gone() {
	local p
	for p in $pids $agents; do
		alive "$p" && return 1
	done
	return 0
}
wait_for 20 all_gone
note "every worker, grandchild and agent gone $(($(now_ms) - t0)) ms after scancel"
wait_for 60 job_done "$id"
echo "PASS"
