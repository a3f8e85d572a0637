/* Tests (`x is defined`), the methods of strings, lists and dicts, and the
 * global functions, with the reference's semantics; what the reference
 * lacks and Jinja2 has (tests with arguments, str.format, list.append, ...)
 * follows Jinja2 (Python). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jinja.h"

/* ---- tests ---- */

static bool name_is(const char *s, size_t n, const char *name)
{
	return strlen(name) == n && !memcmp(s, name, n);
}

static bool str_has(const char *h, size_t hn, const char *nd, size_t nn)
{
	return !nn || memmem(h, hn, nd, nn) != NULL;
}

static bool is_lower_or_upper(struct jctx *c, struct jv v, bool upper, int *err)
{
	struct jbuf b = { 0 };

	if (v.t != JV_STR)
		return false;
	if ((upper ? exl_jt_upper : exl_jt_lower)(c, &b, v.u.s, v.len)) {
		*err = -1;
		return false;
	}
	return b.n == v.len && (!b.n || !memcmp(b.p, v.u.s, b.n));
}

static int need_arg(struct jctx *c, unsigned line, const char *name, size_t n,
		    const struct jargs *a)
{
	if (a->n < 1)
		return exl_jfail(c, line, "the test '%.*s' needs an argument", (int)n, name);
	return 0;
}

int exl_jinja_test(struct jctx *c, unsigned line, const char *name, size_t n, struct jv v,
		   const struct jargs *a, bool *res)
{
	int err = 0;

	if (name_is(name, n, "boolean")) {
		*res = v.t == JV_BOOL;
	} else if (name_is(name, n, "callable")) {
		*res = v.t == JV_FUNC;
	} else if (name_is(name, n, "odd") || name_is(name, n, "even")) {
		if (v.t != JV_INT)
			return exl_jfail(c, line, "cannot %.*s on %s", (int)n, name,
					 exl_jv_type_name(v));
		*res = (fmod(v.u.n, 2) != 0) == (name[0] == 'o');
	} else if (name_is(name, n, "false")) {
		*res = v.t == JV_BOOL && !v.u.b;
	} else if (name_is(name, n, "true")) {
		*res = v.t == JV_BOOL && v.u.b;
	} else if (name_is(name, n, "none")) {
		*res = v.t == JV_NULL;
	} else if (name_is(name, n, "string")) {
		*res = v.t == JV_STR;
	} else if (name_is(name, n, "number")) {
		*res = jv_is_num(v);
	} else if (name_is(name, n, "integer")) {
		*res = v.t == JV_INT;
	} else if (name_is(name, n, "float")) {
		jbeyond(c);
		*res = v.t == JV_FLOAT;
	} else if (name_is(name, n, "iterable")) {
		/* the reference's: a list or a string (not a tuple, not a dict);
		 * past the reference, Jinja2's: anything with __iter__ */
		*res = (v.t == JV_ARRAY && (!v.len || c->jinja2)) || v.t == JV_STR ||
		       (c->jinja2 && (v.t == JV_TUPLE || jv_is_attrs(v) || v.t == JV_UNDEF));
	} else if (name_is(name, n, "mapping")) {
		*res = jv_is_dict(v);
	} else if (name_is(name, n, "sequence")) {
		*res = jv_is_arr(v) || jv_is_dict(v) || v.t == JV_STR;
	} else if (name_is(name, n, "lower") || name_is(name, n, "upper")) {
		*res = is_lower_or_upper(c, v, name[0] == 'u', &err);
	} else if (name_is(name, n, "defined")) {
		*res = v.t != JV_UNDEF;
	} else if (name_is(name, n, "undefined")) {
		*res = v.t == JV_UNDEF;
	} else if (name_is(name, n, "equalto") || name_is(name, n, "eq") ||
		   name_is(name, n, "==") || name_is(name, n, "sameas")) {
		if (need_arg(c, line, name, n, a))
			return -1;
		if (name[0] == '=' || name[0] == 's')
			jbeyond(c);
		if (name[0] == 's')
			*res = exl_jv_strict_eq(v, a->v[0]);
		else
			*res = c->jinja2 ? exl_jv_py_eq(v, a->v[0], 0) : exl_jv_strict_eq(v, a->v[0]);
	} else if (name_is(name, n, "ne") || name_is(name, n, "!=")) {
		jbeyond(c);
		if (need_arg(c, line, name, n, a))
			return -1;
		*res = !exl_jv_py_eq(v, a->v[0], 0);
	} else if (name_is(name, n, "divisibleby")) {
		jbeyond(c);
		if (need_arg(c, line, name, n, a))
			return -1;
		if (!jv_is_num(v) || !jv_is_num(a->v[0]))
			return exl_jfail(c, line, "divisibleby needs numbers");
		*res = a->v[0].u.n != 0 && fmod(v.u.n, a->v[0].u.n) == 0;
	} else if (name_is(name, n, "in")) {
		struct jv s;

		jbeyond(c);
		if (need_arg(c, line, name, n, a))
			return -1;
		s = a->v[0];
		if (s.t == JV_STR && v.t == JV_STR) {
			if (exl_jstep(c, s.len / 16))
				return -1;
			*res = str_has(s.u.s, s.len, v.u.s, v.len);
		} else if (jv_is_arr(s)) {
			*res = false;
			for (size_t i = 0; !*res && i < s.u.a->n; i++)
				*res = exl_jv_py_eq(s.u.a->v[i], v, 0);
		} else if (jv_is_dict(s) && v.t == JV_STR) {
			*res = exl_jobj_get(s.u.o, v.u.s, v.len) != NULL;
		} else {
			return exl_jfail(c, line, "the test 'in' cannot look in %s",
					 exl_jv_type_name(s));
		}
	} else if (name_is(name, n, "gt") || name_is(name, n, ">") ||
		   name_is(name, n, "greaterthan") || name_is(name, n, "ge") ||
		   name_is(name, n, ">=") || name_is(name, n, "lt") || name_is(name, n, "<") ||
		   name_is(name, n, "lessthan") || name_is(name, n, "le") ||
		   name_is(name, n, "<=")) {
		int r;

		jbeyond(c);
		if (need_arg(c, line, name, n, a) || exl_jv_compare(c, line, v, a->v[0], true, &r))
			return -1;
		if (name[0] == 'g' || name[0] == '>')
			*res = (name_is(name, n, "ge") || name_is(name, n, ">=")) ? r >= 0 : r > 0;
		else
			*res = (name_is(name, n, "le") || name_is(name, n, "<=")) ? r <= 0 : r < 0;
	} else if (name_is(name, n, "escaped")) {
		jbeyond(c);
		*res = false;
	} else {
		return exl_jfail(c, line, "unknown test '%.*s'", (int)n, name);
	}
	return err;
}

