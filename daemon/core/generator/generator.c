/* Jobs: settings, creation (prompt tokenization, token healing set-up,
 * copies of every option), the end and the result. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "daemon/core/generator/generator_internal.h"
#include "daemon/core/grammar/grammar_filter.h"
#include "daemon/core/model/model.h"

static const char *const reason_names[] = {
	[EXL_STOP_NONE] = "none",
	[EXL_STOP_TOKEN] = "stop_token",
	[EXL_STOP_STRING] = "stop_string",
	[EXL_STOP_MAX_NEW_TOKENS] = "max_new_tokens",
	[EXL_STOP_MAX_CONTEXT] = "max_context",
	[EXL_STOP_END_FILTER] = "end_filter",
	[EXL_STOP_CANCELLED] = "cancelled",
	[EXL_STOP_UNLOADED] = "unloaded",
	[EXL_STOP_SHUTDOWN] = "shutdown",
	[EXL_STOP_ERROR] = "error",
};

const char *exl_stop_reason_name(enum exl_stop_reason r)
{
	if ((unsigned)r >= sizeof(reason_names) / sizeof(reason_names[0]))
		return "unknown";
	return reason_names[r];
}

void exl_gen_settings_init(struct exl_gen_settings *s)
{
	memset(s, 0, sizeof(*s));
	s->add_bos = -1;
	s->max_new_tokens = 256;
	exl_sampler_params_init(&s->sampling);
	s->cfg_scale = 1.0f;
	s->draft_tokens = 4;
	s->length_penalty = 1.0f;
}

static bool utf8_complete(const char *s, size_t n)
{
	return exl_utf8_bad_at(s, n) == n;
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

/* Speculative decoding and beam search. */
static int check_search(const struct exl_gen_settings *s, char *err, size_t errlen)
{
	if (s->draft_tokens < 1 || s->draft_tokens > EXL_GEN_MAX_DRAFT_TOKENS)
		FAIL("draft_tokens must be in [1, %d] (got %d)", EXL_GEN_MAX_DRAFT_TOKENS,
		     s->draft_tokens);
	if (s->ngram_draft < 0 || s->ngram_draft > EXL_GEN_MAX_NGRAM_DRAFT)
		FAIL("ngram_draft must be in [0, %d] (got %d)", EXL_GEN_MAX_NGRAM_DRAFT,
		     s->ngram_draft);
	if (s->draft_model) {
		size_t n = strnlen(s->draft_model, EXL_GEN_MAX_DRAFT_NAME + 1);

		if (n == 0 || n > EXL_GEN_MAX_DRAFT_NAME)
			FAIL("draft_model must be a name of 1 to %d bytes", EXL_GEN_MAX_DRAFT_NAME);
		if (s->ngram_draft)
			FAIL("give at most one of draft_model and ngram_draft");
	}
	if (s->num_beams < 0 || s->num_beams > EXL_GEN_MAX_BEAMS)
		FAIL("num_beams must be in [0, %d] (got %d)", EXL_GEN_MAX_BEAMS, s->num_beams);
	if (!isfinite(s->length_penalty) || s->length_penalty < -10.0f ||
	    s->length_penalty > 10.0f)
		FAIL("length_penalty must be in [-10, 10] (got %g)", (double)s->length_penalty);
	if (!s->num_beams)
		return 0;
	/* A beam job is already deterministic and one sequence per beam;
	 * these would need a second meaning per beam. */
	if (s->draft_model || s->ngram_draft)
		FAIL("num_beams does not combine with draft_model or ngram_draft");
	if (s->return_probs || s->return_top_k || s->return_logits)
		FAIL("num_beams does not combine with return_probs, return_top_k or "
		     "return_logits");
	return 0;
fail:
	return -1;
}

