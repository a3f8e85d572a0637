/* JSON schema -> GBNF: one rule per schema, written after the rules of
 * its parts (each rule's body is built in its own buffer while the parts'
 * rules go out first).  A $ref target gets its rule name before its body
 * is built, so recursive schemas become recursive rules.  This file walks
 * the schema: keywords, types, references, strings, numbers, enum / const
 * and anyOf / oneOf; json_schema_object.c writes objects and arrays,
 * json_schema_allof.c merges allOf, json_schema_oneof.c checks that a
 * oneOf's branches exclude each other, json_schema_prim.c holds the fixed
 * rules.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/grammar/grammar.h"
#include "common/json_parse.h"
#include "daemon/core/grammar/json_schema.h"
#include "daemon/core/grammar/json_schema_internal.h"
#include "daemon/core/grammar/regex_grammar.h"

#define MAX_NESTING 200

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

bool exl_js_is_annotation(const char *k)
{
	return in_list(annotations, k) || !strncmp(k, "x-", 2);
}

bool exl_js_is_supported(const char *k)
{
	return in_list(supported, k);
}

/* ---- paths and errors ---- */

size_t exl_js_path_push(struct js_conv *c, const char *seg, size_t n)
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

size_t exl_js_path_push_str(struct js_conv *c, const char *seg)
{
	return exl_js_path_push(c, seg, strlen(seg));
}

size_t exl_js_path_push_index(struct js_conv *c, size_t i)
{
	char b[24];

	snprintf(b, sizeof(b), "%zu", i);
	return exl_js_path_push_str(c, b);
}

void exl_js_path_pop(struct js_conv *c, size_t old)
{
	c->plen = old;
	c->path[old] = 0;
}

int exl_js_fail(struct js_conv *c, const char *fmt, ...)
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
int exl_js_kfail(struct js_conv *c, const char *kw, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	size_t old = exl_js_path_push_str(c, kw);

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	exl_js_fail(c, "%s", msg);
	exl_js_path_pop(c, old);
	return -1;
}

int exl_js_oom(struct js_conv *c)
{
	snprintf(c->err, c->errlen, "out of memory converting the schema");
	return -1;
}

/* ---- small helpers ---- */

static void put_out(void *u, const char *s, size_t n)
{
	exl_gbnf_put(u, s, n);
}

/* v's compact JSON text as a literal. */
int exl_js_literal(struct js_conv *c, struct exl_gbnf_out *b, const struct exl_json *v)
{
	struct exl_gbnf_out t;

	exl_gbnf_init(&t);
	exl_json_write(v, put_out, &t);
	if (t.oom) {
		exl_gbnf_free(&t);
		return exl_js_oom(c);
	}
	exl_gbnf_literal(b, t.s, t.len);
	exl_gbnf_free(&t);
	return 0;
}

/* A string's JSON form as a literal: "\"key\"". */
int exl_js_key_literal(struct js_conv *c, struct exl_gbnf_out *b, const char *k, size_t n)
{
	struct exl_json s = { .type = EXL_JSON_STRING, .str = k, .len = n };

	return exl_js_literal(c, b, &s);
}

int exl_js_get_count(struct js_conv *c, const struct exl_json *s, const char *kw, long *out)
{
	const struct exl_json *v = exl_json_get(s, kw);

	if (!v)
		return 0;
	if (v->type != EXL_JSON_NUMBER || v->num < 0 || v->num != floor(v->num))
		return exl_js_kfail(c, kw, "'%s' must be a non-negative integer", kw);
	*out = v->num > 1e9 ? 1000000000 : (long)v->num;
	return 0;
}

int exl_js_type_bit(struct js_conv *c, const struct exl_json *v, unsigned *mask)
{
	static const struct { const char *name; unsigned bits; } types[] = {
		{ "null", JS_T_NULL }, { "boolean", JS_T_BOOL }, { "integer", JS_T_INT },
		{ "number", JS_T_NUM | JS_T_INT }, { "string", JS_T_STR }, { "array", JS_T_ARR },
		{ "object", JS_T_OBJ },
	};

	if (v->type != EXL_JSON_STRING)
		return exl_js_kfail(c, "type", "'type' must be a type name or a list of them");
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (!strcmp(v->str, types[i].name)) {
			*mask |= types[i].bits;
			return 0;
		}
	}
	return exl_js_kfail(c, "type", "unknown type '%.60s'", v->str);
}

