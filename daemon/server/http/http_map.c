/* OpenAI and Ollama request bodies to exld's generate settings (http_map.h). */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gen_ranges.h"
#include "common/json_parse.h"
#include "common/utf8.h"
#include "daemon/server/http/http_map.h"
#include "daemon/server/http/json_out.h"
#include "daemon/server/wire/config.h"

struct mctx {
	msgpack_zone *zone;
	struct exl_http_err *e;
	const char *prefix;           /* how the object's keys are named: "", "options." */
};

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(struct mctx *m, const char *key, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(m->e->param, sizeof(m->e->param), "%s%s", key ? m->prefix : "", key ? key : "");
	if (key)
		snprintf(m->e->msg, sizeof(m->e->msg), "%s%s: %s", m->prefix, key, msg);
	else
		snprintf(m->e->msg, sizeof(m->e->msg), "%s", msg);
	/* The messages quote the request's strings cut at a byte count, which
	 * can fall inside a character; the client gets them in JSON. */
	exl_utf8_scrub(m->e->param);
	exl_utf8_scrub(m->e->msg);
	return -1;
}

static const char *type_name(const struct exl_json *v)
{
	switch (v->type) {
	case EXL_JSON_NULL: return "null";
	case EXL_JSON_BOOL: return "a boolean";
	case EXL_JSON_NUMBER: return "a number";
	case EXL_JSON_STRING: return "a string";
	case EXL_JSON_ARRAY: return "an array";
	case EXL_JSON_OBJECT: return "an object";
	}
	return "a value";
}

/* A member; null counts as absent, as clients send null for "not set". */
static const struct exl_json *get(const struct exl_json *obj, const char *key)
{
	const struct exl_json *v = exl_json_get(obj, key);

	return v && v->type != EXL_JSON_NULL ? v : NULL;
}

static void *zalloc(struct mctx *m, size_t n)
{
	return msgpack_zone_malloc(m->zone, n ? n : 1);
}

/* A NUL-terminated copy in the zone; a NUL inside is refused when
 * nul_ok is false (the generator takes C strings). */
static char *zstr(struct mctx *m, const char *key, const char *s, size_t len, bool nul_ok)
{
	if (!nul_ok && memchr(s, 0, len)) {
		fail(m, key, "holds a NUL character");
		return NULL;
	}
	char *c = zalloc(m, len + 1);
	if (!c) {
		fail(m, key, "out of memory");
		return NULL;
	}
	memcpy(c, s, len);
	c[len] = 0;
	return c;
}

static int get_bool(struct mctx *m, const struct exl_json *obj, const char *key, bool *out)
{
	const struct exl_json *v = get(obj, key);

	if (!v)
		return 0;
	if (v->type != EXL_JSON_BOOL)
		return fail(m, key, "wants a boolean, got %s", type_name(v));
	*out = v->b;
	return 0;
}

static bool integral(const struct exl_json *v)
{
	return v->type == EXL_JSON_NUMBER && isfinite(v->num) && v->num == floor(v->num);
}

/* An integer in [min, max] (a number with no fraction: 2.0 is 2). */
static int get_int(struct mctx *m, const struct exl_json *obj, const char *key, long long min,
		   long long max, long long *out)
{
	const struct exl_json *v = get(obj, key);

	if (!v)
		return 0;
	if (!integral(v) || v->num < (double)min || v->num > (double)max)
		return fail(m, key, "wants an integer in [%lld, %lld], got %s%.*s", min, max,
			    v->type == EXL_JSON_NUMBER ? "" : type_name(v),
			    v->type == EXL_JSON_NUMBER ? (int)(v->len > 40 ? 40 : v->len) : 0,
			    v->type == EXL_JSON_NUMBER ? v->str : "");
	*out = (long long)v->num;
	return 0;
}

/* A numeric setting, in the range of the protocol's key range_key
 * (common/gen_ranges.h), named key in the body. */
static int get_ranged(struct mctx *m, const struct exl_json *obj, const char *key,
		      const char *range_key, double *out, bool *present)
{
	const struct genrange *r = genrange_find(range_key);
	const struct exl_json *v = get(obj, key);
	char what[96];

	if (present)
		*present = v != NULL;
	if (!v)
		return 0;
	genrange_describe(r, what, sizeof(what));
	if (v->type != EXL_JSON_NUMBER)
		return fail(m, key, "wants %s, got %s", what, type_name(v));
	if ((r->integer && !integral(v)) || !genrange_ok(r, v->num) ||
	    (!r->integer && !genrange_ok(r, (double)(float)v->num)))
		return fail(m, key, "wants %s, got %.*s", what, (int)(v->len > 40 ? 40 : v->len),
			    v->str);
	*out = v->num;
	return 0;
}

static int get_rint(struct mctx *m, const struct exl_json *obj, const char *key,
		    const char *range_key, int *out)
{
	double d = *out;

	if (get_ranged(m, obj, key, range_key, &d, NULL))
		return -1;
	*out = (int)d;
	return 0;
}

static int get_rfloat(struct mctx *m, const struct exl_json *obj, const char *key,
		      const char *range_key, float *out)
{
	double d = *out;

	if (get_ranged(m, obj, key, range_key, &d, NULL))
		return -1;
	*out = (float)d;
	return 0;
}

/* ---- the settings exld names (and the aliases OpenAI and Ollama use) ---- */

enum kind { K_FLOAT, K_INT, K_BOOL };

#define SET(f) offsetof(struct exl_gen_settings, f)

struct skey {
	const char *name;       /* in the body */
	const char *range;      /* the protocol's key (its range); NULL for booleans */
	enum kind kind;
	size_t off;             /* in struct exl_gen_settings */
};

/* exld's own names: the msgpack protocol's keys (docs/protocol.md). */
static const struct skey exld_keys[] = {
	{ "temperature", "temperature", K_FLOAT, SET(sampling.temperature) },
	{ "temperature_last", NULL, K_BOOL, SET(sampling.temperature_last) },
	{ "top_k", "top_k", K_INT, SET(sampling.top_k) },
	{ "top_p", "top_p", K_FLOAT, SET(sampling.top_p) },
	{ "min_p", "min_p", K_FLOAT, SET(sampling.min_p) },
	{ "typical", "typical", K_FLOAT, SET(sampling.typical) },
	{ "tfs", "tfs", K_FLOAT, SET(sampling.tfs) },
	{ "top_a", "top_a", K_FLOAT, SET(sampling.top_a) },
	{ "repetition_penalty", "repetition_penalty", K_FLOAT, SET(sampling.rep_pen) },
	{ "penalty_range", "penalty_range", K_INT, SET(sampling.rep_range) },
	{ "penalty_decay", "penalty_decay", K_INT, SET(sampling.rep_decay) },
	{ "frequency_penalty", "frequency_penalty", K_FLOAT, SET(sampling.freq_pen) },
	{ "presence_penalty", "presence_penalty", K_FLOAT, SET(sampling.pres_pen) },
	{ "no_repeat_ngram", "no_repeat_ngram", K_INT, SET(sampling.no_repeat_ngram) },
	{ "dry_multiplier", "dry_multiplier", K_FLOAT, SET(sampling.dry_mult) },
	{ "dry_base", "dry_base", K_FLOAT, SET(sampling.dry_base) },
	{ "dry_allowed_length", "dry_allowed_length", K_INT, SET(sampling.dry_allowed_len) },
	{ "dry_range", "dry_range", K_INT, SET(sampling.dry_range) },
	{ "xtc_probability", "xtc_probability", K_FLOAT, SET(sampling.xtc_prob) },
	{ "xtc_threshold", "xtc_threshold", K_FLOAT, SET(sampling.xtc_thresh) },
	{ "mirostat", "mirostat", K_INT, SET(sampling.mirostat) },
	{ "mirostat_tau", "mirostat_tau", K_FLOAT, SET(sampling.mirostat_tau) },
	{ "mirostat_eta", "mirostat_eta", K_FLOAT, SET(sampling.mirostat_eta) },
	{ "min_new_tokens", "min_new_tokens", K_INT, SET(min_new_tokens) },
	{ "cfg_scale", "cfg_scale", K_FLOAT, SET(cfg_scale) },
	{ "ignore_eos", NULL, K_BOOL, SET(ignore_eos) },
	{ "token_healing", NULL, K_BOOL, SET(token_healing) },
	{ "encode_special", NULL, K_BOOL, SET(encode_special_tokens) },
	{ "decode_special", NULL, K_BOOL, SET(decode_special_tokens) },
	{ "ngram_draft", "ngram_draft", K_INT, SET(ngram_draft) },
	{ "draft_tokens", "draft_tokens", K_INT, SET(draft_tokens) },
	{ "num_beams", "num_beams", K_INT, SET(num_beams) },
	{ "length_penalty", "length_penalty", K_FLOAT, SET(length_penalty) },
};