static int check_settings(const struct exl_gen_settings *s, int n_vocab, char *err, size_t errlen)
{
	if (s->add_bos < -1 || s->add_bos > 1)
		FAIL("add_bos must be -1 (model default), 0 or 1 (got %d)", s->add_bos);
	if (s->max_new_tokens < 0 || s->max_new_tokens > 1 << 24)
		FAIL("max_new_tokens must be in [0, 16777216] (got %d)", s->max_new_tokens);
	if (s->min_new_tokens < 0 || s->min_new_tokens > s->max_new_tokens)
		FAIL("min_new_tokens must be in [0, max_new_tokens = %d] (got %d)",
		     s->max_new_tokens, s->min_new_tokens);
	if (s->n_stop_tokens < 0 || s->n_stop_tokens > EXL_GEN_MAX_STOP_TOKENS ||
	    (s->n_stop_tokens && !s->stop_tokens))
		FAIL("at most %d stop tokens (got %d)", EXL_GEN_MAX_STOP_TOKENS, s->n_stop_tokens);
	for (int i = 0; i < s->n_stop_tokens; i++)
		if (s->stop_tokens[i] < 0 || s->stop_tokens[i] >= n_vocab)
			FAIL("stop token %d out of range (vocabulary has %d tokens)",
			     (int)s->stop_tokens[i], n_vocab);
	if (s->n_stop_strings < 0 || s->n_stop_strings > EXL_GEN_MAX_STOP_STRINGS ||
	    (s->n_stop_strings && !s->stop_strings))
		FAIL("at most %d stop strings (got %d)", EXL_GEN_MAX_STOP_STRINGS, s->n_stop_strings);
	for (int i = 0; i < s->n_stop_strings; i++) {
		size_t n = s->stop_strings[i] ? strnlen(s->stop_strings[i], EXL_GEN_MAX_STRING_LEN + 1) : 0;

		if (n == 0 || n > EXL_GEN_MAX_STRING_LEN)
			FAIL("stop string %d must be 1 to %d bytes", i, EXL_GEN_MAX_STRING_LEN);
		/* The output is whole characters: a string that is not could
		 * match inside one and cut it. */
		if (!utf8_complete(s->stop_strings[i], n))
			FAIL("stop string %d is not valid UTF-8 (bad byte at offset %zu)", i,
			     exl_utf8_bad_at(s->stop_strings[i], n));
	}
	if (s->n_banned_strings < 0 || s->n_banned_strings > EXL_GEN_MAX_BANNED ||
	    (s->n_banned_strings && !s->banned_strings))
		FAIL("at most %d banned strings (got %d)", EXL_GEN_MAX_BANNED, s->n_banned_strings);
	for (int i = 0; i < s->n_banned_strings; i++) {
		size_t n = s->banned_strings[i] ?
			   strnlen(s->banned_strings[i], EXL_GEN_MAX_STRING_LEN + 1) : 0;

		if (n == 0 || n > EXL_GEN_MAX_STRING_LEN)
			FAIL("banned string %d must be 1 to %d bytes", i, EXL_GEN_MAX_STRING_LEN);
		if (!utf8_complete(s->banned_strings[i], n))
			FAIL("banned string %d is not valid UTF-8 (bad byte at offset %zu)", i,
			     exl_utf8_bad_at(s->banned_strings[i], n));
	}
	if (!isfinite(s->cfg_scale) || s->cfg_scale < -100.0f || s->cfg_scale > 100.0f)
		FAIL("cfg_scale must be in [-100, 100] (got %g)", (double)s->cfg_scale);
	if (s->return_top_k < 0 || s->return_top_k > EXL_GEN_MAX_TOP_PROBS)
		FAIL("return_top_k must be in [0, %d] (got %d)", EXL_GEN_MAX_TOP_PROBS,
		     s->return_top_k);
	if (s->sampling.n_bias > EXL_GEN_MAX_BIAS)
		FAIL("at most %d token biases (got %d)", EXL_GEN_MAX_BIAS, s->sampling.n_bias);
	if ((s->grammar != NULL) + (s->json_schema != NULL) + (s->regex != NULL) +
	    (s->filter != NULL) > 1)
		FAIL("give at most one of grammar, json_schema, regex and filter");
	if (check_search(s, err, errlen))
		goto fail;
	return exl_sampler_params_check(&s->sampling, n_vocab, err, errlen);
fail:
	return -1;
}

static int copy_strings(struct exl_gen_strings *d, const char *const *src, int n)
{
	if (n == 0)
		return 0;
	d->s = calloc((size_t)n, sizeof(*d->s));
	d->len = calloc((size_t)n, sizeof(*d->len));
	if (!d->s || !d->len)
		return -1;
	d->n = n;
	for (int i = 0; i < n; i++) {
		d->s[i] = strdup(src[i]);
		if (!d->s[i])
			return -1;
		d->len[i] = strlen(src[i]);
	}
	return 0;
}

