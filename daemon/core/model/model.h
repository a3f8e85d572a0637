/* A llama-family model: hyperparameters and weights bound from GGUF, and the
 * batched forward pass over the paged KV cache.
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

enum exl_arch { EXL_ARCH_LLAMA, EXL_ARCH_QWEN2 };

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
	int n_ff;
	int n_rot;
	float rms_eps;
	float rope_freq_base;
	float rope_freq_scale; /* 1 / linear scaling factor */
	bool rope_neox;
	bool tied_embeddings;
};

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

const struct exl_hparams *exl_model_hparams(const struct exl_model *m);
const struct exl_tokenizer *exl_model_tokenizer(const struct exl_model *m);
const struct gguf_file *exl_model_gguf(const struct exl_model *m);
size_t exl_model_weight_bytes(const struct exl_model *m);

/* A KV cache shaped for m holding n_tokens positions in pages of page_size. */
struct exl_kvcache *exl_model_kvcache_create(struct exl_model *m, int n_tokens, int page_size,
					     char *err, size_t errlen);

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

#endif
