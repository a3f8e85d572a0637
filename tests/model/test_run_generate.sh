#!/bin/sh
# `exld run`'s generation options end to end on stories260K: --json (and
# its timings' order), prompt options (--no-bos, --special,
# --decode-special), stop strings and tokens, banned strings, token
# healing, CFG, min-new, bias, --top-probs, --completion-only, each
# sampling flag's effect on a seeded or greedy output, and exit status 2
# with a clear message for every kind of bad value.
set -u
exld=${1:?usage: test_run_generate.sh PATH/TO/exld}
models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -f "$models/stories260K.gguf" ]; then
	echo "EXLD_MODELS ('$models') has no stories260K.gguf; skipping"
	exit 77
fi
model=$models/stories260K.gguf
tmp=$(mktemp -d /tmp/exld-test-gen-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
prompt="Once upon a time"

run() { "$exld" run --model "$model" --prompt "$prompt" --temperature 0 --threads 1 "$@"; }
ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
# has FILE TEXT: fixed-string search
has() { grep -qF -- "$2" "$1"; }

# --json: one line with the result's fields.
run -n 20 --json --completion-only >"$tmp/j" 2>"$tmp/err" || bad "json run failed: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/j")" -eq 1 ] && ok "json is one line" || bad "json lines: $(cat "$tmp/j")"
for f in '"text":", there was a little girl named Lily.' '"token_ids":[432,383,286,' \
	'"stop_reason":"max_new_tokens"' '"stop_string":null' '"stop_token":null' \
	'"prompt_tokens":5' '"new_tokens":20' '"timings":{"queued_ms":'; do
	has "$tmp/j" "$f" && ok "json has $f" || bad "json lacks $f: $(cat "$tmp/j")"
done
has "$tmp/j" '"probs"' && bad "probs without --top-probs" || ok "no probs unless asked"
# Timings are in order (not a speed check): 0 <= queued <= first token <= total.
tq=$(sed -n 's/.*"queued_ms":\([-0-9.e+]*\).*/\1/p' "$tmp/j")
tf=$(sed -n 's/.*"first_token_ms":\([-0-9.e+]*\).*/\1/p' "$tmp/j")
tt=$(sed -n 's/.*"total_ms":\([-0-9.e+]*\).*/\1/p' "$tmp/j")
[ -n "$tq" ] && [ -n "$tf" ] && [ -n "$tt" ] &&
	awk -v q="$tq" -v f="$tf" -v t="$tt" 'BEGIN { exit !(q >= 0 && q <= f && f <= t) }' &&
	ok "timings in order ($tq <= $tf <= $tt)" || bad "timings: $(cat "$tmp/j")"

# --top-probs: per-token probability and candidates, most likely first.
run -n 3 --json --top-probs 2 >"$tmp/j" 2>/dev/null
has "$tmp/j" '"probs":[0.9' && has "$tmp/j" '"top":[[{"id":432,"text":",","p":0.9' &&
	ok "top probs" || bad "top probs: $(cat "$tmp/j")"

# Prompt and output options: --no-bos drops BOS (5 prompt tokens -> 4),
# --special reads "<s>" as one token (11 -> 6 with BOS), --decode-special
# shows special tokens (BOS, made the greedy choice by a bias).
jfield() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" "$2"; }
run -n 1 --json --no-bos >"$tmp/j" 2>/dev/null
[ "$(jfield prompt_tokens "$tmp/j")" = 4 ] && ok "no-bos" || bad "no-bos: $(cat "$tmp/j")"
"$exld" run --model "$model" --prompt "<s>$prompt" --temperature 0 -n 1 --json \
	>"$tmp/j" 2>/dev/null
[ "$(jfield prompt_tokens "$tmp/j")" = 11 ] && ok "<s> as text" || bad "<s> as text: $(cat "$tmp/j")"
"$exld" run --model "$model" --prompt "<s>$prompt" --temperature 0 -n 1 --json --special \
	>"$tmp/j" 2>/dev/null
