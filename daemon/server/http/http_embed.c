/* HTTP embeddings: OpenAI's POST /v1/embeddings, Ollama's POST /api/embed
 * and its older POST /api/embeddings.  Each input text is one embed job
 * (the msgpack front's op embed, docs/protocol.md) on the request's sink,
 * prepared and run like a generate request's choices and batched with
 * every other job on the model; the reply is made once all are back.
 * /v1/embeddings and /api/embed return unit vectors (as llama.cpp's server
 * and Ollama do), /api/embeddings the raw pooled state. */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/json_parse.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/engine_thread.h"
#include "daemon/server/engine/models_registry.h"
#include "daemon/server/engine/prep.h"
#include "daemon/server/http/http_internal.h"
#include "daemon/server/loop.h"

/* Texts of one request at most (OpenAI's limit is 2048). */
#define EMBED_MAX_INPUTS 2048

struct exl_http_embed {
	enum exl_http_embed_api api;
	int n;
	const char **text;         /* into the request's body (r->doc) */
	size_t *len;
	float **vec;               /* [n], malloc'ed as they come */
	size_t *dim;
	int *n_tokens;
	int n_launched, n_done;
	enum exl_pooling pooling;  /* EXL_POOL_NONE: the model's */
	bool normalize, truncate;
	bool base64;               /* OpenAI's encoding_format "base64" */
};

void exl_http_embed_free(struct exl_http_req *r)
{
	struct exl_http_embed *e = r->emb;

	if (!e)
		return;
	for (int i = 0; e->vec && i < e->n; i++)
		free(e->vec[i]);
	free(e->text);
	free(e->len);
	free(e->vec);
	free(e->dim);
	free(e->n_tokens);
	free(e);
	r->emb = NULL;
}

/* The body: input (a string or an array of them; Ollama's old endpoint:
 * prompt), model, and exld's own pooling and truncate. */
static int map_body(struct exl_http_req *r, const struct exl_json *root, char *model,
		    size_t model_len, const char **param, char *err, size_t errlen)
{
	struct exl_http_embed *e = r->emb;
	const char *key = e->api == EXL_HTTP_OLLAMA_EMBEDDINGS ? "prompt" : "input";
	const struct exl_json *in = exl_json_get(root, key), *v;

	*param = key;
	if (!root || root->type != EXL_JSON_OBJECT) {
		snprintf(err, errlen, "the body must be a JSON object");
		return -1;
	}
	if (!in || (in->type != EXL_JSON_STRING && in->type != EXL_JSON_ARRAY)) {
		snprintf(err, errlen, "%s: wants %s", key, e->api == EXL_HTTP_OLLAMA_EMBEDDINGS ?
			 "a string" : "a string or an array of strings");
		return -1;
	}
	e->n = in->type == EXL_JSON_STRING ? 1 : (int)(in->n > EMBED_MAX_INPUTS ?
						       EMBED_MAX_INPUTS + 1 : in->n);
	if (e->n == 0 || e->n > EMBED_MAX_INPUTS ||
	    (in->type == EXL_JSON_ARRAY && e->api == EXL_HTTP_OLLAMA_EMBEDDINGS)) {
		snprintf(err, errlen, "%s: wants 1 to %d texts", key, EMBED_MAX_INPUTS);
		return -1;
	}
	e->text = calloc((size_t)e->n, sizeof(*e->text));
	e->len = calloc((size_t)e->n, sizeof(*e->len));
	e->vec = calloc((size_t)e->n, sizeof(*e->vec));
	e->dim = calloc((size_t)e->n, sizeof(*e->dim));
	e->n_tokens = calloc((size_t)e->n, sizeof(*e->n_tokens));
	if (!e->text || !e->len || !e->vec || !e->dim || !e->n_tokens) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int i = 0; i < e->n; i++) {
		v = in->type == EXL_JSON_STRING ? in : in->v[i];
		if (v->type != EXL_JSON_STRING) {
			snprintf(err, errlen, "%s: item %d: wants a string, got %s", key, i,
				 exl_json_type_name(v->type));
			return -1;
		}
		if (memchr(v->str, 0, v->len)) {
			snprintf(err, errlen, "%s: item %d holds a NUL character", key, i);
			return -1;
		}
		e->text[i] = v->str;
		e->len[i] = v->len;
	}
	model[0] = 0;
	v = exl_json_get(root, "model");
	if (v && v->type == EXL_JSON_STRING && v->len < model_len)
		memcpy(model, v->str, v->len + 1);
	else if (v && v->type != EXL_JSON_NULL) {
		*param = "model";
		snprintf(err, errlen, "model: wants a model name");
		return -1;
	}
	v = exl_json_get(root, "encoding_format");
	if (v && v->type == EXL_JSON_STRING && !strcmp(v->str, "base64") &&
	    e->api == EXL_HTTP_OAI_EMBEDDINGS) {
		e->base64 = true;
	} else if (v && !(v->type == EXL_JSON_STRING && !strcmp(v->str, "float"))) {
		*param = "encoding_format";
		snprintf(err, errlen, "encoding_format: wants \"float\" or \"base64\"");
		return -1;
	}
	if (exl_json_get(root, "dimensions")) {
		*param = "dimensions";
		snprintf(err, errlen, "dimensions: the model's own size is the only one offered");
		return -1;
	}
	v = exl_json_get(root, "truncate");
	if (v && v->type != EXL_JSON_BOOL) {
		*param = "truncate";
		snprintf(err, errlen, "truncate: wants a boolean");
		return -1;
	}
	/* Ollama truncates unless told not to */
	e->truncate = v ? v->b : e->api == EXL_HTTP_OLLAMA_EMBED;
	v = exl_json_get(root, "pooling");
	if (v) {
		*param = "pooling";
		if (v->type == EXL_JSON_STRING && !strcmp(v->str, "mean"))
			e->pooling = EXL_POOL_MEAN;
		else if (v->type == EXL_JSON_STRING && !strcmp(v->str, "last"))
			e->pooling = EXL_POOL_LAST;
		else if (v->type == EXL_JSON_STRING && !strcmp(v->str, "cls"))
			e->pooling = EXL_POOL_CLS;
		else {
			snprintf(err, errlen, "pooling: wants \"mean\", \"last\" or \"cls\"");
			return -1;
		}
	}
	e->normalize = e->api != EXL_HTTP_OLLAMA_EMBEDDINGS;
	return 0;
}

