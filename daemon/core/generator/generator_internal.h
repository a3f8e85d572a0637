/* A job's insides, shared by generator*.c and engine.c only. */
#ifndef EXL_GENERATOR_INTERNAL_H
#define EXL_GENERATOR_INTERNAL_H

#include <stdatomic.h>

#include "common/clock.h"
#include "daemon/core/generator/generator.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/tokenizer/tokenizer.h"

/* One KV sequence of a job: the conditioned prompt, or CFG's negative one,
 * followed by the generated tokens. */
struct exl_gen_seq {
	struct exl_kv_seq kv;
	int32_t *tokens;
	int n_tokens;
	int cap_tokens;
	int prompt_len;
	int n_had;        /* engine: positions of K/V it had when a suspended job's
			   * pages were reclaimed (for tokens_recomputed) */
};

/* What the generator remembers per generated token, for rewinding and for
 * streaming. */
struct exl_gen_tok {
	size_t text_end;        /* completion text bytes after this token */
	struct exl_detok detok; /* decoder state before this token */
	size_t detok_out;       /* decoder output bytes before this token */
	float mu;               /* mirostat mu before this token */
	size_t heal_done;       /* healing bytes matched before this token */
	size_t released;        /* the release point before this token (beam */
	int released_tokens;    /* search's cursor goes back to it) */
};

/* A token banned at one position by a banned string. */
struct exl_gen_ban {
	int pos;
	int32_t token;
};

struct exl_gen_strings {
	char **s;
	size_t *len;
	int n;
};

struct exl_drafter;

/* Speculative decoding, per job (engine.c, drafter.c). */
struct exl_job_draft {
	int max_tokens;            /* draft_tokens */
	int ngram;                 /* ngram_draft; 0 when off */
	char *model;               /* draft_model, or NULL */
	struct exl_drafter *drafter; /* the engine's, once added; NULL when it went away */
	struct exl_kv_seq kv;      /* the draft model's copy of seq[0], in its own cache */
	int32_t *prop;             /* this step's proposals [max_tokens] */
	int n_prop;
	int want;                  /* drafter: proposals asked of it this step */
	int len;                   /* proposals to ask for next (engine.c, next_len) */
	int idle;                  /* steps without proposals since len fell to 0 */
	int proposed;              /* totals, for the result */
	int accepted;
};

struct exl_beam_search;

enum exl_job_state {
	EXL_JOB_NEW,      /* not in an engine */
	EXL_JOB_QUEUED,   /* waiting for admission */
	EXL_JOB_RUNNING,
	EXL_JOB_ENDING,   /* reason set; the last chunk still to deliver */
	EXL_JOB_DONE,     /* on_done called */
};

struct exl_job {
	const struct exl_tokenizer *tok;
	int n_vocab;
	struct exl_job_callbacks cb;
	void *user;
	enum exl_job_state state;
	atomic_bool cancel;
	atomic_bool paused;

	/* settings */
	bool decode_special;
	bool completion_only;
	bool ignore_eos;
	bool return_probs;
	int return_top_k;
	bool return_logits;
	int max_new_tokens;
	int min_new_tokens;
	float cfg_scale;
	uint64_t seed;
	int32_t *stop_tokens; /* user stop ids */
	int n_stop_tokens;
	const int32_t *eog;   /* the tokenizer's */
	int n_eog;
	struct exl_gen_strings stop;
	struct exl_gen_strings banned;
	struct exl_filter *filter;
	struct exl_lora_set lora; /* its adapters, referenced; n 0 for none */
	uint32_t *filter_mask;
	bool mask_valid;           /* filter_mask holds allowed() for this position */
	int filter_n;              /* generated tokens the filter has accepted */

	struct exl_sampler *sampler;
	struct exl_rng rng;

	/* prompt */
	char *prompt_text;
	size_t prompt_text_len;
	struct exl_kvcache *kv;    /* the engine's, while running */
	struct exl_gen_seq seq[2]; /* [1]: CFG's negative prompt */
	int n_seqs;
	int gen_limit;             /* tokens the context has room for, set by the engine */
	int cached_tokens;

	/* token healing */
	char *heal;                /* the removed token's bytes */
	size_t heal_len;
	size_t heal_skip;          /* leading bytes of heal the prompt text lacks (the space
				    * SentencePiece adds before the first word) */
	size_t heal_done;          /* bytes of heal the output covers so far */
	int32_t *heal_cands;       /* tokens compatible with heal[heal_done..) */
	float *heal_vals;          /* scratch, one per candidate */
	int n_heal_cands;
	size_t heal_cands_at;      /* heal_done the list was built for */

