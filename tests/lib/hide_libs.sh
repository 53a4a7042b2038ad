# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/hide_libs.sh: run programs where shared libraries cannot be loaded (sourced after
# tests/lib/proc.sh and expect.sh): the libraries are bound over by empty files in a private
# mount namespace of the command's own, so the loader refuses them and nothing else on the
# machine sees a change. Used by tests/etcd/curl.sh (libcurl, etcd only) and
# tests/agent/nossl.sh (OpenSSL, TLS only). Needs root (unshare -m).

# hide_libs SONAME...: set HIDE, the command prefix that hides every path the loader's cache
# lists for each SONAME ("${HIDE[@]}" CMD...: unshare and sh exec, so $! of a background one is
# CMD itself). Exits 77 (skip) when a SONAME is not in the cache or unshare -m is refused.
hide_libs() {
	local so paths="" p
	for so in "$@"; do
		p=$(ldconfig -p 2>/dev/null | sed -n "s/^[[:space:]]*${so//./\\.} (.*) => //p" | sort -u)
		[ -n "$p" ] || { echo "SKIP: no $so in the loader's cache to hide"; exit 77; }
		paths="$paths $p"
	done
	unshare -m true 2>/dev/null || { echo "SKIP: unshare -m refused (needs root)"; exit 77; }
	HIDE=(unshare -m --propagation private sh -c
		'for l in $0; do mount --bind /dev/null "$l" || exit 99; done; exec "$@"' "${paths# }")
}

# hidden SECONDS CMD...: CMD with the libraries hidden, killed after SECONDS.
hidden() {
	local limit=$1
	shift
	timeout -s KILL "$limit" "${HIDE[@]}" "$@"
}

# fails_at_once WHAT MESSAGE CMD...: CMD, with the libraries hidden, exits non-zero within
# 20 s and says MESSAGE (a fixed string naming the library it could not load).
fails_at_once() {
	local what=$1 message=$2 t0 dt rc
	shift 2
	t0=$(now_ms)
	hidden 60 "$@" >"$T/hidden.out" 2>"$T/hidden.err"
	rc=$?
	dt=$(($(now_ms) - t0))
	cat "$T/hidden.err" >&2
	[ $rc -ne 0 ] || fail "$what with the libraries hidden exited 0"
	[ $rc -ne 137 ] || fail "$what with the libraries hidden ran past 60 s"
	expect_grep "$message" "$T/hidden.err" "$what: the missing library named"
	[ $dt -lt 20000 ] || fail "$what with the libraries hidden took $dt ms to fail (not at once)"
}
