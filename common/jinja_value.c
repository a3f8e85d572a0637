/* Values: lists, ordered dicts, and what the reference's runtime does with
 * them (printing, JSON, JavaScript's equality, sorting order), plus the
 * context's JSON turned into values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jinja.h"
#include "common/json_parse.h"

struct jarr *exl_jarr_new(struct jctx *c, size_t cap)
{
	struct jarr *a = exl_jalloc(c, sizeof(*a));

	if (!a)
		return NULL;
	if (cap) {
		a->v = exl_jalloc_array(c, cap, sizeof(*a->v));
		if (!a->v)
			return NULL;
		a->cap = cap;
	}
	return a;
}

int exl_jarr_push(struct jctx *c, struct jarr *a, struct jv v)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 4;
		struct jv *nv = exl_jalloc_array(c, cap, sizeof(*nv));

		if (!nv)
			return -1;
		if (a->n)
			memcpy(nv, a->v, a->n * sizeof(*nv));
		a->v = nv;
		a->cap = cap;
	}
	a->v[a->n++] = v;
	return 0;
}

struct jobj *exl_jobj_new(struct jctx *c, size_t cap)
{
	struct jobj *o = exl_jalloc(c, sizeof(*o));

	if (!o)
		return NULL;
	if (cap) {
		o->keys = exl_jalloc_array(c, cap, sizeof(*o->keys));
		o->vals = exl_jalloc_array(c, cap, sizeof(*o->vals));
		if (!o->keys || !o->vals)
			return NULL;
		o->cap = cap;
	}
	return o;
}

static uint32_t key_hash(const char *k, size_t n, bool num)
{
	uint32_t h = num ? 2166136261u ^ 0x9e3779b9u : 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)k[i]) * 16777619u;
	return h;
}

#define INDEX_FROM 16

static void index_put(struct jobj *o, size_t i)
{
	size_t mask = o->idx_cap - 1;
	size_t h = key_hash(o->keys[i].p, o->keys[i].n, o->keys[i].num != JV_STR) & mask;

	while (o->idx[h])
		h = (h + 1) & mask;
	o->idx[h] = (uint32_t)(i + 1);
}

static int reindex(struct jctx *c, struct jobj *o)
{
	size_t cap = 16;

	while (cap < o->n * 2 + 2)
		cap *= 2;
	o->idx = exl_jalloc_array(c, cap, sizeof(*o->idx));
	if (!o->idx)
		return -1;
	o->idx_cap = cap;
	for (size_t i = 0; i < o->n; i++)
		index_put(o, i);
	return 0;
}

static bool key_is(const struct jkey *key, const char *k, size_t kn, bool num)
{
	return (key->num != JV_STR) == num && key->n == kn && !memcmp(key->p, k, kn);
}

static struct jv *get_key(const struct jobj *o, const char *k, size_t kn, bool num)
{
	if (o->idx) {
		size_t mask = o->idx_cap - 1;
		size_t h = key_hash(k, kn, num) & mask;

		while (o->idx[h]) {
			size_t i = o->idx[h] - 1;

			if (key_is(&o->keys[i], k, kn, num))
				return &o->vals[i];
			h = (h + 1) & mask;
		}
		return NULL;
	}
	for (size_t i = 0; i < o->n; i++)
		if (key_is(&o->keys[i], k, kn, num))
			return &o->vals[i];
	return NULL;
}

struct jv *exl_jobj_get(const struct jobj *o, const char *k, size_t kn)
{
	return get_key(o, k, kn, false);
}

static int set_key(struct jctx *c, struct jobj *o, const struct jkey *key, struct jv v)
{
	struct jv *slot = get_key(o, key->p, key->n, key->num != JV_STR);

	if (slot) {
		*slot = v;
		return 0;
	}
	if (o->n >= UINT32_MAX - 1)
		return exl_jfail(c, 0, "a dict of over %u keys", UINT32_MAX - 1);
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 4;
		struct jkey *nk = exl_jalloc_array(c, cap, sizeof(*nk));
		struct jv *nv = exl_jalloc_array(c, cap, sizeof(*nv));

		if (!nk || !nv)
			return -1;
		if (o->n) {
			memcpy(nk, o->keys, o->n * sizeof(*nk));
			memcpy(nv, o->vals, o->n * sizeof(*nv));
		}
		o->keys = nk;
		o->vals = nv;
		o->cap = cap;
	}
	o->keys[o->n] = *key;
	o->vals[o->n] = v;
	o->n++;
	if (o->n > INDEX_FROM) {
		if (!o->idx || o->n * 2 + 2 > o->idx_cap) {
			if (reindex(c, o))
				return -1;
		} else {
			index_put(o, o->n - 1);
		}
	}
	return 0;
}

int exl_jobj_set(struct jctx *c, struct jobj *o, const char *k, size_t kn, struct jv v)
{
	struct jkey key = { k, kn, JV_STR, 0 };

	return set_key(c, o, &key, v);
}

/* A number key's text: JavaScript's digits, so 1 and 1.0 and true meet. */
static bool number_key(struct jctx *c, struct jv v, struct jkey *key)
{
	char tmp[40];
	size_t n;

	if (v.t != JV_INT && v.t != JV_FLOAT && v.t != JV_BOOL)
		return false;
	key->d = v.t == JV_BOOL ? v.u.b : v.u.n;
	key->num = v.t == JV_FLOAT && key->d != floor(key->d) ? JV_FLOAT : JV_INT;
	n = exl_jnum_fmt(key->d, tmp);
	key->p = exl_jstrdup(c, tmp, n);
	key->n = n;
	return true;
}

