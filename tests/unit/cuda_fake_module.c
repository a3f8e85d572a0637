/* Modules that look like libexld-cuda.so, for the tests that need one
 * without a GPU:
 *
 *   FAKE_NO_ENTRY   no entry point at all;
 *   FAKE_ABI, FAKE_VERSION
 *                   an entry point whose table has the wrong ABI or comes
 *                   from another exld version, or (with neither wrong) has
 *                   no functions: the loader must refuse each before
 *                   calling anything but the entry (test_cuda_load);
 *   FAKE_VRAM       a working table with one device, "Fake GPU", whose
 *                   memory is host memory counted against a budget, for
 *                   test_cuda_memory and test_cuda_cli.sh: models that do
 *                   not fit, KV pools sized from free memory, the status's
 *                   device memory.  Its ops compute nothing (each fails with
 *                   "fake CUDA device: no kernels", so a forward pass ends
 *                   in an error, never a crash), but memory, upload,
 *                   download, copy_in and copy work, and are counted.
 *
 * The FAKE_VRAM device is set up from the environment at the first call:
 *   EXLD_FAKE_VRAM_TOTAL_MIB   its memory (default 1024)
 *   EXLD_FAKE_VRAM_FREE_MIB    free before anything is allocated (default
 *                              all of it); other processes' use, as it were
 *   EXLD_FAKE_VRAM_ALLOC_MIB   what allocations may really take (default
 *                              the free memory): less than free makes a
 *                              device that reports more than it can give.
 */
#include "kernels/cuda/cuda_module.h"

#ifdef FAKE_NO_ENTRY
int exl_cuda_fake_not_the_entry(void);

int exl_cuda_fake_not_the_entry(void)
{
	return 1;
}
#else
#ifndef FAKE_ABI
#define FAKE_ABI EXL_CUDA_MODULE_ABI
#endif
#ifndef FAKE_VERSION
#error "a fake module with an entry point needs FAKE_VERSION"
#endif

#ifdef FAKE_VRAM
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

/* The calls the tests count (exl_cuda_fake_counts). */
struct exl_cuda_fake_counts {
	long upload, alloc, download, copy_in, copy, sync;
	uint64_t used;    /* bytes allocated now, over every backend */
	uint64_t weights; /* of which uploads */
	uint64_t buffers; /* and allocs */
};

static pthread_once_t dev_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t dev_total, dev_free0, dev_limit;
static struct exl_cuda_fake_counts counts;

static uint64_t env_mib(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);

	return v && *v ? (uint64_t)(strtod(v, NULL) * MIB) : dflt;
}

static void dev_init(void)
{
	dev_total = env_mib("EXLD_FAKE_VRAM_TOTAL_MIB", 1024 * (uint64_t)MIB);
	dev_free0 = env_mib("EXLD_FAKE_VRAM_FREE_MIB", dev_total);
	dev_limit = env_mib("EXLD_FAKE_VRAM_ALLOC_MIB", dev_free0);
}

const struct exl_cuda_fake_counts *exl_cuda_fake_counts(void);

const struct exl_cuda_fake_counts *exl_cuda_fake_counts(void)
{
	return &counts;
}

struct fake_backend {
	struct exl_backend base;
	char err[512];
	bool failed;
};

static struct fake_backend *fake_of(struct exl_backend *be)
{
	return (struct fake_backend *)be;
}

static void note(struct fake_backend *fb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct fake_backend *fb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(fb->err, sizeof(fb->err), fmt, ap);
	va_end(ap);
}

/* Every block carries its size and kind in front, so free knows what to
 * give back. */
#define HDR 64

static uint64_t *kind_total(bool weight)
{
	return weight ? &counts.weights : &counts.buffers;
}

static void *take(struct fake_backend *fb, size_t bytes, bool weight)
{
	const char *what = weight ? "upload" : "alloc";
	uint64_t fr, can;
	char *p;

	pthread_once(&dev_once, dev_init);
	pthread_mutex_lock(&dev_lock);
	fr = dev_free0 > counts.used ? dev_free0 - counts.used : 0;
	can = dev_limit > counts.used ? dev_limit - counts.used : 0;
	if (bytes > can) {
		pthread_mutex_unlock(&dev_lock);
		/* the real backend's words (backend_cuda.cu, device_alloc) */
		note(fb, "%s: %zu bytes (%.1f MiB) do not fit on CUDA device 0: %.1f MiB free of "
		     "%.1f MiB", what, bytes, bytes / MIB, fr / MIB, dev_total / MIB);
		return NULL;
	}
	counts.used += bytes;
	*kind_total(weight) += bytes;
	pthread_mutex_unlock(&dev_lock);
	p = calloc(1, HDR + (bytes ? bytes : 1));
	if (!p) {
		pthread_mutex_lock(&dev_lock);
		counts.used -= bytes;
		*kind_total(weight) -= bytes;
		pthread_mutex_unlock(&dev_lock);
		note(fb, "%s: out of host memory", what);
		return NULL;
	}
	memcpy(p, &bytes, sizeof(bytes));
	memcpy(p + sizeof(bytes), &weight, sizeof(weight));
	return p + HDR;
}

