/* How the HTTP front reads a chat reply, against a real exld (docs/http.md,
 * "Tools" and "Reasoning"), on models (random weights, stories260K's
 * vocabulary) whose replies are pinned with exld's regex constraint to
 * text a tool-using or reasoning model writes:
 *
 *   tools      templates teaching the hermes, llama3 and mistral forms:
 *              calls read back as OpenAI's and Ollama's tool_calls,
 *              streamed and not; forced calls (tool_choice required and
 *              named) within the tools' schemas; tool_choice none;
 *              refusals; an assistant turn's arguments given to the
 *              template as an object
 *   reasoning  a template that writes <think> blocks, one that writes
 *              Mistral's [THINK] blocks, and one whose prompt
 *              opens the block (DeepSeek-R1's): reasoning_content and
 *              Ollama's thinking apart from the content, streamed and not,
 *              with a tool call after it; reasoning_format none; think
 *              false and chat_template_kwargs reaching the template; and
 *              gpt-oss's harmony messages (its real template, a gpt-oss
 *              model with the harmony markers in its vocabulary): analysis
 *              as reasoning, final as content, calls in both header
 *              orders, forced calls, reasoning_effort
 *   fim        a suffix (fill-in-the-middle) over OpenAI's completions and
 *              Ollama's generate, on a model with StarCoder's vocabulary
 *
 * Skips (77) without the test models.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_parse.h"
#include "harness.h"
#include "http_client.h"
#include "tests/common/check.h"

#define SKIP 77

static const char hermes_tmpl[] =
	"{%- if tools %}<|im_start|>system\nYou may call these functions:\n"
	"{%- for t in tools %}\n{{ t | tojson }}{%- endfor %}\n"
	"Answer a call as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n"
	"{%- endif %}\n"
	"{%- for m in messages %}<|im_start|>{{ m.role }}\n"
	"{%- if m.tool_calls %}{%- for c in m.tool_calls %}\n<tool_call>\n"
	"{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n"
	"</tool_call>{%- endfor %}{%- else %}\n{{ m.content }}{%- endif %}<|im_end|>\n"
	"{%- endfor %}<|im_start|>assistant\n";

static const char llama3_tmpl[] =
	"<|start_header_id|>system<|end_header_id|>\n"
	"{%- if tools %}Respond with {\"name\": function name, \"parameters\": its arguments}.\n"
	"{%- for t in tools %}{{ t | tojson }}{%- endfor %}{%- endif %}<|eot_id|>"
	"{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n"
	"{{ m.content }}<|eot_id|>{%- endfor %}<|start_header_id|>assistant<|end_header_id|>\n";

static const char mistral_tmpl[] =
	"{%- for m in messages %}{%- if m.role == 'user' %}"
	"{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
	"[INST]{{ m.content }}[/INST]{%- elif m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}"
	"{%- else %}{{ m.content }}{%- endif %}{%- endfor %}";

/* Qwen3's way: the reply opens the block, enable_thinking false closes
 * an empty one in the prompt */
static const char think_tmpl[] =
	"{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
	"<|im_start|>assistant\n{%- if enable_thinking is defined and not enable_thinking %}"
	"<think>\n\n</think>\n\n{%- endif %}";

/* Magistral's and Ministral 3 Reasoning's: [THINK] ... [/THINK] */
static const char magistral_tmpl[] =
	"{%- for m in messages %}{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
	"{%- elif m.thinking %}[THINK]{{ m.thinking }}[/THINK]{{ m.content }}"
	"{%- else %}{{ m.content }}{%- endif %}{%- endfor %}";

/* DeepSeek-R1's: the prompt opens the block for the model */
static const char r1_tmpl[] =
	"{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{%- endfor %}<|assistant|><think>\n";

static const char tools_json[] =
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
	"\"The weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": "
	"{\"city\": {\"type\": \"string\", \"maxLength\": 12}}, \"required\": [\"city\"]}}}, "
	"{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"parameters\": "
	"{\"type\": \"object\", \"properties\": {\"zone\": {\"enum\": [\"UTC\", \"CET\"]}}, "
	"\"required\": [\"zone\"]}}}]";

static const char user_msg[] =
	"[{\"role\": \"user\", \"content\": \"What is the weather in Paris?\"}]";

/* ---- building bodies ---- */

struct buf {
	char *p;
	size_t len, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 1024;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np)
			abort();
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* s as a JSON string of a regex matching exactly s. */
static void put_regex_of(struct buf *b, const char *s)
{
	puts_(b, "\"");
	for (; *s; s++) {
		if (strchr("\\^$.|?*+()[]{}", *s))
			puts_(b, "\\\\");
		if (*s == '"')
			puts_(b, "\\\"");
		else if (*s == '\\')
			puts_(b, "\\\\");
		else if (*s == '\n')
			puts_(b, "\\n");
		else
			put(b, s, 1);
	}
	puts_(b, "\"");
}

/* A chat body for model: tools, the reply pinned to reply (when not NULL),
 * and more members (",\"k\": v" text). */
static char *chat_body(const char *model, const char *reply, bool ollama, const char *more)
{
	struct buf b = { 0 };

	puts_(&b, "{\"model\": \"");
	puts_(&b, model);
	puts_(&b, "\", \"messages\": ");
	puts_(&b, user_msg);
	puts_(&b, ", \"tools\": ");
	puts_(&b, tools_json);
	if (ollama)
		puts_(&b, ", \"options\": {\"num_predict\": 300");
	else
		puts_(&b, ", \"max_tokens\": 300");
	if (reply) {
		puts_(&b, ", \"regex\": ");
		put_regex_of(&b, reply);
	}
	if (ollama)
		puts_(&b, "}");
	puts_(&b, more ? more : "");
	puts_(&b, "}");
	return b.p;
}

/* ---- reading replies ---- */

static const struct exl_json *path(const struct exl_json *v, const char *p)
{
	char key[64];

	while (v && *p) {
		size_t n = strcspn(p, ".");
		snprintf(key, sizeof(key), "%.*s", (int)n, p);
		if (v->type == EXL_JSON_ARRAY) {
			size_t i = (size_t)atoi(key);
			v = i < v->n ? v->v[i] : NULL;
		} else {
			v = v->type == EXL_JSON_OBJECT ? exl_json_get(v, key) : NULL;
		}
		p += n + (p[n] == '.');
	}
	return v;
}

static bool is_str(const struct exl_json *v, const char *s)
{
	return v && v->type == EXL_JSON_STRING && v->len == strlen(s) && !memcmp(v->str, s, v->len);
}

/* A JSON object's text (OpenAI's arguments) parsed. */
static struct exl_json_doc *parse_text(const struct exl_json *v)
{
	return v && v->type == EXL_JSON_STRING ? exl_json_parse(v->str, v->len, NULL, 0) : NULL;
}

