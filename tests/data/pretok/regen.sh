#!/bin/sh
# Regenerates NAME.out for every NAME in names.txt (and gpt-2.out, the
# baseline) with llama.cpp as the reference peer; see README.md.
# usage: regen.sh MKMODEL [VOCAB_DIR]   (run from anywhere; needs node and
#        the peer of ../shared/tools/peer, PEER_DIR, default /tmp/peer)
set -eu
mkmodel=$1
vocab=${2:-$(dirname "$0")/../../../../shared/models/vocab}/ggml-vocab-gpt-2.gguf
here=$(cd "$(dirname "$0")" && pwd)
peer=$here/../../../../shared/tools/peer/peer-tokenize.mjs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in gpt-2 $(cat "$here/names.txt"); do
	"$mkmodel" --vocab-from "$vocab" --pre "$name" --dim 32 --heads 2 --ff 32 --layers 1 \
		--tied --threads 1 -o "$tmp/m.gguf" 2>/dev/null
	node "$peer" "$tmp/m.gguf" <"$here/cases.txt" >"$tmp/out"
	n=$(wc -l <"$tmp/out")
	c=$(grep -c '^__case__$' "$here/cases.txt")
	if [ "$n" -ne $((c + 1)) ]; then
		echo "$name: the peer gave $n lines for $((c + 1)) cases" >&2
		exit 1
	fi
	mv "$tmp/out" "$here/$name.out"
	echo "$name.out"
done
