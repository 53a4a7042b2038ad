# SPDX-License-Identifier: MIT
# tools/fanout.sh: what crun-pdsh and crun-ssh share (sourced, bash): options, host lists,
# hostfiles, --include/--exclude, forwarded environment, the token, the node script that each
# host runs (check, start, stop by run id), the reachability report and the exit status.
#
# The sourcing script sets FO_PROG (its name), FO_VERSION and FO_TOKEN_MODE (stdin: the token
# goes on the transport's standard input; path: each host reads the token file's path) and
# defines:
#   fo_transport_option ARGS...  consume one transport option: set FO_SHIFT (words used) or 0
#   fo_transport_usage           print its options for --help
#   fo_transport_check           run "check" on every host: fill FO_OUT_<i>, FO_ERR_<i>, FO_RC_<i>
#   fo_transport_launch          start every host's agent in the background
#   fo_transport_wait            wait for them (calling fo_failed when one fails); sets
#                                FO_FIRST_RC and FO_FIRST_HOST
#   fo_transport_stop HOW [quiet]  run "stop" (term or force) on every host
#   fo_transport_kill            the third signal: end the local transport processes
#   fo_transport_dry_run         print how each host is reached
# docs/fanout.md describes the design; crun-pdsh(1) and crun-ssh(1) the options.
# shellcheck shell=bash
# shellcheck disable=SC2034,SC2153 # FO_* are shared with the sourcing script, both ways

set -u

FO_HOSTS=()        # host names, in order; the first hosts the store
FO_SLOTS=()        # slots per host from a hostfile ("" when not given)
FO_ENV=()          # NAME=VALUE to set on every host
FO_EXPORTS=()      # --export arguments, in order
FO_ENV_FILES=()    # --env-file arguments, in order
FO_CRUN_ARGS=()    # what follows "--"
FO_HOSTLIST=""
FO_HOSTFILE=""
FO_INCLUDE=""
FO_EXCLUDE=""
FO_RUN_ID=""
FO_ENDPOINT=""     # HOST or HOST:PORT from --rdzv-endpoint
FO_PORT=""         # --port; "auto" when neither gives one
FO_TOKEN_FILE=""
FO_CRUN=crun
FO_TIMEOUT=10
FO_DRY_RUN=0
FO_SIGNALS=0
FO_SIG=0
FO_TMP=""
FO_FAILED=0
# After a host fails, crun ends the job on the others by itself (a failed round, a lost store);
# hosts still running this long after are stopped (an agent that failed before the round
# formed would leave the others waiting for their join timeout).
FO_FAIL_GRACE=10

fo_err() {
	echo "$FO_PROG: $*" >&2
}

# fo_usage_error MSG: a bad command line: exit 2.
fo_usage_error() {
	fo_err "$*"
	echo "Try '$FO_PROG --help'." >&2
	exit 2
}

fo_die() {
	fo_err "$*"
	exit 1
}

# fo_q WORD: WORD quoted for a POSIX shell.
fo_q() {
	printf "'%s'" "${1//\'/\'\\\'\'}"
}

