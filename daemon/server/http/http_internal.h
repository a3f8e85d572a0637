/* What the HTTP front's files share: the front (http_server.c: listeners,
 * routing, the answers that need no model run) and one request that runs
 * jobs or preparations (http_gen.c).  Loop thread only.
 */
#ifndef EXL_HTTP_INTERNAL_H
#define EXL_HTTP_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/server/http/http.h"
#include "daemon/server/http/http_map.h"
#include "daemon/server/http/json_out.h"
#include "daemon/server/http/reasoning.h"
#include "daemon/server/http/tool_calls.h"
#include "daemon/server/wire/config.h"

struct evhttp;
struct evhttp_request;
struct evhttp_connection;
struct evhttp_bound_socket;
struct event;
struct exl_json_doc;
struct exl_model;
struct exl_model_entry;
struct exl_sink;
struct exl_uid_stats;
struct exl_prep;

/* Which error shape a reply takes. */
enum exl_http_style { EXL_HTTP_STYLE_OPENAI, EXL_HTTP_STYLE_OLLAMA };

/* What a request that outlives its callback does. */
enum exl_http_kind {
	EXL_HTTP_KIND_GENERATE,       /* g.api says which */
	EXL_HTTP_KIND_TOKENIZE,
	EXL_HTTP_KIND_DETOKENIZE,
	EXL_HTTP_KIND_EMBED,          /* r->emb (http_embed.c) */
};

/* Which embeddings endpoint. */
enum exl_http_embed_api {
	EXL_HTTP_OAI_EMBEDDINGS,      /* POST /v1/embeddings */
	EXL_HTTP_OLLAMA_EMBED,        /* POST /api/embed */
	EXL_HTTP_OLLAMA_EMBEDDINGS,   /* POST /api/embeddings (Ollama's older one) */
};
struct exl_http_embed;

struct exl_http {
	struct exl_loop *lp;
	struct evhttp *eh;
	struct evhttp_bound_socket *bound[EXL_CONFIG_MAX_HTTP];
	int n_bound;
	char unix_paths[EXL_CONFIG_MAX_HTTP][108]; /* unlinked at exit */
	int n_unix;
	struct exl_http_req *reqs;       /* requests being answered */
	int n_reqs;
	struct exl_http_linger *lingers; /* answered, the answer's end still in the socket's buffer */
	uint64_t next_id;                /* "chatcmpl-N" */
};

/* One choice (prompt i, sample j) of a generate request: one job. */
struct exl_http_choice {
	uint64_t job;                    /* its job id, once accepted */
	bool launched, accepted, done;
	bool role_sent;                  /* chat stream: the first delta had the role */
	int prompt_tokens, new_tokens, cached_tokens;
	char *result;                    /* not streaming: the choice's JSON, made at its end */
	size_t result_len;
	/* streaming with tools: the reply so far, and how much of it went
	 * out as content (the rest may be a call, held to the end) */
	char *text;
	size_t text_len, text_cap, text_sent;
	size_t reason_sent;              /* the end of the reasoning sent, in text */
	size_t content_at;               /* where the content starts, once known (else 0) */
	bool call_held;                  /* a call started: the rest waits for the end */
};

struct exl_http_req {
	struct exl_http_req *next, *prev; /* the front's list */
	struct exl_http *h;
	uint64_t id;
	struct evhttp_request *req;      /* NULL once the client is gone */
	struct evhttp_connection *evcon;
	struct event *closed_ev;         /* the client hung up (EV_CLOSED) */
	struct exl_sink *sink;           /* ours: sink->http is this request */
	enum exl_http_kind kind;
	enum exl_http_style style;
	uid_t uid;
	struct exl_uid_stats *uidst;
	bool blocked;                    /* waits for room in the prep pool */
	int n_pooled;                    /* its preparations in the pool */
	uint64_t created;                /* unix seconds */
	uint64_t start_ns;

	/* the request */
	struct exl_json_doc *doc;        /* the body, until every job is launched */
	void *zone;                      /* msgpack_zone of g (and tok, detok) */
	struct exl_http_gen g;
	struct exl_http_tokenize tok;
	struct exl_http_detokenize detok;
	struct exl_http_embed *emb;      /* EXL_HTTP_KIND_EMBED */
	char model[129];                 /* the model's name */
	const struct exl_model *model_p; /* valid while a job or preparation holds it */
	struct exl_model_entry *entry;
	char *chat_prompt;               /* the rendered conversation (malloc'ed) */
	size_t chat_prompt_len;
	/* tools: the replies are read for calls in the template's form; a
	 * forced call (tool_choice required or named) is this JSON schema
	 * after the form's opening, which ends the prompt */
	bool tools_on, tools_forced;
	/* the replies' reasoning block (<think> or [THINK], as the
	 * template writes it, or harmony's analysis messages) apart from
	 * their content; the prompt opened it (reasoning.h).  Shown as
	 * reasoning_content / thinking when asked for: harmony's is split
	 * off always (its markers are never content), shown or not. */
	bool reasoning_on, reasoning_open, reasoning_show;
	enum exl_reasoning_tags reasoning_tags;
	enum exl_tool_fmt tool_fmt;
	char *tool_schema;               /* malloc'ed */

