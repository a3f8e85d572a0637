#!/bin/sh
# Regenerates embed_bert.json: llama.cpp's pooled embeddings (peer --embed
# MODE: the last block's hidden states, pooled over the text, not
# normalized) of exld-mkmodel's bert and nomic-bert files for each text and
# pooling, the reference tests/model/test_embed_bert.sh holds `exld embed` to.
# usage: regen_embed_bert.sh BUILD_DIR   (PEER, default /tmp/peer/peer-bench-native)
set -eu
build=$1
here=$(cd "$(dirname "$0")" && pwd)
peer=${PEER:-/tmp/peer/peer-bench-native}
out=$here/embed_bert.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
opts="--dim 128 --layers 2 --heads 4 --ff 256 --ctx 512 --seed 1 --type f32"
# bert-bge: bert with bge's WordPiece vocabulary (tests/data/vocab), so that
# both engines tokenize the texts themselves
vocab=$here/../vocab/ggml-vocab-bert-bge.gguf
for arch in bert nomic-bert bert-bge; do
	a=$arch
	extra=""
	[ "$arch" = bert-bge ] && a=bert && extra="--vocab-from $vocab"
	# shellcheck disable=SC2086
	"$build/tests/tools/exld-mkmodel" --arch $a $opts $extra --threads 1 -o "$tmp/$arch.gguf" \
		2>/dev/null
	i=0
	for text in "Once upon a time there was" "Hello, World! Café déjà vu — 東京 is nice."; do
		for mode in mean cls; do
			"$peer" --model "$tmp/$arch.gguf" --prompt "$text" --n 1 --threads 1 \
				--embed "$mode" >"$tmp/$arch.$i.$mode.json" 2>"$tmp/err" ||
				{ cat "$tmp/err" >&2; exit 1; }
		done
		printf '%s\n' "$text" >"$tmp/$i.text"
		i=$((i + 1))
	done
done
python3 - "$tmp" "$opts" >"$out" <<'PY'
import json, sys
tmp, opts = sys.argv[1], sys.argv[2]
res = {"opts": opts, "peer": "llama.cpp (node-llama-cpp), peer-bench-native --embed", "archs": {}}
for arch in ("bert", "nomic-bert", "bert-bge"):
    rows = []
    for i in range(2):
        row = {"text": open(f"{tmp}/{i}.text").read().rstrip("\n")}
        for mode in ("mean", "cls"):
            d = json.load(open(f"{tmp}/{arch}.{i}.{mode}.json"))
            row["n_tokens"] = d["prompt_tokens"]
            row[mode] = [round(x, 7) for x in d["embedding"]]
        rows.append(row)
    res["archs"][arch] = rows
json.dump(res, sys.stdout)
print()
PY
echo "wrote $out"
