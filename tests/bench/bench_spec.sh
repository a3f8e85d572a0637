#!/bin/sh
# Speculative decoding's speed: a benchmark, not a test (never run by meson
# test).  On a TinyLlama-1.1B-shaped random F16 GGUF (dim 2048, 22 layers,
# 32 heads, 4 KV heads, FFN 5632, llama's 32000-token vocabulary), greedy:
#
#   1. exld run, 64 new tokens: decode tok/s without drafting and with its
#      Q4_0 twin (exld-mkmodel, the same --seed) drafting 4 tokens a step;
#   2. exld run with n-gram drafting (--ngram-draft 3) on a prompt whose
#      continuation repeats it: the prompt is the model's own greedy
#      continuation of a short prompt, followed by that short prompt again;
#   3. a daemon with both models loaded: 8 jobs at once (exl generate, 8
#      prompts in one batch), aggregate tok/s (8 x 64 tokens over the wall
#      time) plain and drafting with the twin.
#
# Runs are interleaved (plain, drafting, plain, ...) and the medians are
# printed with the ratio and the acceptance rate; each drafting run's ids
# are checked against the plain run's.  The machine's other load moves the
# figures: compare only runs taken together.
#
#   tests/bench/bench_spec.sh [BUILD_DIR]       (default: build)
#
# Environment: PAIRS (interleaved pairs, default 5), THREADS (default 2),
# N_GEN (default 64), DRAFT_TOKENS (default 4), MODEL_DIR (where the
# models are made and kept, default /tmp/exld-bench-spec; 2.9 GB, never in
# the repository), PARTS (default "1 2 3").
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$src/$build ;; esac
exld=$build/daemon/exld
exl=$build/client/exl
mkmodel=$build/tests/tools/exld-mkmodel
pairs=${PAIRS:-5}
threads=${THREADS:-2}
n_gen=${N_GEN:-64}
k=${DRAFT_TOKENS:-4}
model_dir=${MODEL_DIR:-/tmp/exld-bench-spec}
vocab=${VOCAB:-$src/../shared/models/vocab/ggml-vocab-llama-spm.gguf}

for f in "$exld" "$exl" "$mkmodel"; do
	[ -x "$f" ] || { echo "missing $f (build it: ninja -C $build)" >&2; exit 1; }
done
[ -f "$vocab" ] || { echo "missing vocabulary $vocab" >&2; exit 1; }
mkdir -p "$model_dir"
for type in f16 q4_0; do
	m=$model_dir/tl-$type.gguf
	[ -f "$m" ] && continue
	echo "making $m ..." >&2
	"$mkmodel" --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ff 5632 --seed 11 \
		--vocab-from "$vocab" --type "$type" -o "$m" >&2
done
target=$model_dir/tl-f16.gguf
draft=$model_dir/tl-q4_0.gguf

