#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/faults/preauth.sh [CASE...]: a local user without the token against a root job's store
# (issue 20). A throwaway unprivileged user (crunpa<PID>, removed at exit) runs
# tests/faults/preauth_attacker.py against an agent store (a root --standalone job, soft fd
# limit 1024 as in the field) and against a crun-rdzvd:
#   job-flood    1,200 token-less connections (silent, half a HELLO, half a TCPStore request)
#                held and reopened while the job's workers open new store connections: the
#                job exits 0, a client with the right token gets in within seconds (5/5), and
#                the store's log stays short;
#   rdzvd-flood  the same against crun-rdzvd, with 5,000 connections (past its per-address cap);
#   guess        64 connections guessing the token: the verdicts per second are limited, and
#                a right proof is answered no sooner than a wrong one (medians printed);
#   weak-token   crun-rdzvd refuses a short token file and a low-entropy --token, naming them;
#   tls-unixflood  a TLS crun-rdzvd whose unix socket the user floods with connections that
#                start a TLS record (tens of thousands a second): crun status over TCP with
#                the client certificate answers within 5 s, 3/3, and a root job through the
#                store (over the same unix socket) exits 0: the store's loop accepts a bounded
#                number per turn, and each local user is a pre-auth source of its own;
#   bigframe     a crun frame of 8 MiB before authentication is refused from its header,
#                named; one of 33 MiB (read as TCPStore) closed at once; 20 token-less TCPStore
#                SETs of 16 MiB held open do not keep a token holder from storing 16 MiB (3/3).
# Exit 1 if a case failed, 77 when it cannot run here (not root, no useradd/runuser).
set -u
: "${CRUN_BUILD_DIR:?CRUN_BUILD_DIR must be set (meson test sets it)}"
: "${CRUN_SOURCE_DIR:?CRUN_SOURCE_DIR must be set (meson test sets it)}"
CRUN=$CRUN_BUILD_DIR/src/crun
RDZVD=$CRUN_BUILD_DIR/src/crun-rdzvd
STORE=$CRUN_BUILD_DIR/src/crun-store
ATTACKER=$CRUN_SOURCE_DIR/tests/faults/preauth_attacker.py
ATK=crunpa$$
FLOOD=1200   # connections the attacker holds: more than the cap a soft limit of 1024 gives
FLOOD_RDZVD=5000 # against crun-rdzvd: more than its per-address cap (4,096)
FLOOD_S=20   # seconds of flood
LOG_MAX=12   # store log lines the flood may cause (one summary line per 5 s, and a few)
RIGHT_MAX_MS=4000 # the longest a right-token handshake may take under attack
GUESS_MAX=200     # verdicts per second the guesser may get (64 held connections / 1 s)
. "$CRUN_SOURCE_DIR/tests/lib/proc.sh"
. "$(dirname "$0")/../lib/user.sh" # user_need, user_add, user_del, as_atk

user_need preauth python3
T=$(mktemp -d "${TMPDIR:-/tmp}/crun-preauth.XXXXXX")
chmod 0755 "$T" # the attacker reads its script's output directory
PIDS=""
cleanup() {
	kill_tracked
	user_del
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
user_add preauth

nfail=0
fail() {
	echo "FAIL: $CASE: $*"
	nfail=$((nfail + 1))
}
# as_atk CMD...: the attacker's process, its own output under $T/atk (its directory).
mkdir -m 0777 "$T/atk"
fig() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }

# The job's token: 32 random bytes in hex, root's alone.
token_file "$T/token"
export CRUN_TOKEN_FILE=$T/token

# right_5 ENDPOINT OUT [CREDENTIAL]: five right-token handshakes one after another (root), each
# retried within 20 s on a dropped connection as crun's own client does (a refusal is final).
right_5() {
	timeout -s KILL 120 python3 "$ATTACKER" right "$1" --token-file "${3:-$T/token}" --tries 5 \
		--timeout 20 >"$2" 2>"$2.err"
	[ "$(fig ok "$2")" = 5 ] || { tail -n 20 "$2.err"; fail "a client with the right token got in $(fig ok "$2")/5 times"; }
	[ "$(fig max_ms "$2")" -le $RIGHT_MAX_MS ] ||
		fail "a right-token handshake took $(fig max_ms "$2") ms (limit $RIGHT_MAX_MS)"
	echo "$CASE: right token: 5 handshakes, $(fig ok "$2") in, median $(fig median_ms "$2") ms, longest $(fig max_ms "$2") ms"
}

