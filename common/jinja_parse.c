/* Tokens to a tree, with the reference parser's grammar and precedence
 * (lowest first): `a if b else c`, or, and, not, comparisons and in,
 * + - ~, * / // %, **, is, |, unary - +, calls and members, primaries.
 * One extension: a test takes arguments (`is divisibleby(3)`,
 * `is sameas none`), as in Jinja2. */
#include <stdlib.h>
#include <string.h>

#include "common/jinja.h"

#define MAX_NESTING 256

struct parser {
	struct jctx *c;
	const struct jtoken *t;
	size_t n, i;
	unsigned depth;
};

static const struct jtoken *peek(const struct parser *p, size_t k)
{
	return p->i + k < p->n ? &p->t[p->i + k] : &p->t[p->n - 1];
}

static bool is(const struct parser *p, enum jtok t)
{
	return peek(p, 0)->t == t;
}

static bool tok_is(const struct jtoken *t, const char *s)
{
	size_t n = strlen(s);

	return t->n == n && !memcmp(t->p, s, n);
}

static bool is_ident(const struct parser *p, size_t k, const char *name)
{
	const struct jtoken *t = peek(p, k);

	return t->t == T_IDENT && tok_is(t, name);
}

static bool is_statement(const struct parser *p, const char *const *names)
{
	if (!is(p, T_OPEN_STMT) || peek(p, 1)->t != T_IDENT)
		return false;
	for (; *names; names++)
		if (tok_is(peek(p, 1), *names))
			return true;
	return false;
}

static unsigned line_of(const struct parser *p, const struct jtoken *t)
{
	return exl_jline(p->c, t->off);
}

static const char *tok_name(enum jtok t)
{
	switch (t) {
	case T_EOF:
		return "the end of the template";
	case T_TEXT:
		return "text";
	case T_NUM:
		return "a number";
	case T_STR:
		return "a string";
	case T_IDENT:
		return "a name";
	case T_EQUALS:
		return "'='";
	case T_LPAREN:
		return "'('";
	case T_RPAREN:
		return "')'";
	case T_OPEN_STMT:
		return "'{%'";
	case T_CLOSE_STMT:
		return "'%}'";
	case T_OPEN_EXPR:
		return "'{{'";
	case T_CLOSE_EXPR:
		return "'}}'";
	case T_LBRACKET:
		return "'['";
	case T_RBRACKET:
		return "']'";
	case T_LBRACE:
		return "'{'";
	case T_RBRACE:
		return "'}'";
	case T_COMMA:
		return "','";
	case T_DOT:
		return "'.'";
	case T_COLON:
		return "':'";
	case T_PIPE:
		return "'|'";
	case T_ADD:
	case T_MUL:
	case T_POW:
	case T_CMP:
	case T_UNARY:
		return "an operator";
	case T_COMMENT:
		return "a comment";
	}
	return "?";
}

static int fail_tok(struct parser *p, const struct jtoken *t, const char *what)
{
	if (t->t == T_IDENT || t->t == T_ADD || t->t == T_MUL || t->t == T_POW || t->t == T_CMP ||
	    t->t == T_UNARY)
		return exl_jfail(p->c, line_of(p, t), "%s, got '%.*s'", what,
				 (int)(t->n > 40 ? 40 : t->n),
				 t->p);
	return exl_jfail(p->c, line_of(p, t), "%s, got %s", what, tok_name(t->t));
}

static int expect(struct parser *p, enum jtok t, const char *what)
{
	if (!is(p, t))
		return fail_tok(p, peek(p, 0), what);
	p->i++;
	return 0;
}

static int expect_ident(struct parser *p, const char *name, const char *what)
{
	if (!is_ident(p, 0, name))
		return fail_tok(p, peek(p, 0), what);
	p->i++;
	return 0;
}

static struct jnode *node(struct parser *p, enum jnode_kind k, const struct jtoken *at)
{
	struct jnode *n = exl_jalloc(p->c, sizeof(*n));

	if (!n)
		return NULL;
	n->k = k;
	n->line = line_of(p, at);
	return n;
}

struct lbuild {
	struct jnode **v;
	size_t n, cap;
};