	/* the answer */
	int n_choices;
	int n_launched, n_done;
	struct exl_http_choice choices[EXL_HTTP_MAX_CHOICES];
	bool started;                    /* streaming: the status line and headers are out */
	uint64_t buffered;               /* bytes in the connection's output at the last look */
	struct exl_jw w;                 /* scratch for events */
};

/* A connection whose request ended with output evhttp has not written
 * yet.  The drain waits for it: freeing evhttp drops what it buffers. */
void exl_http_linger(struct exl_http *h, struct evhttp_connection *evcon);
void exl_http_unlinger(struct exl_http *h, struct evhttp_connection *evcon);

/* Replies with an error in the request's style and ends it.  status is
 * the HTTP status; param may be NULL.  Frees nothing of r: the caller
 * ends r (exl_http_req_end). */
void exl_http_send_error(struct evhttp_request *req, enum exl_http_style style, int status,
			 const char *code, const char *param, const char *msg);
/* Sends body (JSON) with status and ends the exchange. */
void exl_http_send_json(struct evhttp_request *req, int status, const char *body, size_t len);
/* The HTTP status and OpenAI error code of an exld error code. */
int exl_http_status_of(int code, const char **type);

/* http_gen.c: POST endpoints that run on a model.  Takes the parsed body
 * (the request's from here on); answers, or keeps the request. */
void exl_http_start_generate(struct exl_http *h, struct evhttp_request *req,
			     enum exl_http_api api, struct exl_json_doc *doc, uid_t uid);
void exl_http_start_tokenize(struct exl_http *h, struct evhttp_request *req, bool detok,
			     struct exl_json_doc *doc, uid_t uid);
/* Ends r: replies with the error when the client is still there (as the
 * stream's last event once it started; status 0 is 500), cancels its
 * jobs, frees it. */
void exl_http_req_fail(struct exl_http_req *r, int status, const char *code, const char *param,
		       const char *msg);

/* The conversation g as the model's chat template renders it (ChatML for
 * a model without one); *out malloc'ed.  0, or -1 with a message. */
int exl_http_render_chat(const struct exl_model *m, const struct exl_http_gen *g, char **out,
			 size_t *out_len, char *err, size_t errlen);

/* http_gen.c, for http_embed.c: a request's start and end, the model it
 * names (NULL: the only one; failing r when none), a failure by exld
 * code, and a preparation's end (false when r ended). */
struct exl_http_req *exl_http_req_new(struct exl_http *h, struct evhttp_request *req,
				      enum exl_http_kind kind, enum exl_http_style style, uid_t uid);
void exl_http_req_end(struct exl_http_req *r);
struct exl_model_entry *exl_http_pick(struct exl_http_req *r, const char *name);
/* r's model at launch; NULL with r failed when it is gone or was reloaded
 * since r was prepared. */
struct exl_model_entry *exl_http_pick_loaded(struct exl_http_req *r);
void exl_http_fail_code(struct exl_http_req *r, int code, const char *msg);
bool exl_http_prep_finish(struct exl_http *h, struct exl_prep *p);
/* Makes p (prepared for r on ent) a job of r's sink within the uid's
 * max_jobs, to run here (cheap, and none of r's in the pool) or in the
 * prep pool: EXL_HTTP_PLACE_HERE or _POOLED with the job in *job, whose
 * stream settings the caller sets before running or submitting p.  No
 * room in the pool: _BLOCKED, r->blocked set, to be launched again on
 * room; a failure: _FAILED, r failed.  p is freed unless placed. */
enum {
	EXL_HTTP_PLACE_FAILED = -1,
	EXL_HTTP_PLACE_BLOCKED,
	EXL_HTTP_PLACE_POOLED,
	EXL_HTTP_PLACE_HERE,
};
struct exl_srv_job;
int exl_http_place(struct exl_http_req *r, struct exl_model_entry *ent, struct exl_prep *p,
		   int max_jobs, struct exl_srv_job **job);

/* http_embed.c: the embeddings endpoints. */
void exl_http_start_embed(struct exl_http *h, struct evhttp_request *req,
			  enum exl_http_embed_api api, struct exl_json_doc *doc, uid_t uid);
/* Launches the texts not yet launched, while the pool has room. */
void exl_http_embed_launch(struct exl_http_req *r);
/* An "embed" message for text k; false when r ended. */
bool exl_http_embed_message(struct exl_http_req *r, const msgpack_object *m, int64_t k);
void exl_http_embed_free(struct exl_http_req *r);

/* http_reply.c: OpenAI and Ollama objects from a job's messages. */
struct exl_http_tokinfo {
	const int32_t *ids;
	int n;
	const float *probs;              /* NULL when not asked */
	const int32_t *top_ids;          /* [n][k] */
	const float *top_probs;
	int k;
};
/* "stop" or "length" for an exld stop reason. */
const char *exl_http_finish_reason(const char *stop_reason);
/* OpenAI's logprobs object for tokens (the chat shape, or the legacy
 * completions shape) into w; tok_text gives a token's bytes. */
void exl_http_write_logprobs(struct exl_jw *w, bool chat, const struct exl_http_tokinfo *t,
			     const struct exl_model *m);
/* RFC 3339 UTC now, with nanoseconds (Ollama's created_at). */
void exl_http_now_rfc3339(char *buf, size_t len);

#endif
