# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# tests/lib/own_net.sh: sourced first by a test script, before it makes anything (". .../own_net.sh
# "$@""): as root, the script runs again in a network namespace of its own, holding only a
# loopback interface, so that no port it or its programs bind can meet another test's: torchrun
# --standalone always takes 29400, and PyTorch's examples pick their own MASTER_PORT. This is what
# lets meson run such tests beside the rest of the suite. Namespaces and bridges the script makes
# (ip netns, tests/lib/net.sh) are made from there and work as before. Not root, or without
# unshare: the script goes on where it is (and may then meet another test's fixed port).
if [ -z "${CRUN_TEST_OWN_NET:-}" ] && [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null &&
	unshare --net true 2>/dev/null; then
	export CRUN_TEST_OWN_NET=1
	exec unshare --net -- /bin/bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi
