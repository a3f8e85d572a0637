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
