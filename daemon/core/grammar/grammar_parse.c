/* GBNF text -> rules over code-point classes (struct ir).
 *
 * A rule's body runs until the next `name ::=` or the end of the text, so
 * alternatives may continue on following lines (llama.cpp's one-line
 * bodies parse the same).  Groups and repetitions become synthesized rules:
 *   x*      S ::= x S |
 *   x+      x S
 *   x?      O ::= x |
 *   x{m,n}  m copies of x, then n-m nested optionals (x (x (...)?)?)?
 * The nested form keeps the matcher's stacks flat: a reference that ends
 * an alternative does not push a frame.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "daemon/core/grammar/grammar_internal.h"

#define MAX_RULES (1u << 21)
#define REPEAT_INF UINT32_MAX

struct parser {
	struct ir *ir;
	const char *s;
	size_t len;
	size_t pos;
	int nesting;
	char *err;
	size_t errlen;
	uint32_t *tmp;          /* class ranges being collected: lo, hi pairs */
	size_t n_tmp, cap_tmp;
};

void exl_ir_where(const char *text, size_t len, size_t off, char *buf, size_t buflen)
{
	size_t line = 1, col = 1;

	if (off > len)
		off = len;
	for (size_t i = 0; i < off; i++) {
		if (text[i] == '\n') {
			line++;
			col = 1;
		} else if (((unsigned char)text[i] & 0xC0) != 0x80) {
			col++;
		}
	}
	snprintf(buf, buflen, "line %zu, column %zu", line, col);
}

__attribute__((format(printf, 3, 4)))
static int fail_at(struct parser *p, size_t off, const char *fmt, ...)
{
	char where[64], msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	exl_ir_where(p->s, p->len, off, where, sizeof(where));
	snprintf(p->err, p->errlen, "%s: %s", where, msg);
	return -1;
}

static int oom(struct parser *p)
{
	snprintf(p->err, p->errlen, "out of memory parsing the grammar");
	return -1;
}

static int grow(void **ptr, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*ptr, c * size);
	if (!q)
		return -1;
	*ptr = q;
	*cap = c;
	return 0;
}

/* ---- the ir ---- */

void exl_ir_free(struct ir *ir)
{
	for (size_t i = 0; i < ir->n_rules; i++)
		free(ir->rules[i].e);
	free(ir->rules);
	free(ir->classes);
	free(ir->ranges);
	free(ir->names);
	free(ir->hash);
	memset(ir, 0, sizeof(*ir));
}

const char *exl_ir_rule_name(const struct ir *ir, uint32_t rule)
{
	return ir->names + ir->rules[rule].name;
}

static uint64_t name_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static int rule_new(struct parser *p, uint32_t name, uint32_t parent, bool synth, uint32_t *id)
{
	struct ir *ir = p->ir;

	if (ir->n_rules >= MAX_RULES) {
		snprintf(p->err, p->errlen, "grammar too large: more than %u rules", MAX_RULES);
		return -1;
	}
	if (grow((void **)&ir->rules, &ir->cap_rules, ir->n_rules + 1, sizeof(*ir->rules)))
		return oom(p);
	struct ir_rule *r = &ir->rules[ir->n_rules];

	memset(r, 0, sizeof(*r));
	r->name = name;
	r->parent = synth ? parent : (uint32_t)ir->n_rules;
	r->synthesized = synth;
	*id = (uint32_t)ir->n_rules++;
	return 0;
}

static int hash_insert(struct ir *ir, uint32_t rule)
{
	const char *nm = ir->names + ir->rules[rule].name;
	size_t mask = ir->hash_cap - 1;
	size_t i = name_hash(nm, strlen(nm)) & mask;

	while (ir->hash[i])
		i = (i + 1) & mask;
	ir->hash[i] = rule + 1;
	return 0;
}

static int hash_grow(struct parser *p)
{
	struct ir *ir = p->ir;
	size_t cap = ir->hash_cap ? ir->hash_cap * 2 : 64;
	uint32_t *old = ir->hash;
	size_t old_cap = ir->hash_cap;

	ir->hash = calloc(cap, sizeof(*ir->hash));
	if (!ir->hash) {
		ir->hash = old;
		return oom(p);
	}
	ir->hash_cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i])
			hash_insert(ir, old[i] - 1);
	free(old);
	return 0;
}

