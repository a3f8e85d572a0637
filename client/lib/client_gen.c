/* libexlclient: generation requests, the event stream, blocking generate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "client/lib/client_internal.h"

/* While only ring jobs run, the wait is a futex wait: everything about
 * them is announced in the ring (even a result too large for it, which
 * comes on the socket).  The slices are only there to notice a daemon that
 * died without closing the ring: its socket has closed. */
#define FUTEX_SLICE_MS 1000

void exl_gen_params_init(struct exl_gen_params *p)
{
	memset(p, 0, sizeof(*p));
	p->cfg_scale = NAN;
	p->add_bos = p->encode_special = p->decode_special = p->completion_only = -1;
	p->token_healing = -1;
	p->max_new_tokens = p->min_new_tokens = EXL_UNSET_INT;
	p->temperature = NAN;
	p->temperature_last = -1;
	p->top_k = EXL_UNSET_INT;
	p->top_p = p->min_p = p->typical = p->tfs = p->top_a = NAN;
	p->repetition_penalty = NAN;
	p->penalty_range = p->penalty_decay = EXL_UNSET_INT;
	p->frequency_penalty = p->presence_penalty = NAN;
	p->no_repeat_ngram = EXL_UNSET_INT;
	p->mirostat = EXL_UNSET_INT;
	p->mirostat_tau = p->mirostat_eta = NAN;
	p->dry_multiplier = p->dry_base = NAN;
	p->dry_allowed_length = p->dry_range = EXL_UNSET_INT;
	p->xtc_probability = p->xtc_threshold = NAN;
	p->ignore_eos = -1;
	p->truncate = -1;
	p->filter_prefer_eos = -1;
	p->return_probs = -1;
	p->return_top_k = EXL_UNSET_INT;
	p->return_logits = -1;
	p->return_text = -1;
	p->stream = EXL_STREAM_MODE_AUTO;
	p->ngram_draft = p->draft_tokens = p->num_beams = EXL_UNSET_INT;
	p->length_penalty = NAN;
}

void exl_result_free(struct exl_result *r)
{
	if (!r)
		return;
	free(r->stop_string);
	free(r->text);
	free(r->ids);
	free(r->probs);
	free(r->error);
	memset(r, 0, sizeof(*r));
	r->stop_token = -1;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return -1;
	*p = q;
	*cap = n;
	return 0;
}

/* ---- encoding a generate request ---- */

/* The generate keys beyond the core and the feature each belongs to
 * (exl_wire.h).  filter_prefer_eos is not here: it only modifies a
 * constraint, whose own key is. */
static const struct {
	const char *key, *feature;
} optional_keys[] = {
	{ "repetition_penalty", EXL_FEAT_PENALTIES },
	{ "penalty_range", EXL_FEAT_PENALTIES },
	{ "penalty_decay", EXL_FEAT_PENALTIES },
	{ "frequency_penalty", EXL_FEAT_PENALTIES },
	{ "presence_penalty", EXL_FEAT_PENALTIES },
	{ "no_repeat_ngram", EXL_FEAT_NO_REPEAT_NGRAM },
	{ "typical", EXL_FEAT_TYPICAL },
	{ "tfs", EXL_FEAT_TFS },
	{ "top_a", EXL_FEAT_TOP_A },
	{ "token_bias", EXL_FEAT_TOKEN_BIAS },
	{ "dry_multiplier", EXL_FEAT_DRY },
	{ "dry_base", EXL_FEAT_DRY },
	{ "dry_allowed_length", EXL_FEAT_DRY },
	{ "dry_range", EXL_FEAT_DRY },
	{ "dry_sequence_breakers", EXL_FEAT_DRY },
	{ "xtc_probability", EXL_FEAT_XTC },
	{ "xtc_threshold", EXL_FEAT_XTC },
	{ "mirostat", EXL_FEAT_MIROSTAT },
	{ "mirostat_tau", EXL_FEAT_MIROSTAT },
	{ "mirostat_eta", EXL_FEAT_MIROSTAT },
	{ "banned_strings", EXL_FEAT_BANNED_STRINGS },
	{ "token_healing", EXL_FEAT_TOKEN_HEALING },
	{ "negative_prompt", EXL_FEAT_CFG },
	{ "negative_prompt_ids", EXL_FEAT_CFG },
	{ "cfg_scale", EXL_FEAT_CFG },
	{ "grammar", EXL_FEAT_GRAMMAR },
	{ "json_schema", EXL_FEAT_JSON_SCHEMA },
	{ "regex", EXL_FEAT_REGEX },
	{ "return_logits", EXL_FEAT_RETURN_LOGITS },
	{ "draft_model", EXL_FEAT_SPECULATIVE },
	{ "ngram_draft", EXL_FEAT_SPECULATIVE },
	{ "draft_tokens", EXL_FEAT_SPECULATIVE },
	{ "num_beams", EXL_FEAT_BEAM_SEARCH },
	{ "length_penalty", EXL_FEAT_BEAM_SEARCH },
	{ "truncate", EXL_FEAT_TRUNCATE },
	{ "suffix", EXL_FEAT_FIM },
	{ "embeddings", EXL_FEAT_EMBEDDINGS },
	{ "lora", EXL_FEAT_LORA },
};

/* The fields of a map whose size is known only at the end, and the first
 * key whose feature the daemon did not list (the request is not sent). */