# flood_start ENDPOINT NAME CONNS: the attacker's flood in the background; waits until it is
# full.
flood_start() {
	as_atk timeout -s KILL $((FLOOD_S + 60)) python3 "$ATTACKER" flood "$1" --conns "$3" \
		--seconds $FLOOD_S --ready-file "$T/atk/$2.ready" >"$T/atk/$2.out" 2>"$T/atk/$2.err" &
	FLOOD_PID=$!
	track $FLOOD_PID
	wait_for 30 test -e "$T/atk/$2.ready"
}

flood_end() {
	wait_pid $((FLOOD_S + 60)) "$FLOOD_PID"
	[ "$RC" -eq 0 ] || { cat "$T/atk/$1.err"; fail "the attacker exited $RC"; }
	echo "$CASE: flood: $(fig opened "$T/atk/$1.out") opened, $(fig closed_by_store "$T/atk/$1.out") closed by the store, $(fig held_at_end "$T/atk/$1.out") held at the end"
}

# log_short FILE FROM: the store's lines in FILE after line FROM are at most LOG_MAX.
log_short() {
	local n
	# The store's own lines ("store: ...", "store ADDR: ..."), not its clients' waits.
	n=$(tail -n +"$(($2 + 1))" "$1" | grep -cE '(debug|info|warning|error): store[ :]')
	[ "$n" -le $LOG_MAX ] || { tail -n +"$(($2 + 1))" "$1" | grep -E '(debug|info|warning|error): store[ :]' | sort | uniq -c | sort -rn | head; fail "$n store log lines during the flood (limit $LOG_MAX)"; }
	echo "$CASE: $n store log lines during the flood"
}

# start_store [ARG...]: crun-rdzvd with the job's token and a soft fd limit of 1024.
start_store() {
	rm -f "$T/rdzvd.out"
	(ulimit -Sn 1024 && exec "$RDZVD" --listen 127.0.0.1:0 --token-file "$T/token" "$@") \
		>"$T/rdzvd.out" 2>"$T/rdzvd.err" &
	RDZVD_PID=$!
	track $RDZVD_PID
	wait_for 20 grep -q ':[0-9][0-9]*$' "$T/rdzvd.out"
	EP=$(head -n1 "$T/rdzvd.out")
}

want=" $* "
cases() { [ -z "${want// /}" ] || [[ "$want" == *" $1 "* ]]; }

CASE=job-flood
if cases $CASE; then
	echo "=== $CASE: $FLOOD token-less connections against a root --standalone job's store"
	# The workers wait for the flood, then each opens 20 new store connections, then waits for
	# the right-token client to finish (else a quick job could end, and its store, before it).
	cat >"$T/w.sh" <<EOW
#!/bin/bash
[ "\$RANK" = 0 ] && cp "\$CRUN_STORE_TOKEN_FILE" "$T/jobkey"
while [ ! -e "$T/go" ]; do sleep 0.05; done
for i in \$(seq 1 20); do
	"$STORE" --timeout 20 set "k/\$RANK/\$i" v >/dev/null || { echo "rank \$RANK: set \$i failed" >&2; exit 1; }
done
# The job (and its store) stays until the right-token client is through.
for i in \$(seq 1 2400); do [ -e "$T/done" ] && exit 0; sleep 0.05; done
echo "rank \$RANK: no done file after 120 s" >&2; exit 1
EOW
	chmod 0755 "$T/w.sh"
	rm -f "$T/go" "$T/done"
	(ulimit -Sn 1024 && exec timeout -s KILL 150 "$CRUN" --standalone --agent-store --nproc-per-node 2 \
		"$T/w.sh") >"$T/job.out" 2>"$T/job.err" &
	JOB=$!
	track $JOB
	wait_for 30 grep -qs 'hosting the rendezvous store at' "$T/job.err"
	EP=$(sed -n 's/.*hosting the rendezvous store at \([^ ]*\).*/\1/p' "$T/job.err" | head -n1)
	# The standalone store has a token of its own; a worker's key file is the credential.
	wait_for 30 test -s "$T/jobkey"
	flood_start "$EP" job $FLOOD
	from=$(wc -l <"$T/job.err")
	touch "$T/go"
	right_5 "$EP" "$T/job.right" "$T/jobkey"
	touch "$T/done"
	wait_pid 150 $JOB
	[ "$RC" -eq 0 ] || { tail -n 20 "$T/job.err"; fail "the job exited $RC under the flood"; }
	echo "$CASE: the job exited $RC"
	log_short "$T/job.err" "$from"
	flood_end job
