/* Fuzz target for the generator and the engine: every generation feature
 * in every combination, several jobs at once, over a small engine.  Each
 * input sets up an engine (batch and prefill sizes, KV pool, running jobs,
 * context) on a random-weight llama model that exld-mkmodel writes at
 * start-up (fuzz_mkmodel.h), then 1 to 4 jobs, each from a record of
 * settings bytes: prompt (text, ids, empty, too long), sampling (greedy to
 * hot, truncation, penalties, DRY, XTC, mirostat, bias), stop tokens and
 * strings, banned strings, token healing, CFG, a grammar, JSON schema or
 * regex, returned probabilities, top-k and logits, n-gram drafting or a
 * draft model (a second mkmodel model with the same vocabulary), beam
 * search, truncation, input embedding blocks, pooled embeddings, LoRA
 * adapters (two, from mkmodel, alone or together at any scale); and when
 * to cancel it, and whether its consumer pauses.  The engine runs until
 * every job is done.  It checks that
 *   - nothing crashes, reads out of bounds or hangs (a step bound);
 *   - a refused job or a job ended by an error carries a message, and no
 *     forward pass fails, the draft model's included (every job was
 *     checked when it was made);
 *   - each added job ends exactly once, with a known reason, at most
 *     max_new_tokens tokens, NUL-terminated text, and as many tokens in
 *     its chunks as in its result, and with completion_only the same
 *     text (nothing streamed is lost or doubled; a job cancelled while
 *     paused ends without the chunk it holds);
 *   - its tokens are in the vocabulary;
 *   - run again alone on a fresh engine of the same shape, a job that ran
 *     to its own end gives the same tokens and reason (its seed is fixed,
 *     and no kernel's output depends on the batch).
 * FUZZ_GENERATE_MODEL=PATH runs it on that model instead of mkmodel's.
 * See docs/fuzzing.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/generator/engine.h"
#include "daemon/core/generator/generator.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/model.h"
#include "kernels/backend.h"
#include "tests/fuzz/fuzz_mkmodel.h"
#include "tests/fuzz/fuzz_target.h"

static struct exl_model *model;
static struct exl_backend *be;
static int n_vocab, n_embd;
static char workdir[64], draft_path[96];
static struct exl_lora *loras[2];

static void die(const char *what)
{
	fprintf(stderr, "fuzz_generate: %s\n", what);
	abort();
}

static void cleanup(void)
{
	unlink(draft_path);
	rmdir(workdir);
}

static void init(void)
{
	static const char *const args[] = { "--arch", "llama", "--dim", "64", "--layers", "2",
					    "--heads", "4", "--kv-heads", "2", "--vocab", "300",
					    "--ctx", "128", "--type", "q8_0", "--threads", "1", NULL };
	/* the same vocabulary (mkmodel's synthetic one of 300), other weights */
	static const char *const draft_args[] = { "--arch", "llama", "--dim", "32", "--layers",
						  "1", "--heads", "2", "--vocab", "300", "--ctx",
						  "128", "--seed", "7", "--threads", "1", NULL };
	/* FUZZ_GENERATE_MODEL: a campaign on a real model instead (its text and
	 * vocabulary; the draft model takes its vocabulary) */
	const char *given = getenv("FUZZ_GENERATE_MODEL");
	char path[4096], err[512];

	if (model)
		return;
	snprintf(workdir, sizeof(workdir), "/tmp/exld-fuzz-generate-XXXXXX");
	if (!mkdtemp(workdir))
		die("mkdtemp failed");
	snprintf(draft_path, sizeof(draft_path), "%s/d.gguf", workdir);
	if (given && *given) {
		static const char *const draft_of[] = { "--arch", "llama", "--dim", "32", "--layers",
							"1", "--heads", "2", "--ctx", "128", "--seed",
							"7", "--threads", "1", NULL };
		const char *vocab_from[] = { "--vocab-from", given, NULL };

		snprintf(path, sizeof(path), "%s", given);
		fuzz_mkmodel("fuzz_generate", draft_of, vocab_from, draft_path);
	} else {
		snprintf(path, sizeof(path), "%s/m.gguf", workdir);
		fuzz_mkmodel("fuzz_generate", args, NULL, path);
		fuzz_mkmodel("fuzz_generate", draft_args, NULL, draft_path);
	}
	atexit(cleanup);
	/* two adapters: every projection at rank 4; v and down at rank 1 */
	static const char *const lora_args[2][8] = {
		{ "--rank", "4", "--alpha", "8", NULL },
		{ "--rank", "1", "--alpha", "2", "--lora-targets", "attn_v,ffn_down", NULL },
	};
	char lora_path[2][96];
	const char *lora_for[] = { "--lora-for", path, NULL };

	for (int i = 0; i < 2; i++) {
		snprintf(lora_path[i], sizeof(lora_path[i]), "%s/l%d.gguf", workdir, i);
		fuzz_mkmodel("fuzz_generate", lora_for, lora_args[i], lora_path[i]);
	}
	be = exl_backend_cpu_create(1, err, sizeof(err));
	if (!be) {
		fprintf(stderr, "fuzz_generate: cpu backend: %s\n", err);
		abort();
	}
	model = exl_model_load(path, be, err, sizeof(err));
	if (!model) {
		fprintf(stderr, "fuzz_generate: %s: %s\n", path, err);
		abort();
	}
	n_vocab = exl_model_hparams(model)->n_vocab;
	n_embd = exl_model_hparams(model)->n_embd;
	if (n_embd > 64)
		die("the input embedding rows hold 64 columns: a model of n_embd <= 64");
	for (int i = 0; i < 2; i++) {
		loras[i] = exl_lora_load(lora_path[i], model, err, sizeof(err));
		if (!loras[i]) {
			fprintf(stderr, "fuzz_generate: %s: %s\n", lora_path[i], err);
			abort();
		}
		unlink(lora_path[i]);
	}
	/* mapped: its name can go (the drafter is opened by each engine) */
	if (!given || !*given)
		unlink(path);
}

