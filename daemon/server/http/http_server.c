/* The HTTP front: listeners, who may ask, routing, and the answers that
 * run no model (lists, versions, errors).  See http.h and docs/http.md. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/json_parse.h"
#include "common/utf8.h"
#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "daemon/core/util/log.h"
#include "daemon/server/engine/engine_thread.h"
#include "daemon/server/engine/models_registry.h"
#include "daemon/server/http/http_internal.h"
#include "daemon/server/loop.h"

#define MAX_HEADERS_SIZE (64 << 10)

/* ---- replies ---- */

void exl_http_send_json(struct evhttp_request *req, int status, const char *body, size_t len)
{
	struct evbuffer *b = evbuffer_new();

	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "application/json");
	if (b && evbuffer_add(b, body, len) == 0 && evbuffer_add(b, "\n", 1) == 0) {
		evhttp_send_reply(req, status, NULL, b);
	} else {
		exl_log(EXL_LOG_ERR, "http: out of memory for a reply of %zu bytes", len);
		evhttp_send_reply(req, 500, NULL, NULL);
	}
	if (b)
		evbuffer_free(b);
}

static const char *openai_type(int status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 429: return "rate_limit_error";
	case 500: return "server_error";
	case 501: return "not_implemented";
	case 503: return "service_unavailable";
	default: return "invalid_request_error";
	}
}

void exl_http_send_error(struct evhttp_request *req, enum exl_http_style style, int status,
			 const char *code, const char *param, const char *msg)
{
	struct exl_jw w;

	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_key(&w, "error");
	if (style == EXL_HTTP_STYLE_OLLAMA) {
		exl_jw_cstr(&w, msg);
	} else {
		exl_jw_obj(&w);
		exl_jw_kstr(&w, "message", msg);
		exl_jw_kstr(&w, "type", openai_type(status));
		exl_jw_key(&w, "param");
		if (param && param[0])
			exl_jw_cstr(&w, param);
		else
			exl_jw_null(&w);
		exl_jw_key(&w, "code");
		if (code && code[0])
			exl_jw_cstr(&w, code);
		else
			exl_jw_null(&w);
		exl_jw_obj_end(&w);
	}
	exl_jw_obj_end(&w);
	if (status == 401)
		evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
				  "Bearer");
	if (exl_jw_failed(&w))
		evhttp_send_reply(req, 500, NULL, NULL);
	else
		exl_http_send_json(req, status, w.buf, w.len);
	exl_jw_free(&w);
}

int exl_http_status_of(int code, const char **name)
{
	*name = exl_code_name(code);
	switch (code) {
	case EXL_E_BAD_REQUEST:
	case EXL_E_TOO_LARGE:
		return 400;
	case EXL_E_UNKNOWN_MODEL:
	case EXL_E_NOT_FOUND:
	case EXL_E_UNKNOWN_OP:
		return 404;
	case EXL_E_FORBIDDEN:
		return 403;
	case EXL_E_LIMIT:
		return 429;
	case EXL_E_BUSY:
	case EXL_E_SHUTDOWN:
		return 503;
	default:
		return 500;
	}
}

/* ---- the answers that need no model run ---- */

static void reply_w(struct evhttp_request *req, struct exl_jw *w)
{
	if (exl_jw_failed(w))
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 500, "internal", NULL, "out of memory");
	else
		exl_http_send_json(req, 200, w->buf, w->len);
	exl_jw_free(w);
}

/* The model's tokenizer.chat_template when it is text we may send. */
static const struct gguf_kv *chat_template_kv(const struct exl_model *m)
{
	const struct gguf_kv *kv = exl_gguf_find_kv(exl_model_gguf(m), "tokenizer.chat_template");

	if (!kv || kv->val.type != GGUF_VT_STRING)
		return NULL;
	return kv;
}

static void openai_model(struct exl_jw *w, const struct exl_model_entry *e, uint64_t created)
{
	exl_jw_obj(w);
	exl_jw_kstr(w, "id", e->name);
	exl_jw_kstr(w, "object", "model");
	exl_jw_kint(w, "created", (int64_t)created);
	exl_jw_kstr(w, "owned_by", "exld");
	exl_jw_obj_end(w);
}

