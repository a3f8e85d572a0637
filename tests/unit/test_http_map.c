/* The HTTP front's body mapping (daemon/server/http/http_map.c) and JSON
 * writer: what each OpenAI and Ollama field becomes in exld's settings, the
 * refusals and the field they name, the template context, the listener
 * addresses of the config, and strings the writer must escape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/chat_template.h"
#include "common/json_parse.h"
#include "common/utf8.h"
#include "daemon/server/http/http_map.h"
#include "daemon/server/http/json_out.h"
#include "daemon/server/wire/config.h"
#include "tests/common/check.h"

struct mapped {
	struct exl_json_doc *doc;
	msgpack_zone *zone;
	struct exl_http_gen g;
	struct exl_http_err e;
	int rc;
};

static void map(struct mapped *m, enum exl_http_api api, const char *body)
{
	char err[256];

	m->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
	m->doc = exl_json_parse(body, strlen(body), err, sizeof(err));
	if (!m->doc) {
		fprintf(stderr, "FAIL: test body is not JSON: %s\n", err);
		check_failures++;
		m->rc = -2;
		return;
	}
	m->rc = exl_http_map_generate(api, exl_json_root(m->doc), m->zone, &m->g, &m->e);
}

static void unmap(struct mapped *m)
{
	exl_json_free(m->doc);
	msgpack_zone_free(m->zone);
}

static void test_openai(void)
{
	struct mapped m;

	map(&m, EXL_HTTP_OAI_COMPLETION, "{\"model\": \"stories260K\", \"prompt\": \"Once\", "
	    "\"max_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9, \"stop\": \"END\", "
	    "\"seed\": 11, \"n\": 2, \"logit_bias\": {\"42\": -100}, \"logprobs\": 3, "
	    "\"presence_penalty\": 0.25, \"min_p\": 0.1, \"top_k\": 5, \"stream\": true, "
	    "\"stream_options\": {\"include_usage\": true}, \"user\": null}");
	CHECK(m.rc == 0, "completion refused: %s", m.e.msg);
	if (!m.rc) {
		const struct exl_gen_settings *s = &m.g.gen.s;
		CHECK(!strcmp(m.g.model, "stories260K"), "model %s", m.g.model);
		CHECK(m.g.n_prompts == 1 && m.g.prompts[0].len == 4 &&
		      !memcmp(m.g.prompts[0].text, "Once", 4), "prompt");
		CHECK(s->max_new_tokens == 7 && m.g.max_tokens_set, "max_tokens %d", s->max_new_tokens);
		CHECK(fabsf(s->sampling.temperature - 0.5f) < 1e-6 && fabsf(s->sampling.top_p - 0.9f) < 1e-6,
		      "temperature, top_p");
		CHECK(s->n_stop_strings == 1 && !strcmp(s->stop_strings[0], "END"), "stop");
		CHECK(s->has_seed && s->seed == 11, "seed");
		CHECK(m.g.n == 2, "n %d", m.g.n);
		CHECK(s->sampling.n_bias == 1 && s->sampling.bias[0].id == 42 &&
		      s->sampling.bias[0].bias == -100, "logit_bias");
		CHECK(m.g.logprobs == 3 && s->return_probs && s->return_top_k == 3, "logprobs");
		CHECK(fabsf(s->sampling.pres_pen - 0.25f) < 1e-6 && s->sampling.top_k == 5 &&
		      fabsf(s->sampling.min_p - 0.1f) < 1e-6, "penalties, exld samplers");
		CHECK(m.g.stream && m.g.include_usage && m.g.gen.stream == EXL_STREAM_SOCKET, "stream");
		CHECK(s->completion_only, "completion_only");
	}
	unmap(&m);

	/* OpenAI's default length, token-id prompts, several prompts */
	map(&m, EXL_HTTP_OAI_COMPLETION, "{\"prompt\": [[1, 2], \"two\", [3]]}");
	CHECK(m.rc == 0 && m.g.n_prompts == 3 && m.g.prompts[0].n_ids == 2 &&
	      m.g.prompts[1].text && m.g.gen.s.max_new_tokens == 16 && !m.g.stream &&
	      m.g.gen.stream == EXL_STREAM_NONE && m.g.gen.return_text == 1, "prompts: %s", m.e.msg);
	unmap(&m);

	/* speculative decoding and beam search under the protocol's names */
	map(&m, EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"ngram_draft\": 3, "
	    "\"draft_tokens\": 6}");
	CHECK(m.rc == 0 && m.g.gen.s.ngram_draft == 3 && m.g.gen.s.draft_tokens == 6,
	      "ngram_draft, draft_tokens: %s", m.e.msg);
	unmap(&m);
	map(&m, EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"num_beams\": 4, "
	    "\"length_penalty\": 0.5}");
	CHECK(m.rc == 0 && m.g.gen.s.num_beams == 4 &&
	      fabsf(m.g.gen.s.length_penalty - 0.5f) < 1e-6, "num_beams, length_penalty: %s",
	      m.e.msg);
	unmap(&m);

	/* refusals name the field as written */
	static const struct {
		enum exl_http_api api;
		const char *body, *param, *msg;
	} bad[] = {
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"top_k\": -3}", "top_k",
		  "wants an integer in [0, 2147483647]" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 1.5}", "max_tokens",
		  "wants an integer" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature",
		  "got a string" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"max_tokens\": 3}", "prompt", "missing" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"num_beams\": 17}", "num_beams",
		  "[0, 16]" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"n\": 17}", "n", "[1, 16]" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": [\"a\", \"b\"], \"n\": 9}", "n", "over the limit" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"grammar\": \"root ::= \\\"a\\\"\", "
		  "\"response_format\": {\"type\": \"json_object\"}}", "response_format", "at most one" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"x\": 1}}", "logit_bias",
		  "wants a token id" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\\u0000b\"]}", "stop", "NUL" },
		{ EXL_HTTP_OAI_COMPLETION, "{\"model\": \"../etc\", \"prompt\": \"x\"}", "model",
		  "not a model name" },
		{ EXL_HTTP_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
		  "\"image_url\"}]}]}", "messages[0].content", "not supported" },
		{ EXL_HTTP_OAI_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role",
		  "wants a string" },
		{ EXL_HTTP_OAI_CHAT, "{\"messages\": [], \"top_logprobs\": 2}", "top_logprobs",
		  "needs logprobs" },
		{ EXL_HTTP_OLLAMA_GENERATE, "{\"prompt\": \"x\", \"options\": {\"num_predict\": \"x\"}}",
		  "options.num_predict", "wants an integer" },
		{ EXL_HTTP_OLLAMA_GENERATE, "{\"prompt\": \"x\", \"template\": \"{{ .Prompt }}\"}",
		  "template", "Go templates" },
		{ EXL_HTTP_OLLAMA_CHAT, "{\"messages\": [], \"options\": {\"mirostat\": 1}}",
		  "options.mirostat", "0 or 2" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		map(&m, bad[i].api, bad[i].body);
		CHECK(m.rc == -1, "case %zu accepted", i);
		CHECK(!strcmp(m.e.param, bad[i].param), "case %zu: param %s, want %s", i, m.e.param,
		      bad[i].param);
		CHECK(strstr(m.e.msg, bad[i].msg), "case %zu: message %s, want %s", i, m.e.msg,
		      bad[i].msg);
		unmap(&m);
	}
}

