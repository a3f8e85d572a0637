#!/bin/sh
# exl chat on a terminal (a tmux pane) against a real exld:
#  - stories260K (no chat template: the plain format), two turns; the
#    screen must be exactly the banner, the prompts, the answers `exl
#    generate` gives for the formatted conversation, and the notices;
#    Ctrl-C at the prompt only warns, Ctrl-D ends the chat with status 0;
#  - --system: piped, the answers are `exld run`'s for the conversation
#    rendered with the system text and differ from those without it; on
#    the terminal, two turns as exl generate completes them;
#  - a random-weight model carrying phi-3's vocabulary and chat template
#    (exld-mkmodel --vocab-from): the phi3 format is picked from the GGUF
#    and its <|end|> token stops the answer (piped input, compared with
#    exl generate); on the terminal, Ctrl-C during a long answer stops only
#    that answer, and a second Ctrl-C at the prompt ends the chat with 0;
#  - a Jinja file given by --template renders the conversation: the
#    answers of two piped turns equal exl generate's on the prompts that
#    Python's Jinja2 renders from the same file (BOS written by the
#    template, so none added); a template that raises for a system prompt
#    prints its message and the chat goes on;
#  - (the slow model serves one more check) exl generate on SIGINT cancels
#    its job and exits 130.
set -u
exld=${1:?usage: test_exl_chat.sh EXLD EXL MKMODEL}
exl=${2:?usage: test_exl_chat.sh EXLD EXL MKMODEL}
mkmodel=${3:?usage: test_exl_chat.sh EXLD EXL MKMODEL}
. "$(dirname "$0")/exl_common.sh"

command -v tmux >/dev/null || { echo "tmux is not installed (tests/install-deps.sh); skipping"; exit 77; }
command -v python3 >/dev/null || { echo "python3 is not installed; skipping"; exit 77; }
phi3_vocab=$models/vocab/ggml-vocab-phi-3.gguf
[ -f "$phi3_vocab" ] || { echo "no $phi3_vocab; skipping"; exit 77; }

tm() { tmux -S "$tmp/tmux.sock" -f /dev/null "$@"; }
trap 'tm kill-server 2>/dev/null; cleanup' EXIT

# The daemon's model directory: stories260K and the chat model.
mkdir "$tmp/models"
ln -s "$models/stories260K.gguf" "$tmp/models/stories260K.gguf"
"$mkmodel" --dim 1024 --layers 4 --heads 8 --kv-heads 8 --ff 2048 --type q8_0 --ctx 4096 \
	--vocab-from "$phi3_vocab" -o "$tmp/models/chatphi.gguf" >"$tmp/mkmodel.log" 2>&1 ||
	{ cat "$tmp/mkmodel.log"; echo "FAIL: exld-mkmodel"; exit 1; }
models=$tmp/models
start_daemon stories260K,chatphi || { bad "daemon start"; exit 1; }