static void get_models(struct exl_http *h, struct evhttp_request *req)
{
	struct exl_jw w;

	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_kstr(&w, "object", "list");
	exl_jw_key(&w, "data");
	exl_jw_arr(&w);
	for (struct exl_model_entry *e = exl_registry_next_loaded(h->lp->reg, NULL); e;
	     e = exl_registry_next_loaded(h->lp->reg, e))
		openai_model(&w, e, (uint64_t)time(NULL));
	exl_jw_arr_end(&w);
	exl_jw_obj_end(&w);
	reply_w(req, &w);
}

static struct exl_model_entry *find_loaded(struct exl_http *h, const char *name)
{
	for (struct exl_model_entry *e = exl_registry_next_loaded(h->lp->reg, NULL); e;
	     e = exl_registry_next_loaded(h->lp->reg, e))
		if (!strcmp(e->name, name))
			return e;
	return NULL;
}

static void get_model(struct exl_http *h, struct evhttp_request *req, const char *name)
{
	struct exl_model_entry *e = find_loaded(h, name);
	struct exl_jw w;
	char msg[300];

	if (!e) {
		snprintf(msg, sizeof(msg), "no model '%.128s' is loaded", name);
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 404, "model_not_found", "model", msg);
		return;
	}
	exl_jw_init(&w);
	openai_model(&w, e, (uint64_t)time(NULL));
	reply_w(req, &w);
}

static void ollama_details(struct exl_jw *w, const struct exl_model_entry *e)
{
	const struct exl_hparams *hp = exl_model_hparams(e->model);

	exl_jw_key(w, "details");
	exl_jw_obj(w);
	exl_jw_kstr(w, "parent_model", "");
	exl_jw_kstr(w, "format", "gguf");
	exl_jw_kstr(w, "family", hp->arch_name);
	exl_jw_key(w, "families");
	exl_jw_arr(w);
	exl_jw_cstr(w, hp->arch_name);
	exl_jw_arr_end(w);
	exl_jw_kstr(w, "parameter_size", "");
	exl_jw_kstr(w, "quantization_level", "");
	exl_jw_obj_end(w);
}

/* /api/tags and /api/ps: the loaded models */
static void get_tags(struct exl_http *h, struct evhttp_request *req, bool ps)
{
	struct exl_jw w;
	char now[64];

	exl_http_now_rfc3339(now, sizeof(now));
	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_key(&w, "models");
	exl_jw_arr(&w);
	for (struct exl_model_entry *e = exl_registry_next_loaded(h->lp->reg, NULL); e;
	     e = exl_registry_next_loaded(h->lp->reg, e)) {
		exl_jw_obj(&w);
		exl_jw_kstr(&w, "name", e->name);
		exl_jw_kstr(&w, "model", e->name);
		if (!ps)
			exl_jw_kstr(&w, "modified_at", now);
		exl_jw_key(&w, "size");
		exl_jw_uint(&w, e->file_size);
		exl_jw_kstr(&w, "digest", "");
		ollama_details(&w, e);
		if (ps) {
			exl_jw_kstr(&w, "expires_at", "2262-04-11T23:47:16.854775807Z");
			exl_jw_key(&w, "size_vram");
			exl_jw_uint(&w, 0);
		}
		exl_jw_obj_end(&w);
	}
	exl_jw_arr_end(&w);
	exl_jw_obj_end(&w);
	reply_w(req, &w);
}

static void get_version(struct evhttp_request *req)
{
	struct exl_jw w;

	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_kstr(&w, "version", EXL_VERSION);
	exl_jw_obj_end(&w);
	reply_w(req, &w);
}

