/* Regular expressions -> GBNF expressions, by recursive descent writing
 * the grammar text as it goes (an item's text is built on its own so a
 * quantifier can wrap it).
 *
 * Python's re is the reference for meaning.  Where its classes are
 * Unicode-aware (\d \w \s), ours are their ASCII part, a subset; a
 * negated set holding one of them is cut to ASCII too, so nothing we
 * produce falls outside what Python matches.
 *
 * JSON mode (schema patterns) writes the JSON string body: characters
 * JSON must escape come out escaped, and an end without ^ / $ may be
 * surrounded by any string characters (patterns search, not match).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_emit.h"
#include "daemon/core/grammar/grammar_internal.h"
#include "daemon/core/grammar/regex_grammar.h"

#define MAX_REGEX (64u << 10)
#define MAX_DEPTH 200
#define MAX_RANGES 1024

struct rx {
	const char *s;
	size_t len, pos;
	bool json;
	int depth;
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 3, 4)))
static int rfail(struct rx *r, size_t at, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(r->err, r->errlen, "at offset %zu: %s", at, msg);
	return -1;
}

static int peek(const struct rx *r)
{
	return r->pos < r->len ? (unsigned char)r->s[r->pos] : -1;
}

/* ---- code point sets ---- */

struct cset {
	uint32_t r[2 * MAX_RANGES];
	size_t n;
	bool overflow;
};

static void cs_add(struct cset *c, uint32_t lo, uint32_t hi)
{
	if (c->n == MAX_RANGES) {
		c->overflow = true;
		return;
	}
	c->r[2 * c->n] = lo;
	c->r[2 * c->n + 1] = hi;
	c->n++;
}

static int cmp_pair(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void cs_normalize(struct cset *c)
{
	size_t k = 0;

	qsort(c->r, c->n, 2 * sizeof(uint32_t), cmp_pair);
	for (size_t i = 0; i < c->n; i++) {
		if (k && c->r[2 * i] <= c->r[2 * (k - 1) + 1] + 1) {
			if (c->r[2 * i + 1] > c->r[2 * (k - 1) + 1])
				c->r[2 * (k - 1) + 1] = c->r[2 * i + 1];
			continue;
		}
		c->r[2 * k] = c->r[2 * i];
		c->r[2 * k + 1] = c->r[2 * i + 1];
		k++;
	}
	c->n = k;
}

/* Complement within [0, top], in place: gap i (before range i; gap n
 * after the last) goes to slot i, written backwards so each write lands
 * on a range already read. */
static void cs_negate(struct cset *c, uint32_t top)
{
	size_t n, m = 0;

	cs_normalize(c);
	n = c->n;
	if (n == MAX_RANGES) {
		c->overflow = true;
		return;
	}
	for (size_t i = n + 1; i-- > 0; ) {
		int64_t glo = i ? (int64_t)c->r[2 * (i - 1) + 1] + 1 : 0;
		int64_t ghi = i < n ? (int64_t)c->r[2 * i] - 1 : (int64_t)top;

		if (ghi > (int64_t)top)
			ghi = top;
		if (glo > ghi) {
			c->r[2 * i] = 1;        /* empty */
			c->r[2 * i + 1] = 0;
		} else {
			c->r[2 * i] = (uint32_t)glo;
			c->r[2 * i + 1] = (uint32_t)ghi;
		}
	}
	for (size_t i = 0; i <= n; i++) {
		if (c->r[2 * i] > c->r[2 * i + 1])
			continue;
		c->r[2 * m] = c->r[2 * i];
		c->r[2 * m + 1] = c->r[2 * i + 1];
		m++;
	}
	c->n = m;
}

/* Intersect with [lo, hi]. */
static void cs_clip(struct cset *c, uint32_t lo, uint32_t hi)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n; i++) {
		uint32_t a = c->r[2 * i] > lo ? c->r[2 * i] : lo;
		uint32_t b = c->r[2 * i + 1] < hi ? c->r[2 * i + 1] : hi;

		if (a > b)
			continue;
		c->r[2 * k] = a;
		c->r[2 * k + 1] = b;
		k++;
	}
	c->n = k;
}

