/* LoRA adapters on stories260K (daemon/core/model/lora.h): files the loader
 * must refuse with a message naming the problem (another architecture,
 * a wrong shape, no alpha, not an adapter, half a pair, a tensor it cannot
 * place, a truncated file), and one batch holding sequences with different
 * adapters, or none, giving each the logits it gets alone. */
#include "daemon/core/gguf/gguf.h"
#include "daemon/core/gguf/gguf_write.h"
#include "daemon/core/model/lora.h"
#include "model_test_util.h"
#include "kernels/formats/dtype.h"

static const char *models;
static struct exl_backend *be;
static struct exl_model *m;
static char tmpdir[256];

enum bad { GOOD, WRONG_ARCH, WRONG_SHAPE, NO_ALPHA, NOT_ADAPTER, HALF_PAIR, UNKNOWN_TENSOR,
	   BAD_LAYER, TRUNCATED };

/* A rank-4 adapter for blk.0/1 attn_q and ffn_down with one thing broken. */
static void write_adapter(enum bad b, uint64_t seed, char *path, size_t len)
{
	const struct exl_hparams *hp = exl_model_hparams(m);
	struct gguf_writer *w = exl_gguf_writer_new();
	const uint64_t r = 4, dim = (uint64_t)hp->n_embd, ff = (uint64_t)hp->n_ff;
	char err[256];
	void *keep[10];     /* the writer copies tensor data only when it writes */
	int n_keep = 0;

	assert_non_null(w);
	snprintf(path, len, "%s/lora-%d-%llu.gguf", tmpdir, (int)b, (unsigned long long)seed);
	exl_gguf_writer_set_str(w, "general.architecture", b == WRONG_ARCH ? "qwen2" : "llama");
	exl_gguf_writer_set_str(w, "general.type", b == NOT_ADAPTER ? "model" : "adapter");
	exl_gguf_writer_set_str(w, "adapter.type", "lora");
	if (b != NO_ALPHA)
		exl_gguf_writer_set_f32(w, "adapter.lora.alpha", 8.0f);
	for (int il = 0; il < 2; il++) {
		const char *names[2] = { "attn_q", "ffn_down" };

		for (int k = 0; k < 2; k++) {
			uint64_t in = k ? ff : dim, out = dim;
			uint64_t ea[2] = { in + (b == WRONG_SHAPE && il == 1), r };
			uint64_t eb[2] = { r, out };
			char name[96];
			float *a = malloc(ea[0] * ea[1] * sizeof(float));
			float *bb = malloc(eb[0] * eb[1] * sizeof(float));
			uint64_t s = seed * 7919 + (uint64_t)(il * 2 + k);

			assert_true(a && bb);
			for (uint64_t i = 0; i < ea[0] * ea[1]; i++) {
				s = s * 6364136223846793005ULL + 1442695040888963407ULL;
				a[i] = ((float)(s >> 40) / (float)(1u << 24) - 0.5f) * 0.5f;
			}
			for (uint64_t i = 0; i < eb[0] * eb[1]; i++) {
				s = s * 6364136223846793005ULL + 1442695040888963407ULL;
				bb[i] = ((float)(s >> 40) / (float)(1u << 24) - 0.5f) * 0.2f;
			}
			snprintf(name, sizeof(name), "blk.%d.%s.weight.lora_a",
				 b == BAD_LAYER && il == 1 ? 7 : il, names[k]);
			assert_int_equal(exl_gguf_writer_add_tensor(w, name, EXL_F32, 2, ea, a), 0);
			if (!(b == HALF_PAIR && il == 1 && k == 1)) {
				snprintf(name, sizeof(name), "blk.%d.%s.weight.lora_b",
					 b == BAD_LAYER && il == 1 ? 7 : il, names[k]);
				assert_int_equal(exl_gguf_writer_add_tensor(w, name, EXL_F32, 2, eb, bb),
						 0);
			}
			keep[n_keep++] = a;
			keep[n_keep++] = bb;
		}
	}
	if (b == UNKNOWN_TENSOR) {
		uint64_t e[2] = { dim, r };
		float *z = calloc(dim * r, sizeof(float));

		assert_non_null(z);
		assert_int_equal(exl_gguf_writer_add_tensor(w, "output.weight.lora_a", EXL_F32, 2, e, z),
				 0);
		keep[n_keep++] = z;
	}
	assert_int_equal(exl_gguf_writer_write_file(w, path, err, sizeof(err)), 0);
	exl_gguf_writer_free(w);
	for (int i = 0; i < n_keep; i++)
		free(keep[i]);
	if (b == TRUNCATED) {
		struct stat st;

		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(truncate(path, st.st_size / 2), 0);
	}
}

static void expect_refused(enum bad b, const char *needle)
{
	char path[512], err[512] = "";

	write_adapter(b, 1, path, sizeof(path));
	struct exl_lora *l = exl_lora_load(path, m, err, sizeof(err));
	if (l)
		fail_msg("case %d loaded", (int)b);
	if (!strstr(err, needle))
		fail_msg("case %d: '%s' does not say '%s'", (int)b, err, needle);
	unlink(path);
}

