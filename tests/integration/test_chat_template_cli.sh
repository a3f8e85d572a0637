#!/bin/sh
# Runs the real `exld chat-template` on models exld-mkmodel writes: the GGUF's
# tokenizer.chat_template with the vocabulary's bos/eos, the input's own
# bos_token winning, --template over the model's, ChatML (said on stderr)
# for a model without a template, a template that raises (exit 1, its
# message), and the inputs and arguments it must refuse.
# usage: test_chat_template_cli.sh EXLD EXLD-MKMODEL
set -u
exld=${1:?usage: test_chat_template_cli.sh EXLD EXLD-MKMODEL}
mkmodel=${2:?usage: test_chat_template_cli.sh EXLD EXLD-MKMODEL}
tmp=$(mktemp -d /tmp/exld-test-ct-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
# the next run's stdin (run is not piped into: it counts in this shell)
input() { printf '%s' "$1" >"$tmp/in"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# A Llama-3-like template: bos, roles in headers, a raise for a bad role.
cat >"$tmp/t.jinja" <<'T'
{{- bos_token }}
{%- for m in messages %}
    {%- if m.role not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('Unknown role: ' + m.role) }}
    {%- endif %}
    {{- '<|start|>' + m.role + '<|sep|>' + m.content | trim + eos_token }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start|>assistant<|sep|>' }}
{%- endif %}
T
printf '[{{ bos_token }}]' >"$tmp/other.jinja"
"$mkmodel" --vocab 300 --dim 32 --layers 1 --chat-template "$tmp/t.jinja" -o "$tmp/t.gguf" \
	2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
"$mkmodel" --vocab 300 --dim 32 --layers 1 -o "$tmp/none.gguf" 2>"$tmp/err" ||
	{ cat "$tmp/err"; exit 1; }

conv='{"messages": [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": " Hi\n"}], "add_generation_prompt": true}'

# run WANT_STATUS WANT_STDOUT WANT_STDERR ARGS... < input: stdout exactly
# WANT_STDOUT, stderr containing WANT_STDERR (both with \n escapes)
run() {
	st=$1 want=$2 wanterr=$3
	shift 3
	"$exld" chat-template "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	printf '%b' "$want" >"$tmp/want"
	printf '%b' "$wanterr" >"$tmp/wanterr"
	if [ $rc -ne "$st" ]; then
		bad "chat-template $*: exit $rc, want $st ($(cat "$tmp/err"))"
	elif ! cmp -s "$tmp/out" "$tmp/want"; then
		bad "chat-template $*: stdout '$(cat "$tmp/out")', want '$(cat "$tmp/want")'"
	elif [ -n "$wanterr" ] && ! grep -qF -- "$(cat "$tmp/wanterr")" "$tmp/err"; then
		bad "chat-template $*: stderr '$(cat "$tmp/err")', want '$(cat "$tmp/wanterr")'"
	else
		ok
	fi
}

# the model's template, its bos (<s>) and eos (</s>); nothing added at the end
input "$conv"
run 0 '<s><|start|>system<|sep|>Be brief.</s><|start|>user<|sep|>Hi</s><|start|>assistant<|sep|>' '' --model "$tmp/t.gguf" <"$tmp/in"
input '{"messages": [], "bos_token": "[B]"}'
run 0 '[B]' '' --model "$tmp/t.gguf" <"$tmp/in"
# --template over the model's; without --model no bos_token unless given
input "$conv"
run 0 '[<s>]' '' --model "$tmp/t.gguf" --template "$tmp/other.jinja" <"$tmp/in"
input '{}'
run 0 '[]' '' --template "$tmp/other.jinja" <"$tmp/in"
input '{"bos_token": "x"}'
run 0 '[x]' '' --template "$tmp/other.jinja" <"$tmp/in"
# ChatML for a model without a template, and it says so
input "$conv"
run 0 '<|im_start|>system\nBe brief. <|im_end|>\n<|im_start|>user\n Hi\n<|im_end|>\n<|im_start|>assistant\n' 'has no tokenizer.chat_template; using ChatML' --model "$tmp/none.gguf" <"$tmp/in"
# a template that raises: exit 1 and its message
input '{"messages": [{"role": "tool", "content": "x"}]}'
run 1 '' 'exld chat-template: Unknown role: tool\n' --model "$tmp/t.gguf" <"$tmp/in"
# a template that fails: exit 1 and where
printf '{{ x | nope }}' >"$tmp/bad.jinja"
input '{}'
run 1 '' 'exld chat-template: template: line 1: no filter' --template "$tmp/bad.jinja" <"$tmp/in"
# inputs it refuses
input '{"messages": ['
run 1 '' 'exld chat-template: line 1, column' --model "$tmp/t.gguf" <"$tmp/in"
input '[1, 2]'
run 1 '' 'must be a JSON object' --model "$tmp/t.gguf" <"$tmp/in"
input ''
run 1 '' 'exld chat-template: ' --model "$tmp/t.gguf" <"$tmp/in"
# arguments it refuses
run 2 '' '--model FILE or --template FILE is required' </dev/null
run 2 '' 'unknown argument' --bogus </dev/null
run 2 '' 'a file is needed after' --model </dev/null
run 1 '' 'exld chat-template: ' --model "$tmp/missing.gguf" </dev/null
run 1 '' 'cannot open' --template "$tmp/missing.jinja" </dev/null
"$exld" chat-template --help | grep -q 'usage: exld chat-template' && ok || bad "--help"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
