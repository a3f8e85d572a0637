/* The template's text to tokens, as the reference's lexer does it: its
 * preprocessing (trailing newline, lstrip_blocks, trim_blocks, the
 * transformers {% generation %} tag) is textual, over the whole template,
 * string literals included, and so is ours. */
#include <stdio.h>
#include <string.h>

#include "common/jinja.h"

/* A line starts at 0 and after \n, \r, U+2028, U+2029 (JavaScript's ^ in
 * multiline mode). */
static bool line_start(const char *s, size_t i)
{
	if (i == 0)
		return true;
	if (s[i - 1] == '\n' || s[i - 1] == '\r')
		return true;
	return i >= 3 && (uint8_t)s[i - 3] == 0xE2 && (uint8_t)s[i - 2] == 0x80 &&
	       ((uint8_t)s[i - 1] == 0xA8 || (uint8_t)s[i - 1] == 0xA9);
}

/* /^[ \t]*({[#%-])/gm -> "$1" */
static int lstrip_blocks(struct jctx *c, const char *s, size_t n, struct jbuf *o)
{
	size_t i = 0;

	while (i < n) {
		if (line_start(s, i)) {
			size_t j = i;

			while (j < n && (s[j] == ' ' || s[j] == '\t'))
				j++;
			if (j + 1 < n && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' ||
							 s[j + 1] == '-'))
				i = j;
			else if (exl_jbuf_put(c, o, s + i, j - i))
				return -1;
			else
				i = j;
			if (i >= n)
				break;
		}
		if (exl_jbuf_putc(c, o, s[i]))
			return -1;
		i++;
	}
	return 0;
}

/* /([#%-]})\n/g -> "$1", noting where each newline was (for line numbers). */
static int trim_blocks(struct jctx *c, const char *s, size_t n, struct jbuf *o, size_t **cuts,
		       size_t *ncuts)
{
	size_t i = 0, cap = 0;

	*cuts = NULL;
	*ncuts = 0;
	while (i < n) {
		if (i + 2 < n && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' &&
		    s[i + 2] == '\n') {
			if (exl_jbuf_put(c, o, s + i, 2))
				return -1;
			if (*ncuts == cap) {
				size_t ncap = cap ? cap * 2 : 64;
				size_t *nc = exl_jalloc_array(c, ncap, sizeof(*nc));

				if (!nc)
					return -1;
				if (cap)
					memcpy(nc, *cuts, cap * sizeof(*nc));
				*cuts = nc;
				cap = ncap;
			}
			(*cuts)[(*ncuts)++] = o->n;
			i += 3;
			continue;
		}
		if (exl_jbuf_putc(c, o, s[i]))
			return -1;
		i++;
	}
	return 0;
}

/* {%-? \s* (end)?generation \s* -?%} at s[i]: its end, 0 if none. */
static size_t generation_tag(const char *s, size_t n, size_t i, bool *lstrip, bool *rstrip)
{
	if (i + 2 > n || s[i] != '{' || s[i + 1] != '%')
		return 0;
	i += 2;
	*lstrip = i < n && s[i] == '-';
	if (*lstrip)
		i++;
	i = exl_jt_skip_space(s, n, i);
	if (n - i >= 3 && !memcmp(s + i, "end", 3) && n - i >= 13 &&
	    !memcmp(s + i + 3, "generation", 10))
		i += 3;
	if (n - i < 10 || memcmp(s + i, "generation", 10))
		return 0;
	i = exl_jt_skip_space(s, n, i + 10);
	*rstrip = i < n && s[i] == '-';
	if (*rstrip)
		i++;
	if (n - i < 2 || s[i] != '%' || s[i + 1] != '}')
		return 0;
	return i + 2;
}

/* /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs: the tag goes, and
 * the whitespace around it where it says so. */
static int generation_tags(struct jctx *c, const char *s, size_t n, struct jbuf *o)
{
	size_t i = 0;

	while (i < n) {
		size_t w = exl_jt_skip_space(s, n, i), end;
		bool ls, rs;

		end = generation_tag(s, n, w, &ls, &rs);
		if (end) {
			size_t a = exl_jt_skip_space(s, n, end);

			if (!ls && exl_jbuf_put(c, o, s + i, w - i))
				return -1;
			if (!rs && exl_jbuf_put(c, o, s + end, a - end))
				return -1;
			i = a;
			continue;
		}
		if (w == i)
			w = i + 1;
		if (exl_jbuf_put(c, o, s + i, w - i))
			return -1;
		i = w;
	}
	return 0;
}

