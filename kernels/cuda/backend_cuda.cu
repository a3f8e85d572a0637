/* The CUDA backend: device selection, memory, the staging of host arrays,
 * the batch layout, error reporting and the op table.  The ops themselves
 * are in ops_*.cu. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_module.h"

#define MIB (1024.0 * 1024.0)

/* copy_in of more than this goes straight from the caller's memory and
 * waits for the copy, instead of growing the pinned arena. */
#define ARENA_COPY_MAX ((size_t)4 << 20)

static void set_err(struct cuda_backend *cb, const char *fmt, va_list ap)
{
	vsnprintf(cb->err, sizeof(cb->err), fmt, ap);
}

void cu_fail(struct cuda_backend *cb, const char *fmt, ...)
{
	va_list ap;

	if (cb->failed)
		return;
	cb->failed = true;
	va_start(ap, fmt);
	set_err(cb, fmt, ap);
	va_end(ap);
}

/* A failure of a call that queues nothing (upload, alloc, set_batch): the
 * caller sees it at once, so the queue is not poisoned. */
static void cu_note(struct cuda_backend *cb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void cu_note(struct cuda_backend *cb, const char *fmt, ...)
{
	va_list ap;

	if (cb->failed)
		return;
	va_start(ap, fmt);
	set_err(cb, fmt, ap);
	va_end(ap);
}

bool cu_ok(struct cuda_backend *cb, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return true;
	cudaGetLastError(); /* so the next launch check does not see it again */
	cu_fail(cb, "%s: %s", what, cudaGetErrorString(e));
	return false;
}

/* The next power-of-two multiple of cap (or of first, when cap is 0) that
 * holds need, or 0 when that would overflow. */
static size_t grow_cap(size_t cap, size_t first, size_t need)
{
	if (!cap)
		cap = first;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return 0;
		cap *= 2;
	}
	return cap;
}

static const char *blas_status_name(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
	case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
	case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
	case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
	default: return "unknown status";
	}
}

bool cu_blas_ok(struct cuda_backend *cb, cublasStatus_t s, const char *what)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return true;
	cu_fail(cb, "%s: cuBLAS %s (%d)", what, blas_status_name(s), (int)s);
	return false;
}

bool cu_enter(struct cuda_backend *cb)
{
	if (cb->failed)
		return false;
	cb->op_seq++;
	return cu_ok(cb, cudaSetDevice(cb->device), "cudaSetDevice");
}

/* ---- staging ---------------------------------------------------------- */

static void stage_free(struct cuda_stage *st)
{
	if (st->ev_live)
		cudaEventDestroy(st->ev);
	if (st->host)
		cudaFreeHost(st->host);
	if (st->dev)
		cudaFree(st->dev);
	memset(st, 0, sizeof(*st));
}

static bool stage_init(struct cuda_backend *cb, struct cuda_stage *st)
{
	memset(st, 0, sizeof(*st));
	if (!cu_ok(cb, cudaEventCreateWithFlags(&st->ev, cudaEventDisableTiming),
		   "cudaEventCreate"))
		return false;
	st->ev_live = true;
	return true;
}

/* Waits until the device has read the stage's pinned buffer, then makes it
 * (and, with dev, the device buffer) hold at least bytes. */
static bool stage_reserve(struct cuda_backend *cb, struct cuda_stage *st, size_t bytes,
			  bool dev, const char *what)
{
	size_t cap;

	if (!cu_ok(cb, cudaEventSynchronize(st->ev), what))
		return false;
	if (bytes <= st->cap && (!dev || st->dev))
		return true;
	cap = grow_cap(st->cap, 4096, bytes);
	if (!cap) {
		cu_fail(cb, "%s: %zu bytes is too large", what, bytes);
		return false;
	}
	/* Device work queued earlier may still read the old device buffer. */
	if (st->dev && !cu_ok(cb, cudaStreamSynchronize(cb->stream), what))
		return false;
	if (st->host)
		cudaFreeHost(st->host);
	if (st->dev)
		cudaFree(st->dev);
	st->host = NULL;
	st->dev = NULL;
	st->cap = 0;
	if (!cu_ok(cb, cudaMallocHost(&st->host, cap), what))
		return false;
	if (dev && !cu_ok(cb, cudaMalloc(&st->dev, cap), what))
		return false;
	st->cap = cap;
	return true;
}

