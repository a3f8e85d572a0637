/* Fuzz target for the chat template renderer (common/chat_template.h):
 * the first input byte picks one of a few conversations, the rest is the
 * template.  It checks that
 *   - rendering never crashes, hangs past the sandbox's limits or leaks;
 *   - a render gives a NUL-terminated string of valid UTF-8 (the lone
 *     surrogates JavaScript strings may hold are written as U+FFFD), and a
 *     failure no output and a terminated message;
 *   - rendering is deterministic: twice, the same result.
 * See docs/fuzzing.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/chat_template.h"
#include "common/utf8.h"
#include "tests/fuzz/fuzz_target.h"

static const char *const contexts[] = {
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
	"{\"role\": \"user\", \"content\": \"Hi \\u00e9\\ud83d\\ude00\"}, "
	"{\"role\": \"assistant\", \"content\": \"Yo\", \"reasoning_content\": \"hm\"}, "
	"{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}]}], "
	"\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
	"{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}, "
	"{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", "
	"\"type\": \"function\", \"function\": {\"name\": \"w\", \"arguments\": {\"city\": \"P\"}}}]}, "
	"{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"{\\\"t\\\": 1}\"}], "
	"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": "
	"{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
	"\"items\": {\"type\": \"array\"}}, \"required\": [\"city\"]}}}], "
	"\"add_generation_prompt\": false, \"n\": 3, \"f\": 2.5, \"z\": null}",
	"{\"messages\": [], \"s\": \"a\\u0000b\", \"d\": {\"2\": 1, \"b\": [1, {\"c\": true}]}}",
};
#define N_CTX (sizeof(contexts) / sizeof(contexts[0]))

static void check_result(int rc, const char *out, size_t len, const char *err, size_t errlen)
{
	if (rc == 0) {
		if (!out || out[len] || exl_utf8_bad_at(out, len) != len) {
			fprintf(stderr, "fuzz_template: a render is not terminated UTF-8\n");
			abort();
		}
		return;
	}
	if (rc != -1 || out || len || !memchr(err, 0, errlen)) {
		fprintf(stderr, "fuzz_template: a failure left output or no message\n");
		abort();
	}
}

int fuzz_one(const uint8_t *data, size_t size)
{
	char err1[256], err2[256], *out1 = NULL, *out2 = NULL;
	size_t len1 = 0, len2 = 0;
	const char *ctx;
	int rc1, rc2;

	if (!size)
		return 0;
	ctx = contexts[data[0] % N_CTX];
	memset(err1, 'x', sizeof(err1));
	rc1 = exl_chat_template_render((const char *)data + 1, size - 1, ctx, strlen(ctx), &out1,
				       &len1, err1, sizeof(err1));
	check_result(rc1, out1, len1, err1, sizeof(err1));
	rc2 = exl_chat_template_render((const char *)data + 1, size - 1, ctx, strlen(ctx), &out2,
				       &len2, err2, sizeof(err2));
	if (rc1 != rc2 || len1 != len2 || (rc1 == 0 && memcmp(out1, out2, len1)) ||
	    (rc1 && strcmp(err1, err2))) {
		fprintf(stderr, "fuzz_template: two renders differ\n");
		abort();
	}
	free(out1);
	free(out2);
	return 0;
}

/* Seeds: the ChatML fallback and small templates in the styles models
 * ship, each with one of the features they lean on. */