/* ---- methods ---- */

enum jmethod {
	M_UPPER,
	M_LOWER,
	M_STRIP,
	M_TITLE,
	M_CAPITALIZE,
	M_RSTRIP,
	M_LSTRIP,
	M_STARTSWITH,
	M_ENDSWITH,
	M_SPLIT,
	M_REPLACE,
	M_FORMAT,
	M_FIND,
	M_JOIN,
	M_GET,
	M_ITEMS,
	M_KEYS,
	M_VALUES,
	M_DICTSORT,
	M_APPEND,
	M_POP,
};

enum owner { ON_STR, ON_LIST, ON_DICT };

static const struct {
	const char *name;
	enum owner on;
	enum jmethod id;
} methods[] = {
	{ "upper", ON_STR, M_UPPER }, { "lower", ON_STR, M_LOWER }, { "strip", ON_STR, M_STRIP },
	{ "title", ON_STR, M_TITLE }, { "capitalize", ON_STR, M_CAPITALIZE },
	{ "rstrip", ON_STR, M_RSTRIP }, { "lstrip", ON_STR, M_LSTRIP },
	{ "startswith", ON_STR, M_STARTSWITH }, { "endswith", ON_STR, M_ENDSWITH },
	{ "split", ON_STR, M_SPLIT }, { "replace", ON_STR, M_REPLACE },
	{ "format", ON_STR, M_FORMAT }, { "find", ON_STR, M_FIND }, { "join", ON_STR, M_JOIN },
	{ "get", ON_DICT, M_GET }, { "items", ON_DICT, M_ITEMS }, { "keys", ON_DICT, M_KEYS },
	{ "values", ON_DICT, M_VALUES }, { "dictsort", ON_DICT, M_DICTSORT },
	{ "append", ON_LIST, M_APPEND }, { "pop", ON_LIST, M_POP },
};

static bool bind_method(struct jctx *c, struct jv self, enum owner on, const char *name,
			size_t n, struct jv *out, int *err)
{
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		struct jfn *f;

		if (methods[i].on != on || !name_is(name, n, methods[i].name))
			continue;
		f = exl_jalloc(c, sizeof(*f));
		if (!f) {
			*err = -1;
			return false;
		}
		f->kind = JF_METHOD;
		f->id = (int)methods[i].id;
		f->self = self;
		*out = jv_fn(f);
		return true;
	}
	return false;
}

