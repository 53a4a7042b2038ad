#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/api/symbols.sh: the built libcrun-worker exports exactly worker_api/libcrun-worker.symbols
# (names, one per line, sorted), libcrun-worker.map lists the same names, each under a version,
# and the man page mentions every one, and lists every CRUN_E* code of <crun/error.h> in its
# ERRORS table with the right value.
# Usage: symbols.sh LIBRARY SYMBOLS_FILE MAP_FILE [MAN_PAGE]
set -eu

lib=$1
list=$2
map=$3
man=${4:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/crun-api-symbols.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C

if command -v nm >/dev/null 2>&1; then
	# "ADDR T name@@CRUN_WORKER_1.0"; the version node itself is an absolute ("A") symbol.
	nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' >"$tmp/raw"
elif command -v readelf >/dev/null 2>&1; then
	readelf --dyn-syms -W "$lib" |
		awk '$7 != "UND" && $7 != "ABS" && ($4 == "FUNC" || $4 == "OBJECT") { print $8 }' >"$tmp/raw"
else
	echo "symbols.sh: neither nm nor readelf found (binutils)" >&2
	exit 1
fi
sed 's/@.*//' "$tmp/raw" | sort -u >"$tmp/built"
grep -v '^#' "$list" | sed '/^[[:space:]]*$/d' >"$tmp/listed"
# Between "global:" and "local:", every "name;" entry, comments stripped.
sed 's,/\*.*\*/,,g' "$map" | awk '/global:/ { on = 1; next } /local:/ { on = 0 } on' |
	tr -d ' \t' | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\);$/\1/p' | sort >"$tmp/mapped"

rc=0
if ! sort -c "$tmp/listed" 2>/dev/null || [ -n "$(uniq -d "$tmp/listed")" ]; then
	echo "FAIL: $list is not sorted (LC_ALL=C sort) or repeats a name" >&2
	rc=1
fi
sort -u "$tmp/listed" >"$tmp/listed.sorted"

added=$(comm -13 "$tmp/listed.sorted" "$tmp/built")
removed=$(comm -23 "$tmp/listed.sorted" "$tmp/built")
if [ -n "$added" ]; then
	echo "FAIL: libcrun-worker exports symbols missing from $list (an ABI addition:" >&2
	echo "add them to the list and to the map if they are meant to be public):" >&2
	echo "$added" | sed 's/^/  + /' >&2
	rc=1
fi
if [ -n "$removed" ]; then
	echo "FAIL: symbols in $list that libcrun-worker no longer exports (an ABI break:" >&2
	echo "that needs a new soversion; remove them from the list only if that is meant):" >&2
	echo "$removed" | sed 's/^/  - /' >&2
	rc=1
fi
unversioned=$(grep -v '@' "$tmp/raw" || true)
if [ -n "$unversioned" ]; then
	echo "FAIL: exported without a symbol version (not in $map?):" >&2
	echo "$unversioned" | sed 's/^/  /' >&2
	rc=1
fi
if ! diff -u "$tmp/listed.sorted" "$tmp/mapped" >"$tmp/mapdiff"; then
	echo "FAIL: $map and $list disagree (- only in the list, + only in the map):" >&2
	tail -n +3 "$tmp/mapdiff" | grep '^[-+]' | sed 's/^/  /' >&2
	rc=1
fi
if sed 's,/\*.*\*/,,g' "$map" | awk '/global:/ { on = 1; next } /local:/ { on = 0 } on' |
	grep -q '[*?]'; then
	echo "FAIL: $map exports by wildcard; list every name" >&2
	rc=1
fi
if [ -n "$man" ]; then
	undocumented=$(while read -r sym; do
		grep -q "\\b$sym\\b" "$man" || echo "$sym"
	done <"$tmp/listed.sorted")
	if [ -n "$undocumented" ]; then
		echo "FAIL: exported but not documented in $man:" >&2
		echo "$undocumented" | sed 's/^/  /' >&2
		rc=1
	fi
fi
if [ -n "$man" ]; then
	# X(NAME, "...") rows of CRUN_ERROR_MAP, in order: CRUN_ENAME = -10000 + position.
	errh=$(dirname "$map")/../include/crun/error.h
	n=0
	for name in $(sed -n 's/^[[:space:]]*X(\([A-Z0-9]*\),.*/\1/p' "$errh"); do
		n=$((n + 1))
		if ! grep -A1 "^|  \*CRUN_E$name\*\$" "$man" | grep -q "^:  $((n - 10000))\$"; then
			echo "FAIL: CRUN_E$name ($((n - 10000))) is missing from the ERRORS table of $man" >&2
			rc=1
		fi
	done
	if [ "$n" -lt 10 ]; then
		echo "FAIL: found only $n codes in $errh" >&2
		rc=1
	fi
fi
if [ "$rc" -eq 0 ]; then
	echo "libcrun-worker exports the $(wc -l <"$tmp/built") symbols of $list"
fi
exit "$rc"