/* A non-streamed reply parsed. */
static struct exl_json_doc *post_json(const struct target *t, const char *url, const char *body,
				      int *status)
{
	struct resp r = { 0 };
	struct exl_json_doc *d = NULL;

	*status = -1;
	if (!post(t, url, body, &r)) {
		*status = r.status;
		d = exl_json_parse(r.body, strlen(r.body), NULL, 0);
		if (!d || r.status != 200)
			fprintf(stderr, "reply %d: %.400s\n", r.status, r.body);
	}
	resp_free(&r);
	return d;
}

/* An OpenAI stream: content concatenated, the tool call deltas' names and
 * arguments, the last finish_reason; -1 when malformed. */
struct streamed {
	char content[512];
	char reasoning[512];
	char name[8][64];
	char args[8][256];
	int n_calls;
	char finish[32];
	bool done;
};

static int read_stream(const char *raw, bool ollama, struct streamed *s)
{
	const char *p = strstr(raw, "\r\n\r\n");

	memset(s, 0, sizeof(*s));
	if (!p)
		return -1;
	/* chunked: the events are split by chunk sizes; take lines whose
	 * text starts an event */
	for (p += 4; *p; ) {
		const char *e = strchr(p, '\n');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		const char *ev = NULL;

		if (!ollama && n > 6 && !strncmp(p, "data: ", 6))
			ev = p + 6;
		else if (ollama && n && *p == '{')
			ev = p;
		if (ev && !strncmp(ev, "[DONE]", 6)) {
			s->done = true;
		} else if (ev) {
			struct exl_json_doc *d = exl_json_parse(ev, (size_t)(p + n - ev), NULL, 0);
			const struct exl_json *root = d ? exl_json_root(d) : NULL;
			const struct exl_json *msg = ollama ? path(root, "message") :
						     path(root, "choices.0.delta");
			const struct exl_json *c = path(msg, "content");
			const struct exl_json *calls = path(msg, "tool_calls");
			const struct exl_json *fin = ollama ? path(root, "done_reason") :
						     path(root, "choices.0.finish_reason");

			if (!d) {
				fprintf(stderr, "bad event: %.*s\n", (int)n, p);
				return -1;
			}
			const struct exl_json *rc = path(msg, ollama ? "thinking" : "reasoning_content");
			if (c && c->type == EXL_JSON_STRING)
				strncat(s->content, c->str, sizeof(s->content) - strlen(s->content) - 1);
			if (rc && rc->type == EXL_JSON_STRING)
				strncat(s->reasoning, rc->str, sizeof(s->reasoning) - strlen(s->reasoning) - 1);
			for (size_t i = 0; calls && i < calls->n && s->n_calls < 8; i++) {
				const struct exl_json *nm = path(calls->v[i], "function.name");
				const struct exl_json *a = path(calls->v[i], "function.arguments");
				char *o = s->args[s->n_calls];

				snprintf(s->name[s->n_calls], 64, "%s", nm && nm->str ? nm->str : "");
				if (a && a->type == EXL_JSON_STRING) {
					snprintf(o, 256, "%s", a->str);
				} else if (a && a->type == EXL_JSON_OBJECT) {
					/* Ollama's object: its city, enough to check */
					const struct exl_json *city = path(a, "city");
					snprintf(o, 256, "{\"city\":\"%s\"}", city && city->str ? city->str : "");
				}
				s->n_calls++;
			}
			if (fin && fin->type == EXL_JSON_STRING)
				snprintf(s->finish, sizeof(s->finish), "%s", fin->str);
			if (ollama && path(root, "done") && path(root, "done")->b)
				s->done = true;
			exl_json_free(d);
		}
		p += n + (e != NULL);
	}
	return 0;
}

/* ---- the daemon ---- */

static int write_file(const char *p, const char *text)
{
	FILE *f = fopen(p, "w");

	if (!f)
		return -1;
	int rc = fputs(text, f) < 0;
	return fclose(f) || rc ? -1 : 0;
}

/* gpt-oss's template: llama.cpp's copy, which the tests keep
 * (tests/data/templates, MIT-licensed llama.cpp test data) */
#define OSS_TEMPLATE "tests/data/templates/openai-gpt-oss-120b.jinja"

static int make_models(struct daemon *d, char *dir, size_t len)
{
	static const struct { const char *name, *tmpl; } m[] = {
		{ "hermes", hermes_tmpl }, { "llama3", llama3_tmpl }, { "mistral", mistral_tmpl },
		{ "think", think_tmpl }, { "r1", r1_tmpl }, { "magistral", magistral_tmpl },
	};
	const char *bd = getenv("EXLD_BUILDDIR") ? getenv("EXLD_BUILDDIR") : ".";
	char cmd[2048], t[512];

	snprintf(dir, len, "%s/models", d->dir);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s", dir);
	if (system(cmd))
		return -1;
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		snprintf(t, sizeof(t), "%s/%s.jinja", d->dir, m[i].name);
		if (write_file(t, m[i].tmpl))
			return -1;
		snprintf(cmd, sizeof(cmd), "%s/tests/tools/exld-mkmodel --dim 64 --layers 2 "
			 "--vocab-from %s/stories260K.gguf --chat-template %s -o %s/%s.gguf >/dev/null",
			 bd, h_models_dir(), t, dir, m[i].name);
		if (system(cmd))
			return -1;
	}
	/* gpt-oss: its own vocabulary holds the harmony markers */
	snprintf(cmd, sizeof(cmd), "%s/tests/tools/exld-mkmodel --arch gpt-oss --experts 4 --dim 64 "
		 "--layers 2 --heads 4 --ff 128 --chat-template %s/" OSS_TEMPLATE " -o %s/oss.gguf "
		 ">/dev/null", bd, getenv("EXLD_SRCDIR") ? getenv("EXLD_SRCDIR") : ".", dir);
	return system(cmd) ? -1 : 0;
}

/* ---- the checks ---- */

#define CALL_PARIS "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"

/* The non-streamed reply's one call: name, and its arguments' city (or
 * zone) as want. */
static int check_call(const struct exl_json *msg, int i, const char *name, const char *key,
		      const char *want)
{
	const struct exl_json *c = path(msg, "tool_calls");
	char p[32];

	if (!c || c->type != EXL_JSON_ARRAY || (size_t)i >= c->n) {
		fprintf(stderr, "no call %d\n", i);
		return -1;
	}
	c = c->v[i];
	snprintf(p, sizeof(p), "function.arguments");
	struct exl_json_doc *a = parse_text(path(c, p));
	const struct exl_json *v = a ? path(exl_json_root(a), key) : NULL;
	int ok = is_str(path(c, "type"), "function") && is_str(path(c, "function.name"), name) &&
		 path(c, "id") && path(c, "id")->len && v && (!want || is_str(v, want));
	if (!ok)
		fprintf(stderr, "call %d: want %s(%s = %s)\n", i, name, key, want ? want : "any");
	exl_json_free(a);
	return ok ? 0 : -1;
}

static int test_tools(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64], dir[512];
	struct exl_json_doc *doc = NULL;
	const struct exl_json *root, *msg;
	struct resp r = { 0 };
	struct streamed s;
	char *body = NULL;
	int ret = 1, st;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0 && make_models(&d, dir, sizeof(dir)) == 0, "prepare");
	const char *extra[] = { "--http", addr, "--models", dir, "--load", "hermes", "--load", "llama3",
				"--load", "mistral", NULL };
	REQUIRE(h_start(&d, NULL, extra) == 0, "daemon did not start");

	/* hermes, auto: text, then a call */
	body = chat_body("hermes", "Let me look.\n" CALL_PARIS, false, NULL);
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "hermes auto: %d", st);
	root = exl_json_root(doc);
	msg = path(root, "choices.0.message");
	CHECK(is_str(path(msg, "content"), "Let me look."), "content");
	CHECK(check_call(msg, 0, "get_weather", "city", "Paris") == 0);
	CHECK(path(msg, "tool_calls")->n == 1, "%zu calls", path(msg, "tool_calls")->n);
	CHECK(is_str(path(root, "choices.0.finish_reason"), "tool_calls"), "finish_reason");
	const struct exl_json *apt = path(root, "usage.prompt_tokens");
	double auto_prompt = apt ? apt->num : 0;
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;

	/* two calls; with parallel_tool_calls false only the first */
	body = chat_body("hermes", CALL_PARIS "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
			 "\"{\\\"zone\\\": \\\"CET\\\"}\"}\n</tool_call>", false, NULL);
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "hermes two calls: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(path(msg, "content") && path(msg, "content")->type == EXL_JSON_NULL, "content not null");
	CHECK(check_call(msg, 0, "get_weather", "city", "Paris") == 0);
	/* the model quoted the arguments: they come out as the object's text */
	CHECK(check_call(msg, 1, "get_time", "zone", "CET") == 0);
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	body = chat_body("hermes", CALL_PARIS "<tool_call>{\"name\": \"get_time\", \"arguments\": "
			 "{\"zone\": \"UTC\"}}</tool_call>", false, ", \"parallel_tool_calls\": false");
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "parallel_tool_calls false: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(path(msg, "tool_calls") && path(msg, "tool_calls")->n == 1, "not one call");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;

	/* no call, and a malformed one: all of it is content */
	static const char *const plain[] = { "It is sunny.", "<tool_call>\n{\"name\": broken" };
	for (int i = 0; i < 2; i++) {
		body = chat_body("hermes", plain[i], false, NULL);
		doc = post_json(&t, "/v1/chat/completions", body, &st);
		REQUIRE(doc && st == 200, "no call %d: %d", i, st);
		root = exl_json_root(doc);
		CHECK(is_str(path(root, "choices.0.message.content"), plain[i]), "content of %d", i);
		CHECK(!path(root, "choices.0.message.tool_calls"), "tool_calls in %d", i);
		CHECK(is_str(path(root, "choices.0.finish_reason"), "stop"), "finish of %d", i);
		exl_json_free(doc);
		doc = NULL;
		free(body);
		body = NULL;
	}

	/* streamed: the content before the call, then the call */
	body = chat_body("hermes", "Let me look.\n" CALL_PARIS, false, ", \"stream\": true");
	REQUIRE(post(&t, "/v1/chat/completions", body, &r) == 0 && r.status == 200, "stream: %d",
		r.status);
	REQUIRE(read_stream(r.raw, false, &s) == 0, "stream events");
	CHECK(!strcmp(s.content, "Let me look."), "streamed content '%s'", s.content);
	CHECK(s.n_calls == 1 && !strcmp(s.name[0], "get_weather") &&
	      !strcmp(s.args[0], "{\"city\":\"Paris\"}"), "streamed call %d %s %s", s.n_calls,
	      s.name[0], s.args[0]);
	CHECK(!strcmp(s.finish, "tool_calls") && s.done, "streamed finish '%s'", s.finish);
	resp_free(&r);
	free(body);
	body = NULL;
	/* a stream that only looked like a call's start at one point */
	body = chat_body("hermes", "a <tool and <tool_cal", false, ", \"stream\": true");
	REQUIRE(post(&t, "/v1/chat/completions", body, &r) == 0 && r.status == 200, "stream 2");
	REQUIRE(read_stream(r.raw, false, &s) == 0, "stream 2 events");
	CHECK(!strcmp(s.content, "a <tool and <tool_cal") && !s.n_calls && !strcmp(s.finish, "stop"),
	      "stream 2: '%s' %d %s", s.content, s.n_calls, s.finish);
	resp_free(&r);
	free(body);
	body = NULL;

	/* forced: required (either tool, each within its schema), named */
	body = chat_body("hermes", NULL, false, ", \"tool_choice\": \"required\", \"seed\": 5");
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "required: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	if (is_str(path(msg, "tool_calls.0.function.name"), "get_time"))
		CHECK(check_call(msg, 0, "get_time", "zone", NULL) == 0, "required");
	else
		CHECK(check_call(msg, 0, "get_weather", "city", NULL) == 0, "required");
	CHECK(is_str(path(exl_json_root(doc), "choices.0.finish_reason"), "tool_calls"), "required");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	body = chat_body("hermes", NULL, false, ", \"tool_choice\": {\"type\": \"function\", "
			 "\"function\": {\"name\": \"get_time\"}}, \"stream\": true");
	REQUIRE(post(&t, "/v1/chat/completions", body, &r) == 0 && r.status == 200, "named");
	REQUIRE(read_stream(r.raw, false, &s) == 0, "named events");
	CHECK(s.n_calls == 1 && !strcmp(s.name[0], "get_time") &&
	      (!strcmp(s.args[0], "{\"zone\":\"UTC\"}") || !strcmp(s.args[0], "{\"zone\":\"CET\"}")) &&
	      !s.content[0], "named: %d %s %s '%s'", s.n_calls, s.name[0], s.args[0], s.content);
	resp_free(&r);
	free(body);
	body = NULL;

	/* a schema written for OpenAI, with what exld's converter does not
	 * enforce and a reference into its $defs: still a call */
	REQUIRE(post(&t, "/v1/chat/completions", "{\"model\": \"hermes\", \"messages\": "
		     "[{\"role\": \"user\", \"content\": \"Mail Bo\"}], \"max_tokens\": 300, "
		     "\"seed\": 2, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"mail\", "
		     "\"parameters\": {\"type\": \"object\", \"properties\": {\"to\": {\"type\": "
		     "\"string\", \"format\": \"email\", \"maxLength\": 20}, \"prio\": {\"$ref\": "
		     "\"#/$defs/prio\"}}, \"required\": [\"to\", \"prio\"], \"$defs\": {\"prio\": "
		     "{\"oneOf\": [{\"const\": 1}, {\"const\": 2}]}}}}}], \"tool_choice\": "
		     "\"required\"}", &r) == 0 && r.status == 200 && strstr(r.body, "\"name\":\"mail\"") &&
		(strstr(r.body, "\\\"prio\\\":1}") || strstr(r.body, "\\\"prio\\\":2}")),
		"a loose schema: %d %s", r.status, r.body);
	resp_free(&r);

	/* none: the template is not told, and a call-shaped reply is text */
	body = chat_body("hermes", CALL_PARIS, false, ", \"tool_choice\": \"none\"");
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "none: %d", st);
	root = exl_json_root(doc);
	CHECK(is_str(path(root, "choices.0.message.content"), CALL_PARIS) &&
	      !path(root, "choices.0.message.tool_calls"), "none");
	const struct exl_json *pt = path(root, "usage.prompt_tokens");
	CHECK(pt && pt->num < auto_prompt - 100, "none: %g prompt tokens against %g with the "
	      "tools: they were rendered", pt ? pt->num : -1, auto_prompt);
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;

	/* llama3 and mistral forms */
	body = chat_body("llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
			 false, NULL);
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "llama3: %d", st);
	CHECK(check_call(path(exl_json_root(doc), "choices.0.message"), 0, "get_weather", "city",
			 "Oslo") == 0, "llama3");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	body = chat_body("mistral", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": "
			 "{\"city\": \"Rome\"}, \"id\": \"a1b2c3d4e\"}]", false, NULL);
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "mistral: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(check_call(msg, 0, "get_weather", "city", "Rome") == 0, "mistral");
	CHECK(is_str(path(msg, "tool_calls.0.id"), "a1b2c3d4e"), "mistral's id");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;

	/* Ollama: arguments as an object, streamed and not */
	body = chat_body("hermes", CALL_PARIS, true, ", \"stream\": false");
	doc = post_json(&t, "/api/chat", body, &st);
	REQUIRE(doc && st == 200, "ollama: %d", st);
	root = exl_json_root(doc);
	CHECK(is_str(path(root, "message.tool_calls.0.function.name"), "get_weather") &&
	      is_str(path(root, "message.tool_calls.0.function.arguments.city"), "Paris"), "ollama");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	body = chat_body("hermes", CALL_PARIS, true, NULL);
	REQUIRE(post(&t, "/api/chat", body, &r) == 0 && r.status == 200, "ollama stream");
	REQUIRE(read_stream(r.raw, true, &s) == 0, "ollama events");
	CHECK(s.n_calls == 1 && !strcmp(s.name[0], "get_weather") &&
	      !strcmp(s.args[0], "{\"city\":\"Paris\"}") && s.done, "ollama stream: %d %s %s",
	      s.n_calls, s.name[0], s.args[0]);
	resp_free(&r);
	free(body);
	body = NULL;

	/* refusals */
	static const struct { const char *more, *param; } bad[] = {
		{ ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}",
		  "tool_choice" },
		{ ", \"tool_choice\": \"sometimes\"", "tool_choice" },
		{ ", \"tool_choice\": \"required\", \"regex\": \"a\"", "tool_choice" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[64];
		body = chat_body("hermes", NULL, false, bad[i].more);
		snprintf(want, sizeof(want), "\"param\":\"%s\"", bad[i].param);
		REQUIRE(post(&t, "/v1/chat/completions", body, &r) == 0 && r.status == 400 &&
			strstr(r.body, want), "refusal %zu: %d %s", i, r.status, r.body);
		resp_free(&r);
		free(body);
		body = NULL;
	}
	REQUIRE(post(&t, "/v1/chat/completions", "{\"model\": \"hermes\", \"messages\": [], "
		     "\"tools\": [{\"type\": \"function\", \"function\": {}}]}", &r) == 0 &&
		r.status == 400 && strstr(r.body, "\"param\":\"tools[0].function.name\""),
		"a tool without a name: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/chat/completions", "{\"model\": \"hermes\", \"messages\": [], "
		     "\"tool_choice\": \"required\"}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "needs tools"), "required without tools: %d %s", r.status, r.body);
	resp_free(&r);

	/* an earlier call's arguments (OpenAI's text) reach the template as
	 * the object, as tojson expects */
	REQUIRE(post(&t, "/apply-template", "{\"model\": \"hermes\", \"messages\": [{\"role\": "
		     "\"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, "
		     "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": "
		     "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": "
		     "\"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"}]}", &r) == 0 &&
		r.status == 200, "apply-template: %d %s", r.status, r.body);
	CHECK(strstr(r.body, "\\\"arguments\\\": {\\\"city\\\": \\\"Paris\\\"}}"),
	      "the arguments rendered: %s", r.body);
	resp_free(&r);

	int code = h_stop(&d);
	REQUIRE(code == 0, "exit status %d", code);
	ret = check_failures ? 1 : 0;