struct fields {
	struct exl_cl_msg m;
	uint32_t n;
	const struct exl_client *c;
	const char *refused_key, *refused_feature;
};

/* A key that asks for its feature (every value but a false bool). */
static void f_key(struct fields *f, const char *key)
{
	for (size_t i = 0; i < sizeof(optional_keys) / sizeof(optional_keys[0]); i++) {
		if (strcmp(optional_keys[i].key, key))
			continue;
		if (!f->refused_key && !exl_server_feature(f->c, optional_keys[i].feature)) {
			f->refused_key = key;
			f->refused_feature = optional_keys[i].feature;
		}
		break;
	}
	exl_cl_key(&f->m, key);
	f->n++;
}

/* A key whose value asks for nothing (false: off, as any daemon is). */
static void f_key_off(struct fields *f, const char *key)
{
	exl_cl_key(&f->m, key);
	f->n++;
}

static void f_float(struct fields *f, const char *key, float v)
{
	if (isnan(v))
		return;
	f_key(f, key);
	msgpack_pack_double(&f->m.pk, v);
}

static void f_int(struct fields *f, const char *key, int v)
{
	if (v == EXL_UNSET_INT)
		return;
	f_key(f, key);
	msgpack_pack_int(&f->m.pk, v);
}

static void f_bool(struct fields *f, const char *key, int v)
{
	if (v < 0)
		return;
	if (v) {
		f_key(f, key);
		msgpack_pack_true(&f->m.pk);
	} else {
		f_key_off(f, key);
		msgpack_pack_false(&f->m.pk);
	}
}

static void f_str(struct fields *f, const char *key, const char *s)
{
	if (!s)
		return;
	f_key(f, key);
	exl_cl_str(&f->m, s);
}