bool exl_jinja_builtin_attr(struct jctx *c, struct jv self, const char *name, size_t n,
			    struct jv *out, int *err)
{
	*err = 0;
	switch (self.t) {
	case JV_STR:
		if (name_is(name, n, "length")) {
			*out = jv_int((double)exl_jt_utf16_len(self.u.s, self.len));
			return true;
		}
		return bind_method(c, self, ON_STR, name, n, out, err);
	case JV_ARRAY:
	case JV_TUPLE:
		if (name_is(name, n, "length")) {
			*out = jv_int((double)self.u.a->n);
			return true;
		}
		return self.t == JV_ARRAY && bind_method(c, self, ON_LIST, name, n, out, err);
	case JV_OBJECT:
	case JV_KWARGS:
		if (self.u.o->is_loop && name_is(name, n, "cycle")) {
			struct jfn *f = exl_jalloc(c, sizeof(*f));

			if (!f) {
				*err = -1;
				return false;
			}
			f->kind = JF_CYCLE;
			f->loop_i = self.u.o->loop_i;
			*out = jv_fn(f);
			return true;
		}
		return bind_method(c, self, ON_DICT, name, n, out, err);
	default:
		return false;
	}
}

static int str_title(struct jctx *c, struct jv s, struct jv *out)
{
	char *p = exl_jstrdup(c, s.u.s, s.len);

	if (!p)
		return -1;
	/* /\b\w/g with ASCII \w: any byte of a non-ASCII character is a non-word */
	for (size_t i = 0; i < s.len; i++)
		if (jt_is_word(p[i]) && (i == 0 || !jt_is_word(p[i - 1])) && p[i] >= 'a' && p[i] <= 'z')
			p[i] = (char)(p[i] - 32);
	*out = jv_str(p, s.len);
	return 0;
}

static int str_capitalize(struct jctx *c, struct jv s, struct jv *out)
{
	struct jbuf b = { 0 };
	uint32_t cp;
	size_t k;

	if (!s.len) {
		*out = s;
		return 0;
	}
	k = exl_jt_decode(s.u.s, s.len, &cp);
	/* charAt(0): half of a pair is left alone */
	if (cp >= 0x10000) {
		*out = s;
		return 0;
	}
	if (exl_jt_upper(c, &b, s.u.s, k) || exl_jbuf_put(c, &b, s.u.s + k, s.len - k))
		return -1;
	*out = exl_jv_from_buf(&b);
	return 0;
}

static int affix(struct jctx *c, unsigned line, struct jv s, const struct jargs *a, bool start,
		 struct jv *out)
{
	const char *what = start ? "startswith" : "endswith";
	struct jv p;

	if (!a->n)
		return exl_jfail(c, line, "%s() needs an argument", what);
	p = a->v[0];
	if (p.t == JV_STR) {
		bool r = p.len <= s.len &&
			 !memcmp(start ? s.u.s : s.u.s + s.len - p.len, p.u.s, p.len);

		*out = jv_bool(r);
		return 0;
	}
	if (jv_is_arr(p)) {
		for (size_t i = 0; i < p.u.a->n; i++) {
			struct jv x = p.u.a->v[i];

			if (x.t != JV_STR)
				return exl_jfail(c, line, "%s() tuple items must be strings", what);
			if (x.len <= s.len &&
			    !memcmp(start ? s.u.s : s.u.s + s.len - x.len, x.u.s, x.len)) {
				*out = jv_bool(true);
				return 0;
			}
		}
		*out = jv_bool(false);
		return 0;
	}
	return exl_jfail(c, line, "%s() takes a string or a tuple of strings", what);
}

static int str_split(struct jctx *c, unsigned line, struct jv s, const struct jargs *a,
		     struct jv *out)
{
	struct jv sep = exl_jargs_get(a, 0, "sep", jv_null());
	struct jv max = exl_jargs_get(a, 1, "maxsplit", jv_int(-1));
	struct jarr *r = exl_jarr_new(c, 0);

