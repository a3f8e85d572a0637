/* Filters.  The reference picks a filter by the value's type and by
 * whether it was written with parentheses (`x|int` and `x|int()` differ);
 * so does this file.  What the reference rejects falls through to the
 * Jinja2 filters at the end (d, count, e, min, max, sum, select, map with a
 * filter, round, ...). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jinja.h"

static bool is(const char *s, size_t n, const char *name)
{
	return strlen(name) == n && !memcmp(s, name, n);
}

static const struct jargs no_args;

static bool js_truthy(struct jv v)
{
	switch (v.t) {
	case JV_UNDEF:
	case JV_NULL:
		return false;
	case JV_BOOL:
		return v.u.b;
	case JV_INT:
	case JV_FLOAT:
		return v.u.n != 0 && !isnan(v.u.n);
	case JV_STR:
		return v.len > 0;
	default:
		return true;
	}
}

static int tojson(struct jctx *c, unsigned line, struct jv v, const struct jjson_opts *o,
		  struct jv *out)
{
	struct jbuf b = { 0 };

	if (exl_jv_tojson(c, line, &b, v, o))
		return -1;
	*out = exl_jv_from_buf(&b);
	return 0;
}

/* Array#join of the raw values: null and undefined are "". */
static int join_raw(struct jctx *c, unsigned line, const struct jarr *a, const char *sep,
		    size_t sn, struct jv *out)
{
	struct jbuf b = { 0 };

	for (size_t i = 0; i < a->n; i++) {
		struct jv x = a->v[i];

		if (i && exl_jbuf_put(c, &b, sep, sn))
			return -1;
		/* "" for none in the reference, "None" in Jinja2 */
		if (x.t != JV_UNDEF && (x.t != JV_NULL || c->jinja2) &&
		    exl_jv_js_str(c, line, &b, x))
			return -1;
	}
	*out = exl_jv_from_buf(&b);
	return 0;
}

static int indent(struct jctx *c, struct jv s, const char *pad, size_t padn, bool first,
		  bool blank, struct jv *out)
{
	struct jbuf b = { 0 };
	size_t start = 0, line = 0;

	for (size_t i = 0; i <= s.len; i++) {
		if (i < s.len && s.u.s[i] != '\n')
			continue;
		if (line && exl_jbuf_putc(c, &b, '\n'))
			return -1;
		if ((first || line) && (blank || i > start) && exl_jbuf_put(c, &b, pad, padn))
			return -1;
		if (exl_jbuf_put(c, &b, s.u.s + start, i - start))
			return -1;
		start = i + 1;
		line++;
	}
	*out = exl_jv_from_buf(&b);
	return 0;
}

struct vsort {
	bool case_sensitive, reverse;
	struct jv attr;             /* JV_NULL: the items themselves */
};

/* The reference's getAttributeValue: "a.b.0" through dicts and lists. */
static struct jv attr_path(struct jv v, const char *p, size_t n)
{
	size_t i = 0;

	while (i <= n) {
		size_t j = i;

		while (j < n && p[j] != '.')
			j++;
		if (jv_is_attrs(v)) {
			struct jv *x = exl_jobj_get(v.u.o, p + i, j - i);

			v = x ? *x : jv_undef();
		} else if (jv_is_arr(v)) {
			/* parseInt: leading digits */
			double idx = exl_jt_parse_int(p + i, j - i);

			if (isnan(idx) || idx < 0 || idx >= (double)v.u.a->n)
				return jv_undef();
			v = v.u.a->v[(size_t)idx];
		} else {
			return jv_undef();
		}
		i = j + 1;
	}
	return v;
}

static struct jv sort_key(const void *arg, struct jv v)
{
	const struct vsort *s = arg;
	char tmp[40];
	size_t n;

	if (s->attr.t == JV_NULL)
		return v;
	if (s->attr.t == JV_STR)
		return attr_path(v, s->attr.u.s, s->attr.len);
	n = exl_jnum_fmt(s->attr.u.n, tmp);
	return attr_path(v, tmp, n);
}

