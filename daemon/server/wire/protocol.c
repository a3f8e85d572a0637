/* Wire protocol: request decoding, reply encoding (framing: common/msgscan.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/gen_ranges.h"
#include "daemon/server/wire/config.h"
#include "daemon/server/wire/protocol.h"
#include "daemon/core/tokenizer/tokenizer.h"

_Static_assert(EXL_MAX_STOP_STRINGS == EXL_GEN_MAX_STOP_STRINGS, "wire and generator disagree");
_Static_assert(EXL_MAX_STOP_TOKENS == EXL_GEN_MAX_STOP_TOKENS, "wire and generator disagree");
_Static_assert(EXL_MAX_BANNED == EXL_GEN_MAX_BANNED, "wire and generator disagree");
_Static_assert(EXL_MAX_STRING_ITEM == EXL_GEN_MAX_STRING_LEN, "wire and generator disagree");
_Static_assert(EXL_MAX_BIAS == EXL_GEN_MAX_BIAS, "wire and generator disagree");
_Static_assert(EXL_MAX_TOP_K_RETURN == EXL_GEN_MAX_TOP_PROBS, "wire and generator disagree");
_Static_assert(EXL_MAX_DRAFT_TOKENS == EXL_GEN_MAX_DRAFT_TOKENS, "wire and generator disagree");
_Static_assert(EXL_MAX_NGRAM_DRAFT == EXL_GEN_MAX_NGRAM_DRAFT, "wire and generator disagree");
_Static_assert(EXL_MAX_BEAMS == EXL_GEN_MAX_BEAMS, "wire and generator disagree");
_Static_assert(EXL_MAX_NAME == EXL_GEN_MAX_DRAFT_NAME, "a draft model is named as a model");

/* Every group of optional generate keys that dec_generate() decodes (the
 * hello reply lists them; docs/protocol.md has the keys of each). */
const char *const exl_daemon_features[] = {
	EXL_FEAT_PENALTIES, EXL_FEAT_NO_REPEAT_NGRAM, EXL_FEAT_TYPICAL, EXL_FEAT_TFS,
	EXL_FEAT_TOP_A, EXL_FEAT_TOKEN_BIAS, EXL_FEAT_DRY, EXL_FEAT_XTC, EXL_FEAT_MIROSTAT,
	EXL_FEAT_BANNED_STRINGS, EXL_FEAT_TOKEN_HEALING, EXL_FEAT_CFG, EXL_FEAT_GRAMMAR,
	EXL_FEAT_JSON_SCHEMA, EXL_FEAT_REGEX, EXL_FEAT_RETURN_LOGITS, EXL_FEAT_SPECULATIVE,
	EXL_FEAT_BEAM_SEARCH, EXL_FEAT_TRUNCATE, EXL_FEAT_EMBEDDINGS, EXL_FEAT_LORA, EXL_FEAT_FIM,
};
const size_t exl_daemon_n_features = sizeof(exl_daemon_features) / sizeof(exl_daemon_features[0]);

/* ---- decoding helpers -------------------------------------------------- */

struct dec {
	const msgpack_object *map;
	msgpack_zone *zone;
	const char *op;
	char *err;
	size_t errlen;
	int code;          /* EXL_E_BAD_REQUEST, or EXL_E_TOO_LARGE for a value over its limit */
};

static const char *type_name(const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_NIL: return "nil";
	case MSGPACK_OBJECT_BOOLEAN: return "a boolean";
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "an integer";
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: return "a float";
	case MSGPACK_OBJECT_STR: return "a string";
	case MSGPACK_OBJECT_BIN: return "binary";
	case MSGPACK_OBJECT_ARRAY: return "an array";
	case MSGPACK_OBJECT_MAP: return "a map";
	case MSGPACK_OBJECT_EXT: return "an ext value";
	}
	return "an unknown type";
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(struct dec *d, const char *key, const char *fmt, ...)
{
	char msg[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (key)
		snprintf(d->err, d->errlen, "%s: %s: %s", d->op, key, msg);
	else
		snprintf(d->err, d->errlen, "%s: %s", d->op, msg);
	/* quoted request strings are cut at byte counts (http_map.c's fail) */
	if (d->errlen)
		exl_utf8_scrub(d->err);
	return -1;
}

/* A value over its own limit: too_large rather than bad_request. */
#define fail_big(d, ...) ((d)->code = EXL_E_TOO_LARGE, fail((d), __VA_ARGS__))

static bool key_is(const msgpack_object *k, const char *key)
{
	size_t n = strlen(key);
	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	       !memcmp(k->via.str.ptr, key, n);
}

static const msgpack_object *find(const msgpack_object *map, const char *key)
{
	for (uint32_t i = 0; i < map->via.map.size; i++)
		if (key_is(&map->via.map.ptr[i].key, key))
			return &map->via.map.ptr[i].val;
	return NULL;
}

/* msgpack str is UTF-8, and every str the daemon sends must be too: a str
 * that reaches text (prompts, stop and banned strings, constraints, ids
 * echoed back) and is not valid UTF-8 is refused here, naming where. */
static int check_utf8(struct dec *d, const char *key, const msgpack_object *o, const char *what)
{
	size_t n = o->via.str.size, bad = exl_utf8_bad_at(o->via.str.ptr, n);

	if (bad == n)
		return 0;
	return fail(d, key, "%snot valid UTF-8 (byte 0x%02x at offset %zu)", what,
		    (unsigned)(uint8_t)o->via.str.ptr[bad], bad);
}

static bool obj_int(const msgpack_object *o, int64_t *v)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		if (o->via.u64 > INT64_MAX)
			return false;
		*v = (int64_t)o->via.u64;
		return true;
	}
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*v = o->via.i64;
		return true;
	}
	return false;
}

