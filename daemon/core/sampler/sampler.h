/* Token sampling: turns one row of logits into a token id.
 *
 * Every step and its formula is written down in docs/sampling.md; the order
 * of a full exl_sampler_sample() call is
 *
 *   token bias -> no-repeat n-gram -> repetition / frequency / presence
 *   penalty -> DRY -> temperature (unless temperature_last) -> mirostat v2,
 *   or: top_k -> top_p -> min_p -> typical -> tfs -> top_a -> XTC ->
 *   temperature (when temperature_last) -> draw.
 *
 * Greedy (argmax after bias and penalties, ties to the lowest id) when
 * temperature is 0 or top_k is 1.
 *
 * Randomness comes only from the caller's exl_rng, so one seed gives one
 * sequence of tokens whatever else runs beside it.  Not thread-safe: one
 * struct exl_sampler per job.
 */
#ifndef EXL_SAMPLER_H
#define EXL_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* xoshiro256**, seeded through splitmix64. */
struct exl_rng {
	uint64_t s[4];
};

void exl_rng_seed(struct exl_rng *r, uint64_t seed);
uint64_t exl_rng_next(struct exl_rng *r);
/* Uniform in [0, 1), 53 random bits. */
double exl_rng_uniform(struct exl_rng *r);

struct exl_token_bias {
	int32_t id;
	float bias;
};

#define EXL_SAMPLER_MAX_BREAKERS 32
#define EXL_SAMPLER_MAX_BREAKER_LEN 64

/* Every field's default is what exl_sampler_params_init() sets; the value
 * that turns a step off is given in brackets. */
struct exl_sampler_params {
	float temperature;      /* 0.8   [1; 0 = greedy] */
	bool temperature_last;  /* false: temperature before truncation */
	int top_k;              /* 40    [0; 1 = greedy] */
	float top_p;            /* 0.95  [1] */
	float min_p;            /* 0.05  [0] */
	float typical;          /* 1     [1 or 0] locally typical sampling mass */
	float tfs;              /* 1     [1 or 0] tail-free sampling z */
	float top_a;            /* 0     [0] */

	float rep_pen;          /* 1     [1] multiplicative repetition penalty */
	int rep_range;          /* 64    last tokens penalised fully; -1 = all, 0 = none */
	int rep_decay;          /* 0     tokens before the range with a fading penalty */
	float freq_pen;         /* 0     [0] subtracted per occurrence in the window */
	float pres_pen;         /* 0     [0] subtracted once if present in the window */
	int no_repeat_ngram;    /* 0     [0] n: never repeat an n-gram */

	float dry_mult;         /* 0     [0] DRY multiplier */
	float dry_base;         /* 1.75 */
	int dry_allowed_len;    /* 2 */
	int dry_range;          /* 0     tokens searched back; 0 = all */
	/* Sequence breakers: a token whose text contains one of these ends a
	 * DRY match.  Default "\n", ":", "\"", "*". */
	int n_dry_breakers;
	char dry_breakers[EXL_SAMPLER_MAX_BREAKERS][EXL_SAMPLER_MAX_BREAKER_LEN];

	float xtc_prob;         /* 0     [0] chance XTC applies at a step */
	float xtc_thresh;       /* 0.1 */

	int mirostat;           /* 0     [0]; 2 = mirostat v2 (1 is refused) */
	float mirostat_tau;     /* 5 */
	float mirostat_eta;     /* 0.1 */

	/* Added to the logits first.  Borrowed by exl_sampler_create (copied). */
	const struct exl_token_bias *bias;
	int n_bias;
};

void exl_sampler_params_init(struct exl_sampler_params *p);
/* Range checks with a message naming the bad field; n_vocab bounds the
 * bias ids. */
int exl_sampler_params_check(const struct exl_sampler_params *p, int n_vocab,
			     char *err, size_t errlen);
/* True when p samples greedily. */
bool exl_sampler_params_greedy(const struct exl_sampler_params *p);

/* A candidate token during truncation. */
struct exl_cand {
	int32_t id;
	float logit;
	float p;
};

/* Candidates c[0..n).  They are sorted lazily: c[0..n_sorted) are the best
 * n_sorted by logit (ties: lower id first), in order, and rank above all
 * the others; each step sorts only as far as it needs.  tmp: scratch with
 * room for n_vocab candidates.  keys (may be NULL): scratch of 2 * n_vocab,
 * for sorting large lists in linear time. */
struct exl_cands {
	struct exl_cand *c;
	struct exl_cand *tmp;
	int n;
	int n_sorted;
	uint64_t *keys;
};

