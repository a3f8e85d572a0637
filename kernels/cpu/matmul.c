/* CPU matmul entry: checks the call, quantizes the activations once, and
 * splits the output rows over the pool's threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/formats/dtype.h"
#include "kernels/formats/quant.h"

static _Atomic(const struct exl_cpu_kernels *) current_kernels;

#if defined(EXL_HAVE_X86_KERNELS)
/* The "avx512vnni" set: its own 512-bit tiles (matmul_avx512.c), and the
 * avx2vnni kernels (8 rows in the lanes of a 256-bit vector, 256-bit
 * vpdpbusd) for the types where those are faster on the AVX-512 CPU
 * measured, a Zen 4 (docs/cpu-kernels.md).  A type's act and mm come
 * from one set; types that share an act slot move together. */
static struct exl_cpu_kernels avx512vnni_set = { .name = "avx512vnni" };
static pthread_once_t avx512vnni_once = PTHREAD_ONCE_INIT;

static void avx512vnni_merge(void)
{
	const struct exl_cpu_kernels *v = &exl_cpu_kernels_avx2vnni;

	avx512vnni_set = exl_cpu_kernels_avx512vnni_own;
	avx512vnni_set.act_q8_0 = v->act_q8_0;
	avx512vnni_set.mm_q8_0 = v->mm_q8_0;
	/* its own repacked Q8_0, Q4_0, IQ4_NL and Q4_K kernels (16 rows a
	 * vector for batches, avx2vnni's bits, its decode) stay */
	avx512vnni_set.act_q4_0 = v->act_q4_0;
	avx512vnni_set.mm_q4_0 = v->mm_q4_0;
	/* Q4_K and Q5_K share act_q4_K */
	avx512vnni_set.act_q4_K = v->act_q4_K;
	avx512vnni_set.mm_q4_K = v->mm_q4_K;
	avx512vnni_set.mm_q5_K = v->mm_q5_K;
	avx512vnni_set.act_iq4_xs = v->act_iq4_xs;
	avx512vnni_set.mm_iq4_xs = v->mm_iq4_xs;
	avx512vnni_set.act_iq4_nl = v->act_iq4_nl;
	avx512vnni_set.mm_iq4_nl = v->mm_iq4_nl;
	/* MXFP4 reads act_iq4_nl */
	avx512vnni_set.mm_mxfp4 = v->mm_mxfp4;
	/* every such CPU so far has VNNI too (Cooper Lake, Sapphire Rapids,
	 * Zen 4); one without keeps the fp32 tiles */
	if (exl_cpu_features()->avx512bf16) {
		avx512vnni_set.act_bf16 = exl_cpu_kernels_avx512bf16_own.act_bf16;
		avx512vnni_set.mm_bf16 = exl_cpu_kernels_avx512bf16_own.mm_bf16;
	}
}
#endif

#if defined(EXL_HAVE_AMX_KERNELS)
/* The "amx" set: its own kernels (matmul_amx.c) where it has them, the
 * avx512vnni ones for every other type; filled in once (sets_init). */
static struct exl_cpu_kernels amx_set = { .name = "amx" };
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_merge(void)
{
	const struct exl_cpu_kernels *o = &exl_cpu_kernels_amx_own;

	amx_set = avx512vnni_set;
	amx_set.name = o->name;
#define EXL_OWN(f) \
	if (o->f)  \
		amx_set.f = o->f
	EXL_OWN(act_q8_0);
	EXL_OWN(act_q4_0);
	EXL_OWN(act_q4_1);
	EXL_OWN(act_iq4_nl);
	EXL_OWN(act_q8_K);
	EXL_OWN(act_q4_K);
	EXL_OWN(act_iq4_xs);
	EXL_OWN(mm_f32);
	/* every AMX CPU so far has AMX-BF16 too; one without keeps
	 * avx512vnni's F16 and BF16 */
	if (exl_cpu_features()->amx_bf16) {
		EXL_OWN(act_f16);
		EXL_OWN(act_bf16);
		EXL_OWN(mm_f16);
		EXL_OWN(mm_bf16);
	}
	/* its own Q8_0, Q4_0 and IQ4_NL read both forms, with avx512vnni's
	 * act; Q4_K (both forms) and Q5_K are avx512vnni's, whose kernels beat
	 * the tiles on the Xeon measured */
	EXL_OWN(mm_q8_0);
	if (o->mm_q8_0)
		amx_set.mm_q8_0_r8 = o->mm_q8_0_r8;
	EXL_OWN(mm_q4_0);
	if (o->mm_q4_0)
		amx_set.mm_q4_0_r8 = o->mm_q4_0_r8;
	EXL_OWN(mm_q4_1);
	EXL_OWN(mm_q5_0);
	EXL_OWN(mm_q5_1);
	EXL_OWN(mm_iq4_nl);
	if (o->mm_iq4_nl)
		amx_set.mm_iq4_nl_r8 = o->mm_iq4_nl_r8;
	/* none of its own so far: avx512vnni's (avx2vnni's), with its
	 * act_iq4_nl, which the set keeps */
	EXL_OWN(mm_mxfp4);
	EXL_OWN(mm_q2_K);
	EXL_OWN(mm_q3_K);
	EXL_OWN(mm_q6_K);
	EXL_OWN(mm_iq4_xs);
#undef EXL_OWN
}
#endif

