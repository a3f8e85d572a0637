/* libexlclient: the client library of exld.
 *
 * One struct exl_client is one connection to the daemon.  It says hello on
 * connect and, unless asked not to, maps the connection's shared-memory
 * ring read-only, so streamed tokens are read without a syscall.
 *
 * Errors: every call that can fail returns an int status: 0 (EXL_OK) on
 * success, else one of the daemon's codes (enum exl_code in exl_wire.h:
 * EXL_E_BAD_REQUEST ... EXL_E_LOAD_FAILED) or a local one (EXL_E_IO ...
 * below).  exl_errmsg() gives the message of the last failure on that
 * connection.  The library never aborts or exits and keeps no global
 * state; it does not install signal handlers (writes use MSG_NOSIGNAL).
 *
 * Threads: a connection is not thread-safe.  Use each struct exl_client
 * from one thread at a time (or guard it with your own lock); different
 * connections are independent and may be used from different threads.
 *
 * Memory: strings and arrays a call returns are malloc'ed and the caller
 * frees them (free(), or exl_result_free() for results); data an event
 * points to belongs to the connection and stays valid until the next
 * exl_next(), exl_generate(), exl_generate_many() or exl_close() on it.
 *
 * Streaming and blocking calls mix on one connection: events of jobs from
 * exl_submit() that arrive while exl_generate() waits for its own are kept
 * and handed out by the next exl_next() calls, in order.
 *
 * Versions: EXLCLIENT_VERSION_* below are the header's, exl_version() the
 * library's.  Until 1.0 the ABI (struct layouts, signatures) may change
 * with the minor version, so a program is rebuilt against each new minor
 * version; the soname is libexlclient.so.0 throughout 0.x.  From 1.0 on,
 * the soname changes whenever the ABI does.
 */
#ifndef EXLCLIENT_H
#define EXLCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exl_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define EXL_CLIENT_API __attribute__((visibility("default")))
#else
#define EXL_CLIENT_API
#endif

/* The library's own version, which moves with its ABI (not exld's).
 * 0.2: struct exl_event ends with the logits of return_logits;
 * exl_server_feature() and EXL_E_UNSUPPORTED.
 * 0.3: exl_chat_template_ex().
 * 0.4: speculative decoding and beam search: fields at the end of struct
 * exl_gen_params, struct exl_result and struct exl_model_status.
 * 0.5: exl_embed(); truncate, truncated_tokens and input embeddings
 * (fields at the ends of struct exl_gen_params and struct exl_result).
 * 0.6: struct exl_gen_params ends with the job's LoRA adapters (lora_names,
 * lora_scales, n_loras).
 * 0.7: struct exl_model_status ends with the local KV pool (kv_local_pages,
 * kv_local_pages_free, kv_local_bytes).
 * 0.8: struct exl_gen_params ends with suffix (fill-in-the-middle). */
#define EXLCLIENT_VERSION_MAJOR 0
#define EXLCLIENT_VERSION_MINOR 8
#define EXLCLIENT_VERSION_PATCH 0
#define EXLCLIENT_VERSION_STRING "0.8.0"

/* The library's version, "MAJOR.MINOR.PATCH". */
EXL_CLIENT_API const char *exl_version(void);

/* Local status codes (the daemon's are 1..99). */
enum exl_local_code {
	EXL_E_IO = 100,        /* a socket or memory-mapping call failed */
	EXL_E_CLOSED = 101,    /* the daemon closed the connection */
	EXL_E_PROTOCOL = 102,  /* the daemon sent something this library cannot read */
	EXL_E_TIMEOUT = 103,   /* nothing arrived in time (exl_next: no event yet) */
	EXL_E_NOMEM = 104,
	EXL_E_INVALID = 105,   /* a bad argument */
	EXL_E_NO_RING = 106,   /* ring streaming asked for on a connection without a ring */
	EXL_E_UNSUPPORTED = 107, /* an option of a feature the daemon's hello does not list
				  * (an older exld); nothing was sent */
};

/* The name of a status code: "bad_request", "io", "timeout" ... */
EXL_CLIENT_API const char *exl_status_name(int status);

