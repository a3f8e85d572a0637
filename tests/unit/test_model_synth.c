/* The model on random-weight files made by exld-mkmodel, so no model files
 * are needed: qwen2 (q/k/v biases, NEOX rope), llama with tied embeddings,
 * and quantized weights.  Each must load with the right hyperparameters,
 * give finite logits, and give a sequence the same logits in a mixed batch
 * as alone.  Rope scaling and attention-shape metadata are read or refused
 * by name.  k + 1 rows of one sequence in one pass give the bits each
 * position gets alone (speculative decoding's verification).  (Logits against a reference forward pass: test_model_ref.c.)
 *
 *   test_model_synth PATH/TO/exld-mkmodel
 */
#include <sys/wait.h>
#include <unistd.h>

#include "model_test_util.h"

static const char *mkmodel;
static char tmpdir[128];
static struct exl_backend *be;

/* Runs exld-mkmodel with args (NULL-terminated) writing tmpdir/name. */
static void make_model(const char *name, char *path, size_t pathlen, const char *const *args)
{
	test_mkmodel(mkmodel, tmpdir, name, path, pathlen, args);
}

static struct exl_model *load(const char *path)
{
	char err[512];
	struct exl_model *m = exl_model_load(path, be, err, sizeof(err));

	if (!m)
		fail_msg("load %s: %s", path, err);
	return m;
}

/* Three sequences: one alone, then all three in one batch where the first
 * is a prefill chunk and the others decode after their own prefill; the
 * first sequence's logits must match. */
static void check_batch_invariance(struct exl_model *m)
{
	const struct exl_hparams *hp = exl_model_hparams(m);
	int nv = hp->n_vocab;
	int32_t prompt[9] = { 1, 40, 41, 42, 43, 44, 45, 46, 47 };
	int32_t other[2][5] = { { 1, 60, 61, 62, 63 }, { 1, 70, 71, 72, 73 } };
	float *alone = malloc((size_t)nv * sizeof(float));
	float *logits = malloc((size_t)nv * 3 * sizeof(float));
	int32_t gen[4];
	char err[512];

	assert_non_null(alone);
	assert_non_null(logits);
	test_greedy(m, 4, prompt, 9, 9, 4, gen, alone);

	struct exl_kvcache *kv = exl_model_kvcache_create(m, 64, 4, err, sizeof(err));
	struct exl_kv_seq s[3], *seqs[3] = { &s[0], &s[1], &s[2] };
	assert_non_null(kv);
	for (int j = 0; j < 3; j++)
		exl_kv_seq_init(&s[j]);
	/* Prefill the two others first. */
	for (int j = 0; j < 2; j++) {
		int32_t zero[5] = { 0 };
		bool want[5] = { false };
		struct exl_batch b = { 5, other[j], zero, want, 1, &seqs[j + 1] };

		assert_int_equal(exl_kv_seq_reserve(kv, &s[j + 1], 5), 0);
		if (exl_model_forward(m, kv, &b, NULL, err, sizeof(err)))
			fail_msg("forward: %s", err);
	}
	/* Then one batch over order = (s1, s0, s2): a decode token of s1, the
	 * whole prompt of s0, a decode token of s2. */
	struct exl_kv_seq *order[3] = { &s[1], &s[0], &s[2] };
	int32_t tokens[11], seq[11];
	bool want[11] = { false };
	tokens[0] = 80;
	seq[0] = 0;
	memcpy(tokens + 1, prompt, sizeof(prompt));
	for (int i = 1; i < 10; i++)
		seq[i] = 1;
	tokens[10] = 90;
	seq[10] = 2;
	want[0] = want[9] = want[10] = true;
	assert_int_equal(exl_kv_seq_reserve(kv, &s[0], 9), 0);
	assert_int_equal(exl_kv_seq_reserve(kv, &s[1], 1), 0);
	assert_int_equal(exl_kv_seq_reserve(kv, &s[2], 1), 0);
	struct exl_batch b = { 11, tokens, seq, want, 3, order };
	if (exl_model_forward(m, kv, &b, logits, err, sizeof(err)))
		fail_msg("forward: %s", err);

	double max_diff = 0;
	for (int v = 0; v < nv; v++) {
		for (int r = 0; r < 3; r++)
			if (!isfinite(logits[(size_t)r * (size_t)nv + (size_t)v]))
				fail_msg("row %d logit %d is not finite", r, v);
		double d = fabs((double)logits[(size_t)nv + (size_t)v] - alone[v]);
		max_diff = d > max_diff ? d : max_diff;
	}
	printf("max |logit difference| batched vs alone: %g\n", max_diff);
	assert_true(max_diff <= 1e-4);
	assert_int_equal(s[0].n_pos, 9);
	assert_int_equal(s[1].n_pos, 6);
	for (int j = 0; j < 3; j++)
		exl_kv_seq_release(kv, &s[j]);
	exl_kvcache_free(kv);
	free(alone);
	free(logits);
}

