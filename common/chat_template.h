/* Chat templates: a model's tokenizer.chat_template (Jinja) rendered over
 * a conversation, as the HTTP front's chat endpoints and /apply-template
 * need it.
 *
 * context_json is a JSON object: {"messages": [{"role", "content"}, ...],
 * "add_generation_prompt": true, "tools": [...], "bos_token": "...",
 * "eos_token": "..."} (tools optional).  The rendered text is malloc'ed in
 * *out (NUL-terminated, *out_len bytes), the caller's to free.  0, or -1
 * with a message in err naming what is wrong (the template or the
 * context).
 */
#ifndef EXL_CHAT_TEMPLATE_H
#define EXL_CHAT_TEMPLATE_H

#include <stddef.h>

int exl_chat_template_render(const char *tmpl, size_t tmpl_len, const char *context_json,
			     size_t context_len, char **out, size_t *out_len,
			     char *err, size_t errlen);

/* ChatML, for models whose GGUF has no template. */
extern const char exl_chat_template_chatml[];

#endif
