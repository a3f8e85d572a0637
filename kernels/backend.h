/* The compute backend: one table of ops that the CPU and the CUDA backends
 * both provide.  The model code calls only these, so a forward pass is
 * written once.
 *
 * Memory: every float / weight / KV pointer passed to an op is "backend
 * memory": host memory for the CPU backend, device memory for CUDA.  Buffers
 * come from ops->alloc, weights from ops->upload (the CPU backend returns the
 * host pointer itself, so mmapped GGUF weights are used in place).
 *
 * Ops run in order on the backend's queue (the CPU backend runs each op to
 * completion on its worker pool before returning; CUDA enqueues on its
 * stream).  Only ops->download and ops->sync wait for the queue.
 *
 * Matrix convention, as GGUF stores weights: a weight W has `rows` rows of
 * `cols` elements each (ne[1] = rows, ne[0] = cols); matmul computes, for each
 * of the n input vectors x[i] (cols floats), y[i][r] = dot(W[r], x[i]).
 */
#ifndef EXL_BACKEND_H
#define EXL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct exl_backend;

/* How a backend holds a matmul weight's bytes (struct exl_weight.layout). */
enum exl_weight_layout {
	EXL_LAYOUT_ROWS = 0,  /* the GGUF's rows, row_bytes apart */
	/* CPU: groups of 8 rows, block by block, the last group padded to 8
	 * rows (kernels/cpu/repack.h); a group takes 8 * row_bytes, so rows
	 * from a multiple of 8 on start where they did in ROWS */
	EXL_LAYOUT_ROWS8 = 1,
};

struct exl_weight {
	uint32_t type;     /* enum exl_dtype */
	int64_t rows;      /* output features */
	int64_t cols;      /* input features, elements per row */
	size_t row_bytes;  /* bytes per row, exl_dtype_row_bytes(type, cols) */
	const void *data;  /* backend memory */
	uint32_t layout;   /* enum exl_weight_layout (ops->repack) */
};

/* The paged KV cache of one layer, as the backend sees it.  K and V are F16.
 * Page p holds page_size consecutive positions of one sequence, laid out
 * [n_kv_heads][page_size][head_dim]. */
struct exl_kv_layer {
	void *k;
	void *v;
	int page_size;
	int n_kv_heads;
	int head_dim;
	int n_pages; /* pages in the pool */
	/* The page table of the batch this layer reads and writes through:
	 * 0, the batch's page_table; 1, its local_page_table (the layers
	 * that keep their K/V in a pool of their own: sliding-window layers
	 * of a model that mixes them with global ones). */
	int table;
};

/* What a batched forward pass runs: n_tokens tokens from n_seqs sequences.
 * Token t belongs to sequence seq[t] and sits at position pos[t] of it; its
 * K/V go to page page_table[seq[t] * max_pages + pos[t] / page_size] (of
 * local_page_table for a KV layer whose table is 1), and it
 * attends to positions 0..pos[t] of its own sequence (causal).  Arrays are
 * host memory; ops->set_batch copies what the backend needs before the ops
 * that use it. */
struct exl_batch_desc {
	int n_tokens;
	const int32_t *pos;        /* [n_tokens] */
	const int32_t *seq;        /* [n_tokens] */
	int n_seqs;
	int max_pages;             /* row length of page_table */
	const int32_t *page_table; /* [n_seqs][max_pages] */
	/* The second table, for KV layers with table 1, laid out as
	 * page_table; NULL (and local_max_pages 0) when no layer uses it.
	 * Entries before a token's sliding window may be -1. */
	int local_max_pages;
	const int32_t *local_page_table;
};

