#!/bin/sh
# The exl tool against a real exld: streamed output equals the result
# (--json) and `exld run`; --dump-logits writes exld run's rows; several prompts in one batch print in order; two
# exl processes sharing one model each get their own correct output;
# --ngram-draft and --draft-model give the plain ids, --beams its score; -
# reads stdin; models / load / unload / status / bench; every exit status
# of docs/exl.md with its message: no daemon, an unknown model, bad options
# (each option's range is the daemon's: a value it would refuse never
# leaves exl), a load by a user who is not an admin, Ctrl-C, an option of a
# feature the daemon does not list (the last three against
# tests/integration/fake_exld.py, a stand-in daemon).
set -u
exld=${1:?usage: test_exl.sh EXLD EXL}
exl=${2:?usage: test_exl.sh EXLD EXL}
. "$(dirname "$0")/exl_common.sh"

known="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."

cr=$(printf '\r')

# json_text FILE [LINE]: the "text" of a JSON result line.
json_text() {
	python3 -c 'import json,sys
lines = open(sys.argv[1]).read().splitlines()
sys.stdout.write(json.loads(lines[int(sys.argv[2])])["text"] + "\n")' "$1" "${2:-0}"
}

# ---- no daemon ----
"$exl" generate hi >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 3 ] && has "$tmp/e" "cannot connect to exld at $sock: " &&
	has "$tmp/e" "(is the daemon running?)" && ok "no daemon: exit 3 and why" ||
	bad "no daemon: rc $rc: $(cat "$tmp/e")"
: >"$tmp/notasocket"
"$exl" --socket "$tmp/notasocket" status >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 3 ] && has "$tmp/e" "cannot connect to exld at $tmp/notasocket" &&
	has "$tmp/e" "not a socket" && ok "not a socket: exit 3" ||
	bad "not a socket: rc $rc: $(cat "$tmp/e")"

# ---- usage errors (no daemon needed) ----
"$exl" generate --top-k -3 hi >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 2 ] && has "$tmp/e" "--top-k wants an integer" && ok "bad value: exit 2" ||
	bad "bad value: rc $rc: $(cat "$tmp/e")"
"$exl" generate --frobnicate hi >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 2 ] && has "$tmp/e" "unknown option '--frobnicate'" && ok "unknown option: exit 2" ||
	bad "unknown option: rc $rc: $(cat "$tmp/e")"
"$exl" generate --cfg-scale 2 hi >/dev/null 2>"$tmp/e"
[ $? = 2 ] && ok "cfg-scale without negative: exit 2" || bad "cfg-scale alone: $(cat "$tmp/e")"
"$exl" frob >/dev/null 2>&1
[ $? = 2 ] && ok "unknown command: exit 2" || bad "unknown command"
"$exl" --help >"$tmp/o" && has "$tmp/o" "exit status:" && has "$tmp/o" "3    cannot connect" &&
	ok "help lists exit statuses" || bad "help: $(cat "$tmp/o")"

start_daemon stories260K || { bad "daemon start"; exit 1; }

# ---- a socket this user may not use (as root: run exl as nobody) ----
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	chmod 0711 "$tmp"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$exl" status >/dev/null 2>"$tmp/e"
	rc=$?
	chmod 0700 "$tmp"
	[ $rc = 3 ] && has "$tmp/e" "cannot connect to exld at $sock: Permission denied" &&
		has "$tmp/e" "no access to the socket" && ok "no access to the socket: exit 3" ||
		bad "no access: rc $rc: $(cat "$tmp/e")"
else
	echo "skipped: the no-access check (needs root and setpriv)"
fi

