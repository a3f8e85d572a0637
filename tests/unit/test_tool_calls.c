/* Tool calls in replies (daemon/server/http/tool_calls.c): the form each
 * family's template teaches, the calls read from each form's text (and
 * the text that holds none or a broken one), what a stream may let out
 * before a call, and the schema of a forced call.  The real templates of
 * the peer's llama.cpp tree (PEER_DIR, default /tmp/peer) are checked when
 * it is there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_parse.h"
#include "daemon/server/http/reasoning.h"
#include "daemon/server/http/tool_calls.h"
#include "tests/common/check.h"

/* The calls of text in form f, as "name args|name args|", and the content. */
static void calls_of(enum exl_tool_fmt f, bool forced, const char *text, char *calls, size_t n,
		     char *content, size_t cn)
{
	struct exl_tool_parse p;

	calls[0] = 0;
	if (exl_tool_parse(f, forced, text, strlen(text), &p)) {
		snprintf(calls, n, "OOM");
		exl_tool_parse_free(&p);
		return;
	}
	for (int i = 0; i < p.n_calls; i++) {
		size_t l = strlen(calls);
		snprintf(calls + l, n - l, "%s%s %s|", p.calls[i].id ? p.calls[i].id : "",
			 p.calls[i].name, p.calls[i].args);
	}
	snprintf(content, cn, "%.*s", (int)p.content_len, p.content);
	exl_tool_parse_free(&p);
}

static void expect(enum exl_tool_fmt f, bool forced, const char *text, const char *want_calls,
		   const char *want_content)
{
	char calls[1024], content[1024];

	calls_of(f, forced, text, calls, sizeof(calls), content, sizeof(content));
	CHECK(!strcmp(calls, want_calls), "%s: '%s': calls '%s', want '%s'", exl_tool_fmt_name(f),
	      text, calls, want_calls);
	CHECK(!strcmp(content, want_content), "%s: '%s': content '%s', want '%s'",
	      exl_tool_fmt_name(f), text, content, want_content);
}

static void test_hermes(void)
{
	const enum exl_tool_fmt h = EXL_TOOL_FMT_HERMES;

	expect(h, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
	       "f {\"a\":1}|", "");
	expect(h, false, "Checking.\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n"
	       "<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": [1, \\\"}\\\"]}\"}\n</tool_call>",
	       "f {}|g {\"b\":[1,\"}\"]}|", "Checking.");
	/* the end-of-turn token ended it before the closing tag */
	expect(h, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call>\"}}",
	       "f {\"s\":\"</tool_call>\"}|", "");
	/* no arguments: an empty object */
	expect(h, false, "<tool_call>{\"name\": \"now\"}</tool_call>", "now {}|", "");
	/* Qwen3-Coder's form inside the tags */
	expect(h, false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
	       "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"u\": \"C\"}\n</parameter>\n"
	       "</function>\n</tool_call>",
	       "get_weather {\"city\":\"Paris\",\"days\":3,\"opts\":{\"u\":\"C\"}}|", "");
	/* broken: all of it is content */
	static const char *const broken[] = {
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
		"<tool_call>{\"arguments\": {}}</tool_call>",
		"<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
		"<tool_call>{\"name\": \"a b\", \"arguments\": {}}</tool_call>",
		"<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
		"<tool_call>{\"name\": \"f\"} and then more text",
		"<tool_call>call f with 1</tool_call>",
		"<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function>",
	};
	for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++)
		expect(h, false, broken[i], "", broken[i]);
	expect(h, false, "No tools needed: 4.", "", "No tools needed: 4.");
	/* text after closed calls is content, after a blank line */
	expect(h, false, "Let me see.\n<tool_call>{\"name\": \"f\"}</tool_call>\nI asked f. \n",
	       "f {}|", "Let me see.\n\nI asked f.");
	expect(h, false, "<tool_call>{\"name\": \"f\"}</tool_call> done", "f {}|", "done");
}

