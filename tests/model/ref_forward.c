/* The reference forward pass (see ref_forward.h).
 *
 * x = token_embd[token] (gemma: times sqrt(n_embd)), then per token at
 * position p, per layer (llama.cpp's graphs for llama, qwen2, qwen3,
 * qwen3moe, phi3, gemma2, gemma3):
 *   h   = rmsnorm(x) * attn_norm
 *   q,k,v = Wq h (+ bq), Wk h (+ bk), Wv h (+ bv); phi3's attn_qkv holds
 *       Wq, Wk, Wv one after the other
 *   qwen3, gemma3: each head of q and k rmsnorm'd by attn_q_norm / attn_k_norm
 *   rope(q), rope(k): the first n_rot dimensions of each head rotate by
 *       angle p * freq_scale * base^(-2i / n_rot) / factor[i] for pair i
 *       (factor: llama 3.1's rope_freqs, phi3's long or short factors, else
 *       1), cosine and sine times rope.scaling.attn_factor; with YaRN
 *       (as transformers' yarn rope) the angle of pair i blends the unscaled
 *       one (weight 1 - ramp(i)) and the scaled one (ramp(i)), ramp going
 *       0 -> 1 between the pairs that turn 32 and 1 times over the original
 *       context, and cosine and sine times 1 + 0.1 ln(1 / scale) (over
 *       1 + 0.1 m ln(1 / scale) with mistral3's mscale_all_dim m); mistral3:
 *       q times 1 + t ln(floor(p / original context) + 1); llama pairs
 *       (2i, 2i+1), the others (neox) (i, i + n_rot/2); gemma's local layers
 *       with their own base and scale
 *   att = softmax(s) v with s = q k^T * scale (1/sqrt(head_dim), gemma's
 *       27B 1/sqrt(n_embd/n_head)), gemma2: s = c tanh(s / c), over
 *       positions 0..p, or p - window + 1 .. p in a local layer; query head
 *       j reads key/value head j / (n_head / n_head_kv)
 *   o   = Wo att, gemma: rmsnorm(o) * post_attention_norm;  x += o
 *   h   = rmsnorm(x) * ffn_norm
 *   f   = Wdown (act(Wgate h) * Wup h), act silu (gemma: gelu, tanh form;
 *       phi3's ffn_up holds Wgate then Wup); or with experts: the router's
 *       softmax over Wr h, the n_expert_used most probable experts, their
 *       probabilities renormalized to sum 1 (times expert_weights_scale)
 *       weighing each one's f;  gemma: rmsnorm(f) * post_ffw_norm;  x += f
 * then logits = Wout (rmsnorm(x) * output_norm), Wout = token_embd when
 * there is no output.weight, gemma2: c tanh(logits / c).  granite: x
 * times embedding_scale first, o and f times residual_scale before they
 * are added, the attention's scale attention.scale, logits divided by
 * logit_scale.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "ref_forward.h"

#define GGML_TYPE_F32 0

struct ref_layer {
	double *attn_norm, *wq, *wk, *wv, *bq, *bk, *bv, *wo;
	double *q_norm, *k_norm, *post_attn_norm, *post_ffn_norm;
	double *ffn_norm, *w_gate, *w_up, *w_down;
	double *router;                    /* [n_expert][n_embd] */
	double *e_gate, *e_up, *e_down;    /* [n_expert][rows][cols] */
	double *k_cache, *v_cache; /* [n_ctx][n_head_kv * head_dim] */
};

struct ref_model {
	struct ref_hparams hp;
	double *rope_factors; /* [n_rot / 2] or NULL */
	bool kv_f16;
	const float *taken_k, *taken_v; /* ref_model_take_kv */
	int taken_n_pos;
	struct ref_kv_report report;
	int n_ctx; /* positions the caches hold */
	double *tok_embd, *output_norm, *output;
	struct ref_layer *layers;
};

