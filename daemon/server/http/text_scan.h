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

#endif