static void get_health(struct exl_http *h, struct evhttp_request *req)
{
	struct exl_jw w;
	int n = 0;

	for (struct exl_model_entry *e = exl_registry_next_loaded(h->lp->reg, NULL); e;
	     e = exl_registry_next_loaded(h->lp->reg, e))
		n++;
	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_kstr(&w, "status", h->lp->draining ? "draining" : "ok");
	exl_jw_kint(&w, "models_loaded", n);
	exl_jw_obj_end(&w);
	if (h->lp->draining) {
		exl_http_send_json(req, 503, w.buf ? w.buf : "{}", w.buf ? w.len : 2);
		exl_jw_free(&w);
		return;
	}
	reply_w(req, &w);
}

/* POST /api/show {model} */
static void post_show(struct exl_http *h, struct evhttp_request *req, const struct exl_json *body)
{
	struct exl_http_err e;
	char model[EXL_MAX_NAME + 1], msg[300];
	struct exl_jw w;

	if (body->type != EXL_JSON_OBJECT || exl_http_map_model(body, model, &e)) {
		exl_http_send_error(req, EXL_HTTP_STYLE_OLLAMA, 400, NULL, NULL,
				    body->type != EXL_JSON_OBJECT ? "the body must be a JSON object" :
				    e.msg);
		return;
	}
	struct exl_model_entry *ent = find_loaded(h, model);
	if (!ent) {
		snprintf(msg, sizeof(msg), "model '%s' not found (not loaded)", model);
		exl_http_send_error(req, EXL_HTTP_STYLE_OLLAMA, 404, NULL, NULL, msg);
		return;
	}
	const struct exl_hparams *hp = exl_model_hparams(ent->model);
	const struct gguf_kv *tmpl = chat_template_kv(ent->model);
	char key[96];

	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_kstr(&w, "modelfile", "");
	exl_jw_kstr(&w, "parameters", "");
	exl_jw_key(&w, "template");
	exl_jw_str(&w, tmpl ? tmpl->val.str.ptr : "", tmpl ? (size_t)tmpl->val.str.len : 0);
	ollama_details(&w, ent);
	exl_jw_key(&w, "model_info");
	exl_jw_obj(&w);
	exl_jw_kstr(&w, "general.architecture", hp->arch_name);
	exl_jw_kstr(&w, "general.name", hp->name);
	snprintf(key, sizeof(key), "%s.context_length", hp->arch_name);
	exl_jw_kint(&w, key, hp->n_ctx_train);
	snprintf(key, sizeof(key), "%s.embedding_length", hp->arch_name);
	exl_jw_kint(&w, key, hp->n_embd);
	snprintf(key, sizeof(key), "%s.block_count", hp->arch_name);
	exl_jw_kint(&w, key, hp->n_layer);
	exl_jw_kint(&w, "tokenizer.vocab_size", hp->n_vocab);
	exl_jw_obj_end(&w);
	/* Ollama's clients look here before they send tools or think */
	exl_jw_key(&w, "capabilities");
	exl_jw_arr(&w);
	/* an encoder (bert) only embeds, as Ollama says of its embedding models */
	if (hp->encoder) {
		exl_jw_cstr(&w, "embedding");
		exl_jw_arr_end(&w);
		exl_jw_obj_end(&w);
		reply_w(req, &w);
		return;
	}
	exl_jw_cstr(&w, "completion");
	if (tmpl && exl_tool_fmt_of(tmpl->val.str.ptr, (size_t)tmpl->val.str.len) != EXL_TOOL_FMT_NONE)
		exl_jw_cstr(&w, "tools");
	if (tmpl && exl_reasoning_template(tmpl->val.str.ptr, (size_t)tmpl->val.str.len) !=
		    EXL_REASONING_NONE)
		exl_jw_cstr(&w, "thinking");
	/* fill-in-the-middle: Ollama's name for a model that takes a suffix */
	int32_t fim[3];
	if (exl_tokenizer_fim(exl_model_tokenizer(ent->model), fim))
		exl_jw_cstr(&w, "insert");
	exl_jw_arr_end(&w);
	exl_jw_obj_end(&w);
	reply_w(req, &w);
}

