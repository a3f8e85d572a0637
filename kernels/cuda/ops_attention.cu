/* The paged KV cache ops: kv_store (F32 -> F16 into each token's page) and
 * attention (causal, GQA, over the pages of each token's sequence).
 *
 * Page layout (kernels/backend.h): page p holds page_size positions of one
 * sequence as [n_kv_heads][page_size][head_dim] F16, so position `pos` of KV
 * head h lives at element
 *   ((page * n_kv_heads + h) * page_size + pos % page_size) * head_dim
 * with page = page_table[seq * max_pages + pos / page_size] (the batch's local
 * page table for a KV layer whose table is 1). */
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/formats/elem_math.h"

#define KV_THREADS 256
#define ATT_THREADS 128
#define ATT_MAX_HEAD_DIM 512
#define ATT_ACC (ATT_MAX_HEAD_DIM / ATT_THREADS)

/* Element offset of (position p, KV head h) in the pool, given the page
 * table row of p's sequence. */
static __device__ __forceinline__ size_t kv_offset(const int32_t *row, int p, int h,
						   int n_kv_heads, int page_size, int head_dim)
{
	const size_t page = (size_t)row[p / page_size];

	return ((page * (size_t)n_kv_heads + (size_t)h) * (size_t)page_size +
		(size_t)(p % page_size)) * (size_t)head_dim;
}

/* ---- kv_store --------------------------------------------------------- */

static __global__ void kv_store_kernel(uint16_t *K, uint16_t *V, const float *k, const float *v,
				       const int32_t *pos, const int32_t *seq, const int32_t *pt,
				       int max_pages, size_t count, int n_kv_heads, int page_size,
				       int head_dim)
{
	for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < count;
	     idx += (size_t)gridDim.x * blockDim.x) {
		const int d = (int)(idx % (size_t)head_dim);
		const size_t th = idx / (size_t)head_dim; /* t * n_kv_heads + h */
		const int h = (int)(th % (size_t)n_kv_heads);
		const size_t t = th / (size_t)n_kv_heads;
		const int32_t *row = pt + (size_t)seq[t] * (size_t)max_pages;
		const size_t dst = kv_offset(row, pos[t], h, n_kv_heads, page_size, head_dim) +
				   (size_t)d;

		K[dst] = exl_fp32_to_fp16(k[idx]);
		V[dst] = exl_fp32_to_fp16(v[idx]);
	}
}

void cu_op_kv_store(struct exl_backend *be, const struct exl_kv_layer *kv, const float *k,
		    const float *v)
{
	struct cuda_backend *cb = cuda_of(be);
	const struct cuda_batch *bt = &cb->batch;
	size_t count;

	if (!cu_enter(cb) || !cu_check_kv(cb, kv, 1, "kv_store"))
		return;
	const struct cuda_page_table *pt = &bt->tables[kv->table];

	count = (size_t)bt->n_tokens * (size_t)kv->n_kv_heads * (size_t)kv->head_dim;
	kv_store_kernel<<<cu_grid(count, KV_THREADS), KV_THREADS, 0, cb->stream>>>(
		(uint16_t *)kv->k, (uint16_t *)kv->v, k, v, bt->d_pos, bt->d_seq,
		pt->dev, pt->max_pages, count, kv->n_kv_heads, kv->page_size,
		kv->head_dim);
	cu_launched(cb, "kv_store");
}

/* ---- attention -------------------------------------------------------- */

/* One block per (token, head).  The token's window, positions start..pos
 * (start 0 unless a sliding window cuts it), goes by in tiles of ATT_THREADS positions: each thread scores one position,
 * then the tile's softmax weights are folded into the running (online)
 * softmax: maximum m, denominator l, and the weighted sum of V rows in acc,
 * of which thread i holds dimensions i, i + ATT_THREADS, ...
 *
 * K/V are read with __half2float: F16 -> F32 is exact, so this equals any
 * correct conversion (the rounding one, F32 -> F16, is elem.h's). */
