/* exld embed: load a model and print one JSON line per text with its
 * embedding, the pooled final hidden state of its prompt (after the output
 * norm, as llama.cpp pools it), every text one job of the same engine as
 * the daemon's.  With --token-rows FILE it writes instead the input
 * embedding rows of each text's tokens (no BOS) as raw float32, the form
 * `exld run --embedding` and the protocol's input embeddings take. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/commands/commands.h"
#include "daemon/core/generator/engine.h"
#include "daemon/core/generator/generator.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/backend_select.h"

#define EMBED_PAGE_SIZE 256
#define EMBED_BATCH_TOKENS 512

struct embed_opts {
	const char *model;
	const char *device;
	const char *token_rows;
	int threads;
	int pooling;      /* -1: the model's */
	bool normalize;
	char **texts;
	int n_texts;
};

static void usage(FILE *out)
{
	fprintf(out, "usage: exld embed --model FILE [options] TEXT...\n"
		"  --model FILE         GGUF model (required)\n"
		"  --pooling P          mean, last or cls (default: the file's pooling_type, else mean)\n"
		"  --normalize          scale each vector to unit L2 norm\n"
		"  --token-rows FILE    write the input embedding rows of every text's tokens (no BOS)\n"
		"                       to FILE as raw float32 [n][n_embd] instead (- for stdout)\n"
		"  --threads N, -t N    CPU threads (default: one per core)\n"
		"  --device D           cpu (default), cuda or cuda:N\n"
		"Prints one JSON line per text: {\"index\":I,\"n_tokens\":N,\"n_embd\":D,"
		"\"pooling\":P,\"embedding\":[...]}\n");
}

static int parse_pooling(const char *s)
{
	if (!strcmp(s, "mean"))
		return EXL_POOL_MEAN;
	if (!strcmp(s, "last"))
		return EXL_POOL_LAST;
	if (!strcmp(s, "cls"))
		return EXL_POOL_CLS;
	return -1;
}

static const char *pooling_name(int p)
{
	return p == EXL_POOL_MEAN ? "mean" : p == EXL_POOL_LAST ? "last" : "cls";
}

static int parse_args(int argc, char **argv, struct embed_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->device = "cpu";
	o->pooling = -1;
	o->texts = calloc((size_t)argc + 1, sizeof(*o->texts));
	if (!o->texts)
		return -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool val = i + 1 < argc;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 1;
		} else if (!strcmp(a, "--model") && val) {
			o->model = argv[++i];
		} else if (!strcmp(a, "--device") && val) {
			o->device = argv[++i];
		} else if (!strcmp(a, "--token-rows") && val) {
			o->token_rows = argv[++i];
		} else if ((!strcmp(a, "--threads") || !strcmp(a, "-t")) && val) {
			char *end;
			long t = strtol(argv[++i], &end, 10);

			if (*end || end == argv[i] || t < 0 || t > 1024) {
				fprintf(stderr, "exld embed: --threads must be in [0, 1024]\n");
				return -1;
			}
			o->threads = (int)t;
		} else if (!strcmp(a, "--pooling") && val) {
			o->pooling = parse_pooling(argv[++i]);
			if (o->pooling < 0) {
				fprintf(stderr, "exld embed: --pooling must be mean, last or cls "
					"(got '%s')\n", argv[i]);
				return -1;
			}
		} else if (!strcmp(a, "--normalize")) {
			o->normalize = true;
		} else if (!strcmp(a, "--")) {
			while (++i < argc)
				o->texts[o->n_texts++] = argv[i];
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "exld embed: unknown option or missing value '%s'\n", a);
			usage(stderr);
			return -1;
		} else {
			o->texts[o->n_texts++] = argv[i];
		}
	}
	if (!o->model) {
		fprintf(stderr, "exld embed: --model is required\n");
		usage(stderr);
		return -1;
	}
	if (!o->n_texts) {
		fprintf(stderr, "exld embed: no text to embed\n");
		usage(stderr);
		return -1;
	}
	return 0;
}

static int write_token_rows(struct exl_model *m, const struct embed_opts *o, char *err,
			    size_t errlen)
{
	const struct exl_tokenizer *tok = exl_model_tokenizer(m);
	int n_embd = exl_model_hparams(m)->n_embd;
	bool to_stdout = !strcmp(o->token_rows, "-");
	FILE *f = to_stdout ? stdout : fopen(o->token_rows, "wb");
	float *row = malloc((size_t)n_embd * sizeof(*row));
	int rc = -1;

	if (!f || !row) {
		snprintf(err, errlen, "cannot open '%s': %s", o->token_rows,
			 !row ? "out of memory" : strerror(errno));
		goto out;
	}
	for (int t = 0; t < o->n_texts; t++) {
		int32_t *ids = NULL;
		int n = exl_tok_encode(tok, o->texts[t], strlen(o->texts[t]), false, false, &ids,
				     err, errlen);

		if (n < 0)
			goto out;
		for (int i = 0; i < n; i++) {
			if (exl_model_token_row(m, ids[i], row, err, errlen)) {
				free(ids);
				goto out;
			}
			if (fwrite(row, sizeof(*row), (size_t)n_embd, f) != (size_t)n_embd) {
				free(ids);
				snprintf(err, errlen, "cannot write '%s'", o->token_rows);
				goto out;
			}
		}
		fprintf(stderr, "exld embed: text %d: %d rows of %d\n", t, n, n_embd);
		free(ids);
	}
	rc = 0;
out:
	if (f && (to_stdout ? fflush(f) : fclose(f)) && !rc) {
		snprintf(err, errlen, "cannot write '%s'", o->token_rows);
		rc = -1;
	}
	free(row);
	return rc;
}

