/* Inside the CUDA backend: its state and the helpers its .cu files share.
 * C++ (nvcc) only. */
#ifndef EXL_CUDA_INTERNAL_H
#define EXL_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The headers under kernels/ are C: their functions have C linkage. */
extern "C" {
#include "kernels/backend.h"
}
#include "kernels/mem_track.h"

/* Host arrays the op table passes (the batch layout, token ids, row lists,
 * copy_in's bytes) may be reused by the caller as soon as the op returns, so
 * they are copied into pinned memory and from there, queued on the stream,
 * to the device.  Nothing waits for those copies inside a forward pass.
 *
 * A stage holds one array that later ops keep reading (the batch layout):
 * valid until the next put to it, which first waits on `ev` for the device to
 * have read the previous contents (already done when a sync came between). */
struct cuda_stage {
	void *host; /* pinned */
	void *dev;
	size_t cap;
	cudaEvent_t ev;
	bool ev_live;
};

/* The batch layout of the last set_batch, on both sides. */
/* The arena holds the arrays that only their own op reads (embed's tokens,
 * gather_rows' rows, copy_in): each put takes fresh room, and the arena
 * starts over once the stream is known to be idle (download/sync).  When it
 * runs out within a pass it waits for the stream, the one place an op may. */
struct cuda_arena {
	void *host; /* pinned */
	void *dev;
	size_t cap;
	size_t off;
};

/* One page table of the batch: host copy for validation, device copy (in
 * its stage) for the kernels. */
struct cuda_page_table {
	int max_pages;         /* 0: the batch has none (the local table, unused) */
	int32_t *host;
	size_t cap;
	const int32_t *dev;
	/* The last KV geometry and window it was checked against. */
	int checked_page_size;
	int checked_n_pages;
	int checked_window;
};

struct cuda_batch {
	int n_tokens;
	int n_seqs;
	int max_pos;           /* largest position in the batch */
	int32_t *pos;          /* host copies, for validation */
	int32_t *seq;
	size_t cap_pos;        /* one capacity per array: they grow separately */
	size_t cap_seq;
	const int32_t *d_pos;  /* device copies (inside the stages below) */
	const int32_t *d_seq;
	/* per sequence, 1 + its last position in the batch (non-causal
	 * attention's end): host, and device copy */
	int32_t *seq_end;
	size_t cap_end;
	const int32_t *d_seq_end;
	/* [0] page_table, [1] local_page_table: a KV layer reads tables[table] */
	struct cuda_page_table tables[2];
};

/* RoPE's cos/sin table for the current batch ([n_tokens][n_rot / 2] float2
 * on the device), valid until the next set_batch or other parameters. */
struct cuda_rope_table {
	void *tab;
	size_t cap;
	bool valid;
	struct exl_rope_params p; /* what it was made for */
	unsigned last_use;
};

/* The kernel launches of a pass are recorded, not queued one by one, and
 * go to the stream a chunk at a time as a CUDA graph (graph.cu): a decode
 * step is hundreds of small kernels, and launching each on its own costs
 * the host more than the GPU spends running it.  A chunk seen before with
 * the same kernels and shapes replays its instantiated graph, with the
 * arguments that changed (pointers, lengths) patched in.  Copies are not
 * recorded (graph.cu says why). */
#define CU_MAX_ARGS 20
#define CU_ARG_BYTES 192
#define CU_CHUNK_FIRST 16  /* nodes in a pass's first chunk: the GPU starts soon */
#define CU_CHUNK 64        /* ... and in every later one */
#define CU_GRAPHS 128      /* chunks kept as graphs (least recently used goes) */

/* A kernel launch: its arguments packed at their alignment, unused bytes 0. */
struct cu_node {
	const void *fn;
	dim3 grid, block;
	unsigned n_args, args_len;
	uint16_t arg_off[CU_MAX_ARGS];
	alignas(16) unsigned char args[CU_ARG_BYTES];
};

/* One chunk's graph: the nodes it was built from (or, seen once, the
 * nodes it ran eagerly), its instance and its nodes' handles. */
struct cu_graph_entry {
	uint64_t key;  /* hash of the chunk's position and its nodes' shapes */
	unsigned chunk;
	int n;
	unsigned last_use;
	struct cu_node *nodes;
	cudaGraph_t graph;
	cudaGraphExec_t exec;  /* NULL: seen once, ran eagerly */
	cudaGraphNode_t *handles;
};