# ---- option values: the daemon's ranges, refused before anything is sent ----
# refused WHAT ARGS...: exl generate ARGS exits 2 (not 1, the daemon's
# refusal) with a message naming WHAT.
refused() {
	what=$1
	shift
	"$exl" generate "$@" "Once upon a time" >/dev/null 2>"$tmp/e"
	rc=$?
	[ $rc = 2 ] && has "$tmp/e" "$what" && ! has "$tmp/e" "exl: generate:" ||
		bad "$*: rc $rc (want 2, refused by exl): $(cat "$tmp/e")"
}
refused "--mirostat wants 0 or 2, not '1'" --mirostat 1
refused "--mirostat" --mirostat 3
refused "--temperature" --temperature 101
refused "--top-k" --top-k 2147483648
refused "--top-p" --top-p 1.01
refused "--min-p" --min-p -0.1
refused "--typical" --typical 1.5
refused "--tfs" --tfs 2
refused "--top-a" --top-a 1.5
refused "--rep-pen wants a number in (0, 100]" --rep-pen 0
refused "--rep-pen" --rep-pen 1e-50
refused "--rep-pen" --rep-pen 101
refused "--rep-range" --rep-range -2
refused "--rep-decay" --rep-decay 16777217
refused "--freq-pen" --freq-pen 101
refused "--pres-pen" --pres-pen -101
refused "--no-repeat-ngram" --no-repeat-ngram 65
refused "--dry-mult" --dry-mult 101
refused "--dry-base" --dry-base 0.9
refused "--dry-allowed-len" --dry-allowed-len 0
refused "--dry-allowed-len" --dry-allowed-len 513
refused "--dry-range" --dry-range -1
refused "--xtc-prob" --xtc-prob 1.1
refused "--xtc-thresh" --xtc-thresh -0.1
refused "--mirostat-tau" --mirostat-tau 0
refused "--mirostat-eta" --mirostat-eta 1.1
refused "--cfg-scale" --cfg-scale 101 --negative x
refused "-n" -n 16777217
refused "--min-new" --min-new -1
refused "--min-new 10 is over -n 5" --min-new 10 -n 5
refused "--top-probs" --top-probs 65
refused "--bias" --bias 3=1e31
refused "--stop-token" --stop-token -1
refused "--stop: not valid UTF-8" --stop "$(printf 'caf\303')"
refused "--ban: not valid UTF-8" --ban "$(printf '\251')"
[ $fail = 0 ] && ok "out-of-range values: exit 2 before anything is sent"
# The edges the daemon takes, exl takes too.
for a in "--rep-pen 0.00005" "--mirostat-tau 0.00005" "--top-k 2147483647" "--rep-range 2147483647" \
	"--mirostat 0" "--mirostat 2" "--bias 3=-inf" "--min-new 5 -n 5"; do
	# shellcheck disable=SC2086
	"$exl" generate -n 5 $a "Once upon a time" >/dev/null 2>"$tmp/e" ||
		bad "$a: refused: $(cat "$tmp/e")"
done
[ $fail = 0 ] && ok "values at the edges of the daemon's ranges are taken"

# ---- streaming equals the result, and exld run ----
"$exl" generate -m stories260K -n 40 --temperature 0 "Once upon a time" >"$tmp/stream" 2>"$tmp/e"
rc=$?
[ $rc = 0 ] && [ "$(cat "$tmp/stream")" = "$known" ] && ok "known continuation, streamed" ||
	bad "streamed: rc $rc: '$(cat "$tmp/stream")' $(cat "$tmp/e")"
"$exl" generate -m stories260K -n 40 --temperature 0 --json "Once upon a time" >"$tmp/j" 2>"$tmp/e"
rc=$?
json_text "$tmp/j" >"$tmp/jt"
[ $rc = 0 ] && cmp -s "$tmp/stream" "$tmp/jt" && ok "stream equals the --json result" ||
	bad "json: rc $rc: $(cat "$tmp/j") $(cat "$tmp/e")"
for f in '"token_ids":[432,383,286,' '"stop_reason":"max_new_tokens"' '"prompt_tokens":5' \
	'"new_tokens":40' '"stop_string":null' '"timings":{"queued_ms":'; do
	has "$tmp/j" "$f" || bad "json lacks $f: $(cat "$tmp/j")"
done
expected "Once upon a time" 40 >"$tmp/run"
cmp -s "$tmp/stream" "$tmp/run" && ok "equals exld run" || bad "exld run: $(cat "$tmp/run")"

# Generation options reach the daemon: a stop string, completion only.
"$exl" generate -n 40 --temperature 0 --stop named --completion-only "Once upon a time" \
	>"$tmp/o" 2>"$tmp/e"
[ "$(cat "$tmp/o")" = ", there was a little girl " ] && ok "stop string, completion only" ||
	bad "stop: '$(cat "$tmp/o")' $(cat "$tmp/e")"