/* ---- connection ---- */

struct exl_client;

struct exl_connect_opts {
	const char *client_name;  /* sent in hello (default "libexlclient") */
	bool no_ring;             /* no shared memory: stream over the socket */
	uint32_t ring_size;       /* data ring bytes (0: the daemon's default) */
	int timeout_ms;           /* waiting for a reply (default -1: forever) */
};

/* Connects to path (NULL: $EXLD_SOCKET, else /run/exld/exld.sock) and says
 * hello.  On failure *out is NULL and err holds the message. */
EXL_CLIENT_API int exl_connect(struct exl_client **out, const char *path, const struct exl_connect_opts *opts,
		char *err, size_t errlen);
EXL_CLIENT_API void exl_close(struct exl_client *c);

/* The message of the last failed call on c ("" when none). */
EXL_CLIENT_API const char *exl_errmsg(const struct exl_client *c);

struct exl_server_info {
	uint32_t version;         /* protocol version */
	char server[64];          /* "exld 0.1.0" */
	uint32_t max_message;
	uint32_t uid;             /* this process's uid, as the daemon saw it */
	int32_t pid;
	bool ring;
	uint32_t ring_size;
	uint32_t max_record;
};

EXL_CLIENT_API const struct exl_server_info *exl_server_info(const struct exl_client *c);

/* Whether the daemon's hello listed the optional feature name
 * (EXL_FEAT_* in exl_wire.h: "grammar", "dry", ...).  A daemon from
 * before the list has none.  exl_submit() and exl_generate() refuse an
 * option of a feature not listed with EXL_E_UNSUPPORTED, sending nothing:
 * the daemon would ignore the key and run the job without it. */
EXL_CLIENT_API bool exl_server_feature(const struct exl_client *c, const char *name);

/* A descriptor for event loops: poll it for POLLIN and call exl_next(c,
 * &ev, 0) when it is readable.  exl_next() with timeout 0 that finds
 * nothing arms it (the daemon then sends a wake message with the next
 * record). */
EXL_CLIENT_API int exl_fd(const struct exl_client *c);

/* ---- models and the daemon ---- */

struct exl_model_info {
	char name[EXL_MAX_NAME + 1];
	char state[16];           /* available, loading, loaded, unloading */
	uint64_t size;            /* file bytes */
	char arch[32];            /* loaded models: "llama", "qwen2" */
	int n_vocab;
	int n_ctx_train;
	int jobs;
	uint64_t weight_bytes;    /* loaded models: bytes of weights in memory */
};

/* Every model in the daemon's directory and every loaded one; *list is
 * malloc'ed (free() it). */
EXL_CLIENT_API int exl_models(struct exl_client *c, struct exl_model_info **list, size_t *n);

/* Admin only.  progress (may be NULL) is called with bytes read so far. */
EXL_CLIENT_API int exl_load(struct exl_client *c, const char *name,
	     void (*progress)(uint64_t done, uint64_t total, void *user), void *user);
/* Admin only.  cancel: end the model's jobs (reason unloaded) instead of
 * letting them finish.  Returns once the model is gone. */
EXL_CLIENT_API int exl_unload(struct exl_client *c, const char *name, bool cancel);

struct exl_model_status {
	char name[EXL_MAX_NAME + 1];
	char state[16];
	int jobs_running, jobs_paused, jobs_queued;
	uint64_t tokens_generated;
	double tok_s;
	int kv_pages_free, kv_pages;
	/* Where the model lives and what it holds there (docs/protocol.md,
	 * status).  cuda: weights, KV pool and other buffers are VRAM, and
	 * device_free / device_total the GPU's memory; cpu: weight_bytes are
	 * the mapped file's pages, the buffers RAM, device_* 0. */
	char device[16];          /* "cpu", "cuda:0" */
	uint64_t weight_bytes;
	uint64_t kv_bytes;        /* the KV pool (part of buffer_bytes) */
	uint64_t buffer_bytes;    /* every buffer: KV pool, activations */
	uint64_t device_free;
	uint64_t device_total;
	int jobs_suspended;       /* of jobs_paused: gave their KV pages back */
	uint64_t tokens_prompt;   /* prompt tokens computed (cached prefixes not counted) */
	uint64_t steps;           /* forward passes: tokens / steps is the batching */
	uint64_t draft_proposed;  /* 0.4: speculative decoding's proposals, */
	uint64_t draft_accepted;  /* and of them taken as the model's own */
	/* 0.7: the local KV pool of a model that mixes sliding-window and
	 * global layers (the window's pages of each sequence); 0 and 0
	 * without one */
	int kv_local_pages_free, kv_local_pages;
	uint64_t kv_local_bytes;  /* of kv_bytes, the local pool's */
	/* of weight_bytes, the weights the backend copied at load into a
	 * layout its kernels read faster (cpu: RAM, and their file pages given
	 * back) */
	uint64_t repacked_bytes;
};