	if (!r)
		return -1;
	if (a->kw)
		jbeyond(c);
	if (sep.t != JV_STR && sep.t != JV_NULL)
		return exl_jfail(c, line, "split(): sep must be a string or none");
	if (max.t != JV_INT)
		return exl_jfail(c, line, "split(): maxsplit must be an integer");
	if (exl_jstep(c, s.len / 16))
		return -1;
	if (sep.t == JV_NULL) {
		const char *t;
		size_t tn, i = 0;

		exl_jt_trim(s.u.s, s.len, true, false, &t, &tn);
		while (i < tn) {
			size_t start, k;
			uint32_t cp;

			/* the next run of non-space */
			while (i < tn) {
				k = exl_jt_decode(t + i, tn - i, &cp);
				if (!exl_jt_is_space(cp))
					break;
				i += k;
			}
			if (i >= tn)
				break;
			start = i;
			if (max.u.n != -1 && (double)r->n >= max.u.n) {
				if (exl_jarr_push(c, r, jv_str(t + start, tn - start)))
					return -1;
				break;
			}
			while (i < tn) {
				k = exl_jt_decode(t + i, tn - i, &cp);
				if (exl_jt_is_space(cp))
					break;
				i += k;
			}
			if (exl_jarr_push(c, r, jv_str(t + start, i - start)))
				return -1;
		}
		*out = jv_arr(JV_ARRAY, r);
		return 0;
	}
	if (!sep.len)
		return exl_jfail(c, line, "split(): empty separator");
	{
		size_t start = 0;
		const char *hit;

		while ((hit = memmem(s.u.s + start, s.len - start, sep.u.s, sep.len))) {
			size_t i = (size_t)(hit - s.u.s);

			if (exl_jarr_push(c, r, jv_str(s.u.s + start, i - start)))
				return -1;
			start = i + sep.len;
		}
		if (exl_jarr_push(c, r, jv_str(s.u.s + start, s.len - start)))
			return -1;
	}
	/* maxsplit: the pieces from index maxsplit on (splice's rules) join back */
	if (max.u.n != -1 && (double)r->n > max.u.n) {
		double m = max.u.n;
		size_t from = m < 0 ? (size_t)fmax((double)r->n + m, 0) : (size_t)m;
		struct jbuf b = { 0 };

		for (size_t i = from; i < r->n; i++) {
			if (i > from && exl_jbuf_put(c, &b, sep.u.s, sep.len))
				return -1;
			if (exl_jbuf_put(c, &b, r->v[i].u.s, r->v[i].len))
				return -1;
		}
		r->n = from;
		if (exl_jarr_push(c, r, exl_jv_from_buf(&b)))
			return -1;
	}
	*out = jv_arr(JV_ARRAY, r);
	return 0;
}

static int str_replace(struct jctx *c, unsigned line, struct jv s, const struct jargs *a,
		       struct jv *out)
{
	struct jv from, to, count;
	struct jbuf b = { 0 };
	double left;
	size_t i = 0;

	if (a->n < 2)
		return exl_jfail(c, line, "replace() needs two arguments");
	from = a->v[0];
	to = a->v[1];
	if (from.t != JV_STR || to.t != JV_STR)
		return exl_jfail(c, line, "replace() arguments must be strings");
	count = exl_jargs_get(a, 2, "count", jv_null());
	if (count.t != JV_INT && count.t != JV_NULL)
		return exl_jfail(c, line, "replace(): count must be an integer or none");
	if (count.t == JV_INT && count.u.n == 0) {
		*out = s;
		return 0;
	}
	left = count.t == JV_NULL || count.u.n < 0 ? INFINITY : count.u.n;
	if (exl_jstep(c, s.len / 16))
		return -1;
	if (!from.len) {
		/* between every two characters, and at both ends */
		for (;;) {
			uint32_t cp;
			size_t k;

			if (left > 0) {
				if (exl_jbuf_put(c, &b, to.u.s, to.len))
					return -1;
				left--;
			}
			if (i >= s.len)
				break;
			k = exl_jt_decode(s.u.s + i, s.len - i, &cp);
			if (exl_jbuf_put(c, &b, s.u.s + i, k))
				return -1;
			i += k;
		}
		*out = exl_jv_from_buf(&b);
		return 0;
	}
	while (i < s.len) {
		const char *hit = left > 0 ?
				  memmem(s.u.s + i, s.len - i, from.u.s, from.len) : NULL;
		size_t at = hit ? (size_t)(hit - s.u.s) : s.len;

		if (exl_jbuf_put(c, &b, s.u.s + i, at - i))
			return -1;
		if (!hit)
			break;
		if (exl_jbuf_put(c, &b, to.u.s, to.len))
			return -1;
		i = at + from.len;
		left--;
	}
	*out = exl_jv_from_buf(&b);
	return 0;
}

/* Python's str.format with {} / {0} / {name} fields and {{ }} escapes; a
 * format spec is not supported. */
static int str_format(struct jctx *c, unsigned line, struct jv s, const struct jargs *a,
		      struct jv *out)
{
	struct jbuf b = { 0 };
	size_t auto_i = 0;

