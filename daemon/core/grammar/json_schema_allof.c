/* JSON schema -> GBNF: allOf, merged into one schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_parse.h"
#include "daemon/core/grammar/json_schema_internal.h"

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
		if (!exl_js_is_annotation(v->keys[i]))
			return false;
	return true;
}

static int merge_in(struct js_conv *c, struct merge *m, const struct exl_json *s, int depth);

static int merge_branch(struct js_conv *c, struct merge *m, const struct exl_json *br, int depth)
{
	static const char *const only_ref[] = { "$ref", NULL };

	/* Follow bare references. */
	for (int hops = 0; br->type == EXL_JSON_OBJECT; hops++) {
		const struct exl_json *r = exl_json_get(br, "$ref");

		if (!r)
			break;
		if (exl_js_other_keyword(br, only_ref) >= 0)
			return exl_js_fail(c, "an allOf branch with '$ref' and other keywords "
					   "is not supported");
		if (r->type != EXL_JSON_STRING)
			return exl_js_fail(c, "'$ref' must be a string");
		if (hops == JS_MAX_REF_CHAIN)
			return exl_js_fail(c, "$ref chain longer than %d", JS_MAX_REF_CHAIN);
		if (exl_js_resolve(c, r->str, &br))
			return -1;
	}
	if (br->type == EXL_JSON_BOOL) {
		if (br->b)
			return 0;
		return exl_js_fail(c, "an allOf branch is false: no value is valid");
	}
	if (br->type != EXL_JSON_OBJECT)
		return exl_js_fail(c, "an allOf branch must be a schema");
	return merge_in(c, m, br, depth + 1);
}

static int merge_in(struct js_conv *c, struct merge *m, const struct exl_json *s, int depth)
{
	if (depth > 16)
		return exl_js_fail(c, "allOf nested deeper than 16");
	const struct exl_json *props = exl_json_get(s, "properties");
	const struct exl_json *addl = exl_json_get(s, "additionalProperties");

	if (props && props->type != EXL_JSON_OBJECT)
		return exl_js_kfail(c, "properties", "'properties' must be an object");
	if (addl && addl->type != EXL_JSON_BOOL && addl->type != EXL_JSON_OBJECT)
		return exl_js_kfail(c, "additionalProperties", "'additionalProperties' must be a boolean "
			     "or a schema");
	if (props || addl) {
		if (grow_arr((void **)&m->parts, &m->cap_parts, m->n_parts + 1, sizeof(*m->parts)))
			return exl_js_oom(c);
		m->parts[m->n_parts].props = props;
		m->parts[m->n_parts].addl = addl;
		m->n_parts++;
	}
	for (size_t i = 0; i < s->n; i++) {
		const char *k = s->keys[i];
		const struct exl_json *v = s->v[i];

		if (exl_js_is_annotation(k) || !strcmp(k, "properties") || !strcmp(k, "additionalProperties"))
			continue;
		if (!exl_js_is_supported(k))
			return exl_js_kfail(c, k, "keyword '%s' is not supported", k);
		if (!strcmp(k, "allOf")) {
			if (v->type != EXL_JSON_ARRAY)
				return exl_js_kfail(c, k, "'allOf' must be a list of schemas");
			for (size_t j = 0; j < v->n; j++) {
				size_t old = exl_js_path_push_str(c, "allOf");
				size_t old2 = exl_js_path_push_index(c, j);

				if (merge_branch(c, m, v->v[j], depth))
					return -1;
				exl_js_path_pop(c, old2);
				exl_js_path_pop(c, old);
			}
		} else if (!strcmp(k, "$ref")) {
			return exl_js_kfail(c, k, "'$ref' together with 'allOf' is not supported");
		} else if (!strcmp(k, "required")) {
			if (v->type != EXL_JSON_ARRAY)
				return exl_js_kfail(c, k, "'required' must be a list of strings");
			for (size_t j = 0; j < v->n; j++) {
				if (grow_arr((void **)&m->req, &m->cap_req, m->n_req + 1, sizeof(*m->req)))
					return exl_js_oom(c);
				m->req[m->n_req++] = v->v[j];
			}
		} else if (!strcmp(k, "type")) {
			unsigned t = 0;

			if (v->type == EXL_JSON_ARRAY) {
				for (size_t j = 0; j < v->n; j++)
					if (exl_js_type_bit(c, v->v[j], &t))
						return -1;
			} else if (exl_js_type_bit(c, v, &t)) {
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
					return exl_js_kfail(c, k, "allOf: '%s' differs between branches", k);
				continue;
			}
			if (add_member(&m->kw, &m->n_kw, &m->cap_kw, k, s->key_lens[i], v))
				return exl_js_oom(c);
		}
	}
	return 0;
}

static struct exl_json *string_node(struct js_conv *c, const char *str)
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
static int merge_properties(struct js_conv *c, const struct merge *m, struct exl_json *o)
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
				exl_js_oom(c);
				goto out;
			}
		}
		if (a && a->type == EXL_JSON_BOOL && !a->b) {
			closed = true;
		} else if (a && !trivially_true(a)) {
			if (addl && !exl_json_equal(addl, a)) {
				exl_js_fail(c, "allOf: the branches' additionalProperties differ");
				goto out;
			}
			addl = a;
		}
	}
	size_t kept = 0;
	struct exl_json *props = exl_json_new(c->doc, EXL_JSON_OBJECT, n);

	if (!props) {
		exl_js_oom(c);
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
				exl_js_fail(c, "allOf: property '%.60s' has different schemas in two branches",
				      keys[k].k);
				goto out;
			}
			sch = v;
		}
		if (forbidden) {
			if (is_required(m, keys[k].k, keys[k].kl)) {
				exl_js_fail(c, "allOf: property '%.60s' is required, but a branch "
					    "with additionalProperties: false does not declare it",
					    keys[k].k);
				goto out;
			}
			continue;
		}
		if (!sch) {
			struct exl_json *t = exl_json_new(c->doc, EXL_JSON_BOOL, 0);

			if (!t) {
				exl_js_oom(c);
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
				exl_js_oom(c);
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

/* The merged schema, as a new object in the document. */
static struct exl_json *merged_schema(struct js_conv *c, const struct merge *m, int *rc)
{
	static const char *const type_names[] = { "null", "boolean", "integer", "number", "string",
						  "array", "object" };
	static const unsigned bits[] = { JS_T_NULL, JS_T_BOOL, JS_T_INT, JS_T_NUM, JS_T_STR, JS_T_ARR, JS_T_OBJ };
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
			if (!(m->types & bits[i]) || (bits[i] == JS_T_INT && (m->types & JS_T_NUM)))
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

int exl_js_all_of_body(struct js_conv *c, const struct exl_json *s, struct exl_gbnf_out *b)
{
	struct merge m = { 0 };
	const struct exl_json *o;
	int rc = -1, mrc;
	size_t old;

	if (merge_in(c, &m, s, 0))
		goto out;
	old = exl_js_path_push_str(c, "allOf");
	if (m.has_type && !m.types) {
		exl_js_fail(c, "allOf: the branches allow no common type");
		goto out;
	}
	o = merged_schema(c, &m, &mrc);
	if (!o) {
		if (mrc < 0)
			exl_js_oom(c);
		goto out;
	}
	exl_js_path_pop(c, old);
	rc = exl_js_schema_body(c, o, b);
out:
	free(m.kw);
	free(m.parts);
	free(m.req);
	return rc;
}

/* ---- one schema ---- */

