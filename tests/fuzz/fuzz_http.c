/* Fuzz target for the HTTP front's request mapping without sockets (see
 * docs/fuzzing.md and docs/http.md; fuzz_target.h says how it runs).
 *
 * The first input byte picks the endpoint (modulo 6: OpenAI completions,
 * OpenAI chat, Ollama generate, Ollama chat, /tokenize, /detokenize); the
 * rest is the request body, as evhttp hands it over (any bytes, any
 * length).  It goes through exl_json_parse and the endpoint's mapping
 * function, as daemon/server/http/ does.  It aborts when
 *   - a refusal (the parser's or the mapping's) has no message, or a
 *     message or param that is not valid UTF-8 (they go into the JSON
 *     error reply);
 *   - an accepted request holds what the mapping promises it does not:
 *     choices over the limit, a prompt that is neither text nor ids, a
 *     stop or banned string that is empty, over its length or holds a NUL,
 *     more than one constraint, sampler settings the sampler refuses, a
 *     constraint or conversation that is not the JSON it should be, a
 *     template context that is not a JSON object or that the ChatML
 *     renderer refuses.  Every string and array it points at is read.
 * The socket side (methods, headers, chunked bodies, sizes) is evhttp's;
 * tests/integration/test_http.c (garbage) throws mutated requests at a
 * running daemon.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/chat_template.h"
#include "common/json_parse.h"
#include "common/utf8.h"
#include "daemon/core/sampler/sampler.h"
#include "daemon/server/http/http_map.h"
#include "daemon/server/http/reasoning.h"
#include "daemon/server/http/tool_calls.h"
#include "daemon/server/wire/config.h"
#include "tests/fuzz/fuzz_target.h"

static volatile uint64_t sink;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2), noreturn))
#endif
static void broken(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz_http: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

static void read_bytes(const char *what, const char *s, size_t n, bool utf8)
{
	if (utf8 && exl_utf8_bad_at(s, n) != n)
		broken("%s: not valid UTF-8", what);
	for (size_t i = 0; i < n; i++)
		sink += (uint8_t)s[i];
}

static void check_refusal(const struct exl_http_err *e)
{
	if (!e->msg[0])
		broken("a refusal without a message");
	/* cut at a buffer's end inside a character is the only allowed flaw */
	size_t n = strlen(e->msg), bad = exl_utf8_bad_at(e->msg, n);
	if (bad != n && n - bad > 3)
		broken("refusal message not UTF-8 at %zu: %s", bad, e->msg);
	read_bytes("param", e->param, strlen(e->param), false);
}

static void check_cstrings(const char *what, const char *const *a, int n, int max, size_t maxlen)
{
	if (n < 0 || n > max)
		broken("%s: %d strings (at most %d)", what, n, max);
	for (int i = 0; i < n; i++) {
		size_t len = strlen(a[i]);
		if (len == 0 || len > maxlen)
			broken("%s: item %d of %zu bytes", what, i, len);
		read_bytes(what, a[i], len, true);
	}
}

static void check_json(const char *what, const char *text, size_t len, enum exl_json_type type)
{
	char err[256];
	struct exl_json_doc *d;

	if (strlen(text) != len)
		broken("%s: length %zu, strlen %zu", what, len, strlen(text));
	d = exl_json_parse(text, len, err, sizeof(err));
	if (!d)
		broken("%s: not JSON: %s: %.200s", what, err, text);
	if (exl_json_root(d)->type != type)
		broken("%s: a %s, not a %s", what, exl_json_type_name(exl_json_root(d)->type),
		       exl_json_type_name(type));
	exl_json_free(d);
}

static void check_prompt(const struct exl_prompt *p)
{
	if (p->ids) {
		if (p->n_ids <= 0)
			broken("a prompt of %d ids", p->n_ids);
		for (int i = 0; i < p->n_ids; i++)
			if (p->ids[i] < 0)
				broken("prompt id %d is %d", i, p->ids[i]);
	} else {
		if (!p->text)
			broken("a prompt with neither text nor ids");
		read_bytes("prompt", p->text, p->len, true);
	}
}

/* Accepted tools make a forced call's schema in every form: a JSON
 * object (named: of that tool alone). */
