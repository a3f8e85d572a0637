/* exld run: load a model, complete one prompt, stream the text to stdout.
 *
 * An offline check of the model and the forward pass, without the daemon.
 * The last line on stderr is the timing, as key=value pairs for scripts:
 *   timing: prompt_tokens=N prompt_tok_s=X gen_tokens=N gen_tok_s=X
 * gen_tok_s counts the decode passes (every generated token but the first,
 * which comes from the prompt pass), as llama.cpp's benchmarks do.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/commands.h"
#include "daemon/kvcache.h"
#include "daemon/model.h"
#include "daemon/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/backend_select.h"

#define RUN_PAGE_SIZE 256
#define RUN_PREFILL_CHUNK 512

struct run_opts {
	const char *model;
	const char *prompt;
	const char *device;
	long n_predict;
	double temperature;
	unsigned long long seed;
	bool seed_set;
	long threads;
	long kv_tokens;
	bool special;
	bool warmup;
};

static void run_usage(FILE *out)
{
	fprintf(out,
		"usage: exld run --model FILE --prompt TEXT [-n N] [--temperature T] [--seed S]\n"
		"                [--threads N] [--kv-tokens N] [--device D] [--special] [--warmup]\n"
		"  -n N             tokens to generate (default 128)\n"
		"  --temperature T  0 for greedy (default 0.8)\n"
		"  --seed S         sampling seed (default: from the clock)\n"
		"  --threads N      CPU threads (default: one per core)\n"
		"  --kv-tokens N    KV cache size (default: prompt + N)\n"
		"  --device D       cpu (default), cuda or cuda:N\n"
		"  --special        parse special tokens written in the prompt\n"
		"  --warmup         run one untimed pass first (touches every weight page)\n");
}

static int parse_long(const char *opt, const char *s, long min, long max, long *out)
{
	char *end;

	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "exld run: %s wants an integer in [%ld, %ld], not '%s'\n", opt,
			min, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv, struct run_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->n_predict = 128;
	o->temperature = 0.8;
	o->device = "cpu";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool takes = true;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			run_usage(stdout);
			return 1;
		}
		if (!strcmp(a, "--special")) {
			o->special = true;
			continue;
		}
		if (!strcmp(a, "--warmup")) {
			o->warmup = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "exld run: %s needs a value\n", a);
			return -1;
		}
		if (!strcmp(a, "--model")) {
			o->model = v;
		} else if (!strcmp(a, "--prompt")) {
			o->prompt = v;
		} else if (!strcmp(a, "--device")) {
			o->device = v;
		} else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
			if (parse_long(a, v, 0, 1 << 24, &o->n_predict))
				return -1;
		} else if (!strcmp(a, "--temperature") || !strcmp(a, "--temp")) {
			char *end;
			errno = 0;
			o->temperature = strtod(v, &end);
			if (errno || end == v || *end || !isfinite(o->temperature) ||
			    o->temperature < 0 || o->temperature > 100) {
				fprintf(stderr, "exld run: %s wants a number in [0, 100], not '%s'\n",
					a, v);
				return -1;
			}
		} else if (!strcmp(a, "--seed")) {
			char *end;
			errno = 0;
			o->seed = strtoull(v, &end, 10);
			if (errno || end == v || *end || *v == '-') {
				fprintf(stderr, "exld run: --seed wants an unsigned integer, not '%s'\n",
					v);
				return -1;
			}
			o->seed_set = true;
		} else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
			if (parse_long(a, v, 0, 1024, &o->threads))
				return -1;
		} else if (!strcmp(a, "--kv-tokens")) {
			if (parse_long(a, v, 1, 1 << 24, &o->kv_tokens))
				return -1;
		} else {
			takes = false;
		}
		if (!takes) {
			fprintf(stderr, "exld run: unknown option '%s'\n", a);
			run_usage(stderr);
			return -1;
		}
		i++;
	}
	if (!o->model || !o->prompt) {
		fprintf(stderr, "exld run: --model and --prompt are required\n");
		run_usage(stderr);
		return -1;
	}
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- sampling: greedy, or plain softmax at a temperature ----
 * (the daemon's sampler does the rest; this is all `run` needs) */

