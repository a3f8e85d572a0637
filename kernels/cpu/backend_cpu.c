/* The CPU backend: the op table of kernels/backend.h over host memory, run
 * on a persistent worker pool.  This file checks each op's arguments and
 * hands it to its driver (ops_*.c, matmul.c). */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/host_mem.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/repack.h"
#include "kernels/formats/dtype.h"
#include "kernels/mem_track.h"
#include "kernels/formats/quant.h"

struct cpu_backend {
	struct exl_backend base;
	struct exl_pool *pool;
	const struct exl_cpu_ops *k;
	struct exl_matmul_scratch mm;
	struct exl_cpu_batch batch;
	unsigned batch_id;       /* bumped by every set_batch (keys the rope tables) */
	/* Two sets of tables: models whose layers alternate between two rope
	 * settings (gemma's local and global layers) keep both. */
	struct exl_rope_cache rope[2];
	unsigned rope_uses;
	struct exl_attn_scratch attn;
	struct exl_mem_track weights; /* what upload was given: mapped file bytes */
	struct exl_mem_track buffers; /* what alloc handed out: host RAM */
	struct exl_mem_track repacked; /* weights repack copied: host RAM, ours to free */
	bool failed;
	char err[256];
};

static const struct exl_backend_ops cpu_ops;

static struct cpu_backend *cpu_of(struct exl_backend *be)
{
	return (struct cpu_backend *)be;
}

static void note(struct cpu_backend *cb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct cpu_backend *cb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cb->err, sizeof(cb->err), fmt, ap);
	va_end(ap);
}

/* The first failure of a queued op: kept until download / sync reports it. */
static void fail(struct cpu_backend *cb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void fail(struct cpu_backend *cb, const char *fmt, ...)
{
	va_list ap;

	if (cb->failed)
		return;
	cb->failed = true;
	va_start(ap, fmt);
	vsnprintf(cb->err, sizeof(cb->err), fmt, ap);
	va_end(ap);
}

/* ---- memory ----------------------------------------------------------- */

static void *op_alloc(struct exl_backend *be, size_t bytes)
{
	struct cpu_backend *cb = cpu_of(be);
	size_t sz;
	void *p;

	if (bytes > SIZE_MAX - 63) {
		note(cb, "alloc: %zu bytes is too large", bytes);
		return NULL;
	}
	sz = bytes ? (bytes + 63) & ~(size_t)63 : 64;
	p = exl_host_alloc(sz);
	if (!p || exl_mem_track_add(&cb->buffers, p, sz)) {
		exl_host_free(p, sz);
		note(cb, "alloc: out of memory for %zu bytes", bytes);
		return NULL;
	}
	return p;
}

static void op_free(struct exl_backend *be, void *p)
{
	if (!p)
		return;
	struct exl_mem_track *t = &cpu_of(be)->buffers;
	size_t bytes = exl_mem_track_bytes(t, p);

	/* not ours (a caller's bug): leave it, as free() would not */
	if (!exl_mem_track_remove(t, p))
		return;
	exl_host_free(p, bytes);
}

static const void *op_upload(struct exl_backend *be, const void *src, size_t bytes)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!src) {
		note(cb, "upload: no source");
		return NULL;
	}
	if (exl_mem_track_add(&cb->weights, src, bytes)) {
		note(cb, "upload: out of memory");
		return NULL;
	}
	return src; /* host memory is backend memory: used in place */
}

static void op_unload(struct exl_backend *be, const void *p)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!p)
		return;
	size_t bytes = exl_mem_track_bytes(&cb->repacked, p);

	if (exl_mem_track_remove(&cb->repacked, p))
		exl_host_free((void *)p, bytes);
	else
		exl_mem_track_remove(&cb->weights, p);
}

/* F16 and BF16 weights of 2 MiB or more are copied as they are into huge
 * pages (host_mem.h): their kernels take no software prefetch, and read
 * from the file's 4 KiB pages they decoded 8-12 % slower
 * (docs/cpu-backend.md).  The other types' kernels read the file either
 * way as fast, or have a layout of their own. */
