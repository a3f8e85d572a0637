/* The model on the CUDA backend: stories260K greedy from BOS reproduces the
 * 200 reference ids, eight prompts batched give each the tokens it gets
 * alone, the logits after a prompt match the CPU backend's, and a pass
 * replayed from CUDA graphs gives the logits of one launched kernel by
 * kernel, to the bit.  Exits 77
 * ("skipped: ...") without a CUDA device or without the test models. */
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_test_util.h"
#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "../model/model_test_util.h"

#define N_SEQ 8
#define N_GEN 24
#define PAGE 4
#define MAX_PROMPT 32

static const char *models;
static struct exl_backend *gpu;
static struct exl_model *model;

static int read_ids(const char *file, int32_t *ids, int max)
{
	char path[4096];
	int n = 0;

	test_model_path(path, sizeof(path), models, file);
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	while (n < max && fscanf(f, "%d", &ids[n]) == 1)
		n++;
	fclose(f);
	return n;
}

/* The 200 ids llama2.c's run.c produces greedily from BOS. */
/* max |a - b| over the range of b (the reference row), as the
 * architecture comparisons measure logits; NaN anywhere gives NaN. */
static double logit_diff(const float *a, const float *b, int nv)
{
	double worst = 0.0, lo = b[0], hi = b[0];

	for (int v = 0; v < nv; v++) {
		double d = fabs((double)a[v] - b[v]);

		worst = d > worst || isnan(d) ? d : worst;
		lo = b[v] < lo ? b[v] : lo;
		hi = b[v] > hi ? b[v] : hi;
	}
	return hi > lo ? worst / (hi - lo) : worst;
}

static void test_expected_ids(void **state)
{
	(void)state;
	int32_t expected[256], got[200];
	int n = read_ids("stories260K.expected.ids", expected, 256);
	int32_t bos = exl_tokenizer_bos(exl_model_tokenizer(model));

	assert_int_equal(n, 200);
	assert_true(bos >= 0);
	/* Pages of 16 positions: the run crosses a dozen page boundaries. */
	test_greedy(model, 16, &bos, 1, 1, 200, got, NULL);
	for (int i = 0; i < 200; i++)
		if (got[i] != expected[i])
			fail_msg("id %d: got %d, expected %d", i, got[i], expected[i]);
}

static const char *const prompts[N_SEQ] = {
	"Once upon a time",
	"Lily wanted to",
	"The little dog",
	"Tom and Sue went to the park",
	"One day, a bird",
	"She was very happy because",
	"The sun was",
	"Once upon a time, there was a big tree",
};

/* All eight prompts prefilled in one pass (cuBLAS-sized), then decoded
 * together (eight vectors per matmul), against each run alone. */