	for (size_t i = 0; i < s.len; i++) {
		char ch = s.u.s[i];
		size_t j;
		struct jv v;

		if (ch == '}') {
			if (i + 1 < s.len && s.u.s[i + 1] == '}')
				i++;
			else
				return exl_jfail(c, line,
						 "format(): single '}' in the format string");
			if (exl_jbuf_putc(c, &b, '}'))
				return -1;
			continue;
		}
		if (ch != '{') {
			if (exl_jbuf_putc(c, &b, ch))
				return -1;
			continue;
		}
		if (i + 1 < s.len && s.u.s[i + 1] == '{') {
			if (exl_jbuf_putc(c, &b, '{'))
				return -1;
			i++;
			continue;
		}
		for (j = i + 1; j < s.len && s.u.s[j] != '}'; j++)
			;
		if (j >= s.len)
			return exl_jfail(c, line, "format(): single '{' in the format string");
		{
			const char *f = s.u.s + i + 1;
			size_t fn = j - i - 1;

			if (memchr(f, ':', fn) || memchr(f, '!', fn))
				return exl_jfail(c, line,
						 "format(): format specs are not supported");
			if (!fn) {
				if (auto_i >= a->n)
					return exl_jfail(c, line, "format(): not enough arguments");
				v = a->v[auto_i++];
			} else if (f[0] >= '0' && f[0] <= '9') {
				size_t k = 0;

				for (size_t q = 0; q < fn; q++) {
					if (f[q] < '0' || f[q] > '9' || k > a->n)
						return exl_jfail(c, line, "format(): bad field");
					k = k * 10 + (size_t)(f[q] - '0');
				}
				if (k >= a->n)
					return exl_jfail(c, line, "format(): no argument %zu", k);
				v = a->v[k];
			} else {
				struct jv *kw = a->kw ? exl_jobj_get(a->kw, f, fn) : NULL;

				if (!kw)
					return exl_jfail(c, line, "format(): no argument '%.*s'",
							 (int)fn, f);
				v = *kw;
			}
		}
		if (v.t != JV_NULL && v.t != JV_UNDEF && exl_jv_print(c, line, &b, v))
			return -1;
		i = j;
	}
	*out = exl_jv_from_buf(&b);
	return 0;
}

/* Python's str.find: a code point index, -1 when absent. */
static int str_find(struct jctx *c, unsigned line, struct jv s, const struct jargs *a,
		    struct jv *out)
{
	struct jv sub;
	size_t idx = 0;

	if (!a->n || a->v[0].t != JV_STR)
		return exl_jfail(c, line, "find() needs a string");
	sub = a->v[0];
	if (exl_jstep(c, s.len / 16))
		return -1;
	{
		const char *hit = memmem(s.u.s, s.len, sub.u.s, sub.len);
		size_t at = hit ? (size_t)(hit - s.u.s) : 0;
		uint32_t cp;

		if (!hit) {
			*out = jv_int(-1);
			return 0;
		}
		/* the code point index */
		for (size_t i = 0; i < at; idx++)
			i += exl_jt_decode(s.u.s + i, at - i, &cp);
		*out = jv_int((double)idx);
		return 0;
	}
}

static int str_join(struct jctx *c, unsigned line, struct jv s, const struct jargs *a,
		    struct jv *out)
{
	struct jbuf b = { 0 };

	if (!a->n || !jv_is_arr(a->v[0]))
		return exl_jfail(c, line, "join() needs a list");
	for (size_t i = 0; i < a->v[0].u.a->n; i++) {
		struct jv x = a->v[0].u.a->v[i];

		if (x.t != JV_STR)
			return exl_jfail(c, line, "join(): item %zu is not a string", i);
		if ((i && exl_jbuf_put(c, &b, s.u.s, s.len)) || exl_jbuf_put(c, &b, x.u.s, x.len))
			return -1;
	}
	*out = exl_jv_from_buf(&b);
	return 0;
}

static int dict_pairs(struct jctx *c, const struct jobj *o, struct jarr **out)
{
	struct jarr *r = exl_jarr_new(c, o->n);

	if (!r)
		return -1;
	for (size_t i = 0; i < o->n; i++) {
		struct jarr *p = exl_jarr_new(c, 2);

		if (!p)
			return -1;
		p->v[0] = exl_jkey_value(&o->keys[i]);
		p->v[1] = o->vals[i];
		p->n = 2;
		r->v[i] = jv_arr(JV_ARRAY, p);
	}
	r->n = o->n;
	*out = r;
	return 0;
}

/* dictsort's key: the pair's key (index 0) or value (1). */
static struct jv pair_item(const void *arg, struct jv pair)
{
	return pair.u.a->v[*(const size_t *)arg];
}