/* POST /apply-template {messages} (llama.cpp's): the rendered prompt */
static void post_apply_template(struct exl_http *h, struct evhttp_request *req,
				const struct exl_json *body)
{
	msgpack_zone *zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
	struct exl_http_gen g;
	struct exl_http_err e;
	char err[600], *out = NULL;
	size_t len = 0;
	struct exl_jw w;
	int code;

	if (!zone) {
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 500, "internal", NULL, "out of memory");
		return;
	}
	if (exl_http_map_generate(EXL_HTTP_OAI_CHAT, body, zone, &g, &e)) {
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 400, "invalid_request_error", e.param,
				    e.msg);
		goto out;
	}
	struct exl_model_entry *ent = exl_registry_pick(h->lp->reg, g.model, &code, err, sizeof(err));
	if (!ent) {
		const char *name;
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, exl_http_status_of(code, &name),
				    code == EXL_E_UNKNOWN_MODEL ? "model_not_found" : name, "model", err);
		goto out;
	}
	if (exl_http_render_chat(ent->model, &g, &out, &len, err, sizeof(err))) {
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 400, "invalid_request_error", "messages",
				    err);
		goto out;
	}
	exl_jw_init(&w);
	exl_jw_obj(&w);
	exl_jw_key(&w, "prompt");
	exl_jw_str(&w, out, len);
	exl_jw_obj_end(&w);
	reply_w(req, &w);
out:
	free(out);
	msgpack_zone_free(zone);
}

/* ---- who may ask ---- */

static bool loopback_host(const char *host, size_t n)
{
	static const char *const names[] = { "localhost", "127.0.0.1", "::1", "[::1]" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == n && !strncasecmp(host, names[i], n))
			return true;
	return false;
}

/* The host part of a Host header or an Origin's authority, without port. */
static bool authority_is_loopback(const char *a)
{
	size_t n;

	if (a[0] == '[') {
		const char *end = strchr(a, ']');
		if (!end)
			return false;
		n = (size_t)(end - a + 1);
	} else {
		n = strcspn(a, ":/");
	}
	return loopback_host(a, n);
}

/* Constant time, so the key cannot be guessed byte by byte from timings. */
static bool key_matches(const char *given, const char *key)
{
	size_t n = strlen(key), g = strlen(given);
	unsigned diff = (unsigned)(n ^ g);

	for (size_t i = 0; i < n; i++)
		diff |= (unsigned)(uint8_t)key[i] ^ (unsigned)(uint8_t)(i < g ? given[i] : 0);
	return diff == 0;
}

/* Whether req may be answered; when not, the error is sent. */
static bool allowed(struct exl_http *h, struct evhttp_request *req, const char *path,
		    enum exl_http_style style, bool unix_peer)
{
	const struct exl_config *cfg = &h->lp->cfg;
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const char *host = evhttp_find_header(in, "Host");
	const char *origin = evhttp_find_header(in, "Origin");

	/* A web page in a browser may send requests to a loopback address
	 * (and, by DNS rebinding, read the replies): a loopback-only front
	 * takes only loopback Host names and no foreign Origin. */
	if (!cfg->http_allow_remote && !unix_peer) {
		if (host && !authority_is_loopback(host)) {
			exl_http_send_error(req, style, 403, "forbidden", NULL,
					    "Host is not a loopback name (localhost, 127.0.0.1, "
					    "[::1]); set http_allow_remote to serve other names");
			return false;
		}
		if (origin) {
			const char *a = strstr(origin, "://");
			if (!a || !authority_is_loopback(a + 3)) {
				exl_http_send_error(req, style, 403, "forbidden", NULL,
						    "cross-origin requests from web pages are refused");
				return false;
			}
		}
	}
	if (!cfg->http_api_key[0] || !strcmp(path, "/health") || !strcmp(path, "/"))
		return true;
	const char *auth = evhttp_find_header(in, "Authorization");
	if (auth && !strncasecmp(auth, "Bearer ", 7) && key_matches(auth + 7, cfg->http_api_key))
		return true;
	exl_http_send_error(req, style, 401, "invalid_api_key", NULL,
			    auth ? "the API key is not the one configured (http_api_key)" :
			    "this server wants an API key: Authorization: Bearer KEY");
	return false;
}