static int sorted(struct jctx *c, unsigned line, struct jv v, struct vsort *s, struct jv *out)
{
	struct jarr *r = exl_jarr_new(c, v.u.a->n);
	struct jv *tmp = exl_jalloc_array(c, v.u.a->n + 1, sizeof(*tmp));

	if (!r || !tmp || exl_jstep(c, v.u.a->n))
		return -1;
	if (v.u.a->n)
		memcpy(r->v, v.u.a->v, v.u.a->n * sizeof(*r->v));
	r->n = v.u.a->n;
	struct exl_jv_sort js = { c, line, s->case_sensitive, s->reverse, sort_key, s, 0 };

	exl_jv_sort(&js, r->v, tmp, r->n);
	if (js.err)
		return -1;
	*out = jv_arr(JV_ARRAY, r);
	return 0;
}

static int unique(struct jctx *c, struct jv v, struct jv *out)
{
	struct jarr *r = exl_jarr_new(c, 0);

	if (!r)
		return -1;
	for (size_t i = 0; i < v.u.a->n; i++) {
		bool seen = false;

		if (exl_jstep(c, r->n / 16 + 1))
			return -1;
		for (size_t j = 0; !seen && j < r->n; j++)
			seen = exl_jv_same_value_zero(r->v[j], v.u.a->v[i]);
		if (!seen && exl_jarr_push(c, r, v.u.a->v[i]))
			return -1;
	}
	*out = jv_arr(JV_ARRAY, r);
	return 0;
}

/* selectattr / rejectattr / select / reject.  The reference looks the
 * attribute up in the dict only, and an item without it is never
 * selected. */
static int select_items(struct jctx *c, unsigned line, struct jv v, const struct jargs *a,
			bool by_attr, bool keep, struct jv *out)
{
	struct jarr *r = exl_jarr_new(c, 0);
	size_t first = by_attr ? 1 : 0;
	struct jargs targs = { 0 };
	struct jv attr = jv_undef(), test = jv_undef();

	if (!r)
		return -1;
	if (by_attr) {
		if (!a->n || a->v[0].t != JV_STR)
			return exl_jfail(c, line, "selectattr / rejectattr take an attribute name");
		attr = a->v[0];
	}
	if (a->n > first) {
		test = a->v[first];
		if (test.t != JV_STR)
			return exl_jfail(c, line, "the test must be named by a string");
		targs.n = a->n - first - 1;
		targs.v = a->v + first + 1;
	}
	for (size_t i = 0; i < v.u.a->n; i++) {
		struct jv item = v.u.a->v[i], x = item;
		bool res;

		if (exl_jstep(c, 1))
			return -1;
		if (by_attr) {
			struct jv *p = jv_is_attrs(item) ?
				       exl_jobj_get(item.u.o, attr.u.s, attr.len) : NULL;

			if (!jv_is_attrs(item))
				jbeyond(c);
			if (!p) {
				if (!keep && exl_jarr_push(c, r, item))
					return -1;
				continue;
			}
			x = *p;
		}
		if (test.t == JV_STR) {
			if (exl_jinja_test(c, line, test.u.s, test.len, x, &targs, &res))
				return -1;
		} else {
			res = exl_jv_truthy(x);
		}
		if (res == keep && exl_jarr_push(c, r, item))
			return -1;
	}
	*out = jv_arr(JV_ARRAY, r);
	return 0;
}

static int map_items(struct jctx *c, unsigned line, struct jv v, const struct jargs *a,
		     struct jv *out)
{
	struct jarr *r = exl_jarr_new(c, v.u.a->n);
	struct jv *attr = exl_jargs_kw(a, "attribute");

