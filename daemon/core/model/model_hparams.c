/* Hyperparameters of a llama-family model from its GGUF metadata. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/gguf/gguf.h"
#include "daemon/core/model/model_internal.h"

/* Upper bounds that no real model reaches; they keep every product of two
 * of them far from overflowing int. */
#define MAX_EMBD (1 << 16)
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 1024
#define MAX_FF (1 << 18)
#define MAX_VOCAB (1 << 22)

struct arch_desc {
	const char *name;
	enum exl_arch arch;
	bool rope_neox;
};

static const struct arch_desc archs[] = {
	{ "llama", EXL_ARCH_LLAMA, false },
	{ "qwen2", EXL_ARCH_QWEN2, true },
};

static int get_int(const struct gguf_file *f, const char *arch, const char *key, bool required,
		   int def, int min, int max, int *out, char *err, size_t errlen)
{
	char full[160];
	uint32_t v;

	snprintf(full, sizeof(full), "%s.%s", arch, key);
	if (!gguf_find_kv(f, full)) {
		if (required) {
			snprintf(err, errlen, "missing metadata key '%s'", full);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!gguf_get_u32(f, full, &v)) {
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
	if (!gguf_find_kv(f, full)) {
		if (required) {
			snprintf(err, errlen, "missing metadata key '%s'", full);
			return -1;
		}
		*out = def;
		return 0;
	}
	if (!gguf_get_f32(f, full, out) || !isfinite(*out)) {
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
	/* llama.cpp multiplies every rotation by this; the rope op has no
	 * input for it, and running without it would be silently wrong. */
	if (get_float(f, a, "rope.scaling.attn_factor", false, 1.0f, &factor, err, errlen))
		return -1;
	if (factor != 1.0f) {
		snprintf(err, errlen, "%s.rope.scaling.attn_factor %g is not supported", a, factor);
		return -1;
	}
	snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
	if (gguf_find_kv(f, key)) {
		if (!gguf_get_str(f, key, type, sizeof(type))) {
			snprintf(err, errlen, "metadata key '%s' is not a short string", key);
			return -1;
		}
		if (!strcmp(type, "none"))
			return 0;
		if (strcmp(type, "linear")) {
			snprintf(err, errlen, "unsupported rope scaling type '%s' (%s)", type, key);
			return -1;
		}
	}
	/* Files from before rope.scaling.* carry the factor alone, as
	 * rope.scale_linear; like llama.cpp, that key stands in for a missing
	 * rope.scaling.factor with or without a type. */
	snprintf(key, sizeof(key), "%s.rope.scaling.factor", a);
	if (get_float(f, a, gguf_find_kv(f, key) ? "rope.scaling.factor" : "rope.scale_linear",
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

int exl_hparams_read(const struct gguf_file *f, struct exl_hparams *hp, char *err, size_t errlen)
{
	const struct arch_desc *ad = NULL;
	const struct gguf_array *toks;
	const char *a;
	int key_len, val_len, experts;

	memset(hp, 0, sizeof(*hp));
	if (!gguf_get_str(f, "general.architecture", hp->arch_name, sizeof(hp->arch_name))) {
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
	hp->rope_neox = ad->rope_neox;
	if (!gguf_get_str(f, "general.name", hp->name, sizeof(hp->name)))
		hp->name[0] = '\0';

	if (get_int(f, a, "embedding_length", true, 0, 1, MAX_EMBD, &hp->n_embd, err, errlen) ||
	    get_int(f, a, "block_count", true, 0, 1, MAX_LAYERS, &hp->n_layer, err, errlen) ||
	    get_int(f, a, "attention.head_count", true, 0, 1, MAX_HEADS, &hp->n_head, err,
		    errlen) ||
	    get_int(f, a, "attention.head_count_kv", false, hp->n_head, 1, MAX_HEADS,
		    &hp->n_head_kv, err, errlen) ||
	    get_int(f, a, "feed_forward_length", true, 0, 1, MAX_FF, &hp->n_ff, err, errlen) ||
	    get_int(f, a, "context_length", true, 0, 1, INT32_MAX, &hp->n_ctx_train, err,
		    errlen) ||
	    get_int(f, a, "expert_count", false, 0, 0, MAX_HEADS, &experts, err, errlen))
		return -1;
	if (experts > 0) {
		snprintf(err, errlen, "mixture-of-experts models (%s.expert_count = %d) are not "
			 "supported", a, experts);
		return -1;
	}
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
	if (get_float(f, a, "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps, err,
		      errlen) ||
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
	if (read_rope_scaling(f, hp, err, errlen))
		return -1;

	toks = gguf_get_arr(f, "tokenizer.ggml.tokens");
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
