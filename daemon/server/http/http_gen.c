/* HTTP requests that run on a model: generate (OpenAI completions and
 * chat, Ollama generate and chat), tokenize and detokenize.
 *
 * A request owns a sink without a ring (delivery/sink.h).  Each of its
 * choices is one server job on that sink, prepared by the prep pool and
 * run by its model's engine thread like any msgpack client's; its request
 * id is the choice's index, so the messages that come back (accepted,
 * token, done, error) say which choice they are about.  The loop hands
 * them here (exl_http_flush_sink), where they become SSE events, NDJSON
 * lines or, at the end, one JSON reply.  A streaming request's sink
 * backlog counts the bytes waiting in its connection too, so a client
 * that stops reading pauses its jobs as a socket client's would.
 *
 * The request ends when its reply is complete, when it fails, or when
 * the client hangs up; then its sink is closed and its jobs cancelled, and
 * whatever of them is still running or being prepared drops its output.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/chat_template.h"
#include "common/clock.h"
#include "common/json_parse.h"
#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/core/util/log.h"
#include "daemon/server/delivery/job.h"
#include "daemon/server/delivery/sink.h"
#include "daemon/server/engine/adapters.h"
#include "daemon/server/engine/engine_thread.h"
#include "daemon/server/engine/models_registry.h"
#include "daemon/server/engine/prep.h"
#include "daemon/server/http/http_internal.h"
#include "daemon/server/loop.h"

static void launch_more(struct exl_http_req *r);

/* ---- a request's life ---- */

static void on_conn_close(struct evhttp_connection *evcon, void *arg);

static void on_closed(evutil_socket_t fd, short what, void *arg)
{
	struct exl_http_req *r = arg;

	(void)fd;
	(void)what;
	/* The client hung up while we worked (evhttp does not read while a
	 * request is answered, so it would notice only at the next write):
	 * freeing the connection calls on_conn_close, which ends r. */
	exl_log(EXL_LOG_DEBUG, "http %llu: the client hung up", (unsigned long long)r->id);
	evhttp_connection_free(r->evcon);
}

static struct exl_http_req *req_new(struct exl_http *h, struct evhttp_request *req,
				    enum exl_http_kind kind, enum exl_http_style style, uid_t uid)
{
	struct exl_http_req *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->h = h;
	r->id = ++h->next_id;
	r->req = req;
	r->kind = kind;
	r->style = style;
	r->uid = uid;
	r->created = (uint64_t)time(NULL);
	r->start_ns = exl_now_ns();
	exl_jw_init(&r->w);
	r->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
	r->uidst = exl_uid_stats_get(&h->lp->uids, uid);
	r->sink = exl_sink_create(&h->lp->mail, uid, 0, r->id);
	r->evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = r->evcon ? evhttp_connection_get_bufferevent(r->evcon) : NULL;
	evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
	if (fd >= 0)
		r->closed_ev = event_new(h->lp->base, fd, EV_CLOSED, on_closed, r);
	if (!r->zone || !r->uidst || !r->sink || !r->closed_ev || event_add(r->closed_ev, NULL)) {
		if (r->closed_ev)
			event_free(r->closed_ev);
		if (r->sink)
			exl_sink_unref(r->sink);
		if (r->zone)
			msgpack_zone_free(r->zone);
		free(r);
		return NULL;
	}
	r->sink->http = r;
	exl_http_unlinger(h, r->evcon);
	evhttp_connection_set_closecb(r->evcon, on_conn_close, r);
	r->next = h->reqs;
	if (h->reqs)
		h->reqs->prev = r;
	h->reqs = r;
	h->n_reqs++;
	return r;
}

/* Frees r; the exchange with the client is over (or the client gone). */
static void req_end(struct exl_http_req *r)
{
	struct exl_http *h = r->h;

	if (r->prev)
		r->prev->next = r->next;
	else
		h->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	h->n_reqs--;
	if (r->evcon) {
		evhttp_connection_set_closecb(r->evcon, NULL, NULL);
		exl_http_linger(h, r->evcon);
	}
	if (r->closed_ev)
		event_free(r->closed_ev);
	/* What still runs for r delivers nowhere: cancelled, its output dropped. */
	atomic_store(&r->sink->closed, true);
	r->sink->http = NULL;
	if (r->n_launched)
		exl_registry_cancel_sink(h->lp->reg, r->sink);
	exl_sink_unref(r->sink);
	if (r->doc)
		exl_json_free(r->doc);
	msgpack_zone_free(r->zone);
	free(r->chat_prompt);
	free(r->tool_schema);
	exl_http_embed_free(r);
	for (int i = 0; i < r->n_choices; i++) {
		free(r->choices[i].result);
		free(r->choices[i].text);
	}
	exl_jw_free(&r->w);
	free(r);
}

static void on_conn_close(struct evhttp_connection *evcon, void *arg)
{
	struct exl_http_req *r = arg;

	(void)evcon;
	/* A request evhttp detached from its failed connection is ours to
	 * free; one still on the connection goes with it. */
	if (r->req && !evhttp_request_get_connection(r->req))
		evhttp_request_free(r->req);
	r->req = NULL;
	r->evcon = NULL;
	req_end(r);
}

/* Streaming: queues what r->w holds to the client. */
static void on_written(struct evhttp_connection *evcon, void *arg);

static void stream_out(struct exl_http_req *r)
{
	struct evbuffer *b;

	if (!r->req || !r->w.len)
		goto done;
	b = evbuffer_new();
	if (!b || evbuffer_add(b, r->w.buf, r->w.len)) {
		exl_log(EXL_LOG_ERR, "http %llu: out of memory queueing %zu bytes",
			(unsigned long long)r->id, r->w.len);
		if (b)
			evbuffer_free(b);
		goto done;
	}
	evhttp_send_reply_chunk_with_cb(r->req, b, on_written, r);
	evbuffer_free(b);
	if (r->evcon) {
		struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
		r->buffered = evbuffer_get_length(bufferevent_get_output(bev));
		atomic_store(&r->sink->loop_buffered, (size_t)r->buffered);
	}
done:
	exl_jw_reset(&r->w);
}

static void on_written(struct evhttp_connection *evcon, void *arg)
{
	struct exl_http_req *r = arg;
	struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
	size_t left = evbuffer_get_length(bufferevent_get_output(bev));

	/* Jobs paused on the backlog (deliver.c) go on once it shrank. */
	if (r->buffered >= EXL_SINK_SOCKET_LIMIT / 2 && left < EXL_SINK_SOCKET_LIMIT / 2)
		exl_registry_wake_all(r->h->lp->reg);
	r->buffered = left;
	atomic_store(&r->sink->loop_buffered, left);
}

static const char *error_type(int status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 404: return "not_found_error";
	case 429: return "rate_limit_error";
	case 500: return "server_error";
	case 503: return "service_unavailable";
	default: return "invalid_request_error";
	}
}

void exl_http_req_fail(struct exl_http_req *r, int status, const char *code, const char *param,
		       const char *msg)
{
	exl_log(EXL_LOG_DEBUG, "http %llu: %d %s", (unsigned long long)r->id, status, msg);
	/* a client still there always gets an answer */
	if (status == 0)
		status = 500;
	if (r->req && !r->started) {
		exl_http_send_error(r->req, r->style, status, code, param, msg);
	} else if (r->req) {
		/* The status line is out: the error is the stream's last event. */
		exl_jw_reset(&r->w);
		if (r->style == EXL_HTTP_STYLE_OPENAI)
			exl_jw_text(&r->w, "data: ", 6);
		exl_jw_obj(&r->w);
		exl_jw_key(&r->w, "error");
		if (r->style == EXL_HTTP_STYLE_OPENAI) {
			exl_jw_obj(&r->w);
			exl_jw_kstr(&r->w, "message", msg);
			exl_jw_kstr(&r->w, "type", error_type(status));
			exl_jw_key(&r->w, "param");
			if (param && param[0])
				exl_jw_cstr(&r->w, param);
			else
				exl_jw_null(&r->w);
			exl_jw_kstr(&r->w, "code", code);
			exl_jw_obj_end(&r->w);
		} else {
			exl_jw_cstr(&r->w, msg);
		}
		exl_jw_obj_end(&r->w);
		exl_jw_text(&r->w, r->style == EXL_HTTP_STYLE_OPENAI ? "\n\n" : "\n",
			    r->style == EXL_HTTP_STYLE_OPENAI ? 2 : 1);
		stream_out(r);
		if (r->req)
			evhttp_send_reply_end(r->req);
	}
	r->req = NULL;
	req_end(r);
}

