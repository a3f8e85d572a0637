/* The generator and the batching engine end to end on the real test models
 * (stories260K, aidreams260K): known greedy output, seeds, stop strings and
 * tokens, banned strings (also a character spelled by byte tokens), token
 * healing, min_new_tokens, CFG, prompt options, sampler settings, batch
 * reproducibility, cancel from another thread, KV admission, pause/resume,
 * suspension (pages kept, then reclaimed; fresh jobs first),
 * the filter hook, prefix sharing, chunked prefill and per-token
 * probabilities; a copy of the model with a NaN weight ends its job with an
 * error naming the non-finite logits.
 *
 * usage: test_generator CASE   (exit 77 when the models are absent)
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/generator/drafter.h"
#include "daemon/core/generator/engine.h"
#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"
#include "daemon/core/generator/generator.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "kernels/backend.h"
#include "tests/common/check.h"

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

/* ---- fixture ---- */

static struct exl_backend *be;
static struct exl_model *model;
static const char *model_name = "stories260K";

static void load(const char *name)
{
	const char *dir = getenv("EXLD_MODELS");
	char path[4096], err[512];
	FILE *f;

	model_name = name;
	if (strchr(name, '/')) {
		/* a file made for the test (exld-mkmodel, at build time) */
		snprintf(path, sizeof(path), "%s", name);
		goto open;
	}
	if (!dir) {
		printf("EXLD_MODELS is not set: skipping\n");
		exit(77);
	}
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
open:
	f = fopen(path, "rb");
	if (!f) {
		printf("%s not found: skipping\n", path);
		exit(77);
	}
	fclose(f);
	be = exl_backend_cpu_create(1, err, sizeof(err));
	if (!be)
		DIE("cpu backend: %s", err);
	model = exl_model_load(path, be, err, sizeof(err));
	if (!model)
		DIE("load %s: %s", path, err);
}

struct env {
	struct exl_kvcache *kv;
	struct exl_engine *eng;
};

static struct env make_env(int kv_tokens, int page_size, const struct exl_engine_config *cfg)
{
	struct env e;
	struct exl_engine_config def;
	char err[512];

	if (!cfg) {
		exl_engine_config_init(&def);
		cfg = &def;
	}
	e.kv = exl_model_kvcache_create(model, kv_tokens, page_size, err, sizeof(err));
	if (!e.kv)
		DIE("kvcache: %s", err);
	e.eng = exl_engine_create(model, e.kv, cfg, err, sizeof(err));
	if (!e.eng)
		DIE("engine: %s", err);
	return e;
}

static void free_env(struct env *e)
{
	exl_engine_free(e->eng);
	exl_kvcache_free(e->kv);
}

/* ---- recording a job ---- */

struct rec {
	char text[16384];       /* every chunk's text, concatenated */
	size_t len;
	int32_t toks[4096];     /* every chunk's tokens */
	int n_toks;
	int n_chunks;
	float probs[4096];
	int32_t top1[4096];
	float top1p[4096];
	bool top_sorted;
	/* with return_logits: per token, its row's argmax and softmax at the
	 * token, and how many tokens came with a row */
	int32_t lg_argmax[4096];
	float lg_p[4096];
	int n_logit_rows;
	int n_done;
	bool last_seen;
	/* the result, copied */
	enum exl_stop_reason reason;
	char rtext[16384];
	int32_t rtoks[4096];
	int n_rtoks;
	int32_t stop_token;
	char stop_string[256];
	int prompt_tokens;
	int cached_tokens;
	double t_queued, t_first, t_total;
	char error[256];
	int draft_proposed, draft_accepted;
	int num_beams;
	double beam_score;
	/* behaviour */
	int pause_at;           /* return PAUSE for chunk number pause_at (once) */
	bool paused_once;
	int gen_at_pause;
	void (*hook)(struct rec *r);
	void *hook_arg;
};

static int32_t argmax_row(const float *row, int n)
{
	int32_t best = 0;

	for (int i = 1; i < n; i++)
		if (row[i] > row[best])
			best = i;
	return best;
}

static float softmax_at(const float *row, int n, int32_t t)
{
	float max = row[argmax_row(row, n)];
	double sum = 0.0;

	if (t < 0 || t >= n)
		return -1.0f;
	for (int i = 0; i < n; i++)
		sum += exp((double)row[i] - max);
	return (float)(exp((double)row[t] - max) / sum);
}

static int on_chunk(struct exl_job *job, const struct exl_chunk *c, void *user)
{
	struct rec *r = user;

	(void)job;
	if (r->pause_at && r->n_chunks + 1 == r->pause_at && !r->paused_once) {
		r->paused_once = true;
		return EXL_CHUNK_PAUSE;
	}
	r->n_chunks++;
	CHECK(!r->last_seen, "a chunk after the last one");
	r->last_seen = c->last;
	CHECK(r->len + c->text_len < sizeof(r->text), "text overflow");
	if (r->len + c->text_len < sizeof(r->text)) {
		memcpy(r->text + r->len, c->text, c->text_len);
		r->len += c->text_len;
		r->text[r->len] = 0;
	}
	for (int i = 0; i < c->n_tokens && r->n_toks < 4096; i++) {
		if (c->probs)
			r->probs[r->n_toks] = c->probs[i];
		if (c->top_k) {
			r->top1[r->n_toks] = c->top_ids[(size_t)i * c->top_k];
			r->top1p[r->n_toks] = c->top_probs[(size_t)i * c->top_k];
			for (int k = 1; k < c->top_k; k++)
				if (c->top_probs[(size_t)i * c->top_k + k] >
				    c->top_probs[(size_t)i * c->top_k + k - 1])
					r->top_sorted = false;
		}
		if (c->logits) {
			const float *row = c->logits + (size_t)i * (size_t)c->n_vocab;

			r->lg_argmax[r->n_toks] = argmax_row(row, c->n_vocab);
			r->lg_p[r->n_toks] = softmax_at(row, c->n_vocab, c->tokens[i]);
			r->n_logit_rows++;
		}
		r->toks[r->n_toks++] = c->tokens[i];
	}
	if (r->hook)
		r->hook(r);
	return EXL_CHUNK_OK;
}

static void on_done(struct exl_job *job, const struct exl_gen_result *res, void *user)
{
	struct rec *r = user;

	(void)job;
	r->n_done++;
	r->reason = res->reason;
	snprintf(r->rtext, sizeof(r->rtext), "%s", res->text);
	r->n_rtoks = res->n_tokens < 4096 ? res->n_tokens : 4096;
	memcpy(r->rtoks, res->tokens, (size_t)r->n_rtoks * sizeof(int32_t));
	r->stop_token = res->stop_token;
	snprintf(r->stop_string, sizeof(r->stop_string), "%s", res->stop_string ? res->stop_string : "");
	r->prompt_tokens = res->prompt_tokens;
	r->cached_tokens = res->cached_tokens;
	r->t_queued = res->time_queued;
	r->t_first = res->time_to_first_token;
	r->t_total = res->time_total;
	snprintf(r->error, sizeof(r->error), "%s", res->error ? res->error : "");
	r->draft_proposed = res->draft_proposed;
	r->draft_accepted = res->draft_accepted;
	r->num_beams = res->num_beams;
	r->beam_score = res->beam_score;
}

static const struct exl_job_callbacks cbs = { on_chunk, on_done };

static void greedy(struct exl_gen_settings *s, int n)
{
	exl_gen_settings_init(s);
	s->sampling.temperature = 0.0f;
	s->max_new_tokens = n;
	s->completion_only = true;
	s->has_seed = true;
	s->seed = 1;
}

/* Temperature 1 with no truncation: the model's own distribution. */
static void plain(struct exl_gen_settings *s, int n, uint64_t seed)
{
	exl_gen_settings_init(s);
	s->sampling.temperature = 1.0f;
	s->sampling.top_k = 0;
	s->sampling.top_p = 1.0f;
	s->sampling.min_p = 0.0f;
	s->max_new_tokens = n;
	s->completion_only = true;
	s->has_seed = true;
	s->seed = seed;
}

static struct exl_job *job_text(const struct exl_gen_settings *s, const char *prompt,
				const char *negative, struct rec *r)
{
	struct exl_prompt p = { prompt, strlen(prompt), NULL, 0 };
	struct exl_prompt n = { negative, negative ? strlen(negative) : 0, NULL, 0 };
	char err[512];

	struct exl_job *j = exl_job_create(model, s, &p, negative ? &n : NULL, &cbs, r, err,
					   sizeof(err));
	if (!j)
		DIE("job_create: %s", err);
	return j;
}

static void add(struct env *e, struct exl_job *j)
{
	char err[512];

	if (exl_engine_add(e->eng, j, err, sizeof(err)))
		DIE("engine_add: %s", err);
}

/* Steps until every listed record is done. */
static void run_until(struct env *e, struct rec **r, int n)
{
	char err[512];

	for (int guard = 0; guard < 200000; guard++) {
		bool all = true;

		for (int i = 0; i < n; i++)
			all &= r[i]->n_done > 0;
		if (all)
			return;
		if (exl_engine_step(e->eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
	}
	DIE("jobs did not finish");
}

/* One job alone; the record is filled. */
static void run_one(const struct exl_gen_settings *s, const char *prompt, const char *negative,
		    struct rec *r)
{
	struct env e = make_env(2048, 16, NULL);
	struct exl_job *j;

	memset(r, 0, sizeof(*r));
	r->top_sorted = true;
	j = job_text(s, prompt, negative, r);
	add(&e, j);
	run_until(&e, &r, 1);
	exl_job_free(j);
	free_env(&e);
	CHECK(r->n_done == 1, "on_done called %d times", r->n_done);
}

static struct rec *new_rec(void)
{
	struct rec *r = calloc(1, sizeof(*r));

	if (!r)
		DIE("oom");
	r->top_sorted = true;
	return r;
}

/* Streamed text and tokens agree with the result. */
static void check_consistent(const struct rec *r)
{
	CHECK(!strcmp(r->text, r->rtext), "streamed '%s' but result '%s'", r->text, r->rtext);
	CHECK(r->n_toks == r->n_rtoks && !memcmp(r->toks, r->rtoks, (size_t)r->n_toks * 4),
	      "streamed %d tokens, result has %d", r->n_toks, r->n_rtoks);
}

/* ---- cases ---- */

static const char *const known_continuation =
	", there was a little girl named Lily. She loved to play outside in the park.";

static void case_greedy(void)
{
	struct exl_gen_settings s;
	struct rec *r = new_rec();

	greedy(&s, 40);
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(!strncmp(r->rtext, known_continuation, strlen(known_continuation)),
	      "greedy continuation '%s'", r->rtext);
	CHECK(r->reason == EXL_STOP_MAX_NEW_TOKENS && r->n_rtoks == 40, "reason %s, %d tokens",
	      exl_stop_reason_name(r->reason), r->n_rtoks);
	check_consistent(r);
	/* Times in order (not a speed check). */
	CHECK(r->t_queued >= 0.0 && r->t_queued <= r->t_first && r->t_first <= r->t_total,
	      "times: queued %g, first token %g, total %g", r->t_queued, r->t_first, r->t_total);

	/* From BOS alone: llama2.c's reference ids. */
	char path[4096];
	FILE *f;
	int32_t want[200];
	int n = 0;

	snprintf(path, sizeof(path), "%s/stories260K.expected.ids", getenv("EXLD_MODELS"));
	f = fopen(path, "r");
	if (!f)
		DIE("%s missing", path);
	while (n < 200 && fscanf(f, "%d", &want[n]) == 1)
		n++;
	fclose(f);
	greedy(&s, 100);
	run_one(&s, "", NULL, r);
	CHECK(r->n_rtoks == 100 || r->reason == EXL_STOP_TOKEN, "%d tokens", r->n_rtoks);
	for (int i = 0; i < r->n_rtoks && i < n; i++) {
		if (r->rtoks[i] != want[i]) {
			CHECK(0, "token %d: %d, reference %d", i, r->rtoks[i], want[i]);
			break;
		}
	}
	/* completion_only off: prompt + completion */
	greedy(&s, 10);
	s.completion_only = false;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(!strncmp(r->rtext, "Once upon a time, there was", 27), "full text '%s'", r->rtext);
	free(r);
}

static void case_seeds(void)
{
	struct exl_gen_settings s;
	struct rec *a = new_rec(), *b = new_rec();
	char outs[10][2048];
	int distinct = 0;

	plain(&s, 40, 1234);
	run_one(&s, "Once upon a time", NULL, a);
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(!strcmp(a->rtext, b->rtext) && a->n_rtoks == b->n_rtoks &&
	      !memcmp(a->rtoks, b->rtoks, (size_t)a->n_rtoks * 4), "same seed, different output");
	for (int i = 0; i < 10; i++) {
		plain(&s, 40, 100 + (uint64_t)i);
		run_one(&s, "Once upon a time", NULL, a);
		memcpy(outs[i], a->rtext, sizeof(outs[i]) - 1);
		outs[i][sizeof(outs[i]) - 1] = 0;
		bool seen = false;

		for (int k = 0; k < i; k++)
			seen |= !strcmp(outs[k], outs[i]);
		distinct += !seen;
	}
	CHECK(distinct >= 5, "10 seeds gave %d distinct outputs", distinct);
	free(a);
	free(b);
}

/* Greedy reference for the stop / ban cases. */
static void greedy_ref(struct rec *r, int n)
{
	struct exl_gen_settings s;

	greedy(&s, n);
	run_one(&s, "Once upon a time", NULL, r);
}

static void case_stop_string(void)
{
	struct exl_gen_settings s;
	struct rec *ref = new_rec(), *r = new_rec();
	const char *stops[] = { "named Lily", "little girl", "Lily. She" };

	greedy_ref(ref, 60);
	for (int k = 0; k < 3; k++) {
		const char *hit = strstr(ref->rtext, stops[k]);

		CHECK(hit, "'%s' not in the greedy text", stops[k]);
		if (!hit)
			continue;
		greedy(&s, 60);
		s.stop_strings = &stops[k];
		s.n_stop_strings = 1;
		run_one(&s, "Once upon a time", NULL, r);
		size_t want = (size_t)(hit - ref->rtext);

		CHECK(r->reason == EXL_STOP_STRING && !strcmp(r->stop_string, stops[k]),
		      "reason %s '%s'", exl_stop_reason_name(r->reason), r->stop_string);
		CHECK(strlen(r->rtext) == want && !strncmp(r->rtext, ref->rtext, want),
		      "stop '%s': got '%s'", stops[k], r->rtext);
		/* Nothing of the stop string was streamed: the stream is the
		 * result exactly. */
		CHECK(!strcmp(r->text, r->rtext), "streamed '%s'", r->text);
		CHECK(r->n_chunks >= 2, "only %d chunks", r->n_chunks);
		/* Every generated token is reported, the stop string's too. */
		CHECK(r->n_rtoks <= ref->n_rtoks && !memcmp(r->rtoks, ref->rtoks, (size_t)r->n_rtoks * 4),
		      "tokens differ from the greedy run");
		check_consistent(r);
	}

	/* Several stop strings: the earliest wins; a string absent changes nothing. */
	const char *two[] = { "park", "Lily", "zzzq" };

	greedy(&s, 60);
	s.stop_strings = two;
	s.n_stop_strings = 3;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(!strcmp(r->stop_string, "Lily") && !strstr(r->rtext, "Lily"), "two: '%s' by '%s'",
	      r->rtext, r->stop_string);

	/* min_new_tokens delays stop strings. */
	greedy(&s, 60);
	s.stop_strings = &stops[1];
	s.n_stop_strings = 1;
	s.min_new_tokens = 30;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(strstr(r->rtext, "little girl") && r->reason != EXL_STOP_STRING,
	      "min_new with stop string: %s '%s'", exl_stop_reason_name(r->reason), r->rtext);
	free(ref);
	free(r);
}

static void case_stop_token(void)
{
	struct exl_gen_settings s;
	struct rec *ref = new_rec(), *r = new_rec();

	greedy_ref(ref, 30);
	int32_t stop = ref->rtoks[10];
	int first = 0;

	while (ref->rtoks[first] != stop)
		first++;
	greedy(&s, 30);
	s.stop_tokens = &stop;
	s.n_stop_tokens = 1;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_TOKEN && r->stop_token == stop && r->n_rtoks == first + 1,
	      "reason %s token %d after %d tokens (want %d)", exl_stop_reason_name(r->reason),
	      r->stop_token, r->n_rtoks, first + 1);
	char *upto = exl_tok_decode(exl_model_tokenizer(model), ref->rtoks, (size_t)first, false, false);

	CHECK(upto && !strcmp(r->rtext, upto), "text '%s' want '%s'", r->rtext, upto ? upto : "");
	free(upto);
	check_consistent(r);
	free(ref);
	free(r);
}

static void case_eos_min_new(void)
{
	struct exl_gen_settings s;
	struct rec *r = new_rec();
	const int32_t *eog;
	int n_eog = exl_tokenizer_eog_ids(exl_model_tokenizer(model), &eog);

	CHECK(n_eog > 0, "no EOG ids");
	/* stories260K separates stories with BOS and rarely says EOS, so a
	 * bias makes EOS the greedy choice at every position. */
	struct exl_token_bias bias = { eog[0], 100.0f };

	greedy(&s, 100);
	s.sampling.bias = &bias;
	s.sampling.n_bias = 1;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_TOKEN && r->stop_token == eog[0] && r->n_rtoks == 1 &&
	      r->rtext[0] == 0, "EOS first: %s after %d '%s'", exl_stop_reason_name(r->reason),
	      r->n_rtoks, r->rtext);
	check_consistent(r);

	s.min_new_tokens = 20;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_TOKEN && r->n_rtoks == 21 && r->rtoks[20] == eog[0],
	      "min_new 20: %s after %d", exl_stop_reason_name(r->reason), r->n_rtoks);
	for (int i = 0; i < 20 && i < r->n_rtoks; i++)
		CHECK(r->rtoks[i] != eog[0], "EOS at %d before min_new", i);
	CHECK(strlen(r->rtext) > 20, "text '%s'", r->rtext);
	check_consistent(r);

	/* ignore_eos: runs to max_new_tokens. */
	s.min_new_tokens = 0;
	s.max_new_tokens = 30;
	s.ignore_eos = true;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_MAX_NEW_TOKENS && r->n_rtoks == 30,
	      "ignore_eos: %s after %d", exl_stop_reason_name(r->reason), r->n_rtoks);
	for (int i = 0; i < r->n_rtoks; i++)
		CHECK(r->rtoks[i] != eog[0], "EOS at %d with ignore_eos", i);
	/* an explicit stop token still stops with ignore_eos */
	int32_t stop = eog[0];

	s.stop_tokens = &stop;
	s.n_stop_tokens = 1;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_TOKEN && r->n_rtoks == 1, "ignore_eos + stop token: %s",
	      exl_stop_reason_name(r->reason));
	free(r);
}