/* In place: a range across the surrogates becomes two. */
static void cs_remove_surrogates(struct cset *c)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n; i++) {
		uint32_t a = c->r[2 * i], b = c->r[2 * i + 1];

		if (b < 0xD800 || a > 0xDFFF)
			continue;
		if (a < 0xD800 && b > 0xDFFF) {
			if (c->n == MAX_RANGES) {
				c->overflow = true;
				return;
			}
			memmove(c->r + 2 * (i + 1), c->r + 2 * i, 2 * (c->n - i) * sizeof(*c->r));
			c->n++;
			c->r[2 * i + 1] = 0xD7FF;
			c->r[2 * (i + 1)] = 0xE000;
			i++;
		} else if (a < 0xD800) {
			c->r[2 * i + 1] = 0xD7FF;
		} else if (b > 0xDFFF) {
			c->r[2 * i] = 0xE000;
		} else {
			c->r[2 * i] = 1;        /* all surrogates: empty */
			c->r[2 * i + 1] = 0;
		}
	}
	for (size_t i = 0; i < c->n; i++) {
		if (c->r[2 * i] > c->r[2 * i + 1])
			continue;
		c->r[2 * k] = c->r[2 * i];
		c->r[2 * k + 1] = c->r[2 * i + 1];
		k++;
	}
	c->n = k;
}

static void add_shorthand(struct cset *c, int which)
{
	switch (which) {
	case 'd':
		cs_add(c, '0', '9');
		break;
	case 'w':
		cs_add(c, '0', '9');
		cs_add(c, 'A', 'Z');
		cs_add(c, 'a', 'z');
		cs_add(c, '_', '_');
		break;
	case 's':
		cs_add(c, '\t', '\r');
		cs_add(c, ' ', ' ');
		break;
	}
}

/* ---- output of characters and sets ---- */

/* A JSON string body's spelling of c as a literal. */
static void json_char(struct exl_gbnf_out *o, uint32_t c)
{
	switch (c) {
	case '"': exl_gbnf_puts(o, "\"\\\\\\\"\""); return;
	case '\\': exl_gbnf_puts(o, "\"\\\\\\\\\""); return;
	case '\n': exl_gbnf_puts(o, "\"\\\\n\""); return;
	case '\t': exl_gbnf_puts(o, "\"\\\\t\""); return;
	case '\r': exl_gbnf_puts(o, "\"\\\\r\""); return;
	case '\b': exl_gbnf_puts(o, "\"\\\\b\""); return;
	case '\f': exl_gbnf_puts(o, "\"\\\\f\""); return;
	default:
		break;
	}
	if (c < 0x20)
		exl_gbnf_printf(o, "\"\\\\u%04x\"", c);
	else
		exl_gbnf_char(o, c);
}

static void emit_char(struct rx *r, struct exl_gbnf_out *o, uint32_t c)
{
	if (r->json)
		json_char(o, c);
	else
		exl_gbnf_char(o, c);
}