"$exl" generate -n 40 --temperature 0 --stop named --json "Once upon a time" >"$tmp/j" 2>/dev/null
has "$tmp/j" '"stop_reason":"stop_string"' && has "$tmp/j" '"stop_string":"named"' &&
	has "$tmp/j" '"text":"Once upon a time, there was a little girl "' &&
	ok "stop string in the result" || bad "stop json: $(cat "$tmp/j")"
# Token healing regenerates " ti"; the healed text is generated text, so a
# ban on "time" makes it choose again and a stop "time" ends the output
# inside the prompt, as in exld run.
for opt in "--ban time" "--stop time"; do
	# shellcheck disable=SC2086
	"$exl" generate -n 6 --temperature 0 --token-healing $opt --json "Once upon a ti" \
		>"$tmp/j" 2>"$tmp/e"
	# shellcheck disable=SC2086
	"$exld" run --model "$models/stories260K.gguf" --prompt "Once upon a ti" -n 6 \
		--temperature 0 --threads 1 --token-healing $opt --json >"$tmp/rj" 2>/dev/null
	python3 -c 'import json,sys
g = json.loads(open(sys.argv[1]).read()); r = json.loads(open(sys.argv[2]).read())
ok = (g["text"] == r["text"] and g["token_ids"] == r["token_ids"] and g["text"].startswith("Once upon a ")
      and "time" not in g["text"] and g["stop_reason"] == r["stop_reason"])
sys.exit(0 if ok else 1)' "$tmp/j" "$tmp/rj" 2>/dev/null &&
		ok "token healing with $opt: $(json_text "$tmp/j")" ||
		bad "healing $opt: $(cat "$tmp/j" "$tmp/e") / exld run $(cat "$tmp/rj")"
done
"$exl" generate -n 6 --temperature 0 --token-healing --stop time --json "Once upon a ti" \
	>"$tmp/j" 2>/dev/null
has "$tmp/j" '"text":"Once upon a ","token_ids":[378],"stop_reason":"stop_string","stop_string":"time"' &&
	ok "stop string inside the healed text" || bad "healing stop: $(cat "$tmp/j")"
"$exl" generate -n 3 --temperature 0 --json --top-probs 2 "Once upon a time" >"$tmp/j" 2>/dev/null
has "$tmp/j" '"probs":[0.9' && has "$tmp/j" '"top":[[{"id":432,"text":",","p":0.9' &&
	has "$tmp/j" '{"id":383,"text":" there","p":0.02' && ok "--top-probs in json" ||
	bad "top probs: $(cat "$tmp/j")"
"$exl" generate -n 3 --temperature 0 --top-probs 2 "Once upon a time" >"$tmp/o" 2>"$tmp/e"
has "$tmp/e" 'token 432 "," p=0.9687 top: 432 "," 0.9687 383 " there" 0.0288' &&
	ok "--top-probs lines" || bad "top probs lines: $(cat "$tmp/e")"
for s in 1 2 3; do
	"$exl" generate -n 30 --seed $s --json "Once upon a time" >"$tmp/j$s" 2>/dev/null
	"$exl" generate -n 30 --seed $s "Once upon a time" >"$tmp/s$s" 2>/dev/null
	json_text "$tmp/j$s" | cmp -s - "$tmp/s$s" || bad "seed $s: stream and json differ"
done
cmp -s "$tmp/s1" "$tmp/s2" && bad "seeds 1 and 2 gave the same text" || ok "seeded sampling"
"$exld" run --model "$models/stories260K.gguf" --prompt "Once upon a time" -n 30 --seed 2 \
	--threads 1 >"$tmp/run" 2>/dev/null
cmp -s "$tmp/s2" "$tmp/run" && ok "seeded equals exld run" || bad "seed 2: $(cat "$tmp/s2") vs $(cat "$tmp/run")"