/* Text k's preparation: an embed request, its text copied into the prep's
 * zone (the preparation may outlast r). */
static struct exl_prep *text_prep(struct exl_http_req *r, int k)
{
	struct exl_http_embed *e = r->emb;
	struct exl_prep *p = exl_prep_new_decoded();
	char *text;

	if (!p)
		return NULL;
	text = msgpack_zone_malloc(p->up.zone, e->len[k] + 1);
	if (!text) {
		exl_prep_free(p);
		return NULL;
	}
	memcpy(text, e->text[k], e->len[k] + 1);
	p->req.op = EXL_OPC_EMBED;
	snprintf(p->req.model, sizeof(p->req.model), "%s", r->model);
	struct exl_req_generate *g = &p->req.u.gen;

	memset(g, 0, sizeof(*g));
	exl_gen_settings_init(&g->s);
	g->s.max_new_tokens = 0;
	g->s.pooling = e->pooling;
	g->s.normalize = e->normalize;
	g->s.truncate = e->truncate;
	g->stream = EXL_STREAM_NONE;
	g->prompt.text = text;
	g->prompt.len = e->len[k];
	msgpack_object id = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = (uint64_t)k };
	exl_packed_id_set(&p->id, &id);
	return p;
}

void exl_http_embed_launch(struct exl_http_req *r)
{
	struct exl_http_embed *e = r->emb;
	struct exl_loop *lp = r->h->lp;
	int max_jobs, max_tokens;

	exl_config_uid_limits(&lp->cfg, r->uid, &max_jobs, &max_tokens);
	r->blocked = false;
	while (e->n_launched < e->n) {
		int k = e->n_launched;
		struct exl_model_entry *ent = exl_http_pick_loaded(r);

		if (!ent)
			return;
		struct exl_prep *p = text_prep(r, k);
		if (!p) {
			exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
			return;
		}
		struct exl_srv_job *j;
		int place = exl_http_place(r, ent, p, max_jobs, &j);
		if (place == EXL_HTTP_PLACE_FAILED || place == EXL_HTTP_PLACE_BLOCKED)
			return;
		j->stream = EXL_STREAM_NONE;
		j->embed = true;
		e->n_launched++;
		r->n_launched++;
		if (place == EXL_HTTP_PLACE_HERE) {
			exl_prep_run(p);
			if (!exl_http_prep_finish(r->h, p))
				return; /* r ended */
			continue;
		}
		r->n_pooled++;
		exl_prep_pool_submit(lp->prep, p);
	}
}

void exl_http_start_embed(struct exl_http *h, struct evhttp_request *req,
			  enum exl_http_embed_api api, struct exl_json_doc *doc, uid_t uid)
{
	enum exl_http_style style = api == EXL_HTTP_OAI_EMBEDDINGS ? EXL_HTTP_STYLE_OPENAI :
				    EXL_HTTP_STYLE_OLLAMA;
	struct exl_http_req *r = exl_http_req_new(h, req, EXL_HTTP_KIND_EMBED, style, uid);
	const char *param = NULL;
	char err[300], model[EXL_MAX_NAME + 1];

	if (!r) {
		exl_json_free(doc);
		exl_http_send_error(req, style, 500, "internal", NULL, "out of memory");
		return;
	}
	r->doc = doc;
	r->emb = calloc(1, sizeof(*r->emb));
	if (!r->emb) {
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return;
	}
	r->emb->api = api;
	if (map_body(r, exl_json_root(doc), model, sizeof(model), &param, err, sizeof(err))) {
		exl_http_req_fail(r, 400, "invalid_request_error", param, err);
		return;
	}
	struct exl_model_entry *ent = exl_http_pick(r, model[0] ? model : NULL);
	if (!ent)
		return;
	snprintf(r->model, sizeof(r->model), "%s", ent->name);
	r->model_p = ent->model;
	exl_http_embed_launch(r);
}

