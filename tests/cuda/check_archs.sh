#!/bin/sh
# The architectures on a GPU, by hand (CI has none): the CUDA op tests,
# then each architecture's logits on CUDA against the CPU backend through
# exld run, on random-weight files from exld-mkmodel.  From the source
# root, with the build in build/:
#   sh tests/cuda/check_archs.sh
# (on the device machine: run with carry ["build"]).  Prints, per model,
# how many greedy ids the two backends share and the largest |difference|
# over the logit range in the rows up to the first id they differ on.
cd "$(dirname "$0")/../.." || exit 1
export EXLD_CUDA_MODULE="$PWD/build/kernels/cuda/libexld-cuda.so"
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
nvidia-smi -L 2>&1 | head -1
if [ -z "${NO_OPS:-}" ]; then	# NO_OPS=1: the architectures only
	timeout 300 ./build/tests/test_cuda_ops > "$T/ops.txt" 2>&1
	echo "test_cuda_ops: exit $?"
	tail -8 "$T/ops.txt"
fi
B="--dim 256 --layers 2 --heads 4 --kv-heads 2 --vocab 2000"
P="hello world this is a test of the sliding window and of the experts"
while read -r name args; do
	# shellcheck disable=SC2086
	./build/tests/tools/exld-mkmodel $B $args -o "$T/$name.gguf" > /dev/null 2>&1 ||
		{ echo "$name: exld-mkmodel failed"; continue; }
	for d in cpu cuda; do
		./build/daemon/exld run --model "$T/$name.gguf" --device $d --prompt "$P" -n 12 \
			--temperature 0 --json --dump-logits "$T/$name.$d.bin" \
			> "$T/$name.$d.json" 2> "$T/$name.$d.err" ||
			echo "$name on $d: $(tail -c 300 "$T/$name.$d.err")"
	done
	python3 - "$name" "$T/$name" <<'PY'
import array, json, sys
name, base = sys.argv[1], sys.argv[2]
try:
    x, y = array.array("f"), array.array("f")
    x.frombytes(open(base + ".cpu.bin", "rb").read())
    y.frombytes(open(base + ".cuda.bin", "rb").read())
    ia = json.loads(open(base + ".cpu.json").read().splitlines()[0])["token_ids"]
    ib = json.loads(open(base + ".cuda.json").read().splitlines()[0])["token_ids"]
except Exception as e:
    sys.exit("%s: no comparison (%s)" % (name, e))
n = len(ia); nv = len(x) // n; same = 0
while same < n and ia[same] == ib[same]:
    same += 1
worst = 0.0
for r in range(min(n, same + 1)):
    xr, yr = x[r * nv:(r + 1) * nv], y[r * nv:(r + 1) * nv]
    worst = max(worst, max(abs(p - q) for p, q in zip(xr, yr)) / (max(xr) - min(xr)))
print("%-9s cuda vs cpu: %d of %d greedy ids equal, max |diff| / range %.3g" %
      (name, same, n, worst))
PY
done <<'LIST'
llama31 --rope-freqs
qwen3 --arch qwen3
phi3 --arch phi3 --ctx 4096 --longrope 512
gemma2 --arch gemma2 --swa 8
gemma3 --arch gemma3 --swa 8 --swa-pattern 2 --rope-scale 8
gemma3_local --arch gemma3 --swa 8 --swa-pattern 11
mixtral --experts 4 --experts-used 2 --ff 256
qwen3moe --arch qwen3moe --experts 8 --experts-used 2 --ff 512
qwen3_yarn --arch qwen3 --rope-scaling yarn --rope-scale 4
granite --arch granite
granitemoe --arch granitemoe --experts 4 --experts-used 2 --ff 256
smollm3 --arch smollm3 --layers 4
qwen3vl --arch qwen3vl
glm4 --arch glm4
gemma --arch gemma
olmo3 --arch olmo2 --layers 4 --swa 8
gpt_oss --arch gpt-oss --layers 4 --swa 4 --experts 8 --experts-used 4 --ff 256
mistral3 --arch mistral3 --rope-scaling yarn --rope-scale 16 --kv mistral3.rope.scaling.original_context_length=u32:8 --kv mistral3.attention.temperature_scale=f32:0.5
LIST