struct jv *exl_jobj_get_v(const struct jobj *o, struct jv key)
{
	char tmp[40];
	size_t n;

	if (key.t == JV_STR)
		return exl_jobj_get(o, key.u.s, key.len);
	if (key.t != JV_INT && key.t != JV_FLOAT && key.t != JV_BOOL)
		return NULL;
	n = exl_jnum_fmt(key.t == JV_BOOL ? key.u.b : key.u.n, tmp);
	return get_key(o, tmp, n, true);
}

int exl_jobj_set_v(struct jctx *c, struct jobj *o, struct jv key, struct jv v)
{
	struct jkey k;

	if (key.t == JV_STR)
		return exl_jobj_set(c, o, key.u.s, key.len, v);
	if (!number_key(c, key, &k))
		return exl_jfail(c, 0, "dict keys must be strings or numbers: got %s",
				 exl_jv_type_name(key));
	if (!k.p)
		return -1;
	return set_key(c, o, &k, v);
}

struct jv exl_jkey_value(const struct jkey *k)
{
	if (k->num == JV_STR)
		return jv_str(k->p, k->n);
	return k->num == JV_FLOAT ? jv_float(k->d) : jv_int(k->d);
}

struct jv *exl_jargs_kw(const struct jargs *a, const char *name)
{
	return a->kw ? exl_jobj_get(a->kw, name, strlen(name)) : NULL;
}

struct jv exl_jargs_get(const struct jargs *a, size_t i, const char *kw, struct jv dflt)
{
	struct jv *k;

	if (i < a->n)
		return a->v[i];
	if (kw && (k = exl_jargs_kw(a, kw)))
		return *k;
	return dflt;
}

struct jv exl_jv_from_buf(const struct jbuf *b)
{
	return jv_str(b->p ? b->p : "", b->n);
}

const char *exl_jv_type_name(struct jv v)
{
	switch (v.t) {
	case JV_UNDEF:
		return "UndefinedValue";
	case JV_NULL:
		return "NullValue";
	case JV_BOOL:
		return "BooleanValue";
	case JV_INT:
		return "IntegerValue";
	case JV_FLOAT:
		return "FloatValue";
	case JV_STR:
		return "StringValue";
	case JV_ARRAY:
		return "ArrayValue";
	case JV_TUPLE:
		return "TupleValue";
	case JV_OBJECT:
		return "ObjectValue";
	case JV_KWARGS:
		return "KeywordArgumentsValue";
	case JV_NS:
		return "NamespaceValue";
	case JV_FUNC:
		return "FunctionValue";
	}
	return "?";
}

bool exl_jv_truthy(struct jv v)
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
	case JV_ARRAY:
	case JV_TUPLE:
		return v.u.a->n > 0;
	case JV_OBJECT:
	case JV_KWARGS:
		return v.u.o->n > 0;
	case JV_NS:
	case JV_FUNC:
		return true;
	}
	return false;
}

/* ---- numbers ---- */

/* The fewest significant digits that read back as d (> 0): digits[0..k),
 * d = 0.digits * 10^n. */
static void shortest(double d, char *digits, int *k, int *n)
{
	char tmp[40];
	char *e;
	int p;

	for (p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof(tmp), "%.*e", p - 1, d);
		if (strtod(tmp, NULL) == d)
			break;
	}
	e = strchr(tmp, 'e');
	*k = 0;
	for (char *q = tmp; q < e; q++)
		if (*q >= '0' && *q <= '9')
			digits[(*k)++] = *q;
	while (*k > 1 && digits[*k - 1] == '0')
		(*k)--;
	digits[*k] = 0;
	*n = (int)strtol(e + 1, NULL, 10) + 1;
}

size_t exl_jnum_fmt(double d, char *out)
{
	char digits[32];
	int k, n;
	size_t o = 0;

	if (isnan(d))
		return (size_t)sprintf(out, "NaN");
	if (isinf(d))
		return (size_t)sprintf(out, d < 0 ? "-Infinity" : "Infinity");
	if (d == 0)
		return (size_t)sprintf(out, "0");
	if (d < 0) {
		out[o++] = '-';
		d = -d;
	}
	/* an exact integer: its digits are the shortest ones */
	if (d < 9007199254740992.0 && d == floor(d)) {
		o += (size_t)sprintf(out + o, "%llu", (unsigned long long)d);
		return o;
	}
	shortest(d, digits, &k, &n);
	if (k <= n && n <= 21) {
		memcpy(out + o, digits, (size_t)k);
		o += (size_t)k;
		for (int i = 0; i < n - k; i++)
			out[o++] = '0';
	} else if (0 < n && n <= 21) {
		memcpy(out + o, digits, (size_t)n);
		o += (size_t)n;
		out[o++] = '.';
		memcpy(out + o, digits + n, (size_t)(k - n));
		o += (size_t)(k - n);
	} else if (-6 < n && n <= 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int i = 0; i < -n; i++)
			out[o++] = '0';
		memcpy(out + o, digits, (size_t)k);
		o += (size_t)k;
	} else {
		out[o++] = digits[0];
		if (k > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, (size_t)(k - 1));
			o += (size_t)(k - 1);
		}
		o += (size_t)sprintf(out + o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
	}
	out[o] = 0;
	return o;
}