/* The requester's uid: SO_PEERCRED over a Unix socket, http_uid else. */
static uid_t peer_uid(struct exl_http *h, struct evhttp_request *req, bool *unix_peer)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct ucred cr;
	socklen_t cl = sizeof(cr);

	*unix_peer = false;
	if (fd >= 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    ss.ss_family == AF_UNIX) {
		*unix_peer = true;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
			return cr.uid;
		return (uid_t)-1;
	}
	return h->lp->cfg.http_uid;
}

/* ---- routing ---- */

/* Ollama's model management and what exld does not serve: 501, named. */
static const char *const not_implemented[] = {
	"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete",
	"/v1/images/generations", "/v1/audio/speech",
	"/v1/audio/transcriptions", "/v1/moderations", "/v1/files", "/v1/batches",
	"/v1/fine_tuning/jobs", "/v1/responses",
};

static bool method_is(struct evhttp_request *req, enum evhttp_cmd_type m)
{
	enum evhttp_cmd_type t = evhttp_request_get_command(req);

	return t == m || (m == EVHTTP_REQ_GET && t == EVHTTP_REQ_HEAD);
}

static void wrong_method(struct evhttp_request *req, enum exl_http_style style, const char *path,
			 const char *want)
{
	char msg[300];

	snprintf(msg, sizeof(msg), "%.200s takes %s", path, want);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", want);
	exl_http_send_error(req, style, 405, "method_not_allowed", NULL, msg);
}

/* The body as JSON; NULL after replying 400. */
static struct exl_json_doc *body_json(struct evhttp_request *req, enum exl_http_style style)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = evbuffer_get_length(in);
	char err[300], msg[400];

	if (!len) {
		exl_http_send_error(req, style, 400, "invalid_request_error", NULL,
				    "the request has no body (a JSON object)");
		return NULL;
	}
	const char *text = (const char *)evbuffer_pullup(in, -1);
	if (!text) {
		exl_http_send_error(req, style, 500, "internal", NULL, "out of memory");
		return NULL;
	}
	struct exl_json_doc *d = exl_json_parse(text, len, err, sizeof(err));
	if (!d) {
		snprintf(msg, sizeof(msg), "the body is not JSON: %s", err);
		exl_http_send_error(req, style, 400, "invalid_request_error", NULL, msg);
	}
	return d;
}

enum route {
	R_NONE, R_ROOT, R_HEALTH, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_TAGS, R_PS,
	R_VERSION, R_SHOW, R_GENERATE, R_OCHAT, R_TOKENIZE, R_DETOKENIZE, R_APPLY_TEMPLATE,
	R_EMBEDDINGS, R_OEMBED, R_OEMBEDDINGS,
	R_NOT_IMPLEMENTED,
};

static const struct {
	const char *path;
	enum route r;
	bool post;
} routes[] = {
	{ "/", R_ROOT, false },
	{ "/health", R_HEALTH, false },
	{ "/v1/health", R_HEALTH, false },
	{ "/v1/models", R_MODELS, false },
	{ "/v1/completions", R_COMPLETIONS, true },
	{ "/v1/chat/completions", R_CHAT, true },
	{ "/v1/embeddings", R_EMBEDDINGS, true },
	{ "/api/embed", R_OEMBED, true },
	{ "/api/embeddings", R_OEMBEDDINGS, true },
	{ "/api/tags", R_TAGS, false },
	{ "/api/ps", R_PS, false },
	{ "/api/version", R_VERSION, false },
	{ "/api/show", R_SHOW, true },
	{ "/api/generate", R_GENERATE, true },
	{ "/api/chat", R_OCHAT, true },
	{ "/tokenize", R_TOKENIZE, true },
	{ "/detokenize", R_DETOKENIZE, true },
	{ "/apply-template", R_APPLY_TEMPLATE, true },
};