static void free_strings(struct exl_gen_strings *d)
{
	for (int i = 0; i < d->n; i++)
		free(d->s[i]);
	free(d->s);
	free(d->len);
	memset(d, 0, sizeof(*d));
}

static int seq_set(struct exl_gen_seq *q, int32_t *ids, int n)
{
	exl_kv_seq_init(&q->kv);
	q->tokens = ids;
	q->n_tokens = n;
	q->cap_tokens = n;
	q->prompt_len = n;
	return 0;
}

/* A fill-in-the-middle prompt: [BOS] PRE prefix SUF suffix MID, the
 * order llama.cpp's infill and the FIM-trained code models (Qwen2.5-Coder,
 * CodeLlama, StarCoder2, DeepSeek-Coder, Codestral) use.  Sets the prefix's
 * first index and the suffix token's; the array is malloc'ed. */
static int fim_ids(const struct exl_tokenizer *tok, const struct exl_gen_settings *s,
		   const struct exl_prompt *p, int32_t **out, int *prefix_at, int *suffix_at,
		   char *err, size_t errlen)
{
	int32_t fim[3], *pre = NULL, *suf = NULL;
	bool bos = s->add_bos < 0 ? exl_tokenizer_add_bos(tok) : s->add_bos == 1;
	int np, ns, n = 0;

	*out = NULL;
	if (!exl_tokenizer_fim(tok, fim)) {
		snprintf(err, errlen, "the model has no fill-in-the-middle tokens (prefix, suffix "
			 "and middle), so it takes no suffix");
		return -1;
	}
	if (p->ids || (!p->text && p->len) || (!s->fim_suffix && s->fim_suffix_len)) {
		snprintf(err, errlen, "a suffix needs a text prompt and text suffix");
		return -1;
	}
	np = exl_tok_encode(tok, p->text ? p->text : "", p->len, false, s->encode_special_tokens,
			    &pre, err, errlen);
	if (np < 0)
		return -1;
	ns = exl_tok_encode(tok, s->fim_suffix ? s->fim_suffix : "", s->fim_suffix_len, false,
			    s->encode_special_tokens, &suf, err, errlen);
	if (ns < 0) {
		free(pre);
		return -1;
	}
	*out = malloc(((size_t)np + (size_t)ns + 4) * sizeof(**out));
	if (!*out) {
		free(pre);
		free(suf);
		snprintf(err, errlen, "out of memory for the prompt");
		return -1;
	}
	if (bos && exl_tokenizer_bos(tok) >= 0)
		(*out)[n++] = exl_tokenizer_bos(tok);
	(*out)[n++] = fim[0];
	*prefix_at = n;
	if (np)
		memcpy(*out + n, pre, (size_t)np * sizeof(**out));
	n += np;
	*suffix_at = n;
	(*out)[n++] = fim[1];
	if (ns)
		memcpy(*out + n, suf, (size_t)ns * sizeof(**out));
	n += ns;
	(*out)[n++] = fim[2];
	free(pre);
	free(suf);
	return n;
}

/* Token ids of a prompt; the array is malloc'ed. */
static int prompt_ids(const struct exl_tokenizer *tok, const struct exl_gen_settings *s,
		      const struct exl_prompt *p, int n_vocab, int32_t **out,
		      char *err, size_t errlen)
{
	*out = NULL;
	if (p->ids) {
		if (p->n_ids <= 0 || p->n_ids > 1 << 24) {
			snprintf(err, errlen, "prompt has %d token ids; 1 to %d allowed", p->n_ids,
				 1 << 24);
			return -1;
		}
		for (int i = 0; i < p->n_ids; i++) {
			if (p->ids[i] < 0 || p->ids[i] >= n_vocab) {
				snprintf(err, errlen, "prompt token %d (at %d) out of range "
					 "(vocabulary has %d tokens)", (int)p->ids[i], i, n_vocab);
				return -1;
			}
		}
		*out = malloc((size_t)p->n_ids * sizeof(**out));
		if (!*out) {
			snprintf(err, errlen, "out of memory for the prompt");
			return -1;
		}
		memcpy(*out, p->ids, (size_t)p->n_ids * sizeof(**out));
		return p->n_ids;
	}
	if (!p->text && p->len) {
		snprintf(err, errlen, "prompt text missing");
		return -1;
	}
	bool bos = s->add_bos < 0 ? exl_tokenizer_add_bos(tok) : s->add_bos == 1;
	int n = exl_tok_encode(tok, p->text ? p->text : "", p->len, bos, s->encode_special_tokens,
			     out, err, errlen);

	if (n < 0)
		return -1;
	if (n == 0) {
		free(*out);
		*out = NULL;
		snprintf(err, errlen, "the prompt is empty (no tokens and no BOS)");
		return -1;
	}
	return n;
}