static void test_qwen2(void **state)
{
	(void)state;
	char path[256];
	const char *args[] = { "--arch", "qwen2", "--dim", "128", "--layers", "2", "--heads", "4",
			       "--kv-heads", "2", "--ff", "256", NULL };

	make_model("qwen2.gguf", path, sizeof(path), args);
	struct exl_model *m = load(path);
	const struct exl_hparams *hp = exl_model_hparams(m);
	assert_int_equal(hp->arch, EXL_ARCH_QWEN2);
	assert_true(hp->rope_neox);
	assert_int_equal(hp->n_embd, 128);
	assert_int_equal(hp->n_head_kv, 2);
	assert_int_equal(hp->head_dim, 32);
	assert_false(hp->tied_embeddings);
	assert_true(hp->rope_freq_base == 1000000.0f);
	check_batch_invariance(m);
	exl_model_free(m);
	unlink(path);
}

static void test_llama_tied_q8_0(void **state)
{
	(void)state;
	char path[256];
	const char *args[] = { "--dim", "128", "--layers", "2", "--heads", "2", "--ff", "256",
			       "--type", "q8_0", "--tied", NULL };

	make_model("tied.gguf", path, sizeof(path), args);
	struct exl_model *m = load(path);
	const struct exl_hparams *hp = exl_model_hparams(m);
	assert_int_equal(hp->arch, EXL_ARCH_LLAMA);
	assert_false(hp->rope_neox);
	assert_true(hp->tied_embeddings);
	assert_int_equal(hp->head_dim, 64);
	check_batch_invariance(m);
	exl_model_free(m);
	unlink(path);
}

static void test_llama_q4_k(void **state)
{
	(void)state;
	char path[256];
	const char *args[] = { "--dim", "256", "--layers", "1", "--heads", "4", "--kv-heads", "1",
			       "--ff", "512", "--type", "q4_k", NULL };

	make_model("q4k.gguf", path, sizeof(path), args);
	struct exl_model *m = load(path);
	assert_int_equal(exl_model_hparams(m)->n_head_kv, 1);
	check_batch_invariance(m);
	exl_model_free(m);
	unlink(path);
}

/* Speculative decoding verifies k proposals as k + 1 rows of one sequence
 * in one pass: each row's logits must be the bits the same position gets
 * decoded alone, also past 512 positions, where attention cuts a window
 * into partitions, on the backend's 2 threads (one KV head: a decode alone
 * leaves threads idle, so its window's partitions are spread over them). */
