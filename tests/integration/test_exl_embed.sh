#!/bin/sh
# Embeddings and truncation through a real exld (issue 18): `exl embed`
# equals `exld embed` (mean, last, cls; --normalize), also while a
# generation runs beside it in the same batches, and that generation's
# text is unchanged; refusals come back as errors; `exl generate
# --truncate` on aidreams260K (context 128) generates and reports what it
# dropped, and without it the prompt is refused.
set -u
exld=${1:?usage: test_exl_embed.sh EXLD EXL}
exl=${2:?usage: test_exl_embed.sh EXLD EXL}
. "$(dirname "$0")/exl_common.sh"

stories=$models/stories260K.gguf
t1="Once upon a time"
t2="Lily and Ben went to the park to play"
t3="The cat"

# same FILE_A FILE_B WHAT: the JSON lines' embeddings and n_tokens agree
same() {
	python3 - "$1" "$2" <<'PY'
import json, math, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
if len(a) != len(b) or not a:
    print(f"{len(a)} lines against {len(b)}"); sys.exit(1)
worst = 0.0
for x, y in zip(a, b):
    if x["n_tokens"] != y["n_tokens"] or len(x["embedding"]) != len(y["embedding"]):
        print("n_tokens or n_embd differ:", x["n_tokens"], y["n_tokens"]); sys.exit(1)
    d = math.sqrt(sum((p - q) ** 2 for p, q in zip(x["embedding"], y["embedding"])))
    worst = max(worst, d / math.sqrt(sum(q * q for q in y["embedding"])))
print(f"relative L2 {worst:.2e}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
}

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_daemon stories260K,aidreams260K --http "127.0.0.1:$port" || exit 1

for mode in mean last cls; do
	"$exld" embed --model "$stories" --pooling $mode --threads 1 "$t1" "$t2" "$t3" \
		>"$tmp/exld.$mode" 2>"$tmp/e" || { bad "exld embed $mode: $(cat "$tmp/e")"; continue; }
	"$exl" embed -m stories260K --pooling $mode "$t1" "$t2" "$t3" >"$tmp/exl.$mode" 2>"$tmp/e" ||
		{ bad "exl embed $mode: $(cat "$tmp/e")"; continue; }
	if r=$(same "$tmp/exl.$mode" "$tmp/exld.$mode"); then
		ok "exl embed --pooling $mode equals exld embed ($r)"
	else
		bad "exl embed --pooling $mode differs from exld embed: $r"
	fi
done
"$exld" embed --model "$stories" --normalize --threads 1 "$t2" >"$tmp/exld.norm" 2>/dev/null
"$exl" embed -m stories260K --normalize "$t2" >"$tmp/exl.norm" 2>"$tmp/e" || bad "exl embed --normalize: $(cat "$tmp/e")"
r=$(same "$tmp/exl.norm" "$tmp/exld.norm") && ok "--normalize ($r)" ||
	bad "exl embed --normalize differs: $r"

# embeddings in the same batches as a generation
want=$(expected "Once upon a time" 200)
"$exl" generate -m stories260K -n 200 --temperature 0 "Once upon a time" >"$tmp/gen" 2>"$tmp/gen.e" &
gpid=$!
k=0
while [ $k -lt 5 ]; do
	"$exl" embed -m stories260K --pooling mean "$t1" "$t2" "$t3" >"$tmp/exl.mix" 2>"$tmp/e" ||
		bad "exl embed beside a generation: $(cat "$tmp/e")"
	r=$(same "$tmp/exl.mix" "$tmp/exld.mean") || bad "embedding beside a generation differs: $r"
	k=$((k + 1))
done
wait $gpid || bad "exl generate beside embeddings failed: $(cat "$tmp/gen.e")"
[ "$(cat "$tmp/gen")" = "$want" ] && ok "a generation beside 5 embed batches is exld run's text" ||
	bad "generation beside embeddings: got $(head -c 200 "$tmp/gen")"
[ $fail = 0 ] && ok "embeddings beside a generation equal exld embed's"

# refusals
"$exl" embed -m nosuch "$t1" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 4 ] && ok "unknown model: exit 4: $(cat "$tmp/e")" || bad "unknown model: exit $rc: $(cat "$tmp/e")"
"$exl" embed -m stories260K --pooling max "$t1" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 2 ] && has "$tmp/e" "--pooling must be" && ok "bad pooling: exit 2" || bad "bad pooling: exit $rc"
"$exl" embed -m stories260K >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 2 ] && has "$tmp/e" "no text to embed" && ok "no text: exit 2" || bad "no text: exit $rc"

