#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/faults/worker.sh: a crun worker that runs examples/train ($FAULT_TRAIN) and injects one
# fault on rank $FAULT_RANK: on the first attempt only, or on every one with FAULT_ALWAYS=1.
#   FAULT=exit   exit 3 after FAULT_AFTER seconds of training (train is killed first)
#   FAULT=segv   train gets SIGSEGV after FAULT_AFTER s; the worker dies of SIGSEGV too
#   FAULT=hang   train is SIGSTOPped after FAULT_AFTER s, then the worker stops itself; it has a
#                SIGTERM handler (as Python programs that clean up do), which a stopped process
#                cannot run until it is continued
# FAULT_PIDDIR: write this worker's PID to FAULT_PIDDIR/pid.$FAULT_NODE.$RANK (the worker is
# this process; train is exec'd into it when no fault applies).
# FAULT_GATE=FILE (every rank, no other fault): after training, stay alive until FILE exists
# (at most 600 s), so that the job is running, whatever the machine's speed, while a case
# injects a fault into the store or the network.
set -u
[ -z "${FAULT_PIDDIR-}" ] || echo $$ >"$FAULT_PIDDIR/pid.${FAULT_NODE:-0}.$RANK"
if [ -n "${FAULT_GATE-}" ]; then
	"$FAULT_TRAIN" "$@" || exit
	for ((i = 0; i < 6000; i++)); do
		[ ! -e "$FAULT_GATE" ] || exit 0
		sleep 0.1
	done
	echo "worker.sh: rank $RANK: $FAULT_GATE did not appear in 600 s" >&2
	exit 98
fi
if [ "${FAULT:-none}" = none ] || [ "$RANK" != "${FAULT_RANK:-1}" ] ||
	{ [ "${FAULT_ALWAYS:-0}" != 1 ] && [ "${TORCHELASTIC_RESTART_COUNT:-0}" != 0 ]; }; then
	exec "$FAULT_TRAIN" "$@"
fi
"$FAULT_TRAIN" "$@" &
child=$!
sleep "${FAULT_AFTER:-1}"
echo "fault: rank $RANK (pid $$): $FAULT" >&2
case $FAULT in
exit)
	kill -9 $child
	wait $child
	exit 3
	;;
segv)
	kill -SEGV $child
	wait $child
	exec "$FAULT_W" raise:11
	;;
hang)
	trap 'kill -9 $child; trap - TERM; kill -TERM $$' TERM
	kill -STOP $child
	kill -STOP $$
	wait $child
	;;
esac
exit 99