void *cu_stage_put(struct cuda_backend *cb, struct cuda_stage *st, const void *src,
		   size_t bytes, const char *what)
{
	/* The copy and its event go straight to the stream, after what came
	 * before them. */
	if (!cu_flush(cb) || !stage_reserve(cb, st, bytes ? bytes : 1, true, what))
		return NULL;
	if (!bytes)
		return st->dev;
	memcpy(st->host, src, bytes);
	if (!cu_ok(cb, cudaMemcpyAsync(st->dev, st->host, bytes, cudaMemcpyHostToDevice,
				       cb->stream), what) ||
	    !cu_ok(cb, cudaEventRecord(st->ev, cb->stream), what))
		return NULL;
	return st->dev;
}

/* ---- arena ------------------------------------------------------------ */

static void arena_free(struct cuda_arena *a)
{
	if (a->host)
		cudaFreeHost(a->host);
	if (a->dev)
		cudaFree(a->dev);
	memset(a, 0, sizeof(*a));
}

/* Takes room for bytes at *off in both halves of the arena. */
static bool arena_take(struct cuda_backend *cb, size_t bytes, size_t *off, const char *what)
{
	struct cuda_arena *a = &cb->arena;
	size_t need = (bytes + 255) & ~(size_t)255;
	size_t cap;

	if (need < bytes) {
		cu_fail(cb, "%s: %zu bytes is too large", what, bytes);
		return false;
	}
	if (need > a->cap - a->off) {
		/* Out of room: wait until the device has read everything put so
		 * far, then start over (and grow when one put is larger). */
		if (a->off && (!cu_flush(cb) ||
				   !cu_ok(cb, cudaStreamSynchronize(cb->stream), what)))
			return false;
		a->off = 0;
		if (need > a->cap) {
			cap = grow_cap(a->cap, (size_t)1 << 20, need);
			if (!cap) {
				cu_fail(cb, "%s: %zu bytes is too large", what, bytes);
				return false;
			}
			arena_free(a);
			if (!cu_ok(cb, cudaMallocHost(&a->host, cap), what) ||
			    !cu_ok(cb, cudaMalloc(&a->dev, cap), what)) {
				arena_free(a);
				return false;
			}
			a->cap = cap;
		}
	}
	*off = a->off;
	a->off += need;
	return true;
}

void *cu_arena_put(struct cuda_backend *cb, const void *src, size_t bytes, const char *what)
{
	size_t off;
	char *h, *d;

	if (!arena_take(cb, bytes ? bytes : 1, &off, what))
		return NULL;
	h = (char *)cb->arena.host + off;
	d = (char *)cb->arena.dev + off;
	if (!bytes)
		return d;
	memcpy(h, src, bytes);
	if (!cu_copy(cb, d, h, bytes, cudaMemcpyHostToDevice, what))
		return NULL;
	return d;
}

void *cu_arena_host(struct cuda_backend *cb, size_t bytes, const char *what)
{
	size_t off;

	if (!arena_take(cb, bytes ? bytes : 1, &off, what))
		return NULL;
	return (char *)cb->arena.host + off;
}

bool cu_scratch(struct cuda_backend *cb, void **buf, size_t *cap, size_t bytes,
		const char *what)
{
	size_t want;

	if (bytes <= *cap && *buf)
		return true;
	want = grow_cap(*cap, (size_t)1 << 20, bytes);
	if (!want) {
		cu_fail(cb, "%s: %zu bytes of scratch is too large", what, bytes);
		return false;
	}
	if (*buf) {
		/* Queued kernels may still use the old buffer. */
		if (!cu_flush(cb) || !cu_ok(cb, cudaStreamSynchronize(cb->stream), what))
			return false;
		cudaFree(*buf);
		*buf = NULL;
		*cap = 0;
	}
	if (cudaMalloc(buf, want) != cudaSuccess) {
		size_t fr = 0, tot = 0;

		cudaGetLastError();
		*buf = NULL;
		cudaMemGetInfo(&fr, &tot);
		cu_fail(cb, "%s: cannot allocate %.1f MiB of scratch on CUDA device %d "
			"(%.1f MiB free of %.1f MiB)", what, want / MIB, cb->device,
			fr / MIB, tot / MIB);
		return false;
	}
	*cap = want;
	return true;
}

/* ---- queries ---------------------------------------------------------- */

/* Why the runtime found no device, naming what is missing.  Without any
 * NVIDIA driver cudart says "CUDA driver version is insufficient for CUDA
 * runtime version", which sends people looking for a driver upgrade. */
static void no_device_reason(cudaError_t e, char *err, size_t errlen)
{
	static const char lib[] = "libcuda.so.1";
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	const char *why;

	if (!h) {
		why = dlerror();
		if (!why)
			why = "unknown dynamic loader error";
		/* dlerror starts with the file name; it is said already */
		if (!strncmp(why, lib, sizeof(lib) - 1) && !strncmp(why + sizeof(lib) - 1, ": ", 2))
			why += sizeof(lib) + 1;
		snprintf(err, errlen, "no CUDA device: no NVIDIA driver found (%s not loadable: %s)",
			 lib, why);
		return;
	}
	dlclose(h);
	if (access("/dev/nvidiactl", F_OK) != 0) {
		snprintf(err, errlen, "no CUDA device: the NVIDIA driver library is installed but "
			 "/dev/nvidiactl does not exist (kernel module not loaded, or the device "
			 "is not passed to this container or service): %s", cudaGetErrorString(e));
		return;
	}
	snprintf(err, errlen, "no CUDA device: %s", cudaGetErrorString(e));
}

extern "C" int cudamod_device_count(char *err, size_t errlen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		cudaGetLastError();
		no_device_reason(e, err, errlen);
		return -1;
	}
	if (n <= 0) {
		snprintf(err, errlen, "no CUDA device: %s",
			 cudaGetErrorString(cudaErrorNoDevice));
		return -1;
	}
	return n;
}

static int check_device(int device, char *err, size_t errlen)
{
	int n = cudamod_device_count(err, errlen);

	if (n < 0)
		return -1;
	if (device < 0 || device >= n) {
		snprintf(err, errlen, "no CUDA device %d (this machine has %d: 0..%d)", device, n,
			 n - 1);
		return -1;
	}
	return 0;
}

extern "C" int cudamod_mem_info(int device, size_t *free_bytes, size_t *total_bytes,
				 char *err, size_t errlen)
{
	int old = 0;
	cudaError_t e;

	*free_bytes = 0;
	*total_bytes = 0;
	if (check_device(device, err, errlen))
		return -1;
	if (cudaGetDevice(&old) != cudaSuccess)
		old = device;
	e = cudaSetDevice(device);
	if (e == cudaSuccess)
		e = cudaMemGetInfo(free_bytes, total_bytes);
	cudaSetDevice(old);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(err, errlen, "CUDA device %d: cannot read its memory: %s", device,
			 cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

extern "C" int cudamod_device_name(int device, char *name, size_t namelen, int *major,
				    int *minor, char *err, size_t errlen)
{
	cudaDeviceProp prop;
	cudaError_t e;

	if (namelen)
		name[0] = '\0';
	*major = 0;
	*minor = 0;
	if (check_device(device, err, errlen))
		return -1;
	e = cudaGetDeviceProperties(&prop, device);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(e));
		return -1;
	}
	snprintf(name, namelen, "%s", prop.name);
	*major = prop.major;
	*minor = prop.minor;
	return 0;
}

extern "C" int cudamod_backend_device(const struct exl_backend *be)
{
	return ((const struct cuda_backend *)be)->device;
}

extern "C" const char *cudamod_backend_error(const struct exl_backend *be)
{
	const struct cuda_backend *cb = (const struct cuda_backend *)be;

	return cb->err[0] ? cb->err : NULL;
}

/* ---- memory ----------------------------------------------------------- */

/* cudaMalloc of bytes, or NULL with a note giving what was needed and what
 * the device has. */
static void *device_alloc(struct cuda_backend *cb, size_t bytes, const char *what)
{
	size_t fr = 0, tot = 0;
	void *p = NULL;
	cudaError_t e;

	if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
		cudaGetLastError();
		fr = tot = 0;
	}
	if (tot && bytes > fr) {
		cu_note(cb, "%s: %zu bytes (%.1f MiB) do not fit on CUDA device %d: "
			"%.1f MiB free of %.1f MiB", what, bytes, bytes / MIB, cb->device,
			fr / MIB, tot / MIB);
		return NULL;
	}
	e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		cudaGetLastError();
		cu_note(cb, "%s: cannot allocate %zu bytes (%.1f MiB) on CUDA device %d "
			"(%.1f MiB free of %.1f MiB): %s", what, bytes, bytes / MIB, cb->device,
			fr / MIB, tot / MIB, cudaGetErrorString(e));
		return NULL;
	}
	return p;
}

/* For the calls that report their failure at once (alloc, upload): a CUDA
 * error becomes a note, not a poisoned queue. */
static bool note_ok(struct cuda_backend *cb, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return true;
	cudaGetLastError();
	cu_note(cb, "%s: %s", what, cudaGetErrorString(e));
	return false;
}

static void device_free(struct cuda_backend *cb, void *p)
{
	/* Work queued earlier may still use p. */
	cudaSetDevice(cb->device);
	cu_flush(cb);
	cudaStreamSynchronize(cb->stream);
	cudaFree(p);
	cudaGetLastError();
}

static void *op_alloc(struct exl_backend *be, size_t bytes)
{
	struct cuda_backend *cb = cuda_of(be);
	void *p;

	if (!cu_enter(cb))
		return NULL;
	if (!cu_flush(cb))
		return NULL;
	p = device_alloc(cb, bytes, "alloc");
	if (!p)
		return NULL;
	if (!note_ok(cb, cudaMemsetAsync(p, 0, bytes ? bytes : 1, cb->stream), "alloc: memset")) {
		cudaFree(p);
		return NULL;
	}
	if (exl_mem_track_add(&cb->buffers, p, bytes)) {
		device_free(cb, p);
		cu_note(cb, "alloc: out of host memory");
		return NULL;
	}
	return p;
}

static void op_free(struct exl_backend *be, void *p)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!p)
		return;
	exl_mem_track_remove(&cb->buffers, p);
	device_free(cb, p);
}

static const void *op_upload(struct exl_backend *be, const void *src, size_t bytes)
{
	struct cuda_backend *cb = cuda_of(be);
	void *p;

	if (!cu_enter(cb))
		return NULL;
	if (!cu_flush(cb))
		return NULL;
	p = device_alloc(cb, bytes, "upload");
	if (!p)
		return NULL;
	/* Once, at load: queue the copy on the stream (so every later op sees
	 * it) and wait, so src may go away afterwards. */
	if (bytes && (!note_ok(cb, cudaMemcpyAsync(p, src, bytes, cudaMemcpyHostToDevice,
						   cb->stream), "upload") ||
		      !note_ok(cb, cudaStreamSynchronize(cb->stream), "upload"))) {
		cudaFree(p);
		return NULL;
	}
	if (exl_mem_track_add(&cb->weights, p, bytes)) {
		cudaFree(p);
		cu_note(cb, "upload: out of host memory");
		return NULL;
	}
	return p;
}

static void op_unload(struct exl_backend *be, const void *p)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!p)
		return;
	exl_mem_track_remove(&cb->weights, p);
	device_free(cb, (void *)p);
}

/* May run on any thread (a status request): reads the counts atomically and
 * asks the runtime, which is thread-safe, about the device. */
static int op_mem_info(struct exl_backend *be, struct exl_backend_mem *m, char *err,
		       size_t errlen)
{
	struct cuda_backend *cb = cuda_of(be);
	size_t fr = 0, tot = 0;

	memset(m, 0, sizeof(*m));
	snprintf(m->device, sizeof(m->device), "cuda:%d", cb->device);
	m->weight_bytes = exl_mem_track_total(&cb->weights);
	m->buffer_bytes = exl_mem_track_total(&cb->buffers);
	if (cudamod_mem_info(cb->device, &fr, &tot, err, errlen))
		return -1;
	m->free_bytes = fr;
	m->total_bytes = tot;
	return 0;
}