static void sets_init(void)
{
#if defined(EXL_HAVE_X86_KERNELS)
	pthread_once(&avx512vnni_once, avx512vnni_merge);
#endif
#if defined(EXL_HAVE_AMX_KERNELS)
	pthread_once(&amx_once, amx_merge);
#endif
}

static const struct exl_cpu_kernels *const all_kernels[] = {
#if defined(EXL_HAVE_AMX_KERNELS)
	&amx_set,
#endif
#if defined(EXL_HAVE_X86_KERNELS)
	&avx512vnni_set,
	&exl_cpu_kernels_avx512,
	&exl_cpu_kernels_avx2vnni, /* never the best: for tests and benchmarks */
	&exl_cpu_kernels_avx2,
#endif
	&exl_cpu_kernels_scalar,
};

static int can_run(const struct exl_cpu_kernels *k)
{
	const struct exl_cpu_features *f = exl_cpu_features();
	bool avx2 = f->avx2 && f->fma && f->f16c;
	bool avx512 = avx2 && f->avx512f && f->avx512bw && f->avx512vl;

	if (!strcmp(k->name, "avx2"))
		return avx2;
	if (!strcmp(k->name, "avx512"))
		return avx512;
	/* avx2vnni's 256-bit vpdpbusd is AVX-512 VL + VNNI */
	if (!strcmp(k->name, "avx2vnni") || !strcmp(k->name, "avx512vnni"))
		return avx512 && f->avx512vnni;
	if (!strcmp(k->name, "amx"))
		return avx512 && f->avx512vnni && f->amx_tile && f->amx_int8 && f->amx_permitted;
	return 1;
}

const char *exl_cpu_kernels_set(size_t i)
{
	size_t n = sizeof(all_kernels) / sizeof(all_kernels[0]);

	/* all_kernels is best first */
	return i < n ? all_kernels[n - 1 - i]->name : NULL;
}

const struct exl_cpu_kernels *exl_cpu_kernels_table(const char *name)
{
	sets_init();
	for (size_t i = 0; i < sizeof(all_kernels) / sizeof(all_kernels[0]); i++)
		if (!strcmp(all_kernels[i]->name, name))
			return all_kernels[i];
	return NULL;
}

int exl_cpu_kernels_available(const char *name)
{
	for (size_t i = 0; i < sizeof(all_kernels) / sizeof(all_kernels[0]); i++)
		if (!strcmp(all_kernels[i]->name, name))
			return can_run(all_kernels[i]);
	return 0;
}

int exl_cpu_kernels_select(const char *force, char *err, size_t errlen)
{
	const char *env = getenv("EXLD_CPU_KERNELS");

	sets_init();
	if (!force && env && *env)
		force = env;
	for (size_t i = 0; i < sizeof(all_kernels) / sizeof(all_kernels[0]); i++) {
		const struct exl_cpu_kernels *k = all_kernels[i];

		if (force && strcmp(k->name, force))
			continue;
		if (!can_run(k)) {
			if (!force)
				continue;
			snprintf(err, errlen, "CPU kernels '%s': this CPU lacks the instructions they need", force);
			return -1;
		}
		atomic_store(&current_kernels, k);
		return 0;
	}
	snprintf(err, errlen, "unknown CPU kernel set '%s' (scalar, avx2, avx2vnni, avx512, avx512vnni, amx)", force);
	return -1;
}

