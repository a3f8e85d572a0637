/* exld run's output, in the terms of the one exl prints too
 * (common/cli/gen_output.h): the --json result line and the --top-probs
 * lines. */
#include <stdint.h>
#include <stdio.h>

#include "common/cli/gen_output.h"
#include "daemon/commands/cmd_run.h"
#include "daemon/core/tokenizer/tokenizer.h"

/* A token's text for the candidates, cut at max bytes (at most the
 * buffer's): 256 in the JSON, 128 in the --top-probs lines, as exld run
 * always had them. */
struct tok_text {
	const struct exl_tokenizer *tok;
	size_t max;
	char buf[256];
};

static const char *text_of(void *ctx, int32_t id, size_t *len)
{
	struct tok_text *t = ctx;
	size_t n = exl_token_bytes(t->tok, id, true, t->buf, t->max);

	*len = n < t->max ? n : t->max;
	return t->buf;
}

void exl_run_print_probs(FILE *out, const struct exl_chunk *c, const struct exl_tokenizer *tok)
{
	struct tok_text tt = { .tok = tok, .max = 128 };
	struct gen_probs t = {
		.ids = c->tokens, .n = c->n_tokens > 0 ? (size_t)c->n_tokens : 0,
		.probs = c->probs, .top_k = c->top_k, .top_ids = c->top_ids,
		.top_probs = c->top_probs,
	};

	gen_print_probs(out, "", &t, text_of, &tt);
}

int exl_run_print_json(FILE *out, const struct exl_gen_result *r, const struct exl_tokenizer *tok)
{
	struct tok_text tt = { .tok = tok, .max = sizeof(tt.buf) };
	size_t n = r->n_tokens > 0 ? (size_t)r->n_tokens : 0;
	struct gen_report g = {
		.text = r->text, .text_len = r->text_len,
		.ids = r->tokens, .n_ids = n,
		.stop_reason = exl_stop_reason_name(r->reason), .stop_string = r->stop_string,
		.stop_token = r->stop_token, .error = r->error,
		.prompt_tokens = r->prompt_tokens, .cached_tokens = r->cached_tokens,
		.truncated_tokens = r->truncated,
		.new_tokens = r->new_tokens, .seed = r->seed,
		.time_queued = r->time_queued, .time_to_first = r->time_to_first_token,
		.time_total = r->time_total, .probs = r->probs,
		.draft_proposed = r->draft_proposed, .draft_accepted = r->draft_accepted,
		.num_beams = r->num_beams, .beam_score = r->beam_score,
		.top_k = r->top_k, .n_top = n, .top_ids = r->top_ids, .top_probs = r->top_probs,
	};

	return gen_json_result(out, &g, text_of, &tt);
}
