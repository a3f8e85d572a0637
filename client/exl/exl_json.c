/* exl --json: results as one line of JSON each, and the token texts and
 * candidates that go with --top-probs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl/exl_cli.h"

/* ---- candidates from the stream ---- */

int top_tokens_add(struct top_tokens *t, const struct exl_event *ev)
{
	if (!ev->n_top || !ev->top_ids || !ev->n_ids)
		return 0;
	if (t->k && t->k != ev->n_top)
		return -1;
	t->k = ev->n_top;
	if (t->n + ev->n_ids > t->cap) {
		size_t cap = t->cap ? t->cap : 64;
		while (cap < t->n + ev->n_ids)
			cap *= 2;
		int32_t *ids = realloc(t->ids, cap * (size_t)t->k * sizeof(*ids));
		if (!ids)
			return -1;
		t->ids = ids;
		float *probs = realloc(t->probs, cap * (size_t)t->k * sizeof(*probs));
		if (!probs)
			return -1;
		t->probs = probs;
		t->cap = cap;
	}
	memcpy(t->ids + t->n * (size_t)t->k, ev->top_ids, ev->n_ids * (size_t)t->k * sizeof(int32_t));
	memcpy(t->probs + t->n * (size_t)t->k, ev->top_probs, ev->n_ids * (size_t)t->k * sizeof(float));
	t->n += ev->n_ids;
	return 0;
}

void top_tokens_free(struct top_tokens *t)
{
	free(t->ids);
	free(t->probs);
	memset(t, 0, sizeof(*t));
}

/* ---- token texts, cached ---- */

struct tt_entry {
	int32_t id;               /* -1: empty slot */
	char *text;
	size_t len;
};

struct token_texts {
	struct exl_client *c;
	const char *model;
	struct tt_entry *slots;
	size_t cap;               /* a power of two */
	size_t used;
};

struct token_texts *token_texts_new(struct exl_client *c, const char *model)
{
	struct token_texts *tt = calloc(1, sizeof(*tt));

	if (!tt)
		return NULL;
	tt->c = c;
	tt->model = model;
	tt->cap = 256;
	tt->slots = calloc(tt->cap, sizeof(*tt->slots));
	if (!tt->slots) {
		free(tt);
		return NULL;
	}
	for (size_t i = 0; i < tt->cap; i++)
		tt->slots[i].id = -1;
	return tt;
}

void token_texts_free(struct token_texts *tt)
{
	if (!tt)
		return;
	for (size_t i = 0; i < tt->cap; i++)
		free(tt->slots[i].text);
	free(tt->slots);
	free(tt);
}

static struct tt_entry *slot_of(struct tt_entry *slots, size_t cap, int32_t id)
{
	size_t h = ((uint32_t)id * 2654435761u) & (cap - 1);

	while (slots[h].id != -1 && slots[h].id != id)
		h = (h + 1) & (cap - 1);
	return &slots[h];
}

static int grow(struct token_texts *tt)
{
	size_t cap = tt->cap * 2;
	struct tt_entry *s = calloc(cap, sizeof(*s));

	if (!s)
		return -1;
	for (size_t i = 0; i < cap; i++)
		s[i].id = -1;
	for (size_t i = 0; i < tt->cap; i++)
		if (tt->slots[i].id != -1)
			*slot_of(s, cap, tt->slots[i].id) = tt->slots[i];
	free(tt->slots);
	tt->slots = s;
	tt->cap = cap;
	return 0;
}

const char *token_text(struct token_texts *tt, int32_t id, size_t *len)
{
	*len = 0;
	if (!tt || id < 0)
		return "";
	struct tt_entry *e = slot_of(tt->slots, tt->cap, id);
	if (e->id == id) {
		*len = e->len;
		return e->text;
	}
	if ((tt->used + 1) * 2 > tt->cap) {
		if (grow(tt))
			return "";
		e = slot_of(tt->slots, tt->cap, id);
	}
	char *text = NULL;
	if (exl_detokenize_ex(tt->c, tt->model, &id, 1, true, false, &text) || !text)
		return "";
	e->id = id;
	e->text = text;
	e->len = strlen(text);
	tt->used++;
	*len = e->len;
	return text;
}

/* ---- a result ---- */

int json_result(FILE *out, const struct exl_result *r, const struct top_tokens *top,
		struct token_texts *tt)
{
	fputs("{\"text\":", out);
	json_string(out, r->text ? r->text : "", r->text ? r->text_len : 0);
	fputs(",\"token_ids\":[", out);
	for (size_t i = 0; i < r->n_ids; i++)
		fprintf(out, "%s%d", i ? "," : "", (int)r->ids[i]);
	fprintf(out, "],\"stop_reason\":");
	json_string(out, r->stop_reason, strlen(r->stop_reason));
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
	if (top && top->k && top->n) {
		fputs(",\"top\":[", out);
		for (size_t i = 0; i < top->n; i++) {
			fputs(i ? ",[" : "[", out);
			for (int k = 0; k < top->k; k++) {
				int32_t id = top->ids[i * (size_t)top->k + (size_t)k];
				size_t len;
				const char *text;

				if (id < 0)
					break;
				text = token_text(tt, id, &len);
				fprintf(out, "%s{\"id\":%d,\"text\":", k ? "," : "", (int)id);
				json_string(out, text, len);
				fprintf(out, ",\"p\":%.6g}", (double)top->probs[i * (size_t)top->k + (size_t)k]);
			}
			fputc(']', out);
		}
		fputc(']', out);
	}
	fputs("}\n", out);
	return ferror(out) ? -1 : 0;
}
