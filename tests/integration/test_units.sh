#!/bin/sh
# systemd-analyze verify on exld.service and exld.socket: no error and no
# warning.  The service is the copy meson made for this build (ExecStart
# pointing at the built exld, which verify checks is executable).
# Usage: test_units.sh SERVICE_FILE SOCKET_FILE
set -u
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "systemd-analyze is not installed; skipping"
	exit 77
fi
dir=$(mktemp -d /tmp/exld-units-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
cp "$1" "$dir/exld.service" && cp "$2" "$dir/exld.socket" || exit 1
out=$(cd "$dir" && systemd-analyze verify exld.service exld.socket 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -n "$out" ]; then
	echo "systemd-analyze verify failed (exit $rc):"
	echo "$out"
	exit 1
fi
echo "systemd-analyze verify: exld.service and exld.socket are clean"

# The service's own command line starts the daemon on a fresh install, where
# /etc/exld/exld.conf does not exist (only the socket and model directory
# come from elsewhere here: systemd passes the socket).
if [ -e /etc/exld/exld.conf ]; then
	echo "/etc/exld/exld.conf exists on this machine: not checking a fresh install's start"
	exit 0
fi
cmd=$(sed -n 's/^ExecStart=//p' "$dir/exld.service")
[ -n "$cmd" ] || { echo "no ExecStart in exld.service"; exit 1; }
models=${EXLD_MODELS:-}
[ -n "$models" ] && [ -d "$models" ] || models=$dir
# shellcheck disable=SC2086 # ExecStart is a command line
$cmd --socket "$dir/exld.sock" --models "$models" >"$dir/log" 2>&1 &
pid=$!
i=0
while [ ! -S "$dir/exld.sock" ] && kill -0 $pid 2>/dev/null && [ $i -lt 300 ]; do
	sleep 0.1
	i=$((i + 1))
done
if [ ! -S "$dir/exld.sock" ]; then
	kill $pid 2>/dev/null
	wait $pid
	echo "ExecStart ($cmd) did not start the daemon without a config file (exit $?):"
	cat "$dir/log"
	exit 1
fi
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || { echo "exld exited $rc on SIGTERM:"; cat "$dir/log"; exit 1; }
echo "ExecStart starts the daemon with no /etc/exld/exld.conf, and it stops with exit 0"
