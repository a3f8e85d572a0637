#!/bin/sh
# A model split by gguf-split (daemon/core/gguf/gguf_split.h): an
# exld-mkmodel file written as 3 parts by exld-gguf-split runs from its
# first part with the whole file's greedy ids (exld run and the daemon),
# `exld inspect` counts every part's tensors, the daemon lists it once and
# loads it with every part's bytes; a later part or a set with a part
# missing is refused naming the part.
# usage: test_split.sh EXLD EXL MKMODEL SPLIT
set -u
exld=$1
exl=$2
mkmodel=$3
split=$4
tmp=$(mktemp -d /tmp/exld-split-XXXXXX) || exit 1
sock=$tmp/exld.sock
dpid=
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
has() { grep -qF -- "$2" "$1" && ok || { bad "$1 lacks '$2':"; sed 's/^/  | /' "$1" | head -20; }; }
cleanup() {
	[ -n "$dpid" ] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

mkdir "$tmp/models"
"$mkmodel" --dim 64 --layers 3 --type q8_0 --threads 1 -o "$tmp/whole.gguf" 2>/dev/null ||
	{ echo "exld-mkmodel failed"; exit 1; }
"$split" --parts 3 "$tmp/whole.gguf" "$tmp/models/tiny" 2>"$tmp/e" ||
	{ echo "exld-gguf-split failed: $(cat "$tmp/e")"; exit 1; }
first=$tmp/models/tiny-00001-of-00003.gguf

# the first part opens the set: the whole file's tensors and greedy ids
"$exld" inspect "$first" >"$tmp/o" 2>"$tmp/e" && ok || bad "inspect: $(cat "$tmp/e")"
"$exld" inspect "$tmp/whole.gguf" >"$tmp/w" 2>/dev/null
n=$(grep '^tensors:' "$tmp/w")
has "$tmp/o" "$n"
run() {
	"$exld" run --model "$1" --prompt "Once upon a time" -n 12 --temperature 0 --ignore-eos \
		--threads 1 --json 2>"$tmp/e" | sed 's/"seed":[0-9]*,//; s/"timings":{[^}]*}//'
}
want=$(run "$tmp/whole.gguf")
got=$(run "$first")
[ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "exld run on the parts: '$got', whole: '$want'"

# a later part, and a set with a part missing, are refused by name
"$exld" run --model "$tmp/models/tiny-00002-of-00003.gguf" --prompt a -n 1 >/dev/null 2>"$tmp/e"
[ $? -ne 0 ] && ok || bad "part 2 ran"
has "$tmp/e" "is part 2 of 3 of a split model: open its first part"
mv "$tmp/models/tiny-00003-of-00003.gguf" "$tmp/p3"
"$exld" run --model "$first" --prompt a -n 1 >/dev/null 2>"$tmp/e"
[ $? -ne 0 ] && ok || bad "ran without part 3"
has "$tmp/e" "part 3 of 3 of a split model"
has "$tmp/e" "tiny-00003-of-00003.gguf: No such file"
mv "$tmp/p3" "$tmp/models/tiny-00003-of-00003.gguf"

# the daemon: listed once, loaded with every part's bytes, the same ids
"$exld" --config /dev/null --socket "$sock" --models "$tmp/models" --threads 1 \
	>"$tmp/daemon.log" 2>&1 &
dpid=$!
i=0
while [ $i -lt 100 ] && ! "$exl" --socket "$sock" models >"$tmp/list" 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
has "$tmp/list" "tiny-00001-of-00003"
# FILE is every part's bytes, as exl prints sizes
total=$(cat "$tmp"/models/tiny-*.gguf | wc -c)
kib=$(awk -v b="$total" 'BEGIN { printf "%.1f KiB", b / 1024 }')
grep -q "^tiny-00001-of-00003  *available  *$kib" "$tmp/list" && ok ||
	bad "listed size is not the parts' $kib: $(cat "$tmp/list")"
grep -q "tiny-0000[23]" "$tmp/list" && bad "later parts listed: $(cat "$tmp/list")" || ok
"$exl" --socket "$sock" load tiny-00001-of-00003 >"$tmp/o" 2>"$tmp/e" && ok ||
	bad "load: $(cat "$tmp/e")"
"$exl" --socket "$sock" models >"$tmp/list" 2>"$tmp/e" || bad "models: $(cat "$tmp/e")"
grep -q "^tiny-00001-of-00003  *loaded  *$kib" "$tmp/list" && ok ||
	bad "loaded size is not the parts' $kib: $(cat "$tmp/list")"
"$exl" --socket "$sock" generate -m tiny-00001-of-00003 -n 12 --temperature 0 --ignore-eos --json \
	"Once upon a time" >"$tmp/g" 2>"$tmp/e" || bad "generate: $(cat "$tmp/e")"
ids=$(echo "$want" | sed 's/.*"token_ids":\(\[[^]]*\]\).*/\1/')
has "$tmp/g" "\"token_ids\":$ids"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
