#!/bin/sh
# Regenerates embed_stories260K.json: llama.cpp's pooled embeddings (peer
# --embed MODE: the final hidden state after the output norm, pooled over
# the prompt, not normalized) of stories260K for each text and pooling, the
# reference tests/model/test_embed.sh holds `exld embed` to.
# usage: regen_embed.sh [MODELS_DIR]   (PEER, default /tmp/peer/peer-bench-native)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
models=${1:-$here/../../../../shared/models}
peer=${PEER:-/tmp/peer/peer-bench-native}
out=$here/embed_stories260K.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for text in "Once upon a time" "Lily and Ben went to the park to play" "The cat"; do
	for mode in mean last cls; do
		"$peer" --model "$models/stories260K.gguf" --prompt "$text" --n 1 --threads 1 \
			--embed "$mode" >"$tmp/$i.$mode.json" 2>"$tmp/err" ||
			{ cat "$tmp/err" >&2; exit 1; }
	done
	printf '%s\n' "$text" >"$tmp/$i.text"
	i=$((i + 1))
done
python3 - "$tmp" "$i" >"$out" <<'PY'
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
rows = []
for i in range(n):
    text = open(f"{tmp}/{i}.text").read().rstrip("\n")
    row = {"text": text}
    for mode in ("mean", "last", "cls"):
        d = json.load(open(f"{tmp}/{i}.{mode}.json"))
        row["n_tokens"] = d["prompt_tokens"]
        row[mode] = d["embedding"]
    rows.append(row)
json.dump({"model": "stories260K.gguf", "peer": "llama.cpp de3ff815 (node-llama-cpp 3.22.1), "
           "peer-bench-native --embed", "texts": rows}, sys.stdout)
print()
PY
echo "wrote $out"