static void f_ids(struct fields *f, const char *key, const int32_t *ids, size_t n)
{
	if (!ids)
		return;
	f_key(f, key);
	msgpack_pack_array(&f->m.pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_int32(&f->m.pk, ids[i]);
}

static void f_strs(struct fields *f, const char *key, const char *const *s, size_t n)
{
	if (!s)
		return;
	f_key(f, key);
	msgpack_pack_array(&f->m.pk, n);
	for (size_t i = 0; i < n; i++)
		exl_cl_str(&f->m, s[i] ? s[i] : "");
}

/* Logits are streamed over the socket only: AUTO picks it for them. */
static enum exl_stream_mode stream_mode(const struct exl_gen_params *p)
{
	if (p->stream == EXL_STREAM_MODE_AUTO && p->return_logits > 0)
		return EXL_STREAM_MODE_SOCKET;
	return p->stream;
}

static const char *stream_name(enum exl_stream_mode m)
{
	switch (m) {
	case EXL_STREAM_MODE_RING: return "ring";
	case EXL_STREAM_MODE_SOCKET: return "socket";
	case EXL_STREAM_MODE_NONE: return "none";
	default: return NULL;
	}
}

static void pack_params(struct fields *f, const struct exl_gen_params *p, const char *prompt)
{
	f_str(f, "model", p->model);
	f_str(f, "prompt", prompt);
	if (!prompt)
		f_ids(f, "prompt_ids", p->prompt_ids, p->n_prompt_ids);
	f_str(f, "suffix", p->suffix);
	f_str(f, "negative_prompt", p->negative_prompt);
	f_ids(f, "negative_prompt_ids", p->negative_prompt_ids, p->n_negative_prompt_ids);
	f_float(f, "cfg_scale", p->cfg_scale);
	f_bool(f, "add_bos", p->add_bos);
	f_bool(f, "encode_special", p->encode_special);
	f_bool(f, "decode_special", p->decode_special);
	f_bool(f, "completion_only", p->completion_only);
	f_bool(f, "token_healing", p->token_healing);
	f_int(f, "max_new_tokens", p->max_new_tokens);
	f_int(f, "min_new_tokens", p->min_new_tokens);
	if (p->has_seed) {
		f_key(f, "seed");
		msgpack_pack_uint64(&f->m.pk, p->seed);
	}
	f_float(f, "temperature", p->temperature);
	f_bool(f, "temperature_last", p->temperature_last);
	f_int(f, "top_k", p->top_k);
	f_float(f, "top_p", p->top_p);
	f_float(f, "min_p", p->min_p);
	f_float(f, "typical", p->typical);
	f_float(f, "tfs", p->tfs);
	f_float(f, "top_a", p->top_a);
	f_float(f, "repetition_penalty", p->repetition_penalty);
	f_int(f, "penalty_range", p->penalty_range);
	f_int(f, "penalty_decay", p->penalty_decay);
	f_float(f, "frequency_penalty", p->frequency_penalty);
	f_float(f, "presence_penalty", p->presence_penalty);
	f_int(f, "no_repeat_ngram", p->no_repeat_ngram);
	if (p->bias_ids && p->bias_values) {
		f_key(f, "token_bias");
		msgpack_pack_array(&f->m.pk, p->n_bias);
		for (size_t i = 0; i < p->n_bias; i++) {
			msgpack_pack_array(&f->m.pk, 2);
			msgpack_pack_int32(&f->m.pk, p->bias_ids[i]);
			msgpack_pack_float(&f->m.pk, p->bias_values[i]);
		}
	}
	f_int(f, "mirostat", p->mirostat);
	f_float(f, "mirostat_tau", p->mirostat_tau);
	f_float(f, "mirostat_eta", p->mirostat_eta);
	f_float(f, "dry_multiplier", p->dry_multiplier);
	f_float(f, "dry_base", p->dry_base);
	f_int(f, "dry_allowed_length", p->dry_allowed_length);
	f_int(f, "dry_range", p->dry_range);
	f_strs(f, "dry_sequence_breakers", p->dry_sequence_breakers, p->n_dry_sequence_breakers);
	f_float(f, "xtc_probability", p->xtc_probability);
	f_float(f, "xtc_threshold", p->xtc_threshold);
	if (p->stop_strings || p->stop_tokens) {
		size_t ns = p->stop_strings ? p->n_stop_strings : 0;
		size_t nt = p->stop_tokens ? p->n_stop_tokens : 0;
		f_key(f, "stop");
		msgpack_pack_array(&f->m.pk, ns + nt);
		for (size_t i = 0; i < ns; i++)
			exl_cl_str(&f->m, p->stop_strings[i] ? p->stop_strings[i] : "");
		for (size_t i = 0; i < nt; i++)
			msgpack_pack_int32(&f->m.pk, p->stop_tokens[i]);
	}
	f_bool(f, "ignore_eos", p->ignore_eos);
	f_bool(f, "truncate", p->truncate);
	if (p->embeddings && p->n_embeddings) {
		f_key(f, "embeddings");
		msgpack_pack_array(&f->m.pk, p->n_embeddings);
		for (size_t i = 0; i < p->n_embeddings; i++) {
			const struct exl_input_embedding *e = &p->embeddings[i];
			size_t bytes = e->rows ? e->n_floats * sizeof(float) : 0;

			msgpack_pack_map(&f->m.pk, 2);
			exl_cl_key(&f->m, "alias");
			exl_cl_str(&f->m, e->alias ? e->alias : "");
			exl_cl_key(&f->m, "data");
			msgpack_pack_bin(&f->m.pk, bytes);
			msgpack_pack_bin_body(&f->m.pk, e->rows, bytes);
		}
	}
	f_strs(f, "banned_strings", p->banned_strings, p->n_banned_strings);
	f_str(f, "grammar", p->grammar);
	f_str(f, "json_schema", p->json_schema);
	f_str(f, "regex", p->regex);
	f_bool(f, "filter_prefer_eos", p->filter_prefer_eos);
	f_bool(f, "return_probs", p->return_probs);
	f_int(f, "return_top_k", p->return_top_k);
	f_bool(f, "return_logits", p->return_logits);
	f_bool(f, "return_text", p->return_text);
	f_str(f, "draft_model", p->draft_model);
	f_int(f, "ngram_draft", p->ngram_draft);
	f_int(f, "draft_tokens", p->draft_tokens);
	f_int(f, "num_beams", p->num_beams);
	f_float(f, "length_penalty", p->length_penalty);
	f_str(f, "stream", stream_name(stream_mode(p)));
	if (p->lora_names && p->n_loras) {
		f_key(f, "lora");
		msgpack_pack_array(&f->m.pk, p->n_loras);
		for (size_t i = 0; i < p->n_loras; i++) {
			msgpack_pack_array(&f->m.pk, 2);
			exl_cl_str(&f->m, p->lora_names[i] ? p->lora_names[i] : "");
			msgpack_pack_float(&f->m.pk, p->lora_scales ? p->lora_scales[i] : 1.0f);
		}
	}
}

static int add_socket_job(struct exl_client *c, uint64_t job);

int exl_submit(struct exl_client *c, const struct exl_gen_params *p, const char *prompt,
	       uint64_t *job)
{
	struct exl_gen_params dflt;
	struct fields f;
	struct exl_cl_msg m;
	msgpack_unpacked up;
	uint64_t j = 0;

	*job = 0;
	if (!p) {
		exl_gen_params_init(&dflt);
		p = &dflt;
	}
	if (!prompt && !p->prompt_ids)
		return exl_cl_fail(c, EXL_E_INVALID, "exl_submit: no prompt (text or prompt_ids)");
	if (p->stream == EXL_STREAM_MODE_RING && !c->hdr)
		return exl_cl_fail(c, EXL_E_NO_RING, "exl_submit: this connection has no ring");
	memset(&f, 0, sizeof(f));
	f.c = c;
	exl_cl_msg_init(&f.m);
	pack_params(&f, p, prompt);
	if (f.refused_key) {
		exl_cl_msg_free(&f.m);
		return exl_cl_fail(c, EXL_E_UNSUPPORTED, "generate: %s: this exld does not offer "
				   "the feature \"%s\" (%s); nothing was sent", f.refused_key,
				   f.refused_feature, c->features_listed ?
				   "its hello does not list it" :
				   "its hello lists no features: an exld older than this library");
	}
	exl_cl_msg_init(&m);
	uint64_t id = exl_cl_request(c, &m, EXL_OP_GENERATE, f.n);
	if (f.m.sb.data)
		msgpack_sbuffer_write(&m.sb, f.m.sb.data, f.m.sb.size);
	exl_cl_msg_free(&f.m);
	msgpack_unpacked_init(&up);
	int rc = exl_cl_call(c, &m, id, &up, NULL, NULL);
	exl_cl_msg_free(&m);
	if (!rc && !exl_cl_get_u64(&up.data, "job", &j))
		rc = exl_cl_fail(c, EXL_E_PROTOCOL, "generate reply without a job id");
	msgpack_unpacked_destroy(&up);
	if (rc)
		return rc;
	*job = j;
	enum exl_stream_mode mode = stream_mode(p);
	bool socket = mode == EXL_STREAM_MODE_SOCKET || mode == EXL_STREAM_MODE_NONE ||
		      (mode == EXL_STREAM_MODE_AUTO && !c->hdr);
	if (socket)
		return add_socket_job(c, j);
	return EXL_OK;
}

/* ---- socket-streamed jobs: while any runs, waits poll the socket ---- */

static int add_socket_job(struct exl_client *c, uint64_t job)
{
	if (grow((void **)&c->sock_jobs, &c->sock_jobs_cap, c->n_sock_jobs + 1, sizeof(uint64_t)))
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
	c->sock_jobs[c->n_sock_jobs++] = job;
	return EXL_OK;
}

static void job_done(struct exl_client *c, uint64_t job)
{
	for (size_t i = 0; i < c->n_sock_jobs; i++) {
		if (c->sock_jobs[i] == job) {
			c->sock_jobs[i] = c->sock_jobs[--c->n_sock_jobs];
			return;
		}
	}
}

/* ---- results ---- */

static char *dup_str(const msgpack_object *o)
{
	if (!o || o->type != MSGPACK_OBJECT_STR)
		return NULL;
	char *s = malloc(o->via.str.size + 1);
	if (!s)
		return NULL;
	memcpy(s, o->via.str.ptr, o->via.str.size);
	s[o->via.str.size] = 0;
	return s;
}

int exl_cl_parse_result(struct exl_client *c, const msgpack_object *map, struct exl_result *r)
{
	int64_t x;
	double d;
	uint64_t u;

	memset(r, 0, sizeof(*r));
	r->stop_token = -1;
	if (!exl_cl_get_u64(map, "job", &r->job))
		return exl_cl_fail(c, EXL_E_PROTOCOL, "a result without a job id");
	exl_cl_get_str(map, "stop_reason", r->stop_reason, sizeof(r->stop_reason));
	if (exl_cl_get_i64(map, "stop_token", &x))
		r->stop_token = (int32_t)x;
	if (exl_cl_get_i64(map, "prompt_tokens", &x))
		r->prompt_tokens = (int)x;
	if (exl_cl_get_i64(map, "new_tokens", &x))
		r->new_tokens = (int)x;
	if (exl_cl_get_i64(map, "cached_tokens", &x))
		r->cached_tokens = (int)x;
	if (exl_cl_get_i64(map, "truncated_tokens", &x))
		r->truncated_tokens = (int)x;
	if (exl_cl_get_u64(map, "seed", &u))
		r->seed = u;
	if (exl_cl_get_f64(map, "time_queued", &d))
		r->time_queued = d;
	if (exl_cl_get_f64(map, "time_to_first", &d))
		r->time_to_first = d;
	if (exl_cl_get_f64(map, "time_total", &d))
		r->time_total = d;
	if (exl_cl_get_i64(map, "draft_proposed", &x))
		r->draft_proposed = (int)x;
	if (exl_cl_get_i64(map, "draft_accepted", &x))
		r->draft_accepted = (int)x;
	if (exl_cl_get_i64(map, "num_beams", &x))
		r->num_beams = (int)x;
	if (exl_cl_get_f64(map, "beam_score", &d))
		r->beam_score = d;
	const msgpack_object *o = exl_cl_get(map, "stop_string");
	if (o && !(r->stop_string = dup_str(o)))
		goto nomem;
	o = exl_cl_get(map, "text");
	if (o && o->type == MSGPACK_OBJECT_STR) {
		if (!(r->text = dup_str(o)))
			goto nomem;
		r->text_len = o->via.str.size;
	}
	o = exl_cl_get(map, "ids");
	if (o && o->type == MSGPACK_OBJECT_ARRAY) {
		r->ids = malloc(sizeof(int32_t) * (o->via.array.size + 1));
		if (!r->ids)
			goto nomem;
		for (uint32_t i = 0; i < o->via.array.size; i++)
			r->ids[i] = (int32_t)o->via.array.ptr[i].via.i64;
		r->n_ids = o->via.array.size;
	}
	o = exl_cl_get(map, "probs");
	if (o && o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == r->n_ids) {
		r->probs = malloc(sizeof(float) * (r->n_ids + 1));
		if (!r->probs)
			goto nomem;
		for (uint32_t i = 0; i < o->via.array.size; i++)
			r->probs[i] = (float)o->via.array.ptr[i].via.f64;
	}
	o = exl_cl_get(map, "error");
	if (o && o->type == MSGPACK_OBJECT_MAP) {
		char code[32] = "";
		exl_cl_get_str(o, "code", code, sizeof(code));
		r->error_code = exl_code_from_name(code, strlen(code));
		if (!(r->error = dup_str(exl_cl_get(o, "message"))) &&
		    !(r->error = strdup("unknown error")))
			goto nomem;
	}
	return EXL_OK;
nomem:
	exl_result_free(r);
	return exl_cl_fail(c, EXL_E_NOMEM, "out of memory reading a result");
}

/* ---- events ---- */

static void release_current(struct exl_client *c)
{
	exl_cl_held_release(c);
	if (c->cur_msg) {
		msgpack_unpacked_destroy(&c->cur_msg->up);
		free(c->cur_msg);
		c->cur_msg = NULL;
	}
	if (c->cur_result_set) {
		exl_result_free(&c->cur_result);
		c->cur_result_set = false;
	}
	exl_cl_ring_release(c);
}

static int tokens_event(struct exl_client *c, uint64_t job, const uint8_t *p, size_t len,
			struct exl_event *ev)
{
	struct exl_rec_tokens t;

	if (len < sizeof(t))
		return exl_cl_fail(c, EXL_E_PROTOCOL, "a tokens record of %zu bytes", len);
	memcpy(&t, p, sizeof(t));
	if (t.n_tokens > len || t.n_top > EXL_MAX_TOP_K_RETURN || t.text_len > len ||
	    exl_rec_tokens_size(t.n_tokens, t.n_top, t.flags & EXL_TOK_F_PROBS, t.text_len) != len)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "a tokens record whose counts do not add up");
	p += sizeof(t);
	memset(ev, 0, sizeof(*ev));
	ev->type = EXL_EVENT_TOKENS;
	ev->job = job;
	ev->t_us = t.t_us;
	ev->n_ids = t.n_tokens;
	ev->ids = (const int32_t *)(const void *)p;
	p += 4ull * t.n_tokens;
	if (t.flags & EXL_TOK_F_PROBS) {
		ev->probs = (const float *)(const void *)p;
		p += 4ull * t.n_tokens;
	}
	if (t.n_top) {
		ev->n_top = t.n_top;
		ev->top_ids = (const int32_t *)(const void *)p;
		p += 4ull * t.n_tokens * t.n_top;
		ev->top_probs = (const float *)(const void *)p;
		p += 4ull * t.n_tokens * t.n_top;
	}
	ev->text = (const char *)p;
	ev->text_len = t.text_len;
	return EXL_OK;
}