/* The types a schema allows: 'type', or what its keywords imply (a
 * subset of what the schema allows, so still valid), else any. */
int exl_js_type_mask(struct js_conv *c, const struct exl_json *s, unsigned *mask)
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
				return exl_js_kfail(c, "type", "'type' is an empty list");
			for (size_t i = 0; i < t->n; i++)
				if (exl_js_type_bit(c, t->v[i], mask))
					return -1;
		} else if (exl_js_type_bit(c, t, mask)) {
			return -1;
		}
	} else {
		for (size_t i = 0; i < s->n; i++) {
			const char *k = s->keys[i];

			if (in_list(obj_kw, k))
				*mask |= JS_T_OBJ;
			else if (in_list(arr_kw, k))
				*mask |= JS_T_ARR;
			else if (in_list(str_kw, k))
				*mask |= JS_T_STR;
			else if (in_list(num_kw, k))
				*mask |= JS_T_NUM | JS_T_INT;
		}
		if (!*mask)
			*mask = JS_T_ALL;
	}
	const struct exl_json *nl = exl_json_get(s, "nullable");

	if (nl) {
		if (nl->type != EXL_JSON_BOOL)
			return exl_js_kfail(c, "nullable", "'nullable' must be true or false");
		if (nl->b)
			*mask |= JS_T_NULL;
	}
	return 0;
}

static bool value_has_type(const struct exl_json *v, unsigned mask)
{
	switch (v->type) {
	case EXL_JSON_NULL: return mask & JS_T_NULL;
	case EXL_JSON_BOOL: return mask & JS_T_BOOL;
	case EXL_JSON_STRING: return mask & JS_T_STR;
	case EXL_JSON_ARRAY: return mask & JS_T_ARR;
	case EXL_JSON_OBJECT: return mask & JS_T_OBJ;
	case EXL_JSON_NUMBER:
		return (mask & JS_T_NUM) || ((mask & JS_T_INT) && v->num == floor(v->num));
	}
	return false;
}

/* ---- references ---- */

int exl_js_resolve(struct js_conv *c, const char *ref, const struct exl_json **out)
{
	const struct exl_json *node = c->root;
	const char *p = ref + 1;
	char seg[256];

	if (ref[0] != '#')
		return exl_js_kfail(c, "$ref", "$ref '%.100s': only references within this schema "
			     "(starting with '#') are supported", ref);
	while (*p) {
		size_t n = 0;

		if (*p != '/')
			return exl_js_kfail(c, "$ref", "$ref '%.100s': only JSON pointers "
					    "(#/...) are supported, not anchors", ref);
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
					return exl_js_kfail(c, "$ref", "$ref '%.100s': bad %% escape", ref);
				ch = (char)v;
				p += 2;
			}
			if (n + 1 >= sizeof(seg))
				return exl_js_kfail(c, "$ref", "$ref '%.100s': a segment is too long", ref);
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
			return exl_js_kfail(c, "$ref", "$ref '%.100s' does not resolve ('%.60s' is not there)",
				     ref, seg);
	}
	*out = node;
	return 0;
}

int exl_js_other_keyword(const struct exl_json *s, const char *const *allowed)
{
	for (size_t i = 0; i < s->n; i++)
		if (!exl_js_is_annotation(s->keys[i]) && !in_list(allowed, s->keys[i]))
			return (int)i;
	return -1;
}

static int gen_into(struct js_conv *c, const struct exl_json *s, const char *name);