static bool copy_to_huge(const struct exl_weight *w)
{
	return (w->type == EXL_F16 || w->type == EXL_BF16) &&
	       (size_t)w->rows * w->row_bytes >= EXL_HOST_HUGE_BYTES && exl_host_huge_pages();
}

/* A weight the set in use reads faster in a layout of its own
 * (exl_cpu_matmul_layout), or in huge pages (copy_to_huge), is copied once
 * here; the upload (the mapped file) is given up, so the weight's bytes
 * stay counted once. */
static int op_repack(struct exl_backend *be, struct exl_weight *w, char *err, size_t errlen)
{
	struct cpu_backend *cb = cpu_of(be);
	const uint32_t layout = exl_cpu_matmul_layout(w->type);
	const char *env = getenv("EXLD_CPU_REPACK");
	size_t bytes;

	/* EXLD_CPU_REPACK=0: every weight read in place from the file (the
	 * same outputs, bit for bit; tests compare the two) */
	if (w->layout != EXL_LAYOUT_ROWS || (env && !strcmp(env, "0")))
		return 0;
	if (layout == EXL_LAYOUT_ROWS) {
		if (!copy_to_huge(w))
			return 0;
		bytes = (size_t)w->rows * w->row_bytes;
	} else {
		bytes = exl_cpu_repack_bytes(w->type, layout, w->rows, w->cols);
		if (!bytes || w->row_bytes != exl_dtype_row_bytes(w->type, (uint64_t)w->cols)) {
			snprintf(err, errlen, "repack: no layout %u for %lld x %lld of type %u", layout,
				 (long long)w->rows, (long long)w->cols, w->type);
			return -1;
		}
	}
	void *p = exl_host_alloc(bytes);
	if (!p || exl_mem_track_add(&cb->repacked, p, bytes)) {
		exl_host_free(p, bytes);
		snprintf(err, errlen, "repack: out of memory for %zu bytes", bytes);
		return -1;
	}
	if (layout == EXL_LAYOUT_ROWS) {
		memcpy(p, w->data, bytes);
	} else if (exl_cpu_repack(w->type, layout, w->data, p, w->rows, w->cols)) {
		exl_mem_track_remove(&cb->repacked, p);
		exl_host_free(p, bytes);
		snprintf(err, errlen, "repack: type %u has no layout %u", w->type, layout);
		return -1;
	}
	exl_mem_track_remove(&cb->weights, w->data);
	w->data = p;
	w->layout = layout;
	return 0;
}

static int op_mem_info(struct exl_backend *be, struct exl_backend_mem *m, char *err,
		       size_t errlen)
{
	struct cpu_backend *cb = cpu_of(be);

	(void)err;
	(void)errlen;
	memset(m, 0, sizeof(*m));
	snprintf(m->device, sizeof(m->device), "cpu");
	m->weight_bytes = exl_mem_track_total(&cb->weights) + exl_mem_track_total(&cb->repacked);
	m->repacked_bytes = exl_mem_track_total(&cb->repacked);
	m->buffer_bytes = exl_mem_track_total(&cb->buffers);
	return 0;
}

/* Reports a pending failure once; the next pass starts clean. */
static int finish(struct cpu_backend *cb)
{
	if (cb->failed) {
		cb->failed = false;
		return -1;
	}
	cb->err[0] = '\0';
	return 0;
}

static int op_download(struct exl_backend *be, void *dst_host, const void *src, size_t bytes)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!cb->failed && bytes) {
		if (!dst_host || !src)
			fail(cb, "download: no %s buffer", dst_host ? "source" : "destination");
		else
			memcpy(dst_host, src, bytes);
	}
	return finish(cb);
}

static int op_copy_in(struct exl_backend *be, void *dst, const void *src_host, size_t bytes)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed)
		return -1;
	if (!bytes)
		return 0;
	if (!dst || !src_host) {
		note(cb, "copy_in: no %s buffer", dst ? "source" : "destination");
		return -1;
	}
	memcpy(dst, src_host, bytes);
	return 0;
}

static int op_sync(struct exl_backend *be)
{
	return finish(cpu_of(be));
}

