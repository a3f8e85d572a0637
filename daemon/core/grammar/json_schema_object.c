/* JSON schema -> GBNF: objects and arrays.
 *
 * Objects keep the properties in schema order; an optional property may
 * be left out.  With properties p0..pn-1, "G_i" is the body from p_i on
 * when nothing was written yet and "T_i" when something was (so it starts
 * with a comma):
 *   T_i = ws "," ws m_i T_i+1        (p_i required)
 *       | ( ws "," ws m_i )? T_i+1   (optional)
 *   G_i = m_i T_i+1 | G_i+1          (the second only when optional)
 * and T_n / G_n are the additional properties, if allowed.  Arrays are
 * the prefix items, each optional from minItems on, then the items
 * schema repeated up to maxItems.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_parse.h"
#include "daemon/core/grammar/json_schema.h"
#include "daemon/core/grammar/json_schema_internal.h"

int exl_js_array_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	const struct exl_json *prefix = exl_json_get(s, "prefixItems");
	const struct exl_json *items = exl_json_get(s, "items");
	const struct exl_json *uniq = exl_json_get(s, "uniqueItems");
	const char *items_kw = "items";
	long min = 0, max = -1;
	char (*pn)[JS_NAME_LEN] = NULL, iname[JS_NAME_LEN] = "js-value", base[JS_NAME_LEN];
	int rc = -1;

	if (uniq && !(uniq->type == EXL_JSON_BOOL && !uniq->b))
		return exl_js_kfail(c, "uniqueItems", "uniqueItems: true is not supported");
	if (exl_js_get_count(c, s, "minItems", &min) || exl_js_get_count(c, s, "maxItems", &max))
		return -1;
	if (exl_json_get(s, "additionalItems") && !(items && items->type == EXL_JSON_ARRAY))
		return exl_js_kfail(c, "additionalItems",
				    "'additionalItems' is supported only with 'items' as a list");
	if (!prefix && items && items->type == EXL_JSON_ARRAY) {
		/* drafts 4-7: items as a list is prefixItems */
		prefix = items;
		items = exl_json_get(s, "additionalItems");
		items_kw = "additionalItems";
	} else if (prefix && prefix->type != EXL_JSON_ARRAY) {
		return exl_js_kfail(c, "prefixItems", "'prefixItems' must be a list of schemas");
	}
	size_t k = prefix ? prefix->n : 0;
	bool items_false = items && items->type == EXL_JSON_BOOL && !items->b;

	if (min > EXL_SCHEMA_MAX_COUNT)
		return exl_js_kfail(c, "minItems", "minItems above %d is not supported", EXL_SCHEMA_MAX_COUNT);
	if (max > EXL_SCHEMA_MAX_COUNT)
		max = EXL_SCHEMA_MAX_COUNT;
	if (items_false && (max < 0 || (size_t)max > k))
		max = (long)k;
	if (max >= 0 && max < min)
		return exl_js_kfail(c, "maxItems", "the array cannot hold minItems items");
	if (max == 0) {
		exl_gbnf_puts(b, "\"[\" js-ws \"]\"");
		return 0;
	}
	size_t used_prefix = max >= 0 && (size_t)max < k ? (size_t)max : k;

	pn = calloc(k + 1, sizeof(*pn));
	if (!pn)
		return exl_js_oom(c);
	for (size_t i = 0; i < used_prefix; i++) {
		size_t old = exl_js_path_push_str(c, prefix == exl_json_get(s, "items") ? "items" :
					   "prefixItems");
		size_t old2 = exl_js_path_push_index(c, i);

		if (exl_js_gen(c, prefix->v[i], pn[i]))
			goto out;
		exl_js_path_pop(c, old2);
		exl_js_path_pop(c, old);
	}
	if ((max < 0 || (size_t)max > k) && items && !items_false &&
	    exl_js_gen_at(c, items, items_kw, iname))
		goto out;
	exl_gbnf_name(&c->o, "array", base, sizeof(base));
	/* tail(i): after element i-1, for i = 1 .. */
	for (size_t i = used_prefix; i >= 1; i--) {
		exl_gbnf_printf(&c->o, "%s-t%zu ::= ", base, i);
		if (i < used_prefix) {
			bool req = (long)i < min;

			exl_gbnf_printf(&c->o, req ? "js-ws \",\" js-ws %s %s-t%zu\n" :
					"( js-ws \",\" js-ws %s %s-t%zu )?\n", pn[i], base, i + 1);
			continue;
		}
		/* the items after the prefix */
		long rmin = min - (long)i > 0 ? min - (long)i : 0;

		if (max >= 0 && (size_t)max <= i)
			exl_gbnf_puts(&c->o, "\n");
		else if (max < 0)
			exl_gbnf_printf(&c->o, "( js-ws \",\" js-ws %s ){%ld,}\n", iname, rmin);
		else
			exl_gbnf_printf(&c->o, "( js-ws \",\" js-ws %s ){%ld,%ld}\n", iname, rmin,
					max - (long)i);
	}
	if (!used_prefix) {
		/* no prefix: the first item, then the rest */
		long rmin = min > 1 ? min - 1 : 0;

		if (max >= 0)
			exl_gbnf_printf(&c->o, "%s-t1 ::= ( js-ws \",\" js-ws %s ){%ld,%ld}\n", base, iname,
					rmin, max - 1);
		else
			exl_gbnf_printf(&c->o, "%s-t1 ::= ( js-ws \",\" js-ws %s ){%ld,}\n", base, iname,
					rmin);
	}
	const char *first = used_prefix ? pn[0] : iname;

	if (min >= 1)
		exl_gbnf_printf(b, "\"[\" js-ws %s %s-t1 js-ws \"]\"", first, base);
	else
		exl_gbnf_printf(b, "\"[\" js-ws ( %s %s-t1 js-ws )? \"]\"", first, base);
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
static int not_keys_rule(struct js_conv *c, const struct keycp *keys, size_t lo, size_t hi, size_t d,
			 char *name)
{
	struct exl_gbnf_out body;
	uint32_t *excl = NULL;
	size_t n_excl = 0;
	bool first = true, ends_here = false;
	int rc = -1;

	exl_gbnf_init(&body);
	exl_gbnf_name(&c->o, "key", name, JS_NAME_LEN);
	excl = malloc((hi - lo + 4) * 2 * sizeof(*excl));
	if (!excl)
		return exl_js_oom(c);
	for (size_t i = lo; i < hi; ) {
		if (keys[i].n == d) {
			ends_here = true;
			i++;
			continue;
		}
		uint32_t ch = keys[i].cp[d];
		size_t j = i;
		char sub[JS_NAME_LEN];

		while (j < hi && keys[j].n > d && keys[j].cp[d] == ch)
			j++;
		if (not_keys_rule(c, keys, i, j, d + 1, sub))
			goto out;
		if (!first)
			exl_gbnf_puts(&body, " | ");
		exl_gbnf_char(&body, ch);
		exl_gbnf_printf(&body, " %s", sub);
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
		exl_gbnf_puts(&body, " | ");
	exl_gbnf_class(&body, excl, n_excl, true);
	exl_gbnf_puts(&body, " js-pchar*");
	if (!ends_here)
		exl_gbnf_puts(&body, " | ");
	exl_gbnf_printf(&c->o, "%s ::= ", name);
	exl_gbnf_put(&c->o, body.s, body.len);
	exl_gbnf_puts(&c->o, "\n");
	rc = 0;
out:
	free(excl);
	exl_gbnf_free(&body);
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
static int additional_key_rule(struct js_conv *c, const char *const *names, const size_t *lens,
			       size_t n, char *name)
{
	struct keycp *keys = calloc(n + 1, sizeof(*keys));
	size_t m = 0;
	int rc = -1;

	if (!keys)
		return exl_js_oom(c);
	for (size_t i = 0; i < n; i++) {
		if (!plain_key(names[i], lens[i]))
			continue;
		keys[m].cp = malloc((lens[i] + 1) * sizeof(uint32_t));
		if (!keys[m].cp) {
			exl_js_oom(c);
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

int exl_js_object_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	const struct exl_json *props = exl_json_get(s, "properties");
	const struct exl_json *req = exl_json_get(s, "required");
	const struct exl_json *addl = exl_json_get(s, "additionalProperties");
	size_t np = props ? props->n : 0, nr = req ? req->n : 0, n = 0;
	const char **names = NULL;
	size_t *lens = NULL;
	bool *required = NULL;
	char (*vn)[JS_NAME_LEN] = NULL, aval[JS_NAME_LEN] = "js-value", akey[JS_NAME_LEN], base[JS_NAME_LEN];
	bool allow_addl = !addl || addl->type != EXL_JSON_BOOL || addl->b;
	int rc = -1;

	if (props && props->type != EXL_JSON_OBJECT)
		return exl_js_kfail(c, "properties", "'properties' must be an object");
	if (req && req->type != EXL_JSON_ARRAY)
		return exl_js_kfail(c, "required", "'required' must be a list of strings");
	if (addl && addl->type != EXL_JSON_BOOL && addl->type != EXL_JSON_OBJECT)
		return exl_js_kfail(c, "additionalProperties", "'additionalProperties' must be a boolean "
			     "or a schema");
	names = calloc(np + nr + 1, sizeof(*names));
	lens = calloc(np + nr + 1, sizeof(*lens));
	required = calloc(np + nr + 1, sizeof(*required));
	vn = calloc(np + nr + 1, sizeof(*vn));
	if (!names || !lens || !required || !vn) {
		exl_js_oom(c);
		goto out;
	}
	if (addl && addl->type == EXL_JSON_OBJECT && exl_js_gen_at(c, addl, "additionalProperties", aval))
		goto out;
	for (size_t i = 0; i < np; i++) {
		size_t old = exl_js_path_push_str(c, "properties");
		size_t old2 = exl_js_path_push(c, props->keys[i], props->key_lens[i]);

		names[n] = props->keys[i];
		lens[n] = props->key_lens[i];
		if (exl_js_gen(c, props->v[i], vn[n]))
			goto out;
		exl_js_path_pop(c, old2);
		exl_js_path_pop(c, old);
		n++;
	}
	for (size_t i = 0; i < nr; i++) {
		const struct exl_json *r = req->v[i];
		size_t j;

		if (r->type != EXL_JSON_STRING) {
			exl_js_kfail(c, "required", "'required' must be a list of strings");
			goto out;
		}
		for (j = 0; j < n; j++)
			if (lens[j] == r->len && !memcmp(names[j], r->str, r->len))
				break;
		if (j == n) {
			/* Required but not described: any value the
			 * additional properties allow. */
			if (!allow_addl) {
				exl_js_kfail(c, "required", "required property '%.60s' is not in properties "
				      "and additionalProperties is false", r->str);
				goto out;
			}
			names[n] = r->str;
			lens[n] = r->len;
			snprintf(vn[n], JS_NAME_LEN, "%s", aval);
			n++;
		}
		required[j] = true;
	}
	exl_gbnf_name(&c->o, "object", base, sizeof(base));
	for (size_t i = 0; i < n; i++) {
		exl_gbnf_printf(&c->o, "%s-m%zu ::= ", base, i);
		if (exl_js_key_literal(c, &c->o, names[i], lens[i]))
			goto out;
		exl_gbnf_printf(&c->o, " js-ws \":\" js-ws %s\n", vn[i]);
	}
	if (allow_addl) {
		if (additional_key_rule(c, names, lens, n, akey))
			goto out;
		exl_gbnf_printf(&c->o, "%s-a ::= \"\\\"\" %s \"\\\"\" js-ws \":\" js-ws %s\n", base, akey,
				aval);
		exl_gbnf_printf(&c->o, "%s-t%zu ::= ( js-ws \",\" js-ws %s-a )*\n", base, n, base);
		exl_gbnf_printf(&c->o, "%s-g%zu ::= %s-a %s-t%zu\n", base, n, base, base, n);
	}
	bool any_required = false;

	for (size_t i = n; i-- > 0; ) {
		bool has_next = i + 1 < n || allow_addl;
		char next_t[JS_NAME_LEN + 32] = "";

		if (has_next)
			snprintf(next_t, sizeof(next_t), " %s-t%zu", base, i + 1);
		if (required[i])
			exl_gbnf_printf(&c->o, "%s-t%zu ::= js-ws \",\" js-ws %s-m%zu%s\n", base, i, base, i,
					next_t);
		else
			exl_gbnf_printf(&c->o, "%s-t%zu ::= ( js-ws \",\" js-ws %s-m%zu )?%s\n", base, i,
					base, i, next_t);
		exl_gbnf_printf(&c->o, "%s-g%zu ::= %s-m%zu%s", base, i, base, i, next_t);
		if (!required[i] && has_next)
			exl_gbnf_printf(&c->o, " | %s-g%zu", base, i + 1);
		exl_gbnf_puts(&c->o, "\n");
		any_required |= required[i];
	}
	if (!n && !allow_addl)
		exl_gbnf_puts(b, "\"{\" js-ws \"}\"");
	else if (any_required)
		exl_gbnf_printf(b, "\"{\" js-ws %s-g0 js-ws \"}\"", base);
	else
		exl_gbnf_printf(b, "\"{\" js-ws ( %s-g0 js-ws )? \"}\"", base);
	rc = 0;
out:
	free(names);
	free(lens);
	free(required);
	free(vn);
	return rc;
}

/* ---- combinators ---- */