static void case_banned(void)
{
	struct exl_gen_settings s;
	struct rec *ref = new_rec(), *r = new_rec();
	const char *ban[] = { "Lily" };
	int hits_without = 0;

	greedy_ref(ref, 40);
	CHECK(strstr(ref->rtext, "Lily"), "greedy text lacks Lily");
	greedy(&s, 40);
	s.banned_strings = ban;
	s.n_banned_strings = 1;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(!strstr(r->rtext, "Lily") && !strstr(r->text, "Lily") && r->n_rtoks == 40,
	      "greedy with ban: '%s'", r->rtext);
	/* up to the name the text is the same */
	size_t same = (size_t)(strstr(ref->rtext, "Lily") - ref->rtext);

	CHECK(!strncmp(r->rtext, ref->rtext, same), "prefix changed: '%s'", r->rtext);
	check_consistent(r);

	for (int i = 0; i < 20; i++) {
		exl_gen_settings_init(&s);
		s.max_new_tokens = 60;
		s.completion_only = true;
		s.has_seed = true;
		s.seed = 500 + (uint64_t)i;
		run_one(&s, "Once upon a time", NULL, r);
		hits_without += strstr(r->rtext, "Lily") != NULL;
		s.banned_strings = ban;
		s.n_banned_strings = 1;
		run_one(&s, "Once upon a time", NULL, r);
		CHECK(!strstr(r->rtext, "Lily") && !strstr(r->text, "Lily"), "seed %d: '%s'",
		      500 + i, r->rtext);
		CHECK(r->reason != EXL_STOP_ERROR, "seed %d: error %s", 500 + i, r->error);
		check_consistent(r);
	}
	CHECK(hits_without >= 3, "without the ban only %d of 20 samples say Lily", hits_without);
	free(ref);
	free(r);
}

/* The healed bytes are generated text: banned strings and stop strings see
 * them.  "Once upon a ti" heals " ti", which greedy decoding completes as
 * " time". */
static void healing_bans_and_stops(void)
{
	const char *prompt = "Once upon a ti";
	struct exl_gen_settings s;
	struct rec *r = new_rec();
	const char *ban_time[] = { "time" };
	char full[20000];

	/* A ban that the healed token completes: the healing token is chosen
	 * again under the ban, and neither the completion nor prompt +
	 * completion ever contains it. */
	greedy(&s, 12);
	s.token_healing = true;
	s.banned_strings = ban_time;
	s.n_banned_strings = 1;
	run_one(&s, prompt, NULL, r);
	snprintf(full, sizeof(full), "%s%s", prompt, r->rtext);
	CHECK(r->reason == EXL_STOP_MAX_NEW_TOKENS && !strstr(full, "time") && r->rtext[0],
	      "ban 'time' with healing: %s '%s' (%s)", exl_stop_reason_name(r->reason), full,
	      r->error);
	check_consistent(r);
	s.completion_only = false;
	run_one(&s, prompt, NULL, r);
	CHECK(!strcmp(r->rtext, full), "ban, whole text '%s' vs '%s'", r->rtext, full);
	CHECK(!strcmp(r->text, full + strlen(prompt)), "ban, streamed '%s'", r->text);
	/* sampled too */
	for (int i = 0; i < 10; i++) {
		plain(&s, 12, 700 + (uint64_t)i);
		s.token_healing = true;
		s.completion_only = false;
		s.banned_strings = ban_time;
		s.n_banned_strings = 1;
		run_one(&s, prompt, NULL, r);
		CHECK(!strncmp(r->rtext, prompt, strlen(prompt)) && !strstr(r->rtext, "time") &&
		      r->reason != EXL_STOP_ERROR, "seed %d: '%s' (%s)", 700 + i, r->rtext, r->error);
	}

	/* A stop string that begins inside the healed text: the output ends
	 * there, before the prompt's end.  The completion is empty, nothing
	 * is streamed, and every generated token is still reported. */
	const char *stops[] = { "time", "ime, there", " ti" };
	const char *want[] = { "Once upon a ", "Once upon a t", "Once upon a" };

	for (int k = 0; k < 3; k++) {
		greedy(&s, 12);
		s.token_healing = true;
		s.stop_strings = &stops[k];
		s.n_stop_strings = 1;
		run_one(&s, prompt, NULL, r);
		CHECK(r->reason == EXL_STOP_STRING && !strcmp(r->stop_string, stops[k]) &&
		      !strcmp(r->rtext, "") && r->n_rtoks >= 1,
		      "stop '%s' with healing: %s '%s' after %d tokens", stops[k],
		      exl_stop_reason_name(r->reason), r->rtext, r->n_rtoks);
		check_consistent(r);
		s.completion_only = false;
		run_one(&s, prompt, NULL, r);
		CHECK(r->reason == EXL_STOP_STRING && !strcmp(r->rtext, want[k]) && !r->text[0],
		      "stop '%s', whole text '%s' (want '%s'), streamed '%s'", stops[k], r->rtext,
		      want[k], r->text);
	}
	/* One that ends after the healed text cuts the completion as usual. */
	const char *there[] = { ", there" };

	greedy(&s, 12);
	s.token_healing = true;
	s.stop_strings = there;
	s.n_stop_strings = 1;
	s.completion_only = false;
	run_one(&s, prompt, NULL, r);
	CHECK(r->reason == EXL_STOP_STRING && !strcmp(r->rtext, "Once upon a time") &&
	      !strcmp(r->text, "me"), "stop ', there': '%s', streamed '%s'", r->rtext, r->text);

	/* A first word heals with SentencePiece's space (" ti"), which the
	 * prompt text "ti" lacks: bans and stops see "ti" + the completion. */
	greedy(&s, 12);
	s.token_healing = true;
	s.completion_only = false;
	s.banned_strings = ban_time;
	s.n_banned_strings = 1;
	run_one(&s, "ti", NULL, r);
	CHECK(!strncmp(r->rtext, "ti", 2) && r->rtext[2] && !strstr(r->rtext, "time") &&
	      !strcmp(r->rtext + 2, r->text) && r->reason == EXL_STOP_MAX_NEW_TOKENS,
	      "'ti' banning 'time': '%s', streamed '%s' (%s)", r->rtext, r->text, r->error);
	const char *ti[] = { "ti" };

	greedy(&s, 12);
	s.token_healing = true;
	s.completion_only = false;
	s.stop_strings = ti;
	s.n_stop_strings = 1;
	run_one(&s, "ti", NULL, r);
	CHECK(r->reason == EXL_STOP_STRING && !strcmp(r->rtext, "") && !r->text[0],
	      "'ti' stopping at 'ti': %s '%s'", exl_stop_reason_name(r->reason), r->rtext);

	/* A banned string that the healed text itself holds cannot be avoided:
	 * the job is refused when it is made. */
	const char *ban_ti[] = { "ti" };
	struct exl_prompt p = { prompt, strlen(prompt), NULL, 0 };
	char err[256] = "";

	greedy(&s, 12);
	s.token_healing = true;
	s.banned_strings = ban_ti;
	s.n_banned_strings = 1;
	struct exl_job *j = exl_job_create(model, &s, &p, NULL, &cbs, r, err, sizeof(err));

	CHECK(!j && strstr(err, "banned string 0") && strstr(err, "healing"),
	      "ban inside the healed text: %s", j ? "accepted" : err);
	exl_job_free(j);
	free(r);
}

static void case_healing(void)
{
	struct exl_gen_settings s;
	struct rec *r = new_rec();

	greedy(&s, 20);
	s.token_healing = true;
	run_one(&s, "Once upon a ti", NULL, r);
	CHECK(!strncmp(r->rtext, "me", 2), "healed continuation '%s'", r->rtext);
	check_consistent(r);
	greedy(&s, 20);
	s.token_healing = true;
	s.completion_only = false;
	run_one(&s, "Once upon a ti", NULL, r);
	CHECK(!strncmp(r->rtext, "Once upon a time", 16), "healed text '%s'", r->rtext);
	CHECK(r->prompt_tokens == 4, "prompt of %d tokens after healing", r->prompt_tokens);
	/* a prompt of one word heals too */
	greedy(&s, 10);
	s.token_healing = true;
	run_one(&s, "Once upon a time, there was a little gi", NULL, r);
	CHECK(!strncmp(r->rtext, "rl", 2), "healed 'gi' -> '%s'", r->rtext);
	free(r);
	healing_bans_and_stops();
}