static int op_copy(struct exl_backend *be, void *dst, const void *src, size_t bytes)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed)
		return -1;
	if (!bytes)
		return 0;
	if (!dst || !src) {
		note(cb, "copy: no %s buffer", dst ? "source" : "destination");
		return -1;
	}
	memmove(dst, src, bytes);
	return 0;
}

/* ---- batch layout ----------------------------------------------------- */

static int op_set_batch(struct exl_backend *be, const struct exl_batch_desc *b)
{
	struct cpu_backend *cb = cpu_of(be);
	char msg[200];

	if (cb->failed)
		return -1;
	cb->batch_id++;
	if (exl_cpu_batch_set(&cb->batch, b, msg, sizeof(msg))) {
		note(cb, "%s", msg);
		return -1;
	}
	return 0;
}

/* ---- matmul, embed ---------------------------------------------------- */

static void op_matmul(struct exl_backend *be, const struct exl_weight *w, const float *x,
		      float *y, int n)
{
	struct cpu_backend *cb = cpu_of(be);
	char msg[200];

	if (cb->failed)
		return;
	if (!w || !x || !y) {
		fail(cb, "matmul: missing weight, input or output");
		return;
	}
	if (exl_cpu_matmul(cb->pool, w, x, y, n, &cb->mm, msg, sizeof(msg)))
		fail(cb, "matmul: %s", msg);
}

static void op_matmul_n(struct exl_backend *be, const struct exl_weight *const *w, int count,
			const float *x, float *const *y, int n)
{
	struct cpu_backend *cb = cpu_of(be);
	char msg[200];

	if (cb->failed)
		return;
	if (!w || !x || !y || count < 1) {
		fail(cb, "matmul: missing weights, input or outputs");
		return;
	}
	for (int i = 0; i < count; i++) {
		if (!w[i] || !y[i]) {
			fail(cb, "matmul: missing weight or output %d of %d", i, count);
			return;
		}
	}
	if (exl_cpu_matmul_n(cb->pool, w, count, x, y, n, &cb->mm, msg, sizeof(msg)))
		fail(cb, "matmul: %s", msg);
}

struct embed_job {
	const struct exl_weight *w;
	const int32_t *tokens;
	float *y;
	int n;
};

static void embed_fn(void *ctx, int ith, int nth)
{
	const struct embed_job *j = ctx;
	const uint8_t *data = j->w->data;
	const size_t cols = (size_t)j->w->cols;
	size_t b, e;

	exl_pool_split((size_t)j->n, ith, nth, &b, &e);
	/* the type and shape were checked: this cannot fail */
	for (size_t i = b; i < e; i++)
		exl_dequantize_row(j->w->type, data + (size_t)j->tokens[i] * j->w->row_bytes,
				   j->y + i * cols, j->w->cols);
}

static void op_embed(struct exl_backend *be, const struct exl_weight *w, const int32_t *tokens,
		     float *y, int n)
{
	struct cpu_backend *cb = cpu_of(be);
	struct embed_job j = { w, tokens, y, n };

	if (cb->failed)
		return;
	if (!w || !w->data || !tokens || !y || n < 0) {
		fail(cb, "embed: missing weight, tokens or output, or %d tokens", n);
		return;
	}
	if (!exl_dtype_supported(w->type) || w->rows <= 0 || w->cols <= 0 ||
	    w->cols > INT32_MAX || w->row_bytes != exl_dtype_row_bytes(w->type, (uint64_t)w->cols)) {
		const struct exl_dtype_info *di = exl_dtype_info(w->type);

		fail(cb, "embed: cannot read a %s table of %lld rows x %lld", di && di->name ?
		     di->name : "unknown-type", (long long)w->rows, (long long)w->cols);
		return;
	}
	for (int i = 0; i < n; i++) {
		if (tokens[i] < 0 || tokens[i] >= w->rows) {
			fail(cb, "embed: token %d (at %d) is outside the vocabulary of %lld",
			     tokens[i], i, (long long)w->rows);
			return;
		}
	}
	if (n > 1 && exl_pool_size(cb->pool) > 1 && (size_t)n * (size_t)w->cols >= 16384)
		exl_pool_run(cb->pool, embed_fn, &j);
	else
		embed_fn(&j, 0, 1);
}

