#!/bin/sh
# The README's first command, as a newcomer runs it: quickstart.sh (here on
# this build directory, with the dependencies already installed) starts exld
# on stories260K, streams a generation with exl generate and stops the
# daemon.  Greedy (its options pass through to exl generate), the streamed
# text must be the known-good continuation of ../shared/models/README.md.
# Usage: test_quickstart.sh SRCDIR BUILDDIR
set -u
src=$1
build=$2
models=${EXLD_MODELS:-}
if [ -z "$models" ] || [ ! -f "$models/stories260K.gguf" ]; then
	echo "EXLD_MODELS ('$models') has no stories260K.gguf; skipping"
	exit 77
fi
tmp=$(mktemp -d /tmp/exld-quickstart-test-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
QUICKSTART_DIR=$tmp EXLD_BUILD=$build EXLD_MODELS=$models "$src/quickstart.sh" \
	--temperature 0 -n 40 >"$tmp/out" 2>&1
rc=$?
fail=0
if [ $rc -ne 0 ]; then
	echo "FAIL: quickstart.sh exited $rc:"
	cat "$tmp/out"
	[ -f "$tmp/exld-quickstart.log" ] && cat "$tmp/exld-quickstart.log"
	exit 1
fi
want='Once upon a time, there was a little girl named Lily. She loved to play outside in the park.'
if grep -qF "$want" "$tmp/out"; then
	echo "ok: quickstart.sh streamed the known continuation"
else
	echo "FAIL: no '$want' in quickstart's output:"
	cat "$tmp/out"
	fail=1
fi
grep -q '^stories260K  *loaded' "$tmp/out" && echo "ok: its exl status lists the model" ||
	{ echo "FAIL: no status line for stories260K"; fail=1; }
if [ -S "$tmp/exld-quickstart.sock" ] && EXLD_SOCKET=$tmp/exld-quickstart.sock \
	"$build/client/exl" status >/dev/null 2>&1; then
	echo "FAIL: the daemon still answers after quickstart.sh ended"
	fail=1
else
	echo "ok: the daemon stopped with it"
fi
exit $fail