static __global__ void __launch_bounds__(ATT_THREADS)
attention_kernel(const float *q, float *out, const __half *K, const __half *V,
		 const int32_t *pos, const int32_t *seq, const int32_t *pt, int max_pages,
		 int n_heads, int n_kv_heads, int head_dim, int page_size, float scale,
		 float softcap, int window)
{
	__shared__ float sq[ATT_MAX_HEAD_DIM];
	__shared__ float sw[ATT_THREADS];
	__shared__ float sh[32];
	const int t = blockIdx.x / n_heads;
	const int h = blockIdx.x % n_heads;
	const int kvh = h / (n_heads / n_kv_heads);
	const int32_t *row = pt + (size_t)seq[t] * (size_t)max_pages;
	const int len = pos[t] + 1;
	const int start = window > 0 && len > window ? len - window : 0;
	const float *qh = q + ((size_t)t * (size_t)n_heads + (size_t)h) * (size_t)head_dim;
	float acc[ATT_ACC];
	float m = -INFINITY;
	float l = 0.0f;

#pragma unroll
	for (int i = 0; i < ATT_ACC; i++)
		acc[i] = 0.0f;
	for (int d = threadIdx.x; d < head_dim; d += ATT_THREADS)
		sq[d] = qh[d];
	__syncthreads();

	for (int base = start; base < len; base += ATT_THREADS) {
		const int p = base + (int)threadIdx.x;
		const int n_tile = min(ATT_THREADS, len - base);
		float s = -INFINITY;

		if (p < len) {
			const __half *kp = K + kv_offset(row, p, kvh, n_kv_heads, page_size,
							 head_dim);
			float dot = 0.0f;

			for (int d = 0; d < head_dim; d++)
				dot += sq[d] * __half2float(kp[d]);
			s = dot * scale;
			if (softcap > 0.0f)
				s = exl_softcap(s, softcap);
		}
		/* Position base (< len) is in every tile's first slot, so m_new is
		 * finite from the first tile on. */
		const float m_new = fmaxf(m, block_max(s, sh));
		const float w = exl_softmax_weight(s, m_new);
		const float corr = exl_softmax_rescale(m, m_new);

		sw[threadIdx.x] = w;
		/* block_sum's barriers also publish sw to the whole block. */
		l = l * corr + block_sum(w, sh);
#pragma unroll
		for (int i = 0; i < ATT_ACC; i++) {
			const int d = (int)threadIdx.x + i * ATT_THREADS;

			if (d < head_dim) {
				float a = acc[i] * corr;

				for (int j = 0; j < n_tile; j++) {
					const __half *vp = V + kv_offset(row, base + j, kvh,
									 n_kv_heads, page_size,
									 head_dim);

					a += sw[j] * __half2float(vp[d]);
				}
				acc[i] = a;
			}
		}
		m = m_new;
		__syncthreads(); /* sw is rewritten by the next tile */
	}

	float *o = out + ((size_t)t * (size_t)n_heads + (size_t)h) * (size_t)head_dim;
#pragma unroll
	for (int i = 0; i < ATT_ACC; i++) {
		const int d = (int)threadIdx.x + i * ATT_THREADS;

		if (d < head_dim)
			o[d] = acc[i] / l;
	}
}

void cu_op_attention(struct exl_backend *be, const struct exl_kv_layer *kv, const float *q,
		     float *out, int n_heads, const struct exl_attn_params *p)
{
	struct cuda_backend *cb = cuda_of(be);
	const struct cuda_batch *bt = &cb->batch;
	size_t blocks;

	if (!cu_enter(cb))
		return;
	if (!p || !isfinite(p->scale) || !(p->softcap >= 0.0f) || !isfinite(p->softcap) ||
	    p->window < 0) {
		cu_fail(cb, "attention: missing or bad parameters");
		return;
	}
	if (!cu_check_kv(cb, kv, p->window, "attention"))
		return;
	if (n_heads <= 0 || n_heads % kv->n_kv_heads) {
		cu_fail(cb, "attention: %d heads do not share %d KV heads evenly", n_heads,
			kv->n_kv_heads);
		return;
	}
	if (kv->head_dim > ATT_MAX_HEAD_DIM) {
		cu_fail(cb, "attention: head_dim %d is above the CUDA kernel's limit of %d",
			kv->head_dim, ATT_MAX_HEAD_DIM);
		return;
	}
	const struct cuda_page_table *pt = &bt->tables[kv->table];

	blocks = (size_t)bt->n_tokens * (size_t)n_heads;
	if (blocks > 0x7fffffffu) {
		cu_fail(cb, "attention: %d tokens x %d heads is too many blocks", bt->n_tokens,
			n_heads);
		return;
	}
	attention_kernel<<<(unsigned)blocks, ATT_THREADS, 0, cb->stream>>>(
		q, out, (const __half *)kv->k, (const __half *)kv->v, bt->d_pos, bt->d_seq,
		pt->dev, pt->max_pages, n_heads, kv->n_kv_heads, kv->head_dim,
		kv->page_size, p->scale, p->softcap, p->window);
	cu_launched(cb, "attention");
}
