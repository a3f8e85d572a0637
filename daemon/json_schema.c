/* JSON schema -> GBNF: one rule per schema, written after the rules of
 * its parts (each rule's body is built in its own buffer while the parts'
 * rules go out first).  A $ref target gets its rule name before its body
 * is built, so recursive schemas become recursive rules.
 *
 * Objects keep the properties in schema order; an optional property may
 * be left out.  With properties p0..pn-1, "G_i" is the body from p_i on
 * when nothing was written yet and "T_i" when something was (so it starts
 * with a comma):
 *   T_i = ws "," ws m_i T_i+1        (p_i required)
 *       | ( ws "," ws m_i )? T_i+1   (optional)
 *   G_i = m_i T_i+1 | G_i+1          (the second only when optional)
 * and T_n / G_n are the additional properties, if allowed.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/grammar.h"
#include "daemon/json_parse.h"
#include "daemon/json_schema.h"
#include "daemon/json_schema_internal.h"
#include "daemon/regex_grammar.h"

#define MAX_NESTING 200
#define MAX_REF_CHAIN 64
#define NAME_LEN 48

enum {
	T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64,
	T_ALL = 127,
};

struct ref_ent {
	const struct exl_json *target;
	char name[NAME_LEN];
};

struct conv {
	struct exl_json_doc *doc;
	const struct exl_json *root;
	struct exl_gbnf_out o;
	struct ref_ent *refs;
	size_t n_refs, cap_refs;
	char path[1024];
	size_t plen;
	int depth;
	char *err;
	size_t errlen;
};

static const char *const annotations[] = {
	"title", "description", "default", "examples", "$schema", "$id", "$comment",
	"deprecated", "readOnly", "writeOnly", "$anchor", "contentEncoding",
	"contentMediaType", "contentSchema", "$defs", "definitions", NULL,
};

static const char *const supported[] = {
	"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable",
	"properties", "required", "additionalProperties", "items", "prefixItems",
	"additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
	"pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL,
};

static bool in_list(const char *const *l, const char *k)
{
	for (; *l; l++)
		if (!strcmp(*l, k))
			return true;
	return false;
}

static bool is_annotation(const char *k)
{
	return in_list(annotations, k) || !strncmp(k, "x-", 2);
}

/* ---- paths and errors ---- */

static size_t path_push(struct conv *c, const char *seg, size_t n)
{
	size_t old = c->plen;

	if (c->plen + 2 >= sizeof(c->path))
		return old;
	c->path[c->plen++] = '/';
	for (size_t i = 0; i < n && c->plen + 4 < sizeof(c->path); i++) {
		if (seg[i] == '~' || seg[i] == '/') {
			c->path[c->plen++] = '~';
			c->path[c->plen++] = seg[i] == '~' ? '0' : '1';
		} else {
			c->path[c->plen++] = seg[i];
		}
	}
	c->path[c->plen] = 0;
	return old;
}

static size_t path_push_str(struct conv *c, const char *seg)
{
	return path_push(c, seg, strlen(seg));
}

static size_t path_push_index(struct conv *c, size_t i)
{
	char b[24];

	snprintf(b, sizeof(b), "%zu", i);
	return path_push_str(c, b);
}

static void path_pop(struct conv *c, size_t old)
{
	c->plen = old;
	c->path[old] = 0;
}

__attribute__((format(printf, 2, 3)))
static int cfail(struct conv *c, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(c->err, c->errlen, "at #%s: %s", c->path, msg);
	return -1;
}

/* A keyword's own path in the message. */
__attribute__((format(printf, 3, 4)))
static int kfail(struct conv *c, const char *kw, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	size_t old = path_push_str(c, kw);

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cfail(c, "%s", msg);
	path_pop(c, old);
	return -1;
}

static int oom(struct conv *c)
{
	snprintf(c->err, c->errlen, "out of memory converting the schema");
	return -1;
}

/* ---- small helpers ---- */

static void put_out(void *u, const char *s, size_t n)
{
	gbnf_put(u, s, n);
}

/* v's compact JSON text as a literal. */
static int literal(struct conv *c, struct exl_gbnf_out *b, const struct exl_json *v)
{
	struct exl_gbnf_out t;

	gbnf_init(&t);
	exl_json_write(v, put_out, &t);
	if (t.oom) {
		gbnf_free(&t);
		return oom(c);
	}
	gbnf_literal(b, t.s, t.len);
	gbnf_free(&t);
	return 0;
}

/* A string's JSON form as a literal: "\"key\"". */
static int key_literal(struct conv *c, struct exl_gbnf_out *b, const char *k, size_t n)
{
	struct exl_json s = { .type = EXL_JSON_STRING, .str = k, .len = n };

	return literal(c, b, &s);
}

static int get_count(struct conv *c, const struct exl_json *s, const char *kw, long *out)
{
	const struct exl_json *v = exl_json_get(s, kw);

	if (!v)
		return 0;
	if (v->type != EXL_JSON_NUMBER || v->num < 0 || v->num != floor(v->num))
		return kfail(c, kw, "'%s' must be a non-negative integer", kw);
	*out = v->num > 1e9 ? 1000000000 : (long)v->num;
	return 0;
}

static int type_bit(struct conv *c, const struct exl_json *v, unsigned *mask)
{
	static const struct { const char *name; unsigned bits; } types[] = {
		{ "null", T_NULL }, { "boolean", T_BOOL }, { "integer", T_INT },
		{ "number", T_NUM | T_INT }, { "string", T_STR }, { "array", T_ARR },
		{ "object", T_OBJ },
	};

	if (v->type != EXL_JSON_STRING)
		return kfail(c, "type", "'type' must be a type name or a list of them");
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (!strcmp(v->str, types[i].name)) {
			*mask |= types[i].bits;
			return 0;
		}
	}
	return kfail(c, "type", "unknown type '%.60s'", v->str);
}

/* The types a schema allows: 'type', or what its keywords imply (a
 * subset of what the schema allows, so still valid), else any. */