/* Pair i of a head at position pos turns by
 *   pos * freq_scale * freq_base^(-2i / n_rot) / freq_factors[i]
 * and its cosine and sine are multiplied by attn_factor.  With YaRN
 * (ext_factor > 0) the angle blends that with the unscaled one,
 *   a * freq_scale * (1 - m) + a * m,   a = pos * freq_base^(-2i / n_rot) / ff,
 * m = ext_factor * (1 below pair ramp_lo, 0 past ramp_hi, linear between);
 * attn_factor then carries YaRN's magnitude scale too (the model sets it). */
struct exl_rope_params {
	int n_rot;          /* rotated dims per head (<= head_dim) */
	float freq_base;
	float freq_scale;   /* linear scaling: angle uses pos * freq_scale */
	bool neox;          /* halves layout (x[i], x[i + n_rot/2]); else adjacent pairs */
	/* Per-pair divisors of the angle (llama 3.1's rope_freqs, phi3's
	 * rope_factors_long/short): n_rot / 2 floats of backend memory that
	 * stay valid and unchanged while the model is loaded, or NULL. */
	const float *freq_factors;
	float attn_factor;  /* 1 for none (phi3's rope.scaling.attn_factor) */
	float ext_factor;   /* YaRN: 0 for none, else the blend's weight (1) */
	float ramp_lo, ramp_hi; /* YaRN: exl_rope_yarn_ramp_dims */
	/* Llama 4's attention temperature (mistral3's queries): cosine and
	 * sine at position pos also times 1 + temp_scale * ln(floor(pos /
	 * temp_floor) + 1); temp_scale 0 for none.  The whole head rotates
	 * where it is used (n_rot == head_dim), so all of q is scaled. */
	float temp_scale;
	int temp_floor;
};

/* Whether two rope calls build the same angle table. */
static inline bool exl_rope_params_same(const struct exl_rope_params *a,
					const struct exl_rope_params *b)
{
	return a->n_rot == b->n_rot && a->freq_base == b->freq_base &&
	       a->freq_scale == b->freq_scale && a->neox == b->neox &&
	       a->freq_factors == b->freq_factors && a->attn_factor == b->attn_factor &&
	       a->ext_factor == b->ext_factor && a->ramp_lo == b->ramp_lo &&
	       a->ramp_hi == b->ramp_hi && a->temp_scale == b->temp_scale &&
	       a->temp_floor == b->temp_floor;
}

/* How attention scores a query against a key, and which keys it sees. */
struct exl_attn_params {
	float scale;        /* score = q . k * scale */
	float softcap;      /* > 0: score = softcap * tanh(score / softcap) (gemma2) */
	int window;         /* > 0: a token at position p sees only positions
			     * p - window + 1 .. p (sliding window); 0: all of 0..p */
	/* gpt-oss's attention sinks: per query head a logit that joins the
	 * softmax's denominator (no value: it takes weight from the keys);
	 * [n_heads] floats of backend memory, or NULL for none */
	const float *sinks;
	/* Encoders (BERT): a token sees every position its sequence has up
	 * to the last of it in this batch, not only those before it; the
	 * whole sequence must be in the batch */
	bool non_causal;
};

/* What a backend holds, for status reports and for sizing the KV pool.
 * weight_bytes: what ops->upload holds (CUDA: device copies; CPU: the
 * caller's bytes, the mapped GGUF file, used in place).  buffer_bytes: what
 * ops->alloc holds (KV pools, activations): device memory for CUDA, host RAM
 * for the CPU.  free_bytes / total_bytes: the device's own memory as the
 * device reports it now (every process's use counted), or 0 and 0 when the
 * backend has no memory of its own to run out of (the CPU). */
struct exl_backend_mem {
	char device[16];       /* "cpu", "cuda:0" */
	uint64_t weight_bytes;
	uint64_t buffer_bytes;
	uint64_t free_bytes;
	uint64_t total_bytes;
	uint64_t repacked_bytes; /* weights held in a layout of the backend's own (ops->repack) */
};

struct exl_backend_ops {
	const char *name;
	/* Rows a matmul takes for about the price of one (its memory-bound
	 * regime): the engine verifies speculative proposals only while a
	 * pass's decode rows stay within it. */
	int cheap_rows;
	void (*destroy)(struct exl_backend *be);

