/* The "amx" kernel set's own kernels: Q8_0, Q4_0, IQ4_NL, Q6_K and IQ4_XS
 * on AMX-INT8 tiles (matmul_amx_body.h, here over the real tile
 * instructions), and for decode-shaped calls the same arithmetic without
 * tiles (for all but Q6_K the kernels avx512vnni runs: its own from the
 * repacked groups, avx2vnni's from GGUF rows; matmul_amx_decode.c for
 * Q6_K); F16 and BF16 on AMX-BF16 tiles for every n
 * (matmul_amx_bf16_body.h).  Compiled with
 * -mamx-tile -mamx-int8 -mamx-bf16 and the AVX-512 flags; matmul.c fills
 * every other type of the set from the avx512vnni kernels (Q4_K and Q5_K
 * too: on the Xeon measured they beat tiles) and only picks the set when
 * CPUID reports AMX and the kernel granted this process the tile data
 * state (cpu_features.c). */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/cpu/matmul_amx_bf16.h"
#include "kernels/cpu/matmul_amx_decode.h"
#include "kernels/cpu/matmul_amx_helpers.h"
#include "kernels/cpu/matmul_x86.h"

#define EXL_AMX_LOADCONFIG(cfg) _tile_loadconfig(cfg)
#define EXL_AMX_LOADD(t, base, stride) _tile_loadd(t, base, (long)(stride))
#define EXL_AMX_STORED(t, base, stride) _tile_stored(t, base, (long)(stride))
#define EXL_AMX_ZERO(t) _tile_zero(t)
#define EXL_AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define EXL_AMX_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define EXL_AMX_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define EXL_AMX_STAGE_F16 exl_amx_stage_f16
#define EXL_AMX_RELEASE() _tile_release()

/* Vector versions of the body's portable helpers, the same results (its
 * tile emulator test runs the portable ones). */
#define EXL_AMX_UNPACK_Q4 unpack_q4
#define EXL_AMX_PACK_B pack_b
#define EXL_AMX_PACK_R8 pack_r8
#define EXL_AMX_SCALES scales
#define EXL_AMX_POST16 post16
#define EXL_AMX_PACK_Q6_K pack_q6_K
#define EXL_AMX_PACK_IQ4_XS pack_iq4_xs
#define EXL_AMX_IPOST16 ipost16

static inline void unpack_q4(const uint8_t *w, size_t row_bytes, int64_t b, int nr, int fmt, int8_t *out);
static inline void pack_b(const int8_t *src, size_t stride, int nr, int8_t *lo, int8_t *hi);
static inline void pack_r8(const uint8_t *g0, const uint8_t *g1, int64_t b, int fmt, int8_t *lo, int8_t *hi,
			   float *dw);
static inline void scales(const uint8_t *w, size_t row_bytes, size_t bs, int64_t b, int nr, float *dw);
static inline void post16(float *acc, const int32_t *dots, float dx, const float *dw);
static inline void ipost16(int32_t *isum, const int32_t *dots, const int32_t *sc);
static inline void pack_q6_K(const uint8_t *w, size_t row_bytes, int64_t b, int h, int s, int nr,
			     int8_t out[4][4 * 64]);
static inline void pack_iq4_xs(const uint8_t *w, size_t row_bytes, int64_t b, int j, int nr, int8_t *lo,
			       int8_t *hi);

#include "kernels/cpu/matmul_amx_body.h"
#include "kernels/cpu/matmul_amx_bf16_body.h"

static inline __mmask16 rows_mask(int nr)
{
	return nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
}

/* r * stride for r < 16 as int32 gather indices (stride < 2^27 here: a
 * row of a tile-sized matrix, or a weight row of under 4M elements) */
static inline __m512i row_index(size_t stride)
{
	return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
				  _mm512_set1_epi32((int)stride));
}

/* IQ4_NL's 16 levels, for a byte shuffle by nibble */
static inline __m128i iq4nl_table(void)
{
	return _mm_set_epi64x((long long)EXL_IQ4NL_HI, (long long)EXL_IQ4NL_LO);
}

