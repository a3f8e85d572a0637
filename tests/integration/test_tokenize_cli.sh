#!/bin/sh
# Runs the real `exld tokenize` and `exld detokenize` on the test models:
# known ids, the stories260K round trip, a trailing newline, BOS and special
# token options, BERT's [CLS] ... [SEP], a 1 MB round trip, and the inputs
# they must refuse.
# usage: test_tokenize_cli.sh EXLD
set -u
exld=${1:?usage: test_tokenize_cli.sh PATH/TO/exld}
models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -r "$models/stories260K.gguf" ] || [ ! -d "$models/vocab" ]; then
	echo "test models not found (EXLD_MODELS=${models:-unset}); skipping"
	exit 77
fi
stories=$models/stories260K.gguf
spm=$models/vocab/ggml-vocab-llama-spm.gguf
gpt2=$models/vocab/ggml-vocab-gpt-2.gguf
# WordPiece: kept in the source tree (tests/data/vocab)
bert=${EXLD_SRCDIR:-$(dirname "$0")/../..}/tests/data/vocab/ggml-vocab-bert-bge.gguf
tmp=$(mktemp -d /tmp/exld-test-tok-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# tok MODEL WANT INPUT [OPTIONS...]: tokenize of INPUT (a printf format)
# prints exactly WANT
tok() {
	m=$1 want=$2 input=$3
	shift 3
	# shellcheck disable=SC2059
	printf "$input" >"$tmp/in"
	got=$("$exld" tokenize --model "$m" "$@" <"$tmp/in" 2>"$tmp/err")
	rc=$?
	if [ $rc -ne 0 ]; then
		bad "tokenize $* exited $rc: $(cat "$tmp/err")"
	elif [ "$got" != "$want" ]; then
		bad "tokenize $*: got '$got', want '$want'"
	else
		ok
	fi
}

# refuse STATUS TEXT COMMAND...: the command exits STATUS and says TEXT
refuse() {
	want_rc=$1 text=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc -ne "$want_rc" ]; then
		bad "$* exited $rc, want $want_rc"
	elif ! grep -qF -- "$text" "$tmp/err"; then
		bad "$*: stderr lacks '$text': $(cat "$tmp/err")"
	else
		ok
	fi
}

# Known ids (from the vocab .out files), one line, single spaces.
tok "$gpt2" "15496 995" 'Hello world'
tok "$spm" "29871 15043 3186" ' Hello world' --no-bos
tok "$spm" "1 15043 3186" 'Hello world'
# all of stdin: a final newline is text too
tok "$spm" "15043 13" 'Hello\n' --no-bos
tok "$spm" "29871 13" '\n' --no-bos
tok "$spm" "1" ''
tok "$gpt2" "" ''
# special tokens only when asked
tok "$spm" "1 15043" '<s>Hello' --no-bos --special
tok "$gpt2" "50256" '<|endoftext|>' --special
tok "$gpt2" "27 91 437 1659 5239 91 29" '<|endoftext|>'

# WordPiece (llama.cpp's ids): [CLS] first and [SEP] last unless --no-bos
tok "$bert" "101 7592 2088 102" 'Hello world'
tok "$bert" "7592 1010 2088 999" ' Hello, world!' --no-bos
tok "$bert" "101 102" ''
tok "$bert" "101 1031 18856 2015 1033 7592 102" '[CLS]hello'
tok "$bert" "101 101 7592 103 102" '[CLS]hello[MASK]' --special
tok "$bert" "101 9706 7959 2140 100 1006 3671 1007 102" '\303\204pfel \360\237\246\231 (normal)'
printf '101 7592 1010 2088 999 100 102' | "$exld" detokenize --model "$bert" >"$tmp/out" 2>"$tmp/err"
[ "$(cat "$tmp/out")" = " hello , world !" ] && ok || bad "detokenize bert: got '$(cat "$tmp/out")'"
printf '101 7592 102' | "$exld" detokenize --special --model "$bert" >"$tmp/out" 2>"$tmp/err"
[ "$(cat "$tmp/out")" = "[CLS] hello[SEP]" ] && ok || bad "detokenize bert --special: got '$(cat "$tmp/out")'"

# stories260K: the reference ids decode to the reference text (its final
# newline is the file's, not a token's) and the text encodes to the ids.
head -c -1 "$models/stories260K.expected.txt" >"$tmp/text"
"$exld" detokenize --model "$stories" <"$models/stories260K.expected.ids" >"$tmp/dec" 2>"$tmp/err" ||
	bad "detokenize stories: $(cat "$tmp/err")"
