/* A decoder-only transformer (llama, qwen2, qwen3, qwen3moe, phi3, gemma2,
 * gemma3, gpt-oss, ...): hyperparameters and weights bound from GGUF, and the batched
 * forward pass over the paged KV cache.
 *
 * A model and its scratch buffers belong to one engine thread at a time.
 */
#ifndef EXL_MODEL_H
#define EXL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

struct gguf_file;
struct exl_tokenizer;
struct exl_kvcache;
struct exl_kv_seq;

enum exl_arch {
	EXL_ARCH_LLAMA,    /* also Mixtral's mixture of experts */
	EXL_ARCH_QWEN2,
	EXL_ARCH_QWEN3,
	EXL_ARCH_QWEN3MOE,
	EXL_ARCH_PHI3,
	EXL_ARCH_GEMMA,    /* Gemma 1, CodeGemma: llama's block with gemma's embedding scale and GELU */
	EXL_ARCH_GEMMA2,
	EXL_ARCH_GEMMA3,
	EXL_ARCH_MISTRAL3, /* llama's block; YaRN keys and Llama 4's temperature */
	EXL_ARCH_GRANITE,  /* llama's block with IBM's four multipliers */
	EXL_ARCH_SMOLLM3,  /* llama's block, every 4th layer without rope */
	EXL_ARCH_GLM4,     /* post norms, gate and up in one ffn_up, half the head rotated */
	EXL_ARCH_OLMO2,    /* norms after attention and FFN only, q/k normed whole */
	EXL_ARCH_GPT_OSS,  /* OpenAI's gpt-oss: sinks, biases, every other layer local,
			    * experts with a clamped SwiGLU routed by the top-k's softmax */
	EXL_ARCH_BERT,     /* encoders for embeddings (bge, MiniLM, mxbai-embed): */
	EXL_ARCH_NOMIC_BERT, /* LayerNorm after each block, attention both ways */
};

/* The gated FFN's activation: silu(gate) * up, gelu(gate) * up, or
 * gpt-oss's clamped exl_swiglu_oai (alpha 1.702, limit 7). */
enum exl_ffn_act { EXL_FFN_SILU, EXL_FFN_GELU, EXL_FFN_SWIGLU_OAI };

#define EXL_MAX_LAYERS 1024
#define EXL_MAX_EXPERTS 1024

struct exl_hparams {
	enum exl_arch arch;
	char arch_name[32];
	char name[128];        /* general.name, may be empty */
	int n_vocab;
	int n_ctx_train;
	int n_embd;
	int n_layer;
	int n_head;
	int n_head_kv;
	int head_dim;
	int n_ff;              /* of the dense FFN; of each expert: n_ff_exp */
	int n_rot;
	float rms_eps;
	float rope_freq_base;
	float rope_freq_scale; /* 1 / linear scaling factor */
	float rope_attn_factor; /* rope.scaling.attn_factor, 1 when absent */
	int n_ctx_orig;        /* rope.scaling.original_context_length (phi3's
				* long/short rope factors); n_ctx_train when absent */
	bool rope_neox;
	int no_rope_step;      /* smollm3: layer il has no rope when (il + 1) %
				* this is 0; 0: every layer has */
	bool rope_yarn;        /* rope.scaling.type yarn: the factor is YaRN's */
	float yarn_beta_fast;  /* YaRN's ramp: 32 and 1 unless mistral3 says */
	float yarn_beta_slow;
	float yarn_log_mul;    /* mistral3's mscale_all_dim; 0: none */
	float attn_temp_scale; /* mistral3: queries times 1 + this *
				* ln(floor(pos / n_ctx_orig) + 1); 0: none */
	bool tied_embeddings;