static int done_event(struct exl_client *c, const msgpack_object *map, bool is_error,
		      struct exl_event *ev)
{
	int rc;

	memset(ev, 0, sizeof(*ev));
	if (is_error) {
		/* a job that failed before it had a result */
		struct exl_result *r = &c->cur_result;
		char code[32] = "";
		memset(r, 0, sizeof(*r));
		r->stop_token = -1;
		exl_cl_get_u64(map, "job", &r->job);
		snprintf(r->stop_reason, sizeof(r->stop_reason), "%s", EXL_REASON_ERROR);
		exl_cl_get_str(map, "code", code, sizeof(code));
		r->error_code = exl_code_from_name(code, strlen(code));
		r->error = dup_str(exl_cl_get(map, "message"));
		rc = EXL_OK;
	} else {
		rc = exl_cl_parse_result(c, map, &c->cur_result);
	}
	if (rc)
		return rc;
	c->cur_result_set = true;
	job_done(c, c->cur_result.job);
	ev->type = EXL_EVENT_DONE;
	ev->job = c->cur_result.job;
	ev->result = &c->cur_result;
	return EXL_OK;
}

/* A DONE payload is the result map. */
static int done_record_event(struct exl_client *c, const uint8_t *p, size_t len,
			     struct exl_event *ev)
{
	msgpack_unpacked up;
	struct exl_scan scan;
	size_t off = 0, n = 0;

