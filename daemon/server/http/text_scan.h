/* Byte-string scans the reply readers share (tool_calls.c, reasoning.c):
 * texts with a length, not NUL-terminated, markers as C strings. */
#ifndef EXL_HTTP_TEXT_SCAN_H
#define EXL_HTTP_TEXT_SCAN_H

#include <stdbool.h>
#include <stddef.h>

/* The offset of what in s[from, n), or n. */
size_t exl_text_find(const char *s, size_t n, size_t from, const char *what);
/* Whether s[at, n) starts with what. */
bool exl_text_starts(const char *s, size_t n, size_t at, const char *what);
/* The first offset from i that is not a space, tab, CR or LF (or n). */
size_t exl_text_skip_ws(const char *s, size_t n, size_t i);
bool exl_text_is_ws(char c);
/* The longest tail of s[0, n) that is a proper start of what: a marker a
 * stream may be in the middle of writing. */
size_t exl_text_partial_tail(const char *s, size_t n, const char *what);

/* gpt-oss's harmony format: a reply is messages, each a header, then
 * <|message|>, its body and <|end|> (the last one's <|return|> or <|call|>
 * ends generation instead), the next opened by <|start|>assistant:
 *   <|channel|>analysis<|message|>...<|end|><|start|>assistant
 *   <|channel|>final<|message|>...
 * A header names the channel (analysis, commentary, final) and, for a
 * tool call, the recipient, before or after the channel:
 *   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
 *    to=functions.NAME<|channel|>commentary json<|message|> */
#define EXL_HARMONY_START "<|start|>assistant"
#define EXL_HARMONY_CHANNEL "<|channel|>"
#define EXL_HARMONY_MESSAGE "<|message|>"

/* A header's parts, as offsets into the text. */
struct exl_harmony_head {
	size_t body;                  /* after its <|message|> */
	size_t channel, channel_len;  /* the (last) channel's name */
	size_t to, to_len;            /* the recipient; to_len 0 when none (or "assistant") */
};
/* The header at s[at]: 1 when s[at, n) opens with a whole one (h filled),
 * 0 when it may still become one (a start of one, or only whitespace),
 * -1 when it is not one. */
int exl_harmony_head(const char *s, size_t n, size_t at, struct exl_harmony_head *h);
/* Where the body that starts at from ends: its <|end|>, <|call|> or
 * <|return|> (its length in *mark), or n (*mark 0). */
size_t exl_harmony_body_end(const char *s, size_t n, size_t from, size_t *mark);
/* The longest tail of s[0, n) that is a proper start of a body's end
 * marker. */
size_t exl_harmony_partial_tail(const char *s, size_t n);
/* Whether a header's channel is name. */
bool exl_harmony_channel_is(const char *s, const struct exl_harmony_head *h, const char *name);

#endif