/* ---- element-wise ----------------------------------------------------- */

static bool rows_ok(struct cpu_backend *cb, const char *op, const void *a, const void *b,
		    const void *c, int n, int dim)
{
	if (cb->failed)
		return false;
	if (!a || !b || !c || n < 0 || dim <= 0) {
		fail(cb, "%s: missing buffer or bad shape (%d rows of %d)", op, n, dim);
		return false;
	}
	return true;
}

static void op_rmsnorm(struct exl_backend *be, float *y, const float *x, const float *w, int n,
		       int dim, float eps)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!rows_ok(cb, "rmsnorm", y, x, w, n, dim))
		return;
	if (!(eps >= 0.0f) || !isfinite(eps)) {
		fail(cb, "rmsnorm: epsilon %g", (double)eps);
		return;
	}
	exl_cpu_rmsnorm(cb->pool, cb->k, y, x, w, n, dim, eps);
}

static void op_add_bias(struct exl_backend *be, float *y, const float *b, int n, int dim)
{
	struct cpu_backend *cb = cpu_of(be);

	if (rows_ok(cb, "add_bias", y, b, b, n, dim))
		exl_cpu_add_bias(cb->pool, cb->k, y, b, n, dim);
}

static void op_add(struct exl_backend *be, float *y, const float *x, size_t count)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed || !count)
		return;
	if (!y || !x) {
		fail(cb, "add: missing buffer");
		return;
	}
	exl_cpu_add(cb->pool, cb->k, y, x, count);
}

static void op_swiglu(struct exl_backend *be, float *g, const float *u, size_t count)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed || !count)
		return;
	if (!g || !u) {
		fail(cb, "swiglu: missing buffer");
		return;
	}
	exl_cpu_swiglu(cb->pool, cb->k, g, u, count);
}

static void op_softmax(struct exl_backend *be, float *x, int n, int dim)
{
	struct cpu_backend *cb = cpu_of(be);

	if (rows_ok(cb, "softmax", x, x, x, n, dim))
		exl_cpu_softmax(cb->pool, cb->k, x, n, dim);
}

static void op_gather_rows(struct exl_backend *be, float *dst, const float *src,
			   const int32_t *rows, int n, int dim)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!rows_ok(cb, "gather_rows", dst, src, rows, n, dim))
		return;
	for (int i = 0; i < n; i++) {
		if (rows[i] < 0) {
			fail(cb, "gather_rows: row %d at %d", rows[i], i);
			return;
		}
	}
	exl_cpu_gather_rows(cb->pool, dst, src, rows, n, dim);
}

/* ---- rope, KV cache, attention ---------------------------------------- */

static void op_rope(struct exl_backend *be, float *x, int n, int n_heads, int head_dim,
		    const struct exl_rope_params *p)
{
	struct cpu_backend *cb = cpu_of(be);
	char msg[200];

	if (cb->failed)
		return;
	if (cb->batch.n_tokens <= 0 || n > cb->batch.n_tokens) {
		fail(cb, "rope: %d rows but the batch layout has %d tokens (set_batch first)",
		     n, cb->batch.n_tokens);
		return;
	}
	struct exl_rope_cache *rc = &cb->rope[0];

	if (!exl_rope_cache_matches(rc, cb->batch_id, n, p)) {
		struct exl_rope_cache *other = &cb->rope[1];

		if (exl_rope_cache_matches(other, cb->batch_id, n, p) ||
		    other->last_use < rc->last_use)
			rc = other;
	}
	rc->last_use = ++cb->rope_uses;
	if (exl_cpu_rope(cb->pool, cb->k, rc, cb->batch_id, cb->batch.pos, x, n, n_heads,
			 head_dim, p, msg, sizeof(msg)))
		fail(cb, "%s", msg);
}