static void test_other_forms(void)
{
	expect(EXL_TOOL_FMT_LLAMA3, false, " {\"name\": \"f\", \"parameters\": {\"a\": \"x\"}}",
	       "f {\"a\":\"x\"}|", "");
	expect(EXL_TOOL_FMT_LLAMA3, false, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; "
	       "{\"name\": \"g\", \"arguments\": {\"b\": 2}}", "f {}|g {\"b\":2}|", "");
	expect(EXL_TOOL_FMT_LLAMA3, false, "{\"answer\": 4}", "", "{\"answer\": 4}");
	expect(EXL_TOOL_FMT_LLAMA3, false, "The call would be {\"name\": \"f\", \"parameters\": {}}", "",
	       "The call would be {\"name\": \"f\", \"parameters\": {}}");

	expect(EXL_TOOL_FMT_MISTRAL, false, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, "
	       "\"id\": \"abc123def\"}, {\"name\": \"g\", \"arguments\": {}}]",
	       "abc123deff {\"a\":1}|g {}|", "");
	expect(EXL_TOOL_FMT_MISTRAL, false, "Sure [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}"
	       "[TOOL_CALLS]get_time[CALL_ID]x9[ARGS]{}", "get_weather {\"city\":\"Rome\"}|x9get_time {}|",
	       "Sure");
	expect(EXL_TOOL_FMT_MISTRAL, false, "[TOOL_CALLS][ARGS]{}", "", "[TOOL_CALLS][ARGS]{}");
	expect(EXL_TOOL_FMT_MISTRAL, false, "[TOOL_CALLS]f[ARGS]{\"a\": 1", "",
	       "[TOOL_CALLS]f[ARGS]{\"a\": 1");

	expect(EXL_TOOL_FMT_GRANITE, false, "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]",
	       "f {\"a\":1}|", "");
	expect(EXL_TOOL_FMT_GRANITE, false, "<|tool_call|>[{\"name\": \"f\", \"arguments\": {}}]"
	       "<|/tool_call|>", "f {}|", "");

	/* a forced call: the reply is the object (its opening was the prompt's) */
	expect(EXL_TOOL_FMT_HERMES, true, "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "f {\"a\":1}|", "");
	expect(EXL_TOOL_FMT_LLAMA3, true, "{\"name\": \"f\", \"parameters\": {}}", "f {}|", "");
	expect(EXL_TOOL_FMT_NONE, true, "{\"name\": \"f\", \"arguments\": {\"a\"", "",
	       "{\"name\": \"f\", \"arguments\": {\"a\"");
	/* no form: nothing is read unless forced */
	expect(EXL_TOOL_FMT_NONE, false, "<tool_call>{\"name\": \"f\"}</tool_call>", "",
	       "<tool_call>{\"name\": \"f\"}</tool_call>");
}

static void safe(enum exl_tool_fmt f, const char *text, size_t want, bool want_started)
{
	bool started;
	size_t got = exl_tool_stream_safe(f, text, strlen(text), &started);

	CHECK(got == want && started == want_started, "%s: '%s': %zu%s, want %zu%s",
	      exl_tool_fmt_name(f), text, got, started ? " started" : "", want,
	      want_started ? " started" : "");
}

static void test_stream(void)
{
	const enum exl_tool_fmt h = EXL_TOOL_FMT_HERMES;

	safe(h, "Hello", 5, false);
	safe(h, "Hello <tool", 5, false);       /* maybe a tag: held, and the space before it */
	safe(h, "Hello <tools>", 13, false);
	safe(h, "Hi.\n<tool_call>\n{\"na", 3, true);
	safe(h, "Hi.\n\n", 3, false);
	safe(EXL_TOOL_FMT_MISTRAL, "ok [TOOL_", 2, false);
	safe(EXL_TOOL_FMT_GRANITE, "<|tool_call|>[", 0, true);
	safe(EXL_TOOL_FMT_LLAMA3, "  ", 0, false);
	safe(EXL_TOOL_FMT_LLAMA3, " {\"name", 0, true);
	safe(EXL_TOOL_FMT_LLAMA3, "<|python", 0, false);
	safe(EXL_TOOL_FMT_LLAMA3, "<|python_tag|>{", 0, true);
	safe(EXL_TOOL_FMT_LLAMA3, "Paris is", 8, false);
	safe(EXL_TOOL_FMT_NONE, "<tool_call>", 11, false);
}

#define H_CALL "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
#define H_CALL2 " to=functions.get_weather<|channel|>commentary json<|message|>"
#define H_NEXT "<|end|><|start|>assistant"

/* gpt-oss's harmony form, from where the reasoning split's content starts
 * (a call's header, or a final or commentary message's body) */
static void test_harmony(void)
{
	const enum exl_tool_fmt h = EXL_TOOL_FMT_HARMONY;

	expect(h, false, H_CALL "{\"location\":\"Tokyo\"}", "get_weather {\"location\":\"Tokyo\"}|", "");
	expect(h, false, H_CALL2 " {\"location\": \"Tokyo\"} ", "get_weather {\"location\":\"Tokyo\"}|",
	       "");
	expect(h, false, "<|channel|>commentary to=functions.now<|message|>{}<|call|>", "now {}|", "");
	/* a preamble (commentary to the user) before it is content; an
	 * analysis between is dropped; several calls */
	expect(h, false, "Checking. " H_NEXT H_CALL "{}", "get_weather {}|", "Checking.");
	expect(h, false, "Checking." H_NEXT "<|channel|>analysis<|message|>hm" H_NEXT H_CALL2 "{}",
	       "get_weather {}|", "Checking.");
	expect(h, false, H_CALL "{\"a\":1}" H_NEXT " to=functions.get_time<|channel|>commentary"
	       "<|message|>\"{\\\"zone\\\": \\\"CET\\\"}\"", "get_weather {\"a\":1}|get_time {\"zone\":\"CET\"}|",
	       "");
	/* no call: the bodies without their markers */
	expect(h, false, "It is sunny.", "", "It is sunny.");
	expect(h, false, "It is <b>sunny</b> <|x|>.\n", "", "It is <b>sunny</b> <|x|>.\n");
	expect(h, false, "Checking." H_NEXT "<|channel|>final<|message|>Sunny.", "", "Checking.\n\nSunny.");
	/* not harmony's shape: all of it as it is */
	static const char *const broken[] = {
		H_CALL "{\"location\": \"Tok",
		H_CALL "[1]",
		H_CALL "{} and more",
		"<|channel|>commentary to=browser.search<|message|>{\"q\": 1}",
		"<|channel|>commentary to=functions.a]b<|message|>{}",
		"<|channel|>commentary to=functions.<|message|>{}",
		"Checking." H_NEXT "<|channel|>commentary to=functions.f",
		"Checking.<|end|> more",
		"Checking.<|end|><|start|>user<|message|>x",
	};
	for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++)
		expect(h, false, broken[i], "", broken[i]);
	/* forced: the object after the prompt's final channel */
	expect(h, true, "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "f {\"a\":1}|", "");
	CHECK(!strcmp(exl_tool_forced_prefix(h), "<|channel|>final<|message|>"), "harmony prefix");
	CHECK(!exl_tool_fmt_needs_special(h), "harmony: markers are text");

	safe(h, "It is sun", 9, false);
	safe(h, "It is <|en", 5, false);
	safe(h, "It is <b>", 9, false);
	safe(h, "Checking. <|end|><|sta", 9, true);
	safe(h, H_CALL "{", 0, true);
	safe(h, "<|channel|>comm", 0, false);
	safe(h, " to=functions.get", 0, false);
	safe(h, " to", 0, false);
	safe(h, " to be", 6, false);
	safe(h, "", 0, false);
}

/* A harmony reply through the reasoning split, the stream's hold-back and
 * the reader, as http_gen.c streams it a byte at a time: the content that
 * went out and the calls are the whole reply's, with and without tools
 * (without: calls do not count, their text is not content). */
static void harmony_pipeline(const char *text, bool tools, const char *want_r,
			     const char *want_calls, const char *want_content)
{
	const enum exl_tool_fmt h = EXL_TOOL_FMT_HARMONY;
	size_t n = strlen(text), reason_sent = 0, content_at = 0, text_sent = 0;
	bool held = false;
	char got_r[512] = "", got_c[512] = "", calls[512] = "";
	struct exl_reasoning rs;

	for (size_t len = 1; len <= n; len++) {
		bool final = len == n;
		size_t c0 = content_at;

		if (!c0 || final) {
			exl_reasoning_split(EXL_REASONING_HARMONY, text, len, false, final, reason_sent,
					    &rs);
			if (reason_sent < rs.r_start)
				reason_sent = rs.r_start;
			if (rs.r_end > reason_sent) {
				strncat(got_r, text + reason_sent, rs.r_end - reason_sent);
				reason_sent = rs.r_end;
			}
			if (rs.c_start < len)
				content_at = rs.c_start;
			c0 = rs.c_start;
		}
		const char *view = text + c0;
		size_t vn = len - c0;
		if (!final) {
			bool started = false;
			size_t safe_n = held ? text_sent :
					text_sent + exl_tool_stream_safe(h, view + text_sent, vn - text_sent,
									 &started);
			held |= started;
			if (safe_n > text_sent) {
				strncat(got_c, view + text_sent, safe_n - text_sent);
				text_sent = safe_n;
			}
			continue;
		}
		struct exl_tool_parse p;
		CHECK(exl_tool_parse(h, false, view, vn, &p) == 0, "parse");
		CHECK(p.content_len >= text_sent && !memcmp(p.content, got_c, text_sent),
		      "'%s': '%s' went out, the content is '%.*s'", text, got_c, (int)p.content_len,
		      p.content);
		if (p.content_len > text_sent)
			strncat(got_c, p.content + text_sent, p.content_len - text_sent);
		for (int i = 0; tools && i < p.n_calls; i++) {
			size_t l = strlen(calls);
			snprintf(calls + l, sizeof(calls) - l, "%s %s|", p.calls[i].name, p.calls[i].args);
		}
		exl_tool_parse_free(&p);
	}
	CHECK(!strcmp(got_r, want_r) && !strcmp(got_c, want_content) && !strcmp(calls, want_calls),
	      "'%s' streamed: reasoning '%s', content '%s', calls '%s'; want '%s' '%s' '%s'", text,
	      got_r, got_c, calls, want_r, want_content, want_calls);
}

static void test_harmony_stream(void)
{
	static const char analysis[] = "<|channel|>analysis<|message|>";

	char t[512];
	snprintf(t, sizeof(t), "%sThe user wants Tokyo's weather.%s%s{\"location\":\"Tokyo\"}", analysis,
		 H_NEXT, H_CALL);
	harmony_pipeline(t, true, "The user wants Tokyo's weather.", "get_weather {\"location\":\"Tokyo\"}|",
			 "");
	harmony_pipeline(t, false, "The user wants Tokyo's weather.", "", "");
	snprintf(t, sizeof(t), "%sWeather.%s%s{}", analysis, H_NEXT, H_CALL2);
	harmony_pipeline(t, true, "Weather.", "get_weather {}|", "");
	snprintf(t, sizeof(t), "%sA.%s<|channel|>commentary<|message|>Let me check. %s%s{}", analysis,
		 H_NEXT, H_NEXT, H_CALL);
	harmony_pipeline(t, true, "A.", "get_weather {}|", "Let me check.");
	snprintf(t, sizeof(t), "%sA.%s<|channel|>final<|message|>It is sunny in Tokyo.", analysis,
		 H_NEXT);
	harmony_pipeline(t, true, "A.", "", "It is sunny in Tokyo.");
	harmony_pipeline("<|channel|>final<|message|>Sunny <|end|>!", true, "", "", "Sunny <|end|>!");
	harmony_pipeline("Plain text <|channel|> and all", true, "", "", "Plain text <|channel|> and all");
	snprintf(t, sizeof(t), "%sA.%s%s{\"location\": \"Tok", analysis, H_NEXT, H_CALL);
	harmony_pipeline(t, true, "A.", "", H_CALL "{\"location\": \"Tok");
}

static void test_schema(void)
{
	static const char tools[] =
		"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
		"\"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}, {\"type\": \"function\", "
		"\"function\": {\"name\": \"g\"}}]";
	char err[256];
	size_t n;
	char *s = exl_tool_schema(EXL_TOOL_FMT_HERMES, tools, strlen(tools), NULL, &n, err, sizeof(err));

	CHECK(s && !strcmp(s, "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"f\"},"
			   "\"arguments\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
			   "\"additionalProperties\":false}},\"required\":[\"name\",\"arguments\"],"
			   "\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"name\":"
			   "{\"const\":\"g\"},\"arguments\":{\"type\":\"object\"}},\"required\":[\"name\","
			   "\"arguments\"],\"additionalProperties\":false}]}"), "schema: %s", s ? s : err);
	free(s);
	s = exl_tool_schema(EXL_TOOL_FMT_LLAMA3, tools, strlen(tools), "g", &n, err, sizeof(err));
	CHECK(s && !strcmp(s, "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"g\"},"
			   "\"parameters\":{\"type\":\"object\"}},\"required\":[\"name\",\"parameters\"],"
			   "\"additionalProperties\":false}"), "named: %s", s ? s : err);
	free(s);
	/* what the converter cannot enforce is left out; references follow
	 * the parameters to where they sit */
	static const char loose[] =
		"[{\"type\": \"function\", \"function\": {\"name\": \"mail\", \"parameters\": "
		"{\"type\": \"object\", \"properties\": {\"to\": {\"type\": \"string\", \"format\": "
		"\"email\"}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, "
		"\"uniqueItems\": true}, \"n\": {\"type\": \"integer\", \"multipleOf\": 2}, \"x\": "
		"{\"$ref\": \"#/$defs/X\"}, \"format\": {\"type\": \"string\", \"format\": \"date\"}}, "
		"\"$defs\": {\"X\": {\"oneOf\": [{\"type\": \"integer\"}, {\"const\": "
		"{\"format\": \"uri\"}}]}}}}}]";
	s = exl_tool_schema(EXL_TOOL_FMT_HERMES, loose, strlen(loose), NULL, &n, err, sizeof(err));
	CHECK(s && !strcmp(s, "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"mail\"},"
			   "\"arguments\":{\"type\":\"object\",\"properties\":{\"to\":{\"type\":\"string\"},"
			   "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"n\":{\"type\":"
			   "\"integer\"},\"x\":{\"$ref\":\"#/properties/arguments/$defs/X\"},\"format\":"
			   "{\"type\":\"string\",\"format\":\"date\"}},\"$defs\":{\"X\":{\"anyOf\":"
			   "[{\"type\":\"integer\"},{\"const\":{\"format\":\"uri\"}}]}},"
			   "\"additionalProperties\":false}},\"required\":[\"name\",\"arguments\"],"
			   "\"additionalProperties\":false}"), "loose: %s", s ? s : err);
	free(s);
	s = exl_tool_schema(EXL_TOOL_FMT_HERMES, tools, strlen(tools), "h", &n, err, sizeof(err));
	CHECK(!s && strstr(err, "no function named 'h'"), "unknown name: %s", s ? s : err);
	free(s);
	s = exl_tool_schema(EXL_TOOL_FMT_HERMES, "[]", 2, NULL, &n, err, sizeof(err));
	CHECK(!s && strstr(err, "non-empty"), "no tools: %s", s ? s : err);
	free(s);
}

static void test_templates(void)
{
	static const struct { const char *file; enum exl_tool_fmt f; } t[] = {
		{ "Qwen-Qwen2.5-7B-Instruct.jinja", EXL_TOOL_FMT_HERMES },
		{ "Qwen-Qwen3-0.6B.jinja", EXL_TOOL_FMT_HERMES },
		{ "Qwen3-Coder.jinja", EXL_TOOL_FMT_HERMES },
		{ "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", EXL_TOOL_FMT_HERMES },
		{ "meta-llama-Llama-3.1-8B-Instruct.jinja", EXL_TOOL_FMT_LLAMA3 },
		{ "meta-llama-Llama-3.2-3B-Instruct.jinja", EXL_TOOL_FMT_LLAMA3 },
		{ "meta-llama-Llama-3.3-70B-Instruct.jinja", EXL_TOOL_FMT_LLAMA3 },
		{ "mistralai-Mistral-Nemo-Instruct-2407.jinja", EXL_TOOL_FMT_MISTRAL },
		{ "Mistral-Small-3.2-24B-Instruct-2506.jinja", EXL_TOOL_FMT_MISTRAL },
		{ "ibm-granite-granite-3.3-2B-Instruct.jinja", EXL_TOOL_FMT_GRANITE },
		{ "google-gemma-2-2b-it.jinja", EXL_TOOL_FMT_NONE },
		{ "microsoft-Phi-3.5-mini-instruct.jinja", EXL_TOOL_FMT_NONE },
		{ "openai-gpt-oss-120b.jinja", EXL_TOOL_FMT_HARMONY },
	};
	const char *peer = getenv("PEER_DIR") ? getenv("PEER_DIR") : "/tmp/peer";
	char p[1024];
	int seen = 0;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(p, sizeof(p), "%s/llama.cpp-src/models/templates/%s", peer, t[i].file);
		FILE *f = fopen(p, "rb");
		if (!f)
			continue;
		static char buf[1 << 20];
		size_t n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		enum exl_tool_fmt got = exl_tool_fmt_of(buf, n);
		CHECK(got == t[i].f, "%s: %s, want %s", t[i].file, exl_tool_fmt_name(got),
		      exl_tool_fmt_name(t[i].f));
		seen++;
	}
	printf("%d of %zu real templates checked%s\n", seen, sizeof(t) / sizeof(t[0]),
	       seen ? "" : " (no llama.cpp tree under PEER_DIR)");
	/* gpt-oss's, which the tests keep (tests/data/templates) */
	const char *src = getenv("EXLD_SRCDIR") ? getenv("EXLD_SRCDIR") : ".";
	snprintf(p, sizeof(p), "%s/tests/data/templates/openai-gpt-oss-120b.jinja", src);
	FILE *f = fopen(p, "rb");
	CHECK(f, "%s: missing", p);
	if (f) {
		static char buf[1 << 20];
		size_t n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		CHECK(exl_tool_fmt_of(buf, n) == EXL_TOOL_FMT_HARMONY, "gpt-oss: %s",
		      exl_tool_fmt_name(exl_tool_fmt_of(buf, n)));
	}
}

int main(void)
{
	test_hermes();
	test_other_forms();
	test_stream();
	test_harmony();
	test_harmony_stream();
	test_schema();
	test_templates();
	if (check_failures)
		fprintf(stderr, "%d check(s) failed\n", check_failures);
	return check_failures ? 1 : 0;
}