# chat_start NAME ARGS...: exl chat in a new 220x60 pane; its exit status
# goes to $tmp/NAME.status.
chat_start() {
	name=$1
	shift
	rm -f "$tmp/$name.status"
	tm new-session -d -s "$name" -x 220 -y 60 \
		"env EXLD_SOCKET='$sock' TERM=xterm '$exl' chat $*; echo \$? >'$tmp/$name.status'; sleep 60"
}
screen() { tm capture-pane -p -J -t "$1" -S -500 >"$tmp/$1.screen" 2>/dev/null; }
prompts() { grep -c '^>>>' "$tmp/$1.screen"; }
# wait_prompts NAME N: until the pane shows N prompt lines (30 s at most)
wait_prompts() {
	i=0
	while [ $i -lt 300 ]; do
		screen "$1"
		[ "$(prompts "$1")" -ge "$2" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	echo "pane $1 after 30 s:"
	cat "$tmp/$1.screen"
	return 1
}
# wait_file FILE: until it exists (10 s at most)
wait_file() {
	i=0
	while [ $i -lt 100 ]; do
		[ -s "$1" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# expect.py EXL TEMPLATE N MODEL [--system TEXT] MSG...: the transcript exl
# chat must show for these user messages, from `exl generate` on the
# formatted conversation.
cat >"$tmp/expect.py" <<'EOF'
import json, subprocess, sys
exl, tmpl, n, model = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
msgs = sys.argv[5:]
ws = " \t\n\r\v\f"
history = ""
if msgs[:1] == ["--system"]:
    history = msgs[1].strip(ws) + "\n\n"
    msgs = msgs[2:]
out = ["exl chat: %s format; Ctrl-C stops an answer, Ctrl-D ends the chat, /reset forgets it" % tmpl]
for m in msgs:
    assert tmpl == "plain"
    prompt = history + "User: " + m.strip(ws) + "\nAssistant:"
    r = subprocess.run([exl, "generate", "-m", model, "-n", n, "--temperature", "0", "--special",
                        "--completion-only", "--stop", "\nUser:", "--json", prompt],
                       capture_output=True, text=True, check=True)
    res = json.loads(r.stdout)
    shown = res["text"].lstrip(" \n\r\t")
    out.append(">>> " + m)
    out.extend(shown.split("\n"))
    if res["stop_reason"] == "max_new_tokens":
        out.append("[answer cut at %s tokens: -n sets the limit]" % n)
    history = prompt + " " + shown.strip(ws) + "\n"
out.append(">>>")
print("\n".join(l.rstrip() for l in out))
EOF
# answers.py EXLD MODEL N SYSTEM MSG...: the answers exl chat prints (piped,
# one per turn) in the plain format, from `exld run` on the conversation
# rendered by hand: the system text (when not empty) and a blank line, then
# "User: MSG" and "Assistant: ANSWER" lines.
cat >"$tmp/answers.py" <<'EOF'
import json, subprocess, sys
exld, model, n, system = sys.argv[1:5]
ws = " \t\n\r\v\f"
history = system.strip(ws) + "\n\n" if system else ""
for m in sys.argv[5:]:
    prompt = history + "User: " + m.strip(ws) + "\nAssistant:"
    r = subprocess.run([exld, "run", "--model", model, "--prompt", prompt, "-n", n,
                        "--temperature", "0", "--threads", "1", "--special", "--completion-only",
                        "--stop", "\nUser:", "--json"], capture_output=True, text=True, check=True)
    shown = json.loads(r.stdout)["text"].lstrip(" \n\r\t")
    print(shown)
    history = prompt + " " + shown.strip(ws) + "\n"
EOF
# trimmed FILE: its lines without trailing blanks, no empty lines at the end
trimmed() { sed 's/[[:space:]]*$//' "$1" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'; }

# ---- stories260K, plain format, two turns ----
chat_start s1 -m stories260K -n 20 --temperature 0
wait_prompts s1 1 || bad "no first prompt"
tm send-keys -t s1 "Hello" Enter
wait_prompts s1 2 || bad "no answer to the first turn"
tm send-keys -t s1 "Tell me a story" Enter
wait_prompts s1 3 || bad "no answer to the second turn"
python3 "$tmp/expect.py" "$exl" plain 20 stories260K "Hello" "Tell me a story" >"$tmp/want" ||
	bad "computing the expected transcript"
trimmed "$tmp/s1.screen" >"$tmp/got"
if cmp -s "$tmp/got" "$tmp/want"; then
	ok "two turns on a terminal, as exl generate completes the conversation"
else
	bad "transcript differs"
	echo "--- got"; cat "$tmp/got"; echo "--- want"; cat "$tmp/want"
fi
tm send-keys -t s1 C-c
sleep 0.5
screen s1
has "$tmp/s1.screen" "(Ctrl-C again or Ctrl-D to exit)" && [ ! -e "$tmp/s1.status" ] &&
	ok "Ctrl-C at the prompt warns, the chat goes on" || bad "lone Ctrl-C: $(cat "$tmp/s1.screen")"
tm send-keys -t s1 C-d
wait_file "$tmp/s1.status" && [ "$(cat "$tmp/s1.status")" = 0 ] && ok "Ctrl-D ends the chat: 0" ||
	bad "Ctrl-D: status '$(cat "$tmp/s1.status" 2>/dev/null)'"

# ---- --system: the system prompt opens the conversation ----
# The daemon does not show the prompt it was given, so the rendering is
# checked by its effect: piped, the answers equal `exld run` on the
# conversation rendered by hand with the system text, and differ from the
# answers without it (which equal `exld run` without it).
sys_text="You are a pirate who sails the sea."
printf 'Hello\nTell me a story\n' | "$exl" chat -m stories260K -n 20 --temperature 0 \
	--system "$sys_text" >"$tmp/sys" 2>"$tmp/syse"
rc=$?
python3 "$tmp/answers.py" "$exld" "$models/stories260K.gguf" 20 "$sys_text" "Hello" \
	"Tell me a story" >"$tmp/want_sys" || bad "computing the answers with a system prompt"
[ $rc = 0 ] && [ ! -s "$tmp/syse" ] && [ -s "$tmp/sys" ] && cmp -s "$tmp/sys" "$tmp/want_sys" &&
	ok "--system: two answers as exld run gives them after the system text" ||
	bad "--system: rc $rc: '$(cat "$tmp/sys")' vs '$(cat "$tmp/want_sys")' $(cat "$tmp/syse")"
printf 'Hello\nTell me a story\n' | "$exl" chat -m stories260K -n 20 --temperature 0 \
	>"$tmp/nosys" 2>/dev/null
python3 "$tmp/answers.py" "$exld" "$models/stories260K.gguf" 20 "" "Hello" "Tell me a story" \
	>"$tmp/want_nosys" || bad "computing the answers without a system prompt"
cmp -s "$tmp/nosys" "$tmp/want_nosys" && ok "without --system: as exld run without it" ||
	bad "no system: '$(cat "$tmp/nosys")' vs '$(cat "$tmp/want_nosys")'"
cmp -s "$tmp/sys" "$tmp/nosys" && bad "--system changed no answer" ||
	ok "--system changes the answers"
# On the terminal: two turns after the system prompt, as exl generate
# completes the conversation; the system text is not echoed.
chat_start s3 -m stories260K -n 20 --temperature 0 --system "'$sys_text'"
wait_prompts s3 1 || bad "no first prompt (--system)"
tm send-keys -t s3 "Hello" Enter
wait_prompts s3 2 || bad "no answer to the first turn (--system)"
tm send-keys -t s3 "Tell me a story" Enter
wait_prompts s3 3 || bad "no answer to the second turn (--system)"
python3 "$tmp/expect.py" "$exl" plain 20 stories260K --system "$sys_text" "Hello" \
	"Tell me a story" >"$tmp/want" || bad "computing the expected transcript (--system)"
trimmed "$tmp/s3.screen" >"$tmp/got"
if cmp -s "$tmp/got" "$tmp/want"; then
	ok "--system on a terminal: two turns, as exl generate completes the conversation"
else
	bad "transcript with --system differs"
	echo "--- got"; cat "$tmp/got"; echo "--- want"; cat "$tmp/want"
fi
tm send-keys -t s3 C-d
wait_file "$tmp/s3.status" && [ "$(cat "$tmp/s3.status")" = 0 ] || bad "--system chat: Ctrl-D"

# ---- the phi3 model: its template is detected, <|end|> stops ----
printf 'Hi\n' | "$exl" chat -m chatphi -n 12 --temperature 0 >"$tmp/o" 2>"$tmp/e"
rc=$?
phi3_prompt=$(printf '<|user|>\nHi<|end|>\n<|assistant|>\n.')
phi3_prompt=${phi3_prompt%.}
"$exl" generate -m chatphi -n 12 --temperature 0 --special --completion-only --stop-token 32007 \
	--json "$phi3_prompt" >"$tmp/j" 2>/dev/null
python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["text"].lstrip(" \n\r\t") + "\n")' \
	"$tmp/j" >"$tmp/want"
[ $rc = 0 ] && [ ! -s "$tmp/e" ] && cmp -s "$tmp/o" "$tmp/want" &&
	ok "phi3 format from the GGUF, piped input" ||
	bad "phi3: rc $rc: '$(cat "$tmp/o")' vs '$(cat "$tmp/want")' $(cat "$tmp/e")"
# The same with --template phi3 named, and a different answer with chatml.
printf 'Hi\n' | "$exl" chat -m chatphi -n 12 --temperature 0 --template phi3 >"$tmp/o2" 2>/dev/null
cmp -s "$tmp/o2" "$tmp/want" && ok "--template phi3 is the detected one" || bad "--template phi3"
printf 'Hi\n' | "$exl" chat -m chatphi -n 12 --temperature 0 --template chatml >"$tmp/o3" 2>/dev/null
cmp -s "$tmp/o3" "$tmp/want" && bad "--template chatml changed nothing" || ok "--template overrides"

# ---- a Jinja file renders the conversation ----
# Not phi3's own format (upper-cased contents, a marker line), so the
# answers show the file was used; <|end|> makes it phi3's family, which
# stops at <|end|>.
cat >"$tmp/t.jinja" <<'T'
{{- bos_token }}
{%- for m in messages %}
    {%- if m.role == 'system' %}{{ raise_exception('this template takes no system prompt') }}{% endif %}
    {{- '<|' + m.role + '|>\n# ' + m.content | upper + '<|end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}
T
if python3 -c 'import jinja2' 2>/dev/null; then
	printf 'Hi\nHow are you\n' | "$exl" chat -m chatphi -n 12 --temperature 0 \
		--template "$tmp/t.jinja" >"$tmp/jo" 2>"$tmp/je"
	rc=$?
	# The same two turns: Jinja2 renders, exl generate completes.
	python3 - "$exl" "$tmp/t.jinja" >"$tmp/jwant" <<'EOF2' || bad "computing the Jinja answers"
import json, subprocess, sys, jinja2
exl, path = sys.argv[1], sys.argv[2]
# as transformers (and @huggingface/jinja) set it up
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
t = env.from_string(open(path).read())
msgs = []
for q in ["Hi", "How are you"]:
    msgs.append({"role": "user", "content": q})
    prompt = t.render(messages=msgs, add_generation_prompt=True, bos_token="<s>",
                      eos_token="<|endoftext|>")
    r = subprocess.run([exl, "generate", "-m", "chatphi", "-n", "12", "--temperature", "0",
                        "--special", "--no-bos", "--completion-only", "--stop-token", "32007",
                        "--json", prompt], capture_output=True, text=True, check=True)
    a = json.loads(r.stdout)["text"].lstrip(" \n\r\t")
    print(a)
    msgs.append({"role": "assistant", "content": a})
EOF2
	[ $rc = 0 ] && [ ! -s "$tmp/je" ] && [ -s "$tmp/jo" ] && cmp -s "$tmp/jo" "$tmp/jwant" &&
		ok "--template FILE.jinja: two turns as Jinja2's rendering completes" ||
		bad "jinja file: rc $rc: '$(cat "$tmp/jo")' vs '$(cat "$tmp/jwant")' $(cat "$tmp/je")"
	cmp -s "$tmp/jo" "$tmp/o" && bad "the Jinja file changed nothing against phi3's template"
	printf 'Hi\n' | "$exl" chat -m chatphi -n 4 --temperature 0 --system "Be brief" \
		--template "$tmp/t.jinja" >"$tmp/jo" 2>"$tmp/je"
	rc=$?
	[ $rc = 0 ] && has "$tmp/je" "exl chat: the chat template: this template takes no system prompt" &&
		ok "a template that raises: its message, the chat goes on" ||
		bad "raising template: rc $rc: $(cat "$tmp/je")"
else
	echo "python3-jinja2 is not installed: the --template FILE.jinja checks are skipped"
fi
"$exl" chat -m chatphi --template nosuch </dev/null >/dev/null 2>"$tmp/je"
[ $? = 2 ] && has "$tmp/je" "no template 'nosuch'" && ok "an unknown template name: usage error" ||
	bad "unknown template: $(cat "$tmp/je")"
"$exl" chat -m chatphi --template "$tmp/none.jinja" </dev/null >/dev/null 2>"$tmp/je"
[ $? = 2 ] && has "$tmp/je" "none.jinja" && ok "a missing template file: usage error" ||
	bad "missing template file: $(cat "$tmp/je")"

# ---- Ctrl-C stops a long answer only; Ctrl-C again at the prompt exits ----
chat_start s2 -m chatphi -n 3000 --ignore-eos --temperature 0
wait_prompts s2 1 || bad "no first prompt (phi3)"
has "$tmp/s2.screen" "exl chat: the model's chat template (phi3);" &&
	ok "banner names the model's template and its phi3 family" ||
	bad "banner: $(cat "$tmp/s2.screen")"
tm send-keys -t s2 "Hi" Enter
# Until the answer has started (text after the ">>> Hi" line).
i=0
while [ $i -lt 100 ]; do
	screen s2
	[ "$(sed -n '/^>>> Hi$/,$p' "$tmp/s2.screen" | sed 1d | tr -d '[:space:]' | wc -c)" -gt 0 ] && break
	sleep 0.1
	i=$((i + 1))
done
tm send-keys -t s2 C-c
wait_prompts s2 2 || bad "no prompt after Ctrl-C"
has "$tmp/s2.screen" "[answer stopped]" && [ ! -e "$tmp/s2.status" ] &&
	ok "Ctrl-C stopped the answer, the chat goes on" || bad "Ctrl-C: $(cat "$tmp/s2.screen")"
has "$tmp/s2.screen" "Ctrl-C again" && bad "the stop counted as a Ctrl-C at the prompt"
tm send-keys -t s2 C-c
wait_file "$tmp/s2.status" && [ "$(cat "$tmp/s2.status")" = 0 ] &&
	ok "a second Ctrl-C at the prompt ends the chat: 0" ||
	bad "second Ctrl-C: status '$(cat "$tmp/s2.status" 2>/dev/null)'"

# ---- exl generate and SIGINT ----
"$exl" generate -m chatphi -n 3000 --ignore-eos --temperature 0 "Hi" >"$tmp/g" 2>"$tmp/ge" &
g=$!
# Until it streams (so its SIGINT handler is in place: an asynchronous
# command of a non-interactive shell starts with SIGINT ignored).
i=0
while [ $i -lt 300 ] && [ "$(cat "$tmp/g" 2>/dev/null | wc -c)" -lt 10 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ "$(cat "$tmp/g" 2>/dev/null | wc -c)" -ge 10 ] || bad "exl generate streamed nothing in 30 s"
kill -INT $g
wait $g
rc=$?
[ $rc = 130 ] && has "$tmp/ge" "exl generate: interrupted" && ok "exl generate: Ctrl-C exits 130" ||
	bad "generate SIGINT: rc $rc: $(cat "$tmp/ge")"

# The cancel takes effect at the engine's next step and the status figures
# are a snapshot: look for a few seconds.
i=0
while :; do
	"$exl" status >"$tmp/o" 2>/dev/null
	grep -q '^chatphi  *loaded  *0  *0  *0 ' "$tmp/o" && break
	[ $i -lt 50 ] || break
	sleep 0.1
	i=$((i + 1))
done
grep -q '^chatphi  *loaded  *0  *0  *0 ' "$tmp/o" && ok "no job left running" || bad "status: $(cat "$tmp/o")"

exit $fail