static int dictsort(struct jctx *c, unsigned line, const struct jobj *o, const struct jargs *a,
		    struct jv *out)
{
	struct jv cs = exl_jargs_get(a, 0, "case_sensitive", jv_bool(false));
	struct jv by = exl_jargs_get(a, 1, "by", jv_str("key", 3));
	struct jv rev = exl_jargs_get(a, 2, "reverse", jv_bool(false));
	struct exl_jv_sort s = { c, line, false, false, pair_item, NULL, 0 };
	size_t index;
	struct jarr *r;
	struct jv *tmp;

	if (cs.t != JV_BOOL)
		return exl_jfail(c, line, "dictsort: case_sensitive must be a boolean");
	if (by.t != JV_STR || !(name_is(by.u.s, by.len, "key") || name_is(by.u.s, by.len, "value")))
		return exl_jfail(c, line, "dictsort: by must be 'key' or 'value'");
	if (rev.t != JV_BOOL)
		return exl_jfail(c, line, "dictsort: reverse must be a boolean");
	if (dict_pairs(c, o, &r))
		return -1;
	tmp = exl_jalloc_array(c, r->n + 1, sizeof(*tmp));
	if (!tmp)
		return -1;
	index = by.u.s[0] == 'v';
	s.arg = &index;
	s.case_sensitive = cs.u.b;
	s.reverse = rev.u.b;
	exl_jv_sort(&s, r->v, tmp, r->n);
	if (s.err)
		return -1;
	*out = jv_arr(JV_ARRAY, r);
	return 0;
}

static int call_method(struct jctx *c, unsigned line, int id, struct jv self,
		       const struct jargs *a, struct jv *out)
{
	struct jbuf b = { 0 };
	const char *t;
	size_t tn;

	switch ((enum jmethod)id) {
	case M_UPPER:
	case M_LOWER:
		if ((id == M_UPPER ? exl_jt_upper : exl_jt_lower)(c, &b, self.u.s, self.len))
			return -1;
		*out = exl_jv_from_buf(&b);
		return 0;
	case M_STRIP:
	case M_LSTRIP:
	case M_RSTRIP:
		/* the reference ignores the characters argument: whitespace goes */
		exl_jt_trim(self.u.s, self.len, id != M_RSTRIP, id != M_LSTRIP, &t, &tn);
		*out = jv_str(t, tn);
		return 0;
	case M_TITLE:
		return str_title(c, self, out);
	case M_CAPITALIZE:
		return str_capitalize(c, self, out);
	case M_STARTSWITH:
	case M_ENDSWITH:
		return affix(c, line, self, a, id == M_STARTSWITH, out);
	case M_SPLIT:
		return str_split(c, line, self, a, out);
	case M_REPLACE:
		return str_replace(c, line, self, a, out);
	case M_FORMAT:
		jbeyond(c);
		return str_format(c, line, self, a, out);
	case M_FIND:
		jbeyond(c);
		return str_find(c, line, self, a, out);
	case M_JOIN:
		jbeyond(c);
		return str_join(c, line, self, a, out);
	case M_GET: {
		struct jv *v, *d;

		if (!a->n || a->v[0].t != JV_STR)
			return exl_jfail(c, line, "get(): the key must be a string: got %s",
					 a->n ? exl_jv_type_name(a->v[0]) : "nothing");
		v = exl_jobj_get(self.u.o, a->v[0].u.s, a->v[0].len);
		if (v) {
			*out = *v;
		} else if (a->n > 1) {
			*out = a->v[1];
		} else if ((d = exl_jargs_kw(a, "default"))) {
			/* the reference would hand back its keyword arguments here */
			jbeyond(c);
			*out = *d;
		} else {
			*out = jv_null();
		}
		return 0;
	}
	case M_ITEMS: {
		struct jarr *r;

		if (dict_pairs(c, self.u.o, &r))
			return -1;
		*out = jv_arr(JV_ARRAY, r);
		return 0;
	}
	case M_KEYS:
	case M_VALUES: {
		struct jarr *r = exl_jarr_new(c, self.u.o->n);

		if (!r)
			return -1;
		for (size_t i = 0; i < self.u.o->n; i++)
			r->v[i] = id == M_KEYS ? exl_jkey_value(&self.u.o->keys[i]) :
						 self.u.o->vals[i];
		r->n = self.u.o->n;
		*out = jv_arr(JV_ARRAY, r);
		return 0;
	}
	case M_DICTSORT:
		return dictsort(c, line, self.u.o, a, out);
	case M_APPEND:
		jbeyond(c);
		if (a->n != 1)
			return exl_jfail(c, line, "append() takes one argument");
		if (exl_jarr_push(c, self.u.a, a->v[0]))
			return -1;
		*out = jv_null();
		return 0;
	case M_POP: {
		struct jarr *arr = self.u.a;
		double i = (double)arr->n - 1;

		jbeyond(c);
		if (a->n) {
			if (a->v[0].t != JV_INT)
				return exl_jfail(c, line, "pop(): the index must be an integer");
			i = a->v[0].u.n < 0 ? a->v[0].u.n + (double)arr->n : a->v[0].u.n;
		}
		if (!arr->n || i < 0 || i >= (double)arr->n)
			return exl_jfail(c, line, "pop(): index out of range");
		*out = arr->v[(size_t)i];
		memmove(arr->v + (size_t)i, arr->v + (size_t)i + 1,
			(arr->n - (size_t)i - 1) * sizeof(*arr->v));
		arr->n--;
		return 0;
	}
	}
	return exl_jfail(c, line, "unknown method");
}

