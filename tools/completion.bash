# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tools/completion.bash: bash completion for crun, crun status, crun-rdzvd, crun-store,
# crun-pdsh and crun-ssh, installed as one file per command name under bash-completion's
# completions folder. The options come from each program's --help, which its option table
# prints (src/opt.c), so a new option completes without editing this file:
#   "  -e, --rdzv-endpoint, --endpoint HOST[:PORT]   text"   (names, then a value's METAVAR)
# A value is completed from its METAVAR: a|b|c (the listed words), FILE/PATH/PEM (files),
# DIR (folders); others take free text. The words are asked of the program once per shell.

# _crun_opts PROG [SUBCOMMAND]: "NAME METAVAR" lines (METAVAR "-" for a flag), cached.
_crun_opts() {
	local key=${1//[^a-zA-Z0-9]/_}${2:+_$2} var
	var=_crun_cache_$key
	if [ -z "${!var-}" ]; then
		printf -v "$var" '%s' "$("$1" ${2:+"$2"} --help 2>/dev/null | awk '
			/^ +-/ {
				line = $0
				sub(/^ +/, "", line)
				sub(/  +.*/, "", line)          # the option column only
				n = split(line, w, / /)
				meta = "-"
				names = ""
				for (i = 1; i <= n; i++) {
					t = w[i]; sub(/,$/, "", t)
					if (t ~ /^--?[A-Za-z]/) names = names " " t
					else if (t != "") meta = t
				}
				m = split(names, nm, / /)
				for (i = 1; i <= m; i++) if (nm[i] != "") print nm[i], meta
			}')"
	fi
	printf '%s\n' "${!var}"
}

# _crun_values METAVAR CUR: COMPREPLY for an option's value.
_crun_values() {
	local meta=$1 cur=$2
	case $meta in
	*://*) ;; # an endpoint: free text
	*DIR*) mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
	*FILE* | *PATH* | *PEM* | *.yaml*) mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
	*'|'*)
		if [[ $meta =~ ^[a-z0-9_|-]+$ ]]; then
			mapfile -t COMPREPLY < <(compgen -W "${meta//|/ }" -- "$cur")
		fi
		;;
	esac
}

# _crun_complete PROG [SUBCOMMAND]: complete the current word of PROG's command line.
_crun_complete_with() {
	local prog=$1 sub=${2-} cur prev opts meta name w
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD - 1]}
	COMPREPLY=()
	opts=$(_crun_opts "$prog" "$sub")
	# The value of the option before the cursor?
	if [[ $prev == -* ]]; then
		while read -r name meta; do
			if [ "$name" = "$prev" ] && [ "$meta" != "-" ]; then
				_crun_values "$meta" "$cur"
				return 0
			fi
		done <<<"$opts"
	fi
	if [[ $cur == -* ]]; then
		w=$(awk '{print $1}' <<<"$opts")
		mapfile -t COMPREPLY < <(compgen -W "$w" -- "$cur")
	elif [ "$prog" = crun ] && [ -z "$sub" ]; then
		# crun's operand: its program (a file or a command); "status" as the first word.
		mapfile -t COMPREPLY < <(compgen -c -f -- "$cur")
		if [ "$COMP_CWORD" -eq 1 ] && [[ status == "$cur"* ]]; then
			COMPREPLY+=(status)
		fi
	fi
	return 0
}

_crun_complete() {
	local prog=${COMP_WORDS[0]} i
	prog=${prog##*/}
	if [ "$prog" = crun ]; then
		# crun status ...: the subcommand's options; after crun's PROGRAM: the program's.
		if [ "${COMP_WORDS[1]-}" = status ] && [ "$COMP_CWORD" -gt 1 ]; then
			_crun_complete_with "${COMP_WORDS[0]}" status
			return 0
		fi
		for ((i = 1; i < COMP_CWORD; i++)); do
			case ${COMP_WORDS[i]} in
			--) return 0 ;;
			-*) ;;
			*)
				# an option's value, or the program (then the rest is its arguments)
				if ! _crun_takes_value "${COMP_WORDS[0]}" "${COMP_WORDS[i - 1]}"; then
					mapfile -t COMPREPLY < <(compgen -f -- "${COMP_WORDS[COMP_CWORD]}")
					return 0
				fi
				;;
			esac
		done
	fi
	_crun_complete_with "${COMP_WORDS[0]}"
}

# _crun_takes_value PROG WORD: WORD is an option of PROG that takes a value.
_crun_takes_value() {
	local name meta
	[[ $2 == -* ]] || return 1
	while read -r name meta; do
		[ "$name" = "$2" ] && [ "$meta" != "-" ] && return 0
	done <<<"$(_crun_opts "$1")"
	return 1
}

complete -F _crun_complete -o bashdefault -o default crun crun-rdzvd crun-store crun-pdsh crun-ssh