/* An exld code as the reply's status. */
static void fail_code(struct exl_http_req *r, int code, const char *msg)
{
	const char *name;
	int status = exl_http_status_of(code, &name);

	exl_http_req_fail(r, status, name, NULL, msg);
}

/* ---- generate: the request ---- */

static bool is_chat(const struct exl_http_req *r)
{
	return r->g.api == EXL_HTTP_OAI_CHAT || r->g.api == EXL_HTTP_OLLAMA_CHAT;
}

static bool is_ollama(const struct exl_http_req *r)
{
	return r->g.api == EXL_HTTP_OLLAMA_GENERATE || r->g.api == EXL_HTTP_OLLAMA_CHAT;
}

/* A special token's text (BOS, EOS) for the template's context. */
static size_t special_text(const struct exl_model *m, int32_t id, char *buf, size_t len)
{
	if (id < 0)
		return 0;
	size_t n = exl_token_bytes(exl_model_tokenizer(m), id, true, buf, len);
	return n < len ? n : 0;
}

/* The model's tokenizer.chat_template, or ChatML when it has none. */
static void model_template(const struct exl_model *m, const char **t, size_t *len)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(exl_model_gguf(m), "tokenizer.chat_template");

	if (kv && kv->val.type == GGUF_VT_STRING && kv->val.str.len > 0) {
		*t = kv->val.str.ptr;
		*len = (size_t)kv->val.str.len;
		return;
	}
	*t = exl_chat_template_chatml;
	*len = strlen(exl_chat_template_chatml);
}

int exl_http_render_chat(const struct exl_model *m, const struct exl_http_gen *g, char **out,
			 size_t *out_len, char *err, size_t errlen)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(m);
	char bos[128], eos[128], msg[400];
	size_t bos_len = special_text(m, exl_tokenizer_bos(tok), bos, sizeof(bos));
	size_t eos_len = special_text(m, exl_tokenizer_eos(tok), eos, sizeof(eos));
	size_t ctx_len = 0, tlen;
	const char *tmpl;
	char *ctx = exl_http_chat_context(g, bos, bos_len, eos, eos_len, &ctx_len);

	if (!ctx) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	model_template(m, &tmpl, &tlen);
	int rc = exl_chat_template_render(tmpl, tlen, ctx, ctx_len, out, out_len, msg, sizeof(msg));
	free(ctx);
	if (rc)
		snprintf(err, errlen, "the model's chat template: %s", msg);
	return rc;
}

/* The jobs' length: a length asked for must be within the uid's limit;
 * none asked for is the limit (chat and Ollama's default: until the end). */
static int settle_length(struct exl_http_req *r)
{
	const struct exl_config *cfg = &r->h->lp->cfg;
	int max_jobs, max_tokens;
	char msg[200];

	exl_config_uid_limits(cfg, r->uid, &max_jobs, &max_tokens);
	if (!r->g.max_tokens_set) {
		r->g.gen.s.max_new_tokens = max_tokens;
		return 0;
	}
	if (r->g.gen.s.max_new_tokens > max_tokens) {
		snprintf(msg, sizeof(msg), "max_tokens %d is over uid %u's limit of %d",
			 r->g.gen.s.max_new_tokens, (unsigned)r->uid, max_tokens);
		exl_http_req_fail(r, 429, "limit", "max_tokens", msg);
		return -1;
	}
	return 0;
}

static struct exl_model_entry *pick(struct exl_http_req *r, const char *name)
{
	char err[300];
	int code;
	struct exl_model_entry *e = exl_registry_pick(r->h->lp->reg, name, &code, err, sizeof(err));

	if (!e) {
		const char *cname;
		int status = exl_http_status_of(code, &cname);

		exl_http_req_fail(r, status, code == EXL_E_UNKNOWN_MODEL ? "model_not_found" : cname,
				  "model", err);
	}
	return e;
}

/* r's model again, at launch: NULL with r failed when it is gone, or was
 * reloaded since r was prepared against it (r->model_p). */
static struct exl_model_entry *pick_loaded(struct exl_http_req *r)
{
	struct exl_model_entry *e = pick(r, r->model);

	if (e && e->model != r->model_p) {
		exl_http_req_fail(r, 503, "busy", "model", "the model was reloaded meanwhile");
		return NULL;
	}
	return e;
}

/* Appends the reply's opening to the rendered prompt.  -1 with r failed. */
static int prompt_append(struct exl_http_req *r, const char *text)
{
	size_t pn = strlen(text);
	char *np = realloc(r->chat_prompt, r->chat_prompt_len + pn + 1);

	if (!np) {
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return -1;
	}
	memcpy(np + r->chat_prompt_len, text, pn + 1);
	r->chat_prompt = np;
	r->chat_prompt_len += pn;
	return 0;
}

/* Whether replies go through the tool-call reader: with tools, and
 * always for harmony (its content is the messages' bodies, without the
 * markers; its calls count only with tools). */
static bool reply_parsed(const struct exl_http_req *r)
{
	return r->tools_on || r->tool_fmt == EXL_TOOL_FMT_HARMONY;
}

/* The calls of a parsed reply that count. */
static int reply_calls(const struct exl_http_req *r, const struct exl_tool_parse *p)
{
	return r->tools_on ? p->n_calls : 0;
}

/* How replies are read.  Tools given: the form the model's template
 * teaches decides it; a forced call opens the reply in the prompt and
 * constrains the rest to one call object.  And the reasoning. */
static int setup_replies(struct exl_http_req *r, const struct exl_model *m)
{
	const char *tmpl;
	size_t tlen, slen;
	char err[300];
	bool forced = r->g.tool_choice == EXL_HTTP_TOOLS_REQUIRED ||
		      r->g.tool_choice == EXL_HTTP_TOOLS_NAMED;

	model_template(m, &tmpl, &tlen);
	/* the <think> block apart: OpenAI's default where the template
	 * writes one (llama.cpp's server does so), Ollama's when asked.
	 * Harmony's analysis messages always, since its markers are never
	 * content; shown when a block would be. */
	r->reasoning_tags = exl_reasoning_template(tmpl, tlen);
	bool harmony = r->reasoning_tags == EXL_REASONING_HARMONY;
	bool show = r->g.reasoning == 1 || (r->g.reasoning == -1 && !is_ollama(r));
	r->reasoning_on = !forced && r->reasoning_tags != EXL_REASONING_NONE && (show || harmony);
	r->reasoning_show = r->reasoning_on && show;
	/* a reply held to a JSON schema cannot be inside the block the
	 * prompt opened: it is all content */
	r->reasoning_open = r->reasoning_on && !r->g.gen.json_schema &&
			    exl_reasoning_prompt_open(r->reasoning_tags, r->chat_prompt,
						      r->chat_prompt_len);
	/* harmony: a reply held to a JSON schema is a final message's body
	 * (the prompt opens the message; llama.cpp constrains after it too) */
	if (harmony && !forced && r->g.gen.json_schema &&
	    prompt_append(r, exl_tool_forced_prefix(EXL_TOOL_FMT_HARMONY)))
		return -1;
	r->tool_fmt = harmony ? EXL_TOOL_FMT_HARMONY : EXL_TOOL_FMT_NONE;
	if (!r->g.tools_json)
		return 0;
	r->tool_fmt = exl_tool_fmt_of(tmpl, tlen);
	r->tools_forced = forced;
	r->tools_on = forced || r->tool_fmt != EXL_TOOL_FMT_NONE;
	if (!forced)
		return 0;
	r->tool_schema = exl_tool_schema(r->tool_fmt, r->g.tools_json, r->g.tools_len,
					 r->g.tool_choice == EXL_HTTP_TOOLS_NAMED ? r->g.tool_name : NULL,
					 &slen, err, sizeof(err));
	if (!r->tool_schema) {
		exl_http_req_fail(r, 400, "invalid_request_error", "tools", err);
		return -1;
	}
	return prompt_append(r, exl_tool_forced_prefix(r->tool_fmt));
}

