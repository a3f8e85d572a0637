/* One job's step: from the model's logits to the next token, then stop
 * tokens and strings, banned strings (rewind and resample), token healing,
 * the filter, and what text is safe to stream. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/generator/generator_internal.h"

/* A job rewinds for banned strings at most this often before giving up. */
#define MAX_REWINDS 4096

static bool in_list(const int32_t *ids, int n, int32_t t)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == t)
			return true;
	return false;
}

static bool is_eog(const struct exl_job *job, int32_t t)
{
	return in_list(job->eog, job->n_eog, t);
}

static bool is_stop_token(const struct exl_job *job, int32_t t)
{
	return (!job->ignore_eos && is_eog(job, t)) ||
	       in_list(job->stop_tokens, job->n_stop_tokens, t);
}

static void fail(struct exl_job *job, const char *what)
{
	exl_job_end(job, EXL_STOP_ERROR, what);
}

/* ---- growth ---- */

static int grow_gen(struct exl_job *job, int need)
{
	if (need <= job->cap_gen)
		return 0;
	int cap = job->cap_gen * 2 > need ? job->cap_gen * 2 : need;
	int32_t *g = realloc(job->gen, (size_t)cap * sizeof(*g));

	if (!g)
		return -1;
	job->gen = g;
	struct exl_gen_tok *gt = realloc(job->gt, (size_t)(cap + 1) * sizeof(*gt));

	if (!gt)
		return -1;
	job->gt = gt;
	if (job->probs) {
		float *p = realloc(job->probs, (size_t)cap * sizeof(*p));

		if (!p)
			return -1;
		job->probs = p;
	}
	if (job->return_top_k) {
		size_t n = (size_t)cap * (size_t)job->return_top_k;
		int32_t *ti = realloc(job->top_ids, n * sizeof(*ti));

		if (!ti)
			return -1;
		job->top_ids = ti;
		float *tp = realloc(job->top_probs, n * sizeof(*tp));

		if (!tp)
			return -1;
		job->top_probs = tp;
	}
	job->cap_gen = cap;
	return 0;
}

static int seq_push(struct exl_gen_seq *q, int32_t t)
{
	if (q->n_tokens == q->cap_tokens) {
		int cap = q->cap_tokens * 2 + 16;
		int32_t *g = realloc(q->tokens, (size_t)cap * sizeof(*g));

		if (!g)
			return -1;
		q->tokens = g;
		q->cap_tokens = cap;
	}
	q->tokens[q->n_tokens++] = t;
	return 0;
}

static int text_reserve(struct exl_job *job, size_t more)
{
	if (job->text_len + more + 1 <= job->text_cap)
		return 0;
	size_t cap = job->text_cap * 2 + more + 64;
	char *t = realloc(job->text, cap);

	if (!t)
		return -1;
	job->text = t;
	job->text_cap = cap;
	return 0;
}

/* ---- what is reported per token ---- */

static void record_probs(struct exl_job *job, int idx, int32_t t)
{
	const float *raw = job->raw;
	int n = job->n_vocab;
	float max = -INFINITY;
	double sum = 0.0;

	for (int i = 0; i < n; i++)
		if (raw[i] > max)
			max = raw[i];
	for (int i = 0; i < n; i++)
		sum += exp((double)raw[i] - max);
	if (job->probs)
		job->probs[idx] = sum > 0.0 ? (float)(exp((double)raw[t] - max) / sum) : 0.0f;

	int k = job->return_top_k;

	if (!k)
		return;
	int32_t *ids = job->top_ids + (size_t)idx * (size_t)k;
	float *ps = job->top_probs + (size_t)idx * (size_t)k;
	int have = 0;

	/* Insertion into a short sorted list; ties keep the lower id first. */
	for (int i = 0; i < n; i++) {
		float v = raw[i];

		if (have == k && !(v > raw[ids[k - 1]]))
			continue;
		int j = have < k ? have++ : k - 1;

		while (j > 0 && v > raw[ids[j - 1]]) {
			ids[j] = ids[j - 1];
			j--;
		}
		ids[j] = i;
	}
	for (int i = 0; i < have; i++)
		ps[i] = sum > 0.0 ? (float)(exp((double)raw[ids[i]] - max) / sum) : 0.0f;
	for (int i = have; i < k; i++) {
		ids[i] = -1;
		ps[i] = 0.0f;
	}
}

