#!/bin/sh
# Prefill and decode speed of `exld run --device cuda` against llama.cpp's
# CUDA build on the same random-weight GGUFs.  A benchmark for a GPU
# machine, not a test: never run by meson test.
#
#   tests/bench/bench_cuda.sh [BUILD_DIR]        (default: build)
#
# Environment: SHAPES (default "tinyllama llama8b"), TYPES (default
# "q4_0 q8_0 q4_k f16"; llama8b takes LLAMA8B_TYPES, default q4_k), PAIRS (runs of
# each side per model, default 3), N_PROMPT (default 512), N_GEN (default
# 128), MODEL_DIR (default /tmp), and llama.cpp's side, one of:
#   PEER_GPU     the CPU peer's harness on llama.cpp's prebuilt CUDA library
#                (tests/bench/peer_cuda_setup.sh makes it): the very same
#                prompt and passes as exld, medians of PAIRS runs;
#   LLAMA_BENCH  a llama-bench built with GGML_CUDA=ON: llama-bench -ngl 99
#                -p N_PROMPT -n N_GEN -r PAIRS, its mean tok/s.
# Without either only exld's side is printed.
# EAGER=1 adds exld's decode without CUDA graphs (EXLD_CUDA_GRAPHS=0: every
# kernel launched on its own), run after each exld run, and the graphs'
# counts of the last run (EXLD_CUDA_GRAPH_STATS).
#
# exld: a prompt of N_PROMPT tokens ("the" repeated after BOS) in one pass,
# then N_GEN - 1 single-token passes, medians of PAIRS runs with a warm-up
# (WARMUP, default --warmup: one token, as llama.cpp's harness does;
# --warmup-full: a prompt as long first, the steady state of a daemon).
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$src/$build ;; esac
exld=$build/daemon/exld
mkmodel=$build/tests/tools/exld-mkmodel
shapes=${SHAPES:-"tinyllama llama8b"}
types=${TYPES:-"q4_0 q8_0 q4_k f16"}
pairs=${PAIRS:-3}
n_prompt=${N_PROMPT:-512}
n_gen=${N_GEN:-128}
model_dir=${MODEL_DIR:-/tmp}
lbench=${LLAMA_BENCH:-}
peer_gpu=${PEER_GPU:-}
warmup=${WARMUP:---warmup}
vocab=${VOCAB:-$src/../shared/models/vocab/ggml-vocab-llama-spm.gguf}
[ -n "${EXLD_CUDA_MODULE:-}" ] || export EXLD_CUDA_MODULE=$build/kernels/cuda/libexld-cuda.so

for f in "$exld" "$mkmodel" "$vocab"; do
	[ -e "$f" ] || { echo "missing $f" >&2; exit 1; }
done

prompt=the
i=2
while [ $i -lt "$n_prompt" ]; do prompt="$prompt the"; i=$((i + 1)); done