static void case_cfg(void)
{
	struct exl_gen_settings s;
	struct rec *a = new_rec(), *b = new_rec();

	greedy(&s, 40);
	run_one(&s, "Once upon a time", NULL, a);
	s.cfg_scale = 1.0f;
	run_one(&s, "Once upon a time", "One day, a sad dog", b);
	CHECK(!strcmp(a->rtext, b->rtext), "CFG 1 greedy: '%s' vs '%s'", a->rtext, b->rtext);

	plain(&s, 40, 77);
	run_one(&s, "Once upon a time", NULL, a);
	s.cfg_scale = 1.0f;
	run_one(&s, "Once upon a time", "One day, a sad dog", b);
	CHECK(!strcmp(a->rtext, b->rtext), "CFG 1 sampled: '%s' vs '%s'", a->rtext, b->rtext);

	/* Greedy against greedy: a scale away from 1 changes the output. */
	greedy(&s, 40);
	run_one(&s, "Once upon a time", NULL, a);
	s.cfg_scale = 4.0f;
	run_one(&s, "Once upon a time", "Once upon a time, there was a little girl named Lily", b);
	CHECK(b->reason != EXL_STOP_ERROR, "CFG 4: %s", b->error);
	CHECK(strcmp(a->rtext, b->rtext), "CFG 4 had no effect: '%s'", b->rtext);
	check_consistent(b);

	/* Scale 0 is the negative prompt's own logits: the same as plain
	 * greedy generation on it (the tokens go to both sequences). */
	greedy(&s, 40);
	run_one(&s, "The dog", NULL, a);
	s.cfg_scale = 0.0f;
	run_one(&s, "Once upon a time", "The dog", b);
	CHECK(!strcmp(a->rtext, b->rtext) && a->n_rtoks == b->n_rtoks &&
	      !memcmp(a->rtoks, b->rtoks, (size_t)a->n_rtoks * 4),
	      "CFG 0: '%s' vs greedy on the negative prompt '%s'", b->rtext, a->rtext);
	greedy(&s, 40);
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(strcmp(a->rtext, b->rtext), "the two prompts continue alike: '%s'", a->rtext);
	check_consistent(b);
	free(a);
	free(b);
}

static const char *const batch_prompts[8] = {
	"Once upon a time", "The dog", "Tom and Sue went to the park. They", "A little bird",
	"One day, Lily", "The sun was", "Ben had a red ball", "Mom said",
};

static void case_batch(void)
{
	struct exl_gen_settings s;
	struct rec *alone = new_rec(), *g_alone = new_rec();
	struct rec *r[8];
	struct exl_job *j[8];

	plain(&s, 60, 4242);
	run_one(&s, batch_prompts[0], NULL, alone);
	greedy(&s, 60);
	run_one(&s, batch_prompts[2], NULL, g_alone);

	struct env e = make_env(4096, 16, NULL);

	for (int i = 0; i < 8; i++) {
		r[i] = new_rec();
		if (i == 2)
			greedy(&s, 60);
		else
			plain(&s, 60, i == 0 ? 4242 : 900 + (uint64_t)i);
		j[i] = job_text(&s, batch_prompts[i], NULL, r[i]);
		add(&e, j[i]);
	}
	/* One more joins later, between steps. */
	char err[256];

	for (int k = 0; k < 5; k++)
		if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
	struct exl_engine_stats st;

	exl_engine_stats(e.eng, &st);
	CHECK(st.active == 8 && st.queued == 0, "stats: %d active %d queued", st.active, st.queued);
	run_until(&e, r, 8);
	CHECK(!strcmp(r[0]->rtext, alone->rtext) && r[0]->n_rtoks == alone->n_rtoks &&
	      !memcmp(r[0]->rtoks, alone->rtoks, (size_t)alone->n_rtoks * 4),
	      "seeded job alone '%s' vs in a batch of 8 '%s'", alone->rtext, r[0]->rtext);
	CHECK(!strcmp(r[2]->rtext, g_alone->rtext), "greedy job alone '%s' vs batch '%s'",
	      g_alone->rtext, r[2]->rtext);
	for (int i = 0; i < 8; i++) {
		check_consistent(r[i]);
		exl_job_free(j[i]);
		free(r[i]);
	}
	exl_engine_stats(e.eng, &st);
	CHECK(st.active == 0 && st.generated_tokens > 0 && st.kv_pages_free == st.kv_pages_total,
	      "after: %d active, %llu tokens, %d of %d pages free", st.active,
	      (unsigned long long)st.generated_tokens, st.kv_pages_free, st.kv_pages_total);
	free_env(&e);
	free(alone);
	free(g_alone);
}

/* ---- cancel from another thread ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int phase; /* 1: the job is streaming; 2: cancelled */
static struct exl_job *cancel_job;

