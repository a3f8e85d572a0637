#!/bin/sh
# The HTTP front's overhead against the msgpack socket (docs/http.md):
# time to first token of one client, and the aggregate tok/s of 16
# streaming clients, through `exl bench` (msgpack, shared-memory ring) and
# bench_http (HTTP, SSE), on one daemon.  Not a test.
#
#   tests/bench/bench_http.sh BUILD_DIR MODELS_DIR [ROUNDS]
set -eu
build=$1
models=$2
rounds=${3:-10}
dir=$(mktemp -d /tmp/exld-bench-http-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/daemon/exld" --config /dev/null --socket "$dir/exld.sock" --models "$models" \
	--load stories260K --http "127.0.0.1:$port" 2>"$dir/exld.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
export EXLD_SOCKET="$dir/exld.sock"
until "$build/client/exl" status >/dev/null 2>&1; do sleep 0.1; done

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

: >"$dir/ttft.exl"; : >"$dir/ttft.http"
for i in $(seq "$rounds"); do
	"$build/client/exl" bench -c 1 -n 16 | sed -n 's/.*mean time to first token \([0-9.]*\) ms.*/\1/p' >>"$dir/ttft.exl"
	"$build/tests/bench_http" "$port" -c 1 -n 16 | sed -n 's/.*time to first token \([0-9.]*\) ms.*/\1/p' >>"$dir/ttft.http"
done
echo "time to first token, 1 client, median of $rounds: msgpack $(median <"$dir/ttft.exl") ms, http $(median <"$dir/ttft.http") ms"

: >"$dir/tps.exl"; : >"$dir/tps.http"
for i in $(seq 3); do
	"$build/client/exl" bench -c 16 -n 128 | sed -n 's/^total:.*: \([0-9.]*\) tok\/s.*/\1/p' >>"$dir/tps.exl"
	"$build/tests/bench_http" "$port" -c 16 -n 128 | sed -n 's/.*ms: \([0-9.]*\) tok\/s.*/\1/p' >>"$dir/tps.http"
done
echo "aggregate tok/s, 16 streaming clients x 128 tokens, median of 3: msgpack $(median <"$dir/tps.exl"), http $(median <"$dir/tps.http")"