int exl_jinja_method(struct jctx *c, unsigned line, struct jv self, const char *name,
		     const struct jargs *a, struct jv *out)
{
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (!strcmp(methods[i].name, name))
			return call_method(c, line, (int)methods[i].id, self, a, out);
	return exl_jfail(c, line, "unknown method %s", name);
}

/* ---- global functions ---- */

static const char *const global_names[JG_COUNT] = {
	[JG_RAISE] = "raise_exception",
	[JG_RANGE] = "range",
	[JG_STRFTIME] = "strftime_now",
	[JG_NAMESPACE] = "namespace",
};

const char *exl_jinja_global_name(int id)
{
	return id >= 0 && id < JG_COUNT ? global_names[id] : NULL;
}

static double range_arg(struct jv v, bool *ok)
{
	if (jv_is_num(v))
		return v.u.n;
	if (v.t == JV_BOOL)
		return v.u.b;
	if (v.t == JV_UNDEF)
		return NAN;
	*ok = false;
	return 0;
}

static int range_fn(struct jctx *c, unsigned line, const struct jargs *a, struct jv *out)
{
	double start = 0, stop, step = 1;
	bool ok = true;
	struct jarr *r;

	if (a->n < 1 || a->n > 3)
		return exl_jfail(c, line, "range() takes 1 to 3 arguments");
	/* range(n) and range(n, undefined) alike, as the reference */
	if (a->n == 1 || a->v[1].t == JV_UNDEF) {
		stop = range_arg(a->v[0], &ok);
	} else {
		start = range_arg(a->v[0], &ok);
		stop = range_arg(a->v[1], &ok);
		if (a->n == 3)
			step = range_arg(a->v[2], &ok);
	}
	if (!ok)
		return exl_jfail(c, line, "range() takes numbers");
	if (step == 0)
		return exl_jfail(c, line, "range() step must not be zero");
	if (isnan(step))
		step = 1;
	if (start == floor(start) && stop == floor(stop) && step == floor(step) &&
	    fabs(start) < 1e15 && fabs(stop) < 1e15 && fabs(step) < 1e15) {
		/* integers: the count first, no array grown item by item */
		double count = step > 0 ? ceil((stop - start) / step) : ceil((start - stop) / -step);

		if (count < 0)
			count = 0;
		if (count > JINJA_MAX_ITERATIONS)
			return exl_jfail(c, line, "range() of over 10,000,000 items");
		r = exl_jarr_new(c, (size_t)count);
		if (!r)
			return -1;
		for (size_t k = 0; k < (size_t)count; k++)
			r->v[k] = jv_int(start + (double)k * step);
		r->n = (size_t)count;
		*out = jv_arr(JV_ARRAY, r);
		return 0;
	}
	r = exl_jarr_new(c, 0);
	if (!r)
		return -1;
	for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
		if (r->n >= JINJA_MAX_ITERATIONS)
			return exl_jfail(c, line, "range() of over 10,000,000 items");
		if (exl_jarr_push(c, r, i == floor(i) ? jv_int(i) : jv_float(i)))
			return -1;
	}
	*out = jv_arr(JV_ARRAY, r);
	return 0;
}