# ---- --dump-logits: exl generate's rows are exld run's ----
# check_logits BIN JSON: BIN is new_tokens rows of 512 float32 (little
# endian), each row's argmax (first max) the token JSON reports there.
check_logits() {
	python3 -c 'import json, struct, sys
data = open(sys.argv[1], "rb").read()
ids = json.loads(open(sys.argv[2]).read().splitlines()[0])["token_ids"]
v = 512
if len(data) != len(ids) * v * 4:
    sys.exit("%d bytes for %d tokens of %d" % (len(data), len(ids), v))
f = struct.unpack("<%df" % (len(data) // 4), data)
for i, t in enumerate(ids):
    row = f[i * v:(i + 1) * v]
    if row.index(max(row)) != t:
        sys.exit("row %d: argmax %d, token %d" % (i, row.index(max(row)), t))' "$1" "$2"
}
for args in "-n 40" "-n 200 --stop-token 13"; do
	# shellcheck disable=SC2086
	"$exl" generate $args --temperature 0 --json --dump-logits "$tmp/gl.bin" "Once upon a time" \
		>"$tmp/gj" 2>"$tmp/e"
	rc=$?
	# shellcheck disable=SC2086
	"$exld" run --model "$models/stories260K.gguf" --prompt "Once upon a time" $args \
		--temperature 0 --threads 1 --json --dump-logits "$tmp/rl.bin" >"$tmp/rj" 2>"$tmp/re"
	rrc=$?
	[ $rc = 0 ] && [ $rrc = 0 ] && cmp -s "$tmp/gl.bin" "$tmp/rl.bin" &&
		check_logits "$tmp/gl.bin" "$tmp/gj" && check_logits "$tmp/rl.bin" "$tmp/rj" &&
		ok "--dump-logits ($args): exl's rows are exld run's, one per token, argmax = token" ||
		bad "--dump-logits ($args): rc $rc/$rrc $(cat "$tmp/e" "$tmp/re") $(ls -l "$tmp"/*.bin)"
done
has "$tmp/gj" '"stop_reason":"stop_token"' || bad "--stop-token 13 did not stop: $(cat "$tmp/gj")"
"$exl" generate -n 5 --dump-logits "$tmp/gl.bin" "Once upon a time" "The little dog" \
	>/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 2 ] && has "$tmp/e" "--dump-logits takes one prompt, not 2" &&
	ok "--dump-logits with two prompts: exit 2" || bad "--dump-logits, two prompts: rc $rc $(cat "$tmp/e")"

# ---- several prompts in one batch: in order ----
p1="Once upon a time"
p2="The little dog"
p3="Tom had a red"
"$exl" generate -n 60 --temperature 0 "$p1" "$p2" "$p3" >"$tmp/batch" 2>"$tmp/e"
rc=$?
{ expected "$p1" 60; expected "$p2" 60; expected "$p3" 60; } >"$tmp/run"
[ $rc = 0 ] && cmp -s "$tmp/batch" "$tmp/run" && ok "three prompts, in order" ||
	bad "batch: rc $rc: $(cat "$tmp/batch") vs $(cat "$tmp/run") $(cat "$tmp/e")"
"$exl" generate -n 60 --temperature 0 --json "$p1" "$p2" "$p3" >"$tmp/j" 2>/dev/null
{ json_text "$tmp/j" 0; json_text "$tmp/j" 1; json_text "$tmp/j" 2; } >"$tmp/jt"
[ "$(wc -l <"$tmp/j")" = 3 ] && cmp -s "$tmp/jt" "$tmp/run" && ok "three results, in order" ||
	bad "batch json: $(cat "$tmp/j")"

# ---- a prompt on stdin ----
echo "Once upon a time" | "$exl" generate -n 40 --temperature 0 - >"$tmp/o" 2>"$tmp/e"
[ "$(cat "$tmp/o")" = "$known" ] && ok "- reads the prompt from stdin" ||
	bad "stdin: '$(cat "$tmp/o")' $(cat "$tmp/e")"
echo x | "$exl" generate - - >/dev/null 2>"$tmp/e"
[ $? = 2 ] && ok "- twice: exit 2" || bad "- twice: $(cat "$tmp/e")"

# ---- two processes share the model, each gets its own output ----
expected "$p1" 300 >"$tmp/run1"
expected "$p2" 300 >"$tmp/run2"
for round in 1 2 3; do
	"$exl" generate -n 300 --temperature 0 "$p1" >"$tmp/a" 2>"$tmp/ea" &
	a=$!
	"$exl" generate -n 300 --temperature 0 "$p2" >"$tmp/b" 2>"$tmp/eb" &
	b=$!
	wait $a
	ra=$?
	wait $b
	rb=$?
	[ $ra = 0 ] && [ $rb = 0 ] || bad "round $round: exit $ra / $rb: $(cat "$tmp/ea" "$tmp/eb")"
	case "$(cat "$tmp/a")" in
	"$known"*) ;;
	*) bad "round $round: process 1 lost the known continuation: $(cat "$tmp/a")" ;;
	esac
	cmp -s "$tmp/a" "$tmp/run1" || bad "round $round: process 1: $(cat "$tmp/a")"
	cmp -s "$tmp/b" "$tmp/run2" || bad "round $round: process 2: $(cat "$tmp/b")"