/* A float or any integer (up to 2^64 - 1), as a double that may be NaN or
 * infinite: the caller range-checks it. */
static bool obj_num(const msgpack_object *o, double *v)
{
	switch (o->type) {
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		*v = o->via.f64;
		return true;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		*v = (double)o->via.u64;
		return true;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		*v = (double)o->via.i64;
		return true;
	default:
		return false;
	}
}

/* A number for a message: "NaN", "inf", "-inf" or %g. */
static const char *num_str(double v, char *buf, size_t len)
{
	if (isnan(v))
		return "NaN";
	snprintf(buf, len, "%g", v);
	return buf;
}

/* Each getter: 0 when absent (out untouched) or valid, -1 with a message. */
static int get_bool(struct dec *d, const char *key, bool *out)
{
	const msgpack_object *o = find(d->map, key);

	if (!o)
		return 0;
	if (o->type != MSGPACK_OBJECT_BOOLEAN)
		return fail(d, key, "wants a boolean, got %s", type_name(o));
	*out = o->via.boolean;
	return 0;
}

static int get_int(struct dec *d, const char *key, int64_t min, int64_t max, int64_t *out)
{
	const msgpack_object *o = find(d->map, key);
	int64_t v;

	if (!o)
		return 0;
	if (!obj_int(o, &v) || v < min || v > max) {
		if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			return fail(d, key, "wants an integer in [%lld, %lld], got %lld",
				    (long long)min, (long long)max, (long long)o->via.i64);
		if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			return fail(d, key, "wants an integer in [%lld, %lld], got %llu",
				    (long long)min, (long long)max, (unsigned long long)o->via.u64);
		return fail(d, key, "wants an integer in [%lld, %lld], got %s", (long long)min,
			    (long long)max, type_name(o));
	}
	*out = v;
	return 0;
}

/* A numeric generate option: its range is the shared table's
 * (common/gen_ranges.h), which the command lines check before sending. */
static int get_ranged(struct dec *d, const char *key, double *out)
{
	const struct genrange *r = genrange_find(key);
	const msgpack_object *o = find(d->map, key);
	char what[96];
	int64_t i;
	double v;

	if (!o)
		return 0;
	genrange_describe(r, what, sizeof(what));
	if (r->integer) {
		if (!obj_int(o, &i)) {
			if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
				return fail(d, key, "wants %s, got %llu", what,
					    (unsigned long long)o->via.u64);
			return fail(d, key, "wants %s, got %s", what, type_name(o));
		}
		if (!genrange_ok(r, (double)i))
			return fail(d, key, "wants %s, got %lld", what, (long long)i);
		*out = (double)i;
		return 0;
	}
	if (!obj_num(o, &v))
		return fail(d, key, "wants %s, got %s", what, type_name(o));
	/* float in the settings: the rounded value is the one that must fit
	 * (checked after the double, which may have no float) */
	if (!genrange_ok(r, v) || !genrange_ok(r, (double)(float)v)) {
		char b[32];

		return fail(d, key, "wants %s, got %s", what, num_str(v, b, sizeof(b)));
	}
	*out = v;
	return 0;
}

static int get_rint(struct dec *d, const char *key, int *out)
{
	double v = *out;

	if (get_ranged(d, key, &v))
		return -1;
	*out = (int)v;
	return 0;
}

static int get_rfloat(struct dec *d, const char *key, float *out)
{
	double v = *out;

	if (get_ranged(d, key, &v))
		return -1;
	*out = (float)v;
	return 0;
}

/* A string as a pointer into the message (not NUL-terminated). */
static int get_str(struct dec *d, const char *key, size_t maxlen, const char **s, size_t *len)
{
	const msgpack_object *o = find(d->map, key);

	if (!o)
		return 0;
	if (o->type != MSGPACK_OBJECT_STR)
		return fail(d, key, "wants a string, got %s", type_name(o));
	if (o->via.str.size > maxlen)
		return fail_big(d, key, "string of %u bytes is over the limit of %zu", o->via.str.size,
			    maxlen);
	if (check_utf8(d, key, o, ""))
		return -1;
	*s = o->via.str.ptr;
	*len = o->via.str.size;
	return 0;
}

/* A NUL-terminated copy in the zone; no NUL byte inside. */
static char *zone_cstr(struct dec *d, const char *key, const char *s, size_t len)
{
	if (memchr(s, 0, len)) {
		fail(d, key, "string holds a NUL byte");
		return NULL;
	}
	char *c = msgpack_zone_malloc(d->zone, len + 1);
	if (!c) {
		fail(d, key, "out of memory");
		return NULL;
	}
	memcpy(c, s, len);
	c[len] = 0;
	return c;
}

static int get_cstr(struct dec *d, const char *key, size_t maxlen, const char **out)
{
	const char *s = NULL;
	size_t len = 0;

	if (get_str(d, key, maxlen, &s, &len))
		return -1;
	if (!s)
		return 0;
	*out = zone_cstr(d, key, s, len);
	return *out ? 0 : -1;
}