/* After waiting for the queue: reports a failure once, and lets the next
 * pass start clean (a CUDA error that broke the context fails it again).
 * The message stays readable until a later download/sync succeeds. */
static int finish(struct cuda_backend *cb, cudaError_t e, const char *what)
{
	cb->arena.off = 0;
	cu_rec_idle(cb);
	if (e != cudaSuccess) {
		cudaGetLastError();
		cu_fail(cb, "%s: %s", what, cudaGetErrorString(e));
	}
	if (cb->failed) {
		cb->failed = false;
		return -1;
	}
	cb->err[0] = '\0'; /* a clean pass: nothing to report any more */
	return 0;
}

static int op_download(struct exl_backend *be, void *dst_host, const void *src, size_t bytes)
{
	struct cuda_backend *cb = cuda_of(be);
	cudaError_t e = cudaSetDevice(cb->device);

	/* After a failure the copy is skipped (and what was recorded dropped)
	 * but the stream still drained, so the next pass starts from an idle
	 * stream. */
	cu_flush(cb);
	if (e == cudaSuccess && !cb->failed && bytes)
		e = cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, cb->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(cb->stream);
	return finish(cb, e, "download");
}

static int op_sync(struct exl_backend *be)
{
	struct cuda_backend *cb = cuda_of(be);
	cudaError_t e = cudaSetDevice(cb->device);

	cu_flush(cb);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(cb->stream);
	return finish(cb, e, "sync");
}

/* Device to device on the stream: ordered with the ops around it, and the
 * bytes never leave the GPU. */
static int op_copy(struct exl_backend *be, void *dst, const void *src, size_t bytes)
{
	struct cuda_backend *cb = cuda_of(be);

	if (!cu_enter(cb))
		return -1;
	if (!bytes)
		return 0;
	if (!cu_copy(cb, dst, src, bytes, cudaMemcpyDeviceToDevice, "copy"))
		return -1;
	return 0;
}

static int op_copy_in(struct exl_backend *be, void *dst, const void *src_host, size_t bytes)
{
	struct cuda_backend *cb = cuda_of(be);
	void *h;

	if (!cu_enter(cb))
		return -1;
	if (!bytes)
		return 0;
	if (bytes > ARENA_COPY_MAX) {
		if (!cu_flush(cb) ||
		    !cu_ok(cb, cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice,
					       cb->stream), "copy_in") ||
		    !cu_ok(cb, cudaStreamSynchronize(cb->stream), "copy_in"))
			return -1;
		return 0;
	}
	h = cu_arena_host(cb, bytes, "copy_in");
	if (!h)
		return -1;
	memcpy(h, src_host, bytes);
	if (!cu_copy(cb, dst, h, bytes, cudaMemcpyHostToDevice, "copy_in"))
		return -1;
	return 0;
}

/* ---- batch layout ----------------------------------------------------- */

static bool grow_i32(int32_t **a, size_t *cap, size_t n)
{
	int32_t *p;

	if (n <= *cap)
		return true;
	p = (int32_t *)realloc(*a, n * sizeof(int32_t));
	if (!p)
		return false;
	*a = p;
	*cap = n;
	return true;
}

/* Copies one page table of n_seqs rows of max_pages (0 and NULL: none) to
 * its host copy and its stage. */
static int table_set(struct cuda_backend *cb, struct cuda_page_table *pt, struct cuda_stage *st,
		     const int32_t *src, int n_seqs, int max_pages, const char *name)
{
	size_t table;

	pt->max_pages = 0;
	pt->dev = NULL;
	pt->checked_page_size = 0;
	pt->checked_n_pages = 0;
	pt->checked_window = 0;
	if (!src && !max_pages)
		return 0;
	if (!src || max_pages <= 0) {
		cu_note(cb, "set_batch: %s of %d pages per sequence%s", name, max_pages,
			src ? "" : " without entries");
		return -1;
	}
	if ((size_t)n_seqs > SIZE_MAX / sizeof(int32_t) / (size_t)max_pages) {
		cu_note(cb, "set_batch: %s of %d x %d entries is too large", name, n_seqs,
			max_pages);
		return -1;
	}
	table = (size_t)n_seqs * (size_t)max_pages;
	if (!grow_i32(&pt->host, &pt->cap, table)) {
		cu_note(cb, "set_batch: out of host memory");
		return -1;
	}
	memcpy(pt->host, src, table * sizeof(int32_t));
	pt->dev = (const int32_t *)cu_stage_put(cb, st, src, table * sizeof(int32_t), "set_batch");
	if (!pt->dev)
		return -1;
	pt->max_pages = max_pages;
	return 0;
}