struct lexer {
	struct jctx *c;
	const char *s;
	size_t n, i;
	struct jtoken *t;
	size_t nt, cap;
};

static int push(struct lexer *lx, enum jtok t, const char *p, size_t n, size_t off)
{
	if (lx->nt == lx->cap) {
		size_t cap = lx->cap ? lx->cap * 2 : 256;
		struct jtoken *nt = exl_jalloc_array(lx->c, cap, sizeof(*nt));

		if (!nt)
			return -1;
		if (lx->nt)
			memcpy(nt, lx->t, lx->nt * sizeof(*nt));
		lx->t = nt;
		lx->cap = cap;
	}
	lx->t[lx->nt].t = t;
	lx->t[lx->nt].p = p;
	lx->t[lx->nt].n = n;
	lx->t[lx->nt].off = off;
	lx->nt++;
	return 0;
}

static enum jtok last_type(const struct lexer *lx)
{
	return lx->nt ? lx->t[lx->nt - 1].t : T_EOF;
}

/* {%- {{- {#-: the text before loses its trailing whitespace. */
static void strip_trailing(struct lexer *lx)
{
	struct jtoken *t;
	const char *p;
	size_t n;

	if (!lx->nt || lx->t[lx->nt - 1].t != T_TEXT)
		return;
	t = &lx->t[lx->nt - 1];
	exl_jt_trim(t->p, t->n, false, true, &p, &n);
	t->n = n;
	if (!n)
		lx->nt--;
}

static int fail_at(struct lexer *lx, size_t off, const char *what)
{
	return exl_jfail(lx->c, exl_jline(lx->c, off), "%s", what);
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
		return (ch | 0x20) - 'a' + 10;
	return -1;
}

