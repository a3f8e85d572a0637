/* exl chat's conversation formats (see exl_chat_template.h).  Each format
 * writes the messages as the model was trained to read them and ends with
 * the assistant's turn opened, as llama.cpp's built-in templates do. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl/exl_chat_template.h"

static const char *const names[TMPL_COUNT] = {
	[TMPL_CHATML] = "chatml",
	[TMPL_PHI4] = "phi4",
	[TMPL_LLAMA2] = "llama2",
	[TMPL_LLAMA2_SYS] = "llama2-sys",
	[TMPL_LLAMA2_SYS_BOS] = "llama2-sys-bos",
	[TMPL_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
	[TMPL_MISTRAL_V1] = "mistral-v1",
	[TMPL_MISTRAL_V3] = "mistral-v3",
	[TMPL_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
	[TMPL_MISTRAL_V7] = "mistral-v7",
	[TMPL_LLAMA3] = "llama3",
	[TMPL_ZEPHYR] = "zephyr",
	[TMPL_PHI3] = "phi3",
	[TMPL_GEMMA] = "gemma",
	[TMPL_PLAIN] = "plain",
};

int chat_template_by_name(const char *name)
{
	if (!strcmp(name, "mistral"))
		return TMPL_MISTRAL_V3;
	for (int t = 0; t < TMPL_COUNT; t++)
		if (!strcmp(name, names[t]))
			return t;
	return TMPL_UNKNOWN;
}

const char *chat_template_name(int t)
{
	return t >= 0 && t < TMPL_COUNT ? names[t] : "unknown";
}

void chat_template_list(FILE *out)
{
	for (int t = 0; t < TMPL_COUNT; t++)
		fprintf(out, "%s%s", t ? ", " : "", names[t]);
}

/* llama.cpp's order of tests; families this file has no format for
 * (SmolVLM, ChatGLM, Falcon 3, Monarch, Orion, OpenChat, Vicuna, DeepSeek,
 * Command-R) are recognised only so as not to be mistaken for another. */