static int set_batch(struct cuda_backend *cb, const struct exl_batch_desc *b)
{
	struct cuda_batch *bt = &cb->batch;
	size_t n;
	int max_pos = 0;

	if (!cu_enter(cb))
		return -1;
	bt->n_tokens = 0;
	cb->rope[0].valid = false;
	cb->rope[1].valid = false;
	if (!b || b->n_tokens <= 0 || b->n_seqs <= 0 || b->max_pages <= 0 || !b->pos ||
	    !b->seq || !b->page_table) {
		cu_note(cb, "set_batch: empty or incomplete batch layout");
		return -1;
	}
	n = (size_t)b->n_tokens;
	for (size_t t = 0; t < n; t++) {
		if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs || b->pos[t] < 0 ||
		    b->pos[t] == INT32_MAX) {
			cu_note(cb, "set_batch: token %zu has sequence %d (of %d) at position %d",
				t, b->seq[t], b->n_seqs, b->pos[t]);
			return -1;
		}
		if (b->pos[t] > max_pos)
			max_pos = b->pos[t];
	}
	if (!grow_i32(&bt->pos, &bt->cap_pos, n) ||
	    !grow_i32(&bt->seq, &bt->cap_seq, n)) {
		cu_note(cb, "set_batch: out of host memory");
		return -1;
	}
	memcpy(bt->pos, b->pos, n * sizeof(int32_t));
	memcpy(bt->seq, b->seq, n * sizeof(int32_t));
	if (!grow_i32(&bt->seq_end, &bt->cap_end, (size_t)b->n_seqs)) {
		cu_note(cb, "set_batch: out of host memory");
		return -1;
	}
	memset(bt->seq_end, 0, (size_t)b->n_seqs * sizeof(int32_t));
	for (size_t t = 0; t < n; t++)
		if (b->pos[t] + 1 > bt->seq_end[b->seq[t]])
			bt->seq_end[b->seq[t]] = b->pos[t] + 1;
	if (table_set(cb, &bt->tables[0], &cb->st_table, b->page_table, b->n_seqs, b->max_pages,
		      "page table") ||
	    table_set(cb, &bt->tables[1], &cb->st_ltable, b->local_page_table, b->n_seqs,
		      b->local_max_pages, "local page table"))
		return -1;
	bt->d_pos = (const int32_t *)cu_stage_put(cb, &cb->st_pos, b->pos, n * sizeof(int32_t),
						  "set_batch");
	bt->d_seq = (const int32_t *)cu_stage_put(cb, &cb->st_seq, b->seq, n * sizeof(int32_t),
						  "set_batch");
	bt->d_seq_end = (const int32_t *)cu_stage_put(cb, &cb->st_end, bt->seq_end,
						      (size_t)b->n_seqs * sizeof(int32_t),
						      "set_batch");
	if (!bt->d_pos || !bt->d_seq || !bt->d_seq_end)
		return -1;
	bt->n_tokens = b->n_tokens;
	bt->n_seqs = b->n_seqs;
	bt->max_pos = max_pos;
	return 0;
}

/* The start of a pass.  Its failure is reported at once, so it leaves the
 * queue usable (the message stays for cudamod_backend_error). */
static int op_set_batch(struct exl_backend *be, const struct exl_batch_desc *b)
{
	struct cuda_backend *cb = cuda_of(be);
	int rc = set_batch(cb, b);

	if (rc)
		cb->failed = false;
	return rc;
}

