#!/bin/sh
# The cost of LoRA adapters: aggregate tok/s of 8 concurrent jobs with 4
# different adapters against 8 without, on one engine (bench_lora.c).  A
# benchmark, not a test: never run by meson test.
#
#   tests/bench/bench_lora.sh [BUILD_DIR]        (default: build)
#
# Environment: DIM (640), LAYERS (8), TYPE (q8_0), RANK (16), PAIRS (3),
# N_GEN (64), THREADS (2), MODEL_DIR (where the model and adapters are made,
# default /tmp).
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$src/$build ;; esac
mkmodel=$build/tests/tools/exld-mkmodel
bench=$build/tests/bench_lora
dim=${DIM:-640}
layers=${LAYERS:-8}
type=${TYPE:-q8_0}
rank=${RANK:-16}
dir=${MODEL_DIR:-/tmp}
for f in "$mkmodel" "$bench"; do
	[ -x "$f" ] || { echo "missing $f (build it: ninja -C $build)" >&2; exit 1; }
done
model=$dir/exld-bench-lora-$dim-$layers-$type.gguf
[ -f "$model" ] || "$mkmodel" --dim "$dim" --layers "$layers" --heads $((dim / 64)) \
	--ff $((dim * 8 / 3 / 32 * 32)) --type "$type" --vocab 4096 --seed 1 -o "$model"
adapters=
for i in 1 2 3 4; do
	a=$dir/exld-bench-lora-$dim-$layers-$type-r$rank-$i.gguf
	[ -f "$a" ] || "$mkmodel" --lora-for "$model" --rank "$rank" --alpha $((rank * 2)) \
		--seed "$i" -o "$a"
	adapters="$adapters $a"
done
# shellcheck disable=SC2086
"$bench" "$model" $adapters --threads "${THREADS:-2}" --pairs "${PAIRS:-3}" --n "${N_GEN:-64}"