/* ---- the script ---- */

struct script {
	const uint8_t *p;
	size_t left;
};

/* The next byte, or 0 past the end: a short input is a record of zeros,
 * which is every setting's default. */
static uint8_t next(struct script *s)
{
	if (!s->left)
		return 0;
	s->left--;
	return *s->p++;
}

/* 160 bytes: over a small engine's context once tokenized */
#define LONG_PROMPT_10 "aaaaaaaaaa"
#define LONG_PROMPT LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 \
	LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 \
	LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10 LONG_PROMPT_10

static const char *const prompts[] = {
	"Once upon a time", "", " ", "a", "\xe2\x96\x81\xe2\x96\x81", "<s></s><unk>", "\xff\xfe\xc3",
	"The end.\n\n", LONG_PROMPT,
};
static const char *const strings[] = {
	"a", "e", " ", "\n", "the", "\xe2\x96\x81", "ab", "\xc3\xa9", "<s>", "xyz", "t", "o",
};
static const char *const grammars[] = {
	"root ::= [a-z ]{1,12} \".\"",
	"root ::= \"x\" | \"yy\" root",
	"root ::= ([^\\n])* \"\\n\"",
	"root ::= \"\"",
};
static const char *const schemas[] = {
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}",
	"{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\"]},\"maxItems\":3}",
	"{\"type\":\"string\",\"maxLength\":3}",
	"{}",
};
static const char *const regexes[] = { "[a-c]+", "(ab|cd)*e", "\\d{2,4}", ".*" };
static const float temps[] = { 0.0f, 0.7f, 1.0f, 2.0f, 0.01f, 1e3f, -1.0f, NAN };
static const int counts[] = { 0, 1, 2, 3, 5, 8, 16, 40, 100, 300, -1 };
#define N(a) (int)(sizeof(a) / sizeof((a)[0]))

/* ---- a job ---- */

struct fjob {
	struct exl_job *job;
	int max_new;
	int beams;
	int cancel_at;          /* engine step at which to cancel; -1: never */
	int pause_every;        /* consumer pauses on every nth chunk; 0: never */
	int chunks, chunk_tokens;
	bool completion_only;
	char stext[4096];        /* the streamed text (too long: stext_over) */
	size_t stext_len;
	bool stext_over;
	bool paused, done, cancelled;
	int32_t ids[64];
	int32_t stops[4];
	float rows[3 * 64];      /* an input embedding block's rows (n_embd 64) */
	struct exl_lora_set lset;
	uint8_t rec[24];         /* the record it was made from */
	/* its result, kept for the run alone */
	enum exl_stop_reason reason;
	int n_tokens;
	int32_t tokens[300];
	struct exl_embd_block blk;
	char text[96];
	const char *stop_str[3], *banned[3]; /* up to 3 of each */
	struct exl_token_bias bias[2];
};

