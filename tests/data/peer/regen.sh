#!/bin/sh
# Regenerates TYPE.txt for each weight type with llama.cpp as the reference
# peer; see README.md.
# usage: regen.sh BUILD_DIR [CASE...]   (run from anywhere; needs python3 and
#        the peer of ../shared/tools/peer, PEER, default
#        /tmp/peer/peer-bench-native)
# A CASE is a weight type, or one of the named cases of case_opts.
set -eu
build=$1
shift
types=${*:-"q4_1 q5_0 q5_1 q2_k q3_k q5_k iq4_nl iq4_xs mxfp4"}
here=$(cd "$(dirname "$0")" && pwd)
peer=${PEER:-/tmp/peer/peer-bench-native}
mkmodel=$build/tests/tools/exld-mkmodel
exld=$build/daemon/exld
prompt="Once upon a time"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Options past the shared shape: --type CASE, or a named case's
case_opts() {
	case $1 in
	# YaRN by 4 over the file's context (DeepSeek-R1-0528-Qwen3's rope)
	qwen3_yarn) echo "--arch qwen3 --rope-scaling yarn --rope-scale 4 --type f32" ;;
	# YaRN by 8 over an original context of 512, llama's adjacent pairs
	llama_yarn) echo "--rope-scaling yarn --rope-scale 8 --kv llama.rope.scaling.original_context_length=u32:512 --type f32" ;;
	# mistral3 (Ministral 3): YaRN by 16 with beta_fast 4 (pairs 0-6
	# unscaled, 7-10 blended) and mscale_all_dim 1
	mistral3_yarn) echo "--arch mistral3 --rope-base 10000 --rope-scaling yarn --rope-scale 16 --kv mistral3.rope.scaling.yarn_log_multiplier=f32:1 --kv mistral3.rope.scaling.yarn_beta_fast=f32:4 --type f32" ;;
	# mistral3's Llama 4 temperature (0.5, for a visible effect) over an
	# original context of 8
	mistral3_temp) echo "--arch mistral3 --kv mistral3.rope.scaling.original_context_length=u32:8 --kv mistral3.attention.temperature_scale=f32:0.5 --type f32" ;;
	# granite: Granite 3.3 2B's logit, residual, embedding and attention scales
	granite) echo "--arch granite --type f32" ;;
	# smollm3: 4 layers, the last without rope (base 10: rope turns fast)
	smollm3) echo "--arch smollm3 --layers 4 --rope-base 10 --type f32" ;;
	# the language models of Qwen2-VL / Qwen3-VL (M-RoPE sections, text)
	qwen2vl) echo "--arch qwen2vl --type f32" ;;
	qwen3vl) echo "--arch qwen3vl --kv qwen3vl.n_deepstack_layers=u32:1 --type f32" ;;
	qwen3vlmoe) echo "--arch qwen3vlmoe --experts 4 --experts-used 2 --type f32" ;;
	# glm4 (GLM-4-0414): post norms, fused gate/up, q/k/v biases, half rope
	glm4) echo "--arch glm4 --type f32" ;;
	# gemma (Gemma 1, CodeGemma)
	gemma) echo "--arch gemma --type f32" ;;
	# olmo2 (OLMo 2), and OLMo 3's sliding window of 8 on 3 layers in 4
	olmo2) echo "--arch olmo2 --type f32" ;;
	olmo3) echo "--arch olmo2 --layers 4 --swa 8 --type f32" ;;
	# granitemoe (Granite 3.x MoE): granite's multipliers on 4 experts, 2 a token
	granitemoe) echo "--arch granitemoe --experts 4 --experts-used 2 --type f32" ;;
	# gpt-oss: sinks, biases, a window of 2 on layers 0 and 2 (every other
	# layer), heads of 64 (q wider than the embedding, as in the real
	# ones), 8 experts with the clamped SwiGLU, 4 a token by the softmax
	# of their logits
	gpt_oss) echo "--arch gpt-oss --dim 320 --heads 8 --head-dim 64 --ff 320 --layers 4 --experts 8 --experts-used 4 --swa 2 --type f32" ;;
	# and with gpt-oss's YaRN (factor 32 over an original context of 4096
	# in the real ones; here 16 over 8)
	gpt_oss_yarn) echo "--arch gpt-oss --experts 4 --experts-used 2 --layers 4 --swa 2 --rope-scaling yarn --rope-scale 16 --kv gpt-oss.rope.scaling.original_context_length=u32:8 --type f32" ;;
	# gpt-oss's shape with every matrix MXFP4 (the real ones' expert type):
	# 11 blocks a row, so rows start at odd addresses.  Seed 3: near-ties
	# of a quantized router can pick another expert in each engine (x
	# rounded to 8 bits a little differently), and then one position's
	# logits, or every later one's, land 0.1-0.25 of the range apart: this
	# file with seed 1 from position 7 on, with seed 5 at one position, as
	# Q8_0 and IQ4_NL files of this shape did (seeds 1, 2, 5); seeds 2-4
	# of MXFP4 nowhere
	gpt_oss_mxfp4) echo "--arch gpt-oss --dim 352 --heads 8 --head-dim 64 --ff 352 --layers 4 --experts 8 --experts-used 4 --swa 2 --seed 3 --type mxfp4" ;;
	*) echo "--type $1" ;;
	esac
}
for type in $types; do
	opts="--dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 768 --seed 1 $(case_opts "$type")"
	# shellcheck disable=SC2086
	"$mkmodel" $opts --threads 1 -o "$tmp/m.gguf" 2>/dev/null
	# exld's greedy 16 tokens and logits, then the peer fed the same ids
	"$exld" run --model "$tmp/m.gguf" --prompt "$prompt" -n 16 --temperature 0 --ignore-eos \
		--json --threads 2 --dump-logits "$tmp/exld.bin" >"$tmp/exld.json" 2>/dev/null
	ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.buffer.read().decode("utf-8", "replace"))["token_ids"][:15])))' \
		<"$tmp/exld.json")
	"$peer" --model "$tmp/m.gguf" --prompt "$prompt" --teacher "$ids" --threads 2 \
		--dump-logits "$tmp/peer.bin" >"$tmp/peer.json" 2>"$tmp/peer.err" ||
		{ cat "$tmp/peer.err" >&2; exit 1; }
	python3 "$here/digest.py" "$opts" "$ids" "$tmp/peer.json" "$tmp/peer.bin" "$tmp/exld.bin" \
		>"$here/$type.txt"
	echo "$type.txt: $(grep '^# max' "$here/$type.txt")"
done
