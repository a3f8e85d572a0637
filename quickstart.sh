#!/bin/sh
# The README's first command: installs the dependencies (tests/install-deps.sh,
# skipped when every package it lists is already installed), builds exld in
# build/, starts the daemon on stories260K from ../shared/models, streams a
# generation through exl, and stops the daemon again.
#
#   ./quickstart.sh [EXL GENERATE OPTIONS]   e.g. --temperature 0 -n 40
#
#   EXLD_BUILD=DIR     build directory (default build)
#   EXLD_MODELS=DIR    model directory (default ../shared/models)
#   QUICKSTART_DIR=DIR where the socket and the daemon's log go (default /tmp)
set -eu
cd "$(dirname "$0")"
build=${EXLD_BUILD:-build}
models=${EXLD_MODELS:-../shared/models}
sock=${QUICKSTART_DIR:-/tmp}/exld-quickstart.sock
log=${QUICKSTART_DIR:-/tmp}/exld-quickstart.log

say() { printf '== %s\n' "$*"; }
die() { printf 'quickstart: %s\n' "$*" >&2; exit 1; }

[ -f "$models/stories260K.gguf" ] ||
	die "no $models/stories260K.gguf: the test models belong in ../shared/models, beside this checkout (or set EXLD_MODELS=DIR)"

# ---- dependencies ----
# The packages tests/install-deps.sh installs, read from its apt-get line.
pkgs=$(sed -n '/apt-get install/,/^[^[:space:]]/p' tests/install-deps.sh | tr ' \t\\' '\n\n\n' |
	grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vxE 'apt-get|install|sudo' || true)
missing=
if [ -n "$pkgs" ] && command -v dpkg-query >/dev/null 2>&1; then
	for p in $pkgs; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing="$missing $p"
	done
else
	missing=unknown
fi
if [ -n "$missing" ]; then
	say "installing dependencies (tests/install-deps.sh):$missing"
	./tests/install-deps.sh || die "tests/install-deps.sh failed (it needs root or sudo, and apt)"
else
	say "dependencies are installed"
fi

# ---- build ----
if [ ! -f "$build/build.ninja" ]; then
	say "meson setup $build"
	meson setup "$build" >/dev/null || die "meson setup $build failed"
fi
say "ninja -C $build"
ninja -C "$build" || die "the build failed"

# ---- the daemon ----
exl=$build/client/exl
if EXLD_SOCKET=$sock "$exl" status >/dev/null 2>&1; then
	die "an exld already answers on $sock (stop it first)"
fi
rm -f "$sock"
say "starting exld on $sock (log: $log)"
"$build/daemon/exld" --socket "$sock" --models "$models" --load stories260K >"$log" 2>&1 &
pid=$!
stop() {
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM
export EXLD_SOCKET="$sock"
i=0
until "$exl" models 2>/dev/null | grep -q '^stories260K  *loaded'; do
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$log" >&2
		die "exld stopped before it was ready (its log is above)"
	fi
	i=$((i + 1))
	[ $i -le 600 ] || die "exld did not load stories260K within 60 s (log: $log)"
	sleep 0.1
done

# ---- a generation, streamed ----
say "exl generate -m stories260K $* \"Once upon a time\""
"$exl" generate -m stories260K "$@" "Once upon a time"
say "exl status"
"$exl" status
say "done: the daemon stops now (exld and exl are in $build/daemon and $build/client)"