static inline void unpack_q4(const uint8_t *w, size_t row_bytes, int64_t b, int nr, int fmt, int8_t *out)
{
	const __m128i lo4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8), tab = iq4nl_table();

	for (int r = 0; r < 16; r++) {
		__m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128();

		if (r < nr) {
			const block_q4_0 *blk = (const block_q4_0 *)(const void *)(w + (size_t)r * row_bytes) + b;
			__m128i q = _mm_loadu_si128((const __m128i *)(const void *)blk->qs);

			lo = _mm_and_si128(q, lo4);
			hi = _mm_and_si128(_mm_srli_epi16(q, 4), lo4);
			if (fmt == EXL_AMX_FMT_IQ4_NL) {
				lo = _mm_shuffle_epi8(tab, lo);
				hi = _mm_shuffle_epi8(tab, hi);
			} else {
				lo = _mm_sub_epi8(lo, eight);
				hi = _mm_sub_epi8(hi, eight);
			}
		}
		_mm256_storeu_si256((__m256i *)(void *)(out + 32 * r), _mm256_set_m128i(hi, lo));
	}
}

static inline void pack_b(const int8_t *src, size_t stride, int nr, int8_t *lo, int8_t *hi)
{
	if (stride > (size_t)1 << 26) {
		exl_amx_pack_b(src, stride, nr, lo, hi);
		return;
	}
	const __m512i idx = row_index(stride);
	const __mmask16 k = rows_mask(nr);

	/* B row i: dword i of each of the 16 rows */
	for (int i = 0; i < 8; i++)
		_mm512_storeu_si512(i < 4 ? lo + 64 * i : hi + 64 * (i - 4),
				    _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, src + 4 * i, 1));
}

/* The repacked groups hold each B row's halves as they are: two loads,
 * no gather (Q4_0, IQ4_NL: and the nibbles split into levels). */
static inline void pack_r8(const uint8_t *g0, const uint8_t *g1, int64_t b, int fmt, int8_t *lo, int8_t *hi,
			   float *dw)
{
	const int q4 = fmt != EXL_AMX_FMT_Q8_0;
	const size_t bs = q4 ? 144 : 272;
	const uint8_t *p0 = g0 + bs * (size_t)b, *p1 = g1 ? g1 + bs * (size_t)b : NULL;
	/* the lanes of g1's rows, zero where it is absent */
	const __mmask64 keep = p1 ? ~(__mmask64)0 : (__mmask64)0xffffffffu;

	_mm256_storeu_ps(dw, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p0)));
	_mm256_storeu_ps(dw + 8, p1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p1))
				    : _mm256_setzero_ps());
	for (int i = 0; i < (q4 ? 4 : 8); i++) {
		__m512i v = _mm512_inserti64x4(_mm512_setzero_si512(),
					       _mm256_loadu_si256((const __m256i *)(const void *)(p0 + 16 + 32 * i)), 0);

		if (p1)
			v = _mm512_inserti64x4(v, _mm256_loadu_si256((const __m256i *)(const void *)(p1 + 16 + 32 * i)),
					       1);
		if (!q4) {
			_mm512_storeu_si512(i < 4 ? lo + 64 * i : hi + 64 * (i - 4), v);
			continue;
		}
		const __m512i lo4 = _mm512_set1_epi8(0x0f), k8 = _mm512_set1_epi8(8);
		const __m512i l = _mm512_and_si512(v, lo4), h = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);

		if (fmt == EXL_AMX_FMT_IQ4_NL) {
			const __m512i tab = _mm512_broadcast_i32x4(iq4nl_table());

			_mm512_storeu_si512(lo + 64 * i, _mm512_maskz_shuffle_epi8(keep, tab, l));
			_mm512_storeu_si512(hi + 64 * i, _mm512_maskz_shuffle_epi8(keep, tab, h));
		} else {
			_mm512_storeu_si512(lo + 64 * i, _mm512_maskz_sub_epi8(keep, l, k8));
			_mm512_storeu_si512(hi + 64 * i, _mm512_maskz_sub_epi8(keep, h, k8));
		}
	}
}

static inline void scales(const uint8_t *w, size_t row_bytes, size_t bs, int64_t b, int nr, float *dw)
{
	if (row_bytes > (size_t)1 << 26) {
		exl_amx_scales(w, row_bytes, bs, b, nr, dw);
		return;
	}
	/* the dword at each block start holds d in its low half */
	__m512i d32 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rows_mask(nr), row_index(row_bytes),
						  w + bs * (size_t)b, 1);

	_mm512_storeu_ps(dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32)));
}

static inline void post16(float *acc, const int32_t *dots, float dx, const float *dw)
{
	__m512 s = _mm512_mul_ps(_mm512_set1_ps(dx), _mm512_loadu_ps(dw));

	_mm512_storeu_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(dots)), s,
					      _mm512_loadu_ps(acc)));
}