static const char *const seed_text[] = {
	NULL, /* ChatML */
	"{{- bos_token }}{%- for m in messages %}{%- if m['role'] == 'system' %}"
	"{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + m['content'] | trim + "
	"'<|eot_id|>' }}{%- else %}{{- '<|start_header_id|>' + m.role + "
	"'<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}{%- endif %}{%- endfor %}"
	"{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>"
	"\\n\\n' }}{%- endif %}",
	"{%- if tools %}{{- '<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | "
	"tojson }}{%- endfor %}{{- '</tools>' }}{%- endif %}{%- for message in messages %}"
	"{%- if message.tool_calls %}{%- for tc in message.tool_calls %}{{- '<tool_call>' + "
	"tc.function.name + (tc.function.arguments | tojson(indent=2)) }}{%- endfor %}"
	"{%- elif message.role == 'tool' %}{{- message.content }}{%- endif %}{%- endfor %}",
	"{%- set ns = namespace(first=true, n=0) -%}{%- macro render(m, sep='\\n') -%}"
	"{{ m.role|upper }}:{{ sep }}{{ m.content if m.content is string else m.content|"
	"map(attribute='text')|join(' ') }}{%- endmacro -%}{%- for m in messages if m.role != "
	"'tool' -%}{%- set ns.n = ns.n + 1 -%}{{ loop.index }}/{{ loop.length }} {{ render(m) "
	"}}{%- if not loop.last %}{{ loop.cycle('|', '/') }}{% endif -%}{%- else -%}none"
	"{%- endfor -%}{{ ns.n }}",
	"{% if messages|length == 0 %}{{ raise_exception('No messages') }}{% endif %}"
	"{{ messages[0].content[1:3] }}{{ messages[-1]['role'] }}{{ strftime_now('%d %b %Y') "
	"}}{{ range(3)|list }}{{ d|dictsort }}{{ s|length }}",
	"{% call(x) w() %}{{ x }}{% endcall %}{% macro w() %}{{ caller(1) }}{% endmacro %}"
	"{% filter upper %}{{ 'a' ~ 1.5 ~ none ~ true }}{% endfilter %}{{ '{}-{}'.format(1, 2) }}"
	"{{ [3, 1, 2]|sort|reverse|first }}{{ {'a': 1}.items()|list }}{{ (1, 2) }}",
	"{%- for k, v in tools[0].function.parameters.properties.items() -%}{{ k }}={{ v.type "
	"| default('any') }}{%- if v is mapping and 'items' in v %}[]{% endif %}"
	"{%- endfor -%}{{ n * 2 // 3 ** 2 % 5 }}{{ f|round }}{{ z is none }}{{ 'x' * 3 }}",
};
#define N_SEEDS (sizeof(seed_text) / sizeof(seed_text[0]))

size_t fuzz_seeds(const struct fuzz_blob **out)
{
	static struct fuzz_blob seeds[N_SEEDS * N_CTX];
	static size_t n;

	if (!n) {
		for (size_t i = 0; i < N_SEEDS; i++) {
			const char *t = seed_text[i] ? seed_text[i] : exl_chat_template_chatml;
			size_t len = strlen(t);

			for (size_t c = 0; c < N_CTX; c++) {
				uint8_t *b = malloc(len + 1);

				if (!b) {
					fprintf(stderr, "fuzz_template: out of memory\n");
					abort();
				}
				b[0] = (uint8_t)c;
				memcpy(b + 1, t, len);
				seeds[n].name = "template";
				seeds[n].data = b;
				seeds[n].size = len + 1;
				n++;
			}
		}
	}
	*out = seeds;
	return n;
}

size_t fuzz_dict(const struct fuzz_blob **out)
{
	static const char *const words[] = {
		"{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", " for ", " in ",
		"endfor", " if ", "endif", "else", "elif", " set ", "endset", "macro", "endmacro",
		"call", "endcall", "filter", "endfilter", "break", "continue", "caller()", "loop.",
		"index0", "namespace(", "|tojson", "|length", "|trim", "|join(", "|map(",
		"attribute=", "|selectattr(", "|default(", "|items", "|dictsort", "range(",
		"raise_exception(", "strftime_now(", "messages", "['content']", ".role",
		" is defined", " is string", " not ", " and ", " or ", " if ", " else ", "'", "\"",
		"(", ")", "[", "]", "{", "}", ",", ":", "|", "~", "+", "-", "*", "**", "//", "%",
		"==", "!=", "<=", "1", "0", "-1", "2.5", "1e3", "true", "none", "\\n", "\\u00e9",
		"\\ud83d", "\xf0\x9f\x98\x80", "\xc3\xa9", "\xff", "\xe2\x80\xa8", "\n", " ",
		"\t", "{% generation %}", ".strip(", ".split(", ".format(", ".append(",
	};
	static struct fuzz_blob dict[sizeof(words) / sizeof(words[0])];
	static size_t n;

	if (!n) {
		for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
			dict[n].name = words[i];
			dict[n].data = (const uint8_t *)words[i];
			dict[n].size = strlen(words[i]);
			n++;
		}
	}
	*out = dict;
	return n;
}

size_t fuzz_max_len(void)
{
	return 8192;
}
