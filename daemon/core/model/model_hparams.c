/* Hyperparameters from GGUF metadata, under the keys and defaults llama.cpp's
 * converters write and its loader reads for each architecture. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/model_internal.h"

/* Upper bounds that no real model reaches; they keep every product of two
 * of them far from overflowing int. */
#define MAX_EMBD (1 << 16)
#define MAX_LAYERS EXL_MAX_LAYERS
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 1024
#define MAX_FF (1 << 18)
#define MAX_VOCAB (1 << 22)

/* What an architecture's blocks are made of, beyond the llama block. */
struct arch_desc {
	const char *name;
	enum exl_arch arch;
	bool rope_neox;
	bool qk_norm;
	bool gemma;        /* embedding scale, post norms, GELU, sliding window */
	int moe;           /* 0: never, 1: when expert_count > 0, 2: always */
	/* Qwen2-VL / Qwen3-VL's language model: M-RoPE over sections of the
	 * head (rope.dimension_sections), which for text, whose position is
	 * the same in every section, turns each pair as the plain rope does;
	 * images are what exld does not take. */
	bool mrope;
};

static const struct arch_desc archs[] = {
	{ "llama", EXL_ARCH_LLAMA, false, false, false, 1, false },
	{ "qwen2", EXL_ARCH_QWEN2, true, false, false, 0, false },
	{ "qwen3", EXL_ARCH_QWEN3, true, true, false, 0, false },
	{ "qwen3moe", EXL_ARCH_QWEN3MOE, true, true, false, 2, false },
	{ "phi3", EXL_ARCH_PHI3, true, false, false, 0, false },
	{ "gemma", EXL_ARCH_GEMMA, true, false, false, 0, false },
	{ "gemma2", EXL_ARCH_GEMMA2, true, false, true, 0, false },
	{ "gemma3", EXL_ARCH_GEMMA3, true, true, true, 0, false },
	{ "mistral3", EXL_ARCH_MISTRAL3, false, false, false, 1, false },
	{ "granite", EXL_ARCH_GRANITE, false, false, false, 0, false },
	{ "granitemoe", EXL_ARCH_GRANITE, false, false, false, 2, false },
	{ "smollm3", EXL_ARCH_SMOLLM3, false, false, false, 0, false },
	{ "glm4", EXL_ARCH_GLM4, false, false, false, 0, false },
	{ "olmo2", EXL_ARCH_OLMO2, true, true, false, 0, false },
	{ "qwen2vl", EXL_ARCH_QWEN2, true, false, false, 0, true },
	{ "qwen3vl", EXL_ARCH_QWEN3, true, true, false, 0, true },
	{ "qwen3vlmoe", EXL_ARCH_QWEN3MOE, true, true, false, 2, true },
	{ "gpt-oss", EXL_ARCH_GPT_OSS, true, false, false, 2, false },
	{ "bert", EXL_ARCH_BERT, true, false, false, 0, false },
	{ "nomic-bert", EXL_ARCH_NOMIC_BERT, true, false, false, 0, false },
};

/* The architectures read as llama: its tensors, rope factors and experts. */
static bool llama_like(enum exl_arch a)
{
	return a == EXL_ARCH_LLAMA || a == EXL_ARCH_MISTRAL3 || a == EXL_ARCH_GRANITE;
}

