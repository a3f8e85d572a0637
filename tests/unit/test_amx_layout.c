/* The AMX kernels (Q8_0, Q4_0, IQ4_NL, Q6_K, IQ4_XS in
 * kernels/cpu/matmul_amx_body.h, F16 and BF16 in matmul_amx_bf16_body.h) on
 * a scalar emulation of the tile instructions, so that their tile
 * configuration, the packing of A and B, the unpacking of levels and every
 * address and stride run on any CPU (the "amx" set itself runs in
 * test_matmul only where the CPU has AMX).
 *
 * The emulator keeps 8 tiles and the loaded configuration, and checks what
 * the hardware would fault on or silently get wrong: palette 1, at most 16
 * rows x 64 bytes per tile, tiles 8-15 unconfigured, and for tdpbssd that
 * A has C's rows, B has A's row bytes / 4 rows and C's row bytes, and the
 * three tiles differ.  Its loads and stores touch exactly the configured rows
 * and bytes, so the sanitizer build catches a tile load past a buffer.
 *
 * Each output must equal, bit for bit, the kernel's stated arithmetic done
 * here plainly, from the int32 dots of the weight and activation levels:
 * for Q8_0, Q4_0, IQ4_NL and IQ4_XS the avx2 family's 8 accumulators
 * (block, or super-block, b into b mod 8) and their tree, for Q6_K one
 * chain of FMAs over the super-blocks.  The first three run from GGUF rows
 * and the repacked groups (EXL_LAYOUT_ROWS8), and where the CPU runs
 * avx2vnni its kernels, which the set decodes all four with, must give the
 * tiles' bits for every n.  The set's Q6_K decode (n <= EXL_AMX_DECODE_MAX_N),
 * which makes the same integers and FMAs in AVX-512 VNNI without tiles
 * (matmul_amx_decode.c), must too: natively where the CPU has AVX-512
 * VNNI, and over SIMDe's emulation of AVX-512 wherever it has AVX2.  Q4_K
 * and Q5_K have no tiles: the set takes avx512vnni's kernels for them,
 * which test_matmul checks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/check.h"

static int emu_failed;
static int decode_simde_checked, decode_native_checked, vnni_checked, r8_checked, act_checked, r16_checked;

#define EMU_CHECK(cond, ...)                                                    \
	do {                                                                    \
		if (!(cond)) {                                                  \
			if (!emu_failed++)                                      \
				fprintf(stderr, "tile emulator: " __VA_ARGS__); \
		}                                                               \
	} while (0)

struct exl_amx_cfg;
static void emu_loadconfig(const struct exl_amx_cfg *cfg);
static void emu_loadd(int t, const void *base, long stride);
static void emu_stored(int t, void *base, long stride);
static void emu_zero(int t);
static void emu_dpbssd(int c, int a, int b);
static void emu_dpbf16ps(int c, int a, int b);
static void emu_release(void);

#define EXL_AMX_LOADCONFIG(cfg) emu_loadconfig(cfg)
#define EXL_AMX_LOADD(t, base, stride) emu_loadd(t, base, (long)(stride))
#define EXL_AMX_STORED(t, base, stride) emu_stored(t, base, (long)(stride))
#define EXL_AMX_ZERO(t) emu_zero(t)
#define EXL_AMX_DPBSSD(c, a, b) emu_dpbssd(c, a, b)
#define EXL_AMX_DPBF16PS(c, a, b) emu_dpbf16ps(c, a, b)
#define EXL_AMX_RELEASE() emu_release()

#include "kernels/cpu/matmul_amx_body.h"
#include "kernels/cpu/matmul_amx_bf16_body.h"
#include "kernels/cpu/matmul_amx_bf16.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"
#include "kernels/cpu/matmul_amx_decode.h"
#include "kernels/cpu/matmul_amx_helpers.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/repack.h"

static struct exl_amx_cfg emu_cfg;
static int emu_configured;
static uint8_t emu_tile[8][16 * 64];
static long emu_dp_count, emu_bf16_count;

static void emu_loadconfig(const struct exl_amx_cfg *cfg)
{
	const uint8_t *raw = (const uint8_t *)cfg;

	EMU_CHECK(cfg->palette == 1, "palette %d\n", cfg->palette);
	EMU_CHECK(cfg->start_row == 0, "start_row %d\n", cfg->start_row);
	for (int i = 2; i < 16; i++)
		EMU_CHECK(raw[i] == 0, "reserved byte %d set\n", i);
	for (int t = 0; t < 16; t++) {
		if (t >= 8) {
			EMU_CHECK(cfg->rows[t] == 0 && cfg->colsb[t] == 0, "tile %d configured\n", t);
			continue;
		}
		EMU_CHECK(cfg->rows[t] <= 16 && cfg->colsb[t] <= 64, "tile %d: %d rows x %d bytes\n", t,
			  cfg->rows[t], cfg->colsb[t]);
		EMU_CHECK((cfg->rows[t] == 0) == (cfg->colsb[t] == 0), "tile %d half configured\n", t);
	}
	/* the byte offsets the SDM gives: colsb at 16, rows at 48 */
	EMU_CHECK((const uint8_t *)&cfg->colsb[0] - raw == 16 && (const uint8_t *)&cfg->rows[0] - raw == 48,
		  "config layout\n");
	emu_cfg = *cfg;
	memset(emu_tile, 0, sizeof(emu_tile));
	emu_configured = 1;
}

static int emu_valid(int t)
{
	EMU_CHECK(emu_configured, "tile %d used without a configuration\n", t);
	EMU_CHECK(t >= 0 && t < 8 && emu_cfg.rows[t], "tile %d not configured\n", t);
	return emu_configured && t >= 0 && t < 8 && emu_cfg.rows[t];
}

static void emu_loadd(int t, const void *base, long stride)
{
	if (!emu_valid(t))
		return;
	memset(emu_tile[t], 0, sizeof(emu_tile[t]));
	for (int r = 0; r < emu_cfg.rows[t]; r++)
		memcpy(emu_tile[t] + 64 * r, (const uint8_t *)base + r * stride, emu_cfg.colsb[t]);
}

static void emu_stored(int t, void *base, long stride)
{
	if (!emu_valid(t))
		return;
	for (int r = 0; r < emu_cfg.rows[t]; r++)
		memcpy((uint8_t *)base + r * stride, emu_tile[t] + 64 * r, emu_cfg.colsb[t]);
}

static void emu_zero(int t)
{
	if (emu_valid(t))
		memset(emu_tile[t], 0, sizeof(emu_tile[t]));
}

/* What tdpbssd and tdpbf16ps both require: three different configured
 * tiles, C of M rows x N dwords, A of M rows x K dwords, B of K rows x N
 * dwords */
static int emu_dp_valid(const char *op, int c, int a, int b)
{
	if (!emu_valid(c) || !emu_valid(a) || !emu_valid(b))
		return 0;
	EMU_CHECK(c != a && c != b && a != b, "%s %d, %d, %d: tiles must differ\n", op, c, a, b);
	EMU_CHECK(emu_cfg.colsb[c] % 4 == 0 && emu_cfg.colsb[a] % 4 == 0, "%s: row bytes not dwords\n", op);
	EMU_CHECK(emu_cfg.rows[a] == emu_cfg.rows[c], "%s: A has %d rows, C %d\n", op, emu_cfg.rows[a],
		  emu_cfg.rows[c]);
	EMU_CHECK(emu_cfg.rows[b] == emu_cfg.colsb[a] / 4, "%s: B has %d rows, A %d dwords\n", op, emu_cfg.rows[b],
		  emu_cfg.colsb[a] / 4);
	EMU_CHECK(emu_cfg.colsb[b] == emu_cfg.colsb[c], "%s: B %d bytes per row, C %d\n", op, emu_cfg.colsb[b],
		  emu_cfg.colsb[c]);
	return 1;
}

