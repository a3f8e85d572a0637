/* GBNF text output with the escapes the parser reads back. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar_emit.h"
#include "daemon/core/grammar/grammar_internal.h"

void exl_gbnf_init(struct exl_gbnf_out *o)
{
	memset(o, 0, sizeof(*o));
}

void exl_gbnf_free(struct exl_gbnf_out *o)
{
	free(o->s);
	memset(o, 0, sizeof(*o));
}

char *exl_gbnf_take(struct exl_gbnf_out *o)
{
	char *s = NULL;

	if (!o->oom) {
		exl_gbnf_put(o, "", 0);
		s = o->oom ? NULL : o->s;
		if (s)
			o->s = NULL;
	}
	exl_gbnf_free(o);
	return s;
}

void exl_gbnf_put(struct exl_gbnf_out *o, const char *s, size_t n)
{
	if (o->oom)
		return;
	if (o->len + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 256;

		while (cap < o->len + n + 1)
			cap *= 2;
		char *p = realloc(o->s, cap);

		if (!p) {
			o->oom = true;
			return;
		}
		o->s = p;
		o->cap = cap;
	}
	if (n)
		memcpy(o->s + o->len, s, n);
	o->len += n;
	o->s[o->len] = 0;
}

void exl_gbnf_puts(struct exl_gbnf_out *o, const char *s)
{
	exl_gbnf_put(o, s, strlen(s));
}

void exl_gbnf_printf(struct exl_gbnf_out *o, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0) {
		o->oom = true;
		return;
	}
	if ((size_t)n < sizeof(buf)) {
		exl_gbnf_put(o, buf, (size_t)n);
		return;
	}
	char *big = malloc((size_t)n + 1);

	if (!big) {
		o->oom = true;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	exl_gbnf_put(o, big, (size_t)n);
	free(big);
}

/* One character inside "..." (in_class: inside [...]). */
static void put_cp(struct exl_gbnf_out *o, uint32_t c, bool in_class)
{
	uint8_t b[4];
	int n;

	if (c < 0x20 || c == 0x7F) {
		exl_gbnf_printf(o, "\\x%02X", c);
		return;
	}
	if (c == '\\' || (!in_class && c == '"') ||
	    (in_class && (c == ']' || c == '[' || c == '-' || c == '^'))) {
		char e[2] = { '\\', (char)c };

		exl_gbnf_put(o, e, 2);
		return;
	}
	n = exl_utf8_encode(c, b);
	exl_gbnf_put(o, (const char *)b, (size_t)n);
}

void exl_gbnf_literal(struct exl_gbnf_out *o, const char *s, size_t n)
{
	size_t i = 0;

	exl_gbnf_put(o, "\"", 1);
	while (i < n) {
		uint32_t c;
		int k = exl_utf8_decode((const uint8_t *)s + i, n - i, &c);

		if (!k) {
			c = (uint8_t)s[i];
			k = 1;
		}
		put_cp(o, c, false);
		i += (size_t)k;
	}
	exl_gbnf_put(o, "\"", 1);
}

void exl_gbnf_char(struct exl_gbnf_out *o, uint32_t c)
{
	exl_gbnf_put(o, "\"", 1);
	put_cp(o, c, false);
	exl_gbnf_put(o, "\"", 1);
}

void exl_gbnf_class(struct exl_gbnf_out *o, const uint32_t *ranges, size_t n, bool negate)
{
	exl_gbnf_put(o, negate ? "[^" : "[", negate ? 2 : 1);
	for (size_t i = 0; i < n; i++) {
		put_cp(o, ranges[2 * i], true);
		if (ranges[2 * i + 1] != ranges[2 * i]) {
			exl_gbnf_put(o, "-", 1);
			put_cp(o, ranges[2 * i + 1], true);
		}
	}
	exl_gbnf_put(o, "]", 1);
}

void exl_gbnf_name(struct exl_gbnf_out *o, const char *base, char *buf, size_t buflen)
{
	snprintf(buf, buflen, "%s-%u", base, o->next_id++);
}
