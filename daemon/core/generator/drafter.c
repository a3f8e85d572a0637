/* The draft model and n-gram proposers of speculative decoding (see
 * drafter.h; the verification is in engine.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/generator/drafter.h"
#include "daemon/core/generator/generator_internal.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"

struct exl_drafter {
	char name[EXL_GEN_MAX_DRAFT_NAME + 1];
	struct exl_model *m;
	struct exl_kvcache *kv;
	int n_vocab;
	int max_batch;
	/* one pass being built */
	int32_t *tokens;
	int32_t *seq;
	bool *want;
	struct exl_kv_seq **seqs;
	struct exl_job **row_job;  /* the job of each logits row */
	int n_tokens;
	int n_seqs;
	int n_rows;
	float *logits;
	int cap_rows;
};

uint64_t exl_vocab_fingerprint(const struct exl_tokenizer *tok, int n_vocab)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(uint32_t)n_vocab;
	char buf[512];

	for (int32_t id = 0; id < n_vocab; id++) {
		size_t n = exl_token_bytes(tok, id, true, buf, sizeof(buf));
		size_t have = n < sizeof(buf) ? n : sizeof(buf);

		h = (h ^ (uint64_t)n ^ (exl_tokenizer_is_special(tok, id) ? 1ULL << 63 : 0)) *
		    0x100000001b3ULL;
		for (size_t i = 0; i < have; i++)
			h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ULL;
	}
	return h;
}

/* The first token whose bytes or kind differ, or -1. */
static int32_t first_difference(const struct exl_tokenizer *a, const struct exl_tokenizer *b,
				int n_vocab)
{
	char x[512], y[512];

	for (int32_t id = 0; id < n_vocab; id++) {
		size_t nx = exl_token_bytes(a, id, true, x, sizeof(x));
		size_t ny = exl_token_bytes(b, id, true, y, sizeof(y));

		if (nx != ny || memcmp(x, y, nx < sizeof(x) ? nx : sizeof(x)) ||
		    exl_tokenizer_is_special(a, id) != exl_tokenizer_is_special(b, id))
			return id;
	}
	return -1;
}

void exl_drafter_free(struct exl_drafter *d)
{
	if (!d)
		return;
	exl_kvcache_free(d->kv);
	exl_model_free(d->m);
	free(d->tokens);
	free(d->seq);
	free(d->want);
	free(d->seqs);
	free(d->row_job);
	free(d->logits);
	free(d);
}

