/* Chat templates: the Jinja programs instruct GGUFs carry in
 * tokenizer.chat_template, rendered as @huggingface/jinja (the Hugging Face
 * hub's and transformers.js's renderer) renders them, in a sandbox (no
 * files, no environment; output, memory, loop iterations and nesting
 * capped).  docs/chat-templates.md says what is supported. */
#ifndef EXL_CHAT_TEMPLATE_H
#define EXL_CHAT_TEMPLATE_H

#include <stddef.h>

/* Renders a chat template (Jinja source) with the context given as JSON
 * text: {"messages": [...], "add_generation_prompt": bool, "tools": [...],
 * "bos_token": "...", "eos_token": "...", plus any other top-level keys,
 * which become template variables}.  On success *out is a malloc'ed
 * NUL-terminated string (length in *out_len) the caller frees; 0.  On a
 * template error or raise_exception: -1 with the message in err
 * (raise_exception's own message verbatim, prefixed by nothing). */
int exl_chat_template_render(const char *tmpl, size_t tmpl_len, const char *context_json,
			     size_t context_len, char **out, size_t *out_len,
			     char *err, size_t errlen);

/* The documented fallback for a model without a template: ChatML. */
extern const char exl_chat_template_chatml[];

#endif