static void test_batch_matches_alone(void **state)
{
	(void)state;
	const struct exl_hparams *hp = exl_model_hparams(model);
	const struct exl_tokenizer *tok = exl_model_tokenizer(model);
	const int nv = hp->n_vocab;
	int32_t prompt[N_SEQ][MAX_PROMPT], alone[N_SEQ][N_GEN], gen[N_SEQ][N_GEN];
	int n_prompt[N_SEQ];
	struct exl_kv_seq seq[N_SEQ], *seqs[N_SEQ];
	float *alone_first = malloc((size_t)N_SEQ * (size_t)nv * sizeof(float));
	float *logits = malloc((size_t)N_SEQ * (size_t)nv * sizeof(float));
	int32_t tokens[N_SEQ * MAX_PROMPT], seq_of[N_SEQ * MAX_PROMPT];
	bool want[N_SEQ * MAX_PROMPT];
	char err[512];
	int n = 0;

	assert_non_null(alone_first);
	assert_non_null(logits);
	for (int j = 0; j < N_SEQ; j++) {
		int32_t *ids;
		int k = exl_tok_encode(tok, prompts[j], strlen(prompts[j]), true, false, &ids, err,
				     sizeof(err));

		if (k < 0)
			fail_msg("tokenize: %s", err);
		assert_true(k >= 2 && k <= MAX_PROMPT);
		memcpy(prompt[j], ids, (size_t)k * sizeof(int32_t));
		free(ids);
		n_prompt[j] = k;
		test_greedy(model, PAGE, prompt[j], k, k, N_GEN, alone[j],
			    alone_first + (size_t)j * (size_t)nv);
	}

	struct exl_kvcache *kv = exl_model_kvcache_create(model, N_SEQ * (MAX_PROMPT + N_GEN),
							  PAGE, err, sizeof(err));
	if (!kv)
		fail_msg("kv cache: %s", err);
	for (int j = 0; j < N_SEQ; j++) {
		exl_kv_seq_init(&seq[j]);
		seqs[j] = &seq[j];
		assert_int_equal(exl_kv_seq_reserve(kv, &seq[j], n_prompt[j]), 0);
		for (int i = 0; i < n_prompt[j]; i++) {
			tokens[n] = prompt[j][i];
			seq_of[n] = j;
			want[n] = i == n_prompt[j] - 1;
			n++;
		}
	}
	assert_true(n > 8);
	struct exl_batch b = { n, tokens, seq_of, want, N_SEQ, seqs };
	if (exl_model_forward(model, kv, &b, logits, err, sizeof(err)))
		fail_msg("prefill: %s", err);

	double max_diff = 0.0;
	for (int j = 0; j < N_SEQ; j++) {
		double rel = logit_diff(logits + (size_t)j * nv, alone_first + (size_t)j * nv, nv);

		max_diff = rel > max_diff || isnan(rel) ? rel : max_diff;
	}
	for (int step = 0; step < N_GEN; step++) {
		for (int j = 0; j < N_SEQ; j++)
			gen[j][step] = test_argmax(logits + (size_t)j * (size_t)nv, nv);
		if (step + 1 == N_GEN)
			break;
		for (int j = 0; j < N_SEQ; j++) {
			assert_int_equal(exl_kv_seq_reserve(kv, &seq[j], 1), 0);
			tokens[j] = gen[j][step];
			seq_of[j] = j;
			want[j] = true;
		}
		b.n_tokens = N_SEQ;
		if (exl_model_forward(model, kv, &b, logits, err, sizeof(err)))
			fail_msg("step %d: %s", step, err);
	}
	for (int j = 0; j < N_SEQ; j++) {
		for (int i = 0; i < N_GEN; i++)
			if (gen[j][i] != alone[j][i])
				fail_msg("prompt %d token %d: batched %d, alone %d", j, i, gen[j][i],
					 alone[j][i]);
		exl_kv_seq_release(kv, &seq[j]);
	}
	/* Batched prefill runs cuBLAS SGEMM, alone prompts of up to 8 tokens
	 * the custom kernels: F32 both, different summation order.  Seen on an
	 * H200: 7.7e-5 of the range (0.0022 of about 28). */
	printf("max |logit difference| / range, batched vs alone after the prompt: %g\n",
	       max_diff);
	assert_true(max_diff <= 1e-3);
	exl_kvcache_free(kv);
	free(logits);
	free(alone_first);
}

/* The logits after a prompt, CUDA vs the CPU backend (the reference). */
static void test_logits_match_cpu(void **state)
{
	(void)state;
	char path[4096], err[512];
	int32_t expected[256], ids_gpu[16], ids_cpu[16], prompt[33];
	int n = read_ids("stories260K.expected.ids", expected, 256);
	struct exl_backend *cpu = exl_backend_cpu_create(1, err, sizeof(err));
	const int nv = exl_model_hparams(model)->n_vocab;
	float *l_gpu = malloc((size_t)nv * sizeof(float)), *l_cpu = malloc((size_t)nv * sizeof(float));

	if (!cpu)
		fail_msg("cpu backend: %s", err);
	assert_int_equal(n, 200);
	assert_non_null(l_gpu);
	assert_non_null(l_cpu);
	test_model_path(path, sizeof(path), models, "stories260K.gguf");
	struct exl_model *mc = exl_model_load(path, cpu, err, sizeof(err));
	if (!mc)
		fail_msg("load on cpu: %s", err);
	prompt[0] = exl_tokenizer_bos(exl_model_tokenizer(model));
	memcpy(prompt + 1, expected, 32 * sizeof(int32_t));
	/* 33 tokens in chunks of 11: cuBLAS prefill, crossing pages of 8. */
	test_greedy(model, 8, prompt, 33, 11, 16, ids_gpu, l_gpu);
	test_greedy(mc, 8, prompt, 33, 11, 16, ids_cpu, l_cpu);
	/* Seen on an H200: 1.0e-4 of the range (0.0028 of about 28). */
	double max_diff = logit_diff(l_gpu, l_cpu, nv);
	printf("max |logit difference| / range, cuda vs cpu after 33 tokens: %g\n", max_diff);
	assert_true(max_diff <= 1e-3);
	assert_memory_equal(ids_gpu, ids_cpu, sizeof(ids_gpu));
	for (int i = 0; i < 16; i++)
		assert_int_equal(ids_gpu[i], expected[32 + i]);
	exl_model_free(mc);
	cpu->ops->destroy(cpu);
	free(l_gpu);
	free(l_cpu);
}

#define GR_PROMPT 33
#define GR_STEPS 48