static int store_logits(struct exl_job *job)
{
	size_t n = (size_t)job->n_vocab;

	if (job->n_logit_rows == job->cap_logit_rows) {
		int cap = job->cap_logit_rows * 2 + 4;
		float *r = realloc(job->logit_rows, (size_t)cap * n * sizeof(*r));

		if (!r)
			return -1;
		job->logit_rows = r;
		job->cap_logit_rows = cap;
	}
	memcpy(job->logit_rows + (size_t)job->n_logit_rows * n, job->raw, n * sizeof(float));
	job->n_logit_rows++;
	return 0;
}

/* ---- masks ---- */

static int heal_candidates(struct exl_job *job)
{
	char err[128];
	int32_t *c;

	if (job->heal_cands_at == job->heal_done && job->heal_cands)
		return 0;
	int n = exl_gen_heal_candidates(job->tok, job->n_vocab, job->heal + job->heal_done,
					job->heal_len - job->heal_done, &c, err, sizeof(err));

	if (n < 0)
		return -1;
	float *v = realloc(job->heal_vals, ((size_t)n + 1) * sizeof(*v));

	if (!v) {
		free(c);
		return -1;
	}
	free(job->heal_cands);
	job->heal_cands = c;
	job->heal_vals = v;
	job->n_heal_cands = n;
	job->heal_cands_at = job->heal_done;
	return 0;
}

/* Returns 1 when the filter ends the job here, -1 on error. */
static int filter_mask(struct exl_job *job)
{
	struct exl_filter *f = job->filter;
	size_t words = ((size_t)job->n_vocab + 31) / 32;
	char err[200];

	if (job->mask_valid)
		return 0;
	bool complete = f->ops->is_complete(f);

	if (complete && f->ops->prefer_eos && f->ops->prefer_eos(f)) {
		exl_job_end(job, EXL_STOP_END_FILTER, NULL);
		return 1;
	}
	memset(job->filter_mask, 0, words * sizeof(*job->filter_mask));
	if (f->ops->allowed(f, job->filter_mask, job->n_vocab, err, sizeof(err))) {
		char msg[256];

		snprintf(msg, sizeof(msg), "filter: %s", err);
		fail(job, msg);
		return -1;
	}
	bool any = false;

	for (size_t i = 0; i < words && !any; i++)
		any = job->filter_mask[i] != 0;
	if (!any) {
		if (complete) {
			exl_job_end(job, EXL_STOP_END_FILTER, NULL);
			return 1;
		}
		fail(job, "the filter allows no token and is not complete");
		return -1;
	}
	if (complete)
		for (int i = 0; i < job->n_eog; i++)
			if (job->eog[i] >= 0 && job->eog[i] < job->n_vocab)
				job->filter_mask[job->eog[i] >> 5] |= 1u << (job->eog[i] & 31);
	job->mask_valid = true;
	return 0;
}

/* Masks what may not come next.  Returns 1 when the job ended, -1 on
 * error. */
static int apply_masks(struct exl_job *job, float *w)
{
	int pos = job->n_gen;

	for (int i = 0; i < job->n_bans; i++)
		if (job->bans[i].pos == pos)
			w[job->bans[i].token] = -INFINITY;
	if (pos < job->min_new_tokens) {
		for (int i = 0; i < job->n_eog; i++)
			if (job->eog[i] >= 0 && job->eog[i] < job->n_vocab)
				w[job->eog[i]] = -INFINITY;
		for (int i = 0; i < job->n_stop_tokens; i++)
			w[job->stop_tokens[i]] = -INFINITY;
	}
	if (job->ignore_eos) {
		for (int i = 0; i < job->n_eog; i++)
			if (job->eog[i] >= 0 && job->eog[i] < job->n_vocab &&
			    !in_list(job->stop_tokens, job->n_stop_tokens, job->eog[i]) &&
			    !(job->filter && job->filter->ops->is_complete(job->filter)))
				w[job->eog[i]] = -INFINITY;
	}
	if (job->filter) {
		int r = filter_mask(job);

		if (r)
			return r;
		for (int i = 0; i < job->n_vocab; i++)
			if (!((job->filter_mask[i >> 5] >> (i & 31)) & 1u))
				w[i] = -INFINITY;
	}
	if (job->heal && job->heal_done < job->heal_len) {
		if (heal_candidates(job)) {
			fail(job, "out of memory for token healing");
			return -1;
		}
		for (int i = 0; i < job->n_heal_cands; i++)
			job->heal_vals[i] = w[job->heal_cands[i]];
		for (int i = 0; i < job->n_vocab; i++)
			w[i] = -INFINITY;
		for (int i = 0; i < job->n_heal_cands; i++)
			w[job->heal_cands[i]] = job->heal_vals[i];
	}
	return 0;
}

