#!/bin/sh
# The whole test suite, as CI runs it: a release build and an
# AddressSanitizer + UBSan build, each configured on first use, then every
# test of both.  Ends with one line "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
status=0
total_pass=0
total_fail=0
total_skip=0

run_build() {
	dir=$1; shift
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || {
			cat "$dir.setup.log"; echo "meson setup $dir failed"; return 1; }
	fi
	ninja -C "$dir" >"$dir.build.log" 2>&1 || {
		tail -n 60 "$dir.build.log"; echo "build $dir failed"; return 1; }
	meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" 2>&1 | tee "$dir.test.log"
	# suite 'kernels' ran the kernel-dependent tests once per set
	"$dir/tests/tools/with-kernels" --list
	pass=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -n 1)
	fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -n 1)
	tout=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -n 1)
	skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$dir.test.log" | tail -n 1)
	total_pass=$((total_pass + ${pass:-0}))
	total_fail=$((total_fail + ${fail:-0} + ${tout:-0}))
	total_skip=$((total_skip + ${skip:-0}))
	[ -n "$pass" ] || return 1
	return 0
}

run_build build || { status=1; total_fail=$((total_fail + 1)); }
# -fno-sanitize-recover: UBSan's default is to print and go on, which no test
# would notice; with it, undefined behaviour fails the test that hit it.
# -O1, as AddressSanitizer's own documentation advises: its tests ran 2.5
# to 3 times faster than at -O0, which kept CI over its 20 minutes.
run_build build-san -Dbuildtype=debug -Doptimization=1 -Db_sanitize=address,undefined -Db_lundef=false \
	-Dc_args=-fno-sanitize-recover=all -Dcuda=disabled || { status=1; total_fail=$((total_fail + 1)); }

[ "$total_fail" -eq 0 ] || status=1
# Skipped tests (the CUDA device suite without a GPU) say why in the logs
# above; the last line is the one CI reads.
echo "$total_skip skipped"
echo "$total_pass passed, $total_fail failed"
exit $status