static int emit_set(struct rx *r, struct exl_gbnf_out *o, struct cset *c, size_t at)
{
	cs_normalize(c);
	cs_remove_surrogates(c);
	if (c->overflow)
		return rfail(r, at, "character class too complex");
	if (!c->n)
		return rfail(r, at, "character class matches no character");
	if (!r->json) {
		exl_gbnf_class(o, c->r, c->n, false);
		return 0;
	}
	/* JSON: plain characters as a class, the ones JSON escapes one by
	 * one.  (The sets are big: on the heap, as this runs deep in the
	 * parser's recursion.) */
	static const uint32_t specials[][2] = { { 0, 0x1F }, { '"', '"' }, { '\\', '\\' } };
	struct cset *w = calloc(3, sizeof(*w));
	struct cset *esc = w, *keep = w + 1, *t = w + 2;
	bool first = true;

	if (!w)
		return rfail(r, at, "out of memory");
	for (size_t i = 0; i < c->n; i++)
		for (size_t s = 0; s < 3; s++) {
			uint32_t a = c->r[2 * i] > specials[s][0] ? c->r[2 * i] : specials[s][0];
			uint32_t b = c->r[2 * i + 1] < specials[s][1] ? c->r[2 * i + 1] : specials[s][1];

			if (a <= b)
				cs_add(esc, a, b);
		}
	cs_add(keep, 0, 0x1F);
	cs_add(keep, '"', '"');
	cs_add(keep, '\\', '\\');
	cs_negate(keep, 0x10FFFF);
	/* t = c ∩ keep */
	for (size_t i = 0; i < c->n; i++)
		for (size_t j = 0; j < keep->n; j++) {
			uint32_t a = c->r[2 * i] > keep->r[2 * j] ? c->r[2 * i] : keep->r[2 * j];
			uint32_t b = c->r[2 * i + 1] < keep->r[2 * j + 1] ? c->r[2 * i + 1] :
				     keep->r[2 * j + 1];

			if (a <= b)
				cs_add(t, a, b);
		}
	exl_gbnf_puts(o, "( ");
	if (t->n) {
		exl_gbnf_class(o, t->r, t->n, false);
		first = false;
	}
	for (size_t i = 0; i < esc->n; i++)
		for (uint32_t ch = esc->r[2 * i]; ch <= esc->r[2 * i + 1]; ch++) {
			if (!first)
				exl_gbnf_puts(o, " | ");
			json_char(o, ch);
			first = false;
		}
	exl_gbnf_puts(o, " )");
	free(w);
	return 0;
}

/* ---- escapes ---- */

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

enum esc_kind { ESC_CHAR, ESC_CLASS, ESC_NCLASS, ESC_START, ESC_END };

/* An escape at r->pos (the backslash).  *c: the character, or the
 * shorthand letter for a class. */
static int parse_escape(struct rx *r, bool in_class, enum esc_kind *kind, uint32_t *c)
{
	size_t at = r->pos;
	int e;

	r->pos++;
	e = peek(r);
	if (e < 0)
		return rfail(r, at, "'\\' at the end of the pattern");
	r->pos++;
	*kind = ESC_CHAR;
	switch (e) {
	case 'd': case 'w': case 's':
		*kind = ESC_CLASS;
		*c = (uint32_t)e;
		return 0;
	case 'D': case 'W': case 'S':
		*kind = ESC_NCLASS;
		*c = (uint32_t)(e - 'A' + 'a');
		return 0;
	case 'n': *c = '\n'; return 0;
	case 't': *c = '\t'; return 0;
	case 'r': *c = '\r'; return 0;
	case 'f': *c = '\f'; return 0;
	case 'v': *c = '\v'; return 0;
	case 'a': *c = 7; return 0;
	case '0': {
		uint32_t v = 0;

		for (int i = 0; i < 2 && peek(r) >= '0' && peek(r) <= '7'; i++)
			v = v * 8 + (uint32_t)(r->s[r->pos++] - '0');
		*c = v;
		return 0;
	}
	case 'b':
		if (in_class) {
			*c = 8;
			return 0;
		}
		return rfail(r, at, "word boundaries (\\b) are not supported");
	case 'B':
		return rfail(r, at, "word boundaries (\\B) are not supported");
	case 'A':
	case 'Z':
		if (in_class)
			return rfail(r, at, "'\\%c' inside a character class", e);
		*kind = e == 'A' ? ESC_START : ESC_END;
		return 0;
	case 'x': case 'u': case 'U': {
		int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
		uint32_t v = 0;

		for (int i = 0; i < n; i++) {
			int d = hexval(peek(r));

			if (d < 0)
				return rfail(r, at, "'\\%c' wants %d hex digits", e, n);
			v = v << 4 | (uint32_t)d;
			r->pos++;
		}
		if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
			return rfail(r, at, "'\\%c' escape is not a character", e);
		*c = v;
		return 0;
	}
	default:
		break;
	}
	if (e >= '1' && e <= '9')
		return rfail(r, at, "backreferences (\\%c) are not supported", e);
	if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
		return rfail(r, at, "escape '\\%c' is not supported", e);
	/* Anything else stands for itself (after decoding UTF-8). */
	r->pos--;
	int k = exl_utf8_decode((const uint8_t *)r->s + r->pos, r->len - r->pos, c);

	if (!k)
		return rfail(r, r->pos, "invalid UTF-8 in the pattern");
	r->pos += (size_t)k;
	return 0;
}