	/* Attention */
	float attn_scale;      /* score scale: 1/sqrt(head_dim) but for gemma's 27B */
	float attn_softcap;    /* gemma2's attention logit soft-capping; 0: none */
	bool qk_norm;          /* per-head RMS norm of q and k (qwen3, gemma3) */
	bool qk_norm_full;     /* olmo2: q and k each RMS-normed whole, not per head */
	bool no_pre_norm;      /* olmo2: no norm before attention and FFN (post norms) */
	bool local_rope_plain; /* olmo2: local layers rotate without YaRN, factor 1 */
	int n_swa;             /* sliding window of the local layers; 0: none */
	float rope_freq_base_swa;  /* the local layers' rope */
	float rope_freq_scale_swa;
	uint64_t swa_layers[EXL_MAX_LAYERS / 64]; /* bit il: layer il is local */

	/* Block shape */
	bool embd_scale;       /* embeddings times sqrt(n_embd) (gemma) */
	float embd_mul;        /* granite: embeddings times this; 0: none */
	float resid_mul;       /* granite: attention and FFN outputs times this
				* before the residual add; 0: none */
	float logit_scale;     /* granite: logits divided by this; 0: none */
	bool post_norms;       /* RMS norms after attention and FFN (gemma) */
	enum exl_ffn_act ffn_act;
	float final_softcap;   /* soft-capping of the logits; 0: none */

	/* Mixture of experts (n_expert 0: a dense FFN) */
	int n_expert;
	int n_expert_used;
	int n_ff_exp;
	float expert_weights_scale; /* routing weights times this after their
				     * normalization; 1 for none */
	/* gpt-oss: the top k of the router's raw logits, weighted by their
	 * own softmax (llama.cpp's SOFTMAX_WEIGHT gating); else the top k of
	 * the softmax over all experts, renormalized */
	bool moe_softmax_topk;

	/* An encoder (bert, nomic-bert): attention sees the whole text, norms
	 * are LayerNorms (rms_eps their epsilon) after each block, the output
	 * is the last block's hidden states (no logits): it only embeds. */
	bool encoder;
	bool pos_embd;         /* bert: learned absolute positions, no rope */
};

/* Whether layer il attends through the sliding window. */
static inline bool exl_layer_is_swa(const struct exl_hparams *hp, int il)
{
	return hp->n_swa > 0 && (hp->swa_layers[il / 64] >> (il % 64) & 1);
}

static inline bool exl_layer_has_rope(const struct exl_hparams *hp, int il)
{
	return hp->no_rope_step <= 0 || (il + 1) % hp->no_rope_step != 0;
}

struct exl_model;

/* Loads path (GGUF) onto backend be, which the model does not own.
 * NULL with a message (naming the missing or misshaped tensor, the
 * unsupported architecture ...) on failure. */
struct exl_model *exl_model_load(const char *path, struct exl_backend *be,
				 char *err, size_t errlen);
void exl_model_free(struct exl_model *m);

/* Whether m's file is still the one loaded.  0: unchanged.  1: replaced by
 * another file (a new inode, as `mv` does): m goes on with the old one,
 * which its mapping keeps; reload to use the new.  2: changed in place
 * (`cp` over it, truncated or rewritten) or gone from under the mapping:
 * its weights are no longer what was loaded, and from now on every
 * forward pass of m fails, saying so.  why says which, for the log. */
int exl_model_check_file(struct exl_model *m, char *why, size_t whylen);

/* Sets the longest sequence m will run (n_ctx_train until set): phi3's
 * 128k variants rotate with their long rope factors when it is beyond the
 * context they were first trained for (rope.scaling.original_context_
 * length), with the short ones within it, as llama.cpp does for its
 * context size.  Call it before the first forward pass: K/V cached under
 * the other factors would not match. */
void exl_model_set_context(struct exl_model *m, int n_ctx);

const struct exl_hparams *exl_model_hparams(const struct exl_model *m);

/* How embeddings of m are pooled when a job does not say: the file's
 * <arch>.pooling_type (1 mean, 2 cls, 3 last), else mean. */