static void on_request(struct evhttp_request *req, void *arg)
{
	struct exl_http *h = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	enum exl_http_style style;
	enum route r = R_NONE;
	bool post = false, unix_peer;
	char msg[300], model[EXL_MAX_NAME + 1];
	uid_t uid;

	if (!path || !path[0]) {
		/* evhttp calls back without the URI for a request it failed
		 * to read: a body over max_message is 413 */
		if (evhttp_request_get_response_code(req) == 413) {
			snprintf(msg, sizeof(msg), "the request body is over max_message (%u bytes)",
				 h->lp->cfg.max_message);
			exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 413, "too_large", NULL, msg);
			return;
		}
		exl_http_send_error(req, EXL_HTTP_STYLE_OPENAI, 400, "invalid_request_error", NULL,
				    "a request wants a path");
		return;
	}
	style = !strncmp(path, "/api/", 5) ? EXL_HTTP_STYLE_OLLAMA : EXL_HTTP_STYLE_OPENAI;
	uid = peer_uid(h, req, &unix_peer);
	if (uid == (uid_t)-1) {
		exl_http_send_error(req, style, 500, "internal", NULL, "SO_PEERCRED failed");
		return;
	}
	if (!allowed(h, req, path, style, unix_peer))
		return;
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (!strcmp(path, routes[i].path)) {
			r = routes[i].r;
			post = routes[i].post;
		}
	}
	if (r == R_NONE && !strncmp(path, "/v1/models/", 11) && strlen(path + 11) <= EXL_MAX_NAME) {
		r = R_MODEL;
		snprintf(model, sizeof(model), "%s", path + 11);
	}
	for (size_t i = 0; r == R_NONE && i < sizeof(not_implemented) / sizeof(not_implemented[0]); i++)
		if (!strcmp(path, not_implemented[i]) || !strncmp(path, "/api/blobs/", 11))
			r = R_NOT_IMPLEMENTED;
	if (r == R_NONE) {
		snprintf(msg, sizeof(msg), "no endpoint %.200s (docs/http.md lists them)", path);
		exl_http_send_error(req, style, 404, "not_found", NULL, msg);
		return;
	}
	if (r == R_NOT_IMPLEMENTED) {
		snprintf(msg, sizeof(msg), "%.200s is not implemented by exld (models are GGUF "
			 "files in its model directory, loaded with exl load)", path);
		exl_http_send_error(req, style, 501, "not_implemented", NULL, msg);
		return;
	}
	if (post ? !method_is(req, EVHTTP_REQ_POST) : !method_is(req, EVHTTP_REQ_GET)) {
		wrong_method(req, style, path, post ? "POST" : "GET");
		return;
	}
	if (h->lp->draining && post) {
		exl_http_send_error(req, style, 503, "shutdown", NULL, "the daemon is shutting down");
		return;
	}
	switch (r) {
	case R_ROOT: {
		struct evbuffer *b = evbuffer_new();
		if (b)
			evbuffer_add_printf(b, "exld is running\n");
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
				  "text/plain");
		evhttp_send_reply(req, 200, "OK", b);
		if (b)
			evbuffer_free(b);
		return;
	}
	case R_HEALTH: get_health(h, req); return;
	case R_MODELS: get_models(h, req); return;
	case R_MODEL: get_model(h, req, model); return;
	case R_TAGS: get_tags(h, req, false); return;
	case R_PS: get_tags(h, req, true); return;
	case R_VERSION: get_version(req); return;
	default: break;
	}
	struct exl_json_doc *doc = body_json(req, style);
	if (!doc)
		return;
	switch (r) {
	case R_SHOW:
		post_show(h, req, exl_json_root(doc));
		break;
	case R_APPLY_TEMPLATE:
		post_apply_template(h, req, exl_json_root(doc));
		break;
	case R_COMPLETIONS:
		exl_http_start_generate(h, req, EXL_HTTP_OAI_COMPLETION, doc, uid);
		return;
	case R_CHAT:
		exl_http_start_generate(h, req, EXL_HTTP_OAI_CHAT, doc, uid);
		return;
	case R_GENERATE:
		exl_http_start_generate(h, req, EXL_HTTP_OLLAMA_GENERATE, doc, uid);
		return;
	case R_OCHAT:
		exl_http_start_generate(h, req, EXL_HTTP_OLLAMA_CHAT, doc, uid);
		return;
	case R_TOKENIZE:
		exl_http_start_tokenize(h, req, false, doc, uid);
		return;
	case R_EMBEDDINGS:
		exl_http_start_embed(h, req, EXL_HTTP_OAI_EMBEDDINGS, doc, uid);
		return;
	case R_OEMBED:
		exl_http_start_embed(h, req, EXL_HTTP_OLLAMA_EMBED, doc, uid);
		return;
	case R_OEMBEDDINGS:
		exl_http_start_embed(h, req, EXL_HTTP_OLLAMA_EMBEDDINGS, doc, uid);
		return;
	case R_DETOKENIZE:
		exl_http_start_tokenize(h, req, true, doc, uid);
		return;
	default:
		break;
	}
	exl_json_free(doc);
}

