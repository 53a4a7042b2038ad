#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/agent/auth.sh: the store is authenticated by default (docs/security.md): standalone
# jobs with a fresh token the workers never see, a store with another token refused with our
# fingerprint, loose token files refused, and two nodes meeting through the default file.
. "$(dirname "$0")/lib.sh"

STORE=$BUILD/src/crun-store
unset CRUN_TOKEN_FILE XDG_CONFIG_HOME
export HOME=$T/home
mkdir -p "$HOME"

# The worker: print what of the credential it sees, use the store inside its prefix, then try
# a key of another run.
cat >"$T/w.sh" <<EOW
#!/bin/bash
env | grep -i token | sed 's/=.*//' | sed 's/^/envname=/'
[ -n "\${CRUN_STORE_TOKEN_FILE:-}" ] && stat -c 'mode=%a' "\$CRUN_STORE_TOKEN_FILE"
grep -c . "\$CRUN_STORE_TOKEN_FILE" >/dev/null && head -c 16 "\$CRUN_STORE_TOKEN_FILE"; echo
"$STORE" --timeout 10 set mine/\$RANK ok && echo "own-key=ok"
"$STORE" --timeout 10 --prefix "" set rdzv/another-run/x 1 2>&1 | sed 's/^/other-key=/'
exit 0
EOW
chmod +x "$T/w.sh"

note "standalone: no token exported, workers see only a run-scoped key file"
run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 2 "$T/w.sh"
[ $RC -eq 0 ] || { cat "$T/err" "$T/out" >&2; fail "standalone exit $RC"; }
expect_grep 'envname=CRUN_STORE_TOKEN_FILE' "$T/out" "the workers get a token file"
if grep -q 'envname=CRUN_STORE_TOKEN$' "$T/out"; then
	fail "CRUN_STORE_TOKEN reached a worker"
fi
expect_grep 'mode=600' "$T/out" "the workers' token file is 0600"
expect_grep 'crun-job-key-v1' "$T/out" "the workers' file holds a run-scoped key"
expect_eq "$(grep -c 'own-key=ok' "$T/out")" 2 "workers use the store with their key"
expect_grep "not in this connection's scope" "$T/out" "another run's key is refused"
[ ! -e "$HOME/.config/crun/token" ] || fail "a standalone job made the default token file"

note "CRUN_STORE_TOKEN is an explicit token but is not passed on"
CRUN_STORE_TOKEN=from-env-0123456789abcdef run_crun 60 "$T/out" "$T/err" --standalone --nproc-per-node 1 "$T/w.sh"
[ $RC -eq 0 ] || { cat "$T/err" >&2; fail "exit $RC with CRUN_STORE_TOKEN"; }
if grep -q 'envname=CRUN_STORE_TOKEN$' "$T/out"; then
	fail "CRUN_STORE_TOKEN reached a worker"
fi

note "a store with another token: refused at once, with our fingerprint and the file"
printf 'the-store-token-0123456789\n' >"$T/store.tok"
chmod 600 "$T/store.tok"
printf 'the-agent-token-0123456789\n' >"$T/agent.tok"
chmod 600 "$T/agent.tok"
"$RDZVD" --listen 127.0.0.1:0 -q --token-file "$T/store.tok" >"$T/rdzvd.out" 2>"$T/rdzvd.err" &
RDZVD_PID=$!
track $RDZVD_PID
wait_for 20 test -s "$T/rdzvd.out"
ENDPOINT=$(head -n1 "$T/rdzvd.out")
start=$(now_ms)
run_crun 60 "$T/out" "$T/err" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
	--rdzv-id mismatch --token-file "$T/agent.tok" "$W" env
[ $RC -ne 0 ] || fail "an agent with another token was accepted"
[ $(($(now_ms) - start)) -lt 10000 ] || fail "the mismatch took over 10 s to report"
expect_grep "token mismatch: the store refused our token (fingerprint [0-9a-f]\{16\} from token file $T/agent.tok)" \
	"$T/err" "mismatch message"
if grep -q 'the-store-token-0123456789\|the-agent-token-0123456789' "$T/err"; then
	fail "a token was printed"
fi
note "... and an agent with none (--insecure)"
run_crun 60 "$T/out" "$T/err" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "$ENDPOINT" \
	--rdzv-id none --insecure "$W" env
[ $RC -ne 0 ] || fail "an --insecure agent was accepted by a store with a token"
expect_grep "the store requires a token and we have none" "$T/err" "no-token message"
expect_grep "insecure" "$T/err" "--insecure warns"
kill $RDZVD_PID

note "a world-readable token file is refused, naming it"
chmod 644 "$T/agent.tok"
run_crun 60 "$T/out" "$T/err" --nnodes 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:1 \
	--token-file "$T/agent.tok" "$W" env
[ $RC -ne 0 ] || fail "a world-readable token file was accepted"
expect_grep "token file $T/agent.tok: refused: mode 0644" "$T/err" "loose file message"

note "two nodes, only the default token file (HOME in a temp dir)"
host=127.0.0.2
hold_port port "$host"
pids=()
for i in 0 1; do
	"$CRUN" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
		--rdzv-endpoint "$host:$port" --rdzv-id two --local-addr 127.0.0.$((i + 2)) \
		--rdzv-conf last_call_timeout=1,is_host=$((1 - i)) "$W" env >"$T/two.$i.out" 2>"$T/two.$i.err" &
	pids+=($!)
	track $!
done
for i in 0 1; do
	wait_ok 90 ${pids[$i]} "node $i" "$T/two.$i.err"
done
expect_eq "$(cat "$T"/two.*.out | grep -c '^\[rank[0-9]\]:RANK=')" 2 "two workers ran"
[ -f "$HOME/.config/crun/token" ] || fail "no default token file was made"
expect_eq "$(stat -c %a "$HOME/.config/crun/token")" 600 "default token file mode"
expect_eq "$(stat -c %a "$HOME/.config/crun")" 700 "default token directory mode"
echo "auth: OK"