	if (!r)
		return -1;
	if (attr) {
		struct jv *dflt = exl_jargs_kw(a, "default");

		if (attr->t != JV_STR)
			return exl_jfail(c, line, "map: attribute must be a string");
		for (size_t i = 0; i < v.u.a->n; i++) {
			struct jv x = attr_path(v.u.a->v[i], attr->u.s, attr->len);

			if (!jv_is_attrs(v.u.a->v[i]))
				jbeyond(c);
			r->v[i] = x.t == JV_UNDEF && dflt ? *dflt : x;
		}
		r->n = v.u.a->n;
		*out = jv_arr(JV_ARRAY, r);
		return 0;
	}
	/* Jinja2's map('filter', args...) */
	jbeyond(c);
	if (!a->n || a->v[0].t != JV_STR)
		return exl_jfail(c, line, "map needs attribute= or a filter name");
	{
		struct jargs fa = { a->n - 1, a->v + 1, a->kw };

		for (size_t i = 0; i < v.u.a->n; i++)
			if (exl_jinja_filter(c, line, a->v[0].u.s, a->v[0].len, a->n > 1 || a->kw,
					     v.u.a->v[i], &fa, &r->v[i]))
				return -1;
	}
	r->n = v.u.a->n;
	*out = jv_arr(JV_ARRAY, r);
	return 0;
}

static int string_of(struct jctx *c, unsigned line, struct jv v, struct jv *out)
{
	struct jbuf b = { 0 };

	if (v.t == JV_STR) {
		*out = v;
		return 0;
	}
	if (exl_jv_print(c, line, &b, v))
		return -1;
	*out = exl_jv_from_buf(&b);
	return 0;
}

/* ---- the reference's filters ---- */

/* 1: not one of the reference's for this type. */
static int plain(struct jctx *c, unsigned line, const char *f, size_t fn, struct jv v,
		 struct jv *out)
{
	if (jv_is_arr(v)) {
		struct jarr *a = v.u.a;

		if (is(f, fn, "list")) {
			/* Jinja2 makes a list of a tuple; the reference keeps the
			 * tuple, so the list shares its items and stays a tuple to
			 * the reference's tests (len marks it) */
			*out = v;
			if (v.t == JV_TUPLE) {
				out->t = JV_ARRAY;
				out->len = 1;
			}
		} else if (is(f, fn, "first") || is(f, fn, "last")) {
			if (!a->n)
				return exl_jfail(c, line, "%.*s of an empty list", (int)fn, f);
			*out = a->v[f[0] == 'f' ? 0 : a->n - 1];
		} else if (is(f, fn, "length")) {
			*out = jv_int((double)a->n);
		} else if (is(f, fn, "reverse")) {
			struct jarr *r = exl_jarr_new(c, a->n);

			if (!r)
				return -1;
			for (size_t i = 0; i < a->n; i++)
				r->v[i] = a->v[a->n - 1 - i];
			r->n = a->n;
			*out = jv_arr(JV_ARRAY, r);
		} else if (is(f, fn, "sort")) {
			struct vsort s = { .attr = jv_null() };

			return sorted(c, line, v, &s, out);
		} else if (is(f, fn, "join")) {
			return join_raw(c, line, a, "", 0, out);
		} else if (is(f, fn, "string")) {
			struct jjson_opts o = { 0 };

			return tojson(c, line, v, &o, out);
		} else if (is(f, fn, "unique")) {
			return unique(c, v, out);
		} else {
			return 1;
		}
		return 0;
	}
	if (v.t == JV_STR) {
		const char *t;
		size_t tn;

		if (is(f, fn, "length")) {
			*out = jv_int((double)exl_jt_utf16_len(v.u.s, v.len));
		} else if (is(f, fn, "upper") || is(f, fn, "lower") || is(f, fn, "title") ||
			   is(f, fn, "capitalize")) {
			char name[16];

			snprintf(name, sizeof(name), "%.*s", (int)fn, f);
			return exl_jinja_method(c, line, v, name, &no_args, out);
		} else if (is(f, fn, "trim")) {
			exl_jt_trim(v.u.s, v.len, true, true, &t, &tn);
			*out = jv_str(t, tn);
		} else if (is(f, fn, "indent")) {
			return indent(c, v, "    ", 4, false, false, out);
		} else if (is(f, fn, "join") || is(f, fn, "string")) {
			*out = v;
		} else if (is(f, fn, "int")) {
			double d = exl_jt_parse_int(v.u.s, v.len);

			*out = jv_int(isnan(d) ? 0 : d);
		} else if (is(f, fn, "float")) {
			double d = exl_jt_parse_float(v.u.s, v.len);

			*out = jv_float(isnan(d) ? 0 : d);
		} else {
			return 1;
		}
		return 0;
	}
	if (jv_is_num(v)) {
		if (is(f, fn, "abs"))
			*out = v.t == JV_INT ? jv_int(fabs(v.u.n)) : jv_float(fabs(v.u.n));
		else if (is(f, fn, "int"))
			*out = jv_int(floor(v.u.n));
		else if (is(f, fn, "float"))
			*out = jv_float(v.u.n);
		else if (is(f, fn, "string"))
			return string_of(c, line, v, out);
		else
			return 1;
		return 0;
	}
	if (jv_is_dict(v)) {
		if (is(f, fn, "items"))
			return exl_jinja_method(c, line, v, "items", &no_args, out);
		if (is(f, fn, "length")) {
			*out = jv_int((double)v.u.o->n);
			return 0;
		}
		if (is(f, fn, "get") || is(f, fn, "keys") || is(f, fn, "values") ||
		    is(f, fn, "dictsort")) {
			char name[16];

			snprintf(name, sizeof(name), "%.*s", (int)fn, f);
			return exl_jinja_method(c, line, v, name, &no_args, out);
		}
		return 1;
	}
	if (v.t == JV_BOOL) {
		if (is(f, fn, "bool"))
			*out = v;
		else if (is(f, fn, "int"))
			*out = jv_int(v.u.b);
		else if (is(f, fn, "float"))
			*out = jv_float(v.u.b);
		else if (is(f, fn, "string"))
			*out = v.u.b ? jv_str("true", 4) : jv_str("false", 5);
		else
			return 1;
		return 0;
	}
	return 1;
}