static int type_mask(struct conv *c, const struct exl_json *s, unsigned *mask)
{
	static const char *const obj_kw[] = { "properties", "required", "additionalProperties", NULL };
	static const char *const arr_kw[] = { "items", "prefixItems", "minItems", "maxItems",
					      "additionalItems", NULL };
	static const char *const str_kw[] = { "minLength", "maxLength", "pattern", "format", NULL };
	static const char *const num_kw[] = { "minimum", "maximum", "exclusiveMinimum",
					      "exclusiveMaximum", NULL };
	const struct exl_json *t = exl_json_get(s, "type");

	*mask = 0;
	if (t) {
		if (t->type == EXL_JSON_ARRAY) {
			if (!t->n)
				return kfail(c, "type", "'type' is an empty list");
			for (size_t i = 0; i < t->n; i++)
				if (type_bit(c, t->v[i], mask))
					return -1;
		} else if (type_bit(c, t, mask)) {
			return -1;
		}
	} else {
		for (size_t i = 0; i < s->n; i++) {
			const char *k = s->keys[i];

			if (in_list(obj_kw, k))
				*mask |= T_OBJ;
			else if (in_list(arr_kw, k))
				*mask |= T_ARR;
			else if (in_list(str_kw, k))
				*mask |= T_STR;
			else if (in_list(num_kw, k))
				*mask |= T_NUM | T_INT;
		}
		if (!*mask)
			*mask = T_ALL;
	}
	const struct exl_json *nl = exl_json_get(s, "nullable");

	if (nl) {
		if (nl->type != EXL_JSON_BOOL)
			return kfail(c, "nullable", "'nullable' must be true or false");
		if (nl->b)
			*mask |= T_NULL;
	}
	return 0;
}

static bool value_has_type(const struct exl_json *v, unsigned mask)
{
	switch (v->type) {
	case EXL_JSON_NULL: return mask & T_NULL;
	case EXL_JSON_BOOL: return mask & T_BOOL;
	case EXL_JSON_STRING: return mask & T_STR;
	case EXL_JSON_ARRAY: return mask & T_ARR;
	case EXL_JSON_OBJECT: return mask & T_OBJ;
	case EXL_JSON_NUMBER:
		return (mask & T_NUM) || ((mask & T_INT) && v->num == floor(v->num));
	}
	return false;
}

/* ---- references ---- */

static int resolve(struct conv *c, const char *ref, const struct exl_json **out)
{
	const struct exl_json *node = c->root;
	const char *p = ref + 1;
	char seg[256];

	if (ref[0] != '#')
		return kfail(c, "$ref", "$ref '%.100s': only references within this schema "
			     "(starting with '#') are supported", ref);
	while (*p) {
		size_t n = 0;

		if (*p != '/')
			return kfail(c, "$ref", "$ref '%.100s': only JSON pointers (#/...) are "
				     "supported, not anchors", ref);
		p++;
		while (*p && *p != '/') {
			char ch = *p++;

			if (ch == '~' && (*p == '0' || *p == '1')) {
				ch = *p++ == '0' ? '~' : '/';
			} else if (ch == '%' && p[0] && p[1]) {
				char hex[3] = { p[0], p[1], 0 };
				char *end;
				long v = strtol(hex, &end, 16);

				if (*end)
					return kfail(c, "$ref", "$ref '%.100s': bad %% escape", ref);
				ch = (char)v;
				p += 2;
			}
			if (n + 1 >= sizeof(seg))
				return kfail(c, "$ref", "$ref '%.100s': a segment is too long", ref);
			seg[n++] = ch;
		}
		seg[n] = 0;
		if (node->type == EXL_JSON_OBJECT) {
			node = exl_json_get(node, seg);
		} else if (node->type == EXL_JSON_ARRAY) {
			char *end;
			unsigned long i = strtoul(seg, &end, 10);

			node = *seg && !*end && i < node->n ? node->v[i] : NULL;
		} else {
			node = NULL;
		}
		if (!node)
			return kfail(c, "$ref", "$ref '%.100s' does not resolve ('%.60s' is not there)",
				     ref, seg);
	}
	*out = node;
	return 0;
}

static int validation_keyword_besides(const struct exl_json *s, const char *const *allowed)
{
	for (size_t i = 0; i < s->n; i++)
		if (!is_annotation(s->keys[i]) && !in_list(allowed, s->keys[i]))
			return (int)i;
	return -1;
}

static int gen_into(struct conv *c, const struct exl_json *s, const char *name);

static int ref_name(struct conv *c, const struct exl_json *s, char *name)
{
	const struct exl_json *t = s;
	const char *ref = NULL;

	/* Follow a chain of bare references to its schema, refusing a loop. */
	for (int hops = 0; ; hops++) {
		const struct exl_json *r = t->type == EXL_JSON_OBJECT ? exl_json_get(t, "$ref") : NULL;

		if (!r)
			break;
		if (hops == MAX_REF_CHAIN)
			return kfail(c, "$ref", "$ref chain longer than %d (a loop that never "
				     "reaches a schema?)", MAX_REF_CHAIN);
		if (r->type != EXL_JSON_STRING)
			return kfail(c, "$ref", "'$ref' must be a string");
		ref = r->str;
		if (resolve(c, ref, &t))
			return -1;
	}
	for (size_t i = 0; i < c->n_refs; i++) {
		if (c->refs[i].target == t) {
			snprintf(name, NAME_LEN, "%s", c->refs[i].name);
			return 0;
		}
	}
	if (c->n_refs == c->cap_refs) {
		size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
		struct ref_ent *r = realloc(c->refs, cap * sizeof(*r));

		if (!r)
			return oom(c);
		c->refs = r;
		c->cap_refs = cap;
	}
	struct ref_ent *e = &c->refs[c->n_refs++];

	e->target = t;
	gbnf_name(&c->o, "ref", e->name, sizeof(e->name));
	snprintf(name, NAME_LEN, "%s", e->name);
	/* Errors inside name the target's path. */
	char saved[sizeof(c->path)];
	size_t saved_len = c->plen;
	int rc;

	memcpy(saved, c->path, sizeof(saved));
	snprintf(c->path, sizeof(c->path), "%s", ref + 1);
	c->plen = strlen(c->path);
	rc = gen_into(c, t, name);
	if (!rc) {
		memcpy(c->path, saved, sizeof(saved));
		c->plen = saved_len;
	}
	return rc;
}

/* A fresh rule for s; its name into name. */
static int gen(struct conv *c, const struct exl_json *s, char *name)
{
	gbnf_name(&c->o, "v", name, NAME_LEN);
	return gen_into(c, s, name);
}

static int gen_at(struct conv *c, const struct exl_json *s, const char *seg, char *name)
{
	size_t old = path_push_str(c, seg);

	if (gen(c, s, name))
		return -1;
	path_pop(c, old);
	return 0;
}

/* ---- strings ---- */