static int ref_name(struct js_conv *c, const struct exl_json *s, char *name)
{
	const struct exl_json *t = s;
	const char *ref = NULL;

	/* Follow a chain of bare references to its schema, refusing a loop. */
	for (int hops = 0; ; hops++) {
		const struct exl_json *r = t->type == EXL_JSON_OBJECT ? exl_json_get(t, "$ref") : NULL;

		if (!r)
			break;
		if (hops == JS_MAX_REF_CHAIN)
			return exl_js_kfail(c, "$ref", "$ref chain longer than %d (a loop that "
					    "never reaches a schema?)", JS_MAX_REF_CHAIN);
		if (r->type != EXL_JSON_STRING)
			return exl_js_kfail(c, "$ref", "'$ref' must be a string");
		ref = r->str;
		if (exl_js_resolve(c, ref, &t))
			return -1;
	}
	for (size_t i = 0; i < c->n_refs; i++) {
		if (c->refs[i].target == t) {
			snprintf(name, JS_NAME_LEN, "%s", c->refs[i].name);
			return 0;
		}
	}
	if (c->n_refs == c->cap_refs) {
		size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
		struct js_ref *r = realloc(c->refs, cap * sizeof(*r));

		if (!r)
			return exl_js_oom(c);
		c->refs = r;
		c->cap_refs = cap;
	}
	struct js_ref *e = &c->refs[c->n_refs++];

	e->target = t;
	exl_gbnf_name(&c->o, "ref", e->name, sizeof(e->name));
	snprintf(name, JS_NAME_LEN, "%s", e->name);
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
int exl_js_gen(struct js_conv *c, const struct exl_json *s, char *name)
{
	exl_gbnf_name(&c->o, "v", name, JS_NAME_LEN);
	return gen_into(c, s, name);
}

int exl_js_gen_at(struct js_conv *c, const struct exl_json *s, const char *seg, char *name)
{
	size_t old = exl_js_path_push_str(c, seg);

	if (exl_js_gen(c, s, name))
		return -1;
	exl_js_path_pop(c, old);
	return 0;
}

/* ---- strings ---- */

static int string_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	const struct exl_json *pat = exl_json_get(s, "pattern"), *fmt = exl_json_get(s, "format");
	long min = 0, max = -1;

	if (exl_js_get_count(c, s, "minLength", &min) || exl_js_get_count(c, s, "maxLength", &max))
		return -1;
	bool has_len = exl_json_get(s, "minLength") || exl_json_get(s, "maxLength");

	if (fmt) {
		const char *r;

		if (fmt->type != EXL_JSON_STRING)
			return exl_js_kfail(c, "format", "'format' must be a string");
		r = exl_js_format_rule(fmt->str);
		if (!r)
			return exl_js_kfail(c, "format", "format '%.60s' is not supported (date, "
					    "time, date-time and uuid are)", fmt->str);
		if (pat || has_len)
			return exl_js_kfail(c, "format",
					    "'format' together with '%s' is not supported",
					    pat ? "pattern" : "minLength/maxLength");
		exl_gbnf_puts(b, r);
		return 0;
	}
	if (pat) {
		char name[JS_NAME_LEN], msg[300];

		if (pat->type != EXL_JSON_STRING)
			return exl_js_kfail(c, "pattern", "'pattern' must be a string");
		if (has_len)
			return exl_js_kfail(c, "pattern", "'pattern' together with minLength/maxLength is "
				     "not supported");
		exl_gbnf_name(&c->o, "pattern", name, sizeof(name));
		if (exl_regex_emit_json_body(&c->o, name, pat->str, pat->len, msg, sizeof(msg)))
			return exl_js_kfail(c, "pattern", "%s", msg);
		exl_gbnf_printf(b, "\"\\\"\" %s \"\\\"\"", name);
		return 0;
	}
	if (min > EXL_SCHEMA_MAX_COUNT)
		return exl_js_kfail(c, "minLength", "minLength above %d is not supported",
			     EXL_SCHEMA_MAX_COUNT);
	if (max >= 0 && max < min)
		return exl_js_kfail(c, "maxLength", "maxLength is below minLength");
	/* A longer limit is cut to EXL_SCHEMA_MAX_COUNT: shorter strings are
	 * still valid. */
	if (max > EXL_SCHEMA_MAX_COUNT)
		max = EXL_SCHEMA_MAX_COUNT;
	if (!min && max < 0)
		exl_gbnf_puts(b, "js-string");
	else if (max < 0)
		exl_gbnf_printf(b, "\"\\\"\" js-char{%ld,} \"\\\"\"", min);
	else
		exl_gbnf_printf(b, "\"\\\"\" js-char{%ld,%ld} \"\\\"\"", min, max);
	return 0;
}

/* ---- numbers ---- */

static int get_bound(struct js_conv *c, const struct exl_json *s, const char *kw, const char *excl_kw,
		     struct js_bound *b, bool lower)
{
	const struct exl_json *v = exl_json_get(s, kw), *e = exl_json_get(s, excl_kw);