static void emu_dpbssd(int c, int a, int b)
{
	if (!emu_dp_valid("tdpbssd", c, a, b))
		return;
	int M = emu_cfg.rows[c], N = emu_cfg.colsb[c] / 4, K = emu_cfg.colsb[a];

	emu_dp_count++;
	for (int m = 0; m < M; m++) {
		for (int n = 0; n < N; n++) {
			int32_t sum;

			memcpy(&sum, emu_tile[c] + 64 * m + 4 * n, 4);
			for (int i = 0; i < K / 4; i++)
				for (int j = 0; j < 4; j++)
					sum += (int8_t)emu_tile[a][64 * m + 4 * i + j] *
					       (int8_t)emu_tile[b][64 * i + 4 * n + j];
			memcpy(emu_tile[c] + 64 * m + 4 * n, &sum, 4);
		}
	}
}

/* A float as fp32 with an input or output denormal taken as zero, as
 * tdpbf16ps does */
static float emu_ftz(float v)
{
	return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v;
}

static float emu_bf16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return emu_ftz(exl_bf16_to_fp32(h));
}

/* tdpbf16ps as the SDM gives it: per C element, the pairs in order, each
 * product (exact in fp32) added with one rounding */
static void emu_dpbf16ps(int c, int a, int b)
{
	if (!emu_dp_valid("tdpbf16ps", c, a, b))
		return;
	int M = emu_cfg.rows[c], N = emu_cfg.colsb[c] / 4, K = emu_cfg.colsb[a] / 4;

	emu_bf16_count++;
	for (int m = 0; m < M; m++) {
		for (int n = 0; n < N; n++) {
			float sum;

			memcpy(&sum, emu_tile[c] + 64 * m + 4 * n, 4);
			for (int k = 0; k < K; k++)
				for (int j = 0; j < 2; j++)
					sum = emu_ftz(sum + emu_bf16(emu_tile[a] + 64 * m + 4 * k + 2 * j) *
								emu_bf16(emu_tile[b] + 64 * k + 4 * n + 2 * j));
			memcpy(emu_tile[c] + 64 * m + 4 * n, &sum, 4);
		}
	}
}

static void emu_release(void)
{
	emu_configured = 0;
}

/* ---- the packing on its own ---- */

static void test_pack_b(void)
{
	int8_t src[16 * 40], out[8 * 64];

	for (int i = 0; i < (int)sizeof(src); i++)
		src[i] = (int8_t)(i * 7 - 100);
	for (int nr = 1; nr <= 16; nr += 5) {
		exl_amx_pack_b(src, 40, nr, out, out + 4 * 64);
		for (int i = 0; i < 8; i++)
			for (int r = 0; r < 16; r++)
				for (int j = 0; j < 4; j++)
					CHECK(out[64 * i + 4 * r + j] == (r < nr ? src[40 * r + 4 * i + j] : 0),
					      "pack_b nr %d: [%d][%d][%d]", nr, i, r, j);
	}
}

static double gauss(void)
{
	double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);

	return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

#if defined(EXL_HAVE_AMX_KERNELS)
/* Random bytes, with a finite fp16 at every offset of offs (a block's
 * scales): the F16C conversion and the portable one agree on those, not on
 * NaN payloads. */
static void fill_blocks(uint8_t *p, size_t n, size_t bs, size_t d_off, int nd)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rand();
	for (size_t b = 0; b + bs <= n; b += bs)
		for (int k = 0; k < nd; k++) {
			uint16_t h = (uint16_t)(rand() & 0xfbff); /* exponent <= 30 */

			memcpy(p + b + d_off + 2 * (size_t)k, &h, 2);
		}
}

#define SAME(a, b, what, ...) CHECK(!memcmp(a, b, sizeof(a)), what ": the AVX-512 helper differs", __VA_ARGS__)

/* Each AVX-512 helper of matmul_amx.c against the portable one it stands
 * in for, byte for byte: the tile kernels run only on AMX, these anywhere
 * with AVX-512. */
static int test_helpers_native(void)
{
	const struct exl_amx_helpers *v = &exl_amx_helpers_avx512;
	static uint8_t w[16 * 3 * sizeof(block_q6_K)];
	static const int nrs[] = { 1, 5, 8, 9, 16 };

	for (int it = 0; it < 4; it++)
		for (size_t ni = 0; ni < sizeof(nrs) / sizeof(nrs[0]); ni++) {
			const int nr = nrs[ni];

			for (int fmt = EXL_AMX_FMT_Q4_0; fmt <= EXL_AMX_FMT_IQ4_NL; fmt++) {
				/* Q4_0 / IQ4_NL rows of 3 blocks, block 1 */
				int8_t a[16 * 32], b[16 * 32];

				fill_blocks(w, 16 * 3 * 18, 18, 0, 1);
				exl_amx_unpack_q4(w, 3 * 18, 1, nr, fmt, a);
				v->unpack_q4(w, 3 * 18, 1, nr, fmt, b);
				SAME(a, b, "unpack_q4 fmt %d nr %d", fmt, nr);
			}
			{ /* Q4_0's scales; Q8_0's qs as pack_b's src */
				int8_t al[256], ah[256], bl[256], bh[256];
				float da[16], db[16];

				fill_blocks(w, 16 * 3 * 18, 18, 0, 1);
				exl_amx_scales(w, 3 * 18, 18, 1, nr, da);
				v->scales(w, 3 * 18, 18, 1, nr, db);
				SAME(da, db, "scales nr %d", nr);
				exl_amx_pack_b((const int8_t *)w + 2, 40, nr, al, ah);
				v->pack_b((const int8_t *)w + 2, 40, nr, bl, bh);
				SAME(al, bl, "pack_b nr %d", nr);
				SAME(ah, bh, "pack_b nr %d", nr);
			}
			for (int fmt = 0; fmt <= EXL_AMX_FMT_IQ4_NL; fmt++) { /* two groups of 3 blocks, block 2 */
				const size_t bs = fmt != EXL_AMX_FMT_Q8_0 ? 144 : 272;
				int8_t al[256], ah[256], bl[256], bh[256];
				float da[16], db[16];

				fill_blocks(w, 6 * bs, bs, 0, 8);
				memset(al, 1, sizeof(al)), memset(ah, 1, sizeof(ah));
				memset(bl, 1, sizeof(bl)), memset(bh, 1, sizeof(bh));
				exl_amx_pack_r8(w, nr > 8 ? w + 3 * bs : NULL, 2, fmt, al, ah, da);
				v->pack_r8(w, nr > 8 ? w + 3 * bs : NULL, 2, fmt, bl, bh, db);
				SAME(al, bl, "pack_r8 fmt %d nr %d", fmt, nr);
				SAME(ah, bh, "pack_r8 fmt %d nr %d", fmt, nr);
				SAME(da, db, "pack_r8 fmt %d nr %d", fmt, nr);
			}
			for (int h = 0; h < 2; h++)
				for (int sh = 0; sh < 2; sh++) {
					int8_t a[4][4 * 64], b[4][4 * 64];

					fill_blocks(w, 16 * 2 * sizeof(block_q6_K), sizeof(block_q6_K),
						    offsetof(block_q6_K, d), 1);
					exl_amx_pack_q6_K(w, 2 * sizeof(block_q6_K), 1, h, sh, nr, a);
					v->pack_q6_K(w, 2 * sizeof(block_q6_K), 1, h, sh, nr, b);
					SAME(a, b, "pack_q6_K h %d s %d nr %d", h, sh, nr);
				}
			for (int j = 0; j < 8; j++) {
				int8_t a[512], b[512];

				fill_blocks(w, 16 * 2 * sizeof(block_iq4_xs), sizeof(block_iq4_xs), 0, 1);
				exl_amx_pack_iq4_xs(w, 2 * sizeof(block_iq4_xs), 1, j, nr, a, a + 256);
				v->pack_iq4_xs(w, 2 * sizeof(block_iq4_xs), 1, j, nr, b, b + 256);
				SAME(a, b, "pack_iq4_xs j %d nr %d", j, nr);
			}
		}
	for (int it = 0; it < 64; it++) { /* the float and int32 steps */
		float acc_a[16], acc_b[16], dw[16];
		int32_t dots[16], sc[16], is_a[16], is_b[16];
		const float dx = (float)gauss();

		for (int l = 0; l < 16; l++) {
			acc_a[l] = acc_b[l] = (float)gauss();
			dw[l] = (float)gauss() * 1e-3f;
			dots[l] = rand() % 200001 - 100000;
			sc[l] = rand() % 64;
			is_a[l] = is_b[l] = rand() % 1000001 - 500000;
		}
		exl_amx_post16(acc_a, dots, dx, dw);
		v->post16(acc_b, dots, dx, dw);
		SAME(acc_a, acc_b, "post16 %d", it);
		exl_amx_ipost16(is_a, dots, sc);
		v->ipost16(is_b, dots, sc);
		SAME(is_a, is_b, "ipost16 %d", it);
	}
	return 1;
}
#endif