static int lpush(struct parser *p, struct lbuild *l, struct jnode *x)
{
	if (!x)
		return -1;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 4;
		struct jnode **nv = exl_jalloc_array(p->c, cap, sizeof(*nv));

		if (!nv)
			return -1;
		if (l->n)
			memcpy(nv, l->v, l->n * sizeof(*nv));
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

static struct jlist ldone(const struct lbuild *l)
{
	struct jlist r = { l->n, l->v };

	return r;
}

static struct jnode *parse_any(struct parser *p);
static struct jnode *parse_expression(struct parser *p);
static struct jnode *parse_primary(struct parser *p);
static struct jnode *parse_or(struct parser *p);
static struct jnode *parse_call(struct parser *p, struct jnode *callee);
static struct jnode *parse_member(struct parser *p, struct jnode *obj);

static int enter(struct parser *p)
{
	if (++p->depth > MAX_NESTING)
		return exl_jfail(p->c, line_of(p, peek(p, 0)), "nested over %d deep", MAX_NESTING);
	return 0;
}

/* Statements up to one of `ends` ({% name ...), not consumed. */
static int parse_body(struct parser *p, const char *const *ends, struct jlist *out,
		      const char *missing)
{
	struct lbuild l = { 0 };

	while (!is_statement(p, ends)) {
		if (is(p, T_EOF))
			return exl_jfail(p->c, line_of(p, peek(p, 0)), "missing %s", missing);
		if (lpush(p, &l, parse_any(p)))
			return -1;
	}
	*out = ldone(&l);
	return 0;
}

static int expect_end(struct parser *p, const char *name, const char *what)
{
	if (expect(p, T_OPEN_STMT, what) || expect_ident(p, name, what) ||
	    expect(p, T_CLOSE_STMT, "expected '%}'"))
		return -1;
	return 0;
}

/* ---- expressions ---- */

static struct jnode *parse_sequence(struct parser *p, bool primary)
{
	const struct jtoken *at = peek(p, 0);
	struct jnode *first = primary ? parse_primary(p) : parse_expression(p);
	struct lbuild l = { 0 };
	struct jnode *t;

	if (!first)
		return NULL;
	if (!is(p, T_COMMA))
		return first;
	if (lpush(p, &l, first))
		return NULL;
	for (;;) {
		p->i++;
		/* (1,): Jinja2's trailing comma (the reference takes none) */
		if (is(p, T_RPAREN) || is(p, T_CLOSE_STMT) || is(p, T_EQUALS)) {
			jbeyond(p->c);
			break;
		}
		if (lpush(p, &l, primary ? parse_primary(p) : parse_expression(p)))
			return NULL;
		if (!is(p, T_COMMA))
			break;
	}
	t = node(p, JN_TUPLE, at);
	if (t)
		t->l1 = ldone(&l);
	return t;
}

enum args_mode { ARGS_CALL, ARGS_PARAMS };

static int parse_arg_list(struct parser *p, enum args_mode mode, struct jlist *out)
{
	struct lbuild l = { 0 };
	bool keyword_seen = false, spread_seen = false;

	while (!is(p, T_RPAREN)) {
		const struct jtoken *at = peek(p, 0);
		bool kw_spread = is(p, T_POW);
		bool spread = is(p, T_MUL) && tok_is(at, "*");
		struct jnode *arg;

		if (is(p, T_EOF))
			return fail_tok(p, at, "expected ')'");
		if (mode == ARGS_PARAMS && (kw_spread || spread))
			return exl_jfail(p->c, line_of(p, at),
					 "argument unpacking is not allowed in parameter declarations");
		if (kw_spread) {
			p->i++;
			arg = node(p, JN_KWSPREAD, at);
			if (!arg || !(arg->a = parse_expression(p)) || lpush(p, &l, arg))
				return -1;
			if (is(p, T_COMMA))
				p->i++;
			if (!is(p, T_RPAREN))
				return exl_jfail(p->c, line_of(p, peek(p, 0)),
						 "`**` must be applied to the final argument");
			break;
		}
		if (spread) {
			if (spread_seen)
				return exl_jfail(p->c, line_of(p, at),
						 "only one `*` argument unpacking is allowed");
			spread_seen = true;
			p->i++;
			arg = node(p, JN_SPREAD, at);
			if (!arg || !(arg->a = parse_expression(p)))
				return -1;
		} else {
			arg = parse_expression(p);
			if (!arg)
				return -1;
			if (is(p, T_EQUALS)) {
				struct jnode *kw;

				p->i++;
				if (arg->k != JN_IDENT)
					return exl_jfail(p->c, line_of(p, at),
							 mode == ARGS_PARAMS ?
							 "expected a name for a parameter" :
							 "expected a name for a keyword argument");
				kw = node(p, JN_KWARG, at);
				if (!kw)
					return -1;
				kw->s = arg->s;
				kw->sn = arg->sn;
				if (!(kw->a = parse_expression(p)))
					return -1;
				arg = kw;
			}
			if (mode == ARGS_PARAMS) {
				if (arg->k != JN_IDENT && arg->k != JN_KWARG)
					return exl_jfail(p->c, line_of(p, at),
							 "expected a name for a parameter");
				for (size_t i = 0; i < l.n; i++)
					if (l.v[i]->sn == arg->sn &&
					    !memcmp(l.v[i]->s, arg->s, arg->sn))
						return exl_jfail(p->c, line_of(p, at),
								 "duplicate parameter '%.*s'",
								 (int)arg->sn, arg->s);
			}
			if (arg->k == JN_KWARG)
				keyword_seen = true;
			else if (keyword_seen)
				return exl_jfail(p->c, line_of(p, at), mode == ARGS_CALL ?
						 "positional argument after a keyword argument" :
						 "parameter without a default after one with");
			else if (spread_seen)
				return exl_jfail(p->c, line_of(p, at),
						 "positional argument after `*` unpacking");
		}
		if (lpush(p, &l, arg))
			return -1;
		if (is(p, T_COMMA))
			p->i++;
	}
	*out = ldone(&l);
	return 0;
}

static int parse_args(struct parser *p, enum args_mode mode, struct jlist *out)
{
	if (expect(p, T_LPAREN, "expected '('") || parse_arg_list(p, mode, out) ||
	    expect(p, T_RPAREN, "expected ')'"))
		return -1;
	return 0;
}

static struct jnode *parse_call(struct parser *p, struct jnode *callee)
{
	struct jnode *call;

	if (!callee || enter(p))
		return NULL;
	call = node(p, JN_CALL, peek(p, 0));
	if (!call)
		return NULL;
	call->a = callee;
	call->line = callee->line;
	if (parse_args(p, ARGS_CALL, &call->l1))
		return NULL;
	call = parse_member(p, call);
	if (call && is(p, T_LPAREN))
		call = parse_call(p, call);
	p->depth--;
	return call;
}

/* Inside [ ]: an index, or a slice a:b:c. */
static struct jnode *parse_subscript(struct parser *p)
{
	const struct jtoken *at = peek(p, 0);
	struct jnode *parts[3] = { NULL, NULL, NULL };
	struct jnode *first = NULL;
	size_t n = 0;
	bool slice = false;

	while (!is(p, T_RBRACKET)) {
		if (is(p, T_EOF))
			return fail_tok(p, peek(p, 0), "expected ']'"), NULL;
		if (is(p, T_COLON)) {
			if (n < 3)
				parts[n] = NULL;
			n++;
			p->i++;
			slice = true;
		} else {
			struct jnode *e = parse_expression(p);

			if (!e)
				return NULL;
			if (!n)
				first = e;
			if (n < 3)
				parts[n] = e;
			n++;
			if (is(p, T_COLON)) {
				p->i++;
				slice = true;
			}
		}
	}
	if (!n)
		return exl_jfail(p->c, line_of(p, at), "expected an index or a slice in [ ]"), NULL;
	if (slice) {
		struct jnode *s;

		if (n > 3)
			return exl_jfail(p->c, line_of(p, at),
					 "a slice takes at most 3 parts"), NULL;
		s = node(p, JN_SLICE, at);
		if (!s)
			return NULL;
		s->a = parts[0];
		s->b = parts[1];
		s->c = parts[2];
		return s;
	}
	return first;
}

static struct jnode *parse_member(struct parser *p, struct jnode *obj)
{
	while (obj && (is(p, T_DOT) || is(p, T_LBRACKET))) {
		const struct jtoken *at = peek(p, 0);
		bool computed = at->t == T_LBRACKET;
		struct jnode *m = node(p, JN_MEMBER, at);

		if (!m)
			return NULL;
		p->i++;
		m->a = obj;
		m->flag = computed;
		m->line = obj->line;
		if (computed) {
			m->b = parse_subscript(p);
			if (!m->b || expect(p, T_RBRACKET, "expected ']'"))
				return NULL;
		} else {
			m->b = parse_primary(p);
			if (!m->b)
				return NULL;
			if (m->b->k != JN_IDENT && m->b->k != JN_INT)
				return exl_jfail(p->c, line_of(p, at),
						 "expected a name or an integer after '.'"), NULL;
		}
		obj = m;
	}
	return obj;
}

static struct jnode *parse_call_member(struct parser *p)
{
	struct jnode *m = parse_member(p, parse_primary(p));

	if (m && is(p, T_LPAREN))
		return parse_call(p, m);
	return m;
}

static struct jnode *parse_unary_sign(struct parser *p)
{
	const struct jtoken *t = peek(p, 0);

	if ((t->t == T_UNARY || t->t == T_ADD) && (tok_is(t, "-") || tok_is(t, "+"))) {
		struct jnode *u = node(p, JN_UNARY, t);

		if (!u || enter(p))
			return NULL;
		p->i++;
		u->op = tok_is(t, "-") ? OP_SUB : OP_ADD;
		u->a = parse_unary_sign(p);
		p->depth--;
		return u->a ? u : NULL;
	}
	return parse_call_member(p);
}

static struct jnode *parse_filter(struct parser *p)
{
	struct jnode *operand = parse_unary_sign(p);

	while (operand && is(p, T_PIPE)) {
		const struct jtoken *at = peek(p, 0);
		struct jnode *f = node(p, JN_FILTER, at), *name;

		if (!f)
			return NULL;
		p->i++;
		name = parse_primary(p);
		if (!name)
			return NULL;
		if (name->k != JN_IDENT)
			return exl_jfail(p->c, line_of(p, at),
					 "expected a filter name after '|'"), NULL;
		if (is(p, T_LPAREN) && !(name = parse_call(p, name)))
			return NULL;
		f->a = operand;
		f->b = name;
		f->line = operand->line;
		operand = f;
	}
	return operand;
}

/* After a test's name, Jinja2 takes one argument without parentheses
 * unless what follows is an operator word. */
static bool starts_test_arg(const struct parser *p)
{
	static const char *const words[] = { "and", "or", "else", "if", "in", "is", "not", NULL };
	const struct jtoken *t = peek(p, 0);

	if (t->t == T_IDENT) {
		for (const char *const *w = words; *w; w++)
			if (tok_is(t, *w))
				return false;
		return true;
	}
	return t->t == T_NUM || t->t == T_STR || t->t == T_LBRACKET || t->t == T_LBRACE;
}

static struct jnode *parse_test(struct parser *p)
{
	struct jnode *operand = parse_filter(p);

	while (operand && is_ident(p, 0, "is")) {
		const struct jtoken *at = peek(p, 0);
		struct jnode *t = node(p, JN_TEST, at), *name;

		if (!t)
			return NULL;
		p->i++;
		t->flag = is_ident(p, 0, "not");
		if (t->flag)
			p->i++;
		name = parse_primary(p);
		if (!name)
			return NULL;
		if (name->k != JN_IDENT)
			return exl_jfail(p->c, line_of(p, at),
					 "expected a test name after 'is'"), NULL;
		t->s = name->s;
		t->sn = name->sn;
		t->a = operand;
		t->line = operand->line;
		if (is(p, T_LPAREN)) {
			jbeyond(p->c);
			if (parse_args(p, ARGS_CALL, &t->l1))
				return NULL;
		} else if (starts_test_arg(p)) {
			jbeyond(p->c);
			struct lbuild l = { 0 };

			if (lpush(p, &l, parse_call_member(p)))
				return NULL;
			t->l1 = ldone(&l);
		}
		operand = t;
	}
	return operand;
}

static struct jnode *binary(struct parser *p, int op, const struct jtoken *at, struct jnode *a,
			    struct jnode *b)
{
	struct jnode *n;

	if (!a || !b)
		return NULL;
	n = node(p, JN_BINARY, at);
	if (!n)
		return NULL;
	n->op = op;
	n->a = a;
	n->b = b;
	n->line = a->line;
	return n;
}

static struct jnode *parse_power(struct parser *p)
{
	struct jnode *left = parse_test(p);

	while (left && is(p, T_POW)) {
		const struct jtoken *at = peek(p, 0);

		p->i++;
		left = binary(p, OP_POW, at, left, parse_test(p));
	}
	return left;
}

static struct jnode *parse_multiplicative(struct parser *p)
{
	struct jnode *left = parse_power(p);

	while (left && is(p, T_MUL)) {
		const struct jtoken *at = peek(p, 0);
		int op = tok_is(at, "*") ? OP_MUL : tok_is(at, "/") ? OP_DIV :
			 tok_is(at, "//") ? OP_FLOORDIV : OP_MOD;

		p->i++;
		left = binary(p, op, at, left, parse_power(p));
	}
	return left;
}

static struct jnode *parse_additive(struct parser *p)
{
	struct jnode *left = parse_multiplicative(p);

	while (left && is(p, T_ADD)) {
		const struct jtoken *at = peek(p, 0);
		int op = tok_is(at, "+") ? OP_ADD : tok_is(at, "-") ? OP_SUB : OP_CONCAT;

		p->i++;
		left = binary(p, op, at, left, parse_multiplicative(p));
	}
	return left;
}

static struct jnode *parse_comparison(struct parser *p)
{
	struct jnode *left = parse_additive(p);

	while (left) {
		const struct jtoken *at = peek(p, 0);
		int op;

		if (is_ident(p, 0, "not") && is_ident(p, 1, "in")) {
			op = OP_NOTIN;
			p->i += 2;
		} else if (is_ident(p, 0, "in")) {
			op = OP_IN;
			p->i++;
		} else if (is(p, T_CMP)) {
			op = tok_is(at, "==") ? OP_EQ : tok_is(at, "!=") ? OP_NE :
			     tok_is(at, "<") ? OP_LT : tok_is(at, ">") ? OP_GT :
			     tok_is(at, "<=") ? OP_LE : OP_GE;
			p->i++;
		} else {
			break;
		}
		left = binary(p, op, at, left, parse_additive(p));
	}
	return left;
}

static struct jnode *parse_not(struct parser *p)
{
	struct jnode *right = NULL;

	if (enter(p))
		return NULL;
	while (is_ident(p, 0, "not")) {
		const struct jtoken *at = peek(p, 0);
		struct jnode *u = node(p, JN_UNARY, at);

		if (!u)
			return NULL;
		p->i++;
		u->op = OP_NOT;
		u->a = parse_not(p);
		if (!u->a)
			return NULL;
		right = u;
	}
	p->depth--;
	return right ? right : parse_comparison(p);
}

static struct jnode *parse_and(struct parser *p)
{
	struct jnode *left = parse_not(p);

	while (left && is_ident(p, 0, "and")) {
		const struct jtoken *at = peek(p, 0);

		p->i++;
		left = binary(p, OP_AND, at, left, parse_not(p));
	}
	return left;
}

static struct jnode *parse_or(struct parser *p)
{
	struct jnode *left = parse_and(p);

	while (left && is_ident(p, 0, "or")) {
		const struct jtoken *at = peek(p, 0);

		p->i++;
		left = binary(p, OP_OR, at, left, parse_and(p));
	}
	return left;
}

static struct jnode *parse_if_expression(struct parser *p)
{
	struct jnode *a = parse_or(p);

	if (a && is_ident(p, 0, "if")) {
		const struct jtoken *at = peek(p, 0);
		struct jnode *test, *n;

		p->i++;
		test = parse_or(p);
		if (!test)
			return NULL;
		if (is_ident(p, 0, "else")) {
			p->i++;
			n = node(p, JN_TERNARY, at);
			if (!n)
				return NULL;
			n->a = test;
			n->b = a;
			n->c = parse_if_expression(p);
			n->line = a->line;
			return n->c ? n : NULL;
		}
		n = node(p, JN_SELECT, at);
		if (!n)
			return NULL;
		n->a = a;
		n->b = test;
		n->line = a->line;
		return n;
	}
	return a;
}

static struct jnode *parse_expression(struct parser *p)
{
	struct jnode *e;

	if (enter(p))
		return NULL;
	e = parse_if_expression(p);
	p->depth--;
	return e;
}

static struct jnode *parse_primary(struct parser *p)
{
	const struct jtoken *t = peek(p, 0);
	struct jnode *n;

	if (t->t == T_EOF)
		return fail_tok(p, t, "expected an expression"), NULL;
	p->i++;
	switch (t->t) {
	case T_NUM: {
		char tmp[64];
		size_t k = t->n < sizeof(tmp) - 1 ? t->n : sizeof(tmp) - 1;
		bool exp = memchr(t->p, 'e', t->n) || memchr(t->p, 'E', t->n);
		bool dot = memchr(t->p, '.', t->n) != NULL || exp;

		/* 1e3: Jinja2's float (the reference has no exponents) */
		if (exp)
			jbeyond(p->c);

		n = node(p, dot ? JN_FLOAT : JN_INT, t);
		if (!n)
			return NULL;
		if (t->n >= sizeof(tmp)) {
			char *big = exl_jstrdup(p->c, t->p, t->n);

			if (!big)
				return NULL;
			n->num = strtod(big, NULL);
		} else {
			memcpy(tmp, t->p, k);
			tmp[k] = 0;
			n->num = strtod(tmp, NULL);
		}
		return n;
	}
	case T_STR: {
		struct jbuf b = { 0 };

		n = node(p, JN_STR, t);
		if (!n)
			return NULL;
		n->s = t->p;
		n->sn = t->n;
		/* 'a' 'b' is 'ab' */
		if (is(p, T_STR)) {
			if (exl_jbuf_put(p->c, &b, t->p, t->n))
				return NULL;
			while (is(p, T_STR)) {
				if (exl_jbuf_put(p->c, &b, peek(p, 0)->p, peek(p, 0)->n))
					return NULL;
				p->i++;
			}
			n->s = b.p ? b.p : "";
			n->sn = b.n;
		}
		return n;
	}
	case T_IDENT:
		n = node(p, JN_IDENT, t);
		if (n) {
			n->s = t->p;
			n->sn = t->n;
		}
		return n;
	case T_LPAREN:
		n = parse_sequence(p, false);
		if (!n || expect(p, T_RPAREN, "expected ')'"))
			return NULL;
		return n;
	case T_LBRACKET: {
		struct lbuild l = { 0 };

		n = node(p, JN_ARRAY, t);
		if (!n)
			return NULL;
		while (!is(p, T_RBRACKET)) {
			if (lpush(p, &l, parse_expression(p)))
				return NULL;
			if (is(p, T_COMMA))
				p->i++;
		}
		p->i++;
		n->l1 = ldone(&l);
		return n;
	}
	case T_LBRACE: {
		struct lbuild keys = { 0 }, vals = { 0 };

		n = node(p, JN_OBJECT, t);
		if (!n)
			return NULL;
		while (!is(p, T_RBRACE)) {
			if (lpush(p, &keys, parse_expression(p)) ||
			    expect(p, T_COLON, "expected ':' in a dict") ||
			    lpush(p, &vals, parse_expression(p)))
				return NULL;
			if (is(p, T_COMMA))
				p->i++;
		}
		p->i++;
		n->l1 = ldone(&keys);
		n->l2 = ldone(&vals);
		return n;
	}
	default:
		return fail_tok(p, t, "expected an expression"), NULL;
	}
}

/* ---- statements ---- */

/* Whether a macro body reads `kwargs` / `varargs` (then a call may pass
 * extra arguments). */
static int uses_special(const struct jnode *n)
{
	int r = 0;

	if (!n)
		return 0;
	switch (n->k) {
	case JN_IDENT:
		if (n->sn == 6 && !memcmp(n->s, "kwargs", 6))
			return JM_USES_KWARGS;
		if (n->sn == 7 && !memcmp(n->s, "varargs", 7))
			return JM_USES_VARARGS;
		return 0;
	case JN_MEMBER:
		return uses_special(n->a) | (n->flag ? uses_special(n->b) : 0);
	case JN_FILTER:
	case JN_FILTERBLOCK:
		r = uses_special(n->a);
		if (n->k == JN_FILTER && n->b->k == JN_CALL)
			for (size_t i = 0; i < n->b->l1.n; i++)
				r |= uses_special(n->b->l1.v[i]);
		for (size_t i = 0; i < n->l1.n; i++)
			r |= uses_special(n->l1.v[i]);
		return r;
	case JN_MACRO:
		return 0;
	default:
		r = uses_special(n->a) | uses_special(n->b) | uses_special(n->c);
		for (size_t i = 0; i < n->l1.n; i++)
			r |= uses_special(n->l1.v[i]);
		for (size_t i = 0; i < n->l2.n; i++)
			r |= uses_special(n->l2.v[i]);
		return r;
	}
}

static int params_special(const struct jlist *params, const struct jlist *body)
{
	int r = 0;

	for (size_t i = 0; i < body->n; i++)
		r |= uses_special(body->v[i]);
	/* a parameter of that name is an ordinary parameter */
	for (size_t i = 0; i < params->n; i++) {
		const struct jnode *pn = params->v[i];

		if (pn->sn == 6 && !memcmp(pn->s, "kwargs", 6))
			r &= ~JM_USES_KWARGS;
		if (pn->sn == 7 && !memcmp(pn->s, "varargs", 7))
			r &= ~JM_USES_VARARGS;
	}
	return r;
}

static const char *const end_set[] = { "endset", NULL };
static const char *const end_if[] = { "elif", "else", "endif", NULL };
static const char *const end_endif[] = { "endif", NULL };
static const char *const end_macro[] = { "endmacro", NULL };
static const char *const end_for[] = { "endfor", "else", NULL };
static const char *const end_endfor[] = { "endfor", NULL };
static const char *const end_call[] = { "endcall", NULL };
static const char *const end_filter[] = { "endfilter", NULL };
static const char *const is_elif[] = { "elif", NULL };
static const char *const is_else[] = { "else", NULL };

static struct jnode *parse_if(struct parser *p, const struct jtoken *at)
{
	struct jnode *n = node(p, JN_IF, at);

	if (!n || enter(p))
		return NULL;
	if (!(n->a = parse_expression(p)) || expect(p, T_CLOSE_STMT, "expected '%}'") ||
	    parse_body(p, end_if, &n->l1, "{% endif %}"))
		return NULL;
	if (is_statement(p, is_elif)) {
		struct lbuild l = { 0 };
		const struct jtoken *e = peek(p, 0);

		p->i += 2;
		if (lpush(p, &l, parse_if(p, e)))
			return NULL;
		n->l2 = ldone(&l);
	} else if (is_statement(p, is_else)) {
		p->i += 2;
		if (expect(p, T_CLOSE_STMT, "expected '%}'") ||
		    parse_body(p, end_endif, &n->l2, "{% endif %}"))
			return NULL;
	}
	p->depth--;
	return n;
}

static struct jnode *parse_statement(struct parser *p)
{
	const struct jtoken *at = peek(p, 0), *name;
	struct jnode *n;

	p->i++;
	name = peek(p, 0);
	if (name->t != T_IDENT)
		return fail_tok(p, name, "expected a statement name"), NULL;
	p->i++;
	if (tok_is(name, "set")) {
		n = node(p, JN_SET, at);
		if (!n || !(n->a = parse_sequence(p, false)))
			return NULL;
		if (is(p, T_EQUALS)) {
			p->i++;
			if (!(n->b = parse_sequence(p, false)))
				return NULL;
		} else if (expect(p, T_CLOSE_STMT, "expected '=' or '%}'") ||
			   parse_body(p, end_set, &n->l1, "{% endset %}") ||
			   expect(p, T_OPEN_STMT, "expected '{%'") ||
			   expect_ident(p, "endset", "expected endset")) {
			return NULL;
		}
		if (expect(p, T_CLOSE_STMT, "expected '%}'"))
			return NULL;
		return n;
	}
	if (tok_is(name, "if")) {
		n = parse_if(p, at);
		if (!n || expect_end(p, "endif", "expected {% endif %}"))
			return NULL;
		return n;
	}
	if (tok_is(name, "macro")) {
		struct jnode *id;

		n = node(p, JN_MACRO, at);
		if (!n || !(id = parse_primary(p)))
			return NULL;
		if (id->k != JN_IDENT)
			return exl_jfail(p->c, n->line, "expected a name after macro"), NULL;
		n->s = id->s;
		n->sn = id->sn;
		if (parse_args(p, ARGS_PARAMS, &n->l1) || expect(p, T_CLOSE_STMT,
								 "expected '%}'") ||
		    parse_body(p, end_macro, &n->l2, "{% endmacro %}") ||
		    expect_end(p, "endmacro", "expected {% endmacro %}"))
			return NULL;
		n->op = params_special(&n->l1, &n->l2);
		return n;
	}
	if (tok_is(name, "for")) {
		n = node(p, JN_FOR, at);
		if (!n || !(n->a = parse_sequence(p, true)))
			return NULL;
		if (n->a->k != JN_IDENT && n->a->k != JN_TUPLE)
			return exl_jfail(p->c, n->line, "expected a name or names after for"), NULL;
		if (expect_ident(p, "in", "expected 'in'") || !(n->b = parse_expression(p)) ||
		    expect(p, T_CLOSE_STMT, "expected '%}'") ||
		    parse_body(p, end_for, &n->l1, "{% endfor %}"))
			return NULL;
		if (is_statement(p, is_else)) {
			p->i += 2;
			if (expect(p, T_CLOSE_STMT, "expected '%}'") ||
			    parse_body(p, end_endfor, &n->l2, "{% endfor %}"))
				return NULL;
		}
		if (expect_end(p, "endfor", "expected {% endfor %}"))
			return NULL;
		return n;
	}
	if (tok_is(name, "call")) {
		struct jnode *callee, *call;

		n = node(p, JN_CALLBLOCK, at);
		if (!n)
			return NULL;
		if (is(p, T_LPAREN) && parse_args(p, ARGS_PARAMS, &n->l1))
			return NULL;
		if (!(callee = parse_primary(p)))
			return NULL;
		if (callee->k != JN_IDENT)
			return exl_jfail(p->c, n->line, "expected a name after call"), NULL;
		call = node(p, JN_CALL, at);
		if (!call)
			return NULL;
		call->a = callee;
		if (parse_args(p, ARGS_CALL, &call->l1) || expect(p, T_CLOSE_STMT,
								  "expected '%}'") ||
		    parse_body(p, end_call, &n->l2, "{% endcall %}") ||
		    expect_end(p, "endcall", "expected {% endcall %}"))
			return NULL;
		n->a = call;
		n->op = params_special(&n->l1, &n->l2);
		return n;
	}
	if (tok_is(name, "break") || tok_is(name, "continue")) {
		n = node(p, tok_is(name, "break") ? JN_BREAK : JN_CONTINUE, at);
		if (!n || expect(p, T_CLOSE_STMT, "expected '%}'"))
			return NULL;
		return n;
	}
	if (tok_is(name, "filter")) {
		struct jnode *f;

		n = node(p, JN_FILTERBLOCK, at);
		if (!n || !(f = parse_primary(p)))
			return NULL;
		if (f->k == JN_IDENT && is(p, T_LPAREN) && !(f = parse_call(p, f)))
			return NULL;
		n->a = f;
		if (expect(p, T_CLOSE_STMT, "expected '%}'") ||
		    parse_body(p, end_filter, &n->l1, "{% endfilter %}") ||
		    expect_end(p, "endfilter", "expected {% endfilter %}"))
			return NULL;
		return n;
	}
	return exl_jfail(p->c, line_of(p, name), "unknown or unexpected statement '%.*s'",
			 (int)(name->n > 40 ? 40 : name->n), name->p), NULL;
}

static struct jnode *parse_any(struct parser *p)
{
	const struct jtoken *t = peek(p, 0);
	struct jnode *n;

	switch (t->t) {
	case T_COMMENT:
		p->i++;
		return node(p, JN_COMMENT, t);
	case T_TEXT:
		p->i++;
		n = node(p, JN_TEXT, t);
		if (n) {
			n->s = t->p;
			n->sn = t->n;
		}
		return n;
	case T_OPEN_STMT:
		if (enter(p))
			return NULL;
		n = parse_statement(p);
		p->depth--;
		return n;
	case T_OPEN_EXPR:
		p->i++;
		n = parse_expression(p);
		if (!n || expect(p, T_CLOSE_EXPR, "expected '}}'"))
			return NULL;
		return n;
	default:
		return fail_tok(p, t, "expected text, '{{' or '{%'"), NULL;
	}
}

int exl_jinja_parse(struct jctx *c, const struct jtoken *toks, size_t ntoks, struct jlist *prog)
{
	struct parser p = { c, toks, ntoks, 0, 0 };
	struct lbuild l = { 0 };

	while (!is(&p, T_EOF))
		if (lpush(&p, &l, parse_any(&p)))
			return -1;
	*prog = ldone(&l);
	return 0;
}