	/* Memory.  alloc returns zeroed backend memory or NULL. */
	void *(*alloc)(struct exl_backend *be, size_t bytes);
	void (*free)(struct exl_backend *be, void *p);
	/* Makes host bytes usable as backend memory.  CPU: returns src itself
	 * (no copy); CUDA: allocates and copies.  NULL on failure. */
	const void *(*upload)(struct exl_backend *be, const void *src, size_t bytes);
	void (*unload)(struct exl_backend *be, const void *p);
	/* Optional (NULL: every weight stays as uploaded).  For an uploaded
	 * matmul weight w (w->data what upload returned, layout ROWS): where
	 * the backend's kernels read this type faster in a layout of their
	 * own, replaces w->data with a copy in it (w->layout says which) and
	 * unloads the upload; unload(w->data) frees the copy.  Returns 0
	 * (w replaced, or kept as it was) or -1 with the message in err (w
	 * kept, still uploaded).  The caller must not take rows of w from
	 * other than a multiple of 8 afterwards (EXL_LAYOUT_ROWS8). */
	int (*repack)(struct exl_backend *be, struct exl_weight *w, char *err, size_t errlen);
	int (*download)(struct exl_backend *be, void *dst_host, const void *src, size_t bytes);
	int (*copy_in)(struct exl_backend *be, void *dst, const void *src_host, size_t bytes);
	int (*sync)(struct exl_backend *be);

	/* Per forward pass: the token layout for kv_store and attention. */
	int (*set_batch)(struct exl_backend *be, const struct exl_batch_desc *b);

	/* y[n][w->rows] = x[n][w->cols] . W^T */
	void (*matmul)(struct exl_backend *be, const struct exl_weight *w,
		       const float *x, float *y, int n);
	/* Optional (NULL: count matmul calls): y[i] = x . W[i]^T for count
	 * (at most 4) weights of one input, the same outputs as count matmul
	 * calls; CPU: one hand-off to the pool for all of them. */
	void (*matmul_n)(struct exl_backend *be, const struct exl_weight *const *w, int count,
			 const float *x, float *const *y, int n);
	/* y[n][dim] = embedding rows of w for tokens[n] (tokens in host memory) */
	void (*embed)(struct exl_backend *be, const struct exl_weight *w,
		      const int32_t *tokens, float *y, int n);
	/* y[i] = x[i] / rms(x[i]) * w, rows of dim */
	void (*rmsnorm)(struct exl_backend *be, float *y, const float *x,
			const float *w, int n, int dim, float eps);
	/* y[i][j] += b[j] */
	void (*add_bias)(struct exl_backend *be, float *y, const float *b, int n, int dim);
	/* y[k] += x[k], k < count */
	void (*add)(struct exl_backend *be, float *y, const float *x, size_t count);
	/* g[k] = silu(g[k]) * u[k], k < count */
	void (*swiglu)(struct exl_backend *be, float *g, const float *u, size_t count);
	/* In place on x[n][n_heads][head_dim], position of row i = batch pos[i]. */
	void (*rope)(struct exl_backend *be, float *x, int n, int n_heads, int head_dim,
		     const struct exl_rope_params *p);
	/* Writes k, v ([n][n_kv_heads][head_dim]) of every batch token into its page. */
	void (*kv_store)(struct exl_backend *be, const struct exl_kv_layer *kv,
			 const float *k, const float *v);
	/* out[n][n_heads][head_dim] = softmax(score(q, K)) . V over each token's
	 * causal window in its sequence's pages (p->window limits it further;
	 * pages wholly before a token's window are never read and may be -1 in
	 * the page table); head h reads KV head h / (n_heads / n_kv_heads)
	 * (GQA). */
	void (*attention)(struct exl_backend *be, const struct exl_kv_layer *kv,
			  const float *q, float *out, int n_heads,
			  const struct exl_attn_params *p);
	/* dst[i][:] = src[rows[i]][:] for i < n, dim floats per row (rows host memory) */
	void (*gather_rows)(struct exl_backend *be, float *dst, const float *src,
			    const int32_t *rows, int n, int dim);
	/* In place softmax over each row of dim floats */
	void (*softmax)(struct exl_backend *be, float *x, int n, int dim);