/* ---- text ---- */

/* Appends decoder output, dropping the healed bytes the prompt text lacks
 * (heal_skip); the healed bytes it shows stay, for stop and banned strings
 * to see (text_base). */
static int append_text(struct exl_job *job, const char *s, size_t n)
{
	size_t skip = 0;

	if (job->detok_out < job->heal_skip) {
		skip = job->heal_skip - job->detok_out;
		if (skip > n)
			skip = n;
	}
	job->detok_out += n;
	if (text_reserve(job, n - skip))
		return -1;
	memcpy(job->text + job->text_len, s + skip, n - skip);
	job->text_len += n - skip;
	job->text[job->text_len] = 0;
	return 0;
}

static int push_detok(struct exl_job *job, int32_t t, bool flush)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int r = flush ? exl_detok_flush(&job->detok, &buf, &len, &cap) :
			exl_detok_push(&job->detok, t, &buf, &len, &cap);

	if (!r && len)
		r = append_text(job, buf, len);
	free(buf);
	return r;
}

/* Earliest occurrence of any string of set in text[from..); -1 if none. */
static long find_first(const struct exl_job *job, const struct exl_gen_strings *set,
		       size_t from, int *which)
{
	long best = -1;

	/* nothing to search (and no text buffer yet: memmem must not see NULL) */
	if (!job->text || from >= job->text_len)
		return -1;
	for (int i = 0; i < set->n; i++) {
		const char *hit = memmem(job->text + from, job->text_len - from, set->s[i], set->len[i]);

		if (hit && (best < 0 || hit - job->text < best)) {
			best = hit - job->text;
			*which = i;
		}
	}
	return best;
}

/* Where text that could begin a string of set starts (text_len if none),
 * looking no earlier than from. */
static size_t hold_point(const struct exl_job *job, const struct exl_gen_strings *set, size_t from)
{
	size_t best = job->text_len;

	for (int i = 0; i < set->n; i++) {
		size_t l = set->len[i];
		size_t p = job->text_len > l - 1 ? job->text_len - (l - 1) : 0;

		if (p < from)
			p = from;
		for (; p < best; p++)
			if (job->text[p] == set->s[i][0] &&
			    !memcmp(job->text + p, set->s[i], job->text_len - p))
				break;
		if (p < best)
			best = p;
	}
	return best;
}

/* ---- characters spread over tokens (byte fallback, byte-level BPE) ---- */

/* Bytes token t feeds the decoder. */
static size_t piece_len(const struct exl_job *job, int32_t t)
{
	return exl_token_bytes(job->tok, t, job->decode_special, NULL, 0);
}

/* Bytes of an incomplete character the decoder holds after token i. */
static int held_after(const struct exl_job *job, int i)
{
	return i + 1 < job->n_gen ? job->gt[i + 1].detok.npend : job->detok.npend;
}

/* Whether all of token i's bytes are out of the decoder: nothing was held
 * after it, or a later token made the decoder give the held bytes out (as
 * their character or as U+FFFD).  Until then they are held only while the
 * held count grows by exactly the bytes fed since. */
static bool token_text_done(const struct exl_job *job, int i)
{
	size_t held = (size_t)held_after(job, i);

	for (int j = i + 1; held > 0 && j < job->n_gen; j++) {
		held += piece_len(job, job->gen[j]);
		if ((size_t)held_after(job, j) != held || held > 4)
			return true;
	}
	return held == 0;
}

