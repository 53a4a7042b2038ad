#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/api/clients.sh: build programs against the INSTALLED libcrun-worker, as a user would.
# Installs the build into a scratch DESTDIR, takes flags from pkg-config only, checks that every
# installed header compiles on its own (C99 or C++11, -Wall -Wextra -Werror -pedantic), then
# builds and runs the client in CRUN_SINGLE=1 mode against the installed library. In C++ mode it
# also checks that every exported symbol is declared, with C linkage, by the public headers.
# In example mode it builds the EXAMPLE program of libcrun-worker(3) (MAN_PAGE, the .scd) and
# runs it under crun with 3 ranks, so the page's example stays a working program.
# Usage: clients.sh c|cxx|example COMPILER SOURCE_DIR SYMBOLS_FILE [MAN_PAGE]
#        (COMPILER "" in cxx mode: skip)
# Environment: MESON (the meson command), CRUN_BUILD_DIR (the build directory).
set -eu

mode=$1
compiler=$2
srcdir=$3
symbols=$4
build=${CRUN_BUILD_DIR:?CRUN_BUILD_DIR is not set}
meson=${MESON:-meson}

if [ -z "$compiler" ] || ! command -v "${compiler%% *}" >/dev/null 2>&1; then
	echo "SKIP: no $mode compiler found"
	exit 77
fi
if ! command -v pkg-config >/dev/null 2>&1; then
	echo "FAIL: pkg-config not found: it is how users get crun-worker's flags" >&2
	exit 1
fi