# fo_expand_item ITEM: one pdsh host-list item (prefix[1-3,07]suffix, groups nest left to
# right) as lines; returns 1 when it is malformed.
fo_expand_item() {
	local item=$1 pre rest rng post part lo hi n w
	local -a parts
	if [[ $item != *'['* ]]; then
		[[ $item != *']'* && -n $item ]] || return 1
		printf '%s\n' "$item"
		return 0
	fi
	pre=${item%%\[*}
	rest=${item#*\[}
	[[ $rest == *']'* ]] || return 1
	rng=${rest%%\]*}
	post=${rest#*\]}
	IFS=, read -ra parts <<<"$rng"
	[ ${#parts[@]} -gt 0 ] || return 1
	for part in "${parts[@]}"; do
		if [[ $part =~ ^([0-9]+)-([0-9]+)$ ]]; then
			lo=${BASH_REMATCH[1]}
			hi=${BASH_REMATCH[2]}
			w=${#lo}
			((10#$lo <= 10#$hi && 10#$hi - 10#$lo < 100000)) || return 1
			for ((n = 10#$lo; n <= 10#$hi; n++)); do
				fo_expand_item "$pre$(printf '%0*d' "$w" "$n")$post" || return 1
			done
		elif [[ $part =~ ^[0-9]+$ ]]; then
			fo_expand_item "$pre$part$post" || return 1
		else
			return 1
		fi
	done
}

# fo_expand_hosts LIST: a pdsh host list (items separated by commas outside brackets) as lines.
fo_expand_hosts() {
	local list=$1 depth=0 cur="" c i
	for ((i = 0; i < ${#list}; i++)); do
		c=${list:i:1}
		case $c in
		'[') depth=$((depth + 1)) ;;
		']') depth=$((depth - 1)) ;;
		esac
		if [ "$c" = , ] && [ $depth -eq 0 ]; then
			fo_expand_item "$cur" || return 1
			cur=""
		else
			cur+=$c
		fi
	done
	fo_expand_item "$cur"
}

# fo_hostport HOST PORT: "HOST:PORT", or "[HOST]:PORT" for an IPv6 address (crun's syntax).
fo_hostport() {
	if [[ $1 == *:* ]]; then
		echo "[$1]:$2"
	else
		echo "$1:$2"
	fi
}

# fo_read_hostfile FILE: DeepSpeed/Open MPI hostfile lines "HOST [slots=N]" or MPICH's
# "HOST:N", '#' comments, blank lines; fills FO_HOSTS and FO_SLOTS.
fo_read_hostfile() {
	local file=$1 line n=0 host slots word h
	local -a words
	[ -r "$file" ] || fo_usage_error "--hostfile $file: cannot read it"
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		line=${line%%#*}
		read -ra words <<<"$line"
		[ ${#words[@]} -gt 0 ] || continue
		host=${words[0]}
		slots=""
		# MPICH (Hydra): "host:N". One colon only, so an IPv6 address is never split.
		if [[ $host =~ ^([^:]+):([0-9]+)$ ]]; then
			host=${BASH_REMATCH[1]}
			slots=${BASH_REMATCH[2]}
			[ ${#words[@]} -eq 1 ] ||
				fo_usage_error "$file:$n: '${words[1]}': nothing may follow MPICH's HOST:N"
		fi
		for word in "${words[@]:1}"; do
			case $word in
			slots=*) slots=${word#slots=} ;;
			max_slots=* | max-slots=*) ;; # MPI's cap on oversubscription: not ours
			*) fo_usage_error "$file:$n: '$word': expected slots=N after the host name" ;;
			esac
		done
		[[ -z $slots || $slots =~ ^[1-9][0-9]{0,4}$ ]] ||
			fo_usage_error "$file:$n: slots: expected a positive integer, got '$slots'"
		[[ $host =~ ^[A-Za-z0-9._@%:-]+$ ]] ||
			fo_usage_error "$file:$n: '$host' is not a host name"
		# Colons left: an IPv6 address, or MPICH's HOST:N:IFNAME, which is not read.
		[[ $host != *:* || $host =~ ^[0-9A-Fa-f:.]+(%[A-Za-z0-9]+)?$ ]] ||
			fo_usage_error "$file:$n: '$host': expected HOST:N (MPICH) or an IPv6 address"
		for h in "${FO_HOSTS[@]}"; do
			[ "$h" != "$host" ] || fo_usage_error "$file:$n: host $host is listed twice"
		done
		FO_HOSTS+=("$host")
		FO_SLOTS+=("$slots")
	done <"$file"
	[ ${#FO_HOSTS[@]} -gt 0 ] || fo_usage_error "--hostfile $file: no hosts in it"
}

# fo_select SPEC KEEP: DeepSpeed's --include/--exclude "host1@host2": keep (KEEP=1) or drop
# (KEEP=0) the hosts named. Slot lists (host:0,1) are refused: whole hosts only.
fo_select() {
	local spec=$1 keep=$2 opt item i found
	local -a items hosts=() slots=()
	opt=$([ "$keep" = 1 ] && echo --include || echo --exclude)
	IFS=@ read -ra items <<<"$spec"
	[ ${#items[@]} -gt 0 ] || fo_usage_error "$opt: empty"
	for item in "${items[@]}"; do
		[[ $item != *:* ]] || fo_usage_error "$opt $spec: slot lists ($item) are not" \
			"supported: select whole hosts (host1@host2), and --nproc-per-node"
		found=0
		for i in "${!FO_HOSTS[@]}"; do
			[ "${FO_HOSTS[$i]}" != "$item" ] || found=1
		done
		[ $found -eq 1 ] || fo_usage_error "$opt: host $item is not in the host list"
	done
	for i in "${!FO_HOSTS[@]}"; do
		found=0
		for item in "${items[@]}"; do
			[ "${FO_HOSTS[$i]}" != "$item" ] || found=1
		done
		if [ $found -eq "$keep" ]; then
			hosts+=("${FO_HOSTS[$i]}")
			slots+=("${FO_SLOTS[$i]}")
		fi
	done
	[ ${#hosts[@]} -gt 0 ] || fo_usage_error "$opt $spec leaves no host"
	FO_HOSTS=("${hosts[@]}")
	FO_SLOTS=("${slots[@]}")
}

# fo_env_set NAME=VALUE: add or replace one forwarded variable.
fo_env_set() {
	local name=${1%%=*} i
	[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fo_usage_error "environment: '$name' is not a variable name"
	case $name in
	CRUN_STORE_TOKEN | CRUN_STORE_TOKEN_FILE | CRUN_TOKEN_FILE)
		fo_usage_error "environment: $name is not forwarded: the token travels by --token-file" ;;
	esac
	for i in "${!FO_ENV[@]}"; do
		if [ "${FO_ENV[$i]%%=*}" = "$name" ]; then
			FO_ENV[i]=$1
			return 0
		fi
	done
	FO_ENV+=("$1")
}

# fo_read_env_file FILE: "NAME=VALUE" lines ("export " allowed, one pair of surrounding quotes
# removed), '#' comment lines, blank lines.
fo_read_env_file() {
	local file=$1 line n=0 value
	[ -r "$file" ] || fo_usage_error "--env-file $file: cannot read it"
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		line=${line#"${line%%[![:space:]]*}"}
		case $line in '' | '#'*) continue ;; esac
		line=${line#export }
		[[ $line =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] ||
			fo_usage_error "$file:$n: expected NAME=VALUE, got '$line'"
		value=${line#*=}
		if [[ ${#value} -ge 2 && ($value == \"*\" || $value == \'*\') ]]; then
			value=${value:1:${#value}-2}
		fi
		fo_env_set "${line%%=*}=$value"
	done <"$file"
}

# fo_collect_env: NCCL_*, CUDA_*, PYTHON*, CRUN_* from this environment (not the token's), then
# the env files, then --export, each later one winning.
fo_collect_env() {
	local name f e
	while IFS= read -r name; do
		case $name in
		CRUN_STORE_TOKEN | CRUN_STORE_TOKEN_FILE | CRUN_TOKEN_FILE) continue ;;
		NCCL_* | CUDA_* | PYTHON* | CRUN_*) fo_env_set "$name=${!name}" ;;
		esac
	done < <(compgen -e)
	for f in ${FO_ENV_FILES[@]+"${FO_ENV_FILES[@]}"}; do
		fo_read_env_file "$f"
	done
	for e in ${FO_EXPORTS[@]+"${FO_EXPORTS[@]}"}; do
		if [[ $e == *=* ]]; then
			fo_env_set "$e"
		else
			[[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fo_usage_error "--export: '$e' is not a variable name"
			[ -n "${!e+set}" ] || fo_usage_error "--export $e: not set here"
			fo_env_set "$e=${!e}"
		fi
	done
}

# fo_token_fpr FILE: crun's fingerprint of a token file (SHA-256 of its first line, 16 hex).
fo_token_fpr() {
	head -n 1 "$1" | tr -d '\n' | sha256sum | cut -c 1-16
}

# fo_token: resolve the token file as crun would (--token-file, $CRUN_TOKEN_FILE,
# $XDG_CONFIG_HOME/crun/token, ~/.config/crun/token), creating the default one (0600, a fresh
# 256-bit token) when it does not exist; check it is private; sets FO_TOKEN_FILE, FO_FPR.
fo_token() {
	local dir tmp mode
	if [ -z "$FO_TOKEN_FILE" ]; then
		if [ -n "${CRUN_TOKEN_FILE-}" ]; then
			FO_TOKEN_FILE=$CRUN_TOKEN_FILE
		elif [ -n "${XDG_CONFIG_HOME-}" ]; then
			FO_TOKEN_FILE=$XDG_CONFIG_HOME/crun/token
		else
			FO_TOKEN_FILE=${HOME:?HOME is not set}/.config/crun/token
		fi
		if [ ! -e "$FO_TOKEN_FILE" ] && [ $FO_DRY_RUN -eq 0 ]; then
			dir=$(dirname -- "$FO_TOKEN_FILE")
			(umask 077 && mkdir -p -- "$dir") || fo_die "token: cannot create $dir"
			tmp=$(umask 077 && mktemp "$dir/.token.XXXXXX") || fo_die "token: cannot write in $dir"
			if ! { od -An -tx1 -N32 /dev/urandom | tr -d ' \n' && echo; } >"$tmp"; then
				rm -f -- "$tmp"
				fo_die "token: cannot write $tmp"
			fi
			# link(): when two launchers start at once on a shared home, one token wins.
			ln -- "$tmp" "$FO_TOKEN_FILE" 2>/dev/null
			rm -f -- "$tmp"
			fo_err "created token file $FO_TOKEN_FILE"
		fi
	fi
	case $FO_TOKEN_FILE in
	/*) ;;
	*) FO_TOKEN_FILE=$PWD/$FO_TOKEN_FILE ;;
	esac
	FO_FPR=-
	[ $FO_DRY_RUN -eq 1 ] && [ ! -e "$FO_TOKEN_FILE" ] && return 0
	{ [ -f "$FO_TOKEN_FILE" ] && [ -r "$FO_TOKEN_FILE" ]; } ||
		fo_die "token file $FO_TOKEN_FILE: not a readable file"
	[ -O "$FO_TOKEN_FILE" ] || fo_die "token file $FO_TOKEN_FILE: not owned by $(id -un)"
	mode=$(stat -c %a -- "$FO_TOKEN_FILE")
	[ $((8#$mode & 8#077)) -eq 0 ] ||
		fo_die "token file $FO_TOKEN_FILE: mode $mode lets others read it (chmod 600)"
	FO_FPR=$(fo_token_fpr "$FO_TOKEN_FILE")
}

# crun's long options that take no value: everything else before PROGRAM takes one.
FO_CRUN_FLAGS=" --standalone --module -m --no-python --run-path --virtual-local-rank
 --local-rank-arg --insecure --help -h --version "

# fo_crun_has OPTION: whether crun's options (before PROGRAM) in FO_CRUN_ARGS set OPTION
# (dashes and underscores alike, "--opt value" or "--opt=value").
fo_crun_has() {
	local want=${1//_/-} a name i=0
	while [ $i -lt ${#FO_CRUN_ARGS[@]} ]; do
		a=${FO_CRUN_ARGS[$i]}
		case $a in
		--) return 1 ;;
		-*) ;;
		*) return 1 ;; # PROGRAM
		esac
		name=${a%%=*}
		name=${name//_/-}
		[ "$name" != "$want" ] || return 0
		if [[ $a != *=* && $FO_CRUN_FLAGS != *" $name "* ]]; then
			i=$((i + 1))
		fi
		i=$((i + 1))
	done
	return 1
}

FO_USAGE_COMMON="Hosts:
  -w, --hosts LIST          hosts in pdsh syntax: node[01-16],gpu[1,3-4]
      --hostfile FILE       MPI/DeepSpeed hostfile: 'HOST slots=N' or 'HOST:N' lines, '#' comments;
                            slots sets --nproc-per-node unless crun's arguments give it
      --include HOST@HOST   only these hosts of the list (DeepSpeed syntax; whole hosts)
      --exclude HOST@HOST   all hosts of the list but these
Job:
      --rdzv-id ID          the run id on every host (default: generated, printed)
      --rdzv-endpoint HOST[:PORT]
                            the store (default: the first host; [IPv6]:PORT)
      --port PORT           the store's port (default: a free one on the first host)
      --token-file FILE     the token (default: crun's: \$CRUN_TOKEN_FILE,
                            \$XDG_CONFIG_HOME/crun/token or ~/.config/crun/token, created)
      --crun PATH           crun on the hosts (default: crun on their PATH)
Environment (NCCL_*, CUDA_*, PYTHON* and CRUN_* are forwarded from here):
      --env-file FILE       also set NAME=VALUE lines of FILE ('#' comments)
      --export VAR[=VALUE]  also forward VAR (its value here, or VALUE)
Other:
      --connect-timeout SECONDS
                            reachability check limit per host (default 10)
      --dry-run             print the plan and each host's command; start nothing
  -h, --help                print this help and exit
      --version             print the version and exit"

# fo_parse ARGS...: the command line; transport options go to fo_transport_option.
fo_parse() {
	local a v
	while [ $# -gt 0 ]; do
		a=$1
		v=""
		case $a in
		--*=*)
			v=${a#*=}
			a=${a%%=*}
			set -- "$a" "$v" "${@:2}"
			;;
		esac
		case $a in
		-h | --help)
			fo_help
			exit 0
			;;
		--version)
			echo "$FO_PROG (crun fan-out) $FO_VERSION"
			exit 0
			;;
		--dry-run) FO_DRY_RUN=1 ;;
		--)
			shift
			FO_CRUN_ARGS=("$@")
			break
			;;
		-w | --hosts | --hostfile | --include | --exclude | --rdzv-id | --rdzv-endpoint | --port | \
			--token-file | --crun | --env-file | --export | --connect-timeout)
			[ $# -ge 2 ] || fo_usage_error "$a needs a value"
			v=$2
			shift
			case $a in
			-w | --hosts) FO_HOSTLIST=${FO_HOSTLIST:+$FO_HOSTLIST,}$v ;;
			--hostfile) FO_HOSTFILE=$v ;;
			--include) FO_INCLUDE=$v ;;
			--exclude) FO_EXCLUDE=$v ;;
			--rdzv-id) FO_RUN_ID=$v ;;
			--rdzv-endpoint) FO_ENDPOINT=$v ;;
			--port) FO_PORT=$v ;;
			--token-file) FO_TOKEN_FILE=$v ;;
			--crun) FO_CRUN=$v ;;
			--env-file) FO_ENV_FILES+=("$v") ;;
			--export) FO_EXPORTS+=("$v") ;;
			--connect-timeout) FO_TIMEOUT=$v ;;
			esac
			;;
		*)
			FO_SHIFT=0
			fo_transport_option "$@"
			[ "$FO_SHIFT" -gt 0 ] || fo_usage_error "unknown option '$a'"
			shift $((FO_SHIFT - 1))
			;;
		esac
		shift
	done
	fo_settle
}

# fo_settle: check the options and derive hosts, endpoint, run id and environment.
fo_settle() {
	local out h i s0 seen a
	[ ${#FO_CRUN_ARGS[@]} -gt 0 ] || fo_usage_error "no crun arguments: $FO_PROG [OPTIONS] -- CRUN_ARGS..."
	[[ $FO_TIMEOUT =~ ^[1-9][0-9]{0,3}$ ]] || fo_usage_error "--connect-timeout: expected seconds, got '$FO_TIMEOUT'"
	if [ -n "$FO_HOSTFILE" ]; then
		[ -z "$FO_HOSTLIST" ] || fo_usage_error "-w and --hostfile cannot be combined"
		fo_read_hostfile "$FO_HOSTFILE"
	elif [ -n "$FO_HOSTLIST" ]; then
		out=$(fo_expand_hosts "$FO_HOSTLIST") || fo_usage_error "-w $FO_HOSTLIST: not a host list"
		while IFS= read -r h; do
			seen=0
			for i in ${FO_HOSTS[@]+"${FO_HOSTS[@]}"}; do
				[ "$i" != "$h" ] || seen=1
			done
			[ $seen -eq 1 ] || { FO_HOSTS+=("$h") && FO_SLOTS+=(""); }
		done <<<"$out"
	else
		fo_usage_error "no hosts: give -w LIST or --hostfile FILE"
	fi
	[ -z "$FO_INCLUDE" ] || [ -z "$FO_EXCLUDE" ] || fo_usage_error "--include and --exclude cannot be combined"
	[ -z "$FO_INCLUDE" ] || fo_select "$FO_INCLUDE" 1
	[ -z "$FO_EXCLUDE" ] || fo_select "$FO_EXCLUDE" 0
	for a in --nnodes --rdzv-id --rdzv-endpoint --rdzv-backend --token-file --node-rank \
		--standalone --master-addr --master-port; do
		! fo_crun_has "$a" || fo_usage_error "crun's $a is set by $FO_PROG: drop it after '--'" \
			"(the run id, endpoint and token have options of their own)"
	done
	# The slots of a hostfile set --nproc-per-node; crun refuses nodes of different shapes.
	FO_NPROC=""
	if ! fo_crun_has --nproc-per-node && [ -n "${FO_SLOTS[0]}" ]; then
		s0=${FO_SLOTS[0]}
		for i in "${!FO_HOSTS[@]}"; do
			[ "${FO_SLOTS[$i]}" = "$s0" ] || fo_usage_error "hosts have different slots" \
				"(${FO_HOSTS[0]} slots=$s0, ${FO_HOSTS[$i]} slots=${FO_SLOTS[$i]:-none}):" \
				"give --nproc-per-node after '--'"
		done
		FO_NPROC=$s0
	fi
	if [ -z "$FO_RUN_ID" ]; then
		FO_RUN_ID=crun-$(date -u +%Y%m%d-%H%M%S)-$(od -An -tx1 -N3 /dev/urandom | tr -d ' \n')
	fi
	[[ $FO_RUN_ID =~ ^[A-Za-z0-9._-]{1,128}$ && $FO_RUN_ID != rdzv ]] ||
		fo_usage_error "--rdzv-id '$FO_RUN_ID': use 1 to 128 of A-Z a-z 0-9 . _ -"
	FO_EP_HOST=${FO_HOSTS[0]}
	if [ -n "$FO_ENDPOINT" ]; then
		local ep_port=""
		if [[ $FO_ENDPOINT =~ ^\[([^]]+)\](:(.*))?$ ]]; then
			FO_EP_HOST=${BASH_REMATCH[1]} # [IPv6]:PORT, as crun writes it
			ep_port=${BASH_REMATCH[3]}
		elif [[ $FO_ENDPOINT == *:*:* ]]; then
			FO_EP_HOST=$FO_ENDPOINT # a bare IPv6 address: no port
		elif [[ $FO_ENDPOINT == *:* ]]; then
			FO_EP_HOST=${FO_ENDPOINT%:*}
			ep_port=${FO_ENDPOINT##*:}
		else
			FO_EP_HOST=$FO_ENDPOINT
		fi
		[[ $FO_ENDPOINT != *: ]] ||
			fo_usage_error "--rdzv-endpoint '$FO_ENDPOINT': expected a port after the colon"
		if [ -n "$ep_port" ]; then
			[ -z "$FO_PORT" ] || fo_usage_error "--port and a port in --rdzv-endpoint"
			FO_PORT=$ep_port
		fi
	fi
	[ -n "$FO_PORT" ] || FO_PORT=auto
	[[ $FO_PORT == auto || ($FO_PORT =~ ^[1-9][0-9]{0,4}$ && $FO_PORT -lt 65536) ]] ||
		fo_usage_error "--port: expected 1..65535, got '$FO_PORT'"
	fo_collect_env
}

# The script every host runs: sh -c "$FO_NODE_SCRIPT" crun-fanout OP RUN_ID CRUN ARGS...
#   check TOKEN_FILE|- PORT|auto   print "crun-fanout-ok FPR PORT VERSION" or "...-fail WHY"
#   start TOKEN_FILE|- NAME=VALUE... -- CRUN_ARGS...
#                                  run crun; "-": the token is the first line of stdin, kept
#                                  in a 0600 file while crun runs; the pid is kept in
#                                  RUNDIR/RUN_ID.HOST.PID.pid; "crun-fanout-exit N" at the end
#   stop term|force                SIGTERM each agent of RUN_ID named by a pid file (whose
#                                  /proc cmdline has --rdzv-id RUN_ID); term only once per
#                                  agent (the file is renamed), force again; a pid file whose
#                                  process is gone is removed
# RUNDIR is $XDG_RUNTIME_DIR/crun-fanout, else /tmp/crun-fanout-UID, made 0700 and checked.
# (pdsh -R exec replaces %h, %u and %n in its arguments: the script must not contain them.)
# shellcheck disable=SC2016 # expanded on the host, by its sh
FO_NODE_SCRIPT='set -u
op=$1 run=$2 crun=$3
shift 3
say() { printf "crun-fanout-%s\n" "$*"; }
if [ -n "${XDG_RUNTIME_DIR:-}" ] && [ -d "$XDG_RUNTIME_DIR" ] && [ -O "$XDG_RUNTIME_DIR" ]; then
	rdir=$XDG_RUNTIME_DIR/crun-fanout
else
	rdir=/tmp/crun-fanout-$(id -u)
fi
umask 077
mkdir "$rdir" 2>/dev/null
if [ -L "$rdir" ] || [ ! -d "$rdir" ] || [ ! -O "$rdir" ] || ! chmod 700 "$rdir"; then
	say "fail $rdir is not a private directory of $(id -un)"
	exit 125
fi
case $op in
check)
	tp=$1 port=$2 fpr=-
	if ! command -v "$crun" >/dev/null 2>&1; then
		say "fail $crun: command not found (PATH=$PATH)"
		exit 0
	fi
	ver=$("$crun" --version 2>&1 </dev/null | head -n 1)
	if [ "$tp" != - ]; then
		if [ ! -r "$tp" ]; then
			say "fail token file $tp: not readable here"
			exit 0
		fi
		fpr=$(head -n 1 "$tp" | tr -d "\n" | sha256sum | cut -c 1-16)
	fi
	if [ "$port" = auto ]; then
		port=29400
		n=0
		while command -v ss >/dev/null 2>&1 && [ $n -lt 64 ]; do
			p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 30000))
			if [ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ]; then
				port=$p
				break
			fi
			n=$((n + 1))
		done
	fi
	say "ok $fpr $port ${ver:-unknown version}"
	;;
start)
	tp=$1
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		export "${1?}"
		shift
	done
	[ $# -eq 0 ] || shift
	tag=$rdir/$run.$(uname -n).$$
	if [ "$tp" = - ]; then
		tp=$tag.token
		if ! IFS= read -r tok; then
			say "fail no token on standard input"
			say "exit 125"
			exit 125
		fi
		printf "%s\n" "$tok" >"$tp"
		tok=
	fi
	sig=0
	trap "sig=1" INT
	trap "sig=1; kill -TERM \$pid 2>/dev/null" HUP TERM
	"$crun" --token-file "$tp" "$@" </dev/null &
	pid=$!
	echo "$pid" >"$tag.pid"
	while :; do
		sig=0
		wait "$pid"
		rc=$?
		[ $sig -eq 1 ] || break
	done
	rm -f "$tag.pid" "$tag.pid.stop"
	[ "$tp" != "$tag.token" ] || rm -f "$tp"
	say "exit $rc"
	exit "$rc"
	;;
stop)
	n=0
	for f in "$rdir/$run".*.pid "$rdir/$run".*.pid.stop; do
		[ -f "$f" ] || continue
		case $f in
		*.stop)
			[ "$1" = force ] || continue
			g=$f
			;;
		*)
			g=$f.stop
			mv "$f" "$g" 2>/dev/null || continue
			;;
		esac
		pid=$(cat "$g" 2>/dev/null)
		case $pid in "" | *[!0-9]*) continue ;; esac
		if tr "\000" "\n" 2>/dev/null <"/proc/$pid/cmdline" | grep -A 1 -xF -- --rdzv-id |
			grep -qxF -- "$run"; then
			kill -TERM "$pid" 2>/dev/null && say "stopped $pid" && n=$((n + 1))
		else
			# Its script was killed before it could clean up (the launcher lost).
			rm -f "$g" "${g%.pid*}.token"
		fi
	done
	say "stop $n"
	;;
*)
	say "fail unknown operation $op"
	exit 125
	;;
esac'

# fo_node_cmd OP ARGS...: the quoted command line that runs the node script; sets FO_CMD.
fo_node_cmd() {
	local a
	FO_CMD="sh -c $(fo_q "$FO_NODE_SCRIPT") crun-fanout $(fo_q "$1") $(fo_q "$FO_RUN_ID") $(fo_q "$FO_CRUN")"
	shift
	for a in "$@"; do
		FO_CMD+=" $(fo_q "$a")"
	done
}

# fo_start_args TOKEN_ARG [INDEX]: the arguments of "start" (after the operation); with the
# host's INDEX (a launcher that starts each host on its own) and the endpoint on the first
# host, that host is told to host the store (is_host=1) and the others not to, rather than
# each agent deciding from its own addresses (which misses a name or alias of that host).
fo_start_args() {
	local -a args=("${FO_CRUN_ARGS[@]}")
	local i=0 a is
	FO_START=("$1" ${FO_ENV[@]+"${FO_ENV[@]}"} -- --nnodes ${#FO_HOSTS[@]})
	[ -z "$FO_NPROC" ] || FO_START+=(--nproc-per-node "$FO_NPROC")
	FO_START+=(--rdzv-backend c10d --rdzv-endpoint "$(fo_hostport "$FO_EP_HOST" "$FO_PORT")" --rdzv-id "$FO_RUN_ID")
	if [ $# -ge 2 ] && [ -z "$FO_ENDPOINT" ]; then
		is=is_host=$([ "$2" -eq 0 ] && echo 1 || echo 0)
		# crun keeps the last --rdzv-conf: add to the user's, unless it says is_host itself.
		while [ $i -lt ${#args[@]} ]; do
			a=${args[$i]}
			case $a in
			--rdzv-conf | --rdzv_conf)
				[[ ${args[i + 1]-} == *is_host=* ]] || args[i + 1]=${args[i + 1]-}${args[i + 1]:+,}$is
				is=""
				break
				;;
			--rdzv-conf=* | --rdzv_conf=*)
				[[ $a == *is_host=* ]] || args[i]=$a,$is
				is=""
				break
				;;
			--) break ;;
			-*) [[ $a == *=* || $FO_CRUN_FLAGS == *" ${a//_/-} "* ]] || i=$((i + 1)) ;;
			*) break ;;
			esac
			i=$((i + 1))
		done
		[ -z "$is" ] || FO_START+=(--rdzv-conf "$is")
	fi
	FO_START+=("${args[@]}")
}

# fo_report_check: read each host's check answer (FO_OUT_i, FO_ERR_i, FO_RC_i), name every
# host that failed and why; set the port when the first host chose it. Exits 1 on a failure.
fo_report_check() {
	local i h out rc why fpr port ver bad=0 line
	for i in "${!FO_HOSTS[@]}"; do
		h=${FO_HOSTS[$i]}
		out=FO_OUT_$i
		rc=FO_RC_$i
		line=$(grep -a '^crun-fanout-' <<<"${!out}" | tail -n 1)
		case $line in
		crun-fanout-ok\ *)
			read -r _ fpr port ver <<<"$line"
			if [ "$FO_TOKEN_MODE" = path ] && [ "$fpr" != "$FO_FPR" ]; then
				fo_err "$h: token file $FO_TOKEN_FILE has fingerprint $fpr there, $FO_FPR here" \
					"(copy it: pdcp -p, or a shared home)"
				bad=$((bad + 1))
				continue
			fi
			[ "$i" -ne 0 ] || FO_CHOSEN_PORT=$port
			[ "$i" -eq 0 ] || [ "$ver" = "$FO_VER0" ] ||
				fo_err "warning: $h runs $ver, ${FO_HOSTS[0]} runs $FO_VER0"
			[ "$i" -ne 0 ] || FO_VER0=$ver
			;;
		crun-fanout-fail\ *)
			fo_err "$h: ${line#crun-fanout-fail }"
			bad=$((bad + 1))
			;;
		*)
			why=FO_ERR_$i
			why=$(grep -av '^[[:space:]]*$' <<<"${!why}" | tail -n 3 | paste -sd ';' | sed 's/;/; /g')
			if [ "${!rc}" = 124 ]; then
				why="no answer in ${FO_TIMEOUT} s${why:+: $why}"
			fi
			fo_err "$h: unreachable: ${why:-exit status ${!rc}, no answer}"
			bad=$((bad + 1))
			;;
		esac
	done
	if [ $bad -gt 0 ]; then
		fo_err "$bad of ${#FO_HOSTS[@]} hosts failed the check; nothing was started"
		exit 1
	fi
	[ "$FO_PORT" != auto ] || FO_PORT=$FO_CHOSEN_PORT
}

# fo_on_signal SIGNUM: the first SIGINT/SIGTERM stops every host's agent by run id (crun stops
# its workers gracefully), the second again (crun then kills them), the third gives up.
fo_on_signal() {
	FO_SIGNALS=$((FO_SIGNALS + 1))
	FO_SIG=$1
	case $FO_SIGNALS in
	1)
		fo_err "stopping run $FO_RUN_ID on ${#FO_HOSTS[@]} hosts (again to kill the workers)"
		fo_transport_stop term
		;;
	2)
		fo_err "stopping run $FO_RUN_ID now (again to leave without waiting)"
		fo_transport_stop force
		;;
	*)
		fo_err "not waiting for the hosts; run $FO_RUN_ID may still run there"
		fo_transport_kill
		exit $((128 + FO_SIG))
		;;
	esac
}

# fo_failed: a host failed: arm the timer that stops the others (SIGUSR1 to this script).
# Called from the main shell or from its subshells ($$ is the script in all), two of which
# (crun-pdsh's output and error filters) can see one failure at once: the first to create the
# lock file arms the one timer, which fo_cleanup stops.
fo_failed() {
	(set -C && : >"$FO_TMP/timer.lock") 2>/dev/null || return 0
	(
		trap 'kill "$s" 2>/dev/null; exit 0' TERM
		sleep "$FO_FAIL_GRACE" &
		s=$!
		wait $s
		kill -USR1 $$ 2>/dev/null
	) &
	echo $! >"$FO_TMP/timer.pid"
}

fo_on_timer() {
	[ $FO_SIGNALS -eq 0 ] && [ $FO_FAILED -eq 0 ] || return 0
	FO_FAILED=1
	fo_err "a host failed $FO_FAIL_GRACE s ago: stopping run $FO_RUN_ID on the hosts still running"
	fo_transport_stop term quiet
}

# fo_cleanup: stop the timer and wait (bounded) until it is gone: it is a fork of this script,
# with the run id on its command line, and nothing of the run may outlive the launcher.
fo_cleanup() {
	local t n=0
	if [ -n "$FO_TMP" ] && [ -s "$FO_TMP/timer.pid" ]; then
		t=$(cat "$FO_TMP/timer.pid")
		kill -TERM "$t" 2>/dev/null
		wait "$t" 2>/dev/null # reaped here when it is this shell's child
		# else a subshell's orphan: its new parent reaps it
		while [ $n -lt 250 ] && [ -e "/proc/$t" ] &&
			[ "$(sed 's/.*) \(.\).*/\1/' "/proc/$t/stat" 2>/dev/null)" != Z ]; do
			sleep 0.02
			n=$((n + 1))
		done
	fi
	[ -z "$FO_TMP" ] || rm -rf -- "$FO_TMP"
}

# fo_main ARGS...: the whole run: parse, token, check, launch, wait, exit status.
fo_main() {
	local i
	fo_parse "$@"
	fo_token
	if [ $FO_DRY_RUN -eq 1 ]; then
		echo "run id: $FO_RUN_ID"
		echo "hosts (${#FO_HOSTS[@]}): ${FO_HOSTS[*]}"
		echo "endpoint: $(fo_hostport "$FO_EP_HOST" "$FO_PORT")"
		echo "nproc per node: ${FO_NPROC:-"as crun's arguments say"}"
		echo "token file: $FO_TOKEN_FILE (fingerprint $FO_FPR, $FO_TOKEN_MODE)"
		for i in ${FO_ENV[@]+"${FO_ENV[@]}"}; do
			echo "env: $i"
		done
		fo_start_args "$([ "$FO_TOKEN_MODE" = path ] && echo "$FO_TOKEN_FILE" || echo -)"
		printf 'start:'
		printf ' %q' "${FO_START[@]}"
		echo
		fo_transport_dry_run
		exit 0
	fi
	FO_TMP=$(mktemp -d "${TMPDIR:-/tmp}/$FO_PROG.XXXXXX") || fo_die "cannot make a temp dir"
	trap fo_cleanup EXIT
	fo_transport_check
	fo_report_check
	fo_err "run $FO_RUN_ID: ${#FO_HOSTS[@]} hosts, store at $(fo_hostport "$FO_EP_HOST" "$FO_PORT")"
	trap 'fo_on_signal 2' INT
	trap 'fo_on_signal 15' TERM
	trap 'fo_on_signal 1' HUP
	trap fo_on_timer USR1
	fo_start_args "$([ "$FO_TOKEN_MODE" = path ] && echo "$FO_TOKEN_FILE" || echo -)"
	fo_transport_launch
	fo_transport_wait
	if [ $FO_SIGNALS -gt 0 ]; then
		exit $((128 + FO_SIG))
	fi
	if [ "$FO_FIRST_RC" -ne 0 ]; then
		fo_err "first failure: $FO_FIRST_HOST exited $FO_FIRST_RC"
	fi
	exit "$FO_FIRST_RC"
}