/* A plain character at r->pos. */
static int take_char(struct rx *r, uint32_t *c)
{
	int k = exl_utf8_decode((const uint8_t *)r->s + r->pos, r->len - r->pos, c);

	if (!k)
		return rfail(r, r->pos, "invalid UTF-8 in the pattern");
	r->pos += (size_t)k;
	return 0;
}

/* ---- classes ---- */

static int class_item(struct rx *r, struct cset *c, bool *shorthand, uint32_t *single, bool *is_single)
{
	enum esc_kind kind = ESC_CHAR;

	*is_single = false;
	if (peek(r) == '\\') {
		if (parse_escape(r, true, &kind, single))
			return -1;
		if (kind == ESC_CLASS || kind == ESC_NCLASS) {
			struct cset *t = calloc(1, sizeof(*t));

			if (!t)
				return rfail(r, r->pos, "out of memory");
			add_shorthand(t, (int)*single);
			if (kind == ESC_NCLASS)
				cs_negate(t, 0x7F);
			for (size_t i = 0; i < t->n; i++)
				cs_add(c, t->r[2 * i], t->r[2 * i + 1]);
			free(t);
			*shorthand = true;
			return 0;
		}
	} else if (take_char(r, single)) {
		return -1;
	}
	*is_single = true;
	return 0;
}

static int parse_class(struct rx *r, struct exl_gbnf_out *o)
{
	size_t at = r->pos;
	struct cset *c = calloc(1, sizeof(*c));
	bool negate = false, shorthand = false, first = true;
	int rc = -1;

	if (!c)
		return rfail(r, at, "out of memory");
	r->pos++;
	if (peek(r) == '^') {
		negate = true;
		r->pos++;
	}
	for (;;) {
		uint32_t lo, hi;
		bool single;

		if (peek(r) < 0) {
			rfail(r, at, "unterminated character class");
			goto out;
		}
		if (peek(r) == ']' && !first)
			break;
		if (peek(r) == '[' && r->pos + 1 < r->len && r->s[r->pos + 1] == ':') {
			rfail(r, r->pos, "POSIX classes ([:alpha:]) are not supported");
			goto out;
		}
		first = false;
		if (class_item(r, c, &shorthand, &lo, &single))
			goto out;
		if (!single) {
			if (peek(r) == '-' && r->pos + 1 < r->len && r->s[r->pos + 1] != ']') {
				rfail(r, r->pos, "a range cannot start or end with a class shorthand");
				goto out;
			}
			continue;
		}
		hi = lo;
		if (peek(r) == '-' && r->pos + 1 < r->len && r->s[r->pos + 1] != ']') {
			size_t rat = r->pos;
			bool single2;

			r->pos++;
			if (class_item(r, c, &shorthand, &hi, &single2))
				goto out;
			if (!single2) {
				rfail(r, rat, "a range cannot start or end with a class shorthand");
				goto out;
			}
			if (hi < lo) {
				rfail(r, rat, "range out of order");
				goto out;
			}
		}
		cs_add(c, lo, hi);
	}
	r->pos++;
	if (negate) {
		cs_negate(c, 0x10FFFF);
		if (shorthand)
			cs_clip(c, 0, 0x7F);
	}
	rc = emit_set(r, o, c, at);
out:
	free(c);
	return rc;
}

