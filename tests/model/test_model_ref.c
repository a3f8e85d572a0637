/* exl_model_forward against the naive double-precision reference of
 * ref_forward.c, logit by logit, at every position of a 20-token prompt
 * (prefilled in two chunks of 13 and 7) and of 4 decode steps after it,
 * through a paged KV cache of 8-token pages.
 *
 * The models are random-weight F32 files written by exld-mkmodel (unit
 * suite), one per feature the forward pass must get right: GQA, qwen2's
 * biases and NEOX rope, tied embeddings, a head size that is not
 * dim/heads, partial rotary dimensions, rope base 500000, linear rope
 * scaling; and the trained stories260K (model suite).
 *
 * Two references, and a tolerance for each, per position, relative to that
 * position's logit range (max - min of the reference's logits):
 *
 *   - on exld's own K/V: the reference attends over the F16 halves exld's
 *     cache holds (read back from its pages) after checking each is the F16
 *     rounding of the reference's own double value, within one F16 step and
 *     float32 error (ref_model_take_kv).  What is left is float32 arithmetic:
 *     unit roundoff 2^-24 (6e-8) per operation, growing with the length of
 *     the sums (64 to 256 here) and over a few layers to a few 1e-7 of the
 *     range (measured on stories260K and every case below, under every
 *     kernel set and with each row kernel of one set swapped for another's:
 *     1.5e-7 to 4.5e-7).  Bound: 1e-5.
 *
 *     The reference used to round its own double K/V to F16 instead.  That
 *     is discontinuous: an element within exld's arithmetic error of the
 *     midpoint between two halves rounds up in one and down in the other,
 *     a whole F16 step, and on stories260K a single such element moved
 *     logits by 2e-4 of the range.  5 to 20 of its 7680 K/V elements do
 *     that, and which ones changes with any summation order: the scalar
 *     set (a double sum of squares in rmsnorm) measured 2.1e-4, AVX2 1.5e-5,
 *     AVX2 with only the scalar sum of squares 2.0e-4, with only the scalar
 *     swiglu 2.8e-6.  That measured luck, not the forward pass.
 *
 *   - against the pure double reference: 2e-3.  F16 keeps 11 significant
 *     bits (relative error up to 2^-12 per K/V element); through a few
 *     layers that moves logits by ~2e-4 of their range (measured: 1.7e-4
 *     to 4.3e-4; stories260K 4.2e-4).  llama.cpp's own logits on
 *     stories260K are 0.8e-4 to 1.9e-4 of the range from the reference.
 *
 * The bugs this is for move them by far more: ignoring the linear rope
 * scaling 0.13-0.22 of the range, dropping qwen2's q/k/v biases 0.16-0.22,
 * a wrong rope base or rotating the whole head instead of rope.dimension_
 * count dimensions likewise; and each of those already fails the K/V check.
 *
 *   test_model_ref PATH/TO/exld-mkmodel    the random-weight models
 *   test_model_ref stories                 ../shared/models/stories260K.gguf
 */
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/formats/elem.h"
#include "model_test_util.h"
#include "ref_forward.h"

#define N_PROMPT 20
#define N_CHUNK1 13
#define N_DECODE 4
#define N_TOKENS (N_PROMPT + N_DECODE)
#define PAGE_SIZE 8

#define TOL_F16_KV 1e-5
#define TOL_DOUBLE 2e-3

static const char *mkmodel;
static char tmpdir[128];
static struct exl_backend *be;

/* Runs exld-mkmodel with args (NULL-terminated) writing tmpdir/name. */
static void make_model(const char *name, char *path, size_t pathlen, const char *const *args)
{
	test_mkmodel(mkmodel, tmpdir, name, path, pathlen, args);
}

/* Fixed pseudo-random token ids in [3, n_vocab): no BOS / EOS games. */
static void make_tokens(int32_t *tokens, int n, int n_vocab, uint32_t seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		tokens[i] = 3 + (int32_t)((seed >> 8) % (uint32_t)(n_vocab - 3));
	}
}

