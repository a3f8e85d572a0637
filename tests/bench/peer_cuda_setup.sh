#!/bin/sh
# llama.cpp's CUDA build as the GPU peer of bench_cuda.sh, from the npm
# registry like the CPU peer (../shared/tools/peer): node-llama-cpp's
# prebuilt @node-llama-cpp/linux-x64-cuda@3.22.1 (llama.cpp de3ff81, the
# CPU peer's commit, built with CUDA 13.1), and the CPU peer's C harness
# built against it with every layer on the GPU.
#
#   tests/bench/peer_cuda_setup.sh [DIR] [ARCH]    (default /tmp/peer-cuda sm_90)
#
# Its libggml-cuda.so is rewritten to hold machine code for ARCH alone,
# assembled here from the PTX it ships (tests/tools/fatbin_one_arch.py says
# why): 250 MB of PTX through ptxas, about 5 minutes on 2 cores, once.
# DIR/bins then compresses to about 30 MB (tar -J), small enough to carry
# to a lent GPU machine; unpack it at the same DIR there, since the harness
# finds its libraries by that path.  Run it as bench_cuda.sh's PEER_GPU:
#   PEER_GPU=DIR/peer-bench-gpu tests/bench/bench_cuda.sh
set -eu
dir=${1:-/tmp/peer-cuda}
arch=${2:-sm_90}
src=$(cd "$(dirname "$0")/../.." && pwd)
peer_src=$src/../shared/tools/peer
peer=${PEER_DIR:-/tmp/peer}
version=3.22.1

[ -d "$peer/llama.cpp-src" ] || "$peer_src/setup.sh" "$peer" >&2
mkdir -p "$dir/bins"
cd "$dir"
tgz=node-llama-cpp-linux-x64-cuda-$version.tgz
[ -f "$tgz" ] || npm pack --silent "@node-llama-cpp/linux-x64-cuda@$version" >/dev/null
[ -d package ] || tar xzf "$tgz"
from=package/bins/linux-x64-cuda
for f in "$from"/*.so; do
	case ${f##*/} in libggml-cuda.so) ;; *) cp "$f" bins/ ;; esac
done
[ -f bins/libggml-cuda.so ] ||
	python3 "$src/tests/tools/fatbin_one_arch.py" "$from/libggml-cuda.so" bins/libggml-cuda.so "$arch" work

# The CPU peer's harness, every layer offloaded (its one CPU-only line).
sed 's/mp\.n_gpu_layers = 0;/mp.n_gpu_layers = 999;/' "$peer_src/peer-bench-native.c" >peer-bench-gpu.c
grep -q 'n_gpu_layers = 999' peer-bench-gpu.c || { echo "peer-bench-native.c changed: no n_gpu_layers line" >&2; exit 1; }
gcc -O2 -o peer-bench-gpu peer-bench-gpu.c -DPEER_BINS_DIR="\"$dir/bins\"" \
	-I"$peer/llama.cpp-src/include" -I"$peer/llama.cpp-src/ggml/include" \
	-Lbins -l:libllama.cuda.v0.5.0.so -l:libggml.cuda.v0.5.0.so -l:libggml-base.so \
	-Wl,-rpath,"$dir/bins" -lm
echo "GPU peer ready: $dir/peer-bench-gpu (device code: $arch)"