static const struct exl_cpu_kernels *kernels(void)
{
	const struct exl_cpu_kernels *k = atomic_load(&current_kernels);
	char err[128];

	if (k)
		return k;
	/* an unusable EXLD_CPU_KERNELS falls back to the best set */
	if (exl_cpu_kernels_select(NULL, err, sizeof(err)) < 0) {
		fprintf(stderr, "exld: %s; using the best available\n", err);
		for (size_t i = 0;; i++) {
			if (can_run(all_kernels[i])) {
				atomic_store(&current_kernels, all_kernels[i]);
				break;
			}
		}
	}
	return atomic_load(&current_kernels);
}

const char *exl_cpu_kernels_name(void)
{
	return kernels()->name;
}

void exl_matmul_scratch_free(struct exl_matmul_scratch *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}

static int scratch_reserve(struct exl_matmul_scratch *s, size_t bytes)
{
	if (s->cap >= bytes)
		return 0;
	void *p = aligned_alloc(64, exl_act_align(bytes));
	if (!p)
		return -1;
	free(s->buf);
	s->buf = p;
	s->cap = bytes;
	return 0;
}

/* One weight of a call: its kernel and context, and its share of the
 * call's chunks of rows. */
struct mm_part {
	exl_mm_fn fn;
	exl_act_fn act_fn;
	exl_act_batch_fn act_batch;
	size_t act_bytes;
	struct exl_mm_ctx m;
	int64_t chunk_rows;  /* rows per unit of work */
	int64_t chunk0;      /* the call's index of its first chunk */
};

struct mm_job {
	const float *x;
	int n_parts;
	struct mm_part part[EXL_CPU_MATMUL_MAX_N];
	int64_t n_chunks;    /* of every part */
	_Atomic int64_t next_chunk;
};

/* Row granularity: a multiple of every variant's row tile, small enough
 * that the rows of one block stay in L1 while all columns sweep them. */
#define ROW_UNIT 16
/* Input vectors per pass over a block of rows, so their activations stay
 * in L2. */
#define COL_CHUNK 64

/* The parts of a call share x and its quantized form (part 0's). */
static void quantize_job(void *ctx, int ith, int nth)
{
	struct mm_job *j = ctx;
	const struct mm_part *p = &j->part[0];
	size_t b, e;

	exl_pool_split((size_t)p->m.n, ith, nth, &b, &e);
	if (p->act_batch) {
		p->act_batch(j->x, p->m.cols, p->m.n, (int)b, (int)e, (uint8_t *)p->m.act, p->m.act_stride);
		return;
	}
	for (size_t i = b; i < e; i++)
		p->act_fn(j->x + i * (size_t)p->m.cols, (uint8_t *)p->m.act + i * p->m.act_stride,
			  p->m.cols);
}

static void rows_all_columns(const struct mm_part *p, int64_t r0, int64_t r1)
{
	if (p->m.n == 1) {
		p->fn(&p->m, r0, r1, 0, 1);
		return;
	}
	for (int c0 = 0; c0 < p->m.n; c0 += COL_CHUNK) {
		int c1 = c0 + COL_CHUNK < p->m.n ? c0 + COL_CHUNK : p->m.n;

		for (int64_t rb = r0; rb < r1; rb += ROW_UNIT) {
			int64_t re = rb + ROW_UNIT < r1 ? rb + ROW_UNIT : r1;
			p->fn(&p->m, rb, re, c0, c1);
		}
	}
}

/* Threads take chunks of rows from a shared counter, so a thread that the
 * OS preempts (or a slower core) does not hold up the others.  Which thread
 * computes an output never changes its value. */
static void matmul_job(void *ctx, int ith, int nth)
{
	struct mm_job *j = ctx;
	int pi = 0;

	(void)ith;
	(void)nth;
	for (;;) {
		int64_t ch = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed);
		if (ch >= j->n_chunks)
			break;
		while (pi + 1 < j->n_parts && ch >= j->part[pi + 1].chunk0)
			pi++;
		const struct mm_part *p = &j->part[pi];
		int64_t r0 = (ch - p->chunk0) * p->chunk_rows;
		int64_t r1 = r0 + p->chunk_rows < p->m.rows ? r0 + p->chunk_rows : p->m.rows;
		rows_all_columns(p, r0, r1);
	}
}

/* Multiply-adds below which a matmul is not worth spreading over the pool. */
#define MM_SERIAL_MACS 65536.0

static void run(struct exl_pool *pool, exl_pool_fn fn, void *ctx)
{
	if (pool)
		exl_pool_run(pool, fn, ctx);
	else
		fn(ctx, 0, 1);
}