/* ---- listeners ---- */

static int bind_unix(struct exl_http *h, const struct exl_http_listen *l, char *err,
		     size_t errlen)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct stat st;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(err, errlen, "http %s: socket: %s", l->spec, strerror(errno));
		return -1;
	}
	memcpy(a.sun_path, l->path, strlen(l->path) + 1);
	if (lstat(l->path, &st) == 0) {
		int probe;

		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "http %s: exists and is not a socket", l->spec);
			goto fail;
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof(a)) == 0) {
			close(probe);
			snprintf(err, errlen, "http %s: another server is listening there", l->spec);
			goto fail;
		}
		if (probe >= 0)
			close(probe);
		unlink(l->path); /* stale */
	}
	mode_t old = umask(0777 & ~h->lp->cfg.socket_mode);
	int rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (rc < 0 || listen(fd, 128) < 0) {
		snprintf(err, errlen, "http %s: %s", l->spec, strerror(errno));
		goto fail;
	}
	snprintf(h->unix_paths[h->n_unix++], sizeof(h->unix_paths[0]), "%s", l->path);
	struct evhttp_bound_socket *b = evhttp_accept_socket_with_handle(h->eh, fd);
	if (!b) {
		snprintf(err, errlen, "http %s: evhttp_accept_socket failed", l->spec);
		goto fail;
	}
	h->bound[h->n_bound++] = b;
	exl_log(EXL_LOG_INFO, "http: listening on %s (mode %04o)", l->spec, h->lp->cfg.socket_mode);
	return 0;
fail:
	close(fd);
	return -1;
}

static int bind_tcp(struct exl_http *h, const struct exl_http_listen *l, char *err, size_t errlen)
{
	struct evhttp_bound_socket *b = evhttp_bind_socket_with_handle(h->eh, l->addr, l->port);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[64];
	int port = l->port;

	if (!b) {
		snprintf(err, errlen, "http %s: cannot listen there: %s", l->spec, strerror(errno));
		return -1;
	}
	h->bound[h->n_bound++] = b;
	if (getsockname(evhttp_bound_socket_get_fd(b), (struct sockaddr *)&ss, &sl) == 0)
		port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port :
			     ((struct sockaddr_in *)&ss)->sin_port);
	snprintf(host, sizeof(host), l->family == AF_INET6 ? "[%s]" : "%s", l->addr);
	exl_log(EXL_LOG_INFO, "http: listening on %s:%d%s", host, port,
		l->loopback ? "" : h->lp->cfg.http_api_key[0] ? " (remote, API key required)" :
		" (remote, NO API KEY: anyone who reaches it may use the models)");
	return 0;
}