/* The rule named s[0..n), created (undefined) on first sight. */
static int symbol(struct parser *p, const char *s, size_t n, uint32_t *id)
{
	struct ir *ir = p->ir;
	uint32_t nm;

	if (ir->hash_cap) {
		size_t mask = ir->hash_cap - 1;

		for (size_t i = name_hash(s, n) & mask; ir->hash[i]; i = (i + 1) & mask) {
			uint32_t r = ir->hash[i] - 1;
			const char *rn = ir->names + ir->rules[r].name;

			if (strlen(rn) == n && !memcmp(rn, s, n)) {
				*id = r;
				return 0;
			}
		}
	}
	if (grow((void **)&ir->names, &ir->cap_names, ir->n_names + n + 1, 1))
		return oom(p);
	memcpy(ir->names + ir->n_names, s, n);
	ir->names[ir->n_names + n] = 0;
	nm = (uint32_t)ir->n_names;
	ir->n_names += n + 1;
	if (rule_new(p, nm, 0, false, id))
		return -1;
	if ((ir->n_rules + 1) * 2 > ir->hash_cap && hash_grow(p))
		return -1;
	return hash_insert(ir, *id);
}

static int push(struct parser *p, uint32_t rule, uint32_t type, uint32_t arg)
{
	struct ir *ir = p->ir;
	struct ir_rule *r = &ir->rules[rule];

	if (ir->n_elems >= EXL_GRAMMAR_MAX_ELEMS) {
		snprintf(p->err, p->errlen, "grammar too large: more than %u elements after "
			 "expanding repetitions", EXL_GRAMMAR_MAX_ELEMS);
		return -1;
	}
	if (grow((void **)&r->e, &r->cap, r->n + 1, sizeof(*r->e)))
		return oom(p);
	r->e[r->n].type = type;
	r->e[r->n].arg = arg;
	r->n++;
	ir->n_elems++;
	return 0;
}

/* ---- classes ---- */

