/* HTTP request bodies (OpenAI and Ollama JSON) to exld's generate
 * settings, and the small bodies of the other endpoints.  No sockets, no
 * threads, no model: the fuzz target's layer (tests/fuzz/fuzz_http.c), as
 * daemon/server/wire/protocol.c is for the msgpack protocol.
 *
 * Everything a mapped request points at is allocated in the zone the
 * caller passes (the prep's, engine/prep.h), so it lives exactly as long
 * as the request.  Numeric settings are checked against the same ranges
 * as the msgpack protocol's (common/gen_ranges.h); a refusal names the
 * field as the client wrote it ("max_tokens", "options.num_predict").
 * What only the model can judge (token ids against its vocabulary, the
 * chat template) is checked later, where the model is known.
 */
#ifndef EXL_HTTP_MAP_H
#define EXL_HTTP_MAP_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

#include "daemon/server/wire/protocol.h"

struct exl_json;

enum exl_http_api {
	EXL_HTTP_OAI_COMPLETION,    /* POST /v1/completions */
	EXL_HTTP_OAI_CHAT,          /* POST /v1/chat/completions */
	EXL_HTTP_OLLAMA_GENERATE,   /* POST /api/generate */
	EXL_HTTP_OLLAMA_CHAT,       /* POST /api/chat */
};

/* Prompts of one completions request, and choices (n) of each; their
 * product is at most EXL_HTTP_MAX_CHOICES, one job each. */
#define EXL_HTTP_MAX_PROMPTS 16
#define EXL_HTTP_MAX_CHOICES 16
/* Most top log-probabilities asked for (OpenAI allows 20; the generator 64). */
#define EXL_HTTP_MAX_TOP_LOGPROBS 20

/* A refusal: the field at fault (as the client named it, may be empty)
 * and why.  Every refusal of a mapping function is a 400. */
struct exl_http_err {
	char param[64];
	char msg[512];
};

enum exl_http_tool_choice {
	EXL_HTTP_TOOLS_AUTO,
	EXL_HTTP_TOOLS_NONE,
	EXL_HTTP_TOOLS_REQUIRED,
	EXL_HTTP_TOOLS_NAMED,
};

struct exl_http_gen {
	enum exl_http_api api;
	char model[EXL_MAX_NAME + 1];     /* "" when absent */
	struct exl_req_generate gen;      /* its prompt unset: see prompts / messages */
	/* Completions and raw generate: the prompts, text or ids.  Chat (and
	 * templated generate): none until the model's template is rendered. */
	struct exl_prompt prompts[EXL_HTTP_MAX_PROMPTS];
	int n_prompts;
	int n;                            /* choices per prompt */
	bool stream;
	bool include_usage;               /* stream_options.include_usage */
	bool echo;                        /* completions: the prompt before the text */
	/* log-probabilities: -1 none, else this many top alternatives per
	 * token (0: only the chosen token's) */
	int logprobs;
	/* Chat: the conversation for the template, as JSON text in the zone:
	 * the messages array (contents flattened to strings) and the tools
	 * array (NULL when none). */
	bool chat;
	const char *messages_json;
	size_t messages_len;
	const char *tools_json;
	size_t tools_len;
	/* What the reply may do with the tools (OpenAI's tool_choice): auto
	 * (Ollama's only), none (the template does not see them), required
	 * (one call, forced) or named (one call of tool_name, forced). */
	enum exl_http_tool_choice tool_choice;
	const char *tool_name;            /* named: in the zone */
	bool parallel_tool_calls;         /* false: the reply's first call only */
	/* A reply's <think> block apart from its content (reasoning.h): -1
	 * the API's default (OpenAI: apart when the template writes one, as
	 * llama.cpp's server does; Ollama: left in the content), 0 never
	 * (reasoning_format "none", think false), 1 apart (think true). */
	int reasoning;
	/* chat_template_kwargs (and Ollama's think: false as enable_thinking):
	 * more members of the template's context, as an object's JSON text,
	 * NULL when none */
	const char *template_kwargs_json;
	size_t template_kwargs_len;
	bool max_tokens_set;              /* a length was asked for */
};

/* Maps a request body (already parsed) for api into g, allocating in
 * zone.  0, or -1 with e filled (a 400). */
int exl_http_map_generate(enum exl_http_api api, const struct exl_json *body,
			  msgpack_zone *zone, struct exl_http_gen *g, struct exl_http_err *e);

/* POST /tokenize {content, add_special, parse_special, with_pieces} */
struct exl_http_tokenize {
	char model[EXL_MAX_NAME + 1];
	const char *text;                 /* in zone */
	size_t len;
	int add_bos;                      /* -1: the model's */
	bool special;
	bool with_pieces;
};
int exl_http_map_tokenize(const struct exl_json *body, msgpack_zone *zone,
			  struct exl_http_tokenize *t, struct exl_http_err *e);

/* POST /detokenize {tokens} */
struct exl_http_detokenize {
	char model[EXL_MAX_NAME + 1];
	const int32_t *ids;               /* in zone */
	size_t n;
};
int exl_http_map_detokenize(const struct exl_json *body, msgpack_zone *zone,
			    struct exl_http_detokenize *t, struct exl_http_err *e);

/* The model a body names ("model", or Ollama's older "name"): 0 with
 * model set ("" when absent), or -1 with e filled. */
int exl_http_map_model(const struct exl_json *body, char model[EXL_MAX_NAME + 1],
		       struct exl_http_err *e);

/* The chat template's context: {"messages": M, "add_generation_prompt":
 * true, "tools": T, "bos_token": B, "eos_token": E}, malloc'ed (the
 * caller frees), NULL when out of memory. */
char *exl_http_chat_context(const struct exl_http_gen *g, const char *bos, size_t bos_len,
			    const char *eos, size_t eos_len, size_t *len);

#endif
