#!/bin/sh
# Regenerates lora_SCALE.txt (in this directory): llama.cpp's logits on stories260K with a random
# rank-8 LoRA adapter from exld-mkmodel --lora-for, at scales 1 and 0.5
# (tests/model/test_lora_peer.py checks exld against them; the format is
# ../README.md's, written by ../digest.py).
# usage: regen.sh BUILD_DIR   (needs python3, ../shared/models and the
#        peer of ../shared/tools/peer, PEER, default /tmp/peer/peer-bench-native)
set -eu
build=$1
here=$(cd "$(dirname "$0")" && pwd)
peer=${PEER:-/tmp/peer/peer-bench-native}
models=${EXLD_MODELS:-$here/../../../../../shared/models}
base=$models/stories260K.gguf
prompt="Once upon a time"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
opts="--rank 8 --alpha 16 --seed 1"
# shellcheck disable=SC2086
"$build/tests/tools/exld-mkmodel" --lora-for "$base" $opts -o "$tmp/a.gguf" 2>/dev/null
for scale in 1 0.5; do
	"$build/daemon/exld" run --model "$base" --lora "$tmp/a.gguf:$scale" --prompt "$prompt" \
		-n 16 --temperature 0 --ignore-eos --json --threads 2 \
		--dump-logits "$tmp/exld.bin" >"$tmp/exld.json" 2>/dev/null
	ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.buffer.read().decode("utf-8", "replace"))["token_ids"][:15])))' \
		<"$tmp/exld.json")
	"$peer" --model "$base" --lora "$tmp/a.gguf" --lora-scale "$scale" --prompt "$prompt" \
		--teacher "$ids" --threads 2 --dump-logits "$tmp/peer.bin" \
		>"$tmp/peer.json" 2>"$tmp/peer.err" || { cat "$tmp/peer.err" >&2; exit 1; }
	python3 "$here/../digest.py" "--lora-for stories260K.gguf $opts, scale $scale" "$ids" \
		"$tmp/peer.json" "$tmp/peer.bin" "$tmp/exld.bin" >"$here/lora_$scale.txt"
	echo "lora_$scale.txt: $(grep '^# max' "$here/lora_$scale.txt")"
done