done
[ $fail = 0 ] && ok "two processes, one model, independent outputs"

# ---- unknown model ----
"$exl" generate -m nosuch hi >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 4 ] && has "$tmp/e" "nosuch" && has "$tmp/e" "exl models lists them" &&
	ok "unknown model: exit 4" || bad "unknown model: rc $rc: $(cat "$tmp/e")"
"$exl" generate -m aidreams260K hi >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 4 ] && has "$tmp/e" "exl load aidreams260K" && ok "not loaded: exit 4 with a hint" ||
	bad "not loaded: rc $rc: $(cat "$tmp/e")"
"$exl" chat -m nosuch </dev/null >/dev/null 2>"$tmp/e"
[ $? = 4 ] && ok "chat, unknown model: exit 4" || bad "chat unknown: $(cat "$tmp/e")"
"$exl" load nosuch >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 4 ] && has "$tmp/e" "nosuch.gguf" && ok "load of no file: exit 4" ||
	bad "load nosuch: rc $rc: $(cat "$tmp/e")"

# ---- models, load, unload, status ----
"$exl" models >"$tmp/o" 2>"$tmp/e"
grep -q '^stories260K  *loaded .* llama  *512  *2048  *0$' "$tmp/o" &&
	grep -q '^aidreams260K  *available' "$tmp/o" && ok "models" || bad "models: $(cat "$tmp/o")"
"$exl" load aidreams260K >"$tmp/o" 2>"$tmp/e"
rc=$?
# Not on a terminal: plain lines, no bar, no carriage returns.
[ $rc = 0 ] && has "$tmp/o" "loaded aidreams260K: llama, 512 tokens of vocabulary, context 128" &&
	[ "$(tail -n 1 "$tmp/e")" = "loading aidreams260K: 100%" ] &&
	! grep -qv '^loading aidreams260K: [0-9]*%$' "$tmp/e" && ! grep -q "$cr" "$tmp/e" &&
	ok "load, with progress lines" || bad "load: rc $rc: $(cat "$tmp/o" "$tmp/e")"
"$exl" load aidreams260K >/dev/null 2>"$tmp/e"
[ $? = 1 ] && has "$tmp/e" "already loaded" && ok "load twice: exit 1" || bad "load twice: $(cat "$tmp/e")"
"$exl" generate -n 20 --temperature 0 hi >/dev/null 2>"$tmp/e"
[ $? = 4 ] && has "$tmp/e" "-m MODEL" && ok "two models, none named: exit 4" ||
	bad "ambiguous model: $(cat "$tmp/e")"
"$exl" generate -m aidreams260K -n 20 --temperature 0 "Once upon a time" >"$tmp/o" 2>"$tmp/e"
"$exld" run --model "$models/aidreams260K.gguf" --prompt "Once upon a time" -n 20 \
	--temperature 0 --threads 1 >"$tmp/run" 2>/dev/null
cmp -s "$tmp/o" "$tmp/run" && ok "second model generates as exld run" ||
	bad "aidreams: $(cat "$tmp/o") vs $(cat "$tmp/run") $(cat "$tmp/e")"