enum exl_pooling {
	EXL_POOL_NONE = 0, /* a generation job */
	EXL_POOL_MEAN,
	EXL_POOL_CLS,
	EXL_POOL_LAST,
};
enum exl_pooling exl_model_pooling(const struct exl_model *m);
/* The input embedding row of token id (dequantized, before gemma's
 * scaling) into out[n_embd].  -1 with a message for an id out of range. */
int exl_model_token_row(struct exl_model *m, int32_t id, float *out, char *err, size_t errlen);
const struct exl_tokenizer *exl_model_tokenizer(const struct exl_model *m);
const struct exl_backend *exl_model_backend(const struct exl_model *m);
const struct gguf_file *exl_model_gguf(const struct exl_model *m);
size_t exl_model_weight_bytes(const struct exl_model *m);

/* A KV cache shaped for m holding n_tokens positions in pages of page_size.
 * When every layer of m attends through a sliding window, the cache gives
 * a sequence's pages behind the window back (exl_kvcache_set_window).  When
 * m mixes sliding-window and global layers, the local ones get a pool of
 * their own (exl_kvcache_create_mixed) as large as the global one: pages
 * behind the window go back, but no memory is saved. */
struct exl_kvcache *exl_model_kvcache_create(struct exl_model *m, int n_tokens, int page_size,
					     char *err, size_t errlen);
/* The pool size for kv_tokens unset (exl_kvcache_auto_tokens), for the
 * cache exl_model_kvcache_create_for(m, ..., page_size, n_seqs, chunk)
 * makes: a mixed sliding-window model's global pool gets what its local
 * pool leaves of the device's free memory, counted at its global layers
 * only. */
int exl_model_kv_auto_tokens(struct exl_model *m, int page_size, int n_seqs, int chunk,
			     int64_t max_tokens, char *err, size_t errlen);
/* The same, with the local pool of a mixed model sized for n_seqs
 * sequences at once that reserve up to chunk positions ahead (an engine's
 * max_jobs and max_batch_tokens: exl_kvcache_local_span each), never more
 * than n_tokens. */
struct exl_kvcache *exl_model_kvcache_create_for(struct exl_model *m, int n_tokens,
						 int page_size, int n_seqs, int chunk, char *err,
						 size_t errlen);

/* One batched step.  Token i is tokens[i] at position seqs[seq[i]]->n_pos +
 * (its index among seq[i]'s tokens in this batch); a sequence's tokens must
 * be consecutive in the batch and in order.  The caller has reserved room
 * (exl_kv_seq_reserve) for every sequence; forward commits the positions.
 * For each token with want_logits[i] set, in batch order, n_vocab logits are
 * written to logits (host memory), row after row.  Returns 0, or -1 with a
 * message. */
struct exl_batch {
	int n_tokens;
	const int32_t *tokens;
	const int32_t *seq;          /* index into seqs */
	const bool *want_logits;
	int n_seqs;
	struct exl_kv_seq *const *seqs;
};

int exl_model_forward(struct exl_model *m, struct exl_kvcache *kv, const struct exl_batch *b,
		      float *logits, char *err, size_t errlen);

/* What a batch may bring and take besides tokens and logits; every field
 * optional (NULL: none). */
struct exl_batch_io {
	/* embd_rows[i] set: token i's input is that host row of n_embd floats
	 * (in token_embd's space: gemma's scaling still applies) in place of
	 * its token's embedding; tokens[i] is then only what the KV cache keys
	 * the position by, and may be any value. */
	const float *const *embd_rows;
	/* want_hidden[i]: token i's final hidden state (after the output norm,
	 * before the output matrix: what llama.cpp pools for embeddings) is
	 * written to hidden, n_embd floats a row, in batch order of the tokens
	 * that want it. */
	const bool *want_hidden;
	float *hidden;
};

/* exl_model_forward with io (NULL: the same as exl_model_forward). */
int exl_model_forward_io(struct exl_model *m, struct exl_kvcache *kv, const struct exl_batch *b,
			 const struct exl_batch_io *io, float *logits, char *err, size_t errlen);

#endif