static int on_chunk(struct exl_job *job, const struct exl_chunk *c, void *user)
{
	struct fjob *f = user;

	(void)job;
	if (f->done)
		die("a chunk after the end");
	if (f->pause_every && ++f->chunks % f->pause_every == 0 && !f->paused) {
		f->paused = true;
		return EXL_CHUNK_PAUSE; /* the same chunk comes again after resume */
	}
	f->paused = false;
	for (int i = 0; i < c->n_tokens; i++)
		if (c->tokens[i] < 0 || c->tokens[i] >= n_vocab)
			die("a streamed token out of the vocabulary");
	f->chunk_tokens += c->n_tokens;
	if (f->stext_len + c->text_len <= sizeof(f->stext)) {
		memcpy(f->stext + f->stext_len, c->text, c->text_len);
		f->stext_len += c->text_len;
	} else {
		f->stext_over = true;
	}
	return EXL_CHUNK_OK;
}

static void on_done(struct exl_job *job, const struct exl_gen_result *r, void *user)
{
	struct fjob *f = user;

	(void)job;
	if (f->done)
		die("a job ended twice");
	f->done = true;
	f->reason = r->reason;
	f->n_tokens = r->n_tokens < 300 ? r->n_tokens : 300;
	if (r->n_tokens > 0)
		memcpy(f->tokens, r->tokens, (size_t)f->n_tokens * sizeof(*f->tokens));
	if (getenv("FUZZ_GENERATE_VERBOSE"))
		fprintf(stderr, "ended: %s, %d tokens%s%s\n", exl_stop_reason_name(r->reason),
			r->n_tokens, r->error ? ": " : "", r->error ? r->error : "");
	if (r->reason <= EXL_STOP_NONE || r->reason > EXL_STOP_ERROR)
		die("an end without a known reason");
	if (r->reason == EXL_STOP_ERROR && (!r->error || !r->error[0]))
		die("an error without a message");
	if (!r->text || r->text[r->text_len])
		die("a result's text is not NUL-terminated");
	if (r->n_tokens < 0 || r->n_tokens > f->max_new) {
		fprintf(stderr, "fuzz_generate: %d tokens for max_new_tokens %d (%s, %d beams)\n",
			r->n_tokens, f->max_new, exl_stop_reason_name(r->reason), f->beams);
		abort();
	}
	for (int i = 0; i < r->n_tokens; i++)
		if (r->tokens[i] < 0 || r->tokens[i] >= n_vocab)
			die("a result token out of the vocabulary");
	/* A job cancelled while its consumer had not taken a chunk (paused;
	 * perhaps its last, the job over already) ends without it: the result
	 * holds every token. */
	bool ended_early = f->cancelled || r->reason == EXL_STOP_SHUTDOWN;
	if (r->reason != EXL_STOP_ERROR &&
	    (ended_early ? f->chunk_tokens > r->n_tokens : f->chunk_tokens != r->n_tokens)) {
		fprintf(stderr, "fuzz_generate: %d tokens streamed, %d in the result (%s)\n",
			f->chunk_tokens, r->n_tokens, exl_stop_reason_name(r->reason));
		abort();
	}
	/* the text too, when the result holds the completion alone */
	if (r->reason != EXL_STOP_ERROR && !ended_early && f->completion_only && !f->stext_over &&
	    (r->text_len != f->stext_len || memcmp(r->text, f->stext, f->stext_len))) {
		fprintf(stderr, "fuzz_generate: streamed '%.*s' (%zu bytes), result '%s' (%s)\n",
			(int)f->stext_len, f->stext, f->stext_len, r->text, exl_stop_reason_name(r->reason));
		abort();
	}
}

static const struct exl_job_callbacks callbacks = { on_chunk, on_done };