/* Copies what seq's pages hold of every layer's K and V (F16, read as
 * floats) into k and v, [n_layer][N_TOKENS][n_head_kv * head_dim], for the
 * positions seq holds: those of pages a sliding window gave back keep what
 * an earlier call read (after every step, each position is read while
 * still held). */
static void read_kv(const struct exl_kvcache *kv, const struct exl_kv_seq *seq, int n_layer,
		    float *k, float *v)
{
	for (int l = 0; l < n_layer; l++) {
		const struct exl_kv_layer *ly = exl_kvcache_layer(kv, l);
		const uint16_t *K = ly->k, *V = ly->v;
		size_t hd = (size_t)ly->head_dim, kv_dim = (size_t)ly->n_kv_heads * hd;

		for (int p = 0; p < seq->n_pos; p++) {
			int32_t pg = (ly->table ? seq->lpages : seq->pages)[p / ly->page_size];
			size_t page = (size_t)pg;

			if (pg < 0)
				continue;
			for (int h = 0; h < ly->n_kv_heads; h++) {
				/* the CPU backend's page layout: [page][kv head][slot][head_dim] */
				size_t src = ((page * (size_t)ly->n_kv_heads + (size_t)h) *
						      (size_t)ly->page_size + (size_t)(p % ly->page_size)) * hd;
				size_t dst = ((size_t)l * N_TOKENS + (size_t)p) * kv_dim + (size_t)h * hd;

				for (size_t d = 0; d < hd; d++) {
					k[dst + d] = exl_fp16_to_fp32(K[src + d]);
					v[dst + d] = exl_fp16_to_fp32(V[src + d]);
				}
			}
		}
	}
}

/* exld's logits at every position: the prompt in two chunks, then decode
 * steps one token at a time; and the K/V its cache then holds. */
static void exl_logits(struct exl_model *m, const int32_t *tokens, float *out, float *kv_k,
		       float *kv_v)
{
	int nv = exl_model_hparams(m)->n_vocab;
	char err[512];
	struct exl_kvcache *kv = exl_model_kvcache_create(m, N_TOKENS + PAGE_SIZE, PAGE_SIZE, err,
							  sizeof(err));
	struct exl_kv_seq seq, *seqs[1] = { &seq };
	int32_t seq_idx[N_TOKENS] = { 0 };
	bool want[N_TOKENS];
	const int steps[][2] = { { 0, N_CHUNK1 }, { N_CHUNK1, N_PROMPT - N_CHUNK1 },
				 { 20, 1 }, { 21, 1 }, { 22, 1 }, { 23, 1 } };

	if (!kv)
		fail_msg("kv cache: %s", err);
	for (int i = 0; i < N_TOKENS; i++)
		want[i] = true;
	exl_kv_seq_init(&seq);
	for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
		int off = steps[s][0], n = steps[s][1];
		struct exl_batch b = { n, tokens + off, seq_idx, want, 1, seqs };

		assert_int_equal(seq.n_pos, off);
		assert_int_equal(exl_kv_seq_reserve(kv, &seq, n), 0);
		if (exl_model_forward(m, kv, &b, out + (size_t)off * (size_t)nv, err, sizeof(err)))
			fail_msg("forward: %s", err);
		read_kv(kv, &seq, exl_model_hparams(m)->n_layer, kv_k, kv_v);
	}
	assert_int_equal(seq.n_pos, N_TOKENS);
	if (exl_kvcache_window(kv))
		printf("the window gave back %d of %d pages\n", seq.n_dropped, seq.n_pages);
	exl_kv_seq_release(kv, &seq);
	exl_kvcache_free(kv);
}

/* The largest |got - want| over a row, relative to want's range, over all
 * rows. */