	/* one whole value, framed first: msgpack-c would allocate for the
	 * counts a container claims before finding the bytes missing */
	memset(&scan, 0, sizeof(scan));
	if (exl_scan_limits(&scan, p, len, len, UINT32_MAX, &n) != EXL_SCAN_DONE || n != len)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "a result record that is not a msgpack map");
	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, (const char *)p, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    up.data.type != MSGPACK_OBJECT_MAP) {
		msgpack_unpacked_destroy(&up);
		return exl_cl_fail(c, EXL_E_PROTOCOL, "a result record that is not a msgpack map");
	}
	int rc = done_event(c, &up.data, false, ev);
	msgpack_unpacked_destroy(&up);
	return rc;
}

/* The record at the head of the ring (and its continuation records). */
static int ring_event(struct exl_client *c, struct exl_event *ev, bool *got)
{
	struct exl_rec_hdr h;
	const uint8_t *p;
	size_t len;

	*got = false;
	int r = exl_cl_ring_peek(c, &h, &p, &len);
	if (r <= 0)
		return r ? EXL_E_PROTOCOL : EXL_OK;
	if (h.flags & EXL_REC_F_MORE) {
		size_t total = 0;
		uint64_t job = h.job;
		uint16_t type = h.type;
		for (;;) {
			/* an empty piece adds nothing (c->frag may not exist yet) */
			if (len) {
				if (grow((void **)&c->frag, &c->frag_cap, total + len, 1))
					return exl_cl_fail(c, EXL_E_NOMEM,
							   "out of memory joining a record");
				memcpy(c->frag + total, p, len);
				total += len;
			}
			if (!(h.flags & EXL_REC_F_MORE))
				break;
			r = exl_cl_ring_peek(c, &h, &p, &len);
			if (r < 0)
				return EXL_E_PROTOCOL;
			if (r == 0 || h.job != job || h.type != type)
				return exl_cl_fail(c, EXL_E_PROTOCOL, "a split record is incomplete");
		}
		if (total)
			p = c->frag; /* else the last piece's (empty) payload */
		len = total;
	}
	*got = true;
	switch (h.type) {
	case EXL_REC_TOKENS:
		return tokens_event(c, h.job, p, len, ev);
	case EXL_REC_DONE:
		return done_record_event(c, p, len, ev);
	case EXL_REC_DONE_SOCKET:
		/* no event: from here on, waits for this job read the socket */
		*got = false;
		return add_socket_job(c, h.job);
	default:
		return exl_cl_fail(c, EXL_E_PROTOCOL, "a ring record of unknown type %u", h.type);
	}
}

