/* The cost of LoRA adapters in a shared batch: aggregate decode tok/s of
 * 8 concurrent jobs on one engine with no adapter, against the same 8 jobs
 * spread over 4 different adapters (2 jobs each), which run their low-rank
 * products on their own rows of the one batch (daemon/core/model/lora.h).
 * Runs are interleaved (none, adapters, none, ...) and the medians
 * printed.  A benchmark, not a test: never run by meson test.
 *
 *   bench_lora MODEL.gguf ADAPTER.gguf... [--threads N] [--pairs P] [--n N]
 *
 * tests/bench/bench_lora.sh makes a dim-640 model and 4 rank-16 adapters
 * with exld-mkmodel and runs this.  Each job's prompt is 16 different
 * token ids (no prefix sharing between jobs), then N greedy tokens with
 * EOS ignored.  tok/s = generated tokens of all jobs / wall time of the
 * whole run (prefill included, the same for both sides); CPU ms per token
 * (getrusage, every thread) is printed beside it, being less at the mercy
 * of other load on a shared machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/clock.h"
#include "daemon/core/generator/engine.h"
#include "daemon/core/generator/generator.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/lora.h"
#include "daemon/core/model/model.h"
#include "kernels/backend.h"

#define N_JOBS 8
#define PROMPT_LEN 16
#define MAX_ADAPTERS 8

struct run {
	int done;
	int tokens;
};

/* CPU seconds of the process so far (every thread, user and system). */
static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int on_chunk(struct exl_job *job, const struct exl_chunk *c, void *user)
{
	(void)job;
	((struct run *)user)->tokens += c->n_tokens;
	return EXL_CHUNK_OK;
}

static void on_done(struct exl_job *job, const struct exl_gen_result *r, void *user)
{
	(void)job;
	(void)r;
	((struct run *)user)->done++;
}

/* One run of N_JOBS jobs; n_sets 0: no adapters.  Returns tok/s or -1,
 * and in *cpu_ms the CPU milliseconds per generated token. */
static double run_once(struct exl_model *m, struct exl_lora_set *sets, int n_sets, int n_new,
		       int round, double *cpu_ms)
{
	static const struct exl_job_callbacks cb = { on_chunk, on_done };
	struct exl_engine_config cfg;
	struct exl_job *jobs[N_JOBS] = { 0 };
	struct run st = { 0, 0 };
	int32_t ids[N_JOBS][PROMPT_LEN];
	int n_vocab = exl_model_hparams(m)->n_vocab;
	char err[512];
	double rate = -1.0;

	exl_engine_config_init(&cfg);
	cfg.max_jobs = N_JOBS;
	struct exl_kvcache *kv = exl_model_kvcache_create(m, N_JOBS * (PROMPT_LEN + n_new + 32),
							  16, err, sizeof(err));
	struct exl_engine *e = kv ? exl_engine_create(m, kv, &cfg, err, sizeof(err)) : NULL;
	if (!e)
		goto out;
	for (int j = 0; j < N_JOBS; j++) {
		struct exl_gen_settings s;
		struct exl_prompt p = { NULL, 0, ids[j], PROMPT_LEN };

		for (int i = 0; i < PROMPT_LEN; i++)
			ids[j][i] = (int32_t)(3 + (round * 131 + j * 977 + i * 7919) % (n_vocab - 3));
		exl_gen_settings_init(&s);
		s.max_new_tokens = n_new;
		s.sampling.temperature = 0.0f;
		s.ignore_eos = true;
		s.loras = n_sets ? &sets[j % n_sets] : NULL;
		jobs[j] = exl_job_create(m, &s, &p, NULL, &cb, &st, err, sizeof(err));
		if (!jobs[j] || exl_engine_add(e, jobs[j], err, sizeof(err)))
			goto out;
	}
	double t0 = exl_now_s(), c0 = cpu_s();
	while (st.done < N_JOBS)
		if (exl_engine_step(e, err, sizeof(err)) < 0)
			goto out;
	rate = st.tokens / (exl_now_s() - t0);
	*cpu_ms = (cpu_s() - c0) * 1e3 / st.tokens;
out:
	if (rate < 0)
		fprintf(stderr, "bench_lora: %s\n", err);
	exl_engine_free(e);
	for (int j = 0; j < N_JOBS; j++)
		exl_job_free(jobs[j]);
	exl_kvcache_free(kv);
	return rate;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *adapters[MAX_ADAPTERS];
	int n_adapters = 0, threads = 2, pairs = 3, n_new = 64;
	struct exl_lora_set sets[MAX_ADAPTERS];
	double none[16], with[16], cnone[16], cwith[16], c;
	char err[512];
	int rc = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
			pairs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--n") && i + 1 < argc)
			n_new = atoi(argv[++i]);
		else if (!model)
			model = argv[i];
		else if (n_adapters < MAX_ADAPTERS)
			adapters[n_adapters++] = argv[i];
	}
	if (!model || !n_adapters || pairs < 1 || pairs > 16 || n_new < 1) {
		fprintf(stderr, "usage: bench_lora MODEL.gguf ADAPTER.gguf... [--threads N] "
			"[--pairs P (1..16)] [--n N]\n");
		return 2;
	}
	struct exl_backend *be = exl_backend_cpu_create(threads, err, sizeof(err));
	struct exl_model *m = be ? exl_model_load(model, be, err, sizeof(err)) : NULL;
	if (!m) {
		fprintf(stderr, "bench_lora: %s\n", err);
		goto out;
	}
	memset(sets, 0, sizeof(sets));
	for (int i = 0; i < n_adapters; i++) {
		sets[i].use[0].lora = exl_lora_load(adapters[i], m, err, sizeof(err));
		if (!sets[i].use[0].lora) {
			fprintf(stderr, "bench_lora: %s\n", err);
			goto out;
		}
		sets[i].n = 1;
		sets[i].use[0].scale = 1.0f;
		sets[i].key = exl_lora_set_key(&sets[i]);
	}
	run_once(m, sets, 0, 4, 99, &c); /* warm: every weight page touched */
	for (int p = 0; p < pairs; p++) {
		none[p] = run_once(m, sets, 0, n_new, p, &cnone[p]);
		with[p] = run_once(m, sets, n_adapters, n_new, p, &cwith[p]);
		if (none[p] < 0 || with[p] < 0)
			goto out;
		printf("pair %d: no adapter %.1f tok/s (%.2f CPU ms/token), %d adapters %.1f tok/s "
		       "(%.2f CPU ms/token)\n", p, none[p], cnone[p], n_adapters, with[p], cwith[p]);
	}
	double a = median(none, pairs), b = median(with, pairs);
	double ca = median(cnone, pairs), cb = median(cwith, pairs);
	printf("median aggregate tok/s of %d jobs x %d tokens (%d threads): no adapter %.1f, "
	       "%d adapters %.1f, ratio %.3f; CPU ms per token %.2f and %.2f, ratio %.3f\n",
	       N_JOBS, n_new, threads, a, n_adapters, b, b / a, ca, cb, cb / ca);
	rc = 0;
out:
	for (int i = 0; i < n_adapters; i++)
		if (sets[i].n)
			exl_lora_unref(sets[i].use[0].lora);
	exl_model_free(m);
	if (be)
		be->ops->destroy(be);
	return rc;
}