static int tmp_add(struct parser *p, uint32_t lo, uint32_t hi)
{
	if (grow((void **)&p->tmp, &p->cap_tmp, p->n_tmp + 2, sizeof(*p->tmp)))
		return oom(p);
	p->tmp[p->n_tmp++] = lo;
	p->tmp[p->n_tmp++] = hi;
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts and merges p->tmp, negates it when asked, drops the surrogates,
 * and stores it as a class.  Empty: 1 (the caller reports it). */
static int class_finish(struct parser *p, bool negate, uint32_t *id)
{
	struct ir *ir = p->ir;
	size_t n = p->n_tmp / 2, k = 0;
	uint32_t *t = p->tmp;

	qsort(t, n, 2 * sizeof(*t), cmp_range);
	for (size_t i = 0; i < n; i++) {
		if (k && t[2 * i] <= t[2 * (k - 1) + 1] + 1) {
			if (t[2 * i + 1] > t[2 * (k - 1) + 1])
				t[2 * (k - 1) + 1] = t[2 * i + 1];
			continue;
		}
		t[2 * k] = t[2 * i];
		t[2 * k + 1] = t[2 * i + 1];
		k++;
	}
	size_t first = ir->n_ranges;
	uint32_t next = 0;

	/* Room for the complement (k + 1 ranges) plus surrogate splits. */
	if (grow((void **)&ir->ranges, &ir->cap_ranges, ir->n_ranges + 2 * (k + 3), sizeof(*ir->ranges)))
		return oom(p);
	for (size_t i = 0; i <= k; i++) {
		uint32_t lo, hi;

		if (negate) {
			if (i == k) {
				if (next > 0x10FFFF)
					break;
				lo = next;
				hi = 0x10FFFF;
			} else {
				lo = next;
				next = t[2 * i + 1] + 1;
				if (t[2 * i] == 0)
					continue;
				hi = t[2 * i] - 1;
			}
		} else {
			if (i == k)
				break;
			lo = t[2 * i];
			hi = t[2 * i + 1];
		}
		/* Drop [D800, DFFF]. */
		if (lo <= 0xDFFF && hi >= 0xD800) {
			if (lo < 0xD800) {
				ir->ranges[ir->n_ranges++] = lo;
				ir->ranges[ir->n_ranges++] = 0xD7FF;
			}
			if (hi <= 0xDFFF)
				continue;
			lo = 0xE000;
		}
		if (grow((void **)&ir->ranges, &ir->cap_ranges, ir->n_ranges + 2, sizeof(*ir->ranges)))
			return oom(p);
		ir->ranges[ir->n_ranges++] = lo;
		ir->ranges[ir->n_ranges++] = hi;
	}
	p->n_tmp = 0;
	if (ir->n_ranges == first)
		return 1;
	if (grow((void **)&ir->classes, &ir->cap_classes, ir->n_classes + 1, sizeof(*ir->classes)))
		return oom(p);
	ir->classes[ir->n_classes].first = (uint32_t)first;
	ir->classes[ir->n_classes].n = (uint32_t)((ir->n_ranges - first) / 2);
	*id = (uint32_t)ir->n_classes++;
	return 0;
}

static int push_char(struct parser *p, uint32_t rule, uint32_t c)
{
	uint32_t id;
	int r;

	if (tmp_add(p, c, c))
		return -1;
	r = class_finish(p, false, &id);
	if (r)
		return r < 0 ? r : oom(p);
	return push(p, rule, IR_CLASS, id);
}

/* ---- lexing ---- */

static bool is_word(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

static int peek(const struct parser *p)
{
	return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static void skip_space(struct parser *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];

		if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			p->pos++;
		} else if (c == '#') {
			while (p->pos < p->len && p->s[p->pos] != '\n')
				p->pos++;
		} else {
			break;
		}
	}
}

/* At `name ::=`?  (Ends the current rule's body.) */
static bool at_rule_start(struct parser *p)
{
	size_t save = p->pos;
	bool yes;

	while (p->pos < p->len && is_word((unsigned char)p->s[p->pos]))
		p->pos++;
	skip_space(p);
	yes = p->len - p->pos >= 3 && !memcmp(p->s + p->pos, "::=", 3);
	p->pos = save;
	return yes;
}

static int hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static int parse_char(struct parser *p, uint32_t *out)
{
	size_t at = p->pos;
	int c = peek(p);

	if (c != '\\') {
		int n = exl_utf8_decode((const uint8_t *)p->s + p->pos, p->len - p->pos, out);

		if (!n)
			return fail_at(p, at, "invalid UTF-8 in the grammar text");
		p->pos += (size_t)n;
		return 0;
	}
	p->pos++;
	c = peek(p);
	if (c < 0)
		return fail_at(p, at, "'\\' at the end of the text");
	p->pos++;
	int digits = 0;

	switch (c) {
	case 'x': digits = 2; break;
	case 'u': digits = 4; break;
	case 'U': digits = 8; break;
	case 'n': *out = '\n'; return 0;
	case 't': *out = '\t'; return 0;
	case 'r': *out = '\r'; return 0;
	case 'f': *out = '\f'; return 0;
	case 'v': *out = '\v'; return 0;
	case '0': *out = 0; return 0;
	default:
		/* Punctuation stands for itself. */
		if (c < 0x80 && c > ' ' && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
					     (c >= '0' && c <= '9'))) {
			*out = (uint32_t)c;
			return 0;
		}
		if (c < 0x80 && c > ' ')
			return fail_at(p, at, "unknown escape '\\%c'", c);
		return fail_at(p, at, "unknown escape after '\\'");
	}
	uint32_t v = 0;

	for (int i = 0; i < digits; i++) {
		int d = hex_digit(peek(p));

		if (d < 0)
			return fail_at(p, at, "'\\%c' wants %d hex digits", c, digits);
		v = v << 4 | (uint32_t)d;
		p->pos++;
	}
	if (v > 0x10FFFF)
		return fail_at(p, at, "U+%X is beyond U+10FFFF", v);
	if (v >= 0xD800 && v <= 0xDFFF)
		return fail_at(p, at, "U+%04X is a surrogate, not a character", v);
	*out = v;
	return 0;
}