static double max_rel_error(const float *got, const double *want, int n_rows, int nv,
			    int *worst_row)
{
	double worst = 0;

	for (int r = 0; r < n_rows; r++) {
		const float *g = got + (size_t)r * (size_t)nv;
		const double *w = want + (size_t)r * (size_t)nv;
		double lo = w[0], hi = w[0], d = 0;

		for (int v = 0; v < nv; v++) {
			if (!isfinite(g[v]))
				fail_msg("position %d logit %d is %f", r, v, g[v]);
			lo = w[v] < lo ? w[v] : lo;
			hi = w[v] > hi ? w[v] : hi;
			d = fmax(d, fabs((double)g[v] - w[v]));
		}
		assert_true(hi > lo);
		if (d / (hi - lo) > worst) {
			worst = d / (hi - lo);
			*worst_row = r;
		}
	}
	return worst;
}

/* Loads path into exld and into the reference, checks that they read the
 * same hyperparameters and that exld's logits match the reference's on
 * tokens (N_TOKENS of them), or on pseudo-random ones from seed when NULL. */
static void check_model(const char *path, const int32_t *text, uint32_t seed)
{
	char err[512];
	struct exl_model *m = exl_model_load(path, be, err, sizeof(err));
	struct ref_model *ref16, *ref64;

	if (!m)
		fail_msg("load %s: %s", path, err);
	ref16 = ref_model_open(path, true, err, sizeof(err));
	if (!ref16)
		fail_msg("reference %s: %s", path, err);
	ref64 = ref_model_open(path, false, err, sizeof(err));
	if (!ref64)
		fail_msg("reference %s: %s", path, err);

	const struct exl_hparams *hp = exl_model_hparams(m);
	const struct ref_hparams *rp = ref_model_hparams(ref16);

	printf("%s: %s, embd %d, %d layers, heads %d/%d of %d, rope %d dims %s base %g scale %g"
	       "%s%s%s%s%s%s\n", path, rp->arch, rp->n_embd, rp->n_layer, rp->n_head, rp->n_head_kv,
	       rp->head_dim, rp->n_rot, rp->neox ? "neox" : "pairs", rp->freq_base, rp->freq_scale,
	       rp->tied ? ", tied" : "", rp->qkv_bias ? ", q/k/v biases" : "",
	       rp->qk_norm ? ", q/k norms" : "", rp->rope_factors ? ", " : "",
	       rp->rope_factors ? rp->rope_factors : "", rp->fused ? ", fused q/k/v, gate/up" : "");
	if (rp->gemma)
		printf("  gemma: window %d, local base %g scale %g, softcap %g / %g\n", rp->n_swa,
		       rp->freq_base_swa, rp->freq_scale_swa, rp->attn_softcap, rp->final_softcap);
	if (rp->n_expert)
		printf("  experts: %d, %d used, %d wide\n", rp->n_expert, rp->n_expert_used,
		       rp->n_ff_exp);
	assert_int_equal(hp->n_vocab, rp->n_vocab);
	assert_int_equal(hp->n_embd, rp->n_embd);
	assert_int_equal(hp->n_head, rp->n_head);
	assert_int_equal(hp->n_head_kv, rp->n_head_kv);
	assert_int_equal(hp->head_dim, rp->head_dim);
	assert_int_equal(hp->n_rot, rp->n_rot);
	assert_int_equal(hp->rope_neox, rp->neox);
	assert_int_equal(hp->tied_embeddings, rp->tied);
	assert_true(fabs(hp->rope_freq_base - rp->freq_base) <= 1e-6 * rp->freq_base);
	assert_true(fabs(hp->rope_freq_scale - rp->freq_scale) <= 1e-7);
	assert_true(fabs(hp->rms_eps - rp->eps) <= 1e-6 * rp->eps);
	assert_string_equal(hp->arch_name, rp->arch);
	assert_int_equal(hp->qk_norm, rp->qk_norm);
	assert_int_equal(hp->n_swa, rp->n_swa);
	for (int l = 0; l < rp->n_layer && rp->n_swa; l++)
		assert_int_equal(exl_layer_is_swa(hp, l), rp->swa[l]);
	assert_true(fabs(hp->attn_softcap - rp->attn_softcap) <= 1e-6);
	assert_true(fabs(hp->final_softcap - rp->final_softcap) <= 1e-6);
	assert_true(fabs(hp->attn_scale - rp->attn_scale) <= 1e-7 * rp->attn_scale);
	assert_true(fabs(hp->rope_attn_factor - rp->attn_factor) <= 1e-6);
	assert_int_equal(hp->rope_yarn, rp->yarn);
	assert_int_equal(hp->n_ctx_orig, rp->n_ctx_orig);
	assert_int_equal(hp->n_expert, rp->n_expert);
	assert_int_equal(hp->n_expert_used, rp->n_expert_used);

	int nv = rp->n_vocab;
	size_t kv_elems = (size_t)rp->n_layer * N_TOKENS * (size_t)rp->n_head_kv *
			  (size_t)rp->head_dim;
	int32_t tokens[N_TOKENS];
	float *got = malloc((size_t)N_TOKENS * (size_t)nv * sizeof(float));
	float *kv_k = malloc(kv_elems * sizeof(float)), *kv_v = malloc(kv_elems * sizeof(float));
	double *want16 = malloc((size_t)N_TOKENS * (size_t)nv * sizeof(double));
	double *want64 = malloc((size_t)N_TOKENS * (size_t)nv * sizeof(double));
	int row16 = 0, row64 = 0;

	assert_non_null(got);
	assert_non_null(kv_k);
	assert_non_null(kv_v);
	assert_non_null(want16);
	assert_non_null(want64);
	if (text)
		memcpy(tokens, text, sizeof(tokens));
	else
		make_tokens(tokens, N_TOKENS, nv, seed);
	exl_logits(m, tokens, got, kv_k, kv_v);
	ref_model_take_kv(ref16, kv_k, kv_v, N_TOKENS);
	if (ref_forward(ref16, tokens, N_TOKENS, want16, err, sizeof(err)) ||
	    ref_forward(ref64, tokens, N_TOKENS, want64, err, sizeof(err)))
		fail_msg("reference: %s", err);

	const struct ref_kv_report *kr = ref_model_kv_report(ref16);
	double e16 = max_rel_error(got, want16, N_TOKENS, nv, &row16);
	double e64 = max_rel_error(got, want64, N_TOKENS, nv, &row64);

	printf("K/V: %ld of %ld elements are the other neighbouring half of the reference's "
	       "(largest distance %.3g F16 steps, layer %d position %d)\n", kr->flips, kr->n,
	       kr->worst, kr->worst_layer, kr->worst_pos);
	printf("max |exld - reference| / logit range: %.3g on exld's K/V (position %d, bound %g), "
	       "%.3g all double (position %d, bound %g)\n", e16, row16, TOL_F16_KV, e64, row64,
	       TOL_DOUBLE);
	if (e16 > TOL_F16_KV || e64 > TOL_DOUBLE)
		fail_msg("logits differ from the reference beyond the bound");
	free(kv_k);
	free(kv_v);
	free(got);
	free(want16);
	free(want64);
	ref_model_free(ref16);
	ref_model_free(ref64);
	exl_model_free(m);
}