void exl_cpu_kernels_for(const struct exl_cpu_kernels *k, uint32_t type, uint32_t layout, exl_mm_fn *fn,
			 exl_act_fn *act, exl_act_batch_fn *act_batch)
{
	*fn = NULL;
	*act = NULL;
	*act_batch = NULL;
	switch (type) {
	case EXL_F32:
		*fn = k->mm_f32;
		break;
	case EXL_F16:
		*fn = k->mm_f16;
		*act_batch = k->act_f16;
		break;
	case EXL_BF16:
		*fn = k->mm_bf16;
		*act_batch = k->act_bf16;
		break;
	case EXL_Q8_0:
		*fn = layout == EXL_LAYOUT_ROWS8 ? k->mm_q8_0_r8 : k->mm_q8_0;
		*act = k->act_q8_0;
		break;
	case EXL_Q4_0:
		*fn = layout == EXL_LAYOUT_ROWS8 ? k->mm_q4_0_r8 : k->mm_q4_0;
		*act = k->act_q4_0;
		break;
	case EXL_Q4_1:
		*fn = k->mm_q4_1;
		*act = k->act_q4_1;
		break;
	case EXL_Q5_0:
		*fn = k->mm_q5_0;
		*act = k->act_q4_1;
		break;
	case EXL_Q5_1:
		*fn = k->mm_q5_1;
		*act = k->act_q4_1;
		break;
	case EXL_IQ4_NL:
		*fn = layout == EXL_LAYOUT_ROWS8 ? k->mm_iq4_nl_r8 : k->mm_iq4_nl;
		*act = k->act_iq4_nl;
		break;
	case EXL_MXFP4: /* GGUF rows only: nothing repacks it */
		*fn = k->mm_mxfp4;
		*act = k->act_iq4_nl;
		break;
	case EXL_Q2_K:
		*fn = k->mm_q2_K;
		*act = k->act_q8_K;
		break;
	case EXL_Q3_K:
		*fn = k->mm_q3_K;
		*act = k->act_q8_K;
		break;
	case EXL_Q4_K:
		*fn = layout == EXL_LAYOUT_ROWS8 ? k->mm_q4_K_r8 : k->mm_q4_K;
		*act = k->act_q4_K;
		break;
	case EXL_Q5_K:
		*fn = k->mm_q5_K;
		*act = k->act_q4_K;
		break;
	case EXL_Q6_K:
		*fn = k->mm_q6_K;
		*act = k->act_q8_K;
		break;
	case EXL_IQ4_XS:
		*fn = k->mm_iq4_xs;
		*act = k->act_iq4_xs;
		break;
	default:
		break;
	}
}

/* Checks w and fills p's kernel, act and context for y = x . W^T. */
static int part_setup(const struct exl_cpu_kernels *k, const struct exl_weight *w, const float *x,
		      float *y, int n, struct mm_part *p, char *err, size_t errlen)
{
	if (n < 0 || w->rows <= 0 || w->cols <= 0) {
		snprintf(err, errlen, "matmul: bad shape (rows %lld, cols %lld, n %d)",
			 (long long)w->rows, (long long)w->cols, n);
		return -1;
	}
	if (exl_dtype_row_bytes(w->type, (uint64_t)w->cols) != w->row_bytes || !w->row_bytes) {
		snprintf(err, errlen, "matmul: %lld columns are not whole blocks of type %u, or row_bytes %zu is wrong",
			 (long long)w->cols, w->type, w->row_bytes);
		return -1;
	}
	if (n == 0)
		return 0; /* nothing to multiply, whatever the type */

	exl_cpu_kernels_for(k, w->type, w->layout, &p->fn, &p->act_fn, &p->act_batch);
	if (w->layout != EXL_LAYOUT_ROWS && (w->layout != exl_cpu_matmul_layout(w->type) || !p->fn)) {
		snprintf(err, errlen, "matmul: weight in layout %u, which kernel set %s does not read",
			 w->layout, k->name);
		return -1;
	}
	if (!p->fn || !exl_dtype_supported(w->type)) {
		const struct exl_dtype_info *info = exl_dtype_info(w->type);
		snprintf(err, errlen, "matmul: weight type %s is not supported on the CPU",
			 info ? info->name : "(unknown)");
		return -1;
	}
	if (p->act_batch)
		p->act_bytes = exl_act_bf16_pairs_bytes(w->cols);
	else if (p->act_fn)
		p->act_bytes = exl_dtype_info(w->type)->block_elems == 32 ? exl_act_q8_0_bytes(w->cols)
									   : exl_act_q8_K_bytes(w->cols);
	p->m = (struct exl_mm_ctx){
		.w = w->data,
		.row_bytes = w->row_bytes,
		.rows = w->rows,
		.cols = w->cols,
		.x = x,
		.y = y,
		.n = n,
		.act_stride = p->act_bytes,
	};
	return 0;
}