void exl_http_start_generate(struct exl_http *h, struct evhttp_request *req,
			     enum exl_http_api api, struct exl_json_doc *doc, uid_t uid)
{
	enum exl_http_style style = api == EXL_HTTP_OLLAMA_GENERATE || api == EXL_HTTP_OLLAMA_CHAT ?
				    EXL_HTTP_STYLE_OLLAMA : EXL_HTTP_STYLE_OPENAI;
	struct exl_http_req *r = req_new(h, req, EXL_HTTP_KIND_GENERATE, style, uid);
	struct exl_http_err e;
	char err[600];

	if (!r) {
		exl_json_free(doc);
		exl_http_send_error(req, style, 500, "internal", NULL, "out of memory");
		return;
	}
	r->doc = doc;
	if (exl_http_map_generate(api, exl_json_root(doc), r->zone, &r->g, &e)) {
		exl_http_req_fail(r, 400, "invalid_request_error", e.param, e.msg);
		return;
	}
	if (h->lp->draining) {
		exl_http_req_fail(r, 503, "shutdown", NULL, "the daemon is shutting down");
		return;
	}
	struct exl_model_entry *ent = pick(r, r->g.model);
	if (!ent)
		return;
	snprintf(r->model, sizeof(r->model), "%s", ent->name);
	r->model_p = ent->model;
	if (settle_length(r))
		return;
	if (r->g.chat) {
		if (exl_http_render_chat(ent->model, &r->g, &r->chat_prompt, &r->chat_prompt_len, err,
					 sizeof(err))) {
			exl_http_req_fail(r, 400, "invalid_request_error", "messages", err);
			return;
		}
		if (setup_replies(r, ent->model))
			return;
		r->n_choices = r->g.n;
	} else {
		r->n_choices = r->g.n_prompts * r->g.n;
	}
	launch_more(r);
}

/* Makes choice k's preparation: the body mapped again into the prep's
 * own zone, so that it lives as long as the preparation (which may
 * outlast r). */
static struct exl_prep *choice_prep(struct exl_http_req *r, int k, char *err, size_t errlen)
{
	struct exl_prep *p = exl_prep_new_decoded();
	struct exl_http_gen pg;
	struct exl_http_err e;

	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (exl_http_map_generate(r->g.api, exl_json_root(r->doc), p->up.zone, &pg, &e)) {
		snprintf(err, errlen, "%s", e.msg);
		exl_prep_free(p);
		return NULL;
	}
	p->req.op = EXL_OPC_GENERATE;
	snprintf(p->req.model, sizeof(p->req.model), "%s", r->model);
	p->req.u.gen = pg.gen;
	struct exl_req_generate *g = &p->req.u.gen;
	g->s.max_new_tokens = r->g.gen.s.max_new_tokens;
	if (r->g.chat) {
		char *text = msgpack_zone_malloc(p->up.zone, r->chat_prompt_len + 1);
		const struct exl_tokenizer *tok = exl_model_tokenizer(r->model_p);
		char bos[128];
		size_t bos_len = special_text(r->model_p, exl_tokenizer_bos(tok), bos, sizeof(bos));

		if (!text) {
			snprintf(err, errlen, "out of memory");
			exl_prep_free(p);
			return NULL;
		}
		memcpy(text, r->chat_prompt, r->chat_prompt_len + 1);
		g->prompt.text = text;
		g->prompt.len = r->chat_prompt_len;
		/* The template writes special tokens as text; a template that
		 * writes the BOS itself gets no second one. */
		g->s.encode_special_tokens = true;
		if (bos_len && r->chat_prompt_len >= bos_len && !memcmp(text, bos, bos_len))
			g->s.add_bos = 0;
		if (r->tool_schema) {
			size_t sl = strlen(r->tool_schema);
			char *z = msgpack_zone_malloc(p->up.zone, sl + 1);

			if (!z) {
				snprintf(err, errlen, "out of memory");
				exl_prep_free(p);
				return NULL;
			}
			memcpy(z, r->tool_schema, sl + 1);
			g->json_schema = g->s.json_schema = z;
		}
		/* the form's marker, or the reasoning's tags, are control
		 * tokens: the reply must spell them */
		if ((r->tools_on && exl_tool_fmt_needs_special(r->tool_fmt)) ||
		    (r->reasoning_on && exl_reasoning_needs_special(r->reasoning_tags)))
			g->s.decode_special_tokens = true;
	} else {
		g->prompt = pg.prompts[k / r->g.n];
	}
	/* n samples of one prompt with one seed would be n copies */
	if (g->s.has_seed)
		g->s.seed += (uint64_t)(k % r->g.n);
	msgpack_object id = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = (uint64_t)k };
	exl_packed_id_set(&p->id, &id);
	return p;
}

static bool prep_finish(struct exl_http *h, struct exl_prep *p);

int exl_http_place(struct exl_http_req *r, struct exl_model_entry *ent, struct exl_prep *p,
		   int max_jobs, struct exl_srv_job **job)
{
	struct exl_loop *lp = r->h->lp;
	char err[200];
	int code;

	/* Cheap preparations of a request with none in the pool run here;
	 * the others wait for room in the pool. */
	int place = r->n_pooled == 0 && exl_prep_cheap(p) ? EXL_HTTP_PLACE_HERE :
		    exl_prep_pool_room(lp->prep, r->n_pooled, 0) ? EXL_HTTP_PLACE_POOLED :
		    EXL_HTTP_PLACE_BLOCKED;
	if (place == EXL_HTTP_PLACE_BLOCKED) {
		exl_prep_free(p);
		r->blocked = true;
		return place;
	}
	if (place == EXL_HTTP_PLACE_POOLED && !(p->mail = calloc(1, sizeof(*p->mail)))) {
		exl_prep_free(p);
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return EXL_HTTP_PLACE_FAILED;
	}
	struct exl_srv_job *j = exl_srv_job_create(r->sink, r->uidst, max_jobs, ++lp->next_job_id,
						   &code);
	if (!j) {
		exl_prep_free(p);
		if (code == EXL_E_LIMIT)
			snprintf(err, sizeof(err), "uid %u already has %d jobs running (its limit)",
				 (unsigned)r->uid, max_jobs);
		else
			snprintf(err, sizeof(err), "out of memory");
		fail_code(r, code, err);
		return EXL_HTTP_PLACE_FAILED;
	}
	j->et = ent->et;
	j->model = ent->et->name;
	j->req_id = p->id;
	p->job = j;
	p->model = ent->model;
	p->et = ent->et;
	p->sink = r->sink;
	exl_sink_ref(r->sink);
	atomic_fetch_add(&p->et->n_preparing, 1);
	*job = j;
	return place;
}

/* Launches the choices not yet launched, while the pool has room. */
static void launch_more(struct exl_http_req *r)
{
	struct exl_loop *lp = r->h->lp;
	char err[600];
	int max_jobs, max_tokens;

	exl_config_uid_limits(&lp->cfg, r->uid, &max_jobs, &max_tokens);
	r->blocked = false;
	while (r->n_launched < r->n_choices) {
		int k = r->n_launched;
		/* Picked again: while r waited for room the model may have gone. */
		struct exl_model_entry *ent = pick_loaded(r);
		if (!ent)
			return;
		struct exl_prep *p = choice_prep(r, k, err, sizeof(err));
		if (!p) {
			exl_http_req_fail(r, 500, "internal", NULL, err);
			return;
		}
		/* The adapters are referenced by the preparation (freed with it),
		 * resolved per choice since one may be unloaded meanwhile. */
		int lcode = exl_adapters_resolve(ent, &p->req.u.gen, err, sizeof(err));
		if (lcode) {
			const char *name;
			int status = exl_http_status_of(lcode, &name);

			exl_prep_free(p);
			exl_http_req_fail(r, status, name, "lora", err);
			return;
		}
		struct exl_srv_job *j;
		int place = exl_http_place(r, ent, p, max_jobs, &j);
		if (place == EXL_HTTP_PLACE_FAILED || place == EXL_HTTP_PLACE_BLOCKED)
			return;
		j->stream = p->req.u.gen.stream;
		j->return_text = p->req.u.gen.return_text;
		r->choices[k].launched = true;
		r->n_launched++;
		if (place == EXL_HTTP_PLACE_HERE) {
			exl_prep_run(p);
			if (!prep_finish(r->h, p))
				return; /* r ended */
			continue;
		}
		r->n_pooled++;
		exl_prep_pool_submit(lp->prep, p);
	}
	/* every job made: the body is done with */
	if (r->doc) {
		exl_json_free(r->doc);
		r->doc = NULL;
	}
}

