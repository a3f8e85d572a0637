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
# and "hermes": random weights, stories260K's vocabulary, a template that
# teaches <tool_call> (the tools cases)
mkdir "$dir/models"
ln -s "$MODELS/stories260K.gguf" "$dir/models/"
cat >"$dir/hermes.jinja" <<'EOF'
{%- if tools %}<|im_start|>system
{%- for t in tools %}
{{ t | tojson }}{%- endfor %}
Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>
{%- endif %}
{%- for m in messages %}<|im_start|>{{ m.role }}
{%- if m.tool_calls %}{%- for c in m.tool_calls %}
<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{%- endfor %}{%- else %}
{{ m.content }}{%- endif %}<|im_end|>
{%- endfor %}<|im_start|>assistant
EOF
"${EXLD_BUILDDIR:-.}/tests/tools/exld-mkmodel" --dim 64 --layers 2 --vocab-from "$MODELS/stories260K.gguf" \
	--chat-template "$dir/hermes.jinja" -o "$dir/models/hermes.gguf" >/dev/null 2>&1 || {
	echo "FAIL: exld-mkmodel"; rm -rf "$dir"; exit 1; }
"$EXLD" --config /dev/null --socket "$dir/exld.sock" --models "$dir/models" --load stories260K \
	--load hermes --threads 1 --http "127.0.0.1:$port" 2>"$dir/exld.log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
i=0
until python3 -c "
import json, sys, urllib.request as u
d = json.load(u.urlopen('http://127.0.0.1:$port/v1/models', timeout=1))
sys.exit(0 if {'stories260K', 'hermes'} <= {m['id'] for m in d['data']} else 1)" 2>/dev/null; do
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