static void test_rows_same_bits(void **state)
{
	(void)state;
	enum { HIST = 700, ROWS = 5 };
	char path[256], err[512];
	const char *args[] = { "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "1",
			       "--ff", "256", "--ctx", "2048", NULL };

	make_model("rows.gguf", path, sizeof(path), args);
	struct exl_model *m = load(path);
	int nv = exl_model_hparams(m)->n_vocab;
	struct exl_kvcache *kv = exl_model_kvcache_create(m, 1024, 16, err, sizeof(err));
	struct exl_kv_seq s, *seqs[1] = { &s };
	int32_t *tokens = malloc((HIST + ROWS) * sizeof(int32_t));
	int32_t *seq = calloc(HIST + ROWS, sizeof(int32_t));
	bool *want = calloc(HIST + ROWS, sizeof(bool));
	float *together = malloc((size_t)ROWS * (size_t)nv * sizeof(float));
	float *alone = malloc((size_t)nv * sizeof(float));

	assert_non_null(kv);
	assert_true(tokens && seq && want && together && alone);
	for (int i = 0; i < HIST + ROWS; i++)
		tokens[i] = 3 + (i * 37) % (nv - 3);
	exl_kv_seq_init(&s);
	for (int at = 0; at < HIST; at += 256) {
		int n = HIST - at < 256 ? HIST - at : 256;
		struct exl_batch b = { n, tokens + at, seq, want, 1, seqs };

		assert_int_equal(exl_kv_seq_reserve(kv, &s, n), 0);
		if (exl_model_forward(m, kv, &b, NULL, err, sizeof(err)))
			fail_msg("forward: %s", err);
	}
	for (int i = 0; i < ROWS; i++)
		want[i] = true;
	struct exl_batch rows = { ROWS, tokens + HIST, seq, want, 1, seqs };

	assert_int_equal(exl_kv_seq_reserve(kv, &s, ROWS), 0);
	if (exl_model_forward(m, kv, &rows, together, err, sizeof(err)))
		fail_msg("forward: %s", err);
	exl_kv_seq_truncate(kv, &s, HIST);
	int differ = 0;

	for (int i = 0; i < ROWS; i++) {
		struct exl_batch one = { 1, tokens + HIST + i, seq, want, 1, seqs };

		assert_int_equal(exl_kv_seq_reserve(kv, &s, 1), 0);
		if (exl_model_forward(m, kv, &one, alone, err, sizeof(err)))
			fail_msg("forward: %s", err);
		differ += memcmp(alone, together + (size_t)i * (size_t)nv,
				 (size_t)nv * sizeof(float)) != 0;
	}
	printf("%d of %d rows of one pass differ from their positions decoded alone\n", differ,
	       ROWS);
	assert_int_equal(differ, 0);
	exl_kv_seq_release(kv, &s);
	exl_kvcache_free(kv);
	exl_model_free(m);
	unlink(path);
	free(tokens);
	free(seq);
	free(want);
	free(together);
	free(alone);
}

/* Each architecture beyond llama and qwen2 loads with its own block read
 * from the file, and gives a sequence the same logits in a mixed batch as
 * alone: gemma's sliding window over the 9-token prompt (window 4), the
 * experts a batch's tokens share going through their weights together. */
