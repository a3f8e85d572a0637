#!/bin/sh
# Output embeddings, input embeddings and prompt truncation through exld's
# subcommands (issue 18):
# - `exld embed` mean / last / cls pooling on stories260K equals llama.cpp's
#   pooled embedding (tests/data/peer/embed_stories260K.json, made by
#   regen_embed.sh with the peer) within 1e-3 relative L2; texts embedded
#   together equal texts embedded alone; --normalize gives unit vectors;
# - the model's own token_embd rows (`exld embed --token-rows`) injected
#   under an alias for the last tokens of a prompt give exactly the greedy
#   output of the plain prompt;
# - an over-long prompt on aidreams260K (context 128) is refused, and with
#   --truncate generates its tokens and reports what it dropped;
# - bad input gets clear errors.
set -u
exld=${1:?usage: test_embed.sh PATH/TO/exld PEER_DATA_DIR}
data=${2:?usage: test_embed.sh PATH/TO/exld PEER_DATA_DIR}
models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -d "$models" ]; then
	echo "EXLD_MODELS ('$models') is absent; skipping"
	exit 77
fi
stories=$models/stories260K.gguf
aidreams=$models/aidreams260K.gguf
tmp=$(mktemp -d /tmp/exld-test-embed-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0

# -- exld embed against llama.cpp --
for mode in mean last cls; do
	"$exld" embed --model "$stories" --pooling $mode --threads 2 "Once upon a time" \
		"Lily and Ben went to the park to play" "The cat" >"$tmp/$mode.jsonl" 2>"$tmp/err" ||
		{ echo "FAIL: exld embed --pooling $mode:"; cat "$tmp/err"; fail=1; }
	"$exld" embed --model "$stories" --pooling $mode --threads 2 "The cat" \
		>"$tmp/$mode.alone.jsonl" 2>"$tmp/err" ||
		{ echo "FAIL: exld embed alone:"; cat "$tmp/err"; fail=1; }
done
"$exld" embed --model "$stories" --normalize --threads 2 "Once upon a time" \
	>"$tmp/norm.jsonl" 2>"$tmp/err" || { echo "FAIL: --normalize:"; cat "$tmp/err"; fail=1; }
python3 - "$tmp" "$data/embed_stories260K.json" <<'PY' || fail=1
import json, math, sys
tmp, ref = sys.argv[1], json.load(open(sys.argv[2]))
bad = 0
def rel(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))) / math.sqrt(sum(y * y for y in b))
for mode in ("mean", "last", "cls"):
    ours = [json.loads(l) for l in open(f"{tmp}/{mode}.jsonl")]
    if len(ours) != len(ref["texts"]):
        print(f"FAIL: {mode}: {len(ours)} lines for {len(ref['texts'])} texts"); bad = 1; continue
    for i, (o, r) in enumerate(zip(ours, ref["texts"])):
        d = rel(o["embedding"], r[mode])
        ok = d <= 1e-3 and o["n_tokens"] == r["n_tokens"] and o["index"] == i and \
             o["pooling"] == mode and o["n_embd"] == len(r[mode])
        print(f"{'ok' if ok else 'FAIL'}: {mode} text {i} ({o['n_tokens']} tokens): "
              f"relative L2 to llama.cpp {d:.2e}")
        bad |= not ok
    alone = json.loads(open(f"{tmp}/{mode}.alone.jsonl").read())
    if alone["embedding"] != ours[2]["embedding"]:
        print(f"FAIL: {mode}: 'The cat' alone differs from it in a batch of three"); bad = 1
    else:
        print(f"ok: {mode}: the same vector alone and in a batch")
n = json.loads(open(f"{tmp}/norm.jsonl").read())["embedding"]
m = [json.loads(l) for l in open(f"{tmp}/mean.jsonl")][0]["embedding"]
norm = math.sqrt(sum(x * x for x in n)); mn = math.sqrt(sum(x * x for x in m))
d = max(abs(x - y / mn) for x, y in zip(n, m))
if abs(norm - 1) > 1e-5 or d > 1e-6:
    print(f"FAIL: --normalize: norm {norm}, off the mean's direction by {d}"); bad = 1
else:
    print("ok: --normalize is the mean scaled to unit norm")
sys.exit(bad)
PY

# -- input embeddings: token_embd rows in place of the tokens they are --
prefix="Once upon a time, there was a"
"$exld" embed --model "$stories" --token-rows "$tmp/rows.f32" "little girl" 2>"$tmp/err" ||
	{ echo "FAIL: --token-rows:"; cat "$tmp/err"; fail=1; }
