/* What exl and exld run print about a generation: the --json result line
 * (docs/exl.md: the same fields from both) and the --top-probs lines.
 * Each program describes its result in these terms, from its own structs,
 * and says how a token id reads.
 */
#ifndef EXL_GEN_OUTPUT_H
#define EXL_GEN_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The text of token id for the candidates: *len bytes, never NULL. */
typedef const char *gen_token_text_fn(void *ctx, int32_t id, size_t *len);

/* Tokens with their probabilities and candidates. */
struct gen_probs {
	const int32_t *ids;
	size_t n;
	const float *probs;       /* [n], or NULL */
	int top_k;                /* candidates per token */
	const int32_t *top_ids;   /* [n][top_k], most likely first; an id < 0 ends a row */
	const float *top_probs;   /* [n][top_k] */
};

/* One line per token on out, each after prefix:
 *   token ID "TEXT" p=P top: ID "TEXT" P ... */
void gen_print_probs(FILE *out, const char *prefix, const struct gen_probs *t,
		     gen_token_text_fn *text, void *ctx);

/* A finished generation. */
struct gen_report {
	const char *text;         /* text_len bytes */
	size_t text_len;
	const int32_t *ids;       /* the generated tokens */
	size_t n_ids;
	const char *stop_reason;
	const char *stop_string;  /* NULL: none */
	int32_t stop_token;       /* < 0: none */
	const char *error;        /* NULL: none */
	int prompt_tokens, cached_tokens, new_tokens;
	int truncated_tokens;     /* shown when not 0 */
	uint64_t seed;
	double time_queued, time_to_first, time_total; /* seconds */
	const float *probs;       /* [n_ids], or NULL */
	int draft_proposed;       /* speculative decoding: tokens proposed (0: none), */
	int draft_accepted;       /* and of them taken as the model's own */
	int num_beams;            /* beam search: the width, else 0 */
	double beam_score;        /* its summed log-probability */
	/* Each token's candidates, [n_top][top_k]; none when top_k is 0 or
	 * top_ids NULL. */
	int top_k;
	size_t n_top;
	const int32_t *top_ids;   /* an id < 0 ends a row */
	const float *top_probs;
};

/* r as one line of JSON: text, token_ids, stop_reason, stop_string,
 * stop_token, error (when there is one), prompt_tokens, cached_tokens,
 * new_tokens, seed, timings, and draft_proposed / draft_accepted
 * (speculative decoding), num_beams / beam_score (beam search), probs and
 * top when given.  -1 when out
 * reports an error. */
int gen_json_result(FILE *out, const struct gen_report *r, gen_token_text_fn *text, void *ctx);

#endif
