#!/bin/sh
# Installs the build dependencies, builds exld and runs it on the default
# model.
set -eu
cd "$(dirname "$0")"
./tests/install-deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
build/daemon/exld inspect ../shared/models/stories260K.gguf