static int string_body(struct conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	const struct exl_json *pat = exl_json_get(s, "pattern"), *fmt = exl_json_get(s, "format");
	long min = 0, max = -1;

	if (get_count(c, s, "minLength", &min) || get_count(c, s, "maxLength", &max))
		return -1;
	bool has_len = exl_json_get(s, "minLength") || exl_json_get(s, "maxLength");

	if (fmt) {
		const char *r;

		if (fmt->type != EXL_JSON_STRING)
			return kfail(c, "format", "'format' must be a string");
		r = js_format_rule(fmt->str);
		if (!r)
			return kfail(c, "format", "format '%.60s' is not supported (date, time, "
				     "date-time and uuid are)", fmt->str);
		if (pat || has_len)
			return kfail(c, "format", "'format' together with '%s' is not supported",
				     pat ? "pattern" : "minLength/maxLength");
		gbnf_puts(b, r);
		return 0;
	}
	if (pat) {
		char name[NAME_LEN], msg[300];

		if (pat->type != EXL_JSON_STRING)
			return kfail(c, "pattern", "'pattern' must be a string");
		if (has_len)
			return kfail(c, "pattern", "'pattern' together with minLength/maxLength is "
				     "not supported");
		gbnf_name(&c->o, "pattern", name, sizeof(name));
		if (exl_regex_emit_json_body(&c->o, name, pat->str, pat->len, msg, sizeof(msg)))
			return kfail(c, "pattern", "%s", msg);
		gbnf_printf(b, "\"\\\"\" %s \"\\\"\"", name);
		return 0;
	}
	if (min > EXL_SCHEMA_MAX_COUNT)
		return kfail(c, "minLength", "minLength above %d is not supported",
			     EXL_SCHEMA_MAX_COUNT);
	if (max >= 0 && max < min)
		return kfail(c, "maxLength", "maxLength is below minLength");
	/* A longer limit is cut to EXL_SCHEMA_MAX_COUNT: shorter strings are
	 * still valid. */
	if (max > EXL_SCHEMA_MAX_COUNT)
		max = EXL_SCHEMA_MAX_COUNT;
	if (!min && max < 0)
		gbnf_puts(b, "js-string");
	else if (max < 0)
		gbnf_printf(b, "\"\\\"\" js-char{%ld,} \"\\\"\"", min);
	else
		gbnf_printf(b, "\"\\\"\" js-char{%ld,%ld} \"\\\"\"", min, max);
	return 0;
}

/* ---- numbers ---- */

static int get_bound(struct conv *c, const struct exl_json *s, const char *kw, const char *excl_kw,
		     struct js_bound *b, bool lower)
{
	const struct exl_json *v = exl_json_get(s, kw), *e = exl_json_get(s, excl_kw);

	memset(b, 0, sizeof(*b));
	if (v) {
		if (v->type != EXL_JSON_NUMBER)
			return kfail(c, kw, "'%s' must be a number", kw);
		b->set = true;
		b->v = v->num;
	}
	if (!e)
		return 0;
	if (e->type == EXL_JSON_BOOL) {
		/* draft 4: a flag on the inclusive bound */
		if (e->b && !v)
			return kfail(c, excl_kw, "'%s': true needs '%s'", excl_kw, kw);
		b->excl = e->b;
		return 0;
	}
	if (e->type != EXL_JSON_NUMBER)
		return kfail(c, excl_kw, "'%s' must be a number", excl_kw);
	if (!b->set || (lower ? e->num >= b->v : e->num <= b->v)) {
		b->set = true;
		b->v = e->num;
		b->excl = true;
	}
	return 0;
}

static int number_body(struct conv *c, const struct exl_json *s, bool integer,
		       struct exl_gbnf_out *b)
{
	struct js_bound lo, hi;
	char msg[200];

	if (get_bound(c, s, "minimum", "exclusiveMinimum", &lo, true) ||
	    get_bound(c, s, "maximum", "exclusiveMaximum", &hi, false))
		return -1;
	if (!lo.set && !hi.set) {
		gbnf_puts(b, integer ? "js-integer" : "js-number");
		return 0;
	}
	if (js_emit_range(b, integer, lo, hi, msg, sizeof(msg)))
		return cfail(c, "%s", msg);
	return 0;
}

/* ---- arrays ---- */