static void check_tools(const struct exl_http_gen *g)
{
	char err[256];

	if (g->tool_choice == EXL_HTTP_TOOLS_NONE)
		broken("tools kept for tool_choice none");
	for (int f = EXL_TOOL_FMT_NONE; f <= EXL_TOOL_FMT_HARMONY; f++) {
		size_t n;
		char *sc = exl_tool_schema((enum exl_tool_fmt)f, g->tools_json, g->tools_len,
					   g->tool_choice == EXL_HTTP_TOOLS_NAMED ? g->tool_name : NULL,
					   &n, err, sizeof(err));
		if (!sc)
			broken("no schema for accepted tools: %s", err);
		check_json("tool schema", sc, n, EXL_JSON_OBJECT);
		free(sc);
	}
}

static void check_gen(const struct exl_http_gen *g)
{
	const struct exl_gen_settings *s = &g->gen.s;
	char err[256];

	if (g->n < 1 || g->n > EXL_HTTP_MAX_CHOICES)
		broken("n = %d", g->n);
	if (g->chat) {
		if (g->n_prompts)
			broken("a chat with %d prompts", g->n_prompts);
		check_json("messages", g->messages_json, g->messages_len, EXL_JSON_ARRAY);
		if (g->tools_json) {
			check_json("tools", g->tools_json, g->tools_len, EXL_JSON_ARRAY);
			check_tools(g);
		}
		if (g->template_kwargs_json)
			check_json("chat_template_kwargs", g->template_kwargs_json,
				   g->template_kwargs_len, EXL_JSON_OBJECT);
		size_t len = 0;
		char *ctx = exl_http_chat_context(g, "<s>", 3, "</s>", 4, &len);
		if (!ctx)
			broken("no template context");
		check_json("context", ctx, len, EXL_JSON_OBJECT);
		char *out = NULL;
		size_t out_len = 0;
		if (exl_chat_template_render(exl_chat_template_chatml, strlen(exl_chat_template_chatml),
					     ctx, len, &out, &out_len, err, sizeof(err)))
			broken("ChatML refused the context: %s", err);
		read_bytes("rendered", out, out_len, true);
		free(out);
		free(ctx);
	} else {
		if (g->n_prompts < 1 || g->n_prompts * g->n > EXL_HTTP_MAX_CHOICES)
			broken("%d prompts, n %d", g->n_prompts, g->n);
		for (int i = 0; i < g->n_prompts; i++)
			check_prompt(&g->prompts[i]);
	}
	if (g->logprobs < -1 || g->logprobs > EXL_HTTP_MAX_TOP_LOGPROBS)
		broken("logprobs %d", g->logprobs);
	check_cstrings("stop", s->stop_strings, s->n_stop_strings, EXL_GEN_MAX_STOP_STRINGS,
		       EXL_GEN_MAX_STRING_LEN);
	if (s->n_stop_tokens < 0 || s->n_stop_tokens > EXL_GEN_MAX_STOP_TOKENS)
		broken("%d stop tokens", s->n_stop_tokens);
	for (int i = 0; i < s->n_stop_tokens; i++)
		sink += (uint32_t)s->stop_tokens[i];
	check_cstrings("banned_strings", s->banned_strings, s->n_banned_strings, EXL_GEN_MAX_BANNED,
		       EXL_GEN_MAX_STRING_LEN);
	if ((s->grammar != NULL) + (s->json_schema != NULL) + (s->regex != NULL) > 1)
		broken("more than one constraint");
	if (s->grammar)
		read_bytes("grammar", s->grammar, strlen(s->grammar), true);
	if (s->regex)
		read_bytes("regex", s->regex, strlen(s->regex), true);
	if (s->json_schema)
		read_bytes("json_schema", s->json_schema, strlen(s->json_schema), true);
	if (g->gen.has_negative)
		read_bytes("negative_prompt", g->gen.negative.text, g->gen.negative.len, true);
	if (s->fim && (!s->fim_suffix || !s->fim_suffix_len))
		broken("suffix: %zu bytes kept, not its text", s->fim_suffix_len);
	if (s->fim)
		read_bytes("suffix", s->fim_suffix, s->fim_suffix_len + 1, true);
	if (g->gen.n_lora < 0 || g->gen.n_lora > EXL_MAX_LORAS)
		broken("n_lora %d", g->gen.n_lora);
	for (int i = 0; i < g->gen.n_lora; i++) {
		if (!exl_model_name_valid(g->gen.lora_name[i], strlen(g->gen.lora_name[i])))
			broken("lora %d: a name the protocol refuses", i);
		if (!(fabsf(g->gen.lora_scale[i]) <= (float)EXL_LORA_SCALE_MAX))
			broken("lora %d: scale %g", i, (double)g->gen.lora_scale[i]);
	}
	if (s->max_new_tokens < 0 || s->max_new_tokens > 16777216)
		broken("max_new_tokens %d", s->max_new_tokens);
	if (exl_sampler_params_check(&s->sampling, INT32_MAX, err, sizeof(err)))
		broken("the sampler refuses what was accepted: %s", err);
}