static void cancel_hook(struct rec *r)
{
	if (r->n_chunks != 5)
		return;
	/* Hold the engine thread here until the other thread has
	 * cancelled, so the job cannot finish first. */
	pthread_mutex_lock(&mu);
	phase = 1;
	pthread_cond_broadcast(&cv);
	while (phase != 2)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

static void *canceller(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	while (phase != 1)
		pthread_cond_wait(&cv, &mu);
	exl_job_cancel(cancel_job);
	phase = 2;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return NULL;
}

static void case_cancel(void)
{
	struct exl_gen_settings s;
	struct rec *r = new_rec(), *other = new_rec();
	struct env e = make_env(2048, 16, NULL);
	pthread_t th;

	greedy(&s, 200);
	s.ignore_eos = true;
	r->hook = cancel_hook;
	cancel_job = job_text(&s, "Once upon a time", NULL, r);
	struct exl_job *j2 = job_text(&s, "The dog", NULL, other);

	add(&e, cancel_job);
	add(&e, j2);
	if (pthread_create(&th, NULL, canceller, NULL))
		DIE("pthread_create");
	run_until(&e, &r, 1);
	pthread_join(th, NULL);
	CHECK(r->reason == EXL_STOP_CANCELLED, "reason %s", exl_stop_reason_name(r->reason));
	CHECK(r->n_rtoks < 200 && r->n_rtoks >= 5, "%d tokens", r->n_rtoks);
	CHECK(!strncmp(r->rtext, r->text, strlen(r->rtext)), "result '%s' vs stream '%s'",
	      r->rtext, r->text);
	/* the other job is unaffected */
	run_until(&e, &other, 1);
	CHECK(other->reason == EXL_STOP_MAX_NEW_TOKENS || other->reason == EXL_STOP_MAX_CONTEXT,
	      "other: %s", exl_stop_reason_name(other->reason));
	/* a queued job can be cancelled too */
	struct rec *q = new_rec();
	struct exl_job *j3 = job_text(&s, "Mom said", NULL, q);

	add(&e, j3);
	exl_job_cancel(j3);
	run_until(&e, &q, 1);
	CHECK(q->reason == EXL_STOP_CANCELLED && q->n_rtoks == 0, "queued cancel: %s",
	      exl_stop_reason_name(q->reason));
	exl_job_free(cancel_job);
	exl_job_free(j2);
	exl_job_free(j3);
	free_env(&e);
	free(r);
	free(other);
	free(q);
}

static void case_kv_wait(void)
{
	struct exl_gen_settings s;
	struct rec *ref = new_rec(), *a = new_rec(), *b = new_rec();
	struct rec *both[2] = { a, b };
	struct exl_engine_stats st;
	char err[256];

	greedy(&s, 60);
	run_one(&s, "The dog", NULL, ref);
	/* 5 + 59 positions need 4 pages of 16; the pool has 6: one at a time. */
	struct env e = make_env(96, 16, NULL);
	struct exl_job *ja = job_text(&s, "Once upon a time", NULL, a);
	struct exl_job *jb = job_text(&s, "The dog", NULL, b);

	add(&e, ja);
	add(&e, jb);
	if (exl_engine_step(e.eng, err, sizeof(err)) <= 0)
		DIE("step: %s", err);
	exl_engine_stats(e.eng, &st);
	CHECK(st.active == 1 && st.queued == 1, "%d active, %d queued", st.active, st.queued);
	run_until(&e, both, 2);
	CHECK(a->reason == EXL_STOP_MAX_NEW_TOKENS && b->reason == EXL_STOP_MAX_NEW_TOKENS,
	      "reasons %s %s", exl_stop_reason_name(a->reason), exl_stop_reason_name(b->reason));
	CHECK(!strcmp(b->rtext, ref->rtext), "waited job '%s' vs alone '%s'", b->rtext, ref->rtext);

	/* A job longer than the whole pool gets what fits (max_context);
	 * one whose prompt does not fit is refused. */
	struct rec *c = new_rec();

	greedy(&s, 500);
	s.ignore_eos = true;
	struct exl_job *jc = job_text(&s, "Once upon a time", NULL, c);

	add(&e, jc);
	run_until(&e, &c, 1);
	CHECK(c->reason == EXL_STOP_MAX_CONTEXT && c->n_rtoks == 96 - c->prompt_tokens + 1,
	      "long job: %s after %d", exl_stop_reason_name(c->reason), c->n_rtoks);
	char big[2048] = "";

	for (int i = 0; i < 40; i++)
		strcat(big, "Once upon a time ");
	struct exl_job *jd = job_text(&s, big, NULL, c);

	CHECK(exl_engine_add(e.eng, jd, err, sizeof(err)) == -1 &&
	      (strstr(err, "KV") || strstr(err, "context")), "oversized prompt: %s", err);
	exl_job_free(jd);
	exl_job_free(ja);
	exl_job_free(jb);
	exl_job_free(jc);
	free_env(&e);
	free(ref);
	free(a);
	free(b);
	free(c);
}

/* A model that mixes sliding-window and global layers (gemma3, window 8,
 * 1 : 1), its local pool sized for one sequence (5 pages of 16 with
 * batches of 32): two jobs of 150 tokens run one after the other, each as
 * alone with a pool that never gives pages back; a CFG job's two windows
 * do not fit that pool at full length, so its output is cut to what does. */
static void case_swa(void)
{
	struct exl_gen_settings s;
	struct exl_engine_config cfg;
	struct rec *ref_a = new_rec(), *ref_b = new_rec(), *a = new_rec(), *b = new_rec();
	struct rec *both[2] = { a, b };
	struct exl_engine_stats st;
	struct env e;
	char err[512];

	exl_engine_config_init(&cfg);
	cfg.max_batch_tokens = 32;
	cfg.prefill_chunk = 16;
	cfg.max_jobs = 4;
	greedy(&s, 150);
	s.ignore_eos = true;
	run_one(&s, "Once upon a time", NULL, ref_a);
	run_one(&s, "The dog", NULL, ref_b);
	e.kv = exl_model_kvcache_create_for(model, 2048, 16, 1, cfg.max_batch_tokens, err,
					    sizeof(err));
	if (!e.kv)
		DIE("kvcache: %s", err);
	e.eng = exl_engine_create(model, e.kv, &cfg, err, sizeof(err));
	if (!e.eng)
		DIE("engine: %s", err);
	CHECK(exl_kvcache_local_n_pages(e.kv) == 5 && exl_kvcache_local_window(e.kv) == 8,
	      "local pool of %d pages, window %d", exl_kvcache_local_n_pages(e.kv),
	      exl_kvcache_local_window(e.kv));
	struct exl_job *ja = job_text(&s, "Once upon a time", NULL, a);
	struct exl_job *jb = job_text(&s, "The dog", NULL, b);

	add(&e, ja);
	add(&e, jb);
	if (exl_engine_step(e.eng, err, sizeof(err)) <= 0)
		DIE("step: %s", err);
	exl_engine_stats(e.eng, &st);
	CHECK(st.active == 1 && st.queued == 1 && st.kv_local_pages_total == 5,
	      "%d active, %d queued, %d local pages", st.active, st.queued,
	      st.kv_local_pages_total);
	int most = 0;

	while (!a->n_done || !b->n_done) {
		if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
		exl_engine_stats(e.eng, &st);
		if (st.kv_local_pages_total - st.kv_local_pages_free > most)
			most = st.kv_local_pages_total - st.kv_local_pages_free;
	}
	(void)both;
	CHECK(a->reason == EXL_STOP_MAX_NEW_TOKENS && b->reason == EXL_STOP_MAX_NEW_TOKENS,
	      "reasons %s %s", exl_stop_reason_name(a->reason), exl_stop_reason_name(b->reason));
	CHECK(a->n_rtoks == 150 && !memcmp(a->rtoks, ref_a->rtoks, sizeof(a->rtoks[0]) * 150),
	      "first job differs from it alone: '%s' vs '%s'", a->rtext, ref_a->rtext);
	CHECK(b->n_rtoks == 150 && !memcmp(b->rtoks, ref_b->rtoks, sizeof(b->rtoks[0]) * 150),
	      "waited job differs from it alone: '%s' vs '%s'", b->rtext, ref_b->rtext);
	exl_engine_stats(e.eng, &st);
	CHECK(most <= 5 && st.kv_local_pages_free == 5 && st.kv_pages_free == st.kv_pages_total,
	      "local pages: at most %d in use, %d of 5 free after", most,
	      st.kv_local_pages_free);
	printf("  %d and %d positions through a local pool of 5 pages (at most %d in use)\n",
	       a->prompt_tokens + 149, b->prompt_tokens + 149, most);
	/* CFG: two windows in a pool of one; the output is cut to what both
	 * sequences at their whole length hold in it (5 pages between them) */
	struct rec *c = new_rec();
	struct exl_job *jc = job_text(&s, "Once upon a time", "The dog", c);

	add(&e, jc);
	run_until(&e, &c, 1);
	CHECK(c->reason == EXL_STOP_MAX_CONTEXT && c->n_rtoks > 0 && c->n_rtoks < 48,
	      "CFG job: %s after %d tokens", exl_stop_reason_name(c->reason), c->n_rtoks);
	exl_job_free(jc);
	free(c);
	exl_job_free(ja);
	exl_job_free(jb);
	free_env(&e);
	free(ref_a);
	free(ref_b);
	free(a);
	free(b);
}

static void case_pause(void)
{
	struct exl_gen_settings s;
	struct rec *ref = new_rec(), *r = new_rec(), *other = new_rec();
	char err[256];

	greedy(&s, 30);
	run_one(&s, "Once upon a time", NULL, ref);
	struct env e = make_env(2048, 16, NULL);

	r->pause_at = 4;
	struct exl_job *j = job_text(&s, "Once upon a time", NULL, r);
	greedy(&s, 200);
	s.ignore_eos = true;
	struct exl_job *j2 = job_text(&s, "The dog", NULL, other);

	add(&e, j);
	add(&e, j2);
	while (!r->paused_once)
		if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
	int chunks = r->n_chunks;

	/* Paused: the other job goes on, this one does not move. */
	for (int k = 0; k < 20; k++)
		if (exl_engine_step(e.eng, err, sizeof(err)) <= 0)
			DIE("step while paused: %s", err);
	struct exl_engine_stats st;

	exl_engine_stats(e.eng, &st);
	CHECK(r->n_chunks == chunks && r->n_done == 0 && st.paused == 1,
	      "paused job moved: %d chunks (was %d), paused %d", r->n_chunks, chunks, st.paused);
	exl_job_resume(j);
	struct rec *both[2] = { r, other };

	run_until(&e, both, 2);
	CHECK(!strcmp(r->rtext, ref->rtext), "paused job '%s' vs '%s'", r->rtext, ref->rtext);
	check_consistent(r);
	exl_job_free(j);
	exl_job_free(j2);
	free_env(&e);
	free(ref);
	free(r);
	free(other);
}

/* ---- suspension: a paused job and the queue ---- */

/* Steps until r has paused (its consumer said PAUSE). */
static void step_until_paused(struct env *e, struct rec *r)
{
	char err[256];

	for (int guard = 0; !r->paused_once; guard++) {
		if (guard > 100000)
			DIE("the job never paused");
		if (exl_engine_step(e->eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
	}
}

/* A paused job gives up its slot and reservation as soon as a queued job
 * needs them, but keeps its pages: resumed, it recomputes nothing.  When
 * the queued job needs its pages too, they are reclaimed; resumed, it maps
 * back the full pages the prefix cache kept and recomputes the rest.
 * Either way it ends with the text it has alone. */
static void case_suspend(void)
{
	struct exl_gen_settings s;
	struct rec *ref = new_rec(), *a = new_rec(), *b = new_rec();
	struct exl_engine_stats st;

	greedy(&s, 60);
	run_one(&s, "Once upon a time", NULL, ref);
	for (int round = 0; round < 2; round++) {
		/* 6 pages of 16; A reserves 4 (5 + 59 positions) */
		struct env e = make_env(96, 16, NULL);
		bool reclaim = round == 1;

		memset(a, 0, sizeof(*a));
		memset(b, 0, sizeof(*b));
		a->top_sorted = b->top_sorted = true;
		/* paused holding 1 page (8 positions), or 2 (24) */
		a->pause_at = reclaim ? 20 : 4;
		greedy(&s, 60);
		struct exl_job *ja = job_text(&s, "Once upon a time", NULL, a);

		add(&e, ja);
		step_until_paused(&e, a);
		/* B reserves 4 pages (3 + 59 positions), or 5 (3 + 69): with A's
		 * reservation neither fits; beside A's pages only the first does */
		greedy(&s, reclaim ? 70 : 60);
		struct exl_job *jb = job_text(&s, "The dog", NULL, b);

		add(&e, jb);
		run_until(&e, &b, 1);
		exl_engine_stats(e.eng, &st);
		CHECK(st.suspended == 1 && a->n_done == 0, "round %d: %d suspended while B ran",
		      round, st.suspended);
		exl_job_resume(ja);
		run_until(&e, &a, 1);
		exl_engine_stats(e.eng, &st);
		CHECK(!strcmp(a->rtext, ref->rtext), "round %d: suspended job '%s' vs alone '%s'",
		      round, a->rtext, ref->rtext);
		check_consistent(a);
		if (!reclaim)
			CHECK(st.recomputed_tokens == 0, "kept pages, yet %llu positions recomputed",
			      (unsigned long long)st.recomputed_tokens);
		else
			CHECK(st.recomputed_tokens > 0 && st.recomputed_tokens < 16,
			      "reclaimed: %llu positions recomputed (want the part after its "
			      "cached full page: 1..15)", (unsigned long long)st.recomputed_tokens);
		printf("  round %d: %llu positions recomputed\n", round,
		       (unsigned long long)st.recomputed_tokens);
		exl_job_free(ja);
		exl_job_free(jb);
		free_env(&e);
	}
	free(ref);
	free(a);
	free(b);
}

/* One slot: A pauses, B takes the slot, A's consumer reads again while B
 * runs, then fresh C comes.  With resume_yield 10 s, C goes before A; with
 * 0, A (ready before C came) goes first. */
static void case_suspend_order(void)
{
	struct exl_gen_settings s;
	struct exl_engine_config cfg;

	for (int round = 0; round < 2; round++) {
		struct rec *a = new_rec(), *b = new_rec(), *c = new_rec();
		struct rec *all[3] = { a, b, c };
		bool yield = round == 0;
		char err[256];

		exl_engine_config_init(&cfg);
		cfg.max_jobs = 1;
		cfg.resume_yield = yield ? 10.0 : 0.0;
		struct env e = make_env(2048, 16, &cfg);

		a->pause_at = 3;
		greedy(&s, 20);
		struct exl_job *ja = job_text(&s, "Once upon a time", NULL, a);
		struct exl_job *jb = job_text(&s, "The dog", NULL, b);
		struct exl_job *jc = job_text(&s, "Lily liked to", NULL, c);

		add(&e, ja);
		step_until_paused(&e, a);
		add(&e, jb);
		if (exl_engine_step(e.eng, err, sizeof(err)) <= 0)
			DIE("step: %s", err);
		CHECK(b->n_chunks > 0 || b->n_done, "round %d: B did not take A's slot", round);
		exl_job_resume(ja);
		if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
		add(&e, jc);
		int a_chunks = a->n_chunks;

		run_until(&e, &b, 1);
		CHECK(a->n_chunks == a_chunks, "round %d: A ran beside B with one slot", round);
		/* B is done: the next step admits C or A */
		for (int k = 0; k < 3; k++)
			if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
				DIE("step: %s", err);
		if (yield)
			CHECK(c->n_chunks > 0 && a->n_chunks == a_chunks,
			      "resume_yield 10 s: fresh C should go first (C %d chunks, A %d more)",
			      c->n_chunks, a->n_chunks - a_chunks);
		else
			CHECK(a->n_chunks > a_chunks && c->n_chunks == 0,
			      "resume_yield 0: A, ready first, should go first (A %d more chunks, C %d)",
			      a->n_chunks - a_chunks, c->n_chunks);
		run_until(&e, all, 3);
		exl_job_free(ja);
		exl_job_free(jb);
		exl_job_free(jc);
		free_env(&e);
		free(a);
		free(b);
		free(c);
	}
}

/* ---- the filter hook: lowercase letters and spaces only, complete
 * after 8 tokens ---- */

struct lower_filter {
	struct exl_filter f;
	const struct exl_tokenizer *tok;
	int accepted;
	int limit;
	bool prefer;
};

static bool lower_ok(const struct exl_tokenizer *tok, int32_t id)
{
	char buf[64];
	size_t n = exl_token_bytes(tok, id, false, buf, sizeof(buf));

	if (n == 0 || n > sizeof(buf))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(buf[i] == ' ' || (buf[i] >= 'a' && buf[i] <= 'z')))
			return false;
	return true;
}

static int lf_allowed(struct exl_filter *f, uint32_t *mask, int n_vocab, char *err, size_t errlen)
{
	struct lower_filter *lf = (struct lower_filter *)f;

	(void)err;
	(void)errlen;
	if (lf->accepted >= lf->limit)
		return 0;
	for (int i = 0; i < n_vocab && i < exl_tokenizer_n_vocab(lf->tok); i++)
		if (lower_ok(lf->tok, i))
			mask[i >> 5] |= 1u << (i & 31);
	return 0;
}

static int lf_accept(struct exl_filter *f, int32_t t, char *err, size_t errlen)
{
	struct lower_filter *lf = (struct lower_filter *)f;

	if (!lower_ok(lf->tok, t) || lf->accepted >= lf->limit) {
		snprintf(err, errlen, "token %d not allowed", t);
		return -1;
	}
	lf->accepted++;
	return 0;
}

static bool lf_complete(const struct exl_filter *f)
{
	const struct lower_filter *lf = (const struct lower_filter *)f;

	return lf->accepted >= lf->limit;
}

static bool lf_prefer(const struct exl_filter *f)
{
	return ((const struct lower_filter *)f)->prefer;
}

static int lf_reset(struct exl_filter *f, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	((struct lower_filter *)f)->accepted = 0;
	return 0;
}

static int lf_freed;

static void lf_free(struct exl_filter *f)
{
	lf_freed++;
	free(f);
}

static const struct exl_filter_ops lf_ops = {
	lf_allowed, lf_accept, lf_complete, lf_prefer, lf_reset, lf_free,
};

static struct exl_filter *lower_filter(int limit, bool prefer)
{
	struct lower_filter *lf = calloc(1, sizeof(*lf));

	if (!lf)
		DIE("oom");
	lf->f.ops = &lf_ops;
	lf->tok = exl_model_tokenizer(model);
	lf->limit = limit;
	lf->prefer = prefer;
	return &lf->f;
}

static void case_filter(void)
{
	struct exl_gen_settings s;
	struct rec *r = new_rec();

	for (int seed = 0; seed < 4; seed++) {
		plain(&s, 40, 60 + (uint64_t)seed);
		s.filter = lower_filter(8, true);
		run_one(&s, "Once upon a time", NULL, r);
		CHECK(r->reason == EXL_STOP_END_FILTER && r->n_rtoks == 8, "filter: %s after %d (%s)",
		      exl_stop_reason_name(r->reason), r->n_rtoks, r->error);
		for (const char *p = r->rtext; *p; p++)
			CHECK(*p == ' ' || (*p >= 'a' && *p <= 'z'), "filtered text '%s'", r->rtext);
		check_consistent(r);
	}
	/* Without the filter, the text has punctuation soon. */
	greedy(&s, 8);
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(strchr(r->rtext, ','), "unfiltered: '%s'", r->rtext);
	/* Not preferring EOS: the filter allows nothing more, so it ends all
	 * the same, and with a banned string it replays after rewinds. */
	const char *ban[] = { "there" };

	greedy(&s, 40);
	s.filter = lower_filter(8, false);
	s.banned_strings = ban;
	s.n_banned_strings = 1;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_END_FILTER && r->n_rtoks == 8 && !strstr(r->rtext, "there"),
	      "filter + ban: %s after %d '%s' (%s)", exl_stop_reason_name(r->reason), r->n_rtoks,
	      r->rtext, r->error);
	CHECK(lf_freed == 5, "filters freed: %d", lf_freed);
	free(r);
}

/* ---- a banned character spelled by byte tokens ---- */

/* A filter for lowercase text with one non-ASCII character, spelled by the
 * byte tokens lead, cont: after lead only cont may follow; complete after
 * limit tokens at a character boundary. */
struct utf8_filter {
	struct exl_filter f;
	const struct exl_tokenizer *tok;
	int32_t lead, cont;
	int accepted;
	int limit;
	bool need_cont;
};

static int uf_allowed(struct exl_filter *f, uint32_t *mask, int n_vocab, char *err, size_t errlen)
{
	struct utf8_filter *uf = (struct utf8_filter *)f;

	(void)err;
	(void)errlen;
	if (uf->need_cont) {
		mask[uf->cont >> 5] |= 1u << (uf->cont & 31);
		return 0;
	}
	if (uf->accepted >= uf->limit)
		return 0;
	mask[uf->lead >> 5] |= 1u << (uf->lead & 31);
	for (int i = 0; i < n_vocab && i < exl_tokenizer_n_vocab(uf->tok); i++)
		if (lower_ok(uf->tok, i))
			mask[i >> 5] |= 1u << (i & 31);
	return 0;
}

static int uf_accept(struct exl_filter *f, int32_t t, char *err, size_t errlen)
{
	struct utf8_filter *uf = (struct utf8_filter *)f;
	bool ok = uf->need_cont ? t == uf->cont :
		  uf->accepted < uf->limit && (t == uf->lead || lower_ok(uf->tok, t));

	if (!ok) {
		snprintf(err, errlen, "token %d not allowed", t);
		return -1;
	}
	uf->need_cont = t == uf->lead;
	uf->accepted++;
	return 0;
}

static bool uf_complete(const struct exl_filter *f)
{
	const struct utf8_filter *uf = (const struct utf8_filter *)f;

	return uf->accepted >= uf->limit && !uf->need_cont;
}

static bool uf_prefer(const struct exl_filter *f)
{
	(void)f;
	return true;
}

static int uf_reset(struct exl_filter *f, char *err, size_t errlen)
{
	struct utf8_filter *uf = (struct utf8_filter *)f;

	(void)err;
	(void)errlen;
	uf->accepted = 0;
	uf->need_cont = false;
	return 0;
}

static void uf_free(struct exl_filter *f)
{
	free(f);
}

static const struct exl_filter_ops uf_ops = {
	uf_allowed, uf_accept, uf_complete, uf_prefer, uf_reset, uf_free,
};

/* The token whose bytes are just the byte b, or -1. */
static int32_t byte_token(const struct exl_tokenizer *tok, unsigned char b)
{
	char buf[8];

	for (int32_t i = 0; i < exl_tokenizer_n_vocab(tok); i++)
		if (exl_token_bytes(tok, i, false, buf, sizeof(buf)) == 1 && (unsigned char)buf[0] == b)
			return i;
	return -1;
}

static const struct exl_tokenizer *stream_tok;

/* Every chunk: the tokens streamed so far spell exactly the text streamed
 * so far (a token's id comes once its text is complete). */
static void tokens_match_text(struct rec *r)
{
	char *t = exl_tok_decode(stream_tok, r->toks, (size_t)r->n_toks, false, false);

	CHECK(t && !strcmp(t, r->text), "streamed tokens spell '%s', streamed text '%s'",
	      t ? t : "", r->text);
	free(t);
}

/* "é" is <0xC3> <0xA9>, both made the greedy choice by a bias.  Banning
 * "é" must rewind to the lead byte (where the character begins) and ban
 * it there; banning the continuation byte instead would keep the lead
 * byte, which the filter then only lets <0xA9> follow: an error, or
 * without a filter a U+FFFD in the text. */
static void case_banned_utf8(void)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(model);
	struct exl_gen_settings s;
	struct rec *r = new_rec();
	int32_t lead = byte_token(tok, 0xc3), cont = byte_token(tok, 0xa9);
	const char *ban[] = { "\xc3\xa9" };

	CHECK(lead >= 0 && cont >= 0, "no byte tokens for U+00E9: %d %d", lead, cont);
	if (lead < 0 || cont < 0) {
		free(r);
		return;
	}
	struct exl_token_bias bias[2] = { { lead, 100.0f }, { cont, 100.0f } };

	stream_tok = tok;
	for (int k = 0; k < 2; k++) {
		struct utf8_filter *uf = calloc(1, sizeof(*uf));

		if (!uf)
			DIE("oom");
		uf->f.ops = &uf_ops;
		uf->tok = tok;
		uf->lead = lead;
		uf->cont = cont;
		uf->limit = 8;
		greedy(&s, 20);
		s.filter = &uf->f;
		s.sampling.bias = bias;
		s.sampling.n_bias = 2;
		s.banned_strings = k ? ban : NULL;
		s.n_banned_strings = k;
		memset(r, 0, sizeof(*r));
		r->hook = tokens_match_text;
		struct env e = make_env(2048, 16, NULL);
		struct exl_job *j = job_text(&s, "Once upon a time", NULL, r);

		add(&e, j);
		run_until(&e, &r, 1);
		exl_job_free(j);
		free_env(&e);
		CHECK(r->reason == EXL_STOP_END_FILTER, "ban %d: %s after %d '%s' (%s)", k,
		      exl_stop_reason_name(r->reason), r->n_rtoks, r->rtext, r->error);
		CHECK(!strstr(r->rtext, "\xef\xbf\xbd"), "ban %d: U+FFFD in '%s'", k, r->rtext);
		if (k == 0) {
			CHECK(!strncmp(r->rtext, ban[0], 2), "without the ban: '%s'", r->rtext);
			continue;
		}
		CHECK(!strstr(r->rtext, ban[0]) && !strstr(r->text, ban[0]), "banned: '%s'", r->rtext);
		CHECK(r->n_rtoks >= 8, "%d tokens", r->n_rtoks);
		check_consistent(r);
	}
	free(r);
}