[ "$(jfield prompt_tokens "$tmp/j")" = 6 ] && ok "special" || bad "special: $(cat "$tmp/j")"
run -n 3 --bias 1=100 --completion-only --json >"$tmp/j" 2>/dev/null
has "$tmp/j" '"text":"","token_ids":[1,1,1]' && ok "special tokens silent" ||
	bad "special tokens silent: $(cat "$tmp/j")"
run -n 3 --bias 1=100 --completion-only --json --decode-special >"$tmp/j" 2>/dev/null
has "$tmp/j" '"text":"<s><s><s>","token_ids":[1,1,1]' && ok "decode-special" ||
	bad "decode-special: $(cat "$tmp/j")"

# Plain output: prompt + completion; --completion-only drops the prompt.
run -n 8 >"$tmp/p" 2>/dev/null
run -n 8 --completion-only >"$tmp/c" 2>/dev/null
[ "$(cat "$tmp/p")" = "$prompt$(cat "$tmp/c")" ] && ok "completion-only" ||
	bad "completion-only: '$(cat "$tmp/p")' vs '$(cat "$tmp/c")'"

# A stop string ends the text right before it.
run -n 40 --stop "named" --stop "zzz" --json --completion-only >"$tmp/j" 2>/dev/null
has "$tmp/j" '"text":", there was a little girl ","' && has "$tmp/j" '"stop_reason":"stop_string"' &&
	has "$tmp/j" '"stop_string":"named"' && ok "stop string" || bad "stop string: $(cat "$tmp/j")"
run -n 40 --stop "named" >"$tmp/p" 2>/dev/null
[ "$(cat "$tmp/p")" = "$prompt, there was a little girl " ] && ok "stop string, plain" ||
	bad "stop string plain: '$(cat "$tmp/p")'"

# A stop token (" named" is 395).
run -n 40 --stop-token 395 --json >"$tmp/j" 2>/dev/null
has "$tmp/j" '"stop_reason":"stop_token"' && has "$tmp/j" '"stop_token":395' &&
	ok "stop token" || bad "stop token: $(cat "$tmp/j")"

# A banned string never appears, greedy or sampled.
run -n 40 --ban Lily >"$tmp/p" 2>/dev/null
has "$tmp/p" "Lily" && bad "banned Lily: $(cat "$tmp/p")" || ok "ban, greedy"
has "$tmp/p" "$prompt, there was a little girl named" && ok "ban keeps the text before" ||
	bad "ban prefix: $(cat "$tmp/p")"
for s in 1 2 3 4 5; do
	"$exld" run --model "$model" --prompt "$prompt" -n 40 --seed $s --ban Lily --ban " Lily" \
		>"$tmp/p" 2>/dev/null
	has "$tmp/p" "Lily" && bad "seed $s said Lily: $(cat "$tmp/p")"
done
ok "ban, sampled"

# Token healing completes a cut word.
"$exld" run --model "$model" --prompt "Once upon a ti" -n 6 --temperature 0 --token-healing \
	>"$tmp/p" 2>/dev/null
case "$(cat "$tmp/p")" in "Once upon a time"*) ok "token healing" ;;
*) bad "token healing: $(cat "$tmp/p")" ;; esac
# The healed text is generated text: bans and stops see it.  Banned, " time"
# is not chosen again; as a stop string, the output ends where it begins,
# inside the prompt's healed tail, and plain output and --json agree.
heal() {
	"$exld" run --model "$model" --prompt "Once upon a ti" -n 6 --temperature 0 --threads 1 \
		--token-healing "$@"
}
heal --ban time >"$tmp/p" 2>"$tmp/err"
heal --ban time --json >"$tmp/j" 2>/dev/null
case "$(cat "$tmp/p")" in
"Once upon a ti"*time*) bad "healing escaped the ban: $(cat "$tmp/p")" ;;
"Once upon a ti"?*) has "$tmp/j" "\"text\":\"$(cat "$tmp/p")\"" && ok "healing under a ban" ||
	bad "healing ban, json: $(cat "$tmp/j")" ;;