	/* Fills *m.  Unlike every other op it may be called from any thread
	 * while the owner uses the backend (the counts are read atomically).
	 * 0, or -1 with a message (the device cannot be queried; *m then has
	 * the device name and the counts, free and total 0). */
	int (*mem_info)(struct exl_backend *be, struct exl_backend_mem *m, char *err,
			size_t errlen);
	/* dst[0..bytes) = src[0..bytes), both backend memory, queued like the
	 * ops (no host round trip, no wait).  -1 when it cannot be queued. */
	int (*copy)(struct exl_backend *be, void *dst, const void *src, size_t bytes);
	/* The message of the backend's last failed op (a queueing backend may
	 * report it only at sync), or NULL when none failed; valid until the
	 * next op.  Every backend has it, so callers never ask which backend
	 * they hold. */
	const char *(*error)(const struct exl_backend *be);

	/* x[k] *= s, k < count */
	void (*scale)(struct exl_backend *be, float *x, float s, size_t count);
	/* x[k] = cap * tanh(x[k] / cap), k < count (gemma2's final logits) */
	void (*softcap)(struct exl_backend *be, float *x, float cap, size_t count);
	/* g[k] = gelu(g[k]) * u[k], k < count; gelu in its tanh form */
	void (*geglu)(struct exl_backend *be, float *g, const float *u, size_t count);
	/* y[rows[i]][:] += w[i] * x[i][:] for i < n, dim floats per row; rows
	 * and w host memory, no row twice in one call (mixture of experts: one
	 * expert's outputs back to the tokens that chose it). */
	void (*add_rows_scaled)(struct exl_backend *be, float *y, const float *x,
				const int32_t *rows, const float *w, int n, int dim);
	/* g[k] = exl_swiglu_oai(g[k], u[k], alpha, limit), k < count (gpt-oss's
	 * experts: the gate clamped above, up both ways, elem_math.h) */
	void (*swiglu_oai)(struct exl_backend *be, float *g, const float *u, size_t count,
			   float alpha, float limit);
	/* y[i] = (x[i] - mean(x[i])) / sqrt(var(x[i]) + eps) * w + b, rows
	 * of dim (BERT's LayerNorm; b may be NULL) */
	void (*layernorm)(struct exl_backend *be, float *y, const float *x, const float *w,
			  const float *b, int n, int dim, float eps);
	/* x[k] = gelu(x[k]), k < count, the tanh form (BERT's FFN) */
	void (*gelu)(struct exl_backend *be, float *x, size_t count);
};

struct exl_backend {
	const struct exl_backend_ops *ops;
	/* backend-specific state follows in the implementation's struct */
};

/* The CPU backend with a persistent pool of n_threads workers (0: one per
 * online core).  NULL with a message on failure. */
struct exl_backend *exl_backend_cpu_create(int n_threads, char *err, size_t errlen);
int exl_backend_cpu_threads(const struct exl_backend *be);
/* The matmul kernel set the CPU backend runs ("avx512vnni", ...: the one
 * EXLD_CPU_KERNELS names, or the best this CPU has), or NULL for a backend
 * that is not the CPU one. */
const char *exl_backend_cpu_matmul_kernels(const struct exl_backend *be);

/* The CUDA backend on device `device`.  Always declared: without a CUDA
 * build, or without a device, it returns NULL with a message saying why. */
struct exl_backend *exl_backend_cuda_create(int device, char *err, size_t errlen);

#endif