# input embeddings through the daemon: exld run's output, and the prefix
# cache shares pages only between equal blocks (pages of 32 positions;
# the block sits in the first)
"$exld" embed --model "$stories" --token-rows "$tmp/a.f32" "little girl" 2>/dev/null
"$exld" embed --model "$stories" --token-rows "$tmp/b.f32" "boy named Tim" 2>/dev/null
tail="went to the park with her mom. They saw a big tree and a bird in it. The bird was singing a song and the sun was warm and bright that day"
for k in a b; do
	"$exld" run --model "$stories" --prompt "Once upon a time, there was a <X> $tail" \
		--embedding "<X>=$tmp/$k.f32" -n 24 --temperature 0 --json --threads 1 \
		>"$tmp/run.$k" 2>"$tmp/e" || bad "exld run --embedding $k: $(cat "$tmp/e")"
done
for k in a b a; do
	"$exl" generate -m stories260K --embedding "<X>=$tmp/$k.f32" -n 24 --temperature 0 --json \
		"Once upon a time, there was a <X> $tail" >>"$tmp/gen.embd" 2>"$tmp/e" ||
		bad "exl generate --embedding $k: $(cat "$tmp/e")"
done
python3 - "$tmp" <<'PY' && ok "input embeddings: $(cat "$tmp/embd.ok")" || bad "input embeddings through the daemon"
import json, sys
t = sys.argv[1]
runs = {k: json.load(open(f"{t}/run.{k}")) for k in "ab"}
g = [json.loads(l) for l in open(f"{t}/gen.embd")]
checks = [
    (g[0]["text"] == runs["a"]["text"], "block A equals exld run"),
    (g[1]["text"] == runs["b"]["text"], "block B equals exld run"),
    (runs["a"]["text"] != runs["b"]["text"], "A and B give different text"),
    (g[1]["cached_tokens"] == 0, f"B after A reused {g[1]['cached_tokens']} cached positions (want 0)"),
    (g[2]["cached_tokens"] >= 32 and g[2]["text"] == g[0]["text"],
     f"A again reused {g[2]['cached_tokens']} positions with the same text"),
]
for good, what in checks:
    if not good:
        print("FAIL:", what)
msg = "; ".join(w for _, w in checks)
open(f"{t}/embd.ok", "w").write(msg)
sys.exit(0 if all(c for c, _ in checks) else 1)
PY

# the HTTP front: /v1/embeddings and /api/embed give the same unit vectors,
# exld embed --normalize's; /api/embeddings the raw mean; errors
"$exld" embed --model "$stories" --normalize --threads 1 "$t1" "$t2" >"$tmp/exld.n2" 2>/dev/null
python3 - "$port" "$tmp/exld.n2" "$tmp/exld.mean" "$t1" "$t2" <<'PY' && ok "HTTP: $(cat "$tmp/http.ok")" || bad "HTTP embeddings"
import json, math, sys, urllib.request, urllib.error
port, nfile, mfile, t1, t2 = sys.argv[1:]
base = f"http://127.0.0.1:{port}"
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
want = [json.loads(l)["embedding"] for l in open(nfile)]
raw = [json.loads(l)["embedding"] for l in open(mfile)][0]
def close(a, b):
    return len(a) == len(b) and math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))) <= 1e-6 * math.sqrt(sum(y * y for y in b))
bad = []
s, o = post("/v1/embeddings", {"model": "stories260K", "input": [t1, t2]})
if s != 200 or o.get("object") != "list" or [d["index"] for d in o["data"]] != [0, 1] or \
   not all(close(d["embedding"], w) for d, w in zip(o["data"], want)) or o["usage"]["prompt_tokens"] != 5 + 14:
    bad.append(f"/v1/embeddings: {s} {str(o)[:300]}")