/* Token healing: removes the prompt's last tokens and keeps their text as
 * the constraint.  As many trailing tokens go (up to HEAL_MAX_TOKENS) as
 * still form the start of some vocabulary token, so "a ti" tokenized
 * " t" "i" heals to " ti" and can become " time". */
#define HEAL_MAX_TOKENS 8
#define HEAL_MAX_BYTES 256

/* The healed bytes are generated text (stop and banned strings see them),
 * and the prompt text already shows them: the generated text starts with
 * the part of heal the prompt text ends with (all of it, but for the space
 * SentencePiece puts before a first word, which the prompt lacks). */
static int heal_text(struct exl_job *job, char *err, size_t errlen)
{
	const char *p = job->prompt_text;
	size_t np = job->prompt_text_len, skip = 0;

	while (skip < job->heal_len) {
		size_t n = job->heal_len - skip;

		if (n <= np && !memcmp(p + np - n, job->heal + skip, n))
			break;
		skip++;
	}
	job->heal_skip = skip;
	job->text_base = job->heal_len - skip;
	job->delivered = job->text_base;
	/* Every continuation spells the healed bytes, so a banned string
	 * among them could only end the job in an error. */
	for (int i = 0; i < job->banned.n; i++) {
		if (job->banned.len[i] <= job->text_base &&
		    memmem(job->heal + skip, job->text_base, job->banned.s[i], job->banned.len[i])) {
			snprintf(err, errlen, "banned string %d is in the prompt text token healing "
				 "regenerates ('%.*s'), so no output can avoid it", i,
				 (int)job->text_base, job->heal + skip);
			return -1;
		}
	}
	return 0;
}

static int setup_healing(struct exl_job *job, char *err, size_t errlen)
{
	struct exl_gen_seq *q = &job->seq[0];
	char text[HEAL_MAX_BYTES], buf[HEAL_MAX_BYTES];
	size_t len = 0, best_len = 0;
	int best = 0;

	for (int k = 1; k <= HEAL_MAX_TOKENS && k < q->n_tokens; k++) {
		int32_t t = q->tokens[q->n_tokens - k];

		if (t < 0 || exl_tokenizer_is_special(job->tok, t))
			break;
		size_t n = exl_token_bytes(job->tok, t, false, buf, sizeof(buf));

		if (n == 0 || n > sizeof(buf) || len + n > sizeof(text))
			break;
		memmove(text + n, text, len);
		memcpy(text, buf, n);
		len += n;
		if (!utf8_complete(text, len))
			continue;
		if (!exl_gen_vocab_has_prefix(job->tok, job->n_vocab, text, len))
			break;
		best = k;
		best_len = len;
	}
	if (!best)
		return 0;
	job->heal = malloc(best_len);
	if (!job->heal) {
		snprintf(err, errlen, "out of memory for token healing");
		return -1;
	}
	memcpy(job->heal, text + (len - best_len), best_len);
	job->heal_len = best_len;
	q->n_tokens -= best;
	q->prompt_len -= best;
	int nc = exl_gen_heal_candidates(job->tok, job->n_vocab, job->heal, best_len,
					 &job->heal_cands, err, errlen);

	if (nc < 0)
		return -1;
	job->n_heal_cands = nc;
	job->heal_cands_at = 0;
	job->heal_vals = malloc(((size_t)nc + 1) * sizeof(*job->heal_vals));
	if (!job->heal_vals) {
		snprintf(err, errlen, "out of memory for token healing");
		return -1;
	}
	return heal_text(job, err, errlen);
}

static int count_non_bos(const struct exl_tokenizer *tok, const int32_t *ids, int n)
{
	int32_t bos = exl_tokenizer_bos(tok);
	int c = 0;

	for (int i = 0; i < n; i++)
		c += ids[i] != bos;
	return c;
}