	memset(b, 0, sizeof(*b));
	if (v) {
		if (v->type != EXL_JSON_NUMBER)
			return exl_js_kfail(c, kw, "'%s' must be a number", kw);
		b->set = true;
		b->v = v->num;
	}
	if (!e)
		return 0;
	if (e->type == EXL_JSON_BOOL) {
		/* draft 4: a flag on the inclusive bound */
		if (e->b && !v)
			return exl_js_kfail(c, excl_kw, "'%s': true needs '%s'", excl_kw, kw);
		b->excl = e->b;
		return 0;
	}
	if (e->type != EXL_JSON_NUMBER)
		return exl_js_kfail(c, excl_kw, "'%s' must be a number", excl_kw);
	if (!b->set || (lower ? e->num >= b->v : e->num <= b->v)) {
		b->set = true;
		b->v = e->num;
		b->excl = true;
	}
	return 0;
}

static int number_body(struct js_conv *c, const struct exl_json *s, bool integer,
		       struct exl_gbnf_out *b)
{
	struct js_bound lo, hi;
	char msg[200];

	if (get_bound(c, s, "minimum", "exclusiveMinimum", &lo, true) ||
	    get_bound(c, s, "maximum", "exclusiveMaximum", &hi, false))
		return -1;
	if (!lo.set && !hi.set) {
		exl_gbnf_puts(b, integer ? "js-integer" : "js-number");
		return 0;
	}
	if (exl_js_emit_range(b, integer, lo, hi, msg, sizeof(msg)))
		return exl_js_fail(c, "%s", msg);
	return 0;
}

/* ---- arrays ---- */

/* The values' JSON texts as a prefix tree of rules, so a long enum does
 * not start one parse stack per value: texts[lo..hi) (sorted) share
 * their first d bytes; the rule spells what follows. */
struct text {
	char *s;
	size_t n;
};

static int cmp_text(const void *a, const void *b)
{
	const struct text *x = a, *y = b;
	size_t n = x->n < y->n ? x->n : y->n;
	int r = memcmp(x->s, y->s, n);

	return r ? r : x->n < y->n ? -1 : x->n > y->n;
}

/* Length of the UTF-8 character starting with byte b. */
static size_t char_len(unsigned char b)
{
	return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

static int text_tree(struct js_conv *c, struct exl_gbnf_out *b, const struct text *t, size_t lo,
		     size_t hi, size_t d)
{
	struct exl_gbnf_out body;
	char name[JS_NAME_LEN];
	bool first = true;
	int rc = -1;

	if (hi - lo == 1) {
		if (t[lo].n > d)
			exl_gbnf_literal(b, t[lo].s + d, t[lo].n - d);
		else
			exl_gbnf_puts(b, "\"\"");
		return 0;
	}
	/* Common prefix beyond d, cut back to a character boundary. */
	size_t common = d, k = d;

	while (k < t[lo].n && k < t[hi - 1].n && t[lo].s[k] == t[hi - 1].s[k]) {
		k++;
		if (k == t[lo].n || ((unsigned char)t[lo].s[k] & 0xC0) != 0x80)
			common = k;
	}
	exl_gbnf_init(&body);
	if (common > d) {
		exl_gbnf_literal(&body, t[lo].s + d, common - d);
		exl_gbnf_puts(&body, " ");
	}
	exl_gbnf_puts(&body, "( ");
	for (size_t i = lo; i < hi; ) {
		size_t j = i + 1;

		if (t[i].n == common) {
			/* A value ends here (it sorts first). */
			exl_gbnf_puts(&body, first ? "\"\"" : " | \"\"");
			first = false;
			i = j;
			continue;
		}
		size_t cl = char_len((unsigned char)t[i].s[common]);

		while (j < hi && t[j].n >= common + cl && !memcmp(t[j].s + common, t[i].s + common, cl))
			j++;
		if (!first)
			exl_gbnf_puts(&body, " | ");
		first = false;
		if (j - i == 1) {
			exl_gbnf_literal(&body, t[i].s + common, t[i].n - common);
		} else {
			exl_gbnf_literal(&body, t[i].s + common, cl);
			exl_gbnf_puts(&body, " ");
			if (text_tree(c, &body, t, i, j, common + cl))
				goto out;
		}
		i = j;
	}
	exl_gbnf_puts(&body, " )");
	exl_gbnf_name(&c->o, "enum", name, sizeof(name));
	exl_gbnf_printf(&c->o, "%s ::= ", name);
	exl_gbnf_put(&c->o, body.s ? body.s : "", body.len);
	exl_gbnf_puts(&c->o, "\n");
	exl_gbnf_puts(b, name);
	rc = 0;
out:
	exl_gbnf_free(&body);
	return rc;
}

static void put_out_text(void *u, const char *s, size_t n)
{
	exl_gbnf_put(u, s, n);
}

static int enum_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	static const char *const allowed[] = { "enum", "const", "type", "nullable", NULL };
	const struct exl_json *e = exl_json_get(s, "enum"), *k = exl_json_get(s, "const");
	const char *kw = e ? "enum" : "const";
	unsigned mask = JS_T_ALL;
	int other = exl_js_other_keyword(s, allowed);
	struct text *texts = NULL;
	size_t n_texts = 0, m = 0;
	int rc = -1;

	if (other >= 0)
		return exl_js_kfail(c, s->keys[other], "'%s' together with '%s' is not supported",
			     kw, s->keys[other]);
	if ((exl_json_get(s, "type") || exl_json_get(s, "nullable")) &&
	    exl_js_type_mask(c, s, &mask))
		return -1;
	if (e && e->type != EXL_JSON_ARRAY)
		return exl_js_kfail(c, "enum", "'enum' must be a list");
	size_t n = e ? e->n : 1;

	texts = calloc(n + 1, sizeof(*texts));
	if (!texts)
		return exl_js_oom(c);
	for (size_t i = 0; i < n; i++) {
		const struct exl_json *v = e ? e->v[i] : k;
		struct exl_gbnf_out t;

		if (!value_has_type(v, mask))
			continue;
		if (e && k && !exl_json_equal(v, k))
			continue;
		exl_gbnf_init(&t);
		exl_json_write(v, put_out_text, &t);
		texts[n_texts].s = exl_gbnf_take(&t);
		if (!texts[n_texts].s) {
			exl_js_oom(c);
			goto out;
		}
		texts[n_texts].n = strlen(texts[n_texts].s);
		n_texts++;
	}
	if (!n_texts) {
		exl_js_kfail(c, kw, "no value of '%s' has the schema's type", kw);
		goto out;
	}
	qsort(texts, n_texts, sizeof(*texts), cmp_text);
	for (size_t i = 0; i < n_texts; i++)
		if (!m || cmp_text(&texts[m - 1], &texts[i]))
			texts[m++] = texts[i];
		else
			free(texts[i].s);
	n_texts = m;
	rc = text_tree(c, b, texts, 0, n_texts, 0);
out:
	for (size_t i = 0; i < n_texts; i++)
		free(texts[i].s);
	free(texts);
	return rc;
}

