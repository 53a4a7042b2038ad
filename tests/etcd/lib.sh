# SPDX-License-Identifier: MIT
# tests/etcd/lib.sh: real etcd members for the etcd tests (sourced after tests/agent/lib.sh's
# helpers): each member on its own 127.0.0.x address with ports held for it and a temp data dir,
# killed by PID on exit. Skips (77) only when there is no etcd binary or crun was built
# without its etcd backend.
. "$(dirname "$0")/../agent/lib.sh"

ETCD=${CRUN_ETCD_EXE:-$(command -v etcd 2>/dev/null || true)}
PROBE="python3 $SRC/tests/etcd/etcd_probe.py"
if [ -z "$ETCD" ] || [ ! -x "$ETCD" ]; then
	echo "SKIP: no etcd binary (Debian: apt-get install etcd-server)"
	exit 77
fi
if [ "${CRUN_HAVE_ETCD:-1}" != 1 ]; then
	echo "SKIP: crun was built without its etcd backend (libcurl and json-c not found)"
	exit 77
fi
# Members' data: in memory when /dev/shm is there (etcd fsyncs every commit; a loaded CI
# disk would make the tests measure the disk), else beside the other temp files.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
	ETCD_DATA=$(mktemp -d /dev/shm/crun-etcd-test.XXXXXX)
else
	ETCD_DATA=$T/etcd
	mkdir -p "$ETCD_DATA"
fi
trap 'cleanup; rm -rf "$ETCD_DATA"' EXIT

# etcd_certs DIR ADDR: a test PKI for a member serving https at ADDR, in DIR: ca.pem/ca.key,
# server.pem/server.key (CN and subjectAltName IP ADDR), client.pem/client.key (CN
# crun-client, clientAuth), cext (the client extensions, for more client certificates).
# Fails the test when openssl fails (openssl.log shows why).
etcd_certs() {
	local d=$1 addr=$2
	mkdir -p "$d"
	(cd "$d" && exec >openssl.log 2>&1 && umask 077 &&
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=crun-test-ca \
			-keyout ca.key -out ca.pem &&
		openssl req -newkey rsa:2048 -nodes -subj "/CN=$addr" -keyout server.key \
			-out server.csr &&
		printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$addr" >ext &&
		openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
			-extfile ext -out server.pem &&
		openssl req -newkey rsa:2048 -nodes -subj /CN=crun-client -keyout client.key \
			-out client.csr &&
		printf 'extendedKeyUsage=clientAuth\n' >cext &&
		openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
			-extfile cext -out client.pem) || { cat "$d/openssl.log" >&2; fail "openssl"; }
	chmod 644 "$d/ca.pem" "$d/server.pem" "$d/client.pem"
}

MEMBERS=0
declare -a M_ADDR M_CPORT M_PPORT M_PID

# member_url I: member I's client URL (https when ETCD_SCHEME=https; ETCD_EXTRA then holds
# etcd's TLS flags).
member_url() { echo "${ETCD_SCHEME:-http}://${M_ADDR[$1]}:${M_CPORT[$1]}"; }

# start_member I: (re)start member I with the cluster set up by start_cluster.
start_member() {
	local i=$1
	"$ETCD" --name "m$i" --data-dir "$ETCD_DATA/m$i" \
		--listen-client-urls "$(member_url "$i")" --advertise-client-urls "$(member_url "$i")" \
		--listen-peer-urls "http://${M_ADDR[$i]}:${M_PPORT[$i]}" \
		--initial-advertise-peer-urls "http://${M_ADDR[$i]}:${M_PPORT[$i]}" \
		--initial-cluster "$ETCD_CLUSTER" --initial-cluster-state new \
		--initial-cluster-token "crun-test-$$" --logger zap --log-level warn \
		--log-outputs stderr ${ETCD_EXTRA:-} >>"$T/etcd-m$i.log" 2>&1 &
	M_PID[$i]=$!
	track $!
}

member_healthy() { $PROBE "$(member_url "$1")" health 2>/dev/null; }
all_healthy() {
	local i
	for ((i = 0; i < MEMBERS; i++)); do
		[ -z "${M_PID[$i]}" ] || member_healthy "$i" || return 1
	done
}