static int alloc_gen(struct exl_job *job, int cap)
{
	job->cap_gen = cap < 16 ? 16 : cap;
	job->gen = malloc((size_t)job->cap_gen * sizeof(*job->gen));
	job->gt = malloc((size_t)(job->cap_gen + 1) * sizeof(*job->gt));
	if (!job->gen || !job->gt)
		return -1;
	if (job->return_probs) {
		job->probs = malloc((size_t)job->cap_gen * sizeof(*job->probs));
		if (!job->probs)
			return -1;
	}
	if (job->return_top_k) {
		size_t n = (size_t)job->cap_gen * (size_t)job->return_top_k;

		job->top_ids = malloc(n * sizeof(*job->top_ids));
		job->top_probs = malloc(n * sizeof(*job->top_probs));
		if (!job->top_ids || !job->top_probs)
			return -1;
	}
	return 0;
}

/* An embedding job: nothing is sampled, so there is nothing to generate. */
static int setup_pooling(struct exl_job *job, const struct exl_gen_settings *s,
			 const struct exl_prompt *negative, char *err, size_t errlen)
{
	if (s->pooling == EXL_POOL_NONE)
		return 0;
	if (s->pooling < EXL_POOL_NONE || s->pooling > EXL_POOL_LAST) {
		snprintf(err, errlen, "unknown pooling %d", (int)s->pooling);
		return -1;
	}
	if (negative) {
		snprintf(err, errlen, "an embedding job takes no negative prompt");
		return -1;
	}
	job->pooling = s->pooling;
	job->normalize = s->normalize;
	job->max_new_tokens = 0;
	job->min_new_tokens = 0;
	job->pool_acc = calloc((size_t)job->n_embd, sizeof(*job->pool_acc));
	job->pooled = calloc((size_t)job->n_embd, sizeof(*job->pooled));
	if (!job->pool_acc || !job->pooled) {
		snprintf(err, errlen, "out of memory for the embedding");
		return -1;
	}
	return 0;
}