/* The amx set's table as matmul.c merges it (on any CPU: the merge, not
 * the kernels, is what this checks).  Per weight type and layout, the
 * kernel and the activation it is handed must come from one place: a
 * kernel borrowed from avx512vnni with avx512vnni's act, and one of the
 * set's own with the act its tiles read (checked against their arithmetic
 * above): avx2vnni's for the types the set decodes with avx2vnni's
 * kernels, element order (exl_act_q8_K_avx2) for Q6_K, its bf16 pairs for
 * F16 and BF16.  Q4_K and Q5_K must be borrowed: avx512vnni's kernels beat
 * the tiles the set once had for them.  The first AMX run found the merge
 * handing Q4_1, Q5_0, Q5_1 and IQ4_NL an act their kernels did not read. */
#if defined(EXL_HAVE_AMX_KERNELS)
/* act_avx2.c's (declared in matmul_x86.h, which wants the AVX flags) */
void exl_act_q8_K_avx2(const float *x, uint8_t *act, int64_t cols);
#endif

static int test_amx_table(void)
{
#if defined(EXL_HAVE_AMX_KERNELS)
	static const uint32_t types[] = { EXL_F32, EXL_F16, EXL_BF16, EXL_Q8_0, EXL_Q4_0, EXL_Q4_1, EXL_Q5_0,
					  EXL_Q5_1, EXL_IQ4_NL, EXL_MXFP4, EXL_Q2_K, EXL_Q3_K, EXL_Q4_K, EXL_Q5_K,
					  EXL_Q6_K, EXL_IQ4_XS };
	const struct exl_cpu_kernels *amx = exl_cpu_kernels_table("amx");
	const struct exl_cpu_kernels *vnni = exl_cpu_kernels_table("avx512vnni");
	const struct exl_cpu_kernels *v2 = &exl_cpu_kernels_avx2vnni;
	int n_own = 0;

	CHECK(amx && vnni, "the amx and avx512vnni tables");
	if (!amx || !vnni)
		return 0;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		for (uint32_t layout = EXL_LAYOUT_ROWS; layout <= EXL_LAYOUT_ROWS8; layout++) {
			const uint32_t t = types[i];
			const char *name = exl_dtype_info(t)->name;
			exl_mm_fn fa, fv, f2;
			exl_act_fn aa, av, a2;
			exl_act_batch_fn ba, bv, b2;

			exl_cpu_kernels_for(amx, t, layout, &fa, &aa, &ba);
			exl_cpu_kernels_for(vnni, t, layout, &fv, &av, &bv);
			exl_cpu_kernels_for(v2, t, layout, &f2, &a2, &b2);
			if (layout == EXL_LAYOUT_ROWS8 && !fa)
				continue; /* no repacked form in the set */
			CHECK(fa, "amx %s layout %u: no kernel", name, layout);
			if (fa == fv) {
				CHECK(aa == av && ba == bv, "amx %s layout %u: avx512vnni's kernel with another act",
				      name, layout);
				continue;
			}
			n_own++;
			if (t == EXL_Q4_K || t == EXL_Q5_K)
				CHECK(0, "amx %s layout %u: its own kernel, not avx512vnni's faster one", name, layout);
			else if (t == EXL_Q8_0 || t == EXL_Q4_0 || t == EXL_IQ4_NL || t == EXL_IQ4_XS)
				CHECK(aa && aa == a2, "amx %s layout %u: its tiles read avx2vnni's act, not this one",
				      name, layout);
			else if (t == EXL_Q6_K)
				CHECK(aa == exl_act_q8_K_avx2, "amx %s: its kernels read x in element order", name);
			else if (t == EXL_F16 || t == EXL_BF16)
				CHECK(ba == exl_amx_act_bf16, "amx %s: its tiles read their own bf16 pairs", name);
			else
				CHECK(0, "amx %s layout %u: a kernel of its own this test does not know", name, layout);
		}
	/* Q8_0, Q4_0, IQ4_NL, Q6_K and IQ4_XS in both layouts (the last two's
	 * one kernel serves either); F16 and BF16 too where the CPU has AMX-BF16 */
	CHECK(n_own >= 10, "amx runs %d (type, layout) kernels of its own", n_own);
	return 1;
#else
	return 0;
#endif
}

/* ---- whole kernels ---- */

struct case_data {
	uint32_t type;
	int64_t rows, cols;
	int n;
	uint8_t *w;
	uint8_t *act;
	size_t act_stride;
};

static int amx_type(uint32_t type)
{
	return type == EXL_Q8_0 ? EXL_AMX_Q8_0
	       : type == EXL_Q4_0 ? EXL_AMX_Q4_0
	       : type == EXL_IQ4_NL ? EXL_AMX_IQ4_NL
	       : type == EXL_IQ4_XS ? EXL_AMX_IQ4_XS
				  : EXL_AMX_Q6_K;
}

static int32_t level(const struct case_data *d, int64_t r, int64_t k)
{
	const uint8_t *row = d->w + (size_t)r * exl_dtype_row_bytes(d->type, (uint64_t)d->cols);

	if (d->type == EXL_Q8_0)
		return ((const block_q8_0 *)(const void *)row)[k / 32].qs[k % 32];
	if (d->type == EXL_IQ4_XS) {
		/* sub-block j's element l < 16 in the low nibble of qs[16j + l],
		 * 16 + l in the high one, through IQ4_NL's levels */
		const block_iq4_xs *b = (const block_iq4_xs *)(const void *)row + k / 256;
		int e = (int)(k % 256), l = e % 32;
		uint8_t q = b->qs[16 * (e / 32) + l % 16];
		return exl_iq4nl_value(l < 16 ? q & 15 : q >> 4);
	}
	if (d->type == EXL_Q6_K) {
		/* as exl_dequant_q6_K: per half of 128, weight l of each 32 from
		 * ql[l] or ql[l + 32], low or high nibble, and qh[l]'s bits */
		const block_q6_K *b = (const block_q6_K *)(const void *)row + k / 256;
		int e = (int)(k % 256), h = e / 128, quarter = (e % 128) / 32, l = e % 32;
		uint8_t ql = b->ql[64 * h + l + 32 * (quarter & 1)], qh = b->qh[32 * h + l];
		int lo = quarter < 2 ? ql & 15 : ql >> 4;
		return (lo | (((qh >> (2 * quarter)) & 3) << 4)) - 32;
	}
	const block_q4_0 *b = (const block_q4_0 *)(const void *)row + k / 32;
	int j = (int)(k % 32);
	int q = j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4;
	return d->type == EXL_IQ4_NL ? exl_iq4nl_value(q) : q - 8;
}