/* An integer past 2^53 as its shortest digits padded with zeros: what the
 * JSON that carried it (from JavaScript or Python) most likely said. */
static size_t big_int_fmt(double d, char *out)
{
	char digits[32];
	int k, n;
	size_t o = 0;

	if (d < 0) {
		out[o++] = '-';
		d = -d;
	}
	shortest(d, digits, &k, &n);
	memcpy(out + o, digits, (size_t)k);
	o += (size_t)k;
	for (int i = k; i < n && o < 380; i++)
		out[o++] = '0';
	out[o] = 0;
	return o;
}

/* Python's repr of a float: 1.0, 0.0001, 1e-05, 1e+16. */
static size_t py_float_fmt(double d, char *out)
{
	char digits[32];
	int k, n, e;
	size_t o = 0;

	if (isnan(d))
		return (size_t)sprintf(out, "nan");
	if (isinf(d))
		return (size_t)sprintf(out, d < 0 ? "-inf" : "inf");
	if (d == 0)
		return (size_t)sprintf(out, signbit(d) ? "-0.0" : "0.0");
	if (d < 0) {
		out[o++] = '-';
		d = -d;
	}
	shortest(d, digits, &k, &n);
	e = n - 1;
	if (e < -4 || e >= 16) {
		out[o++] = digits[0];
		if (k > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, (size_t)(k - 1));
			o += (size_t)(k - 1);
		}
		o += (size_t)sprintf(out + o, "e%c%02d", e >= 0 ? '+' : '-', abs(e));
	} else if (n <= 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int i = 0; i < -n; i++)
			out[o++] = '0';
		memcpy(out + o, digits, (size_t)k);
		o += (size_t)k;
	} else if (n >= k) {
		memcpy(out + o, digits, (size_t)k);
		o += (size_t)k;
		for (int i = 0; i < n - k; i++)
			out[o++] = '0';
		out[o++] = '.';
		out[o++] = '0';
	} else {
		memcpy(out + o, digits, (size_t)n);
		o += (size_t)n;
		out[o++] = '.';
		memcpy(out + o, digits + n, (size_t)(k - n));
		o += (size_t)(k - n);
	}
	out[o] = 0;
	return o;
}

/* FloatValue's toString: whole numbers keep ".0". */
static int put_float(struct jctx *c, struct jbuf *b, double d)
{
	char tmp[400];
	size_t n;

	if (d == 0 && signbit(d))
		return exl_jbuf_puts(c, b, "-0.0");
	if (isfinite(d) && d == floor(d) && fabs(d) < 1e21) {
		/* toFixed(1): the exact value, not the shortest digits */
		n = (size_t)snprintf(tmp, sizeof(tmp), "%.1f", d);
		return exl_jbuf_put(c, b, tmp, n);
	}
	n = exl_jnum_fmt(d, tmp);
	return exl_jbuf_put(c, b, tmp, n);
}

static int put_num(struct jctx *c, struct jbuf *b, double d)
{
	char tmp[40];
	size_t n = exl_jnum_fmt(d, tmp);

	return exl_jbuf_put(c, b, tmp, n);
}

/* ---- printing ---- */

static int print_depth(struct jctx *c, unsigned line, struct jbuf *b, struct jv v, int depth);

static int tojson_at(struct jctx *c, unsigned line, struct jbuf *b, struct jv v,
		     const struct jjson_opts *o, int depth);

static bool has_tuple(struct jv v, int depth)
{
	if (depth > JINJA_MAX_VALUE_DEPTH)
		return false;
	/* a tuple, or the list `|list` made of one (still a tuple to the reference) */
	if (v.t == JV_TUPLE || (v.t == JV_ARRAY && v.len))
		return true;
	if (v.t == JV_ARRAY) {
		for (size_t i = 0; i < v.u.a->n; i++)
			if (has_tuple(v.u.a->v[i], depth + 1))
				return true;
	} else if (jv_is_attrs(v)) {
		for (size_t i = 0; i < v.u.o->n; i++)
			if (has_tuple(v.u.o->vals[i], depth + 1))
				return true;
	}
	return false;
}

int exl_jv_print(struct jctx *c, unsigned line, struct jbuf *b, struct jv v)
{
	/* the reference cannot print a tuple (nor JSON of one): Jinja2's repr */
	if ((jv_is_arr(v) || jv_is_attrs(v)) && has_tuple(v, 0))
		jbeyond(c);
	/* past the reference, Python's str(): True, None, ['a'] */
	if (c->jinja2 && v.t != JV_STR)
		return exl_jv_py_str(c, line, b, v);
	return print_depth(c, line, b, v, 0);
}