void exl_http_prep_room(struct exl_http *h)
{
	if (!h)
		return;
	for (struct exl_http_req *r = h->reqs, *next; r; r = next) {
		next = r->next;
		if (r->blocked) {
			if (r->kind == EXL_HTTP_KIND_EMBED)
				exl_http_embed_launch(r);
			else
				launch_more(r);
			/* launch_more may have ended r, never another */
		}
	}
}

/* ---- tokenize and detokenize ---- */

void exl_http_start_tokenize(struct exl_http *h, struct evhttp_request *req, bool detok,
			     struct exl_json_doc *doc, uid_t uid)
{
	struct exl_http_req *r = req_new(h, req, detok ? EXL_HTTP_KIND_DETOKENIZE :
					 EXL_HTTP_KIND_TOKENIZE, EXL_HTTP_STYLE_OPENAI, uid);
	struct exl_http_err e;
	struct exl_prep *p;
	int rc;

	if (!r) {
		exl_json_free(doc);
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 500, "internal", NULL, "out of memory");
		return;
	}
	r->doc = doc;
	p = exl_prep_new_decoded();
	if (!p) {
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return;
	}
	/* the prep's zone holds what the mapping makes: it may outlast r */
	if (detok)
		rc = exl_http_map_detokenize(exl_json_root(doc), p->up.zone, &r->detok, &e);
	else
		rc = exl_http_map_tokenize(exl_json_root(doc), p->up.zone, &r->tok, &e);
	if (rc) {
		exl_prep_free(p);
		exl_http_req_fail(r, 400, "invalid_request_error", e.param, e.msg);
		return;
	}
	struct exl_model_entry *ent = pick(r, detok ? r->detok.model : r->tok.model);
	if (!ent) {
		exl_prep_free(p);
		return;
	}
	snprintf(r->model, sizeof(r->model), "%s", ent->name);
	r->model_p = ent->model;
	if (detok) {
		p->req.op = EXL_OPC_DETOKENIZE;
		p->req.u.detokenize.ids = r->detok.ids;
		p->req.u.detokenize.n = r->detok.n;
		p->req.u.detokenize.strip_leading_space = true;
	} else {
		p->req.op = EXL_OPC_TOKENIZE;
		p->req.u.tokenize.text = r->tok.text;
		p->req.u.tokenize.len = r->tok.len;
		p->req.u.tokenize.add_bos = r->tok.add_bos;
		p->req.u.tokenize.special = r->tok.special;
	}
	if (!exl_prep_cheap(p) && !(p->mail = calloc(1, sizeof(*p->mail)))) {
		exl_prep_free(p);
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return;
	}
	p->model = ent->model;
	p->et = ent->et;
	p->sink = r->sink;
	exl_sink_ref(r->sink);
	atomic_fetch_add(&p->et->n_preparing, 1);
	r->n_choices = r->n_launched = 1;
	if (!p->mail) {
		exl_prep_run(p);
		prep_finish(h, p);
		return;
	}
	/* One request, always taken: a tokenize is never refused for room. */
	r->n_pooled++;
	exl_prep_pool_submit(h->lp->prep, p);
}

static void reply_tokenize(struct exl_http_req *r, struct exl_prep *p)
{
	msgpack_unpacked up;
	size_t off = 0;
	struct exl_jw *w = &r->w;
	char buf[256];

	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, p->reply.data, p->reply.size, &off) != MSGPACK_UNPACK_SUCCESS ||
	    up.data.type != MSGPACK_OBJECT_MAP) {
		msgpack_unpacked_destroy(&up);
		exl_http_req_fail(r, 500, "internal", NULL, "could not read the tokenizer's reply");
		return;
	}
	exl_jw_reset(w);
	exl_jw_obj(w);
	for (uint32_t i = 0; i < up.data.via.map.size; i++) {
		const msgpack_object *k = &up.data.via.map.ptr[i].key;
		const msgpack_object *v = &up.data.via.map.ptr[i].val;

		if (k->type != MSGPACK_OBJECT_STR)
			continue;
		if (k->via.str.size == 3 && !memcmp(k->via.str.ptr, "ids", 3) &&
		    v->type == MSGPACK_OBJECT_ARRAY) {
			exl_jw_key(w, "tokens");
			exl_jw_arr(w);
			for (uint32_t t = 0; t < v->via.array.size; t++) {
				int64_t id = v->via.array.ptr[t].via.i64;

				if (v->via.array.ptr[t].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
					id = (int64_t)v->via.array.ptr[t].via.u64;
				if (!r->tok.with_pieces) {
					exl_jw_int(w, id);
					continue;
				}
				size_t n = exl_token_bytes(exl_model_tokenizer(r->model_p), (int32_t)id,
							   true, buf, sizeof(buf));
				exl_jw_obj(w);
				exl_jw_kint(w, "id", id);
				exl_jw_key(w, "piece");
				exl_jw_str(w, buf, n < sizeof(buf) ? n : sizeof(buf));
				exl_jw_obj_end(w);
			}
			exl_jw_arr_end(w);
		} else if (k->via.str.size == 4 && !memcmp(k->via.str.ptr, "text", 4) &&
			   v->type == MSGPACK_OBJECT_STR) {
			exl_jw_key(w, "content");
			exl_jw_str(w, v->via.str.ptr, v->via.str.size);
		}
	}
	exl_jw_obj_end(w);
	msgpack_unpacked_destroy(&up);
	if (exl_jw_failed(w)) {
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return;
	}
	exl_http_send_json(r->req, 200, w->buf, w->len);
	r->req = NULL;
	req_end(r);
}

/* ---- preparations done ---- */

/* p's result for its request; frees p.  False when the request ended. */
static bool prep_finish(struct exl_http *h, struct exl_prep *p)
{
	struct exl_http_req *r = p->sink->http;
	struct exl_engine_thread *et = p->et;
	bool alive = r != NULL;

	if (p->pooled) {
		exl_prep_pool_done(h->lp->prep, p);
		if (r)
			r->n_pooled--;
	}
	if (r && (r->kind == EXL_HTTP_KIND_GENERATE || r->kind == EXL_HTTP_KIND_EMBED)) {
		struct exl_srv_job *j = p->job;

		j->preparing = false;
		if (p->code != EXL_OK) {
			if (p->code > 0)
				fail_code(r, p->code, p->err);
			else
				exl_http_req_fail(r, 500, "internal", NULL, "the request was dropped");
			alive = false;
		} else {
			p->job = NULL;
			if (exl_engine_thread_add(p->et, j)) {
				exl_srv_job_free(j);
				exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
				alive = false;
			}
		}
	} else if (r) {
		if (p->code != EXL_OK)
			fail_code(r, p->code > 0 ? p->code : EXL_E_INTERNAL, p->err);
		else
			reply_tokenize(r, p);
		alive = false;
	}
	exl_prep_free(p);
	/* the model may go only now (a job, if any, holds its engine) */
	exl_engine_thread_prep_done(et);
	return alive;
}

void exl_http_prep_done(struct exl_http *h, struct exl_prep *p)
{
	prep_finish(h, p);
}

/* ---- the jobs' messages ---- */

static const msgpack_object *mget(const msgpack_object *map, const char *key)
{
	size_t n = strlen(key);

	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
		    !memcmp(k->via.str.ptr, key, n))
			return &map->via.map.ptr[i].val;
	}
	return NULL;
}

static int64_t mint(const msgpack_object *map, const char *key)
{
	const msgpack_object *v = mget(map, key);

	if (!v)
		return 0;
	if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		return (int64_t)v->via.u64;
	if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return v->via.i64;
	return 0;
}

