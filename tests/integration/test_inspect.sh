#!/bin/sh
# Runs the real `exld inspect` on stories260K.gguf and on broken copies of it,
# and on exld-mkmodel files with rope scaling.
# usage: test_inspect.sh EXLD MKMODEL
set -u
exld=$1
mkmodel=$2
model=${EXLD_MODELS:-}/stories260K.gguf
if [ -z "${EXLD_MODELS:-}" ] || [ ! -r "$model" ]; then
	echo "stories260K.gguf not found (EXLD_MODELS=${EXLD_MODELS:-unset}); skipping"
	exit 77
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# has FILE TEXT: FILE contains the fixed string TEXT
has() { grep -qF -- "$2" "$1" || { bad "$1 lacks '$2'"; sed 's/^/  | /' "$1" | head -40; return 1; }; ok; }

"$exld" inspect "$model" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "inspect exited $rc: $(cat "$tmp/err")"
[ ! -s "$tmp/err" ] && ok || bad "inspect wrote to stderr: $(cat "$tmp/err")"
has "$tmp/out" "gguf version:  3"
has "$tmp/out" "alignment:     32"
has "$tmp/out" "kv pairs:      19"
has "$tmp/out" "tensors:       48"
has "$tmp/out" "architecture:  llama"
has "$tmp/out" "  embedding_length                   64"
has "$tmp/out" "  block_count                        5"
has "$tmp/out" "  feed_forward_length                172"
has "$tmp/out" "  attention.head_count               8"
has "$tmp/out" "  attention.head_count_kv            4"
has "$tmp/out" "  attention.layer_norm_rms_epsilon   1e-05"
has "$tmp/out" "  rope.freq_base                     -"
has "$tmp/out" "tokenizer:     llama, vocabulary 512"
has "$tmp/out" "parameters:    292.80K (292800)"
has "$tmp/out" "weight bytes:  1.12 MiB (1171200)"
has "$tmp/out" "  blk.0.attn_k.weight       f32     [64, 32]"
has "$tmp/out" "  blk.4.ffn_down.weight     f32     [172, 64]"
has "$tmp/out" "  output_norm.weight        f32     [64]"
n=$(grep -c '^  blk\.[0-9]*\.' "$tmp/out")
[ "$n" -eq 45 ] && ok || bad "expected 45 block tensor lines, got $n"

"$exld" inspect --kv "$model" >"$tmp/kv" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "inspect --kv exited $rc"
n=$(wc -l <"$tmp/kv")
[ "$n" -eq 19 ] && ok || bad "expected 19 kv lines, got $n"
has "$tmp/kv" "llama.attention.head_count_kv  uint32  4"
has "$tmp/kv" "general.architecture  string  \"llama\""
has "$tmp/kv" "tokenizer.ggml.tokens  array[string]  [\"<unk>\", \"<s>\", \"</s>\", \"<0x00>\", \"<0x01>\", \"<0x02>\", \"<0x03>\", \"<0x04>\", ... (512 elements)]"
has "$tmp/kv" "tokenizer.ggml.token_type  array[int32]  [2, 3, 3, 6, 6, 6, 6, 6, ... (512 elements)]"
has "$tmp/kv" "llama.attention.layer_norm_rms_epsilon  float32  1e-05"

# A truncated copy: exit 1, the reason on stderr, nothing on stdout.
head -c 5000 "$model" >"$tmp/trunc.gguf"
"$exld" inspect "$tmp/trunc.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && ok || bad "truncated file: exit $rc, expected 1"
[ ! -s "$tmp/out" ] && ok || bad "truncated file: output on stdout"
has "$tmp/err" "exld inspect: $tmp/trunc.gguf: gguf: "
has "$tmp/err" "(at offset "

# The token array's count (8 bytes at offset 61) set to 0xffffffff.
cp "$model" "$tmp/count.gguf"
printf '\377\377\377\377\000\000\000\000' | dd of="$tmp/count.gguf" bs=1 seek=61 conv=notrunc 2>/dev/null
"$exld" inspect "$tmp/count.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && ok || bad "huge count: exit $rc, expected 1"
has "$tmp/err" "gguf: key 'tokenizer.ggml.tokens': array of 4294967295 strings exceeds file size (at offset 61)"

# Not a GGUF file at all, and a missing one.
printf 'hello world, not a model' >"$tmp/text.gguf"
"$exld" inspect "$tmp/text.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && ok || bad "text file: exit $rc, expected 1"
has "$tmp/err" "not a GGUF file: bad magic"
"$exld" inspect "$tmp/missing.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && ok || bad "missing file: exit $rc, expected 1"
has "$tmp/err" "cannot open"
"$exld" inspect >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && ok || bad "no file: exit $rc, expected 2"
has "$tmp/err" "usage: exld inspect"

# Rope scaling is shown with the hyperparameters: linear and yarn by 4
# (and `exld run` works on both); a type exld does not know is shown too,
# and `exld run` refuses it by name.
for t in linear yarn; do
	"$mkmodel" --rope-scaling $t --rope-scale 4 --threads 1 -o "$tmp/$t.gguf" 2>"$tmp/err" ||
		bad "mkmodel --rope-scaling $t: $(cat "$tmp/err")"
	"$exld" inspect "$tmp/$t.gguf" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc -eq 0 ] && ok || bad "inspect $t.gguf exited $rc: $(cat "$tmp/err")"
	has "$tmp/out" "  rope.scaling.type                  \"$t\""
	has "$tmp/out" "  rope.scaling.factor                4"
	"$exld" run --model "$tmp/$t.gguf" --prompt a -n 2 --temperature 0 --threads 1 \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc -eq 0 ] && ok || bad "run $t.gguf exited $rc: $(cat "$tmp/err")"
done
"$mkmodel" --rope-scaling dynamic --rope-scale 4 --threads 1 -o "$tmp/dyn.gguf" 2>"$tmp/err" ||
	bad "mkmodel --rope-scaling dynamic: $(cat "$tmp/err")"
"$exld" inspect "$tmp/dyn.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "inspect dyn.gguf exited $rc: $(cat "$tmp/err")"
has "$tmp/out" "  rope.scaling.type                  \"dynamic\""
"$exld" run --model "$tmp/dyn.gguf" --prompt a -n 2 --threads 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && ok || bad "run dyn.gguf: exit 0, expected a refusal"
has "$tmp/err" "unsupported rope scaling type 'dynamic' (llama.rope.scaling.type)"
# Without scaling there is no rope.scaling line.
if grep -q 'rope.scaling' "$tmp/kv"; then bad "stories260K shows rope.scaling"; else ok; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