static int print_depth(struct jctx *c, unsigned line, struct jbuf *b, struct jv v, int depth)
{
	struct jjson_opts o = { 0 };

	switch (v.t) {
	case JV_UNDEF:
		return exl_jbuf_puts(c, b, "undefined");
	case JV_NULL:
		return exl_jbuf_puts(c, b, "null");
	case JV_BOOL:
		return exl_jbuf_puts(c, b, v.u.b ? "true" : "false");
	case JV_INT:
		return put_num(c, b, v.u.n);
	case JV_FLOAT:
		return put_float(c, b, v.u.n);
	case JV_STR:
		return exl_jbuf_put(c, b, v.u.s, v.len);
	case JV_ARRAY:
	case JV_TUPLE:
	case JV_OBJECT:
	case JV_KWARGS:
	case JV_NS:
		return tojson_at(c, line, b, v, &o, depth);
	case JV_FUNC:
		break;
	}
	return exl_jfail(c, line, "cannot print a function");
}

int exl_jv_js_str(struct jctx *c, unsigned line, struct jbuf *b, struct jv v)
{
	if (c->jinja2)
		return exl_jv_py_str(c, line, b, v);
	switch (v.t) {
	case JV_FLOAT:
		return put_num(c, b, v.u.n);
	case JV_ARRAY:
	case JV_TUPLE:
		/* Array#join(","): each item's toString() */
		for (size_t i = 0; i < v.u.a->n; i++) {
			if (i && exl_jbuf_putc(c, b, ','))
				return -1;
			if (print_depth(c, line, b, v.u.a->v[i], 1))
				return -1;
		}
		return 0;
	case JV_OBJECT:
	case JV_KWARGS:
	case JV_NS:
		return exl_jbuf_puts(c, b, "[object Map]");
	default:
		return exl_jv_print(c, line, b, v);
	}
}

/* ---- Python's str ---- */

static bool py_printable(uint32_t cp)
{
	if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD)
		return false;
	return !(cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
		 (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
		 (cp >= 0xD800 && cp <= 0xDFFF));
}

static int py_repr_str(struct jctx *c, struct jbuf *b, const char *s, size_t n)
{
	char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
	char tmp[16];

	if (exl_jbuf_putc(c, b, q))
		return -1;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = exl_jt_decode(s + i, n - i, &cp);
		int rc;

		if (cp == '\\' || cp == (uint32_t)q) {
			tmp[0] = '\\';
			tmp[1] = (char)cp;
			rc = exl_jbuf_put(c, b, tmp, 2);
		} else if (cp == '\n') {
			rc = exl_jbuf_puts(c, b, "\\n");
		} else if (cp == '\r') {
			rc = exl_jbuf_puts(c, b, "\\r");
		} else if (cp == '\t') {
			rc = exl_jbuf_puts(c, b, "\\t");
		} else if (py_printable(cp)) {
			rc = exl_jbuf_put(c, b, s + i, k);
		} else {
			int m = cp < 0x100 ? snprintf(tmp, sizeof(tmp), "\\x%02x", cp) :
				cp < 0x10000 ? snprintf(tmp, sizeof(tmp), "\\u%04x", cp) :
				snprintf(tmp, sizeof(tmp), "\\U%08x", cp);

			rc = exl_jbuf_put(c, b, tmp, (size_t)m);
		}
		if (rc)
			return -1;
		i += k;
	}
	return exl_jbuf_putc(c, b, q);
}

static int py_repr(struct jctx *c, unsigned line, struct jbuf *b, struct jv v, int depth)
{
	char tmp[400];

	if (depth > JINJA_MAX_VALUE_DEPTH)
		return exl_jfail(c, line, "a value nested over %d deep", JINJA_MAX_VALUE_DEPTH);
	switch (v.t) {
	case JV_UNDEF:
		return exl_jbuf_puts(c, b, depth ? "Undefined" : "");
	case JV_NULL:
		return exl_jbuf_puts(c, b, "None");
	case JV_BOOL:
		return exl_jbuf_puts(c, b, v.u.b ? "True" : "False");
	case JV_INT:
		if (!isfinite(v.u.n))
			return exl_jbuf_put(c, b, tmp, py_float_fmt(v.u.n, tmp));
		if (fabs(v.u.n) < 9007199254740992.0)
			return exl_jbuf_put(c, b, tmp,
					    (size_t)snprintf(tmp, sizeof(tmp), "%.0f", v.u.n));
		return exl_jbuf_put(c, b, tmp, big_int_fmt(v.u.n, tmp));
	case JV_FLOAT:
		return exl_jbuf_put(c, b, tmp, py_float_fmt(v.u.n, tmp));
	case JV_STR:
		if (!depth)
			return exl_jbuf_put(c, b, v.u.s, v.len);
		return py_repr_str(c, b, v.u.s, v.len);
	case JV_ARRAY:
	case JV_TUPLE:
		if (exl_jbuf_putc(c, b, v.t == JV_ARRAY ? '[' : '('))
			return -1;
		for (size_t i = 0; i < v.u.a->n; i++)
			if ((i && exl_jbuf_puts(c, b, ", ")) ||
			    py_repr(c, line, b, v.u.a->v[i], depth + 1))
				return -1;
		if (v.t == JV_TUPLE && v.u.a->n == 1 && exl_jbuf_putc(c, b, ','))
			return -1;
		return exl_jbuf_putc(c, b, v.t == JV_ARRAY ? ']' : ')');
	case JV_OBJECT:
	case JV_KWARGS:
	case JV_NS:
		if (v.t == JV_NS && exl_jbuf_puts(c, b, "<Namespace "))
			return -1;
		if (exl_jbuf_putc(c, b, '{'))
			return -1;
		for (size_t i = 0; i < v.u.o->n; i++)
			if ((i && exl_jbuf_puts(c, b, ", ")) ||
			    py_repr(c, line, b, exl_jkey_value(&v.u.o->keys[i]), depth + 1) ||
			    exl_jbuf_puts(c, b, ": ") || py_repr(c, line, b, v.u.o->vals[i],
								 depth + 1))
				return -1;
		if (exl_jbuf_putc(c, b, '}'))
			return -1;
		return v.t == JV_NS ? exl_jbuf_putc(c, b, '>') : 0;
	case JV_FUNC:
		break;
	}
	return exl_jfail(c, line, "cannot print a function");
}