static void test_archs(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		const char *args[24];
		enum exl_arch arch;
	} cases[] = {
		{ "qwen3.gguf", { "--arch", "qwen3", "--dim", "128", "--heads", "4", "--kv-heads",
				  "2", "--ff", "256", NULL }, EXL_ARCH_QWEN3 },
		{ "phi3.gguf", { "--arch", "phi3", "--dim", "128", "--heads", "4", "--ff", "256",
				 "--ctx", "4096", "--longrope", "512", NULL }, EXL_ARCH_PHI3 },
		{ "gemma2.gguf", { "--arch", "gemma2", "--dim", "128", "--heads", "4", "--kv-heads",
				   "2", "--ff", "256", "--swa", "4", NULL }, EXL_ARCH_GEMMA2 },
		{ "gemma3.gguf", { "--arch", "gemma3", "--dim", "128", "--layers", "3", "--heads",
				   "4", "--ff", "256", "--swa", "4", "--swa-pattern", "3", NULL },
		  EXL_ARCH_GEMMA3 },
		{ "mixtral.gguf", { "--dim", "128", "--heads", "4", "--ff", "128", "--experts", "4",
				    "--type", "q8_0", NULL }, EXL_ARCH_LLAMA },
		{ "qwen3moe.gguf", { "--arch", "qwen3moe", "--dim", "128", "--heads", "4", "--ff",
				     "256", "--experts", "8", "--experts-used", "2", NULL },
		  EXL_ARCH_QWEN3MOE },
		/* Ministral 3's keys: YaRN by 16, its betas and mscale_all_dim,
		 * the temperature; with Mixtral-style experts */
		{ "mistral3.gguf", { "--arch", "mistral3", "--dim", "128", "--heads", "4", "--ff",
				     "128", "--experts", "4", "--rope-scaling", "yarn",
				     "--rope-scale", "16", "--kv",
				     "mistral3.rope.scaling.yarn_beta_fast=f32:16", "--kv",
				     "mistral3.rope.scaling.yarn_log_multiplier=f32:1", "--kv",
				     "mistral3.attention.temperature_scale=f32:0.1", NULL },
		  EXL_ARCH_MISTRAL3 },
		{ "granite.gguf", { "--arch", "granite", "--dim", "128", "--heads", "4", "--ff",
				    "256", NULL }, EXL_ARCH_GRANITE },
		{ "smollm3.gguf", { "--arch", "smollm3", "--dim", "128", "--layers", "4", "--heads",
				    "4", "--ff", "256", NULL }, EXL_ARCH_SMOLLM3 },
		{ "glm4.gguf", { "--arch", "glm4", "--dim", "128", "--heads", "4", "--ff", "256",
				 NULL }, EXL_ARCH_GLM4 },
		{ "gemma.gguf", { "--arch", "gemma", "--dim", "128", "--heads", "4", "--ff", "256",
				  NULL }, EXL_ARCH_GEMMA },
		{ "olmo3.gguf", { "--arch", "olmo2", "--dim", "128", "--layers", "4", "--heads", "4",
				  "--ff", "256", "--swa", "8", NULL }, EXL_ARCH_OLMO2 },
		{ "granitemoe.gguf", { "--arch", "granitemoe", "--dim", "128", "--heads", "4",
				       "--ff", "128", "--experts", "4", NULL }, EXL_ARCH_GRANITE },
		/* gpt-oss: sinks, biases, every other layer local, its experts */
		{ "gpt-oss.gguf", { "--arch", "gpt-oss", "--dim", "128", "--heads", "4", "--ff",
				    "128", "--experts", "4", NULL }, EXL_ARCH_GPT_OSS },
		/* the VL models' language halves run as their text architectures */
		{ "qwen3vl.gguf", { "--arch", "qwen3vl", "--dim", "128", "--heads", "4", "--ff", "256",
				    NULL }, EXL_ARCH_QWEN3 },
		{ "qwen3vlmoe.gguf", { "--arch", "qwen3vlmoe", "--dim", "128", "--heads", "4", "--ff",
				       "256", "--experts", "4", "--experts-used", "2", NULL },
		  EXL_ARCH_QWEN3MOE },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char path[256];

		make_model(cases[i].name, path, sizeof(path), cases[i].args);
		struct exl_model *m = load(path);
		const struct exl_hparams *hp = exl_model_hparams(m);

		printf("%s: %s\n", cases[i].name, hp->arch_name);
		assert_int_equal(hp->arch, cases[i].arch);
		assert_true(hp->rope_neox ==
			    (hp->arch != EXL_ARCH_LLAMA && hp->arch != EXL_ARCH_MISTRAL3 &&
			     hp->arch != EXL_ARCH_GRANITE && hp->arch != EXL_ARCH_SMOLLM3 &&
			     hp->arch != EXL_ARCH_GLM4));
		switch (hp->arch) {
		case EXL_ARCH_PHI3:
			assert_true(fabsf(hp->rope_attn_factor - 1.1547005f) < 1e-6f);
			assert_int_equal(hp->n_ctx_orig, 512);
			break;
		case EXL_ARCH_GEMMA2:
			assert_int_equal(hp->n_swa, 4);
			assert_true(exl_layer_is_swa(hp, 0) && !exl_layer_is_swa(hp, 1));
			assert_true(hp->attn_softcap == 50.0f && hp->final_softcap == 30.0f);
			assert_true(hp->embd_scale && hp->post_norms && hp->ffn_act == EXL_FFN_GELU);
			assert_true(hp->tied_embeddings);
			break;
		case EXL_ARCH_GEMMA3:
			assert_true(exl_layer_is_swa(hp, 0) && exl_layer_is_swa(hp, 1) &&
				    !exl_layer_is_swa(hp, 2));
			assert_true(hp->qk_norm && hp->attn_softcap == 0.0f);
			assert_true(hp->rope_freq_base == 1000000.0f &&
				    hp->rope_freq_base_swa == 10000.0f);
			break;
		case EXL_ARCH_OLMO2:
			assert_true(hp->no_pre_norm && hp->post_norms && hp->qk_norm_full &&
				    hp->n_swa == 8 && exl_layer_is_swa(hp, 0) &&
				    exl_layer_is_swa(hp, 2) && !exl_layer_is_swa(hp, 3) &&
				    hp->local_rope_plain);
			break;
		case EXL_ARCH_GEMMA:
			assert_true(hp->embd_scale && hp->ffn_act == EXL_FFN_GELU && !hp->post_norms &&
				    hp->n_swa == 0 && hp->tied_embeddings);
			break;
		case EXL_ARCH_GLM4:
			assert_true(hp->post_norms && !hp->embd_scale && hp->ffn_act == EXL_FFN_SILU &&
				    hp->n_rot == hp->head_dim / 2);
			break;
		case EXL_ARCH_GPT_OSS:
			assert_true(hp->n_swa == 128 && exl_layer_is_swa(hp, 0) &&
				    !exl_layer_is_swa(hp, 1) && hp->ffn_act == EXL_FFN_SWIGLU_OAI &&
				    hp->moe_softmax_topk && hp->n_expert == 4 &&
				    hp->n_expert_used == 2 && hp->n_ff_exp == 128 && !hp->qk_norm);
			break;
		case EXL_ARCH_SMOLLM3:
			assert_true(exl_layer_has_rope(hp, 0) && exl_layer_has_rope(hp, 2) &&
				    !exl_layer_has_rope(hp, 3));
			break;
		case EXL_ARCH_GRANITE:
			/* Granite 3.3 2B's, as exld-mkmodel writes them */
			assert_true(hp->logit_scale == 8.0f && hp->resid_mul == 0.22f &&
				    hp->embd_mul == 12.0f && hp->attn_scale == 0.015625f);
			assert_true(strcmp(hp->arch_name, "granitemoe") ||
				    (hp->n_expert == 4 && hp->n_expert_used == 2));
			break;
		case EXL_ARCH_MISTRAL3:
			assert_true(hp->rope_yarn && hp->rope_freq_scale == 1.0f / 16.0f);
			assert_true(hp->yarn_beta_fast == 16.0f && hp->yarn_beta_slow == 1.0f &&
				    hp->yarn_log_mul == 1.0f && hp->attn_temp_scale == 0.1f);
			/* fall through */
		case EXL_ARCH_LLAMA:
		case EXL_ARCH_QWEN3MOE:
			assert_true(hp->n_expert > 0 && hp->n_expert_used == 2);
			break;
		default:
			assert_true(hp->qk_norm);
			break;
		}
		check_batch_invariance(m);
		exl_model_free(m);
		unlink(path);
	}
}