/* OpenAI's base64 form: the float32 values' little-endian bytes. */
static void write_base64(struct exl_jw *w, const float *v, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t bytes = n * 4, out = (bytes + 2) / 3 * 4, k = 0;
	const unsigned char *b = (const unsigned char *)v;
	char *s = malloc(out + 1);

	if (!s) {
		exl_jw_null(w);
		return;
	}
	for (size_t i = 0; i < bytes; i += 3) {
		uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < bytes ? (uint32_t)b[i + 1] << 8 : 0) |
			     (i + 2 < bytes ? b[i + 2] : 0);

		s[k++] = tab[x >> 18 & 63];
		s[k++] = tab[x >> 12 & 63];
		s[k++] = i + 1 < bytes ? tab[x >> 6 & 63] : '=';
		s[k++] = i + 2 < bytes ? tab[x & 63] : '=';
	}
	exl_jw_str(w, s, k);
	free(s);
}

static void reply(struct exl_http_req *r)
{
	struct exl_http_embed *e = r->emb;
	struct exl_jw *w = &r->w;
	int64_t tokens = 0;

	for (int i = 0; i < e->n; i++)
		tokens += e->n_tokens[i];
	exl_jw_reset(w);
	exl_jw_obj(w);
	if (e->api == EXL_HTTP_OAI_EMBEDDINGS) {
		exl_jw_kstr(w, "object", "list");
		exl_jw_key(w, "data");
		exl_jw_arr(w);
	} else if (e->api == EXL_HTTP_OLLAMA_EMBED) {
		exl_jw_kstr(w, "model", r->model);
		exl_jw_key(w, "embeddings");
		exl_jw_arr(w);
	} else {
		exl_jw_key(w, "embedding");
	}
	for (int i = 0; i < e->n; i++) {
		if (e->api == EXL_HTTP_OAI_EMBEDDINGS) {
			exl_jw_obj(w);
			exl_jw_kstr(w, "object", "embedding");
			exl_jw_kint(w, "index", i);
			exl_jw_key(w, "embedding");
		}
		if (e->base64) {
			write_base64(w, e->vec[i], e->dim[i]);
		} else {
			exl_jw_arr(w);
			for (size_t d = 0; d < e->dim[i]; d++)
				exl_jw_num(w, e->vec[i][d]);
			exl_jw_arr_end(w);
		}
		if (e->api == EXL_HTTP_OAI_EMBEDDINGS)
			exl_jw_obj_end(w);
	}
	if (e->api == EXL_HTTP_OAI_EMBEDDINGS) {
		exl_jw_arr_end(w);
		exl_jw_kstr(w, "model", r->model);
		exl_jw_key(w, "usage");
		exl_jw_obj(w);
		exl_jw_kint(w, "prompt_tokens", tokens);
		exl_jw_kint(w, "total_tokens", tokens);
		exl_jw_obj_end(w);
	} else if (e->api == EXL_HTTP_OLLAMA_EMBED) {
		exl_jw_arr_end(w);
		exl_jw_kint(w, "total_duration", (int64_t)(exl_now_ns() - r->start_ns));
		exl_jw_kint(w, "load_duration", 0);
		exl_jw_kint(w, "prompt_eval_count", tokens);
	}
	exl_jw_obj_end(w);
	if (exl_jw_failed(w)) {
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return;
	}
	if (r->req)
		exl_http_send_json(r->req, 200, w->buf, w->len);
	r->req = NULL;
	exl_http_req_end(r);
}

/* An embed reply of text k: its vector.  False when r ended. */
bool exl_http_embed_message(struct exl_http_req *r, const msgpack_object *m, int64_t k)
{
	struct exl_http_embed *e = r->emb;
	const msgpack_object *v = NULL;

	if (k < 0 || k >= e->n || e->vec[k])
		return true;
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *key = &m->via.map.ptr[i].key;

		if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == 9 &&
		    !memcmp(key->via.str.ptr, "embedding", 9))
			v = &m->via.map.ptr[i].val;
		if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == 8 &&
		    !memcmp(key->via.str.ptr, "n_tokens", 8) &&
		    m->via.map.ptr[i].val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			e->n_tokens[k] = (int)m->via.map.ptr[i].val.via.u64;
	}
	if (!v || v->type != MSGPACK_OBJECT_ARRAY || !v->via.array.size) {
		exl_http_req_fail(r, 500, "internal", NULL, "an embed job ended without a vector");
		return false;
	}
	e->vec[k] = malloc(v->via.array.size * sizeof(float));
	if (!e->vec[k]) {
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return false;
	}
	for (uint32_t d = 0; d < v->via.array.size; d++)
		e->vec[k][d] = (float)v->via.array.ptr[d].via.f64;
	e->dim[k] = v->via.array.size;
	if (++e->n_done < e->n)
		return true;
	reply(r);
	return false;
}