static int parse_literal(struct parser *p, uint32_t rule)
{
	size_t at = p->pos;

	p->pos++;
	for (;;) {
		int c = peek(p);
		uint32_t cp;

		if (c < 0)
			return fail_at(p, at, "unterminated string literal");
		if (c == '"') {
			p->pos++;
			return 0;
		}
		if (c == '\n')
			return fail_at(p, p->pos, "newline inside a string literal (write \\n)");
		if (parse_char(p, &cp) || push_char(p, rule, cp))
			return -1;
	}
}

static int parse_class(struct parser *p, uint32_t rule)
{
	size_t at = p->pos;
	bool negate = false;
	uint32_t id;

	p->pos++;
	if (peek(p) == '^') {
		negate = true;
		p->pos++;
	}
	p->n_tmp = 0;
	for (;;) {
		int c = peek(p);
		uint32_t lo, hi;
		size_t cat = p->pos;

		if (c < 0)
			return fail_at(p, at, "unterminated character class");
		if (c == ']')
			break;
		if (c == '\n')
			return fail_at(p, cat, "newline inside a character class (write \\n)");
		if (parse_char(p, &lo))
			return -1;
		hi = lo;
		if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
			p->pos++;
			if (peek(p) == '\n')
				return fail_at(p, p->pos, "newline inside a character class (write \\n)");
			if (parse_char(p, &hi))
				return -1;
			if (hi < lo)
				return fail_at(p, cat, "range U+%04X-U+%04X is backwards", lo, hi);
		}
		if (tmp_add(p, lo, hi))
			return -1;
	}
	p->pos++;
	if (!p->n_tmp)
		return fail_at(p, at, "empty character class");
	int r = class_finish(p, negate, &id);

	if (r > 0)
		return fail_at(p, at, "character class matches no character");
	return r ? r : push(p, rule, IR_CLASS, id);
}

static int parse_count(struct parser *p, uint32_t *v)
{
	size_t at = p->pos;
	uint64_t x = 0;

	if (peek(p) < '0' || peek(p) > '9')
		return fail_at(p, at, "expected a number in { }");
	while (peek(p) >= '0' && peek(p) <= '9') {
		x = x * 10 + (uint64_t)(peek(p) - '0');
		p->pos++;
		if (x > EXL_GRAMMAR_MAX_REPEAT)
			return fail_at(p, at, "repetition count is over the limit of %d",
				       EXL_GRAMMAR_MAX_REPEAT);
	}
	*v = (uint32_t)x;
	return 0;
}

/* {m} {m,} {m,n} {,n} */
static int parse_braces(struct parser *p, uint32_t *min, uint32_t *max)
{
	size_t at = p->pos;

	p->pos++;
	skip_space(p);
	*min = 0;
	if (peek(p) != ',') {
		if (parse_count(p, min))
			return -1;
		skip_space(p);
		if (peek(p) == '}') {
			p->pos++;
			*max = *min;
			return 0;
		}
		if (peek(p) != ',')
			return fail_at(p, p->pos, "expected ',' or '}' in a repetition");
	}
	p->pos++;
	skip_space(p);
	*max = REPEAT_INF;
	if (peek(p) != '}') {
		if (parse_count(p, max))
			return -1;
		skip_space(p);
	}
	if (peek(p) != '}')
		return fail_at(p, p->pos, "expected '}' to end a repetition");
	p->pos++;
	if (*max < *min)
		return fail_at(p, at, "repetition {%u,%u} has its maximum below its minimum",
			       *min, *max);
	return 0;
}