/* The token in which the bytes the decoder held before token k began:
 * they are the last bytes fed, so walk back over the tokens' lengths. */
static int held_bytes_start(const struct exl_job *job, int k)
{
	size_t need = (size_t)job->gt[k].detok.npend;
	int j = k - 1;

	for (; j > 0; j--) {
		size_t n = piece_len(job, job->gen[j]);

		if (n >= need)
			break;
		need -= n;
	}
	return j;
}

static void advance_released_tokens(struct exl_job *job)
{
	while (job->released_tokens < job->n_gen &&
	       job->gt[job->released_tokens].text_end <= job->released &&
	       token_text_done(job, job->released_tokens))
		job->released_tokens++;
}

static void release(struct exl_job *job)
{
	if (job->reason != EXL_STOP_NONE) {
		job->released = job->text_len;
		job->released_tokens = job->n_gen;
		return;
	}
	size_t r = job->text_len;
	size_t h;

	if (job->n_gen >= job->min_new_tokens) {
		h = hold_point(job, &job->stop, job->released);
		if (h < r)
			r = h;
	}
	h = hold_point(job, &job->banned, job->released);
	if (h < r)
		r = h;
	if (job->banned.n) {
		/* A rewind goes back to a token's start: never stream part of
		 * a token that may be taken back (also one whose last bytes
		 * the decoder still holds, see rewind_to). */
		size_t b = job->released;

		for (int i = job->released_tokens; i < job->n_gen; i++) {
			if (job->gt[i].text_end > r || !token_text_done(job, i))
				break;
			b = job->gt[i].text_end;
		}
		r = b;
	}
	if (r > job->released)
		job->released = r;
	advance_released_tokens(job);
}

/* ---- rewinding for banned strings ---- */

static int add_ban(struct exl_job *job, int pos, int32_t t)
{
	int w = 0;

	for (int i = 0; i < job->n_bans; i++)
		if (job->bans[i].pos <= pos)
			job->bans[w++] = job->bans[i];
	job->n_bans = w;
	if (job->n_bans == job->cap_bans) {
		int cap = job->cap_bans * 2 + 8;
		struct exl_gen_ban *b = realloc(job->bans, (size_t)cap * sizeof(*b));

		if (!b)
			return -1;
		job->bans = b;
		job->cap_bans = cap;
	}
	job->bans[job->n_bans].pos = pos;
	job->bans[job->n_bans].token = t;
	job->n_bans++;
	return 0;
}

static void rewind_to(struct exl_job *job, size_t offset)
{
	int k = job->released_tokens;
	char err[200];

	while (k < job->n_gen && job->gt[k].text_end <= offset)
		k++;
	/* When the banned text starts with a character whose first bytes
	 * came in earlier tokens, it begins in the token that fed the first
	 * of them: banning only token k would keep those bytes. */
	if (k > 0 && k < job->n_gen && job->gt[k].detok.npend > 0 &&
	    job->gt[k - 1].text_end == offset) {
		int start = held_bytes_start(job, k);

		if (start >= job->released_tokens)
			k = start;
	}
	if (k >= job->n_gen) {
		fail(job, "banned string outside the generated tokens");
		return;
	}
	if (++job->n_rewinds > MAX_REWINDS) {
		fail(job, "banned strings: too many rewinds (every continuation hits one)");
		return;
	}
	if (add_ban(job, k, job->gen[k])) {
		fail(job, "out of memory for banned strings");
		return;
	}
	const struct exl_gen_tok *g = &job->gt[k];

	job->text_len = k > 0 ? job->gt[k - 1].text_end : 0;
	if (job->text)
		job->text[job->text_len] = 0;
	job->detok = g->detok;
	job->detok_out = g->detok_out;
	job->heal_done = g->heal_done;
	exl_sampler_set_mirostat_mu(job->sampler, g->mu);
	if (job->return_logits)
		job->n_logit_rows = k - job->delivered_tokens;
	job->n_gen = k;
	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];

		q->n_tokens = q->prompt_len + k;
		if (q->kv.n_pos > q->n_tokens - 1)
			exl_kv_seq_truncate(job->kv, &q->kv, q->n_tokens - 1);
	}
	job->mask_valid = false;
	if (job->filter) {
		struct exl_filter *f = job->filter;

		if (f->ops->reset(f, err, sizeof(err)))
			goto filter_fail;
		for (int i = 0; i < k; i++)
			if (f->ops->accept(f, job->gen[i], err, sizeof(err)))
				goto filter_fail;
		job->filter_n = k;
	}
	return;