fi

CASE=rdzvd-flood
if cases $CASE; then
	echo "=== $CASE: $FLOOD_RDZVD token-less connections against crun-rdzvd (soft fd limit 1024)"
	start_store
	flood_start "$EP" rdzvd $FLOOD_RDZVD
	from=$(wc -l <"$T/rdzvd.err")
	right_5 "$EP" "$T/rdzvd.right"
	ok=0
	for i in 1 2 3 4 5; do
		timeout -s KILL 60 "$STORE" --endpoint "$EP" --timeout 20 set "probe/$i" v && ok=$((ok + 1))
	done
	[ $ok -eq 5 ] || fail "crun-store with the right token: $ok/5"
	flood_end rdzvd
	log_short "$T/rdzvd.err" "$from"
	kill "$RDZVD_PID"
fi

CASE=tls-unixflood
if cases $CASE; then
	echo "=== $CASE: a TLS crun-rdzvd's unix socket flooded by a user with no token"
	. "$CRUN_SOURCE_DIR/tests/lib/tls_certs.sh"
	make_tls_certs "$T/pki" >/dev/null 2>&1 || fail "cannot make the test certificates"
	TLS=(--tls-ca "$T/pki/ca.pem" --tls-cert "$T/pki/client.pem" --tls-key "$T/pki/client.key")
	start_store --tls-ca "$T/pki/ca.pem" --tls-cert "$T/pki/server.pem" \
		--tls-key "$T/pki/server.key"
	sock=$(ls /run/crun/store-*-"${EP/:/-}".sock 2>/dev/null | head -n1)
	[ -S "$sock" ] || fail "no unix socket for $EP under /run/crun"
	FLOOD_S=15
	as_atk timeout -s KILL $((FLOOD_S + 30)) python3 "$ATTACKER" unixflood "$sock" --conns 400 \
		--seconds $FLOOD_S --ready-file "$T/atk/uf.ready" >"$T/atk/uf.out" 2>"$T/atk/uf.err" &
	FLOOD_PID=$!
	track $FLOOD_PID
	wait_for 30 test -e "$T/atk/uf.ready"
	ok=0
	for i in 1 2 3; do
		t0=$(date +%s%N)
		CRUN_STORE_UNIX_SOCKET=off timeout -s KILL 30 "$CRUN" status -e "$EP" "${TLS[@]}" \
			--timeout 5 >"$T/uf.status" 2>&1 && ok=$((ok + 1))
		echo "$CASE: crun status over TCP: $(head -c 120 "$T/uf.status"), $((($(date +%s%N) - t0) / 1000000)) ms"
	done
	[ $ok -eq 3 ] || fail "crun status over TCP with TLS answered $ok/3 times during the flood"
	timeout -s KILL 60 "$CRUN" --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d \
		--rdzv-endpoint "$EP" --rdzv-id uf "${TLS[@]}" /bin/true >"$T/uf.job.out" \
		2>"$T/uf.job.err"
	rc=$?
	[ $rc -eq 0 ] || { tail -n 5 "$T/uf.job.err"; fail "a root job through the store exited $rc during the flood"; }
	wait_pid $((FLOOD_S + 30)) "$FLOOD_PID"
	echo "$CASE: flood: $(fig opened "$T/atk/uf.out") connections opened; the job exited $rc"
	kill "$RDZVD_PID"
fi

