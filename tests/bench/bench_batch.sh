#!/bin/sh
# Batched decode: aggregate tok/s of 1, 4 and 16 concurrent `exl bench`
# clients (-n TOKENS each) on one daemon, and each count's speedup over
# one stream.  Not a test.  With no MODEL it makes the 134M-parameter Q8_0
# model of issue 19 (dim 768, 12 layers, ff 2048, llama's 32000-token
# vocabulary) with exld-mkmodel in a temporary folder.
#
#   tests/bench/bench_batch.sh BUILD_DIR [MODEL.gguf] [ROUNDS] [TOKENS]
#
# EXLD_THREADS sets exld's --threads (default 0: every core).  Each round
# runs 1, 4 and 16 clients in turn; the table shows every round's figure
# and the median.
set -eu
build=$1
model=${2:-}
rounds=${3:-3}
tokens=${4:-128}
threads=${EXLD_THREADS:-0}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/exld-bench-batch-XXXXXX)
pid=
trap 'if [ -n "$pid" ]; then kill $pid 2>/dev/null; wait $pid 2>/dev/null; fi; rm -rf "$dir"' EXIT
if [ -z "$model" ]; then
	"$build/tests/tools/exld-mkmodel" --dim 768 --layers 12 --heads 12 --kv-heads 12 \
		--ff 2048 --type q8_0 \
		--vocab-from "$here/../../../shared/models/vocab/ggml-vocab-llama-spm.gguf" \
		-o "$dir/m134.gguf" >/dev/null
	model=$dir/m134.gguf
else
	ln -s "$(cd "$(dirname "$model")" && pwd)/$(basename "$model")" "$dir/$(basename "$model")"
fi
name=$(basename "$model" .gguf)
"$build/daemon/exld" --config /dev/null --socket "$dir/exld.sock" --models "$dir" \
	--load "$name" --threads "$threads" 2>"$dir/exld.log" &
pid=$!
export EXLD_SOCKET="$dir/exld.sock"
until "$build/client/exl" status >/dev/null 2>&1; do sleep 0.1; done
until "$build/client/exl" models 2>/dev/null | grep "$name" | grep -q loaded; do sleep 0.2; done

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for c in 1 4 16; do : >"$dir/tps.$c"; done
"$build/client/exl" bench -m "$name" -c 1 -n 8 >/dev/null # warm-up
for i in $(seq "$rounds"); do
	for c in 1 4 16; do
		"$build/client/exl" bench -m "$name" -c "$c" -n "$tokens" |
			sed -n 's/^total:.*: \([0-9.]*\) tok\/s.*/\1/p' >>"$dir/tps.$c"
	done
done
one=$(median <"$dir/tps.1")
echo "model $name, $tokens tokens a client, exld --threads $threads, $rounds rounds"
printf '%-8s %10s  %8s  %s\n' clients "tok/s" "x 1" "rounds"
for c in 1 4 16; do
	m=$(median <"$dir/tps.$c")
	printf '%-8s %10s  %8s  %s\n' "$c" "$m" "$(awk -v a="$m" -v b="$one" 'BEGIN { printf "%.2f", a / b }')" \
		"$(tr '\n' ' ' <"$dir/tps.$c")"
done