static int any_of_body(struct js_conv *c, const struct exl_json *s, const char *kw,
		       struct exl_gbnf_out *b)
{
	static const char *const allowed[] = { "anyOf", "oneOf", NULL };
	const struct exl_json *l = exl_json_get(s, kw);
	int other = exl_js_other_keyword(s, allowed);
	char name[JS_NAME_LEN];

	if (other >= 0)
		return exl_js_kfail(c, s->keys[other], "'%s' together with '%s' is not supported",
				    kw, s->keys[other]);
	if (exl_json_get(s, "anyOf") && exl_json_get(s, "oneOf"))
		return exl_js_kfail(c, "oneOf", "'anyOf' together with 'oneOf' is not supported");
	if (l->type != EXL_JSON_ARRAY || !l->n)
		return exl_js_kfail(c, kw, "'%s' must be a non-empty list of schemas", kw);
	exl_gbnf_puts(b, "( ");
	for (size_t i = 0; i < l->n; i++) {
		size_t old = exl_js_path_push_str(c, kw);
		size_t old2 = exl_js_path_push_index(c, i);

		if (exl_js_gen(c, l->v[i], name))
			return -1;
		exl_js_path_pop(c, old2);
		exl_js_path_pop(c, old);
		exl_gbnf_printf(b, "%s%s", i ? " | " : "", name);
	}
	exl_gbnf_puts(b, " )");
	/* The alternation is oneOf only when no value matches two branches. */
	if (!strcmp(kw, "oneOf") && exl_js_one_of_check(c, l))
		return -1;
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
int exl_js_schema_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	if (s->type == EXL_JSON_BOOL) {
		if (!s->b)
			return exl_js_fail(c, "the schema false allows no value");
		exl_gbnf_puts(b, "js-value");
		return 0;
	}
	if (s->type != EXL_JSON_OBJECT)
		return exl_js_fail(c, "a schema must be an object or a boolean, not %s %s",
			     s->type == EXL_JSON_ARRAY ? "an" : "a", exl_json_type_name(s->type));
	for (size_t i = 0; i < s->n; i++) {
		const char *k = s->keys[i];

		if (!exl_js_is_annotation(k) && !exl_js_is_supported(k))
			return exl_js_kfail(c, k, "keyword '%s' is not supported", k);
	}
	if (exl_json_get(s, "$ref")) {
		static const char *const only_ref[] = { "$ref", NULL };
		int other = exl_js_other_keyword(s, only_ref);
		char name[JS_NAME_LEN];

		if (other >= 0)
			return exl_js_kfail(c, s->keys[other], "'$ref' together with '%s' is not supported",
				     s->keys[other]);
		if (ref_name(c, s, name))
			return -1;
		exl_gbnf_puts(b, name);
		return 0;
	}
	if (exl_json_get(s, "allOf"))
		return exl_js_all_of_body(c, s, b);
	if (exl_json_get(s, "anyOf"))
		return any_of_body(c, s, "anyOf", b);
	if (exl_json_get(s, "oneOf"))
		return any_of_body(c, s, "oneOf", b);
	if (exl_json_get(s, "enum") || exl_json_get(s, "const"))
		return enum_body(c, s, b);
	unsigned mask;