static void case_prefix(void)
{
	struct exl_gen_settings s;
	struct rec *a = new_rec(), *b = new_rec();
	const char *p = "Once upon a time, there was a little girl named Lily. She loved to play "
			"outside in the park. One day, she saw a big, red ball.";
	struct env e = make_env(2048, 16, NULL);

	greedy(&s, 30);
	struct exl_job *ja = job_text(&s, p, NULL, a);

	add(&e, ja);
	run_until(&e, &a, 1);
	struct exl_job *jb = job_text(&s, p, NULL, b);

	add(&e, jb);
	run_until(&e, &b, 1);
	CHECK(a->cached_tokens == 0 && b->cached_tokens >= 16 && b->cached_tokens % 16 == 0,
	      "cached %d then %d of %d", a->cached_tokens, b->cached_tokens, b->prompt_tokens);
	CHECK(!strcmp(a->rtext, b->rtext), "shared prefix changed the output: '%s' vs '%s'",
	      a->rtext, b->rtext);
	exl_job_free(ja);
	exl_job_free(jb);
	free_env(&e);

	/* Chunked prefill (chunks of 5, batches of 8) gives the same. */
	struct exl_engine_config cfg;

	exl_engine_config_init(&cfg);
	cfg.max_batch_tokens = 8;
	cfg.prefill_chunk = 5;
	cfg.max_jobs = 4;
	e = make_env(2048, 16, &cfg);
	struct rec *c = new_rec(), *d = new_rec();
	struct rec *both[2] = { c, d };
	struct exl_job *jc = job_text(&s, p, NULL, c);
	s.cfg_scale = 1.5f;
	struct exl_job *jd = job_text(&s, p, "The dog was sad.", d);

	add(&e, jc);
	add(&e, jd);
	run_until(&e, both, 2);
	CHECK(!strcmp(a->rtext, c->rtext), "chunked prefill: '%s' vs '%s'", c->rtext, a->rtext);
	CHECK(d->reason == EXL_STOP_MAX_NEW_TOKENS, "CFG chunked: %s", exl_stop_reason_name(d->reason));
	exl_job_free(jc);
	exl_job_free(jd);
	free_env(&e);
	free(a);
	free(b);
	free(c);
	free(d);
}

static void case_probs(void)
{
	struct exl_gen_settings s;
	struct rec *r = new_rec();

	greedy(&s, 20);
	s.return_probs = true;
	s.return_top_k = 5;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->n_toks == 20, "%d tokens", r->n_toks);
	CHECK(r->top_sorted, "top candidates not sorted");
	for (int i = 0; i < r->n_toks; i++) {
		CHECK(r->top1[i] == r->toks[i], "greedy token %d is %d, top candidate %d", i,
		      r->toks[i], r->top1[i]);
		CHECK(r->probs[i] == r->top1p[i] && r->probs[i] > 0.0f && r->probs[i] <= 1.0f,
		      "prob %g vs top %g", r->probs[i], r->top1p[i]);
	}
	/* a sampled run reports the probability of what it drew */
	plain(&s, 30, 9);
	s.return_probs = true;
	s.return_top_k = 3;
	run_one(&s, "Once upon a time", NULL, r);
	int below = 0;

	for (int i = 0; i < r->n_toks; i++) {
		CHECK(r->probs[i] > 0.0f && r->probs[i] <= r->top1p[i] + 1e-6f, "prob %d: %g > %g", i,
		      r->probs[i], r->top1p[i]);
		below += r->probs[i] < r->top1p[i];
	}
	CHECK(below > 0, "every sampled token was the most likely one");
	CHECK(r->n_logit_rows == 0, "logits streamed unasked");

	/* Streamed logits: one row per token, the model's (the greedy
	 * token is its argmax, its softmax is the reported probability). */
	greedy(&s, 20);
	s.return_probs = true;
	s.return_logits = true;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->n_toks == 20 && r->n_logit_rows == 20, "%d tokens, %d logit rows", r->n_toks,
	      r->n_logit_rows);
	for (int i = 0; i < r->n_toks; i++) {
		CHECK(r->lg_argmax[i] == r->toks[i], "token %d: greedy %d, logits' argmax %d", i,
		      r->toks[i], r->lg_argmax[i]);
		CHECK(fabsf(r->lg_p[i] - r->probs[i]) < 1e-5f, "token %d: softmax %g, prob %g", i,
		      r->lg_p[i], r->probs[i]);
	}
	check_consistent(r);
	/* Sampled, and with a banned string that rewinds (the greedy text's
	 * third word): the rows stay aligned with the tokens that were kept. */
	char word[64] = "";

	sscanf(r->rtext, "%*s %*s %63s", word);
	CHECK(word[0], "no third word in '%s'", r->rtext);
	const char *ban[] = { word };

	for (int k = 0; k < 2; k++) {
		if (k == 0) {
			plain(&s, 30, 9);
		} else {
			greedy(&s, 40);
			s.banned_strings = ban;
			s.n_banned_strings = 1;
		}
		s.return_probs = true;
		s.return_top_k = 1;
		s.return_logits = true;
		run_one(&s, "Once upon a time", NULL, r);
		CHECK(r->n_toks > 0 && r->n_logit_rows == r->n_toks, "run %d: %d tokens, %d rows", k,
		      r->n_toks, r->n_logit_rows);
		int not_top = 0;

		for (int i = 0; i < r->n_toks; i++) {
			CHECK(r->lg_argmax[i] == r->top1[i], "run %d token %d: top %d, argmax %d", k, i,
			      r->top1[i], r->lg_argmax[i]);
			CHECK(fabsf(r->lg_p[i] - r->probs[i]) < 1e-5f,
			      "run %d token %d: softmax %g, prob %g", k, i, r->lg_p[i], r->probs[i]);
			not_top += r->toks[i] != r->top1[i];
		}
		CHECK(not_top > 0, "run %d: every token was the most likely", k);
		check_consistent(r);
	}
	free(r);
}

/* Sampler settings end to end: each visibly changes the output. */
static int repeats(const int32_t *t, int n)
{
	int r = 0;

	for (int i = 0; i < n; i++)
		for (int k = 0; k < i; k++)
			if (t[k] == t[i]) {
				r++;
				break;
			}
	return r;
}

static bool bigram_repeat(const int32_t *t, int n)
{
	for (int i = 1; i < n; i++)
		for (int k = 1; k < i; k++)
			if (t[k - 1] == t[i - 1] && t[k] == t[i])
				return true;
	return false;
}

/* The longest run of tokens that occurs twice. */
static int longest_repeat(const int32_t *t, int n)
{
	int best = 0;

	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			int l = 0;

			while (j + l < n && t[i + l] == t[j + l])
				l++;
			if (l > best)
				best = l;
		}
	return best;
}

/* DRY on stories260K: the prompt repeats itself and greedy copies on
 * (" girl named"); DRY stops the copy (" boy named") unless the match is
 * shorter than dry_allowed_len, which a sequence breaker inside it makes
 * it (the match back from " little" then ends at the comma). */
static void dry_stories(void)
{
	struct exl_gen_settings s;
	struct rec *b = new_rec();
	const char *rep = "Once upon a time, there was a little girl named Lily. "
			  "Once upon a time, there was a little";

	greedy(&s, 4);
	run_one(&s, rep, NULL, b);
	CHECK(!strcmp(b->rtext, " girl named"), "greedy copy: '%s'", b->rtext);
	s.sampling.dry_mult = 2.0f;
	run_one(&s, rep, NULL, b);
	CHECK(!strcmp(b->rtext, " boy named"), "DRY: '%s'", b->rtext);
	s.sampling.dry_allowed_len = 20;
	run_one(&s, rep, NULL, b);
	CHECK(!strcmp(b->rtext, " girl named"), "dry_allowed_len 20 still penalised: '%s'", b->rtext);
	s.sampling.dry_allowed_len = 5;
	run_one(&s, rep, NULL, b);
	CHECK(!strcmp(b->rtext, " boy named"), "dry_allowed_len 5: '%s'", b->rtext);
	s.sampling.n_dry_breakers = 1;
	strcpy(s.sampling.dry_breakers[0], ",");
	run_one(&s, rep, NULL, b);
	CHECK(!strcmp(b->rtext, " girl w"), "DRY with ',' breaking: '%s'", b->rtext);
	check_consistent(b);
	free(b);
}

static void case_settings(void)
{
	struct exl_gen_settings s;
	struct rec *a = new_rec(), *b = new_rec();

	greedy(&s, 80);
	s.ignore_eos = true;
	run_one(&s, "Once upon a time", NULL, a);
	CHECK(bigram_repeat(a->rtoks, a->n_rtoks), "greedy text repeats no bigram");
	s.sampling.no_repeat_ngram = 2;
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(!bigram_repeat(b->rtoks, b->n_rtoks), "no_repeat_ngram 2 repeated a bigram");

	greedy(&s, 80);
	s.ignore_eos = true;
	s.sampling.rep_pen = 1.5f;
	s.sampling.rep_range = -1;
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(repeats(b->rtoks, b->n_rtoks) < repeats(a->rtoks, a->n_rtoks),
	      "rep_pen: %d repeats vs %d", repeats(b->rtoks, b->n_rtoks), repeats(a->rtoks, a->n_rtoks));

	greedy(&s, 80);
	s.ignore_eos = true;
	s.sampling.freq_pen = 1.0f;
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(strcmp(a->rtext, b->rtext), "freq_pen had no effect");
	greedy(&s, 80);
	s.ignore_eos = true;
	s.sampling.pres_pen = 1.5f;
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(strcmp(a->rtext, b->rtext), "pres_pen had no effect");
	/* DRY on the model's own loops: greedy text repeats long runs of
	 * tokens, DRY keeps the repeats short. */
	greedy(&s, 80);
	s.ignore_eos = true;
	run_one(&s, "The dog", NULL, b);
	int loop = longest_repeat(b->rtoks, b->n_rtoks);

	s.sampling.dry_mult = 2.0f;
	run_one(&s, "The dog", NULL, b);
	CHECK(loop > 4 && longest_repeat(b->rtoks, b->n_rtoks) < loop,
	      "DRY: longest repeat %d tokens, greedy %d", longest_repeat(b->rtoks, b->n_rtoks), loop);
	if (!strcmp(model_name, "stories260K"))
		dry_stories();

	/* a biased-away token never appears */
	struct exl_token_bias bias = { a->rtoks[0], -INFINITY };

	greedy(&s, 80);
	s.ignore_eos = true;
	s.sampling.bias = &bias;
	s.sampling.n_bias = 1;
	run_one(&s, "Once upon a time", NULL, b);
	for (int i = 0; i < b->n_rtoks; i++)
		CHECK(b->rtoks[i] != bias.id, "banned id %d at %d", bias.id, i);

	/* mirostat and XTC run end to end and change a seeded sample */
	plain(&s, 40, 31);
	run_one(&s, "Once upon a time", NULL, a);
	plain(&s, 40, 31);
	s.sampling.mirostat = 2;
	s.sampling.mirostat_tau = 1.0f;
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(strcmp(a->rtext, b->rtext) && b->n_rtoks > 0, "mirostat had no effect");
	plain(&s, 40, 31);
	s.sampling.xtc_prob = 1.0f;
	s.sampling.xtc_thresh = 0.1f;
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(strcmp(a->rtext, b->rtext), "XTC had no effect");
	free(a);
	free(b);
}

