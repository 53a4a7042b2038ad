#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/ops/units_prefix.sh: the systemd units of a build with a prefix outside man(1)'s search
# path pass `systemd-analyze verify` with its man page check (issue 21: "Command 'man crun(1)'
# failed"): they name the installed pages' files there. A fresh `meson setup` (configure only,
# nothing compiled) with --prefix /opt/...; the units' programs are this build's.
. "$(dirname "$0")/../agent/lib.sh"

command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }
command -v meson >/dev/null || { echo "SKIP: no meson"; exit 77; }
UNITS="crun-agent@.service crun-agent@.path crun-rdzvd.service"
PREFIX=/opt/crun-units-test

note "meson setup --prefix $PREFIX (configure only)"
timeout -s KILL 120 meson setup "$T/b" "$SRC" --prefix "$PREFIX" -Dtests=disabled \
	>"$T/setup.log" 2>&1 || { tail -n 20 "$T/setup.log" >&2; fail "meson setup"; }
mkdir "$T/v"
for u in $UNITS; do
	sed -e "s|^ExecStart=$PREFIX/bin/crun |ExecStart=$CRUN |" \
		-e "s|^ExecStart=$PREFIX/sbin/crun-rdzvd |ExecStart=$RDZVD |" \
		"$T/b/examples/systemd/$u" >"$T/v/$u"
done
expect_grep "^Documentation=file://$PREFIX/share/man/man1/crun.1 " "$T/v/crun-agent@.service" \
	"the agent unit names crun(1)'s file"

note "systemd-analyze verify, man pages checked: no message"
(cd "$T/v" && SYSTEMD_LOG_COLOR=0 timeout -s KILL 60 systemd-analyze verify \
	./crun-agent@.service ./crun-agent@.path ./crun-rdzvd.service) >"$T/verify.log" 2>&1
RC=$?
if [ $RC -ne 0 ] || [ -s "$T/verify.log" ]; then
	cat "$T/verify.log" >&2
	fail "systemd-analyze verify: exit $RC"
fi
echo PASS