out:
	exl_json_free(doc);
	free(body);
	body = NULL;
	resp_free(&r);
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

/* A chat body without tools: messages, the reply pinned, more members. */
static char *plain_body(const char *model, const char *reply, bool ollama, const char *more)
{
	struct buf b = { 0 };

	puts_(&b, "{\"model\": \"");
	puts_(&b, model);
	puts_(&b, "\", \"messages\": ");
	puts_(&b, user_msg);
	puts_(&b, ollama ? ", \"options\": {\"num_predict\": 300, \"regex\": " :
		       ", \"max_tokens\": 300, \"regex\": ");
	put_regex_of(&b, reply);
	if (ollama)
		puts_(&b, "}");
	puts_(&b, more ? more : "");
	puts_(&b, "}");
	return b.p;
}

/* gpt-oss's template renders each tool's description: these have one */
static const char oss_tools[] =
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
	"\"The weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": "
	"{\"city\": {\"type\": \"string\", \"maxLength\": 12}}, \"required\": [\"city\"]}}}, "
	"{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"description\": "
	"\"The time\", \"parameters\": {\"type\": \"object\", \"properties\": {\"zone\": "
	"{\"enum\": [\"UTC\", \"CET\"]}}, \"required\": [\"zone\"]}}}]";

/* A body for the gpt-oss model: its tools when asked, the reply pinned
 * (when not NULL), more members. */