static int tojson_called(struct jctx *c, unsigned line, struct jv v, const struct jargs *a,
			 struct jv *out)
{
	struct jjson_opts o = { .undefined_as_null = true };
	struct jv *ind = exl_jargs_kw(a, "indent"), *asc = exl_jargs_kw(a, "ensure_ascii");
	struct jv *sk = exl_jargs_kw(a, "sort_keys"), *sep = exl_jargs_kw(a, "separators");

	if (ind && ind->t != JV_INT && ind->t != JV_NULL)
		return exl_jfail(c, line, "tojson: indent must be an integer");
	if (ind && ind->t == JV_INT) {
		if (ind->u.n < 0 || ind->u.n > 1024)
			return exl_jfail(c, line, "tojson: indent out of range");
		o.indent = (int)ind->u.n;
	}
	if (asc && asc->t != JV_BOOL)
		return exl_jfail(c, line, "tojson: ensure_ascii must be a boolean");
	o.ensure_ascii = asc && asc->u.b;
	if (sk && sk->t != JV_BOOL)
		return exl_jfail(c, line, "tojson: sort_keys must be a boolean");
	o.sort_keys = sk && sk->u.b;
	if (sep && sep->t != JV_NULL) {
		if (!jv_is_arr(*sep) || sep->u.a->n != 2 || sep->u.a->v[0].t != JV_STR ||
		    sep->u.a->v[1].t != JV_STR)
			return exl_jfail(c, line, "tojson: separators must be two strings");
		o.item_sep = sep->u.a->v[0].u.s;
		o.item_sep_len = sep->u.a->v[0].len;
		o.key_sep = sep->u.a->v[1].u.s;
		o.key_sep_len = sep->u.a->v[1].len;
	}
	return tojson(c, line, v, &o, out);
}

