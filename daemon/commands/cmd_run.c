/* exld run: load a model, complete one prompt through the generator and
 * the batching engine (the daemon's code path, without the daemon), and
 * stream the text to stdout, or print the result as one JSON line.  The
 * engine bounds the job by the model's context as the daemon's does: a
 * prompt that leaves no room is refused (status 1), longer output ends
 * with max_context.
 *
 * Every generation option of the daemon is an option here (see --help and
 * docs/sampling.md).  The last line on stderr is the timing, as key=value
 * pairs for scripts:
 *   timing: prompt_tokens=N prompt_tok_s=X gen_tokens=N gen_tok_s=X [kernels=SET]
 * prompt_tok_s is the prompt over the time to the first token; gen_tok_s
 * counts the decode passes (every generated token but the first, which
 * comes from the prompt pass), as llama.cpp's benchmarks do; kernels is
 * the CPU backend's matmul kernel set (so a figure names what ran it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/logits_file.h"
#include "daemon/commands/cmd_run.h"
#include "daemon/commands/commands.h"
#include "daemon/core/generator/engine.h"
#include "daemon/core/generator/generator.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/backend_select.h"

#define RUN_PAGE_SIZE 256
#define RUN_BATCH_TOKENS 512

struct run_state {
	const struct run_opts *o;
	const struct exl_tokenizer *tok;
	bool done;
	bool write_failed;
	/* With token healing the prompt is printed with the first text: a
	 * stop string that begins in the healed text ends the output inside
	 * the prompt, and then the result's text is printed instead. */
	bool prompt_pending;
	FILE *logits;             /* --dump-logits, or NULL */
	int logits_errno;         /* the first failed write's, or 0 */
	bool logits_missing;      /* a chunk with tokens came without logits */
};

static int on_chunk(struct exl_job *job, const struct exl_chunk *c, void *user)
{
	struct run_state *st = user;

	(void)job;
	if (st->logits && c->n_tokens && !st->logits_errno) {
		if (!c->logits)
			st->logits_missing = true;
		else if (logits_write(st->logits, c->logits, (size_t)c->n_tokens * (size_t)c->n_vocab))
			st->logits_errno = errno ? errno : EIO;
	}
	if (st->o->json)
		return EXL_CHUNK_OK;
	if (c->text_len && st->prompt_pending) {
		fputs(st->o->prompt, stdout);
		st->prompt_pending = false;
	}
	if (c->text_len && fwrite(c->text, 1, c->text_len, stdout) != c->text_len)
		st->write_failed = true;
	fflush(stdout);
	if (st->o->top_probs)
		exl_run_print_probs(stderr, c, st->tok);
	return EXL_CHUNK_OK;
}

static void on_done(struct exl_job *job, const struct exl_gen_result *r, void *user)
{
	struct run_state *st = user;

	(void)job;
	(void)r;
	st->done = true;
}

/* Tokens of the negative prompt, to size the KV cache. */
static int count_tokens(const struct exl_tokenizer *tok, const struct run_opts *o, const char *text,
			char *err, size_t errlen)
{
	int32_t *ids = NULL;
	bool bos = o->s.add_bos < 0 ? exl_tokenizer_add_bos(tok) : o->s.add_bos == 1;
	int n = exl_tok_encode(tok, text, strlen(text), bos, o->s.encode_special_tokens, &ids,
			     err, errlen);

	free(ids);
	return n;
}

/* --draft-model FILE|NAME: a file as given, or NAME.gguf beside --model;
 * the drafter is named after the file (its base name without .gguf). */
