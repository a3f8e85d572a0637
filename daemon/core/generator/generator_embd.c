/* Input embeddings in a job's prompt (exllamav2's: an alias string in the
 * text stands for a block of rows that take the place of token
 * embeddings) and the truncation of an over-long prompt. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/generator/generator_internal.h"

/* FNV-1a over the bytes of a block's rows, then the row number mixed in:
 * the key of a row in the prefix cache.  Equal blocks give equal keys, so
 * their pages are shared; different blocks differ but with odds of 2^-31
 * per position. */
static uint64_t fnv1a(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

static int32_t row_key(uint64_t block_hash, int row)
{
	uint64_t h = block_hash ^ ((uint64_t)(uint32_t)row * 0x9e3779b97f4a7c15ull);

	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 29;
	/* [-2^31, -2]: never a token id, never -1 */
	return (int32_t)(-2 - (int64_t)(h % 2147483647ull));
}

static int check_blocks(const struct exl_gen_settings *s, int n_embd, int *total, char *err,
			size_t errlen)
{
	int64_t rows = 0;

	*total = 0;
	if (s->n_embeddings < 0 || s->n_embeddings > EXL_GEN_MAX_EMBD_BLOCKS) {
		snprintf(err, errlen, "at most %d input embedding blocks (got %d)",
			 EXL_GEN_MAX_EMBD_BLOCKS, s->n_embeddings);
		return -1;
	}
	for (int i = 0; i < s->n_embeddings; i++) {
		const struct exl_embd_block *b = &s->embeddings[i];
		size_t al = b->alias ? strlen(b->alias) : 0;

		if (al == 0 || al > EXL_GEN_MAX_ALIAS_LEN) {
			snprintf(err, errlen, "input embedding %d: the alias must be 1 to %d bytes",
				 i, EXL_GEN_MAX_ALIAS_LEN);
			return -1;
		}
		for (int j = 0; j < i; j++) {
			if (!strcmp(s->embeddings[j].alias, b->alias)) {
				snprintf(err, errlen, "input embeddings %d and %d have the same alias "
					 "'%s'", j, i, b->alias);
				return -1;
			}
		}
		if (b->n_rows < 1 || !b->rows) {
			snprintf(err, errlen, "input embedding '%s' has no rows", b->alias);
			return -1;
		}
		rows += b->n_rows;
		if (rows > EXL_GEN_MAX_EMBD_ROWS) {
			snprintf(err, errlen, "input embeddings have more than %d rows in all",
				 EXL_GEN_MAX_EMBD_ROWS);
			return -1;
		}
		size_t nv = (size_t)b->n_rows * (size_t)n_embd;

		for (size_t k = 0; k < nv; k++) {
			if (!isfinite(b->rows[k])) {
				snprintf(err, errlen, "input embedding '%s': row %zu, column %zu is "
					 "not a finite number", b->alias, k / (size_t)n_embd,
					 k % (size_t)n_embd);
				return -1;
			}
		}
	}
	*total = (int)rows;
	return 0;
}

/* The first alias occurrence in text[0..len) (the longest alias among those
 * starting there); -1 when none. */
static int next_alias(const struct exl_gen_settings *s, const char *text, size_t len,
		      size_t *at)
{
	int best = -1;
	size_t best_at = len, best_len = 0;

	for (int i = 0; i < s->n_embeddings; i++) {
		const char *a = s->embeddings[i].alias;
		size_t al = strlen(a);
		const char *f = len >= al ? memmem(text, len, a, al) : NULL;

		if (!f)
			continue;
		size_t o = (size_t)(f - text);

		if (o < best_at || (o == best_at && al > best_len)) {
			best = i;
			best_at = o;
			best_len = al;
		}
	}
	*at = best_at;
	return best;
}

struct id_buf {
	int32_t *v;
	int32_t *row;
	int n, cap;
};

static int push(struct id_buf *b, int32_t id, int32_t row)
{
	if (b->n == b->cap) {
		int cap = b->cap ? b->cap * 2 : 256;
		int32_t *v = realloc(b->v, (size_t)cap * sizeof(*v));

		if (!v)
			return -1;
		b->v = v;
		int32_t *r = realloc(b->row, (size_t)cap * sizeof(*r));

		if (!r)
			return -1;
		b->row = r;
		b->cap = cap;
	}
	if (b->n >= 1 << 24)
		return -1;
	b->v[b->n] = id;
	b->row[b->n++] = row;
	return 0;
}

static int push_text(struct id_buf *b, const struct exl_job *job,
		     const struct exl_gen_settings *s, const char *text, size_t len, bool bos,
		     char *err, size_t errlen)
{
	int32_t *ids = NULL;
	int n;

	if (!len && !bos)
		return 0;
	n = exl_tok_encode(job->tok, text, len, bos, s->encode_special_tokens, &ids, err, errlen);
	if (n < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		if (push(b, ids[i], -1)) {
			free(ids);
			snprintf(err, errlen, "out of memory for the prompt");
			return -1;
		}
	}
	free(ids);
	return 0;
}

int exl_gen_embd_prompt(struct exl_job *job, const struct exl_gen_settings *s,
			const struct exl_prompt *p, int32_t **ids, char *err, size_t errlen)
{
	struct id_buf b = { 0 };
	uint64_t hash[EXL_GEN_MAX_EMBD_BLOCKS];
	int first[EXL_GEN_MAX_EMBD_BLOCKS];
	const char *text = p->text ? p->text : "";
	size_t len = p->len, pos = 0;
	bool bos = s->add_bos < 0 ? exl_tokenizer_add_bos(job->tok) : s->add_bos == 1;
	int total, used = 0;

	*ids = NULL;
	if (p->ids) {
		snprintf(err, errlen, "input embeddings need a text prompt, not token ids");
		return -1;
	}
	if (!p->text && p->len) {
		snprintf(err, errlen, "prompt text missing");
		return -1;
	}
	if (check_blocks(s, job->n_embd, &total, err, errlen))
		return -1;
	job->embd = malloc((size_t)total * (size_t)job->n_embd * sizeof(*job->embd));
	if (!job->embd)
		goto oom;
	for (int i = 0, at = 0; i < s->n_embeddings; i++) {
		const struct exl_embd_block *e = &s->embeddings[i];
		size_t bytes = (size_t)e->n_rows * (size_t)job->n_embd * sizeof(float);

		memcpy(job->embd + (size_t)at * (size_t)job->n_embd, e->rows, bytes);
		hash[i] = fnv1a(e->rows, bytes) ^ (uint64_t)e->n_rows;
		first[i] = at;
		at += e->n_rows;
	}
	while (pos <= len) {
		size_t at;
		int k = next_alias(s, text + pos, len - pos, &at);

		if (push_text(&b, job, s, text + pos, k < 0 ? len - pos : at, bos, err, errlen))
			goto fail;
		bos = false;
		if (k < 0)
			break;
		for (int r = 0; r < s->embeddings[k].n_rows; r++)
			if (push(&b, row_key(hash[k], r), first[k] + r))
				goto oom;
		used++;
		pos += at + strlen(s->embeddings[k].alias);
	}
	if (!used) {
		snprintf(err, errlen, "no input embedding's alias occurs in the prompt (the first "
			 "is '%s')", s->embeddings[0].alias);
		goto fail;
	}
	if (b.n == 0) {
		snprintf(err, errlen, "the prompt is empty (no tokens and no BOS)");
		goto fail;
	}
	job->embd_at = b.row;
	*ids = b.v;
	return b.n;
oom:
	snprintf(err, errlen, "out of memory for the prompt");
fail:
	free(b.v);
	free(b.row);
	return -1;
}

void exl_gen_truncate(struct exl_job *job, int n_ctx)
{
	int32_t bos = exl_tokenizer_bos(job->tok);

	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];
		int keep = n_ctx - job->max_new_tokens;
		int head = q->prompt_len > 0 && bos >= 0 && q->tokens[0] == bos ? 1 : 0;
		/* a fill-in-the-middle prompt loses the start of its prefix: the
		 * markers and the suffix stay */
		bool fim = i == 0 && job->fim_suffix_at > 0;

		if (fim)
			head = job->fim_prefix_at;

		/* BOS and at least one token stay; the context bounds the output */
		if (keep < head + 1)
			keep = head + 1;
		if (q->prompt_len <= keep)
			continue;
		int drop = q->prompt_len - keep;

		/* too long with no prefix left: the engine refuses it as any
		 * prompt over the context */
		if (fim && drop > job->fim_suffix_at - head)
			drop = job->fim_suffix_at - head;
		if (fim)
			job->fim_suffix_at -= drop;

		memmove(q->tokens + head, q->tokens + head + drop,
			(size_t)(q->n_tokens - head - drop) * sizeof(*q->tokens));
		q->n_tokens -= drop;
		q->prompt_len -= drop;
		if (i == 0 && job->embd_at)
			memmove(job->embd_at + head, job->embd_at + head + drop,
				(size_t)(q->prompt_len - head) * sizeof(*job->embd_at));
		if (i == 0)
			job->truncated = drop;
	}
}