s1, o1 = post("/v1/embeddings", {"model": "stories260K", "input": t1})
if s1 != 200 or len(o1["data"]) != 1 or not close(o1["data"][0]["embedding"], want[0]):
    bad.append(f"/v1/embeddings one string: {s1} {str(o1)[:300]}")
s4, o4 = post("/v1/embeddings", {"model": "stories260K", "input": t2, "encoding_format": "base64"})
import base64, struct
if s4 != 200 or list(struct.unpack("<%df" % len(want[1]), base64.b64decode(o4["data"][0]["embedding"]))) != [struct.unpack("<f", struct.pack("<f", x))[0] for x in o["data"][1]["embedding"]]:
    bad.append(f"/v1/embeddings base64: {s4} {str(o4)[:300]}")
s2, o2 = post("/api/embed", {"model": "stories260K", "input": [t1, t2]})
if s2 != 200 or o2.get("model") != "stories260K" or len(o2["embeddings"]) != 2 or \
   o2["embeddings"] != [d["embedding"] for d in o["data"]]:
    bad.append(f"/api/embed: {s2} {str(o2)[:300]}")
s3, o3 = post("/api/embeddings", {"model": "stories260K", "prompt": t1})
if s3 != 200 or not close(o3["embedding"], raw):
    bad.append(f"/api/embeddings: {s3} {str(o3)[:300]}")
for path, body, code in [("/v1/embeddings", {"model": "stories260K"}, 400),
                         ("/v1/embeddings", {"model": "stories260K", "input": []}, 400),
                         ("/v1/embeddings", {"model": "stories260K", "input": [1]}, 400),
                         ("/v1/embeddings", {"model": "stories260K", "input": "x", "encoding_format": "hex"}, 400),
                         ("/v1/embeddings", {"model": "nonesuch", "input": "x"}, 404),
                         ("/api/embed", {"model": "stories260K", "input": "x", "pooling": "max"}, 400)]:
    s, o = post(path, body)
    if s != code or "error" not in o:
        bad.append(f"{path} {body}: {s} {o}")
for b in bad:
    print("FAIL:", b)
open(nfile.replace("exld.n2", "http.ok"), "w").write(
    "/v1/embeddings (float and base64) and /api/embed equal exld embed --normalize and each other; /api/embeddings the raw mean; 6 bad bodies refused")
sys.exit(1 if bad else 0)
PY

# truncation through the daemon (aidreams260K: context 128)
long=$(python3 -c "print(' '.join(['the cat sat on the mat and looked at the dog'] * 20))")
"$exl" generate -m aidreams260K -n 16 --temperature 0 --ignore-eos "$long" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc != 0 ] && has "$tmp/e" "does not fit the context of 128 tokens" &&
	ok "too long without --truncate: refused ($(cat "$tmp/e"))" ||
	bad "too long without --truncate: exit $rc: $(cat "$tmp/e")"
"$exl" generate -m aidreams260K -n 16 --temperature 0 --ignore-eos --truncate --json "$long" \
	>"$tmp/trunc.json" 2>"$tmp/e" || bad "exl generate --truncate: $(cat "$tmp/e")"
"$exld" run --model "$models/aidreams260K.gguf" --prompt "$long" -n 16 --temperature 0 \
	--ignore-eos --truncate --json --threads 1 >"$tmp/trunc.run" 2>/dev/null
python3 - "$tmp/trunc.json" "$tmp/trunc.run" <<'PY' && ok "exl generate --truncate: $(cat "$tmp/trunc.ok")" || bad "exl generate --truncate"
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
ok = a["text"] == b["text"] and a["new_tokens"] == 16 and \
     a.get("truncated_tokens") == b.get("truncated_tokens") and a.get("truncated_tokens", 0) > 0 and \
     a["prompt_tokens"] == 112
msg = f"prompt_tokens {a['prompt_tokens']}, truncated_tokens {a.get('truncated_tokens')}, " \
      f"{a['new_tokens']} tokens, exld run's text: {a['text'] == b['text']}"
print(msg)
open(sys.argv[1].replace(".json", ".ok"), "w").write(msg)
sys.exit(0 if ok else 1)
PY
exit $fail