	/* output */
	int32_t *gen;
	struct exl_gen_tok *gt;
	int n_gen;
	int cap_gen;
	struct exl_detok detok;
	size_t detok_out;          /* bytes the decoder produced (heal_skip's included) */
	/* The generated text.  With token healing it starts with the healed
	 * bytes, which the prompt text already shows (text_base of them):
	 * stop and banned strings must see them, but they are never
	 * streamed and the completion starts after them. */
	char *text;
	size_t text_len;
	size_t text_cap;
	size_t text_base;          /* heal_len - heal_skip with healing, else 0 */
	size_t released;           /* text bytes safe to stream (from text_base on) */
	int released_tokens;
	size_t delivered;          /* text bytes handed to on_chunk, at least text_base */
	int delivered_tokens;
	float *probs;              /* [cap_gen] */
	int32_t *top_ids;          /* [cap_gen][return_top_k] */
	float *top_probs;
	float *logit_rows;         /* rows for tokens delivered_tokens.. */
	int n_logit_rows;
	int cap_logit_rows;
	struct exl_gen_ban *bans;
	int n_bans;
	int cap_bans;
	int n_rewinds;
	float *work;               /* n_vocab logits being sampled */
	float *raw;                /* n_vocab: the model's logits, when reporting */

	struct exl_job_draft draft;
	bool hold_output;          /* nothing is streamed: a beam search still running */
	struct exl_beam_search *beam; /* NULL unless num_beams */
	int num_beams;
	double beam_score;         /* the chosen hypothesis' summed log-probability */
	/* input embeddings (generator_embd.c) */
	int n_embd;
	float *embd;               /* every block's rows [n][n_embd], copied */
	int32_t *embd_at;          /* [seq[0].prompt_len]: the row of each prompt position,
				    * -1 for a token; NULL when the job has none */
	bool truncate;
	int truncated;             /* prompt tokens the engine dropped (truncate) */
	/* Fill-in-the-middle (settings.fim): seq[0]'s prefix text runs from
	 * fim_prefix_at to fim_suffix_at (the suffix token), which is all
	 * truncation may take from. */
	int fim_prefix_at, fim_suffix_at;

	/* an embedding job (generator_pool.c) */
	enum exl_pooling pooling;  /* EXL_POOL_NONE: a generation job */
	bool normalize;
	double *pool_acc;          /* [n_embd] the rows pooled so far */
	float *pooled;             /* [n_embd] the result */

	/* the end */
	enum exl_stop_reason reason;
	int32_t stop_token;
	int stop_string;           /* index into stop, or -1 */
	char error[256];
	char *result_text;
	struct exl_gen_result result;

	/* times (CLOCK_MONOTONIC seconds) */
	double t_added;
	double t_started;
	double t_first;
	double t_end;
	double t_paused;           /* engine: first seen paused; 0 while not */
	double t_suspended;        /* engine: when it last gave up its slot */
	double t_rank;             /* engine: its place in the queue (engine.c, enqueue) */
};


/* ---- vocabulary scans (generator_vocab.c) ---- */

/* Tokens whose bytes start with rest[0..n) or are a non-empty prefix of it:
 * the candidates for the next token while healing.  *out is malloc'ed. */
int exl_gen_heal_candidates(const struct exl_tokenizer *tok, int n_vocab, const char *rest,
			    size_t n, int32_t **out, char *err, size_t errlen);
/* 1 when some non-special token's bytes start with text[0..n), else 0. */
int exl_gen_vocab_has_prefix(const struct exl_tokenizer *tok, int n_vocab, const char *text,
			     size_t n);
/* The DRY sequence-breaker bitmap for p's breaker strings, malloc'ed; NULL
 * (and no error) when DRY is off. */
int exl_dry_breaker_mask(const struct exl_tokenizer *tok, int n_vocab,
			 const struct exl_sampler_params *p, uint32_t **out,
			 char *err, size_t errlen);

/* ---- input embeddings and truncation (generator_embd.c) ---- */

/* Checks s's blocks, copies them into job and tokenizes the text prompt p
 * with each alias occurrence as its block's rows: *ids (malloc'ed) gets
 * their ids, a row's id a negative key derived from a hash of its block's
 * contents (so the prefix cache shares a page only between equal blocks),
 * and job->embd_at the row of each position.  Returns the count or -1. */
int exl_gen_embd_prompt(struct exl_job *job, const struct exl_gen_settings *s,
			const struct exl_prompt *p, int32_t **ids, char *err, size_t errlen);
/* Drops the oldest prompt tokens after BOS of every sequence so that the
 * prompt leaves room for max_new_tokens in a context of n_ctx (truncate);
 * sets job->truncated to what seq[0] lost. */
void exl_gen_truncate(struct exl_job *job, int n_ctx);

/* ---- embedding jobs (generator_pool.c) ---- */

/* n final hidden rows of the prompt, the first of them at position pos. */
void exl_gen_pool_rows(struct exl_job *job, const float *rows, int n, int pos);
/* The prompt is read: the pooled vector is made and the job ends. */
void exl_gen_pool_finish(struct exl_job *job);