/* Where the act keeps element k of x: Q4_0's, IQ4_NL's and IQ4_XS's (its
 * sub-blocks) in avx2vnni's pairs of
 * blocks, [x0..15 of 2p | x0..15 of 2p + 1 | x16..31 of 2p | x16..31 of
 * 2p + 1] (an odd last block in element order); the others in element
 * order. */
static int64_t act_pos(const struct case_data *d, int64_t k)
{
	const int64_t nb = d->cols / 32, b = k / 32, e = k % 32;

	if ((d->type != EXL_Q4_0 && d->type != EXL_IQ4_NL && d->type != EXL_IQ4_XS) || (nb % 2 && b == nb - 1))
		return k;
	return 64 * (b / 2) + (e < 16 ? 16 * (b % 2) + e : 32 + 16 * (b % 2) + e - 16);
}

/* Q6_K and IQ4_XS: per super-block the exact I = sum_g s_g sum_l level x
 * over its groups (Q6_K: 16 of 16 with scales[g], levels q - 32; IQ4_XS:
 * 8 of 32 with the 6-bit scale less 32), then one FMA: Q6_K's in one
 * chain, IQ4_XS's into accumulator b mod 8 and the tree of the 8 */
static float expect_groups(const struct case_data *d, int64_t r, int c)
{
	const uint8_t *row = d->w + (size_t)r * exl_dtype_row_bytes(d->type, (uint64_t)d->cols);
	const uint8_t *a = d->act + (size_t)c * d->act_stride;
	const int8_t *xq = (const int8_t *)a;
	const float *xd = exl_act_q8_K_d(a, d->cols);
	const int q6 = d->type == EXL_Q6_K, gs = q6 ? 16 : 32;
	float acc = 0, a8[8] = { 0 };

	for (int64_t b = 0; b < d->cols / 256; b++) {
		const block_q6_K *b6 = (const block_q6_K *)(const void *)row + b;
		const block_iq4_xs *bx = (const block_iq4_xs *)(const void *)row + b;
		int32_t isum = 0;

		for (int g = 0; g < 256 / gs; g++) {
			int32_t dot = 0;

			for (int l = 0; l < gs; l++)
				dot += level(d, r, 256 * b + gs * g + l) * xq[act_pos(d, 256 * b + gs * g + l)];
			isum += (q6 ? b6->scales[g] : exl_iq4_xs_scale(bx, g)) * dot;
		}
		if (q6)
			acc = fmaf((float)isum, xd[b] * exl_fp16_to_fp32(b6->d), acc);
		else
			a8[b % 8] = fmaf((float)isum, exl_fp16_to_fp32(bx->d) * xd[b], a8[b % 8]);
	}
	return q6 ? acc : ((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7]));
}

static float expect(const struct case_data *d, int64_t r, int c)
{
	if (d->type == EXL_Q6_K || d->type == EXL_IQ4_XS)
		return expect_groups(d, r, c);

	const uint8_t *row = d->w + (size_t)r * exl_dtype_row_bytes(d->type, (uint64_t)d->cols);
	const size_t bs = d->type == EXL_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
	const uint8_t *a = d->act + (size_t)c * d->act_stride;
	const int8_t *xq = (const int8_t *)a;
	const float *xd = exl_act_q8_0_d(a, d->cols);
	float acc[8] = { 0 };

	for (int64_t b = 0; b < d->cols / 32; b++) {
		int32_t dot = 0;
		uint16_t h;

		for (int64_t k = 32 * b; k < 32 * b + 32; k++)
			dot += level(d, r, k) * xq[act_pos(d, k)];
		memcpy(&h, row + bs * (size_t)b, 2);
		acc[b % 8] = fmaf((float)dot, exl_fp16_to_fp32(h) * xd[b], acc[b % 8]);
	}
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}


#if defined(EXL_HAVE_AMX_DECODE_SIMDE) || defined(EXL_HAVE_AMX_KERNELS)
typedef void decode_fn(const struct exl_mm_ctx *m, int64_t r0, int64_t r1, int c0, int c1, int q4);


/* Runs a decode (in two calls, as matmul.c's chunks split rows) and
 * compares its every output with the tiles' y, bit for bit. */
static void check_decode(const struct exl_mm_ctx *m0, const struct case_data *d, const float *y, decode_fn *fn,
			 int native, const char *what)
{
	struct exl_mm_ctx m = *m0;
	size_t n_out = (size_t)(d->rows * d->n);
	float *yv = malloc(sizeof(float) * n_out);
	int bad = 0;

	CHECK(yv, "out of memory");
	if (!yv)
		return;
	m.y = yv;
	fn(&m, 0, d->rows / 3, 0, d->n, amx_type(d->type));
	fn(&m, d->rows / 3, d->rows, 0, d->n, amx_type(d->type));
	for (size_t i = 0; i < n_out; i++)
		if (memcmp(&yv[i], &y[i], sizeof(float)) && !bad++)
			fprintf(stderr, "  %s [%zu]: %.9g, tiles %.9g\n", what, i, yv[i], y[i]);
	CHECK(bad == 0, "%s rows %lld cols %lld n %d: %s differs from the tiles in %d outputs",
	      exl_dtype_info(d->type)->name, (long long)d->rows, (long long)d->cols, d->n, what, bad);
	if (native)
		decode_native_checked++;
	else
		decode_simde_checked++;
	free(yv);
}
#endif

/* The act of row x this test feeds the tiles: exl_act_q8_K_scalar's for
 * Q6_K and IQ4_XS, exl_act_q8_0_scalar's for the others with each block's sum
 * of x as an int32 in place of s (avx2vnni's form); x then placed by
 * act_pos. */
static void make_act(const struct case_data *d, const float *row, uint8_t *a)
{
	const int k_quant = d->type == EXL_Q6_K || d->type == EXL_IQ4_XS;
	int8_t *x = (int8_t *)a, *tmp = malloc((size_t)d->cols);

	CHECK(tmp, "out of memory");
	if (!tmp)
		return;
	if (k_quant)
		exl_act_q8_K_scalar(row, a, d->cols);
	else
		exl_act_q8_0_scalar(row, a, d->cols);
	memcpy(tmp, x, (size_t)d->cols);
	for (int64_t b = 0; !k_quant && b < d->cols / 32; b++) {
		const size_t s_off = (size_t)((const uint8_t *)exl_act_q8_0_s(a, d->cols) - a);
		int32_t isum = 0;

		for (int k = 0; k < 32; k++)
			isum += tmp[32 * b + k];
		memcpy(a + s_off + 4 * (size_t)b, &isum, 4);
	}
	for (int64_t k = 0; k < d->cols; k++)
		x[act_pos(d, k)] = tmp[k];
	free(tmp);
}

/* The act this test makes for a type the set decodes with avx2vnni's
 * kernels (make_act's) must be, byte for byte, what
 * the set's own act function makes, where the CPU runs it: the kernel table
 * gives the amx set avx512vnni's act for these types, and the tiles read it. */