/* An array of token ids in [0, INT32_MAX], at most max of them. */
static int get_ids(struct dec *d, const char *key, size_t max, const int32_t **ids, size_t *n)
{
	const msgpack_object *o = find(d->map, key);

	if (!o)
		return 0;
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return fail(d, key, "wants an array of token ids, got %s", type_name(o));
	if (o->via.array.size > max)
		return fail_big(d, key, "%u ids is over the limit of %zu", o->via.array.size, max);
	int32_t *a = msgpack_zone_malloc(d->zone, sizeof(int32_t) * (o->via.array.size + 1));
	if (!a)
		return fail(d, key, "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		int64_t v;
		if (!obj_int(&o->via.array.ptr[i], &v) || v < 0 || v > INT32_MAX)
			return fail(d, key, "item %u: wants a token id (integer >= 0), got %s", i,
				    type_name(&o->via.array.ptr[i]));
		a[i] = (int32_t)v;
	}
	*ids = a;
	*n = o->via.array.size;
	return 0;
}

/* An array of non-empty strings, each at most maxlen bytes, at most max items. */
static int get_str_list(struct dec *d, const char *key, int max, size_t maxlen,
			const char *const **out, int *n)
{
	const msgpack_object *o = find(d->map, key);

	if (!o)
		return 0;
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return fail(d, key, "wants an array of strings, got %s", type_name(o));
	if (o->via.array.size > (uint32_t)max)
		return fail_big(d, key, "%u strings is over the limit of %d", o->via.array.size, max);
	const char **a = msgpack_zone_malloc(d->zone, sizeof(char *) * (o->via.array.size + 1));
	if (!a)
		return fail(d, key, "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *it = &o->via.array.ptr[i];
		if (it->type != MSGPACK_OBJECT_STR)
			return fail(d, key, "item %u: wants a string, got %s", i, type_name(it));
		if (it->via.str.size == 0 || it->via.str.size > maxlen)
			return fail(d, key, "item %u: wants 1 to %zu bytes, got %u", i, maxlen,
				    it->via.str.size);
		char what[32];
		snprintf(what, sizeof(what), "item %u: ", i);
		if (check_utf8(d, key, it, what))
			return -1;
		a[i] = zone_cstr(d, key, it->via.str.ptr, it->via.str.size);
		if (!a[i])
			return -1;
	}
	*out = a;
	*n = (int)o->via.array.size;
	return 0;
}

/* ---- ops --------------------------------------------------------------- */

static const struct {
	const char *name;
	enum exl_op op;
} op_table[] = {
	{ EXL_OP_HELLO, EXL_OPC_HELLO },
	{ EXL_OP_MODELS, EXL_OPC_MODELS },
	{ EXL_OP_LOAD, EXL_OPC_LOAD },
	{ EXL_OP_UNLOAD, EXL_OPC_UNLOAD },
	{ EXL_OP_TOKENIZE, EXL_OPC_TOKENIZE },
	{ EXL_OP_DETOKENIZE, EXL_OPC_DETOKENIZE },
	{ EXL_OP_GENERATE, EXL_OPC_GENERATE },
	{ EXL_OP_CANCEL, EXL_OPC_CANCEL },
	{ EXL_OP_STATUS, EXL_OPC_STATUS },
	{ EXL_OP_RESUME, EXL_OPC_RESUME },
	{ EXL_OP_EMBED, EXL_OPC_EMBED },
};

/* embed: one text, decoded as a job that reads its prompt and pools
 * (s.pooling EXL_POOL_NONE: the model's, chosen when the job is made). */
static int dec_embed(struct dec *d, struct exl_req_generate *g, size_t max_text)
{
	const char *s = NULL, *pool = NULL;
	size_t len = 0, plen = 0;
	bool b;

	memset(g, 0, sizeof(*g));
	exl_gen_settings_init(&g->s);
	g->stream = EXL_STREAM_NONE;
	g->return_text = 0;
	g->s.max_new_tokens = 0;
	if (get_str(d, "input", max_text, &s, &len) || get_str(d, "pooling", 16, &pool, &plen) ||
	    get_bool(d, "normalize", &g->s.normalize) || get_bool(d, "truncate", &g->s.truncate))
		return -1;
	if (!s)
		return fail(d, "input", "missing (the text to embed)");
	g->prompt.text = s;
	g->prompt.len = len;
	if (find(d->map, "add_bos")) {
		if (get_bool(d, "add_bos", &b))
			return -1;
		g->s.add_bos = b;
	}
	if (!pool)
		return 0;
	if (plen == 4 && !memcmp(pool, "mean", 4))
		g->s.pooling = EXL_POOL_MEAN;
	else if (plen == 4 && !memcmp(pool, "last", 4))
		g->s.pooling = EXL_POOL_LAST;
	else if (plen == 3 && !memcmp(pool, "cls", 3))
		g->s.pooling = EXL_POOL_CLS;
	else
		return fail(d, "pooling", "wants \"mean\", \"last\" or \"cls\", got \"%.*s\"",
			    (int)plen, pool);
	return 0;
}

static int get_model(struct dec *d, struct exl_req *req, bool required)
{
	const char *s = NULL;
	size_t len = 0;

	if (get_str(d, "model", EXL_MAX_NAME, &s, &len))
		return -1;
	if (!s) {
		if (required)
			return fail(d, "model", "missing (a model name)");
		return 0;
	}
	if (!exl_model_name_valid(s, len))
		return fail(d, "model", "'%.*s' is not a model name (1 to %d of [A-Za-z0-9._-], "
			    "not starting with '.', no '..')", (int)len, s, EXL_MAX_NAME);
	memcpy(req->model, s, len);
	req->model[len] = 0;
	return 0;
}

