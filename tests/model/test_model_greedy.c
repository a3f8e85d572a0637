/* Greedy generation through the model API on the trained test models:
 * stories260K must reproduce llama2.c's 200 reference ids from BOS, and
 * aidreams260K must give finite logits and the same output every run. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/core/model/kvcache.h"
#include "daemon/core/model/model.h"
#include "daemon/core/tokenizer/tokenizer.h"
#include "model_test_util.h"

static const char *models;
static struct exl_backend *be;

static struct exl_model *load(const char *file)
{
	char path[4096], err[512];
	struct exl_model *m;

	test_model_path(path, sizeof(path), models, file);
	m = exl_model_load(path, be, err, sizeof(err));
	if (!m)
		fail_msg("load: %s", err);
	return m;
}

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

static void test_stories_hparams(void **state)
{
	(void)state;
	struct exl_model *m = load("stories260K.gguf");
	const struct exl_hparams *hp = exl_model_hparams(m);

	assert_int_equal(hp->arch, EXL_ARCH_LLAMA);
	assert_string_equal(hp->arch_name, "llama");
	assert_int_equal(hp->n_embd, 64);
	assert_int_equal(hp->n_layer, 5);
	assert_int_equal(hp->n_head, 8);
	assert_int_equal(hp->n_head_kv, 4);
	assert_int_equal(hp->head_dim, 8);
	assert_int_equal(hp->n_rot, 8);
	assert_int_equal(hp->n_ff, 172);
	assert_int_equal(hp->n_vocab, 512);
	assert_false(hp->rope_neox);
	assert_true(hp->rope_freq_scale == 1.0f);
	assert_true(exl_model_weight_bytes(m) > 200000);
	exl_model_free(m);
}

/* The 200 ids llama2.c's run.c produces greedily from BOS. */
static void test_stories_expected_ids(void **state)
{
	(void)state;
	int32_t expected[256], got[200];
	int n = read_ids("stories260K.expected.ids", expected, 256);
	struct exl_model *m = load("stories260K.gguf");
	int32_t bos = exl_tokenizer_bos(exl_model_tokenizer(m));

	assert_int_equal(n, 200);
	assert_true(bos >= 0);
	/* Pages of 16 positions: the run crosses a dozen page boundaries. */
	test_greedy(m, 16, &bos, 1, 1, 200, got, NULL);
	for (int i = 0; i < 200; i++)
		if (got[i] != expected[i])
			fail_msg("id %d: got %d, expected %d", i, got[i], expected[i]);
	exl_model_free(m);
}

/* The same continuation whether the prompt is prefilled at once or in
 * chunks that do not line up with pages. */
static void test_stories_chunked_prefill(void **state)
{
	(void)state;
	int32_t expected[256], whole[40], chunked[40], prompt[41];
	int n = read_ids("stories260K.expected.ids", expected, 256);
	struct exl_model *m = load("stories260K.gguf");

	assert_int_equal(n, 200);
	prompt[0] = exl_tokenizer_bos(exl_model_tokenizer(m));
	memcpy(prompt + 1, expected, 40 * sizeof(int32_t));
	test_greedy(m, 256, prompt, 41, 41, 40, whole, NULL);
	test_greedy(m, 8, prompt, 41, 7, 40, chunked, NULL);
	assert_memory_equal(whole, chunked, sizeof(whole));
	/* And it continues the reference, which was greedy all the way. */
	for (int i = 0; i < 40; i++)
		assert_int_equal(whole[i], expected[40 + i]);
	exl_model_free(m);
}

static void test_aidreams(void **state)
{
	(void)state;
	struct exl_model *m = load("aidreams260K.gguf");
	const struct exl_hparams *hp = exl_model_hparams(m);
	int32_t bos = exl_tokenizer_bos(exl_model_tokenizer(m));
	int32_t a[100], b[100];

	assert_int_equal(hp->n_layer, 4);
	assert_int_equal(hp->n_head, 4);
	assert_int_equal(hp->n_head_kv, hp->n_head);
	assert_true(hp->n_ctx_train >= 101);
	assert_true(bos >= 0);
	test_greedy(m, 32, &bos, 1, 1, 100, a, NULL);
	test_greedy(m, 256, &bos, 1, 1, 100, b, NULL);
	assert_memory_equal(a, b, sizeof(a));
	/* A trained model does not repeat one token forever. */
	int distinct = 0;
	for (int i = 0; i < 100; i++) {
		bool seen = false;
		for (int j = 0; j < i; j++)
			seen = seen || a[j] == a[i];
		distinct += !seen;
	}
	assert_true(distinct >= 10);
	exl_model_free(m);
}

static int group_setup(void **state)
{
	char err[256];

	(void)state;
	be = exl_backend_cpu_create(2, err, sizeof(err));
	if (!be) {
		print_error("cpu backend: %s\n", err);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	be->ops->destroy(be);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stories_hparams),
		cmocka_unit_test(test_stories_expected_ids),
		cmocka_unit_test(test_stories_chunked_prefill),
		cmocka_unit_test(test_aidreams),
	};

	models = test_models_dir();
	if (!models)
		return SKIP_STATUS;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
