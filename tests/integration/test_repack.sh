#!/bin/sh
# Weights repacked at load (kernels/cpu/repack.h), under the kernel set
# with-kernels names: for random Q4_0 models of every shape that takes
# rows of a tensor apart (llama; phi3's fused attn_qkv and gate+up;
# qwen3moe's experts; a vocabulary of 500, whose output ends in a part
# group of 8 rows) and random Q4_K, Q8_0 and IQ4_NL llamas, `exld run` writes the
# same logits, bit for bit, and the same ids as with EXLD_CPU_REPACK=0
# (every weight read from the file).  A daemon reports the copy where the
# set makes one (the avx2 family and amx): `exl status` counts it ("repacked in
# RAM"); without it (EXLD_CPU_REPACK=0, or a set with no layout of its
# own) the weights are the file's alone.  The daemon's greedy ids are
# exld run's.
set -u
exld=${1:?usage: test_repack.sh EXLD EXL EXLD-MKMODEL}
exl=${2:?usage: test_repack.sh EXLD EXL EXLD-MKMODEL}
mkmodel=${3:?usage: test_repack.sh EXLD EXL EXLD-MKMODEL}
tmp=$(mktemp -d /tmp/exld-test-repack-XXXXXX)
. "$(dirname "$0")/sh_common.sh"
trap 'stop_daemon; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

# run per kernel set through with-kernels (EXLD_CPU_KERNELS); the avx2
# family has a layout of its own for Q4_0, the others read GGUF rows
set=${EXLD_CPU_KERNELS:-}
if [ -z "$set" ]; then
	echo "EXLD_CPU_KERNELS is not set (run through with-kernels); skipping"
	exit 77
fi
case $set in
avx2 | avx2vnni | avx512vnni | amx) repacks=1 ;;
*) repacks=0 ;;
esac

mk() {
	out=$1
	shift
	"$mkmodel" "$@" --seed 3 -o "$tmp/$out.gguf" >/dev/null 2>"$tmp/mk" ||
		{ bad "exld-mkmodel $*: $(cat "$tmp/mk")"; return 1; }
}
mk llama --dim 128 --layers 2 --heads 4 --ff 352 --vocab 500 --type q4_0 || exit 1
mk phi3 --arch phi3 --dim 128 --layers 2 --heads 4 --ff 352 --type q4_0 || exit 1
mk moe --arch qwen3moe --experts 4 --dim 128 --layers 2 --heads 4 --ff 192 --type q4_0 || exit 1
# Q4_K: 256-weight super-blocks, a part group of 8 rows at the output
mk llama_k --dim 256 --layers 2 --heads 4 --ff 512 --vocab 500 --type q4_k || exit 1
mk llama_q8 --dim 128 --layers 2 --heads 4 --ff 352 --vocab 500 --type q8_0 || exit 1
mk llama_nl --dim 128 --layers 2 --heads 4 --ff 352 --vocab 500 --type iq4_nl || exit 1
# F16 matrices of 2 MiB, which every set copies into huge pages
mk llama_f16 --dim 1024 --layers 1 --heads 8 --ff 1024 --vocab 500 --type f16 || exit 1

ids() { sed -n 's/.*"token_ids":\(\[[^]]*\]\).*/\1/p' "$1"; }
for m in llama phi3 moe llama_k llama_q8 llama_nl llama_f16; do
	for r in 1 0; do
		EXLD_CPU_REPACK=$r "$exld" run --model "$tmp/$m.gguf" --prompt "hello world, once more" \
			-n 12 --temperature 0 --threads 2 --json --dump-logits "$tmp/$m.$r.bin" \
			>"$tmp/$m.$r.json" 2>"$tmp/$m.$r.err" ||
			bad "$set $m: exld run (EXLD_CPU_REPACK=$r): $(tail -n 3 "$tmp/$m.$r.err")"
	done
	a=$(ids "$tmp/$m.1.json") b=$(ids "$tmp/$m.0.json")
	if [ -s "$tmp/$m.1.bin" ] && cmp -s "$tmp/$m.1.bin" "$tmp/$m.0.bin" && [ -n "$a" ] && [ "$a" = "$b" ]; then
		ok "$set $m: the same logits and ids as read from the file"
	else
		bad "$set $m: $a / from the file $b (logits $(cmp "$tmp/$m.1.bin" "$tmp/$m.0.bin" 2>&1))"
	fi
done

# start_daemon MODEL [ENV...]: exld on MODEL, its environment amended
start_daemon() {
	model=$1
	shift
	sock=$tmp/exld.sock
	rm -f "$sock"
	env "$@" "$exld" --socket "$sock" --models "$tmp" --load "$model" --threads 2 \
		>"$tmp/daemon.log" 2>&1 &
	dpid=$!
	i=0
	while [ $i -lt 200 ]; do
		"$exl" --socket "$sock" status >"$tmp/st" 2>/dev/null && grep -q "^$model  *loaded" "$tmp/st" &&
			return 0
		kill -0 "$dpid" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	bad "daemon did not load $model: $(tail -n 5 "$tmp/daemon.log")"
	return 1
}

if start_daemon llama; then
	if [ $repacks = 1 ]; then
		has "$tmp/st" "llama (cpu): weights " && has "$tmp/st" "repacked in RAM" &&
			ok "$set: exl status counts the repacked weights" || bad "$set: status: $(cat "$tmp/st")"
	else
		has "$tmp/st" "mapped from the file" && ! has "$tmp/st" "repacked" &&
			ok "$set: no layout of its own, weights read from the file" ||
			bad "$set: status: $(cat "$tmp/st")"
	fi
	"$exl" --socket "$sock" generate -m llama -n 12 --temperature 0 --json "hello world, once more" \
		>"$tmp/gen" 2>"$tmp/gen.err"
	a=$(ids "$tmp/gen") b=$(ids "$tmp/llama.0.json")
	[ -n "$a" ] && [ "$a" = "$b" ] && ok "$set: the daemon's greedy ids are exld run's" ||
		bad "$set: daemon $a, exld run $b $(cat "$tmp/gen.err")"
	stop_daemon
fi
# F16 copied into huge pages where the system gives them, in every set
if grep -Eq '\[(always|madvise)\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
	if start_daemon llama_f16; then
		has "$tmp/st" "llama_f16 (cpu): weights " && has "$tmp/st" "repacked in RAM" &&
			ok "$set: F16 weights copied into huge pages" || bad "$set: F16 status: $(cat "$tmp/st")"
		stop_daemon
	fi
else
	echo "transparent huge pages are off here: no F16 copy to check"
fi
# IQ4_NL takes Q4_0's layout
if [ $repacks = 1 ] && start_daemon llama_nl; then
	has "$tmp/st" "llama_nl (cpu): weights " && has "$tmp/st" "repacked in RAM" &&
		ok "$set: IQ4_NL weights repacked" || bad "$set: IQ4_NL status: $(cat "$tmp/st")"
	stop_daemon
fi
if [ $repacks = 1 ] && start_daemon llama EXLD_CPU_REPACK=0; then
	has "$tmp/st" "llama (cpu): weights " && has "$tmp/st" "mapped from the file" &&
		! has "$tmp/st" "repacked" && ok "$set, EXLD_CPU_REPACK=0: weights read from the file" ||
		bad "$set, EXLD_CPU_REPACK=0: status: $(cat "$tmp/st")"
	stop_daemon
fi
exit $fail