int chat_template_detect(const char *s)
{
#define HAS(x) (strstr(s, (x)) != NULL)
	if (HAS("<|im_start|>")) {
		if (HAS("<|im_sep|>"))
			return TMPL_PHI4;
		return HAS("<end_of_utterance>") ? TMPL_UNKNOWN : TMPL_CHATML;
	}
	if (!strncmp(s, "mistral", 7) || HAS("[INST]")) {
		if (HAS("[SYSTEM_PROMPT]"))
			return TMPL_MISTRAL_V7;
		if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) {
			if (HAS(" [INST]"))
				return TMPL_MISTRAL_V1;
			if (HAS("\"[INST]\""))
				return TMPL_MISTRAL_V3_TEKKEN;
			return TMPL_MISTRAL_V3;
		}
		if (HAS("content.strip()"))
			return TMPL_LLAMA2_SYS_STRIP;
		if (HAS("bos_token + '[INST]"))
			return TMPL_LLAMA2_SYS_BOS;
		if (HAS("<<SYS>>"))
			return TMPL_LLAMA2_SYS;
		return TMPL_LLAMA2;
	}
	if (HAS("<|assistant|>") && HAS("<|end|>"))
		return TMPL_PHI3;
	if (HAS("[gMASK]<sop>") || (HAS("<|assistant|>") && HAS("<|user|>")) ||
	    (HAS("<|{{ item['role'] }}|>") && HAS("<|begin_of_image|>")))
		return TMPL_UNKNOWN;
	if (HAS("<|user|>") && HAS("<|endoftext|>"))
		return TMPL_ZEPHYR;
	if (HAS("bos_token + message['role']"))
		return TMPL_UNKNOWN;
	if (HAS("<start_of_turn>"))
		return TMPL_GEMMA;
	if (HAS("'\\n\\nAssistant: ' + eos_token") || HAS("GPT4 Correct ") ||
	    (HAS("USER: ") && HAS("ASSISTANT: ")) || (HAS("### Instruction:") && HAS("<|EOT|>")) ||
	    (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>")))
		return TMPL_UNKNOWN;
	if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>"))
		return TMPL_LLAMA3;
	return TMPL_UNKNOWN;
#undef HAS
}

const char *chat_turn_end(int t)
{
	switch (t) {
	case TMPL_CHATML:
	case TMPL_PHI4:
		return "<|im_end|>";
	case TMPL_LLAMA3:
		return "<|eot_id|>";
	case TMPL_ZEPHYR:
		return "<|endoftext|>";
	case TMPL_PHI3:
		return "<|end|>";
	case TMPL_GEMMA:
		return "<end_of_turn>";
	case TMPL_PLAIN:
		return "\nUser:";
	default:
		return "</s>"; /* llama2 and mistral: the end-of-sequence token */
	}
}

/* ---- a growing string ---- */

struct sb {
	char *s;
	size_t len, cap;
	bool failed;
};

static void put_n(struct sb *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->s, cap);
		if (!p) {
			b->failed = true;
			return;
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

static void put(struct sb *b, const char *s)
{
	put_n(b, s, strlen(s));
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* s without its leading and trailing white space. */
static void put_trimmed(struct sb *b, const char *s)
{
	size_t n = strlen(s);

	while (n && is_space(*s)) {
		s++;
		n--;
	}
	while (n && is_space(s[n - 1]))
		n--;
	put_n(b, s, n);
}

static bool role_is(const struct chat_msg *m, const char *role)
{
	return !strcmp(m->role, role);
}

/* ---- the formats ---- */

static void fmt_chatml(struct sb *b, const struct chat_msg *m, size_t n, bool phi4)
{
	for (size_t i = 0; i < n; i++) {
		put(b, "<|im_start|>");
		put(b, m[i].role);
		put(b, phi4 ? "<|im_sep|>" : "\n");
		put(b, m[i].content);
		put(b, phi4 ? "<|im_end|>" : "<|im_end|>\n");
	}
	put(b, phi4 ? "<|im_start|>assistant<|im_sep|>" : "<|im_start|>assistant\n");
}

static void fmt_llama2(struct sb *b, const struct chat_msg *m, size_t n, int t)
{
	bool sys = t != TMPL_LLAMA2;
	bool bos_inside = t == TMPL_LLAMA2_SYS_BOS;
	bool strip = t == TMPL_LLAMA2_SYS_STRIP;
	bool in_turn = true; /* the first [INST] comes without a BOS */

	put(b, "[INST] ");
	for (size_t i = 0; i < n; i++) {
		if (!in_turn) {
			in_turn = true;
			put(b, bos_inside ? "<s>[INST] " : "[INST] ");
		}
		if (role_is(&m[i], "system")) {
			if (sys)
				put(b, "<<SYS>>\n");
			if (strip)
				put_trimmed(b, m[i].content);
			else
				put(b, m[i].content);
			put(b, sys ? "\n<</SYS>>\n\n" : "\n");
			continue;
		}
		if (strip)
			put_trimmed(b, m[i].content);
		else
			put(b, m[i].content);
		if (role_is(&m[i], "user")) {
			put(b, " [/INST]");
		} else {
			put(b, "</s>");
			in_turn = false;
		}
	}
}

static void fmt_mistral(struct sb *b, const struct chat_msg *m, size_t n, int t)
{
	const char *lead = t == TMPL_MISTRAL_V1 ? " " : "";
	const char *trail = t == TMPL_MISTRAL_V3_TEKKEN ? "" : " ";
	bool in_turn = false;

	for (size_t i = 0; i < n; i++) {
		if (!in_turn) {
			put(b, lead);
			put(b, "[INST]");
			put(b, trail);
			in_turn = true;
		}
		if (role_is(&m[i], "system")) {
			put(b, m[i].content);
			put(b, "\n\n");
		} else if (role_is(&m[i], "user")) {
			put(b, m[i].content);
			put(b, lead);
			put(b, "[/INST]");
		} else {
			put(b, trail);
			if (t == TMPL_MISTRAL_V3)
				put_trimmed(b, m[i].content);
			else
				put(b, m[i].content);
			put(b, "</s>");
			in_turn = false;
		}
	}
}

static void fmt_mistral_v7(struct sb *b, const struct chat_msg *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (role_is(&m[i], "system")) {
			put(b, "[SYSTEM_PROMPT] ");
			put(b, m[i].content);
			put(b, "[/SYSTEM_PROMPT]");
		} else if (role_is(&m[i], "user")) {
			put(b, "[INST] ");
			put(b, m[i].content);
			put(b, "[/INST]");
		} else {
			put(b, " ");
			put(b, m[i].content);
			put(b, "</s>");
		}
	}
}

static void fmt_llama3(struct sb *b, const struct chat_msg *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		put(b, "<|start_header_id|>");
		put(b, m[i].role);
		put(b, "<|end_header_id|>\n\n");
		put_trimmed(b, m[i].content);
		put(b, "<|eot_id|>");
	}
	put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* zephyr and phi3: "<|role|>\n" content end "\n" */
static void fmt_role_tags(struct sb *b, const struct chat_msg *m, size_t n, const char *end)
{
	for (size_t i = 0; i < n; i++) {
		put(b, "<|");
		put(b, m[i].role);
		put(b, "|>\n");
		put(b, m[i].content);
		put(b, end);
		put(b, "\n");
	}
	put(b, "<|assistant|>\n");
}

/* gemma has no system role: the system text opens the next user turn. */
static void fmt_gemma(struct sb *b, const struct chat_msg *m, size_t n)
{
	struct sb sys = { 0 };

	for (size_t i = 0; i < n; i++) {
		if (role_is(&m[i], "system")) {
			put_trimmed(&sys, m[i].content);
			continue;
		}
		bool model = role_is(&m[i], "assistant");
		put(b, "<start_of_turn>");
		put(b, model ? "model" : m[i].role);
		put(b, "\n");
		if (sys.len && !model) {
			put(b, sys.s);
			put(b, "\n\n");
			sys.len = 0;
		}
		put_trimmed(b, m[i].content);
		put(b, "<end_of_turn>\n");
	}
	put(b, "<start_of_turn>model\n");
	if (sys.failed)
		b->failed = true;
	free(sys.s);
}

static void fmt_plain(struct sb *b, const struct chat_msg *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (role_is(&m[i], "system")) {
			put_trimmed(b, m[i].content);
			put(b, "\n\n");
		} else if (role_is(&m[i], "user")) {
			put(b, "User: ");
			put_trimmed(b, m[i].content);
			put(b, "\n");
		} else {
			put(b, "Assistant: ");
			put_trimmed(b, m[i].content);
			put(b, "\n");
		}
	}
	put(b, "Assistant:");
}

char *chat_format(int t, const struct chat_msg *msgs, size_t n)
{
	struct sb b = { 0 };

	put(&b, "");
	switch (t) {
	case TMPL_CHATML: fmt_chatml(&b, msgs, n, false); break;
	case TMPL_PHI4: fmt_chatml(&b, msgs, n, true); break;
	case TMPL_LLAMA2:
	case TMPL_LLAMA2_SYS:
	case TMPL_LLAMA2_SYS_BOS:
	case TMPL_LLAMA2_SYS_STRIP: fmt_llama2(&b, msgs, n, t); break;
	case TMPL_MISTRAL_V1:
	case TMPL_MISTRAL_V3:
	case TMPL_MISTRAL_V3_TEKKEN: fmt_mistral(&b, msgs, n, t); break;
	case TMPL_MISTRAL_V7: fmt_mistral_v7(&b, msgs, n); break;
	case TMPL_LLAMA3: fmt_llama3(&b, msgs, n); break;
	case TMPL_ZEPHYR: fmt_role_tags(&b, msgs, n, "<|endoftext|>"); break;
	case TMPL_PHI3: fmt_role_tags(&b, msgs, n, "<|end|>"); break;
	case TMPL_GEMMA: fmt_gemma(&b, msgs, n); break;
	default: fmt_plain(&b, msgs, n); break;
	}
	if (b.failed) {
		free(b.s);
		return NULL;
	}
	return b.s;
}