static void check_act_form(const struct case_data *d, const float *row)
{
#if defined(EXL_HAVE_X86_KERNELS)
	const struct exl_cpu_kernels *k = &exl_cpu_kernels_avx2vnni;
	exl_act_fn fn = d->type == EXL_Q8_0 ? k->act_q8_0
			 : d->type == EXL_Q4_0 ? k->act_q4_0
			 : d->type == EXL_IQ4_NL ? k->act_iq4_nl
			 : d->type == EXL_IQ4_XS ? k->act_iq4_xs
						 : NULL;
	uint8_t *a, *b;

	if (!fn || !exl_cpu_kernels_available("avx2vnni"))
		return;
	a = calloc(1, d->act_stride);
	b = calloc(1, d->act_stride);
	CHECK(a && b, "out of memory");
	if (a && b) {
		fn(row, a, d->cols);
		make_act(d, row, b);
		CHECK(!memcmp(a, b, d->act_stride), "%s cols %lld: avx2vnni's act differs from the one this test reads",
		      exl_dtype_info(d->type)->name, (long long)d->cols);
		act_checked++;
	}
	free(a);
	free(b);
#else
	(void)d;
	(void)row;
#endif
}

/* y = m's outputs by a kernel of the avx2vnni set, called as matmul.c
 * does: vectors 64 at a time, rows in two chunks split at a multiple of 16. */
static void run_vnni(const struct exl_mm_ctx *m, exl_mm_fn fn, float *y)
{
	struct exl_mm_ctx mv = *m;
	const int64_t split = (m->rows / 3) & ~(int64_t)15;

	mv.y = y;
	for (int c0 = 0; c0 < m->n; c0 += 64) {
		int c1 = c0 + 64 < m->n ? c0 + 64 : m->n;

		fn(&mv, 0, split, c0, c1);
		fn(&mv, split, m->rows, c0, c1);
	}
}

static int same_bits(const float *a, const float *b, size_t n, const char *what, const struct case_data *d)
{
	int bad = 0;

	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) && !bad++)
			fprintf(stderr, "  %s [%zu]: %.9g, tiles %.9g\n", what, i, a[i], b[i]);
	CHECK(bad == 0, "%s rows %lld cols %lld n %d: %s differs from the tiles in %d outputs",
	      exl_dtype_info(d->type)->name, (long long)d->rows, (long long)d->cols, d->n, what, bad);
	return bad == 0;
}

/* The types whose tiles read the repacked groups (EXL_LAYOUT_ROWS8): their
 * tile type (-1: none) */
static int r8_type(uint32_t type)
{
	return type == EXL_Q8_0 ? EXL_AMX_Q8_0_R8
	       : type == EXL_Q4_0 ? EXL_AMX_Q4_0_R8
	       : type == EXL_IQ4_NL ? EXL_AMX_IQ4_NL_R8
				    : -1;
}

#if defined(EXL_HAVE_X86_KERNELS)
static void vnni_fns(const struct exl_cpu_kernels *k, uint32_t type, exl_mm_fn *rows, exl_mm_fn *r8)
{
	*rows = type == EXL_Q8_0 ? k->mm_q8_0
		: type == EXL_Q4_0 ? k->mm_q4_0
		: type == EXL_IQ4_NL ? k->mm_iq4_nl
				     : k->mm_iq4_xs;
	*r8 = type == EXL_Q8_0 ? k->mm_q8_0_r8
	      : type == EXL_Q4_0 ? k->mm_q4_0_r8
	      : type == EXL_IQ4_NL ? k->mm_iq4_nl_r8
				   : NULL;
}
#endif

/* Q8_0, Q4_0, IQ4_NL (and IQ4_XS, not repacked): the tiles from the
 * repacked groups, and where the CPU runs them avx2vnni's kernels (GGUF
 * rows and groups: the set's decode from rows) and avx512vnni's repacked
 * ones (the set's decode from the groups, both ways of exl_cpu_decode16),
 * must give the tiles' bits y. */
static void check_vnni(const struct exl_mm_ctx *m, const struct case_data *d, const float *y)
{
	const size_t n_out = (size_t)(d->rows * d->n);
	const int rt = r8_type(d->type);
	const size_t rp_bytes = rt >= 0 ? exl_cpu_repack_bytes(d->type, EXL_LAYOUT_ROWS8, d->rows, d->cols) : 0;
	struct exl_mm_ctx mr = *m;
	float *yr = malloc(sizeof(float) * n_out);
	uint8_t *rp = rp_bytes ? malloc(rp_bytes) : NULL;

	CHECK(yr && (rt < 0 || rp), "out of memory, or no repacked form of %s", exl_dtype_info(d->type)->name);
	if (!yr || (rt >= 0 && !rp))
		goto out;
	if (rp) {
		CHECK(exl_cpu_repack(d->type, EXL_LAYOUT_ROWS8, d->w, rp, d->rows, d->cols) == 0, "repack");
		mr.w = rp;
		mr.y = yr;
	}
	if (rt >= 0) {
		for (int c0 = 0; c0 < d->n; c0 += 64)
			for (int64_t r = 0; r < d->rows; r += 16)
				exl_amx_mm(&mr, r, r + 16 < d->rows ? r + 16 : d->rows, c0,
					   c0 + 64 < d->n ? c0 + 64 : d->n, rt);
		CHECK(!emu_failed, "%s rows %lld n %d: the tile emulator refused a repacked step",
		      exl_dtype_info(d->type)->name, (long long)d->rows, d->n);
		if (same_bits(yr, y, n_out, "tiles from the repacked groups", d))
			r8_checked++;
	}
#if defined(EXL_HAVE_X86_KERNELS)
	if (exl_cpu_kernels_available("avx2vnni")) {
		exl_mm_fn rows_fn, r8_fn;
		int ok;

		vnni_fns(&exl_cpu_kernels_avx2vnni, d->type, &rows_fn, &r8_fn);
		run_vnni(m, rows_fn, yr);
		ok = same_bits(yr, y, n_out, "avx2vnni from GGUF rows", d);
		if (rp) {
			run_vnni(&mr, r8_fn, yr);
			ok &= same_bits(yr, y, n_out, "avx2vnni from the repacked groups", d);
		}
		if (ok)
			vnni_checked++;
	}
	if (rp && exl_cpu_kernels_available("avx512vnni")) {
		exl_mm_fn rows_fn, r8_fn;
		int ok = 1;

		vnni_fns(&exl_cpu_kernels_avx512vnni_own, d->type, &rows_fn, &r8_fn);
		for (int d16 = 0; d16 < 2; d16++) {
			exl_cpu_set_decode16(d16);
			run_vnni(&mr, r8_fn, yr);
			ok &= same_bits(yr, y, n_out,
					d16 ? "avx512vnni from the groups, 16 rows a vector"
					    : "avx512vnni from the groups, decode by 8 rows", d);
		}
		exl_cpu_set_decode16(-1);
		if (ok)
			r16_checked++;
	}
#endif
out:
	free(yr);
	free(rp);
}

