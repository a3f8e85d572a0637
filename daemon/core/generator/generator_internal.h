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
/* Gives every KV page back. */
void exl_job_release_kv(struct exl_job *job, struct exl_kvcache *kv);

/* generator_lora.c: the job's adapters.  attach checks and references
 * set's adapters (NULL: none) for model m; bind_seqs points every
 * sequence's KV at them (the prefix cache's key); detach drops the
 * references. */
int exl_job_lora_attach(struct exl_job *job, const struct exl_model *m,
			const struct exl_lora_set *set, char *err, size_t errlen);
void exl_job_lora_bind_seqs(struct exl_job *job);
void exl_job_lora_detach(struct exl_job *job);

#endif
