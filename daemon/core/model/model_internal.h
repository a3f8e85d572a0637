/* The model's insides, shared by model_hparams.c, model_load.c,
 * model_forward.c and the adapters' lora_load.c and lora_apply.c only. */
#ifndef EXL_MODEL_INTERNAL_H
#define EXL_MODEL_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "daemon/core/model/model.h"

struct gguf_file;
struct exl_lora_batch;

/* One block's weights.  Fused tensors (phi3's attn_qkv and ffn_up holding
 * gate and up) are bound as views of their rows, and experts as views of
 * their slice of the 3-D expert tensors, so the forward pass sees plain
 * matrices either way. */
struct exl_layer_weights {
	const float *attn_norm; /* [n_embd] */
	struct exl_weight wq;   /* [n_head * head_dim][n_embd] */
	struct exl_weight wk;   /* [n_head_kv * head_dim][n_embd] */
	struct exl_weight wv;
	const float *bq;        /* biases (qwen2), NULL when absent */
	const float *bk;
	const float *bv;
	const float *q_norm;    /* [head_dim] per-head norms (qwen3, gemma3) */
	const float *k_norm;
	struct exl_weight wo;   /* [n_embd][n_head * head_dim] */
	const float *bo;        /* gpt-oss: attention output bias [n_embd] */
	const float *sinks;     /* gpt-oss: attention sinks [n_head] */
	const float *attn_post_norm; /* gemma: of the attention output */
	const float *ffn_norm;
	struct exl_weight w_gate; /* [n_ff][n_embd] */
	struct exl_weight w_up;
	struct exl_weight w_down; /* [n_embd][n_ff] */
	const float *ffn_post_norm;  /* gemma: of the FFN output */
	/* mixture of experts (n_expert > 0): the router and each expert's
	 * gate [n_ff_exp][n_embd], up, down [n_embd][n_ff_exp] */
	struct exl_weight w_router; /* [n_expert][n_embd] */
	struct exl_weight *exp_gate;
	struct exl_weight *exp_up;
	struct exl_weight *exp_down;
	/* gpt-oss's biases: the router's [n_expert], and each expert's, row
	 * e of [n_expert][n_ff_exp] (gate, up) or [n_expert][n_embd] (down);
	 * NULL when absent */
	const float *b_router;
	const float *exp_b_gate;
	const float *exp_b_up;
	const float *exp_b_down;
	/* encoders: LayerNorms (weight, bias) after the attention and after
	 * the FFN, and the FFN's biases (NULL when absent) */
	const float *attn_out_norm, *attn_out_norm_b;
	const float *out_norm, *out_norm_b;
	const float *b_up, *b_down;
};

/* Per-pass buffers, grown with the batch; backend memory unless noted. */
struct exl_scratch {
	int cap_tokens;
	float *x;      /* residual stream [n][n_embd] */
	float *x_out;  /* residual of the rows that want logits, last layer */
	float *xn;     /* normed input [n][n_embd] */
	float *q;      /* [n][n_head * head_dim] */
	float *k;      /* [n][n_head_kv * head_dim] */
	float *v;
	float *att;    /* attention output [n][n_head * head_dim] */
	float *proj;   /* output of wo / w_down [n][n_embd] */
	float *gate;   /* [n][n_ff] (MoE: n_ff_exp) */
	float *up;
	/* mixture of experts */
	float *xe;     /* one expert's tokens' normed inputs [n][n_embd] */
	float *router; /* router logits [n][n_expert] */
	float *router_host;   /* host: the same, downloaded */
	int32_t *exp_count;   /* host: tokens routed to each expert */
	int32_t *exp_rows;    /* host: [n_expert][n] the batch rows of each expert */
	float *exp_w;         /* host: [n_expert][n] and their weights */
	float *logits; /* [cap_logits][n_vocab] */
	int cap_logits;
	/* host */
	int32_t *pos;
	int32_t *seq;
	int32_t *rows;       /* batch rows that want logits or hidden states */
	int32_t *tok_in;     /* tokens with embd_rows' positions as 0 */
	int32_t *hid_rows;   /* of rows: those that want hidden states */
	int32_t *log_rows;   /* of rows: those that want logits */
	int32_t *seq_start;  /* first batch row of each sequence, -1 when none */
	int32_t *seq_count;
	int cap_seqs;
	int32_t *page_table;
	size_t cap_page_table;
};

struct exl_model {
	struct exl_hparams hp;
	struct exl_backend *be;
	struct gguf_file *gguf;
	char *path;
	struct stat file_st;      /* the file as it was loaded */
	int guarded;              /* mappings in mapguard: the file's, then its parts' */
	atomic_int file_fault;    /* the file changed under the mapping */
	struct exl_tokenizer *tok;

	struct exl_weight tok_embd; /* [n_vocab][n_embd] */
	/* encoders: token type 0's row (type_embd), learned positions (bert)
	 * and the LayerNorm of the embeddings */
	struct exl_weight type_embd; /* data NULL when absent */
	struct exl_weight pos_embd;  /* [n_ctx_train][n_embd]; data NULL: none */
	const float *tok_norm, *tok_norm_b;
	const float *output_norm;
	struct exl_weight output;   /* tok_embd when tied */
	struct exl_layer_weights *layers;
	struct exl_weight *experts; /* every layer's expert views, one allocation */

	/* rope frequency factors: llama 3.1's rope_freqs, or phi3's for long
	 * and short contexts; rope_factors is the one the rope uses */
	const float *rope_freqs;
	const float *rope_long;
	const float *rope_short;
	const float *rope_factors;

	/* Every pointer ops->upload returned, for unload. */
	const void **uploads;
	int n_uploads;
	size_t weight_bytes;

	struct exl_scratch s;
	struct exl_lora_batch *lora_batch; /* the adapters' rows and scratch (lora_apply.c) */
};

/* Fills hp from f's metadata; -1 with a message for a missing or out of range
 * key or an unsupported architecture. */
int exl_hparams_read(const struct gguf_file *f, struct exl_hparams *hp, char *err, size_t errlen);

/* Binds and uploads every tensor of m->hp's layout from m->gguf. */
int exl_model_bind_tensors(struct exl_model *m, char *err, size_t errlen);

void exl_model_scratch_free(struct exl_model *m);

/* y[i] = x . W[i]^T for count weights of one input, in one call where the
 * backend has it (the CPU's pool takes them in one hand-off). */
void exl_model_matmul_x(struct exl_model *m, const struct exl_weight *const *w, int count,
			const float *x, float *const *y, int n);

/* An encoder's embeddings and blocks over the batch's n tokens (the batch
 * set on the backend), leaving the last block's output in x; 0, or -1
 * with a message (model_encoder.c). */
int exl_model_encoder_pass(struct exl_model *m, struct exl_kvcache *kv, const int32_t *tokens,
			   int n, float *x, char *err, size_t errlen);

/* Sets m->rope_factors for contexts of up to n_ctx positions per sequence. */
void exl_model_pick_rope_factors(struct exl_model *m, int n_ctx);

#endif