static void run_case(uint32_t type, int64_t rows, int64_t cols, int n)
{
	struct case_data d = { .type = type, .rows = rows, .cols = cols, .n = n };
	size_t rb = exl_dtype_row_bytes(type, (uint64_t)cols);
	float *row = malloc(sizeof(float) * (size_t)cols);
	float *y = malloc(sizeof(float) * (size_t)(rows * n));

	d.w = malloc(rb * (size_t)rows);
	const int k_quant = type == EXL_Q6_K || type == EXL_IQ4_XS;

	d.act_stride = k_quant ? exl_act_q8_K_bytes(cols) : exl_act_q8_0_bytes(cols);
	d.act = aligned_alloc(64, d.act_stride * (size_t)n);
	CHECK(row && y && d.w && d.act, "out of memory");
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t k = 0; k < cols; k++)
			row[k] = (float)(gauss() * 0.05 * (1 + (r + k / 32) % 3));
		if (r % 3 == 0) /* Q8_0 reaches -127/127; a -128 as files may hold */
			row[(r * 5) % cols] = -0.5f;
		CHECK(exl_quantize_row(type, row, d.w + (size_t)r * rb, cols) == rb, "quantize row %lld", (long long)r);
		if (type == EXL_Q8_0 && r % 5 == 1)
			((block_q8_0 *)(void *)(d.w + (size_t)r * rb))[0].qs[3] = -128;
	}
	for (int c = 0; c < n; c++) {
		for (int64_t k = 0; k < cols; k++)
			row[k] = (float)gauss();
		check_act_form(&d, row);
		make_act(&d, row, d.act + (size_t)c * d.act_stride);
	}

	/* the levels this test reads are the format's: d * scale * level is
	 * what the library dequantizes (once per shape: the weights are drawn
	 * the same way for every n) */
	if (k_quant && n == 1) {
		float deq[256];

		for (int64_t r = 0; r < rows; r++) {
			const uint8_t *wr = d.w + (size_t)r * rb;

			if (type == EXL_IQ4_XS)
				exl_dequant_iq4_xs((const block_iq4_xs *)(const void *)wr, deq);
			else
				exl_dequant_q6_K((const block_q6_K *)(const void *)wr, deq);
			for (int e = 0; e < 256; e++) {
				float want;

				if (type == EXL_IQ4_XS) {
					const block_iq4_xs *blk = (const block_iq4_xs *)(const void *)wr;

					want = exl_fp16_to_fp32(blk->d) * (float)exl_iq4_xs_scale(blk, e / 32) *
					       (float)level(&d, r, e);
				} else {
					const block_q6_K *blk = (const block_q6_K *)(const void *)wr;

					want = exl_fp16_to_fp32(blk->d) * (float)blk->scales[e / 16] * (float)level(&d, r, e);
				}
				CHECK(fabsf(deq[e] - want) <= 1e-6f * (1.0f + fabsf(want)), "%s row %lld weight %d: level %d",
				      exl_dtype_info(type)->name, (long long)r, e, (int)level(&d, r, e));
			}
		}
	}

	struct exl_mm_ctx m = {
		.w = d.w, .row_bytes = rb, .rows = rows, .cols = cols,
		.act = d.act, .act_stride = d.act_stride, .y = y, .n = n,
	};
	/* as matmul.c calls a kernel: n <= 4 whole chunks of rows, all
	 * vectors (the set runs its decode then, but the tiles take any n);
	 * otherwise 16 rows at a time, 64 vectors at a time */
	if (n <= EXL_AMX_DECODE_MAX_N) {
		exl_amx_mm(&m, 0, rows / 2, 0, n, amx_type(type));
		exl_amx_mm(&m, rows / 2, rows, 0, n, amx_type(type));
	} else {
		for (int c0 = 0; c0 < n; c0 += 64)
			for (int64_t r = 0; r < rows; r += 16)
				exl_amx_mm(&m, r, r + 16 < rows ? r + 16 : rows, c0, c0 + 64 < n ? c0 + 64 : n,
					   amx_type(type));
	}
	CHECK(!emu_failed, "%s rows %lld cols %lld n %d: the tile emulator refused an operation",
	      exl_dtype_info(type)->name, (long long)rows, (long long)cols, n);
	CHECK(!emu_configured, "tiles not released");

	int bad = 0;
	for (int c = 0; c < n; c++) {
		for (int64_t r = 0; r < rows; r++) {
			float e = expect(&d, r, c), g = y[(size_t)c * (size_t)rows + (size_t)r];

			if (memcmp(&e, &g, sizeof(e)) && !bad++)
				fprintf(stderr, "  [%d][%lld]: %.9g, expected %.9g\n", c, (long long)r, g, e);
		}
	}
	CHECK(bad == 0, "%s rows %lld cols %lld n %d: %d outputs differ from the plain block sums",
	      exl_dtype_info(type)->name, (long long)rows, (long long)cols, n, bad);
	if (type != EXL_Q6_K) {
		check_vnni(&m, &d, y);
	} else if (n <= EXL_AMX_DECODE_MAX_N) {
		/* the set's decode, without tiles: the same bits as the tiles */
		const struct exl_cpu_features *f = exl_cpu_features();

#if defined(EXL_HAVE_AMX_DECODE_SIMDE)
		if (f->avx2 && f->fma && f->f16c)
			check_decode(&m, &d, y, exl_amx_decode_simde, 0, "AVX-512 decode over SIMDe");
#endif
#if defined(EXL_HAVE_AMX_KERNELS)
		if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->fma && f->f16c)
			check_decode(&m, &d, y, exl_amx_decode, 1, "AVX-512 decode");
#endif
		(void)f;
	}
	free(row);
	free(y);
	free(d.w);
	free(d.act);
}

/* ---- F16 and BF16 on AMX-BF16 tiles ---- */

/* x to 8 significant bits, to nearest even (round8) or toward zero
 * (trunc8), by frexp: independent of the kernels' bit operations */
static float round8(float x)
{
	int e;
	float m = frexpf(x, &e);

	return x == 0.0f ? x : ldexpf(nearbyintf(ldexpf(m, 8)), e - 8);
}

static float trunc8(float x)
{
	int e;
	float m = frexpf(x, &e);

	return x == 0.0f ? x : ldexpf(truncf(ldexpf(m, 8)), e - 8);
}

static float weight_f(uint32_t type, const uint8_t *w, size_t rb, int64_t r, int64_t k)
{
	uint16_t h;

	memcpy(&h, w + (size_t)r * rb + 2 * (size_t)k, 2);
	return type == EXL_F16 ? exl_fp16_to_fp32(h) : exl_bf16_to_fp32(h);
}

/* The header's arithmetic, plainly: per 32 columns the products
 * (w_hi, x_hi), (w_lo, x_hi), (w_hi, x_lo) for F16, (w, x_hi), (w, x_lo)
 * for BF16, each over the 32 columns in order, one rounding per addition */
static float expect_bf16(uint32_t type, const uint8_t *w, size_t rb, int64_t cols, int64_t r, const float *x)
{
	static const int f16_terms[3][2] = { { 0, 0 }, { 1, 0 }, { 0, 1 } };
	static const int bf16_terms[2][2] = { { 0, 0 }, { 0, 1 } };
	const int (*terms)[2] = type == EXL_F16 ? f16_terms : bf16_terms;
	const int nterms = type == EXL_F16 ? 3 : 2;
	float acc = 0.0f;

	for (int64_t k0 = 0; k0 < cols; k0 += 32)
		for (int t = 0; t < nterms; t++)
			for (int64_t k = k0; k < k0 + 32; k++) {
				float wv = k < cols ? weight_f(type, w, rb, r, k) : 0.0f;
				float xv = k < cols ? x[k] : 0.0f;
				float wa = type == EXL_BF16 ? wv : terms[t][0] ? wv - trunc8(wv) : trunc8(wv);
				float xb = terms[t][1] ? round8(xv - round8(xv)) : round8(xv);

				acc = emu_ftz(acc + emu_ftz(wa) * emu_ftz(xb));
			}
	return acc;
}

