/* The --json result line and the --top-probs lines of exl and exld run
 * (common/cli/gen_output.h). */
#include <string.h>

#include "common/cli/gen_output.h"
#include "common/json_string.h"

void gen_print_probs(FILE *out, const char *prefix, const struct gen_probs *t,
		     gen_token_text_fn *text, void *ctx)
{
	for (size_t i = 0; i < t->n; i++) {
		size_t len;
		const char *s = text(ctx, t->ids[i], &len);

		fprintf(out, "%stoken %d ", prefix, (int)t->ids[i]);
		json_string(out, s, len);
		fprintf(out, " p=%.4f top:", t->probs ? (double)t->probs[i] : 0.0);
		for (int k = 0; k < t->top_k; k++) {
			size_t at = i * (size_t)t->top_k + (size_t)k;
			int32_t id = t->top_ids[at];

			if (id < 0)
				break;
			s = text(ctx, id, &len);
			fprintf(out, " %d ", (int)id);
			json_string(out, s, len);
			fprintf(out, " %.4f", (double)t->top_probs[at]);
		}
		fputc('\n', out);
	}
}

static void string_or_null(FILE *out, const char *s)
{
	if (s)
		json_string(out, s, strlen(s));
	else
		fputs("null", out);
}

static void top_lists(FILE *out, const struct gen_report *r, gen_token_text_fn *text, void *ctx)
{
	fputs(",\"top\":[", out);
	for (size_t i = 0; i < r->n_top; i++) {
		fputs(i ? ",[" : "[", out);
		for (int k = 0; k < r->top_k; k++) {
			size_t at = i * (size_t)r->top_k + (size_t)k;
			int32_t id = r->top_ids[at];
			size_t len;
			const char *s;

			if (id < 0)
				break;
			s = text(ctx, id, &len);
			fprintf(out, "%s{\"id\":%d,\"text\":", k ? "," : "", (int)id);
			json_string(out, s, len);
			fprintf(out, ",\"p\":%.6g}", (double)r->top_probs[at]);
		}
		fputc(']', out);
	}
	fputc(']', out);
}

int gen_json_result(FILE *out, const struct gen_report *r, gen_token_text_fn *text, void *ctx)
{
	fputs("{\"text\":", out);
	json_string(out, r->text, r->text_len);
	fputs(",\"token_ids\":[", out);
	for (size_t i = 0; i < r->n_ids; i++)
		fprintf(out, "%s%d", i ? "," : "", (int)r->ids[i]);
	fputs("],\"stop_reason\":", out);
	json_string(out, r->stop_reason, strlen(r->stop_reason));
	fputs(",\"stop_string\":", out);
	string_or_null(out, r->stop_string);
	if (r->stop_token >= 0)
		fprintf(out, ",\"stop_token\":%d", (int)r->stop_token);
	else
		fputs(",\"stop_token\":null", out);
	if (r->error) {
		fputs(",\"error\":", out);
		json_string(out, r->error, strlen(r->error));
	}
	fprintf(out, ",\"prompt_tokens\":%d,\"cached_tokens\":%d,\"new_tokens\":%d,\"seed\":%llu",
		r->prompt_tokens, r->cached_tokens, r->new_tokens, (unsigned long long)r->seed);
	if (r->truncated_tokens)
		fprintf(out, ",\"truncated_tokens\":%d", r->truncated_tokens);
	fprintf(out, ",\"timings\":{\"queued_ms\":%.3f,\"first_token_ms\":%.3f,\"total_ms\":%.3f}",
		r->time_queued * 1e3, r->time_to_first * 1e3, r->time_total * 1e3);
	if (r->draft_proposed)
		fprintf(out, ",\"draft_proposed\":%d,\"draft_accepted\":%d", r->draft_proposed,
			r->draft_accepted);
	if (r->num_beams)
		fprintf(out, ",\"num_beams\":%d,\"beam_score\":%.6f", r->num_beams, r->beam_score);
	if (r->probs) {
		fputs(",\"probs\":[", out);
		for (size_t i = 0; i < r->n_ids; i++)
			fprintf(out, "%s%.6g", i ? "," : "", (double)r->probs[i]);
		fputc(']', out);
	}
	if (r->top_k && r->top_ids)
		top_lists(out, r, text, ctx);
	fputs("}\n", out);
	return ferror(out) ? -1 : 0;
}