# ---- the context (aidreams260K: 128 tokens), as exld run ----
# prompt + max_new_tokens past the context: what fits, ending at exactly the
# context with max_context; a prompt of the whole context: too_large.
# "a a a ..." is BOS + one token per "a".
words() { awk -v n="$1" 'BEGIN { for (i = 1; i <= n; i++) printf "%s", (i > 1 ? " a" : "a") }'; }
# WORDS N NEW: a prompt of WORDS "a"s ("Once upon a time" for 0), -n N, NEW
# new tokens expected (0: whatever fits)
for case in "126 4 1" "0 200 0"; do
	# shellcheck disable=SC2086
	set -- $case
	if [ "$1" = 0 ]; then p="Once upon a time"; else p=$(words "$1"); fi
	"$exl" generate -m aidreams260K --temperature 0 --ignore-eos --json -n "$2" "$p" \
		>"$tmp/cg" 2>"$tmp/ce"
	rc=$?
	"$exld" run --model "$models/aidreams260K.gguf" --prompt "$p" --temperature 0 --threads 1 \
		--ignore-eos --json -n "$2" >"$tmp/cr" 2>/dev/null
	python3 -c 'import json,sys
g = json.loads(open(sys.argv[1]).read()); r = json.loads(open(sys.argv[2]).read())
want_new = int(sys.argv[3])
ok = (g["stop_reason"] == "max_context" and g["prompt_tokens"] + g["new_tokens"] == 128
      and (want_new == 0 or g["new_tokens"] == want_new)
      and all(g[k] == r[k] for k in ("text", "token_ids", "stop_reason", "prompt_tokens", "new_tokens")))
sys.exit(0 if ok else 1)' "$tmp/cg" "$tmp/cr" "$3" 2>/dev/null
	[ $? = 0 ] && [ $rc = 0 ] && has "$tmp/ce" "reached the end of the context" &&
		ok "aidreams, ${1}-word prompt, -n $2: ends at the context of 128, as exld run" ||
		bad "context, $case: rc $rc $(cat "$tmp/cg" "$tmp/ce") / exld run $(cat "$tmp/cr")"
done
"$exl" generate -m aidreams260K --temperature 0 -n 4 "$(words 127)" >"$tmp/o" 2>"$tmp/e"
rc=$?
"$exld" run --model "$models/aidreams260K.gguf" --prompt "$(words 127)" --threads 1 -n 4 \
	>"$tmp/run" 2>"$tmp/re"
rc_run=$?
msg="prompt of 128 tokens does not fit the context of 128 tokens"
[ $rc = 1 ] && has "$tmp/e" "exl: generate: $msg" && [ $rc_run = 1 ] &&
	has "$tmp/re" "exld run: $msg" && ok "a prompt of the whole context: too_large, as exld run" ||
	bad "prompt = context: rc $rc $(cat "$tmp/e") / exld run rc $rc_run $(cat "$tmp/re")"
"$exl" status >"$tmp/o" 2>"$tmp/e"
has "$tmp/o" "exld 0.1.0, pid $dpid" && has "$tmp/o" "resident" &&
	grep -q '^stories260K  *loaded  *0  *0  *0 ' "$tmp/o" && grep -q '^aidreams260K  *loaded' "$tmp/o" &&
	ok "status" || bad "status: $(cat "$tmp/o" "$tmp/e")"
# each model's device (the DEVICE column) and memory: on the CPU the weights
# are the mapped file, the 8192-token KV pool (5 MiB for stories260K) is RAM
grep -q '^stories260K  *loaded .* 1\.1 MiB cpu$' "$tmp/o" &&
	grep -q '^aidreams260K  *loaded .* cpu$' "$tmp/o" &&
	has "$tmp/o" "stories260K (cpu): weights 1.1 MiB mapped from the file, KV cache 5.0 MiB" &&
	has "$tmp/o" "aidreams260K (cpu): weights " && ! has "$tmp/o" "VRAM" &&
	ok "status: device and memory per model" || bad "status memory: $(cat "$tmp/o")"

# Speculative decoding and beam search through exl's flags (common/cli):
# the drafted ids are the plain ones, with the proposals counted.  After
# the memory check: the drafter's copy of stories260K counts in its memory.
ids() { sed 's/.*"token_ids":\[\([0-9,]*\)\].*/\1/' "$1"; }
"$exl" generate -m stories260K -n 40 --temperature 0 --json "Once upon a time" >"$tmp/pj" \
	2>/dev/null