struct exl_daemon_status {
	char version[32];
	int32_t pid;
	double uptime;            /* seconds */
	int connections;
	int jobs;
	double tok_s;
	bool draining;
	uint32_t uid;             /* the caller's uid and its limits */
	int uid_jobs, uid_max_jobs, max_new_tokens;
	struct exl_model_status *models; /* malloc'ed: free(st->models) */
	size_t n_models;
	uint64_t rss_bytes;       /* the daemon's resident memory */
};

EXL_CLIENT_API int exl_status(struct exl_client *c, struct exl_daemon_status *st);

/* The chat template (the GGUF's tokenizer.chat_template) of a loaded model
 * (NULL: the only loaded one).  *tmpl is malloc'ed, or NULL when the model
 * has none; EXL_E_UNKNOWN_MODEL when no such model is loaded. */
EXL_CLIENT_API int exl_chat_template(struct exl_client *c, const char *model, char **tmpl);
/* The same with the model's BOS and EOS tokens as text (the template's
 * bos_token and eos_token; each malloc'ed, or NULL when the model has none
 * or the daemon does not send them); bos_token / eos_token may be NULL. */
EXL_CLIENT_API int exl_chat_template_ex(struct exl_client *c, const char *model, char **tmpl,
					char **bos_token, char **eos_token);

/* Embeddings (0.5): the final hidden state of each text's prompt (after
 * the output norm), pooled.  Every field is optional. */
struct exl_embed_params {
	const char *model;                /* NULL: the only loaded model */
	const char *pooling;              /* "mean", "last", "cls"; NULL: the model's
					   * pooling_type, else mean */
	bool normalize;                   /* scale each vector to unit L2 norm */
	bool truncate;                    /* keep a too long text's last tokens */
};

struct exl_embedding {
	float *values;                    /* [n_embd], malloc'ed */
	size_t n_embd;
	int n_tokens;                     /* tokens of the text (BOS included) */
	int truncated_tokens;
};

EXL_CLIENT_API void exl_embed_params_init(struct exl_embed_params *p);
/* Blocking: the embeddings of texts[0..n) into out[0..n), one embed request
 * per text, all sent at once so the daemon batches them.  On an error
 * (the first text refused, in order of the replies) nothing is left in
 * out.  p NULL: the defaults. */
EXL_CLIENT_API int exl_embed(struct exl_client *c, const struct exl_embed_params *p,
			     const char *const *texts, size_t n, struct exl_embedding *out);
EXL_CLIENT_API void exl_embeddings_free(struct exl_embedding *e, size_t n);

/* model NULL: the only loaded model.  add_bos -1: the model's default. */
EXL_CLIENT_API int exl_tokenize(struct exl_client *c, const char *model, const char *text, size_t len,
		 int add_bos, bool special, int32_t **ids, size_t *n);
EXL_CLIENT_API int exl_detokenize(struct exl_client *c, const char *model, const int32_t *ids, size_t n,
		   bool special, char **text);
/* The same with strip_leading_space chosen (exl_detokenize: true, dropping
 * the space SentencePiece puts before the first word); false gives a token's
 * own text, " there" rather than "there". */