/* Q6_K's four groups 2k + s of half h for 16 rows: per dword i, the
 * rows' ql dwords at 64h + l0 + 4i (groups k = 0, 2: low and high nibbles)
 * and 64h + 32 + l0 + 4i (k = 1, 3), and their qh dword at 32h + l0 + 4i
 * (bits 2k, 2k + 1), gathered once for the four. */
static inline void pack_q6_K(const uint8_t *w, size_t row_bytes, int64_t b, int h, int s, int nr,
			     int8_t out[4][4 * 64])
{
	if (row_bytes > (size_t)1 << 26) {
		exl_amx_pack_q6_K(w, row_bytes, b, h, s, nr, out);
		return;
	}
	const uint8_t *blk = w + sizeof(block_q6_K) * (size_t)b;
	const uint8_t *ql = blk + offsetof(block_q6_K, ql) + 64 * h + 16 * s;
	const uint8_t *qh = blk + offsetof(block_q6_K, qh) + 32 * h + 16 * s;
	const __m512i idx = row_index(row_bytes), lo4 = _mm512_set1_epi8(0x0f), lo2 = _mm512_set1_epi8(0x03);
	const __m512i k32 = _mm512_set1_epi8(32), z = _mm512_setzero_si512();
	const __mmask16 k = rows_mask(nr);
	/* rows past nr, gathered as zero, must stay zero, not -32 */
	const __m512i keep = _mm512_maskz_mov_epi32(k, _mm512_set1_epi32(-1));

	for (int i = 0; i < 4; i++) {
		__m512i a = _mm512_mask_i32gather_epi32(z, k, idx, ql + 4 * i, 1);
		__m512i c = _mm512_mask_i32gather_epi32(z, k, idx, ql + 32 + 4 * i, 1);
		__m512i e = _mm512_mask_i32gather_epi32(z, k, idx, qh + 4 * i, 1);
		const __m512i v[4] = {
			_mm512_or_si512(_mm512_and_si512(a, lo4), _mm512_slli_epi16(_mm512_and_si512(e, lo2), 4)),
			_mm512_or_si512(_mm512_and_si512(c, lo4),
					_mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(e, 2), lo2), 4)),
			_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), lo4),
					_mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(e, 4), lo2), 4)),
			_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), lo4),
					_mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(e, 6), lo2), 4)),
		};

		for (int g = 0; g < 4; g++)
			_mm512_storeu_si512(out[g] + 64 * i, _mm512_and_si512(_mm512_sub_epi8(v[g], k32), keep));
	}
}

static inline void ipost16(int32_t *isum, const int32_t *dots, const int32_t *sc)
{
	_mm512_storeu_si512(isum, _mm512_add_epi32(_mm512_loadu_si512(isum),
						   _mm512_mullo_epi32(_mm512_loadu_si512(dots), _mm512_loadu_si512(sc))));
}

/* IQ4_XS's sub-block j for 16 rows: dword i (i < 4) of each row's 16 qs
 * bytes gathered, low nibbles to B row i (lo) and high ones to row 4 + i
 * (hi), both through IQ4_NL's levels; rows past nr, gathered as zero, must
 * stay zero, not level 0's -127. */
static inline void pack_iq4_xs(const uint8_t *w, size_t row_bytes, int64_t b, int j, int nr, int8_t *lo,
			       int8_t *hi)
{
	if (row_bytes > (size_t)1 << 26) {
		exl_amx_pack_iq4_xs(w, row_bytes, b, j, nr, lo, hi);
		return;
	}
	const uint8_t *base = w + sizeof(block_iq4_xs) * (size_t)b + offsetof(block_iq4_xs, qs) + 16 * (size_t)j;
	const __m512i idx = row_index(row_bytes), lo4 = _mm512_set1_epi8(0x0f);
	const __m512i tab = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)EXL_IQ4NL_HI, (long long)EXL_IQ4NL_LO));
	const __mmask16 k = rows_mask(nr);
	const __m512i keep = _mm512_maskz_mov_epi32(k, _mm512_set1_epi32(-1));

	for (int i = 0; i < 4; i++) {
		__m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, base + 4 * i, 1);

		_mm512_storeu_si512(lo + 64 * i, _mm512_and_si512(_mm512_shuffle_epi8(tab, _mm512_and_si512(v, lo4)), keep));
		_mm512_storeu_si512(hi + 64 * i,
				    _mm512_and_si512(_mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4)),
						     keep));
	}
}

const struct exl_amx_helpers exl_amx_helpers_avx512 = {
	.unpack_q4 = unpack_q4,
	.pack_b = pack_b,
	.pack_r8 = pack_r8,
	.scales = scales,
	.post16 = post16,
	.ipost16 = ipost16,
	.pack_q6_K = pack_q6_K,
	.pack_iq4_xs = pack_iq4_xs,
};

