#!/bin/sh
# The chat template renderer against @huggingface/jinja (test_jinja_ref.js
# says how); skips (77) without node.
#   test_jinja_ref.sh EXLD
if ! command -v node >/dev/null 2>&1; then
	echo "skipped: no node (Debian: apt-get install nodejs npm; then npm ci --prefix tests/jinja-ref)"
	exit 77
fi
exec node "$(dirname "$0")/test_jinja_ref.js" "$@"