static int array_body(struct conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	const struct exl_json *prefix = exl_json_get(s, "prefixItems");
	const struct exl_json *items = exl_json_get(s, "items");
	const struct exl_json *uniq = exl_json_get(s, "uniqueItems");
	const char *items_kw = "items";
	long min = 0, max = -1;
	char (*pn)[NAME_LEN] = NULL, iname[NAME_LEN] = "js-value", base[NAME_LEN];
	int rc = -1;

	if (uniq && !(uniq->type == EXL_JSON_BOOL && !uniq->b))
		return kfail(c, "uniqueItems", "uniqueItems: true is not supported");
	if (get_count(c, s, "minItems", &min) || get_count(c, s, "maxItems", &max))
		return -1;
	if (exl_json_get(s, "additionalItems") && !(items && items->type == EXL_JSON_ARRAY))
		return kfail(c, "additionalItems", "'additionalItems' is supported only with "
			     "'items' as a list");
	if (!prefix && items && items->type == EXL_JSON_ARRAY) {
		/* drafts 4-7: items as a list is prefixItems */
		prefix = items;
		items = exl_json_get(s, "additionalItems");
		items_kw = "additionalItems";
	} else if (prefix && prefix->type != EXL_JSON_ARRAY) {
		return kfail(c, "prefixItems", "'prefixItems' must be a list of schemas");
	}
	size_t k = prefix ? prefix->n : 0;
	bool items_false = items && items->type == EXL_JSON_BOOL && !items->b;

	if (min > EXL_SCHEMA_MAX_COUNT)
		return kfail(c, "minItems", "minItems above %d is not supported", EXL_SCHEMA_MAX_COUNT);
	if (max > EXL_SCHEMA_MAX_COUNT)
		max = EXL_SCHEMA_MAX_COUNT;
	if (items_false && (max < 0 || (size_t)max > k))
		max = (long)k;
	if (max >= 0 && max < min)
		return kfail(c, "maxItems", "the array cannot hold minItems items");
	if (max == 0) {
		gbnf_puts(b, "\"[\" js-ws \"]\"");
		return 0;
	}
	size_t used_prefix = max >= 0 && (size_t)max < k ? (size_t)max : k;

	pn = calloc(k + 1, sizeof(*pn));
	if (!pn)
		return oom(c);
	for (size_t i = 0; i < used_prefix; i++) {
		size_t old = path_push_str(c, prefix == exl_json_get(s, "items") ? "items" :
					   "prefixItems");
		size_t old2 = path_push_index(c, i);

		if (gen(c, prefix->v[i], pn[i]))
			goto out;
		path_pop(c, old2);
		path_pop(c, old);
	}
	if ((max < 0 || (size_t)max > k) && items && !items_false &&
	    gen_at(c, items, items_kw, iname))
		goto out;
	gbnf_name(&c->o, "array", base, sizeof(base));
	/* tail(i): after element i-1, for i = 1 .. */
	for (size_t i = used_prefix; i >= 1; i--) {
		gbnf_printf(&c->o, "%s-t%zu ::= ", base, i);
		if (i < used_prefix) {
			bool req = (long)i < min;

			gbnf_printf(&c->o, req ? "js-ws \",\" js-ws %s %s-t%zu\n" :
				    "( js-ws \",\" js-ws %s %s-t%zu )?\n", pn[i], base, i + 1);
			continue;
		}
		/* the items after the prefix */
		long rmin = min - (long)i > 0 ? min - (long)i : 0;

		if (max >= 0 && (size_t)max <= i)
			gbnf_puts(&c->o, "\n");
		else if (max < 0)
			gbnf_printf(&c->o, "( js-ws \",\" js-ws %s ){%ld,}\n", iname, rmin);
		else
			gbnf_printf(&c->o, "( js-ws \",\" js-ws %s ){%ld,%ld}\n", iname, rmin,
				    max - (long)i);
	}
	if (!used_prefix) {
		/* no prefix: the first item, then the rest */
		long rmin = min > 1 ? min - 1 : 0;

		if (max >= 0)
			gbnf_printf(&c->o, "%s-t1 ::= ( js-ws \",\" js-ws %s ){%ld,%ld}\n", base, iname,
				    rmin, max - 1);
		else
			gbnf_printf(&c->o, "%s-t1 ::= ( js-ws \",\" js-ws %s ){%ld,}\n", base, iname,
				    rmin);
	}
	const char *first = used_prefix ? pn[0] : iname;

	if (min >= 1)
		gbnf_printf(b, "\"[\" js-ws %s %s-t1 js-ws \"]\"", first, base);
	else
		gbnf_printf(b, "\"[\" js-ws ( %s %s-t1 js-ws )? \"]\"", first, base);
	rc = 0;
out:
	free(pn);
	return rc;
}

/* ---- objects ---- */

struct keycp {
	uint32_t *cp;
	size_t n;
};

static int cmp_keycp(const void *a, const void *b)
{
	const struct keycp *x = a, *y = b;

	for (size_t i = 0; i < x->n && i < y->n; i++)
		if (x->cp[i] != y->cp[i])
			return x->cp[i] < y->cp[i] ? -1 : 1;
	return x->n < y->n ? -1 : x->n > y->n;
}

/* Rule name: the plain key strings (no escapes) of keys[lo..hi) sharing d
 * code points, continued by anything that is not one of them. */
static int not_keys_rule(struct conv *c, const struct keycp *keys, size_t lo, size_t hi, size_t d,
			 char *name)
{
	struct exl_gbnf_out body;
	uint32_t *excl = NULL;
	size_t n_excl = 0;
	bool first = true, ends_here = false;
	int rc = -1;

	gbnf_init(&body);
	gbnf_name(&c->o, "key", name, NAME_LEN);
	excl = malloc((hi - lo + 4) * 2 * sizeof(*excl));
	if (!excl)
		return oom(c);
	for (size_t i = lo; i < hi; ) {
		if (keys[i].n == d) {
			ends_here = true;
			i++;
			continue;
		}
		uint32_t ch = keys[i].cp[d];
		size_t j = i;
		char sub[NAME_LEN];

		while (j < hi && keys[j].n > d && keys[j].cp[d] == ch)
			j++;
		if (not_keys_rule(c, keys, i, j, d + 1, sub))
			goto out;
		if (!first)
			gbnf_puts(&body, " | ");
		gbnf_char(&body, ch);
		gbnf_printf(&body, " %s", sub);
		first = false;
		excl[2 * n_excl] = excl[2 * n_excl + 1] = ch;
		n_excl++;
		i = j;
	}
	/* Any other plain character, then anything. */
	excl[2 * n_excl] = 0;
	excl[2 * n_excl + 1] = 0x1F;
	excl[2 * n_excl + 2] = excl[2 * n_excl + 3] = '"';
	excl[2 * n_excl + 4] = excl[2 * n_excl + 5] = '\\';
	n_excl += 3;
	if (!first)
		gbnf_puts(&body, " | ");
	gbnf_class(&body, excl, n_excl, true);
	gbnf_puts(&body, " js-pchar*");
	if (!ends_here)
		gbnf_puts(&body, " | ");
	gbnf_printf(&c->o, "%s ::= ", name);
	gbnf_put(&c->o, body.s, body.len);
	gbnf_puts(&c->o, "\n");
	rc = 0;
out:
	free(excl);
	gbnf_free(&body);
	return rc;
}

static bool plain_key(const char *k, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)k[i] < 0x20 || k[i] == '"' || k[i] == '\\')
			return false;
	return true;
}

/* The additional-property key rule: a plain string that is none of the
 * declared keys (an escaped spelling of one could not be told apart). */
static int additional_key_rule(struct conv *c, const char *const *names, const size_t *lens,
			       size_t n, char *name)
{
	struct keycp *keys = calloc(n + 1, sizeof(*keys));
	size_t m = 0;
	int rc = -1;

	if (!keys)
		return oom(c);
	for (size_t i = 0; i < n; i++) {
		if (!plain_key(names[i], lens[i]))
			continue;
		keys[m].cp = malloc((lens[i] + 1) * sizeof(uint32_t));
		if (!keys[m].cp) {
			oom(c);
			goto out;
		}
		/* The keys were decoded from valid JSON: valid UTF-8. */
		const unsigned char *p = (const unsigned char *)names[i];
		size_t k = 0;

		for (size_t j = 0; j < lens[i]; ) {
			uint32_t ch = p[j];
			int len = ch < 0x80 ? 1 : ch < 0xE0 ? 2 : ch < 0xF0 ? 3 : 4;

			ch = len == 1 ? ch : len == 2 ? ch & 0x1F : len == 3 ? ch & 0x0F : ch & 0x07;
			for (int t = 1; t < len && j + (size_t)t < lens[i]; t++)
				ch = ch << 6 | (p[j + (size_t)t] & 0x3F);
			keys[m].cp[k++] = ch;
			j += (size_t)len;
		}
		keys[m].n = k;
		m++;
	}
	qsort(keys, m, sizeof(*keys), cmp_keycp);
	rc = not_keys_rule(c, keys, 0, m, 0, name);
out:
	for (size_t i = 0; i < n; i++)
		free(keys[i].cp);
	free(keys);
	return rc;
}

