/* One generation job: its settings, prompt, KV sequences, random stream,
 * stop / token healing / banned string / filter / CFG state, the text it
 * streams and the result it ends with.
 *
 * A job is created by its owner (any thread: creation only reads the
 * model's tokenizer and hyperparameters, which are immutable after load),
 * handed to an engine (daemon/core/generator/engine.h) which runs it on the engine thread,
 * and reports through two callbacks, both called on the engine thread:
 *
 *   on_chunk  for every step that has something new to stream;
 *   on_done   exactly once, at the end, whatever the reason.
 *
 * After on_done returns the engine never touches the job again, so the
 * owner may exl_job_free() it inside on_done or later.  A job never added
 * to an engine is simply freed.
 *
 * Text handling: the streamed text is UTF-8 complete.  Text that could be
 * the start of a stop string or a banned string is held back until it is
 * known not to be; a stop string and anything after it are never streamed;
 * a banned string makes the job rewind and resample, so it is never
 * streamed either.  Concatenating every chunk's text gives the completion;
 * concatenating every chunk's token ids gives every generated token
 * (including a stop token and the tokens that spelled a stop string, which
 * come in the last chunk without text).
 */
#ifndef EXL_GENERATOR_H
#define EXL_GENERATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/core/grammar/filter.h"
#include "daemon/core/model/model.h"
#include "daemon/core/sampler/sampler.h"

struct exl_model;
struct exl_job;
struct exl_lora_set;

enum exl_stop_reason {
	EXL_STOP_NONE = 0,       /* still running */
	EXL_STOP_TOKEN,          /* "stop_token": an EOG id or a stop token */
	EXL_STOP_STRING,         /* "stop_string" */
	EXL_STOP_MAX_NEW_TOKENS, /* "max_new_tokens" */
	EXL_STOP_MAX_CONTEXT,    /* "max_context": the model's context is full */
	EXL_STOP_END_FILTER,     /* "end_filter": the filter is complete */
	EXL_STOP_CANCELLED,      /* "cancelled": exl_job_cancel() */
	EXL_STOP_UNLOADED,       /* "unloaded": the model went away */
	EXL_STOP_SHUTDOWN,       /* "shutdown": the daemon is stopping */
	EXL_STOP_ERROR,          /* "error": see exl_result.error */
};

/* The wire name in quotes above; "unknown" for an out of range value. */
const char *exl_stop_reason_name(enum exl_stop_reason r);

/* Bounds on what one job may ask for (the wire layer checks these too). */
#define EXL_GEN_MAX_STOP_STRINGS 64
#define EXL_GEN_MAX_STOP_TOKENS 256
#define EXL_GEN_MAX_BANNED 256
#define EXL_GEN_MAX_STRING_LEN 1024 /* bytes of one stop / banned string */
#define EXL_GEN_MAX_BIAS 4096
#define EXL_GEN_MAX_TOP_PROBS 64
#define EXL_GEN_MAX_DRAFT_TOKENS 16
#define EXL_GEN_MAX_NGRAM_DRAFT 16
#define EXL_GEN_MAX_BEAMS 16
#define EXL_GEN_MAX_DRAFT_NAME 128 /* bytes of a draft model's name */
#define EXL_GEN_MAX_EMBD_BLOCKS 64
#define EXL_GEN_MAX_ALIAS_LEN 256   /* bytes of an input embedding block's alias */
#define EXL_GEN_MAX_EMBD_ROWS 65536 /* rows of all of a job's blocks together */

/* Input embeddings, as exllamav2 takes them: wherever alias occurs in a
 * text prompt, the block's n_rows rows take the place of token embeddings
 * (docs/protocol.md, "Input embeddings"). */
struct exl_embd_block {
	const char *alias;    /* NUL-terminated, 1 to EXL_GEN_MAX_ALIAS_LEN bytes */
	const float *rows;    /* [n_rows][n_embd], finite */
	int n_rows;
};

/* Every option of a job.  exl_gen_settings_init() sets the documented
 * defaults.  Pointers are borrowed: exl_job_create() copies what it keeps. */