/* A low surrogate after a high one in b: the two become the character. */
static void join_pair(struct jbuf *b)
{
	uint8_t *p;
	uint32_t h, l, cp;

	if (b->n < 6)
		return;
	p = (uint8_t *)b->p + b->n - 6;
	if (p[0] != 0xED || p[1] < 0xA0 || p[1] > 0xAF || p[3] != 0xED || p[4] < 0xB0)
		return;
	h = 0xD000 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
	l = 0xD000 | (uint32_t)(p[4] & 0x3F) << 6 | (p[5] & 0x3F);
	cp = 0x10000 + ((h - 0xD800) << 10) + (l - 0xDC00);
	p[0] = (uint8_t)(0xF0 | cp >> 18);
	p[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
	p[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
	p[3] = (uint8_t)(0x80 | (cp & 0x3F));
	b->n -= 2;
}

static int string_literal(struct lexer *lx)
{
	char quote = lx->s[lx->i];
	size_t start = lx->i;
	struct jbuf b = { 0 };

	lx->i++;
	for (;;) {
		if (lx->i >= lx->n)
			return fail_at(lx, start, "unterminated string");
		char ch = lx->s[lx->i];

		if (ch == quote)
			break;
		if (ch != '\\') {
			if (exl_jbuf_putc(lx->c, &b, ch))
				return -1;
			lx->i++;
			continue;
		}
		if (++lx->i >= lx->n)
			return fail_at(lx, start, "unterminated string");
		ch = lx->s[lx->i++];
		if (ch == 'x' || ch == 'u') {
			int len = ch == 'x' ? 2 : 4;
			uint32_t v = 0;

			if (lx->n - lx->i < (size_t)len)
				return fail_at(lx, lx->i, "invalid hexadecimal escape sequence");
			for (int k = 0; k < len; k++) {
				int h = hexval(lx->s[lx->i + (size_t)k]);

				if (h < 0)
					return fail_at(lx, lx->i,
						       "invalid hexadecimal escape sequence");
				v = v << 4 | (uint32_t)h;
			}
			lx->i += (size_t)len;
			if (exl_jbuf_put_cp(lx->c, &b, v))
				return -1;
			if (v >= 0xDC00 && v <= 0xDFFF)
				join_pair(&b);
			continue;
		}
		{
			static const char from[] = "ntrbfv'\"\\";
			static const char to[] = "\n\t\r\b\f\v'\"\\";
			const char *e = strchr(from, ch);
			char msg[64];

			if (!ch || !e) {
				snprintf(msg, sizeof(msg), "unexpected escaped character: %c", ch);
				return fail_at(lx, lx->i - 1, msg);
			}
			if (exl_jbuf_putc(lx->c, &b, to[e - from]))
				return -1;
		}
	}
	lx->i++;
	return push(lx, T_STR, b.p ? b.p : "", b.n, start);
}

struct fixed {
	const char *s;
	enum jtok t;
};

static const struct fixed fixed[] = {
	{ "{%", T_OPEN_STMT }, { "%}", T_CLOSE_STMT }, { "{{", T_OPEN_EXPR },
	{ "}}", T_CLOSE_EXPR }, { "(", T_LPAREN }, { ")", T_RPAREN }, { "{", T_LBRACE },
	{ "}", T_RBRACE }, { "[", T_LBRACKET }, { "]", T_RBRACKET }, { ",", T_COMMA },
	{ ".", T_DOT }, { ":", T_COLON }, { "|", T_PIPE }, { "<=", T_CMP }, { ">=", T_CMP },
	{ "==", T_CMP }, { "!=", T_CMP }, { "<", T_CMP }, { ">", T_CMP }, { "+", T_ADD },
	{ "-", T_ADD }, { "~", T_ADD }, { "**", T_POW }, { "*", T_MUL }, { "//", T_MUL },
	{ "/", T_MUL }, { "%", T_MUL }, { "=", T_EQUALS },
};

static bool at(const struct lexer *lx, const char *what)
{
	size_t k = strlen(what);

	return lx->n - lx->i >= k && !memcmp(lx->s + lx->i, what, k);
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* 1e3, 2.5E-7: Jinja2's exponent (the reference stops before the e). */
static size_t exponent(const struct lexer *lx, size_t i)
{
	size_t j = i + 1;

	if (i >= lx->n || (lx->s[i] != 'e' && lx->s[i] != 'E'))
		return i;
	if (j < lx->n && (lx->s[j] == '+' || lx->s[j] == '-'))
		j++;
	if (j >= lx->n || !is_digit(lx->s[j]))
		return i;
	while (j < lx->n && is_digit(lx->s[j]))
		j++;
	return j;
}

static int tokenize(struct lexer *lx)
{
	int curly = 0;

	while (lx->i < lx->n) {
		enum jtok last = last_type(lx);
		size_t start = lx->i;

		if (last == T_EOF || last == T_CLOSE_STMT || last == T_CLOSE_EXPR ||
		    last == T_COMMENT) {
			while (lx->i < lx->n &&
			       !(lx->s[lx->i] == '{' && lx->i + 1 < lx->n &&
				 (lx->s[lx->i + 1] == '%' || lx->s[lx->i + 1] == '{' ||
				  lx->s[lx->i + 1] == '#')))
				lx->i++;
			if (lx->i > start) {
				if (push(lx, T_TEXT, lx->s + start, lx->i - start, start))
					return -1;
				continue;
			}
		}
		if (at(lx, "{#")) {
			bool before, after;
			size_t cs;

			lx->i += 2;
			before = lx->i < lx->n && lx->s[lx->i] == '-';
			if (before)
				lx->i++;
			cs = lx->i;
			while (!(lx->i + 1 < lx->n && lx->s[lx->i] == '#' && lx->s[lx->i + 1] == '}')) {
				if (lx->i + 2 >= lx->n)
					return fail_at(lx, start, "missing end of comment tag");
				lx->i++;
			}
			after = lx->i > cs && lx->s[lx->i - 1] == '-';
			if (before)
				strip_trailing(lx);
			if (push(lx, T_COMMENT, lx->s + cs, lx->i - cs - after, start))
				return -1;
			lx->i += 2;
			if (after)
				lx->i = exl_jt_skip_space(lx->s, lx->n, lx->i);
			continue;
		}
		if (at(lx, "{%-")) {
			strip_trailing(lx);
			if (push(lx, T_OPEN_STMT, lx->s + lx->i, 2, start))
				return -1;
			lx->i += 3;
			continue;
		}
		if (at(lx, "{{-")) {
			strip_trailing(lx);
			if (push(lx, T_OPEN_EXPR, lx->s + lx->i, 2, start))
				return -1;
			curly = 0;
			lx->i += 3;
			continue;
		}
		lx->i = exl_jt_skip_space(lx->s, lx->n, lx->i);
		if (lx->i >= lx->n)
			break;
		start = lx->i;
		if (at(lx, "-%}")) {
			if (push(lx, T_CLOSE_STMT, lx->s + lx->i + 1, 2, start))
				return -1;
			lx->i = exl_jt_skip_space(lx->s, lx->n, lx->i + 3);
			continue;
		}
		if (at(lx, "-}}")) {
			if (push(lx, T_CLOSE_EXPR, lx->s + lx->i + 1, 2, start))
				return -1;
			lx->i = exl_jt_skip_space(lx->s, lx->n, lx->i + 3);
			continue;
		}
		char ch = lx->s[lx->i];

		if (ch == '-' || ch == '+') {
			if (last == T_TEXT || last == T_EOF)
				return fail_at(lx, start, ch == '-' ? "unexpected character: -" :
					       "unexpected character: +");
			if (last != T_IDENT && last != T_NUM && last != T_STR && last != T_RPAREN &&
			    last != T_RBRACKET) {
				/* a sign: -1 is one number token, -x an operator */
				size_t d = ++lx->i;

				while (lx->i < lx->n && is_digit(lx->s[lx->i]))
					lx->i++;
				if (lx->i > d && lx->i + 1 < lx->n && lx->s[lx->i] == '.' &&
				    is_digit(lx->s[lx->i + 1])) {
					lx->i++;
					while (lx->i < lx->n && is_digit(lx->s[lx->i]))
						lx->i++;
				}
				if (push(lx, lx->i > d ? T_NUM : T_UNARY, lx->s + start,
					 lx->i - start,
					 start))
					return -1;
				continue;
			}
		}
		{
			bool found = false;

			for (size_t k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++) {
				if (fixed[k].t == T_CLOSE_EXPR && curly > 0)
					continue;
				if (!at(lx, fixed[k].s))
					continue;
				if (push(lx, fixed[k].t, lx->s + lx->i, strlen(fixed[k].s), start))
					return -1;
				if (fixed[k].t == T_OPEN_EXPR)
					curly = 0;
				else if (fixed[k].t == T_LBRACE)
					curly++;
				else if (fixed[k].t == T_RBRACE)
					curly--;
				lx->i += strlen(fixed[k].s);
				found = true;
				break;
			}
			if (found)
				continue;
		}
		if (ch == '\'' || ch == '"') {
			if (string_literal(lx))
				return -1;
			continue;
		}
		if (is_digit(ch)) {
			while (lx->i < lx->n && is_digit(lx->s[lx->i]))
				lx->i++;
			if (last_type(lx) != T_DOT && lx->i + 1 < lx->n && lx->s[lx->i] == '.' &&
			    is_digit(lx->s[lx->i + 1])) {
				lx->i++;
				while (lx->i < lx->n && is_digit(lx->s[lx->i]))
					lx->i++;
			}
			lx->i = exponent(lx, lx->i);
			if (push(lx, T_NUM, lx->s + start, lx->i - start, start))
				return -1;
			continue;
		}
		if (jt_is_word(ch)) {
			while (lx->i < lx->n && jt_is_word(lx->s[lx->i]))
				lx->i++;
			if (push(lx, T_IDENT, lx->s + start, lx->i - start, start))
				return -1;
			continue;
		}
		{
			uint32_t cp;
			size_t k = exl_jt_decode(lx->s + lx->i, lx->n - lx->i, &cp);
			char msg[64];

			snprintf(msg, sizeof(msg), "unexpected character: %.*s", (int)k,
				 lx->s + lx->i);
			return fail_at(lx, start, msg);
		}
	}
	return push(lx, T_EOF, lx->s + lx->n, 0, lx->n);
}

int exl_jinja_lex(struct jctx *c, const char *src, size_t n, struct jtoken **toks, size_t *ntoks)
{
	struct jbuf a = { 0 }, b = { 0 }, d = { 0 };
	struct lexer lx = { 0 };
	size_t *cuts, ncuts;
	char *s;

	if (exl_jt_sanitize(c, src, n, &s, &n))
		return -1;
	if (n && s[n - 1] == '\n')
		n--;
	if (lstrip_blocks(c, s, n, &a) || trim_blocks(c, a.p, a.n, &b, &cuts, &ncuts) ||
	    generation_tags(c, b.p, b.n, &d))
		return -1;
	c->src = d.p ? d.p : "";
	c->src_len = d.n;
	c->nl_cut = cuts;
	c->n_nl_cut = ncuts;
	lx.c = c;
	lx.s = c->src;
	lx.n = c->src_len;
	if (tokenize(&lx))
		return -1;
	*toks = lx.t;
	*ntoks = lx.nt;
	return 0;
}