static double mnum(const msgpack_object *map, const char *key)
{
	const msgpack_object *v = mget(map, key);

	if (v && (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32))
		return v->via.f64;
	return (double)mint(map, key);
}

static bool mstr(const msgpack_object *map, const char *key, const char **s, size_t *n)
{
	const msgpack_object *v = mget(map, key);

	if (!v || v->type != MSGPACK_OBJECT_STR) {
		*s = "";
		*n = 0;
		return false;
	}
	*s = v->via.str.ptr;
	*n = v->via.str.size;
	return true;
}

/* The ids / probs / top arrays of a token or done message, copied out
 * (msgpack arrays are not flat).  Frees with free_tokinfo. */
static int read_tokinfo(const msgpack_object *map, struct exl_http_tokinfo *t)
{
	const msgpack_object *ids = mget(map, "ids"), *probs = mget(map, "probs");
	const msgpack_object *tid = mget(map, "top_ids"), *tp = mget(map, "top_probs");
	int32_t *i32 = NULL, *tops = NULL;
	float *f = NULL, *topp = NULL;

	memset(t, 0, sizeof(*t));
	if (!ids || ids->type != MSGPACK_OBJECT_ARRAY)
		return 0;
	int n = (int)ids->via.array.size;
	int k = tid && tid->type == MSGPACK_OBJECT_ARRAY && tid->via.array.size == (uint32_t)n && n &&
		tid->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY ?
		(int)tid->via.array.ptr[0].via.array.size : 0;

	i32 = malloc(sizeof(*i32) * (size_t)(n + 1));
	f = malloc(sizeof(*f) * (size_t)(n + 1));
	tops = malloc(sizeof(*tops) * ((size_t)n * k + 1));
	topp = malloc(sizeof(*topp) * ((size_t)n * k + 1));
	if (!i32 || !f || !tops || !topp) {
		free(i32);
		free(f);
		free(tops);
		free(topp);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		i32[i] = (int32_t)ids->via.array.ptr[i].via.u64;
		f[i] = probs && probs->type == MSGPACK_OBJECT_ARRAY && i < (int)probs->via.array.size ?
		       (float)probs->via.array.ptr[i].via.f64 : 0;
		for (int j = 0; j < k; j++) {
			const msgpack_object *ri = &tid->via.array.ptr[i];
			const msgpack_object *rp = tp && tp->type == MSGPACK_OBJECT_ARRAY &&
						   i < (int)tp->via.array.size ? &tp->via.array.ptr[i] : NULL;
			tops[(size_t)i * k + j] = ri->type == MSGPACK_OBJECT_ARRAY &&
						  j < (int)ri->via.array.size ?
						  (int32_t)ri->via.array.ptr[j].via.u64 : 0;
			topp[(size_t)i * k + j] = rp && rp->type == MSGPACK_OBJECT_ARRAY &&
						  j < (int)rp->via.array.size ?
						  (float)rp->via.array.ptr[j].via.f64 : 0;
		}
	}
	t->ids = i32;
	t->n = n;
	t->probs = probs ? f : NULL;
	t->top_ids = tops;
	t->top_probs = topp;
	t->k = k;
	if (!probs)
		free(f);
	return 0;
}

static void free_tokinfo(struct exl_http_tokinfo *t)
{
	free((void *)t->ids);
	free((void *)t->probs);
	free((void *)t->top_ids);
	free((void *)t->top_probs);
}

/* The members every OpenAI object starts with. */
static void openai_head(struct exl_http_req *r, struct exl_jw *w, bool chunk)
{
	char id[48];

	snprintf(id, sizeof(id), "%s-%llu", is_chat(r) ? "chatcmpl" : "cmpl",
		 (unsigned long long)r->id);
	exl_jw_kstr(w, "id", id);
	exl_jw_kstr(w, "object", is_chat(r) ? (chunk ? "chat.completion.chunk" : "chat.completion") :
		    "text_completion");
	exl_jw_kint(w, "created", (int64_t)r->created);
	exl_jw_kstr(w, "model", r->model);
	exl_jw_key(w, "system_fingerprint");
	exl_jw_cstr(w, "exld");
}

/* An OpenAI stream chunk's head and its one choice, k, opened. */
static void chunk_choice_open(struct exl_http_req *r, struct exl_jw *w, int k)
{
	openai_head(r, w, true);
	exl_jw_key(w, "choices");
	exl_jw_arr(w);
	exl_jw_obj(w);
	exl_jw_kint(w, "index", k);
}

static void ollama_head(struct exl_http_req *r, struct exl_jw *w)
{
	char t[64];

	exl_http_now_rfc3339(t, sizeof(t));
	exl_jw_kstr(w, "model", r->model);
	exl_jw_kstr(w, "created_at", t);
}

/* Ollama's last members: why it ended and how long it took (ns). */
static void ollama_tail(struct exl_http_req *r, struct exl_jw *w, const msgpack_object *done)
{
	double ttf = mnum(done, "time_to_first"), total = mnum(done, "time_total");
	const char *reason;
	size_t rn;

	mstr(done, "stop_reason", &reason, &rn);
	char rs[32];
	snprintf(rs, sizeof(rs), "%.*s", (int)(rn < 31 ? rn : 31), reason);
	exl_jw_key(w, "done");
	exl_jw_bool(w, true);
	exl_jw_kstr(w, "done_reason", exl_http_finish_reason(rs));
	exl_jw_kint(w, "total_duration", (int64_t)(exl_now_ns() - r->start_ns));
	exl_jw_kint(w, "load_duration", 0);
	exl_jw_kint(w, "prompt_eval_count", mint(done, "prompt_tokens"));
	exl_jw_kint(w, "prompt_eval_duration", (int64_t)(ttf * 1e9));
	exl_jw_kint(w, "eval_count", mint(done, "new_tokens"));
	exl_jw_kint(w, "eval_duration", (int64_t)((total - ttf) * 1e9));
}

static void usage(struct exl_http_req *r, struct exl_jw *w)
{
	int64_t prompt = 0, completion = 0, cached = 0;

	for (int i = 0; i < r->n_choices; i++) {
		/* each prompt counts once, however many samples it has (a
		 * conversation is one prompt) */
		if (r->g.chat ? i == 0 : i % r->g.n == 0) {
			prompt += r->choices[i].prompt_tokens;
			cached += r->choices[i].cached_tokens;
		}
		completion += r->choices[i].new_tokens;
	}
	exl_jw_key(w, "usage");
	exl_jw_obj(w);
	exl_jw_kint(w, "prompt_tokens", prompt);
	exl_jw_kint(w, "completion_tokens", completion);
	exl_jw_kint(w, "total_tokens", prompt + completion);
	exl_jw_key(w, "prompt_tokens_details");
	exl_jw_obj(w);
	exl_jw_kint(w, "cached_tokens", cached);
	exl_jw_obj_end(w);
	exl_jw_obj_end(w);
}

static void event_start(struct exl_http_req *r)
{
	if (!is_ollama(r))
		exl_jw_text(&r->w, "data: ", 6);
	exl_jw_obj(&r->w);
}

static void event_end(struct exl_http_req *r)
{
	exl_jw_obj_end(&r->w);
	if (is_ollama(r))
		exl_jw_text(&r->w, "\n", 1);
	else
		exl_jw_text(&r->w, "\n\n", 2);
}

/* Streaming: the status line and headers, once the first job is taken
 * (until then an error can still be a status). */
static void stream_start(struct exl_http_req *r)
{
	struct evkeyvalq *hd;

	if (r->started || !r->req)
		return;
	hd = evhttp_request_get_output_headers(r->req);
	evhttp_add_header(hd, "Content-Type", is_ollama(r) ? "application/x-ndjson" :
			  "text/event-stream");
	evhttp_add_header(hd, "Cache-Control", "no-cache");
	evhttp_send_reply_start(r->req, 200, "OK");
	r->started = true;
}