static void give_back(const void *q)
{
	char *p = (char *)q - HDR;
	size_t bytes;
	bool weight;

	memcpy(&bytes, p, sizeof(bytes));
	memcpy(&weight, p + sizeof(bytes), sizeof(weight));
	pthread_mutex_lock(&dev_lock);
	counts.used -= bytes;
	*kind_total(weight) -= bytes;
	pthread_mutex_unlock(&dev_lock);
	free(p);
}

static void op_destroy(struct exl_backend *be)
{
	free(be);
}

static void *op_alloc(struct exl_backend *be, size_t bytes)
{
	counts.alloc++;
	return take(fake_of(be), bytes, false);
}

static void op_free(struct exl_backend *be, void *p)
{
	(void)be;
	if (p)
		give_back(p);
}

static const void *op_upload(struct exl_backend *be, const void *src, size_t bytes)
{
	void *p;

	counts.upload++;
	p = take(fake_of(be), bytes, true);
	if (p && bytes)
		memcpy(p, src, bytes);
	return p;
}

static void op_unload(struct exl_backend *be, const void *p)
{
	op_free(be, (void *)p);
}

static int finish(struct fake_backend *fb)
{
	if (fb->failed) {
		fb->failed = false;
		return -1;
	}
	fb->err[0] = '\0';
	return 0;
}

static int op_download(struct exl_backend *be, void *dst, const void *src, size_t bytes)
{
	struct fake_backend *fb = fake_of(be);

	counts.download++;
	if (!fb->failed && bytes)
		memcpy(dst, src, bytes);
	return finish(fb);
}

static int op_copy_in(struct exl_backend *be, void *dst, const void *src, size_t bytes)
{
	counts.copy_in++;
	if (fake_of(be)->failed)
		return -1;
	if (bytes)
		memcpy(dst, src, bytes);
	return 0;
}

static int op_copy(struct exl_backend *be, void *dst, const void *src, size_t bytes)
{
	counts.copy++;
	if (fake_of(be)->failed)
		return -1;
	if (bytes)
		memmove(dst, src, bytes);
	return 0;
}

static int op_sync(struct exl_backend *be)
{
	counts.sync++;
	return finish(fake_of(be));
}

static void no_kernels(struct exl_backend *be)
{
	struct fake_backend *fb = fake_of(be);

	if (!fb->failed)
		note(fb, "fake CUDA device: no kernels");
	fb->failed = true;
}

static int op_set_batch(struct exl_backend *be, const struct exl_batch_desc *b)
{
	(void)b;
	note(fake_of(be), "fake CUDA device: no kernels");
	return -1;
}

static void op_matmul(struct exl_backend *be, const struct exl_weight *w, const float *x,
		      float *y, int n)
{
	(void)w, (void)x, (void)y, (void)n;
	no_kernels(be);
}

static void op_embed(struct exl_backend *be, const struct exl_weight *w, const int32_t *t,
		     float *y, int n)
{
	(void)w, (void)t, (void)y, (void)n;
	no_kernels(be);
}

static void op_rmsnorm(struct exl_backend *be, float *y, const float *x, const float *w, int n,
		       int dim, float eps)
{
	(void)y, (void)x, (void)w, (void)n, (void)dim, (void)eps;
	no_kernels(be);
}

static void op_add_bias(struct exl_backend *be, float *y, const float *b, int n, int dim)
{
	(void)y, (void)b, (void)n, (void)dim;
	no_kernels(be);
}

static void op_add(struct exl_backend *be, float *y, const float *x, size_t count)
{
	(void)y, (void)x, (void)count;
	no_kernels(be);
}

static void op_swiglu(struct exl_backend *be, float *g, const float *u, size_t count)
{
	(void)g, (void)u, (void)count;
	no_kernels(be);
}

static void op_rope(struct exl_backend *be, float *x, int n, int n_heads, int head_dim,
		    const struct exl_rope_params *p)
{
	(void)x, (void)n, (void)n_heads, (void)head_dim, (void)p;
	no_kernels(be);
}

static void op_kv_store(struct exl_backend *be, const struct exl_kv_layer *kv, const float *k,
			const float *v)
{
	(void)kv, (void)k, (void)v;
	no_kernels(be);
}

static void op_attention(struct exl_backend *be, const struct exl_kv_layer *kv, const float *q,
			 float *out, int n_heads, const struct exl_attn_params *p)
{
	(void)kv, (void)q, (void)out, (void)n_heads, (void)p;
	no_kernels(be);
}

static void op_scale(struct exl_backend *be, float *x, float s, size_t count)
{
	(void)x, (void)s, (void)count;
	no_kernels(be);
}

static void op_softcap(struct exl_backend *be, float *x, float cap, size_t count)
{
	(void)x, (void)cap, (void)count;
	no_kernels(be);
}