CASE=guess
if cases $CASE; then
	echo "=== $CASE: 64 connections guess the token of crun-rdzvd; a right client meanwhile"
	start_store
	as_atk timeout -s KILL 90 python3 "$ATTACKER" guess "$EP" --conns 64 --seconds 12 \
		>"$T/atk/guess.out" 2>"$T/atk/guess.err" &
	G=$!
	track $G
	wait_for 30 grep -q 'failed or refused handshake' "$T/rdzvd.err"
	right_5 "$EP" "$T/guess.right"
	wait_pid 90 $G
	[ "$RC" -eq 0 ] || { cat "$T/atk/guess.err"; fail "the guesser exited $RC"; }
	vps=$(fig verdicts_per_s "$T/atk/guess.out")
	wrong=$(fig median_ms "$T/atk/guess.out")
	right=$(fig median_ms "$T/guess.right")
	echo "$CASE: $vps verdicts/s; median answer: wrong proof $wrong ms, right proof $right ms"
	[ "${vps%.*}" -le $GUESS_MAX ] || fail "$vps guesses answered per second (limit $GUESS_MAX)"
	# Not told apart by time: a right proof is not answered sooner than half a wrong one's.
	[ $((right * 2)) -ge "$wrong" ] ||
		fail "right proofs answered in $right ms, wrong ones in $wrong ms: timing tells them apart"
	grep -q 'fingerprint' "$T/atk/guess.err" && fail "the store's fingerprint reached the guesser"
	kill "$RDZVD_PID"
fi

CASE=bigframe
if cases $CASE; then
	echo "=== $CASE: big frames before authentication; 20 token-less 16 MiB TCPStore SETs held"
	start_store --tcpstore-run hogrun
	# 8 MiB: a crun frame (its first byte is 0), refused from its header, named.
	as_atk timeout -s KILL 60 python3 "$ATTACKER" bigframe "$EP" --size $((8 << 20)) \
		>"$T/atk/big8.out" 2>&1
	sed 's/^/8 MiB: /' "$T/atk/big8.out"
	grep -q '^answer frame of .* bytes before authentication (limit 1024' "$T/atk/big8.out" ||
		fail "an 8 MiB frame before authentication was not refused from its header"
	# 33 MiB: its first byte reads as a TCPStore request; closed at once, nothing buffered.
	as_atk timeout -s KILL 60 python3 "$ATTACKER" bigframe "$EP" >"$T/atk/big33.out" 2>&1
	sed 's/^/33 MiB: /' "$T/atk/big33.out"
	[ "$(fig answer_ms "$T/atk/big33.out")" -lt 5000 ] ||
		fail "a 33 MiB frame before authentication was held $(fig answer_ms "$T/atk/big33.out") ms"
	# Token-less TCPStore SETs cannot pin the shared memory budget: a token holder's 16 MiB
	# value is stored meanwhile.
	as_atk timeout -s KILL 120 python3 "$ATTACKER" hog "$EP" --conns 20 --seconds 15 \
		--ready-file "$T/atk/hog.ready" >"$T/atk/hog.out" 2>"$T/atk/hog.err" &
	H=$!
	track $H
	wait_for 60 test -e "$T/atk/hog.ready"
	timeout -s KILL 120 python3 "$ATTACKER" bigset "$EP" --token-file "$T/token" --tries 3 \
		--timeout 30 >"$T/bigset.out" 2>"$T/bigset.err"
	ok=$(fig stored "$T/bigset.out")
	[ "$ok" = 3 ] || { cat "$T/bigset.err"; fail "a token holder's 16 MiB SET under the hog: $ok/3"; }
	echo "$CASE: 16 MiB SETs with the token while 20 hogs held: $ok/3"
	wait_pid 120 $H
	cat "$T/atk/hog.out"
	kill "$RDZVD_PID"
fi

CASE=weak-token
if cases $CASE; then
	echo "=== $CASE: tokens too weak to stand guessing are refused, naming their source"
	printf 'password\n' >"$T/weak.tok"
	chmod 0600 "$T/weak.tok"
	for src in "--token-file $T/weak.tok" "--token aaaaaaaaaaaaaaaaaaaa"; do
		# shellcheck disable=SC2086 # the flag and its value
		timeout -s KILL 20 "$RDZVD" --listen 127.0.0.1:0 $src >"$T/weak.out" 2>"$T/weak.err"
		rc=$?
		head -n 2 "$T/weak.err"
		[ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "crun-rdzvd $src: exit $rc"
		grep -q 'the token \(is [0-9]* bytes\|has too little entropy\)' "$T/weak.err" ||
			fail "crun-rdzvd $src: no message naming the weak token"
	done
fi

[ $nfail -eq 0 ] || { echo "preauth: $nfail failure(s)"; exit 1; }
echo "preauth: every case passed"