/* "logits": one bin of n_vocab float32 (host order) per token, copied
 * into a float array (the bins need not be aligned in the message). */
static int socket_logits(struct exl_client *c, const msgpack_object *o, size_t n,
			 struct exl_event *ev)
{
	size_t row = 0;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "logits for %zu tokens, not one row per token",
				   n);
	for (size_t i = 0; i < n; i++) {
		const msgpack_object *b = &o->via.array.ptr[i];

		if (b->type != MSGPACK_OBJECT_BIN || b->via.bin.size == 0 || b->via.bin.size % 4 ||
		    (i && b->via.bin.size != row * sizeof(float)))
			return exl_cl_fail(c, EXL_E_PROTOCOL, "a logits row that is not %s",
					   i ? "as long as the first" : "float32 values");
		row = b->via.bin.size / sizeof(float);
	}
	if (!n)
		return EXL_OK;
	if (grow((void **)&c->tmp_logits, &c->tmp_logits_cap, n * row, sizeof(float)))
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory reading logits");
	for (size_t i = 0; i < n; i++)
		memcpy(c->tmp_logits + i * row, o->via.array.ptr[i].via.bin.ptr, row * sizeof(float));
	ev->logits = c->tmp_logits;
	ev->n_vocab = row;
	return EXL_OK;
}

/* Flattens an array of number arrays into tmp buffers. */
static int socket_tokens_event(struct exl_client *c, const msgpack_object *map,
			       struct exl_event *ev)
{
	const msgpack_object *logits = exl_cl_get(map, "logits");
	const msgpack_object *ids = exl_cl_get(map, "ids");
	const msgpack_object *text = exl_cl_get(map, "text");
	const msgpack_object *probs = exl_cl_get(map, "probs");
	const msgpack_object *tids = exl_cl_get(map, "top_ids");
	const msgpack_object *tprobs = exl_cl_get(map, "top_probs");

	memset(ev, 0, sizeof(*ev));
	if (!exl_cl_get_u64(map, "job", &ev->job) || !ids || ids->type != MSGPACK_OBJECT_ARRAY ||
	    !text || text->type != MSGPACK_OBJECT_STR)
		return exl_cl_fail(c, EXL_E_PROTOCOL, "a token message without job, ids or text");
	size_t n = ids->via.array.size;
	size_t k = 0;
	if (tids && tids->type == MSGPACK_OBJECT_ARRAY && tids->via.array.size == n && n &&
	    tids->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY)
		k = tids->via.array.ptr[0].via.array.size;
	if (grow((void **)&c->tmp_i32, &c->tmp_i32_cap, n + n * k + 1, sizeof(int32_t)) ||
	    grow((void **)&c->tmp_f32, &c->tmp_f32_cap, n + n * k + 1, sizeof(float)))
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory reading tokens");
	for (size_t i = 0; i < n; i++)
		c->tmp_i32[i] = (int32_t)ids->via.array.ptr[i].via.i64;
	ev->type = EXL_EVENT_TOKENS;
	ev->ids = c->tmp_i32;
	ev->n_ids = n;
	if (probs && probs->type == MSGPACK_OBJECT_ARRAY && probs->via.array.size == n) {
		for (size_t i = 0; i < n; i++)
			c->tmp_f32[i] = (float)probs->via.array.ptr[i].via.f64;
		ev->probs = c->tmp_f32;
	}
	if (k && tprobs && tprobs->type == MSGPACK_OBJECT_ARRAY && tprobs->via.array.size == n) {
		for (size_t i = 0; i < n; i++) {
			const msgpack_object *a = &tids->via.array.ptr[i];
			const msgpack_object *b = &tprobs->via.array.ptr[i];
			if (a->type != MSGPACK_OBJECT_ARRAY || b->type != MSGPACK_OBJECT_ARRAY ||
			    a->via.array.size != k || b->via.array.size != k)
				return exl_cl_fail(c, EXL_E_PROTOCOL, "ragged top-k arrays");
			for (size_t j = 0; j < k; j++) {
				c->tmp_i32[n + i * k + j] = (int32_t)a->via.array.ptr[j].via.i64;
				c->tmp_f32[n + i * k + j] = (float)b->via.array.ptr[j].via.f64;
			}
		}
		ev->n_top = (int)k;
		ev->top_ids = c->tmp_i32 + n;
		ev->top_probs = c->tmp_f32 + n;
	}
	if (logits) {
		int rc = socket_logits(c, logits, n, ev);
		if (rc)
			return rc;
	}
	ev->text = text->via.str.ptr;
	ev->text_len = text->via.str.size;
	uint64_t t = 0;
	if (exl_cl_get_u64(map, "t_us", &t))
		ev->t_us = (uint32_t)t;
	return EXL_OK;
}