/* The input as a model's reply, read for calls in every form: the content
 * is the reply's start (harmony: its bodies, no longer than it), each call
 * a name and a JSON object, and what a stream lets out of any prefix is
 * within it. */
static void check_reply(const char *text, size_t len)
{
	static const enum exl_reasoning_tags tags[] = { EXL_REASONING_THINK, EXL_REASONING_MISTRAL,
							EXL_REASONING_HARMONY };

	for (int f = EXL_TOOL_FMT_NONE; f <= EXL_TOOL_FMT_HARMONY; f++) {
		for (int forced = 0; forced < 2; forced++) {
			struct exl_tool_parse p;
			bool harmony = f == EXL_TOOL_FMT_HARMONY && !forced;

			if (exl_tool_parse((enum exl_tool_fmt)f, forced, text, len, &p))
				broken("tool parse: out of memory");
			/* the reply's start, or (hermes, with text after its calls)
			 * its start, a blank line and its end */
			if (p.content_len > len + 2 || (harmony && p.content_len > len) ||
			    (!(f == EXL_TOOL_FMT_HERMES && p.n_calls) && !harmony &&
			     memcmp(p.content, text, p.content_len)))
				broken("tool parse (%d): content is not the reply's", f);
			for (int i = 0; i < p.n_calls; i++) {
				if (!p.calls[i].name[0])
					broken("tool parse (%d): a call without a name", f);
				check_json("arguments", p.calls[i].args, p.calls[i].args_len,
					   EXL_JSON_OBJECT);
			}
			exl_tool_parse_free(&p);
		}
		if (f < 4) {
			struct exl_reasoning rs;
			size_t n = f < 2 ? len : (len ? (size_t)(uint8_t)text[len - 1] * len / 256 : 0);
			exl_reasoning_split(tags[len % 3], text, n, f & 1, f < 2, 0, &rs);
			if (rs.r_start > rs.r_end || rs.r_end > n || rs.c_start > n ||
			    (rs.r_end > rs.r_start && rs.c_start < rs.r_end))
				broken("reasoning: parts %zu-%zu, %zu of %zu", rs.r_start, rs.r_end,
				       rs.c_start, n);
		}
		bool started;
		size_t cut = len ? (size_t)(uint8_t)text[0] * len / 256 : 0;
		if (exl_tool_stream_safe((enum exl_tool_fmt)f, text, cut, &started) > cut ||
		    exl_tool_stream_safe((enum exl_tool_fmt)f, text, len, &started) > len)
			broken("tool stream (%d): more let out than written", f);
	}
}

int fuzz_one(const uint8_t *data, size_t size)
{
	static const enum exl_http_api apis[] = { EXL_HTTP_OAI_COMPLETION, EXL_HTTP_OAI_CHAT,
						  EXL_HTTP_OLLAMA_GENERATE, EXL_HTTP_OLLAMA_CHAT };
	char err[256];
	struct exl_http_err e;

	if (size < 1)
		return 0;
	int which = data[0] % 6;
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	/* the chat endpoints' inputs are read as replies too */
	if (which == 1 || which == 3)
		check_reply(body, len);
	struct exl_json_doc *d = exl_json_parse(body, len, err, sizeof(err));
	if (!d) {
		if (!err[0])
			broken("the parser refused without a message");
		return 0;
	}
	msgpack_zone *zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
	if (!zone)
		broken("out of memory");
	const struct exl_json *root = exl_json_root(d);
	if (which < 4) {
		struct exl_http_gen g;
		if (exl_http_map_generate(apis[which], root, zone, &g, &e))
			check_refusal(&e);
		else
			check_gen(&g);
	} else if (which == 4) {
		struct exl_http_tokenize t;
		if (exl_http_map_tokenize(root, zone, &t, &e))
			check_refusal(&e);
		else
			read_bytes("content", t.text, t.len, true);
	} else {
		struct exl_http_detokenize t;
		if (exl_http_map_detokenize(root, zone, &t, &e))
			check_refusal(&e);
		else
			for (size_t i = 0; i < t.n; i++)
				if (t.ids[i] < 0)
					broken("detokenize id %d", t.ids[i]);
	}
	msgpack_zone_free(zone);
	exl_json_free(d);
	return 0;
}