static int object_body(struct conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	const struct exl_json *props = exl_json_get(s, "properties");
	const struct exl_json *req = exl_json_get(s, "required");
	const struct exl_json *addl = exl_json_get(s, "additionalProperties");
	size_t np = props ? props->n : 0, nr = req ? req->n : 0, n = 0;
	const char **names = NULL;
	size_t *lens = NULL;
	bool *required = NULL;
	char (*vn)[NAME_LEN] = NULL, aval[NAME_LEN] = "js-value", akey[NAME_LEN], base[NAME_LEN];
	bool allow_addl = !addl || addl->type != EXL_JSON_BOOL || addl->b;
	int rc = -1;

	if (props && props->type != EXL_JSON_OBJECT)
		return kfail(c, "properties", "'properties' must be an object");
	if (req && req->type != EXL_JSON_ARRAY)
		return kfail(c, "required", "'required' must be a list of strings");
	if (addl && addl->type != EXL_JSON_BOOL && addl->type != EXL_JSON_OBJECT)
		return kfail(c, "additionalProperties", "'additionalProperties' must be a boolean "
			     "or a schema");
	names = calloc(np + nr + 1, sizeof(*names));
	lens = calloc(np + nr + 1, sizeof(*lens));
	required = calloc(np + nr + 1, sizeof(*required));
	vn = calloc(np + nr + 1, sizeof(*vn));
	if (!names || !lens || !required || !vn) {
		oom(c);
		goto out;
	}
	if (addl && addl->type == EXL_JSON_OBJECT && gen_at(c, addl, "additionalProperties", aval))
		goto out;
	for (size_t i = 0; i < np; i++) {
		size_t old = path_push_str(c, "properties");
		size_t old2 = path_push(c, props->keys[i], props->key_lens[i]);

		names[n] = props->keys[i];
		lens[n] = props->key_lens[i];
		if (gen(c, props->v[i], vn[n]))
			goto out;
		path_pop(c, old2);
		path_pop(c, old);
		n++;
	}
	for (size_t i = 0; i < nr; i++) {
		const struct exl_json *r = req->v[i];
		size_t j;

		if (r->type != EXL_JSON_STRING) {
			kfail(c, "required", "'required' must be a list of strings");
			goto out;
		}
		for (j = 0; j < n; j++)
			if (lens[j] == r->len && !memcmp(names[j], r->str, r->len))
				break;
		if (j == n) {
			/* Required but not described: any value the
			 * additional properties allow. */
			if (!allow_addl) {
				kfail(c, "required", "required property '%.60s' is not in properties "
				      "and additionalProperties is false", r->str);
				goto out;
			}
			names[n] = r->str;
			lens[n] = r->len;
			snprintf(vn[n], NAME_LEN, "%s", aval);
			n++;
		}
		required[j] = true;
	}
	gbnf_name(&c->o, "object", base, sizeof(base));
	for (size_t i = 0; i < n; i++) {
		gbnf_printf(&c->o, "%s-m%zu ::= ", base, i);
		if (key_literal(c, &c->o, names[i], lens[i]))
			goto out;
		gbnf_printf(&c->o, " js-ws \":\" js-ws %s\n", vn[i]);
	}
	if (allow_addl) {
		if (additional_key_rule(c, names, lens, n, akey))
			goto out;
		gbnf_printf(&c->o, "%s-a ::= \"\\\"\" %s \"\\\"\" js-ws \":\" js-ws %s\n", base, akey,
			    aval);
		gbnf_printf(&c->o, "%s-t%zu ::= ( js-ws \",\" js-ws %s-a )*\n", base, n, base);
		gbnf_printf(&c->o, "%s-g%zu ::= %s-a %s-t%zu\n", base, n, base, base, n);
	}
	bool any_required = false;

	for (size_t i = n; i-- > 0; ) {
		bool has_next = i + 1 < n || allow_addl;
		char next_t[NAME_LEN + 32] = "";

		if (has_next)
			snprintf(next_t, sizeof(next_t), " %s-t%zu", base, i + 1);
		if (required[i])
			gbnf_printf(&c->o, "%s-t%zu ::= js-ws \",\" js-ws %s-m%zu%s\n", base, i, base, i,
				    next_t);
		else
			gbnf_printf(&c->o, "%s-t%zu ::= ( js-ws \",\" js-ws %s-m%zu )?%s\n", base, i,
				    base, i, next_t);
		gbnf_printf(&c->o, "%s-g%zu ::= %s-m%zu%s", base, i, base, i, next_t);
		if (!required[i] && has_next)
			gbnf_printf(&c->o, " | %s-g%zu", base, i + 1);
		gbnf_puts(&c->o, "\n");
		any_required |= required[i];
	}
	if (!n && !allow_addl)
		gbnf_puts(b, "\"{\" js-ws \"}\"");
	else if (any_required)
		gbnf_printf(b, "\"{\" js-ws %s-g0 js-ws \"}\"", base);
	else
		gbnf_printf(b, "\"{\" js-ws ( %s-g0 js-ws )? \"}\"", base);
	rc = 0;
out:
	free(names);
	free(lens);
	free(required);
	free(vn);
	return rc;
}

/* ---- combinators ---- */

static int enum_body(struct conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	static const char *const allowed[] = { "enum", "const", "type", "nullable", NULL };
	const struct exl_json *e = exl_json_get(s, "enum"), *k = exl_json_get(s, "const");
	const char *kw = e ? "enum" : "const";
	unsigned mask = T_ALL;
	int other = validation_keyword_besides(s, allowed);
	bool any = false;

	if (other >= 0)
		return kfail(c, s->keys[other], "'%s' together with '%s' is not supported",
			     kw, s->keys[other]);
	if ((exl_json_get(s, "type") || exl_json_get(s, "nullable")) && type_mask(c, s, &mask))
		return -1;
	if (e && e->type != EXL_JSON_ARRAY)
		return kfail(c, "enum", "'enum' must be a list");
	size_t n = e ? e->n : 1;

	gbnf_puts(b, "( ");
	for (size_t i = 0; i < n; i++) {
		const struct exl_json *v = e ? e->v[i] : k;

		if (!value_has_type(v, mask))
			continue;
		if (e && k && !exl_json_equal(v, k))
			continue;
		if (any)
			gbnf_puts(b, " | ");
		if (literal(c, b, v))
			return -1;
		any = true;
	}
	gbnf_puts(b, " )");
	if (!any)
		return kfail(c, kw, "no value of '%s' has the schema's type", kw);
	return 0;
}

