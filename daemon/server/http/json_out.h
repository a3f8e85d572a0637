/* A small JSON writer for the HTTP front's replies: values appended to a
 * growing buffer, commas placed by the writer.  Strings are written as
 * valid JSON whatever their bytes: invalid UTF-8 becomes U+FFFD, control
 * characters \uXXXX.  Numbers that JSON cannot hold (NaN, infinities) are
 * written as null.  Running out of memory is sticky: later calls do
 * nothing and exl_jw_take() returns NULL.
 */
#ifndef EXL_HTTP_JSON_OUT_H
#define EXL_HTTP_JSON_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXL_JW_MAX_DEPTH 32

struct exl_jw {
	char *buf;
	size_t len, cap;
	bool oom;
	int depth;
	bool first[EXL_JW_MAX_DEPTH + 1]; /* no value yet at this level */
	bool after_key;                   /* a key was written; its value comes next */
};

void exl_jw_init(struct exl_jw *w);
void exl_jw_free(struct exl_jw *w);
/* Empties w for another document (keeps its buffer). */
void exl_jw_reset(struct exl_jw *w);

void exl_jw_obj(struct exl_jw *w);
void exl_jw_obj_end(struct exl_jw *w);
void exl_jw_arr(struct exl_jw *w);
void exl_jw_arr_end(struct exl_jw *w);
void exl_jw_key(struct exl_jw *w, const char *key);

void exl_jw_str(struct exl_jw *w, const char *s, size_t n);
void exl_jw_cstr(struct exl_jw *w, const char *s);
void exl_jw_int(struct exl_jw *w, int64_t v);
void exl_jw_uint(struct exl_jw *w, uint64_t v);
void exl_jw_num(struct exl_jw *w, double v);
void exl_jw_bool(struct exl_jw *w, bool v);
void exl_jw_null(struct exl_jw *w);
/* A value already written as JSON text (not checked). */
void exl_jw_raw(struct exl_jw *w, const char *json, size_t n);
struct exl_json;
/* A parsed JSON value, written compactly (numbers as they were written). */
void exl_jw_json(struct exl_jw *w, const struct exl_json *v);
/* Bytes outside any value (an SSE "data: " prefix, a newline); at the top
 * level the next value starts a new document (no comma). */
void exl_jw_text(struct exl_jw *w, const char *s, size_t n);

/* Shorthands: a key and its value. */
void exl_jw_kstr(struct exl_jw *w, const char *key, const char *s);
void exl_jw_kint(struct exl_jw *w, const char *key, int64_t v);

/* Whether memory ran out. */
bool exl_jw_failed(const struct exl_jw *w);

#endif