static char *oss_body(const char *reply, bool ollama, bool tools, const char *more)
{
	struct buf b = { 0 };

	puts_(&b, "{\"model\": \"oss\", \"messages\": ");
	puts_(&b, user_msg);
	if (tools) {
		puts_(&b, ", \"tools\": ");
		puts_(&b, oss_tools);
	}
	puts_(&b, ollama ? ", \"options\": {\"num_predict\": 300, \"seed\": 1" :
		       ", \"max_tokens\": 300, \"seed\": 1");
	if (reply) {
		puts_(&b, ", \"regex\": ");
		put_regex_of(&b, reply);
	}
	if (ollama)
		puts_(&b, "}");
	puts_(&b, more ? more : "");
	puts_(&b, "}");
	return b.p;
}

#define OSS_ANALYSIS "<|channel|>analysis<|message|>They ask about Paris.<|end|><|start|>assistant"
#define OSS_REPLY OSS_ANALYSIS "<|channel|>final<|message|>It is sunny."
#define OSS_CALL "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant" \
	"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" \
	"{\"city\":\"Paris\"}"
#define OSS_CALL2 "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant" \
	" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}"

/* gpt-oss (harmony): the analysis messages are the reasoning, shown as
 * <think> blocks are, hidden otherwise; the final message is the content;
 * messages to functions.N are calls; no marker reaches a client. */