[ "$(wc -c <"$tmp/rows.f32")" -eq $((4 * 64 * 4)) ] ||
	{ echo "FAIL: --token-rows wrote $(wc -c <"$tmp/rows.f32") bytes, not 4 rows of 64 float32"; fail=1; }
"$exld" run --model "$stories" --prompt "$prefix little girl" -n 32 --temperature 0 --json \
	--threads 2 >"$tmp/plain.json" 2>"$tmp/err" || { echo "FAIL: plain run:"; cat "$tmp/err"; fail=1; }
"$exld" run --model "$stories" --prompt "$prefix<IMG>" --embedding "<IMG>=$tmp/rows.f32" -n 32 \
	--temperature 0 --json --threads 2 >"$tmp/embd.json" 2>"$tmp/err" ||
	{ echo "FAIL: run --embedding:"; cat "$tmp/err"; fail=1; }
python3 - "$tmp" <<'PY' || fail=1
import json, sys
a = json.load(open(sys.argv[1] + "/plain.json")); b = json.load(open(sys.argv[1] + "/embd.json"))
if a["token_ids"] != b["token_ids"] or a["prompt_tokens"] != b["prompt_tokens"] or len(a["token_ids"]) != 32:
    print("FAIL: injected token_embd rows:", b["token_ids"], b["prompt_tokens"], "plain:", a["token_ids"], a["prompt_tokens"])
    sys.exit(1)
print(f"ok: token_embd rows under an alias give the plain prompt's {len(a['token_ids'])} greedy tokens")
PY

# -- truncation on aidreams260K (context 128) --
long=$(python3 -c "print(' '.join(['the cat sat on the mat and looked at the dog'] * 20))")
if "$exld" run --model "$aidreams" --prompt "$long" -n 16 --temperature 0 >"$tmp/out" 2>"$tmp/err"; then
	echo "FAIL: an over-long prompt without --truncate ran"; fail=1
elif grep -q "does not fit the context of 128 tokens" "$tmp/err"; then
	echo "ok: refused without --truncate: $(tail -1 "$tmp/err")"
else
	echo "FAIL: refusal says:"; cat "$tmp/err"; fail=1
fi
"$exld" run --model "$aidreams" --prompt "$long" -n 16 --temperature 0 --ignore-eos --truncate \
	--json --threads 2 >"$tmp/trunc.json" 2>"$tmp/err" || { echo "FAIL: --truncate:"; cat "$tmp/err"; fail=1; }
python3 - "$tmp/trunc.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
ok = d.get("new_tokens") == 16 and d.get("prompt_tokens") == 128 - 16 and \
     d.get("truncated_tokens", 0) > 0 and d["stop_reason"] == "max_new_tokens"
print(("ok" if ok else "FAIL") + f": --truncate: prompt_tokens {d.get('prompt_tokens')}, "
      f"truncated_tokens {d.get('truncated_tokens')}, new_tokens {d.get('new_tokens')}")
sys.exit(0 if ok else 1)
PY

# -- bad input --
expect_err() { # what, pattern, command...
	what=$1 pat=$2
	shift 2
	if "$@" >"$tmp/out" 2>"$tmp/err"; then
		echo "FAIL: $what was accepted"; fail=1
	elif grep -q "$pat" "$tmp/err"; then
		echo "ok: $what: $(grep "$pat" "$tmp/err" | head -1)"
	else
		echo "FAIL: $what: expected '$pat' in:"; cat "$tmp/err"; fail=1
	fi
}
expect_err "no text" "no text to embed" "$exld" embed --model "$stories"
expect_err "unknown pooling" "pooling must be" "$exld" embed --model "$stories" --pooling max x
head -c 100 "$tmp/rows.f32" >"$tmp/short.f32"
expect_err "a file not of whole rows" "not a whole number of rows" \
	"$exld" run --model "$stories" --prompt "a<X>" --embedding "<X>=$tmp/short.f32"
expect_err "an alias not in the prompt" "no input embedding's alias occurs" \
	"$exld" run --model "$stories" --prompt "a b c" --embedding "<X>=$tmp/rows.f32"
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<64f', *([float('nan')] + [0.0] * 63)))" \
	>"$tmp/nan.f32"
expect_err "a NaN row" "not a finite number" \
	"$exld" run --model "$stories" --prompt "a<X>" --embedding "<X>=$tmp/nan.f32"
expect_err "an embedding without =" "expected ALIAS=FILE" \
	"$exld" run --model "$stories" --prompt "a" --embedding "nofile"
exit $fail