struct cu_recorder {
	bool on;          /* EXLD_CUDA_GRAPHS=0 turns it off: every launch eager */
	struct cu_node nodes[CU_CHUNK];
	int n;
	unsigned chunk;   /* chunks flushed since the stream was last idle */
	unsigned clock;
	struct cu_graph_entry graphs[CU_GRAPHS];
	/* what happened, for EXLD_CUDA_GRAPH_STATS */
	uint64_t n_eager, n_built, n_replayed, n_patched_nodes, n_nodes;
};

struct cuda_backend {
	struct exl_backend base;
	int device;
	int sm_count;
	cudaStream_t stream;
	cublasHandle_t cublas;

	bool failed;
	char err[512];

	/* Device memory handed out by upload (weights) and alloc (KV pools,
	 * activations), for ops->mem_info. */
	struct exl_mem_track weights;
	struct exl_mem_track buffers;

	struct cuda_batch batch;
	/* Two tables: gemma's local and global layers rotate with different
	 * bases, and alternate. */
	struct cuda_rope_table rope[2];
	unsigned rope_uses;
	struct cuda_stage st_pos, st_seq, st_table, st_ltable, st_end;
	struct cuda_arena arena;

	/* matmul scratch: a dequantized weight tile and the activations, both
	 * as 16-bit floats for cublasGemmEx. */
	void *w16;
	size_t w16_cap;
	void *x16;
	size_t x16_cap;
	/* attention's partial results, when a window is cut into splits */
	void *att_part;
	size_t att_part_cap;
	/* decode's activations quantized to 8 bits (kernels/cuda/qdot.h) */
	void *xq;
	size_t xq_cap;
	/* Which x the xq scratch holds, so that consecutive matmuls of the
	 * same input (q, k, v; gate, up) quantize it once, and none when the
	 * rmsnorm before them made it (ops_elementwise.cu): valid while no op
	 * but such matmuls entered since (op_seq counts every cu_enter) and
	 * none of them wrote over x. */
	uint64_t op_seq;
	int mmvq_tpr_log2; /* 0: by the row's width */
	uint64_t xq_seq;
	const float *xq_x;
	int xq_n, xq_cols;

	struct cu_recorder rec;
};

static inline struct cuda_backend *cuda_of(struct exl_backend *be)
{
	return (struct cuda_backend *)be;
}

/* Records the first failure (printf-style); later ones are dropped so the
 * message names the cause, not its consequences. */