/* add_bos, encode_special_tokens and decode_special_tokens each change
 * what the job sees or says. */
static void case_prompt(void)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(model);
	struct exl_gen_settings s;
	struct rec *r = new_rec();
	int32_t bos = exl_tokenizer_bos(tok);
	char bos_text[64];
	size_t bos_len = exl_token_bytes(tok, bos, true, bos_text, sizeof(bos_text) - 1);

	CHECK(bos >= 0 && bos_len > 0 && bos_len < sizeof(bos_text), "BOS %d text of %zu bytes",
	      bos, bos_len);
	if (bos < 0 || bos_len == 0 || bos_len >= sizeof(bos_text)) {
		free(r);
		return;
	}
	bos_text[bos_len] = 0;

	/* add_bos: 0 drops the BOS the model's default adds, 1 adds it. */
	greedy(&s, 4);
	run_one(&s, "Once upon a time", NULL, r);
	int with_default = r->prompt_tokens;

	greedy(&s, 4);
	s.add_bos = 0;
	run_one(&s, "Once upon a time", NULL, r);
	int without = r->prompt_tokens;

	greedy(&s, 4);
	s.add_bos = 1;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(without > 0 && r->prompt_tokens == without + 1, "add_bos 1: %d tokens, 0: %d",
	      r->prompt_tokens, without);
	CHECK(with_default == without + exl_tokenizer_add_bos(tok), "default %d tokens, add_bos 0: %d",
	      with_default, without);

	/* encode_special_tokens: BOS's text in the prompt is one token, not
	 * its characters. */
	char text[128];

	snprintf(text, sizeof(text), "%sOnce upon a time", bos_text);
	greedy(&s, 4);
	s.add_bos = 0;
	run_one(&s, text, NULL, r);
	int plain_text = r->prompt_tokens;

	greedy(&s, 4);
	s.add_bos = 0;
	s.encode_special_tokens = true;
	run_one(&s, text, NULL, r);
	CHECK(r->prompt_tokens == without + 1 && plain_text > r->prompt_tokens,
	      "encode_special: %d tokens, as text %d, without the BOS text %d", r->prompt_tokens,
	      plain_text, without);

	/* decode_special_tokens: BOS, made the greedy choice by a bias,
	 * shows its text only when asked. */
	struct exl_token_bias bias = { bos, 100.0f };

	greedy(&s, 3);
	s.sampling.bias = &bias;
	s.sampling.n_bias = 1;
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->n_rtoks == 3 && r->rtoks[0] == bos && r->rtext[0] == 0,
	      "BOS without decode_special: %d tokens, '%s'", r->n_rtoks, r->rtext);
	check_consistent(r);
	s.decode_special_tokens = true;
	run_one(&s, "Once upon a time", NULL, r);
	char want[256];

	snprintf(want, sizeof(want), "%s%s%s", bos_text, bos_text, bos_text);
	CHECK(!strcmp(r->rtext, want), "BOS with decode_special: '%s', want '%s'", r->rtext, want);
	check_consistent(r);
	free(r);
}

static void case_end_all(void)
{
	struct exl_gen_settings s;
	struct rec *a = new_rec(), *b = new_rec();
	struct env e = make_env(96, 16, NULL);
	char err[256];

	greedy(&s, 60);
	struct exl_job *ja = job_text(&s, "Once upon a time", NULL, a);
	struct exl_job *jb = job_text(&s, "The dog", NULL, b);

	add(&e, ja);
	add(&e, jb);
	for (int k = 0; k < 3; k++)
		if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
	exl_engine_end_all(e.eng, EXL_STOP_UNLOADED);
	CHECK(a->n_done == 1 && a->reason == EXL_STOP_UNLOADED && b->n_done == 1 &&
	      b->reason == EXL_STOP_UNLOADED, "end_all: %s %s", exl_stop_reason_name(a->reason),
	      exl_stop_reason_name(b->reason));
	CHECK(!exl_engine_has_work(e.eng), "engine still has work");
	struct exl_engine_stats st;

	exl_engine_stats(e.eng, &st);
	CHECK(st.kv_pages_free == st.kv_pages_total, "%d of %d pages free", st.kv_pages_free,
	      st.kv_pages_total);
	exl_job_free(ja);
	exl_job_free(jb);
	free_env(&e);
	free(a);
	free(b);
}

static void case_errors(void)
{
	struct exl_gen_settings s;
	struct exl_prompt p = { "Hi", 2, NULL, 0 };
	char err[256];
	const char *empty[] = { "" };
	int32_t bad_ids[] = { 1, 99999 };

	greedy(&s, 10);
	s.sampling.top_p = 2.0f;
	CHECK(!exl_job_create(model, &s, &p, NULL, &cbs, NULL, err, sizeof(err)) &&
	      strstr(err, "top_p"), "bad top_p: %s", err);
	greedy(&s, 10);
	s.min_new_tokens = 20;
	CHECK(!exl_job_create(model, &s, &p, NULL, &cbs, NULL, err, sizeof(err)) &&
	      strstr(err, "min_new_tokens"), "min > max: %s", err);
	greedy(&s, 10);
	s.stop_strings = empty;
	s.n_stop_strings = 1;
	CHECK(!exl_job_create(model, &s, &p, NULL, &cbs, NULL, err, sizeof(err)) &&
	      strstr(err, "stop string"), "empty stop string: %s", err);
	/* Stop and banned strings must be whole UTF-8 characters: one that
	 * starts with a continuation byte or ends inside a character could
	 * match inside a character of the output and cut it. */
	const char *bad_utf8[] = { "\xa9", "caf\xc3", "\xc0\xaf", "\xed\xa0\x80", "a\xf4\x90\x80\x80" };

	for (size_t i = 0; i < sizeof(bad_utf8) / sizeof(bad_utf8[0]); i++) {
		for (int ban = 0; ban < 2; ban++) {
			greedy(&s, 10);
			if (ban) {
				s.banned_strings = &bad_utf8[i];
				s.n_banned_strings = 1;
			} else {
				s.stop_strings = &bad_utf8[i];
				s.n_stop_strings = 1;
			}
			err[0] = 0;
			CHECK(!exl_job_create(model, &s, &p, NULL, &cbs, NULL, err, sizeof(err)) &&
			      strstr(err, ban ? "banned string 0" : "stop string 0") &&
			      strstr(err, "UTF-8"), "%s string %zu: %s", ban ? "banned" : "stop", i,
			      err);
		}
	}
	const char *good_utf8[] = { "caf\xc3\xa9", "\xf0\x9f\x99\x82" };

	greedy(&s, 10);
	s.stop_strings = good_utf8;
	s.n_stop_strings = 2;
	s.banned_strings = good_utf8;
	s.n_banned_strings = 2;
	struct exl_job *good = exl_job_create(model, &s, &p, NULL, &cbs, NULL, err, sizeof(err));

	CHECK(good, "valid UTF-8 stop / banned strings refused: %s", err);
	exl_job_free(good);

	greedy(&s, 10);
	struct exl_prompt ids = { NULL, 0, bad_ids, 2 };

	CHECK(!exl_job_create(model, &s, &ids, NULL, &cbs, NULL, err, sizeof(err)) &&
	      strstr(err, "99999"), "bad prompt id: %s", err);
	greedy(&s, 10);
	s.add_bos = 0;
	struct exl_prompt none = { "", 0, NULL, 0 };

	CHECK(!exl_job_create(model, &s, &none, NULL, &cbs, NULL, err, sizeof(err)) &&
	      strstr(err, "empty"), "empty prompt: %s", err);
	greedy(&s, 10);
	s.filter = lower_filter(3, true);
	s.sampling.mirostat = 1;
	int before = lf_freed;

	CHECK(!exl_job_create(model, &s, &p, NULL, &cbs, NULL, err, sizeof(err)) &&
	      lf_freed == before + 1, "filter not freed on a failed create");

	/* token ids as the prompt */
	struct rec *r = new_rec(), *t = new_rec();

	greedy(&s, 20);
	run_one(&s, "Once upon a time", NULL, r);
	int32_t *pid;
	int n = exl_tok_encode(exl_model_tokenizer(model), "Once upon a time", 16, true, false, &pid,
			     err, sizeof(err));

	CHECK(n > 0, "tokenize: %s", err);
	struct exl_prompt byid = { NULL, 0, pid, n };
	struct exl_job *j = exl_job_create(model, &s, &byid, NULL, &cbs, t, err, sizeof(err));
	struct env e = make_env(2048, 16, NULL);

	if (!j)
		DIE("job by ids: %s", err);
	add(&e, j);
	run_until(&e, &t, 1);
	CHECK(!strcmp(r->rtext, t->rtext), "ids prompt '%s' vs text '%s'", t->rtext, r->rtext);
	exl_job_free(j);
	free(pid);
	free_env(&e);
	free(r);
	free(t);
}

/* ---- non-finite logits ---- */

/* Loads a copy of the model with row `row` of F32 tensor `tensor` made
 * NaN (the file is written to a temporary directory and removed; the
 * weights stay mapped). */
static struct exl_model *load_poisoned(const char *tensor, uint64_t row)
{
	const char *dir = getenv("EXLD_MODELS");
	char src_path[4096], tmp[] = "/tmp/exld-nan-XXXXXX", path[64], err[512];
	struct gguf_file *src;
	struct gguf_writer *w = exl_gguf_writer_new();
	float *copy = NULL;
	struct exl_model *m;

	snprintf(src_path, sizeof(src_path), "%s/%s.gguf", dir, model_name);
	src = exl_gguf_open(src_path, err, sizeof(err));
	if (!src || !w || !mkdtemp(tmp))
		DIE("poisoned copy of %s: %s", src_path, src ? "out of memory or no /tmp" : err);
	for (uint64_t i = 0; i < src->n_kv; i++) {
		char key[256];

		snprintf(key, sizeof(key), "%.*s", (int)src->kv[i].key.len, src->kv[i].key.ptr);
		exl_gguf_writer_set(w, key, &src->kv[i].val);
	}
	for (uint64_t i = 0; i < src->n_tensors; i++) {
		const struct gguf_tensor *t = &src->tensors[i];
		char name[256];
		const void *data = t->data;

		snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
		if (!strcmp(name, tensor)) {
			if (t->type != 0 /* F32 */ || row >= t->nbytes / 4 / t->ne[0])
				DIE("%s is not F32 or has no row %llu", name, (unsigned long long)row);
			copy = malloc(t->nbytes);
			if (!copy)
				DIE("oom");
			memcpy(copy, t->data, t->nbytes);
			for (uint64_t k = 0; k < t->ne[0]; k++)
				copy[row * t->ne[0] + k] = NAN;
			data = copy;
		}
		exl_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, data);
	}
	if (!copy)
		DIE("no tensor %s", tensor);
	snprintf(path, sizeof(path), "%s/nan.gguf", tmp);
	if (exl_gguf_writer_write_file(w, path, err, sizeof(err)))
		DIE("write %s: %s", path, err);
	exl_gguf_writer_free(w);
	exl_gguf_close(src);
	free(copy);
	m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		DIE("load %s: %s", path, err);
	unlink(path);
	rmdir(tmp);
	return m;
}

/* NaN logits used to reach the sampler, which found no token it could
 * pick and blamed bans, filter and healing.  The job now ends at the
 * first such step with an error that says what the model did. */
/* ---- speculative decoding ---- */

/* A drafter for the current model: the same file opened a second time. */
static struct exl_drafter *self_drafter(const char *name)
{
	char path[4096], err[512];
	struct exl_drafter *d;

	snprintf(path, sizeof(path), "%s/%s.gguf", getenv("EXLD_MODELS"), model_name);
	d = exl_drafter_open(name, path, be, model, 4096, 16, 512, err, sizeof(err));
	if (!d)
		DIE("drafter: %s", err);
	return d;
}

/* Every job of a spec case runs in one of these: with the drafter "self"
 * attached, so draft_model jobs can name it. */
/* Proposals on every decoding row (spec_rows past any batch here), so the
 * cases below draft in full batches; case_spec_rows checks the default. */
static struct env spec_env(void)
{
	struct exl_engine_config cfg;
	char err[512];

	exl_engine_config_init(&cfg);
	cfg.spec_rows = 4096;
	struct env e = make_env(4096, 16, &cfg);

	if (exl_engine_attach_drafter(e.eng, self_drafter("self"), err, sizeof(err)))
		DIE("attach: %s", err);
	return e;
}

static void run_spec(const struct exl_gen_settings *s, const char *prompt, const char *negative,
		     struct rec *r)
{
	struct env e = spec_env();
	struct exl_job *j;

	memset(r, 0, sizeof(*r));
	r->top_sorted = true;
	j = job_text(s, prompt, negative, r);
	add(&e, j);
	run_until(&e, &r, 1);
	exl_job_free(j);
	free_env(&e);
	CHECK(r->n_done == 1, "on_done called %d times", r->n_done);
}

/* Same ids, text, end and per-token probabilities. */
static bool same_output(const struct rec *a, const struct rec *b)
{
	return a->reason == b->reason && a->n_rtoks == b->n_rtoks &&
	       !memcmp(a->rtoks, b->rtoks, (size_t)a->n_rtoks * 4) && !strcmp(a->rtext, b->rtext) &&
	       a->stop_token == b->stop_token && !strcmp(a->stop_string, b->stop_string) &&
	       !memcmp(a->probs, b->probs, (size_t)a->n_toks * sizeof(float)) &&
	       !memcmp(a->top1, b->top1, (size_t)a->n_toks * 4) &&
	       !memcmp(a->toks, b->toks, (size_t)a->n_toks * 4) && a->n_toks == b->n_toks;
}