static void test_chat_and_ollama(void)
{
	struct mapped m;
	char err[256];

	/* an assistant's reasoning_content, sent back, is thinking too */
	map(&m, EXL_HTTP_OAI_CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"A\", "
	    "\"reasoning_content\": \"R\"}, {\"role\": \"assistant\", \"content\": \"B\", "
	    "\"reasoning_content\": \"R\", \"thinking\": \"T\"}]}");
	CHECK(m.rc == 0 && !strcmp(m.g.messages_json, "[{\"role\":\"assistant\",\"content\":\"A\","
	      "\"reasoning_content\":\"R\",\"thinking\":\"R\"},{\"role\":\"assistant\","
	      "\"content\":\"B\",\"reasoning_content\":\"R\",\"thinking\":\"T\"}]"), "messages %s",
	      m.rc ? m.e.msg : m.g.messages_json);
	unmap(&m);

	map(&m, EXL_HTTP_OAI_CHAT, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be\"}, "
	    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi \"}, "
	    "{\"type\": \"text\", \"text\": \"there\"}], \"name\": \"bob\"}], "
	    "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", "
	    "\"schema\": {\"type\": \"integer\"}}}, \"max_completion_tokens\": 3}");
	CHECK(m.rc == 0, "chat refused: %s", m.e.msg);
	if (!m.rc) {
		CHECK(m.g.chat && !strcmp(m.g.messages_json, "[{\"role\":\"system\",\"content\":\"Be\"},"
		      "{\"role\":\"user\",\"content\":\"Hi there\",\"name\":\"bob\"}]"), "messages %s",
		      m.g.messages_json);
		CHECK(m.g.gen.s.json_schema && !strcmp(m.g.gen.s.json_schema, "{\"type\":\"integer\"}"),
		      "schema");
		CHECK(!m.g.max_tokens_set || m.g.gen.s.max_new_tokens == 3, "length");
		size_t len = 0;
		char *ctx = exl_http_chat_context(&m.g, "<s>", 3, "</s>", 4, &len);
		CHECK(ctx && strstr(ctx, "\"add_generation_prompt\":true") &&
		      strstr(ctx, "\"bos_token\":\"<s>\""), "context %s", ctx ? ctx : "");
		char *out = NULL;
		size_t olen = 0;
		CHECK(ctx && exl_chat_template_render(exl_chat_template_chatml,
						      strlen(exl_chat_template_chatml), ctx, len,
						      &out, &olen, err, sizeof(err)) == 0 &&
		      !strcmp(out, "<|im_start|>system\nBe<|im_end|>\n<|im_start|>user\nHi there"
			      "<|im_end|>\n<|im_start|>assistant\n"), "rendered %s", out ? out : err);
		free(out);
		free(ctx);
	}
	unmap(&m);

	map(&m, EXL_HTTP_OLLAMA_GENERATE, "{\"model\": \"stories260K:latest\", \"prompt\": \"Hi\", "
	    "\"system\": \"S\", \"format\": \"json\", \"options\": {\"num_predict\": 5, "
	    "\"repeat_penalty\": 1.2, \"repeat_last_n\": 32, \"typical_p\": 0.8, \"num_ctx\": 4096, "
	    "\"stop\": [\"\\n\"]}}");
	CHECK(m.rc == 0, "ollama generate refused: %s", m.e.msg);
	if (!m.rc) {
		const struct exl_gen_settings *s = &m.g.gen.s;
		CHECK(!strcmp(m.g.model, "stories260K"), "tag: %s", m.g.model);
		CHECK(m.g.stream, "Ollama streams by default");
		CHECK(m.g.chat && strstr(m.g.messages_json, "\"role\":\"system\",\"content\":\"S\"") &&
		      strstr(m.g.messages_json, "\"role\":\"user\",\"content\":\"Hi\""), "as chat: %s",
		      m.g.messages_json);
		CHECK(s->max_new_tokens == 5 && fabsf(s->sampling.rep_pen - 1.2f) < 1e-6 &&
		      s->sampling.rep_range == 32 && fabsf(s->sampling.typical - 0.8f) < 1e-6 &&
		      s->n_stop_strings == 1, "options");
		CHECK(s->json_schema && !strcmp(s->json_schema, "{\"type\":\"object\"}"), "format");
	}
	unmap(&m);

	/* A refusal quotes the name cut at 64 bytes, here inside a "\u00e9"
	 * (fuzz_http, libFuzzer): the message stays UTF-8. */
	map(&m, EXL_HTTP_OLLAMA_GENERATE, "{\"model\": \"_______________________________"
	    "________________________________\u00e9x\", \"prompt\": \"Hi\"}");
	CHECK(m.rc == -1 && strstr(m.e.msg, "is not a model name") &&
	      exl_utf8_bad_at(m.e.msg, strlen(m.e.msg)) == strlen(m.e.msg) &&
	      strstr(m.e.msg, "____?' is not"), "a name cut inside a character: %s", m.e.msg);
	unmap(&m);

	map(&m, EXL_HTTP_OLLAMA_GENERATE, "{\"prompt\": \"raw text\", \"raw\": true, "
	    "\"stream\": false, \"options\": {\"num_predict\": -1}}");
	CHECK(m.rc == 0 && !m.g.chat && m.g.n_prompts == 1 && !m.g.stream && !m.g.max_tokens_set,
	      "raw: %s", m.e.msg);
	unmap(&m);
}