tmp=$(mktemp -d /tmp/exld-bench-spec-XXXXXX)
daemon_pid=
cleanup() {
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
field() { sed -n "s/.*$1=\\([0-9.]*\\).*/\\1/p" "$2"; }
ids() { sed -n 's/.*"token_ids":\(\[[^]]*\]\).*/\1/p' "$1"; }

# one_run NAME PROMPT [OPTIONS]: appends decode tok/s to $tmp/NAME.tg,
# accepted / proposed to $tmp/NAME.acc, keeps the ids in $tmp/NAME.ids
one_run() {
	name=$1 prompt=$2
	shift 2
	"$exld" run --model "$target" --prompt "$prompt" -n "$n_gen" --temperature 0 --warmup \
		--threads "$threads" --json "$@" >"$tmp/out" 2>"$tmp/err" ||
		{ cat "$tmp/err" >&2; exit 1; }
	field gen_tok_s "$tmp/err" >>"$tmp/$name.tg"
	p=$(field draft_proposed "$tmp/err"); a=$(field draft_accepted "$tmp/err")
	[ -n "$p" ] && echo "$a $p" >>"$tmp/$name.acc"
	ids "$tmp/out" >"$tmp/$name.ids"
}

# pair_runs LABEL PROMPT DRAFT-OPTIONS...: PAIRS interleaved plain / drafting runs
pair_runs() {
	label=$1 prompt=$2
	shift 2
	: >"$tmp/plain.tg"; : >"$tmp/spec.tg"; : >"$tmp/spec.acc"
	i=0
	while [ $i -lt "$pairs" ]; do
		one_run plain "$prompt"
		one_run spec "$prompt" "$@"
		cmp -s "$tmp/plain.ids" "$tmp/spec.ids" ||
			{ echo "$label: drafting changed the ids" >&2; exit 1; }
		i=$((i + 1))
	done
	pt=$(median <"$tmp/plain.tg"); st=$(median <"$tmp/spec.tg")
	acc=$(awk '{ a += $1; p += $2 } END { if (p) printf "%d of %d (%.1f%%)", a, p, 100 * a / p; else print "none proposed" }' "$tmp/spec.acc")
	printf '%-34s %8.2f %8.2f %6s   %s\n' "$label" "$pt" "$st" "$(ratio "$st" "$pt")" "$acc"
}

echo "decode tok/s (exld run, $n_gen tokens, greedy, $threads threads), medians of $pairs interleaved pairs"
printf '%-34s %8s %8s %6s   %s\n' "" plain drafting ratio "proposals accepted (all runs)"
short="The history of the city begins"
parts=${PARTS:-1 2 3}
has_part() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
if has_part 1; then
	pair_runs "Q4_0 twin drafts $k" "$short" --draft-model "$draft" --draft-tokens "$k"
fi

# A prompt the output repeats: the model's own continuation, then the
# short prompt again (greedy picks the same continuation after it as long
# as the model copies what it saw; a random model may not).
if has_part 2; then
	"$exld" run --model "$target" --prompt "$short" -n "$n_gen" --temperature 0 \
		--threads "$threads" --completion-only >"$tmp/cont" 2>/dev/null
	rep_prompt="$short$(cat "$tmp/cont") $short"
	pair_runs "n-gram (3) on a repeating prompt" "$rep_prompt" --ngram-draft 3 \
		--draft-tokens "$k"
fi
has_part 3 || exit 0

# The daemon: 8 jobs in one batch, plain and drafting.
sock=$tmp/exld.sock
"$exld" --config /dev/null --socket "$sock" --models "$model_dir" --threads "$threads" \
	--load tl-f16,tl-q4_0 >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
i=0
until EXLD_SOCKET=$sock "$exl" status 2>/dev/null | grep -q 'tl-q4_0 .*loaded' &&
      EXLD_SOCKET=$sock "$exl" status 2>/dev/null | grep -q 'tl-f16 .*loaded'; do
	i=$((i + 1))
	[ $i -lt 600 ] || { echo "the daemon did not load the models" >&2; cat "$tmp/daemon.log" >&2; exit 1; }
	sleep 0.5
done
set -- "The history of the city begins" "In the beginning" "Once upon a time" \
	"The results show that" "A recipe for bread:" "def main():" "Dear Sir," "The weather today"
batch() {
	t0=$(date +%s.%N)
	EXLD_SOCKET=$sock "$exl" generate -m tl-f16 -n "$n_gen" --temperature 0 --ignore-eos \
		--json "$@" >"$tmp/batch.json" || exit 1
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" -v n="$n_gen" 'BEGIN { printf "%.3f\n", 8 * n / (b - a) }'
}
: >"$tmp/b_plain"; : >"$tmp/b_spec"; : >"$tmp/b_acc"
i=0
while [ $i -lt "$pairs" ]; do
	batch "$@" >>"$tmp/b_plain"
	ids "$tmp/batch.json" >"$tmp/b_plain.ids"
	batch --draft-model tl-q4_0 --draft-tokens "$k" "$@" >>"$tmp/b_spec"
	ids "$tmp/batch.json" >"$tmp/b_spec.ids"
	cmp -s "$tmp/b_plain.ids" "$tmp/b_spec.ids" ||
		{ echo "daemon: drafting changed the output" >&2; exit 1; }
	sed -n 's/.*"draft_proposed":\([0-9]*\),"draft_accepted":\([0-9]*\).*/\2 \1/p' \
		"$tmp/batch.json" >>"$tmp/b_acc"
	i=$((i + 1))
done
bp=$(median <"$tmp/b_plain"); bs=$(median <"$tmp/b_spec")
acc=$(awk '{ a += $1; p += $2 } END { if (p) printf "%d of %d (%.1f%%)", a, p, 100 * a / p; else print "none proposed" }' "$tmp/b_acc")
echo "aggregate tok/s of 8 jobs in one batch (daemon, exl generate; wall time, prompts included)"
printf '%-34s %8.2f %8.2f %6s   %s\n' "8 jobs, Q4_0 twin drafts $k" "$bp" "$bs" "$(ratio "$bs" "$bp")" "$acc"
EXLD_SOCKET=$sock "$exl" status | grep -i speculative || true
