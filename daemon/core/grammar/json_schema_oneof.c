/* JSON schema -> GBNF: is a oneOf exact?
 *
 * A oneOf is written as the alternation of its branches, which is exact
 * only when no value the grammar writes for one branch is also valid under
 * another (a value matching two branches is invalid).  This proves that for
 * each ordered pair of branches (A, B), or says it cannot:
 *
 *   - the JSON types A's grammar writes and B allows have nothing in
 *     common ("integer" is part of "number": an integral number is both);
 *   - every const / enum value of A is invalid under B, or of B under A;
 *   - for each type both allow, a reason it cannot be the same value:
 *     numbers: the minimum / maximum ranges do not meet; strings: the
 *     minLength / maxLength ranges; arrays: minItems / maxItems; objects:
 *     a property one of them requires whose schemas on the two sides
 *     exclude each other (a const / enum tag: the common discriminated
 *     union), or one that one side requires and the other does not allow
 *     (additionalProperties: false).
 *
 * "Writes" and "allows" differ on purpose.  A's side is what its grammar
 * produces: {"properties": ...} without "type" writes only objects.  B's
 * side is what a validator accepts: that same schema accepts any string,
 * so a string branch overlaps it.  Every check over-approximates both
 * sides (a keyword not understood constrains nothing), so a "yes" is a
 * proof; a "no" refuses the schema.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/json_parse.h"
#include "daemon/core/grammar/json_schema_internal.h"

#define MAX_DEPTH 24
/* Work for one oneOf (value comparisons, schema visits): a huge enum
 * against another is refused rather than compared for seconds. */
#define MAX_STEPS 2000000

struct prover {
	struct js_conv *c;
	long steps;
};

static const struct exl_json *get(const struct exl_json *s, const char *k)
{
	return s && s->type == EXL_JSON_OBJECT ? exl_json_get(s, k) : NULL;
}

static const struct exl_json *get_list(const struct exl_json *s, const char *k)
{
	const struct exl_json *v = get(s, k);

	return v && v->type == EXL_JSON_ARRAY ? v : NULL;
}

/* A chain of $refs followed to its schema; NULL when it does not resolve
 * (that is the converter's error to report, not ours). */
static const struct exl_json *follow(struct prover *p, const struct exl_json *s)
{
	for (int hops = 0; hops < JS_MAX_REF_CHAIN; hops++) {
		const struct exl_json *r = get(s, "$ref");

		if (!r)
			return s;
		if (r->type != EXL_JSON_STRING || exl_js_resolve(p->c, r->str, &s))
			return NULL;
	}
	return NULL;
}

static bool spend(struct prover *p, long n)
{
	p->steps += n;
	return p->steps <= MAX_STEPS;
}

/* ---- types ---- */

static unsigned value_type(const struct exl_json *v)
{
	switch (v->type) {
	case EXL_JSON_NULL: return JS_T_NULL;
	case EXL_JSON_BOOL: return JS_T_BOOL;
	case EXL_JSON_STRING: return JS_T_STR;
	case EXL_JSON_ARRAY: return JS_T_ARR;
	case EXL_JSON_OBJECT: return JS_T_OBJ;
	case EXL_JSON_NUMBER:
		if (!isfinite(v->num))
			return JS_T_NUM | JS_T_INT;
		return v->num == floor(v->num) ? JS_T_INT : JS_T_NUM;
	}
	return JS_T_ALL;
}

static bool has_values(const struct exl_json *s)
{
	return get_list(s, "enum") || get(s, "const");
}

/* The types of s's own const / enum values (all when it has none). */
static unsigned values_types(const struct exl_json *s)
{
	const struct exl_json *e = get_list(s, "enum"), *k = get(s, "const");
	unsigned m = 0;

	if (k)
		return value_type(k);
	if (!e)
		return JS_T_ALL;
	for (size_t i = 0; i < e->n; i++)
		m |= value_type(e->v[i]);
	return m;
}