int exl_jv_py_str(struct jctx *c, unsigned line, struct jbuf *b, struct jv v)
{
	return py_repr(c, line, b, v, 0);
}

/* ---- JSON ---- */

static int put_hex4(struct jctx *c, struct jbuf *b, uint32_t u)
{
	static const char hex[] = "0123456789abcdef";
	char tmp[6] = { '\\', 'u', hex[u >> 12 & 15], hex[u >> 8 & 15], hex[u >> 4 & 15],
			hex[u & 15] };

	return exl_jbuf_put(c, b, tmp, 6);
}

/* JSON.stringify of a string, with ensure_ascii's \u escapes of U+007F up. */
static int json_string(struct jctx *c, struct jbuf *b, const char *s, size_t n, bool ascii)
{
	size_t i = 0, run = 0;

	if (exl_jstep(c, n / 16) || exl_jbuf_putc(c, b, '"'))
		return -1;
	while (i < n) {
		uint32_t cp;
		size_t k = exl_jt_decode(s + i, n - i, &cp);
		const char *esc = NULL;

		switch (cp) {
		case '"':
			esc = "\\\"";
			break;
		case '\\':
			esc = "\\\\";
			break;
		case '\b':
			esc = "\\b";
			break;
		case '\f':
			esc = "\\f";
			break;
		case '\n':
			esc = "\\n";
			break;
		case '\r':
			esc = "\\r";
			break;
		case '\t':
			esc = "\\t";
			break;
		}
		if (!esc && cp >= 0x20 && !(cp >= 0xD800 && cp <= 0xDFFF) && (!ascii || cp < 0x7F)) {
			i += k;
			run += k;
			continue;
		}
		if (exl_jbuf_put(c, b, s + i - run, run))
			return -1;
		run = 0;
		if (esc) {
			if (exl_jbuf_puts(c, b, esc))
				return -1;
		} else if (cp >= 0x10000) {
			if (put_hex4(c, b, 0xD800 + ((cp - 0x10000) >> 10)) ||
			    put_hex4(c, b, 0xDC00 + ((cp - 0x10000) & 0x3FF)))
				return -1;
		} else if (put_hex4(c, b, cp)) {
			return -1;
		}
		i += k;
	}
	if (exl_jbuf_put(c, b, s + i - run, run))
		return -1;
	return exl_jbuf_putc(c, b, '"');
}

static int json_pad(struct jctx *c, struct jbuf *b, int indent, int depth)
{
	if (exl_jbuf_putc(c, b, '\n'))
		return -1;
	for (long i = 0; i < (long)indent * depth; i++)
		if (exl_jbuf_putc(c, b, ' '))
			return -1;
	return 0;
}

/* Stable merge sort of key indexes by localeCompare. */
static void sort_keys(const struct jobj *o, size_t *ix, size_t *tmp, size_t n)
{
	size_t h = n / 2, i = 0, j = h, k = 0;

	if (n < 2)
		return;
	sort_keys(o, ix, tmp, h);
	sort_keys(o, ix + h, tmp, n - h);
	while (i < h && j < n) {
		const struct jkey *a = &o->keys[ix[i]], *b = &o->keys[ix[j]];

		if (exl_jt_locale_cmp(b->p, b->n, a->p, a->n) < 0)
			tmp[k++] = ix[j++];
		else
			tmp[k++] = ix[i++];
	}
	while (i < h)
		tmp[k++] = ix[i++];
	while (j < n)
		tmp[k++] = ix[j++];
	memcpy(ix, tmp, n * sizeof(*ix));
}