filter_fail:
	{
		char msg[256];

		snprintf(msg, sizeof(msg), "filter (replaying after a rewind): %s", err);
		fail(job, msg);
	}
}

/* ---- accepting a token ---- */

static void check_filter_end(struct exl_job *job)
{
	struct exl_filter *f = job->filter;

	if (!f || !f->ops->is_complete(f))
		return;
	/* filter_mask() ends the job when it prefers to or cannot go on,
	 * without another forward pass. */
	filter_mask(job);
}

static void accept(struct exl_job *job, int32_t t, float mu_before)
{
	int idx = job->n_gen;

	if (grow_gen(job, idx + 1)) {
		fail(job, "out of memory for the output");
		return;
	}
	struct exl_gen_tok *g = &job->gt[idx];

	g->detok = job->detok;
	g->detok_out = job->detok_out;
	g->mu = mu_before;
	g->heal_done = job->heal_done;
	g->released = job->released;
	g->released_tokens = job->released_tokens;
	if (job->return_probs || job->return_top_k)
		record_probs(job, idx, t);
	if (job->return_logits && store_logits(job)) {
		fail(job, "out of memory for the logits");
		return;
	}
	job->gen[idx] = t;
	job->n_gen = idx + 1;
	g->text_end = job->text_len;

	if (is_stop_token(job, t)) {
		job->stop_token = t;
		exl_job_end(job, EXL_STOP_TOKEN, NULL);
		goto finish;
	}
	for (int i = 0; i < job->n_seqs; i++) {
		if (seq_push(&job->seq[i], t)) {
			fail(job, "out of memory for the sequence");
			return;
		}
	}
	if (job->filter) {
		char err[200];

		job->mask_valid = false;
		if (job->filter->ops->accept(job->filter, t, err, sizeof(err))) {
			char msg[256];

			snprintf(msg, sizeof(msg), "filter: %s", err);
			fail(job, msg);
			return;
		}
		job->filter_n = job->n_gen;
	}
	if (job->heal && job->heal_done < job->heal_len) {
		char buf[512];
		size_t n = exl_token_bytes(job->tok, t, false, buf, sizeof(buf));
		size_t left = job->heal_len - job->heal_done;

		job->heal_done += n < left ? n : left;
	}
	if (push_detok(job, t, false)) {
		fail(job, "out of memory for the text");
		return;
	}
	g->text_end = job->text_len;

	/* Stop strings and banned strings, whichever starts first. */
	int si = -1, bi = -1;
	long os = job->n_gen >= job->min_new_tokens ?
		  find_first(job, &job->stop, job->released, &si) : -1;
	long ob = find_first(job, &job->banned, job->released, &bi);

	if (os >= 0 && (ob < 0 || os <= ob)) {
		job->text_len = (size_t)os;
		job->text[job->text_len] = 0;
		job->stop_string = si;
		exl_job_end(job, EXL_STOP_STRING, NULL);
		goto finish;
	}
	if (ob >= 0) {
		rewind_to(job, (size_t)ob);
		if (job->reason != EXL_STOP_NONE)
			goto finish;
		return;
	}
	if (job->n_gen >= job->max_new_tokens) {
		exl_job_end(job, EXL_STOP_MAX_NEW_TOKENS, NULL);
	} else if (job->n_gen >= job->gen_limit) {
		exl_job_end(job, EXL_STOP_MAX_CONTEXT, NULL);
	} else {
		check_filter_end(job);
	}
finish:
	if (job->reason != EXL_STOP_NONE && job->reason != EXL_STOP_STRING &&
	    job->reason != EXL_STOP_ERROR && push_detok(job, -1, true))
		fail(job, "out of memory for the text");
	release(job);
}