/* One stream event of choice k: text, its tokens' logprobs, or the end. */
static void stream_event(struct exl_http_req *r, int k, const char *text, size_t len,
			 const struct exl_http_tokinfo *t, const char *finish,
			 const msgpack_object *done)
{
	struct exl_jw *w = &r->w;
	struct exl_http_choice *c = &r->choices[k];

	event_start(r);
	if (is_ollama(r)) {
		ollama_head(r, w);
		if (r->g.api == EXL_HTTP_OLLAMA_CHAT) {
			exl_jw_key(w, "message");
			exl_jw_obj(w);
			exl_jw_kstr(w, "role", "assistant");
			exl_jw_key(w, "content");
			exl_jw_str(w, text, len);
			exl_jw_obj_end(w);
		} else {
			exl_jw_key(w, "response");
			exl_jw_str(w, text, len);
		}
		if (done) {
			ollama_tail(r, w, done);
		} else {
			exl_jw_key(w, "done");
			exl_jw_bool(w, false);
		}
		event_end(r);
		return;
	}
	chunk_choice_open(r, w, k);
	if (is_chat(r)) {
		exl_jw_key(w, "delta");
		exl_jw_obj(w);
		if (!c->role_sent) {
			exl_jw_kstr(w, "role", "assistant");
			c->role_sent = true;
		}
		if (len || (!finish && !t)) {
			exl_jw_key(w, "content");
			exl_jw_str(w, text, len);
		}
		exl_jw_obj_end(w);
	} else {
		exl_jw_key(w, "text");
		exl_jw_str(w, text, len);
	}
	exl_jw_key(w, "logprobs");
	if (t && r->g.logprobs >= 0 && t->n)
		exl_http_write_logprobs(w, is_chat(r), t, r->model_p);
	else
		exl_jw_null(w);
	exl_jw_key(w, "finish_reason");
	if (finish)
		exl_jw_cstr(w, finish);
	else
		exl_jw_null(w);
	exl_jw_obj_end(w);
	exl_jw_arr_end(w);
	event_end(r);
}

/* ---- tool calls ---- */

/* The calls a reply may make: all, or with parallel_tool_calls false the
 * first. */
static int calls_kept(const struct exl_http_req *r, const struct exl_tool_parse *p)
{
	return r->g.parallel_tool_calls || p->n_calls < 1 ? p->n_calls : 1;
}

/* OpenAI's tool_calls array (a stream's deltas carry each call's index). */
static void write_openai_calls(struct exl_http_req *r, struct exl_jw *w, int k,
			       const struct exl_tool_parse *p, bool stream)
{
	char id[96];

	exl_jw_key(w, "tool_calls");
	exl_jw_arr(w);
	for (int i = 0; i < calls_kept(r, p); i++) {
		const struct exl_tool_call *c = &p->calls[i];

		if (c->id)
			snprintf(id, sizeof(id), "%.90s", c->id);
		else
			snprintf(id, sizeof(id), "call_%llu_%d_%d", (unsigned long long)r->id, k, i);
		exl_jw_obj(w);
		if (stream)
			exl_jw_kint(w, "index", i);
		exl_jw_kstr(w, "id", id);
		exl_jw_kstr(w, "type", "function");
		exl_jw_key(w, "function");
		exl_jw_obj(w);
		exl_jw_kstr(w, "name", c->name);
		exl_jw_key(w, "arguments");
		exl_jw_str(w, c->args, c->args_len);
		exl_jw_obj_end(w);
		exl_jw_obj_end(w);
	}
	exl_jw_arr_end(w);
}

/* Ollama's: [{"function": {"name", "arguments": {...}}}], arguments as an
 * object. */
static void write_ollama_call(struct exl_jw *w, const char *name, size_t name_len, const char *args,
			      size_t args_len)
{
	struct exl_json_doc *d = exl_json_parse(args, args_len, NULL, 0);

	exl_jw_obj(w);
	exl_jw_key(w, "function");
	exl_jw_obj(w);
	exl_jw_key(w, "name");
	exl_jw_str(w, name, name_len);
	exl_jw_key(w, "arguments");
	if (d) {
		exl_jw_json(w, exl_json_root(d));
	} else {
		exl_jw_obj(w);
		exl_jw_obj_end(w);
	}
	exl_jw_obj_end(w);
	exl_jw_obj_end(w);
	exl_json_free(d);
}

/* The finish reason of a reply that made calls: OpenAI's "tool_calls",
 * unless it was cut short. */
static const char *calls_finish(const char *fin)
{
	return strcmp(fin, "length") ? "tool_calls" : fin;
}

/* A streamed event that carries no text (reasoning, tool calls): its
 * opening, up to where its members go (Ollama's message, or generate's
 * top level; OpenAI's delta, with the role in the first), and its close. */
static void side_event_open(struct exl_http_req *r, int k)
{
	struct exl_http_choice *c = &r->choices[k];
	struct exl_jw *w = &r->w;

	event_start(r);
	if (is_ollama(r)) {
		ollama_head(r, w);
		if (!is_chat(r)) {
			exl_jw_kstr(w, "response", "");
			return;
		}
		exl_jw_key(w, "message");
		exl_jw_obj(w);
		exl_jw_kstr(w, "role", "assistant");
		exl_jw_kstr(w, "content", "");
		return;
	}
	chunk_choice_open(r, w, k);
	exl_jw_key(w, "delta");
	exl_jw_obj(w);
	if (!c->role_sent) {
		exl_jw_kstr(w, "role", "assistant");
		c->role_sent = true;
	}
}

static void side_event_close(struct exl_http_req *r)
{
	struct exl_jw *w = &r->w;

	if (is_ollama(r)) {
		if (is_chat(r))
			exl_jw_obj_end(w);
		exl_jw_key(w, "done");
		exl_jw_bool(w, false);
	} else {
		exl_jw_obj_end(w);
		exl_jw_key(w, "logprobs");
		exl_jw_null(w);
		exl_jw_key(w, "finish_reason");
		exl_jw_null(w);
		exl_jw_obj_end(w);
		exl_jw_arr_end(w);
	}
	event_end(r);
}

/* A streamed reply's reasoning, as its own event: OpenAI's
 * delta.reasoning_content (llama.cpp's name), Ollama's thinking. */
static void stream_reasoning(struct exl_http_req *r, int k, const char *text, size_t len)
{
	side_event_open(r, k);
	exl_jw_key(&r->w, is_ollama(r) ? "thinking" : "reasoning_content");
	exl_jw_str(&r->w, text, len);
	side_event_close(r);
}

/* The reply's reasoning that can go out now, and where its content
 * starts (0 when the reply is not split). */
static size_t stream_reasoning_part(struct exl_http_req *r, int k, bool final)
{
	struct exl_http_choice *c = &r->choices[k];
	struct exl_reasoning rs;

	if (!r->reasoning_on)
		return 0;
	if (c->content_at)
		return c->content_at;
	exl_reasoning_split(r->reasoning_tags, c->text ? c->text : "", c->text_len,
			    r->reasoning_open, final, c->reason_sent, &rs);
	if (c->reason_sent < rs.r_start)
		c->reason_sent = rs.r_start;
	if (rs.r_end > c->reason_sent) {
		if (r->reasoning_show)
			stream_reasoning(r, k, c->text + c->reason_sent, rs.r_end - c->reason_sent);
		c->reason_sent = rs.r_end;
	}
	/* the content began: where is settled */
	if (rs.c_start < c->text_len)
		c->content_at = rs.c_start;
	return rs.c_start;
}

/* Streaming with tools or reasoning: append the reply's next text; its
 * reasoning goes out as such, and of its content what cannot be the start
 * of a call.  False when r ended (out of memory). */