/* Ollama's names in "options" for what exld names otherwise. */
static const struct skey ollama_keys[] = {
	{ "typical_p", "typical", K_FLOAT, SET(sampling.typical) },
	{ "tfs_z", "tfs", K_FLOAT, SET(sampling.tfs) },
	{ "repeat_penalty", "repetition_penalty", K_FLOAT, SET(sampling.rep_pen) },
	{ "repeat_last_n", "penalty_range", K_INT, SET(sampling.rep_range) },
};

static int apply_keys(struct mctx *m, const struct exl_json *obj, struct exl_gen_settings *s,
		      const struct skey *keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *field = (char *)s + keys[i].off;
		int rc = 0;

		switch (keys[i].kind) {
		case K_FLOAT:
			rc = get_rfloat(m, obj, keys[i].name, keys[i].range, (float *)(void *)field);
			break;
		case K_INT:
			rc = get_rint(m, obj, keys[i].name, keys[i].range, (int *)(void *)field);
			break;
		case K_BOOL:
			rc = get_bool(m, obj, keys[i].name, (bool *)(void *)field);
			break;
		}
		if (rc)
			return -1;
	}
	return 0;
}

/* An array of 1..max strings of 1..maxlen bytes (or one string when
 * one_ok), in the zone. */
static int get_strings(struct mctx *m, const struct exl_json *obj, const char *key, int max,
		       size_t maxlen, bool one_ok, const char *const **out, int *n)
{
	const struct exl_json *v = get(obj, key);
	const struct exl_json *const *items;
	size_t count;

	if (!v)
		return 0;
	if (v->type == EXL_JSON_STRING && one_ok) {
		items = &v;
		count = 1;
	} else if (v->type == EXL_JSON_ARRAY) {
		items = (const struct exl_json *const *)v->v;
		count = v->n;
	} else {
		return fail(m, key, "wants %san array of strings, got %s",
			    one_ok ? "a string or " : "", type_name(v));
	}
	if (count > (size_t)max)
		return fail(m, key, "%zu strings is over the limit of %d", count, max);
	const char **a = zalloc(m, sizeof(*a) * (count + 1));
	if (!a)
		return fail(m, key, "out of memory");
	for (size_t i = 0; i < count; i++) {
		if (items[i]->type != EXL_JSON_STRING)
			return fail(m, key, "item %zu: wants a string, got %s", i,
				    type_name(items[i]));
		if (items[i]->len == 0 || items[i]->len > maxlen)
			return fail(m, key, "item %zu: wants 1 to %zu bytes, got %zu", i, maxlen,
				    items[i]->len);
		a[i] = zstr(m, key, items[i]->str, items[i]->len, false);
		if (!a[i])
			return -1;
	}
	*out = a;
	*n = (int)count;
	return 0;
}

/* stop: a string, or an array of strings and token ids. */
static int get_stop(struct mctx *m, const struct exl_json *obj, const char *key,
		    struct exl_gen_settings *s)
{
	const struct exl_json *v = get(obj, key);
	const struct exl_json *const *items;
	size_t count;
	int n_str = 0, n_tok = 0;

	if (!v)
		return 0;
	if (v->type == EXL_JSON_STRING) {
		items = &v;
		count = 1;
	} else if (v->type == EXL_JSON_ARRAY) {
		items = (const struct exl_json *const *)v->v;
		count = v->n;
	} else {
		return fail(m, key, "wants a string or an array of strings, got %s", type_name(v));
	}
	if (count > EXL_GEN_MAX_STOP_STRINGS + EXL_GEN_MAX_STOP_TOKENS)
		return fail(m, key, "%zu stop conditions is over the limit of %d", count,
			    EXL_GEN_MAX_STOP_STRINGS + EXL_GEN_MAX_STOP_TOKENS);
	const char **strs = zalloc(m, sizeof(*strs) * (count + 1));
	int32_t *toks = zalloc(m, sizeof(*toks) * (count + 1));
	if (!strs || !toks)
		return fail(m, key, "out of memory");
	for (size_t i = 0; i < count; i++) {
		const struct exl_json *it = items[i];

		if (it->type == EXL_JSON_STRING) {
			/* OpenAI's clients send "" for no stop string */
			if (it->len == 0)
				continue;
			if (n_str >= EXL_GEN_MAX_STOP_STRINGS)
				return fail(m, key, "more than %d stop strings",
					    EXL_GEN_MAX_STOP_STRINGS);
			if (it->len > EXL_GEN_MAX_STRING_LEN)
				return fail(m, key, "item %zu: a stop string wants at most %d bytes, "
					    "got %zu", i, EXL_GEN_MAX_STRING_LEN, it->len);
			strs[n_str] = zstr(m, key, it->str, it->len, false);
			if (!strs[n_str++])
				return -1;
		} else if (integral(it) && it->num >= 0 && it->num <= INT32_MAX) {
			if (n_tok >= EXL_GEN_MAX_STOP_TOKENS)
				return fail(m, key, "more than %d stop tokens",
					    EXL_GEN_MAX_STOP_TOKENS);
			toks[n_tok++] = (int32_t)it->num;
		} else {
			return fail(m, key, "item %zu: wants a string or a token id, got %s", i,
				    type_name(it));
		}
	}
	s->stop_strings = strs;
	s->n_stop_strings = n_str;
	s->stop_tokens = toks;
	s->n_stop_tokens = n_tok;
	return 0;
}

/* logit_bias (OpenAI) / token_bias (exld): {"id": bias} or [[id, bias]]. */
static int get_bias(struct mctx *m, const struct exl_json *obj, const char *key,
		    struct exl_req_generate *g)
{
	const struct exl_json *v = get(obj, key);
	const struct genrange *r = genrange_find("token_bias");
	char what[96];