static int any_of_body(struct conv *c, const struct exl_json *s, const char *kw,
		       struct exl_gbnf_out *b)
{
	static const char *const allowed[] = { "anyOf", "oneOf", NULL };
	const struct exl_json *l = exl_json_get(s, kw);
	int other = validation_keyword_besides(s, allowed);
	char name[NAME_LEN];

	if (other >= 0)
		return kfail(c, s->keys[other], "'%s' together with '%s' is not supported", kw,
			     s->keys[other]);
	if (exl_json_get(s, "anyOf") && exl_json_get(s, "oneOf"))
		return kfail(c, "oneOf", "'anyOf' together with 'oneOf' is not supported");
	if (l->type != EXL_JSON_ARRAY || !l->n)
		return kfail(c, kw, "'%s' must be a non-empty list of schemas", kw);
	gbnf_puts(b, "( ");
	for (size_t i = 0; i < l->n; i++) {
		size_t old = path_push_str(c, kw);
		size_t old2 = path_push_index(c, i);

		if (gen(c, l->v[i], name))
			return -1;
		path_pop(c, old2);
		path_pop(c, old);
		gbnf_printf(b, "%s%s", i ? " | " : "", name);
	}
	gbnf_puts(b, " )");
	return 0;
}

/* allOf: the branches (bare references followed, nested allOf
 * flattened) and the schema's own keywords merged into one schema.
 *
 * Properties keep the meaning they have in each branch: a property one
 * branch declares and another closes off (additionalProperties: false
 * without declaring it) is not allowed at all, and a property's schema
 * must be the same wherever it is constrained (true / {} constrain
 * nothing).  Other keywords must not differ between branches. */
struct member {
	const char *k;
	size_t kl;
	const struct exl_json *v;
};

/* One object schema's say about properties. */
struct part {
	const struct exl_json *props;
	const struct exl_json *addl;
};

struct merge {
	struct member *kw;       /* other keywords */
	size_t n_kw, cap_kw;
	struct part *parts;
	size_t n_parts, cap_parts;
	const struct exl_json **req;
	size_t n_req, cap_req;
	unsigned types;
	bool has_type;
};

static int grow_arr(void **p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 16;

	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * size);

	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

static int add_member(struct member **arr, size_t *n, size_t *cap, const char *k, size_t kl,
		      const struct exl_json *v)
{
	if (grow_arr((void **)arr, cap, *n + 1, sizeof(**arr)))
		return -1;
	(*arr)[*n].k = k;
	(*arr)[*n].kl = kl;
	(*arr)[*n].v = v;
	(*n)++;
	return 0;
}

/* true, or an object of annotations only. */
static bool trivially_true(const struct exl_json *v)
{
	if (v->type == EXL_JSON_BOOL)
		return v->b;
	if (v->type != EXL_JSON_OBJECT)
		return false;
	for (size_t i = 0; i < v->n; i++)
		if (!is_annotation(v->keys[i]))
			return false;
	return true;
}

static int merge_in(struct conv *c, struct merge *m, const struct exl_json *s, int depth);

static int merge_branch(struct conv *c, struct merge *m, const struct exl_json *br, int depth)
{
	static const char *const only_ref[] = { "$ref", NULL };

	/* Follow bare references. */
	for (int hops = 0; br->type == EXL_JSON_OBJECT; hops++) {
		const struct exl_json *r = exl_json_get(br, "$ref");

		if (!r)
			break;
		if (validation_keyword_besides(br, only_ref) >= 0)
			return cfail(c, "an allOf branch with '$ref' and other keywords is not "
				     "supported");
		if (r->type != EXL_JSON_STRING)
			return cfail(c, "'$ref' must be a string");
		if (hops == MAX_REF_CHAIN)
			return cfail(c, "$ref chain longer than %d", MAX_REF_CHAIN);
		if (resolve(c, r->str, &br))
			return -1;
	}
	if (br->type == EXL_JSON_BOOL) {
		if (br->b)
			return 0;
		return cfail(c, "an allOf branch is false: no value is valid");
	}
	if (br->type != EXL_JSON_OBJECT)
		return cfail(c, "an allOf branch must be a schema");
	return merge_in(c, m, br, depth + 1);
}

static int merge_in(struct conv *c, struct merge *m, const struct exl_json *s, int depth)
{
	if (depth > 16)
		return cfail(c, "allOf nested deeper than 16");
	const struct exl_json *props = exl_json_get(s, "properties");
	const struct exl_json *addl = exl_json_get(s, "additionalProperties");

	if (props && props->type != EXL_JSON_OBJECT)
		return kfail(c, "properties", "'properties' must be an object");
	if (addl && addl->type != EXL_JSON_BOOL && addl->type != EXL_JSON_OBJECT)
		return kfail(c, "additionalProperties", "'additionalProperties' must be a boolean "
			     "or a schema");
	if (props || addl) {
		if (grow_arr((void **)&m->parts, &m->cap_parts, m->n_parts + 1, sizeof(*m->parts)))
			return oom(c);
		m->parts[m->n_parts].props = props;
		m->parts[m->n_parts].addl = addl;
		m->n_parts++;
	}
	for (size_t i = 0; i < s->n; i++) {
		const char *k = s->keys[i];
		const struct exl_json *v = s->v[i];

		if (is_annotation(k) || !strcmp(k, "properties") || !strcmp(k, "additionalProperties"))
			continue;
		if (!in_list(supported, k))
			return kfail(c, k, "keyword '%s' is not supported", k);
		if (!strcmp(k, "allOf")) {
			if (v->type != EXL_JSON_ARRAY)
				return kfail(c, k, "'allOf' must be a list of schemas");
			for (size_t j = 0; j < v->n; j++) {
				size_t old = path_push_str(c, "allOf");
				size_t old2 = path_push_index(c, j);

				if (merge_branch(c, m, v->v[j], depth))
					return -1;
				path_pop(c, old2);
				path_pop(c, old);
			}
		} else if (!strcmp(k, "$ref")) {
			return kfail(c, k, "'$ref' together with 'allOf' is not supported");
		} else if (!strcmp(k, "required")) {
			if (v->type != EXL_JSON_ARRAY)
				return kfail(c, k, "'required' must be a list of strings");
			for (size_t j = 0; j < v->n; j++) {
				if (grow_arr((void **)&m->req, &m->cap_req, m->n_req + 1, sizeof(*m->req)))
					return oom(c);
				m->req[m->n_req++] = v->v[j];
			}
		} else if (!strcmp(k, "type")) {
			unsigned t = 0;

			if (v->type == EXL_JSON_ARRAY) {
				for (size_t j = 0; j < v->n; j++)
					if (type_bit(c, v->v[j], &t))
						return -1;
			} else if (type_bit(c, v, &t)) {
				return -1;
			}
			m->types = m->has_type ? m->types & t : t;
			m->has_type = true;
		} else {
			size_t j;

			for (j = 0; j < m->n_kw; j++)
				if (!strcmp(m->kw[j].k, k))
					break;
			if (j < m->n_kw) {
				if (!exl_json_equal(m->kw[j].v, v))
					return kfail(c, k, "allOf: '%s' differs between branches", k);
				continue;
			}
			if (add_member(&m->kw, &m->n_kw, &m->cap_kw, k, s->key_lens[i], v))
				return oom(c);
		}
	}
	return 0;
}