struct exl_job *exl_job_create(const struct exl_model *m, const struct exl_gen_settings *s,
			       const struct exl_prompt *prompt, const struct exl_prompt *negative,
			       const struct exl_job_callbacks *cb, void *user,
			       char *err, size_t errlen)
{
	struct exl_job *job = NULL;
	struct exl_filter *filter = s ? s->filter : NULL;
	uint32_t *breakers = NULL;
	int32_t *ids = NULL;
	int n;

	if (!m || !s || !prompt || !cb || !cb->on_done || !cb->on_chunk) {
		snprintf(err, errlen, "job: model, settings, prompt and both callbacks are required");
		goto fail;
	}
	const struct exl_tokenizer *tok = exl_model_tokenizer(m);
	int n_vocab = exl_model_hparams(m)->n_vocab;

	if (check_settings(s, n_vocab, err, errlen))
		goto fail;
	if (s->filter && (!s->filter->ops || !s->filter->ops->allowed || !s->filter->ops->accept ||
			  !s->filter->ops->is_complete || !s->filter->ops->reset)) {
		snprintf(err, errlen, "filter lacks a required operation");
		goto fail;
	}
	job = calloc(1, sizeof(*job));
	if (!job)
		goto oom;
	job->tok = tok;
	job->n_vocab = n_vocab;
	job->cb = *cb;
	job->user = user;
	job->state = EXL_JOB_NEW;
	atomic_init(&job->cancel, false);
	atomic_init(&job->paused, false);
	job->decode_special = s->decode_special_tokens;
	job->completion_only = s->completion_only;
	job->ignore_eos = s->ignore_eos;
	job->return_probs = s->return_probs;
	job->return_top_k = s->return_top_k;
	job->return_logits = s->return_logits;
	job->max_new_tokens = s->max_new_tokens;
	job->min_new_tokens = s->min_new_tokens;
	job->n_embd = exl_model_hparams(m)->n_embd;
	job->truncate = s->truncate;
	if (setup_pooling(job, s, negative, err, errlen))
		goto fail;
	job->cfg_scale = s->cfg_scale;
	job->stop_token = -1;
	job->stop_string = -1;
	job->filter = filter;
	filter = NULL;
	job->n_eog = exl_tokenizer_eog_ids(tok, &job->eog);

	if (s->has_seed) {
		job->seed = s->seed;
	} else if (getrandom(&job->seed, sizeof(job->seed), 0) != (ssize_t)sizeof(job->seed)) {
		job->seed = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)job << 16);
	}
	exl_rng_seed(&job->rng, job->seed);

	if (s->n_stop_tokens) {
		job->stop_tokens = malloc((size_t)s->n_stop_tokens * sizeof(*job->stop_tokens));
		if (!job->stop_tokens)
			goto oom;
		memcpy(job->stop_tokens, s->stop_tokens,
		       (size_t)s->n_stop_tokens * sizeof(*job->stop_tokens));
		job->n_stop_tokens = s->n_stop_tokens;
	}
	if (copy_strings(&job->stop, s->stop_strings, s->n_stop_strings) ||
	    copy_strings(&job->banned, s->banned_strings, s->n_banned_strings))
		goto oom;

	if (exl_dry_breaker_mask(tok, n_vocab, &s->sampling, &breakers, err, errlen))
		goto fail;
	job->sampler = exl_sampler_create(&s->sampling, n_vocab, breakers, err, errlen);
	free(breakers);
	breakers = NULL;
	if (!job->sampler)
		goto fail;

	if (exl_job_lora_attach(job, m, s->loras, err, errlen))
		goto fail;

	/* Prompts. */
	if (s->fim && (s->n_embeddings || s->token_healing || job->pooling)) {
		snprintf(err, errlen, "a suffix (fill-in-the-middle) does not combine with %s",
			 s->n_embeddings ? "embeddings" : s->token_healing ? "token healing" :
			 "pooling");
		goto fail;
	}
	if (s->n_embeddings)
		n = exl_gen_embd_prompt(job, s, prompt, &ids, err, errlen);
	else if (s->fim)
		n = fim_ids(tok, s, prompt, &ids, &job->fim_prefix_at, &job->fim_suffix_at, err,
			    errlen);
	else
		n = prompt_ids(tok, s, prompt, n_vocab, &ids, err, errlen);
	if (n < 0)
		goto fail;
	seq_set(&job->seq[0], ids, n);
	ids = NULL;
	job->n_seqs = 1;
	if (negative) {
		n = prompt_ids(tok, s, negative, n_vocab, &ids, err, errlen);
		if (n < 0) {
			char tmp[256];

			snprintf(tmp, sizeof(tmp), "negative prompt: %s", err);
			snprintf(err, errlen, "%s", tmp);
			goto fail;
		}
		seq_set(&job->seq[1], ids, n);
		ids = NULL;
		job->n_seqs = 2;
		if (s->num_beams) {
			snprintf(err, errlen, "num_beams does not combine with a negative prompt");
			goto fail;
		}
	}
	exl_job_lora_bind_seqs(job);
	if (prompt->ids) {
		const struct exl_gen_seq *q = &job->seq[0];

		job->prompt_text = exl_tok_decode(tok, q->tokens, (size_t)q->n_tokens,
						  s->decode_special_tokens, true);
		if (!job->prompt_text)
			goto oom;
		job->prompt_text_len = strlen(job->prompt_text);
	} else {
		job->prompt_text = malloc(prompt->len + 1);
		if (!job->prompt_text)
			goto oom;
		if (prompt->len)
			memcpy(job->prompt_text, prompt->text, prompt->len);
		job->prompt_text[prompt->len] = 0;
		job->prompt_text_len = prompt->len;
	}
	if (s->token_healing && !job->pooling && setup_healing(job, err, errlen))
		goto fail;

	/* Generated tokens are appended to every sequence. */
	for (int i = 0; i < job->n_seqs; i++) {
		struct exl_gen_seq *q = &job->seq[i];
		int cap = q->prompt_len + (s->max_new_tokens < 4096 ? s->max_new_tokens : 4096) + 1;
		int32_t *t = realloc(q->tokens, (size_t)cap * sizeof(*t));

		if (!t)
			goto oom;
		q->tokens = t;
		q->cap_tokens = cap;
	}
	if (alloc_gen(job, s->max_new_tokens < 4096 ? s->max_new_tokens : 4096))
		goto oom;
	job->work = malloc((size_t)n_vocab * sizeof(*job->work));
	if (!job->work)
		goto oom;
	if (job->return_probs || job->return_top_k || job->return_logits) {
		job->raw = malloc((size_t)n_vocab * sizeof(*job->raw));
		if (!job->raw)
			goto oom;
	}
	if (job->filter) {
		job->filter_mask = malloc(((size_t)n_vocab + 31) / 32 * sizeof(*job->filter_mask));
		if (!job->filter_mask)
			goto oom;
	}
	exl_detok_init(&job->detok, tok, s->decode_special_tokens,
		       !job->heal && count_non_bos(tok, job->seq[0].tokens, job->seq[0].n_tokens) == 0);
	if (s->grammar || s->json_schema || s->regex) {
		/* The constraint judges the output text: after the healed
		 * bytes, without the leading space the decoder drops. */
		struct exl_grammar_filter_opts fo = {
			.prefer_eos = s->filter_prefer_eos,
			.prefix = job->heal,
			.prefix_len = job->heal ? job->heal_len : 0,
			.strip_leading_space = job->detok.strip_leading_space,
		};
		enum exl_constraint k = s->grammar ? EXL_CONSTRAINT_GRAMMAR :
					s->json_schema ? EXL_CONSTRAINT_JSON_SCHEMA :
					EXL_CONSTRAINT_REGEX;
		const char *text = s->grammar ? s->grammar : s->json_schema ? s->json_schema :
				   s->regex;

		job->filter = exl_grammar_filter_create(tok, k, text, strlen(text), &fo, err, errlen);
		if (!job->filter)
			goto fail;
		job->filter_mask = malloc(((size_t)n_vocab + 31) / 32 * sizeof(*job->filter_mask));
		if (!job->filter_mask)
			goto oom;
	}
	exl_kv_seq_init(&job->draft.kv);
	job->draft.max_tokens = s->draft_tokens;
	job->draft.len = s->draft_tokens;
	job->draft.ngram = s->ngram_draft;
	if (s->draft_model) {
		job->draft.model = strdup(s->draft_model);
		if (!job->draft.model)
			goto oom;
	}
	if (s->draft_model || s->ngram_draft) {
		job->draft.prop = malloc((size_t)s->draft_tokens * sizeof(*job->draft.prop));
		if (!job->draft.prop)
			goto oom;
	}
	if (s->num_beams && exl_beam_create(job, s->num_beams, s->length_penalty, err, errlen))
		goto fail;
	job->gen_limit = s->max_new_tokens;
	return job;