static void op_kv_store(struct exl_backend *be, const struct exl_kv_layer *kv, const float *k,
			const float *v)
{
	struct cpu_backend *cb = cpu_of(be);
	char msg[200];

	if (cb->failed)
		return;
	if (!k || !v) {
		fail(cb, "kv_store: missing K or V");
		return;
	}
	/* kv_store writes each token's own page only; its window's first
	 * position is its own */
	if (exl_cpu_kv_check(&cb->batch, kv, 1, msg, sizeof(msg))) {
		fail(cb, "kv_store: %s", msg);
		return;
	}
	exl_cpu_kv_store(cb->pool, cb->k, &cb->batch, kv, k, v);
}

static void op_attention(struct exl_backend *be, const struct exl_kv_layer *kv, const float *q,
			 float *out, int n_heads, const struct exl_attn_params *p)
{
	struct cpu_backend *cb = cpu_of(be);
	char msg[200];

	if (cb->failed)
		return;
	if (!q || !out || !p) {
		fail(cb, "attention: missing q, output or parameters");
		return;
	}
	if (p->window < 0) {
		fail(cb, "attention: window %d", p->window);
		return;
	}
	if (exl_cpu_kv_check(&cb->batch, kv, p->window, msg, sizeof(msg))) {
		fail(cb, "attention: %s", msg);
		return;
	}
	if (exl_cpu_attention(cb->pool, cb->k, &cb->attn, &cb->batch, kv, q, out, n_heads, p,
			      msg, sizeof(msg)))
		fail(cb, "%s", msg);
}

/* ---- scale, softcap, geglu, add_rows_scaled --------------------------- */

static void op_scale(struct exl_backend *be, float *x, float s, size_t count)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed || !count)
		return;
	if (!x || !isfinite(s)) {
		fail(cb, "scale: missing buffer or factor %g", (double)s);
		return;
	}
	exl_cpu_scale(cb->pool, x, s, count);
}

static void op_softcap(struct exl_backend *be, float *x, float cap, size_t count)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed || !count)
		return;
	if (!x || !(cap > 0.0f) || !isfinite(cap)) {
		fail(cb, "softcap: missing buffer or cap %g", (double)cap);
		return;
	}
	exl_cpu_softcap(cb->pool, x, cap, count);
}

static void op_geglu(struct exl_backend *be, float *g, const float *u, size_t count)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed || !count)
		return;
	if (!g || !u) {
		fail(cb, "geglu: missing buffer");
		return;
	}
	exl_cpu_geglu(cb->pool, g, u, count);
}

static void op_swiglu_oai(struct exl_backend *be, float *g, const float *u, size_t count,
			  float alpha, float limit)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed || !count)
		return;
	if (!g || !u || !isfinite(alpha) || !isfinite(limit)) {
		fail(cb, "swiglu_oai: missing buffer, alpha %g or limit %g", (double)alpha,
		     (double)limit);
		return;
	}
	exl_cpu_swiglu_oai(cb->pool, g, u, count, alpha, limit);
}

static void op_gelu(struct exl_backend *be, float *x, size_t count)
{
	struct cpu_backend *cb = cpu_of(be);

	if (cb->failed || !count)
		return;
	if (!x) {
		fail(cb, "gelu: missing buffer");
		return;
	}
	exl_cpu_gelu(cb->pool, x, count);
}

static void op_layernorm(struct exl_backend *be, float *y, const float *x, const float *w,
			 const float *b, int n, int dim, float eps)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!rows_ok(cb, "layernorm", y, x, w, n, dim))
		return;
	if (!(eps >= 0.0f) || !isfinite(eps)) {
		fail(cb, "layernorm: epsilon %g", (double)eps);
		return;
	}
	exl_cpu_layernorm(cb->pool, y, x, w, b, n, dim, eps);
}

static void op_add_rows_scaled(struct exl_backend *be, float *y, const float *x,
			       const int32_t *rows, const float *w, int n, int dim)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!rows_ok(cb, "add_rows_scaled", y, x, rows, n, dim))
		return;
	if (n && !w) {
		fail(cb, "add_rows_scaled: missing weights");
		return;
	}
	for (int i = 0; i < n; i++) {
		if (rows[i] < 0) {
			fail(cb, "add_rows_scaled: row %d at %d", rows[i], i);
			return;
		}
	}
	exl_cpu_add_rows_scaled(cb->pool, y, x, rows, w, n, dim);
}