for a in "--ngram-draft 3" "--draft-model stories260K --draft-tokens 3"; do
	# shellcheck disable=SC2086
	"$exl" generate -m stories260K -n 40 --temperature 0 --json $a "Once upon a time" \
		>"$tmp/sj" 2>"$tmp/e"
	[ -n "$(ids "$tmp/pj")" ] && [ "$(ids "$tmp/sj")" = "$(ids "$tmp/pj")" ] && has "$tmp/sj" '"draft_proposed":' &&
		ok "$a: the plain ids, proposals counted" || bad "$a: $(cat "$tmp/sj") $(cat "$tmp/e")"
done
"$exl" generate -m stories260K -n 20 --beams 3 --length-penalty 0.5 --json "Once upon a time" \
	>"$tmp/bj" 2>"$tmp/e"
has "$tmp/bj" '"num_beams":3,"beam_score":-' && ok "--beams 3: num_beams, beam_score" ||
	bad "--beams: $(cat "$tmp/bj") $(cat "$tmp/e")"
"$exl" generate -n 5 --draft-tokens 3 "Once upon a time" >/dev/null 2>"$tmp/e" &&
	bad "--draft-tokens alone taken" || ok "--draft-tokens alone refused"
"$exl" unload aidreams260K >"$tmp/o" 2>"$tmp/e"
[ $? = 0 ] && has "$tmp/o" "unloaded aidreams260K" && ok "unload" || bad "unload: $(cat "$tmp/e")"
"$exl" generate -m aidreams260K hi >/dev/null 2>&1
[ $? = 4 ] && ok "unloaded model: exit 4" || bad "generate after unload"
"$exl" unload aidreams260K >/dev/null 2>"$tmp/e"
[ $? = 4 ] && ok "unload of a model not loaded: exit 4" || bad "unload twice: $? $(cat "$tmp/e")"

# ---- load on a terminal (a pty from script): a bar redrawn in place ----
if command -v script >/dev/null; then
	script -qec "'$exl' load aidreams260K" /dev/null </dev/null >"$tmp/pty" 2>&1
	rc=$?
	# Each redraw starts with a carriage return; the last is the full bar.
	bar="${cr}loading aidreams260K [##############################] 100% "
	[ $rc = 0 ] && has "$tmp/pty" "$bar" &&
		has "$tmp/pty" "loaded aidreams260K: llama, 512 tokens of vocabulary, context 128" &&
		! has "$tmp/pty" "loading aidreams260K: " &&
		ok "load on a terminal: a progress bar, no plain lines" ||
		bad "load on a pty: rc $rc: $(od -c "$tmp/pty" | head -n 20)"
	# The bar ends its line before the summary.
	python3 -c 'import sys
t = open(sys.argv[1], "rb").read().replace(b"\r\n", b"\n")
bar = t[t.rindex(b"\rloading"):]
line = bar.split(b"\n")[0]
sys.exit(0 if line.endswith(b"B") and b"] 100% " in line and b"\n" in bar else 1)' "$tmp/pty" &&
		ok "the bar's last state ends its line" || bad "bar line: $(od -c "$tmp/pty" | tail -n 8)"
	"$exl" unload aidreams260K >/dev/null 2>&1 || bad "unload after the pty load"
else
	echo "skipped: the progress bar on a terminal (needs script from util-linux)"
fi

# ---- bench ----
"$exl" bench -c 3 -n 16 >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 0 ] && [ "$(grep -c '^[123]  *5  *16 ' "$tmp/o")" = 3 ] &&
	has "$tmp/o" "total: 3 clients, 48 tokens in" && ok "bench" ||
	bad "bench: rc $rc: $(cat "$tmp/o" "$tmp/e")"
"$exl" bench -c 0 >/dev/null 2>&1
[ $? = 2 ] && ok "bench -c 0: exit 2" || bad "bench -c 0"

