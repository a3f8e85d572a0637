#!/bin/sh
# Packs what a lent GPU machine lacks into .gpu/ (ignored by git), for
# tests/cuda/gpu_session.sh there: carry [".gpu"] with the run.
#
#   tests/cuda/gpu_pack.sh [BUILD_DIR]      (default: build)
#
# .gpu/ holds, as xz tarballs of absolute paths (unpacked at / there, so
# that the test list's and the harnesses' paths hold):
#   build    the build directory without objects, and tests.json, the
#            test list of `meson introspect --tests`;
#   lib      the shared libraries the build and the peers load that a base
#            system may lack (msgpack-c, libevent, cmocka, PCRE2, ...);
#            gpu_session.sh uses only those the machine does not have;
#   models   ../shared/models;
#   peer     the CPU peer (/tmp/peer: its harness and llama.cpp's CPU
#            libraries, not node's modules);
#   peer-cuda  the GPU peer, when tests/bench/peer_cuda_setup.sh made it.
# About 40 MB in all with the GPU peer (a call carries at most 64 MiB).
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$src/$build ;; esac
build=$(cd "$build" && pwd -P)
out=$src/.gpu
peer=${PEER_DIR:-/tmp/peer}
peer_cuda=${PEER_CUDA_DIR:-/tmp/peer-cuda}
models=$(cd "$src/../shared/models" && pwd -P)

grep -qx '/.gpu/' "$src/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$src/.git/info/exclude"
rm -rf "$out"
mkdir -p "$out"
echo "$src" >"$out/src"
echo "$build" >"$out/build"
meson introspect --tests "$build" >"$out/tests.json"

pack() {  # name, then absolute paths
	name=$1
	shift
	tar -C / -cf - --exclude='*.o' --exclude='*.a' --exclude='*.p' "$@" | xz -T2 -6 >"$out/$name.tar.xz"
}
rel() { for p; do echo "${p#/}"; done; }

# shellcheck disable=SC2046
pack build $(rel "$build")
# shellcheck disable=SC2046
pack models $(rel "$models")
peer_bins=$peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
# shellcheck disable=SC2046
[ -x "$peer/peer-bench-native" ] && pack peer $(rel "$peer/peer-bench-native" "$peer_bins")
# shellcheck disable=SC2046
[ -x "$peer_cuda/peer-bench-gpu" ] && pack peer-cuda $(rel "$peer_cuda/peer-bench-gpu" "$peer_cuda/bins")

# Libraries: what ldd resolves for the build's programs and the peers,
# less the C and C++ runtimes and CUDA's own (the machine has its own).
lib=$(mktemp -d)
trap 'rm -rf "$lib"' EXIT
find "$build" "$peer/peer-bench-native" "$peer_bins" -type f \( -perm -u+x -o -name '*.so*' \) \
	-not -path '*.p/*' 2>/dev/null | while read -r f; do
	head -c 4 "$f" 2>/dev/null | grep -q ELF && ldd "$f" 2>/dev/null
done | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p' | sort -u |
	grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/cuda|/node_modules/|/tmp/' |
	grep -v "^$build/" |
	while read -r f; do cp -L "$f" "$lib/"; done
tar -C "$lib" -cf - . | xz -T2 -6 >"$out/lib.tar.xz"
du -ch "$out"/* | tail -n 1
ls -la "$out"