bool cu_check_kv(struct cuda_backend *cb, const struct exl_kv_layer *kv, int window,
		 const char *op)
{
	struct cuda_batch *bt = &cb->batch;
	struct cuda_page_table *pt;

	if (bt->n_tokens <= 0) {
		cu_fail(cb, "%s: no batch layout (set_batch first)", op);
		return false;
	}
	if (!kv || !kv->k || !kv->v || kv->page_size <= 0 || kv->n_kv_heads <= 0 ||
	    kv->head_dim <= 0 || kv->n_pages <= 0 || kv->table < 0 || kv->table > 1) {
		cu_fail(cb, "%s: malformed KV layer", op);
		return false;
	}
	if (window < 0) {
		cu_fail(cb, "%s: window %d", op, window);
		return false;
	}
	pt = &bt->tables[kv->table];
	if (!pt->max_pages) {
		cu_fail(cb, "%s: KV layer reads the local page table, the batch has none", op);
		return false;
	}
	/* A check covers every window that reaches back no further (window 0
	 * reaches back furthest), for the layers of one table. */
	if (pt->checked_page_size == kv->page_size && pt->checked_n_pages == kv->n_pages &&
	    (pt->checked_window == 0 || (window > 0 && window <= pt->checked_window)))
		return true;
	/* Every token reads the pages of its window's positions, those of
	 * pos - window + 1 .. pos (window 0: 0 .. pos), of its sequence. */
	for (int t = 0; t < bt->n_tokens; t++) {
		int last = bt->pos[t] / kv->page_size;
		const int32_t *row;

		if (last >= pt->max_pages) {
			cu_fail(cb, "%s: token %d at position %d needs page %d of its sequence, "
				"the %spage table has %d", op, t, bt->pos[t], last,
				kv->table ? "local " : "", pt->max_pages);
			return false;
		}
		row = pt->host + (size_t)bt->seq[t] * (size_t)pt->max_pages;
		/* A sequence's tokens are in order, so checking from the previous
		 * token's last page on covers each page once. */
		int first = window > 0 && bt->pos[t] >= window ?
			(bt->pos[t] - window + 1) / kv->page_size : 0;
		if (t > 0 && bt->seq[t - 1] == bt->seq[t] && bt->pos[t - 1] <= bt->pos[t] &&
		    bt->pos[t - 1] / kv->page_size > first)
			first = bt->pos[t - 1] / kv->page_size;
		for (int j = first; j <= last; j++) {
			if (row[j] < 0 || row[j] >= kv->n_pages) {
				cu_fail(cb, "%s: sequence %d maps its page %d to %d, outside the "
					"%spool of %d pages", op, bt->seq[t], j, row[j],
					kv->table ? "local " : "", kv->n_pages);
				return false;
			}
		}
	}
	pt->checked_page_size = kv->page_size;
	pt->checked_n_pages = kv->n_pages;
	pt->checked_window = window;
	return true;
}

/* ---- lifetime --------------------------------------------------------- */

static void op_destroy(struct exl_backend *be)
{
	struct cuda_backend *cb = cuda_of(be);
	struct cuda_stage *stages[] = { &cb->st_pos, &cb->st_seq, &cb->st_table,
					&cb->st_ltable, &cb->st_end };

	if (!cb)
		return;
	cudaSetDevice(cb->device);
	if (cb->stream) {
		cu_flush(cb);
		cudaStreamSynchronize(cb->stream);
	}
	cu_rec_free(cb);
	for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++)
		stage_free(stages[i]);
	arena_free(&cb->arena);
	if (cb->w16)
		cudaFree(cb->w16);
	if (cb->x16)
		cudaFree(cb->x16);
	if (cb->xq)
		cudaFree(cb->xq);
	if (cb->att_part)
		cudaFree(cb->att_part);
	for (int i = 0; i < 2; i++)
		if (cb->rope[i].tab)
			cudaFree(cb->rope[i].tab);
	if (cb->cublas)
		cublasDestroy(cb->cublas);
	if (cb->stream)
		cudaStreamDestroy(cb->stream);
	cudaGetLastError();
	free(cb->batch.pos);
	free(cb->batch.seq);
	free(cb->batch.seq_end);
	free(cb->batch.tables[0].host);
	free(cb->batch.tables[1].host);
	exl_mem_track_free(&cb->weights);
	exl_mem_track_free(&cb->buffers);
	free(cb);
}