static int draft_file(const struct run_opts *o, char *path, size_t pathlen, char *name,
		      size_t namelen, char *err, size_t errlen)
{
	const char *d = o->draft_model, *slash = strrchr(o->model, '/');
	FILE *f = fopen(d, "rb");
	int n;

	if (f) {
		fclose(f);
		n = snprintf(path, pathlen, "%s", d);
	} else if (!strchr(d, '/')) {
		n = snprintf(path, pathlen, "%.*s%s.gguf", slash ? (int)(slash - o->model + 1) : 0,
			     o->model, d);
	} else {
		snprintf(err, errlen, "--draft-model: cannot open '%.300s': %s", d, strerror(errno));
		return -1;
	}
	if (n < 0 || (size_t)n >= pathlen) {
		snprintf(err, errlen, "--draft-model: '%.300s' is too long", d);
		return -1;
	}
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t len = strlen(base);

	if (len > 5 && !strcmp(base + len - 5, ".gguf"))
		len -= 5;
	if (!len || len >= namelen || len > EXL_GEN_MAX_DRAFT_NAME) {
		snprintf(err, errlen, "--draft-model: '%.300s' has no name of 1 to %d bytes", base,
			 EXL_GEN_MAX_DRAFT_NAME);
		return -1;
	}
	memcpy(name, base, len);
	name[len] = 0;
	return 0;
}

/* Runs the job added to e to its end. */
static int drive(struct exl_engine *e, struct run_state *st, char *err, size_t errlen)
{
	while (!st->done)
		if (exl_engine_step(e, err, errlen) < 0)
			return -1;
	return 0;
}

/* One untimed pass over a single token touches every weight page.  With
 * n_full > 1 (--warmup-full) the pass is a prompt of n_full tokens, so
 * that what a backend sets up on its first prompt of that size (the CUDA
 * backend's scratch, cuBLAS's kernels) is done before the timed one: the
 * steady state of a daemon that has served a prompt before.  Its tokens
 * are the vocabulary's last id, a prefix no real prompt shares, so the
 * timed prompt is computed, not found in the KV cache. */
static int warmup(struct exl_model *m, struct exl_engine *e, int n_full, char *err,
		  size_t errlen)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(m);
	struct exl_gen_settings s;
	struct run_opts quiet = { .json = true };
	struct run_state st = { .o = &quiet, .tok = tok };
	static const struct exl_job_callbacks cb = { on_chunk, on_done };
	int32_t first = exl_tokenizer_bos(tok) >= 0 ? exl_tokenizer_bos(tok) : 0;
	int32_t *ids = &first;
	int n = 1;

	if (n_full > 1) {
		ids = malloc((size_t)n_full * sizeof(*ids));
		if (!ids) {
			snprintf(err, errlen, "warmup: out of memory");
			return -1;
		}
		for (int i = 0; i < n_full; i++)
			ids[i] = exl_model_hparams(m)->n_vocab - 1;
		n = n_full;
	}
	struct exl_prompt p = { NULL, 0, ids, n };

	exl_gen_settings_init(&s);
	s.max_new_tokens = 1;
	s.sampling.temperature = 0.0f;
	struct exl_job *job = exl_job_create(m, &s, &p, NULL, &cb, &st, err, errlen);
	int r = -1;

	if (job) {
		r = exl_engine_add(e, job, err, errlen) ? -1 : drive(e, &st, err, errlen);
		exl_job_free(job);
	}
	if (ids != &first)
		free(ids);
	return r;
}

/* --lora FILE[:SCALE]: each file loaded for m, into set. */
static int load_loras(const struct run_opts *o, const struct exl_model *m,
		      struct exl_lora_set *set, char *err, size_t errlen)
{
	for (size_t i = 0; i < o->a.n_loras; i++) {
		struct exl_lora *l = exl_lora_load(o->a.lora_names[i], m, err, errlen);

		if (!l)
			return -1;
		set->use[set->n].lora = l;
		set->use[set->n++].scale = o->a.lora_scales[i];
	}
	set->key = exl_lora_set_key(set);
	return 0;
}