cmp -s "$tmp/dec" "$tmp/text" && ok || { bad "stories ids decode to:"; head -c 300 "$tmp/dec"; echo; }
"$exld" tokenize --no-bos --model "$stories" <"$tmp/text" >"$tmp/ids" 2>"$tmp/err" ||
	bad "tokenize stories: $(cat "$tmp/err")"
tr -s ' \n' '\n\n' <"$tmp/ids" | sed '/^$/d' >"$tmp/a"
tr -s ' \n' '\n\n' <"$models/stories260K.expected.ids" | sed '/^$/d' >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" && ok || bad "stories text does not encode to the reference ids"
[ "$(wc -l <"$tmp/ids")" -eq 1 ] && ok || bad "tokenize printed more than one line"

# detokenize: ids separated by any whitespace; special tokens on request
printf '1\t15043\n\n 3186 2\n' | "$exld" detokenize --model "$spm" >"$tmp/out" 2>"$tmp/err"
[ "$(cat "$tmp/out")" = "Hello world" ] && ok || bad "detokenize: got '$(cat "$tmp/out")'"
printf '1 15043 2' | "$exld" detokenize --special --model "$spm" >"$tmp/out" 2>"$tmp/err"
[ "$(cat "$tmp/out")" = "<s> Hello</s>" ] && ok || bad "detokenize --special: got '$(cat "$tmp/out")'"
printf '' | "$exld" detokenize --model "$spm" >"$tmp/out" 2>"$tmp/err" && [ ! -s "$tmp/out" ] && ok ||
	bad "detokenize of nothing"
# a character split over byte tokens, and a byte that is no UTF-8: U+FFFD
printf '29871 229 133 175 29871 258' | "$exld" detokenize --model "$spm" >"$tmp/out" 2>"$tmp/err"
printf '\342\202\254 \357\277\275' >"$tmp/want"
cmp -s "$tmp/out" "$tmp/want" && ok || bad "byte tokens decode to: $(od -c "$tmp/out")"

# 1 MB of text, there and back
i=0
: >"$tmp/big"
while [ $i -lt 14 ]; do
	cat "$models/vocab/ggml-vocab-gpt-2.gguf.inp" "$tmp/text" >>"$tmp/big"
	i=$((i + 1))
done
while [ "$(wc -c <"$tmp/big")" -lt 1000000 ]; do cat "$tmp/big" "$tmp/big" >"$tmp/big2"; mv "$tmp/big2" "$tmp/big"; done
for m in "$gpt2" "$spm"; do
	"$exld" tokenize --no-bos --model "$m" <"$tmp/big" >"$tmp/big.ids" 2>"$tmp/err" &&
		"$exld" detokenize --model "$m" <"$tmp/big.ids" >"$tmp/big.dec" 2>>"$tmp/err" ||
		bad "1 MB through $m: $(cat "$tmp/err")"
	cmp -s "$tmp/big" "$tmp/big.dec" && ok || bad "1 MB round trip through $m differs"
done

# refusals
printf '1 abc 2' >"$tmp/in"
refuse 1 "'abc' is not a token id" sh -c '"$0" detokenize --model "$1" <"$2"' "$exld" "$spm" "$tmp/in"
printf '15043 32000' >"$tmp/in"
refuse 1 "token id 32000 is out of range" sh -c '"$0" detokenize --model "$1" <"$2"' "$exld" "$spm" "$tmp/in"
printf -- '-1' >"$tmp/in"
refuse 1 "token id -1 is out of range" sh -c '"$0" detokenize --model "$1" <"$2"' "$exld" "$spm" "$tmp/in"
printf '12x' >"$tmp/in"
refuse 1 "'12x' is not a token id" sh -c '"$0" detokenize --model "$1" <"$2"' "$exld" "$spm" "$tmp/in"
printf '99999999999999999999' >"$tmp/in"
refuse 1 "is not a token id" sh -c '"$0" detokenize --model "$1" <"$2"' "$exld" "$spm" "$tmp/in"
refuse 2 "--model FILE is required" "$exld" tokenize
refuse 2 "unknown argument '--bogus'" "$exld" detokenize --model "$spm" --bogus
refuse 2 "unknown argument '--no-bos'" "$exld" detokenize --model "$spm" --no-bos
refuse 1 "$tmp/missing.gguf" sh -c '"$0" tokenize --model "$1" </dev/null' "$exld" "$tmp/missing.gguf"
head -c 100 "$stories" >"$tmp/short.gguf"
refuse 1 "exld tokenize:" sh -c '"$0" tokenize --model "$1" </dev/null' "$exld" "$tmp/short.gguf"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
