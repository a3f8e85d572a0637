/* exld run --json: the result as one line of JSON. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/cmd_run.h"
#include "daemon/tokenizer.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t k;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		k = 2;
		cp = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		k = 3;
		cp = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		k = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (k > n)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return k;
}

void run_json_string(FILE *out, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	fputc('"', out);
	for (size_t i = 0; i < n;) {
		unsigned char c = u[i];

		if (c == '"' || c == '\\') {
			fputc('\\', out);
			fputc(c, out);
			i++;
		} else if (c == '\n') {
			fputs("\\n", out);
			i++;
		} else if (c == '\t') {
			fputs("\\t", out);
			i++;
		} else if (c == '\r') {
			fputs("\\r", out);
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(out, "\\u%04x", c);
			i++;
		} else {
			size_t k = utf8_len(u + i, n - i);

			if (!k) {
				fputs("\\ufffd", out);
				i++;
			} else {
				fwrite(u + i, 1, k, out);
				i += k;
			}
		}
	}
	fputc('"', out);
}

static void token_text(FILE *out, const struct exl_tokenizer *tok, int32_t id)
{
	char buf[256];
	size_t n = exl_token_bytes(tok, id, true, buf, sizeof(buf));

	run_json_string(out, buf, n < sizeof(buf) ? n : sizeof(buf));
}

int run_print_json(FILE *out, const struct exl_result *r, const struct exl_tokenizer *tok)
{
	fputs("{\"text\":", out);
	run_json_string(out, r->text, r->text_len);
	fputs(",\"token_ids\":[", out);
	for (int i = 0; i < r->n_tokens; i++)
		fprintf(out, "%s%d", i ? "," : "", (int)r->tokens[i]);
	fprintf(out, "],\"stop_reason\":\"%s\"", exl_stop_reason_name(r->reason));
	fputs(",\"stop_string\":", out);
	if (r->stop_string)
		run_json_string(out, r->stop_string, strlen(r->stop_string));
	else
		fputs("null", out);
	if (r->stop_token >= 0)
		fprintf(out, ",\"stop_token\":%d", (int)r->stop_token);
	else
		fputs(",\"stop_token\":null", out);
	if (r->error) {
		fputs(",\"error\":", out);
		run_json_string(out, r->error, strlen(r->error));
	}
	fprintf(out, ",\"prompt_tokens\":%d,\"cached_tokens\":%d,\"new_tokens\":%d,\"seed\":%llu",
		r->prompt_tokens, r->cached_tokens, r->new_tokens, (unsigned long long)r->seed);
	fprintf(out, ",\"timings\":{\"queued_ms\":%.3f,\"first_token_ms\":%.3f,\"total_ms\":%.3f}",
		r->time_queued * 1e3, r->time_to_first_token * 1e3, r->time_total * 1e3);
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