/* The output repeats this prompt's first sentence, so n-gram lookup finds
 * proposals the model accepts. */
static const char *const repeat_prompt =
	"Once upon a time, there was a little girl named Lily. She loved to play outside in "
	"the park. One day, Lily went to the park. Once upon a time";

struct spec_case {
	const char *what;
	const char *prompt;
	const char *negative;
	bool seeded;
	bool ban, stop, regex, heal, min_new, probs;
};

static const struct spec_case spec_cases[] = {
	{ "greedy", NULL, NULL, false, false, false, false, false, false, false },
	{ "seeded", NULL, NULL, true, false, false, false, false, false, false },
	{ "greedy, ban + stop + regex", NULL, NULL, false, true, true, true, false, false, false },
	{ "seeded, ban + stop + regex", NULL, NULL, true, true, true, true, false, false, false },
	{ "seeded, healing + min_new + probs", "Once upon a ti", NULL, true, false, true, false,
	  true, true, true },
	{ "greedy, CFG", NULL, "A sad story", false, false, false, false, false, false, false },
	{ "seeded, CFG + ban", NULL, "The dog", true, true, false, false, false, false, true },
};

static void spec_settings(struct exl_gen_settings *s, const struct spec_case *c, int n,
			  const char *const *ban, const char *const *stop)
{
	if (c->seeded)
		plain(s, n, 31337);
	else
		greedy(s, n);
	if (c->ban) {
		s->banned_strings = ban;
		s->n_banned_strings = 1;
	}
	if (c->stop) {
		s->stop_strings = stop;
		s->n_stop_strings = 1;
	}
	if (c->regex)
		s->regex = "[A-Za-z ,.']+";
	s->token_healing = c->heal;
	if (c->min_new)
		s->min_new_tokens = 20;
	s->return_probs = c->probs;
	s->return_top_k = c->probs ? 3 : 0;
	if (c->negative)
		s->cfg_scale = 1.5f;
}

/* Each case with n-gram or draft-model proposals gives exactly the ids,
 * text, end and probabilities it gives without: rows are consumed in
 * order by the same sampling steps, from logits that are the same bits. */
static void spec_identity(bool use_model)
{
	const char *ban[] = { "Lily" };
	const char *stop[] = { "park." };
	struct rec *ref = new_rec(), *r = new_rec();
	long proposed = 0, accepted = 0;

	for (size_t ci = 0; ci < sizeof(spec_cases) / sizeof(spec_cases[0]); ci++) {
		const struct spec_case *c = &spec_cases[ci];
		const char *prompt = c->prompt ? c->prompt : repeat_prompt;
		static const int k_list[] = { 4, 1, 7 };

		for (size_t ki = 0; ki < 3; ki++) {
			struct exl_gen_settings s;

			spec_settings(&s, c, 80, ban, stop);
			run_one(&s, prompt, c->negative, ref);
			CHECK(ref->reason != EXL_STOP_ERROR, "%s: %s", c->what, ref->error);
			spec_settings(&s, c, 80, ban, stop);
			s.draft_tokens = k_list[ki];
			if (use_model)
				s.draft_model = "self";
			else
				s.ngram_draft = 3;
			run_spec(&s, prompt, c->negative, r);
			CHECK(same_output(ref, r), "%s, %s, draft_tokens %d: '%s' (%s, %d tokens) "
			      "vs without drafting '%s' (%s, %d tokens)", c->what,
			      use_model ? "draft model" : "n-gram", k_list[ki], r->rtext,
			      exl_stop_reason_name(r->reason), r->n_rtoks, ref->rtext,
			      exl_stop_reason_name(ref->reason), ref->n_rtoks);
			check_consistent(r);
			CHECK(r->draft_accepted <= r->draft_proposed && ref->draft_proposed == 0,
			      "%s: accepted %d of %d", c->what, r->draft_accepted, r->draft_proposed);
			proposed += r->draft_proposed;
			accepted += r->draft_accepted;
		}
	}
	printf("%s: %ld of %ld proposed tokens accepted\n", use_model ? "draft model" : "n-gram",
	       accepted, proposed);
	CHECK(proposed > 0 && accepted > 0, "%ld proposed, %ld accepted", proposed, accepted);
	free(ref);
	free(r);
}

static void case_spec_ngram(void)
{
	spec_identity(false);

	/* The greedy case, prompt repeated: the output repeats much of it
	 * (not all: the model tells the story its own way after "to play"),
	 * so a fair share of the proposals are the model's own. */
	struct exl_gen_settings s;
	struct rec *r = new_rec();

	greedy(&s, 40);
	s.ngram_draft = 4;
	run_spec(&s, repeat_prompt, NULL, r);
	CHECK(r->draft_proposed > 0 && r->draft_accepted * 4 > r->draft_proposed,
	      "repeat: %d of %d accepted ('%s')", r->draft_accepted, r->draft_proposed, r->rtext);
	free(r);
}

static void case_spec_model(void)
{
	spec_identity(true);

	/* Drafting for itself, greedy: every proposal is accepted. */
	struct exl_gen_settings s;
	struct rec *r = new_rec();

	greedy(&s, 60);
	s.ignore_eos = true;
	s.draft_model = "self";
	s.draft_tokens = 5;
	run_spec(&s, "Tom and Sue went to the park. They", NULL, r);
	CHECK(r->draft_proposed > 30 && r->draft_accepted == r->draft_proposed,
	      "self-drafting greedy: %d of %d accepted", r->draft_accepted, r->draft_proposed);

	/* A job naming a drafter the engine lacks is refused. */
	struct env e = make_env(2048, 16, NULL);
	char err[512];
	struct exl_job *j;

	greedy(&s, 10);
	s.draft_model = "nope";
	j = job_text(&s, "Hi", NULL, r);
	CHECK(exl_engine_add(e.eng, j, err, sizeof(err)) == -1 && strstr(err, "'nope'"),
	      "unknown draft model: %s", err);
	exl_job_free(j);
	/* Two of one name: refused. */
	CHECK(exl_engine_attach_drafter(e.eng, self_drafter("a"), err, sizeof(err)) == 0, "%s", err);
	CHECK(exl_engine_attach_drafter(e.eng, self_drafter("a"), err, sizeof(err)) == -1 &&
	      strstr(err, "already"), "twice: %s", err);
	free_env(&e);
	free(r);
}

/* Drafting a job with input embedding rows (found by fuzz_generate):
 * n-gram lookup once proposed a row's key (a negative placeholder, not a
 * token) and the verifying pass failed for every job in it; a draft model
 * was fed the keys as tokens, failed and was dropped for every job on the
 * engine.  Now neither proposes for the rows: the same output as without
 * drafting, and the drafter stays. */
static void case_spec_embd(void)
{
	const int n_embd = exl_model_hparams(model)->n_embd;
	/* "day" right before the block and at the prompt's end: the lookup's
	 * first match is followed by the block's first row */
	const char *prompt = "One day <e> and then one day <e> and then one day";
	float *rows = malloc(2 * (size_t)n_embd * sizeof(float));
	struct rec *plain = new_rec(), *r = new_rec();
	struct exl_gen_settings s;
	char err[512];

	if (!rows)
		DIE("oom");
	if (exl_model_token_row(model, 300, rows, err, sizeof(err)) ||
	    exl_model_token_row(model, 301, rows + n_embd, err, sizeof(err)))
		DIE("token rows: %s", err);
	struct exl_embd_block blk = { "<e>", rows, 2 };

	for (int v = 0; v < 3; v++) {
		struct env e = spec_env();
		struct rec *out = v ? r : plain;
		struct exl_job *j;

		greedy(&s, 24);
		s.ignore_eos = true;
		s.embeddings = &blk;
		s.n_embeddings = 1;
		if (v == 1)
			s.ngram_draft = 2, s.draft_tokens = 4;
		if (v == 2)
			s.draft_model = "self", s.draft_tokens = 4;
		memset(out, 0, sizeof(*out));
		out->top_sorted = true;
		j = job_text(&s, prompt, NULL, out);
		add(&e, j);
		run_until(&e, &out, 1);
		exl_job_free(j);
		CHECK(out->reason == EXL_STOP_MAX_NEW_TOKENS && out->n_rtoks == 24,
		      "variant %d: %s (%s), %d tokens", v, exl_stop_reason_name(out->reason),
		      out->error, out->n_rtoks);
		if (v)
			CHECK(same_output(out, plain), "variant %d: '%s' against undrafted '%s'", v,
			      out->rtext, plain->rtext);
		if (v == 2)
			CHECK(exl_engine_has_drafter(e.eng, "self"), "the draft model was dropped");
		free_env(&e);
	}
	free(rows);
	free(plain);
	free(r);
}

/* The default row budget (the CPU backend's 4 cheap rows): six jobs that
 * decode together propose nothing, and a job alone at most 3 tokens a
 * step; the outputs stay the plain ones. */
static void case_spec_rows(void)
{
	enum { N = 6 };
	struct exl_gen_settings s;
	struct rec *r[N + 1], *alone = new_rec();
	struct exl_job *j[N + 1];
	struct exl_engine_stats st;
	char err[512];
	int steps = 0;

	greedy(&s, 40);
	run_one(&s, repeat_prompt, NULL, alone);
	s.ngram_draft = 2;
	s.draft_tokens = 8;
	struct env e = make_env(4096, 16, NULL);
	for (int i = 0; i < N; i++) {
		r[i] = new_rec();
		j[i] = job_text(&s, repeat_prompt, NULL, r[i]);
		add(&e, j[i]);
	}
	run_until(&e, r, N);
	exl_engine_stats(e.eng, &st);
	CHECK(st.draft_proposed == 0, "%d jobs decoding together proposed %llu tokens", N,
	      (unsigned long long)st.draft_proposed);
	r[N] = new_rec();
	j[N] = job_text(&s, repeat_prompt, NULL, r[N]);
	add(&e, j[N]);
	while (!r[N]->n_done) {
		if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
			DIE("step: %s", err);
		steps++;
	}
	exl_engine_stats(e.eng, &st);
	CHECK(st.draft_proposed > 0 && st.draft_proposed <= 3 * (uint64_t)steps,
	      "a job alone proposed %llu tokens in %d steps (3 a step at most)",
	      (unsigned long long)st.draft_proposed, steps);
	for (int i = 0; i <= N; i++) {
		CHECK(same_output(alone, r[i]), "job %d: '%s', plain '%s'", i, r[i]->rtext,
		      alone->rtext);
		exl_job_free(j[i]);
		free(r[i]);
	}
	free(alone);
	free_env(&e);
}

/* Drafting jobs (n-gram, draft model; greedy, seeded, CFG) share the batch
 * with plain jobs and with each other, join mid-way, and the drafter goes
 * away while they run: each job's output is the one it has alone without
 * drafting. */
static void case_spec_batch(void)
{
	enum { N = 8 };
	struct exl_gen_settings s;
	struct rec *alone[N], *r[N];
	struct exl_job *j[N];
	const char *ban[] = { "Lily" };
	char err[256];

	for (int pass = 0; pass < 2; pass++) {
		struct env e = spec_env();

		for (int i = 0; i < N; i++) {
			const char *prompt = i < 2 ? repeat_prompt : batch_prompts[i];
			const char *neg = i == 5 ? "The dog" : NULL;

			if (i % 2)
				plain(&s, 50, 500 + (uint64_t)i);
			else
				greedy(&s, 50);
			if (i == 3) {
				s.banned_strings = ban;
				s.n_banned_strings = 1;
			}
			if (neg)
				s.cfg_scale = 2.0f;
			if (pass == 0) {
				alone[i] = new_rec();
				run_one(&s, prompt, neg, alone[i]);
			}
			if (i < 6 && i % 3 != 2)
				s.ngram_draft = 2 + i % 3;
			else if (i < 6)
				s.draft_model = "self";
			s.draft_tokens = 3 + i % 4;
			r[i] = new_rec();
			j[i] = job_text(&s, prompt, neg, r[i]);
			if (i < 6)
				add(&e, j[i]);
		}
		for (int k = 0; k < 4; k++)
			if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
				DIE("step: %s", err);
		add(&e, j[6]);
		add(&e, j[7]);
		if (pass == 1) {
			/* the drafter goes away mid-way: no more proposals */
			for (int k = 0; k < 10; k++)
				if (exl_engine_step(e.eng, err, sizeof(err)) < 0)
					DIE("step: %s", err);
			exl_engine_drop_drafter(e.eng, "self");
		}
		run_until(&e, r, N);
		for (int i = 0; i < N; i++) {
			CHECK(same_output(alone[i], r[i]), "pass %d job %d: '%s' in the batch, '%s' "
			      "alone", pass, i, r[i]->rtext, alone[i]->rtext);
			check_consistent(r[i]);
			exl_job_free(j[i]);
			free(r[i]);
		}
		struct exl_engine_stats st;

		exl_engine_stats(e.eng, &st);
		CHECK(st.active == 0 && st.kv_pages_free == st.kv_pages_total &&
		      st.draft_proposed > 0 && st.draft_accepted > 0,
		      "pass %d after: %d active, %d of %d pages free, %llu of %llu accepted", pass,
		      st.active, st.kv_pages_free, st.kv_pages_total,
		      (unsigned long long)st.draft_accepted, (unsigned long long)st.draft_proposed);
		free_env(&e);
	}
	for (int i = 0; i < N; i++)
		free(alone[i]);
}

/* ---- beam search ---- */

/* The summed log-probability (log-softmax of the model's logits) of toks
 * after prompt, by one forward pass over both (teacher forcing). */