EXL_CLIENT_API int exl_detokenize_ex(struct exl_client *c, const char *model, const int32_t *ids,
		      size_t n, bool special, bool strip_leading_space, char **text);

/* ---- generation ---- */

#define EXL_UNSET_INT (-2147483647 - 1)

enum exl_stream_mode {
	EXL_STREAM_MODE_AUTO = 0,    /* the ring when the connection has one, else the socket */
	EXL_STREAM_MODE_RING,
	EXL_STREAM_MODE_SOCKET,
	EXL_STREAM_MODE_NONE,    /* nothing until the result */
};

/* One block of input embeddings: n_floats = rows * the model's n_embd
 * (little-endian float32, as the wire carries them). */
struct exl_input_embedding {
	const char *alias;
	const float *rows;
	size_t n_floats;
};

/* Every option of a job.  exl_gen_params_init() leaves every field unset
 * (NAN, EXL_UNSET_INT, -1 for tri-state bools, NULL): the daemon's default
 * applies.  docs/protocol.md has each option's meaning and default. */
struct exl_gen_params {
	const char *model;                /* NULL: the only loaded model */
	const int32_t *prompt_ids;        /* instead of a text prompt */
	size_t n_prompt_ids;
	const char *negative_prompt;      /* CFG */
	const int32_t *negative_prompt_ids;
	size_t n_negative_prompt_ids;
	float cfg_scale;

	int add_bos, encode_special, decode_special, completion_only, token_healing; /* -1/0/1 */
	int max_new_tokens, min_new_tokens;
	bool has_seed;
	uint64_t seed;

	float temperature;
	int temperature_last;             /* -1/0/1 */
	int top_k;
	float top_p, min_p, typical, tfs, top_a;
	float repetition_penalty;
	int penalty_range, penalty_decay;
	float frequency_penalty, presence_penalty;
	int no_repeat_ngram;
	const int32_t *bias_ids;          /* token_bias: n_bias pairs */
	const float *bias_values;
	size_t n_bias;
	int mirostat;
	float mirostat_tau, mirostat_eta;
	float dry_multiplier, dry_base;
	int dry_allowed_length, dry_range;
	const char *const *dry_sequence_breakers;
	size_t n_dry_sequence_breakers;
	float xtc_probability, xtc_threshold;

	const char *const *stop_strings;
	size_t n_stop_strings;
	const int32_t *stop_tokens;
	size_t n_stop_tokens;
	int ignore_eos;                   /* -1/0/1 */
	const char *const *banned_strings;
	size_t n_banned_strings;

	const char *grammar;              /* at most one of the three */
	const char *json_schema;
	const char *regex;
	int filter_prefer_eos;            /* -1/0/1 */

	int return_probs;                 /* -1/0/1 */
	int return_top_k;
	int return_logits;                /* -1/0/1: each step's logits in the TOKENS events
					   * (exl_event.logits); socket streams only, so
					   * EXL_STREAM_MODE_AUTO streams this job over the
					   * socket */
	int return_text;                  /* -1/0/1 */
	enum exl_stream_mode stream;

	/* 0.4: speculative decoding (the same output, faster when proposals
	 * are accepted) and beam search (the output comes whole at the end). */
	const char *draft_model;          /* a loaded model with the same vocabulary */
	int ngram_draft;                  /* propose from the job's own tokens (N..1-grams) */
	int draft_tokens;                 /* proposals per step */
	int num_beams;                    /* 0: off */
	float length_penalty;
	int truncate;                     /* -1/0/1: cut an over-long prompt (0.5) */
	/* Input embeddings (0.5): where a block's alias occurs in the text
	 * prompt, its rows replace token embeddings (docs/protocol.md). */
	const struct exl_input_embedding *embeddings;
	size_t n_embeddings;

	/* 0.6: LoRA adapters the job applies (loaded with exl_load() by their file
	 * name, for the job's model): n_loras names and their scales (NULL:
	 * all 1).  At most EXL_MAX_LORAS. */
	const char *const *lora_names;
	const float *lora_scales;
	size_t n_loras;

