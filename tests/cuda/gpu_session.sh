#!/bin/bash
# Everything a short session on a GPU machine should run, in one go, from
# a build made elsewhere (docs/cuda.md, "A GPU session"):
#   1. test_cuda_ops, line by line, under cuda-gdb when there is one (a
#      crash then ends with a backtrace);
#   2. cuda_model and cuda_cli, and, in the background, the CPU kernel
#      suites of the host's own sets (a GPU host is often an AVX-512 or
#      AMX machine the development machine is not);
#   3. tests/cuda/check_archs.sh without the op tests;
#   4. tests/bench/bench_cuda.sh (against llama-bench when LLAMA_BENCH
#      names one) and tests/bench/bench_model.sh on the host's CPU.
#
#   tests/cuda/gpu_session.sh TESTS.json OUT_DIR
#
# TESTS.json: `meson introspect --tests build` of the build, which must
# sit at the path it was configured in (its programs and the tests' list
# name absolute paths), with EXLD_MODELS' models where the list says.
# Each step has its own time limit; the whole run is about 4 minutes on
# an H200 host (16 cores).  Outputs and logs go to OUT_DIR.
set -u
tests=${1:?usage: gpu_session.sh TESTS.json OUT_DIR}
out=${2:?}
cd "$(dirname "$0")/../.." || exit 1
mkdir -p "$out" || exit 1
t0=$(date +%s)
step() { echo "[+$(($(date +%s) - t0))s] $*"; }
run=tests/tools/run_introspected.py
export EXLD_CUDA_MODULE=$PWD/build/kernels/cuda/libexld-cuda.so

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1
grep -m1 'model name' /proc/cpuinfo
grep -o -w 'amx_int8\|avx512_vnni\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '
echo

(RT_TIMEOUT=60 python3 "$run" "$tests" '^(cpu_attention|cpu_ops|matmul_.*)$|-(avx2vnni|avx512|avx512vnni|amx)$' 8 \
	"$out/cpu_tests.log" >"$out/cpu_tests.txt" 2>&1) &
cpu_pid=$!

step "test_cuda_ops"
gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
if [ -n "$gdb" ]; then
	timeout 60 "$gdb" -q -batch -ex run -ex bt --args build/tests/test_cuda_ops \
		>"$out/cuda_ops.txt" 2>&1
else
	timeout 60 build/tests/test_cuda_ops >"$out/cuda_ops.txt" 2>&1
fi
grep -v '^\[New Thread\|^\[Thread\|^\[Inferior\|Detaching' "$out/cuda_ops.txt" | tail -40

step "cuda_model, cuda_cli"
RT_TIMEOUT=60 python3 "$run" "$tests" '^(cuda_model|cuda_cli)$' 2 "$out/cuda_tests.log"

step "architectures"
NO_OPS=1 timeout 60 sh tests/cuda/check_archs.sh

step "CPU kernel suites"
wait "$cpu_pid"
grep 'FAIL\|summary' "$out/cpu_tests.txt"

step "GPU speed"
PAIRS=${PAIRS:-2} timeout 150 sh tests/bench/bench_cuda.sh 2>&1 | tee "$out/bench_cuda.txt"

step "CPU speed, 2 threads"
PAIRS=${PAIRS:-2} TYPES="q8_0 q4_0 q4_k" timeout 120 sh tests/bench/bench_model.sh 2>&1 |
	tee "$out/bench_cpu.txt"
step done