void cu_fail(struct cuda_backend *cb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* false (and the backend failed) when e is an error. */
bool cu_ok(struct cuda_backend *cb, cudaError_t e, const char *what);
bool cu_blas_ok(struct cuda_backend *cb, cublasStatus_t s, const char *what);
/* Start of every op: false when the backend has failed already; makes the
 * backend's device current on the calling thread. */
bool cu_enter(struct cuda_backend *cb);

/* Sends what the recorder holds to the stream (as a graph, or launch by
 * launch).  Every op that queues work on the stream other than through
 * cu_launch / cu_copy, or waits for it, calls this first.  false when the
 * backend has failed (what was recorded is then dropped). */
bool cu_flush(struct cuda_backend *cb);
/* The stream is idle (download, sync): the next pass starts at chunk 0. */
void cu_rec_idle(struct cuda_backend *cb);
void cu_rec_free(struct cuda_backend *cb);
/* Records node (or, with graphs off, launches it now). */
bool cu_submit(struct cuda_backend *cb, const struct cu_node *nd, const char *what);
/* bytes from src to dst on the stream, after what was recorded (graph.cu
 * says why copies are not recorded): src is pinned host memory
 * (cudaMemcpyHostToDevice) or device memory. */
bool cu_copy(struct cuda_backend *cb, void *dst, const void *src, size_t bytes,
	     cudaMemcpyKind dir, const char *what);

template <typename P>
static inline bool cu_pack_arg(struct cu_node *nd, P v)
{
	const unsigned a = (unsigned)alignof(P);
	const unsigned off = (nd->args_len + a - 1) & ~(a - 1);

	if (nd->n_args >= CU_MAX_ARGS || off + sizeof(P) > CU_ARG_BYTES)
		return false;
	memcpy(nd->args + off, &v, sizeof(P));
	nd->arg_off[nd->n_args++] = (uint16_t)off;
	nd->args_len = off + (unsigned)sizeof(P);
	return true;
}

/* kernel<<<grid, block, 0, stream>>>(args...), recorded: each argument is
 * converted to the kernel's parameter type, as a launch would. */
template <typename... P, typename... A>
static inline bool cu_launch(struct cuda_backend *cb, const char *what, void (*kernel)(P...),
			     dim3 grid, dim3 block, A... args)
{
	static_assert(sizeof...(P) == sizeof...(A), "cu_launch: wrong number of arguments");
	struct cu_node nd = {};
	bool ok = true;

	nd.fn = (const void *)kernel;
	nd.grid = grid;
	nd.block = block;
	const bool packed[] = { true, cu_pack_arg<P>(&nd, (P)args)... };
	for (bool b : packed)
		ok = ok && b;
	if (!ok) {
		cu_fail(cb, "%s: kernel arguments over %d bytes", what, CU_ARG_BYTES);
		return false;
	}
	return cu_submit(cb, &nd, what);
}

/* Copies bytes of host memory to the stage's device buffer (queued on the
 * stream).  The device pointer, or NULL with the backend failed. */
void *cu_stage_put(struct cuda_backend *cb, struct cuda_stage *st, const void *src,
		   size_t bytes, const char *what);

/* Copies bytes of host memory into fresh arena room on the device (queued on
 * the stream): the device pointer, or NULL with the backend failed. */
void *cu_arena_put(struct cuda_backend *cb, const void *src, size_t bytes, const char *what);
/* Fresh pinned arena room for bytes (the caller queues the copy out of it). */
void *cu_arena_host(struct cuda_backend *cb, size_t bytes, const char *what);

/* Makes *buf at least bytes long (device memory, contents not kept).  May
 * synchronize the stream when it has to grow a buffer in use. */
bool cu_scratch(struct cuda_backend *cb, void **buf, size_t *cap, size_t bytes,
		const char *what);

/* Checks the page table of the current batch against a KV layer: every page
 * any token reads or writes is inside the pool. */
bool cu_check_kv(struct cuda_backend *cb, const struct exl_kv_layer *kv, int window,
		 const char *op);

/* Input vectors up to which a matmul runs the custom matrix x vector
 * kernels (ops_matmul.cu); above, cuBLAS. */
#define GEMV_MAX_N 8

/* The xq scratch for n vectors of cols: n * cols int8, then, from this
 * 16-byte aligned offset, n * cols / 32 float4 (quant_x.cuh). */
static inline size_t cu_xq_bytes(int n, int cols)
{
	return ((size_t)n * (size_t)cols + 15) & ~(size_t)15;
}

/* Grid size for a grid-stride loop over count items, block threads each. */
static inline unsigned cu_grid(size_t count, unsigned block)
{
	size_t g = (count + block - 1) / block;

	if (g > 65535u * 16u)
		g = 65535u * 16u;
	return g ? (unsigned)g : 1u;
}

/* The ops (ops_*.cu). */
void cu_op_matmul(struct exl_backend *be, const struct exl_weight *w, const float *x, float *y,
		  int n);
void cu_op_embed(struct exl_backend *be, const struct exl_weight *w, const int32_t *tokens,
		 float *y, int n);
void cu_op_rmsnorm(struct exl_backend *be, float *y, const float *x, const float *w, int n,
		   int dim, float eps);
void cu_op_add_bias(struct exl_backend *be, float *y, const float *b, int n, int dim);
void cu_op_add(struct exl_backend *be, float *y, const float *x, size_t count);
void cu_op_swiglu(struct exl_backend *be, float *g, const float *u, size_t count);
void cu_op_rope(struct exl_backend *be, float *x, int n, int n_heads, int head_dim,
		const struct exl_rope_params *p);
void cu_op_kv_store(struct exl_backend *be, const struct exl_kv_layer *kv, const float *k,
		    const float *v);
void cu_op_attention(struct exl_backend *be, const struct exl_kv_layer *kv, const float *q,
		     float *out, int n_heads, const struct exl_attn_params *p);
void cu_op_gather_rows(struct exl_backend *be, float *dst, const float *src,
		       const int32_t *rows, int n, int dim);
void cu_op_softmax(struct exl_backend *be, float *x, int n, int dim);
void cu_op_scale(struct exl_backend *be, float *x, float s, size_t count);
void cu_op_softcap(struct exl_backend *be, float *x, float cap, size_t count);
void cu_op_geglu(struct exl_backend *be, float *g, const float *u, size_t count);
void cu_op_swiglu_oai(struct exl_backend *be, float *g, const float *u, size_t count, float alpha,
		      float limit);
void cu_op_gelu(struct exl_backend *be, float *x, size_t count);
void cu_op_layernorm(struct exl_backend *be, float *y, const float *x, const float *w,
		     const float *b, int n, int dim, float eps);
void cu_op_add_rows_scaled(struct exl_backend *be, float *y, const float *x,
			   const int32_t *rows, const float *w, int n, int dim);

#endif