static int called(struct jctx *c, unsigned line, const char *f, size_t fn, struct jv v,
		  const struct jargs *a, struct jv *out)
{
	if (is(f, fn, "tojson"))
		return tojson_called(c, line, v, a, out);
	if (is(f, fn, "join")) {
		struct jv sep = exl_jargs_get(a, 0, "separator", jv_str("", 0));

		if (v.t != JV_STR && !jv_is_arr(v))
			return 1;
		if (sep.t != JV_STR)
			return exl_jfail(c, line, "join: the separator must be a string");
		if (jv_is_arr(v))
			return join_raw(c, line, v.u.a, sep.u.s, sep.len, out);
		{
			struct jbuf b = { 0 };

			for (size_t i = 0; i < v.len;) {
				uint32_t cp;
				size_t k = exl_jt_decode(v.u.s + i, v.len - i, &cp);

				if ((i && exl_jbuf_put(c, &b, sep.u.s, sep.len)) ||
				    exl_jbuf_put(c, &b, v.u.s + i, k))
					return -1;
				i += k;
			}
			*out = exl_jv_from_buf(&b);
			return 0;
		}
	}
	if (is(f, fn, "int") || is(f, fn, "float")) {
		bool isint = f[0] == 'i';
		struct jv dflt = exl_jargs_get(a, 0, "default", isint ? jv_int(0) : jv_float(0));

		if (v.t == JV_STR) {
			double d = isint ? exl_jt_parse_int(v.u.s, v.len) :
					   exl_jt_parse_float(v.u.s, v.len);

			*out = isnan(d) ? dflt : isint ? jv_int(d) : jv_float(d);
		} else if (jv_is_num(v)) {
			*out = v;
		} else if (v.t == JV_BOOL) {
			*out = isint ? jv_int(v.u.b) : jv_float(v.u.b);
		} else {
			return 1;
		}
		return 0;
	}
	if (is(f, fn, "default")) {
		struct jv dflt = a->n ? a->v[0] : jv_str("", 0);
		struct jv boolean = exl_jargs_get(a, 1, "boolean", jv_bool(false));

		if (boolean.t != JV_BOOL)
			return exl_jfail(c, line, "default: the flag must be a boolean");
		*out = (v.t == JV_UNDEF || (boolean.u.b && !exl_jv_truthy(v))) ? dflt : v;
		return 0;
	}
	if (jv_is_arr(v)) {
		if (is(f, fn, "sort")) {
			struct vsort s = { 0 };
			struct jv rev = exl_jargs_get(a, 0, "reverse", jv_bool(false));
			struct jv cs = exl_jargs_get(a, 1, "case_sensitive", jv_bool(false));
			struct jv at = exl_jargs_get(a, 2, "attribute", jv_null());

			if (rev.t != JV_BOOL || cs.t != JV_BOOL)
				return exl_jfail(c, line,
						 "sort: reverse and case_sensitive are booleans");
			if (at.t != JV_STR && at.t != JV_INT && at.t != JV_NULL)
				return exl_jfail(c, line,
						 "sort: attribute must be a string or an integer");
			s.reverse = rev.u.b;
			s.case_sensitive = cs.u.b;
			s.attr = at;
			return sorted(c, line, v, &s, out);
		}
		if (is(f, fn, "selectattr") || is(f, fn, "rejectattr"))
			return select_items(c, line, v, a, true, f[0] == 's', out);
		if (is(f, fn, "map"))
			return map_items(c, line, v, a, out);
		return 1;
	}
	if (v.t == JV_STR) {
		if (is(f, fn, "indent")) {
			struct jv w = exl_jargs_get(a, 0, "width", jv_int(4));
			struct jv first = exl_jargs_get(a, 1, "first", jv_bool(false));
			struct jv blank = exl_jargs_get(a, 2, "blank", jv_bool(false));
			struct jbuf pad = { 0 };

			if (w.t == JV_STR) {
				/* Jinja2 takes the indentation itself (an extension) */
				jbeyond(c);
				return indent(c, v, w.u.s, w.len, js_truthy(first),
					      js_truthy(blank),
					      out);
			}
			if (w.t != JV_INT)
				return exl_jfail(c, line, "indent: width must be a number");
			for (double i = 0; i < w.u.n; i++)
				if (exl_jbuf_putc(c, &pad, ' '))
					return -1;
			return indent(c, v, pad.p ? pad.p : "", pad.n, js_truthy(first),
				      js_truthy(blank), out);
		}
		if (is(f, fn, "replace"))
			return exl_jinja_method(c, line, v, "replace", a, out);
		return 1;
	}
	if (jv_is_dict(v) && (is(f, fn, "get") || is(f, fn, "items") || is(f, fn, "keys") ||
			      is(f, fn, "values") || is(f, fn, "dictsort"))) {
		char name[16];

		snprintf(name, sizeof(name), "%.*s", (int)fn, f);
		return exl_jinja_method(c, line, v, name, a, out);
	}
	return 1;
}