/* ---- lifetime --------------------------------------------------------- */

static void op_destroy(struct exl_backend *be)
{
	struct cpu_backend *cb = cpu_of(be);

	if (!cb)
		return;
	exl_pool_destroy(cb->pool);
	exl_matmul_scratch_free(&cb->mm);
	exl_cpu_batch_free(&cb->batch);
	exl_rope_cache_free(&cb->rope[0]);
	exl_rope_cache_free(&cb->rope[1]);
	exl_attn_scratch_free(&cb->attn);
	for (size_t i = 0; i < cb->repacked.n; i++)
		exl_host_free((void *)cb->repacked.ptr[i], cb->repacked.bytes[i]);
	for (size_t i = 0; i < cb->buffers.n; i++)
		exl_host_free((void *)cb->buffers.ptr[i], cb->buffers.bytes[i]);
	exl_mem_track_free(&cb->repacked);
	exl_mem_track_free(&cb->weights);
	exl_mem_track_free(&cb->buffers);
	free(cb);
}

static const char *op_error(const struct exl_backend *be)
{
	const struct cpu_backend *cb = (const struct cpu_backend *)be;

	return cb->err[0] ? cb->err : NULL;
}

static const struct exl_backend_ops cpu_ops = {
	.name = "cpu",
	.cheap_rows = 4, /* matmul's memory-bound calls (matmul_x86.h, EXL_STREAM_N) */
	.destroy = op_destroy,
	.alloc = op_alloc,
	.free = op_free,
	.upload = op_upload,
	.unload = op_unload,
	.repack = op_repack,
	.download = op_download,
	.copy_in = op_copy_in,
	.sync = op_sync,
	.set_batch = op_set_batch,
	.matmul = op_matmul,
	.matmul_n = op_matmul_n,
	.embed = op_embed,
	.rmsnorm = op_rmsnorm,
	.add_bias = op_add_bias,
	.add = op_add,
	.swiglu = op_swiglu,
	.rope = op_rope,
	.kv_store = op_kv_store,
	.attention = op_attention,
	.gather_rows = op_gather_rows,
	.softmax = op_softmax,
	.mem_info = op_mem_info,
	.copy = op_copy,
	.error = op_error,
	.scale = op_scale,
	.softcap = op_softcap,
	.geglu = op_geglu,
	.add_rows_scaled = op_add_rows_scaled,
	.swiglu_oai = op_swiglu_oai,
	.layernorm = op_layernorm,
	.gelu = op_gelu,
};

struct exl_backend *exl_backend_cpu_create(int n_threads, char *err, size_t errlen)
{
	struct cpu_backend *cb = calloc(1, sizeof(*cb));

	if (!cb) {
		snprintf(err, errlen, "cpu backend: out of memory");
		return NULL;
	}
	cb->base.ops = &cpu_ops;
	cb->pool = exl_pool_create(n_threads, err, errlen);
	if (!cb->pool) {
		free(cb);
		return NULL;
	}
	/* The row kernels follow the matmul kernel set (EXLD_CPU_KERNELS or the
	 * best this CPU runs), so one name forces both. */
	cb->k = exl_cpu_ops_get(exl_cpu_kernels_name());
	if (!cb->k)
		cb->k = exl_cpu_ops_best();
	return &cb->base;
}

int exl_backend_cpu_threads(const struct exl_backend *be)
{
	if (!be || be->ops != &cpu_ops)
		return 0;
	return exl_pool_size(((const struct cpu_backend *)be)->pool);
}


const char *exl_backend_cpu_matmul_kernels(const struct exl_backend *be)
{
	if (!be || be->ops != &cpu_ops)
		return NULL;
	return exl_cpu_kernels_name();
}

const char *exl_backend_cpu_kernels(const struct exl_backend *be)
{
	if (!be || be->ops != &cpu_ops)
		return NULL;
	return ((const struct cpu_backend *)be)->k->name;
}