	if (!v)
		return 0;
	if (g->bias)
		return fail(m, key, "give logit_bias or token_bias, not both");
	genrange_describe(r, what, sizeof(what));
	if (v->type != EXL_JSON_OBJECT && v->type != EXL_JSON_ARRAY)
		return fail(m, key, "wants an object token id -> bias, got %s", type_name(v));
	if (v->n > EXL_GEN_MAX_BIAS)
		return fail(m, key, "%zu entries is over the limit of %d", v->n, EXL_GEN_MAX_BIAS);
	g->bias = zalloc(m, sizeof(*g->bias) * (v->n + 1));
	if (!g->bias)
		return fail(m, key, "out of memory");
	for (size_t i = 0; i < v->n; i++) {
		const struct exl_json *b;
		double id;

		if (v->type == EXL_JSON_OBJECT) {
			char *end;
			const char *k = v->keys[i];

			id = k[0] >= '0' && k[0] <= '9' ? strtod(k, &end) : -1;
			if (id < 0 || *end || id != floor(id) || id > INT32_MAX || v->key_lens[i] > 10)
				return fail(m, key, "key \"%.*s\": wants a token id", 
					    (int)(v->key_lens[i] > 20 ? 20 : v->key_lens[i]), k);
			b = v->v[i];
		} else {
			const struct exl_json *pair = v->v[i];

			if (pair->type != EXL_JSON_ARRAY || pair->n != 2 || !integral(pair->v[0]) ||
			    pair->v[0]->num < 0 || pair->v[0]->num > INT32_MAX)
				return fail(m, key, "item %zu: wants [token id, bias]", i);
			id = pair->v[0]->num;
			b = pair->v[1];
		}
		if (b->type != EXL_JSON_NUMBER || !genrange_ok(r, b->num) ||
		    !genrange_ok(r, (double)(float)b->num))
			return fail(m, key, "item %zu: wants %s as bias", i, what);
		g->bias[i].id = (int32_t)id;
		g->bias[i].bias = (float)b->num;
	}
	g->s.sampling.bias = g->bias;
	g->s.sampling.n_bias = (int)v->n;
	return 0;
}

/* A JSON value's compact text, NUL-terminated in the zone. */
static const char *zjson(struct mctx *m, const char *key, const struct exl_json *v, size_t *len)
{
	struct exl_jw w;
	const char *out = NULL;

	exl_jw_init(&w);
	exl_jw_json(&w, v);
	if (exl_jw_failed(&w))
		fail(m, key, "out of memory");
	else
		out = zstr(m, key, w.buf ? w.buf : "", w.len, true);
	if (out && len)
		*len = w.len;
	exl_jw_free(&w);
	return out;
}

/* A constraint: at most one of grammar, json_schema, regex and a JSON
 * response format over the whole request. */
static int set_constraint(struct mctx *m, const char *key, struct exl_req_generate *g,
			  const char **slot, const char *text)
{
	if (g->grammar || g->json_schema || g->regex)
		return fail(m, key, "give at most one of grammar, json_schema, regex and a JSON "
			    "response format");
	*slot = text;
	return 0;
}

static const char any_object_schema[] = "{\"type\":\"object\"}";

/* response_format (OpenAI): {"type": "text" | "json_object" | "json_schema",
 * "json_schema": {"schema": {...}}} */
static int get_response_format(struct mctx *m, const struct exl_json *obj,
			       struct exl_req_generate *g)
{
	const struct exl_json *v = get(obj, "response_format");

	if (!v)
		return 0;
	if (v->type != EXL_JSON_OBJECT)
		return fail(m, "response_format", "wants an object, got %s", type_name(v));
	const struct exl_json *t = get(v, "type");
	if (!t || t->type != EXL_JSON_STRING)
		return fail(m, "response_format.type", "wants \"text\", \"json_object\" or "
			    "\"json_schema\"");
	if (!strcmp(t->str, "text"))
		return 0;
	if (!strcmp(t->str, "json_object"))
		return set_constraint(m, "response_format", g, &g->json_schema, any_object_schema);
	if (strcmp(t->str, "json_schema"))
		return fail(m, "response_format.type", "wants \"text\", \"json_object\" or "
			    "\"json_schema\", got \"%.*s\"", (int)(t->len > 32 ? 32 : t->len), t->str);
	const struct exl_json *js = get(v, "json_schema");
	const struct exl_json *schema = js && js->type == EXL_JSON_OBJECT ? get(js, "schema") : NULL;
	if (!schema || schema->type != EXL_JSON_OBJECT)
		return fail(m, "response_format.json_schema.schema", "wants the JSON schema (an "
			    "object)");
	const char *text = zjson(m, "response_format", schema, NULL);
	return text ? set_constraint(m, "response_format", g, &g->json_schema, text) : -1;
}

/* format (Ollama): "json" or a JSON schema object. */
static int get_ollama_format(struct mctx *m, const struct exl_json *obj,
			     struct exl_req_generate *g)
{
	const struct exl_json *v = get(obj, "format");

	if (!v)
		return 0;
	if (v->type == EXL_JSON_STRING) {
		if (v->len == 0)
			return 0;
		if (strcmp(v->str, "json"))
			return fail(m, "format", "wants \"json\" or a JSON schema, got \"%.*s\"",
				    (int)(v->len > 32 ? 32 : v->len), v->str);
		return set_constraint(m, "format", g, &g->json_schema, any_object_schema);
	}
	if (v->type != EXL_JSON_OBJECT)
		return fail(m, "format", "wants \"json\" or a JSON schema, got %s", type_name(v));
	const char *text = zjson(m, "format", v, NULL);
	return text ? set_constraint(m, "format", g, &g->json_schema, text) : -1;
}

/* exld's constraint keys: grammar, json_schema (text or an object), regex. */
static int get_exld_constraints(struct mctx *m, const struct exl_json *obj,
				struct exl_req_generate *g)
{
	static const char *const keys[] = { "grammar", "json_schema", "regex" };
	const char **slots[] = { &g->grammar, &g->json_schema, &g->regex };

	for (int i = 0; i < 3; i++) {
		const struct exl_json *v = get(obj, keys[i]);
		const char *text;

		if (!v)
			continue;
		if (v->type == EXL_JSON_STRING)
			text = zstr(m, keys[i], v->str, v->len, false);
		else if (i == 1 && v->type == EXL_JSON_OBJECT)
			text = zjson(m, keys[i], v, NULL);
		else
			return fail(m, keys[i], "wants a string%s, got %s",
				    i == 1 ? " or a schema object" : "", type_name(v));
		if (!text || set_constraint(m, keys[i], g, slots[i], text))
			return -1;
	}
	return get_bool(m, obj, "filter_prefer_eos", &g->filter_prefer_eos);
}

/* lora: the adapters loaded for the model (by their names, as the msgpack
 * protocol's lora), each "name", ["name", scale] or {"name": "name",
 * "scale": scale}; the scale defaults to 1.  The names are resolved
 * against the model's adapters when each choice is launched. */