static int tojson_at(struct jctx *c, unsigned line, struct jbuf *b, struct jv v,
		     const struct jjson_opts *o, int depth)
{
	const char *isep = o->item_sep, *ksep = o->key_sep;
	size_t isep_n = o->item_sep_len, ksep_n = o->key_sep_len;

	if (depth > JINJA_MAX_VALUE_DEPTH)
		return exl_jfail(c, line, "a value nested over %d deep", JINJA_MAX_VALUE_DEPTH);
	if (!isep) {
		isep = o->indent ? "," : ", ";
		isep_n = strlen(isep);
		ksep = ": ";
		ksep_n = 2;
	}
	switch (v.t) {
	case JV_UNDEF:
		return exl_jbuf_puts(c, b, o->undefined_as_null ? "null" : "undefined");
	case JV_NULL:
		return exl_jbuf_puts(c, b, "null");
	case JV_BOOL:
		return exl_jbuf_puts(c, b, v.u.b ? "true" : "false");
	case JV_INT:
	case JV_FLOAT:
		if (!isfinite(v.u.n))
			return exl_jbuf_puts(c, b, "null");
		return put_num(c, b, v.u.n);
	case JV_STR:
		return json_string(c, b, v.u.s, v.len, o->ensure_ascii);
	case JV_ARRAY:
	case JV_TUPLE: {
		const struct jarr *a = v.u.a;

		/* a tuple: Jinja2's JSON array (the reference raises) */
		if (v.t == JV_TUPLE)
			jbeyond(c);
		if (exl_jstep(c, 1) || exl_jbuf_putc(c, b, '['))
			return -1;
		for (size_t i = 0; i < a->n; i++) {
			if (i && exl_jbuf_put(c, b, isep, isep_n))
				return -1;
			if (o->indent && json_pad(c, b, o->indent, depth + 1))
				return -1;
			if (tojson_at(c, line, b, a->v[i], o, depth + 1))
				return -1;
		}
		if (o->indent && a->n && json_pad(c, b, o->indent, depth))
			return -1;
		return exl_jbuf_putc(c, b, ']');
	}
	case JV_OBJECT:
	case JV_KWARGS:
	case JV_NS: {
		const struct jobj *ob = v.u.o;
		size_t *ix = NULL;

		if (exl_jstep(c, 1) || exl_jbuf_putc(c, b, '{'))
			return -1;
		if (o->sort_keys && ob->n > 1) {
			size_t *tmp;

			ix = exl_jalloc_array(c, ob->n, sizeof(*ix));
			tmp = exl_jalloc_array(c, ob->n, sizeof(*tmp));
			if (!ix || !tmp)
				return -1;
			for (size_t i = 0; i < ob->n; i++)
				ix[i] = i;
			sort_keys(ob, ix, tmp, ob->n);
		}
		for (size_t i = 0; i < ob->n; i++) {
			size_t at = ix ? ix[i] : i;

			if (i && exl_jbuf_put(c, b, isep, isep_n))
				return -1;
			if (o->indent && json_pad(c, b, o->indent, depth + 1))
				return -1;
			if (json_string(c, b, ob->keys[at].p, ob->keys[at].n, o->ensure_ascii) ||
			    exl_jbuf_put(c, b, ksep, ksep_n) ||
			    tojson_at(c, line, b, ob->vals[at], o, depth + 1))
				return -1;
		}
		if (o->indent && ob->n && json_pad(c, b, o->indent, depth))
			return -1;
		return exl_jbuf_putc(c, b, '}');
	}
	case JV_FUNC:
		break;
	}
	return exl_jfail(c, line, "cannot convert a function to JSON");
}

int exl_jv_tojson(struct jctx *c, unsigned line, struct jbuf *b, struct jv v,
		  const struct jjson_opts *o)
{
	return tojson_at(c, line, b, v, o, 0);
}

/* ---- equality and order ---- */

enum js_kind { K_UNDEF, K_NULL, K_BOOL, K_NUM, K_STR, K_OBJ };

static enum js_kind js_kind(struct jv v)
{
	switch (v.t) {
	case JV_UNDEF:
		return K_UNDEF;
	case JV_NULL:
		return K_NULL;
	case JV_BOOL:
		return K_BOOL;
	case JV_INT:
	case JV_FLOAT:
		return K_NUM;
	case JV_STR:
		return K_STR;
	default:
		return K_OBJ;
	}
}