static void test_good_loads(void **state)
{
	char path[512], err[512] = "";

	(void)state;
	write_adapter(GOOD, 1, path, sizeof(path));
	struct exl_lora *l = exl_lora_load(path, m, err, sizeof(err));
	if (!l)
		fail_msg("%s", err);
	assert_int_equal(l->n_pairs, 4);
	assert_int_equal(l->max_rank, 4);
	assert_true(l->alpha == 8.0f);
	exl_lora_unref(l);
	unlink(path);
}

static void test_refused(void **state)
{
	(void)state;
	expect_refused(WRONG_ARCH, "architecture qwen2, the model is llama");
	expect_refused(WRONG_SHAPE, "wrong base model?");
	expect_refused(NO_ALPHA, "adapter.lora.alpha is missing");
	expect_refused(NOT_ADAPTER, "not an adapter");
	expect_refused(HALF_PAIR, "has lora_a but no lora_b");
	expect_refused(UNKNOWN_TENSOR, "output.weight.lora_a");
	expect_refused(BAD_LAYER, "blk.7.attn_q.weight.lora_a");
	expect_refused(TRUNCATED, "lora-8-1.gguf");
}

/* Logits after the 5 prompt tokens of each sequence, the sequences in one
 * batch, under sets[j] (NULL: no adapter). */
static void run_batch(const struct exl_lora_set *const *sets, int n_seqs, float *logits)
{
	static const int32_t prompt[5] = { 1, 403, 407, 261, 378 };
	struct exl_kvcache *kv;
	struct exl_kv_seq seqs[4];
	struct exl_kv_seq *sp[4];
	int32_t tokens[20], seq[20];
	bool want[20];
	char err[256];
	int n = 0;

	kv = exl_model_kvcache_create(m, 256, 16, err, sizeof(err));
	assert_non_null(kv);
	for (int j = 0; j < n_seqs; j++) {
		exl_kv_seq_init(&seqs[j]);
		seqs[j].lora = sets[j];
		sp[j] = &seqs[j];
		assert_int_equal(exl_kv_seq_reserve(kv, &seqs[j], 5), 0);
		for (int i = 0; i < 5; i++, n++) {
			tokens[n] = prompt[i];
			seq[n] = j;
			want[n] = i == 4;
		}
	}
	struct exl_batch b = { n, tokens, seq, want, n_seqs, sp };
	if (exl_model_forward(m, kv, &b, logits, err, sizeof(err)))
		fail_msg("%s", err);
	for (int j = 0; j < n_seqs; j++)
		exl_kv_seq_release(kv, &seqs[j]);
	exl_kvcache_free(kv);
}

static void test_batch_rows(void **state)
{
	char pa[512], pb[512], err[512];
	int nv = exl_model_hparams(m)->n_vocab;
	struct exl_lora *a, *b;
	struct exl_lora_set sa = { 0 }, sb = { 0 }, sab = { 0 };
	float *alone = malloc(4 * (size_t)nv * sizeof(float));
	float *together = malloc(4 * (size_t)nv * sizeof(float));

	(void)state;
	assert_true(alone && together);
	write_adapter(GOOD, 1, pa, sizeof(pa));
	write_adapter(GOOD, 2, pb, sizeof(pb));
	a = exl_lora_load(pa, m, err, sizeof(err));
	b = exl_lora_load(pb, m, err, sizeof(err));
	assert_true(a && b);
	sa = (struct exl_lora_set){ 1, { { a, 1.0f } }, 0 };
	sb = (struct exl_lora_set){ 1, { { b, 0.7f } }, 0 };
	sab = (struct exl_lora_set){ 2, { { a, 0.5f }, { b, 1.0f } }, 0 };
	const struct exl_lora_set *sets[4] = { NULL, &sa, &sb, &sab };

	for (int j = 0; j < 4; j++)
		run_batch(&sets[j], 1, alone + (size_t)j * (size_t)nv);
	run_batch(sets, 4, together);
	for (int j = 0; j < 4; j++) {
		const float *x = alone + (size_t)j * (size_t)nv, *y = together + (size_t)j * (size_t)nv;
		float worst = 0.0f, moved = 0.0f;

		for (int k = 0; k < nv; k++) {
			worst = fmaxf(worst, fabsf(x[k] - y[k]));
			moved = fmaxf(moved, fabsf(x[k] - alone[k]));
		}
		if (worst > 1e-4f)
			fail_msg("sequence %d: batched logits differ from alone by %g", j, worst);
		if (j > 0 && moved < 1e-2f)
			fail_msg("sequence %d: the adapter moved the logits by only %g", j, moved);
	}
	exl_lora_unref(a);
	exl_lora_unref(b);
	unlink(pa);
	unlink(pb);
	free(alone);
	free(together);
}

static int group_setup(void **state)
{
	char path[512], err[256];

	(void)state;
	if (test_tmp_backend_setup("lora", tmpdir, sizeof(tmpdir), &be))
		return -1;
	test_model_path(path, sizeof(path), models, "stories260K.gguf");
	m = exl_model_load(path, be, err, sizeof(err));
	if (!m) {
		print_error("%s\n", err);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	exl_model_free(m);
	test_tmp_backend_teardown(tmpdir, be);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_loads),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_batch_rows),
	};

	models = test_models_dir();
	if (!models)
		return SKIP_STATUS;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
