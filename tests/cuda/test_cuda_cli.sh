#!/bin/sh
# --device cuda from the command line, without a GPU:
#  - with this build's real module on a machine without a usable GPU,
#    `exld run` and the daemon fail with exit 1 and a message saying what is
#    missing (skipped when a GPU is present: then they would succeed);
#  - on the fake device (tests/unit/cuda_fake_module.c, FAKE_VRAM), `exld
#    run` refuses a model that does not fit with the numbers, and a daemon
#    with a model on it sizes the KV pool from free memory, reports the
#    device's memory in `exl status`, and answers a job it cannot run with
#    an error, not a crash;
#  - a gemma3 file mixing sliding-window and global layers gets a global
#    pool counted at its global layers, beside the local layers' own pool.
set -u
exld=${1:?usage: test_cuda_cli.sh EXLD EXL CUDA_MODULE FAKE_VRAM_MODULE MKMODEL}
exl=${2:?}
real_module=${3:?}
fake_module=${4:?}
mkmodel=${5:?}
models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -f "$models/stories260K.gguf" ]; then
	echo "EXLD_MODELS ('$models') has no stories260K.gguf; skipping"
	exit 77
fi
model=$models/stories260K.gguf
tmp=$(mktemp -d /tmp/exld-test-cuda-XXXXXX)
dpid=
fail=0
cleanup() {
	[ -n "$dpid" ] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
ok() { printf 'ok: %s\n' "$1"; }
bad() { printf 'FAIL: %s\n' "$1"; fail=1; }
has() { grep -qF -- "$2" "$1"; }

# ---- the real module, no GPU ----
EXLD_CUDA_MODULE=$real_module "$exld" run --model "$model" --prompt "Hi" -n 4 \
	--temperature 0 --device cuda >"$tmp/o" 2>"$tmp/e"
rc=$?
if [ $rc = 0 ]; then
	echo "skipped: a CUDA device is present (exld run --device cuda worked), so there is no"
	echo "         no-GPU message to check"
else
	# What is missing on this machine, as the message should say it.
	if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
		want="no CUDA device: "
	else
		want="exld run: no CUDA device: no NVIDIA driver found (libcuda.so.1 not loadable: "
	fi
	[ $rc = 1 ] && has "$tmp/e" "$want" && ! has "$tmp/e" "insufficient" &&
		ok "exld run --device cuda without a GPU: exit 1, $(head -n 1 "$tmp/e")" ||
		bad "exld run --device cuda: rc $rc: $(cat "$tmp/e")"
	EXLD_CUDA_MODULE=$real_module "$exld" --config /dev/null --socket "$tmp/s0" \
		--models "$models" --load stories260K --device cuda >"$tmp/o" 2>"$tmp/e"
	rc=$?
	want=${want#exld run: }
	[ $rc = 1 ] && has "$tmp/e" "loading 'stories260K': $want" &&
		ok "the daemon with --device cuda and a start-up model: exit 1, says why" ||
		bad "daemon --device cuda: rc $rc: $(cat "$tmp/e")"
fi

# ---- the fake device: a model that does not fit ----
EXLD_CUDA_MODULE=$fake_module EXLD_FAKE_VRAM_FREE_MIB=0.5 "$exld" run --model "$model" \
	--prompt "Hi" -n 4 --device cuda:0 >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc = 1 ] &&
	has "$tmp/e" "model needs 1.1 MiB of VRAM for its weights (1171200 bytes), 0.5 MiB free of 1024.0 MiB on cuda:0" &&
	ok "exld run, a model that does not fit: exit 1 with the numbers" ||
	bad "no fit: rc $rc: $(cat "$tmp/e")"

# ---- the fake device: a daemon with a model on it ----
# 4 MiB free: after 1171200 bytes of weights, 90% of 3023104 bytes at 640
# bytes a token is 4251 tokens, 132 whole pages of 32: 4224 tokens, 2.6 MiB;
# 3874560 bytes in all, 319744 bytes (312.2 KiB) left.
EXLD_CUDA_MODULE=$fake_module EXLD_FAKE_VRAM_FREE_MIB=4 "$exld" --config /dev/null \
	--socket "$tmp/s" --models "$models" --load stories260K --device cuda \
	>"$tmp/log" 2>&1 &
dpid=$!
export EXLD_SOCKET=$tmp/s
i=0
while [ $i -lt 300 ] && ! has "$tmp/log" "ready" && kill -0 "$dpid" 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
has "$tmp/log" "model 'stories260K' loaded in" && has "$tmp/log" "(KV pool of 4224 tokens, 2.6 MiB)" &&
	ok "kv_tokens unset on a device with 4 MiB free: 4224 tokens" ||
	bad "daemon on the fake device: $(cat "$tmp/log")"
"$exl" status >"$tmp/o" 2>"$tmp/e"
grep -q '^stories260K  *loaded .* 1\.1 MiB cuda:0$' "$tmp/o" &&
	has "$tmp/o" "stories260K (cuda:0): 3.7 MiB of VRAM (weights 1.1 MiB, KV cache 2.6 MiB, other buffers 0 B); 312.2 KiB free of 1.0 GiB" &&
	ok "exl status: the model's VRAM and the device's free memory" ||
	bad "status on the fake device: $(cat "$tmp/o" "$tmp/e")"
"$exl" generate -n 4 --temperature 0 "Hi" >"$tmp/o" 2>"$tmp/e"
rc=$?
[ $rc != 0 ] && has "$tmp/e" "fake CUDA device: no kernels" && kill -0 "$dpid" &&
	"$exl" status >/dev/null 2>&1 &&
	ok "a job the device cannot run: an error (exit $rc), the daemon serves on" ||
	bad "generate on the fake device: rc $rc: $(cat "$tmp/o" "$tmp/e")"
kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
dpid=

# ---- auto sizing for a model with local and global layers ----
# gemma3, 6 layers (5 local, window 8; 1 global), 2 KV heads of 64: 512
# bytes a layer and position, 21819392 bytes of weights.  32 MiB free
# leave 11735040 bytes, 90% of them 10561536.  max_running_jobs 2, pages
# of 32, batches of 512: the local pool is 2 x 19 pages (window, a kept
# page, a batch ahead) = 1216 positions x 5 layers = 3112960 bytes, and
# the global pool gets the rest at 512 bytes a position, capped at the
# training context x 2 jobs: 4096, in all 5210112 bytes (5.0 MiB).
# With 16 jobs the local pool would be larger than the global one could
# be, so both are sized as one pool of every layer: 10561536 / 3072 =
# 3438, 107 pages = 3424 positions (10.0 MiB).
mkdir "$tmp/g" && "$mkmodel" --arch gemma3 --dim 256 --layers 6 --heads 4 --kv-heads 2 \
	--vocab 2000 --swa 8 --swa-pattern 6 -o "$tmp/g/g3.gguf" >/dev/null 2>&1 ||
	bad "exld-mkmodel gemma3"
for jobs in 2 16; do
	printf 'max_running_jobs = %s\n' $jobs >"$tmp/g/conf"
	# Emptied here, not by the daemon's redirection: that runs in the
	# forked child, and the wait below could read the last round's
	# "ready" before it did.
	: >"$tmp/g/log"
	EXLD_CUDA_MODULE=$fake_module EXLD_FAKE_VRAM_FREE_MIB=32 timeout 20 "$exld" \
		--config "$tmp/g/conf" --socket "$tmp/g/s" --models "$tmp/g" --load g3 \
		--device cuda >"$tmp/g/log" 2>&1 &
	dpid=$!
	i=0
	while [ $i -lt 200 ] && ! has "$tmp/g/log" "ready" && kill -0 "$dpid" 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	case $jobs in
	2) want="(KV pool of 4096 tokens, 5.0 MiB)" ;;
	*) want="(KV pool of 3424 tokens, 10.0 MiB)" ;;
	esac
	has "$tmp/g/log" "$want" &&
		ok "gemma3, 32 MiB free, $jobs jobs: $want" ||
		bad "gemma3 sizing, $jobs jobs: $(cat "$tmp/g/log")"
	kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	dpid=
done

exit $fail