static const struct exl_backend_ops cuda_ops = {
	.name = "cuda",
	.cheap_rows = 16, /* a decode GEMM reads the weights once up to here */
	.destroy = op_destroy,
	.alloc = op_alloc,
	.free = op_free,
	.upload = op_upload,
	.unload = op_unload,
	.repack = NULL, /* the CUDA kernels read GGUF rows */
	.download = op_download,
	.copy_in = op_copy_in,
	.sync = op_sync,
	.set_batch = op_set_batch,
	.matmul = cu_op_matmul,
	.matmul_n = NULL, /* each weight its own cuBLAS / kernel launch */
	.embed = cu_op_embed,
	.rmsnorm = cu_op_rmsnorm,
	.add_bias = cu_op_add_bias,
	.add = cu_op_add,
	.swiglu = cu_op_swiglu,
	.rope = cu_op_rope,
	.kv_store = cu_op_kv_store,
	.attention = cu_op_attention,
	.gather_rows = cu_op_gather_rows,
	.softmax = cu_op_softmax,
	.mem_info = op_mem_info,
	.copy = op_copy,
	.error = cudamod_backend_error,
	.scale = cu_op_scale,
	.softcap = cu_op_softcap,
	.geglu = cu_op_geglu,
	.add_rows_scaled = cu_op_add_rows_scaled,
	.swiglu_oai = cu_op_swiglu_oai,
	.layernorm = cu_op_layernorm,
	.gelu = cu_op_gelu,
};

extern "C" struct exl_backend *cudamod_backend_create(int device, char *err, size_t errlen)
{
	struct cuda_backend *cb;
	struct cuda_stage *stages[5];
	cublasStatus_t bs;

	if (check_device(device, err, errlen))
		return NULL;
	cb = (struct cuda_backend *)calloc(1, sizeof(*cb));
	if (!cb) {
		snprintf(err, errlen, "CUDA backend: out of memory");
		return NULL;
	}
	cb->base.ops = &cuda_ops;
	cb->device = device;
	/* A benchmark's knob (docs/cuda.md): threads a row of the decode
	 * matmul, 32, 64 or 128 instead of the choice by width. */
	const char *tpr = getenv("EXLD_CUDA_MMVQ_TPR");
	if (tpr && (!strcmp(tpr, "32") || !strcmp(tpr, "64") || !strcmp(tpr, "128")))
		cb->mmvq_tpr_log2 = tpr[0] == '3' ? 5 : tpr[0] == '6' ? 6 : 7;
	/* Graphs are on unless EXLD_CUDA_GRAPHS=0 (a benchmark's comparison). */
	const char *graphs = getenv("EXLD_CUDA_GRAPHS");
	cb->rec.on = !graphs || strcmp(graphs, "0") != 0;
	stages[0] = &cb->st_pos;
	stages[1] = &cb->st_seq;
	stages[2] = &cb->st_table;
	stages[3] = &cb->st_ltable;
	stages[4] = &cb->st_end;
	if (!cu_ok(cb, cudaSetDevice(device), "cudaSetDevice") ||
	    !cu_ok(cb, cudaDeviceGetAttribute(&cb->sm_count, cudaDevAttrMultiProcessorCount,
					      device), "cudaDeviceGetAttribute") ||
	    !cu_ok(cb, cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking),
		   "cudaStreamCreate"))
		goto fail;
	bs = cublasCreate(&cb->cublas);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		cb->cublas = NULL;
		cu_blas_ok(cb, bs, "cublasCreate");
		goto fail;
	}
	if (!cu_blas_ok(cb, cublasSetStream(cb->cublas, cb->stream), "cublasSetStream"))
		goto fail;
	for (int i = 0; i < 5; i++)
		if (!stage_init(cb, stages[i]))
			goto fail;
	return &cb->base;
fail:
	snprintf(err, errlen, "CUDA device %d: %s", device, cb->err);
	op_destroy(&cb->base);
	return NULL;
}
