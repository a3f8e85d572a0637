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
#define ATT_THREADS 256
#define ATT_MAX_HEAD_DIM 512

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
	cu_launch(cb, "kv_store", kv_store_kernel, cu_grid(count, KV_THREADS), KV_THREADS,
			(uint16_t *)kv->k, (uint16_t *)kv->v, k, v, bt->d_pos, bt->d_seq, pt->dev,
			pt->max_pages, count, kv->n_kv_heads, kv->page_size, kv->head_dim);
}

/* ---- attention -------------------------------------------------------- */

/* One block per (token, KV head, group of up to GB of the query heads that
 * share it, split of the window).  A decode step has one token and a few
 * KV heads, so a long window is cut into splits that run side by side;
 * their partial results (running maximum m, denominator l, unnormalized
 * weighted sum of V) are then merged by attention_merge_kernel.  Prefill
 * batches have blocks enough without splits, and write the output directly.
 *
 * Within a block each warp takes every ATT_WARPS-th position of the split
 * and keeps its own online softmax: lane i holds dimensions i, i + 32, ...
 * (DPL of them) of the K and V rows (coalesced reads) and of every head's
 * q and sum, so a position's K and V rows are read once for the group.
 * At the end the warps' (m, l, sum) merge through shared memory.
 *
 * K/V are read with __half2float: F16 -> F32 is exact, so this equals any
 * correct conversion (the rounding one, F32 -> F16, is elem.h's). */
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_MIN_SPLIT 32
#define ATT_BLOCKS 256

/* The sums over the warp of GB values a lane (GB a power of two, up to
 * 32), in 5 + GB - 2 shuffles rather than 5 GB: at each halving step a
 * lane keeps the half of the values its side of the exchange owns and adds
 * the other side's.  Lane i ends with the sum of value i >> (5 - log2 GB). */
template <int GB>
static __device__ __forceinline__ float warp_sum_transposed(float (&v)[GB], int lane)
{
	int off = 16;

#pragma unroll
	for (int half = GB / 2; half >= 1; half /= 2, off /= 2) {
		const bool up = lane & off;

#pragma unroll
		for (int k = 0; k < half; k++) {
			const float send = up ? v[k] : v[half + k];
			const float keep = up ? v[half + k] : v[k];

			v[k] = keep + __shfl_xor_sync(0xffffffffu, send, off);
		}
	}
	float s = v[0];

	for (; off >= 1; off /= 2)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	return s;
}

/* Head h's sink (gpt-oss) joins a finished (m, l): returns the factor the
 * sum takes and updates l, as ggml's softmax with sinks; 1 without. */
static __device__ __forceinline__ float add_sink(const float *sinks, int h, float m, float *l)
{
	if (!sinks)
		return 1.0f;
	const float sink = sinks[h];
	const float mx = fmaxf(sink, m);
	const float f = exl_softmax_rescale(m, mx);

	*l = *l * f + exl_softmax_weight(sink, mx);
	return f;
}

