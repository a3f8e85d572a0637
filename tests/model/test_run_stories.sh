#!/bin/sh
# `exld run` end to end on stories260K: greedy text for "Once upon a time"
# is the README's known continuation, and from BOS alone it is llama2.c's
# reference text, exactly.  Then options it must refuse.
set -u
exld=${1:?usage: test_run_stories.sh PATH/TO/exld}
models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -d "$models" ]; then
	echo "EXLD_MODELS ('$models') is absent; skipping"
	exit 77
fi
model=$models/stories260K.gguf
tmp=$(mktemp -d /tmp/exld-test-run-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0

want="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."
"$exld" run --model "$model" --prompt "Once upon a time" -n 40 --temperature 0 --threads 2 \
	>"$tmp/out" 2>"$tmp/err" || { echo "exld run failed:"; cat "$tmp/err"; exit 1; }
case "$(cat "$tmp/out")" in
"$want"*) echo "ok: known continuation" ;;
*) echo "FAIL: got:"; cat "$tmp/out"; echo "expected to start with: $want"; fail=1 ;;
esac
# the kernel set named is the one with-kernels asked for, else the best
set=${EXLD_CPU_KERNELS:-[a-z0-9]+}
grep -Eq "^timing: prompt_tokens=5 prompt_tok_s=[0-9.]+ gen_tokens=40 gen_tok_s=[0-9.]+ kernels=$set\$" "$tmp/err" ||
	{ echo "FAIL: timing line (kernels $set):"; cat "$tmp/err"; fail=1; }

# From BOS alone: the 200 reference tokens as text, byte for byte.
"$exld" run --model "$model" --prompt "" -n 200 --temperature 0 --kv-tokens 300 \
	>"$tmp/bos" 2>"$tmp/err" || { echo "exld run failed:"; cat "$tmp/err"; exit 1; }
if cmp -s "$tmp/bos" "$models/stories260K.expected.txt"; then
	echo "ok: reference text from BOS"
else
	echo "FAIL: text from BOS differs from stories260K.expected.txt:"
	diff "$tmp/bos" "$models/stories260K.expected.txt" | head -20
	fail=1
fi

# Sampling is reproducible with a seed.
"$exld" run --model "$model" --prompt "Lily" -n 40 --seed 7 >"$tmp/s1" 2>/dev/null &&
"$exld" run --model "$model" --prompt "Lily" -n 40 --seed 7 >"$tmp/s2" 2>/dev/null ||
	{ echo "FAIL: sampled run failed"; fail=1; }
cmp -s "$tmp/s1" "$tmp/s2" && echo "ok: same seed, same text" ||
	{ echo "FAIL: same seed gave different text"; fail=1; }

# Refusals: clear messages, non-zero status.
expect_error() {
	what=$1; shift
	if "$exld" run "$@" >/dev/null 2>"$tmp/err"; then
		echo "FAIL: accepted $*"; fail=1
	elif grep -q "$what" "$tmp/err"; then
		echo "ok: refused ($(head -n 1 "$tmp/err"))"
	else
		echo "FAIL: message lacks '$what':"; cat "$tmp/err"; fail=1
	fi
}
expect_error "required" --prompt "x"
expect_error "/nonexistent.gguf" --model /nonexistent.gguf --prompt "x"
expect_error "wants an integer" --model "$model" --prompt "x" -n lots
expect_error "wants a number" --model "$model" --prompt "x" --temperature -1
expect_error "unknown option" --model "$model" --prompt "x" --frobnicate 1
expect_error "does not fit in the KV cache" --model "$model" --prompt "Once upon a time" --kv-tokens 3

# A full KV cache ends generation early, with a note.
"$exld" run --model "$model" --prompt "Once upon a time" -n 50 --kv-tokens 20 --temperature 0 \
	>"$tmp/out" 2>"$tmp/err" || { echo "FAIL: run with a small KV cache failed"; fail=1; }
grep -q "KV cache full at 20 tokens" "$tmp/err" && grep -q "gen_tokens=16 " "$tmp/err" &&
	echo "ok: stops when the KV cache is full" ||
	{ echo "FAIL: small KV cache:"; cat "$tmp/err"; fail=1; }
exit $fail