static int on_chunk(struct exl_job *job, const struct exl_chunk *c, void *user)
{
	(void)job;
	(void)c;
	(void)user;
	return EXL_CHUNK_OK;
}

static void on_done(struct exl_job *job, const struct exl_gen_result *r, void *user)
{
	(void)job;
	(void)r;
	(*(int *)user)++;
}

static int print_embedding(int index, const struct exl_gen_result *r, int pooling)
{
	printf("{\"index\":%d,\"n_tokens\":%d,\"n_embd\":%d,\"pooling\":\"%s\",\"embedding\":[",
	       index, r->prompt_tokens, r->n_embd, pooling_name(pooling));
	for (int k = 0; k < r->n_embd; k++)
		printf("%s%.9g", k ? "," : "", (double)r->embedding[k]);
	printf("]}\n");
	return ferror(stdout) ? -1 : 0;
}

static int run_jobs(struct exl_model *m, const struct embed_opts *o, char *err, size_t errlen)
{
	static const struct exl_job_callbacks cb = { on_chunk, on_done };
	struct exl_job **jobs = calloc((size_t)o->n_texts, sizeof(*jobs));
	struct exl_kvcache *kv = NULL;
	struct exl_engine *e = NULL;
	struct exl_engine_config cfg;
	struct exl_gen_settings s;
	int done = 0, rc = -1, longest = 1;
	long kv_tokens = 0;

	if (!jobs) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	exl_gen_settings_init(&s);
	s.pooling = o->pooling > 0 ? (enum exl_pooling)o->pooling : exl_model_pooling(m);
	s.normalize = o->normalize;
	for (int t = 0; t < o->n_texts; t++) {
		struct exl_prompt p = { o->texts[t], strlen(o->texts[t]), NULL, 0 };
		char sub[400];

		jobs[t] = exl_job_create(m, &s, &p, NULL, &cb, &done, sub, sizeof(sub));
		if (!jobs[t]) {
			snprintf(err, errlen, "text %d: %s", t, sub);
			goto out;
		}
		if (exl_job_prompt_tokens(jobs[t]) > longest)
			longest = exl_job_prompt_tokens(jobs[t]);
	}
	exl_engine_config_init(&cfg);
	cfg.max_batch_tokens = EMBED_BATCH_TOKENS;
	cfg.prefill_chunk = EMBED_BATCH_TOKENS;
	cfg.max_jobs = EMBED_BATCH_TOKENS / 2;
	int n_ctx = exl_engine_max_seq_len(m, &cfg);
	int page = longest < EMBED_PAGE_SIZE ? longest : EMBED_PAGE_SIZE;

	/* every text at once, each in pages of its own */
	for (int t = 0; t < o->n_texts; t++) {
		long n = exl_job_prompt_tokens(jobs[t]);

		n = n > n_ctx ? n_ctx : n;
		kv_tokens += (n + page - 1) / page * page;
		if (kv_tokens > (1 << 24))
			kv_tokens = 1 << 24;
	}
	kv = exl_model_kvcache_create(m, (int)kv_tokens, page, err, errlen);
	if (!kv)
		goto out;
	e = exl_engine_create(m, kv, &cfg, err, errlen);
	if (!e)
		goto out;
	for (int t = 0; t < o->n_texts; t++) {
		char sub[400];

		if (exl_engine_add(e, jobs[t], sub, sizeof(sub))) {
			snprintf(err, errlen, "text %d: %s", t, sub);
			/* not the engine's: free it here, the rest end with it */
			exl_job_free(jobs[t]);
			jobs[t] = NULL;
			goto out;
		}
	}
	while (done < o->n_texts)
		if (exl_engine_step(e, err, errlen) < 0)
			goto out;
	for (int t = 0; t < o->n_texts; t++) {
		const struct exl_gen_result *r = exl_job_result(jobs[t]);

		if (!r->embedding) {
			snprintf(err, errlen, "text %d: %s", t, r->error ? r->error : "no embedding");
			goto out;
		}
		if (print_embedding(t, r, s.pooling)) {
			snprintf(err, errlen, "cannot write the output");
			goto out;
		}
	}
	rc = 0;
out:
	exl_engine_free(e);
	for (int t = 0; t < o->n_texts; t++)
		exl_job_free(jobs[t]);
	free(jobs);
	exl_kvcache_free(kv);
	return rc;
}

int exl_cmd_embed(int argc, char **argv)
{
	struct embed_opts o;
	struct exl_backend *be = NULL;
	struct exl_model *m = NULL;
	char err[512];
	int status = 1;
	int pr = parse_args(argc, argv, &o);

	if (pr) {
		free(o.texts);
		return pr > 0 ? 0 : 2;
	}
	if (exl_backend_create_by_name(o.device, o.threads, &be, err, sizeof(err)))
		goto fail;
	m = exl_model_load(o.model, be, err, sizeof(err));
	if (!m)
		goto fail;
	if (o.token_rows ? write_token_rows(m, &o, err, sizeof(err)) :
			   run_jobs(m, &o, err, sizeof(err)))
		goto fail;
	status = 0;
	goto out;
fail:
	fprintf(stderr, "exld embed: %s\n", err);
out:
	if (fflush(stdout) && !status) {
		fprintf(stderr, "exld embed: cannot write the output\n");
		status = 1;
	}
	exl_model_free(m);
	if (be)
		be->ops->destroy(be);
	free(o.texts);
	return status;
}