*) bad "healing ban: '$(cat "$tmp/p")' $(cat "$tmp/err")" ;;
esac
heal --stop time >"$tmp/p" 2>/dev/null
heal --stop time --json >"$tmp/j" 2>/dev/null
[ "$(cat "$tmp/p")" = "Once upon a " ] && has "$tmp/j" '"text":"Once upon a ","token_ids":[378]' &&
	has "$tmp/j" '"stop_reason":"stop_string","stop_string":"time"' &&
	ok "stop string inside the healed text" ||
	bad "healing stop: '$(cat "$tmp/p")' $(cat "$tmp/j")"
heal --stop time --json --completion-only >"$tmp/j" 2>/dev/null
has "$tmp/j" '"text":"","token_ids":[378],"stop_reason":"stop_string"' &&
	ok "stop inside the healed text: empty completion" || bad "healing stop: $(cat "$tmp/j")"
heal --ban ti >/dev/null 2>"$tmp/err"
[ $? = 2 ] && has "$tmp/err" "banned string 0 is in the prompt text token healing regenerates" &&
	ok "a ban inside the healed text is refused" || bad "ban ti: $(cat "$tmp/err")"

# The model's context bounds prompt + output, as in the daemon
# (docs/protocol.md, generate): output that would pass it is cut (reason
# max_context, prompt + new tokens = the context), a prompt that leaves no
# room is refused (exit 1).  "a a a ..." is BOS + one token per "a".  The
# edges on aidreams260K, whose context is 128 (stories260K's 2048 tokens
# take half a minute under the sanitizers).
words() { awk -v n="$1" 'BEGIN { for (i = 1; i <= n; i++) printf "%s", (i > 1 ? " a" : "a") }'; }
aid=$models/aidreams260K.gguf
ctx_run() {
	m=$1 p=$2
	shift 2
	"$exld" run --model "$m" --prompt "$p" --temperature 0 --threads 1 --ignore-eos --json "$@"
}
ctx_run "$model" "$(words 3001)" -n 4 >"$tmp/j" 2>"$tmp/err"
st=$?
[ $st = 1 ] && [ ! -s "$tmp/j" ] &&
	has "$tmp/err" "exld run: prompt of 3002 tokens does not fit the context of 2048 tokens" &&
	ok "a 3002-token prompt is refused" || bad "long prompt: status $st $(cut -c 1-200 "$tmp/j") $(cat "$tmp/err")"
if [ -f "$aid" ]; then
	ctx_run "$aid" "$(words 127)" -n 4 >"$tmp/j" 2>"$tmp/err"
	st=$?
	[ $st = 1 ] && [ ! -s "$tmp/j" ] &&
		has "$tmp/err" "exld run: prompt of 128 tokens does not fit the context of 128 tokens" &&
		ok "a prompt of exactly the context is refused" ||
		bad "prompt = context: status $st $(cat "$tmp/j" "$tmp/err")"
	ctx_run "$aid" "$(words 126)" -n 4 >"$tmp/j" 2>"$tmp/err"
	has "$tmp/j" '"stop_reason":"max_context"' && has "$tmp/j" '"prompt_tokens":127,' &&
		has "$tmp/j" '"new_tokens":1,' && ok "a prompt of context - 1: one token" ||
		bad "prompt = context - 1: $(cat "$tmp/j" "$tmp/err")"
	ctx_run "$aid" "$(words 126)" -n 1 >"$tmp/j" 2>"$tmp/err"
	has "$tmp/j" '"stop_reason":"max_new_tokens"' && has "$tmp/j" '"new_tokens":1,' &&
		ok "context - 1 with -n 1: max_new_tokens" || bad "-n 1: $(cat "$tmp/j" "$tmp/err")"
	ctx_run "$aid" "$prompt" -n 200 >"$tmp/j" 2>"$tmp/err"
	p=$(jfield prompt_tokens "$tmp/j")
	n=$(jfield new_tokens "$tmp/j")
	has "$tmp/j" '"stop_reason":"max_context"' && [ -n "$p" ] && [ -n "$n" ] &&
		[ $((p + n)) = 128 ] && has "$tmp/err" "reached the end of the context (128 tokens)" &&
		ok "aidreams: prompt + output = the context of 128" ||
		bad "aidreams -n 200: $(cat "$tmp/j" "$tmp/err")"