static int get_lora(struct mctx *m, const struct exl_json *obj, struct exl_req_generate *g)
{
	const struct exl_json *v = get(obj, "lora");

	if (!v)
		return 0;
	if (v->type != EXL_JSON_ARRAY)
		return fail(m, "lora", "wants an array of adapter names, [name, scale] or "
			    "{\"name\", \"scale\"}, got %s", type_name(v));
	if (v->n > EXL_MAX_LORAS)
		return fail(m, "lora", "%zu adapters is over the limit of %d", v->n, EXL_MAX_LORAS);
	for (size_t i = 0; i < v->n; i++) {
		const struct exl_json *it = v->v[i], *name = it, *scale = NULL;

		if (it->type == EXL_JSON_ARRAY) {
			if (it->n != 2)
				return fail(m, "lora", "item %zu: wants [name, scale], got %zu items", i,
					    it->n);
			name = it->v[0];
			scale = it->v[1];
		} else if (it->type == EXL_JSON_OBJECT) {
			name = get(it, "name");
			scale = get(it, "scale");
			if (!name)
				return fail(m, "lora", "item %zu: wants a \"name\" (llama.cpp's "
					    "numeric \"id\" is not taken: name the adapter)", i);
		}
		if (name->type != EXL_JSON_STRING || !exl_model_name_valid(name->str, name->len))
			return fail(m, "lora", "item %zu: wants an adapter name (a file name in the "
				    "model directory, without .gguf)", i);
		if (scale && (scale->type != EXL_JSON_NUMBER || !(fabs(scale->num) <= EXL_LORA_SCALE_MAX)))
			return fail(m, "lora", "item %zu: wants a scale in [%g, %g]", i,
				    -EXL_LORA_SCALE_MAX, EXL_LORA_SCALE_MAX);
		memcpy(g->lora_name[i], name->str, name->len);
		g->lora_name[i][name->len] = '\0';
		g->lora_scale[i] = scale ? (float)scale->num : 1.0f;
	}
	g->n_lora = (int)v->n;
	return 0;
}

/* Everything exld names itself, from obj (the body, or Ollama's options). */
static int get_exld_settings(struct mctx *m, const struct exl_json *obj, struct exl_req_generate *g)
{
	struct exl_gen_settings *s = &g->s;
	const struct exl_json *v;
	const char *const *list = NULL;
	int n = 0;

	if (apply_keys(m, obj, s, exld_keys, sizeof(exld_keys) / sizeof(exld_keys[0])))
		return -1;
	if ((v = get(obj, "add_bos"))) {
		if (v->type != EXL_JSON_BOOL)
			return fail(m, "add_bos", "wants a boolean, got %s", type_name(v));
		s->add_bos = v->b;
	}
	if ((v = get(obj, "seed"))) {
		if (!integral(v) || fabs(v->num) > 18446744073709551615.0)
			return fail(m, "seed", "wants an integer, got %s", type_name(v));
		s->seed = v->num < 0 ? (uint64_t)(int64_t)v->num : (uint64_t)v->num;
		s->has_seed = true;
	}
	if (get_bias(m, obj, "token_bias", g) ||
	    get_strings(m, obj, "banned_strings", EXL_GEN_MAX_BANNED, EXL_GEN_MAX_STRING_LEN, false,
			&s->banned_strings, &s->n_banned_strings) ||
	    get_strings(m, obj, "dry_sequence_breakers", EXL_SAMPLER_MAX_BREAKERS,
			EXL_SAMPLER_MAX_BREAKER_LEN - 1, false, &list, &n))
		return -1;
	if (list) {
		s->sampling.n_dry_breakers = n;
		for (int i = 0; i < n; i++)
			snprintf(s->sampling.dry_breakers[i], sizeof(s->sampling.dry_breakers[i]), "%s",
				 list[i]);
	}
	if ((v = get(obj, "negative_prompt"))) {
		if (v->type != EXL_JSON_STRING)
			return fail(m, "negative_prompt", "wants a string, got %s", type_name(v));
		g->negative.text = zstr(m, "negative_prompt", v->str, v->len, true);
		if (!g->negative.text)
			return -1;
		g->negative.len = v->len;
		g->has_negative = true;
	}
	return get_lora(m, obj, g) ? -1 : get_exld_constraints(m, obj, g);
}

/* max_tokens and its other names: the length asked for, or unset. */
static int get_length(struct mctx *m, const struct exl_json *obj, const char *key,
		      struct exl_http_gen *g)
{
	double d = 0;
	bool present = false;

	if (get_ranged(m, obj, key, "max_new_tokens", &d, &present))
		return -1;
	if (present) {
		g->gen.s.max_new_tokens = (int)d;
		g->max_tokens_set = true;
	}
	return 0;
}

/* ---- prompts and conversations ---- */

static int get_ids(struct mctx *m, const char *key, const struct exl_json *v, struct exl_prompt *p)
{
	if (v->n == 0)
		return fail(m, key, "an empty list of token ids");
	if (v->n > EXL_MAX_VALUES)
		return fail(m, key, "%zu token ids is over the limit of %d", v->n, EXL_MAX_VALUES);
	int32_t *ids = zalloc(m, sizeof(*ids) * v->n);
	if (!ids)
		return fail(m, key, "out of memory");
	for (size_t i = 0; i < v->n; i++) {
		if (!integral(v->v[i]) || v->v[i]->num < 0 || v->v[i]->num > INT32_MAX)
			return fail(m, key, "item %zu: wants a token id (an integer >= 0), got %s", i,
				    type_name(v->v[i]));
		ids[i] = (int32_t)v->v[i]->num;
	}
	p->ids = ids;
	p->n_ids = (int)v->n;
	return 0;
}

static int text_prompt(struct mctx *m, const char *key, const struct exl_json *v,
		       struct exl_prompt *p)
{
	p->text = zstr(m, key, v->str, v->len, true);
	p->len = v->len;
	return p->text ? 0 : -1;
}

/* OpenAI's prompt: a string, [string, ...], [id, ...] or [[id, ...], ...]. */
static int get_prompts(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *v = get(body, "prompt");

	if (!v)
		return fail(m, "prompt", "missing (the prompt: a string, strings, or token ids)");
	if (v->type == EXL_JSON_STRING) {
		g->n_prompts = 1;
		return text_prompt(m, "prompt", v, &g->prompts[0]);
	}
	if (v->type != EXL_JSON_ARRAY)
		return fail(m, "prompt", "wants a string, an array of strings or token ids, got %s",
			    type_name(v));
	if (v->n == 0)
		return fail(m, "prompt", "an empty array");
	if (v->v[0]->type == EXL_JSON_NUMBER) {
		g->n_prompts = 1;
		return get_ids(m, "prompt", v, &g->prompts[0]);
	}
	if (v->n > EXL_HTTP_MAX_PROMPTS)
		return fail(m, "prompt", "%zu prompts is over the limit of %d", v->n,
			    EXL_HTTP_MAX_PROMPTS);
	for (size_t i = 0; i < v->n; i++) {
		const struct exl_json *it = v->v[i];
		int rc;

		if (it->type == EXL_JSON_STRING)
			rc = text_prompt(m, "prompt", it, &g->prompts[i]);
		else if (it->type == EXL_JSON_ARRAY)
			rc = get_ids(m, "prompt", it, &g->prompts[i]);
		else
			rc = fail(m, "prompt", "item %zu: wants a string or an array of token ids, "
				  "got %s", i, type_name(it));
		if (rc)
			return -1;
	}
	g->n_prompts = (int)v->n;
	return 0;
}

/* A message's content as one string: a string, null, or OpenAI's array of
 * parts (the text parts joined). */
static int write_content(struct mctx *m, const char *key, const struct exl_json *c,
			 struct exl_jw *w)
{
	struct exl_jw t;