struct synth_case {
	const char *name;
	const char *args[32];
};

static const struct synth_case cases[] = {
	{ "llama_gqa", { "--dim", "128", "--layers", "2", "--heads", "8", "--kv-heads", "2",
			 "--ff", "256", NULL } },
	{ "qwen2_bias", { "--arch", "qwen2", "--dim", "128", "--layers", "2", "--heads", "4",
			  "--kv-heads", "2", "--ff", "256", NULL } },
	{ "llama_tied", { "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "4",
			  "--ff", "128", "--tied", NULL } },
	{ "qwen2_tied", { "--arch", "qwen2", "--dim", "64", "--layers", "2", "--heads", "2",
			  "--kv-heads", "1", "--ff", "128", "--tied", NULL } },
	/* 4 heads of 32 on a 96-wide stream: q is 128 wide */
	{ "llama_head_dim", { "--dim", "96", "--layers", "2", "--heads", "4", "--kv-heads", "2",
			      "--head-dim", "32", "--ff", "192", NULL } },
	{ "qwen2_head_dim", { "--arch", "qwen2", "--dim", "96", "--layers", "2", "--heads", "4",
			      "--kv-heads", "2", "--head-dim", "48", "--ff", "192", NULL } },
	/* 16 of 32 dimensions rotated: NEOX pairs i with i + 8, not i + 16 */
	{ "llama_rope_dim", { "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
			      "--rope-dim", "16", "--ff", "256", NULL } },
	{ "qwen2_rope_dim", { "--arch", "qwen2", "--dim", "128", "--layers", "2", "--heads", "4",
			      "--kv-heads", "2", "--rope-dim", "16", "--ff", "256", NULL } },
	{ "llama_rope_base", { "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
			       "--rope-base", "500000", "--ff", "256", NULL } },
	{ "llama_rope_scale", { "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
				"--rope-scale", "4", "--ff", "256", NULL } },
	{ "qwen2_rope_scale", { "--arch", "qwen2", "--dim", "128", "--layers", "2", "--heads", "4",
				"--kv-heads", "2", "--rope-scale", "4", "--ff", "256", NULL } },
	/* stories260K's shape: 5 layers, head size 8, ff 172 (SIMD tails) */
	{ "stories_shape", { "--dim", "64", "--layers", "5", "--heads", "8", "--kv-heads", "4",
			 "--ff", "172", NULL } },
	/* everything at once, llama 3 style */
	{ "llama_all", { "--dim", "96", "--layers", "3", "--heads", "6", "--kv-heads", "2",
			 "--head-dim", "24", "--rope-dim", "16", "--rope-base", "500000",
			 "--rope-scale", "4", "--eps", "1e-6", "--ff", "160", "--tied", NULL } },
	/* llama 3.1: rope_freqs divides the angles (factors 1 to 8 over the
	 * head, for an original context of 32, so they matter here) */
	{ "llama_rope_freqs", { "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads",
				"2", "--rope-freqs", "--rope-base", "500000", "--ff", "256", NULL } },
	/* qwen3: per-head q/k norms before the rope */
	{ "qwen3", { "--arch", "qwen3", "--dim", "128", "--layers", "2", "--heads", "4",
		     "--kv-heads", "2", "--ff", "256", NULL } },
	{ "qwen3_head_dim", { "--arch", "qwen3", "--dim", "96", "--layers", "2", "--heads", "4",
			      "--kv-heads", "2", "--head-dim", "40", "--ff", "192", "--tied",
			      NULL } },
	/* phi3: fused attn_qkv and gate/up; long rope factors and the
	 * attention factor (context 4096 past the original 512), short ones
	 * (within 8192), none */
	{ "phi3_long", { "--arch", "phi3", "--dim", "128", "--layers", "2", "--heads", "4",
			 "--kv-heads", "2", "--ff", "256", "--ctx", "4096", "--longrope", "512",
			 NULL } },
	{ "phi3_short", { "--arch", "phi3", "--dim", "128", "--layers", "2", "--heads", "4",
			  "--kv-heads", "2", "--ff", "256", "--ctx", "4096", "--longrope", "8192",
			  NULL } },
	{ "phi3", { "--arch", "phi3", "--dim", "96", "--layers", "2", "--heads", "4", "--kv-heads",
		    "4", "--ff", "160", NULL } },
	/* gemma2: sqrt(dim) embeddings, post norms, GELU, scores capped at
	 * 50 and logits at 30, layer 0 local with a window of 8 (of 24
	 * positions) */
	{ "gemma2", { "--arch", "gemma2", "--dim", "128", "--layers", "2", "--heads", "4",
		      "--kv-heads", "2", "--head-dim", "48", "--ff", "256", "--swa", "8", NULL } },
	/* gemma3: q/k norms, local layers at base 10000 and global ones at
	 * 1e6 scaled by 8 (the 4B's rope), 1 local : 1 global here, and the
	 * default 5 : 1 over 6 layers */
	{ "gemma3", { "--arch", "gemma3", "--dim", "128", "--layers", "2", "--heads", "4",
		      "--kv-heads", "2", "--ff", "256", "--swa", "8", "--swa-pattern", "2",
		      "--rope-scale", "8", NULL } },
	{ "gemma3_6", { "--arch", "gemma3", "--dim", "64", "--layers", "6", "--heads", "4",
			"--kv-heads", "1", "--head-dim", "32", "--ff", "128", "--swa", "5",
			"--tied", NULL } },
	/* every layer local: the cache gives the first page back once the
	 * window (8) and a page have passed it */
	{ "gemma3_local", { "--arch", "gemma3", "--dim", "128", "--layers", "2", "--heads", "4",
			    "--kv-heads", "2", "--ff", "256", "--swa", "8", "--swa-pattern", "11",
			    NULL } },
	/* YaRN by 4 (DeepSeek-R1-0528-Qwen3's rope): pairs 0-1 unscaled, 2-6
	 * blended, the rest interpolated, cosines and sines times 1.139 */
	{ "qwen3_yarn", { "--arch", "qwen3", "--dim", "128", "--layers", "2", "--heads", "4",
			  "--kv-heads", "2", "--ff", "256", "--rope-scaling", "yarn",
			  "--rope-scale", "4", NULL } },
	/* over an original context of 512 the file gives: pairs 1-8 blended */
	{ "llama_yarn", { "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
			  "--ff", "256", "--rope-scaling", "yarn", "--rope-scale", "8", "--kv",
			  "llama.rope.scaling.original_context_length=u32:512", NULL } },
	/* gemma3's unscaled local layers keep their rope under YaRN */
	{ "gemma3_yarn", { "--arch", "gemma3", "--dim", "128", "--layers", "2", "--heads", "4",
			   "--kv-heads", "2", "--ff", "256", "--swa", "8", "--swa-pattern", "2",
			   "--rope-scaling", "yarn", "--rope-scale", "8", NULL } },
	/* mistral3 (Ministral 3): YaRN by 16 with beta_fast 4 (pairs 0-6
	 * unscaled, 7-10 blended) and mscale_all_dim 1 (no magnitude scale
	 * left) */
	{ "mistral3_yarn", { "--arch", "mistral3", "--dim", "128", "--layers", "2", "--heads",
			     "4", "--kv-heads", "2", "--ff", "256", "--rope-base", "10000",
			     "--rope-scaling", "yarn", "--rope-scale", "16", "--kv",
			     "mistral3.rope.scaling.yarn_log_multiplier=f32:1", "--kv",
			     "mistral3.rope.scaling.yarn_beta_fast=f32:4", NULL } },
	/* and Llama 4's temperature over an original context of 8: queries
	 * times 1 + 0.1 ln 2 from position 8, 1 + 0.1 ln 3 from 16 */
	{ "mistral3_temp", { "--arch", "mistral3", "--dim", "128", "--layers", "2", "--heads",
			     "4", "--kv-heads", "2", "--ff", "256", "--kv",
			     "mistral3.rope.scaling.original_context_length=u32:8", "--kv",
			     "mistral3.attention.temperature_scale=f32:0.1", NULL } },
	/* granite: llama with Granite 3.3 2B's four multipliers */
	{ "granite", { "--arch", "granite", "--dim", "128", "--layers", "2", "--heads", "4",
		       "--kv-heads", "2", "--ff", "256", NULL } },
	/* smollm3: layers 3 and 7 of 8 without rope */
	{ "smollm3", { "--arch", "smollm3", "--dim", "128", "--layers", "8", "--heads", "4",
		       "--kv-heads", "2", "--ff", "256", NULL } },
	/* glm4: post norms, gate and up in one tensor, q/k/v biases, the rope
	 * on adjacent pairs of half the head */
	{ "glm4", { "--arch", "glm4", "--dim", "128", "--layers", "2", "--heads", "4",
		    "--kv-heads", "2", "--ff", "256", NULL } },
	/* Gemma 1: the embedding scale and GELU on llama's block, tied */
	{ "gemma", { "--arch", "gemma", "--dim", "128", "--layers", "2", "--heads", "4",
		     "--kv-heads", "2", "--ff", "256", NULL } },
	/* olmo2: norms after attention and FFN only, q/k normed whole; and
	 * OLMo 3's window of 8 on 3 layers in 4 */
	{ "olmo2", { "--arch", "olmo2", "--dim", "128", "--layers", "2", "--heads", "4",
		     "--kv-heads", "2", "--ff", "256", NULL } },
	{ "olmo3", { "--arch", "olmo2", "--dim", "128", "--layers", "4", "--heads", "4",
		     "--kv-heads", "2", "--ff", "256", "--swa", "8", NULL } },
	/* granitemoe: granite's multipliers on Mixtral's experts (the
	 * residual scale on their weighted sum) */
	{ "granitemoe", { "--arch", "granitemoe", "--dim", "128", "--layers", "2", "--heads", "4",
			  "--kv-heads", "2", "--ff", "128", "--experts", "4", "--experts-used", "2",
			  NULL } },
	/* Mixtral: llama with 4 experts, 2 per token */
	{ "mixtral", { "--dim", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
		       "--ff", "128", "--experts", "4", "--experts-used", "2", NULL } },
	/* qwen3moe: q/k norms and 8 narrow experts, 3 per token */
	{ "qwen3moe", { "--arch", "qwen3moe", "--dim", "128", "--layers", "2", "--heads", "4",
			"--kv-heads", "2", "--ff", "256", "--experts", "8", "--experts-used", "3",
			"--expert-ff", "64", NULL } },
};