tmp=$(mktemp -d "$build/tests/api/client-$mode.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/destdir

if ! $meson install -C "$build" --no-rebuild --destdir "$dest" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	echo "FAIL: meson install --destdir" >&2
	exit 1
fi
pc=$(find "$dest" -name crun-worker.pc | head -n 1)
if [ -z "$pc" ]; then
	echo "FAIL: crun-worker.pc was not installed" >&2
	exit 1
fi
# Only the installed .pc, with every path it names moved under the DESTDIR.
PKG_CONFIG_LIBDIR=$(dirname "$pc")
PKG_CONFIG_PATH=
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_LIBDIR PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
cflags=$(pkg-config --cflags crun-worker)
libs=$(pkg-config --libs crun-worker)
# pkgconf puts the sysroot in front of variables too, freedesktop's pkg-config does not.
incdir=$(pkg-config --variable=includedir crun-worker)
libdir=$(pkg-config --variable=libdir crun-worker)
case "$incdir" in "$dest"/*) ;; *) incdir=$dest$incdir ;; esac
case "$libdir" in "$dest"/*) ;; *) libdir=$dest$libdir ;; esac
case "$cflags" in
*"$dest"*) ;;
*)
	echo "FAIL: pkg-config --cflags crun-worker ($cflags) does not point into $dest" >&2
	exit 1
	;;
esac
echo "installed to $dest; cflags: $cflags; libs: $libs"

if [ "$mode" = c ]; then
	lang=c
	std='-std=c99 -Wstrict-prototypes'
	client=$srcdir/client.c
	extra=
elif [ "$mode" = example ]; then
	lang=c
	std='-std=c99 -Wstrict-prototypes'
	client=$tmp/example.c
	extra=
	# The first literal block after "# EXAMPLE", with scdoc's backslash escapes undone.
	awk '/^# EXAMPLE/ { on = 1; next } on && /^```/ { if (inblock) exit; inblock = 1; next }
		inblock { print }' "${5:?example mode needs the man page}" |
		sed 's/\\\\/\\/g' >"$client"
	if ! grep -q 'int main' "$client"; then
		echo "FAIL: no program found in the EXAMPLE section of $5" >&2
		exit 1
	fi
else
	lang=c++
	std='-std=c++11 -Wold-style-cast -Wzero-as-null-pointer-constant'
	client=$srcdir/client.cpp
	# The client uses only the category-prefixed enumerator names.
	extra=-DCRUN_NO_DEPRECATED
fi
warn='-Wall -Wextra -Werror -pedantic -Wshadow -Wundef'
# A library built with sanitizers (scripts/test's second pass) needs its runtime first in the
# program: build the clients the same way, as a user of such a build would.
if readelf -d "$libdir/libcrun-worker.so" 2>/dev/null | grep -q 'NEEDED.*libasan'; then
	extra="$extra -fsanitize=address,undefined"
fi

rc=0
for h in "$incdir"/crun/*.h; do
	name=$(basename "$h")
	if ! printf '#include <crun/%s>\n#include <crun/%s>\ntypedef int crun_header_test;\n' \
		"$name" "$name" |
		$compiler -x "$lang" $std $warn $cflags -fsyntax-only - 2>"$tmp/h.err"; then
		echo "FAIL: <crun/$name> does not compile on its own as $lang:" >&2
		cat "$tmp/h.err" >&2
		rc=1
	fi
	if grep -q CRUN_EXPORT "$h" && [ "$name" != export.h ] &&
		! grep -q 'extern "C"' "$h"; then
		echo "FAIL: <crun/$name> declares functions without an extern \"C\" block" >&2
		rc=1
	fi
done

# shellcheck disable=SC2086 # flags are word lists
if ! $compiler -x "$lang" $std $warn $extra -o "$tmp/client" "$client" $cflags $libs; then
	echo "FAIL: the $lang client does not build against the installed headers and library" >&2
	exit 1
fi

if [ "$mode" = cxx ]; then
	# Every exported function, by address: an undeclared one fails to compile, one declared
	# without C linkage fails to link (its C++-mangled name is not in the library).
	{
		echo '#include <crun/crun.h>'
		echo '#include <crun/ddp_cuda.h>'
		echo 'typedef void (*any_fn)(void);'
		echo 'static const any_fn fns[] = {'
		grep -v '^#' "$symbols" | while read -r sym; do
			echo "	reinterpret_cast<any_fn>(&$sym),"
		done
		echo '};'
		echo 'int main() { return fns[0] == nullptr; }'
	} >"$tmp/linkage.cpp"
	if ! $compiler $std $warn -o "$tmp/linkage" "$tmp/linkage.cpp" $cflags $libs; then
		echo "FAIL: the public headers do not declare every exported symbol with C linkage" >&2
		rc=1
	fi
	echo "C linkage checked for $(grep -c reinterpret_cast "$tmp/linkage.cpp") functions"
fi

mkdir "$tmp/run"
if [ "$mode" = example ]; then
	out=$(LD_LIBRARY_PATH=$libdir TMPDIR="$tmp/run" timeout 120 "$build/src/crun" \
		--standalone --nproc-per-node 3 --max-restarts 0 "$tmp/client" 2>&1) || {
		printf '%s\n' "$out" >&2
		echo "FAIL: the man page's example failed under crun" >&2
		exit 1
	}
	printf '%s\n' "$out"
	case "$out" in
	*"sum of ranks: 3 (expected 3)"*) ;;
	*)
		echo "FAIL: the example did not print the sum of 3 ranks" >&2
		exit 1
		;;
	esac
	exit 0
fi
if ! LD_LIBRARY_PATH=$libdir ldd "$tmp/client" | grep -q "$libdir/libcrun-worker.so"; then
	echo "FAIL: the client does not load the installed library:" >&2
	LD_LIBRARY_PATH=$libdir ldd "$tmp/client" >&2
	exit 1
fi
if ! env -u RANK -u WORLD_SIZE CRUN_SINGLE=1 TMPDIR="$tmp/run" LD_LIBRARY_PATH="$libdir" \
	"$tmp/client"; then
	echo "FAIL: the $lang client failed" >&2
	rc=1
fi
if [ -n "$(ls -A "$tmp/run")" ]; then
	echo "FAIL: crun_finish() left files in TMPDIR: $(ls -A "$tmp/run")" >&2
	rc=1
fi
exit "$rc"