template <int DPL, int GB>
static __global__ void __launch_bounds__(ATT_THREADS)
attention_kernel(const float *q, float *out, float *part, float2 *part_ml, const __half *K,
		 const __half *V, const int32_t *pos, const int32_t *seq, const int32_t *pt,
		 int max_pages, int n_heads, int n_kv_heads, int head_dim, int page_size,
		 float scale, float softcap, const float *sinks, const int32_t *seq_end, int window,
		 int split_len)
{
	__shared__ float wacc[ATT_WARPS][GB][32 * DPL];
	__shared__ float wm[ATT_WARPS][GB], wl[ATT_WARPS][GB];
	const int group = n_heads / n_kv_heads;
	const int n_gb = (group + GB - 1) / GB;
	const int gb = blockIdx.x % n_gb;
	const int kvh = (blockIdx.x / n_gb) % n_kv_heads;
	const int t = blockIdx.x / (n_gb * n_kv_heads);
	const int h0 = kvh * group + gb * GB;
	const int n_g = min(GB, group - gb * GB);
	const int split = blockIdx.y, n_splits = gridDim.y;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int32_t *row = pt + (size_t)seq[t] * (size_t)max_pages;
	/* non-causal (seq_end given): every position its sequence has here */
	const int len = seq_end ? seq_end[seq[t]] : pos[t] + 1;
	const int start = window > 0 && len > window ? len - window : 0;
	const int c0 = start + split * split_len;
	const int c1 = min(len, c0 + split_len);
	float qr[DPL][GB], acc[DPL][GB];

#pragma unroll
	for (int g = 0; g < GB; g++) {
		const float *qh = q + ((size_t)t * (size_t)n_heads + (size_t)(h0 + g)) *
					      (size_t)head_dim;

#pragma unroll
		for (int i = 0; i < DPL; i++) {
			const int d = lane + 32 * i;

			qr[i][g] = g < n_g && d < head_dim ? qh[d] : 0.0f;
			acc[i][g] = 0.0f;
		}
	}

	/* After the transposed sum, lane i holds head (i >> HS)'s score, and
	 * keeps that head's running maximum and denominator. */
	constexpr int HS = 5 - (GB >= 8 ? 3 : GB >= 4 ? 2 : GB >= 2 ? 1 : 0);
	const int my_g = lane >> HS;
	float my_m = -INFINITY, my_l = 0.0f;

#pragma unroll 2
	for (int p = c0 + warp; p < c1; p += ATT_WARPS) {
		const size_t off = kv_offset(row, p, kvh, n_kv_heads, page_size, head_dim);
		float kd[DPL], vd[DPL], dot[GB];

#pragma unroll
		for (int i = 0; i < DPL; i++) {
			const int d = lane + 32 * i;

			kd[i] = d < head_dim ? __half2float(K[off + (size_t)d]) : 0.0f;
			vd[i] = d < head_dim ? __half2float(V[off + (size_t)d]) : 0.0f;
		}
#pragma unroll
		for (int g = 0; g < GB; g++) {
			dot[g] = 0.0f;
#pragma unroll
			for (int i = 0; i < DPL; i++)
				dot[g] += qr[i][g] * kd[i];
		}
		float sc = warp_sum_transposed<GB>(dot, lane) * scale;

		if (softcap > 0.0f)
			sc = exl_softcap(sc, softcap);
		const float m_new = fmaxf(my_m, sc);
		const float my_corr = exl_softmax_rescale(my_m, m_new);
		const float my_w = exl_softmax_weight(sc, m_new);

		my_l = my_l * my_corr + my_w;
		my_m = m_new;
#pragma unroll
		for (int g = 0; g < GB; g++) {
			const float corr = __shfl_sync(0xffffffffu, my_corr, g << HS);
			const float w = __shfl_sync(0xffffffffu, my_w, g << HS);

#pragma unroll
			for (int i = 0; i < DPL; i++)
				acc[i][g] = acc[i][g] * corr + w * vd[i];
		}
	}

#pragma unroll
	for (int g = 0; g < GB; g++) {
#pragma unroll
		for (int i = 0; i < DPL; i++)
			wacc[warp][g][lane + 32 * i] = acc[i][g];
	}
	if ((lane & ((1 << HS) - 1)) == 0) {
		wm[warp][my_g] = my_m;
		wl[warp][my_g] = my_l;
	}
	__syncthreads();

	for (int k = threadIdx.x; k < n_g * head_dim; k += ATT_THREADS) {
		const int g = k / head_dim, d = k % head_dim;
		const size_t th = (size_t)t * (size_t)n_heads + (size_t)(h0 + g);
		float mx = -INFINITY, lx = 0.0f, o = 0.0f;

		for (int w = 0; w < ATT_WARPS; w++)
			mx = fmaxf(mx, wm[w][g]);
		for (int w = 0; w < ATT_WARPS; w++) {
			/* 0 for a warp that had no position (m = -inf) */
			const float c = exl_softmax_rescale(wm[w][g], mx);

			lx += wl[w][g] * c;
			o += wacc[w][g][d] * c;
		}
		if (n_splits == 1) {
			const float f = add_sink(sinks, h0 + g, mx, &lx);

			out[th * (size_t)head_dim + (size_t)d] = o * f / lx;
		} else {
			part[(th * (size_t)n_splits + (size_t)split) * (size_t)head_dim + (size_t)d] = o;
			if (d == 0)
				part_ml[th * (size_t)n_splits + (size_t)split] = make_float2(mx, lx);
		}
	}
}

/* One block per (token, head): the splits' partial sums, each rescaled to
 * the largest maximum; a split that held no position (m = -inf) weighs 0. */
static __global__ void __launch_bounds__(ATT_THREADS)
attention_merge_kernel(float *out, const float *part, const float2 *part_ml, int n_splits,
		       int head_dim, int n_heads, const float *sinks)
{
	const size_t th = blockIdx.x;
	const float2 *ml = part_ml + th * (size_t)n_splits;
	float m = -INFINITY, l = 0.0f;

	for (int s = 0; s < n_splits; s++)
		m = fmaxf(m, ml[s].x);
	for (int s = 0; s < n_splits; s++)
		l += ml[s].y * exl_softmax_rescale(ml[s].x, m);
	const float f = add_sink(sinks, (int)(th % (size_t)n_heads), m, &l);

	for (int d = threadIdx.x; d < head_dim; d += ATT_THREADS) {
		float o = 0.0f;

		for (int s = 0; s < n_splits; s++)
			o += part[(th * (size_t)n_splits + (size_t)s) * (size_t)head_dim + (size_t)d] *
			     exl_softmax_rescale(ml[s].x, m);
		out[th * (size_t)head_dim + (size_t)d] = o * f / l;
	}
}