oom:
	snprintf(err, errlen, "out of memory creating the job");
fail:
	free(ids);
	free(breakers);
	if (filter && filter->ops && filter->ops->free)
		filter->ops->free(filter);
	exl_job_free(job);
	return NULL;
}

void exl_job_free(struct exl_job *job)
{
	if (!job)
		return;
	for (int i = 0; i < 2; i++) {
		free(job->seq[i].tokens);
		/* Pages were given back when the job ended; only the arrays
		 * are left. */
		free(job->seq[i].kv.pages);
		free(job->seq[i].kv.lpages);
		free(job->seq[i].kv.tokens);
	}
	if (job->filter && job->filter->ops && job->filter->ops->free)
		job->filter->ops->free(job->filter);
	free(job->filter_mask);
	free(job->stop_tokens);
	free_strings(&job->stop);
	free_strings(&job->banned);
	exl_sampler_free(job->sampler);
	exl_job_lora_detach(job);
	free(job->prompt_text);
	free(job->heal);
	free(job->heal_cands);
	free(job->gen);
	free(job->gt);
	free(job->text);
	free(job->probs);
	free(job->top_ids);
	free(job->top_probs);
	free(job->logit_rows);
	free(job->bans);
	free(job->work);
	free(job->raw);
	free(job->heal_vals);
	free(job->result_text);
	free(job->draft.model);
	free(job->draft.prop);
	/* Its pages went back with the job (exl_drafter_release). */
	free(job->draft.kv.pages);
	free(job->draft.kv.lpages);
	free(job->draft.kv.tokens);
	exl_beam_free(job->beam);
	free(job->embd);
	free(job->embd_at);
	free(job->pool_acc);
	free(job->pooled);
	free(job);
}

void exl_job_cancel(struct exl_job *job)
{
	atomic_store(&job->cancel, true);
}

void exl_job_resume(struct exl_job *job)
{
	atomic_store(&job->paused, false);
}

void *exl_job_user(const struct exl_job *job)
{
	return job->user;
}