static int dec_hello(struct dec *d, struct exl_req *req)
{
	int64_t size = 0;

	req->u.hello.ring = true;
	if (get_bool(d, "ring", &req->u.hello.ring) ||
	    get_int(d, "ring_size", 1, UINT32_MAX, &size))
		return -1;
	if (size) {
		/* rounded up to a power of two, clamped to the allowed range */
		uint32_t s = EXL_RING_SIZE_MIN;
		while (s < size && s < EXL_RING_SIZE_MAX)
			s <<= 1;
		req->u.hello.ring_size = s;
	}
	return 0;
}

static int dec_tokenize(struct dec *d, struct exl_req *req, size_t max_text)
{
	int64_t add_bos = -1;
	bool b;

	req->u.tokenize.add_bos = -1;
	if (get_str(d, "text", max_text, &req->u.tokenize.text, &req->u.tokenize.len))
		return -1;
	if (!req->u.tokenize.text)
		return fail(d, "text", "missing (the text to tokenize)");
	if (find(d->map, "add_bos")) {
		if (get_bool(d, "add_bos", &b))
			return -1;
		add_bos = b;
	}
	req->u.tokenize.add_bos = (int)add_bos;
	return get_bool(d, "special", &req->u.tokenize.special);
}

static int dec_detokenize(struct dec *d, struct exl_req *req)
{
	req->u.detokenize.strip_leading_space = true;
	if (get_ids(d, "ids", EXL_MAX_DETOKENIZE_IDS, &req->u.detokenize.ids, &req->u.detokenize.n))
		return -1;
	if (!req->u.detokenize.ids)
		return fail(d, "ids", "missing (the token ids)");
	return get_bool(d, "special", &req->u.detokenize.special) ||
	       get_bool(d, "strip_leading_space", &req->u.detokenize.strip_leading_space) ? -1 : 0;
}

/* token_bias: {id: bias, ...} or [[id, bias], ...] */
static int dec_bias(struct dec *d, struct exl_req_generate *g)
{
	const msgpack_object *o = find(d->map, "token_bias");
	const struct genrange *range = genrange_find("token_bias");
	char what[96];
	uint32_t n;

	if (!o)
		return 0;
	genrange_describe(range, what, sizeof(what));
	if (o->type != MSGPACK_OBJECT_MAP && o->type != MSGPACK_OBJECT_ARRAY)
		return fail(d, "token_bias", "wants a map id -> bias or an array of [id, bias], got %s",
			    type_name(o));
	n = o->type == MSGPACK_OBJECT_MAP ? o->via.map.size : o->via.array.size;
	if (n > EXL_MAX_BIAS)
		return fail_big(d, "token_bias", "%u entries is over the limit of %d", n, EXL_MAX_BIAS);
	g->bias = msgpack_zone_malloc(d->zone, sizeof(*g->bias) * (n + 1));
	if (!g->bias)
		return fail(d, "token_bias", "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		const msgpack_object *k, *v;
		int64_t id;
		double b;
		if (o->type == MSGPACK_OBJECT_MAP) {
			k = &o->via.map.ptr[i].key;
			v = &o->via.map.ptr[i].val;
		} else {
			const msgpack_object *pair = &o->via.array.ptr[i];
			if (pair->type != MSGPACK_OBJECT_ARRAY || pair->via.array.size != 2)
				return fail(d, "token_bias", "item %u: wants [id, bias]", i);
			k = &pair->via.array.ptr[0];
			v = &pair->via.array.ptr[1];
		}
		if (!obj_int(k, &id) || id < 0 || id > INT32_MAX)
			return fail(d, "token_bias", "item %u: wants a token id (integer >= 0) as key", i);
		if (!obj_num(v, &b))
			return fail(d, "token_bias", "item %u: wants %s as bias, got %s", i, what,
				    type_name(v));
		if (!genrange_ok(range, b) || !genrange_ok(range, (double)(float)b)) {
			char nb[32];
			return fail(d, "token_bias", "item %u: wants %s as bias, got %s", i, what,
				    num_str(b, nb, sizeof(nb)));
		}
		g->bias[i].id = (int32_t)id;
		g->bias[i].bias = (float)b;
	}
	g->s.sampling.bias = g->bias;
	g->s.sampling.n_bias = (int)n;
	return 0;
}

