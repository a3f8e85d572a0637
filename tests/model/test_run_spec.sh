#!/bin/sh
# Speculative decoding and beam search through `exld run`: the ids a job
# gives with --ngram-draft or --draft-model are the ids it gives without,
# greedy and seeded, with a ban, a stop string and a regex, on stories260K
# drafting for itself and on a random F16 model drafted by its Q4_0 twin
# (exld-mkmodel, the same --seed); --beams 1 is greedy and --beams 4
# reports its score; bad combinations exit 2.
set -u
exld=${1:?usage: test_run_spec.sh PATH/TO/exld PATH/TO/exld-mkmodel}
mkmodel=${2:?usage: test_run_spec.sh PATH/TO/exld PATH/TO/exld-mkmodel}
models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -f "$models/stories260K.gguf" ]; then
	echo "EXLD_MODELS ('$models') has no stories260K.gguf; skipping"
	exit 77
fi
stories=$models/stories260K.gguf
tmp=$(mktemp -d /tmp/exld-test-spec-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
ids() { sed -n 's/.*"token_ids":\(\[[^]]*\]\).*"stop_reason":\("[a-z_]*"\).*/\1 \2/p' "$1"; }
drafted() { sed -n 's/.*draft_proposed=\([0-9]*\) draft_accepted=\([0-9]*\).*/\2 of \1/p' "$1"; }

# same WHAT MODEL PROMPT -- OPTIONS -- DRAFT OPTIONS: the ids without and with
same() {
	what=$1 model=$2 prompt=$3
	shift 3
	base=""
	while [ "$1" != "--" ]; do base="$base $1"; shift; done
	shift
	# shellcheck disable=SC2086
	"$exld" run --model "$model" --prompt "$prompt" --threads 1 --json $base \
		>"$tmp/a" 2>"$tmp/ae" || { bad "$what: plain run: $(cat "$tmp/ae")"; return; }
	# shellcheck disable=SC2086
	"$exld" run --model "$model" --prompt "$prompt" --threads 1 --json $base "$@" \
		>"$tmp/b" 2>"$tmp/be" || { bad "$what: drafting run: $(cat "$tmp/be")"; return; }
	a=$(ids "$tmp/a") b=$(ids "$tmp/b")
	if [ -n "$a" ] && [ "$a" = "$b" ]; then
		ok "$what: the same ids ($(drafted "$tmp/be") proposals accepted)"
	else
		bad "$what: $b drafting, $a without"
	fi
}

rep="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, Lily went to the park. Once upon a time"
seeded="--temperature 1 --top-k 0 --top-p 1 --min-p 0 --seed 99"
for d in "--ngram-draft 3" "--draft-model stories260K --draft-tokens 5"; do
	same "stories260K greedy, $d" "$stories" "$rep" -n 60 --temperature 0 -- $d
	same "stories260K seeded, $d" "$stories" "$rep" -n 60 $seeded -- $d
	same "stories260K greedy, ban + stop + regex, $d" "$stories" "$rep" -n 60 \
		--temperature 0 --ban Lily --stop park. --regex '[^0-9]+' -- $d
	same "stories260K seeded, ban + stop + regex, $d" "$stories" "$rep" -n 60 $seeded \
		--ban Lily --stop park. --regex '[^0-9]+' -- $d
done

# A random F16 model and its Q4_0 twin: the same weights but for the
# quantization, so the twin proposes what the model picks often enough.
if "$mkmodel" --dim 128 --layers 4 --heads 4 --type f16 --seed 7 -o "$tmp/f16.gguf" \
	>/dev/null 2>"$tmp/mk" &&
   "$mkmodel" --dim 128 --layers 4 --heads 4 --type q4_0 --seed 7 -o "$tmp/q4.gguf" \
	>/dev/null 2>>"$tmp/mk"; then
	same "random F16 greedy, its Q4_0 twin drafting" "$tmp/f16.gguf" "hello world" \
		-n 64 --temperature 0 -- --draft-model "$tmp/q4.gguf" --draft-tokens 4
	acc=$(drafted "$tmp/be")
	[ "${acc%% *}" -gt 0 ] 2>/dev/null && ok "the twin's proposals are accepted ($acc)" ||
		bad "the twin's proposals: $acc"
	same "random F16 seeded, its Q4_0 twin drafting" "$tmp/f16.gguf" "hello world" \
		-n 64 $seeded -- --draft-model "$tmp/q4.gguf"
	same "random F16 greedy, ngram" "$tmp/f16.gguf" "hello world" -n 64 --temperature 0 -- \
		--ngram-draft 2
else
	bad "exld-mkmodel: $(cat "$tmp/mk")"
fi

# Beam search: one beam is greedy; four report their width and score.
same "one beam" "$stories" "Tom and Sue went to the park. They" -n 40 --temperature 0 -- \
	--beams 1
"$exld" run --model "$stories" --prompt "The dog" -n 30 --threads 1 --json --beams 4 \
	--length-penalty 0 >"$tmp/j" 2>"$tmp/e" && grep -q '"num_beams":4,"beam_score":-' "$tmp/j" &&
	ok "four beams: $(grep -o '"beam_score":[-0-9.]*' "$tmp/j")" ||
	bad "four beams: $(cat "$tmp/j" "$tmp/e")"

# Usage errors: exit 2 and a message.
usage() {
	what=$1 want=$2
	shift 2
	"$exld" run --model "$stories" --prompt x -n 4 "$@" >/dev/null 2>"$tmp/e"
	st=$?
	[ "$st" -eq 2 ] && grep -qF -- "$want" "$tmp/e" && ok "$what: exit 2" ||
		bad "$what: exit $st, '$(cat "$tmp/e")'"
}
usage "--draft-tokens alone" "--draft-tokens goes with" --draft-tokens 3
usage "two proposers" "at most one of --draft-model and --ngram-draft" \
	--draft-model stories260K --ngram-draft 2
usage "beams and drafting" "--beams does not combine" --beams 2 --ngram-draft 2
usage "--length-penalty alone" "--length-penalty goes with --beams" --length-penalty 2
usage "too many draft tokens" "--draft-tokens wants an integer in [1, 16]" \
	--ngram-draft 2 --draft-tokens 17
"$exld" run --model "$stories" --prompt x -n 4 --draft-model aidreams260K >/dev/null 2>"$tmp/e"
grep -qF "must have the same vocabulary" "$tmp/e" && ok "another vocabulary refused" ||
	bad "another vocabulary: '$(cat "$tmp/e")'"
exit $fail