static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int32_t sample_token(float *logits, int n_vocab, double temperature, uint64_t *rng)
{
	int32_t best = 0;

	for (int i = 1; i < n_vocab; i++)
		if (logits[i] > logits[best])
			best = i;
	if (temperature <= 0)
		return best;

	double sum = 0, max = logits[best];
	for (int i = 0; i < n_vocab; i++) {
		logits[i] = (float)exp(((double)logits[i] - max) / temperature);
		sum += logits[i];
	}
	double r = (double)(rng_next(rng) >> 11) * 0x1.0p-53 * sum;
	for (int i = 0; i < n_vocab; i++) {
		r -= logits[i];
		if (r < 0)
			return i;
	}
	return best; /* rounding left r just above zero */
}

/* ---- the run ---- */

static bool is_eog(const struct exl_tokenizer *tok, int32_t id)
{
	const int32_t *ids;
	int n = exl_tokenizer_eog_ids(tok, &ids);

	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* One forward pass of n tokens of seq, logits for the last only. */
static int step(struct exl_model *m, struct exl_kvcache *kv, struct exl_kv_seq *seq,
		const int32_t *tokens, int n, bool want_last, float *logits, bool *want,
		int32_t *seq_idx, char *err, size_t errlen)
{
	struct exl_kv_seq *seqs[1] = { seq };
	struct exl_batch b = {
		.n_tokens = n, .tokens = tokens, .seq = seq_idx, .want_logits = want,
		.n_seqs = 1, .seqs = seqs,
	};

	if (exl_kv_seq_reserve(kv, seq, n)) {
		snprintf(err, errlen, "the prompt does not fit in the KV cache (%d tokens "
			 "stored; raise --kv-tokens)", seq->n_pos);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		seq_idx[i] = 0;
		want[i] = want_last && i == n - 1;
	}
	return exl_model_forward(m, kv, &b, logits, err, errlen);
}

static int emit(struct exl_detok *d, int32_t id, char **buf, size_t *len, size_t *cap)
{
	*len = 0;
	if (exl_detok_push(d, id, buf, len, cap))
		return -1;
	if (*len && fwrite(*buf, 1, *len, stdout) != *len)
		return -1;
	fflush(stdout);
	return 0;
}

int cmd_run(int argc, char **argv)
{
	struct run_opts o;
	struct exl_backend *be = NULL;
	struct exl_model *m = NULL;
	struct exl_kvcache *kv = NULL;
	struct exl_kv_seq seq;
	struct exl_detok detok;
	int32_t *prompt = NULL, *seq_idx = NULL;
	bool *want = NULL;
	float *logits = NULL;
	char *text = NULL;
	size_t text_len = 0, text_cap = 0;
	char err[512];
	int status = 1, n_prompt, n_gen = 0, n_decoded = 0;
	double t_prompt = 0, t_gen = 0;

	exl_kv_seq_init(&seq);
	int pr = parse_args(argc, argv, &o);
	if (pr)
		return pr > 0 ? 0 : 2;

	if (exl_backend_create_by_name(o.device, (int)o.threads, &be, err, sizeof(err)))
		goto fail;
	m = exl_model_load(o.model, be, err, sizeof(err));
	if (!m)
		goto fail;
	const struct exl_tokenizer *tok = exl_model_tokenizer(m);
	const struct exl_hparams *hp = exl_model_hparams(m);

	n_prompt = exl_tokenize(tok, o.prompt, strlen(o.prompt), exl_tokenizer_add_bos(tok),
				o.special, &prompt, err, sizeof(err));
	if (n_prompt < 0)
		goto fail;
	if (n_prompt == 0) {
		snprintf(err, sizeof(err), "the prompt is empty and the model adds no BOS");
		goto fail;
	}
	if (n_prompt + o.n_predict > hp->n_ctx_train)
		fprintf(stderr, "exld run: note: %d prompt + %ld new tokens exceed the model's "
			"training context of %d\n", n_prompt, o.n_predict, hp->n_ctx_train);
	long kv_tokens = o.kv_tokens ? o.kv_tokens : n_prompt + o.n_predict;
	if (kv_tokens > (1 << 24))
		kv_tokens = 1 << 24;
	kv = exl_model_kvcache_create(m, (int)kv_tokens,
				      kv_tokens < RUN_PAGE_SIZE ? (int)kv_tokens : RUN_PAGE_SIZE,
				      err, sizeof(err));
	if (!kv)
		goto fail;

	int chunk = n_prompt < RUN_PREFILL_CHUNK ? n_prompt : RUN_PREFILL_CHUNK;
	logits = malloc((size_t)hp->n_vocab * sizeof(*logits));
	want = malloc((size_t)chunk * sizeof(*want));
	seq_idx = malloc((size_t)chunk * sizeof(*seq_idx));
	if (!logits || !want || !seq_idx) {
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}

	uint64_t rng = o.seed_set ? o.seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	exl_detok_init(&detok, tok, false, o.prompt[0] == '\0');
	fputs(o.prompt, stdout);
	fflush(stdout);

	if (o.warmup) {
		if (step(m, kv, &seq, prompt, 1, true, logits, want, seq_idx, err, sizeof(err)))
			goto fail_nl;
		exl_kv_seq_truncate(kv, &seq, 0);
	}
	double t0 = now_s();
	for (int off = 0; off < n_prompt; off += chunk) {
		int n = n_prompt - off < chunk ? n_prompt - off : chunk;

		if (step(m, kv, &seq, prompt + off, n, off + n == n_prompt, logits, want, seq_idx,
			 err, sizeof(err)))
			goto fail_nl;
	}
	int32_t id = sample_token(logits, hp->n_vocab, o.temperature, &rng);
	double t1 = now_s();
	t_prompt = t1 - t0;

	while (n_gen < o.n_predict && !is_eog(tok, id)) {
		n_gen++;
		if (emit(&detok, id, &text, &text_len, &text_cap)) {
			snprintf(err, sizeof(err), "cannot write the output");
			goto fail_nl;
		}
		if (n_gen == o.n_predict)
			break;
		if (exl_kv_seq_reserve(kv, &seq, 1)) {
			fprintf(stderr, "\nexld run: KV cache full at %d tokens, stopping "
				"(raise --kv-tokens)\n", seq.n_pos);
			break;
		}
		if (step(m, kv, &seq, &id, 1, true, logits, want, seq_idx, err, sizeof(err)))
			goto fail_nl;
		n_decoded++;
		id = sample_token(logits, hp->n_vocab, o.temperature, &rng);
	}
	t_gen = now_s() - t1;
	text_len = 0;
	if (exl_detok_flush(&detok, &text, &text_len, &text_cap) == 0 && text_len)
		fwrite(text, 1, text_len, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	fprintf(stderr, "timing: prompt_tokens=%d prompt_tok_s=%.2f gen_tokens=%d gen_tok_s=%.2f\n",
		n_prompt, t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen,
		t_gen > 0 && n_decoded ? n_decoded / t_gen : 0.0);
	status = 0;
	goto out;

fail_nl:
	fputc('\n', stdout);
fail:
	fprintf(stderr, "exld run: %s\n", err);
out:
	free(text);
	free(logits);
	free(want);
	free(seq_idx);
	free(prompt);
	if (kv) {
		exl_kv_seq_release(kv, &seq);
		exl_kvcache_free(kv);
	}
	exl_model_free(m);
	if (be)
		be->ops->destroy(be);
	return status;
}