int exl_cmd_run(int argc, char **argv)
{
	static const struct exl_job_callbacks cb = { on_chunk, on_done };
	struct run_opts o;
	struct exl_backend *be = NULL;
	struct exl_model *m = NULL;
	struct exl_kvcache *kv = NULL;
	struct exl_engine *e = NULL;
	struct exl_job *job = NULL;
	struct run_state st = { .o = &o };
	struct exl_lora_set loras = { 0 };
	char err[512];
	char draft_path[4096], draft_name[EXL_GEN_MAX_DRAFT_NAME + 1];
	int status = 1;
	bool started = false;

	int pr = exl_run_parse_args(argc, argv, &o);
	if (pr) {
		exl_run_opts_free(&o);
		return pr > 0 ? 0 : 2;
	}
	if (o.dump_logits) {
		st.logits = fopen(o.dump_logits, "wb");
		if (!st.logits) {
			snprintf(err, sizeof(err), "--dump-logits: cannot open '%s': %s", o.dump_logits,
				 strerror(errno));
			goto fail;
		}
	}
	if (exl_backend_create_by_name(o.device, o.threads, &be, err, sizeof(err)))
		goto fail;
	m = exl_model_load(o.model, be, err, sizeof(err));
	if (!m)
		goto fail;
	if (load_loras(&o, m, &loras, err, sizeof(err)))
		goto fail;
	o.s.loras = &loras;
	const struct exl_tokenizer *tok = exl_model_tokenizer(m);

	st.tok = tok;
	if (exl_run_load_embeddings(&o, exl_model_hparams(m)->n_embd, err, sizeof(err))) {
		status = 2;
		goto fail;
	}
	if (o.draft_model) {
		if (draft_file(&o, draft_path, sizeof(draft_path), draft_name, sizeof(draft_name),
			       err, sizeof(err))) {
			status = 2;
			goto fail;
		}
		o.s.draft_model = draft_name;
	}
	struct exl_prompt prompt = { o.prompt, strlen(o.prompt), NULL, 0 };
	struct exl_prompt neg = { o.negative, o.negative ? strlen(o.negative) : 0, NULL, 0 };
	if (o.suffix) {
		o.s.fim = true;
		o.s.fim_suffix = o.suffix;
		o.s.fim_suffix_len = strlen(o.suffix);
	}

	job = exl_job_create(m, &o.s, &prompt, o.negative ? &neg : NULL, &cb, &st, err, sizeof(err));
	if (!job) {
		status = 2;
		goto fail;
	}
	struct exl_engine_config cfg;

	/* max_seq_len stays 0: the model's context, as in the daemon. */
	exl_engine_config_init(&cfg);
	cfg.max_batch_tokens = RUN_BATCH_TOKENS;
	cfg.prefill_chunk = RUN_BATCH_TOKENS;
	cfg.max_jobs = 2;
	int n_ctx = exl_engine_max_seq_len(m, &cfg);
	int n_prompt = exl_job_prompt_tokens(job);
	int n_new = o.s.max_new_tokens;
	long need[2] = { (long)n_prompt + n_new, 0 };
	long longest = n_prompt;
	int n_seqs = 1;

	if (o.negative) {
		int n_neg = count_tokens(tok, &o, o.negative, err, sizeof(err));

		if (n_neg < 0)
			goto fail;
		need[n_seqs++] = (long)n_neg + n_new;
		if (n_neg > longest)
			longest = n_neg;
	}
	/* No sequence outgrows the context (a prompt that fills it is
	 * refused when the job is added). */
	for (int i = 0; i < n_seqs; i++)
		if (need[i] > n_ctx)
			need[i] = n_ctx;
	/* Pages small enough for every sequence to have its own. */
	long kv_tokens, page;

	if (o.kv_tokens) {
		kv_tokens = o.kv_tokens;
		page = kv_tokens / n_seqs;
	} else {
		page = need[0] > need[1] ? need[0] : need[1];
		if (page > RUN_PAGE_SIZE)
			page = RUN_PAGE_SIZE;
		kv_tokens = 0;
		for (int i = 0; i < n_seqs; i++)
			kv_tokens += (need[i] + page - 1) / page * page;
	}
	if (page > RUN_PAGE_SIZE)
		page = RUN_PAGE_SIZE;
	if (page < 1)
		page = 1;
	if (o.s.num_beams > 0 && !o.kv_tokens) {
		/* the prompt's pages shared, and each beam's own (exl_beam_pages) */
		kv_tokens = (need[0] + page - 1) / page * page +
			    (long)o.s.num_beams * ((n_new + page - 1) / page + 1) * page;
	}
	if (kv_tokens > (1 << 24))
		kv_tokens = 1 << 24;
	/* a mixed sliding-window model's local pool: each sequence's window
	 * (the beams' with --num-beams) */
	kv = exl_model_kvcache_create_for(m, (int)kv_tokens, (int)page,
					  o.s.num_beams > 0 ? o.s.num_beams : n_seqs,
					  RUN_BATCH_TOKENS, err, sizeof(err));
	if (!kv)
		goto fail;

	e = exl_engine_create(m, kv, &cfg, err, sizeof(err));
	if (!e)
		goto fail;
	if (o.draft_model &&
	    exl_engine_open_drafter(e, draft_name, draft_path, be, err, sizeof(err)))
		goto fail;
	if ((o.warmup || o.warmup_full) &&
	    warmup(m, e, o.warmup_full ? n_prompt : 1, err, sizeof(err)))
		goto fail;
	/* The daemon's refusal (too_large there), before any output. */
	if (exl_engine_add(e, job, err, sizeof(err)))
		goto fail;

	if (!o.json && !o.s.completion_only) {
		if (o.s.token_healing) {
			st.prompt_pending = true;
		} else {
			fputs(o.prompt, stdout);
			fflush(stdout);
		}
	}
	started = true;
	if (drive(e, &st, err, sizeof(err)))
		goto fail;

	const struct exl_gen_result *r = exl_job_result(job);

	if (o.json) {
		if (exl_run_print_json(stdout, r, tok))
			st.write_failed = true;
	} else {
		if (st.prompt_pending)
			fwrite(r->text, 1, r->text_len, stdout);
		fputc('\n', stdout);
	}
	if (fflush(stdout) || st.write_failed) {
		snprintf(err, sizeof(err), "cannot write the output");
		started = false;
		goto fail;
	}
	if (st.logits) {
		FILE *f = st.logits;

		st.logits = NULL;
		if (fclose(f) && !st.logits_errno)
			st.logits_errno = errno ? errno : EIO;
		if (st.logits_missing || st.logits_errno) {
			snprintf(err, sizeof(err), "--dump-logits: cannot write '%s': %s",
				 o.dump_logits, st.logits_missing ? "a step came without its logits" :
				 strerror(st.logits_errno));
			started = false;
			goto fail;
		}
	}
	if (r->reason == EXL_STOP_ERROR) {
		snprintf(err, sizeof(err), "%s", r->error ? r->error : "generation failed");
		started = false;
		goto fail;
	}
	if (r->reason == EXL_STOP_MAX_CONTEXT && longest + r->new_tokens >= n_ctx)
		fprintf(stderr, "exld run: reached the end of the context (%d tokens)\n", n_ctx);
	else if (r->reason == EXL_STOP_MAX_CONTEXT)
		fprintf(stderr, "exld run: KV cache full at %d tokens, stopping (raise --kv-tokens)\n",
			exl_kvcache_n_pages(kv) * exl_kvcache_page_size(kv));
	double t_first = r->time_to_first_token - r->time_queued;
	double t_gen = r->time_total - r->time_to_first_token;
	int decoded = r->new_tokens > 1 ? r->new_tokens - 1 : 0;

	fprintf(stderr, "timing: prompt_tokens=%d prompt_tok_s=%.2f gen_tokens=%d gen_tok_s=%.2f",
		r->prompt_tokens, t_first > 0 ? r->prompt_tokens / t_first : 0.0, r->new_tokens,
		t_gen > 0 && decoded ? decoded / t_gen : 0.0);
	if (r->draft_proposed)
		fprintf(stderr, " draft_proposed=%d draft_accepted=%d", r->draft_proposed,
			r->draft_accepted);
	if (exl_backend_cpu_matmul_kernels(be))
		fprintf(stderr, " kernels=%s", exl_backend_cpu_matmul_kernels(be));
	fputc('\n', stderr);
	status = 0;
	goto out;

fail:
	if (started && !o.json) {
		if (st.prompt_pending)
			fputs(o.prompt, stdout);
		fputc('\n', stdout);
	}
	fflush(stdout);
	fprintf(stderr, "exld run: %s\n", err);
out:
	if (st.logits)
		fclose(st.logits);
	/* The engine first: a job still in it ends (on_done) before it is freed. */
	exl_engine_free(e);
	exl_job_free(job);
	exl_kvcache_free(kv);
	for (int i = 0; i < loras.n; i++)
		exl_lora_unref(loras.use[i].lora);
	exl_model_free(m);
	if (be)
		be->ops->destroy(be);
	exl_run_opts_free(&o);
	return status;
}