static double score_tokens(const char *prompt, const int32_t *toks, int n)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(model);
	int n_vocab = exl_model_hparams(model)->n_vocab;
	int32_t *ids = NULL;
	char err[512];
	int np = exl_tok_encode(tok, prompt, strlen(prompt), exl_tokenizer_add_bos(tok), false, &ids,
				err, sizeof(err));

	if (np <= 0)
		DIE("encode: %s", err);
	int total = np + n - 1;
	int32_t *all = malloc((size_t)total * sizeof(*all)), *seq = calloc((size_t)total, 4);
	bool *want = calloc((size_t)total, sizeof(*want));
	float *logits = malloc((size_t)n * (size_t)n_vocab * sizeof(float));
	struct exl_kvcache *kv = exl_model_kvcache_create(model, 2048, 16, err, sizeof(err));
	struct exl_kv_seq q;
	double sum = 0.0;

	if (!all || !seq || !want || !logits || !kv)
		DIE("score: %s", err);
	memcpy(all, ids, (size_t)np * 4);
	memcpy(all + np, toks, (size_t)(n - 1) * 4);
	for (int i = np - 1; i < total; i++)
		want[i] = true;
	exl_kv_seq_init(&q);
	struct exl_kv_seq *seqs[1] = { &q };
	struct exl_batch b = { total, all, seq, want, 1, seqs };

	if (exl_kv_seq_reserve(kv, &q, total) || exl_model_forward(model, kv, &b, logits, err,
								    sizeof(err)))
		DIE("score forward: %s", err);
	for (int i = 0; i < n; i++) {
		const float *row = logits + (size_t)i * (size_t)n_vocab;
		float max = row[argmax_row(row, n_vocab)];
		double z = 0.0;

		for (int v = 0; v < n_vocab; v++)
			z += exp((double)row[v] - max);
		sum += (double)row[toks[i]] - max - log(z);
	}
	exl_kv_seq_release(kv, &q);
	exl_kvcache_free(kv);
	free(ids);
	free(all);
	free(seq);
	free(want);
	free(logits);
	return sum;
}

static double sum_log_probs(const struct rec *r)
{
	double s = 0.0;

	for (int i = 0; i < r->n_toks; i++)
		s += log((double)r->probs[i]);
	return s;
}

static void case_beam(void)
{
	struct exl_gen_settings s;
	struct rec *g = new_rec(), *b = new_rec();
	const char *stop[] = { "park" };

	/* One beam is greedy: plain, with a stop string, with the regex
	 * constraint, min_new_tokens and token healing. */
	for (int i = 0; i < 8; i++) {
		const char *prompt = i == 7 ? "Once upon a ti" : batch_prompts[i];

		for (int v = 0; v < 2; v++) {
			greedy(&s, 40);
			if (v) {
				s.stop_strings = stop;
				s.n_stop_strings = 1;
				s.regex = "[A-Za-z ,.']+";
				s.min_new_tokens = 10;
				s.token_healing = true;
			}
			run_one(&s, prompt, NULL, g);
			s.num_beams = 1;
			run_one(&s, prompt, NULL, b);
			CHECK(b->reason == g->reason && b->n_rtoks == g->n_rtoks &&
			      !memcmp(b->rtoks, g->rtoks, (size_t)g->n_rtoks * 4) &&
			      !strcmp(b->rtext, g->rtext) && !strcmp(b->stop_string, g->stop_string),
			      "'%s' (variant %d): one beam '%s' (%s, %d tokens, stop '%s'), greedy "
			      "'%s' (%s, %d tokens, stop '%s')", prompt, v, b->rtext,
			      exl_stop_reason_name(b->reason), b->n_rtoks, b->stop_string, g->rtext,
			      exl_stop_reason_name(g->reason), g->n_rtoks, g->stop_string);
			check_consistent(b);
			CHECK(b->num_beams == 1 && b->n_chunks == 1, "%d beams, %d chunks", b->num_beams,
			      b->n_chunks);
		}
	}
	/* max_new_tokens 0: no token, as a sampled job (found by
	 * fuzz_generate: the first step took one) */
	for (int w = 1; w <= 4; w += 3) {
		greedy(&s, 0);
		s.num_beams = w;
		run_one(&s, batch_prompts[0], NULL, b);
		CHECK(b->reason == EXL_STOP_MAX_NEW_TOKENS && b->n_rtoks == 0,
		      "%d beams, max_new_tokens 0: %s, %d tokens", w, exl_stop_reason_name(b->reason),
		      b->n_rtoks);
		check_consistent(b);
	}
	/* An engine that admits one job at a time: its pass still holds
	 * every live beam's sequence (it held 2 a job: a heap overflow found
	 * by fuzz_generate), and the output is the one of a roomier engine. */
	for (int w = 4; w <= 16; w += 12) {
		struct exl_engine_config one;
		struct rec *wide = new_rec();

		exl_engine_config_init(&one);
		one.max_jobs = 1;
		one.max_batch_tokens = 32;
		one.prefill_chunk = 16;
		greedy(&s, 12);
		s.num_beams = w;
		run_one(&s, batch_prompts[1], NULL, wide);

		struct env e1 = make_env(2048, 16, &one);
		struct exl_job *j;

		memset(b, 0, sizeof(*b));
		b->top_sorted = true;
		j = job_text(&s, batch_prompts[1], NULL, b);
		add(&e1, j);
		run_until(&e1, &b, 1);
		exl_job_free(j);
		free_env(&e1);
		CHECK(b->n_done == 1 && b->reason == wide->reason && b->n_rtoks == wide->n_rtoks &&
		      !memcmp(b->rtoks, wide->rtoks, (size_t)b->n_rtoks * 4),
		      "%d beams, one job a pass: %s, %d tokens; alone %s, %d", w,
		      exl_stop_reason_name(b->reason), b->n_rtoks, exl_stop_reason_name(wide->reason),
		      wide->n_rtoks);
		free(wide);
	}
	/* Four beams find a sequence at least as likely as greedy's; the
	 * score reported is the sequence's own (teacher forcing). */
	int better = 0;

	for (int i = 0; i < 8; i++) {
		greedy(&s, 30);
		s.return_probs = true;
		run_one(&s, batch_prompts[i], NULL, g);
		greedy(&s, 30);
		s.num_beams = 4;
		s.length_penalty = 0.0f;
		run_one(&s, batch_prompts[i], NULL, b);
		double gs = sum_log_probs(g), forced = score_tokens(batch_prompts[i], b->rtoks,
								     b->n_rtoks);

		CHECK(b->reason != EXL_STOP_ERROR && b->n_rtoks > 0, "4 beams: %s", b->error);
		CHECK(fabs(forced - b->beam_score) < 1e-3, "'%s': beam score %.5f, the tokens' own "
		      "%.5f", batch_prompts[i], b->beam_score, forced);
		CHECK(b->beam_score >= gs - 1e-4, "'%s': 4 beams %.4f ('%s') below greedy %.4f ('%s')",
		      batch_prompts[i], b->beam_score, b->rtext, gs, g->rtext);
		better += b->beam_score > gs + 1e-4;
		check_consistent(b);
		printf("'%s': greedy %.3f, 4 beams %.3f\n", batch_prompts[i], gs, b->beam_score);
	}
	CHECK(better > 0, "4 beams never beat greedy");

	/* Stop string, ban and constraint together: the output obeys all. */
	const char *ban[] = { "Lily" };

	greedy(&s, 60);
	s.num_beams = 4;
	s.banned_strings = ban;
	s.n_banned_strings = 1;
	s.stop_strings = stop;
	s.n_stop_strings = 1;
	s.regex = "[A-Za-z ,.']+";
	run_one(&s, "Once upon a time", NULL, b);
	CHECK(b->reason != EXL_STOP_ERROR && !strstr(b->rtext, "Lily") && !strstr(b->rtext, "park"),
	      "4 beams, ban + stop + regex: '%s' (%s: %s)", b->rtext,
	      exl_stop_reason_name(b->reason), b->error);
	for (const char *p = b->rtext; *p; p++)
		CHECK(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz ,.'", *p),
		      "outside the regex: '%s'", b->rtext);
	check_consistent(b);
	free(g);
	free(b);
}

/* Beam jobs beside sampled ones: each gives what it gives alone, and
 * every page (the beams' copy-on-write ones included) comes back. */
static void case_beam_batch(void)
{
	enum { N = 6 };
	struct exl_gen_settings s;
	struct rec *alone[N], *r[N];
	struct exl_job *j[N];

	struct env e = make_env(4096, 16, NULL);

	for (int i = 0; i < N; i++) {
		if (i % 2)
			plain(&s, 40, 70 + (uint64_t)i);
		else
			greedy(&s, 40);
		if (i % 2 == 0)
			s.num_beams = 2 + i;
		alone[i] = new_rec();
		run_one(&s, batch_prompts[i], NULL, alone[i]);
		r[i] = new_rec();
		j[i] = job_text(&s, batch_prompts[i], NULL, r[i]);
		add(&e, j[i]);
	}
	run_until(&e, r, N);
	for (int i = 0; i < N; i++) {
		CHECK(r[i]->reason == alone[i]->reason && r[i]->n_rtoks == alone[i]->n_rtoks &&
		      !memcmp(r[i]->rtoks, alone[i]->rtoks, (size_t)r[i]->n_rtoks * 4) &&
		      r[i]->beam_score == alone[i]->beam_score,
		      "job %d: '%s' in the batch, '%s' alone", i, r[i]->rtext, alone[i]->rtext);
		check_consistent(r[i]);
		exl_job_free(j[i]);
		free(r[i]);
		free(alone[i]);
	}
	struct exl_engine_stats st;

	exl_engine_stats(e.eng, &st);
	CHECK(st.active == 0 && st.kv_pages_free == st.kv_pages_total, "after: %d active, %d of %d "
	      "pages free", st.active, st.kv_pages_free, st.kv_pages_total);
	free_env(&e);

	/* A pool that holds one 8-beam job at a time: the second waits, and
	 * both finish. */
	struct rec *a = new_rec(), *c = new_rec();
	struct rec *both[2] = { a, c };
	struct exl_job *ja, *jc;

	e = make_env(16 * 30, 16, NULL);
	greedy(&s, 40);
	s.num_beams = 8;
	ja = job_text(&s, batch_prompts[0], NULL, a);
	jc = job_text(&s, batch_prompts[1], NULL, c);
	add(&e, ja);
	add(&e, jc);
	run_until(&e, both, 2);
	CHECK(a->reason != EXL_STOP_ERROR && c->reason != EXL_STOP_ERROR, "small pool: %s / %s",
	      a->error, c->error);
	exl_job_free(ja);
	exl_job_free(jc);
	free_env(&e);
	free(a);
	free(c);
}

static void case_nan_logits(void)
{
	struct exl_model *good = model;
	struct exl_gen_settings s;
	struct rec *r = new_rec();
	int32_t *ids;
	char err[256];

	/* " there" is the second token of the known continuation, and not in
	 * the prompt: its embedding made NaN, the first two tokens come out
	 * right and the step that reads " there" gives NaN logits. */
	int n = exl_tok_encode(exl_model_tokenizer(good), " there", 6, false, false, &ids, err,
			     sizeof(err));

	if (n < 1)
		DIE("tokenize: %s", err);
	model = load_poisoned("token_embd.weight", (uint64_t)ids[n - 1]);
	free(ids);
	greedy(&s, 20);
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_ERROR, "reason %d, text '%s'", r->reason, r->rtext);
	CHECK(strstr(r->error, "the model produced NaN logits at output token 2"), "error '%s'",
	      r->error);
	CHECK(!strcmp(r->rtext, ", there") && r->n_rtoks == 2, "result '%s' (%d tokens)", r->rtext,
	      r->n_rtoks);
	printf("  NaN embedding of \" there\": %s (after '%s')\n", r->error, r->rtext);
	exl_model_free(model);

	/* The final norm made NaN: every logit of the first step. */
	model = load_poisoned("output_norm.weight", 0);
	greedy(&s, 20);
	run_one(&s, "Once upon a time", NULL, r);
	CHECK(r->reason == EXL_STOP_ERROR && strstr(r->error, "NaN logits at output token 0") &&
	      r->n_rtoks == 0, "reason %d, error '%s', %d tokens", r->reason, r->error, r->n_rtoks);
	printf("  NaN output norm: %s\n", r->error);
	exl_model_free(model);
	model = good;
	free(r);
}

struct tcase {
	const char *name;
	void (*fn)(void);
};

static const struct tcase cases[] = {
	{ "greedy", case_greedy },
	{ "seeds", case_seeds },
	{ "stop_string", case_stop_string },
	{ "stop_token", case_stop_token },
	{ "eos_min_new", case_eos_min_new },
	{ "banned", case_banned },
	{ "banned_utf8", case_banned_utf8 },
	{ "healing", case_healing },
	{ "cfg", case_cfg },
	{ "batch", case_batch },
	{ "cancel", case_cancel },
	{ "kv_wait", case_kv_wait },
	{ "pause", case_pause },
	{ "suspend", case_suspend },
	{ "suspend_order", case_suspend_order },
	{ "filter", case_filter },
	{ "prefix", case_prefix },
	{ "probs", case_probs },
	{ "settings", case_settings },
	{ "prompt", case_prompt },
	{ "end_all", case_end_all },
	{ "errors", case_errors },
	{ "nan_logits", case_nan_logits },
	{ "spec_ngram", case_spec_ngram },
	{ "spec_model", case_spec_model },
	{ "spec_embd", case_spec_embd },
	{ "spec_batch", case_spec_batch },
	{ "spec_rows", case_spec_rows },
	{ "beam", case_beam },
	{ "beam_batch", case_beam_batch },
	{ "swa", case_swa },
};

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "all";
	const char *m = argc > 2 ? argv[2] : "stories260K";
	bool found = false;

	load(m);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (strcmp(which, "all") && strcmp(which, cases[i].name))
			continue;
		found = true;
		int before = check_failures;

		cases[i].fn();
		printf("%-12s %s\n", cases[i].name, check_failures == before ? "ok" : "FAILED");
	}
	if (!found)
		DIE("unknown case '%s'", which);
	exl_model_free(model);
	be->ops->destroy(be);
	return check_failures ? 1 : 0;
}
