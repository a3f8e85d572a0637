#!/bin/bash
# Everything a short session on a GPU machine should run, in one go, from
# a build made elsewhere (docs/cuda.md, "A GPU session"):
#   tests  test_cuda_ops, line by line, under cuda-gdb when there is one (a
#          crash then ends with a backtrace); cuda_model and cuda_cli; in
#          the background, the CPU kernel suites of the host's own sets and
#          amx_layout (a GPU host is often an AVX-512 or AMX machine the
#          development machine is not);
#   archs  tests/cuda/check_archs.sh without the op tests;
#   gpu    tests/bench/bench_cuda.sh, against llama.cpp's CUDA build when
#          PEER_GPU or LLAMA_BENCH names one (PEER_GPU defaults to
#          /tmp/peer-cuda/peer-bench-gpu when that exists), and exld's
#          decode without CUDA graphs beside it (EAGER=1, the default here);
#   profile  every kernel of a short decode on llama8b q4_k, timed by ncu
#          (tests/cuda/ncu_summary.py);
#          Then the same of a 512-token prefill on tinyllama q4_k;
#   sweep  decode tok/s with each EXLD_CUDA_MMVQ_TPR (the decode matmul's
#          threads a row) on the bench models there are;
#   cpu    tests/bench/bench_model.sh on the host's CPU, 2 threads;
#   sitting  tests/bench/bench_cpu_sitting.sh (issue 19's figures) on two
#          cores, with SITTING_TYPES, PAIRS, BATCH_ROUNDS 2, DELIVERY_RUNS 5;
#   kernels  on two cores, bench_matmul --model (decode and a batch of 128)
#          with every matrix set the host runs, twice, and
#          bench_attn_streams (16 streams' attention from memory): the
#          kernels alone, for A/B between builds on a host seen rarely.
#
#   tests/cuda/gpu_session.sh TESTS.json OUT_DIR [STEP ...]
#
# Steps default to "tests archs gpu cpu".  TESTS.json: `meson introspect
# --tests build` of the build, which must sit at the path it was
# configured in (its programs and the tests' list name absolute paths),
# with EXLD_MODELS' models where the list says.  With .gpu/ in the
# checkout (tests/cuda/gpu_pack.sh), TESTS.json may be .gpu/tests.json:
# the build, the models, the peers and the missing libraries are unpacked
# to their paths first.  Each step has its own time limit; tests, archs
# and gpu take about 4 minutes on an H200 host (16 cores).  Outputs and
# logs go to OUT_DIR.
set -u
tests=${1:?usage: gpu_session.sh TESTS.json OUT_DIR [STEP ...]}
out=${2:?}
shift 2
steps=${*:-tests archs gpu cpu}
cd "$(dirname "$0")/../.." || exit 1
mkdir -p "$out" || exit 1
t0=$(date +%s)
step() { echo "[+$(($(date +%s) - t0))s] $*"; }
want() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

if [ -d .gpu ] && [ ! -e /tmp/gpu-unpacked ]; then
	step "unpack .gpu"
	src=$(cat .gpu/src)
	# The packed paths: the checkout where it was built, its ../shared.
	if [ "$src" != "$PWD" ]; then
		mkdir -p "$(dirname "$src")"
		[ -e "$src" ] || ln -s "$PWD" "$src"
	fi
	for t in .gpu/*.tar.xz; do
		case $t in */lib.tar.xz) ;; *) tar -C / -xJf "$t" || exit 1 ;; esac
	done
	[ -e ../shared ] || ln -s "$(dirname "$src")/shared" ../shared
	mkdir -p /tmp/gpu-lib
	tar -C /tmp/gpu-lib -xJf .gpu/lib.tar.xz || exit 1
	have=$(ldconfig -p | awk '{ print $1 }')
	for f in /tmp/gpu-lib/*; do
		echo "$have" | grep -qx "${f##*/}" && rm -f "$f"
	done
	echo "libraries the machine lacked: $(ls /tmp/gpu-lib | tr '\n' ' ')"
	touch /tmp/gpu-unpacked
fi
export LD_LIBRARY_PATH=/tmp/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cudalib=$(dirname "$(ls /usr/local/cuda*/lib64/libcublas.so.13 2>/dev/null | head -n 1)")
[ "$cudalib" = . ] || export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cudalib
run=tests/tools/run_introspected.py
export EXLD_CUDA_MODULE=$PWD/build/kernels/cuda/libexld-cuda.so

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1
grep -m1 'model name' /proc/cpuinfo
grep -o -w 'amx_int8\|amx_bf16\|avx512_vnni\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '
echo