/* ---- Jinja2's, where the reference has none ---- */

static double python_round(double x, double digits, bool floor_it, bool ceil_it)
{
	double m = pow(10, digits), y = x * m;

	if (floor_it)
		y = floor(y);
	else if (ceil_it)
		y = ceil(y);
	else
		y = nearbyint(y);   /* 'common': Python's round, half to even */
	return y / m;
}

static int minmax(struct jctx *c, unsigned line, struct jv v, const struct jargs *a, bool max,
		  struct jv *out)
{
	struct vsort s = { .attr = jv_null() };
	struct jv best = jv_undef();
	struct jv cs = exl_jargs_get(a, 0, "case_sensitive", jv_bool(false));
	struct jv *at = exl_jargs_kw(a, "attribute");

	s.case_sensitive = cs.t == JV_BOOL && cs.u.b;
	if (at)
		s.attr = *at;
	for (size_t i = 0; i < v.u.a->n; i++) {
		int r = 0;

		if (best.t == JV_UNDEF) {
			best = v.u.a->v[i];
			continue;
		}
		if (exl_jv_compare(c, line, sort_key(&s, v.u.a->v[i]), sort_key(&s, best),
				   s.case_sensitive, &r))
			return -1;
		if (max ? r > 0 : r < 0)
			best = v.u.a->v[i];
	}
	*out = best;
	return 0;
}

static int html_escape(struct jctx *c, unsigned line, struct jv v, struct jv *out)
{
	struct jbuf b = { 0 }, s = { 0 };

	if (v.t == JV_UNDEF) {
		*out = jv_str("", 0);
		return 0;
	}
	if (v.t != JV_STR) {
		if (exl_jv_print(c, line, &s, v))
			return -1;
		v = exl_jv_from_buf(&s);
	}
	for (size_t i = 0; i < v.len; i++) {
		const char *e = NULL;

		switch (v.u.s[i]) {
		case '&':
			e = "&amp;";
			break;
		case '<':
			e = "&lt;";
			break;
		case '>':
			e = "&gt;";
			break;
		case '"':
			e = "&#34;";
			break;
		case '\'':
			e = "&#39;";
			break;
		}
		if (e ? exl_jbuf_puts(c, &b, e) : exl_jbuf_putc(c, &b, v.u.s[i]))
			return -1;
	}
	*out = exl_jv_from_buf(&b);
	return 0;
}

static int chars(struct jctx *c, struct jv v, struct jarr **out)
{
	struct jarr *r = exl_jarr_new(c, 0);

	if (!r)
		return -1;
	for (size_t i = 0; i < v.len;) {
		uint32_t cp;
		size_t k = exl_jt_decode(v.u.s + i, v.len - i, &cp);

		if (exl_jarr_push(c, r, jv_str(v.u.s + i, k)))
			return -1;
		i += k;
	}
	*out = r;
	return 0;
}