	if (!c) {
		exl_jw_str(w, "", 0);
		return 0;
	}
	if (c->type == EXL_JSON_STRING) {
		exl_jw_str(w, c->str, c->len);
		return 0;
	}
	if (c->type != EXL_JSON_ARRAY)
		return fail(m, key, "wants a string or an array of content parts, got %s",
			    type_name(c));
	exl_jw_init(&t);
	for (size_t i = 0; i < c->n; i++) {
		const struct exl_json *part = c->v[i];
		const struct exl_json *type = part->type == EXL_JSON_OBJECT ? get(part, "type") : NULL;
		const struct exl_json *text = part->type == EXL_JSON_OBJECT ? get(part, "text") : NULL;

		if (!type || type->type != EXL_JSON_STRING) {
			exl_jw_free(&t);
			return fail(m, key, "part %zu: wants an object with a type", i);
		}
		if (strcmp(type->str, "text") || !text || text->type != EXL_JSON_STRING) {
			exl_jw_free(&t);
			return fail(m, key, "part %zu: type \"%.*s\" is not supported (text only)", i,
				    (int)(type->len > 32 ? 32 : type->len), type->str);
		}
		exl_jw_text(&t, text->str, text->len);
	}
	exl_jw_str(w, t.buf ? t.buf : "", t.len);
	exl_jw_free(&t);
	return 0;
}

/* The conversation as the template's messages: each message's role, its
 * content flattened to a string, and its other members (name, tool_calls,
 * tool_call_id) as they came. */
/* An assistant message's tool_calls as the template gets them: OpenAI
 * sends each function's arguments as JSON text, and templates write them
 * with tojson, expecting the object (as transformers passes it).  Text
 * that is not a JSON object stays text. */
static void write_tool_calls(struct exl_jw *w, const struct exl_json *calls)
{
	if (calls->type != EXL_JSON_ARRAY) {
		exl_jw_json(w, calls);
		return;
	}
	exl_jw_arr(w);
	for (size_t i = 0; i < calls->n; i++) {
		const struct exl_json *c = calls->v[i];

		if (c->type != EXL_JSON_OBJECT) {
			exl_jw_json(w, c);
			continue;
		}
		exl_jw_obj(w);
		for (size_t k = 0; k < c->n; k++) {
			const struct exl_json *fn = c->v[k];

			if (memchr(c->keys[k], 0, c->key_lens[k]))
				continue;
			exl_jw_key(w, c->keys[k]);
			if (strcmp(c->keys[k], "function") || fn->type != EXL_JSON_OBJECT) {
				exl_jw_json(w, fn);
				continue;
			}
			exl_jw_obj(w);
			for (size_t j = 0; j < fn->n; j++) {
				const struct exl_json *a = fn->v[j];
				struct exl_json_doc *d = NULL;

				if (memchr(fn->keys[j], 0, fn->key_lens[j]))
					continue;
				exl_jw_key(w, fn->keys[j]);
				if (!strcmp(fn->keys[j], "arguments") && a->type == EXL_JSON_STRING &&
				    (d = exl_json_parse(a->str, a->len, NULL, 0)) &&
				    exl_json_root(d)->type == EXL_JSON_OBJECT)
					a = exl_json_root(d);
				exl_jw_json(w, a);
				exl_json_free(d);
			}
			exl_jw_obj_end(w);
		}
		exl_jw_obj_end(w);
	}
	exl_jw_arr_end(w);
}

/* A tool's function name, or NULL: {"type": "function", "function":
 * {"name": ...}} */
static const struct exl_json *tool_fn_name(const struct exl_json *t)
{
	const struct exl_json *fn = t->type == EXL_JSON_OBJECT ? get(t, "function") : NULL;
	const struct exl_json *name = fn && fn->type == EXL_JSON_OBJECT ? get(fn, "name") : NULL;

	return name && name->type == EXL_JSON_STRING && name->len &&
	       !memchr(name->str, 0, name->len) ? name : NULL;
}

/* tools, tool_choice and parallel_tool_calls. */
static int get_tools(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *v = get(body, "tools"), *c = get(body, "tool_choice");
	char key[64];

	g->parallel_tool_calls = true;
	if (get_bool(m, body, "parallel_tool_calls", &g->parallel_tool_calls))
		return -1;
	if (v) {
		if (v->type != EXL_JSON_ARRAY)
			return fail(m, "tools", "wants an array, got %s", type_name(v));
		for (size_t i = 0; i < v->n; i++) {
			snprintf(key, sizeof(key), "tools[%zu]", i);
			if (v->v[i]->type != EXL_JSON_OBJECT)
				return fail(m, key, "wants an object, got %s", type_name(v->v[i]));
			const struct exl_json *t = get(v->v[i], "type");
			if (t && (t->type != EXL_JSON_STRING || strcmp(t->str, "function")))
				return fail(m, key, "only tools of type \"function\" are supported");
			const struct exl_json *fn = get(v->v[i], "function");
			const struct exl_json *params = fn && fn->type == EXL_JSON_OBJECT ?
							get(fn, "parameters") : NULL;
			snprintf(key, sizeof(key), "tools[%zu].function.name", i);
			if (!tool_fn_name(v->v[i]))
				return fail(m, key, "wants the function's name (a non-empty string)");
			snprintf(key, sizeof(key), "tools[%zu].function.parameters", i);
			if (params && params->type != EXL_JSON_OBJECT)
				return fail(m, key, "wants a JSON schema object, got %s",
					    type_name(params));
		}
	}
	if (!c || (c->type == EXL_JSON_STRING && !strcmp(c->str, "auto"))) {
		g->tool_choice = EXL_HTTP_TOOLS_AUTO;
	} else if (c->type == EXL_JSON_STRING && !strcmp(c->str, "none")) {
		g->tool_choice = EXL_HTTP_TOOLS_NONE;
	} else if (c->type == EXL_JSON_STRING && !strcmp(c->str, "required")) {
		g->tool_choice = EXL_HTTP_TOOLS_REQUIRED;
	} else if (c->type == EXL_JSON_OBJECT) {
		const struct exl_json *name = tool_fn_name(c);

		if (!name)
			return fail(m, "tool_choice", "wants {\"type\": \"function\", \"function\": "
				    "{\"name\": ...}}");
		g->tool_choice = EXL_HTTP_TOOLS_NAMED;
		g->tool_name = zstr(m, "tool_choice", name->str, name->len, true);
		if (!g->tool_name)
			return -1;
		bool found = false;
		for (size_t i = 0; v && i < v->n && !found; i++) {
			const struct exl_json *tn = tool_fn_name(v->v[i]);
			found = tn->len == name->len && !memcmp(tn->str, name->str, name->len);
		}
		if (!found)
			return fail(m, "tool_choice", "no function named '%.100s' in tools",
				    g->tool_name);
	} else {
		return fail(m, "tool_choice", "wants \"none\", \"auto\", \"required\" or "
			    "{\"type\": \"function\", \"function\": {\"name\": ...}}");
	}
	if (g->tool_choice == EXL_HTTP_TOOLS_REQUIRED && (!v || !v->n))
		return fail(m, "tool_choice", "\"required\" needs tools");
	/* "none": the model is not told of them */
	if (v && v->n && g->tool_choice != EXL_HTTP_TOOLS_NONE) {
		g->tools_json = zjson(m, "tools", v, &g->tools_len);
		if (!g->tools_json)
			return -1;
	}
	return 0;
}

