/* exl --json and --top-probs: the token texts and candidates they show,
 * gathered from the daemon, and the client's results put in the terms of
 * the writer exld run uses too (common/cli/gen_output.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/exl/exl_cli.h"
#include "common/cli/gen_output.h"

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

/* ---- the shared output (common/cli/gen_output.h) ---- */

static const char *text_of(void *tt, int32_t id, size_t *len)
{
	return token_text(tt, id, len);
}

void print_top_probs(FILE *out, const char *prefix, const struct exl_event *ev,
		     struct token_texts *tt)
{
	struct gen_probs t = {
		.ids = ev->ids, .n = ev->n_ids, .probs = ev->probs,
		.top_k = ev->n_top, .top_ids = ev->top_ids, .top_probs = ev->top_probs,
	};

	gen_print_probs(out, prefix, &t, text_of, tt);
}

int json_result(FILE *out, const struct exl_result *r, const struct top_tokens *top,
		struct token_texts *tt)
{
	struct gen_report g = {
		.text = r->text ? r->text : "", .text_len = r->text ? r->text_len : 0,
		.ids = r->ids, .n_ids = r->n_ids,
		.stop_reason = r->stop_reason, .stop_string = r->stop_string,
		.stop_token = r->stop_token, .error = r->error,
		.prompt_tokens = r->prompt_tokens, .cached_tokens = r->cached_tokens,
		.truncated_tokens = r->truncated_tokens,
		.new_tokens = r->new_tokens, .seed = r->seed,
		.time_queued = r->time_queued, .time_to_first = r->time_to_first,
		.time_total = r->time_total, .probs = r->probs,
		.draft_proposed = r->draft_proposed, .draft_accepted = r->draft_accepted,
		.num_beams = r->num_beams, .beam_score = r->beam_score,
	};

	if (top && top->k && top->n) {
		g.top_k = top->k;
		g.n_top = top->n;
		g.top_ids = top->ids;
		g.top_probs = top->probs;
	}
	return gen_json_result(out, &g, text_of, tt);
}