/* stop: [str | int, ...] */
static int dec_stop(struct dec *d, struct exl_req_generate *g)
{
	const msgpack_object *o = find(d->map, "stop");
	int n_str = 0, n_tok = 0;

	if (!o)
		return 0;
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return fail(d, "stop", "wants an array of strings and token ids, got %s", type_name(o));
	if (o->via.array.size > EXL_MAX_STOP_STRINGS + EXL_MAX_STOP_TOKENS)
		return fail_big(d, "stop", "%u conditions is over the limit of %d", o->via.array.size,
			    EXL_MAX_STOP_STRINGS + EXL_MAX_STOP_TOKENS);
	const char **strs = msgpack_zone_malloc(d->zone, sizeof(char *) * (o->via.array.size + 1));
	int32_t *toks = msgpack_zone_malloc(d->zone, sizeof(int32_t) * (o->via.array.size + 1));
	if (!strs || !toks)
		return fail(d, "stop", "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *it = &o->via.array.ptr[i];
		int64_t id;
		if (it->type == MSGPACK_OBJECT_STR) {
			if (n_str >= EXL_MAX_STOP_STRINGS)
				return fail_big(d, "stop", "more than %d stop strings", EXL_MAX_STOP_STRINGS);
			if (it->via.str.size == 0 || it->via.str.size > EXL_MAX_STRING_ITEM)
				return fail(d, "stop", "item %u: a stop string wants 1 to %d bytes, got %u",
					    i, EXL_MAX_STRING_ITEM, it->via.str.size);
			char what[32];
			snprintf(what, sizeof(what), "item %u: ", i);
			if (check_utf8(d, "stop", it, what))
				return -1;
			strs[n_str] = zone_cstr(d, "stop", it->via.str.ptr, it->via.str.size);
			if (!strs[n_str++])
				return -1;
		} else if (obj_int(it, &id) && id >= 0 && id <= INT32_MAX) {
			if (n_tok >= EXL_MAX_STOP_TOKENS)
				return fail_big(d, "stop", "more than %d stop tokens", EXL_MAX_STOP_TOKENS);
			toks[n_tok++] = (int32_t)id;
		} else {
			return fail(d, "stop", "item %u: wants a string or a token id, got %s", i,
				    type_name(it));
		}
	}
	g->s.stop_strings = strs;
	g->s.n_stop_strings = n_str;
	g->s.stop_tokens = toks;
	g->s.n_stop_tokens = n_tok;
	return 0;
}

/* lora: [name | [name, scale], ...]; the loop resolves the names against
 * the model's adapters (engine/adapters.c). */
static int dec_lora(struct dec *d, struct exl_req_generate *g)
{
	const msgpack_object *o = find(d->map, "lora");

	if (!o)
		return 0;
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return fail(d, "lora", "wants an array of names or [name, scale], got %s",
			    type_name(o));
	if (o->via.array.size > EXL_MAX_LORAS)
		return fail_big(d, "lora", "%u adapters is over the limit of %d", o->via.array.size,
				EXL_MAX_LORAS);
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *it = &o->via.array.ptr[i], *name = it;
		double scale = 1.0;

		if (it->type == MSGPACK_OBJECT_ARRAY) {
			if (it->via.array.size != 2)
				return fail(d, "lora", "item %u: wants [name, scale]", i);
			name = &it->via.array.ptr[0];
			if (!obj_num(&it->via.array.ptr[1], &scale) ||
			    !(fabs(scale) <= EXL_LORA_SCALE_MAX))
				return fail(d, "lora", "item %u: wants a scale in [%g, %g]", i,
					    -EXL_LORA_SCALE_MAX, EXL_LORA_SCALE_MAX);
		}
		if (name->type != MSGPACK_OBJECT_STR ||
		    !exl_model_name_valid(name->via.str.ptr, name->via.str.size))
			return fail(d, "lora", "item %u: wants an adapter name (a file name in the "
				    "model directory, without .gguf)", i);
		memcpy(g->lora_name[i], name->via.str.ptr, name->via.str.size);
		g->lora_name[i][name->via.str.size] = '\0';
		g->lora_scale[i] = (float)scale;
	}
	g->n_lora = (int)o->via.array.size;
	return 0;
}

static int dec_breakers(struct dec *d, struct exl_sampler_params *p)
{
	const char *const *list = NULL;
	int n = 0;

	if (get_str_list(d, "dry_sequence_breakers", EXL_SAMPLER_MAX_BREAKERS,
			 EXL_SAMPLER_MAX_BREAKER_LEN - 1, &list, &n))
		return -1;
	if (!list)
		return 0;
	p->n_dry_breakers = n;
	for (int i = 0; i < n; i++)
		snprintf(p->dry_breakers[i], sizeof(p->dry_breakers[i]), "%s", list[i]);
	return 0;
}

static int dec_prompt(struct dec *d, const char *text_key, const char *ids_key,
		      struct exl_prompt *p, bool *present, size_t max_text)
{
	const char *text = NULL;
	size_t len = 0;
	const int32_t *ids = NULL;
	size_t n = 0;

	if (get_str(d, text_key, max_text, &text, &len) ||
	    get_ids(d, ids_key, EXL_MAX_VALUES, &ids, &n))
		return -1;
	if (text && ids)
		return fail(d, text_key, "give either %s or %s, not both", text_key, ids_key);
	memset(p, 0, sizeof(*p));
	*present = text || ids;
	if (text) {
		p->text = text;
		p->len = len;
	} else if (ids) {
		if (n == 0)
			return fail(d, ids_key, "is empty");
		p->ids = ids;
		p->n_ids = (int)n;
	}
	return 0;
}

static int dec_stream(struct dec *d, struct exl_req_generate *g)
{
	const char *s = NULL;
	size_t len = 0;

	g->stream = EXL_STREAM_DEFAULT;
	if (get_str(d, "stream", 16, &s, &len))
		return -1;
	if (!s)
		return 0;
	if (len == 4 && !memcmp(s, "ring", 4))
		g->stream = EXL_STREAM_RING;
	else if (len == 6 && !memcmp(s, "socket", 6))
		g->stream = EXL_STREAM_SOCKET;
	else if (len == 4 && !memcmp(s, "none", 4))
		g->stream = EXL_STREAM_NONE;
	else
		return fail(d, "stream", "wants \"ring\", \"socket\" or \"none\", got \"%.*s\"",
			    (int)len, s);
	return 0;
}