else
	echo "skipped: the context edges on aidreams260K (not in $models)"
fi

# CFG: scale 1 is the plain output, a larger scale changes it.
run -n 20 >"$tmp/a" 2>/dev/null
run -n 20 --cfg-scale 1 --negative "The dog" >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && ok "cfg 1" || bad "cfg 1: $(cat "$tmp/a") / $(cat "$tmp/b")"
run -n 20 --cfg-scale 3 --negative "Lily" >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && bad "cfg 3 had no effect" || ok "cfg 3"
# Scale 0 is the negative prompt's own logits: greedy on "The dog".
run -n 20 --cfg-scale 0 --negative "The dog" --completion-only >"$tmp/a" 2>/dev/null
"$exld" run --model "$model" --prompt "The dog" --temperature 0 --threads 1 -n 20 \
	--completion-only >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && [ -s "$tmp/a" ] && ok "cfg 0 is the negative prompt" ||
	bad "cfg 0: '$(cat "$tmp/a")' vs '$(cat "$tmp/b")'"

# min-new keeps going past EOS (made the first choice by a bias); without
# it the output ends at once.
run -n 30 --bias 2=100 --json >"$tmp/j" 2>/dev/null
has "$tmp/j" '"new_tokens":1,' && has "$tmp/j" '"stop_token":2' && ok "bias makes EOS" ||
	bad "bias: $(cat "$tmp/j")"
run -n 30 --bias 2=100 --min-new 10 --json >"$tmp/j" 2>/dev/null
has "$tmp/j" '"new_tokens":11,' && ok "min-new" || bad "min-new: $(cat "$tmp/j")"
run -n 30 --bias 2=100 --ignore-eos --json >"$tmp/j" 2>/dev/null
has "$tmp/j" '"new_tokens":30,' && ok "ignore-eos" || bad "ignore-eos: $(cat "$tmp/j")"

# Sampler options reach the sampler: --no-repeat-ngram 1 never repeats a token.
run -n 30 --ignore-eos --no-repeat-ngram 1 --json --completion-only >"$tmp/j" 2>/dev/null
ids=$(sed 's/.*"token_ids":\[\([0-9,]*\)\].*/\1/' "$tmp/j" | tr , '\n')
[ "$(echo "$ids" | sort | uniq -d | wc -l)" -eq 0 ] && [ "$(echo "$ids" | wc -l)" -eq 30 ] &&
	ok "no-repeat-ngram" || bad "no-repeat-ngram: $(cat "$tmp/j")"
# Same seed, same JSON text; all sampler options accepted together.
all="--top-k 20 --top-p 0.9 --min-p 0.02 --typical 0.95 --tfs 0.95 --top-a 0.1 --rep-pen 1.1
--rep-range 32 --rep-decay 8 --freq-pen 0.1 --pres-pen 0.1 --dry-mult 0.5 --dry-base 1.5
--dry-allowed-len 3 --dry-breakers \\n,:,. --xtc-prob 0.2 --xtc-thresh 0.2 --temperature-last"
# shellcheck disable=SC2086
"$exld" run --model "$model" --prompt "$prompt" -n 30 --seed 11 $all --completion-only \
	>"$tmp/a" 2>"$tmp/err" || bad "all options: $(cat "$tmp/err")"