/* reasoning_effort (OpenAI) and think's levels (Ollama) as the template's
 * reasoning_effort (gpt-oss's), unless chat_template_kwargs set it */
static void test_effort(void)
{
	static const struct {
		enum exl_http_api api;
		const char *more, *kwargs;
		int reasoning;
	} t[] = {
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": \"high\"", "{\"reasoning_effort\":\"high\"}", -1 },
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": \"minimal\"", "{\"reasoning_effort\":\"low\"}",
		  -1 },
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": \"none\"",
		  "{\"enable_thinking\":false,\"reasoning_effort\":\"low\"}", -1 },
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": \"xhigh\", \"reasoning_format\": \"none\"",
		  "{\"reasoning_effort\":\"high\"}", 0 },
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": \"high\", \"chat_template_kwargs\": "
		  "{\"reasoning_effort\": \"low\"}", "{\"reasoning_effort\":\"low\"}", -1 },
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": null", NULL, -1 },
		{ EXL_HTTP_OLLAMA_CHAT, "\"think\": \"medium\"", "{\"reasoning_effort\":\"medium\"}", 1 },
		{ EXL_HTTP_OLLAMA_CHAT, "\"think\": true", NULL, 1 },
		{ EXL_HTTP_OLLAMA_CHAT, "\"think\": false", "{\"enable_thinking\":false}", 0 },
	};
	struct mapped m;
	char body[512];

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(body, sizeof(body), "{\"messages\": [{\"role\": \"user\", \"content\": "
			 "\"Hi\"}], %s}", t[i].more);
		map(&m, t[i].api, body);
		CHECK(m.rc == 0 && m.g.reasoning == t[i].reasoning &&
		      (t[i].kwargs ? m.g.template_kwargs_json &&
				     !strcmp(m.g.template_kwargs_json, t[i].kwargs) :
				     !m.g.template_kwargs_json), "%s: %d %s, reasoning %d (%s)", t[i].more,
		      m.rc, m.g.template_kwargs_json ? m.g.template_kwargs_json : "no kwargs",
		      m.g.reasoning, m.e.msg);
		unmap(&m);
	}
	static const struct { enum exl_http_api api; const char *more, *param; } bad[] = {
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": \"extreme\"", "reasoning_effort" },
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": 1", "reasoning_effort" },
		{ EXL_HTTP_OAI_CHAT, "\"reasoning_effort\": \"high\\u0000\"", "reasoning_effort" },
		{ EXL_HTTP_OLLAMA_CHAT, "\"think\": \"max\"", "think" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(body, sizeof(body), "{\"messages\": [{\"role\": \"user\", \"content\": "
			 "\"Hi\"}], %s}", bad[i].more);
		map(&m, bad[i].api, body);
		CHECK(m.rc == -1 && !strcmp(m.e.param, bad[i].param), "%s: %d %s", bad[i].more, m.rc,
		      m.e.msg);
		unmap(&m);
	}
}

