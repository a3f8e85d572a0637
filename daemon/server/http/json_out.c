/* The HTTP front's JSON writer (json_out.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_parse.h"
#include "common/utf8.h"
#include "daemon/server/http/json_out.h"

void exl_jw_init(struct exl_jw *w)
{
	memset(w, 0, sizeof(*w));
	w->first[0] = true;
}

void exl_jw_free(struct exl_jw *w)
{
	free(w->buf);
	exl_jw_init(w);
}

void exl_jw_reset(struct exl_jw *w)
{
	char *buf = w->buf;
	size_t cap = w->cap;

	exl_jw_init(w);
	w->buf = buf;
	w->cap = cap;
	if (buf)
		buf[0] = 0;
}

static void put(struct exl_jw *w, const char *s, size_t n)
{
	if (w->oom)
		return;
	if (n > SIZE_MAX / 2 - w->len - 1) {
		w->oom = true;
		return;
	}
	if (w->len + n + 1 > w->cap) {
		size_t cap = w->cap ? w->cap : 512;

		while (cap < w->len + n + 1)
			cap *= 2;
		char *p = realloc(w->buf, cap);
		if (!p) {
			w->oom = true;
			return;
		}
		w->buf = p;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	w->buf[w->len] = 0;
}

/* Before a value: the comma between values of an array or object. */
static void value_start(struct exl_jw *w)
{
	if (w->after_key) {
		w->after_key = false;
		return;
	}
	if (!w->first[w->depth])
		put(w, ",", 1);
	w->first[w->depth] = false;
}

static void jw_open(struct exl_jw *w, char c)
{
	value_start(w);
	put(w, &c, 1);
	/* Deeper than the writer tracks: the caller's bug, not the input's;
	 * the text is still JSON, its commas only may be wrong. */
	if (w->depth < EXL_JW_MAX_DEPTH)
		w->depth++;
	w->first[w->depth] = true;
}

static void jw_close(struct exl_jw *w, char c)
{
	put(w, &c, 1);
	if (w->depth > 0)
		w->depth--;
}

void exl_jw_obj(struct exl_jw *w)
{
	jw_open(w, '{');
}

void exl_jw_obj_end(struct exl_jw *w)
{
	jw_close(w, '}');
}

void exl_jw_arr(struct exl_jw *w)
{
	jw_open(w, '[');
}

void exl_jw_arr_end(struct exl_jw *w)
{
	jw_close(w, ']');
}

static void string(struct exl_jw *w, const char *s, size_t n)
{
	const uint8_t *u = (const uint8_t *)s;
	size_t i = 0, run = 0;

	put(w, "\"", 1);
	while (i < n) {
		uint8_t c = u[i];
		const char *esc = NULL;
		char hex[8];
		int k;

		switch (c) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		default: break;
		}
		if (!esc && c < 0x20) {
			snprintf(hex, sizeof(hex), "\\u%04x", c);
			esc = hex;
		}
		if (esc) {
			put(w, s + run, i - run);
			put(w, esc, strlen(esc));
			run = ++i;
			continue;
		}
		if (c < 0x80) {
			i++;
			continue;
		}
		k = exl_utf8_len(u + i, n - i);
		if (k) {
			i += (size_t)k;
			continue;
		}
		put(w, s + run, i - run);
		put(w, "\\ufffd", 6);
		run = ++i;
	}
	put(w, s + run, n - run);
	put(w, "\"", 1);
}

void exl_jw_key(struct exl_jw *w, const char *key)
{
	value_start(w);
	string(w, key, strlen(key));
	put(w, ":", 1);
	w->after_key = true;
}

void exl_jw_str(struct exl_jw *w, const char *s, size_t n)
{
	value_start(w);
	string(w, s ? s : "", s ? n : 0);
}

void exl_jw_cstr(struct exl_jw *w, const char *s)
{
	exl_jw_str(w, s, s ? strlen(s) : 0);
}

void exl_jw_int(struct exl_jw *w, int64_t v)
{
	char b[32];

	value_start(w);
	snprintf(b, sizeof(b), "%" PRId64, v);
	put(w, b, strlen(b));
}

void exl_jw_uint(struct exl_jw *w, uint64_t v)
{
	char b[32];

	value_start(w);
	snprintf(b, sizeof(b), "%" PRIu64, v);
	put(w, b, strlen(b));
}

void exl_jw_num(struct exl_jw *w, double v)
{
	char b[40];

	if (!isfinite(v)) {
		exl_jw_null(w);
		return;
	}
	value_start(w);
	/* %.9g: a float's value exactly, and short for simple ones */
	snprintf(b, sizeof(b), "%.9g", v);
	put(w, b, strlen(b));
}

void exl_jw_bool(struct exl_jw *w, bool v)
{
	value_start(w);
	put(w, v ? "true" : "false", v ? 4 : 5);
}

void exl_jw_null(struct exl_jw *w)
{
	value_start(w);
	put(w, "null", 4);
}

void exl_jw_raw(struct exl_jw *w, const char *json, size_t n)
{
	value_start(w);
	put(w, json, n);
}

static void put_cb(void *u, const char *s, size_t n)
{
	put(u, s, n);
}

void exl_jw_json(struct exl_jw *w, const struct exl_json *v)
{
	value_start(w);
	exl_json_write(v, put_cb, w);
}

void exl_jw_text(struct exl_jw *w, const char *s, size_t n)
{
	put(w, s, n);
	/* between documents (SSE events, NDJSON lines): no comma before the next */
	if (w->depth == 0)
		w->first[0] = true;
}

void exl_jw_kstr(struct exl_jw *w, const char *key, const char *s)
{
	exl_jw_key(w, key);
	exl_jw_cstr(w, s);
}

void exl_jw_kint(struct exl_jw *w, const char *key, int64_t v)
{
	exl_jw_key(w, key);
	exl_jw_int(w, v);
}

bool exl_jw_failed(const struct exl_jw *w)
{
	return w->oom;
}