static int get_int(const struct gguf_file *f, const char *arch, const char *key, bool required,
		   int def, int min, int max, int *out, char *err, size_t errlen)
{
	char full[160];
	uint32_t v;

	snprintf(full, sizeof(full), "%s.%s", arch, key);
	if (!exl_gguf_find_kv(f, full)) {
		if (required) {
			snprintf(err, errlen, "missing metadata key '%s'", full);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!exl_gguf_get_u32(f, full, &v)) {
		snprintf(err, errlen, "metadata key '%s' is not a non-negative 32-bit integer", full);
		return -1;
	}
	if (v < (uint32_t)min || v > (uint32_t)max) {
		snprintf(err, errlen, "metadata key '%s' = %u is out of range [%d, %d]", full, v,
			 min, max);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int get_float(const struct gguf_file *f, const char *arch, const char *key, bool required,
		     float def, float *out, char *err, size_t errlen)
{
	char full[160];

	snprintf(full, sizeof(full), "%s.%s", arch, key);
	if (!exl_gguf_find_kv(f, full)) {
		if (required) {
			snprintf(err, errlen, "missing metadata key '%s'", full);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!exl_gguf_get_f32(f, full, out) || !isfinite(*out)) {
		snprintf(err, errlen, "metadata key '%s' is not a finite float", full);
		return -1;
	}
	return 0;
}

static int read_rope_scaling(const struct gguf_file *f, struct exl_hparams *hp, char *err,
			     size_t errlen)
{
	const char *a = hp->arch_name;
	char key[160], type[32];
	float factor;

	hp->rope_freq_scale = 1.0f;
	hp->yarn_beta_fast = 32.0f;
	hp->yarn_beta_slow = 1.0f;
	/* Multiplies the cosine and sine of every rotation (phi3's 128k
	 * variants write sqrt(1 + ln(scale) / ln(original context))). */
	if (get_float(f, a, "rope.scaling.attn_factor", false, 1.0f, &hp->rope_attn_factor, err,
		      errlen))
		return -1;
	if (hp->rope_attn_factor < 1e-3f || hp->rope_attn_factor > 1e3f) {
		snprintf(err, errlen, "%s.rope.scaling.attn_factor %g is out of range", a,
			 hp->rope_attn_factor);
		return -1;
	}
	if (get_int(f, a, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1,
		    INT32_MAX, &hp->n_ctx_orig, err, errlen))
		return -1;
	snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
	if (exl_gguf_find_kv(f, key)) {
		if (!exl_gguf_get_str(f, key, type, sizeof(type))) {
			snprintf(err, errlen, "metadata key '%s' is not a short string", key);
			return -1;
		}
		if (!strcmp(type, "none"))
			return 0;
		/* yarn: the factor below, with YaRN's ramp and magnitude
		 * (model_forward.c); its beta_fast / beta_slow are the paper's
		 * 32 and 1, as llama.cpp takes them for every architecture
		 * exld runs (it reads rope.scaling.yarn_* only for others).
		 * longrope: the factor tensors carry it (bound with the
		 * tensors); a linear factor may come with it, as llama.cpp
		 * reads one for every type. */
		hp->rope_yarn = !strcmp(type, "yarn");
		if (strcmp(type, "linear") && !hp->rope_yarn && (strcmp(type, "longrope") ||
					       (!llama_like(hp->arch) &&
						hp->arch != EXL_ARCH_PHI3))) {
			snprintf(err, errlen, "unsupported rope scaling type '%s' (%s)", type, key);
			return -1;
		}
	}
	/* Files from before rope.scaling.* carry the factor alone, as
	 * rope.scale_linear; like llama.cpp, that key stands in for a missing
	 * rope.scaling.factor with or without a type. */
	snprintf(key, sizeof(key), "%s.rope.scaling.factor", a);
	if (get_float(f, a, exl_gguf_find_kv(f, key) ? "rope.scaling.factor" : "rope.scale_linear",
		      false, 1.0f, &factor, err, errlen))
		return -1;
	if (factor == 0.0f) /* what converters write for "no scaling" */
		return 0;
	if (factor < 1e-3f || factor > 1e3f) {
		snprintf(err, errlen, "rope scaling factor %g is out of range", factor);
		return -1;
	}
	hp->rope_freq_scale = 1.0f / factor;
	return 0;
}

/* mistral3 (Ministral 3, Mistral Small 3.x converted since late 2025):
 * llama's block, with YaRN's betas and mscale_all_dim from the file and
 * Llama 4's attention temperature, as llama.cpp reads them for it (and for
 * no architecture exld runs besides). */
static int read_mistral3(const struct gguf_file *f, struct exl_hparams *hp, char *err,
			 size_t errlen)
{
	const char *a = hp->arch_name;

	if (get_float(f, a, "rope.scaling.yarn_beta_fast", false, 32.0f, &hp->yarn_beta_fast,
		      err, errlen) ||
	    get_float(f, a, "rope.scaling.yarn_beta_slow", false, 1.0f, &hp->yarn_beta_slow,
		      err, errlen) ||
	    get_float(f, a, "rope.scaling.yarn_log_multiplier", false, 0.0f, &hp->yarn_log_mul,
		      err, errlen) ||
	    get_float(f, a, "attention.temperature_scale", false, 0.0f, &hp->attn_temp_scale,
		      err, errlen))
		return -1;
	if (!(hp->yarn_beta_fast > 0.0f && hp->yarn_beta_fast < 1e6f) ||
	    !(hp->yarn_beta_slow > 0.0f && hp->yarn_beta_slow < 1e6f) ||
	    !(fabsf(hp->yarn_log_mul) < 1e3f) || !(fabsf(hp->attn_temp_scale) < 1e3f)) {
		snprintf(err, errlen, "%s YaRN betas %g / %g, log multiplier %g or temperature "
			 "scale %g out of range", a, hp->yarn_beta_fast, hp->yarn_beta_slow,
			 hp->yarn_log_mul, hp->attn_temp_scale);
		return -1;
	}
	/* the temperature scales all of q: llama.cpp requires the whole
	 * head to rotate for mistral3 */
	if (hp->n_rot != hp->head_dim) {
		snprintf(err, errlen, "%s.rope.dimension_count %d differs from the head size %d",
			 a, hp->n_rot, hp->head_dim);
		return -1;
	}
	return 0;
}

/* rope.dimension_sections: required, as llama.cpp requires it, and 4
 * counts of pairs; text turns the same in every section, so nothing else
 * is read from it. */
static int read_mrope(const struct gguf_file *f, const char *a, char *err, size_t errlen)
{
	char key[160];
	const struct gguf_array *arr;

	snprintf(key, sizeof(key), "%s.rope.dimension_sections", a);
	arr = exl_gguf_get_arr(f, key);
	if (!arr || arr->count != 4 ||
	    (arr->elem_type != GGUF_VT_INT32 && arr->elem_type != GGUF_VT_UINT32)) {
		snprintf(err, errlen, "missing metadata key '%s' (4 integers)", key);
		return -1;
	}
	return 0;
}

/* glm4 (GLM-4-0414, GLM-Z1): RMS norms after the attention and the FFN as
 * well as before, gate and up in one ffn_up, the rope on adjacent pairs of
 * the head's first rope.dimension_count dims; with rope.dimension_sections
 * (GLM-4.1V's M-RoPE) on halves, which for text turns as the plain NEOX
 * rope.  GLM-4.5's next-token-prediction layers are not run. */
static int read_glm4(const struct gguf_file *f, struct exl_hparams *hp, char *err,
		     size_t errlen)
{
	const char *a = hp->arch_name;
	char key[160];
	int nextn;

	if (get_int(f, a, "nextn_predict_layers", false, 0, 0, hp->n_layer, &nextn, err, errlen))
		return -1;
	if (nextn) {
		snprintf(err, errlen, "%s with next-token-prediction layers (%s.nextn_predict_layers "
			 "%d) is not supported", a, a, nextn);
		return -1;
	}
	snprintf(key, sizeof(key), "%s.rope.dimension_sections", a);
	if (exl_gguf_find_kv(f, key)) {
		if (read_mrope(f, a, err, errlen))
			return -1;
		hp->rope_neox = true;
	}
	hp->post_norms = true;
	return 0;
}

static int read_swa_pattern(const struct gguf_file *f, struct exl_hparams *hp, int def,
			    char *err, size_t errlen);

/* The local layers' rope base: rope.freq_base_swa, def when absent. */
static int read_base_swa(const struct gguf_file *f, struct exl_hparams *hp, float def,
			 char *err, size_t errlen)
{
	const char *a = hp->arch_name;

	if (get_float(f, a, "rope.freq_base_swa", false, def, &hp->rope_freq_base_swa, err,
		      errlen))
		return -1;
	if (hp->rope_freq_base_swa <= 1.0f) {
		snprintf(err, errlen, "%s.rope.freq_base_swa %g is out of range", a,
			 hp->rope_freq_base_swa);
		return -1;
	}
	return 0;
}

/* olmo2 (OLMo 2, OLMo 3): RMS norms after the attention and the FFN and
 * none before, q and k each normed whole (over all heads); OLMo 3's
 * sliding window on 3 layers in 4 (attention.sliding_window, the pattern
 * as gemma's), whose rope is unscaled, without YaRN, as llama.cpp turns
 * it. */
static int read_olmo2(const struct gguf_file *f, struct exl_hparams *hp, char *err,
		      size_t errlen)
{
	const char *a = hp->arch_name;

	hp->post_norms = true;
	hp->no_pre_norm = true;
	hp->qk_norm_full = true;
	if (get_int(f, a, "attention.sliding_window", false, 0, 0, INT32_MAX, &hp->n_swa, err,
		    errlen))
		return -1;
	if (hp->n_swa == 0)
		return 0;
	hp->local_rope_plain = true;
	hp->rope_freq_scale_swa = 1.0f;
	if (read_base_swa(f, hp, hp->rope_freq_base, err, errlen))
		return -1;
	return read_swa_pattern(f, hp, 4, err, errlen);
}

/* gpt-oss (OpenAI's gpt-oss-20b and -120b): a sliding window (required,
 * as llama.cpp requires it) on every other layer from the first, whose
 * rope is the global one (YaRN included) unless rope.freq_base_swa says;
 * experts with gpt-oss's clamped SwiGLU, weighted by the softmax of the
 * chosen experts' logits; scores scaled by 1/sqrt of the rotated dims. */
static int read_gpt_oss(const struct gguf_file *f, struct exl_hparams *hp, char *err,
			size_t errlen)
{
	const char *a = hp->arch_name;

	hp->ffn_act = EXL_FFN_SWIGLU_OAI;
	hp->moe_softmax_topk = true;
	hp->attn_scale = 1.0f / sqrtf((float)hp->n_rot);
	if (get_int(f, a, "attention.sliding_window", true, 0, 1, INT32_MAX, &hp->n_swa, err,
		    errlen))
		return -1;
	hp->rope_freq_scale_swa = hp->rope_freq_scale;
	if (read_base_swa(f, hp, hp->rope_freq_base, err, errlen))
		return -1;
	return read_swa_pattern(f, hp, 2, err, errlen);
}

/* bert (bge, all-MiniLM, mxbai-embed-large) and nomic-bert
 * (nomic-embed-text): encoders whose attention sees the whole text.
 * bert adds learned positions and no rope; nomic-bert rotates (NEOX). */
static int read_encoder(const struct gguf_file *f, struct exl_hparams *hp, char *err,
			size_t errlen)
{
	char key[160];
	bool causal = false;

	snprintf(key, sizeof(key), "%s.attention.causal", hp->arch_name);
	if (exl_gguf_find_kv(f, key) && (!exl_gguf_get_bool(f, key, &causal) || causal)) {
		snprintf(err, errlen, "%s with causal attention (%s) is not supported",
			 hp->arch_name, key);
		return -1;
	}
	if (hp->arch == EXL_ARCH_BERT) {
		hp->pos_embd = true;
		hp->no_rope_step = 1; /* (il + 1) % 1 == 0: no layer rotates */
	}
	return 0;
}

/* granite (IBM Granite 3.x): llama's block with its config's multipliers,
 * as llama.cpp reads them: logits divided by logit_scale (required),
 * embeddings times embedding_scale, each block's attention and FFN output
 * times residual_scale before the residual add, and attention.scale for
 * 1/sqrt(head size); each 0 or absent is none. */
static int read_granite(const struct gguf_file *f, struct exl_hparams *hp, char *err,
			size_t errlen)
{
	const char *a = hp->arch_name;
	char key[160];
	float attn = 0.0f;
	bool rope = true;

	if (get_float(f, a, "logit_scale", true, 0.0f, &hp->logit_scale, err, errlen) ||
	    get_float(f, a, "residual_scale", false, 0.0f, &hp->resid_mul, err, errlen) ||
	    get_float(f, a, "embedding_scale", false, 0.0f, &hp->embd_mul, err, errlen) ||
	    get_float(f, a, "attention.scale", false, 0.0f, &attn, err, errlen))
		return -1;
	if (!(fabsf(hp->logit_scale) < 1e6f) || !(fabsf(hp->resid_mul) < 1e6f) ||
	    !(fabsf(hp->embd_mul) < 1e6f) || !(fabsf(attn) < 1e6f)) {
		snprintf(err, errlen, "%s scales out of range (logit %g, residual %g, embedding "
			 "%g, attention %g)", a, hp->logit_scale, hp->resid_mul, hp->embd_mul,
			 attn);
		return -1;
	}
	if (attn != 0.0f)
		hp->attn_scale = attn;
	/* rope.scaling.finetuned false turns the rope off in llama.cpp's
	 * granite; and Granite 4 Vision's deepstack layers take image input */
	snprintf(key, sizeof(key), "%s.rope.scaling.finetuned", a);
	if (exl_gguf_find_kv(f, key) && (!exl_gguf_get_bool(f, key, &rope) || !rope)) {
		snprintf(err, errlen, "%s without rope (%s false) is not supported", a, key);
		return -1;
	}
	snprintf(key, sizeof(key), "%s.deepstack_mapping", a);
	if (exl_gguf_find_kv(f, key)) {
		snprintf(err, errlen, "%s with vision layers (%s) is not supported", a, key);
		return -1;
	}
	return 0;
}

/* The experts' shape and routing keys.  A dense model reads its FFN width
 * here too: a mixture of experts may give only the experts'. */
static int read_experts(const struct gguf_file *f, struct exl_hparams *hp, int experts,
			char *err, size_t errlen)
{
	const char *a = hp->arch_name;
	char key[160];

	hp->n_expert = experts;
	hp->expert_weights_scale = 1.0f;
	snprintf(key, sizeof(key), "%s.expert_feed_forward_length", a);
	if (get_int(f, a, "feed_forward_length", !experts || !exl_gguf_find_kv(f, key), 0, 1,
		    MAX_FF, &hp->n_ff, err, errlen))
		return -1;
	if (!experts)
		return 0;
	if (get_int(f, a, "expert_used_count", true, 0, 1, experts, &hp->n_expert_used, err,
		    errlen))
		return -1;
	/* Mixtral's experts are feed_forward_length wide; qwen3moe says so,
	 * or llama.cpp takes feed_forward_length / expert_used_count. */
	int def = llama_like(hp->arch) ? hp->n_ff : hp->n_ff / hp->n_expert_used;
	if (get_int(f, a, "expert_feed_forward_length", def < 1, def, 1, MAX_FF, &hp->n_ff_exp,
		    err, errlen) ||
	    get_float(f, a, "expert_weights_scale", false, 0.0f, &hp->expert_weights_scale, err,
		      errlen))
		return -1;
	if (llama_like(hp->arch) && hp->n_ff_exp != hp->n_ff) {
		snprintf(err, errlen, "%s.expert_feed_forward_length %d differs from "
			 "feed_forward_length %d (llama experts are that wide)", a, hp->n_ff_exp,
			 hp->n_ff);
		return -1;
	}
	/* 0 is what llama.cpp takes for "unset", as it does 1 */
	if (hp->expert_weights_scale == 0.0f)
		hp->expert_weights_scale = 1.0f;
	snprintf(key, sizeof(key), "%s.expert_shared_count", a);
	if (!exl_gguf_find_kv(f, key))
		snprintf(key, sizeof(key), "%s.expert_shared_feed_forward_length", a);
	if (exl_gguf_find_kv(f, key)) {
		snprintf(err, errlen, "shared experts (%s) are not supported", key);
		return -1;
	}
	return 0;
}

/* Which layers are local (sliding window).  attention.sliding_window_pattern
 * is an array of one flag per layer, or one number n: layer il is local when
 * il % n < n - 1 (the last of every n is global; n = 1: no layer is local,
 * n = 0: every layer is), as llama.cpp reads it; def when the key is
 * absent. */
static int read_swa_pattern(const struct gguf_file *f, struct exl_hparams *hp, int def,
			    char *err, size_t errlen)
{
	const char *a = hp->arch_name;
	const struct gguf_array *arr;
	char key[160];
	int n = def;

	memset(hp->swa_layers, 0, sizeof(hp->swa_layers));
	snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", a);
	arr = exl_gguf_get_arr(f, key);
	if (arr) {
		if (arr->count != (uint64_t)hp->n_layer) {
			snprintf(err, errlen, "metadata key '%s' has %llu entries for %d layers", key,
				 (unsigned long long)arr->count, hp->n_layer);
			return -1;
		}
		for (int il = 0; il < hp->n_layer; il++) {
			int64_t v = 0;

			if (arr->elem_type == GGUF_VT_BOOL)
				v = ((const uint8_t *)arr->data)[il];
			else if (!exl_gguf_arr_get_i64(arr, (uint64_t)il, &v)) {
				snprintf(err, errlen, "metadata key '%s' is not an array of flags",
					 key);
				return -1;
			}
			if (v)
				hp->swa_layers[il / 64] |= (uint64_t)1 << (il % 64);
		}
		return 0;
	}
	if (get_int(f, a, "attention.sliding_window_pattern", false, def, 0, MAX_LAYERS, &n,
		    err, errlen))
		return -1;
	for (int il = 0; il < hp->n_layer; il++)
		if (n == 0 || il % n < n - 1)
			hp->swa_layers[il / 64] |= (uint64_t)1 << (il % 64);
	return 0;
}

/* Gemma 2 and 3: embeddings scaled, norms after attention and FFN, GELU,
 * local layers with a sliding window (gemma2: every other layer, window
 * 4096 unless the file says; gemma3: 5 in 6 when the file gives a window)
 * and their own rope; gemma2 soft-caps scores and logits. */
static int read_gemma(const struct gguf_file *f, struct exl_hparams *hp, char *err,
		      size_t errlen)
{
	const char *a = hp->arch_name;
	bool g2 = hp->arch == EXL_ARCH_GEMMA2;
	int big = g2 ? 46 : 62; /* the 27B models' layer counts */

	hp->embd_scale = true;
	hp->post_norms = true;
	hp->ffn_act = EXL_FFN_GELU;
	if (get_int(f, a, "attention.sliding_window", false, g2 ? 4096 : 0, 0, INT32_MAX,
		    &hp->n_swa, err, errlen) ||
	    get_float(f, a, "final_logit_softcapping", false, g2 ? 30.0f : 0.0f,
		      &hp->final_softcap, err, errlen))
		return -1;
	if (g2 && get_float(f, a, "attn_logit_softcapping", false, 50.0f, &hp->attn_softcap, err,
			    errlen))
		return -1;
	if (hp->final_softcap < 0.0f || hp->attn_softcap < 0.0f) {
		snprintf(err, errlen, "%s soft-capping %g / %g is negative", a, hp->attn_softcap,
			 hp->final_softcap);
		return -1;
	}
	/* gemma2's local layers rotate as the global ones unless the file
	 * says; gemma3's at base 10000, unscaled */
	hp->rope_freq_scale_swa = g2 ? hp->rope_freq_scale : 1.0f;
	if (read_base_swa(f, hp, g2 ? hp->rope_freq_base : 10000.0f, err, errlen))
		return -1;
	if (hp->n_swa > 0 && read_swa_pattern(f, hp, g2 ? 2 : 6, err, errlen))
		return -1;
	/* Gemma's 27B models scale queries by 1/sqrt(n_embd / n_head), which
	 * no key records; llama.cpp knows them by their layer count. */
	if (hp->n_layer == big)
		hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
	return 0;
}

int exl_hparams_read(const struct gguf_file *f, struct exl_hparams *hp, char *err, size_t errlen)
{
	const struct arch_desc *ad = NULL;
	const struct gguf_array *toks;
	const char *a;
	int key_len, val_len, experts;

	memset(hp, 0, sizeof(*hp));
	if (!exl_gguf_get_str(f, "general.architecture", hp->arch_name, sizeof(hp->arch_name))) {
		snprintf(err, errlen, "missing or overlong metadata key 'general.architecture'");
		return -1;
	}
	for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
		if (!strcmp(hp->arch_name, archs[i].name))
			ad = &archs[i];
	if (!ad) {
		snprintf(err, errlen, "unsupported architecture '%s'", hp->arch_name);
		return -1;
	}
	a = hp->arch_name;
	hp->arch = ad->arch;
	if (ad->mrope && read_mrope(f, a, err, errlen))
		return -1;
	hp->rope_neox = ad->rope_neox;
	hp->qk_norm = ad->qk_norm;
	if (!exl_gguf_get_str(f, "general.name", hp->name, sizeof(hp->name)))
		hp->name[0] = '\0';

	if (get_int(f, a, "embedding_length", true, 0, 1, MAX_EMBD, &hp->n_embd, err, errlen) ||
	    get_int(f, a, "block_count", true, 0, 1, MAX_LAYERS, &hp->n_layer, err, errlen) ||
	    get_int(f, a, "attention.head_count", true, 0, 1, MAX_HEADS, &hp->n_head, err,
		    errlen) ||
	    get_int(f, a, "attention.head_count_kv", false, hp->n_head, 1, MAX_HEADS,
		    &hp->n_head_kv, err, errlen) ||
	    get_int(f, a, "context_length", true, 0, 1, INT32_MAX, &hp->n_ctx_train, err,
		    errlen) ||
	    get_int(f, a, "expert_count", false, 0, 0, EXL_MAX_EXPERTS, &experts, err, errlen))
		return -1;
	if (experts > 0 && !ad->moe) {
		snprintf(err, errlen, "%s models with experts (%s.expert_count = %d) are not "
			 "supported", a, a, experts);
		return -1;
	}
	if (ad->moe == 2 && experts == 0) {
		snprintf(err, errlen, "a %s model needs %s.expert_count > 0", a, a);
		return -1;
	}
	if (read_experts(f, hp, experts, err, errlen))
		return -1;
	if (hp->n_head % hp->n_head_kv) {
		snprintf(err, errlen, "%s.attention.head_count %d is not a multiple of "
			 "head_count_kv %d", a, hp->n_head, hp->n_head_kv);
		return -1;
	}
	int def_hd = hp->n_embd % hp->n_head ? 0 : hp->n_embd / hp->n_head;
	if (get_int(f, a, "attention.key_length", def_hd == 0, def_hd, 1, MAX_HEAD_DIM, &key_len,
		    err, errlen) ||
	    get_int(f, a, "attention.value_length", false, key_len, 1, MAX_HEAD_DIM, &val_len,
		    err, errlen))
		return -1;
	if (key_len != val_len) {
		snprintf(err, errlen, "key_length %d != value_length %d is not supported", key_len,
			 val_len);
		return -1;
	}
	hp->head_dim = key_len;
	if (get_int(f, a, "rope.dimension_count", false, hp->head_dim, 2, hp->head_dim,
		    &hp->n_rot, err, errlen))
		return -1;
	if (hp->n_rot % 2) {
		snprintf(err, errlen, "%s.rope.dimension_count %d is odd", a, hp->n_rot);
		return -1;
	}
	/* encoders: LayerNorms; attention over the whole text, as llama.cpp
	 * runs them (a file that says attention.causal true is refused) */
	hp->encoder = hp->arch == EXL_ARCH_BERT || hp->arch == EXL_ARCH_NOMIC_BERT;
	if (hp->encoder && read_encoder(f, hp, err, errlen))
		return -1;
	if (get_float(f, a, hp->encoder ? "attention.layer_norm_epsilon" :
			    "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps, err, errlen) ||
	    get_float(f, a, "rope.freq_base", false, 10000.0f, &hp->rope_freq_base, err, errlen))
		return -1;
	if (hp->rms_eps <= 0.0f || hp->rms_eps > 1.0f) {
		snprintf(err, errlen, "%s.attention.layer_norm_rms_epsilon %g is out of range", a,
			 hp->rms_eps);
		return -1;
	}
	if (hp->rope_freq_base <= 1.0f) {
		snprintf(err, errlen, "%s.rope.freq_base %g is out of range", a,
			 hp->rope_freq_base);
		return -1;
	}
	hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
	/* SmolLM3 leaves every 4th layer without rope (NoPE), as llama.cpp
	 * fixes it for the architecture */
	if (hp->arch == EXL_ARCH_SMOLLM3)
		hp->no_rope_step = 4;
	if (hp->arch == EXL_ARCH_GLM4 && read_glm4(f, hp, err, errlen))
		return -1;
	if (hp->arch == EXL_ARCH_OLMO2 && read_olmo2(f, hp, err, errlen))
		return -1;
	if (read_rope_scaling(f, hp, err, errlen) ||
	    (hp->arch == EXL_ARCH_MISTRAL3 && read_mistral3(f, hp, err, errlen)) ||
	    (hp->arch == EXL_ARCH_GRANITE && read_granite(f, hp, err, errlen)))
		return -1;
	hp->ffn_act = EXL_FFN_SILU;
	if (ad->gemma && read_gemma(f, hp, err, errlen))
		return -1;
	if (hp->arch == EXL_ARCH_GPT_OSS && read_gpt_oss(f, hp, err, errlen))
		return -1;
	/* Gemma 1 (and CodeGemma): gemma2's embedding scale and GELU, none of
	 * its post norms, capping or windows */
	if (hp->arch == EXL_ARCH_GEMMA) {
		hp->embd_scale = true;
		hp->ffn_act = EXL_FFN_GELU;
	}

	toks = exl_gguf_get_arr(f, "tokenizer.ggml.tokens");
	if (!toks || toks->elem_type != GGUF_VT_STRING) {
		snprintf(err, errlen, "missing metadata key 'tokenizer.ggml.tokens'");
		return -1;
	}
	if (toks->count < 1 || toks->count > MAX_VOCAB) {
		snprintf(err, errlen, "vocabulary size %llu is out of range",
			 (unsigned long long)toks->count);
		return -1;
	}
	hp->n_vocab = (int)toks->count;
	return 0;
}