# start_cluster N: N members on 127.0.0.21, .22, ...; waits until each answers healthy.
# Sets ETCD_EP (the member list for --rdzv-endpoint) and URL0 (member 0's client URL).
start_cluster() {
	local n=$1 i ports
	MEMBERS=$n
	ETCD_CLUSTER=""
	ETCD_EP=""
	for ((i = 0; i < n; i++)); do
		M_ADDR[$i]=127.0.0.$((21 + i))
		# Held for the whole test: a restarted member binds them again.
		hold_ports ports "${M_ADDR[$i]}" 2
		M_CPORT[$i]=${ports% *}
		M_PPORT[$i]=${ports#* }
		ETCD_CLUSTER="$ETCD_CLUSTER${ETCD_CLUSTER:+,}m$i=http://${M_ADDR[$i]}:${M_PPORT[$i]}"
		ETCD_EP="$ETCD_EP${ETCD_EP:+,}${M_ADDR[$i]}:${M_CPORT[$i]}"
	done
	for ((i = 0; i < n; i++)); do
		start_member "$i"
	done
	wait_for 60 all_healthy
	URL0=$(member_url 0)
	note "etcd: $n member(s) at $ETCD_EP"
}

# kill_member I: SIGKILL member I and reap it.
kill_member() {
	kill -9 "${M_PID[$1]}" 2>/dev/null
	wait "${M_PID[$1]}" 2>/dev/null
	M_PID[$1]=""
}

# leader: the index of the member that leads now (waits up to 20 s for one).
leader() {
	local i deadline=$(($(now_ms) + 20000))
	while [ "$(now_ms)" -lt $deadline ]; do
		for ((i = 0; i < MEMBERS; i++)); do
			if [ -n "${M_PID[$i]}" ] && $PROBE "$(member_url "$i")" leader 2>/dev/null; then
				echo "$i"
				return 0
			fi
		done
		sleep 0.1
	done
	fail "no etcd leader within 20 s"
}

# live_url: the client URL of some member still running.
live_url() {
	local i
	for ((i = 0; i < MEMBERS; i++)); do
		[ -z "${M_PID[$i]}" ] || { member_url "$i"; return 0; }
	done
	fail "no etcd member is running"
}

# etcd_rss_kb: the resident memory of every running member, summed, in KiB.
etcd_rss_kb() {
	local i sum=0 kb
	for ((i = 0; i < MEMBERS; i++)); do
		[ -n "${M_PID[$i]}" ] || continue
		kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/${M_PID[$i]}/status")
		sum=$((sum + kb))
	done
	echo $sum
}

# etcd_agents ID NNODES NPROC ARGS...: start NNODES agents (127.0.0.2...) of job ID through
# etcd in the background; their pids in APIDS.
etcd_agents() {
	local id=$1 nn=$2 np=$3 i
	shift 3
	APIDS=()
	for ((i = 0; i < nn; i++)); do
		etcd_agent "$id" "$i" "$nn" "$np" "$@"
	done
}

# etcd_agent ID I NNODES NPROC ARGS...: agent I (127.0.0.I+2) of job ID; appends to APIDS.
etcd_agent() {
	local id=$1 i=$2 nn=$3 np=$4
	shift 4
	"$CRUN" --nnodes "$nn" --nproc-per-node "$np" --rdzv-backend etcd \
		--rdzv-endpoint "$ETCD_EP" --rdzv-id "$id" --local-addr 127.0.0.$((i + 2)) \
		--rdzv-conf "${CONF:-last_call_timeout=1}" "$@" >"$T/$id.$i.out" 2>"$T/$id.$i.err" &
	APIDS[$i]=$!
	track $!
}

# wait_agents SECONDS: wait for every agent in APIDS; sets RCS ("0 0").
wait_agents() {
	local p
	RCS=""
	for p in "${APIDS[@]}"; do
		wait_pid "$1" "$p"
		RCS="$RCS $RC"
	done
	RCS=${RCS# }
}

# job_keys ID: how many keys job ID has in etcd now.
job_keys() { $PROBE "$(live_url)" keys "/crun/$1/"; }