static int get_messages(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *v = get(body, "messages");
	struct exl_jw w;
	char key[64];
	int rc = -1;

	if (!v)
		return fail(m, "messages", "missing (the conversation)");
	if (v->type != EXL_JSON_ARRAY)
		return fail(m, "messages", "wants an array of messages, got %s", type_name(v));
	exl_jw_init(&w);
	exl_jw_arr(&w);
	for (size_t i = 0; i < v->n; i++) {
		const struct exl_json *msg = v->v[i];
		const struct exl_json *role = msg->type == EXL_JSON_OBJECT ? get(msg, "role") : NULL;
		const struct exl_json *images = msg->type == EXL_JSON_OBJECT ? get(msg, "images") : NULL;

		snprintf(key, sizeof(key), "messages[%zu]", i);
		if (msg->type != EXL_JSON_OBJECT) {
			fail(m, key, "wants an object, got %s", type_name(msg));
			goto out;
		}
		if (!role || role->type != EXL_JSON_STRING || role->len == 0) {
			snprintf(key, sizeof(key), "messages[%zu].role", i);
			fail(m, key, "wants a string (system, user, assistant, tool)");
			goto out;
		}
		if (images && (images->type != EXL_JSON_ARRAY || images->n)) {
			snprintf(key, sizeof(key), "messages[%zu].images", i);
			fail(m, key, "images are not supported");
			goto out;
		}
		exl_jw_obj(&w);
		exl_jw_key(&w, "role");
		exl_jw_str(&w, role->str, role->len);
		exl_jw_key(&w, "content");
		snprintf(key, sizeof(key), "messages[%zu].content", i);
		if (write_content(m, key, get(msg, "content"), &w))
			goto out;
		for (size_t k = 0; k < msg->n; k++) {
			const char *name = msg->keys[k];

			if (!strcmp(name, "role") || !strcmp(name, "content") || !strcmp(name, "images") ||
			    msg->v[k]->type == EXL_JSON_NULL || memchr(name, 0, msg->key_lens[k]))
				continue;
			exl_jw_key(&w, name);
			if (!strcmp(name, "tool_calls"))
				write_tool_calls(&w, msg->v[k]);
			else
				exl_jw_json(&w, msg->v[k]);
		}
		/* an OpenAI client's reasoning_content back in the history is
		 * thinking to the templates that read that name (gpt-oss's, as
		 * llama.cpp passes it); both names stay */
		const struct exl_json *rc_text = get(msg, "reasoning_content");
		if (rc_text && rc_text->type == EXL_JSON_STRING && !get(msg, "thinking")) {
			exl_jw_key(&w, "thinking");
			exl_jw_str(&w, rc_text->str, rc_text->len);
		}
		exl_jw_obj_end(&w);
	}
	exl_jw_arr_end(&w);
	if (exl_jw_failed(&w)) {
		fail(m, "messages", "out of memory");
		goto out;
	}
	g->messages_json = zstr(m, "messages", w.buf, w.len, true);
	g->messages_len = w.len;
	rc = g->messages_json ? 0 : -1;
	if (!rc)
		rc = get_tools(m, body, g);
	g->chat = !rc;
out:
	exl_jw_free(&w);
	return rc;
}

/* Ollama's templated generate: [system], user prompt, as a conversation. */
static int generate_as_chat(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *sys = get(body, "system");
	const struct exl_json *prompt = get(body, "prompt");
	struct exl_jw w;

	if (sys && sys->type != EXL_JSON_STRING)
		return fail(m, "system", "wants a string, got %s", type_name(sys));
	exl_jw_init(&w);
	exl_jw_arr(&w);
	if (sys && sys->len) {
		exl_jw_obj(&w);
		exl_jw_kstr(&w, "role", "system");
		exl_jw_key(&w, "content");
		exl_jw_str(&w, sys->str, sys->len);
		exl_jw_obj_end(&w);
	}
	exl_jw_obj(&w);
	exl_jw_kstr(&w, "role", "user");
	exl_jw_key(&w, "content");
	exl_jw_str(&w, prompt ? prompt->str : "", prompt ? prompt->len : 0);
	exl_jw_obj_end(&w);
	exl_jw_arr_end(&w);
	if (exl_jw_failed(&w)) {
		exl_jw_free(&w);
		return fail(m, "prompt", "out of memory");
	}
	g->messages_json = zstr(m, "prompt", w.buf, w.len, true);
	g->messages_len = w.len;
	exl_jw_free(&w);
	g->chat = g->messages_json != NULL;
	return g->chat ? 0 : -1;
}

/* ---- the four generate endpoints ---- */

/* chat_template_kwargs (llama.cpp's): more variables for the template,
 * say enable_thinking; the context's own names are refused.  With
 * think_off, enable_thinking false unless they set it; with effort,
 * reasoning_effort (gpt-oss's template reads it) unless they set it. */
static int get_template_kwargs(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g,
			       bool think_off, const char *effort)
{
	static const char *const own[] = { "messages", "add_generation_prompt", "tools", "bos_token",
					   "eos_token" };
	const struct exl_json *v = get(body, "chat_template_kwargs");
	struct exl_jw w;

	if (v && v->type != EXL_JSON_OBJECT)
		return fail(m, "chat_template_kwargs", "wants an object, got %s", type_name(v));
	if (!v && !think_off && !effort)
		return 0;
	exl_jw_init(&w);
	exl_jw_obj(&w);
	for (size_t i = 0; v && i < v->n; i++) {
		for (size_t k = 0; k < sizeof(own) / sizeof(own[0]); k++) {
			if (!strcmp(v->keys[i], own[k])) {
				exl_jw_free(&w);
				return fail(m, "chat_template_kwargs", "'%s' is the request's own", own[k]);
			}
		}
		if (memchr(v->keys[i], 0, v->key_lens[i])) {
			exl_jw_free(&w);
			return fail(m, "chat_template_kwargs", "a name holds a NUL");
		}
		exl_jw_key(&w, v->keys[i]);
		exl_jw_json(&w, v->v[i]);
	}
	if (think_off && !(v && get(v, "enable_thinking"))) {
		exl_jw_key(&w, "enable_thinking");
		exl_jw_bool(&w, false);
	}
	if (effort && !(v && get(v, "reasoning_effort")))
		exl_jw_kstr(&w, "reasoning_effort", effort);
	exl_jw_obj_end(&w);
	if (exl_jw_failed(&w)) {
		exl_jw_free(&w);
		return fail(m, "chat_template_kwargs", "out of memory");
	}
	g->template_kwargs_json = zstr(m, "chat_template_kwargs", w.buf, w.len, true);
	g->template_kwargs_len = w.len;
	exl_jw_free(&w);
	return g->template_kwargs_json ? 0 : -1;
}

/* OpenAI's reasoning_effort as the template's reasoning_effort (gpt-oss's
 * "Reasoning: low|medium|high"): the levels gpt-oss knows, OpenAI's
 * others mapped to the nearest ("none" also turns Qwen3-style thinking
 * off: *off).  NULL when absent; -1 refused. */
static int get_effort(struct mctx *m, const struct exl_json *body, const char **effort, bool *off)
{
	static const char *const names[][2] = {
		{ "low", "low" }, { "medium", "medium" }, { "high", "high" }, { "minimal", "low" },
		{ "none", "low" }, { "xhigh", "high" },
	};
	const struct exl_json *v = get(body, "reasoning_effort");

	*effort = NULL;
	*off = false;
	if (!v)
		return 0;
	for (size_t i = 0; v->type == EXL_JSON_STRING && i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(v->str, names[i][0]) && strlen(names[i][0]) == v->len) {
			*effort = names[i][1];
			*off = i == 4;
			return 0;
		}
	}
	return fail(m, "reasoning_effort", "wants \"low\", \"medium\" or \"high\" (or OpenAI's "
		    "\"minimal\" and \"none\", read as low, \"xhigh\" as high)");
}