/* ---- structure ---- */

static int parse_alt(struct rx *r, struct exl_gbnf_out *o, bool top, bool *nullable);

static bool is_digit(int c)
{
	return c >= '0' && c <= '9';
}

/* {m} {m,} {m,n} {,n} at r->pos; false (position unchanged) when the
 * brace is a literal. */
static bool parse_braces(struct rx *r, long *min, long *max, bool *bad)
{
	size_t p = r->pos + 1;
	long a = -1, b = -1;
	bool comma = false;

	*bad = false;
	if (p < r->len && is_digit(r->s[p])) {
		a = 0;
		while (p < r->len && is_digit(r->s[p])) {
			/* past the limit the value no longer matters: stop
			 * before it overflows */
			if (a <= EXL_GRAMMAR_MAX_REPEAT)
				a = a * 10 + (r->s[p] - '0');
			if (a > EXL_GRAMMAR_MAX_REPEAT)
				*bad = true;
			p++;
		}
	}
	if (p < r->len && r->s[p] == ',') {
		comma = true;
		p++;
		if (p < r->len && is_digit(r->s[p])) {
			b = 0;
			while (p < r->len && is_digit(r->s[p])) {
				if (b <= EXL_GRAMMAR_MAX_REPEAT)
					b = b * 10 + (r->s[p] - '0');
				if (b > EXL_GRAMMAR_MAX_REPEAT)
					*bad = true;
				p++;
			}
		}
	}
	if (p >= r->len || r->s[p] != '}' || (a < 0 && b < 0))
		return false;
	r->pos = p + 1;
	*min = a < 0 ? 0 : a;
	*max = comma ? b : a;
	return true;
}

