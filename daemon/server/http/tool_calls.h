/* Tool calls in a chat model's reply: which form the model's chat template
 * teaches it, finding the calls in the text it wrote, and the JSON schema
 * that forces one call (tool_choice "required" or a named function).
 * No sockets and no model: the HTTP front's layer that http_map.c is for
 * requests (docs/http.md, "Tools").
 *
 * The forms, as the templates of the families exld runs write them:
 *   hermes   <tool_call>{"name": N, "arguments": {...}}</tool_call>, one
 *            or more (Qwen2.5, Qwen3, Hermes 2/3, GLM, Granite 4); inside
 *            the tags Qwen3-Coder's <function=N><parameter=P>v</parameter>
 *            </function> is read too
 *   llama3   the whole reply one {"name": N, "parameters": {...}}, or
 *            several separated by ';' (Llama 3.1-3.3), after an optional
 *            <|python_tag|>
 *   mistral  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] (Nemo,
 *            7B v0.3) or [TOOL_CALLS]N[ARGS]{...} (Small 3.2, Devstral,
 *            Ministral 3), each optionally with [CALL_ID]id
 *   granite  <|tool_call|>[{"name": N, "arguments": {...}}, ...] (Granite
 *            3.x, Phi-4-mini's <|tool_call|>...<|/tool_call|> too)
 *   harmony  gpt-oss: a message to functions.N, the recipient in the
 *            channel's header or before it:
 *            <|channel|>commentary to=functions.N <|constrain|>json
 *            <|message|>{...}, or  to=functions.N<|channel|>commentary
 *            json<|message|>{...}; one or more, each after
 *            <|start|>assistant (the reasoning split, reasoning.h, leaves
 *            the reply from the first call's header, or from a final or
 *            commentary message's body)
 *   none     no form: only forced calls, written as bare JSON objects
 */
#ifndef EXL_HTTP_TOOL_CALLS_H
#define EXL_HTTP_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

enum exl_tool_fmt {
	EXL_TOOL_FMT_NONE,
	EXL_TOOL_FMT_HERMES,
	EXL_TOOL_FMT_LLAMA3,
	EXL_TOOL_FMT_MISTRAL,
	EXL_TOOL_FMT_GRANITE,
	EXL_TOOL_FMT_HARMONY,
};

/* The form a chat template's text teaches. */
enum exl_tool_fmt exl_tool_fmt_of(const char *tmpl, size_t len);
const char *exl_tool_fmt_name(enum exl_tool_fmt f);

/* Whether the form's marker is a control token, which a reply carries as
 * text only when special tokens are decoded. */
bool exl_tool_fmt_needs_special(enum exl_tool_fmt f);

/* A forced call: the text that opens the assistant's reply (appended to
 * the rendered prompt), after which the reply is one call object as
 * exl_tool_schema() describes it. */
const char *exl_tool_forced_prefix(enum exl_tool_fmt f);

/* The JSON schema of one call object of the form: {"name": one of the
 * tools' names (only that one when only is not NULL), "arguments" (llama3:
 * "parameters"): that tool's parameters schema}.  malloc'ed text, or NULL
 * with err set (tools malformed, only not among them, out of memory). */
char *exl_tool_schema(enum exl_tool_fmt f, const char *tools_json, size_t tools_len,
		      const char *only, size_t *len, char *err, size_t errlen);

struct exl_tool_call {
	char *name;
	char *args;            /* compact JSON object text */
	size_t args_len;
	char *id;              /* the model's own id (mistral's [CALL_ID]), or NULL */
};

struct exl_tool_parse {
	/* the text before the calls (all of it without calls), and after a
	 * blank line what a hermes reply wrote after its closed calls */
	char *content;
	size_t content_len;
	struct exl_tool_call *calls;
	int n_calls;
};

/* The calls in a reply.  forced: the reply is one call object (its prefix
 * was the prompt's).  0 with p filled, n_calls 0 when the text holds no
 * well-formed calls (then content is all of it); -1 when out of memory.
 * exl_tool_parse_free() in both cases.
 *
 * Harmony reads the reply from where the reasoning split's content starts
 * (reasoning.h): the content is the bodies of its final and commentary
 * messages, without their markers (one after another, a blank line
 * between), analysis messages after the first are dropped, and the calls
 * are the messages to functions.N.  Text not in that shape (a header that
 * does not close, arguments that are not a JSON object, another
 * recipient) is all content, as it is, with no calls. */
int exl_tool_parse(enum exl_tool_fmt f, bool forced, const char *text, size_t len,
		   struct exl_tool_parse *p);
void exl_tool_parse_free(struct exl_tool_parse *p);

/* Streaming: of a reply's first len bytes, how many may go out as content
 * now.  The rest may be (or is: *started) the start of a call, held until
 * the reply ends. */
size_t exl_tool_stream_safe(enum exl_tool_fmt f, const char *text, size_t len, bool *started);

#endif