/* exld-mkmodel args, then the load error expected (NULL: loads). */
static struct exl_model *try_load(const char *name, const char *const *args, const char *want_err)
{
	char path[256], err[512];
	struct exl_model *m;

	make_model(name, path, sizeof(path), args);
	m = exl_model_load(path, be, err, sizeof(err));
	unlink(path);
	if (want_err) {
		if (m)
			fail_msg("%s loaded; expected the error '%s'", name, want_err);
		printf("%s: %s\n", name, err);
		if (!strstr(err, want_err))
			fail_msg("%s: error '%s' does not say '%s'", name, err, want_err);
		return NULL;
	}
	if (!m)
		fail_msg("load %s: %s", name, err);
	return m;
}

/* Rope scaling from metadata: linear scaling by 4 is a frequency scale of
 * 1/4 (rope.scaling.* and the older rope.scale_linear), as is YaRN's, "none"
 * and factor 0 are no scaling, and a type the forward pass does not
 * implement is refused by name rather than run unscaled. */
static void test_rope_scaling(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		const char *args[8];
		float scale;
		const char *err;
	} cases[] = {
		{ "linear4.gguf", { "--rope-scale", "4" }, 0.25f, NULL },
		{ "qwen2-linear4.gguf", { "--arch", "qwen2", "--rope-scale", "4" }, 0.25f, NULL },
		{ "legacy2.gguf", { "--kv", "llama.rope.scale_linear=f32:2" }, 0.5f, NULL },
		/* no type is linear, as in llama.cpp */
		{ "untyped4.gguf", { "--kv", "llama.rope.scaling.factor=f32:4" }, 0.25f, NULL },
		/* llama.cpp falls back to the old key under a type too */
		{ "typed-legacy2.gguf", { "--rope-scaling", "linear", "--kv",
					  "llama.rope.scale_linear=f32:2" }, 0.5f, NULL },
		/* "none" never scales, whatever the factor (as llama.cpp) */
		{ "none.gguf", { "--rope-scaling", "none", "--rope-scale", "4" }, 1.0f, NULL },
		{ "factor0.gguf", { "--rope-scale", "4", "--kv", "llama.rope.scaling.factor=f32:0" },
		  1.0f, NULL },
		{ "unscaled.gguf", { NULL }, 1.0f, NULL },
		{ "yarn.gguf", { "--rope-scaling", "yarn", "--rope-scale", "4" }, 0.25f, NULL },
		{ "yarn-qwen3.gguf", { "--arch", "qwen3", "--rope-scaling", "yarn", "--rope-scale",
				       "4" }, 0.25f, NULL },
		{ "dynamic.gguf", { "--rope-scaling", "dynamic", "--rope-scale", "4" }, 0,
		  "unsupported rope scaling type 'dynamic' (llama.rope.scaling.type)" },
		/* mistral3's YaRN keys and temperature, checked */
		{ "m3-beta.gguf", { "--arch", "mistral3", "--kv",
				    "mistral3.rope.scaling.yarn_beta_fast=f32:0" }, 0,
		  "mistral3 YaRN betas 0 / 1" },
		{ "m3-temp.gguf", { "--arch", "mistral3", "--kv",
				    "mistral3.attention.temperature_scale=f32:5000" }, 0,
		  "temperature scale 5000 out of range" },
		{ "granitemoe-shared.gguf", { "--arch", "granitemoe", "--experts", "4", "--kv",
					      "granitemoe.expert_shared_feed_forward_length=u32:64" },
		  0, "shared experts (granitemoe.expert_shared_feed_forward_length) are not "
		     "supported" },
		{ "granite-norope.gguf", { "--arch", "granite", "--kv",
					   "granite.rope.scaling.finetuned=bool:false" }, 0,
		  "granite without rope (granite.rope.scaling.finetuned false) is not supported" },
		{ "granite-inf.gguf", { "--arch", "granite", "--kv", "granite.logit_scale=f32:1e30" },
		  0, "granite scales out of range (logit 1e+30" },
		{ "bert-causal.gguf", { "--arch", "bert", "--ctx", "512", "--kv",
					"bert.attention.causal=bool:true" }, 0,
		  "bert with causal attention (bert.attention.causal) is not supported" },
		{ "gpt-oss-nowindow.gguf", { "--arch", "gpt-oss", "--experts", "4", "--kv",
					     "gpt-oss.attention.sliding_window=u32:0" }, 0,
		  "metadata key 'gpt-oss.attention.sliding_window' = 0 is out of range" },
		{ "glm4-nextn.gguf", { "--arch", "glm4", "--kv", "glm4.nextn_predict_layers=u32:1" },
		  0, "glm4 with next-token-prediction layers (glm4.nextn_predict_layers 1)" },
		{ "vl-sections.gguf", { "--arch", "qwen2vl", "--kv",
					"qwen2vl.rope.dimension_sections=u32:3" }, 0,
		  "missing metadata key 'qwen2vl.rope.dimension_sections' (4 integers)" },
		{ "m3-rope-dim.gguf", { "--arch", "mistral3", "--rope-dim", "8" }, 0,
		  "mistral3.rope.dimension_count 8 differs from the head size 16" },
		{ "longrope.gguf", { "--arch", "qwen2", "--rope-scaling", "longrope" }, 0,
		  "unsupported rope scaling type 'longrope' (qwen2.rope.scaling.type)" },
		{ "attn1.gguf", { "--rope-scale", "4", "--kv", "llama.rope.scaling.attn_factor=f32:1" },
		  0.25f, NULL },
		{ "attn2.gguf", { "--rope-scale", "4", "--kv", "llama.rope.scaling.attn_factor=f32:1.5" },
		  0.25f, NULL },
		{ "attn0.gguf", { "--kv", "llama.rope.scaling.attn_factor=f32:0" },
		  0, "llama.rope.scaling.attn_factor 0 is out of range" },
		{ "huge.gguf", { "--rope-scale", "4", "--kv", "llama.rope.scaling.factor=f32:1e9" }, 0,
		  "rope scaling factor 1e+09 is out of range" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct exl_model *m = try_load(cases[i].name, cases[i].args, cases[i].err);

		if (!m)
			continue;
		printf("%s: rope_freq_scale %g\n", cases[i].name,
		       exl_model_hparams(m)->rope_freq_scale);
		assert_true(exl_model_hparams(m)->rope_freq_scale == cases[i].scale);
		assert_int_equal(exl_model_hparams(m)->rope_yarn, !strncmp(cases[i].name, "yarn", 4));
		exl_model_free(m);
	}
}

