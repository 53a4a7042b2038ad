#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/lib/skip.sh MESSAGE...: a test that says why something was not tested and skips (77),
# so that what a build left out shows in `meson test` instead of vanishing (tests/meson.build).
echo "SKIP: $*"
exit 77