static void op_geglu(struct exl_backend *be, float *g, const float *u, size_t count)
{
	(void)g, (void)u, (void)count;
	no_kernels(be);
}

static void op_swiglu_oai(struct exl_backend *be, float *g, const float *u, size_t count,
			  float alpha, float limit)
{
	(void)g, (void)u, (void)count, (void)alpha, (void)limit;
	no_kernels(be);
}

static void op_add_rows_scaled(struct exl_backend *be, float *y, const float *x,
			       const int32_t *rows, const float *w, int n, int dim)
{
	(void)y, (void)x, (void)rows, (void)w, (void)n, (void)dim;
	no_kernels(be);
}

static void op_gather_rows(struct exl_backend *be, float *dst, const float *src,
			   const int32_t *rows, int n, int dim)
{
	(void)dst, (void)src, (void)rows, (void)n, (void)dim;
	no_kernels(be);
}

static void op_softmax(struct exl_backend *be, float *x, int n, int dim)
{
	(void)x, (void)n, (void)dim;
	no_kernels(be);
}

static int fake_mem_info(int device, size_t *free_bytes, size_t *total_bytes, char *err,
			 size_t errlen)
{
	*free_bytes = 0;
	*total_bytes = 0;
	if (device != 0) {
		snprintf(err, errlen, "no CUDA device %d (this machine has 1: 0..0)", device);
		return -1;
	}
	pthread_once(&dev_once, dev_init);
	pthread_mutex_lock(&dev_lock);
	*free_bytes = (size_t)(dev_free0 > counts.used ? dev_free0 - counts.used : 0);
	*total_bytes = (size_t)dev_total;
	pthread_mutex_unlock(&dev_lock);
	return 0;
}

static int op_mem_info(struct exl_backend *be, struct exl_backend_mem *m, char *err,
		       size_t errlen)
{
	size_t fr, tot;

	(void)be;
	memset(m, 0, sizeof(*m));
	snprintf(m->device, sizeof(m->device), "cuda:0");
	/* the device's totals: the tests use one backend at a time */
	pthread_mutex_lock(&dev_lock);
	m->weight_bytes = counts.weights;
	m->buffer_bytes = counts.buffers;
	pthread_mutex_unlock(&dev_lock);
	if (fake_mem_info(0, &fr, &tot, err, errlen))
		return -1;
	m->free_bytes = fr;
	m->total_bytes = tot;
	return 0;
}

static const char *fake_backend_error(const struct exl_backend *be);

static const struct exl_backend_ops fake_ops = {
	.name = "cuda",
	.destroy = op_destroy,
	.alloc = op_alloc,
	.free = op_free,
	.upload = op_upload,
	.unload = op_unload,
	.download = op_download,
	.copy_in = op_copy_in,
	.sync = op_sync,
	.set_batch = op_set_batch,
	.matmul = op_matmul,
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
	.error = fake_backend_error,
	.scale = op_scale,
	.softcap = op_softcap,
	.geglu = op_geglu,
	.swiglu_oai = op_swiglu_oai,
	.add_rows_scaled = op_add_rows_scaled,
};

static struct exl_backend *fake_create(int device, char *err, size_t errlen)
{
	struct fake_backend *fb;

	if (device != 0) {
		snprintf(err, errlen, "no CUDA device %d (this machine has 1: 0..0)", device);
		return NULL;
	}
	fb = calloc(1, sizeof(*fb));
	if (!fb) {
		snprintf(err, errlen, "CUDA backend: out of memory");
		return NULL;
	}
	fb->base.ops = &fake_ops;
	return &fb->base;
}

static int fake_device_count(char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return 1;
}

static int fake_device_name(int device, char *name, size_t namelen, int *major, int *minor,
			    char *err, size_t errlen)
{
	if (device != 0) {
		snprintf(err, errlen, "no CUDA device %d (this machine has 1: 0..0)", device);
		return -1;
	}
	snprintf(name, namelen, "Fake GPU");
	*major = 8;
	*minor = 6;
	return 0;
}

static int fake_backend_device(const struct exl_backend *be)
{
	(void)be;
	return 0;
}

static const char *fake_backend_error(const struct exl_backend *be)
{
	const struct fake_backend *fb = (const struct fake_backend *)be;

	return fb->err[0] ? fb->err : NULL;
}
#endif

static const struct exl_cuda_module fake = {
	.abi = FAKE_ABI,
	.table_size = sizeof(struct exl_cuda_module),
	.ops_size = sizeof(struct exl_backend_ops),
	.version = FAKE_VERSION,
#ifdef FAKE_VRAM
	.create = fake_create,
	.device_count = fake_device_count,
	.mem_info = fake_mem_info,
	.device_name = fake_device_name,
	.backend_device = fake_backend_device,
	.backend_error = fake_backend_error,
#endif
};

const struct exl_cuda_module *exl_cuda_module_v2(void)
{
	return &fake;
}
#endif