/* embeddings: [{alias: str, data: bin of float32 rows}, ...] */
static int dec_embeddings(struct dec *d, struct exl_req_generate *g)
{
	const msgpack_object *o = find(d->map, "embeddings");

	if (!o)
		return 0;
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return fail(d, "embeddings", "wants an array of {alias, data} maps, got %s",
			    type_name(o));
	if (o->via.array.size > EXL_GEN_MAX_EMBD_BLOCKS)
		return fail_big(d, "embeddings", "%u blocks is over the limit of %d",
				o->via.array.size, EXL_GEN_MAX_EMBD_BLOCKS);
	g->embd = msgpack_zone_malloc(d->zone, sizeof(*g->embd) * (o->via.array.size + 1));
	if (!g->embd)
		return fail(d, "embeddings", "out of memory");
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *it = &o->via.array.ptr[i], *a, *v;

		if (it->type != MSGPACK_OBJECT_MAP)
			return fail(d, "embeddings", "item %u: wants a map, got %s", i, type_name(it));
		a = find(it, "alias");
		v = find(it, "data");
		if (!a || a->type != MSGPACK_OBJECT_STR || a->via.str.size == 0 ||
		    a->via.str.size > EXL_GEN_MAX_ALIAS_LEN)
			return fail(d, "embeddings", "item %u: alias wants a string of 1 to %d bytes",
				    i, EXL_GEN_MAX_ALIAS_LEN);
		if (check_utf8(d, "embeddings", a, "alias: "))
			return -1;
		if (!v || v->type != MSGPACK_OBJECT_BIN || v->via.bin.size == 0 ||
		    v->via.bin.size % 4)
			return fail(d, "embeddings", "item %u: data wants binary float32 rows (a "
				    "non-zero multiple of 4 bytes), got %s of %u bytes", i,
				    type_name(v), v && v->type == MSGPACK_OBJECT_BIN ?
				    v->via.bin.size : 0);
		char *alias = zone_cstr(d, "embeddings", a->via.str.ptr, a->via.str.size);
		float *rows = msgpack_zone_malloc(d->zone, v->via.bin.size);

		if (!alias || !rows)
			return alias ? fail(d, "embeddings", "out of memory") : -1;
		memcpy(rows, v->via.bin.ptr, v->via.bin.size);
		g->embd[i].alias = alias;
		g->embd[i].data = rows;
		g->embd[i].bytes = v->via.bin.size;
	}
	g->n_embd = (int)o->via.array.size;
	return 0;
}