/* Reads one job's record: about 24 bytes. */
static struct exl_job *make_job(struct fjob *f, struct script *s)
{
	struct exl_gen_settings g;
	struct exl_prompt p = { 0 }, neg = { 0 };
	uint8_t b[24];
	char err[512] = "";

	for (int i = 0; i < 24; i++)
		b[i] = next(s);
	memcpy(f->rec, b, sizeof(b));
	exl_gen_settings_init(&g);
	g.has_seed = true;
	g.seed = b[0];
	g.add_bos = b[1] % 3 - 1;
	g.encode_special_tokens = b[1] & 4;
	g.decode_special_tokens = b[1] & 8;
	g.completion_only = b[1] & 16;
	f->completion_only = g.completion_only;
	g.token_healing = b[1] & 32;
	g.ignore_eos = b[1] & 64;
	g.truncate = b[1] & 128;
	g.max_new_tokens = counts[b[2] % N(counts)];
	g.min_new_tokens = b[2] >> 4 & 7;
	g.sampling.temperature = temps[b[3] % N(temps)];
	g.sampling.top_k = counts[(b[3] >> 3) % N(counts)];
	g.sampling.top_p = (b[4] & 15) / 15.0f;
	g.sampling.min_p = (b[4] >> 4) / 30.0f;
	if (b[5] & 1) g.sampling.typical = 0.5f;
	if (b[5] & 2) g.sampling.tfs = 0.9f;
	if (b[5] & 4) g.sampling.top_a = 0.2f;
	if (b[5] & 8) g.sampling.rep_pen = 1.3f;
	if (b[5] & 16) g.sampling.freq_pen = 0.5f, g.sampling.pres_pen = 0.3f;
	if (b[5] & 32) g.sampling.no_repeat_ngram = 2;
	if (b[5] & 64) g.sampling.dry_mult = 0.8f, g.sampling.dry_allowed_len = 1;
	if (b[5] & 128) g.sampling.xtc_prob = 0.5f, g.sampling.xtc_thresh = 0.05f;
	if (b[6] & 1) g.sampling.mirostat = 2;
	if (b[6] & 2) g.sampling.temperature_last = true;
	g.sampling.rep_range = counts[(b[6] >> 2) % N(counts)];
	if (b[6] & 64) {
		f->bias[0] = (struct exl_token_bias){ (int32_t)(b[7] * 3 % (n_vocab + 2)) - 1, -INFINITY };
		f->bias[1] = (struct exl_token_bias){ b[7] % n_vocab, 5.0f };
		g.sampling.bias = f->bias;
		g.sampling.n_bias = 2;
	}
	for (int i = 0; i < (b[8] & 3); i++)
		f->stops[i] = (int32_t)((b[8] >> 2) * 5 + i) % n_vocab;
	g.stop_tokens = f->stops;
	g.n_stop_tokens = b[8] & 3;
	g.n_stop_strings = b[9] & 3;
	for (int i = 0; i < g.n_stop_strings; i++)
		f->stop_str[i] = strings[((b[9] >> 2) + i) % N(strings)];
	g.stop_strings = f->stop_str;
	g.n_banned_strings = b[10] & 3;
	for (int i = 0; i < g.n_banned_strings; i++)
		f->banned[i] = strings[((b[10] >> 2) + 3 * i) % N(strings)];
	g.banned_strings = f->banned;
	switch (b[11] % 6) {
	case 1: g.grammar = grammars[(b[11] / 6) % N(grammars)]; break;
	case 2: g.json_schema = schemas[(b[11] / 6) % N(schemas)]; break;
	case 3: g.regex = regexes[(b[11] / 6) % N(regexes)]; break;
	default: break;
	}
	g.filter_prefer_eos = b[11] & 128;
	g.return_probs = b[12] & 1;
	g.return_top_k = (b[12] >> 1) & 7 ? counts[(b[12] >> 1) & 7] : 0;
	g.return_logits = b[12] & 16;
	if ((b[13] & 3) == 1)
		g.ngram_draft = 1 + (b[13] >> 1) % 4, g.draft_tokens = 1 + (b[13] >> 3) % 8;
	if (b[14] % 5 == 1)
		g.num_beams = 1 + (b[14] >> 3) % 4, g.length_penalty = (b[14] & 4) ? 0.5f : 1.0f;
	if (b[15] & 1) {
		g.cfg_scale = (b[15] & 2) ? 1.5f : -0.5f;
		neg.text = prompts[(b[15] >> 2) % N(prompts)];
		neg.len = strlen(neg.text);
	}
	if (b[13] & 2)
		g.draft_model = b[13] & 4 ? "d" : "absent", g.draft_tokens = 1 + (b[13] >> 3) % 8;
	if ((b[21] & 3) && !(b[21] & 4))
		g.pooling = (enum exl_pooling)(b[21] & 3), g.normalize = b[21] & 8;
	if (b[23] & 3) {
		/* adapter 0, 1 or both, at scales that may cancel or flip */
		static const float scales[] = { 1.0f, 0.5f, -1.0f, 0.0f, 4.0f, 1e-3f, 2.0f, -0.25f };
		int k = 0;

		f->lset.n = 0;
		for (int i = 0; i < 2; i++)
			if (b[23] & (1 << i))
				f->lset.use[k++] = (struct exl_lora_use){ loras[i], scales[(b[23] >> (2 + 3 * i)) & 7] };
		f->lset.n = k;
		f->lset.key = exl_lora_set_key(&f->lset);
		g.loras = &f->lset;
	}
	const char *alias = NULL;
	if (b[22] & 1) {
		/* an input embedding block the prompt names by its alias */
		int nr = 1 + (b[22] >> 1) % 3;
		for (int i = 0; i < nr * n_embd && i < 3 * 64; i++)
			f->rows[i] = (float)((i * 7 + b[22]) % 13 - 6) * 0.1f;
		if (b[22] & 16)
			f->rows[b[23] % (nr * n_embd)] = NAN;
		alias = b[22] & 32 ? "<img>" : "\xe2\x96\x81";
		f->blk = (struct exl_embd_block){ alias, f->rows, nr };
		g.embeddings = &f->blk;
		g.n_embeddings = 1;
	}
	if (b[16] % 5 == 4) {
		/* ids as they are, some outside the vocabulary */
		int n = b[17] % 64;
		for (int i = 0; i < n; i++)
			f->ids[i] = (int32_t)((b[18] + 37 * i) % (n_vocab + (b[16] & 8 ? 3 : 0)));
		p.ids = f->ids;
		p.n_ids = n;
	} else if (alias && (b[22] & 64)) {
		/* the alias inside a prompt, or twice */
		snprintf(f->text, sizeof(f->text), "%s %s a%s", prompts[b[16] % 2], alias,
			 b[22] & 128 ? alias : "");
		p.text = f->text;
		p.len = strlen(p.text);
	} else {
		p.text = prompts[b[16] % N(prompts)];
		p.len = strlen(p.text);
	}
	f->max_new = g.max_new_tokens;
	f->beams = g.num_beams;
	f->cancel_at = b[19] & 1 ? b[19] >> 1 : -1;
	f->pause_every = b[20] % 4;
	struct exl_job *j = exl_job_create(model, &g, &p, neg.text ? &neg : NULL, &callbacks, f, err,
					   sizeof(err));
	if (!j && !err[0])
		die("a refused job without a message");
	if (!j && getenv("FUZZ_GENERATE_VERBOSE"))
		fprintf(stderr, "refused: %s\n", err);
	return j;
}