/* OpenAI chat: reasoning_format (llama.cpp's: "none" keeps the <think>
 * block in the content; "auto" and "deepseek" put it apart),
 * reasoning_effort and chat_template_kwargs. */
static int get_reasoning_format(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *v = get(body, "reasoning_format");
	const char *effort;
	bool off;

	if (v && (v->type != EXL_JSON_STRING || (strcmp(v->str, "none") && strcmp(v->str, "auto") &&
						 strcmp(v->str, "deepseek"))))
		return fail(m, "reasoning_format", "wants \"none\", \"auto\" or \"deepseek\"");
	if (v)
		g->reasoning = strcmp(v->str, "none") ? 1 : 0;
	if (get_effort(m, body, &effort, &off))
		return -1;
	return get_template_kwargs(m, body, g, off, effort);
}

/* suffix (OpenAI completions, Ollama generate): the text after the gap
 * the completion fills, framed by the model's fill-in-the-middle tokens
 * with the prompt before it.  "" (what clients send for none) is none. */
static int get_suffix(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *v = get(body, "suffix");

	if (!v || v->type == EXL_JSON_NULL || (v->type == EXL_JSON_STRING && !v->len))
		return 0;
	if (v->type != EXL_JSON_STRING)
		return fail(m, "suffix", "wants a string, got %s", type_name(v));
	g->gen.s.fim_suffix = zstr(m, "suffix", v->str, v->len, true);
	if (!g->gen.s.fim_suffix)
		return -1;
	g->gen.s.fim_suffix_len = v->len;
	g->gen.s.fim = true;
	return 0;
}

static int map_openai(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *v;
	long long n = 1, lp = -1;
	bool logprobs = false;

	if (g->api == EXL_HTTP_OAI_COMPLETION) {
		/* OpenAI's default for the legacy endpoint */
		g->gen.s.max_new_tokens = 16;
		g->max_tokens_set = true;
		if (get_prompts(m, body, g) || get_bool(m, body, "echo", &g->echo) ||
		    get_int(m, body, "logprobs", 0, EXL_HTTP_MAX_TOP_LOGPROBS, &lp))
			return -1;
		if (get_suffix(m, body, g))
			return -1;
		g->logprobs = (int)lp;
	} else {
		if (get_messages(m, body, g) || get_bool(m, body, "logprobs", &logprobs) ||
		    get_int(m, body, "top_logprobs", 0, EXL_HTTP_MAX_TOP_LOGPROBS, &lp) ||
		    get_length(m, body, "max_completion_tokens", g))
			return -1;
		if (lp >= 0 && !logprobs)
			return fail(m, "top_logprobs", "needs logprobs: true");
		g->logprobs = logprobs ? (lp < 0 ? 0 : (int)lp) : -1;
	}
	if (get_length(m, body, "max_tokens", g) || get_length(m, body, "max_new_tokens", g) ||
	    get_int(m, body, "n", 1, EXL_HTTP_MAX_CHOICES, &n) ||
	    get_bool(m, body, "stream", &g->stream))
		return -1;
	g->n = (int)n;
	if ((v = get(body, "best_of")) && (!integral(v) || v->num != (double)n))
		return fail(m, "best_of", "other than n is not supported");
	if ((v = get(body, "stream_options"))) {
		if (v->type != EXL_JSON_OBJECT)
			return fail(m, "stream_options", "wants an object, got %s", type_name(v));
		if (get_bool(m, v, "include_usage", &g->include_usage))
			return -1;
	}
	if (get_exld_settings(m, body, &g->gen) || get_stop(m, body, "stop", &g->gen.s) ||
	    get_bias(m, body, "logit_bias", &g->gen) || get_response_format(m, body, &g->gen))
		return -1;
	if (g->chat && get_reasoning_format(m, body, g))
		return -1;
	if ((g->tool_choice == EXL_HTTP_TOOLS_REQUIRED || g->tool_choice == EXL_HTTP_TOOLS_NAMED) &&
	    (g->gen.grammar || g->gen.json_schema || g->gen.regex))
		return fail(m, "tool_choice", "a forced call is a constraint of its own: not with "
			    "grammar, json_schema, regex or a JSON response_format");
	return 0;
}

static int map_ollama(struct mctx *m, const struct exl_json *body, struct exl_http_gen *g)
{
	const struct exl_json *v;

	g->stream = true;   /* Ollama streams unless told not to */
	if (get_bool(m, body, "stream", &g->stream))
		return -1;
	if (g->api == EXL_HTTP_OLLAMA_GENERATE) {
		bool raw = false;

		if (get_bool(m, body, "raw", &raw))
			return -1;
		if ((v = get(body, "prompt")) && v->type != EXL_JSON_STRING)
			return fail(m, "prompt", "wants a string, got %s", type_name(v));
		if ((v = get(body, "template")) && (v->type != EXL_JSON_STRING || v->len))
			return fail(m, "template", "Go templates are not supported (give raw: true "
				    "and a formatted prompt, or leave it to the model's template)");
		if (get_suffix(m, body, g))
			return -1;
		if ((v = get(body, "context")) && (v->type != EXL_JSON_ARRAY || v->n))
			return fail(m, "context", "is not supported (send the conversation to "
				    "/api/chat)");
		if ((v = get(body, "images")) && (v->type != EXL_JSON_ARRAY || v->n))
			return fail(m, "images", "images are not supported");
		/* a suffix asks for the model's fill-in-the-middle prompt, which
		 * Ollama's templates write: the prompt is the code before the gap */
		if (raw || g->gen.s.fim) {
			v = get(body, "prompt");
			g->n_prompts = 1;
			if (v && text_prompt(m, "prompt", v, &g->prompts[0]))
				return -1;
			if (!v)
				g->prompts[0].text = "";
		} else if (generate_as_chat(m, body, g)) {
			return -1;
		}
	} else if (get_messages(m, body, g)) {
		return -1;
	}
	if (g->chat && (v = get(body, "think"))) {
		/* newer Ollamas also take "high", "medium", "low" (gpt-oss's
		 * reasoning effort, its template's reasoning_effort) */
		const char *effort = NULL;
		if (v->type == EXL_JSON_STRING && (!strcmp(v->str, "high") || !strcmp(v->str, "medium") ||
						   !strcmp(v->str, "low"))) {
			g->reasoning = 1;
			effort = v->str;
		} else if (v->type == EXL_JSON_BOOL) {
			g->reasoning = v->b ? 1 : 0;
		} else {
			return fail(m, "think", "wants true or false, or \"low\", \"medium\" or "
				    "\"high\"");
		}
		if (get_template_kwargs(m, body, g, g->reasoning == 0, effort))
			return -1;
	}
	if (get_ollama_format(m, body, &g->gen))
		return -1;
	v = get(body, "options");
	if (!v)
		return 0;
	if (v->type != EXL_JSON_OBJECT)
		return fail(m, "options", "wants an object, got %s", type_name(v));
	m->prefix = "options.";
	long long np = 0;
	bool present = exl_json_get(v, "num_predict") && get(v, "num_predict");
	if (get_int(m, v, "num_predict", -2, 16777216, &np))
		return -1;
	/* -1 (no limit) and -2 (until the context is full) are the uid's
	 * limit; the context ends a job either way */
	if (present && np >= 0) {
		g->gen.s.max_new_tokens = (int)np;
		g->max_tokens_set = true;
	}
	if (apply_keys(m, v, &g->gen.s, ollama_keys, sizeof(ollama_keys) / sizeof(ollama_keys[0])) ||
	    get_exld_settings(m, v, &g->gen) || get_stop(m, v, "stop", &g->gen.s))
		return -1;
	m->prefix = "";
	return 0;
}

