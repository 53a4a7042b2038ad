#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/logdir_nodes.sh: one --log-dir folder per run across nodes (agent/logroute.h,
# issue 21). Two agents in two network namespaces on a bridge share one --log-dir (as nodes
# share NFS) and run a 2x2 job whose rank 3 fails once: one folder DIR/<run_id>, 0700, holding
# every rank's logs of both attempts, the kept error file and both nodes' run records. A rerun
# with the same run id gets DIR/<run_id>.1 and leaves the first run's folder as it was. Root
# only (network namespaces; 77 otherwise).
. "$(dirname "$0")/lib.sh"

TAG=ld$$
need_netns "$TAG"

NET=$(netns_subnet)
netns_bridge "$TAG" "$NET" crun0 "${TAG}1" "${TAG}2" || { echo "no bridge support: skipping"; exit 77; }
EP=$NET.1:29500 # namespace 1 is fresh: nothing else binds there; its agent hosts the store
token_file "$T/token"
L=$T/logs

# w.sh: every rank prints its rank and waits until all 4 of its attempt have started; rank 3
# fails (exit 3, with an error file) in the first attempt.
cat >"$T/w.sh" <<'EOF2'
#!/bin/bash
echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT out"
echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT err" >&2
touch "$DIR/started.$RUN.$TORCHELASTIC_RESTART_COUNT.$RANK"
until [ "$(ls "$DIR" | grep -c "^started\.$RUN\.$TORCHELASTIC_RESTART_COUNT\.")" = 4 ]; do
	sleep 0.05
done
if [ "$RANK" = 3 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
	printf '{"message": "rank 3 broke"}' >"$TORCHELASTIC_ERROR_FILE"
	exit 3
fi
EOF2
chmod +x "$T/w.sh"
export DIR=$T

# run N: the job (RUN=N) on both nodes; both must exit 0.
run() {
	local i pids=()
	export RUN=$1
	for i in 1 2; do
		timeout -s KILL 150 ip netns exec "$TAG$i" "$CRUN" --nnodes 2 --nproc-per-node 2 \
			--rdzv-backend c10d --rdzv-endpoint "$EP" --rdzv-id lnodes \
			--rdzv-conf join_timeout=120 --max-restarts 1 --restart-backoff 0.1 \
			--log-dir "$L" --no-python "$T/w.sh" >"$T/r$1.n$i.out" 2>"$T/r$1.n$i.err" &
		pids+=($!)
		track $!
	done
	for i in 1 2; do
		wait_pid 160 "${pids[$((i - 1))]}"
		[ "$RC" -eq 0 ] || { tail -n 20 "$T/r$1.n$i.err" >&2; fail "run $1: node $i exited $RC"; }
	done
}

# check_run FOLDER N: FOLDER holds run N's logs of every rank, both attempts, and its records.
check_run() {
	local f=$1 a r
	expect_eq "$(stat -c %a "$f")" 700 "mode of $f"
	for a in 0 1; do
		for r in 0 1 2 3; do
			expect_grep "^rank $r attempt $a out$" "$f/attempt_$a/$r/stdout.log" "rank $r's stdout"
			expect_grep "^rank $r attempt $a err$" "$f/attempt_$a/$r/stderr.log" "rank $r's stderr"
		done
	done
	expect_eq "$(find "$f" -maxdepth 1 -name 'attempt_*' | wc -l)" 2 "attempt folders in $f"
	expect_grep "rank 3 broke" "$f/attempt_0/error_3.json" "the kept error file"
	expect_eq "$(find "$f" -maxdepth 1 -name 'run-*.json' | wc -l)" 2 "run records of both nodes in $f"
	for i in 1 2; do
		expect_grep "worker logs go to $f\$" "$T/r$2.n$i.err" "node $i names the folder"
	done
}

# folders: the names in the shared --log-dir, sorted, each followed by a space.
folders() { find "$L" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tr '\n' ' '; }

note "two nodes, one shared --log-dir: one folder for the run"
run 1
expect_eq "$(folders)" "lnodes " "folders in the shared --log-dir"
check_run "$L/lnodes" 1
before=$(find "$L/lnodes" -type f -exec md5sum {} + | sort)

note "a rerun with the same run id: its own folder; the first run's is untouched"
run 2
expect_eq "$(folders)" "lnodes lnodes.1 " "folders after the rerun"
check_run "$L/lnodes.1" 2
expect_eq "$(find "$L/lnodes" -type f -exec md5sum {} + | sort)" "$before" "the first run's files"
echo "ok"