uint32_t exl_cpu_matmul_layout(uint32_t type)
{
	const struct exl_cpu_kernels *k = kernels();

	if ((type == EXL_Q4_0 && k->mm_q4_0_r8) || (type == EXL_Q4_K && k->mm_q4_K_r8) ||
	    (type == EXL_Q8_0 && k->mm_q8_0_r8) || (type == EXL_IQ4_NL && k->mm_iq4_nl_r8))
		return EXL_LAYOUT_ROWS8;
	return EXL_LAYOUT_ROWS;
}

int exl_cpu_matmul(struct exl_pool *pool, const struct exl_weight *w,
		   const float *x, float *y, int n, struct exl_matmul_scratch *s,
		   char *err, size_t errlen)
{
	return exl_cpu_matmul_n(pool, &w, 1, x, &y, n, s, err, errlen);
}

int exl_cpu_matmul_n(struct exl_pool *pool, const struct exl_weight *const *w, int count,
		     const float *x, float *const *y, int n, struct exl_matmul_scratch *s,
		     char *err, size_t errlen)
{
	const struct exl_cpu_kernels *k = kernels();
	struct mm_job j = { .x = x, .n_parts = count };
	double macs = 0;

	if (count < 1 || count > EXL_CPU_MATMUL_MAX_N) {
		snprintf(err, errlen, "matmul: %d weights in one call (1 to %d)", count, EXL_CPU_MATMUL_MAX_N);
		return -1;
	}
	for (int i = 0; i < count; i++) {
		struct mm_part *p = &j.part[i];

		if (part_setup(k, w[i], x, y[i], n, p, err, errlen) < 0)
			return -1;
		/* one quantized x serves every part, so all must take the
		 * same: otherwise each weight is a call of its own */
		if (i > 0 && (p->act_fn != j.part[0].act_fn || p->act_batch != j.part[0].act_batch ||
			      p->m.cols != j.part[0].m.cols)) {
			for (int t = 0; t < count; t++)
				if (exl_cpu_matmul_n(pool, &w[t], 1, x, &y[t], n, s, err, errlen) < 0)
					return -1;
			return 0;
		}
		macs += (double)w[i]->rows * (double)w[i]->cols * n;
	}
	if (n == 0)
		return 0;

	struct mm_part *p0 = &j.part[0];
	if (p0->act_fn || p0->act_batch) {
		if ((size_t)n > SIZE_MAX / p0->act_bytes || scratch_reserve(s, (size_t)n * p0->act_bytes) < 0) {
			snprintf(err, errlen, "matmul: out of memory for %d quantized activations of %lld",
				 n, (long long)p0->m.cols);
			return -1;
		}
		for (int i = 0; i < count; i++)
			j.part[i].m.act = s->buf;
		if (n == 1 && p0->act_batch)
			p0->act_batch(x, p0->m.cols, 1, 0, 1, s->buf, p0->act_bytes);
		else if (n == 1)
			p0->act_fn(x, s->buf, p0->m.cols);
		else
			run(pool, quantize_job, &j);
	}

	/* A tiny product (a LoRA adapter's A or B over a few rows, a 260K
	 * model's weights) takes less time than waking the pool: it runs on
	 * the calling thread.  Each row's result is the same either way. */
	if (macs < MM_SERIAL_MACS)
		pool = NULL;
	/* about 8 chunks per thread and part, in whole row units */
	int nth = pool ? exl_pool_size(pool) : 1;
	for (int i = 0; i < count; i++) {
		struct mm_part *p = &j.part[i];
		int64_t units = (p->m.rows + ROW_UNIT - 1) / ROW_UNIT;
		int64_t per = (units + 8 * nth - 1) / (8 * nth);

		p->chunk_rows = per * ROW_UNIT;
		p->chunk0 = j.n_chunks;
		j.n_chunks += (p->m.rows + p->chunk_rows - 1) / p->chunk_rows;
	}
	atomic_init(&j.next_chunk, 0);
	run(pool, matmul_job, &j);
	return 0;
}