	/* 0.8: fill-in-the-middle: the text prompt is the code before the gap,
	 * suffix the code after it ("" for the end of a file); the model's
	 * FIM tokens frame them.  NULL: an ordinary prompt. */
	const char *suffix;
};

EXL_CLIENT_API void exl_gen_params_init(struct exl_gen_params *p);

/* A finished job.  Strings and arrays are malloc'ed; exl_result_free(). */
struct exl_result {
	uint64_t job;
	char stop_reason[24];             /* EXL_REASON_* */
	int32_t stop_token;               /* -1 unless stop_token */
	char *stop_string;                /* NULL unless stop_string */
	int prompt_tokens, new_tokens, cached_tokens;
	uint64_t seed;
	double time_queued, time_to_first, time_total;
	char *text;                       /* NUL-terminated */
	size_t text_len;
	int32_t *ids;                     /* the generated ids */
	size_t n_ids;
	float *probs;                     /* [n_ids] with return_probs, else NULL */
	int error_code;                   /* stop_reason "error": a code and a message */
	char *error;
	/* 0.4 */
	int draft_proposed;               /* speculative decoding: tokens proposed, */
	int draft_accepted;               /* and of them taken as the model's own */
	int num_beams;                    /* beam search: the width, else 0 */
	double beam_score;                /* its summed log-probability */
	int truncated_tokens;             /* prompt tokens truncate dropped (0.5) */
};

EXL_CLIENT_API void exl_result_free(struct exl_result *r);

/* Blocking: runs one job and fills *out with its whole output (text and
 * ids are the completion, gathered from the stream). */
EXL_CLIENT_API int exl_generate(struct exl_client *c, const struct exl_gen_params *p, const char *prompt,
		 struct exl_result *out);
/* Blocking: runs one job per prompt, all at once (the daemon batches them),
 * and fills out[0..n).  Returns the first failure; results of jobs that ran
 * are filled either way.  When reading fails (timeout, closed connection),
 * the jobs still running are cancelled. */
EXL_CLIENT_API int exl_generate_many(struct exl_client *c, const struct exl_gen_params *p,
		      const char *const *prompts, size_t n, struct exl_result *out);

/* Streaming: queues a job (prompt may be NULL with p->prompt_ids) and
 * returns its id at once; its events come from exl_next(). */
EXL_CLIENT_API int exl_submit(struct exl_client *c, const struct exl_gen_params *p, const char *prompt,
	       uint64_t *job);

enum exl_event_type {
	EXL_EVENT_TOKENS = 1,  /* new tokens and text of a job */
	EXL_EVENT_DONE = 2,    /* a job ended; result set */
};

struct exl_event {
	enum exl_event_type type;
	uint64_t job;
	/* TOKENS */
	const int32_t *ids;
	size_t n_ids;
	const float *probs;               /* [n_ids] or NULL */
	int n_top;                        /* candidates per token */
	const int32_t *top_ids;           /* [n_ids][n_top] */
	const float *top_probs;
	const char *text;                 /* UTF-8, not NUL-terminated */
	size_t text_len;
	uint32_t t_us;                    /* the daemon's CLOCK_MONOTONIC when it made the
					   * chunk, microseconds, low 32 bits */
	/* DONE */
	const struct exl_result *result;
	/* TOKENS of a job with return_logits (since 0.2; fields are only ever
	 * added at the end): n_ids rows of n_vocab floats, row i the logits
	 * that chose ids[i] (the model's, after CFG; before bias, penalties
	 * and sampling).  NULL and 0 otherwise.  Like text, valid until the
	 * next exl_next().  exl_generate() does not gather them. */
	const float *logits;              /* [n_ids][n_vocab] */
	size_t n_vocab;
};

/* The next event of any job on c: waits up to timeout_ms (-1: forever,
 * 0: not at all).  EXL_E_TIMEOUT when nothing came. */
EXL_CLIENT_API int exl_next(struct exl_client *c, struct exl_event *ev, int timeout_ms);

/* Ends a job (its DONE event still comes, reason cancelled). */
EXL_CLIENT_API int exl_cancel(struct exl_client *c, uint64_t job);

#ifdef __cplusplus
}
#endif

#endif