/* An engine as the header bytes h say; the KV pool in *kv. */
static struct exl_engine *make_engine(const uint8_t h[3], struct exl_kvcache **kv)
{
	static const int batch[] = { 512, 8, 16, 64 }, chunk[] = { 256, 4, 16, 1 };
	static const int pool[] = { 512, 64, 128, 32 }, ctx[] = { 0, 48, 96, 16 };
	struct exl_engine_config ec;
	char err[512];

	exl_engine_config_init(&ec);
	ec.max_batch_tokens = batch[h[0] & 3];
	ec.prefill_chunk = chunk[h[0] >> 2 & 3];
	if (ec.prefill_chunk > ec.max_batch_tokens)
		ec.prefill_chunk = ec.max_batch_tokens;
	ec.max_jobs = 1 + (h[0] >> 4 & 3);
	ec.max_seq_len = ctx[h[0] >> 6];
	ec.suspend_after = h[1] & 1 ? 0.0 : 1e-6;
	*kv = exl_model_kvcache_create(model, pool[h[1] >> 1 & 3], 16, err, sizeof(err));
	if (!*kv)
		die(err);
	struct exl_engine *e = exl_engine_create(model, *kv, &ec, err, sizeof(err));
	if (!e)
		die(err);
	if ((h[2] & 4) && exl_engine_open_drafter(e, "d", draft_path, be, err, sizeof(err)))
		die(err);
	return e;
}