/* The types s allows (writes, when gen), over-approximated. */
static unsigned schema_types(struct prover *p, const struct exl_json *s, bool gen, int depth)
{
	const struct exl_json *l;
	unsigned m = JS_T_ALL, t;

	s = follow(p, s);
	if (!s || depth > MAX_DEPTH || !spend(p, 1))
		return JS_T_ALL;
	if (s->type == EXL_JSON_BOOL)
		return s->b ? JS_T_ALL : 0;
	if (s->type != EXL_JSON_OBJECT)
		return JS_T_ALL;
	/* allOf is merged: what it writes, each part allows. */
	if ((l = get_list(s, "allOf"))) {
		gen = false;
		for (size_t i = 0; i < l->n; i++)
			m &= schema_types(p, l->v[i], false, depth + 1);
	}
	if ((l = get_list(s, "anyOf")) || (l = get_list(s, "oneOf"))) {
		t = 0;
		for (size_t i = 0; i < l->n; i++)
			t |= schema_types(p, l->v[i], gen, depth + 1);
		m &= t;
	}
	m &= values_types(s);
	/* The types 'type' names, or with gen the ones the keywords imply. */
	if ((get(s, "type") || gen) && !exl_js_type_mask(p->c, s, &t))
		m &= t;
	return m;
}

/* ---- ranges ---- */

struct range {
	bool lo_set, lo_excl, hi_set, hi_excl;
	double lo, hi;
};

/* A bound we compare as the validator does: a finite number that is the
 * same value there (an integer literal beyond 2^53 might not be). */
static bool usable_bound(const struct exl_json *v)
{
	return v && v->type == EXL_JSON_NUMBER && isfinite(v->num) &&
	       !(v->is_int && fabs(v->num) > 9007199254740992.0);
}

static void tighten(struct range *r, bool lower, double v, bool excl)
{
	if (lower) {
		if (!r->lo_set || v > r->lo || (v == r->lo && excl)) {
			r->lo = v;
			r->lo_excl = excl;
		}
		r->lo_set = true;
	} else {
		if (!r->hi_set || v < r->hi || (v == r->hi && excl)) {
			r->hi = v;
			r->hi_excl = excl;
		}
		r->hi_set = true;
	}
}

/* minimum / maximum and their exclusive forms (draft 4's boolean flags
 * are left out: without them the range is wider, so still safe). */
static struct range number_range(const struct exl_json *s)
{
	static const struct { const char *kw; bool lower, excl; } kws[] = {
		{ "minimum", true, false }, { "exclusiveMinimum", true, true },
		{ "maximum", false, false }, { "exclusiveMaximum", false, true },
	};
	struct range r = { 0 };

	for (size_t i = 0; i < sizeof(kws) / sizeof(kws[0]); i++) {
		const struct exl_json *v = get(s, kws[i].kw);

		if (usable_bound(v))
			tighten(&r, kws[i].lower, v->num, kws[i].excl);
	}
	return r;
}

/* A pair of count keywords (minLength / maxLength, minItems / maxItems). */
static struct range count_range(const struct exl_json *s, const char *min_kw, const char *max_kw)
{
	const struct exl_json *lo = get(s, min_kw), *hi = get(s, max_kw);
	struct range r = { 0 };

	if (usable_bound(lo))
		tighten(&r, true, lo->num, false);
	if (usable_bound(hi))
		tighten(&r, false, hi->num, false);
	return r;
}

static bool in_range(const struct range *r, double v)
{
	if (r->lo_set && (r->lo_excl ? v <= r->lo : v < r->lo))
		return false;
	if (r->hi_set && (r->hi_excl ? v >= r->hi : v > r->hi))
		return false;
	return true;
}

/* a lies wholly below b. */
static bool below(const struct range *a, const struct range *b)
{
	if (!a->hi_set || !b->lo_set)
		return false;
	return a->hi < b->lo || (a->hi == b->lo && (a->hi_excl || b->lo_excl));
}

static bool ranges_apart(const struct range *a, const struct range *b)
{
	return below(a, b) || below(b, a);
}

/* ---- could a value be valid? ---- */