static int jinja2(struct jctx *c, unsigned line, const char *f, size_t fn, struct jv v,
		  const struct jargs *a, struct jv *out)
{
	if (is(f, fn, "d") || is(f, fn, "default")) {
		struct jv dflt = a->n ? a->v[0] : jv_str("", 0);
		struct jv boolean = exl_jargs_get(a, 1, "boolean", jv_bool(false));

		*out = (v.t == JV_UNDEF || (exl_jv_truthy(boolean) && !exl_jv_truthy(v))) ? dflt : v;
		return 0;
	}
	if (is(f, fn, "length") || is(f, fn, "count")) {
		if (v.t == JV_UNDEF)
			*out = jv_int(0);
		else if (v.t == JV_STR)
			*out = jv_int((double)exl_jt_utf16_len(v.u.s, v.len));
		else if (jv_is_arr(v))
			*out = jv_int((double)v.u.a->n);
		else if (jv_is_attrs(v))
			*out = jv_int((double)v.u.o->n);
		else
			return 1;
		return 0;
	}
	if (is(f, fn, "e") || is(f, fn, "escape"))
		return html_escape(c, line, v, out);
	if ((v.t == JV_NULL || v.t == JV_UNDEF) &&
	    (is(f, fn, "select") || is(f, fn, "reject") || is(f, fn, "selectattr") ||
	     is(f, fn, "rejectattr") || is(f, fn, "map"))) {
		/* Jinja2 iterates nothing out of a false value */
		struct jarr *r = exl_jarr_new(c, 0);

		if (!r)
			return -1;
		*out = jv_arr(JV_ARRAY, r);
		return 0;
	}
	if (v.t == JV_UNDEF) {
		if (is(f, fn, "string") || is(f, fn, "trim") || is(f, fn, "upper") ||
		    is(f, fn, "lower") || is(f, fn, "join") || is(f, fn, "title") ||
		    is(f, fn, "capitalize")) {
			*out = jv_str("", 0);
			return 0;
		}
		if (is(f, fn, "list") || is(f, fn, "items")) {
			struct jarr *r = exl_jarr_new(c, 0);

			if (!r)
				return -1;
			*out = jv_arr(JV_ARRAY, r);
			return 0;
		}
		if (is(f, fn, "first") || is(f, fn, "last")) {
			*out = jv_undef();
			return 0;
		}
	}
	if ((is(f, fn, "int") || is(f, fn, "float")) && (v.t == JV_UNDEF || v.t == JV_NULL)) {
		struct jv dflt = exl_jargs_get(a, 0, "default", f[0] == 'i' ? jv_int(0) : jv_float(0));

		*out = dflt;
		return 0;
	}
	if ((is(f, fn, "string") || is(f, fn, "trim") || is(f, fn, "upper") || is(f, fn, "lower") ||
	     is(f, fn, "title") || is(f, fn, "capitalize")) && v.t != JV_STR && v.t != JV_UNDEF) {
		/* Jinja2 makes a string of it first: Python's str() */
		struct jbuf b = { 0 };

		if (exl_jv_py_str(c, line, &b, v))
			return -1;
		return exl_jinja_filter(c, line, f, fn, a->n || a->kw, exl_jv_from_buf(&b), a, out);
	}
	if (v.t == JV_STR) {
		struct jarr *r;

		if (is(f, fn, "list") || is(f, fn, "reverse") || is(f, fn, "first") ||
		    is(f, fn, "last")) {
			if (chars(c, v, &r))
				return -1;
			if (is(f, fn, "list")) {
				*out = jv_arr(JV_ARRAY, r);
			} else if (f[0] == 'f' || f[0] == 'l') {
				*out = r->n ? r->v[f[0] == 'f' ? 0 : r->n - 1] : jv_undef();
			} else {
				struct jbuf b = { 0 };

				for (size_t i = r->n; i-- > 0;)
					if (exl_jbuf_put(c, &b, r->v[i].u.s, r->v[i].len))
						return -1;
				*out = exl_jv_from_buf(&b);
			}
			return 0;
		}
		if (is(f, fn, "trim") && a->n && a->v[0].t == JV_STR) {
			/* trim(chars): Python's strip(chars) */
			size_t s = 0, e = v.len;

			while (s < e && memchr(a->v[0].u.s, v.u.s[s], a->v[0].len))
				s++;
			while (e > s && memchr(a->v[0].u.s, v.u.s[e - 1], a->v[0].len))
				e--;
			*out = jv_str(v.u.s + s, e - s);
			return 0;
		}
		if (is(f, fn, "wordcount")) {
			size_t n = 0;

			for (size_t i = 0; i < v.len; i++)
				if (jt_is_word(v.u.s[i]) && (i == 0 || !jt_is_word(v.u.s[i - 1])))
					n++;
			*out = jv_int((double)n);
			return 0;
		}
	}
	if (jv_is_dict(v) && is(f, fn, "list"))
		return exl_jinja_method(c, line, v, "keys", &no_args, out);
	if (jv_is_num(v) && is(f, fn, "round")) {
		struct jv prec = exl_jargs_get(a, 0, "precision", jv_int(0));
		struct jv method = exl_jargs_get(a, 1, "method", jv_str("common", 6));

		if (prec.t != JV_INT || method.t != JV_STR)
			return exl_jfail(c, line,
					 "round: precision is an integer, method a string");
		/* Python's round() keeps an int an int */
		if (v.t == JV_INT) {
			*out = v;
			return 0;
		}
		*out = jv_float(python_round(v.u.n, prec.u.n, is(method.u.s, method.len, "floor"),
					     is(method.u.s, method.len, "ceil")));
		return 0;
	}
	if (jv_is_arr(v)) {
		if (is(f, fn, "min") || is(f, fn, "max"))
			return minmax(c, line, v, a, f[1] == 'a', out);
		if (is(f, fn, "select") || is(f, fn, "reject"))
			return select_items(c, line, v, a, false, f[0] == 's', out);
		if (is(f, fn, "selectattr") || is(f, fn, "rejectattr"))
			return select_items(c, line, v, a, true, f[0] == 's', out);
		if (is(f, fn, "list"))
			return plain(c, line, f, fn, v, out);
		if (is(f, fn, "sum")) {
			struct jv *at = exl_jargs_kw(a, "attribute");
			struct jv start = exl_jargs_get(a, 1, "start", jv_int(0));
			double total = start.t == JV_FLOAT || start.t == JV_INT ? start.u.n : 0;
			bool fl = start.t == JV_FLOAT;

			for (size_t i = 0; i < v.u.a->n; i++) {
				struct jv x = v.u.a->v[i];

				if (at && at->t == JV_STR)
					x = attr_path(x, at->u.s, at->len);
				if (!jv_is_num(x) && x.t != JV_BOOL)
					return exl_jfail(c, line, "sum: %s is not a number",
							 exl_jv_type_name(x));
				total += x.t == JV_BOOL ? x.u.b : x.u.n;
				fl = fl || x.t == JV_FLOAT;
			}
			*out = fl ? jv_float(total) : jv_int(total);
			return 0;
		}
		if (is(f, fn, "first") || is(f, fn, "last") || is(f, fn, "reverse") ||
		    is(f, fn, "unique") || is(f, fn, "join"))
			return plain(c, line, f, fn, v, out);
	}
	if (is(f, fn, "items") && jv_is_dict(v))
		return exl_jinja_method(c, line, v, "items", &no_args, out);
	return 1;
}

