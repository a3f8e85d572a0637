/* exld run --json: the result as one line of JSON. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/commands/cmd_run.h"
#include "daemon/core/tokenizer/tokenizer.h"

static void token_text(FILE *out, const struct exl_tokenizer *tok, int32_t id)
{
	char buf[256];
	size_t n = exl_token_bytes(tok, id, true, buf, sizeof(buf));

	json_string(out, buf, n < sizeof(buf) ? n : sizeof(buf));
}

int run_print_json(FILE *out, const struct exl_gen_result *r, const struct exl_tokenizer *tok)
{
	fputs("{\"text\":", out);
	json_string(out, r->text, r->text_len);
	fputs(",\"token_ids\":[", out);
	for (int i = 0; i < r->n_tokens; i++)
		fprintf(out, "%s%d", i ? "," : "", (int)r->tokens[i]);
	fprintf(out, "],\"stop_reason\":\"%s\"", exl_stop_reason_name(r->reason));
	fputs(",\"stop_string\":", out);
	if (r->stop_string)
		json_string(out, r->stop_string, strlen(r->stop_string));
	else
		fputs("null", out);
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
	fprintf(out, ",\"timings\":{\"queued_ms\":%.3f,\"first_token_ms\":%.3f,\"total_ms\":%.3f}",
		r->time_queued * 1e3, r->time_to_first_token * 1e3, r->time_total * 1e3);
	if (r->draft_proposed)
		fprintf(out, ",\"draft_proposed\":%d,\"draft_accepted\":%d", r->draft_proposed,
			r->draft_accepted);
	if (r->num_beams)
		fprintf(out, ",\"num_beams\":%d,\"beam_score\":%.6f", r->num_beams, r->beam_score);
	if (r->probs) {
		fputs(",\"probs\":[", out);
		for (int i = 0; i < r->n_tokens; i++)
			fprintf(out, "%s%.6g", i ? "," : "", (double)r->probs[i]);
		fputc(']', out);
	}
	if (r->top_k && r->top_ids) {
		fputs(",\"top\":[", out);
		for (int i = 0; i < r->n_tokens; i++) {
			fputs(i ? ",[" : "[", out);
			for (int k = 0; k < r->top_k; k++) {
				int32_t id = r->top_ids[(size_t)i * (size_t)r->top_k + (size_t)k];

				if (id < 0)
					break;
				fprintf(out, "%s{\"id\":%d,\"text\":", k ? "," : "", (int)id);
				token_text(out, tok, id);
				fprintf(out, ",\"p\":%.6g}",
					(double)r->top_probs[(size_t)i * (size_t)r->top_k + (size_t)k]);
			}
			fputc(']', out);
		}
		fputc(']', out);
	}
	fputs("}\n", out);
	return ferror(out) ? -1 : 0;
}