void cu_op_attention(struct exl_backend *be, const struct exl_kv_layer *kv, const float *q,
		     float *out, int n_heads, const struct exl_attn_params *p)
{
	struct cuda_backend *cb = cuda_of(be);
	const struct cuda_batch *bt = &cb->batch;

	if (!cu_enter(cb))
		return;
	if (!p || !isfinite(p->scale) || !(p->softcap >= 0.0f) || !isfinite(p->softcap) ||
	    p->window < 0 || (p->non_causal && p->window)) {
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
	const int group = n_heads / kv->n_kv_heads;
	/* lane dims and heads a block: registers for DPL * GB sums */
	const int dpl = kv->head_dim <= 64 ? 2 : kv->head_dim <= 128 ? 4 : kv->head_dim <= 256 ? 8 : 16;
	const int gb_max = dpl <= 4 ? 8 : dpl == 8 ? 4 : 2;
	const int gbs = group >= gb_max ? gb_max : group > 2 ? (group > 4 ? 8 : 4) : group;
	const size_t units = (size_t)bt->n_tokens * (size_t)kv->n_kv_heads *
			     (size_t)((group + gbs - 1) / gbs);
	/* the longest window of the batch, cut into splits while there are
	 * fewer than ATT_BLOCKS blocks and each keeps ATT_MIN_SPLIT positions */
	int max_len = bt->max_pos + 1;
	if (p->window > 0 && max_len > p->window)
		max_len = p->window;
	int n_splits = 1;
	if (units < ATT_BLOCKS) {
		const int by_len = (max_len + ATT_MIN_SPLIT - 1) / ATT_MIN_SPLIT;
		const int by_blocks = (int)((ATT_BLOCKS + units - 1) / units);

		n_splits = by_len < by_blocks ? by_len : by_blocks;
		if (n_splits < 1)
			n_splits = 1;
	}
	const int split_len = (max_len + n_splits - 1) / n_splits;
	float *part = NULL;
	float2 *part_ml = NULL;

	if (units > 0x7fffffffu) {
		cu_fail(cb, "attention: %d tokens x %d KV heads is too many blocks", bt->n_tokens,
			kv->n_kv_heads);
		return;
	}
	if (n_splits > 1) {
		const size_t th = (size_t)bt->n_tokens * (size_t)n_heads * (size_t)n_splits;
		const size_t part_bytes = (th * (size_t)kv->head_dim * sizeof(float) + 15) &
					  ~(size_t)15;

		if (!cu_scratch(cb, &cb->att_part, &cb->att_part_cap,
				part_bytes + th * sizeof(float2), "attention"))
			return;
		part = (float *)cb->att_part;
		part_ml = (float2 *)((uint8_t *)cb->att_part + part_bytes);
	}
	const dim3 grid((unsigned)units, (unsigned)n_splits);
	bool launched;
#define ATT_LAUNCH(D, G)                                                                        \
	launched = cu_launch(cb, "attention", attention_kernel<D, G>, grid, ATT_THREADS, q, out,  \
			     part, part_ml, (const __half *)kv->k, (const __half *)kv->v,       \
			     bt->d_pos, bt->d_seq, pt->dev, pt->max_pages, n_heads,              \
			     kv->n_kv_heads, kv->head_dim, kv->page_size, p->scale, p->softcap,  \
			     p->sinks, p->non_causal ? bt->d_seq_end : NULL, p->window, split_len)
	switch (dpl * 100 + gbs) {
	case 201: ATT_LAUNCH(2, 1); break;
	case 202: ATT_LAUNCH(2, 2); break;
	case 204: ATT_LAUNCH(2, 4); break;
	case 208: ATT_LAUNCH(2, 8); break;
	case 401: ATT_LAUNCH(4, 1); break;
	case 402: ATT_LAUNCH(4, 2); break;
	case 404: ATT_LAUNCH(4, 4); break;
	case 408: ATT_LAUNCH(4, 8); break;
	case 801: ATT_LAUNCH(8, 1); break;
	case 802: ATT_LAUNCH(8, 2); break;
	case 804: ATT_LAUNCH(8, 4); break;
	case 1601: ATT_LAUNCH(16, 1); break;
	default: ATT_LAUNCH(16, 2); break;
	}
#undef ATT_LAUNCH
	if (!launched || n_splits == 1)
		return;
	cu_launch(cb, "attention: merge", attention_merge_kernel,
			(unsigned)((size_t)bt->n_tokens * (size_t)n_heads), ATT_THREADS, out, part,
			part_ml, n_splits, kv->head_dim, n_heads, p->sinks);
}