static int queued_event(struct exl_client *c, struct exl_event *ev)
{
	struct exl_qmsg *q = c->q_head;

	c->q_head = q->next;
	if (!c->q_head)
		c->q_tail = NULL;
	q->next = NULL;
	c->cur_msg = q;
	const msgpack_object *map = &q->up.data;
	if (exl_cl_op_is(map, EXL_OP_TOKEN))
		return socket_tokens_event(c, map, ev);
	return done_event(c, map, exl_cl_op_is(map, EXL_OP_ERROR), ev);
}

/* Takes what the socket has without waiting; stream messages go to the
 * queue.  EXL_OK, or a failure other than a timeout. */
static int drain_socket(struct exl_client *c, int timeout_ms)
{
	msgpack_unpacked up;
	char saved[sizeof(c->err)];
	int rc;

	memcpy(saved, c->err, sizeof(saved));
	msgpack_unpacked_init(&up);
	while ((rc = exl_cl_read_msg(c, timeout_ms, &up)) == EXL_OK) {
		const msgpack_object *map = &up.data;
		if (exl_cl_op_is(map, EXL_OP_TOKEN) || exl_cl_op_is(map, EXL_OP_DONE) ||
		    (exl_cl_op_is(map, EXL_OP_ERROR) && exl_cl_get(map, "job")))
			exl_cl_queue(c, &up);
		timeout_ms = 0;
	}
	msgpack_unpacked_destroy(&up);
	/* The daemon may write a stream's last events and close at once (a
	 * drain): they come before the end of the stream, and are handed out
	 * first; the next read finds the end again. */
	if (rc != EXL_E_TIMEOUT && !c->q_head)
		return rc;
	memcpy(c->err, saved, sizeof(saved)); /* waiting is not a failure */
	return EXL_OK;
}

/* The next event from the ring or the socket (not those set aside). */
static int next_event(struct exl_client *c, struct exl_event *ev, int timeout_ms)
{
	int64_t deadline = timeout_ms > 0 ? exl_now_ms() + timeout_ms : 0;
	bool got;
	int rc;

	release_current(c);
	exl_cl_ring_disarm(c);
	for (;;) {
		if (c->hdr) {
			rc = ring_event(c, ev, &got);
			if (rc || got)
				return rc;
		}
		/* A socket message is handed out only once the ring is empty:
		 * the ring records of a job precede its result on the socket. */
		if (c->q_head)
			return queued_event(c, ev);
		rc = drain_socket(c, 0);
		if (rc)
			return rc;
		if (c->q_head || exl_cl_ring_nonempty(c))
			continue;
		int left = -1;
		if (timeout_ms == 0) {
			left = 0;
		} else if (timeout_ms > 0) {
			int64_t l = deadline - exl_now_ms();
			if (l <= 0)
				return exl_cl_fail(c, EXL_E_TIMEOUT, "no event within %d ms", timeout_ms);
			left = (int)l;
		}
		/* A closed ring (daemon draining) gets no more futex wakes:
		 * wait on the socket, which the daemon closes last. */
		if (c->hdr && c->n_sock_jobs == 0 && left != 0 &&
		    !__atomic_load_n(&c->hdr->closed, __ATOMIC_ACQUIRE)) {
			exl_cl_ring_wait(c, left < 0 || left > FUTEX_SLICE_MS ? FUTEX_SLICE_MS : left);
			continue;
		}
		if (c->hdr) {
			/* The daemon sends a wake message with the next record. */
			exl_cl_ring_arm_poll(c);
			if (exl_cl_ring_nonempty(c)) {
				exl_cl_ring_disarm(c);
				continue;
			}
		}
		if (left == 0)
			return exl_cl_fail(c, EXL_E_TIMEOUT, "no event yet");
		rc = drain_socket(c, left);
		if (c->hdr)
			exl_cl_ring_disarm(c);
		if (rc)
			return rc;
	}
}

int exl_next(struct exl_client *c, struct exl_event *ev, int timeout_ms)
{
	release_current(c);
	if (exl_cl_take_held(c, ev))
		return EXL_OK;
	return next_event(c, ev, timeout_ms);
}

/* ---- blocking generate ---- */

struct acc {
	uint64_t job;
	bool done;
	char *text;
	size_t text_len, text_cap;
	int32_t *ids;
	size_t n_ids, ids_cap;
	float *probs;
	size_t probs_cap;
	bool want_probs;
};

static int acc_tokens(struct acc *a, const struct exl_event *ev)
{
	if (grow((void **)&a->text, &a->text_cap, a->text_len + ev->text_len + 1, 1) ||
	    grow((void **)&a->ids, &a->ids_cap, a->n_ids + ev->n_ids + 1, sizeof(int32_t)))
		return -1;
	memcpy(a->text + a->text_len, ev->text, ev->text_len);
	a->text_len += ev->text_len;
	a->text[a->text_len] = 0;
	if (ev->probs && a->want_probs) {
		if (grow((void **)&a->probs, &a->probs_cap, a->n_ids + ev->n_ids + 1, sizeof(float)))
			return -1;
		memcpy(a->probs + a->n_ids, ev->probs, sizeof(float) * ev->n_ids);
	}
	memcpy(a->ids + a->n_ids, ev->ids, sizeof(int32_t) * ev->n_ids);
	a->n_ids += ev->n_ids;
	return 0;
}