tmp=$(mktemp -d /tmp/exld-bench-cuda-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
eager=${EAGER:-}
printf '%-18s %10s %10s %6s   %10s %10s %6s' model "prefill" "llama.cpp" ratio "decode" "llama.cpp" ratio
[ -z "$eager" ] || printf '   %10s' "no graphs"
echo
for shape in $shapes; do
	case $shape in
	tinyllama) geo="--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ff 5632 --vocab 32000"
		ts=$types ;;
	llama8b) geo="--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ff 14336 --vocab 32000"
		ts=${LLAMA8B_TYPES:-q4_k} ;;
	*) echo "unknown shape $shape" >&2; exit 1 ;;
	esac
	for type in $ts; do
		model=$model_dir/exld-bench-$shape-$type.gguf
		if [ ! -f "$model" ]; then
			# shellcheck disable=SC2086
			"$mkmodel" $geo --vocab-from "$vocab" --type "$type" -o "$model" >/dev/null
		fi
		: >"$tmp/pp"; : >"$tmp/tg"; : >"$tmp/etg"
		p=0
		while [ $p -lt "$pairs" ]; do
			EXLD_CUDA_GRAPH_STATS=1 "$exld" run --model "$model" --device cuda --prompt "$prompt" \
				-n "$n_gen" --temperature 0 "$warmup" >/dev/null 2>"$tmp/err" ||
				{ tail -5 "$tmp/err" >&2; break; }
			line=$(grep '^timing:' "$tmp/err")
			echo "$line" | sed -n 's/.*prompt_tok_s=\([0-9.]*\).*/\1/p' >>"$tmp/pp"
			echo "$line" | sed -n 's/.*gen_tok_s=\([0-9.]*\).*/\1/p' >>"$tmp/tg"
			grep '^exld cuda graphs' "$tmp/err" >"$tmp/stats" || true
			if [ -n "$eager" ]; then
				EXLD_CUDA_GRAPHS=0 "$exld" run --model "$model" --device cuda --prompt "$prompt" \
					-n "$n_gen" --temperature 0 "$warmup" >/dev/null 2>"$tmp/err" ||
					{ tail -5 "$tmp/err" >&2; break; }
				grep '^timing:' "$tmp/err" | sed -n 's/.*gen_tok_s=\([0-9.]*\).*/\1/p' >>"$tmp/etg"
			fi
			p=$((p + 1))
		done
		opp=$(median <"$tmp/pp"); otg=$(median <"$tmp/tg")
		lpp=0; ltg=0
		if [ -n "$peer_gpu" ]; then
			: >"$tmp/lpp"; : >"$tmp/ltg"
			p=0
			while [ $p -lt "$pairs" ]; do
				"$peer_gpu" --model "$model" --prompt "$prompt" --n "$n_gen" --threads 4 \
					--ctx $((n_prompt + n_gen + 16)) --batch "$n_prompt" --flash-attn auto \
					>"$tmp/lp.json" 2>"$tmp/lp.err" || { tail -5 "$tmp/lp.err" >&2; break; }
				sed -n 's/.*"prompt_tok_s":\([0-9.]*\).*/\1/p' "$tmp/lp.json" >>"$tmp/lpp"
				sed -n 's/.*"gen_tok_s":\([0-9.]*\).*/\1/p' "$tmp/lp.json" >>"$tmp/ltg"
				p=$((p + 1))
			done
			lpp=$(median <"$tmp/lpp"); ltg=$(median <"$tmp/ltg")
		elif [ -n "$lbench" ]; then
			"$lbench" -m "$model" -ngl 99 -p "$n_prompt" -n "$n_gen" -r "$pairs" -o jsonl \
				>"$tmp/lb.jsonl" 2>"$tmp/lb.err" || tail -5 "$tmp/lb.err" >&2
			lpp=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["n_prompt"] > 0 and r["n_gen"] == 0: print(r["avg_ts"])' "$tmp/lb.jsonl")
			ltg=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["n_gen"] > 0 and r["n_prompt"] == 0: print(r["avg_ts"])' "$tmp/lb.jsonl")
		fi
		printf '%-18s %10.1f %10.1f %6s   %10.1f %10.1f %6s' "$shape-$type" "${opp:-0}" "${lpp:-0}" \
			"$(ratio "${opp:-0}" "${lpp:-0}")" "${otg:-0}" "${ltg:-0}" "$(ratio "${otg:-0}" "${ltg:-0}")"
		[ -z "$eager" ] || printf '   %10.1f' "$(median <"$tmp/etg")"
		echo
		[ -z "$eager" ] || sed 's/^/    /' "$tmp/stats"
	done
done
echo "tok/s; exld: medians of $pairs runs (prompt $n_prompt tokens, $((n_gen - 1)) decode passes);"
if [ -n "$peer_gpu" ]; then
	echo "llama.cpp: $(basename "$peer_gpu"), every layer on the GPU, flash attention auto, the same prompt, medians of $pairs runs"
else
	echo "llama.cpp: llama-bench -ngl 99 -p $n_prompt -n $n_gen -r $pairs, mean"
fi
echo "ratio = exld / llama.cpp"