static bool stream_text(struct exl_http_req *r, int k, const char *text, size_t len,
			const struct exl_http_tokinfo *t)
{
	struct exl_http_choice *c = &r->choices[k];
	bool started = false;

	if (c->text_len + len + 1 > c->text_cap) {
		size_t cap = c->text_cap ? c->text_cap : 256;
		while (cap < c->text_len + len + 1)
			cap *= 2;
		char *nt = realloc(c->text, cap);
		if (!nt) {
			exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
			return false;
		}
		c->text = nt;
		c->text_cap = cap;
	}
	memcpy(c->text + c->text_len, text, len);
	c->text_len += len;
	size_t c0 = stream_reasoning_part(r, k, false);
	const char *view = c->text + c0;
	size_t n = c->text_len - c0;
	/* No call starts before what went out: each token's look starts
	 * there (llama3's is at the reply's start), and none once a call
	 * has started. */
	size_t safe = n;
	bool parsed = reply_parsed(r);
	if (parsed && (r->tools_forced || c->call_held))
		safe = c->text_sent;
	else if (parsed && !(r->tool_fmt == EXL_TOOL_FMT_LLAMA3 && c->text_sent))
		safe = c->text_sent + exl_tool_stream_safe(r->tool_fmt, view + c->text_sent,
							   n - c->text_sent, &started);
	if (parsed && !r->tools_forced && started)
		c->call_held = true;
	if (safe > c->text_sent || (t && !is_ollama(r)))
		stream_event(r, k, view + c->text_sent, safe - c->text_sent, t, NULL, NULL);
	c->text_sent = safe;
	return true;
}

/* Streaming with tools or reasoning, at the reply's end: the reasoning
 * left, then the calls as one event, or the held text as content when it
 * made none.  The finish reason, NULL when r ended. */
static const char *stream_text_end(struct exl_http_req *r, int k, const char *fin)
{
	struct exl_http_choice *c = &r->choices[k];
	struct exl_tool_parse p;
	struct exl_jw *w = &r->w;
	size_t c0 = stream_reasoning_part(r, k, true);
	const char *view = c->text ? c->text + c0 : "";
	size_t n = c->text_len - c0;

	if (!reply_parsed(r)) {
		if (n > c->text_sent)
			stream_event(r, k, view + c->text_sent, n - c->text_sent, NULL, NULL, NULL);
		return fin;
	}
	if (exl_tool_parse(r->tool_fmt, r->tools_forced, view, n, &p)) {
		exl_tool_parse_free(&p);
		exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
		return NULL;
	}
	if (!reply_calls(r, &p)) {
		/* the text that went out is the content's start (the whole
		 * reply's but harmony's, whose markers are left out) */
		if (p.content_len > c->text_sent)
			stream_event(r, k, p.content + c->text_sent, p.content_len - c->text_sent, NULL,
				     NULL, NULL);
		exl_tool_parse_free(&p);
		return fin;
	}
	if (p.content_len > c->text_sent)
		stream_event(r, k, p.content + c->text_sent, p.content_len - c->text_sent, NULL, NULL,
			     NULL);
	side_event_open(r, k);
	if (is_ollama(r)) {
		exl_jw_key(w, "tool_calls");
		exl_jw_arr(w);
		for (int i = 0; i < calls_kept(r, &p); i++)
			write_ollama_call(w, p.calls[i].name, strlen(p.calls[i].name), p.calls[i].args,
					  p.calls[i].args_len);
		exl_jw_arr_end(w);
	} else {
		write_openai_calls(r, w, k, &p, true);
	}
	side_event_close(r);
	exl_tool_parse_free(&p);
	return calls_finish(fin);
}

/* Not streaming: choice k's JSON, kept until every choice is done. */
static void keep_result(struct exl_http_req *r, int k, const msgpack_object *done,
			const char *finish)
{
	struct exl_jw w;
	struct exl_http_tokinfo t;
	const char *text;
	size_t len;

	exl_jw_init(&w);
	mstr(done, "text", &text, &len);
	exl_jw_obj(&w);
	exl_jw_kint(&w, "index", k);
	struct exl_reasoning rs = { 0, 0, 0 };
	if (r->g.chat && r->reasoning_on)
		exl_reasoning_split(r->reasoning_tags, text, len, r->reasoning_open, true, 0, &rs);
	bool show = r->reasoning_show && rs.r_end > rs.r_start;
	if (r->g.chat && (reply_parsed(r) || r->reasoning_on)) {
		struct exl_tool_parse p;

		if (exl_tool_parse(reply_parsed(r) ? r->tool_fmt : EXL_TOOL_FMT_NONE, r->tools_forced,
				   text + rs.c_start, len - rs.c_start, &p)) {
			exl_tool_parse_free(&p);
			exl_jw_free(&w);
			return;
		}
		if (!is_chat(r)) {
			/* Ollama's templated generate: the reasoning apart too */
			exl_jw_key(&w, "text");
			exl_jw_str(&w, p.content, p.content_len);
			if (show) {
				exl_jw_key(&w, "reasoning_content");
				exl_jw_str(&w, text + rs.r_start, rs.r_end - rs.r_start);
			}
			exl_tool_parse_free(&p);
			goto tail;
		}
		int n_calls = reply_calls(r, &p);
		exl_jw_key(&w, "message");
		exl_jw_obj(&w);
		exl_jw_kstr(&w, "role", "assistant");
		exl_jw_key(&w, "content");
		if (n_calls && !p.content_len)
			exl_jw_null(&w);
		else
			exl_jw_str(&w, p.content, p.content_len);
		if (show) {
			exl_jw_key(&w, "reasoning_content");
			exl_jw_str(&w, text + rs.r_start, rs.r_end - rs.r_start);
		}
		if (n_calls) {
			write_openai_calls(r, &w, k, &p, false);
			finish = calls_finish(finish);
		}
		exl_jw_obj_end(&w);
		exl_tool_parse_free(&p);
	} else if (is_chat(r)) {
		exl_jw_key(&w, "message");
		exl_jw_obj(&w);
		exl_jw_kstr(&w, "role", "assistant");
		exl_jw_key(&w, "content");
		exl_jw_str(&w, text, len);
		exl_jw_obj_end(&w);
	} else {
		exl_jw_key(&w, "text");
		exl_jw_str(&w, text, len);
	}
tail:
	exl_jw_key(&w, "logprobs");
	if (r->g.logprobs >= 0 && !read_tokinfo(done, &t)) {
		exl_http_write_logprobs(&w, is_chat(r), &t, r->model_p);
		free_tokinfo(&t);
	} else {
		exl_jw_null(&w);
	}
	exl_jw_kstr(&w, "finish_reason", finish);
	exl_jw_obj_end(&w);
	if (!exl_jw_failed(&w)) {
		r->choices[k].result = w.buf;
		r->choices[k].result_len = w.len;
	} else {
		exl_jw_free(&w);
	}
}

/* Ollama's tool_calls from the OpenAI-shaped ones keep_result wrote. */
static void ollama_calls_of(struct exl_jw *w, const struct exl_json *calls)
{
	exl_jw_key(w, "tool_calls");
	exl_jw_arr(w);
	for (size_t i = 0; i < calls->n; i++) {
		const struct exl_json *fn = exl_json_get(calls->v[i], "function");
		const struct exl_json *name = fn ? exl_json_get(fn, "name") : NULL;
		const struct exl_json *args = fn ? exl_json_get(fn, "arguments") : NULL;

		if (name && args && name->type == EXL_JSON_STRING && args->type == EXL_JSON_STRING)
			write_ollama_call(w, name->str, name->len, args->str, args->len);
	}
	exl_jw_arr_end(w);
}