static void run_case_bf16(uint32_t type, int64_t rows, int64_t cols, int n)
{
	const size_t rb = 2 * (size_t)cols, stride = exl_act_bf16_pairs_bytes(cols);
	uint8_t *w = malloc(rb * (size_t)rows);
	float *x = malloc(sizeof(float) * (size_t)(cols * n));
	float *y = malloc(sizeof(float) * (size_t)(rows * n));
	uint8_t *act = aligned_alloc(64, stride * (size_t)n);
	const int f16 = type == EXL_F16;
	int bad = 0, loose = 0;

	CHECK(w && x && y && act, "out of memory");
	if (!w || !x || !y || !act)
		goto out;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < cols; k++) {
			float v = (float)(gauss() * 0.05 * (1 + (r + k / 32) % 3));
			uint16_t h = f16 ? exl_fp32_to_fp16(v) : exl_fp32_to_bf16(v);

			memcpy(w + (size_t)r * rb + 2 * (size_t)k, &h, 2);
		}
	for (int64_t i = 0; i < cols * n; i++)
		x[i] = (float)gauss();
	/* as matmul.c's pool: two threads' ranges */
	memset(act, 0xa5, stride * (size_t)n);
	exl_amx_act_bf16_portable(x, cols, n, 0, n / 2, act, stride);
	exl_amx_act_bf16_portable(x, cols, n, n / 2, n, act, stride);

	struct exl_mm_ctx m = {
		.w = w, .row_bytes = rb, .rows = rows, .cols = cols, .x = x,
		.act = act, .act_stride = stride, .y = y, .n = n,
	};
	/* as matmul.c calls: one vector over whole chunks of rows, more in
	 * 16 rows x 64 vectors */
	if (n == 1) {
		exl_amx_mm_bf16(&m, 0, rows / 2, 0, 1, f16);
		exl_amx_mm_bf16(&m, rows / 2, rows, 0, 1, f16);
	} else {
		for (int c0 = 0; c0 < n; c0 += 64)
			for (int64_t r = 0; r < rows; r += 16)
				exl_amx_mm_bf16(&m, r, r + 16 < rows ? r + 16 : rows, c0, c0 + 64 < n ? c0 + 64 : n, f16);
	}
	CHECK(!emu_failed, "%s rows %lld cols %lld n %d: the tile emulator refused an operation",
	      exl_dtype_info(type)->name, (long long)rows, (long long)cols, n);
	CHECK(!emu_configured, "tiles not released");
	for (int c = 0; c < n; c++)
		for (int64_t r = 0; r < rows; r++) {
			const float *xc = x + (size_t)c * (size_t)cols;
			float e = expect_bf16(type, w, rb, cols, r, xc), g = y[(size_t)c * (size_t)rows + (size_t)r];
			double ref = 0, mag = 0;

			if (memcmp(&e, &g, sizeof(e)) && !bad++)
				fprintf(stderr, "  [%d][%lld]: %.9g, expected %.9g\n", c, (long long)r, g, e);
			/* and near enough the exact dot: test_matmul's bound
			 * for every set against scalar */
			for (int64_t k = 0; k < cols; k++) {
				double p = (double)weight_f(type, w, rb, r, k) * xc[k];

				ref += p;
				mag += fabs(p);
			}
			if (!(fabs(g - ref) <= 2e-5 * mag + 1e-6) && !loose++)
				fprintf(stderr, "  [%d][%lld]: %.9g, exact %.9g\n", c, (long long)r, g, ref);
		}
	CHECK(bad == 0, "%s rows %lld cols %lld n %d: %d outputs differ from the plain pair sums",
	      exl_dtype_info(type)->name, (long long)rows, (long long)cols, n, bad);
	CHECK(loose == 0, "%s rows %lld cols %lld n %d: %d outputs off the exact dot by over 2e-5 of sum |w x|",
	      exl_dtype_info(type)->name, (long long)rows, (long long)cols, n, loose);
out:
	free(w);
	free(x);
	free(y);
	free(act);
}

/* The split on its own: x_hi + x_lo within 2^-16 of x, w_hi + w_lo == w
 * for every F16 */
static void test_bf16_split(void)
{
	int bad = 0;

	for (uint32_t h = 0; h < 0x10000; h++) {
		uint16_t hv[16 * 32], lv[16 * 32], wh = (uint16_t)h;
		float v = exl_fp16_to_fp32(wh);

		if (isnan(v))
			continue;
		exl_amx_stage_f16_portable((const uint8_t *)&wh, 2, 1, 0, 1, hv, lv);
		float sum = exl_bf16_to_fp32(hv[0]) + exl_bf16_to_fp32(lv[0]);
		if (!(sum == v || (isinf(v) && exl_bf16_to_fp32(hv[0]) == v)) && !bad++)
			fprintf(stderr, "  F16 %04x: %.9g = %.9g + %.9g?\n", (unsigned)h, v, exl_bf16_to_fp32(hv[0]),
				exl_bf16_to_fp32(lv[0]));
	}
	CHECK(bad == 0, "F16 split: %d of the 65536 values are not w_hi + w_lo", bad);
	for (int i = 0; i < 100000; i++) {
		float v = (float)(gauss() * ldexp(1.0, i % 40 - 20));
		uint16_t hi, lo;

		exl_amx_bf16_split(v, &hi, &lo);
		double err = fabs((double)v - exl_bf16_to_fp32(hi) - exl_bf16_to_fp32(lo));
		if (!(err <= ldexp(fabs(v), -16)) && !bad++)
			fprintf(stderr, "  x %.9g: %.9g + %.9g\n", v, exl_bf16_to_fp32(hi), exl_bf16_to_fp32(lo));
	}
	CHECK(bad == 0, "x split: off by over 2^-16 of x");
}

/* The vector conversions against the portable ones, bit for bit, NaNs,
 * infinities and subnormals included */
typedef void stage_f16_fn(const uint8_t *w, size_t row_bytes, int nr, int64_t k0, int64_t cols, uint16_t *hi,
			  uint16_t *lo);
static int bf16_simde_checked, bf16_native_checked;

static void check_bf16_helpers(stage_f16_fn *stage, exl_act_batch_fn act, int native, const char *what)
{
	enum { COLS = 96 };
	uint16_t w[16 * COLS];
	_Alignas(64) uint16_t hv[512], lv[512], hp[512], lp[512];
	int bad = 0;

	for (int i = 0; i < 16 * COLS; i++)
		w[i] = (uint16_t)(rand() & 0xffff); /* every kind of F16 */
	for (int nr = 1; nr <= 16; nr += 5)
		for (int64_t cols = 70; cols <= COLS; cols += COLS - 70)
			for (int64_t k0 = 0; k0 < cols; k0 += 32) {
				stage((const uint8_t *)w, 2 * COLS, nr, k0, cols, hv, lv);
				exl_amx_stage_f16_portable((const uint8_t *)w, 2 * COLS, nr, k0, cols, hp, lp);
				if ((memcmp(hv, hp, sizeof(hv)) || memcmp(lv, lp, sizeof(lv))) && !bad++)
					fprintf(stderr, "  %s stage_f16 nr %d cols %lld k0 %lld\n", what, nr, (long long)cols,
						(long long)k0);
			}
	CHECK(bad == 0, "%s: F16 staging differs from the portable one", what);

	static const int ns[] = { 1, 2, 15, 16, 17, 40 };
	static const int64_t cols_list[] = { 32, 40, 96, 100, 256 };
	for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
		for (size_t ci = 0; ci < sizeof(cols_list) / sizeof(cols_list[0]); ci++) {
			const int n = ns[ni];
			const int64_t cols = cols_list[ci];
			const size_t stride = exl_act_bf16_pairs_bytes(cols);
			float *x = malloc(sizeof(float) * (size_t)(n * cols));
			uint8_t *av = aligned_alloc(64, stride * (size_t)n), *ap = aligned_alloc(64, stride * (size_t)n);

			CHECK(x && av && ap, "out of memory");
			if (x && av && ap) {
				for (int64_t i = 0; i < n * cols; i++) {
					/* zeros, infinities, quiet and signalling NaNs
					 * (all-ones: the rounding's carry must not
					 * wrap it to zero), a subnormal, the largest */
					static const uint32_t special[] = { 0x00000000, 0x80000000, 0x7f800000, 0xff800000,
									    0x7fc00000, 0x7f800001, 0xffffffff, 0x000b5a10,
									    0xff7fffff, 0x477fe000 };
					x[i] = i % 13 == 5 ? exl_bits_f32(special[(i / 13) % 10])
							   : (float)(gauss() * ldexp(1.0, (int)(i % 30) - 15));
				}
				memset(av, 0x5a, stride * (size_t)n);
				memset(ap, 0xa5, stride * (size_t)n);
				act(x, cols, n, 0, n / 3, av, stride);
				act(x, cols, n, n / 3, n, av, stride);
				exl_amx_act_bf16_portable(x, cols, n, 0, n, ap, stride);
				if (memcmp(av, ap, stride * (size_t)n) && !bad++)
					fprintf(stderr, "  %s act n %d cols %lld\n", what, n, (long long)cols);
			}
			free(x);
			free(av);
			free(ap);
		}
	CHECK(bad == 0, "%s: the BF16 pair act differs from the portable one", what);
	if (native)
		bf16_native_checked++;
	else
		bf16_simde_checked++;
}