# shellcheck disable=SC2086
"$exld" run --model "$model" --prompt "$prompt" -n 30 --seed 11 $all --completion-only \
	>"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && [ -s "$tmp/a" ] && ok "seeded, every option" || bad "seeded runs differ"
"$exld" run --model "$model" --prompt "$prompt" -n 30 --seed 11 --mirostat 2 --mirostat-tau 3 \
	--mirostat-eta 0.2 >"$tmp/a" 2>"$tmp/err" && ok "mirostat" || bad "mirostat: $(cat "$tmp/err")"
"$exld" run --model "$model" --prompt "$prompt" -n 30 --seed 11 --mirostat --mirostat-tau 3 \
	--mirostat-eta 0.2 >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && ok "--mirostat alone is v2" || bad "--mirostat alone differs from 2"
"$exld" run --model "$model" --prompt "$prompt" -n 30 --seed 11 >"$tmp/b" 2>/dev/null
cmp -s "$tmp/a" "$tmp/b" && bad "mirostat had no effect" || ok "mirostat changes the sample"

# Each sampling option changes a seeded (or greedy) output: a flag that
# does not reach the sampler fails here.  differ WHAT "ARGS A" "ARGS B".
gen() {
	# shellcheck disable=SC2086
	"$exld" run --model "$model" --prompt "$prompt" -n 40 --threads 1 --completion-only $1
}
differ() {
	gen "$2" >"$tmp/a" 2>"$tmp/err" || bad "$1: $(cat "$tmp/err")"
	gen "$3" >"$tmp/b" 2>"$tmp/err" || bad "$1: $(cat "$tmp/err")"
	if [ -s "$tmp/a" ] && [ -s "$tmp/b" ] && ! cmp -s "$tmp/a" "$tmp/b"; then
		ok "$1 changes the output"
	else
		bad "$1 had no effect: '$(cat "$tmp/a")' / '$(cat "$tmp/b")'"
	fi
}
same() {
	gen "$2" >"$tmp/a" 2>"$tmp/err" || bad "$1: $(cat "$tmp/err")"
	gen "$3" >"$tmp/b" 2>"$tmp/err" || bad "$1: $(cat "$tmp/err")"
	cmp -s "$tmp/a" "$tmp/b" && [ -s "$tmp/a" ] && ok "$1" ||
		bad "$1: '$(cat "$tmp/a")' / '$(cat "$tmp/b")'"
}
t1="--seed 11 --temperature 1"
differ "--seed" "$t1" "--seed 12 --temperature 1"
differ "--temperature" "$t1" "--seed 11 --temperature 0.3"
differ "--top-k" "$t1" "$t1 --top-k 2"
differ "--top-p" "$t1" "$t1 --top-p 0.3"
differ "--min-p" "$t1" "$t1 --min-p 0.5"
differ "--typical" "$t1" "$t1 --typical 0.3"
differ "--tfs" "$t1" "$t1 --tfs 0.3"
differ "--top-a" "$t1" "$t1 --top-a 0.9"
differ "--temperature-last" "--seed 11 --temperature 2" "--seed 11 --temperature 2 --temperature-last"
differ "--xtc-prob" "$t1" "$t1 --xtc-prob 1"
differ "--xtc-thresh" "$t1 --xtc-prob 1" "$t1 --xtc-prob 1 --xtc-thresh 0.3"
differ "--mirostat" "$t1" "$t1 --mirostat 2"
differ "--mirostat-tau" "$t1 --mirostat 2" "$t1 --mirostat 2 --mirostat-tau 1"
differ "--mirostat-eta" "$t1 --mirostat 2 --mirostat-tau 2" "$t1 --mirostat 2 --mirostat-tau 2 --mirostat-eta 1"
# Mirostat v2 replaces the truncation steps, top_k included (as llama.cpp).
same "--top-k ignored under mirostat" "$t1 --mirostat 2" "$t1 --mirostat 2 --top-k 2"
g="--temperature 0 --ignore-eos -n 80"
differ "--rep-pen" "$g" "$g --rep-pen 1.5"
differ "--rep-range" "$g --rep-pen 1.5" "$g --rep-pen 1.5 --rep-range 1"
differ "--rep-decay" "$g --rep-pen 1.5 --rep-range 1" "$g --rep-pen 1.5 --rep-range 1 --rep-decay 64"
differ "--freq-pen" "$g" "$g --freq-pen 1"
differ "--pres-pen" "$g" "$g --pres-pen 1.5"