/* ---- steps, called by the engine (generator_step.c) ---- */

/* Samples the next token from the model's logits for the last position of
 * seq[0] (cond) and seq[1] (neg, CFG only), appends it and updates the
 * stop / ban / release state.  Ends the job (state ENDING) when a stop
 * condition is met or on error. */
void exl_job_advance(struct exl_job *job, const float *cond, const float *neg);
/* Hands released text and tokens to on_chunk.  Returns false when the
 * consumer paused the job. */
bool exl_job_deliver(struct exl_job *job);
/* Sets the end reason (first one wins); the job delivers what is left and
 * then calls on_done (exl_job_complete). */
void exl_job_end(struct exl_job *job, enum exl_stop_reason reason, const char *error);
/* Builds the result and calls on_done.  After this the engine must not
 * touch the job. */
void exl_job_complete(struct exl_job *job);
/* Gives every KV page back (beams' too; the draft sequence is the
 * drafter's: exl_drafter_release). */
void exl_job_release_kv(struct exl_job *job, struct exl_kvcache *kv);

/* ---- the job as a cursor over token sequences (generator_step.c), for
 * beam search: its text, decoder, healing and filter state follow
 * whichever hypothesis it was last set to, through the same accept() a
 * sampled token goes through, so a hypothesis ends (stop token or string,
 * the filter, max_new_tokens) or dies (a banned string) exactly where the
 * same tokens would end or rewind a sampled job. ---- */

/* Back to the state after the first n generated tokens (n <= n_gen): the
 * end reason, bans and the release point are cleared.  -1 with the job
 * failed when the filter cannot replay. */
int exl_job_cursor_truncate(struct exl_job *job, int n);
/* Takes token t as the next one, as sampling it would. */
void exl_job_cursor_accept(struct exl_job *job, int32_t t);
/* Sets the job to the n tokens toks (truncating to the common prefix,
 * then accepting the rest).  -1 when the job failed or a token ended or
 * rewound it. */
int exl_job_cursor_set(struct exl_job *job, const int32_t *toks, int n);
/* Copies the model's logits row for the cursor's next token (CFG mixed
 * when neg) into job->work with every mask applied.  1 when the masks end
 * the job here (the filter), -1 on error (the job failed), else 0. */
int exl_job_cursor_masked(struct exl_job *job, const float *cond, const float *neg);
/* release() of the cursor's current state, for the final hypothesis. */
void exl_job_cursor_release(struct exl_job *job);

/* ---- beam search (generator_beam.c) ---- */

int exl_beam_create(struct exl_job *job, int width, float length_penalty, char *err,
		    size_t errlen);
void exl_beam_free(struct exl_beam_search *b);
/* Gives every beam's pages back. */
void exl_beam_release_kv(struct exl_beam_search *b, struct exl_kvcache *kv);
/* Whether the search has its beams (the prompt is in and a step ran). */
bool exl_beam_started(const struct exl_job *job);
int exl_beam_n_live(const struct exl_job *job);
/* The KV sequence of live beam i, and the token it feeds next. */
struct exl_kv_seq *exl_beam_kv(struct exl_job *job, int i, int32_t *next);
/* The KV sequences a beam search holds besides seq[0]: live beam i's, NULL
 * for i >= n_live (or without beams); and its width (0 without beams). */
const struct exl_kv_seq *exl_beam_live_kv(const struct exl_job *job, int i);
int exl_beam_width(const struct exl_job *job);
/* Sets the row of live beam i's logits in this step's pass. */
void exl_beam_set_row(struct exl_job *job, int i, int row);
/* The step after a forward pass: seq[0]'s prompt row (first step) or each
 * beam's row of logits (n_vocab floats apart from base) become the new
 * beams or finished hypotheses.  KV forks and releases in kv.  When the
 * search is over the job holds the best hypothesis and ends. */
void exl_beam_step(struct exl_job *job, struct exl_kvcache *kv, const float *logits,
		   int n_vocab, int row0);
/* Pages the job may still take: its bound at admission less what its
 * sequences hold now (scratch: n_pages zeroed int32, left zeroed). */
int64_t exl_beam_outstanding(const struct exl_job *job, const struct exl_kvcache *kv,
			     int gen_limit, int32_t *scratch);
/* Pages a job of g new tokens with width beams may take, nothing shared. */
int64_t exl_beam_pages(const struct exl_job *job, int g, int page_size);
/* generator_lora.c: the job's adapters.  attach checks and references
 * set's adapters (NULL: none) for model m; bind_seqs points every
 * sequence's KV at them (the prefix cache's key); detach drops the
 * references. */
int exl_job_lora_attach(struct exl_job *job, const struct exl_model *m,
			const struct exl_lora_set *set, char *err, size_t errlen);
void exl_job_lora_bind_seqs(struct exl_job *job);
void exl_job_lora_detach(struct exl_job *job);

#endif
