#!/bin/sh
# The npm clients (openai, ollama; tests/node) against exld's HTTP front:
# their greedy text must be exld run's (tests/node/test_http.mjs).  Skips
# (77) without the test models, node, or the packages (tests/install-deps.sh
# installs them).
set -u
EXLD=$1
SRC=${EXLD_SRCDIR:-.}
MODELS=${EXLD_MODELS:-}
if [ -z "$MODELS" ] || [ ! -f "$MODELS/stories260K.gguf" ]; then
	echo "SKIP: no test models (EXLD_MODELS)"; exit 77
fi
if ! command -v node >/dev/null 2>&1; then
	echo "SKIP: node is not installed"; exit 77
fi
if [ ! -d "$SRC/tests/node/node_modules/openai" ] || [ ! -d "$SRC/tests/node/node_modules/ollama" ]; then
	echo "SKIP: the npm packages are not installed (npm ci --prefix tests/node, as tests/install-deps.sh does)"
	exit 77
fi
dir=$(mktemp -d /tmp/exld-http-node-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$EXLD" --config /dev/null --socket "$dir/exld.sock" --models "$MODELS" --load stories260K \
	--threads 1 --http "127.0.0.1:$port" 2>"$dir/exld.log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
i=0
until python3 -c "
import json, sys, urllib.request as u
d = json.load(u.urlopen('http://127.0.0.1:$port/v1/models', timeout=1))
sys.exit(0 if any(m['id'] == 'stories260K' for m in d['data']) else 1)" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "FAIL: exld did not come up"; cat "$dir/exld.log"; exit 1
	fi
	sleep 0.1
done
node "$SRC/tests/node/test_http.mjs" "http://127.0.0.1:$port" "$EXLD" "$MODELS/stories260K.gguf"
rc=$?
[ $rc -eq 0 ] || cat "$dir/exld.log"
exit $rc
