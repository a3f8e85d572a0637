/* exl chat's conversation formats: the common built-in chat templates,
 * picked from a model's GGUF tokenizer.chat_template by substrings (the
 * way llama.cpp recognises them), and a plain one for models without. */
#ifndef EXL_TOOL_CHAT_FORMATS_H
#define EXL_TOOL_CHAT_FORMATS_H

#include <stddef.h>
#include <stdio.h>

enum chat_tmpl {
	TMPL_CHATML,
	TMPL_PHI4,
	TMPL_LLAMA2,            /* [INST] ... [/INST], no system support */
	TMPL_LLAMA2_SYS,        /* with <<SYS>> */
	TMPL_LLAMA2_SYS_BOS,    /* <s> before every later [INST] */
	TMPL_LLAMA2_SYS_STRIP,  /* messages trimmed */
	TMPL_MISTRAL_V1,
	TMPL_MISTRAL_V3,
	TMPL_MISTRAL_V3_TEKKEN,
	TMPL_MISTRAL_V7,
	TMPL_LLAMA3,
	TMPL_ZEPHYR,
	TMPL_PHI3,
	TMPL_GEMMA,
	TMPL_PLAIN,             /* "User: ...\nAssistant: ..." */
	TMPL_COUNT,
	TMPL_UNKNOWN = -1,
};

struct chat_msg {
	const char *role;       /* "system", "user" or "assistant" */
	const char *content;
};

/* The template called name (chatml, llama2, llama2-sys, llama2-sys-bos,
 * llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7,
 * llama3, zephyr, phi3, phi4, gemma, plain; "mistral" is mistral-v3), or
 * TMPL_UNKNOWN. */
int chat_template_by_name(const char *name);
const char *chat_template_name(int t);
/* The names, comma-separated, for messages and --help. */
void chat_template_list(FILE *out);

/* The built-in format of a GGUF chat template's text, or TMPL_UNKNOWN. */
int chat_template_detect(const char *jinja);

/* The conversation with the assistant's turn opened, ready to complete
 * (malloc'ed; NULL when out of memory). */
char *chat_format(int t, const struct chat_msg *msgs, size_t n);

/* What ends an assistant's turn in format t: a special token of models
 * made for it, or plain text for TMPL_PLAIN. */
const char *chat_turn_end(int t);

#endif