/* The item rule->e[last..n) repeated min..max times. */
static int apply_repeat(struct parser *p, uint32_t rule, size_t last, uint32_t min, uint32_t max)
{
	struct ir *ir = p->ir;
	size_t n_item = ir->rules[rule].n - last;
	uint32_t parent = ir->rules[rule].parent;
	uint32_t name = ir->rules[rule].name;
	struct ir_elem x;
	uint32_t sub;

	if (!n_item)
		return 0;
	if (n_item > 1) {
		if (rule_new(p, name, parent, true, &sub))
			return -1;
		for (size_t i = last; i < ir->rules[rule].n; i++)
			if (push(p, sub, ir->rules[rule].e[i].type, ir->rules[rule].e[i].arg))
				return -1;
		if (push(p, sub, IR_END, 0))
			return -1;
		ir->n_elems -= n_item;
		ir->rules[rule].n = last;
		if (push(p, rule, IR_REF, sub))
			return -1;
	}
	x = ir->rules[rule].e[last];
	ir->rules[rule].n = last;
	ir->n_elems--;
	for (uint32_t i = 0; i < min; i++)
		if (push(p, rule, x.type, x.arg))
			return -1;
	if (max == REPEAT_INF) {
		if (rule_new(p, name, parent, true, &sub) ||
		    push(p, sub, x.type, x.arg) || push(p, sub, IR_REF, sub) ||
		    push(p, sub, IR_ALT, 0) || push(p, sub, IR_END, 0))
			return -1;
		return push(p, rule, IR_REF, sub);
	}
	if (max == min)
		return 0;
	uint32_t prev = 0;

	for (uint32_t k = 0; k < max - min; k++) {
		if (rule_new(p, name, parent, true, &sub) || push(p, sub, x.type, x.arg))
			return -1;
		ir->rules[sub].chain_level = k + 1;
		if (k && push(p, sub, IR_REF, prev))
			return -1;
		if (push(p, sub, IR_ALT, 0) || push(p, sub, IR_END, 0))
			return -1;
		prev = sub;
	}
	return push(p, rule, IR_REF, prev);
}

static int parse_alternates(struct parser *p, uint32_t rule, bool nested);

static int parse_sequence(struct parser *p, uint32_t rule, bool nested)
{
	size_t last = SIZE_MAX;

	for (;;) {
		skip_space(p);
		int c = peek(p);
		size_t at = p->pos;
		uint32_t id, min, max;

		if (c < 0 || c == '|')
			return 0;
		if (c == ')') {
			if (nested)
				return 0;
			return fail_at(p, at, "')' without a matching '('");
		}
		if (is_word(c)) {
			if (!nested && at_rule_start(p))
				return 0;
			while (p->pos < p->len && is_word((unsigned char)p->s[p->pos]))
				p->pos++;
			if (symbol(p, p->s + at, p->pos - at, &id))
				return -1;
			if (!p->ir->rules[id].use_at && !p->ir->rules[id].defined)
				p->ir->rules[id].use_at = at + 1;
			last = p->ir->rules[rule].n;
			if (push(p, rule, IR_REF, id))
				return -1;
			continue;
		}
		switch (c) {
		case '"':
			last = p->ir->rules[rule].n;
			if (parse_literal(p, rule))
				return -1;
			continue;
		case '[':
			last = p->ir->rules[rule].n;
			if (parse_class(p, rule))
				return -1;
			continue;
		case '.':
			p->pos++;
			if (tmp_add(p, 0, 0x10FFFF) || class_finish(p, false, &id))
				return -1;
			last = p->ir->rules[rule].n;
			if (push(p, rule, IR_CLASS, id))
				return -1;
			continue;
		case '(':
			if (p->nesting >= EXL_GRAMMAR_MAX_NESTING)
				return fail_at(p, at, "groups nested deeper than %d",
					       EXL_GRAMMAR_MAX_NESTING);
			if (rule_new(p, p->ir->rules[rule].name, p->ir->rules[rule].parent, true, &id))
				return -1;
			p->pos++;
			p->nesting++;
			if (parse_alternates(p, id, true))
				return -1;
			p->nesting--;
			if (peek(p) != ')')
				return fail_at(p, at, "'(' without a matching ')'");
			p->pos++;
			last = p->ir->rules[rule].n;
			if (push(p, rule, IR_REF, id))
				return -1;
			continue;
		case '*':
		case '+':
		case '?':
		case '{':
			if (last == SIZE_MAX)
				return fail_at(p, at, "'%c' has nothing before it to repeat", c);
			if (c == '{') {
				if (parse_braces(p, &min, &max))
					return -1;
			} else {
				p->pos++;
				min = c == '+';
				max = c == '?' ? 1 : REPEAT_INF;
			}
			if (apply_repeat(p, rule, last, min, max))
				return -1;
			continue;
		case '<':
		case '!':
			return fail_at(p, at, "token references (<...>) are not supported");
		case ':':
			if (p->len - p->pos >= 3 && !memcmp(p->s + p->pos, "::=", 3))
				return fail_at(p, at, "'::=' without a rule name before it");
			break;
		default:
			break;
		}
		if (c >= ' ' && c < 0x7F)
			return fail_at(p, at, "unexpected '%c'", c);
		return fail_at(p, at, "unexpected byte 0x%02X", (unsigned)c);
	}
}