struct exl_drafter *exl_drafter_open(const char *name, const char *path, struct exl_backend *be,
				     const struct exl_model *target, int kv_tokens, int page_size,
				     int max_batch, char *err, size_t errlen)
{
	const struct exl_hparams *th = exl_model_hparams(target);
	struct exl_drafter *d;
	char msg[400];

	if (!name || !*name || strlen(name) > EXL_GEN_MAX_DRAFT_NAME) {
		snprintf(err, errlen, "draft model: a name of 1 to %d bytes is required",
			 EXL_GEN_MAX_DRAFT_NAME);
		return NULL;
	}
	if (max_batch < 1 || max_batch > 1 << 16) {
		snprintf(err, errlen, "draft model '%s': max_batch must be in [1, 65536] (got %d)",
			 name, max_batch);
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		goto oom;
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->max_batch = max_batch;
	d->m = exl_model_load(path, be, msg, sizeof(msg));
	if (!d->m) {
		snprintf(err, errlen, "draft model '%s': %s", name, msg);
		goto fail;
	}
	d->n_vocab = exl_model_hparams(d->m)->n_vocab;
	if (d->n_vocab != th->n_vocab) {
		snprintf(err, errlen, "draft model '%s' has a vocabulary of %d tokens, the model "
			 "it drafts for %d: a draft model must have the same vocabulary", name,
			 d->n_vocab, th->n_vocab);
		goto fail;
	}
	int32_t diff = first_difference(exl_model_tokenizer(d->m), exl_model_tokenizer(target),
					d->n_vocab);

	if (diff >= 0) {
		snprintf(err, errlen, "draft model '%s': token %d differs from the same id of the "
			 "model it drafts for: a draft model must have the same vocabulary", name,
			 (int)diff);
		goto fail;
	}
	d->kv = exl_model_kvcache_create(d->m, kv_tokens, page_size, msg, sizeof(msg));
	if (!d->kv) {
		snprintf(err, errlen, "draft model '%s': %s", name, msg);
		goto fail;
	}
	d->tokens = malloc((size_t)max_batch * sizeof(*d->tokens));
	d->seq = malloc((size_t)max_batch * sizeof(*d->seq));
	d->want = malloc((size_t)max_batch * sizeof(*d->want));
	d->seqs = malloc((size_t)max_batch * sizeof(*d->seqs));
	d->row_job = malloc((size_t)max_batch * sizeof(*d->row_job));
	if (!d->tokens || !d->seq || !d->want || !d->seqs || !d->row_job)
		goto oom;
	return d;
oom:
	snprintf(err, errlen, "draft model '%s': out of memory", name);
fail:
	exl_drafter_free(d);
	return NULL;
}

const char *exl_drafter_name(const struct exl_drafter *d)
{
	return d->name;
}

void exl_drafter_release(struct exl_drafter *d, struct exl_job *job)
{
	exl_kv_seq_release(d->kv, &job->draft.kv);
}

static bool ends_output(const struct exl_job *job, int32_t t)
{
	for (int i = 0; i < job->n_eog; i++)
		if (job->eog[i] == t)
			return true;
	for (int i = 0; i < job->n_stop_tokens; i++)
		if (job->stop_tokens[i] == t)
			return true;
	return false;
}

static int32_t argmax(const float *row, int n)
{
	int32_t best = 0;

	for (int i = 1; i < n; i++)
		if (row[i] > row[best])
			best = i;
	return best;
}

/* Drops what job's draft sequence holds past the longest prefix it shares
 * with the job's tokens (a rejected proposal, a rewind), keeping at least
 * one token to feed.  Prompt positions always agree: proposals are only
 * ever fed after the last token. */
static void sync_seq(struct exl_drafter *d, struct exl_job *job)
{
	const struct exl_gen_seq *q = &job->seq[0];
	struct exl_kv_seq *s = &job->draft.kv;
	int lim = s->n_pos < q->n_tokens - 1 ? s->n_pos : q->n_tokens - 1;
	int k = q->prompt_len < lim ? q->prompt_len : lim;

	if (s->n_pos == 0 && s->n_pages == 0) {
		exl_kv_seq_share_prefix(d->kv, s, q->tokens, q->n_tokens);
		return;
	}
	while (k < lim && s->tokens[k] == q->tokens[k])
		k++;
	if (k < s->n_pos)
		exl_kv_seq_truncate(d->kv, s, k);
}

static void pass_reset(struct exl_drafter *d)
{
	d->n_tokens = d->n_seqs = d->n_rows = 0;
}

/* Adds n tokens of job's draft sequence, with logits for the last one
 * when row.  false when the drafter's cache cannot take them (the
 * sequence is given back, to be rebuilt when there is room). */
static bool pass_add(struct exl_drafter *d, struct exl_job *job, const int32_t *toks, int n,
		     bool row)
{
	struct exl_kv_seq *s = &job->draft.kv;

	if (exl_kv_seq_reserve(d->kv, s, n)) {
		exl_kv_seq_release(d->kv, s);
		return false;
	}
	int si = d->n_seqs++;

	d->seqs[si] = s;
	for (int k = 0; k < n; k++) {
		d->tokens[d->n_tokens] = toks[k];
		d->seq[d->n_tokens] = si;
		d->want[d->n_tokens] = row && k == n - 1;
		d->n_tokens++;
	}
	if (row)
		d->row_job[d->n_rows++] = job;
	return true;
}

/* Runs the pass; each row's argmax becomes its job's next proposal. */
static int pass_run(struct exl_drafter *d, char *err, size_t errlen)
{
	if (!d->n_tokens)
		return 0;
	if (d->n_rows > d->cap_rows) {
		float *l = realloc(d->logits, (size_t)d->n_rows * (size_t)d->n_vocab * sizeof(*l));

		if (!l) {
			snprintf(err, errlen, "draft model '%s': out of memory for %d rows of logits",
				 d->name, d->n_rows);
			return -1;
		}
		d->logits = l;
		d->cap_rows = d->n_rows;
	}
	struct exl_batch b = {
		.n_tokens = d->n_tokens, .tokens = d->tokens, .seq = d->seq,
		.want_logits = d->want, .n_seqs = d->n_seqs, .seqs = d->seqs,
	};
	char msg[300];

	if (exl_model_forward(d->m, d->kv, &b, d->logits, msg, sizeof(msg))) {
		snprintf(err, errlen, "draft model '%s': %s", d->name, msg);
		return -1;
	}
	for (int r = 0; r < d->n_rows; r++) {
		struct exl_job *job = d->row_job[r];

		job->draft.prop[job->draft.n_prop++] =
			argmax(d->logits + (size_t)r * (size_t)d->n_vocab, d->n_vocab);
	}
	return 0;
}

int exl_drafter_propose(struct exl_drafter *d, struct exl_job **jobs, int n, char *err,
			size_t errlen)
{
	int most = 0;

	/* First pass: each sequence catches up with its job's tokens (a
	 * prompt may take several steps, a chunk of the pass at a time:
	 * no proposal until then) and proposes its first token. */
	pass_reset(d);
	for (int i = 0; i < n; i++) {
		struct exl_job *job = jobs[i];
		const struct exl_gen_seq *q = &job->seq[0];
		int room = d->max_batch - d->n_tokens;

		job->draft.n_prop = 0;
		if (room <= 0 || job->draft.want <= 0)
			continue;
		sync_seq(d, job);
		int at = job->draft.kv.n_pos;
		int feed = q->n_tokens - at;
		bool whole = feed <= room;

		if (!whole)
			feed = room;
		if (pass_add(d, job, q->tokens + at, feed, whole) && whole &&
		    job->draft.want > most)
			most = job->draft.want;
	}
	if (pass_run(d, err, errlen))
		goto fail;
	/* Then one pass per further token, for the jobs still proposing. */
	for (int k = 1; k < most; k++) {
		pass_reset(d);
		for (int i = 0; i < n; i++) {
			struct exl_job *job = jobs[i];
			struct exl_job_draft *dr = &job->draft;

			if (dr->n_prop != k || dr->want <= k || ends_output(job, dr->prop[k - 1]))
				continue;
			pass_add(d, job, &dr->prop[k - 1], 1, true);
		}
		if (!d->n_rows)
			break;
		if (pass_run(d, err, errlen))
			goto fail;
	}
	return 0;
fail:
	for (int i = 0; i < n; i++)
		jobs[i]->draft.n_prop = 0;
	return -1;
}

int exl_draft_ngram(const int32_t *hist, int n, int max_n, int32_t *out, int want)
{
	/* Far enough back for a long prompt's repeats; a step's lookup stays
	 * a bounded scan whatever the context. */
	const int window = 1 << 18;
	int lo = n > window ? n - window : 0;

	if (want <= 0)
		return 0;
	for (int m = max_n < n - 1 ? max_n : n - 1; m >= 1; m--) {
		const int32_t *tail = hist + n - m;

		/* the latest earlier occurrence: most like what comes next */
		for (int s = n - m - 1; s >= lo; s--) {
			if (hist[s] != tail[0] || memcmp(hist + s, tail, (size_t)m * sizeof(*hist)))
				continue;
			int k = 0;

			/* never an input embedding row's key (negative): it is
			 * not a token the model could be fed */
			while (k < want && s + m + k < n && hist[s + m + k] >= 0) {
				out[k] = hist[s + m + k];
				k++;
			}
			return k;
		}
	}
	return 0;
}