static void test_config_and_writer(void)
{
	struct exl_http_listen l;
	struct exl_config c;
	char err[256];

	CHECK(exl_config_parse_http("127.0.0.1:8080", &l, err, sizeof(err)) == 0 &&
	      l.family == AF_INET && l.port == 8080 && l.loopback, "127.0.0.1");
	CHECK(exl_config_parse_http("[::1]:9", &l, err, sizeof(err)) == 0 && l.family == AF_INET6 &&
	      l.loopback, "::1");
	CHECK(exl_config_parse_http("unix:/tmp/x.sock", &l, err, sizeof(err)) == 0 &&
	      l.family == AF_UNIX && !strcmp(l.path, "/tmp/x.sock"), "unix");
	CHECK(exl_config_parse_http("0.0.0.0:80", &l, err, sizeof(err)) == 0 && !l.loopback, "any");
	CHECK(exl_config_parse_http("example.com:80", &l, err, sizeof(err)) == -1, "a host name");
	CHECK(exl_config_parse_http("127.0.0.1:65536", &l, err, sizeof(err)) == -1, "port");
	exl_config_defaults(&c);
	CHECK(exl_config_set(&c, "http", "0.0.0.0:8080", err, sizeof(err)) == 0 &&
	      exl_config_check(&c, err, sizeof(err)) == -1 && strstr(err, "http_allow_remote"),
	      "remote without http_allow_remote: %s", err);
	CHECK(exl_config_set(&c, "http_allow_remote", "yes", err, sizeof(err)) == 0 &&
	      exl_config_check(&c, err, sizeof(err)) == 0, "remote allowed: %s", err);
	CHECK(exl_config_set(&c, "http_api_key", "a b", err, sizeof(err)) == -1, "key with a space");

	struct exl_jw w;
	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_key(&w, "s");
	exl_jw_str(&w, "a\"\\\n\x01\xff\xe2\x82\xac", 9);
	exl_jw_key(&w, "n");
	exl_jw_num(&w, NAN);
	exl_jw_key(&w, "a");
	exl_jw_arr(&w);
	exl_jw_int(&w, -1);
	exl_jw_uint(&w, 2);
	exl_jw_bool(&w, true);
	exl_jw_arr_end(&w);
	exl_jw_obj_end(&w);
	exl_jw_text(&w, "\n", 1);
	exl_jw_obj(&w);
	exl_jw_obj_end(&w);
	CHECK(w.buf && !strcmp(w.buf, "{\"s\":\"a\\\"\\\\\\n\\u0001\\ufffd\xe2\x82\xac\",\"n\":null,"
			       "\"a\":[-1,2,true]}\n{}"), "writer: %s", w.buf);
	exl_jw_free(&w);
}

int main(void)
{
	test_openai();
	test_chat_and_ollama();
	test_effort();
	test_config_and_writer();
	if (check_failures) {
		fprintf(stderr, "%d failures\n", check_failures);
		return 1;
	}
	printf("http_map: all passed\n");
	return 0;
}