static int parse_alternates(struct parser *p, uint32_t rule, bool nested)
{
	if (parse_sequence(p, rule, nested))
		return -1;
	while (peek(p) == '|') {
		p->pos++;
		if (push(p, rule, IR_ALT, 0) || parse_sequence(p, rule, nested))
			return -1;
	}
	return push(p, rule, IR_END, 0);
}

static int parse_rule(struct parser *p)
{
	size_t at = p->pos;
	uint32_t id;
	int c = peek(p);

	if (!is_word(c)) {
		if (c == ':' && p->len - p->pos >= 3 && !memcmp(p->s + p->pos, "::=", 3))
			return fail_at(p, at, "'::=' without a rule name before it");
		return fail_at(p, at, "expected a rule name");
	}
	while (p->pos < p->len && is_word((unsigned char)p->s[p->pos]))
		p->pos++;
	size_t name_end = p->pos;

	skip_space(p);
	if (p->len - p->pos < 3 || memcmp(p->s + p->pos, "::=", 3))
		return fail_at(p, p->pos, "expected '::=' after the rule name '%.*s'",
			       (int)(name_end - at > 64 ? 64 : name_end - at), p->s + at);
	if (symbol(p, p->s + at, name_end - at, &id))
		return -1;
	struct ir_rule *r = &p->ir->rules[id];

	if (r->defined) {
		char where[64];

		exl_ir_where(p->s, p->len, r->def_at, where, sizeof(where));
		return fail_at(p, at, "rule '%s' is defined twice (first at %s)",
			       exl_ir_rule_name(p->ir, id), where);
	}
	r->defined = true;
	r->def_at = at;
	p->pos += 3;
	return parse_alternates(p, id, false);
}

int exl_ir_parse(struct ir *ir, const char *text, size_t len, char *err, size_t errlen)
{
	struct parser p = { .ir = ir, .s = text, .len = len, .err = err, .errlen = errlen };
	int rc = -1;

	if (len > EXL_GRAMMAR_MAX_TEXT) {
		snprintf(err, errlen, "grammar text of %zu bytes is over the limit of %u", len,
			 EXL_GRAMMAR_MAX_TEXT);
		return -1;
	}
	skip_space(&p);
	while (p.pos < p.len) {
		if (parse_rule(&p))
			goto out;
		skip_space(&p);
	}
	for (size_t i = 0; i < ir->n_rules; i++) {
		const struct ir_rule *r = &ir->rules[i];

		if (!r->synthesized && !r->defined) {
			fail_at(&p, r->use_at ? r->use_at - 1 : 0, "undefined rule '%s'",
				exl_ir_rule_name(ir, (uint32_t)i));
			goto out;
		}
	}
	uint32_t root;

	if (!ir->hash_cap || symbol(&p, "root", 4, &root) || !ir->rules[root].defined) {
		snprintf(err, errlen, "the grammar has no 'root' rule (the start rule)");
		goto out;
	}
	ir->root = root;
	rc = 0;
out:
	free(p.tmp);
	return rc;
}