int exl_http_start(struct exl_loop *lp, struct exl_http **out, char *err, size_t errlen)
{
	const struct exl_config *cfg = &lp->cfg;
	struct exl_http *h;

	*out = NULL;
	if (!cfg->n_http)
		return 0;
	h = calloc(1, sizeof(*h));
	if (!h || !(h->eh = evhttp_new(lp->base))) {
		free(h);
		snprintf(err, errlen, "http: out of memory");
		return -1;
	}
	h->lp = lp;
	evhttp_set_max_body_size(h->eh, cfg->max_message);
	evhttp_set_max_headers_size(h->eh, MAX_HEADERS_SIZE);
	evhttp_set_timeout(h->eh, cfg->request_timeout_ms >= 2000 ? cfg->request_timeout_ms / 1000 : 1);
	evhttp_set_allowed_methods(h->eh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
				   EVHTTP_REQ_DELETE | EVHTTP_REQ_PUT | EVHTTP_REQ_OPTIONS);
	evhttp_set_default_content_type(h->eh, "application/json");
	evhttp_set_gencb(h->eh, on_request, h);
	for (int i = 0; i < cfg->n_http; i++) {
		const struct exl_http_listen *l = &cfg->http[i];
		int rc = l->family == AF_UNIX ? bind_unix(h, l, err, errlen) :
			 bind_tcp(h, l, err, errlen);
		if (rc) {
			exl_http_free(h);
			return -1;
		}
	}
	*out = h;
	return 0;
}

void exl_http_stop_listening(struct exl_http *h)
{
	if (!h)
		return;
	for (int i = 0; i < h->n_bound; i++)
		evhttp_del_accept_socket(h->eh, h->bound[i]);
	h->n_bound = 0;
}

struct exl_http_linger {
	struct exl_http_linger *next, *prev;
	struct exl_http *h;
	struct evhttp_connection *evcon;
};

static size_t conn_unwritten(struct evhttp_connection *evcon)
{
	struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);

	return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void linger_free(struct exl_http_linger *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else
		l->h->lingers = l->next;
	if (l->next)
		l->next->prev = l->prev;
	free(l);
}

static void on_linger_close(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	linger_free(arg);
}

void exl_http_linger(struct exl_http *h, struct evhttp_connection *evcon)
{
	if (!conn_unwritten(evcon))
		return;
	struct exl_http_linger *l = calloc(1, sizeof(*l));
	if (!l) {
		/* only a drain right now could lose the end of this answer */
		exl_log(EXL_LOG_WARN, "http: out of memory tracking an answer's last bytes");
		return;
	}
	l->h = h;
	l->evcon = evcon;
	l->next = h->lingers;
	if (h->lingers)
		h->lingers->prev = l;
	h->lingers = l;
	evhttp_connection_set_closecb(evcon, on_linger_close, l);
}

void exl_http_unlinger(struct exl_http *h, struct evhttp_connection *evcon)
{
	for (struct exl_http_linger *l = h->lingers; l; l = l->next) {
		if (l->evcon == evcon) {
			evhttp_connection_set_closecb(evcon, NULL, NULL);
			linger_free(l);
			return;
		}
	}
}

int exl_http_busy(struct exl_http *h)
{
	if (!h)
		return 0;
	int busy = h->n_reqs;
	struct exl_http_linger *next;
	for (struct exl_http_linger *l = h->lingers; l; l = next) {
		next = l->next;
		if (conn_unwritten(l->evcon)) {
			busy++;
		} else {
			evhttp_connection_set_closecb(l->evcon, NULL, NULL);
			linger_free(l);
		}
	}
	return busy;
}

void exl_http_free(struct exl_http *h)
{
	if (!h)
		return;
	/* Frees every connection: each request's close callback ends it. */
	evhttp_free(h->eh);
	while (h->reqs) {
		h->reqs->req = NULL; /* went with its connection */
		h->reqs->evcon = NULL;
		exl_http_req_fail(h->reqs, 0, "", NULL, "the daemon stopped");
	}
	/* each went with its connection (on_linger_close); none is left */
	while (h->lingers)
		linger_free(h->lingers);
	for (int i = 0; i < h->n_unix; i++)
		unlink(h->unix_paths[i]);
	free(h);
}
