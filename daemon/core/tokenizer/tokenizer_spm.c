/* SentencePiece-style BPE (tokenizer.ggml.model = "llama").
 *
 * Spaces become U+2581, the text is cut into UTF-8 characters, and adjacent
 * pairs whose concatenation is a token are merged, highest token score
 * first (leftmost on ties), until no pair is a token.  A piece left that is
 * not a token comes out as its bytes (<0xNN> byte-fallback tokens).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/tokenizer/tokenizer_internal.h"
#include "daemon/core/util/u64_heap.h"

struct sym {
	uint32_t start, len; /* len 0: merged into its left neighbour */
	int32_t prev, next;
};

struct scored {
	float score;
	int32_t id;
};

static int by_score_desc(const void *pa, const void *pb)
{
	const struct scored *a = pa, *b = pb;
	bool a_nan = a->score != a->score, b_nan = b->score != b->score;

	/* NaN sorts last, so the order is total. */
	if (a_nan || b_nan)
		return (int)a_nan - (int)b_nan;
	return a->score > b->score ? -1 : a->score < b->score;
}

int exl_tok_spm_prepare(struct exl_tokenizer *t, char *err, size_t errlen)
{
	struct scored *order = malloc((size_t)t->n_vocab * sizeof(*order));
	uint32_t rank = 0;

	t->score_rank = malloc((size_t)t->n_vocab * sizeof(*t->score_rank));
	if (!order || !t->score_rank) {
		free(order);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int32_t i = 0; i < t->n_vocab; i++) {
		order[i].score = t->scores[i];
		order[i].id = i;
	}
	qsort(order, (size_t)t->n_vocab, sizeof(*order), by_score_desc);
	for (int32_t i = 0; i < t->n_vocab; i++) {
		if (i > 0 && !(order[i].score == order[i - 1].score))
			rank++;
		t->score_rank[order[i].id] = rank;
	}
	free(order);
	return 0;
}

/* Queues the merge of left and right when their text is a token. */
static int try_bigram(const struct exl_tokenizer *t, const char *s, const struct sym *syms,
		      int32_t left, int32_t right, struct u64_heap *h)
{
	int32_t id;

	if (left < 0 || right < 0)
		return 0;
	id = exl_tok_lookup(t, s + syms[left].start, syms[left].len + syms[right].len);
	if (id < 0)
		return 0;
	return exl_u64_heap_push(h, (uint64_t)t->score_rank[id] << 32 | (uint32_t)left);
}

static int emit_bytes(const struct exl_tokenizer *t, const char *s, uint32_t len,
		      struct tok_out *out, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < len; i++) {
		int32_t id = t->byte_token[(uint8_t)s[i]];

		if (id < 0)
			id = t->unk;
		if (id < 0) {
			snprintf(err, errlen, "byte 0x%02X has no token and the vocabulary has no "
				 "unknown token", (uint8_t)s[i]);
			return -1;
		}
		if (exl_tok_out_push(out, id))
			goto oom;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

int exl_tok_spm_encode(const struct exl_tokenizer *t, const char *text, uint32_t len,
		       bool prefix_space, struct tok_out *out, char *err, size_t errlen)
{
	static const char escaped_space[3] = { '\xe2', '\x96', '\x81' };
	uint32_t n_spaces = 0, n = 0, elen;
	struct sym *syms = NULL;
	struct u64_heap h = { 0 };
	char *s = NULL;
	int ret = -1;

	for (uint32_t i = 0; i < len; i++)
		n_spaces += text[i] == ' ';
	/* len <= TOK_MAX_TEXT, so this cannot overflow. */
	elen = len + 2 * n_spaces + (prefix_space ? 3 : 0);
	if (!elen)
		return 0;
	s = malloc(elen);
	syms = malloc((size_t)elen * sizeof(*syms));
	if (!s || !syms)
		goto oom;
	{
		uint32_t o = 0;

		if (prefix_space) {
			memcpy(s, escaped_space, 3);
			o = 3;
		}
		for (uint32_t i = 0; i < len; i++) {
			if (text[i] == ' ') {
				memcpy(s + o, escaped_space, 3);
				o += 3;
			} else {
				s[o++] = text[i];
			}
		}
	}

	/* UTF-8 characters by their lead byte; a broken one is cut short at
	 * the end of the text and otherwise taken as is. */
	for (uint32_t pos = 0; pos < elen; n++) {
		static const uint8_t len_by_high[16] = { 1, 1, 1, 1, 1, 1, 1, 1,
							 1, 1, 1, 1, 2, 2, 3, 4 };
		uint32_t l = len_by_high[(uint8_t)s[pos] >> 4];

		if (l > elen - pos)
			l = elen - pos;
		syms[n].start = pos;
		syms[n].len = l;
		syms[n].prev = (int32_t)n - 1;
		pos += l;
		syms[n].next = pos == elen ? -1 : (int32_t)n + 1;
	}
	for (uint32_t i = 1; i < n; i++)
		if (try_bigram(t, s, syms, (int32_t)i - 1, (int32_t)i, &h))
			goto oom;

	while (h.n) {
		uint64_t b = exl_u64_heap_pop(&h);
		int32_t left = (int32_t)(uint32_t)b, right, id;
		struct sym *l = &syms[left], *r;

		/* Stale when the pair there now scores differently.  A pair
		 * that changed but scores the same has its own entry with this
		 * very key, so taking it now is the same decision. */
		if (!l->len || l->next < 0)
			continue;
		right = l->next;
		r = &syms[right];
		id = exl_tok_lookup(t, s + l->start, l->len + r->len);
		if (id < 0 || t->score_rank[id] != (uint32_t)(b >> 32))
			continue;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			syms[r->next].prev = left;
		if (try_bigram(t, s, syms, l->prev, left, &h) ||
		    try_bigram(t, s, syms, left, l->next, &h))
			goto oom;
	}

	for (int32_t i = 0; i != -1; i = syms[i].next) {
		int32_t id = exl_tok_lookup(t, s + syms[i].start, syms[i].len);

		if (id >= 0) {
			if (exl_tok_out_push(out, id))
				goto oom;
		} else if (emit_bytes(t, s + syms[i].start, syms[i].len, out, err, errlen)) {
			goto out;
		}
	}
	ret = 0;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	free(s);
	free(syms);
	u64_heap_free(&h);
	return ret;
}