int exl_http_map_model(const struct exl_json *body, char model[EXL_MAX_NAME + 1],
		       struct exl_http_err *e)
{
	struct mctx m = { .e = e, .prefix = "" };
	const char *key = "model";
	const struct exl_json *v = get(body, key);

	model[0] = 0;
	if (!v) {
		key = "name";
		v = get(body, key);
	}
	if (!v)
		return 0;
	if (v->type != EXL_JSON_STRING)
		return fail(&m, key, "wants a model name, got %s", type_name(v));
	/* Ollama's clients name models NAME:TAG; exld's have no tags. */
	size_t len = v->len;
	if (len > 7 && !memcmp(v->str + len - 7, ":latest", 7))
		len -= 7;
	if (!exl_model_name_valid(v->str, len))
		return fail(&m, key, "'%.*s' is not a model name (1 to %d of [A-Za-z0-9._-], "
			    "not starting with '.', no '..')", (int)(len > 64 ? 64 : len), v->str,
			    EXL_MAX_NAME);
	memcpy(model, v->str, len);
	model[len] = 0;
	return 0;
}

int exl_http_map_generate(enum exl_http_api api, const struct exl_json *body,
			  msgpack_zone *zone, struct exl_http_gen *g, struct exl_http_err *e)
{
	struct mctx m = { .zone = zone, .e = e, .prefix = "" };

	memset(g, 0, sizeof(*g));
	memset(e, 0, sizeof(*e));
	g->api = api;
	g->n = 1;
	g->logprobs = -1;
	g->reasoning = -1;
	exl_gen_settings_init(&g->gen.s);
	g->gen.return_text = -1;
	if (body->type != EXL_JSON_OBJECT)
		return fail(&m, NULL, "the request body must be a JSON object, got %s",
			    type_name(body));
	if (exl_http_map_model(body, g->model, e))
		return -1;
	if (api == EXL_HTTP_OAI_COMPLETION || api == EXL_HTTP_OAI_CHAT) {
		if (map_openai(&m, body, g))
			return -1;
	} else if (map_ollama(&m, body, g)) {
		return -1;
	}
	if (!g->chat && g->n_prompts * g->n > EXL_HTTP_MAX_CHOICES)
		return fail(&m, "n", "%d prompts times n = %d is over the limit of %d jobs",
			    g->n_prompts, g->n, EXL_HTTP_MAX_CHOICES);
	if (g->gen.s.min_new_tokens > g->gen.s.max_new_tokens && g->max_tokens_set)
		return fail(&m, "min_new_tokens", "%d is over the length asked for (%d)",
			    g->gen.s.min_new_tokens, g->gen.s.max_new_tokens);
	if (g->logprobs >= 0) {
		g->gen.s.return_probs = true;
		g->gen.s.return_top_k = g->logprobs;
	}
	g->gen.s.grammar = g->gen.grammar;
	g->gen.s.json_schema = g->gen.json_schema;
	g->gen.s.regex = g->gen.regex;
	g->gen.s.filter_prefer_eos = g->gen.filter_prefer_eos;
	g->gen.s.completion_only = !g->echo;
	/* The HTTP layer reads socket messages (stream) or the result (not). */
	g->gen.stream = g->stream ? EXL_STREAM_SOCKET : EXL_STREAM_NONE;
	g->gen.return_text = !g->stream;
	return 0;
}

int exl_http_map_tokenize(const struct exl_json *body, msgpack_zone *zone,
			  struct exl_http_tokenize *t, struct exl_http_err *e)
{
	struct mctx m = { .zone = zone, .e = e, .prefix = "" };
	const struct exl_json *v;
	bool add = false;

	memset(t, 0, sizeof(*t));
	memset(e, 0, sizeof(*e));
	t->add_bos = -1;
	if (body->type != EXL_JSON_OBJECT)
		return fail(&m, NULL, "the request body must be a JSON object, got %s",
			    type_name(body));
	if (exl_http_map_model(body, t->model, e))
		return -1;
	v = get(body, "content");
	if (!v || v->type != EXL_JSON_STRING)
		return fail(&m, "content", "wants the text to tokenize (a string)");
	t->text = zstr(&m, "content", v->str, v->len, true);
	t->len = v->len;
	if (!t->text)
		return -1;
	if (get(body, "add_special")) {
		if (get_bool(&m, body, "add_special", &add))
			return -1;
		t->add_bos = add;
	}
	return get_bool(&m, body, "parse_special", &t->special) ||
	       get_bool(&m, body, "with_pieces", &t->with_pieces) ? -1 : 0;
}

int exl_http_map_detokenize(const struct exl_json *body, msgpack_zone *zone,
			    struct exl_http_detokenize *t, struct exl_http_err *e)
{
	struct mctx m = { .zone = zone, .e = e, .prefix = "" };
	const struct exl_json *v;
	struct exl_prompt p = { 0 };

	memset(t, 0, sizeof(*t));
	memset(e, 0, sizeof(*e));
	if (body->type != EXL_JSON_OBJECT)
		return fail(&m, NULL, "the request body must be a JSON object, got %s",
			    type_name(body));
	if (exl_http_map_model(body, t->model, e))
		return -1;
	v = get(body, "tokens");
	if (!v || v->type != EXL_JSON_ARRAY)
		return fail(&m, "tokens", "wants an array of token ids");
	if (v->n == 0) {
		t->ids = zalloc(&m, sizeof(int32_t));
		return t->ids ? 0 : fail(&m, "tokens", "out of memory");
	}
	if (v->n > EXL_MAX_DETOKENIZE_IDS)
		return fail(&m, "tokens", "%zu ids is over the limit of %d", v->n,
			    EXL_MAX_DETOKENIZE_IDS);
	if (get_ids(&m, "tokens", v, &p))
		return -1;
	t->ids = p.ids;
	t->n = (size_t)p.n_ids;
	return 0;
}

char *exl_http_chat_context(const struct exl_http_gen *g, const char *bos, size_t bos_len,
			    const char *eos, size_t eos_len, size_t *len)
{
	struct exl_jw w;

	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_key(&w, "messages");
	exl_jw_raw(&w, g->messages_json, g->messages_len);
	exl_jw_key(&w, "add_generation_prompt");
	exl_jw_bool(&w, true);
	if (g->tools_json) {
		exl_jw_key(&w, "tools");
		exl_jw_raw(&w, g->tools_json, g->tools_len);
	}
	exl_jw_key(&w, "bos_token");
	exl_jw_str(&w, bos, bos_len);
	exl_jw_key(&w, "eos_token");
	exl_jw_str(&w, eos, eos_len);
	if (g->template_kwargs_json && g->template_kwargs_len > 2) {
		/* the object's members, after its '{' and before its '}' */
		exl_jw_text(&w, ",", 1);
		exl_jw_text(&w, g->template_kwargs_json + 1, g->template_kwargs_len - 2);
	}
	exl_jw_obj_end(&w);
	if (exl_jw_failed(&w) || !w.buf) {
		exl_jw_free(&w);
		return NULL;
	}
	*len = w.len;
	return w.buf;
}
