/* LoRA adapters in llama.cpp's GGUF adapter format, bound to a loaded base
 * model, and applied per sequence inside one batched forward pass.
 *
 * A file is an adapter when general.type is "adapter" and adapter.type is
 * "lora"; adapter.lora.alpha is required (llama.cpp reads a missing one as
 * 0, "no scaling", which a file written for it never means).  Its tensors
 * are pairs "<base tensor>.lora_a" [ne0 = in, ne1 = r] and
 * "<base tensor>.lora_b" [ne0 = r, ne1 = out]: as matrices, A is r rows of
 * `in` and B is `out` rows of r, so W x + s * B (A x) with s = scale *
 * alpha / r (r of that pair), as llama.cpp's build_lora_mm.  The base
 * tensors that take one are the dense attention and FFN projections of
 * each block (attn_q/k/v/output, ffn_gate/up/down); anything else is
 * refused with its name.
 *
 * The base matmul runs once for the whole batch; each adapter's low-rank
 * product runs over only the rows of the sequences that use it (their
 * inputs gathered, the result scattered back with each row's own scale),
 * as Punica and S-LoRA do: jobs with different adapters, or none, share a
 * batch.
 */
#ifndef EXL_LORA_H
#define EXL_LORA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

struct exl_model;

/* The projections of a block an adapter may touch. */
enum exl_lora_target {
	EXL_LORA_Q, EXL_LORA_K, EXL_LORA_V, EXL_LORA_O,
	EXL_LORA_GATE, EXL_LORA_UP, EXL_LORA_DOWN,
	EXL_LORA_N_TARGETS,
};

#define EXL_LORA_MAX_RANK 4096
#define EXL_LORA_MAX_PER_JOB 8      /* adapters one job may use at once */

/* One A/B pair: a.data NULL when the adapter leaves that weight alone. */
struct exl_lora_pair {
	struct exl_weight a;        /* [r][in], F32 */
	struct exl_weight b;        /* [out][r], F32 */
	float alpha_over_r;         /* alpha / r, or 1 when alpha is 0 */
};

struct exl_lora {
	char *path;
	char arch[32];
	float alpha;
	int max_rank;
	int n_pairs;                /* pairs present */
	int n_layer;
	struct exl_lora_pair *pair; /* [n_layer][EXL_LORA_N_TARGETS] */
	const struct exl_model *base;
	struct exl_backend *be;
	float *host;                /* every A and B as F32, one allocation */
	const void **uploads;
	int n_uploads;
	uint64_t id;                /* unique in the process: keys prefix pages */
	atomic_int refs;
};

/* Loads the adapter at path for model m (on m's backend): its
 * architecture and every pair's shape must match m.  NULL with a message
 * naming what does not. */
struct exl_lora *exl_lora_load(const char *path, const struct exl_model *m, char *err,
			       size_t errlen);
/* Reference counting: the loader holds the first reference; each job
 * using the adapter holds one.  The last unref frees it. */
void exl_lora_ref(struct exl_lora *l);
void exl_lora_unref(struct exl_lora *l);

/* Which adapters a sequence runs under, and at which scales. */
struct exl_lora_use {
	struct exl_lora *lora;
	float scale;
};

struct exl_lora_set {
	int n;
	struct exl_lora_use use[EXL_LORA_MAX_PER_JOB];
	uint64_t key;               /* exl_lora_set_key(); 0 when n is 0 */
};

/* A hash of the set's adapter ids and scales (in order); 0 for none.
 * Prefix-cache pages computed under one set are never shared with
 * another. */
uint64_t exl_lora_set_key(const struct exl_lora_set *s);

/* The forward pass's side (lora_apply.c).  exl_lora_batch_plan() groups
 * the batch's rows by adapter (b->seqs[j]->lora of each token's sequence),
 * both for all n rows and for the n_out rows the last layer keeps
 * (rows_out, indices of the batch); 0 when no sequence has an adapter.
 * exl_lora_batch_apply() then adds, for each target t[k] of layer il,
 * every planned adapter's product: y[k][nr][out] += s * B (A x[nr][in]),
 * where the nr rows are the whole batch or, when gathered, the rows_out.
 * The targets share the input x (q, k and v; gate and up): each adapter
 * gathers its rows of x once for all of them. */
struct exl_batch;
struct exl_lora_batch;

int exl_lora_batch_plan(struct exl_model *m, const struct exl_batch *b,
			const int32_t *rows_out, int n_out, char *err, size_t errlen);
void exl_lora_batch_apply(struct exl_model *m, int il, const float *x, bool gathered, int n_t,
			  const enum exl_lora_target *t, float *const *y);
/* Whether the current batch uses any adapter. */
bool exl_lora_batch_active(const struct exl_model *m);
void exl_lora_batch_free(struct exl_model *m);

#endif