if want tests; then
	(RT_TIMEOUT=90 python3 "$run" "$tests" '^(amx_layout|cpu_attention|cpu_ops|matmul_.*)$|-(avx2vnni|avx512|avx512vnni|amx)$' 8 \
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
fi

if want archs; then
	step "architectures"
	NO_OPS=1 timeout 60 sh tests/cuda/check_archs.sh
fi

if want tests; then
	step "CPU kernel suites"
	wait "$cpu_pid"
	grep 'FAIL\|summary' "$out/cpu_tests.txt"
fi

if want gpu; then
	step "GPU speed"
	[ -n "${PEER_GPU:-}" ] || [ ! -x /tmp/peer-cuda/peer-bench-gpu ] || export PEER_GPU=/tmp/peer-cuda/peer-bench-gpu
	PAIRS=${PAIRS:-2} EAGER=${EAGER-1} timeout 420 sh tests/bench/bench_cuda.sh 2>&1 | tee "$out/bench_cuda.txt"
	step "GPU speed after a full-length warm-up, exld alone"
	PEER_GPU= WARMUP=--warmup-full TYPES=${FULL_TYPES:-q4_k} PAIRS=${PAIRS:-2} timeout 120 \
		sh tests/bench/bench_cuda.sh 2>&1 | tee "$out/bench_cuda_full.txt"
fi

if want profile; then
	# Where a decode token's time goes: every kernel of a short run (a
	# 2-token prompt, so every matmul is the decode kernel), timed by ncu.
	step "kernel profile"
	ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
	model=${PROFILE_MODEL:-/tmp/exld-bench-llama8b-q4_k.gguf}
	if [ -n "$ncu" ] && [ -f "$model" ]; then
		timeout 150 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
			build/daemon/exld run --model "$model" --device cuda --prompt Hello -n 8 \
			--temperature 0 >"$out/ncu.csv" 2>"$out/ncu.err"
		python3 tests/cuda/ncu_summary.py "$out/ncu.csv" | head -n 25
		build/daemon/exld run --model "$model" --device cuda --prompt Hello -n 8 --temperature 0 \
			2>&1 >/dev/null | grep '^timing:'
	else
		echo "no ncu or no $model"
	fi
	# ... and of a prefill: a 512-token prompt, 2 tokens out
	model=${PROFILE_PREFILL_MODEL:-/tmp/exld-bench-tinyllama-q4_k.gguf}
	if [ -n "$ncu" ] && [ -f "$model" ]; then
		prompt=the
		i=2
		while [ $i -lt 512 ]; do prompt="$prompt the"; i=$((i + 1)); done
		step "kernel profile of a 512-token prefill"
		timeout 150 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
			build/daemon/exld run --model "$model" --device cuda --prompt "$prompt" -n 2 \
			--temperature 0 >"$out/ncu_prefill.csv" 2>"$out/ncu_prefill.err"
		python3 tests/cuda/ncu_summary.py "$out/ncu_prefill.csv" | head -n 25
	fi
fi

if want sweep; then
	# the decode matmul's threads a row (EXLD_CUDA_MMVQ_TPR), decode tok/s
	step "decode matmul: threads a row"
	for model in /tmp/exld-bench-llama8b-q4_k.gguf /tmp/exld-bench-llama8b-q8_0.gguf \
		/tmp/exld-bench-tinyllama-q4_0.gguf /tmp/exld-bench-tinyllama-q8_0.gguf; do
		[ -f "$model" ] || continue
		for tpr in auto 32 64 128 auto; do
			printf '%s tpr %s: ' "${model##*/}" "$tpr"
			EXLD_CUDA_MMVQ_TPR=$tpr timeout 60 build/daemon/exld run --model "$model" --device cuda \
				--prompt Hello -n 128 --temperature 0 --warmup 2>&1 >/dev/null |
				sed -n 's/.*gen_tok_s=\([0-9.]*\).*/\1/p'
		done
	done | tee "$out/sweep.txt"
fi

if want cpu; then
	step "CPU speed, 2 threads"
	PAIRS=${PAIRS:-2} TYPES="q8_0 q4_0 q4_k" timeout 120 sh tests/bench/bench_model.sh 2>&1 |
		tee "$out/bench_cpu.txt"
fi

if want sitting; then
	step "issue 19's sitting, 2 threads"
	# on two of the host's cores, as on the 2-core machines issue 19 names:
	# the clients of the batch figures and the ring's reader share them
	TYPES=${SITTING_TYPES:-"q8_0 q4_0 q4_k f16 bf16 q6_k"} PAIRS=${PAIRS:-2} BATCH_ROUNDS=2 \
		DELIVERY_RUNS=5 timeout 540 taskset -c 0,1 sh tests/bench/bench_cpu_sitting.sh 2>&1 |
		tee "$out/sitting.txt"
fi
if want kernels; then
	step "kernels alone, 2 cores"
	sets=$(build/tests/tools/with-kernels --list 2>/dev/null | sed 's/;.*//' | tr ' ' '\n' | grep -E '^(avx2vnni|avx512vnni|amx)$')
	for round in 1 2; do
		for set in $sets; do
			timeout 60 taskset -c 0,1 build/tests/bench_matmul --model --threads 2 --kernels "$set" \
				--types q8_0,q4_0,q4_k,q5_k,q6_k,f16 --n 1,128 2>&1 | grep -E 'kernels|model'
		done
		timeout 30 taskset -c 0,1 build/tests/bench_attn_streams --threads 2 2>&1 | tail -n 1
	done | tee "$out/kernels.txt"
fi
step done