	if (exl_js_type_mask(c, s, &mask))
		return -1;
	if (mask == JS_T_ALL) {
		exl_gbnf_puts(b, "js-value");
		return 0;
	}
	if ((mask & JS_T_NUM))
		mask &= ~(unsigned)JS_T_INT;
	int n = 0;

	for (unsigned t = mask; t; t &= t - 1)
		n++;
	if (n > 1)
		exl_gbnf_puts(b, "( ");
	bool first = true;

	for (unsigned bit = 1; bit <= JS_T_OBJ; bit <<= 1) {
		int rc = 0;

		if (!(mask & bit))
			continue;
		if (!first)
			exl_gbnf_puts(b, " | ");
		first = false;
		switch (bit) {
		case JS_T_NULL: exl_gbnf_puts(b, "js-null"); break;
		case JS_T_BOOL: exl_gbnf_puts(b, "js-boolean"); break;
		case JS_T_INT: rc = number_body(c, s, true, b); break;
		case JS_T_NUM: rc = number_body(c, s, false, b); break;
		case JS_T_STR: rc = string_body(c, s, b); break;
		case JS_T_ARR: rc = exl_js_array_body(c, s, b); break;
		case JS_T_OBJ: rc = exl_js_object_body(c, s, b); break;
		}
		if (rc)
			return -1;
	}
	if (n > 1)
		exl_gbnf_puts(b, " )");
	return 0;
}

static int gen_into(struct js_conv *c, const struct exl_json *s, const char *name)
{
	struct exl_gbnf_out body;
	int rc;

	if (++c->depth > MAX_NESTING) {
		c->depth--;
		return exl_js_fail(c, "schemas nested deeper than %d", MAX_NESTING);
	}
	exl_gbnf_init(&body);
	rc = exl_js_schema_body(c, s, &body);
	c->depth--;
	if (!rc && body.oom)
		rc = exl_js_oom(c);
	if (!rc) {
		exl_gbnf_printf(&c->o, "%s ::= ", name);
		exl_gbnf_put(&c->o, body.s, body.len);
		exl_gbnf_puts(&c->o, "\n");
	}
	exl_gbnf_free(&body);
	return rc;
}

char *exl_json_schema_to_gbnf(const char *text, size_t len, char *err, size_t errlen)
{
	struct js_conv c = { .err = err, .errlen = errlen };
	char msg[300], name[JS_NAME_LEN], *gbnf = NULL;

	c.doc = exl_json_parse(text, len, msg, sizeof(msg));
	if (!c.doc) {
		snprintf(err, errlen, "the schema is not valid JSON: %s", msg);
		return NULL;
	}
	c.root = exl_json_root(c.doc);
	exl_gbnf_init(&c.o);
	if (exl_js_gen(&c, c.root, name))
		goto out;
	exl_gbnf_printf(&c.o, "root ::= js-ws %s\n", name);
	exl_js_emit_fixed_rules(&c.o);
	if (c.o.oom) {
		exl_js_oom(&c);
		goto out;
	}
	gbnf = exl_gbnf_take(&c.o);
	if (!gbnf)
		exl_js_oom(&c);
out:
	exl_gbnf_free(&c.o);
	exl_json_free(c.doc);
	free(c.refs);
	return gbnf;
}