static int dec_generate(struct dec *d, struct exl_req_generate *g, size_t max_text)
{
	struct exl_gen_settings *s = &g->s;
	struct exl_sampler_params *sp = &s->sampling;
	bool present = false;

	memset(g, 0, sizeof(*g));
	exl_gen_settings_init(s);
	g->return_text = -1;

	if (dec_prompt(d, "prompt", "prompt_ids", &g->prompt, &present, max_text))
		return -1;
	if (!present)
		return fail(d, "prompt", "missing (give prompt or prompt_ids)");
	if (dec_embeddings(d, g))
		return -1;
	if (dec_prompt(d, "negative_prompt", "negative_prompt_ids", &g->negative, &g->has_negative,
		       max_text))
		return -1;
	/* fill-in-the-middle: the prompt is the text before the gap */
	if (find(d->map, "suffix")) {
		if (get_str(d, "suffix", max_text, &s->fim_suffix, &s->fim_suffix_len))
			return -1;
		s->fim = true;
	}

	if (find(d->map, "add_bos")) {
		bool b = false;
		if (get_bool(d, "add_bos", &b))
			return -1;
		s->add_bos = b;
	}
	g->max_new_tokens_set = find(d->map, "max_new_tokens") != NULL;
	if (get_bool(d, "encode_special", &s->encode_special_tokens) ||
	    get_bool(d, "decode_special", &s->decode_special_tokens) ||
	    get_bool(d, "completion_only", &s->completion_only) ||
	    get_bool(d, "token_healing", &s->token_healing) ||
	    get_rint(d, "max_new_tokens", &s->max_new_tokens) ||
	    get_rint(d, "min_new_tokens", &s->min_new_tokens) ||
	    get_bool(d, "ignore_eos", &s->ignore_eos) ||
	    get_bool(d, "truncate", &s->truncate) ||
	    get_rfloat(d, "cfg_scale", &s->cfg_scale) ||
	    get_bool(d, "return_probs", &s->return_probs) ||
	    get_rint(d, "return_top_k", &s->return_top_k) ||
	    get_bool(d, "return_logits", &s->return_logits))
		return -1;
	if (find(d->map, "seed")) {
		const msgpack_object *o = find(d->map, "seed");
		if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			s->seed = o->via.u64;
		else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			s->seed = (uint64_t)o->via.i64;
		else
			return fail(d, "seed", "wants an integer, got %s", type_name(o));
		s->has_seed = true;
	}

	/* Samplers: wire names -> struct exl_sampler_params. */
	if (get_rfloat(d, "temperature", &sp->temperature) ||
	    get_bool(d, "temperature_last", &sp->temperature_last) ||
	    get_rint(d, "top_k", &sp->top_k) ||
	    get_rfloat(d, "top_p", &sp->top_p) ||
	    get_rfloat(d, "min_p", &sp->min_p) ||
	    get_rfloat(d, "typical", &sp->typical) ||
	    get_rfloat(d, "tfs", &sp->tfs) ||
	    get_rfloat(d, "top_a", &sp->top_a) ||
	    get_rfloat(d, "repetition_penalty", &sp->rep_pen) ||
	    get_rint(d, "penalty_range", &sp->rep_range) ||
	    get_rint(d, "penalty_decay", &sp->rep_decay) ||
	    get_rfloat(d, "frequency_penalty", &sp->freq_pen) ||
	    get_rfloat(d, "presence_penalty", &sp->pres_pen) ||
	    get_rint(d, "no_repeat_ngram", &sp->no_repeat_ngram) ||
	    get_rfloat(d, "dry_multiplier", &sp->dry_mult) ||
	    get_rfloat(d, "dry_base", &sp->dry_base) ||
	    get_rint(d, "dry_allowed_length", &sp->dry_allowed_len) ||
	    get_rint(d, "dry_range", &sp->dry_range) ||
	    dec_breakers(d, sp) ||
	    get_rfloat(d, "xtc_probability", &sp->xtc_prob) ||
	    get_rfloat(d, "xtc_threshold", &sp->xtc_thresh) ||
	    get_rint(d, "mirostat", &sp->mirostat) ||
	    get_rfloat(d, "mirostat_tau", &sp->mirostat_tau) ||
	    get_rfloat(d, "mirostat_eta", &sp->mirostat_eta) ||
	    dec_bias(d, g))
		return -1;

	if (dec_stop(d, g) || dec_lora(d, g) ||
	    get_str_list(d, "banned_strings", EXL_MAX_BANNED, EXL_MAX_STRING_ITEM,
			 &s->banned_strings, &s->n_banned_strings))
		return -1;

	if (get_cstr(d, "grammar", max_text, &g->grammar) ||
	    get_cstr(d, "json_schema", max_text, &g->json_schema) ||
	    get_cstr(d, "regex", max_text, &g->regex) ||
	    get_bool(d, "filter_prefer_eos", &g->filter_prefer_eos))
		return -1;
	if ((g->grammar != NULL) + (g->json_schema != NULL) + (g->regex != NULL) > 1)
		return fail(d, "grammar", "give at most one of grammar, json_schema and regex");
	s->grammar = g->grammar;
	s->json_schema = g->json_schema;
	s->regex = g->regex;
	s->filter_prefer_eos = g->filter_prefer_eos;

	if (get_cstr(d, "draft_model", EXL_GEN_MAX_DRAFT_NAME, &s->draft_model) ||
	    get_rint(d, "draft_tokens", &s->draft_tokens) ||
	    get_rint(d, "ngram_draft", &s->ngram_draft) ||
	    get_rint(d, "num_beams", &s->num_beams) ||
	    get_rfloat(d, "length_penalty", &s->length_penalty))
		return -1;
	if (s->draft_model && (!*s->draft_model || s->ngram_draft))
		return fail(d, "draft_model", !*s->draft_model ? "is empty" :
			    "give at most one of draft_model and ngram_draft");

	if (dec_stream(d, g))
		return -1;
	if (find(d->map, "return_text")) {
		bool b = false;
		if (get_bool(d, "return_text", &b))
			return -1;
		g->return_text = b;
	}
	return 0;
}

static int id_valid(const msgpack_object *id)
{
	switch (id->type) {
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		return 1;
	case MSGPACK_OBJECT_STR:
		return id->via.str.size <= EXL_MAX_ID_BYTES;
	default:
		return 0;
	}
}