int exl_job_prompt_tokens(const struct exl_job *job)
{
	return job->seq[0].prompt_len;
}

const struct exl_gen_result *exl_job_result(const struct exl_job *job)
{
	return job->state == EXL_JOB_DONE ? &job->result : NULL;
}

void exl_job_release_kv(struct exl_job *job, struct exl_kvcache *kv)
{
	for (int i = 0; i < job->n_seqs; i++)
		exl_kv_seq_release(kv, &job->seq[i].kv);
	if (job->beam)
		exl_beam_release_kv(job->beam, kv);
}

void exl_job_end(struct exl_job *job, enum exl_stop_reason reason, const char *error)
{
	if (job->reason != EXL_STOP_NONE)
		return;
	job->reason = reason;
	if (error)
		snprintf(job->error, sizeof(job->error), "%s", error);
	if (job->state == EXL_JOB_RUNNING || job->state == EXL_JOB_QUEUED)
		job->state = EXL_JOB_ENDING;
}

void exl_job_complete(struct exl_job *job)
{
	struct exl_gen_result *r = &job->result;
	size_t base = job->text_base, keep = base;
	/* A job that ended early shows only what was known safe. */
	size_t end = job->reason == EXL_STOP_CANCELLED || job->reason == EXL_STOP_UNLOADED ||
		     job->reason == EXL_STOP_SHUTDOWN || job->reason == EXL_STOP_ERROR ?
		     job->released : job->text_len;
	/* A beam search that did not finish has no output: its cursor holds
	 * whichever hypothesis it looked at last. */
	int n_tokens = job->hold_output ? 0 : job->n_gen;

	if (job->hold_output)
		end = base;

	/* text[0..base) is the end of the prompt text (healed bytes); a stop
	 * string that begins there cuts the prompt text too, else it shows
	 * whole even when the output has not covered it yet. */
	if (end < base) {
		if (job->reason == EXL_STOP_STRING)
			keep = end;
		end = base;
	}
	size_t pre = job->completion_only ? 0 : job->prompt_text_len - base + keep;
	size_t body = end - base;

	job->t_end = exl_now_s();
	free(job->result_text);
	job->result_text = malloc(pre + body + 1);
	memset(r, 0, sizeof(*r));
	if (job->result_text) {
		if (pre)
			memcpy(job->result_text, job->prompt_text, pre);
		if (body)
			memcpy(job->result_text + pre, job->text + base, body);
		job->result_text[pre + body] = 0;
		r->text = job->result_text;
		r->text_len = pre + body;
	} else {
		r->text = "";
		if (job->reason != EXL_STOP_ERROR) {
			job->reason = EXL_STOP_ERROR;
			snprintf(job->error, sizeof(job->error), "out of memory for the result");
		}
	}
	r->reason = job->reason;
	r->error = job->reason == EXL_STOP_ERROR ? job->error : NULL;
	r->tokens = job->gen;
	r->n_tokens = n_tokens;
	r->new_tokens = n_tokens;
	r->stop_token = job->reason == EXL_STOP_TOKEN ? job->stop_token : -1;
	r->stop_string = job->reason == EXL_STOP_STRING && job->stop_string >= 0 ?
			 job->stop.s[job->stop_string] : NULL;
	r->prompt_tokens = job->seq[0].prompt_len;
	r->cached_tokens = job->cached_tokens;
	r->seed = job->seed;
	double t0 = job->t_added;

	r->time_queued = job->t_started > 0 ? job->t_started - t0 : job->t_end - t0;
	r->time_to_first_token = job->t_first > 0 ? job->t_first - t0 : 0.0;
	r->time_total = job->t_end - t0;
	r->probs = job->probs;
	r->top_k = job->return_top_k;
	r->top_ids = job->top_ids;
	r->top_probs = job->top_probs;
	r->draft_proposed = job->draft.proposed;
	r->draft_accepted = job->draft.accepted;
	r->num_beams = job->num_beams;
	r->beam_score = job->beam_score;
	r->truncated = job->truncated;
	if (job->pooling && job->reason == EXL_STOP_MAX_NEW_TOKENS) {
		r->embedding = job->pooled;
		r->n_embd = job->n_embd;
	}
	job->state = EXL_JOB_DONE;
	job->cb.on_done(job, r, job->user);
}