static const char s_completion[] =
	"\x00{\"model\":\"stories260K\",\"prompt\":\"Once upon a time\",\"max_tokens\":16,"
	"\"temperature\":0.7,\"top_p\":0.9,\"n\":2,\"stop\":[\"\\n\",\"The end\"],\"seed\":-3,"
	"\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"logit_bias\":{\"42\":-100,\"7\":2.5},"
	"\"logprobs\":3,\"echo\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
	"\"min_p\":0.05,\"top_k\":40,\"typical\":0.9,\"xtc_probability\":0.5,\"xtc_threshold\":0.1,"
	"\"dry_multiplier\":0.8,\"dry_sequence_breakers\":[\"\\n\",\":\"],\"mirostat\":2,"
	"\"banned_strings\":[\"bad\"],\"user\":null,\"suffix\":null}";
static const char s_completion_ids[] =
	"\x00{\"prompt\":[[1,2,3],\"two\",[4]],\"max_tokens\":null,\"best_of\":1,"
	"\"response_format\":{\"type\":\"json_object\"},\"token_healing\":true}";
static const char s_chat[] =
	"\x01{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief\"},"
	"{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \"},{\"type\":\"text\","
	"\"text\":\"there\"}]},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\"}]},"
	"{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"42\"}],\"max_completion_tokens\":9,"
	"\"logprobs\":true,\"top_logprobs\":2,\"tools\":[{\"type\":\"function\"}],"
	"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":"
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}},\"stop\":\"END\"}";
static const char s_ollama_gen[] =
	"\x02{\"model\":\"stories260K:latest\",\"prompt\":\"Why?\",\"system\":\"Answer.\",\"stream\":false,"
	"\"format\":\"json\",\"options\":{\"num_predict\":-1,\"temperature\":0,\"top_k\":1,"
	"\"repeat_penalty\":1.1,\"repeat_last_n\":64,\"typical_p\":1,\"tfs_z\":1,\"seed\":7,"
	"\"stop\":[\"\\n\\n\"],\"num_ctx\":2048,\"mirostat_tau\":5}}";
static const char s_ollama_raw[] =
	"\x02{\"model\":\"x\",\"prompt\":\"<s>[INST] hi [/INST]\",\"raw\":true,\"keep_alive\":\"5m\","
	"\"options\":{\"grammar\":\"root ::= \\\"a\\\"\"}}";
static const char s_ollama_chat[] =
	"\x03{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"images\":[]}],"
	"\"format\":{\"type\":\"string\"},\"options\":{\"num_predict\":5,\"min_p\":0.1}}";
static const char s_tokenize[] =
	"\x04{\"content\":\"Hello \\u00e9\\ud83d\\ude00\",\"add_special\":true,\"with_pieces\":true}";
static const char s_detokenize[] = "\x05{\"tokens\":[1,2,3,0,2147483647],\"model\":\"a.b\"}";

static const char s_chat_tools[] =
	"\x01{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
	"\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
	"{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},{\"role\":\"tool\",\"content\":\"ok\"}],"
	"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}},{\"type\":"
	"\"function\",\"function\":{\"name\":\"g\"}}],\"tool_choice\":{\"type\":\"function\","
	"\"function\":{\"name\":\"g\"}},\"parallel_tool_calls\":false}";
/* replies with calls: bodies the parser refuses, read as replies first */
static const char s_reply_hermes[] =
	"\x01Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>"
	"<tool_call><function=g>\n<parameter=x>\n12\n</parameter>\n</function></tool_call>";
static const char s_reply_mistral[] =
	"\x01[TOOL_CALLS]f[CALL_ID]abc[ARGS]{\"a\": 1}[TOOL_CALLS][{\"name\": \"g\", \"arguments\": "
	"\"{}\"}]";
