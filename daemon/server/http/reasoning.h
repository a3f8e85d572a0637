/* A reply's reasoning: the <think> ... </think> block that Qwen3, QwQ and
 * DeepSeek-R1 (and its distills) write before the answer, Mistral's
 * [THINK] ... [/THINK], or gpt-oss's analysis messages (harmony), split
 * from the content as OpenAI-style servers return it (reasoning_content)
 * and as Ollama does (message.thinking).  No sockets, no model
 * (docs/http.md, "Reasoning").
 */
#ifndef EXL_HTTP_REASONING_H
#define EXL_HTTP_REASONING_H

#include <stdbool.h>
#include <stddef.h>

/* Which tags a model's reasoning block takes: <think> ... </think> (Qwen3,
 * QwQ, DeepSeek-R1 and its distills, Granite), [THINK] ... [/THINK]
 * (Magistral, Ministral 3 Reasoning: control tokens, which a reply only
 * spells when special tokens are decoded), or harmony's channels (gpt-oss:
 * "<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final
 * <|message|>C", its markers shown as text; text_scan.h). */
enum exl_reasoning_tags {
	EXL_REASONING_NONE,
	EXL_REASONING_THINK,
	EXL_REASONING_MISTRAL,
	EXL_REASONING_HARMONY,
};

/* The tags a chat template writes its reasoning blocks with. */
enum exl_reasoning_tags exl_reasoning_template(const char *tmpl, size_t len);

/* Whether the tags are control tokens the reply must decode to show. */
bool exl_reasoning_needs_special(enum exl_reasoning_tags tags);

/* Whether a rendered prompt leaves the reply inside a reasoning block (the
 * DeepSeek-R1 templates open it for the model). */
bool exl_reasoning_prompt_open(enum exl_reasoning_tags tags, const char *prompt, size_t len);

/* The parts of a reply's first len bytes: reasoning [r_start, r_end),
 * content from c_start.  final: the reply is whole (an unclosed block is
 * all reasoning).  Not final, the reasoning stops short of what may be the
 * closing tag's start, and c_start is len until the content has begun (or
 * while it is undecided whether the reply opens with a block).  Both parts
 * lose their surrounding whitespace.  No closing tag starts before from
 * (a stream's earlier r_end; 0 when unknown): the search starts there, so
 * that a stream's splits cost its length once, not once per token.
 *
 * Harmony: the reasoning is the analysis messages the reply opens with
 * (several in a row make one span, the markers between them in it); the
 * content starts at the body of the first final or commentary message,
 * or at the header of the first one with a recipient (" to=functions.N":
 * a tool call, for exl_tool_parse's harmony form, which also drops the
 * markers of what follows); c_start stays len until that header is
 * whole.  A reply that does not open with a header is all content.  open
 * does not apply. */
struct exl_reasoning {
	size_t r_start, r_end;
	size_t c_start;
};
void exl_reasoning_split(enum exl_reasoning_tags tags, const char *text, size_t len, bool open,
			 bool final, size_t from, struct exl_reasoning *r);

#endif
