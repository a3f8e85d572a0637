#!/bin/sh
# Decode and prefill speed of `exld run` against llama.cpp on the same
# TinyLlama-1.1B-shaped random-weight GGUF (dim 2048, 22 layers, 32 heads,
# 4 KV heads, FFN 5632, vocab 32000), per weight type; SHAPE=llama8b for
# Llama-3-8B's shape instead (dim 4096, 32 layers, 32 heads, 8 KV heads,
# FFN 14336, and a byte-level BPE vocabulary of 102400: deepseek-llm's, the
# nearest to Llama 3's 128256 of the vocabularies in ../shared/models);
# SHAPE=gptoss for 6 of gpt-oss-20b's layers (TYPES=mxfp4).  A
# benchmark, not a test: never run by meson test.
#
#   tests/bench/bench_model.sh [BUILD_DIR]       (default: build)
#
# Environment: PAIRS (interleaved ours/peer runs per type, default 3),
# TYPES (default "q8_0 q4_0 f16"; any exld-mkmodel --type, q4_k_m and
# q5_k_m the mixes users download most), THREADS (default 2), N_GEN (default 64),
# MODEL_DIR (where the random models are made and kept, default /tmp; they
# are several GB and never belong in the repository), PEER_ARGS (more
# options for the peer, e.g. "--poll 0" or "--cpu-variant haswell"), PEER (default
# /tmp/peer/peer-bench-native; installed when missing with
# ../shared/tools/peer/setup.sh, relative to the checkout).
#
# Prefill is one 128-token prompt (BOS + 127 words, one token each) in one
# pass; decode is N_GEN - 1 single-token passes after it.  Both sides count
# the same way: prompt tokens / prompt pass time, and decode passes / their
# time.  Output: the medians of each side and ours / peer.  PROMPT_WORDS
# (default 127) lengthens the prompt, for decode at a long context: e.g.
# PROMPT_WORDS=1900 PEER_ARGS="--ctx 2048 --batch 2048" (llama.cpp takes
# the prompt in one batch); "of ceil" then leaves out the KV cache's bytes.
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$src/$build ;; esac
exld=$build/daemon/exld
mkmodel=$build/tests/tools/exld-mkmodel
pairs=${PAIRS:-3}
types=${TYPES:-"q8_0 q4_0 f16"}
threads=${THREADS:-2}
n_gen=${N_GEN:-64}
model_dir=${MODEL_DIR:-/tmp}
words=${PROMPT_WORDS:-127}
peer=${PEER:-/tmp/peer/peer-bench-native}
peer_args=${PEER_ARGS:-}
shape=${SHAPE:-tinyllama}
case $shape in
tinyllama)
	dims="--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ff 5632 --vocab 32000"
	vocab=${VOCAB:-$src/../shared/models/vocab/ggml-vocab-llama-spm.gguf} ;;
llama8b)
	dims="--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ff 14336 --ctx 8192"
	vocab=${VOCAB:-$src/../shared/models/vocab/ggml-vocab-deepseek-llm.gguf} ;;
gptoss)
	# gpt-oss-20b's layers (6 of its 24: the ratio per layer is what
	# counts), 32 experts of which 4 a token, windows of 128 on every
	# other layer; "of ceil" counts every expert's bytes, so it means
	# nothing here
	dims="--arch gpt-oss --dim 2880 --layers 6 --heads 64 --kv-heads 8 --head-dim 64 --ff 2880 --experts 32 --experts-used 4 --swa 128 --ctx 4096"
	vocab=${VOCAB:-$src/../shared/models/vocab/ggml-vocab-llama-spm.gguf} ;;
*)
	echo "SHAPE must be tinyllama, llama8b or gptoss" >&2; exit 2 ;;
esac

for f in "$exld" "$mkmodel"; do
	[ -x "$f" ] || { echo "missing $f (build it: ninja -C $build)" >&2; exit 1; }
done
if [ ! -x "$peer" ]; then
	setup=$src/../shared/tools/peer/setup.sh
	[ -x "$setup" ] || { echo "no llama.cpp peer at $peer and no $setup" >&2; exit 1; }
	"$setup" "$(dirname "$peer")"
fi
[ -f "$vocab" ] || { echo "missing vocabulary $vocab" >&2; exit 1; }

prompt=the
i=1
while [ $i -lt "$words" ]; do prompt="$prompt the"; i=$((i + 1)); done