static size_t code_points(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

static const struct exl_json *member(const struct exl_json *o, const char *k, size_t kl)
{
	for (size_t i = 0; o && o->type == EXL_JSON_OBJECT && i < o->n; i++)
		if (o->key_lens[i] == kl && !memcmp(o->keys[i], k, kl))
			return o->v[i];
	return NULL;
}

static bool maybe_valid(struct prover *p, const struct exl_json *v, const struct exl_json *s,
			int depth);

static bool maybe_valid_object(struct prover *p, const struct exl_json *v, const struct exl_json *s,
			       int depth)
{
	const struct exl_json *props = get(s, "properties"), *addl = get(s, "additionalProperties");
	const struct exl_json *req = get_list(s, "required");

	for (size_t i = 0; req && i < req->n; i++)
		if (req->v[i]->type == EXL_JSON_STRING && !member(v, req->v[i]->str, req->v[i]->len))
			return false;
	for (size_t i = 0; i < v->n; i++) {
		const struct exl_json *ps = member(props, v->keys[i], v->key_lens[i]);

		if (!ps)
			ps = addl;
		if (ps && !maybe_valid(p, v->v[i], ps, depth + 1))
			return false;
	}
	return true;
}

static bool maybe_valid_array(struct prover *p, const struct exl_json *v, const struct exl_json *s,
			      int depth)
{
	const struct exl_json *prefix = get_list(s, "prefixItems"), *items = get(s, "items");

	if (!prefix && items && items->type == EXL_JSON_ARRAY) {
		prefix = items;
		items = get(s, "additionalItems");
	}
	for (size_t i = 0; i < v->n; i++) {
		const struct exl_json *is = prefix && i < prefix->n ? prefix->v[i] : items;

		if (is && !maybe_valid(p, v->v[i], is, depth + 1))
			return false;
	}
	return true;
}

/* false only when v is certainly invalid under s. */
static bool maybe_valid(struct prover *p, const struct exl_json *v, const struct exl_json *s,
			int depth)
{
	const struct exl_json *l, *k;
	unsigned t = 0;

	s = follow(p, s);
	if (!s || depth > MAX_DEPTH || !spend(p, 1))
		return true;
	if (s->type == EXL_JSON_BOOL)
		return s->b;
	if (s->type != EXL_JSON_OBJECT)
		return true;
	if ((k = get(s, "const")) && !exl_json_equal(v, k))
		return false;
	if ((l = get_list(s, "enum"))) {
		size_t i;

		if (!spend(p, (long)l->n))
			return true;
		for (i = 0; i < l->n && !exl_json_equal(v, l->v[i]); i++)
			;
		if (i == l->n)
			return false;
	}
	if (get(s, "type") && !exl_js_type_mask(p->c, s, &t) && !(value_type(v) & t))
		return false;
	if (v->type == EXL_JSON_NUMBER) {
		struct range r = number_range(s);

		if (!in_range(&r, v->num))
			return false;
	} else if (v->type == EXL_JSON_STRING) {
		struct range r = count_range(s, "minLength", "maxLength");

		if (!in_range(&r, (double)code_points(v->str, v->len)))
			return false;
	} else if (v->type == EXL_JSON_ARRAY) {
		struct range r = count_range(s, "minItems", "maxItems");

		if (!in_range(&r, (double)v->n) || !maybe_valid_array(p, v, s, depth))
			return false;
	} else if (v->type == EXL_JSON_OBJECT && !maybe_valid_object(p, v, s, depth)) {
		return false;
	}
	if ((l = get_list(s, "allOf")))
		for (size_t i = 0; i < l->n; i++)
			if (!maybe_valid(p, v, l->v[i], depth + 1))
				return false;
	if ((l = get_list(s, "anyOf")) || (l = get_list(s, "oneOf"))) {
		size_t i;

		for (i = 0; i < l->n && !maybe_valid(p, v, l->v[i], depth + 1); i++)
			;
		if (i == l->n)
			return false;
	}
	return true;
}

/* ---- objects: required properties ---- */

static bool excludes(struct prover *p, const struct exl_json *a, bool gen, const struct exl_json *b,
		     int depth, char *why, size_t whylen);

/* The schema s gives property k: its own, or additionalProperties'. */
static const struct exl_json *prop_schema(const struct exl_json *s, const char *k, size_t kl)
{
	const struct exl_json *v = member(get(s, "properties"), k, kl);

	return v ? v : get(s, "additionalProperties");
}

/* s (or a part of its allOf) allows no property k. */
static bool forbids(struct prover *p, const struct exl_json *s, const char *k, size_t kl, int depth)
{
	const struct exl_json *ps, *l;

	s = follow(p, s);
	if (!s || depth > MAX_DEPTH || !spend(p, 1))
		return false;
	ps = prop_schema(s, k, kl);
	if (ps && ps->type == EXL_JSON_BOOL && !ps->b)
		return true;
	if ((l = get_list(s, "allOf")))
		for (size_t i = 0; i < l->n; i++)
			if (forbids(p, l->v[i], k, kl, depth + 1))
				return true;
	return false;
}

/* Some schema a gives property k excludes some schema b gives it. */
static bool prop_excludes(struct prover *p, const struct exl_json *a, bool gen,
			  const struct exl_json *b, const char *k, size_t kl, int depth)
{
	const struct exl_json *sa, *sb, *l;

	a = follow(p, a);
	b = follow(p, b);
	if (!a || !b || depth > MAX_DEPTH || !spend(p, 1))
		return false;
	if ((l = get_list(b, "allOf")))
		for (size_t i = 0; i < l->n; i++)
			if (prop_excludes(p, a, gen, l->v[i], k, kl, depth + 1))
				return true;
	if ((l = get_list(a, "allOf")))
		for (size_t i = 0; i < l->n; i++)
			if (prop_excludes(p, l->v[i], false, b, k, kl, depth + 1))
				return true;
	sa = prop_schema(a, k, kl);
	sb = prop_schema(b, k, kl);
	return sa && sb && excludes(p, sa, gen, sb, depth + 1, NULL, 0);
}

/* x is a or b, or a part of its allOf: one of the properties x requires
 * tells a's objects from b's.  A property one side requires and the other
 * does not allow will do; so will one whose values on the two sides
 * exclude each other, when either side requires it (objects of the other
 * side that leave it out are invalid under the side that requires it). */
static bool told_apart(struct prover *p, const struct exl_json *a, bool gen, const struct exl_json *b,
		       const struct exl_json *x, bool x_is_a, int depth)
{
	const struct exl_json *req, *l;

	x = follow(p, x);
	if (!x || depth > MAX_DEPTH)
		return false;
	if ((req = get_list(x, "required"))) {
		for (size_t i = 0; i < req->n; i++) {
			const struct exl_json *r = req->v[i];

			if (r->type != EXL_JSON_STRING)
				continue;
			if (forbids(p, x_is_a ? b : a, r->str, r->len, 0) ||
			    prop_excludes(p, a, gen, b, r->str, r->len, depth + 1))
				return true;
		}
	}
	if ((l = get_list(x, "allOf")))
		for (size_t i = 0; i < l->n; i++)
			if (told_apart(p, a, gen, b, l->v[i], x_is_a, depth + 1))
				return true;
	return false;
}

static bool objects_apart(struct prover *p, const struct exl_json *a, bool gen, const struct exl_json *b,
			  int depth)
{
	return told_apart(p, a, gen, b, a, true, depth) || told_apart(p, a, gen, b, b, false, depth);
}

/* ---- the proof ---- */

static const char *type_words(unsigned bit)
{
	switch (bit) {
	case JS_T_NULL: return "null";
	case JS_T_BOOL: return "booleans";
	case JS_T_INT: return "integers";
	case JS_T_NUM: return "numbers";
	case JS_T_STR: return "strings";
	case JS_T_ARR: return "arrays";
	}
	return "objects, and no property tells them apart";
}

/* A value's JSON text for a message, cut to 63 bytes (whole characters). */
static void put_value(void *u, const char *s, size_t n)
{
	char *b = u;
	size_t have = strlen(b);

	if (have + n >= 64) {
		n = have < 63 ? 63 - have : 0;
		while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(b + have, s, n);
	b[have + n] = 0;
}

/* Every value a writes (its own const / enum) is invalid under b. */
static bool values_excluded(struct prover *p, const struct exl_json *a, unsigned ta,
			    const struct exl_json *b, int depth, char *why, size_t whylen)
{
	const struct exl_json *e = get_list(a, "enum"), *k = get(a, "const");
	size_t n = k ? 1 : e ? e->n : 0;

	for (size_t i = 0; i < n; i++) {
		const struct exl_json *v = k ? k : e->v[i];

		if (!(value_type(v) & ta) || !maybe_valid(p, v, b, depth + 1))
			continue;
		if (why && p->steps > MAX_STEPS) {
			snprintf(why, whylen, "too many values to compare");
		} else if (why) {
			char text[64] = "";

			exl_json_write(v, put_value, text);
			snprintf(why, whylen, "both allow %s", text);
		}
		return false;
	}
	return true;
}

/* No value a's grammar writes (every value a allows, when !gen) is valid
 * under b.  With why, says what is in common when it cannot tell. */
static bool excludes(struct prover *p, const struct exl_json *a, bool gen, const struct exl_json *b,
		     int depth, char *why, size_t whylen)
{
	static const struct exl_json empty = { .type = EXL_JSON_OBJECT };
	const struct exl_json *l;

	if (why)
		snprintf(why, whylen, "too complex to compare");
	a = follow(p, a);
	b = follow(p, b);
	if (!a || !b || depth > MAX_DEPTH || !spend(p, 1))
		return false;
	if ((a->type == EXL_JSON_BOOL && !a->b) || (b->type == EXL_JSON_BOOL && !b->b))
		return true;
	if (a->type == EXL_JSON_BOOL)
		a = &empty;
	if (b->type == EXL_JSON_BOOL)
		b = &empty;
	if (a->type != EXL_JSON_OBJECT || b->type != EXL_JSON_OBJECT)
		return false;
	/* A union on either side: each of its branches. */
	if ((l = get_list(a, "anyOf")) || (l = get_list(a, "oneOf"))) {
		for (size_t i = 0; i < l->n; i++)
			if (!excludes(p, l->v[i], gen, b, depth + 1, why, whylen))
				return false;
		return true;
	}
	if ((l = get_list(b, "anyOf")) || (l = get_list(b, "oneOf"))) {
		for (size_t i = 0; i < l->n; i++)
			if (!excludes(p, a, gen, l->v[i], depth + 1, why, whylen))
				return false;
		return true;
	}
	/* An intersection: any one of its parts will do. */
	if ((l = get_list(a, "allOf"))) {
		gen = false;
		for (size_t i = 0; i < l->n; i++)
			if (excludes(p, l->v[i], false, b, depth + 1, NULL, 0))
				return true;
	}
	if ((l = get_list(b, "allOf")))
		for (size_t i = 0; i < l->n; i++)
			if (excludes(p, a, gen, l->v[i], depth + 1, NULL, 0))
				return true;
	unsigned ta = schema_types(p, a, gen, depth), tb = schema_types(p, b, false, depth);
	unsigned common = ta & tb;

	if (!common)
		return true;
	if (has_values(a) && values_excluded(p, a, ta, b, depth, why, whylen))
		return true;
	if (has_values(b) && values_excluded(p, b, ta & tb, a, depth, why, whylen))
		return true;
	if (has_values(a) || has_values(b))
		return false;
	for (unsigned bit = 1; bit <= JS_T_OBJ; bit <<= 1) {
		struct range ra, rb;

		if (!(common & bit))
			continue;
		switch (bit) {
		case JS_T_INT:
		case JS_T_NUM:
			ra = number_range(a);
			rb = number_range(b);
			break;
		case JS_T_STR:
			ra = count_range(a, "minLength", "maxLength");
			rb = count_range(b, "minLength", "maxLength");
			break;
		case JS_T_ARR:
			ra = count_range(a, "minItems", "maxItems");
			rb = count_range(b, "minItems", "maxItems");
			break;
		case JS_T_OBJ:
			if (objects_apart(p, a, gen, b, depth))
				continue;
			/* fall through */
		default:
			if (why)
				snprintf(why, whylen, "both allow %s", type_words(bit));
			return false;
		}
		if (!ranges_apart(&ra, &rb)) {
			if (why)
				snprintf(why, whylen, "both allow %s", type_words(bit));
			return false;
		}
	}
	return true;
}

int exl_js_one_of_check(struct js_conv *c, const struct exl_json *l)
{
	struct prover p = { .c = c };
	char why[160];

	for (size_t i = 0; i < l->n; i++) {
		for (size_t j = i + 1; j < l->n; j++) {
			if (excludes(&p, l->v[i], true, l->v[j], 0, why, sizeof(why)) &&
			    excludes(&p, l->v[j], true, l->v[i], 0, why, sizeof(why)))
				continue;
			return exl_js_kfail(c, "oneOf", "branches %zu and %zu may both match one value (%s), "
				     "and a value matching two oneOf branches is invalid: make the "
				     "branches exclude each other (different types, different const / "
				     "enum values, ranges that do not meet, or objects with a required "
				     "property whose values differ), or use anyOf", i, j, why);
		}
	}
	return 0;
}