/* One atom and its quantifiers.  *kind: 1 for ^ / \A, 2 for $ / \Z. */
static int parse_item(struct rx *r, struct exl_gbnf_out *o, bool *nullable, int *anchor)
{
	struct exl_gbnf_out atom;
	size_t at = r->pos;
	int c = peek(r), rc = -1;
	bool null_atom = false;

	*anchor = 0;
	exl_gbnf_init(&atom);
	switch (c) {
	case '^':
		r->pos++;
		*anchor = 1;
		*nullable = true;
		rc = 0;
		goto out;
	case '$':
		r->pos++;
		*anchor = 2;
		*nullable = true;
		rc = 0;
		goto out;
	case '.': {
		struct cset *s = calloc(1, sizeof(*s));

		if (!s) {
			rfail(r, at, "out of memory");
			goto out;
		}
		r->pos++;
		cs_add(s, 0, '\n' - 1);
		cs_add(s, '\n' + 1, 0x10FFFF);
		rc = emit_set(r, &atom, s, at);
		free(s);
		if (rc)
			goto out;
		rc = -1;
		break;
	}
	case '[':
		if (parse_class(r, &atom))
			goto out;
		break;
	case '(': {
		if (++r->depth > MAX_DEPTH) {
			rfail(r, at, "groups nested deeper than %d", MAX_DEPTH);
			goto out;
		}
		r->pos++;
		if (peek(r) == '?') {
			r->pos++;
			int k = peek(r);

			if (k == ':') {
				r->pos++;
			} else if (k == 'P' && r->pos + 1 < r->len && r->s[r->pos + 1] == '<') {
				r->pos += 2;
				while (peek(r) >= 0 && peek(r) != '>')
					r->pos++;
				if (peek(r) != '>') {
					rfail(r, at, "unterminated group name");
					goto out;
				}
				r->pos++;
			} else if (k == '<' && r->pos + 1 < r->len && r->s[r->pos + 1] != '=' &&
				   r->s[r->pos + 1] != '!') {
				r->pos++;
				while (peek(r) >= 0 && peek(r) != '>')
					r->pos++;
				if (peek(r) != '>') {
					rfail(r, at, "unterminated group name");
					goto out;
				}
				r->pos++;
			} else if (k == '=' || k == '!' || k == '<') {
				rfail(r, at, "lookaround assertions are not supported");
				goto out;
			} else if (k == 'P' && r->pos + 1 < r->len && r->s[r->pos + 1] == '=') {
				rfail(r, at, "backreferences ((?P=name)) are not supported");
				goto out;
			} else {
				rfail(r, at, "group flags and extensions '(?%c' are not supported",
				      k >= ' ' && k < 0x7F ? k : '?');
				goto out;
			}
		}
		exl_gbnf_puts(&atom, "( ");
		if (parse_alt(r, &atom, false, &null_atom))
			goto out;
		exl_gbnf_puts(&atom, " )");
		if (peek(r) != ')') {
			rfail(r, at, "'(' without a matching ')'");
			goto out;
		}
		r->pos++;
		r->depth--;
		break;
	}
	case '\\': {
		enum esc_kind kind;
		uint32_t ch;

		if (parse_escape(r, false, &kind, &ch))
			goto out;
		if (kind == ESC_START || kind == ESC_END) {
			*anchor = kind == ESC_START ? 1 : 2;
			*nullable = true;
			rc = 0;
			goto out;
		}
		if (kind == ESC_CLASS || kind == ESC_NCLASS) {
			struct cset *s = calloc(1, sizeof(*s));

			if (!s) {
				rfail(r, at, "out of memory");
				goto out;
			}
			add_shorthand(s, (int)ch);
			if (kind == ESC_NCLASS)
				cs_negate(s, 0x7F);
			rc = emit_set(r, &atom, s, at);
			free(s);
			if (rc)
				goto out;
			rc = -1;
		} else {
			emit_char(r, &atom, ch);
		}
		break;
	}
	case '*': case '+': case '?':
		rfail(r, at, "'%c' has nothing before it to repeat", c);
		goto out;
	default: {
		uint32_t ch;

		if (take_char(r, &ch))
			goto out;
		emit_char(r, &atom, ch);
		break;
	}
	}
	/* Quantifiers. */
	bool quantified = false;

	for (;;) {
		long min, max;
		bool bad = false;
		size_t qat = r->pos;

		c = peek(r);
		if (c == '*' || c == '+' || c == '?') {
			r->pos++;
			min = c == '+';
			max = c == '?' ? 1 : -1;
		} else if (c == '{' && parse_braces(r, &min, &max, &bad)) {
			if (bad) {
				rfail(r, qat, "repetition count over the limit of %d",
				      EXL_GRAMMAR_MAX_REPEAT);
				goto out;
			}
			if (max >= 0 && max < min) {
				rfail(r, qat, "repetition {%ld,%ld} has its maximum below its minimum",
				      min, max);
				goto out;
			}
		} else {
			break;
		}
		if (quantified) {
			rfail(r, qat, "multiple repeat");
			goto out;
		}
		quantified = true;
		if (peek(r) == '?') {
			r->pos++;   /* lazy: the same strings */
		} else if (peek(r) == '+') {
			rfail(r, r->pos, "possessive quantifiers are not supported");
			goto out;
		}
		if (max < 0 && null_atom) {
			rfail(r, qat, "repeating something that can match the empty string is not "
			      "supported");
			goto out;
		}
		struct exl_gbnf_out q;

		exl_gbnf_init(&q);
		exl_gbnf_puts(&q, "( ");
		exl_gbnf_put(&q, atom.s ? atom.s : "", atom.len);
		exl_gbnf_puts(&q, " )");
		if (max < 0 && min <= 1)
			exl_gbnf_puts(&q, min == 0 ? "*" : "+");
		else if (max < 0)
			exl_gbnf_printf(&q, "{%ld,}", min);
		else if (min == 0 && max == 1)
			exl_gbnf_puts(&q, "?");
		else if (min == max)
			exl_gbnf_printf(&q, "{%ld}", min);
		else
			exl_gbnf_printf(&q, "{%ld,%ld}", min, max);
		exl_gbnf_free(&atom);
		atom = q;
		null_atom |= min == 0;
	}
	exl_gbnf_put(o, atom.s ? atom.s : "", atom.len);
	*nullable = null_atom;
	rc = 0;
out:
	exl_gbnf_free(&atom);
	return rc;
}