/* Steps e until each of the n jobs (NULL: refused) has ended. */
static void run_jobs(struct exl_engine *e, struct fjob *jobs, int n)
{
	char err[512];

	/* Every token costs at most a few steps (beams, drafts, a prefill of
	 * 1-token chunks): far past this bound is a hang. */
	for (int step = 0;; step++) {
		int left = 0;

		if (step > 20000)
			die("the engine did not finish its jobs");
		for (int i = 0; i < n; i++) {
			if (!jobs[i].job || jobs[i].done)
				continue;
			left++;
			if (jobs[i].cancel_at == step) {
				exl_job_cancel(jobs[i].job);
				jobs[i].cancelled = true;
			}
			if (jobs[i].paused && step % 3 == 0)
				exl_job_resume(jobs[i].job);
		}
		if (!left)
			return;
		if (!exl_engine_has_work(e)) {
			/* only paused jobs: their consumers catch up */
			for (int i = 0; i < n; i++)
				if (jobs[i].job && !jobs[i].done)
					exl_job_resume(jobs[i].job);
			continue;
		}
		/* Every job was checked when it was made: a pass that fails
		 * (and ends every job in it) means the engine built a bad one. */
		err[0] = 0;
		if (exl_engine_step(e, err, sizeof(err)) < 0) {
			fprintf(stderr, "fuzz_generate: a forward pass failed: %s\n", err);
			abort();
		}
	}
}

/* Frees the jobs, then e and kv, checking what must hold at the end. */
static void finish(struct exl_engine *e, struct exl_kvcache *kv, const uint8_t h[3],
		   struct fjob *jobs, int n)
{
	for (int i = 0; i < n; i++)
		if (jobs[i].job) {
			if (!jobs[i].done)
				die("a job never ended");
			exl_job_free(jobs[i].job);
			jobs[i].job = NULL;
		}
	/* a draft model is dropped only when its pass fails: a bad batch */
	if ((h[2] & 4) && !exl_engine_has_drafter(e, "d"))
		die("the draft model failed and was dropped");
	exl_engine_free(e);
	if (exl_kvcache_free_pages(kv) != exl_kvcache_n_pages(kv))
		die("KV pages still held after every job ended");
	exl_kvcache_free(kv);
}

/* Adds f's job to e; false (and the job freed) when refused. */
static bool add_job(struct exl_engine *e, struct fjob *f)
{
	char err[512] = "";

	if (!f->job)
		return false;
	if (!exl_engine_add(e, f->job, err, sizeof(err)))
		return true;
	if (!err[0])
		die("a job the engine refused without a message");
	if (getenv("FUZZ_GENERATE_VERBOSE"))
		fprintf(stderr, "not added: %s\n", err);
	exl_job_free(f->job);
	f->job = NULL;
	return false;
}

/* A job's output does not depend on the jobs beside it: rerun alone on a
 * fresh engine of the same shape, a job that ran to its own end (not
 * cancelled) gives the same tokens and reason.  Its seed is fixed and
 * every kernel's output depends only on its row (docs/cpu-kernels.md,
 * "Determinism"), so sampled jobs are held to this too. */
static void check_alone(const uint8_t h[3], const struct fjob *f)
{
	struct exl_kvcache *kv;
	struct exl_engine *e = make_engine(h, &kv);
	struct script s = { f->rec, sizeof(f->rec) };
	struct fjob *a = calloc(1, sizeof(*a));

	if (!a)
		die("out of memory");
	a->job = make_job(a, &s);
	a->cancel_at = -1;
	if (add_job(e, a))
		run_jobs(e, a, 1);
	if (!a->done || a->reason != f->reason || a->n_tokens != f->n_tokens ||
	    memcmp(a->tokens, f->tokens, (size_t)f->n_tokens * sizeof(*f->tokens))) {
		fprintf(stderr, "fuzz_generate: with others %s, %d tokens; alone %s, %d tokens\n",
			exl_stop_reason_name(f->reason), f->n_tokens,
			a->done ? exl_stop_reason_name(a->reason) : "not run", a->n_tokens);
		abort();
	}
	if (getenv("FUZZ_GENERATE_VERBOSE"))
		fprintf(stderr, "alone: the same %d tokens\n", a->n_tokens);
	finish(e, kv, h, a, 1);
	free(a);
}