/* ---- the steps, exposed for tests and for other samplers ---- */

void exl_sample_bias(float *logits, int n_vocab, const struct exl_token_bias *b, int nb);
/* Sets to -inf every token that would complete an n-gram (size n) already
 * present in hist. */
void exl_sample_no_repeat_ngram(float *logits, int n_vocab, const int32_t *hist, int n_hist, int n);
/* Repetition, frequency and presence penalty over the window of hist.
 * scratch: 2 * n_vocab floats, all zero on entry and left zero. */
void exl_sample_penalties(float *logits, int n_vocab, const int32_t *hist, int n_hist,
			  float rep_pen, int range, int decay, float freq, float pres,
			  float *scratch);
/* DRY.  breaker: bitmap over the vocabulary (may be NULL), set for
 * sequence-breaking tokens.  scratch: n_vocab ints, all zero on entry and
 * left zero.  Matches are measured up to EXL_DRY_MAX_MATCH tokens. */
#define EXL_DRY_MAX_MATCH 512
void exl_sample_dry(float *logits, int n_vocab, const int32_t *hist, int n_hist,
		    const uint32_t *breaker, float mult, float base, int allowed_len, int range,
		    int32_t *scratch);

/* Fills cs from logits, skipping -inf entries; cs->c has room for n_vocab. */
void exl_cands_from_logits(struct exl_cands *cs, const float *logits, int n_vocab);
/* Sets p = softmax(logit) without sorting. */
void exl_cands_probs(struct exl_cands *cs);
/* Sorts every candidate and sets p = softmax(logit). */
void exl_cands_softmax(struct exl_cands *cs);
/* exl_cands_from_logits then exl_cands_keep_best(k), the same candidates
 * in the same order, in one pass over logits without filling cs with the
 * whole vocabulary.  -1 (cs untouched) where it does not apply: k <= 0, k
 * above its heap (256), or at most k candidates (keep_best keeps them all,
 * unsorted). */
int exl_cands_best_of_logits(struct exl_cands *cs, const float *logits, int n_vocab, int k);
/* Keeps the k best by logit (k <= 0: all), without sorting the rest. */
void exl_cands_keep_best(struct exl_cands *cs, int k);
/* Divides logits by t (> 0) and renormalises. */
void exl_cands_temperature(struct exl_cands *cs, float t);
/* The truncation steps need candidates with p set (exl_cands_probs) and
 * keep them normalised; each keeps at least one candidate. */
void exl_cands_top_k(struct exl_cands *cs, int k);
void exl_cands_top_p(struct exl_cands *cs, float p);
void exl_cands_min_p(struct exl_cands *cs, float p);
void exl_cands_typical(struct exl_cands *cs, float p);
void exl_cands_tfs(struct exl_cands *cs, float z);
void exl_cands_top_a(struct exl_cands *cs, float a);
void exl_cands_xtc(struct exl_cands *cs, float prob, float thresh, struct exl_rng *rng);
/* Draws one candidate by p, walking them in order; returns its index in
 * cs (sorting cs as far as the draw reaches). */
int exl_cands_draw(struct exl_cands *cs, struct exl_rng *rng);
/* Mirostat v2 on candidates with p: truncates, draws, and updates *mu.
 * Returns the token id. */
int32_t exl_cands_mirostat_v2(struct exl_cands *cs, float tau, float eta, float *mu,
			      struct exl_rng *rng);

/* ---- one job's sampler ---- */

struct exl_sampler;

/* breaker (may be NULL): bitmap of DRY sequence-breaking tokens, copied
 * (exl_dry_breaker_mask() in daemon/generator builds it from the
 * dry_breakers strings).  NULL with a message on bad params. */
struct exl_sampler *exl_sampler_create(const struct exl_sampler_params *p, int n_vocab,
				       const uint32_t *breaker, char *err, size_t errlen);
void exl_sampler_free(struct exl_sampler *s);

/* Samples from logits (n_vocab floats, modified in place) given the token
 * history (prompt and generated tokens) for the penalties.  Returns the
 * token, or -1 when every token is masked (-inf). */
int32_t exl_sampler_sample(struct exl_sampler *s, float *logits, const int32_t *hist,
			   int n_hist, struct exl_rng *rng);

/* Mirostat's running mu (for rewinding). */
float exl_sampler_mirostat_mu(const struct exl_sampler *s);
void exl_sampler_set_mirostat_mu(struct exl_sampler *s, float mu);

#endif