/* Every choice is done: the reply's end. */
static void finish(struct exl_http_req *r, const msgpack_object *last_done)
{
	struct exl_jw *w = &r->w;

	if (r->g.stream) {
		if (!is_ollama(r)) {
			if (r->g.include_usage) {
				event_start(r);
				openai_head(r, w, true);
				exl_jw_key(w, "choices");
				exl_jw_arr(w);
				exl_jw_arr_end(w);
				usage(r, w);
				event_end(r);
			}
			exl_jw_text(w, "data: [DONE]\n\n", 14);
		}
		stream_out(r);
		if (r->req)
			evhttp_send_reply_end(r->req);
	} else {
		exl_jw_reset(w);
		exl_jw_obj(w);
		if (is_ollama(r)) {
			const char *text = "";
			size_t len = 0;

			/* Ollama has no choices: n is 1 */
			if (r->choices[0].result) {
				struct exl_json_doc *d = exl_json_parse(r->choices[0].result,
								       r->choices[0].result_len,
								       NULL, 0);
				const struct exl_json *c = d ? exl_json_root(d) : NULL;
				const struct exl_json *m = c ? exl_json_get(c, is_chat(r) ? "message" :
									   "text") : NULL;
				const struct exl_json *calls = m && is_chat(r) ?
							       exl_json_get(m, "tool_calls") : NULL;
				const struct exl_json *thinking = !m ? NULL : is_chat(r) ?
								  exl_json_get(m, "reasoning_content") :
								  exl_json_get(c, "reasoning_content");
				if (m && is_chat(r))
					m = exl_json_get(m, "content");
				if (m && m->type == EXL_JSON_STRING) {
					text = m->str;
					len = m->len;
				}
				ollama_head(r, w);
				if (is_chat(r)) {
					exl_jw_key(w, "message");
					exl_jw_obj(w);
					exl_jw_kstr(w, "role", "assistant");
					exl_jw_key(w, "content");
					exl_jw_str(w, text, len);
					if (thinking && thinking->type == EXL_JSON_STRING) {
						exl_jw_key(w, "thinking");
						exl_jw_str(w, thinking->str, thinking->len);
					}
					if (calls && calls->type == EXL_JSON_ARRAY)
						ollama_calls_of(w, calls);
					exl_jw_obj_end(w);
				} else {
					exl_jw_key(w, "response");
					exl_jw_str(w, text, len);
					if (thinking && thinking->type == EXL_JSON_STRING) {
						exl_jw_key(w, "thinking");
						exl_jw_str(w, thinking->str, thinking->len);
					}
				}
				exl_json_free(d);
			}
			ollama_tail(r, w, last_done);
		} else {
			openai_head(r, w, false);
			exl_jw_key(w, "choices");
			exl_jw_arr(w);
			for (int i = 0; i < r->n_choices; i++)
				if (r->choices[i].result)
					exl_jw_raw(w, r->choices[i].result, r->choices[i].result_len);
			exl_jw_arr_end(w);
			usage(r, w);
		}
		exl_jw_obj_end(w);
		if (exl_jw_failed(w)) {
			exl_http_req_fail(r, 500, "internal", NULL, "out of memory");
			return;
		}
		if (r->req)
			exl_http_send_json(r->req, 200, w->buf, w->len);
	}
	r->req = NULL;
	req_end(r);
}

/* One message of r's jobs.  False when r ended. */
static bool on_message(struct exl_http_req *r, const msgpack_object *m)
{
	const char *op, *s;
	size_t opn, n;
	int64_t k = mint(m, "id");

	if (m->type != MSGPACK_OBJECT_MAP || !mstr(m, "op", &op, &opn))
		return true;
	if (opn == 5 && !memcmp(op, "error", 5)) {
		char msg[600], codename[32];
		const char *cs;
		size_t cn;

		mstr(m, "message", &s, &n);
		mstr(m, "code", &cs, &cn);
		snprintf(msg, sizeof(msg), "%.*s", (int)(n > 590 ? 590 : n), s);
		snprintf(codename, sizeof(codename), "%.*s", (int)(cn > 31 ? 31 : cn), cs);
		int status = !strcmp(codename, "too_large") ? 400 :
			     !strcmp(codename, "limit") ? 429 :
			     !strcmp(codename, "busy") || !strcmp(codename, "shutdown") ? 503 :
			     !strcmp(codename, "bad_request") ? 400 : 500;
		exl_http_req_fail(r, status, codename, NULL, msg);
		return false;
	}
	if (r->kind == EXL_HTTP_KIND_EMBED)
		return opn == 5 && !memcmp(op, "embed", 5) ? exl_http_embed_message(r, m, k) : true;
	if (k < 0 || k >= r->n_choices)
		return true;
	struct exl_http_choice *c = &r->choices[k];
	if (opn == 8 && !memcmp(op, "generate", 8)) {
		c->accepted = true;
		c->job = (uint64_t)mint(m, "job");
		c->prompt_tokens = (int)mint(m, "prompt_tokens");
		if (r->g.stream) {
			stream_start(r);
			/* OpenAI's chat streams open with the role; echo opens
			 * completions with the prompt */
			if (!is_ollama(r) && is_chat(r) && !c->role_sent)
				stream_event(r, (int)k, "", 0, NULL, NULL, NULL);
			if (r->g.echo && !is_chat(r)) {
				const struct exl_prompt *pr = &r->g.prompts[k / r->g.n];
				if (pr->text)
					stream_event(r, (int)k, pr->text, pr->len, NULL, NULL, NULL);
			}
		}
		return true;
	}
	if (opn == 5 && !memcmp(op, "token", 5)) {
		struct exl_http_tokinfo t;
		bool have_t = r->g.logprobs >= 0 && !read_tokinfo(m, &t);

		mstr(m, "text", &s, &n);
		bool alive = true;
		if ((n || have_t) && (reply_parsed(r) || r->reasoning_on) && r->g.chat)
			alive = stream_text(r, (int)k, s, n, have_t ? &t : NULL);
		else if (n || have_t)
			stream_event(r, (int)k, s, n, have_t ? &t : NULL, NULL, NULL);
		if (have_t)
			free_tokinfo(&t);
		return alive;
	}
	if (opn != 4 || memcmp(op, "done", 4))
		return true;
	char reason[32];
	mstr(m, "stop_reason", &s, &n);
	snprintf(reason, sizeof(reason), "%.*s", (int)(n > 31 ? 31 : n), s);
	c->done = true;
	c->prompt_tokens = (int)mint(m, "prompt_tokens");
	c->new_tokens = (int)mint(m, "new_tokens");
	c->cached_tokens = (int)mint(m, "cached_tokens");
	r->n_done++;
	if (!strcmp(reason, "error") || !strcmp(reason, "shutdown") || !strcmp(reason, "unloaded")) {
		const msgpack_object *e = mget(m, "error");
		char msg[600];

		if (e && e->type == MSGPACK_OBJECT_MAP && mstr(e, "message", &s, &n))
			snprintf(msg, sizeof(msg), "%.*s", (int)(n > 590 ? 590 : n), s);
		else
			snprintf(msg, sizeof(msg), "the job ended: %s", reason);
		exl_http_req_fail(r, !strcmp(reason, "error") ? 500 : 503,
				  !strcmp(reason, "error") ? "internal" : reason, NULL, msg);
		return false;
	}
	const char *fin = exl_http_finish_reason(reason);
	if (r->g.stream && (reply_parsed(r) || r->reasoning_on) && r->g.chat &&
	    !(fin = stream_text_end(r, (int)k, fin)))
		return false;
	if (r->g.stream)
		stream_event(r, (int)k, "", 0, NULL, fin, is_ollama(r) ? m : NULL);
	else
		keep_result(r, (int)k, m, fin);
	if (r->n_done == r->n_choices) {
		finish(r, m);
		return false;
	}
	return true;
}

void exl_http_flush_sink(struct exl_http_req *r)
{
	struct exl_outmsg *m = exl_sink_take_out(r->sink, NULL);
	bool alive = true;

	while (m) {
		struct exl_outmsg *next = m->next;

		if (alive) {
			msgpack_unpacked up;
			size_t off = 0;

			msgpack_unpacked_init(&up);
			if (msgpack_unpack_next(&up, (const char *)m->data, m->len, &off) ==
			    MSGPACK_UNPACK_SUCCESS)
				alive = on_message(r, &up.data);
			msgpack_unpacked_destroy(&up);
		}
		free(m);
		m = next;
	}
	if (alive && r->g.stream)
		stream_out(r);
}

/* ---- for http_embed.c ---- */

struct exl_http_req *exl_http_req_new(struct exl_http *h, struct evhttp_request *req,
				      enum exl_http_kind kind, enum exl_http_style style, uid_t uid)
{
	return req_new(h, req, kind, style, uid);
}

void exl_http_req_end(struct exl_http_req *r)
{
	req_end(r);
}

struct exl_model_entry *exl_http_pick(struct exl_http_req *r, const char *name)
{
	return pick(r, name);
}

struct exl_model_entry *exl_http_pick_loaded(struct exl_http_req *r)
{
	return pick_loaded(r);
}

void exl_http_fail_code(struct exl_http_req *r, int code, const char *msg)
{
	fail_code(r, code, msg);
}

bool exl_http_prep_finish(struct exl_http *h, struct exl_prep *p)
{
	return prep_finish(h, p);
}