# DRY: the prompt repeats itself and greedy copies on; each DRY option
# decides whether the copy is penalised.  Exact outputs.
rep="Once upon a time, there was a little girl named Lily. Once upon a time, there was a little"
dry_is() {
	want=$1; shift
	"$exld" run --model "$model" --prompt "$rep" --temperature 0 -n 4 --threads 1 \
		--completion-only "$@" >"$tmp/d" 2>"$tmp/err"
	[ "$(cat "$tmp/d")" = "$want" ] && ok "dry $* -> '$want'" ||
		bad "dry $*: '$(cat "$tmp/d")' (want '$want') $(cat "$tmp/err")"
}
dry_is " girl named"
dry_is " boy named" --dry-mult 2
dry_is " girl named" --dry-mult 2 --dry-allowed-len 20
dry_is " boy named" --dry-mult 0.1 --dry-allowed-len 5
dry_is " girl named" --dry-mult 0.1 --dry-allowed-len 5 --dry-base 1
dry_is " girl named" --dry-mult 2 --dry-range 8
dry_is " boy named" --dry-mult 2 --dry-allowed-len 5
dry_is " girl w" --dry-mult 2 --dry-allowed-len 5 --dry-breakers '\,'

# Bad values: exit 2 and a message naming the option.
expect2() {
	what=$1; shift
	"$exld" run --model "$model" --prompt x "$@" >/dev/null 2>"$tmp/err"
	st=$?
	if [ $st -eq 2 ] && grep -q -- "$what" "$tmp/err"; then
		ok "refused $* ($(head -n 1 "$tmp/err"))"
	else
		bad "$* gave status $st: $(cat "$tmp/err")"
	fi
}
expect2 "top-k" --top-k -1
expect2 "top-p" --top-p 1.5
expect2 "min-p" --min-p x
expect2 "typical" --typical 2
expect2 "tfs" --tfs -0.1
expect2 "top-a" --top-a 9
expect2 "rep-pen" --rep-pen 0
expect2 "rep-range" --rep-range -5
expect2 "rep-decay" --rep-decay -1
expect2 "freq-pen" --freq-pen 1e9
expect2 "pres-pen" --pres-pen nan
expect2 "no-repeat-ngram" --no-repeat-ngram 100
expect2 "dry-mult" --dry-mult -1
expect2 "dry-base" --dry-base 0.5
expect2 "dry-allowed-len" --dry-allowed-len 0
expect2 "dry-breakers" --dry-breakers "a,,b"
expect2 "xtc-prob" --xtc-prob 2
expect2 "xtc-thresh" --xtc-thresh -1
expect2 "mirostat" --mirostat 1
expect2 "mirostat-tau" --mirostat-tau 0
expect2 "mirostat-eta" --mirostat-eta 5
expect2 "bias" --bias 5
expect2 "bias id 99999" --bias 99999=1
expect2 "seed" --seed -4
expect2 "stop-token" --stop-token abc
expect2 "stop token 4000" --stop-token 4000
expect2 "min_new_tokens" --min-new 500 -n 10
expect2 "cfg-scale" --cfg-scale 2
expect2 "cfg-scale" --negative "x"
expect2 "top-probs" --top-probs 100
expect2 "stop string" --stop ""
expect2 "stop string 0 is not valid UTF-8" --stop "$(printf '\251')"
expect2 "banned string 0 is not valid UTF-8" --ban "$(printf 'caf\303')"
expect2 "needs a value" --stop
expect2 "unknown option" --frobnicate
exit $fail
