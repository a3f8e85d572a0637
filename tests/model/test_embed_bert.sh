#!/bin/sh
# Encoders (bert, nomic-bert): `exld embed` on exld-mkmodel files against
# llama.cpp's pooled embeddings of the same files (tests/data/peer/
# embed_bert.json, made by regen_embed_bert.sh with the peer; bert-bge with
# bge's WordPiece vocabulary, tokenized by each engine), mean and
# cls, two texts in one batch (each attends to all of its own text and
# none of the other's) and one alone; generation refused; an over-long
# text refused, or cut with --truncate.  No ../shared needed.
set -u
exld=${1:?usage: test_embed_bert.sh EXLD MKMODEL PEER_DATA_DIR}
mkmodel=${2:?usage: test_embed_bert.sh EXLD MKMODEL PEER_DATA_DIR}
data=${3:?usage: test_embed_bert.sh EXLD MKMODEL PEER_DATA_DIR}
tmp=$(mktemp -d /tmp/exld-test-embed-bert-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
opts=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["opts"])' "$data/embed_bert.json")

t1="Hello, World! Café déjà vu — 東京 is nice."
for arch in bert nomic-bert bert-bge; do
	a=$arch
	extra=""
	# bge's WordPiece vocabulary: both engines tokenize the texts themselves
	[ "$arch" = bert-bge ] && a=bert && extra="--vocab-from $data/../vocab/ggml-vocab-bert-bge.gguf"
	# shellcheck disable=SC2086
	"$mkmodel" --arch $a $opts $extra --threads 1 -o "$tmp/$arch.gguf" >/dev/null 2>&1 ||
		{ echo "FAIL: exld-mkmodel --arch $arch"; fail=1; continue; }
	for mode in mean cls; do
		"$exld" embed --model "$tmp/$arch.gguf" --pooling $mode --threads 2 \
			"Once upon a time there was" "$t1" >"$tmp/$arch.$mode.jsonl" 2>"$tmp/err" ||
			{ echo "FAIL: $arch embed --pooling $mode:"; cat "$tmp/err"; fail=1; }
		"$exld" embed --model "$tmp/$arch.gguf" --pooling $mode --threads 2 "$t1" \
			>"$tmp/$arch.$mode.alone.jsonl" 2>"$tmp/err" ||
			{ echo "FAIL: $arch embed alone:"; cat "$tmp/err"; fail=1; }
	done
	"$exld" run --model "$tmp/$arch.gguf" --prompt "The cat" -n 4 >"$tmp/out" 2>"$tmp/err" &&
		{ echo "FAIL: $arch generated"; fail=1; }
	grep -q "is an embedding model ($a): it embeds text and does not generate" "$tmp/err" ||
		{ echo "FAIL: $arch generation refused with: $(cat "$tmp/err")"; fail=1; }
done
python3 - "$tmp" "$data/embed_bert.json" <<'PY' || fail=1
import json, math, sys
tmp, ref = sys.argv[1], json.load(open(sys.argv[2]))
bad = 0
def rel(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))) / math.sqrt(sum(y * y for y in b))
for arch, texts in ref["archs"].items():
    for mode in ("mean", "cls"):
        try:
            ours = [json.loads(l) for l in open(f"{tmp}/{arch}.{mode}.jsonl")]
            alone = json.loads(open(f"{tmp}/{arch}.{mode}.alone.jsonl").read())
        except Exception as e:
            print(f"FAIL: {arch} {mode}: no output ({e})"); bad = 1; continue
        for i, (o, r) in enumerate(zip(ours, texts)):
            d = rel(o["embedding"], r[mode])
            ok = d <= 1e-3 and o["n_tokens"] == r["n_tokens"] and len(ours) == len(texts)
            print(f"{'ok' if ok else 'FAIL'}: {arch} {mode} text {i} ({o['n_tokens']} tokens): "
                  f"relative L2 to llama.cpp {d:.2e}")
            bad |= not ok
        d = rel(alone["embedding"], ours[1]["embedding"])
        print(f"{'ok' if d <= 1e-6 else 'FAIL'}: {arch} {mode}: alone and in a batch {d:.1e} apart")
        bad |= d > 1e-6
sys.exit(bad)
PY

# a text longer than one pass: refused, or its last tokens with --truncate
long=$(python3 -c 'print("once upon a time " * 200)')
"$exld" embed --model "$tmp/bert.gguf" --threads 2 "$long" >"$tmp/out" 2>"$tmp/err" &&
	{ echo "FAIL: an over-long text was embedded"; fail=1; }
grep -q "is longer than the 512 an embedding model reads in one pass" "$tmp/err" ||
	grep -q "does not fit the context of 512 tokens" "$tmp/err" ||
	{ echo "FAIL: over-long text: $(cat "$tmp/err")"; fail=1; }
[ $fail = 0 ] && echo "ok: generation and over-long texts refused"
exit $fail