/* Reads metadata key "<arch>.<suffix>" as an unsigned integer. */
static int meta_int(const struct gguf_file *f, const char *arch, const char *suffix, int def,
		    bool required, int *out, char *err, size_t errlen)
{
	char key[160];
	uint32_t v;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	if (!exl_gguf_find_kv(f, key)) {
		if (required) {
			snprintf(err, errlen, "reference: no metadata key %s", key);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!exl_gguf_get_u32(f, key, &v) || v > (1u << 24)) {
		snprintf(err, errlen, "reference: bad metadata key %s", key);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int meta_float(const struct gguf_file *f, const char *arch, const char *suffix,
		      double def, double *out, char *err, size_t errlen)
{
	char key[160];
	float v;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	if (!exl_gguf_find_kv(f, key)) {
		*out = def;
		return 0;
	}
	if (!exl_gguf_get_f32(f, key, &v)) {
		snprintf(err, errlen, "reference: bad metadata key %s", key);
		return -1;
	}
	*out = v;
	return 0;
}

/* The F32 tensor name of exactly n_mat x rows x cols (GGUF ne = [cols,
 * rows, n_mat]) as doubles; *out = NULL when absent and optional. */
static int load_tensor3(const struct gguf_file *f, const char *name, int n_mat, int rows,
			int cols, bool optional, double **out, char *err, size_t errlen)
{
	const struct gguf_tensor *t = exl_gguf_find_tensor(f, name);
	size_t n = (size_t)n_mat * (size_t)rows * (size_t)cols;

	*out = NULL;
	if (!t) {
		if (optional)
			return 0;
		snprintf(err, errlen, "reference: no tensor %s", name);
		return -1;
	}
	if (t->type != GGML_TYPE_F32) {
		snprintf(err, errlen, "reference: tensor %s is not F32", name);
		return -1;
	}
	if (t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows ||
	    t->ne[2] != (uint64_t)n_mat || t->ne[3] != 1 || t->nbytes != n * sizeof(float)) {
		snprintf(err, errlen, "reference: tensor %s is not [%d, %d, %d]", name, cols, rows,
			 n_mat);
		return -1;
	}
	*out = malloc(n * sizeof(double));
	if (!*out) {
		snprintf(err, errlen, "reference: out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		float x;

		memcpy(&x, (const char *)t->data + i * sizeof(float), sizeof(float));
		(*out)[i] = x;
	}
	return 0;
}

static int load_tensor(const struct gguf_file *f, const char *name, int rows, int cols,
		       bool optional, double **out, char *err, size_t errlen)
{
	return load_tensor3(f, name, 1, rows, cols, optional, out, err, errlen);
}

/* Rows [first, first + n) of the rows x cols matrix w, copied. */
static double *rows_copy(const double *w, int first, int n, int cols)
{
	double *r = malloc((size_t)n * (size_t)cols * sizeof(double));

	if (r)
		memcpy(r, w + (size_t)first * (size_t)cols, (size_t)n * (size_t)cols * sizeof(double));
	return r;
}

static int read_hparams(const struct gguf_file *f, struct ref_hparams *hp, char *err,
			size_t errlen)
{
	char arch[32], key[160], type[32];
	const struct gguf_array *toks = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	double factor = 0;

	static const char *const known[] = { "llama", "qwen2", "qwen3", "qwen3moe", "phi3",
					     "gemma2", "gemma3", "mistral3", "granite", "smollm3",
					     "glm4", "gemma", "olmo2", "granitemoe" };
	bool ok = false;

	if (exl_gguf_get_str(f, "general.architecture", arch, sizeof(arch)))
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			ok = ok || !strcmp(arch, known[i]);
	if (!ok) {
		snprintf(err, errlen, "reference: architecture is none of llama qwen2 qwen3 "
			 "qwen3moe phi3 gemma2 gemma3 mistral3 granite smollm3 glm4 gemma olmo2 "
			 "granitemoe");
		return -1;
	}
	snprintf(hp->arch, sizeof(hp->arch), "%s", arch);
	bool llama = !strcmp(arch, "llama") || !strcmp(arch, "mistral3") ||
		     !strncmp(arch, "granite", 7) || !strcmp(arch, "smollm3");

	hp->nope = !strcmp(arch, "smollm3");

	hp->neox = !llama;
	hp->qk_norm = !strcmp(arch, "qwen3") || !strcmp(arch, "qwen3moe") || !strcmp(arch, "gemma3");
	hp->gemma = !strncmp(arch, "gemma", 5);
	hp->fused = !strcmp(arch, "phi3");
	/* glm4: phi3's gate and up in one tensor, gemma's post norms */
	hp->glm4 = !strcmp(arch, "glm4");
	/* olmo2: norms after attention and FFN, none before; q and k normed
	 * whole */
	hp->olmo2 = !strcmp(arch, "olmo2");
	hp->qk_norm = hp->qk_norm || hp->olmo2;
	snprintf(key, sizeof(key), "%s.rope.dimension_sections", arch);
	if (hp->glm4 && !exl_gguf_find_kv(f, key))
		hp->neox = false; /* GLM-4's pairs are adjacent; GLM-4.1V's M-RoPE halves */
	if (!toks) {
		snprintf(err, errlen, "reference: no tokenizer.ggml.tokens");
		return -1;
	}
	hp->n_vocab = (int)toks->count;
	if (meta_int(f, arch, "embedding_length", 0, true, &hp->n_embd, err, errlen) ||
	    meta_int(f, arch, "block_count", 0, true, &hp->n_layer, err, errlen) ||
	    meta_int(f, arch, "attention.head_count", 0, true, &hp->n_head, err, errlen) ||
	    meta_int(f, arch, "attention.head_count_kv", hp->n_head, false, &hp->n_head_kv, err,
		     errlen) ||
	    meta_int(f, arch, "feed_forward_length", 0, true, &hp->n_ff, err, errlen) ||
	    meta_int(f, arch, "context_length", 0, true, &hp->n_ctx_train, err, errlen) ||
	    meta_int(f, arch, "expert_count", 0, false, &hp->n_expert, err, errlen))
		return -1;
	if (hp->n_layer > 1024) {
		snprintf(err, errlen, "reference: %d layers", hp->n_layer);
		return -1;
	}
	if (hp->n_expert) {
		double ws;

		if (meta_int(f, arch, "expert_used_count", 0, true, &hp->n_expert_used, err,
			     errlen) ||
		    meta_int(f, arch, "expert_feed_forward_length",
			     llama ? hp->n_ff : hp->n_ff / hp->n_expert_used, false,
			     &hp->n_ff_exp, err, errlen) ||
		    meta_float(f, arch, "expert_weights_scale", 0.0, &ws, err, errlen))
			return -1;
		hp->expert_weights_scale = ws == 0.0 ? 1.0 : ws;
	}
	if (!hp->n_head || !hp->n_head_kv || hp->n_head % hp->n_head_kv) {
		snprintf(err, errlen, "reference: bad head counts");
		return -1;
	}
	if (meta_int(f, arch, "attention.key_length", hp->n_embd / hp->n_head, false,
		     &hp->head_dim, err, errlen) ||
	    meta_int(f, arch, "rope.dimension_count", hp->head_dim, false, &hp->n_rot, err,
		     errlen) ||
	    meta_float(f, arch, "attention.layer_norm_rms_epsilon", 1e-5, &hp->eps, err, errlen) ||
	    meta_float(f, arch, "rope.freq_base", 10000.0, &hp->freq_base, err, errlen))
		return -1;
	if (hp->n_rot > hp->head_dim || hp->n_rot % 2) {
		snprintf(err, errlen, "reference: bad rope dimension count %d", hp->n_rot);
		return -1;
	}
	/* The type defaults to linear; its factor is rope.scaling.factor or
	 * the older rope.scale_linear; "none" never scales. */
	snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
	snprintf(type, sizeof(type), "linear");
	if (exl_gguf_find_kv(f, key) && !exl_gguf_get_str(f, key, type, sizeof(type))) {
		snprintf(err, errlen, "reference: bad %s", key);
		return -1;
	}
	hp->yarn = !strcmp(type, "yarn");
	if (strcmp(type, "linear") && strcmp(type, "none") && !hp->yarn) {
		snprintf(err, errlen, "reference: rope scaling type is not linear, yarn or none");
		return -1;
	}
	snprintf(key, sizeof(key), "%s.rope.scaling.factor", arch);
	if (meta_float(f, arch,
		       exl_gguf_find_kv(f, key) ? "rope.scaling.factor" : "rope.scale_linear", 0,
		       &factor, err, errlen))
		return -1;
	hp->freq_scale = factor > 0 && strcmp(type, "none") ? 1.0 / factor : 1.0;
	if (meta_float(f, arch, "rope.scaling.attn_factor", 1.0, &hp->attn_factor, err, errlen))
		return -1;

	/* phi3's factors: the long ones when the context may pass the
	 * original one (the model runs up to its whole context here) */
	int orig;

	if (meta_int(f, arch, "rope.scaling.original_context_length", hp->n_ctx_train, false,
		     &orig, err, errlen))
		return -1;
	hp->n_ctx_orig = orig;
	/* mistral3's YaRN betas, mscale_all_dim and Llama 4 temperature */
	bool m3 = !strcmp(arch, "mistral3");

	hp->beta_fast = 32.0;
	hp->beta_slow = 1.0;
	if (m3 && (meta_float(f, arch, "rope.scaling.yarn_beta_fast", 32.0, &hp->beta_fast, err,
			      errlen) ||
		   meta_float(f, arch, "rope.scaling.yarn_beta_slow", 1.0, &hp->beta_slow, err,
			      errlen) ||
		   meta_float(f, arch, "rope.scaling.yarn_log_multiplier", 0.0, &hp->yarn_log_mul,
			      err, errlen) ||
		   meta_float(f, arch, "attention.temperature_scale", 0.0, &hp->temp_scale, err,
			      errlen)))
		return -1;
	if (exl_gguf_find_tensor(f, "rope_freqs.weight"))
		hp->rope_factors = "rope_freqs.weight";
	else if (hp->n_ctx_train > orig && exl_gguf_find_tensor(f, "rope_factors_long.weight"))
		hp->rope_factors = "rope_factors_long.weight";
	else if (hp->n_ctx_train <= orig && exl_gguf_find_tensor(f, "rope_factors_short.weight"))
		hp->rope_factors = "rope_factors_short.weight";

	hp->attn_scale = 1.0 / sqrt((double)hp->head_dim);
	/* granite's multipliers (0: none) */
	if (!strncmp(arch, "granite", 7)) {
		double as;

		if (meta_float(f, arch, "logit_scale", 0.0, &hp->logit_scale, err, errlen) ||
		    meta_float(f, arch, "residual_scale", 0.0, &hp->resid_mul, err, errlen) ||
		    meta_float(f, arch, "embedding_scale", 0.0, &hp->embd_mul, err, errlen) ||
		    meta_float(f, arch, "attention.scale", 0.0, &as, err, errlen))
			return -1;
		if (as != 0.0)
			hp->attn_scale = as;
	}
	hp->freq_base_swa = hp->freq_base;
	hp->freq_scale_swa = hp->freq_scale;
	if (hp->olmo2) {
		/* OLMo 3: 3 layers in 4 local, at the base unscaled */
		int pattern = 4;

		if (meta_int(f, arch, "attention.sliding_window", 0, false, &hp->n_swa, err,
			     errlen) ||
		    meta_float(f, arch, "rope.freq_base_swa", hp->freq_base, &hp->freq_base_swa,
			       err, errlen) ||
		    meta_int(f, arch, "attention.sliding_window_pattern", 4, false, &pattern, err,
			     errlen))
			return -1;
		hp->freq_scale_swa = 1.0;
		for (int l = 0; l < hp->n_layer; l++)
			hp->swa[l] = pattern == 0 || l % pattern < pattern - 1;
		return 0;
	}
	if (!hp->gemma)
		return 0;
	/* gemma2: every other layer local (the last of each 2 global), window
	 * 4096 unless given, scores soft-capped at 50, logits at 30; gemma3: a
	 * window only when given, the last of each 6 layers global, local
	 * layers at base 10000 unscaled, logits capped only when given */
	bool g2 = !strcmp(arch, "gemma2");
	int pattern = g2 ? 2 : 6;
	const struct gguf_array *pat;

	if (meta_int(f, arch, "attention.sliding_window", g2 ? 4096 : 0, false, &hp->n_swa, err,
		     errlen) ||
	    meta_float(f, arch, "final_logit_softcapping", g2 ? 30.0 : 0.0, &hp->final_softcap,
		       err, errlen) ||
	    (g2 && meta_float(f, arch, "attn_logit_softcapping", 50.0, &hp->attn_softcap, err,
			      errlen)) ||
	    meta_float(f, arch, "rope.freq_base_swa", g2 ? hp->freq_base : 10000.0,
		       &hp->freq_base_swa, err, errlen))
		return -1;
	if (!g2)
		hp->freq_scale_swa = 1.0;
	snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", arch);
	pat = exl_gguf_get_arr(f, key);
	if (pat) {
		if (pat->elem_type != GGUF_VT_BOOL || pat->count != (uint64_t)hp->n_layer) {
			snprintf(err, errlen, "reference: %s is not one bool a layer", key);
			return -1;
		}
		for (int l = 0; l < hp->n_layer; l++)
			hp->swa[l] = ((const uint8_t *)pat->data)[l] != 0;
	} else {
		if (meta_int(f, arch, "attention.sliding_window_pattern", pattern, false, &pattern,
			     err, errlen))
			return -1;
		for (int l = 0; l < hp->n_layer; l++)
			hp->swa[l] = pattern == 0 || l % pattern < pattern - 1;
	}
	/* the 27B models (46 and 62 layers) scale by the width per head */
	if (hp->n_layer == (g2 ? 46 : 62))
		hp->attn_scale = 1.0 / sqrt((double)(hp->n_embd / hp->n_head));
	return 0;
}

void ref_model_free(struct ref_model *m)
{
	if (!m)
		return;
	for (int l = 0; m->layers && l < m->hp.n_layer; l++) {
		struct ref_layer *ly = &m->layers[l];

		free(ly->attn_norm);
		free(ly->wq);
		free(ly->wk);
		free(ly->wv);
		free(ly->bq);
		free(ly->bk);
		free(ly->bv);
		free(ly->wo);
		free(ly->ffn_norm);
		free(ly->w_gate);
		free(ly->w_up);
		free(ly->w_down);
		free(ly->q_norm);
		free(ly->k_norm);
		free(ly->post_attn_norm);
		free(ly->post_ffn_norm);
		free(ly->router);
		free(ly->e_gate);
		free(ly->e_up);
		free(ly->e_down);
		free(ly->k_cache);
		free(ly->v_cache);
	}
	free(m->layers);
	free(m->rope_factors);
	free(m->tok_embd);
	free(m->output_norm);
	if (m->output != m->tok_embd)
		free(m->output);
	free(m);
}

struct ref_model *ref_model_open(const char *path, bool kv_f16, char *err, size_t errlen)
{
	struct gguf_file *f = exl_gguf_open(path, err, errlen);
	struct ref_model *m = NULL;
	struct ref_hparams *hp;
	int q_dim, kv_dim;
	char name[96];

	if (!f)
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "reference: out of memory");
		goto fail;
	}
	m->kv_f16 = kv_f16;
	hp = &m->hp;
	if (read_hparams(f, hp, err, errlen))
		goto fail;
	q_dim = hp->n_head * hp->head_dim;
	kv_dim = hp->n_head_kv * hp->head_dim;
	m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
	if (!m->layers) {
		snprintf(err, errlen, "reference: out of memory");
		goto fail;
	}
	if (load_tensor(f, "token_embd.weight", hp->n_vocab, hp->n_embd, false, &m->tok_embd, err,
			errlen) ||
	    load_tensor(f, "output_norm.weight", 1, hp->n_embd, false, &m->output_norm, err,
			errlen) ||
	    load_tensor(f, "output.weight", hp->n_vocab, hp->n_embd, true, &m->output, err, errlen))
		goto fail;
	hp->tied = !m->output;
	if (hp->tied)
		m->output = m->tok_embd;
	if (hp->rope_factors &&
	    load_tensor(f, hp->rope_factors, 1, hp->n_rot / 2, false, &m->rope_factors, err, errlen))
		goto fail;
	for (int l = 0; l < hp->n_layer; l++) {
		struct ref_layer *ly = &m->layers[l];
		int ff = hp->n_expert ? hp->n_ff_exp : hp->n_ff;
#define T(suffix, rows, cols, opt, dst)                                                   \
	(snprintf(name, sizeof(name), "blk.%d.%s", l, suffix),                            \
	 load_tensor(f, name, rows, cols, opt, dst, err, errlen))
#define T3(suffix, n, rows, cols, dst)                                                    \
	(snprintf(name, sizeof(name), "blk.%d.%s", l, suffix),                            \
	 load_tensor3(f, name, n, rows, cols, false, dst, err, errlen))
		int qn = hp->olmo2 ? q_dim : hp->head_dim, kn = hp->olmo2 ? kv_dim : hp->head_dim;

		if (T("attn_norm.weight", 1, hp->n_embd, hp->olmo2, &ly->attn_norm) ||
		    T("attn_q.bias", 1, q_dim, true, &ly->bq) ||
		    T("attn_k.bias", 1, kv_dim, true, &ly->bk) ||
		    T("attn_v.bias", 1, kv_dim, true, &ly->bv) ||
		    T("attn_output.weight", hp->n_embd, q_dim, false, &ly->wo) ||
		    T("ffn_norm.weight", 1, hp->n_embd, hp->olmo2, &ly->ffn_norm) ||
		    ((hp->qk_norm || hp->olmo2) &&
		     (T("attn_q_norm.weight", 1, qn, false, &ly->q_norm) ||
		      T("attn_k_norm.weight", 1, kn, false, &ly->k_norm))) ||
		    (((hp->gemma && strcmp(hp->arch, "gemma")) || hp->glm4 || hp->olmo2) &&
		     (T("post_attention_norm.weight", 1, hp->n_embd, false, &ly->post_attn_norm) ||
		      T("post_ffw_norm.weight", 1, hp->n_embd, false, &ly->post_ffn_norm))))
			goto fail;
		if (hp->fused) {
			double *qkv = NULL, *gu = NULL;

			if (T("attn_qkv.weight", q_dim + 2 * kv_dim, hp->n_embd, false, &qkv) ||
			    T("ffn_up.weight", 2 * ff, hp->n_embd, false, &gu)) {
				free(qkv);
				goto fail;
			}
			ly->wq = rows_copy(qkv, 0, q_dim, hp->n_embd);
			ly->wk = rows_copy(qkv, q_dim, kv_dim, hp->n_embd);
			ly->wv = rows_copy(qkv, q_dim + kv_dim, kv_dim, hp->n_embd);
			ly->w_gate = rows_copy(gu, 0, ff, hp->n_embd);
			ly->w_up = rows_copy(gu, ff, ff, hp->n_embd);
			free(qkv);
			free(gu);
			if (!ly->wq || !ly->wk || !ly->wv || !ly->w_gate || !ly->w_up) {
				snprintf(err, errlen, "reference: out of memory");
				goto fail;
			}
		} else if (T("attn_q.weight", q_dim, hp->n_embd, false, &ly->wq) ||
			   T("attn_k.weight", kv_dim, hp->n_embd, false, &ly->wk) ||
			   T("attn_v.weight", kv_dim, hp->n_embd, false, &ly->wv)) {
			goto fail;
		}
		if (hp->glm4) {
			double *gu = NULL;

			if (T("ffn_up.weight", 2 * ff, hp->n_embd, false, &gu))
				goto fail;
			ly->w_gate = rows_copy(gu, 0, ff, hp->n_embd);
			ly->w_up = rows_copy(gu, ff, ff, hp->n_embd);
			free(gu);
			if (!ly->w_gate || !ly->w_up) {
				snprintf(err, errlen, "reference: out of memory");
				goto fail;
			}
		}
		if (hp->n_expert) {
			if (T("ffn_gate_inp.weight", hp->n_expert, hp->n_embd, false, &ly->router) ||
			    T3("ffn_gate_exps.weight", hp->n_expert, ff, hp->n_embd, &ly->e_gate) ||
			    T3("ffn_up_exps.weight", hp->n_expert, ff, hp->n_embd, &ly->e_up) ||
			    T3("ffn_down_exps.weight", hp->n_expert, hp->n_embd, ff, &ly->e_down))
				goto fail;
		} else if ((!hp->fused && !hp->glm4 &&
			    (T("ffn_gate.weight", ff, hp->n_embd, false, &ly->w_gate) ||
			     T("ffn_up.weight", ff, hp->n_embd, false, &ly->w_up))) ||
			   T("ffn_down.weight", hp->n_embd, ff, false, &ly->w_down)) {
			goto fail;
		}
#undef T
#undef T3
		if (l == 0)
			hp->qkv_bias = ly->bq != NULL;
	}
	exl_gguf_close(f);
	return m;
fail:
	ref_model_free(m);
	exl_gguf_close(f);
	return NULL;
}

const struct ref_hparams *ref_model_hparams(const struct ref_model *m)
{
	return &m->hp;
}

void ref_model_take_kv(struct ref_model *m, const float *k, const float *v, int n_pos)
{
	m->taken_k = k;
	m->taken_v = k ? v : NULL;
	m->taken_n_pos = k ? n_pos : 0;
}

const struct ref_kv_report *ref_model_kv_report(const struct ref_model *m)
{
	return &m->report;
}

/* The distance between IEEE halves around x: 11 significant bits for
 * normals, a fixed 2^-24 below 2^-14. */
static double f16_step(double x)
{
	int e;

	if (x == 0)
		return ldexp(1.0, -24);
	frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
	return ldexp(1.0, e - 11 < -24 ? -24 : e - 11);
}

/* x rounded to the nearest IEEE half (ties to even), as a double. */
static double round_f16(double x)
{
	if (x == 0 || !isfinite(x))
		return x;
	double step = f16_step(x);
	double r = nearbyint(x / step) * step;

	return fabs(r) > 65504.0 ? copysign(INFINITY, x) : r;
}

static void rmsnorm(double *out, const double *x, const double *w, int n, double eps)
{
	double ss = 0;

	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	double s = 1.0 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		out[i] = x[i] * s * w[i];
}

/* out[r] = sum_c w[r][c] x[c] (+ b[r]) */
static void matvec(double *out, const double *w, const double *b, const double *x, int rows,
		   int cols)
{
	for (int r = 0; r < rows; r++) {
		const double *row = w + (size_t)r * (size_t)cols;
		double s = b ? b[r] : 0.0;

		for (int c = 0; c < cols; c++)
			s += row[c] * x[c];
		out[r] = s;
	}
}

/* transformers' yarn get_mscale */
static double yarn_mscale(double factor, double m)
{
	return factor <= 1.0 ? 1.0 : 0.1 * m * log(factor) + 1.0;
}

/* The pair at which a rotation turns `turns` times over n_ctx_orig. */
static double yarn_dim(int n_rot, int n_ctx_orig, double base, double turns)
{
	return n_rot * log(n_ctx_orig / (turns * 2.0 * M_PI)) / (2.0 * log(base));
}

/* YaRN's weight of the scaled angle for pair i: 0 for the pairs that turn
 * more than beta_fast (32) times over the original context, 1 for those
 * that turn less than beta_slow (1) times, linear between (whole pairs:
 * floor and ceil). */
static double yarn_ramp(const struct ref_hparams *hp, double base, int i)
{
	double lo = fmax(0.0, floor(yarn_dim(hp->n_rot, hp->n_ctx_orig, base, hp->beta_fast)));
	double hi = fmin(hp->n_rot - 1,
			 ceil(yarn_dim(hp->n_rot, hp->n_ctx_orig, base, hp->beta_slow)));

	if (hi == lo)
		hi += 0.001;
	return fmin(1.0, fmax(0.0, (i - lo) / (hi - lo)));
}

/* Rotates the first n_rot dimensions of each of n_heads heads of v (base
 * and scale: the layer's). */
static void rope(const struct ref_model *m, double *v, int n_heads, int pos, double base,
		 double scale)
{
	const struct ref_hparams *hp = &m->hp;
	int half = hp->n_rot / 2;

	for (int h = 0; h < n_heads; h++) {
		double *x = v + (size_t)h * (size_t)hp->head_dim;

		for (int i = 0; i < half; i++) {
			double inv = pow(base, -2.0 * i / (double)hp->n_rot), mscale = hp->attn_factor;

			if (m->rope_factors)
				inv /= m->rope_factors[i];
			if (hp->yarn) {
				double r = yarn_ramp(hp, base, i);

				inv = inv * scale * r + inv * (1.0 - r);
				if (scale < 1.0)
					mscale *= yarn_mscale(1.0 / scale, 1.0) /
						  (hp->yarn_log_mul ?
						   yarn_mscale(1.0 / scale, hp->yarn_log_mul) : 1.0);
			} else {
				inv *= scale;
			}
			double theta = pos * inv;
			double c = cos(theta) * mscale, s = sin(theta) * mscale;
			int a = hp->neox ? i : 2 * i;
			int b = hp->neox ? i + half : 2 * i + 1;
			double x0 = x[a], x1 = x[b];

			x[a] = x0 * c - x1 * s;
			x[b] = x0 * s + x1 * c;
		}
	}
}

static double silu(double x)
{
	return x / (1.0 + exp(-x));
}

static double gelu(double x)
{
	/* 0.5 x (1 + tanh z), as x sigmoid(2z): no cancellation for x < 0 */
	return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Each of n heads of x (head_dim each) rmsnorm'd by w. */
static void head_norm(double *x, const double *w, int n, int head_dim, double eps)
{
	for (int h = 0; h < n; h++)
		rmsnorm(x + (size_t)h * (size_t)head_dim, x + (size_t)h * (size_t)head_dim, w,
			head_dim, eps);
}

/* out[n_embd] = the FFN of h: dense, or the weighted experts. a and b are
 * scratch of n_ff (n_ff_exp) doubles, e of n_embd. */
static void ffn(const struct ref_model *m, const struct ref_layer *ly, const double *h,
		double *out, double *a, double *b, double *e)
{
	const struct ref_hparams *hp = &m->hp;

	if (!hp->n_expert) {
		matvec(a, ly->w_gate, NULL, h, hp->n_ff, hp->n_embd);
		matvec(b, ly->w_up, NULL, h, hp->n_ff, hp->n_embd);
		for (int i = 0; i < hp->n_ff; i++)
			a[i] = (hp->gemma ? gelu(a[i]) : silu(a[i])) * b[i];
		matvec(out, ly->w_down, NULL, a, hp->n_embd, hp->n_ff);
		return;
	}
	double logit[1024], prob[1024], mx = -INFINITY, sum = 0, picked = 0;
	int chosen[1024];
	int ne = hp->n_expert, ff = hp->n_ff_exp;
	size_t up_sz = (size_t)ff * (size_t)hp->n_embd;

	matvec(logit, ly->router, NULL, h, ne, hp->n_embd);
	for (int i = 0; i < ne; i++)
		mx = logit[i] > mx ? logit[i] : mx;
	for (int i = 0; i < ne; i++) {
		prob[i] = exp(logit[i] - mx);
		sum += prob[i];
	}
	for (int k = 0; k < hp->n_expert_used; k++) {
		int best = -1;

		for (int i = 0; i < ne; i++) {
			bool used = false;

			for (int j = 0; j < k; j++)
				used = used || chosen[j] == i;
			if (!used && (best < 0 || prob[i] > prob[best]))
				best = i;
		}
		chosen[k] = best;
		picked += prob[best] / sum;
	}
	for (int i = 0; i < hp->n_embd; i++)
		out[i] = 0;
	for (int k = 0; k < hp->n_expert_used; k++) {
		int x = chosen[k];
		double w = prob[x] / sum / picked * hp->expert_weights_scale;

		matvec(a, ly->e_gate + (size_t)x * up_sz, NULL, h, ff, hp->n_embd);
		matvec(b, ly->e_up + (size_t)x * up_sz, NULL, h, ff, hp->n_embd);
		for (int i = 0; i < ff; i++)
			a[i] = silu(a[i]) * b[i];
		matvec(e, ly->e_down + (size_t)x * up_sz, NULL, a, hp->n_embd, ff);
		for (int i = 0; i < hp->n_embd; i++)
			out[i] += w * e[i];
	}
}

/* Grows every layer's K/V cache to hold n positions. */
static int reserve_cache(struct ref_model *m, int n, char *err, size_t errlen)
{
	const struct ref_hparams *hp = &m->hp;
	size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;

	if (n <= m->n_ctx)
		return 0;
	for (int l = 0; l < hp->n_layer; l++) {
		struct ref_layer *ly = &m->layers[l];
		double *k = realloc(ly->k_cache, (size_t)n * kv_dim * sizeof(double));

		if (k)
			ly->k_cache = k;
		double *v = realloc(ly->v_cache, (size_t)n * kv_dim * sizeof(double));

		if (v)
			ly->v_cache = v;
		if (!k || !v) {
			snprintf(err, errlen, "reference: out of memory");
			return -1;
		}
	}
	m->n_ctx = n;
	return 0;
}

/* One element of taken K/V against the reference's double value r.  The
 * engine rounded its float32 value of r to F16, so the half it stored is one
 * of the two around r, give or take the float32 error of that value.  That
 * error is relative to the magnitudes summed into the element, not to the
 * element: a small one is the difference of large products.  So the bound
 * is one F16 step of r plus 2^-16 of scale, the largest |value| of the
 * row r belongs to (float32 keeps 2^-24; a few layers of forward pass lose
 * a few bits more).  A real bug (wrong rotation, a missing bias) moves an
 * element by a good part of its own size.  Updates the report; -1 when the
 * element is off by more. */
static int check_taken(struct ref_model *m, int layer, int pos, double taken, double r,
		       double scale)
{
	struct ref_kv_report *rep = &m->report;
	double step = f16_step(r);
	double d = fabs(taken - r);

	rep->n++;
	if (taken != round_f16(r))
		rep->flips++;
	if (d / step > rep->worst) {
		rep->worst = d / step;
		rep->worst_layer = layer;
		rep->worst_pos = pos;
	}
	return d <= step + ldexp(scale, -16) ? 0 : -1;
}

static double max_abs(const double *x, size_t n)
{
	double m = 0;

	for (size_t i = 0; i < n; i++)
		m = fabs(x[i]) > m ? fabs(x[i]) : m;
	return m;
}

/* Replaces kp and vp (position p of layer l, after rope) with the taken
 * K/V once each element passed check_taken. */
static int take_kv(struct ref_model *m, int l, int p, double *kp, double *vp, char *err,
		   size_t errlen)
{
	const struct ref_hparams *hp = &m->hp;
	size_t kv_dim = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
	size_t off = ((size_t)l * (size_t)m->taken_n_pos + (size_t)p) * kv_dim;
	double k_scale = max_abs(kp, kv_dim), v_scale = max_abs(vp, kv_dim);

	if (p >= m->taken_n_pos) {
		snprintf(err, errlen, "no taken K/V for position %d", p);
		return -1;
	}
	for (size_t i = 0; i < kv_dim; i++) {
		double tk = m->taken_k[off + i], tv = m->taken_v[off + i];

		if (check_taken(m, l, p, tk, kp[i], k_scale) ||
		    check_taken(m, l, p, tv, vp[i], v_scale)) {
			snprintf(err, errlen, "layer %d position %d element %zu: K %.9g / V %.9g "
				 "stored, the reference's are %.9g / %.9g: not the F16 rounding "
				 "of the same value", l, p, i, tk, tv, kp[i], vp[i]);
			return -1;
		}
		kp[i] = tk;
		vp[i] = tv;
	}
	return 0;
}

int ref_forward(struct ref_model *m, const int32_t *tokens, int n, double *logits, char *err,
		size_t errlen)
{
	const struct ref_hparams *hp = &m->hp;
	int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
	int group = hp->n_head / hp->n_head_kv;
	int ff = hp->n_expert ? hp->n_ff_exp : hp->n_ff;
	int width = q_dim > ff ? q_dim : ff;
	double *x = NULL, *h = NULL, *q = NULL, *att = NULL, *a = NULL, *b = NULL, *score = NULL;
	double *e = NULL, *fo = NULL;
	int rc = -1;

	if (width < hp->n_embd)
		width = hp->n_embd;
	memset(&m->report, 0, sizeof(m->report));
	if (reserve_cache(m, n, err, errlen))
		return -1;
	x = malloc((size_t)hp->n_embd * sizeof(double));
	h = malloc((size_t)hp->n_embd * sizeof(double));
	q = malloc((size_t)q_dim * sizeof(double));
	att = malloc((size_t)q_dim * sizeof(double));
	a = malloc((size_t)width * sizeof(double));
	b = malloc((size_t)width * sizeof(double));
	score = malloc((size_t)n * sizeof(double));
	e = malloc((size_t)width * sizeof(double));
	fo = malloc((size_t)hp->n_embd * sizeof(double));
	if (!x || !h || !q || !att || !a || !b || !score || !e || !fo) {
		snprintf(err, errlen, "reference: out of memory");
		goto out;
	}
	for (int p = 0; p < n; p++) {
		if (tokens[p] < 0 || tokens[p] >= hp->n_vocab) {
			snprintf(err, errlen, "reference: token %d out of range", tokens[p]);
			goto out;
		}
		memcpy(x, m->tok_embd + (size_t)tokens[p] * (size_t)hp->n_embd,
		       (size_t)hp->n_embd * sizeof(double));
		for (int i = 0; hp->gemma && i < hp->n_embd; i++)
			x[i] *= sqrt((double)hp->n_embd);
		for (int i = 0; hp->embd_mul != 0.0 && i < hp->n_embd; i++)
			x[i] *= hp->embd_mul;
		for (int l = 0; l < hp->n_layer; l++) {
			struct ref_layer *ly = &m->layers[l];
			double *kp = ly->k_cache + (size_t)p * (size_t)kv_dim;
			double *vp = ly->v_cache + (size_t)p * (size_t)kv_dim;
			bool local = hp->n_swa > 0 && hp->swa[l];
			int first = local && p >= hp->n_swa ? p - hp->n_swa + 1 : 0;

			if (ly->attn_norm)
				rmsnorm(h, x, ly->attn_norm, hp->n_embd, hp->eps);
			else
				memcpy(h, x, (size_t)hp->n_embd * sizeof(*h));
			matvec(q, ly->wq, ly->bq, h, q_dim, hp->n_embd);
			matvec(kp, ly->wk, ly->bk, h, kv_dim, hp->n_embd);
			matvec(vp, ly->wv, ly->bv, h, kv_dim, hp->n_embd);
			if (ly->q_norm && hp->olmo2) {
				head_norm(q, ly->q_norm, 1, q_dim, hp->eps);
				head_norm(kp, ly->k_norm, 1, kv_dim, hp->eps);
			} else if (ly->q_norm) {
				head_norm(q, ly->q_norm, hp->n_head, hp->head_dim, hp->eps);
				head_norm(kp, ly->k_norm, hp->n_head_kv, hp->head_dim, hp->eps);
			}
			/* SmolLM3: layers 3, 7, 11, ... take no rope */
			bool roped = !hp->nope || (l + 1) % 4 != 0;

			if (roped)
				rope(m, q, hp->n_head, p, local ? hp->freq_base_swa : hp->freq_base,
				     local ? hp->freq_scale_swa : hp->freq_scale);
			/* Llama 4's temperature (mistral3): the queries, by position */
			for (int d = 0; hp->temp_scale != 0.0 && d < q_dim; d++)
				q[d] *= 1.0 + hp->temp_scale * log(floor((double)p / hp->n_ctx_orig) +
								   1.0);
			if (roped)
				rope(m, kp, hp->n_head_kv, p, local ? hp->freq_base_swa : hp->freq_base,
				     local ? hp->freq_scale_swa : hp->freq_scale);
			if (m->taken_k) {
				if (take_kv(m, l, p, kp, vp, err, errlen))
					goto out;
			} else {
				for (int i = 0; m->kv_f16 && i < kv_dim; i++) {
					kp[i] = round_f16(kp[i]);
					vp[i] = round_f16(vp[i]);
				}
			}
			for (int hd = 0; hd < hp->n_head; hd++) {
				const double *qh = q + (size_t)hd * (size_t)hp->head_dim;
				size_t koff = (size_t)(hd / group) * (size_t)hp->head_dim;
				double mx = -INFINITY, sum = 0;

				for (int t = first; t <= p; t++) {
					const double *kt = ly->k_cache + (size_t)t * (size_t)kv_dim + koff;
					double s = 0;

					for (int i = 0; i < hp->head_dim; i++)
						s += qh[i] * kt[i];
					score[t] = s * hp->attn_scale;
					if (hp->attn_softcap > 0)
						score[t] = hp->attn_softcap * tanh(score[t] / hp->attn_softcap);
					mx = score[t] > mx ? score[t] : mx;
				}
				for (int t = first; t <= p; t++) {
					score[t] = exp(score[t] - mx);
					sum += score[t];
				}
				double *o = att + (size_t)hd * (size_t)hp->head_dim;

				for (int i = 0; i < hp->head_dim; i++)
					o[i] = 0;
				for (int t = first; t <= p; t++) {
					const double *vt = ly->v_cache + (size_t)t * (size_t)kv_dim + koff;

					for (int i = 0; i < hp->head_dim; i++)
						o[i] += score[t] / sum * vt[i];
				}
			}
			matvec(a, ly->wo, NULL, att, hp->n_embd, q_dim);
			if (ly->post_attn_norm)
				rmsnorm(a, a, ly->post_attn_norm, hp->n_embd, hp->eps);
			for (int i = 0; i < hp->n_embd; i++)
				x[i] += hp->resid_mul != 0.0 ? a[i] * hp->resid_mul : a[i];

			if (ly->ffn_norm)
				rmsnorm(h, x, ly->ffn_norm, hp->n_embd, hp->eps);
			else
				memcpy(h, x, (size_t)hp->n_embd * sizeof(*h));
			ffn(m, ly, h, fo, a, b, e);
			if (ly->post_ffn_norm)
				rmsnorm(fo, fo, ly->post_ffn_norm, hp->n_embd, hp->eps);
			for (int i = 0; i < hp->n_embd; i++)
				x[i] += hp->resid_mul != 0.0 ? fo[i] * hp->resid_mul : fo[i];
		}
		double *lg = logits + (size_t)p * (size_t)hp->n_vocab;

		rmsnorm(h, x, m->output_norm, hp->n_embd, hp->eps);
		matvec(lg, m->output, NULL, h, hp->n_vocab, hp->n_embd);
		for (int i = 0; hp->logit_scale != 0.0 && i < hp->n_vocab; i++)
			lg[i] /= hp->logit_scale;
		for (int i = 0; hp->final_softcap > 0 && i < hp->n_vocab; i++)
			lg[i] = hp->final_softcap * tanh(lg[i] / hp->final_softcap);
	}
	rc = 0;
out:
	free(x);
	free(h);
	free(q);
	free(att);
	free(a);
	free(b);
	free(score);
	free(e);
	free(fo);
	return rc;
}