int exl_jinja_filter(struct jctx *c, unsigned line, const char *f, size_t fn, bool with_parens,
		     struct jv v, const struct jargs *a, struct jv *out)
{
	int rc;

	if (exl_jstep(c, 1))
		return -1;
	if (c->jinja2 && is(f, fn, "string") && v.t != JV_STR) {
		/* past the reference, Python's str() */
		struct jbuf b = { 0 };

		if (exl_jv_py_str(c, line, &b, v))
			return -1;
		*out = exl_jv_from_buf(&b);
		return 0;
	}
	if (!with_parens) {
		if (is(f, fn, "safe")) {
			*out = v;
			return 0;
		}
		if (is(f, fn, "tojson")) {
			struct jjson_opts o = { .undefined_as_null = true };

			return tojson(c, line, v, &o, out);
		}
		rc = plain(c, line, f, fn, v, out);
	} else {
		rc = called(c, line, f, fn, v, a, out);
	}
	if (rc <= 0)
		return rc;
	rc = jinja2(c, line, f, fn, v, with_parens ? a : &no_args, out);
	if (rc <= 0) {
		jbeyond(c);
		return rc;
	}
	return exl_jfail(c, line, "no filter '%.*s' for %s", (int)fn, f, exl_jv_type_name(v));
}
