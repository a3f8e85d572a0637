/* exl chat's conversations rendered by the model's own chat template (the
 * Jinja text of its GGUF's tokenizer.chat_template), as the daemon's HTTP
 * front renders them for /v1/chat/completions. */
#ifndef EXL_CHAT_JINJA_H
#define EXL_CHAT_JINJA_H

#include <stddef.h>

#include "client/exl/exl_chat_template.h"

/* The conversation rendered with add_generation_prompt, the model's BOS and
 * EOS text as bos_token / eos_token (either may be NULL: "").  0 and a
 * malloc'ed *out; -1 with the template's message (or out of memory) in err. */
int chat_jinja_render(const char *tmpl, const char *bos, const char *eos,
		      const struct chat_msg *msgs, size_t n, char **out, char *err, size_t errlen);

#endif