/* The logits after the prompt and after each of GR_STEPS greedy steps. */
static void greedy_logits(struct exl_model *m, const int32_t *prompt, float *out, int nv)
{
	char err[512];
	struct exl_kvcache *kv = exl_model_kvcache_create(m, GR_PROMPT + GR_STEPS, 8, err,
							  sizeof(err));
	struct exl_kv_seq seq, *seqs[1] = { &seq };
	int32_t seq_idx[11] = { 0 };
	bool want[11];

	if (!kv)
		fail_msg("kv cache: %s", err);
	exl_kv_seq_init(&seq);
	/* chunks of 11: cuBLAS passes, each ended by a flush of the recorder */
	for (int off = 0; off < GR_PROMPT; off += 11) {
		struct exl_batch b = { 11, prompt + off, seq_idx, want, 1, seqs };

		memset(want, 0, sizeof(want));
		want[10] = off + 11 == GR_PROMPT;
		assert_int_equal(exl_kv_seq_reserve(kv, &seq, 11), 0);
		if (exl_model_forward(m, kv, &b, out, err, sizeof(err)))
			fail_msg("forward: %s", err);
	}
	for (int i = 0; i < GR_STEPS; i++) {
		int32_t tok = test_argmax(out + (size_t)i * (size_t)nv, nv), zero = 0;
		bool w = true;
		struct exl_batch b = { 1, &tok, &zero, &w, 1, seqs };

		assert_int_equal(exl_kv_seq_reserve(kv, &seq, 1), 0);
		if (exl_model_forward(m, kv, &b, out + (size_t)(i + 1) * (size_t)nv, err,
				      sizeof(err)))
			fail_msg("step %d: %s", i, err);
	}
	exl_kv_seq_release(kv, &seq);
	exl_kvcache_free(kv);
}

/* Decode steps after the second replay graphs (kernels/cuda/graph.cu):
 * the same kernels with the same arguments as a backend without them
 * (EXLD_CUDA_GRAPHS=0), so every logit of every step is the same float. */
static void test_graphs_match_eager(void **state)
{
	(void)state;
	char path[4096], err[512];
	int32_t expected[256], prompt[GR_PROMPT];
	const int nv = exl_model_hparams(model)->n_vocab;
	const size_t count = (size_t)(GR_STEPS + 1) * (size_t)nv;
	float *l_graph = malloc(count * sizeof(float)), *l_eager = malloc(count * sizeof(float));
	struct exl_backend *eager;
	struct exl_model *me;

	assert_int_equal(read_ids("stories260K.expected.ids", expected, 256), 200);
	assert_non_null(l_graph);
	assert_non_null(l_eager);
	setenv("EXLD_CUDA_GRAPHS", "0", 1);
	eager = exl_backend_cuda_create(0, err, sizeof(err));
	unsetenv("EXLD_CUDA_GRAPHS");
	if (!eager)
		fail_msg("cuda backend without graphs: %s", err);
	test_model_path(path, sizeof(path), models, "stories260K.gguf");
	me = exl_model_load(path, eager, err, sizeof(err));
	if (!me)
		fail_msg("load: %s", err);
	prompt[0] = exl_tokenizer_bos(exl_model_tokenizer(model));
	memcpy(prompt + 1, expected, (GR_PROMPT - 1) * sizeof(int32_t));
	greedy_logits(model, prompt, l_graph, nv);
	greedy_logits(me, prompt, l_eager, nv);
	for (size_t k = 0; k < count; k++)
		if (memcmp(&l_graph[k], &l_eager[k], sizeof(float)))
			fail_msg("step %zu logit %zu: %.9g with graphs, %.9g without", k / nv,
				 k % nv, l_graph[k], l_eager[k]);
	exl_model_free(me);
	eager->ops->destroy(eager);
	free(l_graph);
	free(l_eager);
}

static int group_setup(void **state)
{
	char path[4096], err[512];

	(void)state;
	gpu = exl_backend_cuda_create(0, err, sizeof(err));
	if (!gpu) {
		print_error("cuda backend: %s\n", err);
		return -1;
	}
	test_model_path(path, sizeof(path), models, "stories260K.gguf");
	model = exl_model_load(path, gpu, err, sizeof(err));
	if (!model) {
		print_error("load: %s\n", err);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	exl_model_free(model);
	gpu->ops->destroy(gpu);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_expected_ids),
		cmocka_unit_test(test_batch_matches_alone),
		cmocka_unit_test(test_logits_match_cpu),
		cmocka_unit_test(test_graphs_match_eager),
	};

	if (!cuda_test_have_device())
		return SKIP_STATUS;
	models = test_models_dir();
	if (!models)
		return SKIP_STATUS;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