int exl_req_decode(const msgpack_object *root, msgpack_zone *zone, struct exl_req *req,
		   char *err, size_t errlen)
{
	struct dec d = { .map = root, .zone = zone, .op = "request", .err = err, .errlen = errlen,
			 .code = EXL_E_BAD_REQUEST };
	const msgpack_object *o;
	int64_t v = 0;
	size_t max_text = (size_t)EXL_MAX_MESSAGE_MAX;

	memset(req, 0, sizeof(*req));
	if (root->type != MSGPACK_OBJECT_MAP) {
		fail(&d, NULL, "a request is a map, got %s", type_name(root));
		return EXL_E_BAD_REQUEST;
	}
	o = find(root, "id");
	if (o) {
		if (!id_valid(o)) {
			fail(&d, "id", "wants an integer or a string of at most %d bytes, got %s",
			     EXL_MAX_ID_BYTES, type_name(o));
			return EXL_E_BAD_REQUEST;
		}
		/* Every reply echoes it: it must be sendable. */
		if (o->type == MSGPACK_OBJECT_STR && check_utf8(&d, "id", o, ""))
			return EXL_E_BAD_REQUEST;
		req->id = o;
	}
	o = find(root, "op");
	if (!o) {
		fail(&d, "op", "missing");
		return EXL_E_BAD_REQUEST;
	}
	if (o->type != MSGPACK_OBJECT_STR) {
		fail(&d, "op", "wants a string, got %s", type_name(o));
		return EXL_E_BAD_REQUEST;
	}
	if (check_utf8(&d, "op", o, ""))
		return EXL_E_BAD_REQUEST;
	size_t i;
	for (i = 0; i < sizeof(op_table) / sizeof(op_table[0]); i++)
		if (key_is(o, op_table[i].name))
			break;
	if (i == sizeof(op_table) / sizeof(op_table[0])) {
		/* Quoted up to 64 bytes, cut before a character, not in one. */
		size_t n = o->via.str.size > 64 ? 64 : o->via.str.size;
		while (n > 0 && n < o->via.str.size && ((uint8_t)o->via.str.ptr[n] & 0xc0) == 0x80)
			n--;
		snprintf(err, errlen, "unknown op \"%.*s\"", (int)n, o->via.str.ptr);
		return EXL_E_UNKNOWN_OP;
	}
	req->op = op_table[i].op;
	d.op = op_table[i].name;

	int rc = 0;
	switch (req->op) {
	case EXL_OPC_HELLO:
		rc = dec_hello(&d, req);
		break;
	case EXL_OPC_MODELS:
	case EXL_OPC_STATUS:
	case EXL_OPC_RESUME:
		break;
	case EXL_OPC_LOAD:
		rc = get_model(&d, req, true);
		break;
	case EXL_OPC_UNLOAD:
		rc = get_model(&d, req, true) || get_bool(&d, "cancel", &req->u.unload.cancel);
		break;
	case EXL_OPC_TOKENIZE:
		rc = get_model(&d, req, false) || dec_tokenize(&d, req, max_text);
		break;
	case EXL_OPC_DETOKENIZE:
		rc = get_model(&d, req, false) || dec_detokenize(&d, req);
		break;
	case EXL_OPC_GENERATE:
		rc = get_model(&d, req, false) || dec_generate(&d, &req->u.gen, max_text);
		break;
	case EXL_OPC_EMBED:
		rc = get_model(&d, req, false) || dec_embed(&d, &req->u.gen, max_text);
		break;
	case EXL_OPC_CANCEL:
		if (!find(root, "job")) {
			fail(&d, "job", "missing (the job id from the generate reply)");
			return EXL_E_BAD_REQUEST;
		}
		rc = get_int(&d, "job", 1, INT64_MAX, &v);
		req->u.cancel.job = (uint64_t)v;
		break;
	}
	return rc ? d.code : EXL_OK;
}

/* ---- encoding ---------------------------------------------------------- */

static int sbuf_write(void *data, const char *buf, size_t len)
{
	struct exl_packed_id *p = data;

	if (p->len + len > sizeof(p->bytes))
		return -1;
	memcpy(p->bytes + p->len, buf, len);
	p->len = (uint16_t)(p->len + len);
	return 0;
}

void exl_packed_id_set(struct exl_packed_id *p, const msgpack_object *id)
{
	msgpack_packer pk;

	p->len = 0;
	if (!id)
		return;
	msgpack_packer_init(&pk, p, sbuf_write);
	if (msgpack_pack_object(&pk, *id))
		p->len = 0;
}

void exl_pack_key(msgpack_packer *pk, const char *key)
{
	exl_pack_cstr(pk, key);
}

void exl_pack_cstr(msgpack_packer *pk, const char *s)
{
	exl_pack_strn(pk, s, strlen(s));
}

void exl_pack_strn(msgpack_packer *pk, const char *s, size_t n)
{
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

void exl_pack_text(msgpack_packer *pk, const char *s, size_t n)
{
	static const char fffd[3] = { (char)0xef, (char)0xbf, (char)0xbd };
	size_t bad = exl_utf8_bad_at(s, n), out = bad, i;

	if (bad == n) {
		exl_pack_strn(pk, s, n);
		return;
	}
	/* Each byte that starts no valid character becomes U+FFFD (3 bytes):
	 * first the length, then the pieces. */
	for (i = bad; i < n;) {
		size_t k = exl_utf8_bad_at(s + i, n - i);

		if (k == 0) {
			out += 3;
			i++;
		} else {
			out += k;
			i += k;
		}
	}
	msgpack_pack_str(pk, out);
	msgpack_pack_str_body(pk, s, bad);
	for (i = bad; i < n;) {
		size_t k = exl_utf8_bad_at(s + i, n - i);

		if (k == 0) {
			msgpack_pack_str_body(pk, fffd, 3);
			i++;
		} else {
			msgpack_pack_str_body(pk, s + i, k);
			i += k;
		}
	}
}

void exl_pack_reply(msgpack_packer *pk, msgpack_sbuffer *sb, const char *op,
		    const struct exl_packed_id *id, uint32_t n_fields)
{
	bool has_id = id && id->len;

	msgpack_pack_map(pk, n_fields + 1 + (has_id ? 1 : 0));
	exl_pack_key(pk, "op");
	exl_pack_cstr(pk, op);
	if (has_id) {
		exl_pack_key(pk, "id");
		msgpack_sbuffer_write(sb, (const char *)id->bytes, id->len);
	}
}

void exl_pack_error(msgpack_packer *pk, msgpack_sbuffer *sb, const struct exl_packed_id *id,
		    int code, const char *message)
{
	exl_pack_reply(pk, sb, EXL_OP_ERROR, id, 2);
	exl_pack_key(pk, "code");
	exl_pack_cstr(pk, exl_code_name(code));
	exl_pack_key(pk, "message");
	/* Messages quote input (cut to a length, maybe inside a character)
	 * and model files. */
	exl_pack_text(pk, message, strlen(message));
}
