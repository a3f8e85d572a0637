#!/bin/sh
# bench_membw against an independent plain AVX2 read loop (membw_plain), in
# the same minute: ROUNDS alternating runs of each (default 3), both with
# THREADS threads (default 2) over MIB MiB (default 2048).  Prints each run,
# the medians and their ratio, and whether they are within 25 %.
#
#   tests/bench/membw_check.sh [BUILD_DIR]        (default: build)
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
mib=${MIB:-2048}
for p in bench_membw membw_plain; do
	[ -x "$build/tests/$p" ] || { echo "missing $build/tests/$p (ninja -C $build)" >&2; exit 1; }
done
grep -qw avx2 /proc/cpuinfo || { echo "membw_plain needs AVX2; this CPU lacks it" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /cpu: /'
i=0
while [ "$i" -lt "$rounds" ]; do
	"$build/tests/bench_membw" --threads "$threads" --mib "$mib" | tee -a "$tmp/log" |
		sed -n 's/^read_bandwidth_gb_s=\([0-9.]*\).*/\1/p' >>"$tmp/ours"
	"$build/tests/membw_plain" "$threads" "$mib" | tee -a "$tmp/log" |
		sed -n 's/^plain_avx2_gb_s=\([0-9.]*\).*/\1/p' >>"$tmp/plain"
	i=$((i + 1))
done
ours=$(median <"$tmp/ours")
plain=$(median <"$tmp/plain")
awk -v o="$ours" -v p="$plain" 'BEGIN {
	r = o / p
	printf "median bench_membw %.2f GB/s, plain AVX2 loop %.2f GB/s, ratio %.3f: %s\n",
		o, p, r, (r >= 0.75 && r <= 1.25) ? "within 25%" : "NOT within 25%"
}'