/* A few vectors read every weight once for little work: a tile per block
 * (and its store and reload) would cost more than the memory stream, so
 * they go through the decode kernel, whose outputs are the tiles' bits. */
static inline void mm_own(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, int type)
{
	if (m->n <= EXL_AMX_DECODE_MAX_N)
		exl_amx_decode(m, r0, r1, c0, c1, type);
	else
		exl_amx_mm(m, r0, r1, c0, c1, type);
}

/* Q8_0, Q4_0, IQ4_NL and IQ4_XS decode with the kernels
 * whose float steps the tiles share (matmul_amx_body.h): avx2vnni's from
 * GGUF rows, avx512vnni's (16 rows a vector, exl_cpu_decode16) from the
 * repacked groups. */
static inline void mm_vnni(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, exl_mm_fn vnni,
			   int type)
{
	if (m->n <= EXL_AMX_DECODE_MAX_N)
		vnni(m, r0, r1, c0, c1);
	else
		exl_amx_mm(m, r0, r1, c0, c1, type);
}

/* The kernel table's entries: one per type, the type fixed */
#define EXL_AMX_OWN_MM(name, call)                                                              \
	static void name(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1) \
	{                                                                                     \
		call;                                                                         \
	}

EXL_AMX_OWN_MM(mm_q8_0, mm_vnni(m, r0, r1, c0, c1, exl_cpu_kernels_avx2vnni.mm_q8_0, EXL_AMX_Q8_0))
EXL_AMX_OWN_MM(mm_q4_0, mm_vnni(m, r0, r1, c0, c1, exl_cpu_kernels_avx2vnni.mm_q4_0, EXL_AMX_Q4_0))
EXL_AMX_OWN_MM(mm_iq4_nl, mm_vnni(m, r0, r1, c0, c1, exl_cpu_kernels_avx2vnni.mm_iq4_nl, EXL_AMX_IQ4_NL))
EXL_AMX_OWN_MM(mm_q8_0_r8, mm_vnni(m, r0, r1, c0, c1, exl_cpu_kernels_avx512vnni_own.mm_q8_0_r8, EXL_AMX_Q8_0_R8))
EXL_AMX_OWN_MM(mm_q4_0_r8, mm_vnni(m, r0, r1, c0, c1, exl_cpu_kernels_avx512vnni_own.mm_q4_0_r8, EXL_AMX_Q4_0_R8))
EXL_AMX_OWN_MM(mm_iq4_nl_r8,
	       mm_vnni(m, r0, r1, c0, c1, exl_cpu_kernels_avx512vnni_own.mm_iq4_nl_r8, EXL_AMX_IQ4_NL_R8))
EXL_AMX_OWN_MM(mm_q6_K, mm_own(m, r0, r1, c0, c1, EXL_AMX_Q6_K))
EXL_AMX_OWN_MM(mm_iq4_xs, mm_vnni(m, r0, r1, c0, c1, exl_cpu_kernels_avx2vnni.mm_iq4_xs, EXL_AMX_IQ4_XS))
EXL_AMX_OWN_MM(mm_f16, exl_amx_mm_bf16(m, r0, r1, c0, c1, 1))
EXL_AMX_OWN_MM(mm_bf16, exl_amx_mm_bf16(m, r0, r1, c0, c1, 0))

/* Only what this set does its own way; matmul.c takes the rest from
 * avx512vnni (F16 and BF16 too where the CPU lacks AMX-BF16; Q4_K and
 * Q5_K, whose kernels there beat tiles on the Xeon measured), the
 * activations of Q8_0, Q4_0, IQ4_NL and IQ4_XS included (avx2vnni's, as
 * their decode).  Q6_K reads act_q8_K's, element order. */
const struct exl_cpu_kernels exl_cpu_kernels_amx_own = {
	.name = "amx",
	.act_f16 = exl_amx_act_bf16,
	.act_bf16 = exl_amx_act_bf16,
	.mm_f16 = mm_f16,
	.mm_bf16 = mm_bf16,
	.mm_q8_0 = mm_q8_0,
	.mm_q4_0 = mm_q4_0,
	.mm_q8_0_r8 = mm_q8_0_r8,
	.mm_q4_0_r8 = mm_q4_0_r8,
	.mm_iq4_nl = mm_iq4_nl,
	.mm_iq4_nl_r8 = mm_iq4_nl_r8,
	.mm_q6_K = mm_q6_K,
	.mm_iq4_xs = mm_iq4_xs,
};