static int strftime_fn(struct jctx *c, unsigned line, const struct jargs *a, struct jv *out)
{
	static const char *const months[] = { "January", "February", "March", "April", "May",
					      "June", "July", "August", "September", "October",
					      "November", "December" };
	struct jbuf b = { 0 };
	struct tm tm;
	struct jv f;
	char tmp[32];

	if (!a->n || a->v[0].t != JV_STR)
		return exl_jfail(c, line, "strftime_now() takes a format string");
	f = a->v[0];
	if (c->have_now) {
		tm = c->now;
	} else {
		time_t now = time(NULL);

		if (!localtime_r(&now, &tm))
			return exl_jfail(c, line, "strftime_now(): no local time");
	}
	/* the reference's directives only: %Y %m %d %b %B %H %M %%; others stay */
	for (size_t i = 0; i < f.len; i++) {
		char d = i + 1 < f.len ? f.u.s[i + 1] : 0;
		int n = -1;

		if (f.u.s[i] != '%' || !d || !strchr("YmdbBHM%", d)) {
			if (exl_jbuf_putc(c, &b, f.u.s[i]))
				return -1;
			continue;
		}
		switch (d) {
		case 'Y':
			n = snprintf(tmp, sizeof(tmp), "%d", tm.tm_year + 1900);
			break;
		case 'm':
			n = snprintf(tmp, sizeof(tmp), "%02d", tm.tm_mon + 1);
			break;
		case 'd':
			n = snprintf(tmp, sizeof(tmp), "%02d", tm.tm_mday);
			break;
		case 'b':
			n = snprintf(tmp, sizeof(tmp), "%.3s", months[tm.tm_mon % 12]);
			break;
		case 'B':
			n = snprintf(tmp, sizeof(tmp), "%s", months[tm.tm_mon % 12]);
			break;
		case 'H':
			n = snprintf(tmp, sizeof(tmp), "%02d", tm.tm_hour);
			break;
		case 'M':
			n = snprintf(tmp, sizeof(tmp), "%02d", tm.tm_min);
			break;
		default:
			n = snprintf(tmp, sizeof(tmp), "%%");
		}
		if (exl_jbuf_put(c, &b, tmp, (size_t)n))
			return -1;
		i++;
	}
	*out = exl_jv_from_buf(&b);
	return 0;
}

static int namespace_fn(struct jctx *c, unsigned line, const struct jargs *a, struct jv *out)
{
	struct jobj *o = exl_jobj_new(c, 4);

	if (!o)
		return -1;
	if (a->n > 1)
		return exl_jfail(c, line,
				 "namespace() takes at most 1 positional argument, got %zu",
				 a->n);
	if (a->n == 1) {
		struct jv src = a->v[0];

		if (jv_is_dict(src)) {
			for (size_t i = 0; i < src.u.o->n; i++)
				if (exl_jobj_set(c, o, src.u.o->keys[i].p, src.u.o->keys[i].n,
						 src.u.o->vals[i]))
					return -1;
		} else if (jv_is_arr(src)) {
			for (size_t i = 0; i < src.u.a->n; i++) {
				struct jv p = src.u.a->v[i];

				if (!jv_is_arr(p) || p.u.a->n != 2)
					return exl_jfail(c, line,
							 "namespace() takes a dict or [key, value] pairs");
				if (p.u.a->v[0].t != JV_STR)
					return exl_jfail(c, line, "namespace keys must be strings");
				if (exl_jobj_set(c, o, p.u.a->v[0].u.s, p.u.a->v[0].len,
						 p.u.a->v[1]))
					return -1;
			}
		} else {
			return exl_jfail(c, line, "'%s' object is not iterable",
					 exl_jv_type_name(src));
		}
	}
	for (size_t i = 0; a->kw && i < a->kw->n; i++)
		if (exl_jobj_set(c, o, a->kw->keys[i].p, a->kw->keys[i].n, a->kw->vals[i]))
			return -1;
	*out = jv_obj(JV_NS, o);
	return 0;
}

int exl_jinja_call_builtin(struct jctx *c, unsigned line, const struct jfn *f,
			   const struct jargs *a, struct jv *out)
{
	struct jbuf b = { 0 };

	switch (f->kind) {
	case JF_METHOD:
		return call_method(c, line, f->id, f->self, a, out);
	case JF_CYCLE:
		jbeyond(c);
		if (!a->n)
			return exl_jfail(c, line, "loop.cycle() needs at least one value");
		*out = a->v[f->loop_i % a->n];
		return 0;
	case JF_GLOBAL:
		break;
	default:
		return exl_jfail(c, line, "cannot call this");
	}
	switch (f->id) {
	case JG_RAISE:
		/* Error(value): the message is String(value), "" for none given */
		if (a->n && a->v[0].t != JV_UNDEF && exl_jv_js_str(c, line, &b, a->v[0]))
			return -1;
		if (!a->n && a->kw && exl_jbuf_puts(c, &b, "[object Map]"))
			return -1;
		return exl_jfail_raw(c, b.p ? b.p : "", b.n);
	case JG_RANGE:
		return range_fn(c, line, a, out);
	case JG_STRFTIME:
		return strftime_fn(c, line, a, out);
	case JG_NAMESPACE:
		return namespace_fn(c, line, a, out);
	}
	return exl_jfail(c, line, "cannot call this");
}