struct exl_gen_settings {
	/* Prompt handling. */
	int add_bos;                 /* -1 (the model's default), 0 or 1 */
	bool encode_special_tokens;  /* false: special-token text in the prompt is plain text */
	bool decode_special_tokens;  /* false: special tokens produce no text */
	bool completion_only;        /* false: the result's text is prompt + completion */
	bool token_healing;          /* false; the healed bytes count as output for stop
				      * and banned strings (docs/sampling.md) */
	/* Fill-in-the-middle: the (text) prompt is the code before the gap and
	 * fim_suffix (fim_suffix_len bytes) the code after it; the model's FIM
	 * tokens frame them, prefix-suffix-middle, after the BOS where the
	 * model takes one.  Truncation shortens the prefix from its start. */
	bool fim;
	const char *fim_suffix;
	size_t fim_suffix_len;

	/* Length. */
	int max_new_tokens;          /* 256 (>= 0) */
	int min_new_tokens;          /* 0: stop tokens and strings are ignored until reached */

	/* Randomness. */
	bool has_seed;               /* false: a seed is drawn from the OS (reported in the result) */
	uint64_t seed;

	struct exl_sampler_params sampling; /* see daemon/core/sampler/sampler.h */

	/* Stop conditions, any number of each. */
	const int32_t *stop_tokens;  /* in addition to the tokenizer's EOG ids */
	int n_stop_tokens;
	const char *const *stop_strings; /* NUL-terminated, non-empty */
	int n_stop_strings;
	bool ignore_eos;             /* false: the EOG ids stop generation */

	/* Strings that must never appear in the output. */
	const char *const *banned_strings;
	int n_banned_strings;

	/* Classifier-free guidance: with a negative prompt, logits =
	 * neg + cfg_scale * (cond - neg).  1 means the conditioned logits. */
	float cfg_scale;             /* 1 */

	/* Constrained decoding; the job takes ownership (frees it), also when
	 * exl_job_create() fails. */
	struct exl_filter *filter;   /* NULL */
	/* Or a constraint the job compiles into its filter
	 * (daemon/core/grammar/grammar_filter.h): at most one of the three, not together
	 * with filter.  NUL-terminated, borrowed. */
	const char *grammar;         /* NULL: GBNF grammar text */
	const char *json_schema;     /* NULL: a JSON schema (JSON text) */
	const char *regex;           /* NULL: the whole output matches it */
	bool filter_prefer_eos;      /* false: end as soon as the constraint is complete */

	/* LoRA adapters (daemon/core/model/lora.h): NULL or an empty set for
	 * none.  Each must be bound to the job's model; the job holds a
	 * reference to each until it is freed. */
	const struct exl_lora_set *loras;

	/* What each chunk (and the result) carries besides text and ids. */
	bool return_probs;           /* false: the probability of each token */
	int return_top_k;            /* 0: the k most likely candidates (<= 64) */
	bool return_logits;          /* false: each step's logits (chunks only) */

	/* Speculative decoding (engine.c): tokens proposed ahead are verified
	 * in the same batched pass as everyone's tokens.  The output is the
	 * one the job gives without: only the speed changes.  At most one of
	 * the two proposers. */
	const char *draft_model;     /* NULL: the name of a drafter attached to the
				      * engine (exl_engine_attach_drafter); borrowed */
	int ngram_draft;             /* 0: propose what followed the longest repeat (N..1
				      * tokens) of the output's end in prompt and output */
	int draft_tokens;            /* 4: the most tokens proposed per step (1..16) */

	/* Beam search (generator_beam.c): the output is the best of num_beams
	 * hypotheses, streamed whole when the search ends.  Sampling options
	 * do not apply; stop conditions, banned strings, token healing and
	 * the constraint do. */
	int num_beams;               /* 0: off; 1..16 (1 gives greedy's output) */
	float length_penalty;        /* 1: hypotheses rank by summed log-probability
				      * / length^length_penalty */
	/* Input embedding blocks (borrowed; the job copies them). */
	const struct exl_embd_block *embeddings;
	int n_embeddings;
	/* A prompt longer than the context leaves room for max_new_tokens is
	 * cut to its last (context - max_new_tokens) tokens after BOS (at
	 * least one) instead of being refused (exl_gen_result.truncated). */
	bool truncate;
	/* Not EXL_POOL_NONE: an embedding job.  It reads its prompt and ends
	 * (reason max_new_tokens, no tokens) with the prompt's final hidden
	 * states pooled in exl_gen_result.embedding; nothing is sampled. */
	enum exl_pooling pooling;
	bool normalize;              /* false: the pooled vector scaled to unit L2 norm */
};

void exl_gen_settings_init(struct exl_gen_settings *s);

/* A prompt: text (len bytes of UTF-8) or, when ids is set, token ids used
 * as they are (no BOS added, no tokenization). */