static int parse_seq(struct rx *r, struct exl_gbnf_out *o, bool top, bool *nullable,
		     bool *anch_start, bool *anch_end)
{
	bool first = true;

	*nullable = true;
	*anch_start = *anch_end = false;
	for (;;) {
		int c = peek(r);
		size_t at = r->pos;
		bool n;
		int anchor;

		if (c < 0 || c == '|' || c == ')')
			return 0;
		if (*anch_end)
			return rfail(r, at, "'$' is supported only at the end of the pattern");
		if (parse_item(r, o, &n, &anchor))
			return -1;
		if (anchor == 1) {
			if (!top || !first)
				return rfail(r, at, "'^' is supported only at the start of the pattern");
			*anch_start = true;
			continue;
		}
		if (anchor == 2) {
			if (!top)
				return rfail(r, at, "'$' is supported only at the end of the pattern");
			*anch_end = true;
			continue;
		}
		exl_gbnf_puts(o, " ");
		first = false;
		*nullable &= n;
	}
}

/* Alternatives; at the top, each gets the JSON mode's unanchored ends. */
static int parse_alt(struct rx *r, struct exl_gbnf_out *o, bool top, bool *nullable)
{
	bool any_null = false;

	for (;;) {
		bool n, as, ae;

		if (top && r->json)
			exl_gbnf_puts(o, "( ");
		size_t mark = o->len;

		if (parse_seq(r, o, top, &n, &as, &ae))
			return -1;
		if (top && r->json) {
			/* Search semantics: anything may come before and after. */
			if (!as) {
				struct exl_gbnf_out t;

				exl_gbnf_init(&t);
				exl_gbnf_puts(&t, "js-char* ");
				exl_gbnf_put(&t, o->s ? o->s + mark : "", o->len - mark);
				o->len = mark;
				exl_gbnf_put(o, t.s ? t.s : "", t.len);
				exl_gbnf_free(&t);
			}
			if (!ae)
				exl_gbnf_puts(o, " js-char*");
			exl_gbnf_puts(o, " )");
		}
		any_null |= n;
		if (peek(r) != '|')
			break;
		r->pos++;
		exl_gbnf_puts(o, " | ");
	}
	if (top && peek(r) == ')')
		return rfail(r, r->pos, "')' without a matching '('");
	*nullable = any_null;
	return 0;
}

static int convert(struct rx *r, struct exl_gbnf_out *o, const char *name)
{
	bool n;

	if (r->len > MAX_REGEX)
		return rfail(r, 0, "pattern longer than %u bytes", MAX_REGEX);
	exl_gbnf_printf(o, "%s ::= ", name);
	if (parse_alt(r, o, true, &n))
		return -1;
	exl_gbnf_puts(o, "\n");
	if (o->oom) {
		snprintf(r->err, r->errlen, "out of memory converting the pattern");
		return -1;
	}
	return 0;
}

char *exl_regex_to_gbnf(const char *re, size_t len, char *err, size_t errlen)
{
	struct exl_gbnf_out o;
	struct rx r = { .s = re ? re : "", .len = re ? len : 0, .err = err, .errlen = errlen };

	exl_gbnf_init(&o);
	if (convert(&r, &o, "root")) {
		exl_gbnf_free(&o);
		return NULL;
	}
	return exl_gbnf_take(&o);
}

int exl_regex_emit_json_body(struct exl_gbnf_out *out, const char *name, const char *re,
			     size_t len, char *err, size_t errlen)
{
	struct rx r = { .s = re, .len = len, .json = true, .err = err, .errlen = errlen };

	return convert(&r, out, name);
}