static bool numeric_like_v(struct jv v)
{
	return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

static const void *identity(struct jv v)
{
	switch (v.t) {
	case JV_ARRAY:
	case JV_TUPLE:
		return v.u.a;
	case JV_OBJECT:
	case JV_KWARGS:
	case JV_NS:
		return v.u.o;
	case JV_FUNC:
		return v.u.f;
	default:
		return NULL;
	}
}

static bool same_kind_eq(struct jv a, struct jv b)
{
	switch (js_kind(a)) {
	case K_UNDEF:
	case K_NULL:
		return true;
	case K_BOOL:
		return a.u.b == b.u.b;
	case K_NUM:
		return a.u.n == b.u.n;
	case K_STR:
		return a.len == b.len && !memcmp(a.u.s, b.u.s, a.len);
	case K_OBJ:
		return identity(a) == identity(b);
	}
	return false;
}

bool exl_jv_py_eq(struct jv a, struct jv b, int depth)
{
	if (depth > JINJA_MAX_VALUE_DEPTH)
		return false;
	if (numeric_like_v(a) && numeric_like_v(b))
		return (a.t == JV_BOOL ? a.u.b : a.u.n) == (b.t == JV_BOOL ? b.u.b : b.u.n);
	if (a.t != b.t && !(jv_is_dict(a) && jv_is_dict(b)))
		return false;
	switch (a.t) {
	case JV_UNDEF:
	case JV_NULL:
		return true;
	case JV_STR:
		return a.len == b.len && !memcmp(a.u.s, b.u.s, a.len);
	case JV_ARRAY:
	case JV_TUPLE:
		if (a.u.a->n != b.u.a->n)
			return false;
		for (size_t i = 0; i < a.u.a->n; i++)
			if (!exl_jv_py_eq(a.u.a->v[i], b.u.a->v[i], depth + 1))
				return false;
		return true;
	case JV_OBJECT:
	case JV_KWARGS:
		if (a.u.o->n != b.u.o->n)
			return false;
		for (size_t i = 0; i < a.u.o->n; i++) {
			struct jv *o = exl_jobj_get_v(b.u.o, exl_jkey_value(&a.u.o->keys[i]));

			if (!o || !exl_jv_py_eq(a.u.o->vals[i], *o, depth + 1))
				return false;
		}
		return true;
	default:
		return identity(a) == identity(b);
	}
}

bool exl_jv_strict_eq(struct jv a, struct jv b)
{
	return js_kind(a) == js_kind(b) && same_kind_eq(a, b);
}

bool exl_jv_same_value_zero(struct jv a, struct jv b)
{
	if (js_kind(a) == K_NUM && js_kind(b) == K_NUM && isnan(a.u.n) && isnan(b.u.n))
		return true;
	return exl_jv_strict_eq(a, b);
}

int exl_jv_loose_eq(struct jctx *c, unsigned line, struct jv a, struct jv b, bool *eq)
{
	enum js_kind ka = js_kind(a), kb = js_kind(b);

	if (c->jinja2) {
		*eq = exl_jv_py_eq(a, b, 0);
		return 0;
	}
	for (int round = 0; round < 4; round++) {
		if (ka == kb) {
			*eq = same_kind_eq(a, b);
			return 0;
		}
		if ((ka == K_UNDEF || ka == K_NULL) && (kb == K_UNDEF || kb == K_NULL)) {
			*eq = true;
			return 0;
		}
		if (ka == K_UNDEF || ka == K_NULL || kb == K_UNDEF || kb == K_NULL) {
			*eq = false;
			return 0;
		}
		if (ka == K_NUM && kb == K_STR) {
			*eq = a.u.n == exl_jt_to_number(b.u.s, b.len);
			return 0;
		}
		if (ka == K_STR && kb == K_NUM) {
			*eq = b.u.n == exl_jt_to_number(a.u.s, a.len);
			return 0;
		}
		if (ka == K_BOOL) {
			a = jv_int(a.u.b);
			ka = K_NUM;
			continue;
		}
		if (kb == K_BOOL) {
			b = jv_int(b.u.b);
			kb = K_NUM;
			continue;
		}
		/* an object against a number or string: its primitive, a string */
		if (ka == K_OBJ || kb == K_OBJ) {
			struct jbuf s = { 0 };
			struct jv *side = ka == K_OBJ ? &a : &b;

			if (side->t == JV_FUNC) {
				*eq = false;
				return 0;
			}
			if (exl_jv_js_str(c, line, &s, *side))
				return -1;
			*side = exl_jv_from_buf(&s);
			if (ka == K_OBJ)
				ka = K_STR;
			else
				kb = K_STR;
			continue;
		}
		break;
	}
	*eq = false;
	return 0;
}

static bool numeric_like(struct jv v)
{
	return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

static double numeric_value(struct jv v)
{
	return v.t == JV_BOOL ? (double)v.u.b : v.u.n;
}

int exl_jv_compare(struct jctx *c, unsigned line, struct jv a, struct jv b, bool case_sensitive,
		   int *r)
{
	if (a.t == JV_NULL && b.t == JV_NULL) {
		*r = 0;
		return 0;
	}
	if (a.t == JV_NULL || b.t == JV_NULL)
		return exl_jfail(c, line, "cannot compare %s with %s", exl_jv_type_name(a),
				 exl_jv_type_name(b));
	if (a.t == JV_UNDEF && b.t == JV_UNDEF) {
		*r = 0;
		return 0;
	}
	if (a.t == JV_UNDEF || b.t == JV_UNDEF)
		return exl_jfail(c, line, "cannot compare %s with %s", exl_jv_type_name(a),
				 exl_jv_type_name(b));
	if (numeric_like(a) && numeric_like(b)) {
		double x = numeric_value(a), y = numeric_value(b);

		*r = x < y ? -1 : x > y ? 1 : 0;
		return 0;
	}
	if (a.t != b.t)
		return exl_jfail(c, line, "cannot compare different types: %s and %s",
				 exl_jv_type_name(a),
				 exl_jv_type_name(b));
	if (a.t == JV_STR) {
		if (!case_sensitive) {
			struct jbuf la = { 0 }, lb = { 0 };

			if (exl_jt_lower(c, &la, a.u.s, a.len) ||
			    exl_jt_lower(c, &lb, b.u.s, b.len))
				return -1;
			a = exl_jv_from_buf(&la);
			b = exl_jv_from_buf(&lb);
		}
		*r = exl_jt_cmp(a.u.s, a.len, b.u.s, b.len);
		return 0;
	}
	return exl_jfail(c, line, "cannot compare type: %s", exl_jv_type_name(a));
}

/* ---- the context ---- */

/* An array index key ("0" to "4294967294", no leading zero), which
 * JavaScript objects keep first, in numeric order. */
static bool index_key(const char *k, size_t n, uint32_t *v)
{
	uint64_t x = 0;

	if (!n || n > 10 || (n > 1 && k[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (k[i] < '0' || k[i] > '9')
			return false;
		x = x * 10 + (uint64_t)(k[i] - '0');
	}
	if (x >= 4294967295u)
		return false;
	*v = (uint32_t)x;
	return true;
}

struct ikey {
	uint32_t num;
	size_t at;
};

static int ikey_cmp(const void *pa, const void *pb)
{
	const struct ikey *a = pa, *b = pb;

	if (a->num != b->num)
		return a->num < b->num ? -1 : 1;
	return a->at < b->at ? -1 : a->at > b->at;
}

int exl_jv_from_json(struct jctx *c, const struct exl_json *j, struct jv *out, int depth)
{
	if (depth > EXL_JSON_MAX_DEPTH + 1)
		return exl_jfail(c, 0, "context nested too deep");
	switch (j->type) {
	case EXL_JSON_NULL:
		*out = jv_null();
		return 0;
	case EXL_JSON_BOOL:
		*out = jv_bool(j->b);
		return 0;
	case EXL_JSON_NUMBER:
		/* Number.isInteger: a JSON 1.0 is an integer as well */
		if (isfinite(j->num) && j->num == floor(j->num))
			*out = jv_int(j->num);
		else
			*out = jv_float(j->num);
		return 0;
	case EXL_JSON_STRING:
		*out = jv_str(j->str, j->len);
		return 0;
	case EXL_JSON_ARRAY: {
		struct jarr *a = exl_jarr_new(c, j->n);

		if (!a)
			return -1;
		for (size_t i = 0; i < j->n; i++)
			if (exl_jv_from_json(c, j->v[i], &a->v[i], depth + 1))
				return -1;
		a->n = j->n;
		*out = jv_arr(JV_ARRAY, a);
		return 0;
	}
	case EXL_JSON_OBJECT: {
		struct jobj *o = exl_jobj_new(c, j->n);
		struct ikey *ik;
		size_t nidx = 0;

		if (!o)
			return -1;
		ik = exl_jalloc_array(c, j->n + 1, sizeof(*ik));
		if (!ik)
			return -1;
		for (size_t i = 0; i < j->n; i++)
			if (index_key(j->keys[i], j->key_lens[i], &ik[nidx].num))
				ik[nidx++].at = i;
		qsort(ik, nidx, sizeof(*ik), ikey_cmp);
		for (size_t pass = 0; pass < 2; pass++) {
			size_t count = pass ? j->n : nidx;

			for (size_t q = 0; q < count; q++) {
				size_t i = pass ? q : ik[q].at;
				uint32_t v;
				struct jv val;

				if (pass && index_key(j->keys[i], j->key_lens[i], &v))
					continue;
				if (exl_jv_from_json(c, j->v[i], &val, depth + 1) ||
				    exl_jobj_set(c, o, j->keys[i], j->key_lens[i], val))
					return -1;
			}
		}
		*out = jv_obj(JV_OBJECT, o);
		return 0;
	}
	}
	return exl_jfail(c, 0, "bad JSON value");
}

static int sort_cmp(struct exl_jv_sort *s, struct jv a, struct jv b)
{
	int r = 0;

	if (s->err)
		return 0;
	if (s->key) {
		a = s->key(s->arg, a);
		b = s->key(s->arg, b);
	}
	if (exl_jv_compare(s->c, s->line, a, b, s->case_sensitive, &r)) {
		s->err = -1;
		return 0;
	}
	return s->reverse ? -r : r;
}

void exl_jv_sort(struct exl_jv_sort *s, struct jv *v, struct jv *tmp, size_t n)
{
	size_t h = n / 2, i = 0, j = h, k = 0;

	if (n < 2)
		return;
	exl_jv_sort(s, v, tmp, h);
	exl_jv_sort(s, v + h, tmp, n - h);
	/* the right run's item goes first only when strictly smaller: stable */
	while (i < h && j < n)
		tmp[k++] = sort_cmp(s, v[j], v[i]) < 0 ? v[j++] : v[i++];
	while (i < h)
		tmp[k++] = v[i++];
	while (j < n)
		tmp[k++] = v[j++];
	memcpy(v, tmp, n * sizeof(*v));
}