tmp=$(mktemp -d /tmp/exld-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# The decode ceiling: a token streams every weight but the embedding table
# (one row of it is read) once, so tok/s <= read bandwidth / those bytes.
# The bandwidth is read again just before each of our runs: on a shared host
# it moves by a third within minutes, and a figure taken once at the start
# would rate every later run against another machine.  Each run is rated
# against the best pass (the ceiling) and the median pass read next to it.
membw=$build/tests/bench_membw
[ -x "$membw" ] || { echo "missing $membw (build it: ninja -C $build)" >&2; exit 1; }
read_bw() {
	"$membw" --threads "$threads" --passes 5 |
		sed -n 's/^read_bandwidth_gb_s=\([0-9.]*\) median=\([0-9.]*\).*/\1 \2/p'
}

# Bytes one decode step reads: weight bytes less the token embedding table
# (unless it doubles as the output matrix), from exld inspect.
streamed_bytes() {
	"$exld" inspect "$1" | awk '
		function rowb(t, n) {
			if (t == "f32") return n * 4; if (t == "f16" || t == "bf16") return n * 2
			if (t == "q8_0") return n / 32 * 34; if (t == "q4_0") return n / 32 * 18
			if (t == "q4_1") return n / 32 * 20; if (t == "q5_0") return n / 32 * 22
			if (t == "q5_1") return n / 32 * 24; if (t == "iq4_nl") return n / 32 * 18
			if (t == "mxfp4") return n / 32 * 17
			if (t == "q2_k") return n / 256 * 84; if (t == "q3_k") return n / 256 * 110
			if (t == "q4_k") return n / 256 * 144; if (t == "q5_k") return n / 256 * 176
			if (t == "q6_k") return n / 256 * 210; if (t == "iq4_xs") return n / 256 * 136
			return -1 }
		/^weight bytes:/ { total = $NF; gsub(/[()]/, "", total) }
		$1 == "token_embd.weight" { gsub(/[][,]/, " "); emb = rowb($2, $3) * $4 }
		$1 == "output.weight" { out = 1 }
		END { if (emb < 0) exit 1; printf "%.0f\n", out ? total - emb : total }'
}

printf '%-6s  %10s %10s %6s   %10s %10s %6s   %8s %8s\n' type "prefill" "peer" ratio "decode" "peer" ratio \
	"of ceil" "of med"
for type in $types; do
	model=$model_dir/exld-bench-$shape-$type.gguf
	if [ ! -f "$model" ]; then
		echo "making $model ..." >&2
		# shellcheck disable=SC2086
		"$mkmodel" $dims --vocab-from "$vocab" --type "$type" -o "$model" >&2
	fi
	sb=$(streamed_bytes "$model") || { echo "cannot size $model" >&2; exit 1; }
	: >"$tmp/ours_pp"; : >"$tmp/ours_tg"; : >"$tmp/peer_pp"; : >"$tmp/peer_tg"
	: >"$tmp/bw"; : >"$tmp/of_best"; : >"$tmp/of_med"
	p=0
	while [ $p -lt "$pairs" ]; do
		bw=$(read_bw)
		[ -n "$bw" ] || { echo "bench_membw printed no bandwidth" >&2; exit 1; }
		echo "$bw" >>"$tmp/bw"
		"$exld" run --model "$model" --prompt "$prompt" -n "$n_gen" --temperature 0 --warmup \
			--threads "$threads" >/dev/null 2>"$tmp/err" ||
			{ cat "$tmp/err" >&2; exit 1; }
		line=$(grep '^timing:' "$tmp/err")
		pt=$(echo "$line" | sed -n 's/.*prompt_tokens=\([0-9]*\).*/\1/p')
		[ "$pt" = $((words + 1)) ] || { echo "prompt is $pt tokens, not $((words + 1))" >&2; exit 1; }
		echo "$line" | sed -n 's/.*prompt_tok_s=\([0-9.]*\).*/\1/p' >>"$tmp/ours_pp"
		tg=$(echo "$line" | sed -n 's/.*gen_tok_s=\([0-9.]*\).*/\1/p')
		echo "$tg" >>"$tmp/ours_tg"
		echo "$bw" | awk -v tg="$tg" -v b="$sb" '{ printf "%.4f\n", tg * b / ($1 * 1e9) }' >>"$tmp/of_best"
		echo "$bw" | awk -v tg="$tg" -v b="$sb" '{ printf "%.4f\n", tg * b / ($2 * 1e9) }' >>"$tmp/of_med"

		# shellcheck disable=SC2086
		"$peer" --model "$model" --prompt "$prompt" --n "$n_gen" --threads "$threads" $peer_args \
			>"$tmp/peer.json" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
		sed -n 's/.*"prompt_tok_s": *\([0-9.eE+-]*\).*/\1/p' "$tmp/peer.json" >>"$tmp/peer_pp"
		sed -n 's/.*"gen_tok_s": *\([0-9.eE+-]*\).*/\1/p' "$tmp/peer.json" >>"$tmp/peer_tg"
		p=$((p + 1))
	done
	opp=$(median <"$tmp/ours_pp"); ppp=$(median <"$tmp/peer_pp")
	otg=$(median <"$tmp/ours_tg"); ptg=$(median <"$tmp/peer_tg")
	bwb=$(cut -d' ' -f1 <"$tmp/bw" | median); bwm=$(cut -d' ' -f2 <"$tmp/bw" | median)
	ceil=$(awk -v bw="$bwb" -v b="$sb" 'BEGIN { printf "%.2f", bw * 1e9 / b }')
	printf '%-6s  %10.2f %10.2f %6s   %10.2f %10.2f %6s   %8.2f %8.2f\n' "$type" "$opp" "$ppp" \
		"$(ratio "$opp" "$ppp")" "$otg" "$ptg" "$(ratio "$otg" "$ptg")" \
		"$(median <"$tmp/of_best")" "$(median <"$tmp/of_med")"
	echo "        (read bandwidth best $bwb, median $bwm GB/s: decode ceiling $ceil tok/s;" \
		"$sb bytes per token; each run's: $(cut -d' ' -f1 <"$tmp/bw" | tr '\n' ' '))"
done
echo "tok/s, medians of $pairs interleaved runs each, $threads threads; ratio = exld / llama.cpp;"
echo "of ceil = exld decode / (read bandwidth / bytes streamed per token), each run against"
echo "bench_membw's best pass read just before it (of med: its median pass); the median of the runs"