/* The attention shape keys: key_length sets the head size (q is heads x
 * it, whatever dim is), rope.dimension_count the rotated part; keys the
 * forward pass cannot honour are refused by name. */
static void test_attention_shape(void **state)
{
	(void)state;
	const char *shaped[] = { "--dim", "96", "--heads", "4", "--kv-heads", "2", "--head-dim", "32",
				 "--rope-dim", "16", "--rope-base", "500000", "--eps", "1e-6",
				 NULL };
	struct exl_model *m = try_load("shaped.gguf", shaped, NULL);
	const struct exl_hparams *hp = exl_model_hparams(m);

	assert_int_equal(hp->n_embd, 96);
	assert_int_equal(hp->head_dim, 32);
	assert_int_equal(hp->n_rot, 16);
	assert_true(hp->rope_freq_base == 500000.0f);
	assert_true(hp->rms_eps == 1e-6f);
	exl_model_free(m);

	const char *kv_differ[] = { "--head-dim", "32", "--kv", "llama.attention.value_length=u32:16",
				    NULL };
	try_load("kv_differ.gguf", kv_differ, "key_length 32 != value_length 16 is not supported");
	const char *moe[] = { "--arch", "qwen2", "--kv", "qwen2.expert_count=u32:8", NULL };
	try_load("moe.gguf", moe, "qwen2 models with experts (qwen2.expert_count = 8) are not "
		 "supported");
	const char *moe_k[] = { "--kv", "llama.expert_count=u32:8", NULL };
	try_load("moe_k.gguf", moe_k, "missing metadata key 'llama.expert_used_count'");
	const char *rope_odd[] = { "--kv", "llama.rope.dimension_count=u32:7", NULL };
	try_load("rope_odd.gguf", rope_odd, "llama.rope.dimension_count 7 is odd");
}

static int group_setup(void **state)
{
	(void)state;
	return test_tmp_backend_setup("model-synth", tmpdir, sizeof(tmpdir), &be);
}

static int group_teardown(void **state)
{
	(void)state;
	test_tmp_backend_teardown(tmpdir, be);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_qwen2),
		cmocka_unit_test(test_llama_tied_q8_0),
		cmocka_unit_test(test_llama_q4_k),
		cmocka_unit_test(test_archs),
		cmocka_unit_test(test_rope_scaling),
		cmocka_unit_test(test_attention_shape),
		cmocka_unit_test(test_rows_same_bits),
	};

	if (argc != 2) {
		fprintf(stderr, "usage: %s PATH/TO/exld-mkmodel\n", argv[0]);
		return 2;
	}
	mkmodel = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