static struct exl_json *string_node(struct conv *c, const char *str)
{
	struct exl_json *v = exl_json_new(c->doc, EXL_JSON_STRING, 0);

	if (v) {
		v->str = str;
		v->len = strlen(str);
	}
	return v;
}

static bool is_required(const struct merge *m, const char *k, size_t kl)
{
	for (size_t i = 0; i < m->n_req; i++)
		if (m->req[i]->type == EXL_JSON_STRING && m->req[i]->len == kl &&
		    !memcmp(m->req[i]->str, k, kl))
			return true;
	return false;
}

/* The properties and additionalProperties of the merge, into o. */
static int merge_properties(struct conv *c, const struct merge *m, struct exl_json *o)
{
	struct member *keys = NULL;
	size_t n = 0, cap = 0;
	const struct exl_json *addl = NULL;
	bool closed = false;
	int rc = -1;

	for (size_t i = 0; i < m->n_parts; i++) {
		const struct exl_json *p = m->parts[i].props, *a = m->parts[i].addl;

		for (size_t j = 0; p && j < p->n; j++) {
			size_t k;

			for (k = 0; k < n; k++)
				if (keys[k].kl == p->key_lens[j] && !memcmp(keys[k].k, p->keys[j], keys[k].kl))
					break;
			if (k == n && add_member(&keys, &n, &cap, p->keys[j], p->key_lens[j], NULL)) {
				oom(c);
				goto out;
			}
		}
		if (a && a->type == EXL_JSON_BOOL && !a->b) {
			closed = true;
		} else if (a && !trivially_true(a)) {
			if (addl && !exl_json_equal(addl, a)) {
				cfail(c, "allOf: the branches' additionalProperties differ");
				goto out;
			}
			addl = a;
		}
	}
	size_t kept = 0;
	struct exl_json *props = exl_json_new(c->doc, EXL_JSON_OBJECT, n);

	if (!props) {
		oom(c);
		goto out;
	}
	for (size_t k = 0; k < n; k++) {
		const struct exl_json *sch = NULL;
		bool forbidden = false;

		for (size_t i = 0; i < m->n_parts; i++) {
			const struct exl_json *p = m->parts[i].props, *a = m->parts[i].addl, *v = NULL;

			for (size_t j = 0; p && j < p->n && !v; j++)
				if (p->key_lens[j] == keys[k].kl && !memcmp(p->keys[j], keys[k].k, keys[k].kl))
					v = p->v[j];
			if (!v && a && a->type == EXL_JSON_BOOL && !a->b) {
				forbidden = true;
				continue;
			}
			if (!v)
				v = a;
			if (!v || trivially_true(v))
				continue;
			if (sch && !exl_json_equal(sch, v)) {
				cfail(c, "allOf: property '%.60s' has different schemas in two branches",
				      keys[k].k);
				goto out;
			}
			sch = v;
		}
		if (forbidden) {
			if (is_required(m, keys[k].k, keys[k].kl)) {
				cfail(c, "allOf: property '%.60s' is required, but a branch with "
				      "additionalProperties: false does not declare it", keys[k].k);
				goto out;
			}
			continue;
		}
		if (!sch) {
			struct exl_json *t = exl_json_new(c->doc, EXL_JSON_BOOL, 0);

			if (!t) {
				oom(c);
				goto out;
			}
			t->b = true;
			sch = t;
		}
		props->keys[kept] = keys[k].k;
		props->key_lens[kept] = keys[k].kl;
		props->v[kept++] = (struct exl_json *)sch;
	}
	props->n = kept;
	if (n) {
		o->keys[o->n] = "properties";
		o->key_lens[o->n] = 10;
		o->v[o->n++] = props;
	}
	if (closed || addl) {
		struct exl_json *a = (struct exl_json *)addl;

		if (closed) {
			a = exl_json_new(c->doc, EXL_JSON_BOOL, 0);
			if (!a) {
				oom(c);
				goto out;
			}
		}
		o->keys[o->n] = "additionalProperties";
		o->key_lens[o->n] = 20;
		o->v[o->n++] = a;
	}
	rc = 0;
out:
	free(keys);
	return rc;
}

static int schema_body(struct conv *c, const struct exl_json *s, struct exl_gbnf_out *b);

/* The merged schema, as a new object in the document. */
static struct exl_json *merged_schema(struct conv *c, const struct merge *m, int *rc)
{
	static const char *const type_names[] = { "null", "boolean", "integer", "number", "string",
						  "array", "object" };
	static const unsigned bits[] = { T_NULL, T_BOOL, T_INT, T_NUM, T_STR, T_ARR, T_OBJ };
	struct exl_json *o = exl_json_new(c->doc, EXL_JSON_OBJECT, m->n_kw + 4);