/* Moves the result's metadata and the gathered stream into out. */
static int acc_finish(struct exl_client *c, struct acc *a, const struct exl_result *r,
		      struct exl_result *out)
{
	memset(out, 0, sizeof(*out));
	out->job = r->job;
	memcpy(out->stop_reason, r->stop_reason, sizeof(out->stop_reason));
	out->stop_token = r->stop_token;
	out->prompt_tokens = r->prompt_tokens;
	out->new_tokens = r->new_tokens;
	out->cached_tokens = r->cached_tokens;
	out->truncated_tokens = r->truncated_tokens;
	out->seed = r->seed;
	out->time_queued = r->time_queued;
	out->time_to_first = r->time_to_first;
	out->time_total = r->time_total;
	out->error_code = r->error_code;
	out->draft_proposed = r->draft_proposed;
	out->draft_accepted = r->draft_accepted;
	out->num_beams = r->num_beams;
	out->beam_score = r->beam_score;
	if ((r->stop_string && !(out->stop_string = strdup(r->stop_string))) ||
	    (r->error && !(out->error = strdup(r->error)))) {
		exl_result_free(out);
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
	}
	if (!a->text && !(a->text = calloc(1, 1))) {
		exl_result_free(out);
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
	}
	out->text = a->text;
	out->text_len = a->text_len;
	out->ids = a->ids;
	out->n_ids = a->n_ids;
	out->probs = a->probs;
	a->text = NULL;
	a->ids = NULL;
	a->probs = NULL;
	a->done = true;
	return EXL_OK;
}

int exl_generate_many(struct exl_client *c, const struct exl_gen_params *p,
		      const char *const *prompts, size_t n, struct exl_result *out)
{
	struct exl_gen_params q;
	struct acc *accs;
	size_t submitted = 0, left;
	int rc = EXL_OK, first = EXL_OK;
	char first_msg[sizeof(c->err)] = "";

	if (!p)
		exl_gen_params_init(&q);
	else
		q = *p;
	/* The text is gathered from the stream, so the result need not repeat it. */
	if (q.stream == EXL_STREAM_MODE_NONE)
		q.stream = EXL_STREAM_MODE_AUTO;
	q.return_text = 0;
	for (size_t i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].stop_token = -1;
	}
	accs = calloc(n ? n : 1, sizeof(*accs));
	if (!accs)
		return exl_cl_fail(c, EXL_E_NOMEM, "out of memory");
	for (; submitted < n; submitted++) {
		accs[submitted].want_probs = q.return_probs > 0;
		rc = exl_submit(c, &q, prompts ? prompts[submitted] : NULL, &accs[submitted].job);
		if (rc)
			break;
	}
	if (rc) {
		first = rc;
		snprintf(first_msg, sizeof(first_msg), "%s", c->err);
		for (size_t i = 0; i < submitted; i++)
			exl_cancel(c, accs[i].job);
	}
	left = submitted;
	while (left) {
		struct exl_event ev;
		rc = next_event(c, &ev, c->timeout_ms);
		if (rc) {
			if (!first) {
				first = rc;
				snprintf(first_msg, sizeof(first_msg), "%s", c->err);
			}
			/* Nobody will read the rest: end the jobs still running. */
			for (size_t i = 0; i < submitted; i++)
				if (!accs[i].done)
					exl_cancel(c, accs[i].job);
			break;
		}
		size_t i;
		for (i = 0; i < submitted; i++)
			if (accs[i].job == ev.job && !accs[i].done)
				break;
		if (i == submitted) {
			/* A job of exl_submit's on this connection: its reader
			 * gets the event from exl_next later. */
			rc = exl_cl_hold(c, &ev);
			if (rc && !first) {
				first = rc;
				snprintf(first_msg, sizeof(first_msg), "%s", c->err);
			}
			continue;
		}
		if (ev.type == EXL_EVENT_TOKENS) {
			if (acc_tokens(&accs[i], &ev) && !first) {
				first = exl_cl_fail(c, EXL_E_NOMEM, "out of memory gathering output");
				snprintf(first_msg, sizeof(first_msg), "%s", c->err);
			}
			continue;
		}
		left--;
		rc = acc_finish(c, &accs[i], ev.result, &out[i]);
		if (!rc && out[i].error && !first) {
			rc = out[i].error_code ? out[i].error_code : EXL_E_INTERNAL;
			exl_cl_fail(c, rc, "job %llu: %s", (unsigned long long)ev.job, out[i].error);
		}
		if (rc && !first) {
			first = rc;
			snprintf(first_msg, sizeof(first_msg), "%s", c->err);
		}
	}
	for (size_t i = 0; i < n; i++) {
		free(accs[i].text);
		free(accs[i].ids);
		free(accs[i].probs);
	}
	free(accs);
	if (first)
		snprintf(c->err, sizeof(c->err), "%s", first_msg);
	return first;
}

int exl_generate(struct exl_client *c, const struct exl_gen_params *p, const char *prompt,
		 struct exl_result *out)
{
	const char *prompts[1] = { prompt };

	return exl_generate_many(c, p, prompts, 1, out);
}