static void test_bf16(void)
{
	/* a tail of rows alone and after whole tiles; columns with a tail
	 * step alone and after 13 whole ones; one vector, a group of 3, a
	 * whole group, one and a bit, and a second chunk of 64 */
	static const int64_t rows_list[] = { 7, 33 };
	static const int64_t cols_list[] = { 40, 13 * 32 + 8 };
	static const int ns[] = { 1, 3, 16, 17, 70 };
	static const uint32_t types[] = { EXL_F16, EXL_BF16 };
	const struct exl_cpu_features *f = exl_cpu_features();

	test_bf16_split();
	for (size_t t = 0; t < 2; t++)
		for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(rows_list[0]); ri++)
			for (size_t ci = 0; ci < sizeof(cols_list) / sizeof(cols_list[0]); ci++)
				for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
					run_case_bf16(types[t], rows_list[ri], cols_list[ci], ns[ni]);
#if defined(EXL_HAVE_AMX_DECODE_SIMDE)
	if (f->avx2 && f->fma && f->f16c)
		check_bf16_helpers(exl_amx_stage_f16_simde, exl_amx_act_bf16_simde, 0, "AVX-512 over SIMDe");
#endif
#if defined(EXL_HAVE_AMX_KERNELS)
	if (f->avx512f && f->avx512bw && f->avx512vl && f->f16c)
		check_bf16_helpers(exl_amx_stage_f16, exl_amx_act_bf16, 1, "AVX-512");
#endif
	(void)f;
	(void)check_bf16_helpers;
}

int main(void)
{
	static const uint32_t types[] = { EXL_Q8_0, EXL_Q4_0, EXL_IQ4_NL, EXL_Q6_K, EXL_IQ4_XS };
	static const int64_t rows_list[] = { 1, 7, 16, 33, 70 };
	static const int64_t cols_32[] = { 32, 96, 13 * 32, 16 * 32 };
	static const int64_t cols_256[] = { 256, 3 * 256 };
	static const int ns[] = { 1, 2, 3, 4, 5, 16, 17, 33, 64, 70 };

	const struct exl_cpu_features *f = exl_cpu_features();
	int helpers_native = 0;

	const int table_checked = test_amx_table();

	test_pack_b();
	srand(99);
#if defined(EXL_HAVE_AMX_KERNELS)
	if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->fma && f->f16c)
		helpers_native = test_helpers_native();
#endif
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		const int k_quant = types[t] != EXL_Q8_0 && types[t] != EXL_Q4_0 && types[t] != EXL_IQ4_NL;
		const int64_t *cols = k_quant ? cols_256 : cols_32;
		size_t ncols = k_quant ? 2 : 4;

		for (size_t ri = 0; ri < sizeof(rows_list) / sizeof(rows_list[0]); ri++)
			for (size_t ci = 0; ci < ncols; ci++)
				for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
					run_case(types[t], rows_list[ri], cols[ci], ns[ni]);
	}
	test_bf16();
	CHECK(emu_dp_count > 0 && emu_bf16_count > 0, "no tile multiply ran");
	printf("tile emulator: %ld tdpbssd over Q8_0/Q4_0/IQ4_NL/Q6_K/IQ4_XS, %ld tdpbf16ps over F16/BF16, rows 1-70, n 1-70\n",
	       emu_dp_count, emu_bf16_count);
	CHECK(r8_checked > 0, "no repacked Q8_0/Q4_0/IQ4_NL case ran");
	printf("Q8_0/Q4_0/IQ4_NL tiles from the repacked groups: %d cases bit for bit with the GGUF rows'\n", r8_checked);
	printf("the amx set's table: %s\n", table_checked ? "every borrowed kernel with its own set's act, every own one with its tiles'"
						       : "not built (the compiler took no AMX flags)");
	if (act_checked)
		printf("avx2vnni's acts for them: %d byte for byte with this test's\n", act_checked);
	if (vnni_checked)
		printf("avx2vnni's Q8_0/Q4_0/IQ4_NL/IQ4_XS kernels (the set's decode): %d cases bit for bit with the tiles\n",
		       vnni_checked);
	else
		printf("avx2vnni's Q8_0/Q4_0/IQ4_NL/IQ4_XS kernels (the set's decode): skipped, this CPU runs no avx2vnni set\n");
	if (r16_checked)
		printf("avx512vnni's repacked Q8_0/Q4_0/IQ4_NL kernels (the set's decode from the groups), "
		       "decoding by 16 rows and by 8: %d cases bit for bit with the tiles\n", r16_checked);
	else
		printf("avx512vnni's repacked kernels: skipped, this CPU runs no avx512vnni set\n");
	if (decode_simde_checked)
		printf("Q6_K's AVX-512 decode over SIMDe: %d cases bit for bit with the tiles\n", decode_simde_checked);
	else
		printf("Q6_K's AVX-512 decode over SIMDe: skipped (%s)\n",
#if defined(EXL_HAVE_AMX_DECODE_SIMDE)
		       "this CPU has no AVX2"
#else
		       "built without SIMDe's headers, libsimde-dev"
#endif
		);
	if (bf16_simde_checked)
		printf("AMX-BF16 conversions over SIMDe: bit for bit with the portable ones\n");
	if (bf16_native_checked)
		printf("AMX-BF16 conversions in AVX-512: bit for bit with the portable ones\n");
	if (helpers_native)
		printf("the tile kernels' AVX-512 helpers: byte for byte with the portable ones\n");
	else
		printf("the tile kernels' AVX-512 helpers: skipped, %s\n",
#if defined(EXL_HAVE_AMX_KERNELS)
		       "this CPU has no AVX-512 VNNI"
#else
		       "the compiler took no AMX flags, so the amx set is not built"
#endif
		);
	(void)f;
	if (decode_native_checked)
		printf("Q6_K's AVX-512 decode: %d cases bit for bit with the tiles\n", decode_native_checked);
	else
		printf("Q6_K's AVX-512 decode: skipped, %s\n",
#if defined(EXL_HAVE_AMX_KERNELS)
		       "this CPU has no AVX-512 VNNI"
#else
		       "the compiler took no AMX flags, so the amx set is not built"
#endif
		);
	printf("%d passed, %d failed\n", check_count - check_failures, check_failures);
	return check_failures ? 1 : 0;
}