	*rc = -1;
	if (!o)
		return NULL;
	o->n = 0;
	for (size_t i = 0; i < m->n_kw; i++) {
		o->keys[o->n] = m->kw[i].k;
		o->key_lens[o->n] = m->kw[i].kl;
		o->v[o->n++] = (struct exl_json *)m->kw[i].v;
	}
	if (merge_properties(c, m, o)) {
		*rc = 1;
		return NULL;
	}
	if (m->n_req) {
		struct exl_json *r = exl_json_new(c->doc, EXL_JSON_ARRAY, m->n_req);

		if (!r)
			return NULL;
		for (size_t i = 0; i < m->n_req; i++)
			r->v[i] = (struct exl_json *)m->req[i];
		o->keys[o->n] = "required";
		o->key_lens[o->n] = 8;
		o->v[o->n++] = r;
	}
	if (m->has_type) {
		struct exl_json *t = exl_json_new(c->doc, EXL_JSON_ARRAY, 7);

		if (!t)
			return NULL;
		t->n = 0;
		for (size_t i = 0; i < 7; i++) {
			if (!(m->types & bits[i]) || (bits[i] == T_INT && (m->types & T_NUM)))
				continue;
			t->v[t->n] = string_node(c, type_names[i]);
			if (!t->v[t->n++])
				return NULL;
		}
		o->keys[o->n] = "type";
		o->key_lens[o->n] = 4;
		o->v[o->n++] = t;
	}
	*rc = 0;
	return o;
}

static int all_of_body(struct conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	struct merge m = { 0 };
	const struct exl_json *o;
	int rc = -1, mrc;
	size_t old;

	if (merge_in(c, &m, s, 0))
		goto out;
	old = path_push_str(c, "allOf");
	if (m.has_type && !m.types) {
		cfail(c, "allOf: the branches allow no common type");
		goto out;
	}
	o = merged_schema(c, &m, &mrc);
	if (!o) {
		if (mrc < 0)
			oom(c);
		goto out;
	}
	path_pop(c, old);
	rc = schema_body(c, o, b);
out:
	free(m.kw);
	free(m.parts);
	free(m.req);
	return rc;
}

/* ---- one schema ---- */

static int schema_body(struct conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	if (s->type == EXL_JSON_BOOL) {
		if (!s->b)
			return cfail(c, "the schema false allows no value");
		gbnf_puts(b, "js-value");
		return 0;
	}
	if (s->type != EXL_JSON_OBJECT)
		return cfail(c, "a schema must be an object or a boolean, not %s %s",
			     s->type == EXL_JSON_ARRAY ? "an" : "a", exl_json_type_name(s->type));
	for (size_t i = 0; i < s->n; i++) {
		const char *k = s->keys[i];

		if (!is_annotation(k) && !in_list(supported, k))
			return kfail(c, k, "keyword '%s' is not supported", k);
	}
	if (exl_json_get(s, "$ref")) {
		static const char *const only_ref[] = { "$ref", NULL };
		int other = validation_keyword_besides(s, only_ref);
		char name[NAME_LEN];

		if (other >= 0)
			return kfail(c, s->keys[other], "'$ref' together with '%s' is not supported",
				     s->keys[other]);
		if (ref_name(c, s, name))
			return -1;
		gbnf_puts(b, name);
		return 0;
	}
	if (exl_json_get(s, "allOf"))
		return all_of_body(c, s, b);
	if (exl_json_get(s, "anyOf"))
		return any_of_body(c, s, "anyOf", b);
	if (exl_json_get(s, "oneOf"))
		return any_of_body(c, s, "oneOf", b);
	if (exl_json_get(s, "enum") || exl_json_get(s, "const"))
		return enum_body(c, s, b);
	unsigned mask;

	if (type_mask(c, s, &mask))
		return -1;
	if (mask == T_ALL) {
		gbnf_puts(b, "js-value");
		return 0;
	}
	if ((mask & T_NUM))
		mask &= ~(unsigned)T_INT;
	int n = 0;

	for (unsigned t = mask; t; t &= t - 1)
		n++;
	if (n > 1)
		gbnf_puts(b, "( ");
	bool first = true;

	for (unsigned bit = 1; bit <= T_OBJ; bit <<= 1) {
		int rc = 0;

		if (!(mask & bit))
			continue;
		if (!first)
			gbnf_puts(b, " | ");
		first = false;
		switch (bit) {
		case T_NULL: gbnf_puts(b, "js-null"); break;
		case T_BOOL: gbnf_puts(b, "js-boolean"); break;
		case T_INT: rc = number_body(c, s, true, b); break;
		case T_NUM: rc = number_body(c, s, false, b); break;
		case T_STR: rc = string_body(c, s, b); break;
		case T_ARR: rc = array_body(c, s, b); break;
		case T_OBJ: rc = object_body(c, s, b); break;
		}
		if (rc)
			return -1;
	}
	if (n > 1)
		gbnf_puts(b, " )");
	return 0;
}

static int gen_into(struct conv *c, const struct exl_json *s, const char *name)
{
	struct exl_gbnf_out body;
	int rc;

	if (++c->depth > MAX_NESTING) {
		c->depth--;
		return cfail(c, "schemas nested deeper than %d", MAX_NESTING);
	}
	gbnf_init(&body);
	rc = schema_body(c, s, &body);
	c->depth--;
	if (!rc && body.oom)
		rc = oom(c);
	if (!rc) {
		gbnf_printf(&c->o, "%s ::= ", name);
		gbnf_put(&c->o, body.s, body.len);
		gbnf_puts(&c->o, "\n");
	}
	gbnf_free(&body);
	return rc;
}

char *exl_json_schema_to_gbnf(const char *text, size_t len, char *err, size_t errlen)
{
	struct conv c = { .err = err, .errlen = errlen };
	char msg[300], name[NAME_LEN], *gbnf = NULL;

	c.doc = exl_json_parse(text, len, msg, sizeof(msg));
	if (!c.doc) {
		snprintf(err, errlen, "the schema is not valid JSON: %s", msg);
		return NULL;
	}
	c.root = exl_json_root(c.doc);
	gbnf_init(&c.o);
	if (gen(&c, c.root, name))
		goto out;
	gbnf_printf(&c.o, "root ::= js-ws %s\n", name);
	js_emit_fixed_rules(&c.o);
	if (c.o.oom) {
		oom(&c);
		goto out;
	}
	gbnf = gbnf_take(&c.o);
	if (!gbnf)
		oom(&c);
out:
	gbnf_free(&c.o);
	exl_json_free(c.doc);
	free(c.refs);
	return gbnf;
}