static int check_harmony(const struct target *t)
{
	struct exl_json_doc *doc = NULL;
	const struct exl_json *root, *msg;
	struct resp r = { 0 };
	struct streamed s;
	char *body = NULL;
	int st, ret = -1;

	/* OpenAI: reasoning_content and content, streamed and not */
	body = oss_body(OSS_REPLY, false, false, NULL);
	doc = post_json(t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "oss: %d", st);
	root = exl_json_root(doc);
	msg = path(root, "choices.0.message");
	CHECK(is_str(path(msg, "content"), "It is sunny.") &&
	      is_str(path(msg, "reasoning_content"), "They ask about Paris.") &&
	      is_str(path(root, "choices.0.finish_reason"), "stop"), "oss");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = oss_body(OSS_REPLY, false, false, ", \"stream\": true");
	REQUIRE(post(t, "/v1/chat/completions", body, &r) == 0 && r.status == 200, "oss stream");
	REQUIRE(read_stream(r.raw, false, &s) == 0, "oss stream events");
	const char *last_r = r.raw, *p;
	while ((p = strstr(last_r + 1, "\"reasoning_content\"")))
		last_r = p;
	p = strstr(r.raw, "\"content\":\"I");
	CHECK(!strcmp(s.content, "It is sunny.") && !strcmp(s.reasoning, "They ask about Paris.") &&
	      !strcmp(s.finish, "stop") && p && last_r < p && !strstr(r.raw, "<|"),
	      "oss streamed: '%s' '%s'", s.reasoning, s.content);
	resp_free(&r);
	free(body);
	/* reasoning_format none: hidden, not inlined with the markers */
	body = oss_body(OSS_REPLY, false, false, ", \"reasoning_format\": \"none\"");
	doc = post_json(t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "oss none: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(is_str(path(msg, "content"), "It is sunny.") && !path(msg, "reasoning_content"),
	      "oss none");
	exl_json_free(doc);
	doc = NULL;
	free(body);

	/* a call, the recipient after the channel; then before it, streamed */
	body = oss_body(OSS_CALL, false, true, NULL);
	doc = post_json(t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "oss call: %d", st);
	root = exl_json_root(doc);
	msg = path(root, "choices.0.message");
	CHECK(path(msg, "content") && path(msg, "content")->type == EXL_JSON_NULL &&
	      is_str(path(msg, "reasoning_content"), "Need the weather.") &&
	      is_str(path(root, "choices.0.finish_reason"), "tool_calls"), "oss call");
	CHECK(check_call(msg, 0, "get_weather", "city", "Paris") == 0 &&
	      path(msg, "tool_calls")->n == 1);
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = oss_body(OSS_CALL2, false, true, ", \"stream\": true");
	REQUIRE(post(t, "/v1/chat/completions", body, &r) == 0 && r.status == 200, "oss call stream");
	REQUIRE(read_stream(r.raw, false, &s) == 0, "oss call events");
	CHECK(s.n_calls == 1 && !strcmp(s.name[0], "get_weather") &&
	      !strcmp(s.args[0], "{\"city\":\"Paris\"}") && !strcmp(s.finish, "tool_calls") &&
	      !strcmp(s.reasoning, "Need the weather.") && !s.content[0] && !strstr(r.raw, "<|"),
	      "oss call streamed: %d '%s' '%s' '%s' '%s'", s.n_calls, s.name[0], s.args[0], s.finish,
	      s.content);
	resp_free(&r);
	free(body);
	/* Ollama's, streamed */
	body = oss_body(OSS_CALL2, true, true, NULL);
	REQUIRE(post(t, "/api/chat", body, &r) == 0 && r.status == 200, "oss ollama call");
	REQUIRE(read_stream(r.raw, true, &s) == 0, "oss ollama call events");
	CHECK(s.n_calls == 1 && !strcmp(s.name[0], "get_weather") &&
	      !strcmp(s.args[0], "{\"city\":\"Paris\"}") && s.done && !s.content[0] && !s.reasoning[0],
	      "oss ollama call: %d '%s' '%s'", s.n_calls, s.args[0], s.content);
	resp_free(&r);
	free(body);
	/* a forced call: one object, in a final message the prompt opens */
	body = oss_body(NULL, false, true, ", \"tool_choice\": {\"type\": \"function\", "
			"\"function\": {\"name\": \"get_time\"}}");
	doc = post_json(t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "oss forced: %d", st);
	root = exl_json_root(doc);
	msg = path(root, "choices.0.message");
	CHECK(check_call(msg, 0, "get_time", "zone", NULL) == 0 &&
	      is_str(path(root, "choices.0.finish_reason"), "tool_calls"), "oss forced");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	/* a JSON reply: a final message's body too */
	doc = post_json(t, "/v1/chat/completions", "{\"model\": \"oss\", \"messages\": [{\"role\": "
			"\"user\", \"content\": \"x\"}], \"max_tokens\": 200, \"seed\": 1, "
			"\"response_format\": {\"type\": \"json_object\"}}", &st);
	REQUIRE(doc && st == 200, "oss json: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	struct exl_json_doc *obj = parse_text(path(msg, "content"));
	CHECK(obj && exl_json_root(obj)->type == EXL_JSON_OBJECT && !path(msg, "reasoning_content"),
	      "oss json: not an object");
	exl_json_free(obj);
	exl_json_free(doc);
	doc = NULL;

	/* Ollama: thinking with think true; hidden by default and with
	 * think false; templated generate */
	body = oss_body(OSS_REPLY, true, false, ", \"stream\": false, \"think\": true");
	doc = post_json(t, "/api/chat", body, &st);
	REQUIRE(doc && st == 200, "oss ollama think: %d", st);
	root = exl_json_root(doc);
	CHECK(is_str(path(root, "message.content"), "It is sunny.") &&
	      is_str(path(root, "message.thinking"), "They ask about Paris."), "oss ollama think");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = oss_body(OSS_REPLY, true, false, ", \"stream\": false");
	doc = post_json(t, "/api/chat", body, &st);
	REQUIRE(doc && st == 200, "oss ollama default: %d", st);
	root = exl_json_root(doc);
	CHECK(is_str(path(root, "message.content"), "It is sunny.") && !path(root, "message.thinking"),
	      "oss ollama default");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = oss_body(OSS_REPLY, true, false, ", \"think\": false");
	REQUIRE(post(t, "/api/chat", body, &r) == 0 && r.status == 200, "oss think false");
	REQUIRE(read_stream(r.raw, true, &s) == 0, "oss think false events");
	CHECK(!strcmp(s.content, "It is sunny.") && !s.reasoning[0] && s.done,
	      "oss think false: '%s' '%s'", s.reasoning, s.content);
	resp_free(&r);
	free(body);
	body = NULL;
	REQUIRE(post(t, "/api/generate", "{\"model\": \"oss\", \"prompt\": \"Weather?\", "
		     "\"think\": \"low\", \"stream\": false, \"options\": {\"num_predict\": 100, "
		     "\"regex\": \"<\\\\|channel\\\\|>analysis<\\\\|message\\\\|>hm<\\\\|end\\\\|>"
		     "<\\\\|start\\\\|>assistant<\\\\|channel\\\\|>final<\\\\|message\\\\|>Sunny\\\\.\"}}",
		     &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"response\":\"Sunny.\",\"thinking\":\"hm\""), "oss generate: %d %s",
		r.status, r.body);
	resp_free(&r);

	/* reasoning_effort reaches the template (chat_template_kwargs win);
	 * an earlier call's arguments reach it as an object */
	static const char *const effort[][2] = {
		{ "", "Reasoning: medium" },
		{ ", \"reasoning_effort\": \"high\"", "Reasoning: high" },
		{ ", \"reasoning_effort\": \"minimal\"", "Reasoning: low" },
		{ ", \"reasoning_effort\": \"high\", \"chat_template_kwargs\": {\"reasoning_effort\": "
		  "\"low\"}", "Reasoning: low" },
	};
	for (size_t i = 0; i < sizeof(effort) / sizeof(effort[0]); i++) {
		char b[512];
		snprintf(b, sizeof(b), "{\"model\": \"oss\", \"messages\": [{\"role\": \"user\", "
			 "\"content\": \"Hi\"}]%s}", effort[i][0]);
		REQUIRE(post(t, "/apply-template", b, &r) == 0 && r.status == 200 &&
			strstr(r.body, effort[i][1]), "effort %zu: %d %s", i, r.status, r.body);
		resp_free(&r);
	}
	REQUIRE(post(t, "/v1/chat/completions", "{\"model\": \"oss\", \"messages\": [], "
		     "\"reasoning_effort\": \"extreme\"}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "\"param\":\"reasoning_effort\""), "effort refused: %d %s", r.status,
		r.body);
	resp_free(&r);
	REQUIRE(post(t, "/apply-template", "{\"model\": \"oss\", \"messages\": [{\"role\": "
		     "\"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, "
		     "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": "
		     "\"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]}, {\"role\": "
		     "\"tool\", \"content\": \"sunny\"}]}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "<|start|>assistant to=functions.get_weather<|channel|>commentary "
		       "json<|message|>{\\\"city\\\": \\\"Paris\\\"}<|call|>"), "oss history: %d %s",
		r.status, r.body);
	resp_free(&r);
	REQUIRE(post(t, "/api/show", "{\"model\": \"oss\"}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"capabilities\":[\"completion\",\"tools\",\"thinking\"]"),
		"show oss: %s", r.body);
	resp_free(&r);
	ret = 0;
out:
	exl_json_free(doc);
	free(body);
	resp_free(&r);
	return ret;
}

static int test_reasoning(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64], dir[512];
	struct exl_json_doc *doc = NULL;
	const struct exl_json *root, *msg;
	struct resp r = { 0 };
	struct streamed s;
	char *body = NULL;
	int ret = 1, st;
	static const char reply[] = "<think>\nThey ask about Paris.\n</think>\n\nIt is sunny.";

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0 && make_models(&d, dir, sizeof(dir)) == 0, "prepare");
	const char *extra[] = { "--http", addr, "--models", dir, "--load", "think", "--load", "r1",
				"--load", "hermes", "--load", "magistral", "--load", "oss", NULL };
	REQUIRE(h_start(&d, NULL, extra) == 0, "daemon did not start");

	/* OpenAI: apart by default, where the template writes <think> */
	body = plain_body("think", reply, false, NULL);
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "think: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(is_str(path(msg, "content"), "It is sunny.") &&
	      is_str(path(msg, "reasoning_content"), "They ask about Paris."), "think");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	body = plain_body("think", reply, false, ", \"stream\": true");
	REQUIRE(post(&t, "/v1/chat/completions", body, &r) == 0 && r.status == 200, "think stream");
	REQUIRE(read_stream(r.raw, false, &s) == 0, "think stream events");
	CHECK(!strcmp(s.content, "It is sunny.") && !strcmp(s.reasoning, "They ask about Paris.") &&
	      !strcmp(s.finish, "stop"), "think streamed: '%s' '%s'", s.reasoning, s.content);
	resp_free(&r);
	free(body);
	body = NULL;
	/* reasoning_format none: left in the content */
	body = plain_body("think", reply, false, ", \"reasoning_format\": \"none\"");
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "none: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(is_str(path(msg, "content"), reply) && !path(msg, "reasoning_content"), "none");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	/* a reply without the block is all content; a stream that ends in it
	 * is all reasoning */
	body = plain_body("think", "Sunny. <think> is a tag.", false, ", \"stream\": true");
	REQUIRE(post(&t, "/v1/chat/completions", body, &r) == 0 && r.status == 200, "no block");
	REQUIRE(read_stream(r.raw, false, &s) == 0, "no block events");
	CHECK(!strcmp(s.content, "Sunny. <think> is a tag.") && !s.reasoning[0], "no block: '%s' '%s'",
	      s.reasoning, s.content);
	resp_free(&r);
	free(body);
	body = NULL;

	/* Mistral's [THINK] block, whole and streamed */
	body = plain_body("magistral", "[THINK]They ask about Paris.[/THINK]It is sunny.", false,
			  NULL);
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "magistral: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(is_str(path(msg, "content"), "It is sunny.") &&
	      is_str(path(msg, "reasoning_content"), "They ask about Paris."), "magistral");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	body = plain_body("magistral", "[THINK]They ask about Paris.[/THINK]It is sunny.", true,
			  ", \"think\": true");
	REQUIRE(post(&t, "/api/chat", body, &r) == 0 && r.status == 200, "magistral stream");
	REQUIRE(read_stream(r.raw, true, &s) == 0, "magistral stream events");
	CHECK(!strcmp(s.content, "It is sunny.") && !strcmp(s.reasoning, "They ask about Paris."),
	      "magistral streamed: '%s' '%s'", s.reasoning, s.content);
	resp_free(&r);
	free(body);
	body = NULL;

	/* R1: the prompt opened the block */
	body = plain_body("r1", "Paris, so weather.\n</think>\nSunny.", false, NULL);
	doc = post_json(&t, "/v1/chat/completions", body, &st);
	REQUIRE(doc && st == 200, "r1: %d", st);
	msg = path(exl_json_root(doc), "choices.0.message");
	CHECK(is_str(path(msg, "content"), "Sunny.") &&
	      is_str(path(msg, "reasoning_content"), "Paris, so weather."), "r1");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;

	/* a reply held to JSON is the content, though the prompt opened the
	 * block */
	REQUIRE(post(&t, "/v1/chat/completions", "{\"model\": \"r1\", \"messages\": [{\"role\": "
		     "\"user\", \"content\": \"x\"}], \"max_tokens\": 200, \"seed\": 1, \"response_format\": "
		     "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"object\", "
		     "\"properties\": {\"a\": {\"enum\": [1, 2]}}, \"required\": [\"a\"], "
		     "\"additionalProperties\": false}}}}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"content\":\"") && strstr(r.body, "\\\"a\\\": ") &&
		!strstr(r.body, "reasoning_content"), "r1 with a schema: %d %s", r.status, r.body);
	resp_free(&r);

	/* Ollama: apart when asked (think), streamed and not */
	body = plain_body("think", reply, true, ", \"stream\": false, \"think\": true");
	doc = post_json(&t, "/api/chat", body, &st);
	REQUIRE(doc && st == 200, "ollama think: %d", st);
	root = exl_json_root(doc);
	CHECK(is_str(path(root, "message.content"), "It is sunny.") &&
	      is_str(path(root, "message.thinking"), "They ask about Paris."), "ollama think");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;
	body = plain_body("think", reply, true, ", \"think\": true");
	REQUIRE(post(&t, "/api/chat", body, &r) == 0 && r.status == 200, "ollama think stream");
	REQUIRE(read_stream(r.raw, true, &s) == 0, "ollama think events");
	CHECK(!strcmp(s.content, "It is sunny.") && !strcmp(s.reasoning, "They ask about Paris.") &&
	      s.done, "ollama think streamed: '%s' '%s'", s.reasoning, s.content);
	resp_free(&r);
	free(body);
	body = NULL;
	body = plain_body("think", reply, true, ", \"stream\": false");
	doc = post_json(&t, "/api/chat", body, &st);
	REQUIRE(doc && st == 200, "ollama default: %d", st);
	CHECK(is_str(path(exl_json_root(doc), "message.content"), reply), "ollama default");
	exl_json_free(doc);
	doc = NULL;
	free(body);
	body = NULL;

	/* Ollama's templated generate too */
	REQUIRE(post(&t, "/api/generate", "{\"model\": \"think\", \"prompt\": \"Weather?\", "
		     "\"think\": true, \"stream\": false, \"options\": {\"num_predict\": 100, "
		     "\"regex\": \"<think>hm</think>Sunny\\\\.\"}}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"response\":\"Sunny.\",\"thinking\":\"hm\""), "generate think: %d %s",
		r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/generate", "{\"model\": \"think\", \"prompt\": \"Weather?\", "
		     "\"think\": true, \"options\": {\"num_predict\": 100, "
		     "\"regex\": \"<think>hm</think>Sunny\\\\.\"}}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"response\":\"\",\"thinking\":\"h") && strstr(r.body, "\"done\":true") &&
		!strstr(r.body, "think>"), "generate think streamed: %d %s", r.status, r.raw);
	resp_free(&r);

	/* Ollama's clients read what a model can do */
	REQUIRE(post(&t, "/api/show", "{\"model\": \"think\"}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"capabilities\":[\"completion\",\"thinking\"]"), "show think: %s",
		r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/show", "{\"model\": \"hermes\"}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"capabilities\":[\"completion\",\"tools\"]"), "show hermes: %s",
		r.body);
	resp_free(&r);

	/* think false and chat_template_kwargs reach the template */
	REQUIRE(post(&t, "/apply-template", "{\"model\": \"think\", \"messages\": [{\"role\": "
		     "\"user\", \"content\": \"Hi\"}], \"chat_template_kwargs\": {\"enable_thinking\": "
		     "false}}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "assistant<think>\\n\\n</think>"), "kwargs: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/chat", "{\"model\": \"think\", \"messages\": [{\"role\": \"user\", "
		     "\"content\": \"Hi\"}], \"think\": false, \"stream\": false, \"options\": "
		     "{\"num_predict\": 2}}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"prompt_eval_count\""), "think false: %d %s", r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/chat/completions", "{\"model\": \"think\", \"messages\": [], "
		     "\"chat_template_kwargs\": {\"messages\": 1}}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "\"param\":\"chat_template_kwargs\""), "kwargs refused: %d %s",
		r.status, r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/v1/chat/completions", "{\"model\": \"think\", \"messages\": [], "
		     "\"reasoning_format\": \"brief\"}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "\"param\":\"reasoning_format\""), "reasoning_format refused: %d %s",
		r.status, r.body);
	resp_free(&r);

	REQUIRE(check_harmony(&t) == 0, "harmony");

	int code = h_stop(&d);
	REQUIRE(code == 0, "exit status %d", code);
	ret = check_failures ? 1 : 0;
out:
	exl_json_free(doc);
	free(body);
	body = NULL;
	resp_free(&r);
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

/* The ids of an array member of a reply, as a JSON array's text (into
 * buf); the count, -1 when the member is not an array of numbers. */
static int ids_text(const struct exl_json *a, char *buf, size_t len, size_t *at)
{
	if (!a || a->type != EXL_JSON_ARRAY)
		return -1;
	for (size_t i = 0; i < a->n; i++) {
		if (a->v[i]->type != EXL_JSON_NUMBER || *at + 16 >= len)
			return -1;
		*at += (size_t)snprintf(buf + *at, len - *at, "%s%.0f", *at && buf[*at - 1] != '[' ?
					", " : "", a->v[i]->num);
	}
	return (int)a->n;
}

/* Fill-in-the-middle over OpenAI's completions and Ollama's generate, on
 * a model with StarCoder's vocabulary (its <fim_prefix>, <fim_suffix> and
 * <fim_middle>): the same greedy text as the prompt spelled out in ids,
 * PRE prefix SUF suffix MID; and refused by name on a model without the
 * tokens. */
static int test_fim(void)
{
	struct daemon d;
	struct target t = { .port = free_port() };
	char addr[64], dir[512], cmd[2048], ids[2048], body[4096], want[512];
	struct exl_json_doc *doc = NULL;
	struct resp r = { 0 };
	const char *bd = getenv("EXLD_BUILDDIR") ? getenv("EXLD_BUILDDIR") : ".";
	int ret = 1, st, n_ids = 0;
	size_t at = 0;
	static const char prefix[] = "def add(a, b):\\n    ", suffix[] = "\\n    return c\\n";
	static const char *const parts[3][2] = {
		{ "<fim_prefix>", "true" }, { prefix, "false" }, { "<fim_suffix>", "true" },
	};

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", t.port);
	REQUIRE(h_prepare(&d) == 0, "prepare");
	snprintf(dir, sizeof(dir), "%s/models", d.dir);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s && ln -s %s/stories260K.gguf %s/ && "
		 "%s/tests/tools/exld-mkmodel --dim 64 --layers 2 --vocab-from "
		 "%s/vocab/ggml-vocab-starcoder.gguf -o %s/coder.gguf >/dev/null", dir,
		 h_models_dir(), dir, bd, h_models_dir(), dir);
	REQUIRE(system(cmd) == 0, "models");
	const char *extra[] = { "--http", addr, "--models", dir, "--load", "coder", "--load",
				"stories260K", NULL };
	REQUIRE(h_start(&d, NULL, extra) == 0, "daemon did not start");

	/* the prompt in ids: PRE prefix SUF suffix MID, each from /tokenize */
	ids[at++] = '[';
	for (int k = 0; k < 5; k++) {
		const char *text = k < 3 ? parts[k][0] : k == 3 ? suffix : "<fim_middle>";
		const char *special = k < 3 ? parts[k][1] : k == 3 ? "false" : "true";

		snprintf(body, sizeof(body), "{\"model\": \"coder\", \"content\": \"%s\", "
			 "\"parse_special\": %s}", text, special);
		doc = post_json(&t, "/tokenize", body, &st);
		REQUIRE(doc && st == 200, "tokenize %d: %d", k, st);
		int n = ids_text(path(exl_json_root(doc), "tokens"), ids, sizeof(ids), &at);
		REQUIRE(n > 0 && (!strcmp(special, "false") || n == 1), "tokenize %d: %d ids", k, n);
		n_ids += n;
		exl_json_free(doc);
		doc = NULL;
	}
	snprintf(ids + at, sizeof(ids) - at, "]");

	snprintf(body, sizeof(body), "{\"model\": \"coder\", \"prompt\": %s, \"max_tokens\": 8, "
		 "\"temperature\": 0}", ids);
	doc = post_json(&t, "/v1/completions", body, &st);
	REQUIRE(doc && st == 200, "ids: %d", st);
	const struct exl_json *text = path(exl_json_root(doc), "choices.0.text");
	REQUIRE(text && text->type == EXL_JSON_STRING && text->len < sizeof(want), "ids: text");
	snprintf(want, sizeof(want), "%s", text->str);
	exl_json_free(doc);
	doc = NULL;

	/* OpenAI: prompt and suffix */
	snprintf(body, sizeof(body), "{\"model\": \"coder\", \"prompt\": \"%s\", \"suffix\": \"%s\", "
		 "\"max_tokens\": 8, \"temperature\": 0}", prefix, suffix);
	doc = post_json(&t, "/v1/completions", body, &st);
	REQUIRE(doc && st == 200, "openai suffix: %d", st);
	const struct exl_json *used = path(exl_json_root(doc), "usage.prompt_tokens");
	CHECK(is_str(path(exl_json_root(doc), "choices.0.text"), want) && used &&
	      used->type == EXL_JSON_NUMBER && (int)used->num == n_ids,
	      "openai suffix: not the text of the ids (%d of them), '%s'", n_ids, want);
	exl_json_free(doc);
	doc = NULL;

	/* Ollama: generate with a suffix takes the prompt as is */
	snprintf(body, sizeof(body), "{\"model\": \"coder\", \"prompt\": \"%s\", \"suffix\": \"%s\", "
		 "\"stream\": false, \"options\": {\"num_predict\": 8, \"temperature\": 0}}", prefix,
		 suffix);
	doc = post_json(&t, "/api/generate", body, &st);
	REQUIRE(doc && st == 200, "ollama suffix: %d", st);
	used = path(exl_json_root(doc), "prompt_eval_count");
	CHECK(is_str(path(exl_json_root(doc), "response"), want) && used &&
	      (int)used->num == n_ids, "ollama suffix: not the text of the ids, '%s'", want);
	exl_json_free(doc);
	doc = NULL;
	printf("  fill-in-the-middle: %d prompt tokens, '%s' from ids, OpenAI and Ollama\n", n_ids,
	       want);

	/* Ollama's clients see the capability */
	REQUIRE(post(&t, "/api/show", "{\"model\": \"coder\"}", &r) == 0 && r.status == 200 &&
		strstr(r.body, "\"capabilities\":[\"completion\",\"insert\"]"), "show coder: %s",
		r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/show", "{\"model\": \"stories260K\"}", &r) == 0 &&
		r.status == 200 && strstr(r.body, "\"capabilities\":[\"completion\"]"),
		"show stories260K: %s", r.body);
	resp_free(&r);

	/* refusals: a model without the tokens, a suffix not a string */
	REQUIRE(post(&t, "/v1/completions", "{\"model\": \"stories260K\", \"prompt\": \"a\", "
		     "\"suffix\": \"b\"}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "no fill-in-the-middle tokens"), "no fim tokens: %d %s", r.status,
		r.body);
	resp_free(&r);
	REQUIRE(post(&t, "/api/generate", "{\"model\": \"coder\", \"prompt\": \"a\", "
		     "\"suffix\": 1}", &r) == 0 && r.status == 400 &&
		strstr(r.body, "suffix"), "suffix 1: %d %s", r.status, r.body);
	resp_free(&r);

	int code = h_stop(&d);
	REQUIRE(code == 0, "exit status %d", code);
	ret = check_failures ? 1 : 0;
out:
	exl_json_free(doc);
	resp_free(&r);
	h_stop(&d);
	h_cleanup(&d);
	return ret;
}

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "";

	if (!h_models_dir()) {
		printf("SKIP: no test models (EXLD_MODELS)\n");
		return SKIP;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(which, "tools"))
		return test_tools();
	if (!strcmp(which, "reasoning"))
		return test_reasoning();
	if (!strcmp(which, "fim"))
		return test_fim();
	fprintf(stderr, "usage: test_http_tools tools|reasoning|fim\n");
	return 2;
}