static const char s_reply_harmony[] =
	"\x03<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant<|channel|>commentary"
	"<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.f "
	"<|constrain|>json<|message|>{\"a\": 1}<|end|><|start|>assistant to=functions.g"
	"<|channel|>commentary json<|message|>\"{}\"<|call|>";

static const struct fuzz_blob seeds[] = {
	{ "reply-harmony", (const uint8_t *)s_reply_harmony, sizeof(s_reply_harmony) - 1 },
	{ "chat-tools", (const uint8_t *)s_chat_tools, sizeof(s_chat_tools) - 1 },
	{ "reply-hermes", (const uint8_t *)s_reply_hermes, sizeof(s_reply_hermes) - 1 },
	{ "reply-mistral", (const uint8_t *)s_reply_mistral, sizeof(s_reply_mistral) - 1 },
	{ "completion", (const uint8_t *)s_completion, sizeof(s_completion) - 1 },
	{ "completion-ids", (const uint8_t *)s_completion_ids, sizeof(s_completion_ids) - 1 },
	{ "chat", (const uint8_t *)s_chat, sizeof(s_chat) - 1 },
	{ "ollama-generate", (const uint8_t *)s_ollama_gen, sizeof(s_ollama_gen) - 1 },
	{ "ollama-raw", (const uint8_t *)s_ollama_raw, sizeof(s_ollama_raw) - 1 },
	{ "ollama-chat", (const uint8_t *)s_ollama_chat, sizeof(s_ollama_chat) - 1 },
	{ "tokenize", (const uint8_t *)s_tokenize, sizeof(s_tokenize) - 1 },
	{ "detokenize", (const uint8_t *)s_detokenize, sizeof(s_detokenize) - 1 },
};

size_t fuzz_seeds(const struct fuzz_blob **out)
{
	*out = seeds;
	return sizeof(seeds) / sizeof(seeds[0]);
}

#define D(s) { s, (const uint8_t *)(s), sizeof(s) - 1 }

static const struct fuzz_blob dict[] = {
	D("\"model\":"), D("\"prompt\":"), D("\"messages\":"), D("\"role\":"), D("\"content\":"),
	D("\"max_tokens\":"), D("\"n\":"), D("\"stop\":"), D("\"seed\":"), D("\"logit_bias\":"),
	D("\"logprobs\":"), D("\"top_logprobs\":"), D("\"stream\":"), D("\"options\":"),
	D("\"num_predict\":"), D("\"format\":"), D("\"response_format\":"), D("\"json_schema\":"),
	D("\"grammar\":"), D("\"regex\":"), D("\"temperature\":"), D("\"top_k\":"), D("\"raw\":"),
	D("\"system\":"), D("\"tools\":"), D("\"token_bias\":"), D("\"banned_strings\":"),
	D("\"negative_prompt\":"), D("\"lora\":"), D("\"name\":"), D("\"scale\":"),
	D("\"suffix\":"),
	D("\"tokens\":"), D("null"), D("true"), D("false"), D("[]"),
	D("{}"), D("-1"), D("1e308"), D("-0.0"), D("2147483648"), D("16777217"), D("\"\""),
	D("\\u0000"), D("\\ud800"), D("{\"type\":\"text\",\"text\":\"x\"}"),
	D("\"tool_choice\":"), D("\"required\""), D("\"function\":"), D("\"parameters\":"),
	D("\"arguments\":"), D("<tool_call>"), D("</tool_call>"), D("[TOOL_CALLS]"), D("[ARGS]"),
	D("<|tool_call|>"), D("<|python_tag|>"), D("<function="), D("<parameter="), D("<think>"),
	D("</think>"), D("\"think\":"), D("\"reasoning_format\":"), D("\"chat_template_kwargs\":"),
	D("\"reasoning_effort\":"), D("<|channel|>"), D("<|message|>"), D("<|end|>"),
	D("<|start|>assistant"), D("<|constrain|>"), D(" to=functions."), D("analysis"),
	D("final"), D("commentary"),
};

size_t fuzz_dict(const struct fuzz_blob **out)
{
	*out = dict;
	return sizeof(dict) / sizeof(dict[0]);
}

size_t fuzz_max_len(void)
{
	return 16384;
}