# ---- a stand-in daemon: a load by a non-admin (5), Ctrl-C (130) ----
fsock=$tmp/fake.sock
if start_fake "$fsock" --hang; then
	"$exl" --socket "$fsock" load stories260K >/dev/null 2>"$tmp/e"
	rc=$?
	[ $rc = 5 ] && has "$tmp/e" "is not an admin" && has "$tmp/e" "for the daemon's admins" &&
		ok "load by a non-admin: exit 5" || bad "non-admin load: rc $rc: $(cat "$tmp/e")"
	# The fake never ends a job by itself: only the cancel exl sends on
	# Ctrl-C does.
	"$exl" --socket "$fsock" generate -n 5 "Once upon a time" >"$tmp/o" 2>"$tmp/e" &
	gpid=$!
	i=0
	while [ $i -lt 100 ] && ! grep -q '^generate$' "$fsock.log" 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -INT $gpid
	wait $gpid
	rc=$?
	[ $rc = 130 ] && has "$tmp/e" "exl generate: interrupted" && grep -q '^cancel$' "$fsock.log" &&
		ok "Ctrl-C: the job cancelled, exit 130" ||
		bad "Ctrl-C: rc $rc: $(cat "$tmp/e"); requests: $(cat "$fsock.log")"
	stop_fake
else
	bad "fake_exld.py"
fi

# ---- options the daemon does not offer (6): nothing is sent ----
# exld lists every optional feature in its hello (daemon_features checks
# the list): options of each go through.
printf 'root ::= [a-z ]+\n' >"$tmp/g.gbnf"
"$exl" generate -n 5 --grammar "$tmp/g.gbnf" --dry-mult 1 --xtc-prob 0.5 --mirostat 2 \
	--rep-pen 1.1 --token-healing "Once upon a time" >/dev/null 2>"$tmp/e" &&
	ok "exld offers every optional feature" || bad "optional features on exld: $(cat "$tmp/e")"
# A daemon from before the features list offers none of them.
if start_fake "$fsock"; then
	"$exl" --socket "$fsock" generate -n 5 --grammar "$tmp/g.gbnf" "Once upon a time" \
		>/dev/null 2>"$tmp/e"
	rc=$?
	[ $rc = 6 ] &&
		has "$tmp/e" 'exl: generate: grammar: this exld does not offer the feature "grammar"' &&
		has "$tmp/e" "its hello lists no features" && has "$tmp/e" "nothing was sent" &&
		! grep -q '^generate$' "$fsock.log" &&
		ok "an older daemon: --grammar refused, exit 6, nothing sent" ||
		bad "older daemon, --grammar: rc $rc: $(cat "$tmp/e"); requests: $(cat "$fsock.log")"
	"$exl" --socket "$fsock" generate -n 5 --temperature 0 --top-k 3 "Once upon a time" \
		>/dev/null 2>"$tmp/e"
	rc=$?
	[ $rc = 0 ] && grep -q '^generate$' "$fsock.log" && ok "an older daemon: core options go" ||
		bad "older daemon, core options: rc $rc: $(cat "$tmp/e")"
else
	bad "fake_exld.py"
fi
# One that lists some: those go, the others are refused.
if start_fake "$fsock" --features grammar,xtc; then
	"$exl" --socket "$fsock" generate -n 5 --grammar "$tmp/g.gbnf" --xtc-prob 0.5 \
		"Once upon a time" >/dev/null 2>"$tmp/e"
	rc=$?
	[ $rc = 0 ] && [ "$(grep -c '^generate$' "$fsock.log")" = 1 ] || bad "listed: rc $rc $(cat "$tmp/e")"
	"$exl" --socket "$fsock" generate -n 5 --grammar "$tmp/g.gbnf" --dry-mult 1 \
		"Once upon a time" >/dev/null 2>"$tmp/e"
	rc=$?
	[ $rc = 6 ] && has "$tmp/e" 'dry_multiplier: this exld does not offer the feature "dry"' &&
		has "$tmp/e" "its hello does not list it" &&
		[ "$(grep -c '^generate$' "$fsock.log")" = 1 ] &&
		ok "a partial list: listed features go, --dry-mult refused (exit 6)" ||
		bad "partial list: rc $rc: $(cat "$tmp/e"); requests: $(cat "$fsock.log")"
	stop_fake
else
	bad "fake_exld.py"
fi

# ---- the daemon goes away ----
stop_daemon
"$exl" status >/dev/null 2>"$tmp/e"
[ $? = 3 ] && ok "after the daemon stopped: exit 3" || bad "stopped daemon: $(cat "$tmp/e")"

exit $fail