int fuzz_one(const uint8_t *data, size_t size)
{
	struct script s = { data, size };
	struct exl_kvcache *kv;
	struct fjob *jobs = calloc(4, sizeof(*jobs));
	uint8_t h[3];
	int n;

	init();
	if (!jobs)
		die("out of memory");
	for (int i = 0; i < 3; i++)
		h[i] = next(&s);
	struct exl_engine *e = make_engine(h, &kv);

	n = 1 + h[2] % 4;
	for (int i = 0; i < n; i++) {
		jobs[i].job = make_job(&jobs[i], &s);
		add_job(e, &jobs[i]);
	}
	run_jobs(e, jobs, n);
	bool ran[4];
	for (int i = 0; i < n; i++)
		ran[i] = jobs[i].job != NULL;
	finish(e, kv, h, jobs, n);
	if (n > 1)
		for (int i = 0; i < n; i++)
			if (ran[i] && !jobs[i].cancelled && jobs[i].reason != EXL_STOP_ERROR)
				check_alone(h, &jobs[i]);
	free(jobs);
	return 0;
}

/* ---- seeds ---- */

static const uint8_t seed_one[] = { 0, 0, 0 };
static const uint8_t seed_greedy[] = { 0x15, 2, 1, 7, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
				       0, 0, 0, 0, 0, 0, 0, 0, 0 };
static const uint8_t seed_mixed[] = {
	0x36, 3, 3,
	1, 0x21, 7, 9, 0x5f, 0xff, 0x41, 3, 5, 6, 1, 2, 0x0f, 3, 1, 3, 0, 0, 0, 0, 1, 0, 0, 0,
	2, 0x88, 8, 1, 0x33, 0x08, 0x02, 0, 0x22, 0x13, 0x0a, 2, 0x0b, 1, 6, 2, 8, 1, 0, 0, 0, 0,
	3, 0x40, 9, 0, 0, 0x01, 0x41, 9, 0, 0, 0, 0, 0, 0, 0, 0, 4, 30, 7, 0x0b, 2, 0, 0, 0,
	4, 0x01, 7, 2, 0x11, 0x80, 0x80, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};
/* a draft model, a pooled embedding job, an input embedding block */
static const uint8_t seed_draft[] = {
	0x15, 0, 6,
	2, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	3, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0,
	4, 0, 6, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x63, 0,
};
static const uint8_t seed_beam[] = { 0x05, 0, 0, 9, 0, 8, 0, 0, 0, 0, 5, 3, 0, 0, 0, 0x11, 0, 0,
				     0, 0, 0, 0, 0, 0, 0, 0, 0 };

size_t fuzz_seeds(const struct fuzz_blob **out)
{
	static const struct fuzz_blob seeds[] = {
		{ "one", seed_one, sizeof(seed_one) },
		{ "greedy", seed_greedy, sizeof(seed_greedy) },
		{ "mixed", seed_mixed, sizeof(seed_mixed) },
		{ "beam", seed_beam, sizeof(seed_beam) },
		{ "draft", seed_draft, sizeof(seed_draft) },
	};

	*out = seeds;
	return sizeof(seeds) / sizeof(seeds[0]);
}

size_t fuzz_dict(const struct fuzz_blob **out)
{
	static const uint8_t bytes[][1] = { { 0 }, { 0xff }, { 0x80 }, { 1 } };
	static const struct fuzz_blob dict[] = {
		{ "zero", bytes[0], 1 }, { "ff", bytes[1], 1 }, { "80", bytes[2], 1 }, { "one", bytes[3], 1 },
	};

	*out = dict;
	return sizeof(dict) / sizeof(dict[0]);
}

size_t fuzz_max_len(void)
{
	return 3 + 4 * 24;
}