/* The first logit that is NaN or infinite, or -1.  The scan tests
 * exponent bits (all ones: inf or NaN) into one flag, which vectorizes, and
 * only looks for the index when the flag is set. */
static int first_nonfinite(const float *x, int n)
{
	uint32_t any = 0;

	for (int i = 0; i < n; i++) {
		uint32_t b;

		memcpy(&b, &x[i], sizeof(b));
		any |= (b & 0x7f800000u) == 0x7f800000u;
	}
	if (!any)
		return -1;
	for (int i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return i;
	return -1;
}

/* Ends the job when the model's logits are not all finite: sampling NaN
 * would otherwise find no token it can pick and blame bans and filters. */
static bool logits_bad(struct exl_job *job, const float *x, const char *which)
{
	int i = first_nonfinite(x, job->n_vocab);
	char msg[256];

	if (i < 0)
		return false;
	snprintf(msg, sizeof(msg), "the model produced %s logits at output token %d%s (the first "
		 "at vocabulary id %d): a weight or activation is not finite",
		 isnan(x[i]) ? "NaN" : "infinite", job->n_gen, which, i);
	fail(job, msg);
	release(job);
	return true;
}

/* The model's logits for the next token, CFG mixed, into job->work with
 * every mask applied.  1 when the job ended here (the filter), -1 when it
 * failed, else 0. */
static int masked_logits(struct exl_job *job, const float *cond, const float *neg)
{
	float *w = job->work;
	int n = job->n_vocab;

	if (logits_bad(job, cond, "") || (neg && logits_bad(job, neg, " for the negative prompt")))
		return -1;
	if (neg && job->cfg_scale != 1.0f) {
		float s = job->cfg_scale;

		for (int i = 0; i < n; i++)
			w[i] = neg[i] + s * (cond[i] - neg[i]);
	} else {
		memcpy(w, cond, (size_t)n * sizeof(*w));
	}
	if (job->raw)
		memcpy(job->raw, w, (size_t)n * sizeof(*w));
	return apply_masks(job, w);
}

void exl_job_advance(struct exl_job *job, const float *cond, const float *neg)
{
	float *w = job->work;

	if (job->reason != EXL_STOP_NONE)
		return;
	if (job->n_gen >= job->max_new_tokens || job->n_gen >= job->gen_limit) {
		exl_job_end(job, job->n_gen >= job->max_new_tokens ? EXL_STOP_MAX_NEW_TOKENS :
			    EXL_STOP_MAX_CONTEXT, NULL);
		release(job);
		return;
	}
	if (masked_logits(job, cond, neg)) {
		release(job);
		return;
	}
	float mu = exl_sampler_mirostat_mu(job->sampler);
	const struct exl_gen_seq *q = &job->seq[0];
	int32_t t = exl_sampler_sample(job->sampler, w, q->tokens, q->n_tokens, &job->rng);

	if (t < 0) {
		char msg[160];

		snprintf(msg, sizeof(msg), "no token is allowed at output position %d "
			 "(bans, filter and healing exclude all)", job->n_gen);
		fail(job, msg);
		release(job);
		return;
	}
	if (job->t_first == 0.0)
		job->t_first = exl_now_s();
	accept(job, t, mu);
}

/* ---- the job as a cursor (beam search) ---- */

int exl_job_cursor_truncate(struct exl_job *job, int n)
{
	struct exl_filter *f = job->filter;
	char err[200];

	if (n < 0 || n > job->n_gen)
		n = job->n_gen;
	/* A stop string cut the text where it began, with a NUL over its
	 * first byte, which may lie in the text of tokens kept. */
	if (job->reason == EXL_STOP_STRING && job->stop_string >= 0 && job->text)
		job->text[job->text_len] = job->stop.s[job->stop_string][0];
	/* What accept() changed since token n, as rewind_to undoes it, and
	 * the end it may have set. */
	job->text_len = n > 0 ? job->gt[n - 1].text_end : 0;
	if (job->text)
		job->text[job->text_len] = 0;
	if (n < job->n_gen) {
		const struct exl_gen_tok *g = &job->gt[n];

		job->detok = g->detok;
		job->detok_out = g->detok_out;
		job->heal_done = g->heal_done;
		job->released = g->released;
		job->released_tokens = g->released_tokens;
		job->n_gen = n;
	}
	for (int i = 0; i < job->n_seqs; i++)
		job->seq[i].n_tokens = job->seq[i].prompt_len + n;
	job->reason = EXL_STOP_NONE;
	if (job->state == EXL_JOB_ENDING)
		job->state = EXL_JOB_RUNNING;
	job->stop_token = -1;
	job->stop_string = -1;
	job->error[0] = 0;
	job->n_bans = 0;
	job->n_rewinds = 0;
	job->mask_valid = false;
	if (!f || job->filter_n == n)
		return 0;
	if (f->ops->reset(f, err, sizeof(err)))
		goto filter_fail;
	for (int i = 0; i < n; i++)
		if (f->ops->accept(f, job->gen[i], err, sizeof(err)))
			goto filter_fail;
	job->filter_n = n;
	return 0;
filter_fail:
	{
		char msg[256];

		snprintf(msg, sizeof(msg), "filter (replaying a beam): %s", err);
		fail(job, msg);
		return -1;
	}
}

void exl_job_cursor_accept(struct exl_job *job, int32_t t)
{
	accept(job, t, exl_sampler_mirostat_mu(job->sampler));
}

int exl_job_cursor_set(struct exl_job *job, const int32_t *toks, int n)
{
	int c = 0;

	while (c < n && c < job->n_gen && job->gen[c] == toks[c])
		c++;
	if ((c < job->n_gen || job->reason != EXL_STOP_NONE) && exl_job_cursor_truncate(job, c))
		return -1;
	for (int i = c; i < n; i++) {
		accept(job, toks[i], exl_sampler_mirostat_mu(job->sampler));
		if (job->reason != EXL_STOP_NONE || job->n_gen != i + 1)
			break;
	}
	return job->reason == EXL_STOP_ERROR ? -1 : 0;
}

int exl_job_cursor_masked(struct exl_job *job, const float *cond, const float *neg)
{
	return masked_logits(job, cond, neg);
}

void exl_job_cursor_release(struct exl_job *job)
{
	release(job);
}

bool exl_job_deliver(struct exl_job *job)
{
	struct exl_chunk c;
	int nt = job->released_tokens - job->delivered_tokens;
	/* released may stay below delivered's start, text_base: a stop string
	 * that begins in the healed text */
	size_t nb = job->released > job->delivered ? job->released - job->delivered : 0;
	int k = job->return_top_k;

	if (atomic_load(&job->paused))
		return false;
	if ((nb == 0 && nt == 0) || job->hold_output)
		return true;
	memset(&c, 0, sizeof(c));
	c.text = job->text ? job->text + job->delivered : "";
	c.text_len = nb;
	c.tokens = job->gen + job->delivered_tokens;
	c.n_tokens = nt;
	c.probs = job->return_probs ? job->probs + job->delivered_tokens : NULL;
	c.top_k = k;
	c.top_ids = k ? job->top_ids + (size_t)job->delivered_tokens * (size_t)k : NULL;
	c.top_probs = k ? job->top_probs + (size_t)job->delivered_tokens * (size_t)k : NULL;
	c.logits = job->return_logits ? job->logit_rows : NULL;
	c.n_vocab = job->n_vocab;
	c.last = job->state == EXL_JOB_ENDING;

	/* Paused until the consumer says otherwise: a resume that races with
	 * this call then wins, and at worst the chunk is offered again. */
	atomic_store(&job->paused, true);
	if (job->cb.on_chunk(job, &c, job->user) == EXL_CHUNK_PAUSE)
		return false;
	atomic_store(&job->paused, false);
	job->delivered += nb;
	job->delivered_tokens = job->released_tokens;
	if (job->return_logits && nt) {
		size_t row = (size_t)job->n_vocab;

		memmove(job->logit_rows, job->logit_rows + (size_t)nt * row,
			(size_t)(job->n_logit_rows - nt) * row * sizeof(float));
		job->n_logit_rows -= nt;
	}
	return true;
}