static void test_synth(void **state)
{
	const struct synth_case *c = *state;
	char path[256], name[96];

	snprintf(name, sizeof(name), "%s.gguf", c->name);
	make_model(name, path, sizeof(path), c->args);
	check_model(path, NULL, (uint32_t)(c - cases) + 1);
	unlink(path);
}

/* A trained model is fed text it could have written: BOS and the start of
 * its own greedy story.  On random ids its attention is ill-conditioned (a
 * score that moves by float32 rounding moves logits by 2.5e-4 of their
 * range), which tells nothing about the forward pass. */
static void test_stories(void **state)
{
	const char *dir = *state;
	char path[4096];
	int32_t tokens[N_TOKENS] = { 1 };
	FILE *f;

	test_model_path(path, sizeof(path), dir, "stories260K.expected.ids");
	f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	for (int i = 1; i < N_TOKENS; i++)
		if (fscanf(f, "%d", &tokens[i]) != 1)
			fail_msg("%s: fewer than %d ids", path, N_TOKENS - 1);
	fclose(f);
	test_model_path(path, sizeof(path), dir, "stories260K.gguf");
	check_model(path, tokens, 0);
}

static int group_setup(void **state)
{
	(void)state;
	return test_tmp_backend_setup("model-ref", tmpdir, sizeof(tmpdir), &be);
}

static int group_teardown(void **state)
{
	(void)state;
	test_tmp_backend_teardown(tmpdir, be);
	return 0;
}

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

int main(int argc, char **argv)
{
	struct CMUnitTest tests[N_CASES];

	if (argc != 2) {
		fprintf(stderr, "usage: %s PATH/TO/exld-mkmodel | stories\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "stories")) {
		const char *dir = test_models_dir();
		struct CMUnitTest one[] = {
			cmocka_unit_test_prestate(test_stories, (void *)dir),
		};

		if (!dir)
			return SKIP_STATUS;
		return cmocka_run_group_tests_name("model_ref_stories", one, group_setup,
						   group_teardown);
	}
	mkmodel = argv[1];
	for (size_t i = 0; i < N_CASES; i++)
		tests[i] = (struct CMUnitTest){ cases[i].name, test_synth, NULL, NULL,
						(void *)&cases[i] };
	return cmocka_run_group_tests_name("model_ref", tests, group_setup, group_teardown);
}