struct exl_prompt {
	const char *text;
	size_t len;
	const int32_t *ids;
	int n_ids;
};

/* One streamed step.  Everything is borrowed for the duration of the call. */
struct exl_chunk {
	const char *text;          /* new UTF-8 complete text, not NUL-terminated */
	size_t text_len;
	const int32_t *tokens;     /* tokens whose text is now complete */
	int n_tokens;
	const float *probs;        /* [n_tokens] when return_probs, else NULL */
	int top_k;                 /* candidates per token (0 unless asked) */
	const int32_t *top_ids;    /* [n_tokens][top_k] most likely first */
	const float *top_probs;    /* [n_tokens][top_k] */
	const float *logits;       /* [n_tokens][n_vocab] when return_logits */
	int n_vocab;
	bool last;                 /* on_done follows */
};

/* Probabilities (chunk and result) are softmax of the model's logits for
 * that position (after CFG, before bias, penalties and truncation), like
 * llama.cpp's n_probs. */
struct exl_gen_result {
	enum exl_stop_reason reason;
	const char *error;         /* reason error: what went wrong; else NULL */
	const char *text;          /* NUL-terminated; prompt + completion unless completion_only */
	size_t text_len;
	const int32_t *tokens;     /* every generated token */
	int n_tokens;
	int32_t stop_token;        /* reason stop_token: the id; else -1 */
	const char *stop_string;   /* reason stop_string: the string; else NULL */
	int prompt_tokens;         /* tokens of the (conditioned) prompt */
	int cached_tokens;         /* of them, reused from the prefix cache */
	int new_tokens;            /* == n_tokens */
	uint64_t seed;             /* the seed used */
	double time_queued;        /* seconds from exl_engine_add to the first forward */
	double time_to_first_token;/* seconds from exl_engine_add to the first token */
	double time_total;         /* seconds from exl_engine_add to the end */
	const float *probs;        /* [n_tokens] when return_probs */
	int top_k;
	const int32_t *top_ids;    /* [n_tokens][top_k] */
	const float *top_probs;
	int draft_proposed;        /* tokens proposed by the drafter or n-gram lookup */
	int draft_accepted;        /* of them, taken as the model's own */
	int num_beams;             /* beam search: the width; else 0 */
	double beam_score;         /* beam search: the best hypothesis' summed
				    * log-probability (log-softmax after masks) */
	int truncated;             /* prompt tokens dropped by truncate */
	const float *embedding;    /* an embedding job's pooled vector [n_embd], else NULL */
	int n_embd;
};

/* on_chunk's return values. */
#define EXL_CHUNK_OK 0
/* The consumer could not take this chunk (e.g. its ring is full): the job
 * keeps it, samples nothing more, is skipped by later steps and delivers
 * the same chunk again after exl_job_resume().  Nothing is dropped. */
#define EXL_CHUNK_PAUSE 1

struct exl_job_callbacks {
	int (*on_chunk)(struct exl_job *job, const struct exl_chunk *c, void *user);
	void (*on_done)(struct exl_job *job, const struct exl_gen_result *r, void *user);
};

/* Tokenizes the prompt(s), checks every setting against the model, and
 * copies them.  negative (may be NULL) makes it a CFG job.  NULL with a
 * message on a bad setting or prompt. */
struct exl_job *exl_job_create(const struct exl_model *m, const struct exl_gen_settings *s,
			       const struct exl_prompt *prompt, const struct exl_prompt *negative,
			       const struct exl_job_callbacks *cb, void *user,
			       char *err, size_t errlen);
/* Frees a job that is not (or no longer) in an engine, i.e. never added
 * or already done. */
void exl_job_free(struct exl_job *job);

/* Any thread.  The job ends with reason cancelled at the engine's next
 * step (or at once if it was still queued at that step). */
void exl_job_cancel(struct exl_job *job);
/* Any thread.  Lets a paused job (on_chunk returned EXL_CHUNK_PAUSE) run
 * again from the next step.  The caller wakes its engine thread. */
void exl_job_resume(struct exl_job *job);

void *exl_job_user(const struct exl_job *job);
/* Prompt length in tokens (after tokenization and token healing). */
int exl_job_prompt_tokens(const struct exl_job *job);
/* The result, valid once on_done has been called, until exl_job_free. */
const struct exl_gen_result *exl_job_result(const struct exl_job *job);

#endif
